"""hw/numerics.py: integer saturation/wrap/rounding, MACs and fp16 conversions.

Every expected value comes from an independent computation: exact Python ints, fractions,
numpy object/float32 arithmetic, numpy's own float16 conversion, or literals derived by hand.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from hw.numerics import (
    MAX_ROUND_SHIFT, accumulate, fp16_bits_to_fp32, fp16_mac, fp32_to_fp16_bits, int_max,
    int_min, mac, observe, round_shift, saturate, saturating_add, wrap,
)

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
BITS = [2, 3, 7, 8, 15, 16, 20, 31, 32, 33, 40, 63, 64]
int64s = st.integers(INT64_MIN, INT64_MAX)


# ---------------------------------------------------------------- independent Python gold
def py_sat(x: int, bits: int) -> int:
    return min(max(x, -(2 ** (bits - 1))), 2 ** (bits - 1) - 1)


def py_wrap(x: int, bits: int) -> int:
    return (x + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)


def py_round_shift(x: int, s: int) -> int:
    """Round x / 2**s to nearest, ties away from zero, exactly."""
    q = Fraction(x, 2**s)
    mag = int(abs(q) + Fraction(1, 2))  # floor(|q| + 1/2)
    return mag if q >= 0 else -mag


def edge_values(bits: int) -> list[int]:
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    vals = {INT64_MIN, INT64_MIN + 1, INT64_MAX, INT64_MAX - 1, 0, 1, -1,
            lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, 2 * hi, 2 * lo}
    return sorted(v for v in vals if INT64_MIN <= v <= INT64_MAX)


# ---------------------------------------------------------------- int ranges, saturate, wrap
@pytest.mark.parametrize("bits, lo, hi", [
    (2, -2, 1), (8, -128, 127), (16, -32768, 32767), (32, -2147483648, 2147483647),
    (64, -9223372036854775808, 9223372036854775807),
])
def test_int_min_max_literals(bits, lo, hi):
    assert int(int_min(bits)) == lo
    assert int(int_max(bits)) == hi


@pytest.mark.parametrize("bits", BITS)
def test_saturate_and_wrap_edges(bits):
    for x in edge_values(bits):
        assert int(saturate(x, bits)) == py_sat(x, bits), (x, bits)
        assert int(wrap(x, bits)) == py_wrap(x, bits), (x, bits)


def test_saturate_wrap_hand_literals():
    assert int(saturate(200, 8)) == 127 and int(saturate(-200, 8)) == -128
    assert int(wrap(128, 8)) == -128 and int(wrap(255, 8)) == -1 and int(wrap(256, 8)) == 0
    assert int(wrap(2**31, 32)) == -(2**31) and int(wrap(-(2**31) - 1, 32)) == 2**31 - 1
    assert int(wrap(INT64_MIN, 64)) == INT64_MIN and int(wrap(INT64_MAX, 64)) == INT64_MAX
    assert int(wrap(INT64_MAX, 32)) == -1 and int(wrap(INT64_MIN, 32)) == 0
    assert int(saturate(INT64_MIN, 64)) == INT64_MIN and int(saturate(INT64_MAX, 63)) == 2**62 - 1


@settings(deadline=None, max_examples=300)
@given(x=int64s, bits=st.integers(2, 64))
def test_saturate_wrap_random(x, bits):
    assert int(saturate(x, bits)) == py_sat(x, bits)
    assert int(wrap(x, bits)) == py_wrap(x, bits)


# ---------------------------------------------------------------- round_shift
@pytest.mark.parametrize("x, s, want", [
    (5, 1, 3), (-5, 1, -3), (3, 1, 2), (-3, 1, -2), (1, 1, 1), (-1, 1, -1),  # ties
    (6, 2, 2), (-6, 2, -2), (2, 2, 1), (-2, 2, -1), (10, 2, 3), (-10, 2, -3),  # ties
    (7, 2, 2), (-7, 2, -2), (5, 2, 1), (-5, 2, -1), (4, 1, 2), (-4, 1, -2),
    (0, 5, 0), (17, 0, 17), (-17, 0, -17),
    (INT64_MAX, 0, INT64_MAX), (INT64_MIN, 0, INT64_MIN),
    (INT64_MAX, 62, 2), (INT64_MIN, 62, -2), (INT64_MAX, 1, 2**62), (INT64_MIN, 1, -(2**62)),
    (INT64_MIN + 1, 1, -(2**62)),  # -(2**63 - 1) / 2 = -(2**62 - 0.5): tie, away from zero
    (2**61, 62, 1), (-(2**61), 62, -1), (2**61 - 1, 62, 0), (-(2**61) + 1, 62, 0),
    (3 * 2**61, 62, 2), (-3 * 2**61, 62, -2), (INT64_MAX, 61, 4), (INT64_MIN, 61, -4),
])
def test_round_shift_literals(x, s, want):
    assert int(round_shift(x, s)) == want
    assert py_round_shift(x, s) == want  # the gold agrees with the hand-derived literals


def test_round_shift_all_shifts_random_and_ties():
    assert MAX_ROUND_SHIFT == 62
    rng = np.random.default_rng(1234)
    for s in range(MAX_ROUND_SHIFT + 1):
        vals = [INT64_MIN, INT64_MIN + 1, INT64_MAX, INT64_MAX - 1, 0, 1, -1]
        # random magnitudes over the whole int64 range
        for nbits in rng.integers(1, 64, 24):
            v = int(rng.integers(0, 2 ** int(nbits), dtype=np.uint64))
            vals += [v, -v]
        if s > 0:  # exact ties q + 1/2 and their neighbours, both signs
            for q in [0, 1, 2, 3, int(rng.integers(0, 2 ** (63 - s)))]:
                t = q * 2**s + 2 ** (s - 1)
                vals += [t, t - 1, t + 1, -t, -t + 1, -t - 1]
        for x in vals:
            if INT64_MIN <= x <= INT64_MAX:
                assert int(round_shift(x, s)) == py_round_shift(x, s), (x, s)


@settings(deadline=None, max_examples=300)
@given(x=int64s, s=st.integers(0, MAX_ROUND_SHIFT))
def test_round_shift_random(x, s):
    assert int(round_shift(x, s)) == py_round_shift(x, s)


# ---------------------------------------------------------------- saturating_add
@pytest.mark.parametrize("bits", [63, 64])
def test_saturating_add_near_int64_limits(bits):
    pts = [INT64_MIN, INT64_MIN + 1, -(2**62) - 1, -(2**62), -1, 0, 1,
           2**62 - 1, 2**62, INT64_MAX - 1, INT64_MAX]
    for x in pts:
        for y in pts:
            assert int(saturating_add(x, y, bits)) == py_sat(x + y, bits), (x, y, bits)
    assert int(saturating_add(INT64_MAX, 1, 64)) == INT64_MAX
    assert int(saturating_add(INT64_MIN, -1, 64)) == INT64_MIN
    assert int(saturating_add(2**62, 2**62, 63)) == 2**62 - 1


@settings(deadline=None, max_examples=300)
@given(x=int64s, y=int64s, bits=st.integers(2, 64))
def test_saturating_add_random(x, y, bits):
    assert int(saturating_add(x, y, bits)) == py_sat(x + y, bits)


# ---------------------------------------------------------------- mac
def test_mac_wrap_vs_saturate_literals():
    assert int(mac(2**31 - 1, 1, 1, 32, False)) == -(2**31)
    assert int(mac(2**31 - 1, 1, 1, 32, True)) == 2**31 - 1
    assert int(mac(-(2**31), -1, 1, 32, False)) == 2**31 - 1
    assert int(mac(-(2**31), -1, 1, 32, True)) == -(2**31)
    assert int(mac(32767, 127, 127, 16, False)) == 32767 + 16129 - 65536
    assert int(mac(32767, 127, 127, 16, True)) == 32767
    assert int(mac(INT64_MAX, 32767, 32767, 64, False)) == INT64_MIN + 32767**2 - 1
    assert int(mac(INT64_MAX, 32767, 32767, 64, True)) == INT64_MAX
    assert int(mac(5, -128, -128, 32, False)) == 16389 == int(mac(5, -128, -128, 32, True))


@njit
def _mac_all(acc, a, b, bits, sat, out):
    for i in range(a.shape[0]):
        out[i] = mac(acc, a[i], b[i], bits, sat)


@pytest.mark.parametrize("bits", [16, 20, 32, 40, 64])
@pytest.mark.parametrize("sat", [False, True])
def test_mac_exhaustive_int8(bits, sat):
    ops = np.arange(-128, 128, dtype=np.int64)
    a = np.repeat(ops, 256)
    b = np.tile(ops, 256)
    prod = (a * b).astype(object)  # exact Python ints from here on
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    for acc in [0, 1, -1, hi - 100, lo + 100, hi, lo, 12345 % hi]:
        total = prod + acc
        if sat:
            want = np.minimum(np.maximum(total, lo), hi)
        else:
            want = (total - lo) % 2**bits + lo
        want = want.astype(np.int64)
        out = np.zeros(a.shape[0], np.int64)
        _mac_all(np.int64(acc), a, b, bits, sat, out)
        np.testing.assert_array_equal(out, want, err_msg=f"acc={acc} bits={bits} sat={sat}")


# ---------------------------------------------------------------- accumulate / observe
@njit
def _accumulate_jit(acc, value, bits, sat):
    return accumulate(acc, value, bits, sat)


@njit
def _observe_jit(x, bits):
    return observe(x, bits)


@settings(deadline=None, max_examples=300)
@given(acc=int64s, value=int64s, bits=st.integers(2, 64), sat=st.booleans())
def test_accumulate_python_vs_jit_int(acc, value, bits, sat):
    want = py_sat(acc + value, bits) if sat else py_wrap(acc + value, bits)
    assert int(accumulate(acc, value, bits, sat)) == want
    assert int(_accumulate_jit(np.int64(acc), np.int64(value), bits, sat)) == want


@pytest.mark.parametrize("bits", BITS)
def test_accumulate_and_observe_edges(bits):
    for acc in edge_values(bits):
        for value in [INT64_MIN, -1, 0, 1, 16384, -(2**30), INT64_MAX]:
            for sat in (False, True):
                want = py_sat(acc + value, bits) if sat else py_wrap(acc + value, bits)
                assert int(accumulate(acc, value, bits, sat)) == want
                assert int(_accumulate_jit(np.int64(acc), np.int64(value), bits, sat)) == want
        assert int(observe(acc, bits)) == py_wrap(acc, bits)
        assert int(_observe_jit(np.int64(acc), bits)) == py_wrap(acc, bits)


def _f32bits(x) -> int:
    return int(np.float32(x).view(np.uint32))


def test_accumulate_and_observe_float_python_vs_jit():
    rng = np.random.default_rng(7)
    accs = np.concatenate([rng.standard_normal(200).astype(np.float32) * 1e3,
                           np.array([0.0, -0.0, 1.0, 2.0**-149, 3.4e38, -3.4e38], np.float32)])
    vals = np.concatenate([rng.standard_normal(200).astype(np.float32),
                           np.array([-0.0, 0.0, 2.0**-24, 1e-8, 3.4e38, -3.4e38], np.float32)])
    with np.errstate(over="ignore"):
        for acc, v in zip(accs, vals):
            want = _f32bits(acc + v)  # numpy binary32 addition, RNE
            assert _f32bits(accumulate(acc, v, 32, False)) == want
            assert _f32bits(accumulate(float(acc), float(v), 32, True)) == want
            assert _f32bits(_accumulate_jit(acc, v, 32, False)) == want
            assert _f32bits(_accumulate_jit(acc, v, 32, True)) == want
            assert _f32bits(observe(acc, 32)) == _f32bits(acc)
            assert _f32bits(_observe_jit(acc, 32)) == _f32bits(acc)
    # 1 + 2**-24 is a tie between 1 and 1 + 2**-23: RNE keeps 1.
    assert accumulate(np.float32(1.0), np.float32(2.0**-24), 32, False) == np.float32(1.0)


# ---------------------------------------------------------------- fp16 MAC and conversions
ALL_H = np.arange(65536, dtype=np.uint32).astype(np.uint16)
ALL_F16 = ALL_H.view(np.float16)
FINITE_F16 = ALL_F16[np.isfinite(ALL_F16)]


@njit
def _fp16_mac_all(acc, a, b, out):
    for i in range(a.shape[0]):
        out[i] = fp16_mac(acc[i], a[i], b[i])


@njit
def _to16_all(x, out):
    for i in range(x.shape[0]):
        out[i] = fp32_to_fp16_bits(x[i])


@njit
def _from16_all(h, out):
    for i in range(h.shape[0]):
        out[i] = fp16_bits_to_fp32(h[i])


def test_fp16_product_exact_and_mac_vs_numpy_float32():
    rng = np.random.default_rng(99)
    n = 20000
    a = rng.choice(FINITE_F16, n).astype(np.float32)
    b = rng.choice(FINITE_F16, n).astype(np.float32)
    exact = a.astype(np.float64) * b.astype(np.float64)  # 22-bit significands: exact in fp64
    prod32 = a * b
    np.testing.assert_array_equal(prod32.astype(np.float64), exact)
    half = n // 2
    wide = rng.standard_normal(n - half) * 10.0 ** rng.integers(-30, 30, n - half)
    acc = np.concatenate([rng.choice(FINITE_F16, half).astype(np.float32),
                          wide.astype(np.float32)])
    want = acc + exact.astype(np.float32)  # one binary32 RNE addition
    out = np.zeros(n, np.float32)
    _fp16_mac_all(acc, a, b, out)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    # From plain Python too, on a few.
    for i in range(0, n, 997):
        assert _f32bits(fp16_mac(acc[i], a[i], b[i])) == int(want.view(np.uint32)[i])
    # inf/NaN propagate.
    assert np.isnan(fp16_mac(np.float32(1.0), np.float32(np.inf), np.float32(0.0)))
    assert fp16_mac(np.float32(1.0), np.float32(np.inf), np.float32(2.0)) == np.inf


def test_fp16_bits_to_fp32_exhaustive_vs_numpy():
    out = np.zeros(65536, np.float32)
    _from16_all(ALL_H, out)
    ref = ALL_F16.astype(np.float32)
    nan = np.isnan(ref)
    assert nan.sum() == 2046
    np.testing.assert_array_equal(out[~nan].view(np.uint32), ref[~nan].view(np.uint32))
    assert np.isnan(out[nan]).all()
    for h in (0x0000, 0x8000, 0x0001, 0x3C00, 0x7BFF, 0xFC00, 0x03FF):  # from plain Python
        assert _f32bits(fp16_bits_to_fp32(h)) == int(ref.view(np.uint32)[h])


@njit
def _fp16_to_fp32_array(h):
    # Stay inside Numba: a float32 returned to Python becomes a float64, which quiets sNaNs.
    out = np.empty(h.size, np.float32)
    for i in range(h.size):
        out[i] = fp16_bits_to_fp32(h[i])
    return out


def test_fp16_bits_to_fp32_nan_sign_and_payload_like_numpy():
    h = np.array([0xFE00, 0x7C01, 0x7D00, 0xFFFF], np.uint16)
    want = h.view(np.float16).astype(np.float32).view(np.uint32)
    np.testing.assert_array_equal(_fp16_to_fp32_array(h).view(np.uint32), want)


def test_fp32_to_fp16_bits_exhaustive_round_trip():
    out = np.zeros(65536, np.uint16)
    _to16_all(ALL_F16.astype(np.float32), out)
    nan = np.isnan(ALL_F16)
    np.testing.assert_array_equal(out[~nan], ALL_H[~nan])
    # NaN stays a (quiet) NaN with its sign.
    assert ((out[nan] & 0x7C00) == 0x7C00).all() and ((out[nan] & 0x03FF) != 0).all()
    np.testing.assert_array_equal(out[nan] & 0x8000, ALL_H[nan] & 0x8000)


def _numpy_fp16_bits(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np.float16).view(np.uint16)


def _random_f32_cases(rng) -> np.ndarray:
    u32 = lambda v: np.asarray(v, np.uint32)  # noqa: E731
    n = 20000
    parts = [rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)]  # every class
    # Normal-range ties: the 13 dropped mantissa bits are exactly 0x1000 (and +-1 ulp).
    hi = (rng.integers(113, 143, n).astype(np.uint32) << 23) | (
        rng.integers(0, 1024, n).astype(np.uint32) << 13)
    sign = rng.integers(0, 2, n).astype(np.uint32) << 31
    parts += [hi | 0x1000 | sign, (hi | 0x1000 | sign) + 1, (hi | 0x0FFF | sign)]
    # fp16 subnormal / underflow range (fp32 exponents 97..113), random mantissas.
    parts.append((rng.integers(97, 114, n).astype(np.uint32) << 23)
                 | rng.integers(0, 2**23, n).astype(np.uint32) | sign)
    # fp32 subnormals.
    parts.append(rng.integers(1, 2**23, n).astype(np.uint32) | sign)
    parts = [p.astype(np.uint32) for p in parts]
    # Subnormal ties (q + 1/2) * 2**-24 and the underflow boundary 2**-25 (ties to 0).
    q = np.arange(0, 1024, dtype=np.float64)
    ties = ((q + 0.5) * 2.0**-24).astype(np.float32)
    special = np.array([2.0**-25, 2.0**-25 * (1 + 2**-23), 2.0**-25 * (1 - 2**-24), 2.0**-24,
                        65504.0, 65519.0, 65519.996, 65520.0, 65536.0, 1e30, 3.4e38,
                        np.inf, -np.inf, np.nan, 0.0, -0.0, 2.0**-14, 2.0**-14 * (1 - 2**-11)],
                       np.float64)
    with np.errstate(over="ignore"):
        floats = np.concatenate([ties, -ties, special.astype(np.float32),
                                 -special.astype(np.float32)])
    return np.concatenate(parts + [u32(floats.view(np.uint32))]).view(np.float32)


def test_fp32_to_fp16_bits_random_vs_numpy():
    x = _random_f32_cases(np.random.default_rng(2024))
    out = np.zeros(x.shape[0], np.uint16)
    _to16_all(x, out)
    want = _numpy_fp16_bits(x)
    nan = np.isnan(x)
    assert 10 < nan.sum() < x.shape[0] // 4
    np.testing.assert_array_equal(out[~nan], want[~nan])
    assert ((out[nan] & 0x7C00) == 0x7C00).all() and ((out[nan] & 0x03FF) != 0).all()
    np.testing.assert_array_equal(out[nan] & 0x8000, want[nan] & 0x8000)
    # Hand-checked rounding: 65520 is the tie between 65504 (odd) and 65536 (-> inf).
    assert int(fp32_to_fp16_bits(np.float32(65520.0))) == 0x7C00
    assert int(fp32_to_fp16_bits(np.float32(65519.996))) == 0x7BFF
    assert int(fp32_to_fp16_bits(np.float32(2.0**-25))) == 0x0000  # tie to even (0)
    assert int(fp32_to_fp16_bits(np.float32(3 * 2.0**-25))) == 0x0002  # 1.5 -> 2
    assert int(fp32_to_fp16_bits(np.float32(1.0 + 2.0**-11))) == 0x3C00  # tie to even
    assert int(fp32_to_fp16_bits(np.float32(1.0 + 3 * 2.0**-11))) == 0x3C02
    assert int(fp32_to_fp16_bits(np.float32(-0.0))) == 0x8000


def test_fp32_to_fp16_bits_nan_payload_matches_numpy():
    x = np.array([0x7F800001, 0x7FA00000, 0x7FFFFFFF, 0xFFC02000], np.uint32).view(np.float32)
    out = np.zeros(4, np.uint16)
    _to16_all(x, out)
    np.testing.assert_array_equal(out, _numpy_fp16_bits(x))
