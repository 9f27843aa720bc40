"""Lab 1 (examples/labs/01_dataflows): the sheet's claims against closed forms and the model.

* cycles of every (layer, dataflow) equal the start-time recurrences of docs/systolic.md,
  written out here fold by fold; utilization = MACs / (PEs x cycles);
* SRAM accesses per operand equal the reuse formulas (each operand read once per fold of the
  dimension it is not reused over; WS/IS read-modify-write partial sums once per extra K fold);
* the winners the sheet names (OS on conv1, WS on layer4.1.conv2, IS on the MobileNetV2
  projection) follow from those formulas;
* on-chip energy of a layer equals the sum of its actions priced by hand from the energy table;
* the RTL waveform of the tiny GEMM (``npulab rtl wave``), read back by the lab's VCD reader,
  shows each output port valid in the cycles and with the values of the register model's trace,
  which equal a @ b; the OS first-output cycle is K + R - 1 + j.
"""

from __future__ import annotations

from math import ceil

import numpy as np
import pytest
from labload import LABS, load_script

LAB = LABS / "01_dataflows"


dataflows = load_script(LAB, "dataflows")
vcd_summary = load_script(LAB, "vcd_summary")
trace = load_script(LAB, "trace")

R = C = 16


def _folds(count, rows_dim, cols_dim, rows, cols):
    """(rows used, cols used) per fold in the model's order: instance, column tile, row tile."""
    out = []
    for _ in range(count):
        for c0 in range(0, cols_dim, cols):
            for r0 in range(0, rows_dim, rows):
                out.append((min(rows, rows_dim - r0), min(cols, cols_dim - c0)))
    return out


def closed_form_cycles(df: str, count: int, m: int, n: int, k: int, rows=R, cols=C) -> int:
    """docs/systolic.md: OS S_f = f max(T, R), end_f = S_f + T + 2R + cu - 2; WS/IS
    W_f = max(W_{f-1} + R, S_{f-1} + C - 1), S_f = max(S_{f-1} + T, W_f + 1),
    end_f = S_f + T + R + cu - 1 (W_0 = 0, S_0 = 1); cycles = max end_f."""
    if df == "os":
        t, folds = k, _folds(count, m, n, rows, cols)
        return max(f * max(t, rows) + t + 2 * rows + cu - 2 for f, (_, cu) in enumerate(folds))
    space = (k, n, m) if df == "ws" else (k, m, n)  # rows hold, cols hold, streamed
    t, folds = space[2], _folds(count, space[0], space[1], rows, cols)
    w, s, end = 0, 1, 0
    for f, (_, cu) in enumerate(folds):
        if f:
            w_next = max(w + rows, s + cols - 1)
            s = max(s + t, w_next + 1)
            w = w_next
        end = max(end, s + t + rows + cu - 1)
    return end


def reuse_formulas(df: str, count: int, m: int, n: int, k: int, rows=R, cols=C) -> dict:
    """SRAM accesses per operand: an operand is re-read once per tile of the dimension it is
    not reused over; WS/IS write every partial sum once per K tile and read it back for all
    but the first."""
    if df == "os":
        return {"ifmap_reads": count * m * k * ceil(n / cols),
                "filter_reads": count * k * n * ceil(m / rows),
                "ofmap_writes": count * m * n, "ofmap_reads": 0}
    k_tiles = ceil(k / rows)
    psums = {"ofmap_writes": count * m * n * k_tiles,
             "ofmap_reads": count * m * n * (k_tiles - 1)}
    if df == "ws":
        return {"ifmap_reads": count * m * k * ceil(n / cols), "filter_reads": count * k * n,
                **psums}
    return {"ifmap_reads": count * m * k, "filter_reads": count * k * n * ceil(m / cols),
            **psums}


@pytest.fixture(scope="module")
def rows():
    return dataflows.run(R, C, "int8", "45nm")


def test_cycles_equal_the_closed_forms_and_utilization(rows):
    assert len(rows) == 15
    for r in rows:
        want = closed_form_cycles(r["dataflow"], r["count"], r["m"], r["n"], r["k"])
        assert r["cycles"] == want, (r["layer"], r["dataflow"])
        assert r["utilization_pct"] == pytest.approx(100 * r["macs"] / (R * C * r["cycles"]))
        assert r["macs"] == r["count"] * r["m"] * r["n"] * r["k"]


def test_sram_accesses_follow_the_reuse_formulas(rows):
    for r in rows:
        want = reuse_formulas(r["dataflow"], r["count"], r["m"], r["n"], r["k"])
        got = {key: r[key] for key in want}
        assert got == want, (r["layer"], r["dataflow"])


def test_each_dataflow_wins_where_the_sheet_says(rows):
    def best(layer):
        mine = [r for r in rows if r["layer"] == layer]
        return min(mine, key=lambda r: r["cycles"])["dataflow"]

    assert (best("conv1"), best("l4.1.conv2"), best("mb3.proj")) == ("os", "ws", "is")
    # fc and the depthwise conv: under 7 % utilization whatever the dataflow
    assert all(r["utilization_pct"] < 7 for r in rows if r["layer"] in ("fc", "mb3.dw"))
    lines = dataflows.winners(rows)
    assert lines[0].startswith("conv1       fastest OS ")
    assert lines[1].startswith("l4.1.conv2  fastest WS ")
    assert lines[2].startswith("mb3.proj    fastest IS ")


def test_on_chip_energy_is_the_actions_priced_by_hand(rows):
    from hw.energy import load_technology
    from npulab import load_chip_config

    tech = load_technology("45nm")
    for r in (x for x in rows if x["layer"] == "conv1"):
        chip = load_chip_config(None, ["array.rows=16", "array.cols=16",
                                       f"array.dataflow={r['dataflow']}"])
        per_mac_reg = (16 if r["dataflow"] == "os" else 8) + 32   # operands latched + acc
        pj = r["macs"] * (tech.mac_pj("int8", 32) + per_mac_reg * tech.register_pj_per_bit)
        for name, reads, writes in (("ifmap", r["ifmap_reads"] * 8, 0),
                                    ("filter", r["filter_reads"] * 8, 0),
                                    ("ofmap", r["ofmap_reads"] * 32, r["ofmap_writes"] * 32)):
            bank = int(chip.sram(name).capacity_kib * 1024) / chip.sram(name).banks
            pj += reads * tech.sram_pj_per_bit(bank) + writes * tech.sram_pj_per_bit(bank, True)
        static_j = dataflows.compute_metrics(
            dataflows.simulate(dataflows.layer_graph(["conv1"]), chip, timing="compute"),
            tech).network["energy_breakdown_j"]["static"]
        assert r["on_chip_energy_uj"] == pytest.approx(pj * 1e-6 + static_j * 1e6, rel=1e-9)


def test_bad_layer_name_is_one_line(capsys):
    assert dataflows.main(["--layers", "conv9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'conv9' is not a lab layer" in err


@pytest.mark.parametrize("df,k", [("os", 4), ("ws", 6)])
def test_waveform_matches_the_register_model(tmp_path, capsys, df, k):
    from npulab.cli import main

    assert main(["rtl", "wave", "--rows", "4", "--cols", "4", "--dataflow", df, "--m", "4",
                 "--k", str(k), "--n", "4", "-o", str(tmp_path)]) == 0
    capsys.readouterr()
    summary = vcd_summary.summarize(vcd_summary.read_vcd(
        tmp_path / f"{df}_4x4_int8_m4_k{k}_n4.vcd"))
    cfg, a, b, r = trace.trace_gemm(4, 4, df, 4, k, 4)
    assert np.array_equal(r.output, a.astype(np.int64) @ b.astype(np.int64))
    assert len(summary["pes"]) == 16 and summary["cycles"] >= r.counters.cycles
    for j, col in enumerate(summary["columns"]):
        valid = np.flatnonzero(r.trace_valid[:, j]).tolist()
        assert col["valid_cycles"] == valid
        assert col["values"] == [int(v) for v in r.trace_value[valid, j]]
        if df == "os":  # last operand reaches PE (R-1, j) at K-1 + R-1 + j; written next cycle
            assert col["first_valid"] == k + 4 - 1 + j
            assert col["values"] == [int(x) for x in (a @ b)[::-1, j]]  # bottom row first
