"""The vector engine: what it adds to a run, and what it costs to simulate (issue 23).

For CNNs and transformer layers on the default chip, side by side:

* ``ideal``: the vector engine ideal (vector ops cost nothing), which is exactly the program and
  the numbers npulab produced before it had a vector engine (a test pins them);
* ``real``: the default 32-lane engine.

Printed per workload: cycles, DRAM bytes and energy of both, the share of the run the vector
engine was busy, and the simulation time of both (best of 3, warm): the issue's goal is a real
run no more than 20 % slower to simulate than the ideal one for the CNNs.

Run from the repo root::

    python benchmarks/bench_vector.py

Writes ``benchmarks/results/bench_vector.json``.
"""

from __future__ import annotations

from dataclasses import replace

from benchutil import best_of, machine, table, write_results

from compiler.frontends import zoo
from hw.configfile import load_chip_config
from hw.vector.config import VectorConfig
from npulab.simulate import simulate

WORKLOADS = [("resnet50", {}), ("mobilenetv2", {}), ("resnet18", {}),
             ("bert_base_layer", {"seq_len": 128}), ("bert_base_layer", {"seq_len": 512}),
             ("gpt2_block", {"seq_len": 256}), ("gpt2_block", {"seq_len": 1024})]


def _numbers(run) -> dict:
    t = run.totals
    m = run.metrics()
    return {"cycles": t["cycles"], "dram_bytes": t["dram_read_bytes"] + t["dram_write_bytes"],
            "energy_uj": m.network["energy_j"] * 1e6,
            "vector_busy_pct": 100.0 * t.get("vector_busy_cycles", 0) / t["cycles"]}


def main() -> None:
    chip = load_chip_config()
    ideal_chip = replace(chip, vector=VectorConfig(ideal=True))
    rows, out = [], []
    for name, params in WORKLOADS:
        graph = zoo.get(name, **params)
        label = name + "".join(f" {k}={v}" for k, v in params.items())
        real, ideal = simulate(graph, chip), simulate(graph, ideal_chip)
        r, i = _numbers(real), _numbers(ideal)
        t_real = best_of(lambda: simulate(graph, chip), repeat=3)
        t_ideal = best_of(lambda: simulate(graph, ideal_chip), repeat=3)
        rows.append([label, f"{i['cycles']:,}", f"{r['cycles']:,}",
                     f"{r['cycles'] / i['cycles']:.2f}x", f"{r['dram_bytes'] / i['dram_bytes']:.2f}x",
                     f"{r['energy_uj'] / i['energy_uj']:.2f}x", f"{r['vector_busy_pct']:.1f}",
                     f"{t_ideal:.3f}", f"{t_real:.3f}", f"{t_real / t_ideal:.2f}x"])
        out.append({"workload": label, "ideal": i, "real": r, "sim_s_ideal": t_ideal,
                    "sim_s_real": t_real})
    print(table(["workload", "cycles ideal", "cycles real", "cycles", "DRAM B", "energy",
                 "vec busy %", "sim s ideal", "sim s real", "sim time"], rows))
    write_results("bench_vector", {"machine": machine(), "rows": out})


if __name__ == "__main__":
    main()
