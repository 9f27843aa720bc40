"""Lab 6 (examples/labs/06_verification): the sheet's claims against arithmetic done by hand.

* each shipped mutation's first mismatch is the value its broken multiplier gives for the
  operands the waveform shows (unsigned product, product truncated to 8 bits, a negative row
  operand multiplied as zero), and the model's value is the true signed product;
* the lab's own mutation (product kept in 2P - 1 bits) is caught exactly in the cases that
  multiply -128 by -128, each such product off by 2**15 in the register it reaches;
* flip-flop counts from Yosys equal the model's and the closed forms of the PE registers;
  logic grows about linearly with PEs and more than 3x from int8 to int16.
"""

from __future__ import annotations


import pytest

from hw.systolic.config import ArrayConfig
from npulab.cli import main as npulab
from labload import LABS, load_script

LAB = LABS / "06_verification"


my_mutation = load_script(LAB, "my_mutation")
vcd_peek = load_script(LAB, "vcd_peek")
synth_scaling = load_script(LAB, "synth_scaling")


def _signed8(x: int) -> int:
    return ((x + 128) % 256) - 128


def _first_failure(tmp_path, capsys, dataflow: str, mutation: str):
    """Run the sheet's verify; return (rtl, model, PE (0,0) rows of the waveform, headers)."""
    assert npulab(["rtl", "verify", "--rows", "2", "--cols", "2", "--dataflow", dataflow,
                   "--cases", "1", "--mutate", mutation, "--vcd", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"FAIL {dataflow.upper()} 2x2 int8 acc32 wrap mutation={mutation}")
    rtl = int(out.split(": RTL ")[1].split(",")[0])
    model = int(out.split(", model ")[1].split()[0])
    vcd = vcd_peek.vcd_summary.read_vcd(tmp_path / f"{dataflow}_2x2_int8_case0.vcd")
    heads, rows = vcd_peek.peek(vcd, 0, 0, 0, vcd_peek.cycle_count(vcd) - 1)
    return rtl, model, heads, rows


def test_unsigned_multiply_is_the_unsigned_product(tmp_path, capsys):
    rtl, model, heads, rows = _first_failure(tmp_path, capsys, "os", "unsigned-multiply")
    a, b = rows[0][heads.index("a_in")], rows[0][heads.index("b_in")]
    assert model == a * b and a < 0 and b < 0
    assert rtl == (a % 256) * (b % 256) == rows[0][heads.index("acc (end)")]


def test_drop_negative_a_and_narrow_product(tmp_path, capsys):
    rtl, model, heads, rows = _first_failure(tmp_path / "d", capsys, "ws", "drop-negative-a")
    x, w = rows[-1][heads.index("x_in")], rows[-1][heads.index("active (end)")]
    assert x < 0 and rtl == 0 and model == x * w
    # the same first GEMM (seed 0) with the product cut to 8 bits
    rtl, model, heads, rows = _first_failure(tmp_path / "n", capsys, "ws", "narrow-product")
    x, w = rows[-1][heads.index("x_in")], rows[-1][heads.index("active (end)")]
    assert model == x * w and rtl == _signed8(x * w) == rows[-1][heads.index("psum (end)")]


def test_own_mutation_caught_exactly_when_min_times_min_occurs():
    cfg = ArrayConfig(rows=2, cols=2, dataflow="os")
    results = my_mutation.run(cfg, n=4, seed=0, stimulus="biased")
    assert [r["extreme_products"] for r in results] == [0, 0, 1, 2]
    for r in results:
        assert (r["mismatch"] is not None) == (r["extreme_products"] > 0)
        if r["mismatch"] is not None:  # each -128 x -128 product is 2**15 short
            diff = r["mismatch"].model - r["mismatch"].rtl
            assert diff > 0 and diff % 2**15 == 0
    uniform = my_mutation.run(cfg, n=2, seed=0, stimulus="uniform")
    assert all(r["extreme_products"] == 0 and r["mismatch"] is None for r in uniform)


def test_extreme_product_count_by_brute_force():
    import numpy as np

    cfg = ArrayConfig(rows=2, cols=2, dataflow="ws")
    rng = np.random.default_rng(3)
    for _ in range(20):
        a = rng.choice([-128, 0, 5], size=(2, 3, 4))
        b = rng.choice([-128, 1], size=(2, 4, 5))
        brute = sum(int(a[i, m, k] == -128 and b[i, k, n] == -128)
                    for i in range(2) for m in range(3) for k in range(4) for n in range(5))
        assert my_mutation.extreme_products(cfg, a, b) == brute


def test_flip_flops_and_scaling_relationships():
    reports = synth_scaling.run(synth_scaling.parse_designs("ws:1x1:int8,os:1x1:int8,"
                                                            "ws:1x1:int16"))
    ws8, os8, ws16 = reports
    # PE registers (hw/systolic/rtl/synth.py, expected_flip_flops): a lone WS PE keeps its
    # streamed valid bit, shadow and active with valid bits, and a 2P-bit psum; a lone OS PE
    # keeps acc and res (A bits each) and a 1-bit drain counter (its forwarded a, b drive nothing).
    for r, p, a in ((ws8, 8, 32), (ws16, 16, 64)):
        assert r["flip_flops"] == r["expected_flip_flops"] == 1 + 2 * (p + 1) + 2 * p
    assert os8["flip_flops"] == os8["expected_flip_flops"] == 2 * 32 + 1
    assert ws16["logic_cells"] > 3 * ws8["logic_cells"]
    lines = synth_scaling.relationships(reports)
    assert lines[0] == "flip-flops equal the model's count in 3 of 3 designs"
    assert lines[1] == ("WS 1x1 int16 vs int8: flip-flops 67 vs 35; more than 3x the logic "
                        "cells: yes")


def test_bad_inputs_are_one_line(capsys):
    assert synth_scaling.main(["--designs", "ws:9x9:int8"]) == 2
    assert "rows and cols must be in 1..8" in capsys.readouterr().err
    assert synth_scaling.main(["--designs", "xs:1x1:int8"]) == 2
    assert "expected DATAFLOW:RxC:PRECISION" in capsys.readouterr().err
    assert vcd_peek.main(["nope.vcd", "--pe", "1"]) == 2
    assert "--pe = '1': expected ROW,COL" in capsys.readouterr().err
    assert my_mutation.main(["--cases", "0"]) == 2
    assert "--cases = 0" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--rows", "9", "--cols", "9"]])
def test_my_mutation_refuses_big_arrays(argv, capsys):
    assert my_mutation.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "at most 64 PEs" in err
