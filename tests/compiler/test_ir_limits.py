"""Documented ranges of workload sizes and chip settings (issue 21 item 7): checked when the
input is read, so every frontend (zoo, SCALE-Sim CSV, ONNX, ``--gemm``/``--conv``) and every
config gets a one-line error naming the key, the value and the range instead of a simulation
that runs for hours. Property tests generate extreme values (huge, tiny, negative, nan, inf)
and assert an error or a valid op, never a hang (nothing is simulated here)."""

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.ir import (MAX_DIM, MAX_ELEMENTS, MAX_GRAPH_MACS, MAX_OP_MACS, Conv2d, Eltwise,
                         Gemm, Graph, IRError, Move)
from hw.configfile import load_chip_config
from hw.systolic.config import ConfigError
from npulab.cli import main

EXTREME = st.one_of(st.integers(-2, 4), st.integers(-10 ** 30, 10 ** 30),
                    st.sampled_from([MAX_DIM, MAX_DIM + 1, 10 ** 8, 10 ** 9, 10 ** 18, 2 ** 63]),
                    st.floats(allow_nan=True, allow_infinity=True), st.booleans())


def _accepts(value) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_DIM)


@settings(max_examples=60, deadline=None)
@given(m=EXTREME, n=EXTREME, k=EXTREME, batch=EXTREME)
def test_gemm_dims_in_range_or_one_line_error(m, n, k, batch):
    ok = all(_accepts(v) for v in (m, n, k, batch))
    try:
        g = Gemm(name="g", m=m, n=n, k=k, batch=batch)
    except IRError as exc:
        assert "\n" not in str(exc) and "Gemm 'g'" in str(exc)
        assert not ok or m * n * k * batch > MAX_OP_MACS
        return
    assert ok and g.macs <= MAX_OP_MACS


@settings(max_examples=40, deadline=None)
@given(h=EXTREME, c=EXTREME, kernel=st.integers(1, 3))
def test_conv_dims_in_range_or_one_line_error(h, c, kernel):
    try:
        op = Conv2d(name="c", in_h=h, in_w=8, in_channels=c, out_channels=8, kernel_h=kernel,
                    kernel_w=kernel)
    except IRError as exc:
        assert "\n" not in str(exc) and re.search(r"must be|does not fit|at most", str(exc))
        return
    assert _accepts(h) and _accepts(c) and op.macs <= MAX_OP_MACS


@pytest.mark.parametrize("make, pattern", [
    (lambda: Gemm(name="g", m=10 ** 8, n=10 ** 8, k=10 ** 8),       # issue 21: ran for minutes
     r"m = 100000000: must be an integer in 1\.\.16,777,216"),
    (lambda: Conv2d(name="c", in_h=10 ** 18, in_w=8, in_channels=3, out_channels=8,
                    kernel_h=3, kernel_w=3), r"in_h = 1000000000000000000: must be an integer"),
    (lambda: Gemm(name="g", m=MAX_DIM, n=MAX_DIM, k=MAX_DIM),
     r"MACs = [\d,]+: must be at most 70,368,744,177,664 \(2\*\*46\) per op"),
    (lambda: Conv2d(name="c", in_h=MAX_DIM, in_w=MAX_DIM, in_channels=16, out_channels=8,
                    kernel_h=1, kernel_w=1), r"input elements = [\d,]+: must be at most"),
    (lambda: Eltwise(name="e", op="add", elements=MAX_ELEMENTS + 1), r"elements = \d+: must be an integer"),
    (lambda: Move(name="mv", kind="copy", elements=0), r"elements = 0: must be an integer in 1\.\."),
    (lambda: Graph("big", tuple(Gemm(name=f"g{i}", m=1 << 16, n=1 << 15, k=1 << 15)
                                for i in range(20))),
     r"Graph 'big': MACs = [\d,]+: must be at most [\d,]+ \(2\*\*50\) in all"),
])
def test_documented_limits(make, pattern):
    with pytest.raises(IRError, match=pattern):
        make()


def test_limits_leave_real_workloads():
    """GPT-3's biggest GEMM at a 16 x 2048-token micro-batch and a 224x224 ResNet conv fit."""
    assert Gemm(name="qkv", m=16 * 2048, n=3 * 12288, k=12288).macs < MAX_OP_MACS
    assert MAX_GRAPH_MACS > 256 * 4.1e9     # ResNet-50 at batch 256


@settings(max_examples=30, deadline=None)
@given(clock=st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                       st.sampled_from([1e-20, 1e-9, 0.5, 0, -1, 1, 10000, 10001, 1e300])))
def test_clock_range(clock):
    """chip.clock_mhz in [1, 10000]: 1e-9 ran for over 10 minutes, 1e-20 was a Numba error."""
    try:
        chip = load_chip_config(None, [f"chip.clock_mhz={clock!r}".replace("inf", "inf")])
    except ConfigError as exc:
        assert "\n" not in str(exc) and "chip.clock_mhz" in str(exc)
        assert not (isinstance(clock, float) and 1 <= clock <= 10000)
        return
    assert 1 <= chip.clock_mhz <= 10000 and math.isfinite(chip.clock_mhz)


@pytest.mark.parametrize("argv, pattern", [
    (("map", "--gemm", "1000000000,1000,1000"), r"m = 1000000000: must be an integer in 1\.\."),
    (("run", "--set", "chip.clock_mhz=1e-9"), r"chip.clock_mhz = 1e-09: must be a number in "
                                              r"\[1, 10000\]"),
])
def test_cli_refuses_at_once(capsys, argv, pattern):
    code = main(list(argv))
    err = capsys.readouterr().err
    assert code == 2 and re.search(pattern, err) and err.count("\n") == 1, err


def test_topology_csv_with_absurd_height(tmp_path, capsys):
    path = tmp_path / "huge.csv"
    path.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                    "Channels, Num Filter, Strides,\nconv1, 1000000000000000000, 8, 3, 3, 3, 8, 1,\n")
    code = main(["run", "--topology", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "1000000000000000000" in err and err.count("\n") == 1, err


_KEYS = ("chip.clock_mhz", "array.rows", "array.cols", "array.acc_bits", "sram.banks",
         "sram.bank_width_bytes", "sram.buffer_split", "sram.ifmap.capacity_kib",
         "dram.channels", "dram.tck_ns", "dram.cl", "dram.trefi", "host_link.lanes",
         "dma.max_outstanding", "dma.request_bytes", "dma.descriptor_setup_cycles")
_VALUES = st.one_of(st.integers(-10 ** 20, 10 ** 20), st.floats(allow_nan=True,
                                                               allow_infinity=True),
                    st.sampled_from([0, 1, -1, 1e-20, 1e-9, 2 ** 31, 2 ** 63, 10 ** 30, 1e308]))


@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from(_KEYS), value=_VALUES)
def test_extreme_config_values_are_checked_on_load(key, value):
    """Any number for any numeric key: a valid chip (every value finite and in its documented
    range) or one ConfigError line naming the key; nothing is simulated, so no hang."""
    text = repr(value) if not isinstance(value, float) or math.isfinite(value) else (
        "nan" if value != value else ("inf" if value > 0 else "-inf"))
    try:
        chip = load_chip_config(None, [f"{key}={text}"])
    except ConfigError as exc:
        assert "\n" not in str(exc) and key.split(".")[-1] in str(exc), str(exc)
        return
    assert 1 <= chip.clock_mhz <= 10000
    section, *rest = key.split(".")
    obj = chip if section == "chip" else getattr(chip, {"sram": "ifmap_sram"}.get(section,
                                                                                 section))
    got = getattr(obj, rest[-1])
    assert isinstance(got, (int, float)) and math.isfinite(got)
