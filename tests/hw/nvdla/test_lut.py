"""The NVDLA LUT (hw/nvdla/lut.py) against hand-computed vectors and an independent pure-Python
reference of the rules in NVIDIA's C model (cmod/hls/sdp/sdp_y_idx.cpp, sdp_y_inp.cpp,
cmod/hls_wrapper/sdp_hls_wrapper.cpp for SDP Y; cmod/cdp/NV_NVDLA_cdp.cpp for CDP).

Rounding everywhere: half away from zero. SDP: 35-bit fraction, 32-bit result; CDP: 16-bit
fraction (truncated), 16-bit result."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hw.nvdla.lut import (
    HIT, LE_ENTRIES, LO_ENTRIES, OFLOW, UFLOW, LutParams, lut_counters, lut_lookup, lut_tables_for,
    sdp_y_lut,
)

ZERO_LE, ZERO_LO = (0,) * LE_ENTRIES, (0,) * LO_ENTRIES
FAR = 1 << 30  # a start no test input reaches: that table underflows


def params(le=ZERO_LE, lo=ZERO_LO, **kw):
    kw.setdefault("le_start", FAR)
    kw.setdefault("lo_start", FAR)
    return LutParams(le_table=tuple(le), lo_table=tuple(lo), **kw)


def look(p, xs, unit):
    out, flags = lut_lookup(np.array(xs, np.int64), p, unit)
    return [int(v) for v in out], flags


def state(flags):
    """(LE state, LO state, selected table) per element."""
    f = np.asarray(flags)
    return [(int(v) & 3, (int(v) >> 2) & 3, (int(v) >> 4) & 1) for v in f]


# ---------------------------------------------------------------------- hits, interpolation
def test_linear_le_hit_interpolates_with_each_units_fraction():
    le = [10 * i for i in range(65)]
    p = params(le, le_function="linear", le_start=0, le_index_select=2)
    # x = 5: d = 5, index = 5 >> 2 = 1, remainder 1 of 4 -> fraction 1/4.
    # SDP: f = 1 << 33; (10 * (2**35 - 2**33) + 20 * 2**33) / 2**35 = 7.5 + 5 = 12.5 -> 13
    # CDP: f = 1 << 14; 10 + round(10 * 2**14 / 2**16) = 10 + round(2.5) = 13
    # x = 4: fraction 0 -> le[1] = 10; x = 7: 3/4 -> 10 + 7.5 = 17.5 -> 18 (both units)
    for unit in ("sdp", "cdp"):
        out, flags = look(p, [4, 5, 7], unit)
        assert out == [10, 13, 18]
        assert state(flags) == [(HIT, UFLOW, 0)] * 3


def test_interpolation_ties_round_differently_in_sdp_and_cdp():
    le = [1, 0] + [0] * 63
    p = params(le, le_start=0, le_index_select=1)
    # x = 1: d = 1, index 0, fraction 1/2 between y0 = 1 and y1 = 0.
    # SDP rounds the whole sum: (1 * 2**34 + 0) / 2**35 = 0.5 -> 1
    # CDP rounds the delta: 1 + round((0 - 1) * 2**15 / 2**16) = 1 + round(-0.5) = 1 - 1 = 0
    assert look(p, [1], "sdp")[0] == [1]
    assert look(p, [1], "cdp")[0] == [0]


def test_exponent_le_index_and_fraction():
    le = [100 * i for i in range(65)]
    p = params(le, le_function="exponent", le_start=0, le_index_offset=2)
    # x = 12: d = 12, e = floor(log2 12) = 3, index = 3 - 2 = 1, fraction (12 - 8) / 8 = 1/2
    #   -> 100 + 0.5 * 100 = 150 (both units: SDP f = 4 << 32, CDP f = 4 << 13)
    # x = 8: e = 3, index 1, fraction 0 -> 100;  x = 4: e = 2, index 0 -> 0
    # x = 3: e = 1 < offset 2 -> LE underflow (slopes 0: le[0] = 0)
    for unit in ("sdp", "cdp"):
        out, flags = look(p, [12, 8, 4, 3], unit)
        assert out == [150, 100, 0, 0]
        assert [s[0] for s in state(flags)] == [HIT, HIT, HIT, UFLOW]


def test_exponent_fraction_is_truncated_to_16_bits_in_cdp_only():
    le = [0] * 65
    le[17], le[18] = 0, 32767
    p = params(le, le_function="exponent", le_start=0, le_index_offset=0)
    # x = 2**17 + 3: e = 17 = index, remainder 3 of 2**17.
    # CDP: f = 3 >> (17 - 16) = 1 (truncated); 0 + round(32767 * 1 / 2**16 = 0.49998) = 0
    # SDP: f = 3 << (35 - 17); 32767 * 3 * 2**18 / 2**35 = 32767 * 3 / 2**17 = 0.74998 -> 1
    x = (1 << 17) + 3
    assert look(p, [x], "cdp")[0] == [0]
    assert look(p, [x], "sdp")[0] == [1]


def test_exponent_overflow_at_index_64():
    le = [7] * 64 + [900]
    p = params(le, le_function="exponent", le_start=0, le_index_offset=-60, le_end=16)
    # x = 15: e = 3, index 63 -> hit, interpolates le[63] = 7 and le[64] = 900 at (15-8)/8:
    #   7 + 893 * 7/8 = 788.375 -> 788
    # x = 16: e = 4, index 64 -> overflow: le[64] + (16 - le_end) * 0 = 900
    out, flags = look(p, [15, 16], "cdp")
    assert out == [788, 900]
    assert [s[0] for s in state(flags)] == [HIT, OFLOW]


def test_lo_hit_and_negative_select():
    lo = [3 * i - 200 for i in range(257)]
    p = params(lo=lo, lo_start=-100, lo_index_select=0)
    # x = -50: LE underflows (start FAR), LO: d = 50, index 50 -> lo[50] = -50; only LO hits
    for unit in ("sdp", "cdp"):
        out, flags = look(p, [-50], unit)
        assert out == [-50] and state(flags) == [(UFLOW, HIT, 1)]
    le = [i * i for i in range(65)]
    p = params(le, le_start=0, le_index_select=-2)
    # select -2 multiplies: x = 3 -> index 12, no fraction -> le[12] = 144;
    # x = 16 -> index 64 -> overflow (le_end 0, slope 0) -> le[64] = 4096
    out, flags = look(p, [3, 16], "sdp")
    assert out == [144, 4096] and [s[0] for s in state(flags)] == [HIT, OFLOW]


def test_table_ends():
    le = [i for i in range(65)]
    lo = [-i for i in range(257)]
    p = params(le, lo, le_start=0, le_end=256, le_index_select=2, lo_start=1000,
               lo_end=1256, hybrid_priority="le")
    # x = 0: d = 0 is an underflow (not index 0);
    # x = 255: index 63, fraction 3/4 between 63 and 64 -> 63.75 -> 64 (a hit);
    # x = 256: index 64 -> overflow, le[64] + (256 - le_end) * 0 = 64
    out, flags = look(p, [0, 255, 256], "sdp")
    assert out == [0, 64, 64]
    assert [s[0] for s in state(flags)] == [UFLOW, HIT, OFLOW]
    # LO (select 0): x = 1255 -> index 255 hit -> -255; x = 1256 -> index 256 -> overflow
    # (LE overflows too; oflow priority LE by default -> le[64] + (x - 256) * 0 = 64)
    out, flags = look(p, [1255, 1256], "cdp")
    assert out == [-255, 64]
    assert state(flags) == [(OFLOW, HIT, 1), (OFLOW, OFLOW, 0)]


# ---------------------------------------------------------------------- priorities, counters
def test_priority_mux_and_counters():
    le = [1000 + i for i in range(65)]
    lo = [-1000 - i for i in range(257)]
    base = dict(le_start=0, le_end=64, le_index_select=0, lo_start=10, lo_end=266,
                lo_index_select=0)
    xs = [
        5,     # LE hit (index 5), LO underflow          -> LE: 1005
        40,    # both hit (LE 40, LO 30)                 -> hybrid priority
        100,   # LE overflow, LO hit (index 90)          -> LO: -1090
        -3,    # both underflow                          -> uflow priority
        300,   # both overflow                           -> oflow priority
    ]
    p_le = params(le, lo, **base)
    out, flags = look(p_le, xs, "sdp")
    assert out == [1005, 1040, -1090, 1000, 1064]
    p_lo = params(le, lo, uflow_priority="lo", oflow_priority=1, hybrid_priority="lo", **base)
    out, flags = look(p_lo, xs, "sdp")
    assert out == [1005, -1030, -1090, -1000, -1256]
    # CDP counts (NV_NVDLA_cdp.cpp): only-LE 1, only-LO 1, both-hit -> hybrid, both-under 1,
    # both-over 1. SDP counts (sdp_hls_wrapper.cpp): le_hit = LE hits (x=5, 40), lo_hit = LO
    # hits (40, 100), hybrid = selected table hits (5, 40, 100), uflow/oflow of the selection.
    assert lut_counters(flags, "cdp") == {"uflow": 1, "oflow": 1, "hybrid": 1, "le_hit": 1,
                                          "lo_hit": 1}
    assert lut_counters(flags, "sdp") == {"uflow": 1, "oflow": 1, "hybrid": 3, "le_hit": 2,
                                          "lo_hit": 2}


def test_mixed_miss_uses_hybrid_priority_and_counts_as_hybrid_in_cdp():
    le = [5] * 65
    lo = [-5] * 257
    # x = 50: LE underflows (start 100); LO: d = 50, select -3 -> index 50 << 3 = 400 >= 256,
    # an overflow. Neither hits -> the hybrid priority picks.
    kw = dict(le_start=100, lo_start=0, lo_index_select=-3, lo_end=0)
    out, flags = look(params(le, lo, hybrid_priority="le", **kw), [50], "cdp")
    assert out == [5] and state(flags) == [(UFLOW, OFLOW, 0)]
    assert lut_counters(flags, "cdp")["hybrid"] == 1
    out, flags = look(params(le, lo, hybrid_priority="lo", **kw), [50], "sdp")
    assert out == [-5] and state(flags) == [(UFLOW, OFLOW, 1)]
    # SDP: the selected LO table overflowed -> counted as oflow, not hybrid
    assert lut_counters(flags, "sdp") == {"uflow": 0, "oflow": 1, "hybrid": 0, "le_hit": 0,
                                          "lo_hit": 0}


# ---------------------------------------------------------------------- under/overflow slopes
def test_underflow_and_overflow_slopes_with_shift():
    le = [500] + [0] * 63 + [1000]
    p = params(le, le_start=100, le_end=356, le_index_select=2,
               le_slope_uflow_scale=3, le_slope_uflow_shift=2,
               le_slope_oflow_scale=-5, le_slope_oflow_shift=1)
    # x = 90: 500 + round((90 - 100) * 3 / 4) = 500 + round(-7.5) = 500 - 8 = 492
    # x = 400: 1000 + round((400 - 356) * -5 / 2) = 1000 - 110 = 890
    # x = 357: 1000 + round(-5 / 2) = 1000 + round(-2.5) = 1000 - 3 = 997
    for unit in ("sdp", "cdp"):
        assert look(p, [90, 400, 357], unit)[0] == [492, 890, 997]


def test_slope_result_saturates_at_16_bits_in_cdp_and_32_in_sdp():
    le = [0] * 64 + [32000]
    p = params(le, le_start=0, le_end=64, le_slope_oflow_scale=1000)
    # x = 74: 32000 + (74 - 64) * 1000 = 42000 -> CDP sat16 32767, SDP keeps 42000
    assert look(p, [74], "cdp")[0] == [32767]
    assert look(p, [74], "sdp")[0] == [42000]
    # SDP: a huge slope product saturates to int32 before adding y (then sat32 again):
    # (2**31 - 1 - 64) * 32767 >> 0 -> sat32 = 2**31 - 1; + 32000 -> sat32 = 2**31 - 1
    p = params(le, le_start=0, le_end=64, le_slope_oflow_scale=32767)
    assert look(p, [2**31 - 1], "sdp")[0] == [2**31 - 1]


def test_exponent_underflow_base_differs_between_units():
    le = [0] * 65
    p = params(le, le_function="exponent", le_start=0, le_index_offset=0,
               le_slope_uflow_scale=1)
    # x = -4 underflows. Base = le_start + 2**offset, but the SDP adds 2**offset only for
    # offset > 0 (sdp_hls_wrapper.cpp), the CDP for offset >= 0 (NV_NVDLA_cdp.cpp):
    # SDP: 0 + (-4 - 0) * 1 = -4;  CDP: 0 + (-4 - 1) * 1 = -5
    assert look(p, [-4], "sdp")[0] == [-4]
    assert look(p, [-4], "cdp")[0] == [-5]
    p = params(le, le_function="exponent", le_start=0, le_index_offset=3,
               le_slope_uflow_scale=1)
    # x = 5: e = 2 < 3 -> underflow; base 0 + 8 in both: 5 - 8 = -3
    assert look(p, [5], "sdp")[0] == [-3] and look(p, [5], "cdp")[0] == [-3]


# ---------------------------------------------------------------------- reference model
def ref_lut(x, p: LutParams, unit):
    """Pure-Python (arbitrary-precision ints) statement of the LUT rules."""
    cdp = unit == "cdp"
    fb = 16 if cdp else 35

    def rnd(v, s):  # v / 2**s rounded half away from zero
        q = abs(v) + (1 << s >> 1) if s else abs(v)
        q >>= s
        return q if v >= 0 else -q

    def sat(v, b):
        return max(-(1 << (b - 1)), min((1 << (b - 1)) - 1, v))

    def index(start, exponent, offset, sel, n):
        d = x - start
        if d <= 0:
            return UFLOW, 0, 0
        if exponent:
            e = d.bit_length() - 1
            i = e - offset
            if i < 0:
                return UFLOW, 0, 0
            if i >= n - 1:
                return OFLOW, n - 1, 0
            r = d - (1 << e)
            return HIT, i, r >> (e - fb) if e > fb else r << (fb - e)
        i = d >> sel if sel >= 0 else d << -sel
        if i >= n - 1:
            return OFLOW, n - 1, 0
        if sel <= 0:
            return HIT, i, 0
        r = d % (1 << sel)
        return HIT, i, r >> (sel - fb) if sel > fb else r << (fb - sel)

    ls = index(p.le_start, p.le_function == 0, p.le_index_offset, p.le_index_select, 65)
    os_ = index(p.lo_start, False, 0, p.lo_index_select, 257)
    if ls[0] == os_[0] == UFLOW:
        sel = p.uflow_priority
    elif ls[0] == os_[0] == OFLOW:
        sel = p.oflow_priority
    elif (ls[0] == HIT) == (os_[0] == HIT):
        sel = p.hybrid_priority
    else:
        sel = 0 if ls[0] == HIT else 1
    st, i, f = ls if sel == 0 else os_
    tab = p.le_table if sel == 0 else p.lo_table
    t = "le" if sel == 0 else "lo"
    if st == HIT:
        y0, y1 = tab[i], tab[i + 1]
        if cdp:
            return sat(y0 + rnd((y1 - y0) * f, 16), 16)
        return sat(rnd(y0 * ((1 << 35) - f) + y1 * f, 35), 32)
    if st == UFLOW:
        base = p.le_start if sel == 0 else p.lo_start
        if sel == 0 and p.le_function == 0 and (p.le_index_offset > 0 or
                                                 (cdp and p.le_index_offset == 0)):
            base += 1 << p.le_index_offset
        y = tab[0]
        sc, sh = getattr(p, f"{t}_slope_uflow_scale"), getattr(p, f"{t}_slope_uflow_shift")
    else:
        base = p.le_end if sel == 0 else p.lo_end
        y = tab[-1]
        sc, sh = getattr(p, f"{t}_slope_oflow_scale"), getattr(p, f"{t}_slope_oflow_shift")
    if cdp:
        return sat(y + sat(rnd((x - base) * sc, sh), 56), 16)
    return sat(y + sat(rnd((x - base) * sc, sh), 32), 32)


@pytest.mark.parametrize("unit", ["sdp", "cdp"])
def test_random_registers_match_the_reference(unit):
    rng = np.random.default_rng(5 if unit == "sdp" else 6)
    sel_lim = 128 if unit == "sdp" else 32
    for trial in range(60):
        start = int(rng.integers(-5000, 5000))
        exponent = trial % 2 == 0
        p = LutParams(
            le_table=tuple(int(v) for v in rng.integers(-32768, 32768, 65)),
            lo_table=tuple(int(v) for v in rng.integers(-32768, 32768, 257)),
            le_function=0 if exponent else 1,
            le_start=start, le_end=start + int(rng.integers(0, 4000)),
            lo_start=int(rng.integers(-5000, 5000)), lo_end=int(rng.integers(-5000, 5000)),
            le_index_offset=int(rng.integers(-8, 12)),
            le_index_select=int(rng.integers(-3, min(sel_lim, 40))),
            lo_index_select=int(rng.integers(-3, min(sel_lim, 40))),
            le_slope_uflow_scale=int(rng.integers(-32768, 32768)),
            le_slope_uflow_shift=int(rng.integers(0, 32)),
            le_slope_oflow_scale=int(rng.integers(-32768, 32768)),
            le_slope_oflow_shift=int(rng.integers(0, 32)),
            lo_slope_uflow_scale=int(rng.integers(-32768, 32768)),
            lo_slope_uflow_shift=int(rng.integers(0, 32)),
            lo_slope_oflow_scale=int(rng.integers(-32768, 32768)),
            lo_slope_oflow_shift=int(rng.integers(0, 32)),
            uflow_priority=int(rng.integers(0, 2)), oflow_priority=int(rng.integers(0, 2)),
            hybrid_priority=int(rng.integers(0, 2)),
        )
        xs = np.concatenate([rng.integers(-20000, 20000, 150),
                             rng.integers(-(2**31), 2**31, 50)]).astype(np.int64)
        out, _ = lut_lookup(xs, p, unit)
        ref = [ref_lut(int(x), p, unit) for x in xs]
        assert out.tolist() == ref, f"trial {trial}"


# ---------------------------------------------------------------------- registers, errors
def test_from_registers_decodes_cdp_and_sdp_words():
    le, lo = list(range(65)), [0xFFFF] * 257  # 0xFFFF reads as int16 -1
    # Registers of trace cdp_1x1x1_lrn3_int8_0: LUT_CFG 0x71 = linear, all priorities LO;
    # LUT_INFO 0x8fe00: offset 0, LE select 0xfe (bit 5 set -> -2), LO select 8;
    # LE start HIGH 0x3f : LOW 0xfffffff2 = 38-bit -14; slope scales 0x10001 = (uflow 1, oflow 1)
    regs = {"S_LUT_CFG": 0x71, "S_LUT_INFO": 0x8FE00, "S_LUT_LE_START_LOW": 0xFFFFFFF2,
            "S_LUT_LE_START_HIGH": 0x3F, "S_LUT_LE_END_LOW": 0x2, "S_LUT_LO_END_LOW": 0x10000,
            "S_LUT_LE_SLOPE_SCALE": 0x10001, "S_LUT_LO_SLOPE_SCALE": 0x10001,
            "S_LUT_LE_SLOPE_SHIFT": (7 << 5) | 3}
    p = LutParams.from_registers(regs, le, lo, unit="cdp", precision="int8")
    assert (p.le_function, p.uflow_priority, p.oflow_priority, p.hybrid_priority) == (1, 1, 1, 1)
    assert (p.le_index_offset, p.le_index_select, p.lo_index_select) == (0, -2, 8)
    assert (p.le_start, p.le_end, p.lo_start, p.lo_end) == (-14, 2, 0, 65536)
    assert (p.le_slope_uflow_scale, p.le_slope_oflow_scale) == (1, 1)
    assert (p.le_slope_uflow_shift, p.le_slope_oflow_shift) == (3, 7)
    assert p.le_table[64] == 64 and p.lo_table[0] == -1
    # SDP: 32-bit starts, int8 fields: LUT_INFO 0x1fb00 -> LE select 0xfb = -5, LO select 1;
    # LO slope scale 0x7f5c12b3 -> uflow 0x12b3 = 4787, oflow 0x7f5c = 32604; shift 0x396 ->
    # uflow 0x16 = 22, oflow 0x396 >> 5 = 28
    p = LutParams.from_registers({"S_LUT_INFO": 0x1FB00, "S_LUT_LE_START": 0xFFFFFF80,
                                  "S_LUT_LO_SLOPE_SCALE": 0x7F5C12B3,
                                  "S_LUT_LO_SLOPE_SHIFT": 0x396}, le, lo, unit="sdp")
    assert (p.le_index_select, p.lo_index_select, p.le_start) == (-5, 1, -128)
    assert (p.lo_slope_uflow_scale, p.lo_slope_oflow_scale) == (4787, 32604)
    # the SDP slope shifts are signed 5-bit (C model yLutSlopeShiftType = ACINTT(5)):
    # 0x396 = uflow 0x16 -> -10, oflow 0x1c -> -4 (a negative shift is a saturating left shift)
    assert (p.lo_slope_uflow_shift, p.lo_slope_oflow_shift) == (-10, -4)


@pytest.mark.parametrize("make, message", [
    (lambda: params(le=[0] * 64), "le_table has 64 entries"),
    (lambda: params(lo=[40000] + [0] * 256), "lo_table[0] = 40000"),
    (lambda: params(le_function="log"), "le_function = 'log'"),
    (lambda: params(hybrid_priority=2), "hybrid_priority = 2"),
    (lambda: params(le_index_select=200), "le_index_select = 200"),
    (lambda: params(lo_slope_oflow_shift=32), "lo_slope_oflow_shift = 32"),
    (lambda: params(le_start=1 << 40), "le_start = 1099511627776"),
    (lambda: LutParams.from_registers({"S_LUT_INFO": 0x4000}, [0] * 65, [0] * 257, "cdp",
                                      "int8"), "LUT_LE_INDEX_SELECT = 0x40"),
    (lambda: LutParams.from_registers({"S_LUT_LE_START": 1}, [0] * 65, [0] * 257, "cdp"),
     "'S_LUT_LE_START': not a CDP LUT register"),
])
def test_bad_registers_are_named(make, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        make()


def test_bad_inputs_are_named_before_any_kernel_runs():
    p = params(le_start=1 << 33)
    with pytest.raises(ValueError, match="le_start = 8589934592.*32-bit"):
        lut_lookup(np.zeros(3, np.int64), p, "sdp")
    with pytest.raises(ValueError, match="x holds 2147483648"):
        sdp_y_lut(np.array([2**31]), params())
    with pytest.raises(ValueError, match="dtype float64"):
        lut_lookup(np.zeros(3), params(), "cdp")
    with pytest.raises(ValueError, match="unit = 'pdp'"):
        lut_lookup(np.zeros(3, np.int64), params(), "pdp")
    with pytest.raises(ValueError, match="lo_index_select = 40.*6-bit"):
        lut_lookup(np.zeros(3, np.int64), params(lo_index_select=40), "cdp", "int8")
    with pytest.raises(ValueError, match="le_index_offset = 32.*exponent"):
        lut_lookup(np.zeros(3, np.int64), params(le_function=0, le_index_offset=32), "sdp")


# ---------------------------------------------------------------------- table builder
def test_lut_tables_for_linear_function_is_exact_to_one_lsb():
    """f(x) = x/8 - 3 at out_scale 16 is 2x - 48: every entry, every interpolation (fraction
    r/16 of a step of 32) and both slopes (2 = 16384 / 2**13: 2 * 2**14 = 32768 does not fit
    int16) are exact, so the LUT reproduces it exactly on both sides of both tables."""
    p = lut_tables_for(lambda x: x / 8 - 3, out_scale=16, le_start=-1000, le_index_select=4,
                       lo_start=-200, lo_index_select=0, unit="sdp")
    assert (p.le_slope_uflow_scale, p.le_slope_uflow_shift) == (16384, 13)
    assert p.le_end == -1000 + 64 * 16 and p.lo_end == -200 + 256
    xs = np.arange(-1500, 600, 7)
    out, _ = sdp_y_lut(xs, p)
    assert out.tolist() == (2 * xs - 48).tolist()


def test_lut_tables_for_sigmoid_within_interpolation_bound():
    """Sigmoid on a linear LO table (step h = 8 input units, Q4 inputs -> x/16): the error of
    linear interpolation is at most h**2/8 * max|f''| * scale (+1 for the two roundings);
    |sigmoid''| <= 0.0963 and f'' here is in input units: 0.0963 / 16**2."""
    scale, h = 4096, 8
    f = lambda x: 1 / (1 + np.exp(-x / 16))  # noqa: E731
    p = lut_tables_for(f, out_scale=scale, le_start=-1024, le_index_select=5,
                       lo_start=-1024, lo_index_select=3, hybrid_priority="lo", unit="sdp")
    xs = np.arange(-1023, 1024)  # inside the LO table (x - start in 1..2047 < 256 * 8)
    out, flags = sdp_y_lut(xs, p)
    bound = h * h / 8 * 0.0963 / 256 * scale + 1
    assert np.max(np.abs(out - f(xs) * scale)) <= bound
    assert lut_counters(flags, "sdp")["lo_hit"] == xs.size


def test_lut_tables_for_rejects_bad_functions():
    with pytest.raises(ValueError, match="not finite"):
        lut_tables_for(lambda x: 1 / (x - x), out_scale=1, le_start=0, lo_start=0)
    with pytest.raises(ValueError, match="out_scale = -1"):
        lut_tables_for(lambda x: x, out_scale=-1, le_start=0, lo_start=0)
    with pytest.raises(ValueError, match="LE underflow: slope"):
        lut_tables_for(lambda x: 1e9 * x, out_scale=1, le_start=0, lo_start=0,
                       le_index_select=30)


def test_lut_tables_for_lrn_on_cdp_exponent_table():
    """LRN factor (1 + 1e-4 * s)**-0.75 of a square sum s in [0, 2**21): exponent LE table
    (offset 0: entry i at s = 2**i), output Q14. Within each octave [2**e, 2**(e+1)) the
    interpolation error is at most (2**e)**2/8 * max|f''| * scale, plus 1/2 for the rounded
    entries, 1/2 for the final rounding and |y1 - y0| / 2**16 <= 1/4 for the CDP's 16-bit
    truncated fraction; check against float64."""
    f = lambda s: (1 + 1e-4 * s) ** -0.75  # noqa: E731
    scale = 1 << 14
    p = lut_tables_for(f, out_scale=scale, le_function="exponent", le_start=0,
                       le_index_offset=0, lo_start=0, lo_index_select=4,
                       hybrid_priority="le", unit="cdp")
    s = np.unique(np.concatenate([np.arange(1, 4096), 2 ** np.arange(12, 21),
                                  np.random.default_rng(1).integers(1, 2**21, 3000)]))
    out, flags = lut_lookup(s, p, "cdp")
    e = np.floor(np.log2(s))
    # |f''(s)| = 0.75*1.75*1e-8 * (1 + 1e-4 s)**-2.75, largest at the octave's start
    f2 = 0.75 * 1.75 * 1e-8 * (1 + 1e-4 * 2 ** e) ** -2.75
    bound = (2 ** e) ** 2 / 8 * f2 * scale + 1.25
    assert np.all(np.abs(out - f(s) * scale) <= bound)
    assert lut_counters(flags, "cdp")["uflow"] == 0
    assert math.isclose(out[0], scale * f(1), abs_tol=1)
