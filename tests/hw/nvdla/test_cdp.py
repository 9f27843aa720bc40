"""The NVDLA CDP (hw/nvdla/cdp.py): hand vectors for the square-sum window, the bypasses and
the saturation counter; a numpy reference of the same integer rules on random tensors; and
NVIDIA's 20 nv_small CDP trace tests (shared/nvdla/traces/nv_small/cdp_*), replayed from their
register writes and input surfaces and checked against the trace's own CRC-32 of the output.

Rules: cmod/cdp/NV_NVDLA_cdp.cpp (lookup_lut_int8 / lookup_lut), cmod/hls/cdp_libs/cdp_icvt.cpp
and cdp_ocvt.cpp, cmod/hls/include/nvdla_int.h."""

from __future__ import annotations


import numpy as np
import pytest

from hw.nvdla.cdp import CdpParams, cdp_lrn, cdp_reference
from hw.nvdla.cdp_unit import cdp_params_from_registers
from hw.nvdla.lut import LutParams, lut_lookup, lut_tables_for
from hw.nvdla.trace import play



def square_sum_lut():
    """LUT returning its input for 0 <= s <= 255: LE never answers (start far above), LO with
    start -1 and select 0 puts s at index s + 1, whose entry is s."""
    return LutParams(le_table=(0,) * 65, lo_table=tuple(i - 1 for i in range(257)),
                     le_start=1 << 30, lo_start=-1, lo_index_select=0)


# ---------------------------------------------------------------------- hand vectors
@pytest.mark.parametrize("n, expected", [
    # x = [1, 2, 3, 4] (after the converter), squares [1, 4, 9, 16]; outside the cube: 0
    (3, [0 + 1 + 4, 1 + 4 + 9, 4 + 9 + 16, 9 + 16 + 0]),       # [5, 14, 29, 25]
    (5, [1 + 4 + 9, 1 + 4 + 9 + 16, 1 + 4 + 9 + 16, 4 + 9 + 16]),  # [14, 30, 30, 29]
    (7, [30, 30, 30, 30]),
    (9, [30, 30, 30, 30]),
])
def test_square_sum_window_at_channel_edges(n, expected):
    # datin_offset 1: x = [2, 3, 4, 5] converts to [1, 2, 3, 4]; the channels outside the cube
    # are fed with the offset itself, so they convert to 0 (NV_NVDLA_cdp.cpp pads with it).
    cdp = CdpParams(normalz_len=n, datin_offset=1, mul_bypass=True)
    r = cdp_lrn(np.array([[2, 3, 4, 5]], np.int8), cdp, square_sum_lut())
    assert r.out.tolist() == [expected]
    assert r.counters["lut_lo_hit"] == 4 and r.counters["lut_le_hit"] == 0


def test_input_converter_rounds_and_saturates_to_9_bits():
    # v = sat9(round((x - offset) * scale / 2**shift)), sqsum and mul bypassed, LUT = 1 for
    # every input (LE underflow: le[0] = 1, slope 0), so out = v * 1 through an identity output
    # converter, saturated to int8 at the end.
    lut = LutParams(le_table=(1,) * 65, lo_table=(1,) * 257, le_start=1 << 30, lo_start=1 << 30)
    cdp = CdpParams(datin_offset=-3, datin_scale=5, datin_shifter=2, sqsum_bypass=True,
                    mul_bypass=False)
    x = np.array([[-128, 0, 3, 24, 127]], np.int8)
    # (-128+3)*5/4 = -156.25 -> -156 -> sat8 -128;  (0+3)*5/4 = 3.75 -> 4;
    # (3+3)*5/4 = 7.5 -> 8;  (24+3)*5/4 = 33.75 -> 34;  (127+3)*5/4 = 162.5 -> 163 -> sat8 127
    assert cdp_lrn(x, cdp, lut).out.tolist() == [[-128, 4, 8, 34, 127]]
    # a 9-bit saturation inside: scale 100, shift 0: (127+3)*100 = 13000 -> sat9 255 ->
    # out sat8 127; (-128+3)*100 -> -256 -> -128. int8 offset wraps: -3 + 256 = 253 -> -3.
    cdp = CdpParams(datin_offset=253, datin_scale=100, sqsum_bypass=True)
    assert cdp_lrn(np.array([[127, -128]], np.int8), cdp, lut).out.tolist() == [[127, -128]]


def test_multiply_and_output_converter():
    # LUT constant 300 (both tables underflow, LE answers: le[0] = 300). x = 3 -> sum 9 (n=3,
    # one channel), m = 300 * 3 = 900; out = sat8(round((900 - 4) * 3 / 2**5)) =
    # round(2688 / 32 = 84) = 84. Without the multiply: round((300 - 4) * 3 / 32 = 27.75) = 28.
    lut = LutParams(le_table=(300,) * 65, lo_table=(0,) * 257, le_start=1 << 30,
                    lo_start=1 << 30)
    base = dict(datout_offset=4, datout_scale=3, datout_shifter=5)
    assert cdp_lrn(np.array([[3]], np.int8), CdpParams(**base), lut).out.tolist() == [[84]]
    assert cdp_lrn(np.array([[3]], np.int8), CdpParams(mul_bypass=True, **base),
                   lut).out.tolist() == [[28]]


def test_output_saturation_counter_follows_the_c_model():
    # mul bypass, LUT constant c, output shift 1: out = sat8(round(c / 2)).
    # IntShiftRightSat flags saturation only when floor(c / 2) is more than 1 away from out:
    # c = 255: 127.5 -> 128 -> 127, floor 127 -> not counted;
    # c = 257: 128.5 -> 129 -> 127, floor 128 -> 1 away, not counted;
    # c = 259: 129.5 -> 130 -> 127, floor 129 -> counted; c = -261: -130.5 -> -131 -> -128,
    # floor -131 -> counted.
    expected = {255: 0, 257: 0, 259: 1, -261: 1}
    for c, n_sat in expected.items():
        lut = LutParams(le_table=(c,) * 65, lo_table=(0,) * 257, le_start=1 << 30,
                        lo_start=1 << 30)
        r = cdp_lrn(np.array([[1]], np.int8), CdpParams(mul_bypass=True, datout_shifter=1),
                    lut)
        assert r.counters["out_saturation"] == n_sat, c
        assert r.out[0, 0] == (127 if c > 0 else -128)


# ---------------------------------------------------------------------- numpy reference
@pytest.mark.parametrize("precision, seed", [("int8", 0), ("int8", 1), ("int16", 2),
                                             ("int16", 3)])
def test_random_tensors_match_numpy_reference(precision, seed):
    rng = np.random.default_rng(seed)
    bits = 8 if precision == "int8" else 16
    dtype = np.int8 if bits == 8 else np.int16
    x = rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), (2, 5, 6, 37)).astype(dtype)
    # LRN factor (1 + 1e-4 s)**-0.75 in Q14 on an exponent LE table + linear LO table
    lut = lut_tables_for(lambda s: (1 + 1e-4 * s) ** -0.75, out_scale=1 << 14,
                         le_function="exponent", le_start=0, le_index_offset=int(seed),
                         lo_start=-64, lo_index_select=int(rng.integers(0, 6)),
                         hybrid_priority="lo", unit="cdp", precision=precision)
    for n in (3, 5, 7, 9):
        for sq, mul in ((False, False), (True, False), (False, True)):
            cdp = CdpParams(normalz_len=n, precision=precision,
                            datin_offset=int(rng.integers(-300, 300)),
                            datin_scale=int(rng.integers(-3000, 3000)),
                            datin_shifter=int(rng.integers(0, 12)),
                            datout_offset=int(rng.integers(-1 << 20, 1 << 20)),
                            datout_scale=int(rng.integers(-30000, 30000)),
                            datout_shifter=int(rng.integers(10, 40)),
                            sqsum_bypass=sq, mul_bypass=mul)
            r = cdp_lrn(x, cdp, lut)
            assert r.out.dtype == dtype and r.out.shape == x.shape
            np.testing.assert_array_equal(r.out, cdp_reference(x, cdp, lut), err_msg=str(cdp))
            assert sum(v for k, v in r.counters.items() if k.startswith("lut_")) == x.size


def test_lrn_in_fixed_point_tracks_float_lrn():
    """End to end: Caffe LRN x / (1 + alpha/n * sum x**2)**beta of int8 data, with the LUT from
    lut_tables_for (factor in Q14) and the output converter dropping the 14 fraction bits.

    Error budget per element, from the table that answered (flags): linear interpolation over a
    step h starting at s0 is off by at most h**2/8 * |f''(s0)| (f'' falls with s), in Q14 units
    plus 1.25 LSB (entry and final rounding, truncated 16-bit fraction); times |x| / 2**14; plus
    1/2 for the output rounding. LO steps are 2**7 (sums below 32896); LE steps are octaves 2**e
    (coarse for large sums: about 2.5 output LSB at s ~ 2**16, inside this bound)."""
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (1, 4, 4, 48)).astype(np.int8)
    alpha, beta, n, q = 1e-3, 0.75, 5, 1 << 14
    a = alpha / n
    lut = lut_tables_for(lambda s: (1 + a * s) ** -beta, out_scale=q, le_function="exponent",
                         le_start=0, le_index_offset=0, lo_start=0, lo_index_select=7,
                         hybrid_priority="lo", unit="cdp")
    r = cdp_lrn(x, CdpParams(normalz_len=n, datout_shifter=14), lut)
    xf = x.astype(np.float64)
    pad = np.pad(xf * xf, [(0, 0), (0, 0), (0, 0), (2, 2)])
    s = sum(pad[..., j:j + 48] for j in range(5))
    gold = xf / (1 + a * s) ** beta
    lo = (r.flags >> 4) & 1 == 1
    e = np.floor(np.log2(np.maximum(s, 1)))
    h = np.where(lo, 128.0, 2 ** e)
    s0 = np.where(lo, np.floor(s / 128) * 128, 2 ** e)
    f2 = beta * (beta + 1) * a * a * (1 + a * s0) ** (-beta - 2)
    bound = (h * h / 8 * f2 * q + 1.25) * np.abs(xf) / q + 0.5
    err = np.abs(r.out - gold)
    assert np.all(err <= bound + 1e-9)
    assert r.counters["out_saturation"] == 0 and lo.sum() > 100 and (~lo).sum() > 100


# ---------------------------------------------------------------------- NVIDIA trace registers
# (all 20 cdp_* traces replay through the register-level player in test_trace.py)
def test_trace_registers_decode_by_hand(nv_small_traces):
    """cdp_8x8x64_lrn3_int8_12 programs: LUT_INFO 0x103c9 (offset 0xc9 = -55, LE select 3,
    LO select 1), LE slope scale 0x5fffd (uflow 0xfffd = -3, oflow 5), LE slope shift 0x3
    (uflow 3, oflow 0), LO scale 0xfffb0002 (uflow 2, oflow -5), LO shift 0x1d (uflow 29);
    D_DATIN_OFFSET 0xff9c = -100, D_DATIN_SCALE 0xfffe = -2, D_DATIN_SHIFTER 3,
    D_DATOUT_OFFSET 0xffffffdf = -33, D_DATOUT_SCALE 9, D_DATOUT_SHIFTER 2, LRN_CFG 0 -> 3."""
    run = play(nv_small_traces / "cdp_8x8x64_lrn3_int8_12").layers[0]
    cdp, lut = cdp_params_from_registers(run.regs)
    assert cdp == CdpParams(normalz_len=3, precision="int8", datin_offset=-100, datin_scale=-2,
                            datin_shifter=3, datout_offset=-33, datout_scale=9,
                            datout_shifter=2, sqsum_bypass=False, mul_bypass=False)
    assert (lut.le_function, lut.le_index_offset, lut.le_index_select,
            lut.lo_index_select) == (0, -55, 3, 1)
    assert (lut.le_slope_uflow_scale, lut.le_slope_oflow_scale, lut.le_slope_uflow_shift,
            lut.le_slope_oflow_shift) == (-3, 5, 3, 0)
    assert (lut.lo_slope_uflow_scale, lut.lo_slope_oflow_scale,
            lut.lo_slope_uflow_shift) == (2, -5, 29)
    assert (lut.le_start, lut.le_end, lut.lo_start, lut.lo_end) == (0x40, 0x240, 0xA8, 0x2A8)


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("make, message", [
    (lambda: CdpParams(normalz_len=4), "normalz_len = 4"),
    (lambda: CdpParams(precision="fp16"), "precision = 'fp16'"),
    (lambda: CdpParams(datin_shifter=32), "datin_shifter = 32"),
    (lambda: CdpParams(datout_shifter=64), "datout_shifter = 64"),
    (lambda: CdpParams(datout_offset=1 << 31), "datout_offset = 2147483648"),
    (lambda: CdpParams(mul_bypass=1), "mul_bypass = 1"),
    (lambda: CdpParams.from_registers({"D_DATA_FORMAT": 2}), "INPUT_DATA_TYPE = 2"),
])
def test_bad_cdp_registers_are_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_bad_tensors_are_named_before_any_kernel_runs():
    lut = square_sum_lut()
    with pytest.raises(ValueError, match="x holds 200: precision 'int8'"):
        cdp_lrn(np.array([[200]], np.int16), CdpParams(), lut)
    with pytest.raises(ValueError, match="dtype float32"):
        cdp_lrn(np.zeros((1, 4), np.float32), CdpParams(), lut)
    with pytest.raises(ValueError, match="channel axis"):
        cdp_lrn(np.zeros((2, 0), np.int8), CdpParams(), lut)
    bad = LutParams(le_table=(0,) * 65, lo_table=(0,) * 257, le_index_select=-70)
    with pytest.raises(ValueError, match="le_index_select = -70.*7-bit signed for int16"):
        cdp_lrn(np.zeros((1, 4), np.int16), CdpParams(precision="int16"), bad)
