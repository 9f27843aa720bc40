"""NVDLA integer numerics (hw/nvdla/numerics.py) against hand-computed vectors.

Every expected value below is worked out by hand from the rules in ../shared/reference/nvdla.md
(and NVIDIA's C model, cmod/hls/sdp/sdp_x.cpp, sdp_y_core.cpp, include/nvdla_int.h): round half
away from zero, saturate after rounding, shift >= input width gives 0.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hw.nvdla.numerics import (
    ALU_EQL, ALU_MAX, ALU_MIN, ALU_SUM, cacc_accumulate, cacc_output, cacc_output_array,
    cvt_operand, cvt_out, cvt_out_array, mac_cell, pdp_average, pdp_recip, sdp_x, sdp_x_array,
    sdp_y, shift_left_sat, shift_right,
)

I32_MAX, I32_MIN = 2**31 - 1, -(2**31)


def x_unit(d, *, bypass=False, alu=None, alu_shift=0, mul=None, mul_shift=0, prelu=False,
           relu=False):
    """sdp_x with readable keywords: alu=(algo, op) or None (bypass), mul=op or None."""
    return int(sdp_x(d, bypass, alu is None, alu[0] if alu else 0, alu[1] if alu else 0,
                     alu_shift, mul is None, mul if mul is not None else 0, mul_shift, prelu,
                     not relu))


def test_rounding_is_half_away_from_zero():
    assert [int(shift_right(v, 1, 32)) for v in (5, -5, 4, -4, 3, -3)] == [3, -3, 2, -2, 2, -2]
    assert int(shift_right(6, 2, 32)) == 2 and int(shift_right(-6, 2, 32)) == -2  # 1.5 -> 2
    assert int(shift_right(5, 2, 32)) == 1 and int(shift_right(-5, 2, 32)) == -1  # 1.25 -> 1


def test_shift_at_or_beyond_the_input_width_gives_zero():
    assert int(shift_right(-(2**48), 49, 49)) == 0  # -0.5 would round to -1: the rule says 0
    assert int(shift_right(2**48 - 1, 63, 49)) == 0
    assert x_unit(I32_MAX, mul=32767, mul_shift=49) == 0
    assert int(cvt_out(I32_MAX, 0, 32767, 49, 8)) == 0
    assert int(cacc_output(-(2**33), 34, 34)) == 0
    assert int(cacc_output(-(2**33), 33, 34)) == -1  # 33 < 34: rounds -0.5 away from zero


def test_alu_operand_shift_saturates_to_32_bits():
    assert int(shift_left_sat(3, 4, 32)) == 48
    assert int(shift_left_sat(32767, 16, 32)) == 32767 * 65536
    assert int(shift_left_sat(32767, 17, 32)) == I32_MAX
    assert int(shift_left_sat(-32768, 16, 32)) == I32_MIN
    assert int(shift_left_sat(-1, 63, 32)) == I32_MIN and int(shift_left_sat(0, 63, 32)) == 0


def test_x_alu_is_33_bits_into_the_multiplier():
    """d + op = 4294901759 does not fit int32; the ALU keeps it (33 bits), x2, >>2."""
    d, op = I32_MAX, 32767 << 16
    assert d + op == 4294901759
    # (4294901759 * 2) / 4 = 2147450879.5 -> 2147450880 (fits int32 after the truncate)
    assert x_unit(d, alu=(ALU_SUM, 32767), alu_shift=16, mul=2, mul_shift=2) == 2147450880
    # A saturating ALU would have given round(I32_MAX * 2 / 4) = 1073741824 instead.
    assert x_unit(d, alu=(ALU_SUM, 32767), alu_shift=16, mul=4, mul_shift=0) == I32_MAX  # sat32
    assert x_unit(7, alu=(ALU_MAX, 9)) == 9 and x_unit(7, alu=(ALU_MIN, 9)) == 7
    # The X ALU has no EQL: code 3 adds (C model X_alu: anything but MAX/MIN is a sum).
    assert x_unit(7, alu=(ALU_EQL, 9)) == 16 == x_unit(7, alu=(ALU_SUM, 9))


def test_x_truncate_applies_with_the_multiplier_bypassed():
    assert x_unit(1000, mul_shift=3) == 125
    assert x_unit(1001, mul_shift=3) == 125  # 125.125
    assert x_unit(1004, mul_shift=3) == 126  # 125.5 -> away from zero
    assert x_unit(-1004, mul_shift=3) == -126
    assert x_unit(-1004, mul_shift=3, relu=True) == 0  # ReLU last


def test_x_prelu_path():
    # negative: multiplied by the slope and truncated; non-negative: both skipped.
    assert x_unit(-100, mul=3, mul_shift=2, prelu=True) == -75
    assert x_unit(-101, mul=3, mul_shift=2, prelu=True) == -76  # -75.75
    assert x_unit(101, mul=3, mul_shift=2, prelu=True) == 101  # no truncate either
    assert x_unit(0, mul=3, mul_shift=2, prelu=True) == 0
    # PReLU without ALU bypass keeps a 33-bit sum to 32 bits by dropping its top bit.
    assert x_unit(I32_MAX, alu=(ALU_SUM, 1), mul=3, prelu=True) == I32_MIN


def test_bs_bypass_skips_the_whole_unit():
    assert x_unit(-12345, bypass=True, alu=(ALU_SUM, 7), mul=3, mul_shift=1, relu=True) == -12345


def test_x_per_channel_array_matches_scalar():
    rng = np.random.default_rng(1)
    d = rng.integers(I32_MIN, I32_MAX, 4 * 5, endpoint=True)
    alu_ops = rng.integers(-32768, 32768, 5)
    mul_ops = rng.integers(-32768, 32768, 5)
    out = sdp_x_array(d, 5, False, False, ALU_SUM, alu_ops, 3, False, mul_ops, 17, False, False)
    for i, v in enumerate(d):
        c = i % 5
        assert out[i] == x_unit(int(v), alu=(ALU_SUM, int(alu_ops[c])), alu_shift=3,
                                mul=int(mul_ops[c]), mul_shift=17, relu=True)


def test_y_unit_mul_then_alu():
    # MUL: 1000 * 3 = 3000 >> 4 = 187.5 -> 188; ALU sum with 12 -> 200
    assert int(sdp_y(1000, False, 3, 4, False, False, ALU_SUM, 12)) == 200
    # 64-bit product then sat32
    assert int(sdp_y(I32_MAX, False, I32_MAX, 0, False, True, ALU_SUM, 0)) == I32_MAX
    assert int(sdp_y(I32_MIN, False, I32_MIN, 62, False, True, ALU_SUM, 0)) == 1  # 2**62 >> 62
    # ALU saturates: I32_MAX + 1
    assert int(sdp_y(I32_MAX, True, 0, 0, False, False, ALU_SUM, 1)) == I32_MAX
    # EQL gives 0 when equal, 1 otherwise (C model Y_alu)
    assert int(sdp_y(42, True, 0, 0, False, False, ALU_EQL, 42)) == 0
    assert int(sdp_y(41, True, 0, 0, False, False, ALU_EQL, 42)) == 1
    # PReLU: non-negative passes, negative is scaled
    assert int(sdp_y(50, False, 2, 1, True, True, ALU_SUM, 0)) == 50
    assert int(sdp_y(-50, False, 3, 1, True, True, ALU_SUM, 0)) == -75
    assert int(sdp_y(5, True, 0, 0, False, False, ALU_MAX, 9)) == 9
    assert int(sdp_y(5, True, 0, 0, False, False, ALU_MIN, 9)) == 5


def test_operand_converter():
    # (100 - 20) * 3 = 240 >> 4 = 15
    assert int(cvt_operand(100, 20, 3, 4)) == 15
    assert int(cvt_operand(-32768, I32_MAX, 32767, 0)) == I32_MIN  # saturates


def test_output_converter_sat17_then_out_width():
    # (1000 - 0) * 1 >> 2 = 250 -> int8 127, int16 250
    assert int(cvt_out(1000, 0, 1, 2, 8)) == 127 and int(cvt_out(1000, 0, 1, 2, 16)) == 250
    # 100000 * 3 = 300000 -> sat17 65535 -> int16 32767, int8 127
    assert int(cvt_out(100000, 0, 3, 0, 16)) == 32767 and int(cvt_out(100000, 0, 3, 0, 8)) == 127
    assert int(cvt_out(-7, 0, 1, 1, 8)) == -4  # -3.5 -> -4
    assert int(cvt_out(10, 12, 5, 0, 8)) == -10  # offset subtracted first
    assert int(cvt_out(I32_MIN, I32_MAX, 32767, 0, 8)) == -128  # 33-bit difference
    arr = cvt_out_array(np.array([1000, -7, 3], np.int64), 0, 1, 1, 8)
    assert list(arr) == [127, -4, 2]


def test_cacc_saturation_and_delivery():
    top = 2**33 - 1  # 34-bit RTL accumulator
    assert int(cacc_accumulate(top - 3, 5, 34)) == top
    assert int(cacc_accumulate(-top, -5, 34)) == -(2**33)
    assert int(cacc_accumulate(top - 3, 5, 48)) == top + 2  # C model: 48 bits
    assert int(cacc_output(2**40, 0, 48)) == I32_MAX  # sat32
    assert int(cacc_output(-(2**40), 8, 48)) == I32_MIN  # -2**32 saturates
    assert int(cacc_output(1000, 3, 34)) == 125 and int(cacc_output(1004, 3, 34)) == 126
    assert list(cacc_output_array(np.array([1004, -1004], np.int64), 3, 34)) == [126, -126]


def test_mac_cell_is_exact():
    d = np.full(64, -128, np.int64)
    w = np.full(64, -128, np.int64)
    assert int(mac_cell(d, w)) == 64 * 16384 == 2**20  # fits the 22-bit int8 partial sum
    d16 = np.full(64, -32768, np.int64)
    assert int(mac_cell(d16, d16)) == 64 * 2**30  # 37 bits: the 38-bit int16 partial sum


def test_pdp_average_with_nvidia_reciprocals():
    assert pdp_recip(3) == 21845 and pdp_recip(2) == 32768 and pdp_recip(1) == 65536
    # 3x3 sum 100: 100*21845/65536 = 33.33 -> 33; 33*21845/65536 = 10.999 -> 11
    assert int(pdp_average(100, 21845, 21845)) == 11
    # 2x2 sum -6: -3 then -1.5 -> -2 (away from zero)
    assert int(pdp_average(-6, 32768, 32768)) == -2
    with pytest.raises(ValueError, match="pooling kernel = 9: must be an integer in 1..8"):
        pdp_recip(9)


@settings(max_examples=300, deadline=None)
@given(st.integers(-(2**40), 2**40), st.integers(0, 63))
def test_shift_right_matches_exact_rational_rounding(x, s):
    from fractions import Fraction
    got = int(shift_right(x, s, 49))
    if s >= 49:
        assert got == 0
        return
    q = Fraction(x, 2**s)
    mag = abs(q)
    want = int(mag) + (1 if mag - int(mag) >= Fraction(1, 2) else 0)
    assert got == (want if q >= 0 else -want)
