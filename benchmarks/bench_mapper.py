"""Mapper speed and search quality (issue 9): mappings costed per second on one core, the best
mapping per objective, and the pruned search against the exhaustive optimum.

Workload: ResNet-18 conv2_1 (56x56, 64 -> 64 channels, 3x3, pad 1, batch 1) on the default chip
(``sim_configs/default.toml``: a TPU-like 32x32 weight-stationary int8 array at 1 GHz,
512/512/256 KiB scratchpads, one DDR4-3200 channel), energies from the 45 nm table.

1. **Speed.** ``map_op`` on conv2_1, exhaustive over its whole space (19,980 mappings), best of
   5 after a warm-up (JIT cache load), all three objectives; plus the same conv lowered as
   ``im2col`` (a 3136 x 64 x 576 GEMM, about 0.7 M mappings) for a longer steady-state run.
   Mappings per second counts every (tile, loop order, dataflow) the Numba kernel costs,
   with the Python around it (space building, selection of the best) included.
2. **Quality.** On ResNet-18's conv/fc layers (im2col and direct) and a 16x16 array with
   32 KiB scratchpads (where capacity binds), the pruned search (grid + ``--samples`` samples +
   refinement, forced with ``exhaustive_limit=0``) against the exhaustive optimum: how often it
   misses and by how much.
3. **Peer.** ``--zigzag PYTHON`` runs ``benchmarks/zigzag_peer.py --json`` with ZigZag's own
   interpreter (its venv, see that script) and prints its numbers next to ours.

Run from the repo root (about 30 s)::

    python benchmarks/bench_mapper.py [--samples N] [--zigzag benchmarks/.venv-zigzag/bin/python]

Writes ``benchmarks/results/bench_mapper.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchutil import best_of, machine, table, write_results

from compiler.frontends import zoo
from compiler.ir import conv2d
from compiler.backends.systolic import tile_problem
from compiler.options import CompileOptions
from compiler.mapper import map_op
from hw.chip import ChipConfig
from hw.memory.sram import SramConfig
from hw.systolic.config import ArrayConfig

GOAL = 50_000          # mappings per second per core (issue 9)
ZIGZAG_RATE = 200      # ZigZag's rate quoted in issue 9, until --zigzag measures it


def speed(chip: ChipConfig) -> dict:
    op = conv2d("conv2_1", 56, 64, 64, 3, padding=1)
    out = {}
    rows = []
    for lowering in ("direct", "im2col"):
        p = tile_problem(op, chip, CompileOptions(conv_lowering=lowering))
        for objective in ("latency", "energy", "edp"):
            limit = 10 ** 7
            map_op(p, chip, objective, exhaustive_limit=limit)        # warm-up
            results = []
            seconds = best_of(lambda: results.append(
                map_op(p, chip, objective, exhaustive_limit=limit)), repeat=5 if
                lowering == "direct" else 2, warmup=0)
            r = results[-1]
            rate = r.evaluated / seconds
            out[f"{lowering}/{objective}"] = {
                "evaluated": r.evaluated, "space": r.space_size, "exhaustive": r.exhaustive,
                "seconds": seconds, "mappings_per_s": rate, "best": r.best.describe(),
                "latency_cycles": r.best.latency_cycles, "energy_j": r.best.energy_j,
                "edp_js": r.best.edp_js, "dram_bytes": r.best.dram_bytes}
            rows.append((lowering, objective, f"{r.evaluated:,}", f"{seconds:.4f}",
                         f"{rate:,.0f}", r.best.describe(), f"{r.best.latency_cycles:,}",
                         f"{r.best.energy_j * 1e6:.1f}", f"{r.best.dram_bytes:,}"))
    print("1. speed: conv2_1 on the default chip (32x32 WS), exhaustive, one core")
    print(table(("lowering", "objective", "evaluated", "seconds", "mappings/s", "best mapping",
                 "latency cyc", "energy uJ", "DRAM B"), rows))
    worst = min(v["mappings_per_s"] for v in out.values())
    print(f"   slowest rate {worst:,.0f} mappings/s: goal {GOAL:,} "
          f"({'met' if worst >= GOAL else 'MISSED'}); {worst / ZIGZAG_RATE:,.0f}x ZigZag's "
          f"~{ZIGZAG_RATE}/s\n")
    return out


def quality(samples: int) -> dict:
    graph = zoo.get("resnet18")
    chips = {"default 32x32": ChipConfig(model_input="dram", model_output="dram"),
             "16x16, 32 KiB": ChipConfig(array=ArrayConfig(rows=16, cols=16),
                                         ifmap_sram=SramConfig(capacity_kib=32),
                                         filter_sram=SramConfig(capacity_kib=32),
                                         ofmap_sram=SramConfig(capacity_kib=32))}
    cases = []
    seen = set()
    for chip_name, chip in chips.items():
        for lowering in ("direct", "im2col"):
            for op in graph.ops:
                if op.gemm_shape() is None:
                    continue
                p = tile_problem(op, chip, CompileOptions(conv_lowering=lowering))
                key = (chip_name, p.lowering, p.count, p.m, p.n, p.k, p.in_w, p.kernel_h,
                       p.stride_h)
                if key in seen:
                    continue
                seen.add(key)
                for objective in ("latency", "energy", "edp"):
                    full = map_op(p, chip, objective, exhaustive_limit=10 ** 8)
                    pruned = map_op(p, chip, objective, exhaustive_limit=0, samples=samples)
                    cases.append({"chip": chip_name, "op": op.name, "lowering": p.lowering,
                                  "objective": objective, "space": full.space_size,
                                  "pruned_evaluated": pruned.evaluated,
                                  "gap": pruned.best.objective / full.best.objective - 1})
    misses = [c for c in cases if c["gap"] > 1e-12]
    worst = max(cases, key=lambda c: c["gap"])
    frac = sum(c["pruned_evaluated"] for c in cases) / sum(c["space"] for c in cases)
    print(f"2. quality: pruned ({samples:,} samples) vs exhaustive, {len(cases)} cases "
          f"(ResNet-18 layer shapes x 2 chips x 2 lowerings x 3 objectives)")
    print(f"   pruned search costed {frac:.1%} of the mappings; it missed the optimum in "
          f"{len(misses)} of {len(cases)} cases; mean gap of the misses "
          f"{(sum(c['gap'] for c in misses) / len(misses) if misses else 0):.3%}, worst "
          f"{worst['gap']:.3%} ({worst['op']}, {worst['lowering']}, {worst['chip']}, "
          f"{worst['objective']})\n")
    return {"cases": cases, "misses": len(misses), "worst_gap": worst["gap"],
            "fraction_costed": frac}


def zigzag(python: str | None, ours: dict) -> dict | None:
    """ZigZag side by side: runs the peer script in ZigZag's own venv (it prints JSON) and
    prints its search next to npulab's on the same layer, array, memories and 45 nm energies.
    npulab's best mapping per objective is also run through the compiler, the executor and the
    metrics (a one-layer graph, input and output in DRAM), so its real cycles and energy sit
    next to the mapper's estimate."""
    print("3. peer: ZigZag (LOMA) on the same layer and chip")
    if python is None:
        print("   not run: pass --zigzag PATH/TO/zigzag-venv/bin/python "
              "(see benchmarks/zigzag_peer.py)\n")
        return None
    script = Path(__file__).resolve().parent / "zigzag_peer.py"
    t0 = time.perf_counter()
    proc = subprocess.run([python, str(script), "--json"], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"   zigzag_peer.py failed ({proc.returncode}): {proc.stderr.strip()[-400:]}\n")
        return None
    data = json.loads(proc.stdout)
    wall = time.perf_counter() - t0
    from compiler.ir import Graph
    from npulab.metrics import compute_metrics
    from npulab.simulate import simulate
    chip = ChipConfig(model_input="dram", model_output="dram")
    graph = Graph("conv2_1", (conv2d("conv2_1", 56, 64, 64, 3, padding=1),))
    rows, out = [], {}
    for objective, zz_key in (("latency", "latency"), ("energy", "energy"), ("edp", "EDP")):
        z = data["runs"].get(zz_key) or data["runs"].get(objective)
        n = ours[f"direct/{objective}"]
        run = simulate(graph, chip, options=CompileOptions(map=f"best-{objective}", tech="45nm",
                                                           keep_on_chip=False))
        met = compute_metrics(run, "45nm").network
        out[objective] = {"zigzag": {k: z[k] for k in ("mappings_evaluated", "search_s",
                                                       "mappings_per_s", "latency_cycles",
                                                       "energy_pj")},
                          "npulab_executor_cycles": run.totals["cycles"],
                          "npulab_executor_energy_j": met["energy_j"],
                          "speed_ratio": n["mappings_per_s"] / z["mappings_per_s"]}
        rows.append((objective, "ZigZag", f"{z['mappings_evaluated']:,}", f"{z['search_s']:.2f}",
                     f"{z['mappings_per_s']:,.0f}", f"{z['latency_cycles']:,.0f}", "",
                     f"{z['energy_pj'] / 1e6:.1f}", ""))
        rows.append(("", "npulab", f"{n['evaluated']:,}", f"{n['seconds']:.4f}",
                     f"{n['mappings_per_s']:,.0f}", f"{n['latency_cycles']:,}",
                     f"{run.totals['cycles']:,}", f"{n['energy_j'] * 1e6:.1f}",
                     f"{met['energy_j'] * 1e6:.1f}"))
    print(f"   zigzag-dse {data['zigzag_version']}, lpf_limit {data['lpf_limit']}, whole peer "
          f"process {wall:.1f} s; determinism (two latency searches): "
          f"{'same result' if data['determinism']['same_result'] else 'DIFFERENT results'}")
    print(table(("objective", "tool", "evaluated", "search s", "mappings/s", "latency cyc",
                 "executor cyc", "energy uJ", "executor uJ"), rows))
    ratio = min(v["speed_ratio"] for v in out.values())
    print(f"   npulab costs mappings {ratio:,.0f}x faster than ZigZag (slowest objective); a "
          f"ZigZag mapping is a LOMA loop order with its memory allocation, an npulab mapping "
          f"a tile (g, m, n, k) x loop order x dataflow\n")
    data["side_by_side"] = out
    return data


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=2000,
                    help="samples of the pruned search in the quality check (default 2000; "
                         "map_op's default is 20000)")
    ap.add_argument("--zigzag", metavar="PYTHON", help="ZigZag venv's python for the peer run")
    ap.add_argument("--skip-quality", action="store_true")
    args = ap.parse_args()
    chip = ChipConfig()
    results = {"machine": machine(), "speed": speed(chip)}
    if not args.skip_quality:
        results["quality"] = quality(args.samples)
    results["zigzag"] = zigzag(args.zigzag, results["speed"])
    path = write_results("bench_mapper", results)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
