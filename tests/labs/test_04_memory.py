"""Lab 4 (memory hierarchy): the physics behind the sheet's claims, at small size.

* The DRAM bytes of A, B and C the executor moves for a tiled GEMM equal the reuse formula
  of docs/compiler.md ("Tiling"), written out here per loop order by hand.
* Double buffering never makes a run slower (total cycles), on the lab's workload and others.
* The sweep report's Pareto front equals a brute-force non-dominated filter of points.csv.
"""

from __future__ import annotations

import csv

import pytest
from labload import LABS, load_script

LAB = LABS / "04_memory"


# Reuse multipliers of A and B, and whether partial sums spill, per loop order (outermost
# first), when every loop has more than one trip. From the rule "operand X is fetched once per
# iteration of the loops outside X's innermost own loop that do not index X" (docs/compiler.md):
#   A is indexed by m, k; B by k, n; psums stay on chip only when k is innermost.
HAND = {
    "mnk": ("n", "m", False),
    "nmk": ("n", "m", False),
    "mkn": (None, "m", True),
    "kmn": (None, "m", True),
    "nkm": ("n", None, True),
    "knm": ("n", None, True),
}


@pytest.mark.parametrize("gemm, sram_kib", [((256, 1024, 1024), 128), ((384, 768, 1536), 64)])
def test_gemm_dram_bytes_equal_hand_formula(gemm, sram_kib):
    tiling = load_script(LAB, "tiling")
    m, n, k = gemm
    for order, (a_by, b_by, spill) in HAND.items():
        tile, measured, cycles, chip = tiling.run(m, n, k, order, [f"sram.capacity_kib={sram_kib}"])
        assert tile["order"] == order
        trips = {"m": -(-m // tile["m"]), "n": -(-n // tile["n"]), "k": -(-k // tile["k"])}
        assert min(trips.values()) > 1, f"{order}: pick a GEMM whose every loop has >1 trip"
        acc = chip.array.acc_bits // 8
        a = m * k * (trips[a_by] if a_by else 1)
        b = k * n * (trips[b_by] if b_by else 1)
        c = m * n + (2 * (trips["k"] - 1) * m * n * acc if spill else 0)
        assert measured == {"A": a, "B": b, "C": c}, (order, tile, measured)
        # the sheet's own formula agrees with the hand table
        f = tiling.formula(m, n, k, tile, 1, acc)
        assert (f["A"], f["B"], f["C"]) == (a, b, c)
        # the tile fits one buffer of each scratchpad (half of it: double-buffered)
        half = sram_kib * 1024 // 2
        assert tile["m"] * tile["k"] <= half and tile["k"] * tile["n"] <= half
        assert tile["m"] * tile["n"] * acc <= half


@pytest.mark.parametrize("model, params", [("gpt2_block", {"seq_len": 64}),
                                           ("gpt2_block", {"seq_len": 16}),
                                           ("resnet18", {"image_size": 32})])
def test_double_buffering_never_increases_cycles(model, params):
    db = load_script(LAB, "double_buffer")
    for sets in ([], ["sram.capacity_kib=64"]):
        _, runs = db.run_pair(model, params, sets)
        on, off = runs[True].totals, runs[False].totals
        assert on["cycles"] <= off["cycles"], (model, params, sets, on["cycles"], off["cycles"])
        # the layers' windows add up to the run, and every window is compute + stalls
        for r in runs.values():
            layers = [l for l in r.layers if l.cycles is not None]
            assert sum(l.cycles for l in layers) == r.totals["cycles"]
            for l in layers:
                assert l.cycles == (l.compute_cycles + l.stall_dram_cycles + l.stall_link_cycles
                                    + l.stall_sram_cycles + l.stall_vector_cycles)


def _non_dominated(rows, objectives):
    ok = [r for r in rows if r["status"] == "done" and r["feasible"] == "true"]
    front = set()
    for r in ok:
        x = [float(r[o]) for o in objectives]
        if not any(all(float(q[o]) <= v for o, v in zip(objectives, x))
                   and any(float(q[o]) < v for o, v in zip(objectives, x))
                   for q in ok if q is not r and q["workload"] == r["workload"]):
            front.add(r["id"])
    return front


def test_sweep_pareto_front_equals_brute_force(tmp_path):
    from npulab.sweep import load_spec, run_sweep, write_report
    text = (LAB / "sweep.toml").read_text()
    # the lab's spec at a smaller size: 2 x 2 x 2 points, 16 tokens
    text = text.replace("seq_len = 64", "seq_len = 16").replace(
        "values = [32, 64, 128, 256]", "values = [32, 128]")
    spec_path = tmp_path / "sweep.toml"
    spec_path.write_text(text)
    spec = load_spec(spec_path)
    out = tmp_path / "out"
    summary = run_sweep(spec, out, executor="serial")
    assert summary.done == 8 and summary.failed == 0
    write_report(out)
    with open(out / "points.csv", newline="") as fh:
        points = list(csv.DictReader(fh))
    with open(out / "pareto.csv", newline="") as fh:
        pareto = {r["id"] for r in csv.DictReader(fh)}
    assert len(points) == 8
    assert list(spec.objectives) == [("latency_s", "min"), ("area_mm2", "min")]
    objectives = [metric for metric, _ in spec.objectives]
    assert pareto == _non_dominated(points, objectives)
    assert {r["id"] for r in points if r["pareto"] == "true"} == pareto
    # the lab's show_sweep.py recomputes the same front
    assert load_script(LAB, "show_sweep").non_dominated(points, objectives) == pareto


def test_the_sheet_quotes_the_peak_bandwidth_the_tool_prints():
    # issue 21 item 20: the sheet said 25.6 GB/s where npulab prints DDR4-3200's 25.4 GB/s
    # (DRAMsim3's tCK of 0.63 ns); every "<preset>, X GB/s peak" it quotes must be the preset's.
    import re

    from hw.memory.dram import DRAM_PRESETS
    text = (LAB / "README.md").read_text(encoding="utf-8")
    quoted = re.findall(r"`([a-z0-9-]+)`, ([0-9.]+) GB/s peak", text)
    assert quoted
    for preset, gbps in quoted:
        assert float(gbps) == round(DRAM_PRESETS[preset].peak_gbps, 1), preset


def test_step5_the_pipeline_trades_latency_for_inputs_per_second_as_the_sheet_says():
    """Question 10's numbers: one input's pass is the stages' sum, the rate one per slowest
    stage, and its gain over the split the split's cycles over that period (1.28x)."""
    from compiler.frontends import zoo
    from compiler.options import CompileOptions
    from hw.configfile import load_chip_config
    from npulab.simulate import simulate
    chip, graph = load_chip_config("tpu_v4_like"), zoo.get("resnet18")
    split = simulate(graph, chip).totals
    piped = simulate(graph, chip, options=CompileOptions(placement="pipeline", stages=2)).totals
    stages = piped["pipeline_stage_cycles"]
    assert piped["cycles"] == sum(stages) > split["cycles"]
    assert piped["pipeline_period_cycles"] == max(stages) < split["cycles"]
    text = (LAB / "README.md").read_text()
    gain = split["cycles"] / piped["pipeline_period_cycles"]
    assert f"finishes {gain:.2f}\n    times as many inputs" in text
    assert f"take {stages[0]:,} and {stages[1]:,}" in text
