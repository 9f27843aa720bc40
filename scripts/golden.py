"""Golden outputs: what users see, recorded before code moves and checked after (issue 22).

Every case is one ``npulab`` command line, run in this process through :func:`npulab.cli.main`
(or one Python API call); its user-visible outputs (``summary.json``, ``layers.csv``,
``report.txt``, ``trace.json`` of ``npulab run -o``; the report CSVs of ``npulab scalesim``;
the JSON of ``npulab system``/``collective``/``soc``; a sweep's ``points.csv``) are hashed
(SHA-256 of the bytes) and compared with the hashes stored in ``tests/golden/<suite>.json``.

Two suites:

* ``quick`` -- every zoo model on every shipped preset (systolic: native, native with
  ``--map best-energy``, compute, scalesim; NVDLA builds) at small inputs, plus the documented
  SCALE-Sim, system, collective, SoC and sweep examples. ``tests/test_golden.py`` runs it.
* ``full`` -- the same runs at the models' default inputs, by hand and not stored: record it
  at the base commit (``record --suite full`` in a ``git worktree``), copy its
  ``tests/golden/full.json`` over, then ``check --suite full`` after the change.

``report.html`` is rendered but not hashed (its SVG plots carry matplotlib's ids); ``--no-html``
skips rendering it, which takes the quick suite from 15 to under 3 minutes.

Usage::

    python scripts/golden.py check [--suite quick|full] [--only SUBSTRING] [--no-html]
    python scripts/golden.py record [--suite ...]         # rewrite the stored hashes
    python scripts/golden.py record --out DIR [--suite ...]  # also keep every output file

To see *what* changed when a hash differs, record with ``--out`` at the old commit (e.g. in a
``git worktree``) and at the new one, and ``diff -r`` the two folders. A recorded change must
be listed (with its reason) in the issue's closing note.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_DIR = ROOT / "tests" / "golden"

ZOO = ("alexnet", "vgg16", "resnet18", "resnet50", "mobilenetv2", "googlenet",
       "bert_base_layer", "gpt2_block")
CHIPS = ("default", "eyeriss_like", "gemmini_like", "tpu_v1_like", "tpu_v5e_like")
NVDLA = ("nv_full", "nv_large", "nv_medium_1024", "nv_medium_512", "nv_small", "nv_small_256")
TIMINGS = (("native", ()), ("native-best-energy", ("--map", "best-energy")),
           ("compute", ()), ("scalesim", ()))
# The smallest inputs each model accepts keep the quick suite fast (AlexNet needs 63, VGG 32).
SMALL = {"alexnet": ["--image-size", "63"], "vgg16": ["--image-size", "32"],
         "resnet18": ["--image-size", "16"], "resnet50": ["--image-size", "16"],
         "mobilenetv2": ["--image-size", "16"], "googlenet": ["--image-size", "16"],
         "bert_base_layer": ["--seq-len", "16"], "gpt2_block": ["--seq-len", "16"]}
RUN_FILES = ("summary.json", "layers.csv", "report.txt", "trace.json")
# Columns of a sweep's points.csv that are wall-clock facts, not results.
VOLATILE_COLUMNS = ("elapsed_s", "worker")

TINY_SWEEP = """\
[sweep]
name = "tiny"

[[workload]]
model = "resnet18"
image_size = 16

[[axis]]
key = "array.dataflow"
values = ["os", "ws", "is"]

[[axis]]
key = "dram.preset"
values = ["ddr4-3200", "hbm2"]

[objectives]
latency_s = "min"
energy_j = "min"
"""

SYSTEM_SWEEP = """\
[sweep]
name = "chips"
kind = "system"

[base]
system = "switch:{chips}"
comm = "sim"

[[workload]]
model = "gpt2-small"
global_batch = 16

[[axis]]
key = "chips"
values = [2, 4]

[[axis]]
key = "strategy"
values = ["dp={chips}", "tp={chips}", "pp={chips}"]

[objectives]
step_s = "min"
"""


def cases(suite: str) -> list[tuple[str, str, list[str]]]:
    """``(name, kind, argv)`` of every case; ``kind`` says which outputs are hashed."""
    out: list[tuple[str, str, list[str]]] = []
    size = (lambda m: SMALL[m]) if suite == "quick" else (lambda m: [])
    # NVDLA: AlexNet's and VGG's avgpool replicates a feature map smaller than 7x7 (no NVDLA
    # unit) below 224, so they run at their default size.
    nv_size = (lambda m: [] if m in ("alexnet", "vgg16") else size(m))
    for model in ZOO:
        for chip in CHIPS:
            for label, extra in TIMINGS:
                timing = label.split("-")[0]
                out.append((f"run/{model}/{chip}/{label}", "run",
                            ["run", "-m", model, "-c", chip, "--timing", timing, *extra,
                             *size(model)]))
        for chip in NVDLA:
            out.append((f"run/{model}/{chip}", "run", ["run", "-m", model, "-c", chip,
                                                      "--skip-unsupported", *nv_size(model)]))
    # Other ways into `npulab run`: one op, a topology CSV, an energy table, a batch.
    out += [
        ("run/gemm/default", "run", ["run", "--gemm", "512,256,384", "--batch", "2"]),
        ("run/conv/gemmini_like", "run", ["run", "--conv", "28x28x64-64k3s1p1", "-c",
                                          "gemmini_like"]),
        ("run/topology/default", "run", ["run", "-t", "sim_configs/scalesim_resnet18.csv"]),
        ("run/resnet18/default/tech7nm", "run", ["run", "-m", "resnet18", "--image-size", "16",
                                                 "--tech", "7nm", "--batch", "2"]),
        ("run/resnet18/default/set", "run", ["run", "-m", "resnet18", "--image-size", "16",
                                             "--set", "array.rows=16", "--set",
                                             "array.dataflow=os", "--set", "dram.preset=hbm2"]),
    ]
    ss = "sim_configs/scalesim_32x32_os.cfg"
    out += [("scalesim/gemm", "scalesim", ["scalesim", "-c", ss, "-t",
                                           "sim_configs/scalesim_gemm_example.csv",
                                           "--topology-format", "gemm"]),
            ("scalesim/resnet18", "scalesim", ["scalesim", "-c", ss, "-t",
                                               "sim_configs/scalesim_resnet18.csv"])]
    # The documented multi-chip and SoC examples (docs/cli.md, docs/concepts.md,
    # docs/multichip.md), as JSON; a chip-device system (pcie4-x4 runs npulab's default chip).
    js = ["--format", "json"]
    out += [
        ("collective/hgx", "stdout", ["collective", "--system", "hgx-a100-4", "--op",
                                      "allreduce", "--bytes", "8,1M,64M,1G", *js]),
        ("collective/ring8-all", "stdout", ["collective", "--system", "ring:8", "--link-gbps",
                                            "50", "--op", "allreduce", "--bytes", "1M,64M",
                                            "--algorithm", "all", *js]),
        ("collective/ideal8", "stdout", ["collective", "--system",
                                         "examples/labs/05_scaling_out/ideal8.toml", "--op",
                                         "allreduce", "--bytes", "248879616", "--algorithm",
                                         "ring", "--chunks", "1", *js]),
        ("collective/ring1024-analytic", "stdout", ["collective", "--system", "ring:1024",
                                                    "--link-gbps", "50", "--op", "allreduce",
                                                    "--bytes", "64MiB", "--mode", "analytic",
                                                    *js]),
        ("system/gpt2-dp4", "stdout", ["system", "--system", "hgx-a100-4", "--model",
                                       "gpt2-small", "--strategy", "dp=4", "--global-batch",
                                       "32", "--micro-batch", "8", *js]),
        ("system/gpt2-dp2tp2", "stdout", ["system", "--system", "hgx-a100-4", "--model",
                                          "gpt2-small", "--strategy", "dp=2,tp=2",
                                          "--global-batch", "32", "--micro-batch", "8", *js]),
        ("system/gpt2-pp4", "stdout", ["system", "--system", "dgx-a100", "--model",
                                       "gpt2-small", "--strategy", "pp=4", "--global-batch",
                                       "16", "--micro-batch", "1", *js]),
        ("system/megatron-tp8", "stdout", ["system", "--system", "dgx-a100", "--model",
                                           "megatron-22b", "--strategy", "tp=8,recompute=full",
                                           "--global-batch", "8", *js]),
        ("system/resnet50-dp8", "stdout", ["system", "--system", "ring:8", "--model",
                                           "resnet50", "--strategy", "dp=8", "--batch", "32",
                                           *js]),
        ("system/chip-device", "stdout", ["system", "--system", "pcie4-x4", "--model",
                                          "resnet18", "--strategy", "dp=4", "--batch", "2",
                                          "--image-size", "16", *js]),
        ("soc/resnet18", "stdout", ["soc", "--model", "resnet18", "--image-size", "16", *js]),
        ("soc/gemmini3", "stdout", ["soc", "-n", "3", "-c", "gemmini_like", "--model",
                                    "gpt2_block", "--seq-len", "16", *js]),
        ("sweep/tiny", "sweep", ["sweep", "{spec:tiny}", "--executor", "serial"]),
        ("sweep/system", "sweep", ["sweep", "{spec:system}", "--executor", "serial"]),
    ]
    out.append(("api/simulate-metrics", "api", []))
    return out


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _roots() -> list[bytes]:
    """Folders whose absolute paths outputs may name (``summary.json`` names the energy table's
    file): the checkout and the folder the installed ``hw`` package is in."""
    import hw
    found = {str(ROOT), str(Path(hw.__file__).resolve().parent.parent)}
    return sorted((p.encode() for p in found), key=len, reverse=True)


def normalized(data: bytes) -> bytes:
    """``data`` with those folders written ``<root>``, so a fresh clone anywhere (and an
    installed copy) hashes the same bytes."""
    for root in _roots():
        data = data.replace(root, b"<root>")
    return data


def _points_csv(path: Path) -> bytes:
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
    keep = [i for i, col in enumerate(rows[0]) if col not in VOLATILE_COLUMNS]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for row in rows:
        writer.writerow([row[i] for i in keep])
    return buf.getvalue().encode()


class CaseFailed(Exception):
    """A case's command failed; its message (a user error's one line, or a bug's exception)
    is then the case's recorded output."""


def _cli(argv: list[str]) -> bytes:
    from npulab.cli import main
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(argv)
    except Exception as exc:            # a bug: its type and message are the output
        raise CaseFailed(f"{type(exc).__name__}: {exc}\n") from exc
    if status not in (0, None):
        raise CaseFailed(f"exit status {status}\n{err.getvalue()}")
    return out.getvalue().encode()


def _api_case() -> dict[str, bytes]:
    """The Python API: simulate, then metrics with the default energy table."""
    from compiler.frontends import zoo
    from compiler.options import CompileOptions
    from hw.configfile import load_chip_config
    from npulab.simulate import simulate
    run = simulate(zoo.get("resnet18", image_size=16), load_chip_config("default"),
                   options=CompileOptions(map="best-energy"))
    from npulab.metrics import compute_metrics
    dump = lambda d: json.dumps(d, indent=1, sort_keys=True, default=str).encode()  # noqa: E731
    return {"summary.json": dump(run.summary()),
            "compute_metrics.json": dump(run.summary(compute_metrics(run)))}


def run_case(name: str, kind: str, argv: list[str], work: Path) -> dict[str, bytes]:
    """The outputs of one case, by file name."""
    work.mkdir(parents=True, exist_ok=True)
    if kind == "api":
        return _api_case()
    if kind == "run":
        _cli([*argv, "-o", str(work), "--quiet"])
        return {f: (work / f).read_bytes() for f in RUN_FILES if (work / f).exists()}
    if kind == "scalesim":
        _cli([*argv, "-o", str(work)])
        return {p.name: p.read_bytes() for p in sorted(work.glob("*.csv"))}
    if kind == "stdout":
        return {"stdout.json": _cli(argv)}
    if kind == "sweep":
        spec = work / "spec.toml"
        spec.write_text(TINY_SWEEP if "{spec:tiny}" in argv else SYSTEM_SWEEP, encoding="utf-8")
        argv = [str(spec) if a.startswith("{spec:") else a for a in argv]
        _cli([*argv, "-o", str(work / "out")])
        _cli(["sweep", "report", str(work / "out")])
        return {"points.csv": _points_csv(work / "out" / "points.csv")}
    raise ValueError(kind)


@contextlib.contextmanager
def _no_html():
    """``report.html`` (not hashed: its SVG plots embed matplotlib's ids) is most of a small
    run's time: 5 s of matplotlib against 0.15 s of simulation. The test leaves it out."""
    from npulab import html_report
    real = html_report.render_html
    html_report.render_html = lambda summary: ""
    try:
        yield
    finally:
        html_report.render_html = real


def compute(suite: str, only: str | None = None, out: Path | None = None,
            progress=None, selected=None, html: bool = True) -> dict[str, dict[str, str]]:
    """``{case: {file: sha256}}`` of every case of ``suite`` (those whose name holds
    ``only``, or the ``selected`` cases); with ``out``, every output file is also kept under
    ``out/<case>/``. ``html=False`` skips rendering ``report.html``."""
    old = os.getcwd()
    os.chdir(ROOT)                      # cases name files relative to the checkout
    try:
        result: dict[str, dict[str, str]] = {}
        with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
            if not html:
                stack.enter_context(_no_html())
            if selected is None:
                selected = [c for c in cases(suite) if only is None or only in c[0]]
            for i, (name, kind, argv) in enumerate(selected):
                start = time.perf_counter()
                try:
                    files = run_case(name, kind, argv, Path(tmp) / name.replace("/", "_"))
                except CaseFailed as exc:
                    files = {"error.txt": str(exc).encode()}
                files = {f: normalized(data) for f, data in files.items()}
                result[name] = {f: _digest(data) for f, data in sorted(files.items())}
                if progress:
                    progress(i, len(selected), name, time.perf_counter() - start)
                if out is not None:
                    dest = out / name
                    dest.mkdir(parents=True, exist_ok=True)
                    for f, data in files.items():
                        (dest / f).write_bytes(data)
        return result
    finally:
        os.chdir(old)


def stored(suite: str) -> dict[str, dict[str, str]]:
    return json.loads((GOLDEN_DIR / f"{suite}.json").read_text(encoding="utf-8"))


def differences(got: dict, want: dict) -> list[str]:
    lines = []
    for name in sorted(set(got) | set(want)):
        if name not in want:
            lines.append(f"{name}: not in the stored goldens")
        elif name not in got:
            continue                    # not run (--only)
        elif got[name] != want[name]:
            files = sorted(f for f in set(got[name]) | set(want[name])
                           if got[name].get(f) != want[name].get(f))
            lines.append(f"{name}: {', '.join(files)} differ")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("action", choices=("check", "record"))
    ap.add_argument("--suite", choices=("quick", "full"), default="quick")
    ap.add_argument("--only", help="cases whose name contains this")
    ap.add_argument("--out", type=Path, help="keep every output file under DIR/<case>/")
    ap.add_argument("--no-html", action="store_true",
                    help="do not render report.html (it is not hashed; saves ~5 s per run)")
    args = ap.parse_args(argv)

    def progress(i, n, name, seconds):
        print(f"[{i + 1}/{n}] {name} {seconds:.2f} s", file=sys.stderr, flush=True)

    got = compute(args.suite, args.only, args.out, progress, html=not args.no_html)
    if args.action == "record":
        path = GOLDEN_DIR / f"{args.suite}.json"
        data = stored(args.suite) if args.only and path.exists() else {}
        data.update(got)
        GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"recorded {len(got)} case(s) in {path.relative_to(ROOT)}")
        return 0
    diff = differences(got, stored(args.suite))
    for line in diff:
        print(line)
    print(f"{len(got) - len(diff)} of {len(got)} case(s) identical")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
