"""Run SCALE-Sim 3.0.0 side by side with npulab, in its own venv, and read back its reports.

SCALE-Sim breaks with numpy >= 2.4, and npulab's venv has a newer numpy, so it lives in
``benchmarks/.venv-scalesim`` (git-ignored) and runs as a subprocess:

* :func:`ensure_venv` creates that venv and installs ``scalesim==3.0.0`` and ``numpy<2.4``.
* :func:`run_peer` runs one config + topology through SCALE-Sim's Python API
  (``scalesim.scale_sim.scalesim(save_disk_space=True, verbose=False)``: its CLI always writes
  per-cycle traces) and parses its own ``COMPUTE_REPORT.csv`` and ``DETAILED_ACCESS_REPORT.csv``.

SCALE-Sim 3.0.0 refuses inputs npulab accepts, so :func:`run_peer` stages normalized copies in
``workdir``: the topology re-written by :func:`write_topology` (trailing commas, which SCALE-Sim
needs: its issues 38 and 106), the config with any v3 section or key that 3.0.0 requires but the
file lacks added with SCALE-Sim's defaults (a v2 config has no ``[layout]``/``[sparsity]``), and
an empty layout file (3.0.0 opens one even when custom layouts are off).

Command line: ``python benchmarks/scalesim_peer.py --selfcheck`` runs a 64x64x64 GEMM on an 8x8
array in all three dataflows and compares against the shared reference CSV.
"""

from __future__ import annotations

import argparse
import configparser
import csv
import json
import math
import subprocess
import sys
import venv
from pathlib import Path
from typing import Union

from compiler.frontends.scalesim_cfg import ScaleSimConfig, read_scalesim_cfg, write_scalesim_cfg
from compiler.frontends.scalesim_topology import read_topology, write_topology
from compiler.ir import Gemm, Graph

__all__ = ["DEFAULT_VENV", "SCALESIM_VERSION", "ensure_venv", "run_peer", "parse_reports",
           "selfcheck"]

PathLike = Union[str, Path]

HERE = Path(__file__).resolve().parent
DEFAULT_VENV = HERE / ".venv-scalesim"
SCALESIM_VERSION = "3.0.0"
REQUIREMENTS = (f"scalesim=={SCALESIM_VERSION}", "numpy<2.4")
REFERENCE_CSV = HERE.parent.parent / "shared" / "reference" / "scalesim_reference.csv"

# Keys SCALE-Sim 3.0.0's scale_config.read_conf_file() reads unconditionally, with the values
# its own configs/google.cfg and scale_config.__init__ use. Request buffers matter only with
# Ramulator traces, the layout bank parameters only in USER bandwidth mode or custom layouts.
_V3_REQUIRED = {
    "run_presets": {"InterfaceBandwidth": "CALC", "UseRamulatorTrace": "False"},
    "architecture_presets": {"ReadRequestBuffer": "60", "WriteRequestBuffer": "60"},
    "layout": {
        "IfmapCustomLayout": "False", "IfmapSRAMBankBandwidth": "10", "IfmapSRAMBankNum": "10",
        "IfmapSRAMBankPort": "2", "FilterCustomLayout": "False",
        "FilterSRAMBankBandwidth": "10", "FilterSRAMBankNum": "10", "FilterSRAMBankPort": "2",
    },
    "sparsity": {"SparsitySupport": "false"},
}

# Runs inside the SCALE-Sim venv. single_layer_sim.run() is wrapped only to time each layer
# (operand matrices, compute demand and memory simulation; report writing is excluded).
_DRIVER = r"""
import json, sys, time
from scalesim.scale_sim import scalesim
from scalesim.single_layer_sim import single_layer_sim
args = json.loads(sys.argv[1])
times = {}
_run = single_layer_sim.run
def _timed(self):
    t0 = time.perf_counter()
    _run(self)
    times[self.layer_id] = time.perf_counter() - t0
single_layer_sim.run = _timed
t0 = time.perf_counter()
sim = scalesim(save_disk_space=True, verbose=False, config=args["cfg"], topology=args["topo"],
               layout=args["layout"], input_type_gemm=args["gemm"])
sim.run_scale(top_path=args["out"])
result = {"names": sim.topo.get_layer_names(), "run_wall_s": time.perf_counter() - t0,
          "layer_wall_s": [times[i] for i in range(len(times))]}
with open(args["result"], "w") as f:
    json.dump(result, f)
"""


def _log(message: str) -> None:
    print(f"[scalesim-peer] {message}", flush=True)


def _installed(python: Path) -> bool:
    probe = ("import importlib.metadata as m; v = m.version; "
             "print(v('scalesim'), v('numpy'))")
    try:
        out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True,
                             check=True, timeout=120).stdout.split()
        numpy_major_minor = tuple(int(x) for x in out[1].split(".")[:2])
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return False  # no venv, no scalesim or an unreadable version: (re)install
    return out[0] == SCALESIM_VERSION and numpy_major_minor < (2, 4)


def ensure_venv(path: PathLike = DEFAULT_VENV) -> Path:
    """Create ``path`` with SCALE-Sim 3.0.0 and numpy < 2.4 unless already there; its python."""
    path = Path(path)
    python = path / "bin" / "python"
    if _installed(python):
        _log(f"using {path} (scalesim {SCALESIM_VERSION})")
        return python
    if not python.exists():
        _log(f"creating venv {path}")
        venv.EnvBuilder(with_pip=True, clear=path.exists()).create(path)
    _log(f"installing {' '.join(REQUIREMENTS)} (about a minute)")
    subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q",
                    *REQUIREMENTS], check=True)
    if not _installed(python):
        raise RuntimeError(f"{path}: scalesim {SCALESIM_VERSION} with numpy<2.4 did not install")
    _log("venv ready")
    return python


def _stage_cfg(cfg_path: Path, out: Path) -> ScaleSimConfig:
    cfg = read_scalesim_cfg(cfg_path)  # validates with npulab's file:line errors first
    parser = configparser.RawConfigParser()  # raw: keep the user's values byte for byte
    parser.optionxform = str  # keep key spelling (lookups below are case-insensitive by hand)
    with open(cfg_path, encoding="utf-8") as f:
        parser.read_file(f)
    for section, defaults in _V3_REQUIRED.items():
        if not parser.has_section(section):
            parser.add_section(section)
        present = {key.lower() for key in parser.options(section)}
        for key, value in defaults.items():
            if key.lower() not in present:
                parser.set(section, key, value)
    with open(out, "w", encoding="utf-8") as f:
        parser.write(f)
    return cfg


def _number(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() and "." not in text else value


def _read_report(path: Path) -> list[dict[str, str]]:
    # SCALE-Sim writes ", "-separated rows with a trailing comma (simulator.generate_reports).
    with open(path, newline="") as f:
        rows = [[cell.strip() for cell in row] for row in csv.reader(f) if row]
    header = [h for h in rows[0] if h]
    return [dict(zip(header, row)) for row in rows[1:]]


def parse_reports(report_dir: PathLike, names: list[str] | None = None) -> list[dict]:
    """Per-layer results from SCALE-Sim's COMPUTE_REPORT.csv and DETAILED_ACCESS_REPORT.csv."""
    report_dir = Path(report_dir)
    compute = _read_report(report_dir / "COMPUTE_REPORT.csv")
    detail = _read_report(report_dir / "DETAILED_ACCESS_REPORT.csv")
    if len(compute) != len(detail):
        raise RuntimeError(f"{report_dir}: {len(compute)} compute rows, {len(detail)} detail rows")
    layers = []
    for c, d in zip(compute, detail):
        lid = int(c["LayerID"])
        layers.append({
            "layer_id": lid,
            "name": names[lid] if names else str(lid),
            "total_cycles": _number(c["Total Cycles"]),
            "total_cycles_incl_prefetch": _number(c["Total Cycles (incl. prefetch)"]),
            "stall_cycles": _number(c["Stall Cycles"]),
            "overall_util_pct": float(c["Overall Util %"]),
            "mapping_eff_pct": float(c["Mapping Efficiency %"]),
            "compute_util_pct": float(c["Compute Util %"]),
            "sram_ifmap_reads": _number(d["SRAM IFMAP Reads"]),
            "sram_filter_reads": _number(d["SRAM Filter Reads"]),
            "sram_ofmap_writes": _number(d["SRAM OFMAP Writes"]),
        })
    return layers


def run_peer(
    python: PathLike, cfg_path: PathLike, topo_path: PathLike, gemm: bool, workdir: PathLike,
    *, timeout: float | None = None,
) -> list[dict]:
    """Run SCALE-Sim 3.0.0 on one config and topology; one dict per SCALE-Sim layer.

    Keys: name, total_cycles, stall_cycles, overall_util_pct, mapping_eff_pct,
    compute_util_pct, sram_ifmap_reads, sram_filter_reads, sram_ofmap_writes, wall_s (seconds
    of ``single_layer_sim.run`` for that layer, measured inside the subprocess), plus layer_id,
    total_cycles_incl_prefetch and run_wall_s (the whole ``scalesim`` run, parsing included).
    A ``DP`` layer is C SCALE-Sim layers named ``{name}Channel_{i}``, one dict each.
    """
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = _stage_cfg(Path(cfg_path), workdir / "scalesim.cfg")
    topo = workdir / "topology.csv"
    write_topology(read_topology(topo_path, gemm=gemm), topo, gemm=gemm)
    layout = workdir / "layout.csv"
    layout.write_text("Layer name,\n", encoding="utf-8")  # header only: no custom layout rows
    result = workdir / "peer_result.json"
    args = {"cfg": str(workdir / "scalesim.cfg"), "topo": str(topo), "layout": str(layout),
            "gemm": gemm, "out": str(workdir / "out"), "result": str(result)}
    log = workdir / "scalesim.log"
    with open(log, "w") as out:
        proc = subprocess.run([str(python), "-c", _DRIVER, json.dumps(args)], cwd=workdir,
                              stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
    if proc.returncode:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"SCALE-Sim exited {proc.returncode}; {log}:\n" + "\n".join(tail))
    info = json.loads(result.read_text())
    layers = parse_reports(workdir / "out" / cfg.run_name, info["names"])
    for layer in layers:
        layer["wall_s"] = info["layer_wall_s"][layer["layer_id"]]
        layer["run_wall_s"] = info["run_wall_s"]
    return layers


_COMPARED = ("total_cycles", "stall_cycles", "overall_util_pct", "mapping_eff_pct",
             "compute_util_pct", "sram_ifmap_reads", "sram_filter_reads", "sram_ofmap_writes")


def selfcheck(python: PathLike, workdir: PathLike, reference: PathLike = REFERENCE_CSV,
              array: int = 8, gemm_mnk: tuple[int, int, int] = (64, 64, 64)) -> bool:
    """Run one GEMM in os/ws/is on an ``array``-square CALC-mode array; compare to reference."""
    m, n, k = gemm_mnk
    layer = f"G_{m}x{n}x{k}"
    with open(reference, newline="") as f:
        ref = {(r["array_h"], r["dataflow"]): r for r in csv.DictReader(f) if r["layer"] == layer}
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    topo = workdir / f"{layer}.csv"
    write_topology(Graph(name=layer, ops=(Gemm(name=layer, m=m, n=n, k=k),)), topo)
    ok = True
    for dataflow in ("os", "ws", "is"):
        cfg_path = workdir / f"{array}x{array}_{dataflow}.cfg"
        write_scalesim_cfg(ScaleSimConfig(
            run_name=f"selfcheck_{array}x{array}_{dataflow}", array_rows=array, array_cols=array,
            ifmap_sram_kb=64, filter_sram_kb=64, ofmap_sram_kb=64, dataflow=dataflow,
            bandwidth=(10,), read_request_buffer=512, write_request_buffer=512), cfg_path)
        got = run_peer(python, cfg_path, topo, True, workdir / dataflow)[0]
        want = ref.get((str(array), dataflow))
        for key in _COMPARED:
            expect = None if want is None else float(want[key])
            same = expect is not None and math.isclose(float(got[key]), expect, rel_tol=1e-9)
            ok &= same
            print(f"{dataflow} {key:18} scalesim={got[key]!s:>20} reference={expect!s:>20} "
                  f"{'ok' if same else 'MISMATCH'}")
        print(f"{dataflow} wall_s {got['wall_s']:.3f} (layer) {got['run_wall_s']:.3f} (run)")
    return ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    p.add_argument("--workdir", type=Path, default=HERE / "results" / "scalesim_peer")
    p.add_argument("--selfcheck", action="store_true", help="GEMM 64^3, 8x8, os/ws/is vs ref")
    p.add_argument("--reference", type=Path, default=REFERENCE_CSV)
    p.add_argument("--cfg", type=Path)
    p.add_argument("--topo", type=Path)
    p.add_argument("--gemm", action="store_true", help="the topology is in GEMM (M, N, K) form")
    args = p.parse_args(argv)
    python = ensure_venv(args.venv)
    if args.selfcheck:
        return 0 if selfcheck(python, args.workdir, args.reference) else 1
    if not (args.cfg and args.topo):
        p.error("give --cfg and --topo, or --selfcheck")
    for layer in run_peer(python, args.cfg, args.topo, args.gemm, args.workdir):
        print(json.dumps(layer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
