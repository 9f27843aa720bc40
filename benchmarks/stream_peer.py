"""Stream (KULeuven-MICAS/stream, ``stream-dse``), run side by side as the multi-core peer of
npulab (issue 24): a workload on N identical npulab-like cores, scheduled by Stream's genetic
algorithm (``stream.api.optimize_allocation_ga``) layer by layer ("lbl") or layer-fused
("fused").

Stream (Symons et al., "Stream: Design Space Exploration of Layer-Fused DNNs on Heterogeneous
Dataflow Accelerators", IEEE Trans. Computers 2024) costs every tile of every layer on every
core with ZigZag's LOMA mapper, then schedules the tiles on the cores, the inter-core links and
the shared DRAM link, and searches the layer -> core allocation with a genetic algorithm.

Which Stream: on Python 3.11 (the only interpreter here) PyPI offers stream-dse <= 0.0.8, the
2023 API (Python-module inputs, ``zigzag.classes`` imports) with an unpinned zigzag-dse that
resolves to a 3.x without ``zigzag.classes``; 1.13 and later need Python >= 3.12. So
:func:`ensure_venv` installs KULeuven-MICAS/stream at commit 70eb6751 (2025-07-04, "Major
refactors and Docs rework") from the local mirror with ``git archive``, plus zigzag-dse 3.8.2
(its requirements.txt pin), ``six`` (imported by zigzag-dse, undeclared) and its other
requirements. Later commits up to 1c366065^ also allow Python 3.11 with PyPI-only packages
(21e5ad80, for one, lets core file names start with "./"); they were not tried.
``stream/api.py`` imports gurobipy at the top, so gurobipy is installed; the GA path needs no
licence. The venv is ``benchmarks/.venv-stream`` (git-ignored), about 1.5 minutes to create.

The hardware (``benchmarks/stream_inputs/``): N cores of ``cores/npulab_core.yaml`` (32x32 int8
array, K x C unrolled as npulab's weight-stationary array, PE registers, one 2 MiB SRAM with a
2048-bit read and a 2048-bit write port) on a bidirectional ring of 1024-bit/cycle links,
sharing one DDR4-3200 channel (``cores/dram_ddr4.yaml``: 205 bits/cycle = 25.6 GB/s at 1 GHz).
Every op (conv, GEMM, ReLU, add, pooling) may go to any core and is split over the cores along
K (output channels / GEMM columns): ``stream_inputs/mapping.yaml``. Stream counts cycles only;
seconds here assume 1 GHz.

Workloads: ``resnet18`` (Stream's own stream/inputs/examples/workload/resnet18.onnx, from the
mirror: 49 ONNX nodes, batch norms folded, ReLU and Add as separate nodes) and ``gemm``
(M x K x N = 512 x 1024 x 1024 by default, one ONNX MatMul written with the ``onnx`` package in
the venv). Both int8 (Stream's ONNX parser default: 8-bit operands, 16-bit partial sums).

Command line::

    python benchmarks/stream_peer.py                      # gemm lbl, resnet18 lbl and fused
    python benchmarks/stream_peer.py --workload gemm --mode lbl --cores 2

Figures (2-core machine shared with other jobs, 27 Nov 2026; 4 cores, seed 0, split=k): GEMM
lbl 262,150 cycles, cores 2-3 start when 0-1 end (a layer alone in its stack streams all
operands from DRAM and reserves its DRAM bandwidth for its whole run), Stream 22-45 s;
ResNet-18 lbl 3,057,594 cycles, 9.48 mJ, 21 min; fused 2,395,953 cycles, 6.60 mJ, 20 min.
More than 95 % of Stream's time is ZigZag's LOMA search per distinct tile.

It prints latency (cycles, and ms at 1 GHz), energy, Stream's wall time (the
``optimize_allocation_ga`` call; venv creation and imports excluded) per stage, and the per-core
split, and writes ``benchmarks/results/stream_peer.json``. Exit status 2 if the mirror is
missing. :func:`run_stream` is the entry point for ``bench_multicore.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path
from typing import Union

PathLike = Union[str, Path]

HERE = Path(__file__).resolve().parent
INPUTS = HERE / "stream_inputs"
DEFAULT_VENV = HERE / ".venv-stream"
DEFAULT_WORKDIR = HERE / "results" / "stream_peer"
MIRROR = Path("/work/.mirror/KULeuven-MICAS+stream/repo")
STREAM_COMMIT = "70eb6751"
REQUIREMENTS = ("zigzag-dse==3.8.2", "six==1.17.0", "rtree", "deap", "brokenaxes", "plotly",
                "pandas", "gurobipy", "cerberus", "pydot", "matplotlib", "onnx", "pyyaml")
CLOCK_HZ = 1.0e9
GEMM_MKN = (512, 1024, 1024)
WORKLOADS = ("resnet18", "gemm")
MODES = ("lbl", "fused")
SPLITS = ("k", "layer")  # every layer split over all cores along K, or whole layers placed by the GA
# Stream's own main_stream_ga.py fuses ResNet-18 nodes 0-10 and 11-21 (the stem and the first
# two stages); the rest runs one layer per stack.
RESNET18_FUSED_STACKS = [list(range(0, 11)), list(range(11, 22))]


class MirrorMissing(RuntimeError):
    """The local Stream mirror, the only source of Stream here, is absent."""


def _log(message: str) -> None:
    print(f"[stream-peer] {message}", flush=True)


def _check_mirror() -> None:
    if not (MIRROR / "HEAD").exists() and not (MIRROR / ".git").exists():
        raise MirrorMissing(f"{MIRROR}: Stream mirror missing (need commit {STREAM_COMMIT})")


def _installed(python: Path) -> bool:
    probe = ("import importlib.metadata as m, stream.api; "
             "print(m.version('zigzag-dse'), m.version('gurobipy'))")
    try:
        out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True,
                             check=True, timeout=300).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return False  # no venv, no stream or a broken import: (re)install
    return bool(out) and out[0] == "3.8.2"


def ensure_venv(path: PathLike = DEFAULT_VENV) -> Path:
    """Create ``path`` with Stream @70eb6751 (from the mirror) and zigzag-dse 3.8.2 unless it
    is already there; its python. Raises :class:`MirrorMissing` without the mirror."""
    path = Path(path)
    python = path / "bin" / "python"
    if _installed(python):
        _log(f"using {path} (stream @{STREAM_COMMIT}, zigzag-dse 3.8.2)")
        return python
    _check_mirror()
    if not python.exists():
        _log(f"creating venv {path}")
        venv.EnvBuilder(with_pip=True, clear=path.exists()).create(path)
    src = path / "stream-src"
    src.mkdir(exist_ok=True)
    archive = subprocess.run(["git", "-C", str(MIRROR), "archive", STREAM_COMMIT],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    _log(f"installing stream @{STREAM_COMMIT} and {' '.join(REQUIREMENTS)} (about 1.5 minutes)")
    proc = subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check",
                           "-q", str(src), *REQUIREMENTS], capture_output=True, text=True)
    if proc.returncode or not _installed(python):
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        raise RuntimeError(f"{path}: Stream @{STREAM_COMMIT} did not install:\n{tail}")
    _log("venv ready")
    return python


# Runs inside the Stream venv, cwd = the experiment directory. Writes the N-core accelerator
# and mapping from the 4-core files, the workload ONNX, then times optimize_allocation_ga.
_DRIVER = r"""
import json, os, random, shutil, subprocess, sys, time
args = json.loads(sys.argv[1])
random.seed(args["seed"])
import numpy as np
np.random.seed(args["seed"])
import yaml
n, inputs = args["cores"], args["inputs"]
shutil.copytree(os.path.join(inputs, "cores"), "cores", dirs_exist_ok=True)
with open(os.path.join(inputs, "npulab_quad_core.yaml")) as f:
    acc = yaml.safe_load(f)
acc["name"] = f"npulab_{n}_core"
acc["cores"] = {i: acc["cores"][0] for i in range(n)}
acc["core_connectivity"] = ([f"{i}, {(i + 1) % n}" for i in range(n)] if n > 2
                            else ["0, 1"] if n == 2 else [])
acc["bandwidth"] = args["link_bits"]
with open("accelerator.yaml", "w") as f:
    yaml.safe_dump(acc, f, sort_keys=False)
with open(os.path.join(inputs, "mapping.yaml")) as f:
    mapping = yaml.safe_load(f)
for entry in mapping:
    entry["core_allocation"] = list(range(n))
    entry["inter_core_tiling"] = [f"K, {n if args['split'] == 'k' else 1}"]
with open("mapping.yaml", "w") as f:
    yaml.safe_dump(mapping, f, sort_keys=False)
if args["workload"] == "resnet18":
    onnx_bytes = subprocess.run(["git", "-C", args["mirror"], "show",
                                 args["commit"] + ":stream/inputs/examples/workload/resnet18.onnx"],
                                capture_output=True, check=True).stdout
    with open("workload.onnx", "wb") as f:
        f.write(onnx_bytes)
else:
    import onnx
    from onnx import TensorProto, helper
    m, k, nn = args["gemm"]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["C"], name="gemm")], "gemm",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [m, k]),
         helper.make_tensor_value_info("B", TensorProto.FLOAT, [k, nn])],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, [m, nn])])
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph))
    onnx.save(model, "workload.onnx")

import logging
from stream.api import optimize_allocation_ga
from stream import api
logging.getLogger().setLevel(logging.WARNING)
stage_t = []
def _stamp(cls):
    init = cls.__init__
    def wrapped(self, *a, **kw):
        stage_t.append((cls.__name__, time.perf_counter()))
        init(self, *a, **kw)
    cls.__init__ = wrapped
for name in dir(api):
    obj = getattr(api, name)
    if isinstance(obj, type) and name.endswith("Stage") and name != "MainStage":
        _stamp(obj)
t0 = time.perf_counter()
scme = optimize_allocation_ga(
    hardware="accelerator.yaml", workload="workload.onnx", mapping="mapping.yaml",
    mode=args["mode"], layer_stacks=[tuple(s) for s in args["stacks"]],
    nb_ga_generations=args["generations"], nb_ga_individuals=args["individuals"],
    experiment_id="run", output_path="outputs", skip_if_exists=False)
t1 = time.perf_counter()
stage_t.sort(key=lambda x: x[1])
stage_s = {name: round(b - a, 3) for (name, a), (_, b) in zip(stage_t, stage_t[1:] + [("end", t1)])}
stage_s["before_first_stage"] = round(stage_t[0][1] - t0, 3) if stage_t else 0.0
per_core, layers = {}, set()
for node in scme.workload.node_list:
    core = node.chosen_core_allocation
    if core is None:
        continue
    c = per_core.setdefault(int(core), {"tiles": 0, "layers": set(), "macs": 0, "busy_cycles": 0,
                                        "first_start": node.start, "last_end": node.end})
    c["tiles"] += 1
    c["first_start"] = int(min(c["first_start"], node.start))
    c["last_end"] = int(max(c["last_end"], node.end))
    c["layers"].add(int(node.id))
    layers.add(int(node.id))
    c["macs"] += int(node.total_mac_count)
    c["busy_cycles"] += int(node.get_runtime())
for c in per_core.values():
    c["layers"] = sorted(c["layers"])
    c["utilization"] = c["busy_cycles"] / scme.latency if scme.latency else 0.0
energy_parts = {k[len("total_"):]: float(getattr(scme, k)) for k in vars(scme)
                if k.startswith("total_") and k.endswith("_energy") and getattr(scme, k) is not None}
result = {"latency_cycles": int(scme.latency), "energy_pj": float(scme.energy),
          "energy_parts_pj": energy_parts, "stream_wall_s": t1 - t0, "stage_wall_s": stage_s,
          "layers": len(layers), "tiles": sum(c["tiles"] for c in per_core.values()),
          "macs": sum(c["macs"] for c in per_core.values()),
          "per_core": {str(k): per_core[k] for k in sorted(per_core)}}
with open("result.json", "w") as f:
    json.dump(result, f, indent=1)
"""


def layer_stacks(workload: str, mode: str) -> list[list[int]]:
    """Stream's layer stacks: one layer per stack for "lbl" (no tiling inside a core); for
    "fused", Stream's own ResNet-18 choice. A one-layer GEMM has nothing to fuse."""
    nodes = 49 if workload == "resnet18" else 1
    if mode == "fused" and workload == "resnet18":
        fused = RESNET18_FUSED_STACKS
        done = {i for s in fused for i in s}
        return [list(s) for s in fused] + [[i] for i in range(nodes) if i not in done]
    return [[i] for i in range(nodes)]


def run_stream(workload: str, cores: int = 4, *, mode: str = "lbl", split: str = "k",
               generations: int = 4,
               individuals: int = 4, seed: int = 0, link_bits_per_cycle: int = 1024,
               gemm_mkn: tuple[int, int, int] = GEMM_MKN, python: PathLike | None = None,
               workdir: PathLike = DEFAULT_WORKDIR, reuse_cost_lut: bool = False,
               timeout: float | None = 3600) -> dict:
    """Run Stream on ``workload`` ("resnet18" or "gemm") over ``cores`` identical cores; dict.

    ``split="k"``: every layer is cut into ``cores`` parts along K and part i runs on core i
    (Stream fixes the allocation when the part count equals the allowed cores, so the GA has
    nothing left to choose); ``split="layer"``: layers stay whole and the GA places each one
    (layer pipelining).

    Keys: workload, mode, cores, latency_cycles, latency_s (at 1 GHz), energy_pj,
    energy_parts_pj, stream_wall_s (the ``optimize_allocation_ga`` call), stage_wall_s,
    process_wall_s (the whole subprocess: imports and input writing too), layers, tiles, macs,
    per_core ({core id: tiles, layers, macs, busy_cycles, utilization}), settings, workdir.
    The GA and Python's hashing are seeded, so equal arguments give equal numbers.
    Stream keeps ZigZag's per-tile results in ``outputs/run/cost_lut.pickle`` and skips every
    tile already there, so a rerun takes seconds instead of minutes; the experiment's
    ``outputs`` is deleted first unless ``reuse_cost_lut`` (then stream_wall_s is not a
    simulation time).
    """
    for key, value, allowed in (("workload", workload, WORKLOADS), ("mode", mode, MODES),
                                ("split", split, SPLITS)):
        if value not in allowed:
            raise ValueError(f"{key} {value!r}: allowed {', '.join(allowed)}")
    if cores < 1:
        raise ValueError(f"cores {cores}: must be >= 1")
    if split == "layer" and workload == "gemm":
        # Stream's GA keeps only core ids < the number of distinct flexible layers
        # (genetic_algorithm_allocation.py) and its mutation needs two genes: one layer crashes it
        raise ValueError("split 'layer' with workload 'gemm': Stream's GA needs several layers; "
                         "allowed for gemm: split 'k'")
    _check_mirror()
    python = Path(python) if python else ensure_venv()
    settings = {"reuse_cost_lut": reuse_cost_lut, "split": split, "generations": generations, "individuals": individuals, "seed": seed,
                "link_bits_per_cycle": link_bits_per_cycle, "dram_bits_per_cycle": 205,
                "stacks": layer_stacks(workload, mode), "stream_commit": STREAM_COMMIT}
    if workload == "gemm":
        settings["gemm_mkn"] = list(gemm_mkn)
    exp = Path(workdir).resolve() / f"{workload}_{mode}_{split}_{cores}c"
    exp.mkdir(parents=True, exist_ok=True)
    (exp / "result.json").unlink(missing_ok=True)
    if not reuse_cost_lut:
        shutil.rmtree(exp / "outputs", ignore_errors=True)
    args = {"workload": workload, "mode": mode, "split": split, "cores": cores, "seed": seed,
            "generations": generations, "individuals": individuals, "link_bits":
            link_bits_per_cycle, "stacks": settings["stacks"], "gemm": list(gemm_mkn),
            "inputs": str(INPUTS), "mirror": str(MIRROR), "commit": STREAM_COMMIT}
    env = dict(os.environ, PYTHONHASHSEED=str(seed))
    t0 = time.perf_counter()
    with open(exp / "stream.log", "w") as log:
        proc = subprocess.run([str(python), "-c", _DRIVER, json.dumps(args)], cwd=exp, env=env,
                              stdout=log, stderr=subprocess.STDOUT, timeout=timeout)
    process_s = time.perf_counter() - t0
    if proc.returncode:
        tail = (exp / "stream.log").read_text(errors="replace").strip().splitlines()[-8:]
        raise RuntimeError(f"Stream exited {proc.returncode}; {exp / 'stream.log'}:\n"
                           + "\n".join(tail))
    out = json.loads((exp / "result.json").read_text())
    return {"workload": workload, "mode": mode, "split": split, "cores": cores, **out,
            "latency_s": out["latency_cycles"] / CLOCK_HZ, "process_wall_s": process_s,
            "settings": settings, "workdir": str(exp)}


def _print(r: dict) -> None:
    head = (f"{r['workload']} {r['mode']} split={r['split']} on {r['cores']} cores: {r['latency_cycles']:,} cycles"
            f" = {r['latency_s'] * 1e3:.3f} ms at 1 GHz, energy {r['energy_pj'] / 1e6:.2f} uJ,"
            f" Stream {r['stream_wall_s']:.1f} s (process {r['process_wall_s']:.1f} s)")
    print(head)
    stages = ", ".join(f"{k.replace('Stage', '')} {v:.1f}" for k, v in r["stage_wall_s"].items()
                       if v >= 0.05)
    print(f"  stages (s): {stages}")
    for core, c in r["per_core"].items():
        print(f"  core {core}: {c['tiles']:4d} tiles of {len(c['layers']):2d} layers,"
              f" {c['macs']:>13,} MACs, busy {c['busy_cycles']:>12,} cycles"
              f" ({c['utilization']:.0%} of the latency), cycles {c['first_start']:,}"
              f"..{c['last_end']:,}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", choices=WORKLOADS, action="append")
    p.add_argument("--mode", choices=MODES, action="append")
    p.add_argument("--split", choices=SPLITS, action="append")
    p.add_argument("--cores", type=int, default=4)
    p.add_argument("--generations", type=int, default=4)
    p.add_argument("--individuals", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--link-bits", type=int, default=1024, help="ring link bits/cycle")
    p.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    args = p.parse_args(argv)
    try:
        _check_mirror()
        python = ensure_venv(args.venv)
    except MirrorMissing as exc:
        print(exc, file=sys.stderr)
        return 2
    runs = [(w, m, s) for w in (args.workload or ["gemm", "resnet18"])
            for m in (args.mode or (["lbl"] if w == "gemm" else list(MODES)))
            for s in (args.split or ["k"])]
    results = []
    for workload, mode, split in runs:
        r = run_stream(workload, args.cores, mode=mode, split=split, generations=args.generations,
                       individuals=args.individuals, seed=args.seed,
                       link_bits_per_cycle=args.link_bits, python=python)
        _print(r)
        results.append(r)
    sys.path.insert(0, str(HERE))
    from benchutil import RESULTS, machine, write_results
    key = ("workload", "mode", "split", "cores")
    try:  # keep earlier runs of other configurations: a ResNet-18 run takes many minutes
        old = json.loads((RESULTS / "stream_peer.json").read_text())["runs"]
    except (OSError, ValueError, KeyError):
        old = []
    new = {tuple(r[k] for k in key) for r in results}
    kept = [r for r in old if tuple(r.get(k) for k in key) not in new]
    path = write_results("stream_peer", {"machine": machine(), "runs": kept + results})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
