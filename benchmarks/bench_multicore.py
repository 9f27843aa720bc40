"""Many cores: npulab next to Stream on the same 4-core workload, and the issue-24 speed goals.

    python benchmarks/bench_multicore.py [--resnet] [--no-peer] [--repeat N] [--points N]
                                         [--pipeline]

1. **Peer.** The same 4-core chip in both tools (``benchmarks/stream_inputs/``: four 32x32 int8
   cores, one DDR4-3200 channel at 25.6 GB/s, 1 GHz, a ring of 1024-bit links; npulab: the
   default chip with ``chip.cores = 4``, no L2, a 2 x 2 mesh of 128 B/cycle links, tensors in
   DRAM) on a 512 x 1024 x 1024 GEMM (and, with ``--resnet``, ResNet-18 layer by layer and
   fused: Stream takes ~20 min per mode). Printed side by side: each tool's latency, its ratio,
   DRAM bytes and simulation time (Stream's: its ``optimize_allocation_ga`` call, venv and
   imports excluded; npulab's: ``simulate`` in-process, warm). Stream runs in its own venv
   (``benchmarks/stream_peer.py``, created on first use from the local mirror).
2. **Speed goals** (issue 24), in-process, best of ``--repeat``: ResNet-50 on the default chip
   (goal < 0.3 s) and on ``a100_like`` (goal < 2 s), each run cold (every memoised tiling and
   timing forgotten first, as in a new process; the kernels compiled) and repeated warm; and
   ``bench_sweep.py``'s design points (ResNet-18 at 32x32) a second in one process (``--points``
   of its 1,000, spread over every axis; goal >= 25 points/s on 2 cores, i.e. >= 12.5 per
   core; ``bench_sweep.py`` itself runs them on every core).

3. **Pipelined placement** (``--pipeline``): docs/multicore.md's table, each preset's ResNet
   split over every core and pipelined in the planner's stages.

Results: ``benchmarks/results/bench_multicore.json``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchutil import write_results  # noqa: E402
from compiler.frontends import zoo  # noqa: E402
from compiler.ir import Gemm, Graph  # noqa: E402
from hw.configfile import load_chip_config  # noqa: E402
from npulab.simulate import simulate  # noqa: E402

#: npulab's side of the peer's chip (stream_peer.py's inputs).
PEER_CHIP = ['chip.cores=4', 'chip.model_input="dram"', 'chip.model_output="dram"',
             'noc.topology="mesh"', 'noc.link_bytes_per_cycle=128']
GEMM = Graph("gemm_512x1024x1024", (Gemm(name="gemm", m=512, n=1024, k=1024),))


def _best(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def npulab_side(graph: Graph, repeat: int) -> dict:
    chip = load_chip_config(overrides=PEER_CHIP)
    one = load_chip_config(overrides=PEER_CHIP[1:])
    simulate(graph, chip)                                 # warm (kernel compile)
    wall, r = _best(lambda: simulate(graph, chip), repeat)
    r1 = simulate(graph, one)
    t = r.totals
    return {"cycles": t["cycles"], "one_core_cycles": r1.totals["cycles"],
            "dram_bytes": t["dram_read_bytes"] + t["dram_write_bytes"], "wall_s": wall,
            "core_utilization_mean_pct": t["core_utilization_mean_pct"]}


def peer(resnet: bool, no_peer: bool, repeat: int) -> dict:
    out = {}
    jobs = [("gemm", GEMM, "lbl")] + ([("resnet18", zoo.get("resnet18"), "lbl"),
                                      ("resnet18", zoo.get("resnet18"), "fused")] if resnet else [])
    for name, graph, mode in jobs:
        ours = npulab_side(graph, repeat)
        row = {"npulab": ours}
        if not no_peer:
            from stream_peer import run_stream
            theirs = run_stream(name, cores=4, mode=mode)
            row["stream"] = {"cycles": theirs["latency_cycles"], "wall_s": theirs["stream_wall_s"],
                             "energy_pj": theirs["energy_pj"]}
        out[f"{name} {mode}"] = row
        s = row.get("stream")
        print(f"{name:9s} {mode:5s} npulab {ours['cycles']:>10,} cycles "
              f"(1 core {ours['one_core_cycles']:,}; DRAM {ours['dram_bytes']:,} B) in "
              f"{ours['wall_s']:.3f} s"
              + (f" | Stream {s['cycles']:>10,} cycles in {s['wall_s']:.1f} s | latency "
                 f"npulab/Stream {ours['cycles'] / s['cycles']:.2f}, sim time Stream/npulab "
                 f"{s['wall_s'] / ours['wall_s']:.0f}x" if s else ""))
    return out


def _cold() -> None:
    """Forget every memoised result (tilings, tile timings, energy tables), as a new process
    or a new design point starts: the speed goals are for one run, not a repeated one."""
    for obj in gc.get_objects():
        if isinstance(obj, functools._lru_cache_wrapper):
            obj.cache_clear()


def speed(repeat: int, points: int) -> dict:
    out = {}
    r50 = zoo.get("resnet50")
    for name, chip, goal in (("resnet50 default", load_chip_config(), 0.3),
                             ("resnet50 a100_like", load_chip_config("a100_like"), 2.0)):
        simulate(r50, chip)                       # kernels compiled and loaded
        warm, _ = _best(lambda: simulate(r50, chip), repeat)
        cold, _ = _best(lambda: (_cold(), simulate(r50, chip)), repeat)
        out[name] = {"wall_s": cold, "warm_wall_s": warm, "goal_s": goal}
        print(f"{name:22s} {cold:.3f} s (goal < {goal} s){'' if cold < goal else '  MISSED'}; "
              f"the same run repeated {warm:.3f} s")
    # bench_sweep.py's design points (ResNet-18 at 32x32, native timing), serially in one
    # process: every point a new chip, so nothing is memoised across points but tile shapes
    from bench_sweep import spec_for
    from npulab.sweep.evaluation import evaluate
    from npulab.sweep.points import expand, point_job
    spec = spec_for()
    every = expand(spec)
    jobs = [point_job(spec, p) for p in every[::max(1, len(every) // points)][:points]]
    evaluate(jobs[0])
    t = time.perf_counter()
    for job in jobs:
        evaluate(job)
    per_s = len(jobs) / (time.perf_counter() - t)
    out["sweep points/s (1 process)"] = {"points": len(jobs), "points_per_s": per_s,
                                         "goal_2_cores": 25}
    print(f"sweep (bench_sweep.py) {per_s:.1f} points/s in one process over {len(jobs)} points "
          f"(x2 cores ~ {2 * per_s:.1f}; goal >= 25 on 2 cores)")
    return out


#: docs/multicore.md's table: the split and the pipelined placement (``--pipeline``).
PIPELINE_ROWS = (("tpu_v4_like", "resnet18"), ("tpu_v4_like", "resnet50"),
                 ("a100_like", "resnet18"), ("a100_like", "resnet50"),
                 ("mi210_like", "resnet50"), ("meteor_lake_npu_like", "resnet50"))


def pipeline() -> dict:
    """Each preset's ResNet split over all its cores and pipelined (the planner's stages):
    latency, period, the throughput gain, and the pipelined run's wall time."""
    from compiler.options import CompileOptions
    out = {}
    for preset, model in PIPELINE_ROWS:
        chip, graph = load_chip_config(preset), zoo.get(model)
        split = simulate(graph, chip).totals["cycles"]
        wall, r = _best(lambda: simulate(graph, chip,
                                         options=CompileOptions(placement="pipeline")), 1)
        t = r.totals
        gain = split / t["pipeline_period_cycles"]
        out[f"{preset} {model}"] = {"split_cycles": split, "stages": t["pipeline_stages"],
                                    "cores_per_stage": t["pipeline_cores_per_stage"],
                                    "latency_cycles": t["cycles"],
                                    "period_cycles": t["pipeline_period_cycles"],
                                    "gain": gain, "wall_s": wall}
        print(f"| `{preset}` | {model} | {split:,} | {t['pipeline_stages']} x "
              f"{t['pipeline_cores_per_stage']} | {t['cycles']:,} | "
              f"{t['pipeline_period_cycles']:,} | {gain:.2f}x |   ({wall:.2f} s)")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--resnet", action="store_true", help="also ResNet-18 (Stream ~20 min/mode)")
    ap.add_argument("--no-peer", action="store_true", help="skip Stream")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--points", type=int, default=50, help="sweep points timed (default 50)")
    ap.add_argument("--pipeline", action="store_true",
                    help="also docs/multicore.md's split-against-pipelined table")
    args = ap.parse_args(argv)
    doc = {"peer": peer(args.resnet, args.no_peer, args.repeat), "speed": speed(args.repeat, args.points)}
    if args.pipeline:
        doc["pipeline"] = pipeline()
    print(f"wrote {write_results('bench_multicore', doc).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
