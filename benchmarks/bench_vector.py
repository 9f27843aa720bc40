"""The vector engine and fusion: what they add to a run, and what they cost to simulate
(issue 23).

For CNNs and transformer layers on the default chip, side by side:

* ``ideal``: the vector engine ideal (vector ops cost nothing), which is exactly the program and
  the numbers npulab produced before it had a vector engine (a test pins them);
* ``unfused``: the default 32-lane engine, every op alone (``--no-fusion``);
* ``fused``: the default engine with fusion (the default run).

Printed per workload: cycles, DRAM bytes and energy of the three, the share of the run the
vector engine was busy, and the simulation time (best of 3, warm): the issue's goal is a
default (fused) run no more than 20 % slower to simulate than the ideal one for the CNNs.
Transformer blocks run at 128..4096 tokens (``transformer_block``, BERT-base/GPT-2 shaped).

Run from the repo root::

    python benchmarks/bench_vector.py [--quick]

Writes ``benchmarks/results/bench_vector.json``.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from benchutil import best_of, machine, table, write_results

from compiler.frontends import zoo
from compiler.options import CompileOptions
from hw.configfile import load_chip_config
from hw.vector.config import VectorConfig
from npulab.simulate import simulate

WORKLOADS = [("resnet50", {}), ("mobilenetv2", {}), ("resnet18", {}),
             ("bert_base_layer", {"seq_len": 128}), ("bert_base_layer", {"seq_len": 512}),
             ("gpt2_block", {"seq_len": 1024}),
             *(("transformer_block", {"seq_len": s}) for s in (128, 256, 512, 1024, 2048, 4096))]
QUICK = WORKLOADS[:6]
UNFUSED = CompileOptions(fusion=False)


def _numbers(run) -> dict:
    t = run.totals
    m = run.metrics()
    return {"cycles": t["cycles"], "dram_bytes": t["dram_read_bytes"] + t["dram_write_bytes"],
            "energy_uj": m.network["energy_j"] * 1e6,
            "vector_busy_pct": 100.0 * t.get("vector_busy_cycles", 0) / t["cycles"]}


def main() -> None:
    chip = load_chip_config()
    ideal_chip = replace(chip, vector=VectorConfig(ideal=True))
    rows, fusion_rows, out = [], [], []
    for name, params in (QUICK if "--quick" in sys.argv else WORKLOADS):
        graph = zoo.get(name, **params)
        label = name + "".join(f" {k}={v}" for k, v in params.items())
        runs = {"ideal": lambda: simulate(graph, ideal_chip),
                "unfused": lambda: simulate(graph, chip, options=UNFUSED),
                "fused": lambda: simulate(graph, chip)}
        n = {k: _numbers(f()) for k, f in runs.items()}
        # best of 3 where the goal is stated (CNNs), one run for the long transformer blocks
        # (the runs above warmed the caches)
        repeat = 1 if name == "transformer_block" else 3
        t = {k: best_of(f, repeat=repeat, warmup=0) for k, f in runs.items()}
        i, u, f = n["ideal"], n["unfused"], n["fused"]
        rows.append([label, f"{i['cycles']:,}", f"{u['cycles']:,}", f"{f['cycles']:,}",
                     f"{f['cycles'] / i['cycles']:.2f}x", f"{f['vector_busy_pct']:.1f}",
                     f"{t['ideal']:.3f}", f"{t['fused']:.3f}", f"{t['fused'] / t['ideal']:.2f}x",
                     f"{t['unfused'] / t['ideal']:.2f}x"])
        fusion_rows.append([label, f"{u['cycles'] / f['cycles']:.2f}x",
                            f"{u['dram_bytes']:,}", f"{f['dram_bytes']:,}",
                            f"{u['dram_bytes'] / f['dram_bytes']:.2f}x",
                            f"{u['energy_uj']:,.0f}", f"{f['energy_uj']:,.0f}",
                            f"{u['energy_uj'] / f['energy_uj']:.2f}x"])
        out.append({"workload": label, **n, **{f"sim_s_{k}": v for k, v in t.items()}})
    print(table(["workload", "cycles ideal", "cycles unfused", "cycles fused", "fused/ideal",
                 "vec busy %", "sim s ideal", "sim s fused", "sim fused/ideal",
                 "sim unfused/ideal"], rows))
    print()
    print(table(["workload", "cycles unfused/fused", "DRAM B unfused", "DRAM B fused",
                 "DRAM unfused/fused", "energy uJ unfused", "energy uJ fused",
                 "energy unfused/fused"], fusion_rows))
    write_results("bench_vector", {"machine": machine(), "rows": out})


if __name__ == "__main__":
    main()
