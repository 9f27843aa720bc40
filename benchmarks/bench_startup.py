"""Start-up and cold-start cost of the command line (issue 21, items 15 and 16).

1. ``npulab --version``, ``npulab --help`` and every ``npulab CMD --help``: whole-process wall
   time (best of N), against the goal of 0.3 s, side by side with SCALE-Sim 3.0.0's
   ``python -m scalesim.scale --help`` in its own venv (``benchmarks/.venv-scalesim``, made by
   ``scalesim_peer.ensure_venv``) and a bare ``python -c pass``.
2. Cold start per command: each command once with an empty kernel cache (``NPULAB_CACHE``
   pointed at a new folder), then again warm; prints the seconds Numba spent compiling (the
   ``numba:compile`` events of ``hw._jitcache.CompileWatch``), the kernels compiled and both
   wall times.

Run by hand: ``python benchmarks/bench_startup.py [--repeat 5] [--skip-cold] [--no-peer]``.
Results go to ``benchmarks/results/startup.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchutil import machine, table, write_results  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GOAL_S = 0.3

# One small, representative invocation per command that runs kernels (the others run none).
COLD = {
    "run": ["run", "--quiet"],
    "map": ["map", "--top", "1"],
    "collective": ["collective", "--system", "ring:8", "--op", "allreduce", "--bytes", "1M"],
    "system": ["system", "--system", "hgx-a100-4", "--model", "gpt2-small", "--strategy", "dp=4",
               "--global-batch", "8"],
    "soc": ["soc", "--accelerators", "2", "--model", "mobilenetv2", "--image-size", "64"],
    "scalesim": None,   # filled in main(): needs an output folder
    "nvdla spreadsheet": ["nvdla", "spreadsheet", "--model", "alexnet"],
    "run nv_full": ["run", "--config", "nv_full", "--model", "resnet18", "--quiet"],
}

_WATCHED = textwrap.dedent("""
    import contextlib, io, json, sys, time
    from hw._jitcache import CompileWatch
    from npulab import cli
    t0 = time.perf_counter()
    with CompileWatch() as watch, contextlib.redirect_stdout(io.StringIO()):
        status = cli.main(sys.argv[1:])
    print(json.dumps({"status": status, "wall_s": time.perf_counter() - t0,
                      "compile_s": watch.seconds, "kernels": watch.kernels}), file=sys.stderr)
""")


def _best_wall(cmd: list[str], repeat: int, env: dict | None = None) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                       cwd=REPO, check=False)
        best = min(best, time.perf_counter() - t0)
    return best


def _npulab() -> list[str]:
    """The installed console script when it is on PATH (what a user types), else -m."""
    exe = Path(sys.executable).parent / "npulab"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "npulab"]


def startup(repeat: int, peer: bool) -> list[dict]:
    sys.path.insert(0, str(REPO))
    from npulab.cli import COMMANDS
    rows = []
    base = _best_wall([sys.executable, "-c", "pass"], repeat)
    rows.append({"what": "python -c pass", "seconds": base})
    for argv in [["--version"], ["--help"]] + [[c, "--help"] for c in COMMANDS]:
        rows.append({"what": "npulab " + " ".join(argv),
                     "seconds": _best_wall(_npulab() + argv, repeat)})
    if peer:
        try:
            from scalesim_peer import ensure_venv
            python = ensure_venv()
            rows.append({"what": "SCALE-Sim 3.0.0: python -m scalesim.scale --help",
                         "seconds": _best_wall([str(python), "-m", "scalesim.scale", "--help"],
                                               repeat)})
        except Exception as exc:  # noqa: BLE001  (the peer is optional; say why it is missing)
            print(f"bench_startup: SCALE-Sim peer unavailable: {exc}", file=sys.stderr)
    return rows


def cold(commands: dict[str, list[str]]) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
        env["NPULAB_CACHE"] = cache
        for name, argv in commands.items():
            runs = []
            for _ in range(2):       # cold (empty cache for this command's kernels), then warm
                proc = subprocess.run([sys.executable, "-c", _WATCHED, *argv], cwd=REPO, env=env,
                                      text=True, capture_output=True)
                lines = proc.stderr.strip().splitlines()
                try:
                    runs.append(json.loads(lines[-1]))
                except (IndexError, json.JSONDecodeError):
                    runs.append({"status": proc.returncode, "wall_s": float("nan"),
                                 "compile_s": float("nan"), "kernels": 0,
                                 "error": lines[-1] if lines else ""})
            rows.append({"command": name, "argv": argv, "cold": runs[0], "warm": runs[1]})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="best of N for start-up (default 5)")
    ap.add_argument("--skip-cold", action="store_true", help="only the start-up table")
    ap.add_argument("--no-peer", action="store_true", help="without SCALE-Sim's start-up")
    args = ap.parse_args()

    rows = startup(args.repeat, not args.no_peer)
    scalesim = next((r["seconds"] for r in rows if r["what"].startswith("SCALE-Sim")), None)
    print(f"start-up, whole process, best of {args.repeat} (goal < {GOAL_S} s for npulab)")
    print(table(["command", "seconds", "goal met", "vs SCALE-Sim --help"],
                [[r["what"], f"{r['seconds']:.3f}",
                  ("yes" if r["seconds"] < GOAL_S else "NO") if r["what"].startswith("npulab")
                  else "", f"{r['seconds'] / scalesim:.2f}x" if scalesim else ""]
                 for r in rows]))
    result = {"machine": machine(), "startup": rows}
    if not args.skip_cold:
        with tempfile.TemporaryDirectory() as out:
            commands = dict(COLD)
            commands["scalesim"] = ["scalesim", "-c", "sim_configs/scalesim_32x32_os.cfg", "-t",
                                    "sim_configs/scalesim_resnet18.csv", "-o", out]
            cold_rows = cold(commands)
        print("\ncold start per command (empty kernel cache), then warm")
        print(table(["command", "compile s", "kernels", "cold wall s", "warm wall s", "status"],
                    [[r["command"], f"{r['cold']['compile_s']:.1f}", r["cold"]["kernels"],
                      f"{r['cold']['wall_s']:.1f}", f"{r['warm']['wall_s']:.2f}",
                      r["cold"]["status"]] for r in cold_rows]))
        result["cold_start"] = cold_rows
    path = write_results("startup", result)
    print(f"\nwrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
