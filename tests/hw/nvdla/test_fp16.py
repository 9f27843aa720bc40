"""NVDLA fp16 path (hw/nvdla/fp16.py): against an exact Python model of the same datapath, against
float64 references within NVIDIA's published tolerance (doc/hw/v1/ias/precision.rst), and on
hand-computed vectors where the hardware differs from exact arithmetic."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from hw.nvdla.config import load_nvdla_config
from hw.nvdla.conv import conv_output_shape, reference_conv
from hw.nvdla.fp16 import (conv_fp16, conv_fp16_tolerance, fp16_exponent, pdp_cdp_fp16_close,
                           sdp_fp16, to_fp16_out)
from hw.systolic.config import ConfigError

F16 = np.float16


# ---------------------------------------------------------------------- references
def numpy_conv64(x, w, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """The float64 reference (exact products, float64 sums; zero padding)."""
    return reference_conv(x, w, stride, padding, dilation, groups, 0, np.float64)


def _ilog2(v: Fraction) -> int:
    """e with 2**e <= v < 2**(e+1), v > 0."""
    e = v.numerator.bit_length() - v.denominator.bit_length()
    while Fraction(2) ** e > v:
        e -= 1
    while Fraction(2) ** (e + 1) <= v:
        e += 1
    return e


def _round_on_grid(v: Fraction, t: int, ties_up: bool) -> Fraction:
    u = v / Fraction(2) ** t
    q = u.numerator // u.denominator
    frac = u - q
    if frac > Fraction(1, 2) or (frac == Fraction(1, 2) and ties_up):
        q += 1
    return q * Fraction(2) ** t


def gold_cacc_round(v: Fraction) -> Fraction:
    """v rounded to a normalized 40-bit two's-complement mantissa (positive [2**38, 2**39),
    negative [-2**39, -2**38)), to nearest, ties away from zero."""
    if v == 0:
        return v
    if v > 0:
        return _round_on_grid(v, _ilog2(v) - 38, ties_up=True)
    e = _ilog2(-v)
    t = e - 39 if -v == Fraction(2) ** e else e - 38
    return _round_on_grid(v, t, ties_up=False)  # floor grid: a tie rounds down = away from 0


def gold_rna24(v: Fraction) -> Fraction:
    if v == 0:
        return v
    mag = _round_on_grid(abs(v), _ilog2(abs(v)) - 23, ties_up=True)
    return mag if v > 0 else -mag


def _fields(v):
    b = int(np.asarray(v, F16).view(np.uint16))
    return b >> 15, (b >> 10) & 31, b & 1023


def gold_cell(xs, ws) -> Fraction:
    """One MAC cell in exact Python integers: products aligned to the largest coarse exponent,
    each floored, summed."""
    terms = []
    for a, b in zip(xs, ws):
        sa, ea, fa = _fields(a)
        sb, eb, fb = _fields(b)
        if (ea == 0 and fa == 0) or (eb == 0 and fb == 0):
            continue  # masked
        ma = (fa | (1024 if ea else 0)) << ((ea & 3) if ea else 1)
        mb = (fb | (1024 if eb else 0)) << ((eb & 3) if eb else 1)
        terms.append(((ea >> 2) + (eb >> 2), ma * mb * (-1 if sa ^ sb else 1)))
    top = max([g for g, _ in terms], default=0)
    cell = sum(prod >> (4 * (top - g)) for g, prod in terms if 4 * (top - g) < 32)
    return Fraction(cell) * Fraction(2) ** (4 * top - 50)


def gold_conv(x, w, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, atomic_c=64):
    n_img, h, wid, _ = x.shape
    k_all, r_all, s_all, cg = w.shape
    p_all, q_all = conv_output_shape(h, wid, r_all, s_all, stride, padding, dilation)
    out = np.zeros((n_img, p_all, q_all, k_all), np.float32)
    kg = k_all // groups
    for n in range(n_img):
        for p in range(p_all):
            for q in range(q_all):
                for k in range(k_all):
                    base = (k // kg) * cg
                    acc = Fraction(0)
                    for c0 in range(0, cg, atomic_c):
                        c1 = min(c0 + atomic_c, cg)
                        for r in range(r_all):
                            iy = p * stride[0] - padding[0] + r * dilation[0]
                            for s in range(s_all):
                                ix = q * stride[1] - padding[1] + s * dilation[1]
                                if 0 <= iy < h and 0 <= ix < wid:
                                    cell = gold_cell(x[n, iy, ix, base + c0:base + c1],
                                                     w[k, r, s, c0:c1])
                                    if cell != 0:
                                        acc = gold_cacc_round(acc + cell)
                    out[n, p, q, k] = float(gold_rna24(acc))
    return out


def mixed(rng, shape, lo=-8, hi=3):
    """fp16 values with random signs, full mantissas and exponents spread over 2**lo..2**hi,
    so one MAC cell mixes magnitudes and its alignment truncates; some exact zeros."""
    v = rng.uniform(1, 2, shape) * np.exp2(rng.integers(lo, hi + 1, shape))
    v *= rng.choice([-1.0, 1.0], shape)
    v[rng.random(shape) < 0.05] = 0.0
    return v.astype(F16)


CASES = [
    # (N, H, W, C, K, R, S, stride, padding, dilation, groups, atomic_c)
    (1, 5, 5, 20, 3, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, 8),      # partial group: 20 = 8+8+4
    (1, 6, 7, 70, 2, 3, 3, (2, 2), (0, 1, 1, 0), (1, 1), 1, 64),     # 70 = 64 + 6, strided
    (1, 6, 6, 8, 8, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 8, 64),      # depthwise
    (2, 7, 8, 12, 6, 3, 2, (1, 2), (2, 0, 1, 1), (2, 1), 3, 16),     # grouped, dilated
]
IDS = ["partial_group", "c70_stride2", "depthwise", "grouped_dilated"]


def _kw(case):
    n, h, w_, c, k, r, s, stride, padding, dilation, groups, atomic_c = case
    return dict(stride=stride, padding=padding, dilation=dilation, groups=groups)


def _data(case, seed):
    n, h, w_, c, k, r, s, stride, padding, dilation, groups, atomic_c = case
    rng = np.random.default_rng(seed)
    return mixed(rng, (n, h, w_, c)), mixed(rng, (k, r, s, c // groups), -6, 1)


# ---------------------------------------------------------------------- whole layers
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_conv_equals_exact_python_model(case):
    """Bit for bit against an exact-arithmetic model of the same MAC cell, CACC and FP48->FP32
    rules (Python ints and Fractions: checks the kernel's int64 alignment and sticky logic)."""
    x, w = _data(case, 1)
    got = conv_fp16(x, w, atomic_c=case[-1], **_kw(case))
    want = gold_conv(x, w, atomic_c=case[-1], **_kw(case))
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_layers_within_nvidia_tolerance_and_not_float64(case):
    x, w = _data(case, 2)
    kw = _kw(case)
    acc = conv_fp16(x, w, atomic_c=case[-1], **kw)
    ref = numpy_conv64(x, w, **kw)
    out = to_fp16_out(acc)
    tol = conv_fp16_tolerance(x, w, out, **kw)
    err = np.abs(out.astype(np.float64) - np.clip(ref, -65504, 65504))
    assert np.all(err <= tol), f"worst error/tolerance {np.max(err / tol):.3f}"
    if kw["groups"] == case[3]:
        # depthwise: one product per MAC cell, so no alignment loss, and the 39-bit CACC
        # mantissa holds these 9-product sums: the fp32 result is the exact sum rounded
        # ties-away.
        exact = np.array([float(gold_rna24(Fraction(v))) for v in ref.ravel()], np.float32)
        assert np.array_equal(acc.ravel(), exact)
    else:
        # truncating alignment floors every shifted product: the model sits below float64
        # on average, by far more than fp32 rounding noise.
        diff = acc.astype(np.float64) - ref
        assert np.count_nonzero(acc != ref.astype(np.float32)) > 0
        assert diff.mean() < 0 and np.count_nonzero(diff < 0) > 3 * np.count_nonzero(diff > 0)


def test_doc_example_layer_28x28x64_within_tolerance():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 28, 28, 64)).astype(F16)
    w = (rng.standard_normal((64, 3, 3, 64)) * 0.1).astype(F16)
    acc = conv_fp16(x, w, padding=(1, 1, 1, 1), config=load_nvdla_config("nv_full"))
    out = to_fp16_out(acc)
    ref = numpy_conv64(x, w, padding=(1, 1, 1, 1))
    ratio = np.abs(out - ref) / conv_fp16_tolerance(x, w, out, padding=(1, 1, 1, 1))
    assert ratio.max() <= 1.0
    assert 0.3 < ratio.max()  # not vacuous: the fp16 output rounding alone uses up to 0.5


# ---------------------------------------------------------------------- MAC cell by hand
def _one_pixel(xs, ws, atomic_c=8):
    x = np.array(xs, F16).reshape(1, 1, 1, -1)
    w = np.array(ws, F16).reshape(1, 1, 1, -1)
    return float(conv_fp16(x, w, atomic_c=atomic_c)[0, 0, 0, 0])


def test_alignment_truncates_a_small_product_in_the_same_cell():
    """x = [1, 1, v], w = [1, -1, +-v], v = (2047/1024) * 2**-8 (E = 7: coarse 1, mantissa
    2047 << 3 = 16376). Products 1*1 and 1*-1 have coarse exponent 3 + 3 = 6 (mantissa
    8192 * 8192 = 2**26 each, cancelling); v*v has 1 + 1 = 2, so it is shifted right by
    4 * (6 - 2) = 16: 16376**2 = 268173376, / 2**16 = 4092.0039 -> floor 4092 (negative:
    -4092.0039 -> -4093). The cell LSB is 2**(4*6 - 50) = 2**-26."""
    v = 2047 / 1024 * 2.0 ** -8
    exact = v * v
    assert exact == 268173376 * 2.0 ** -42
    assert _one_pixel([1, 1, v], [1, -1, v]) == 4092 * 2.0 ** -26
    assert _one_pixel([1, 1, v], [1, -1, -v]) == -4093 * 2.0 ** -26  # floor, not toward zero
    # exact arithmetic (and numpy float32, where the product fits) would keep every bit:
    assert np.float32(exact) == exact != 4092 * 2.0 ** -26
    # in a separate cell (channel 8 with atomic_c 8) nothing is shifted: exact
    xs = [1, 1] + [0] * 6 + [v]
    ws = [1, -1] + [0] * 6 + [v]
    assert _one_pixel(xs, ws) == exact


def test_zero_operands_are_masked_from_alignment():
    """A zero data value paired with a large weight must not raise the cell's exponent:
    [0 * 2**15] + [v * v] gives v*v exactly (v as above, in its own top group)."""
    v = 2047 / 1024 * 2.0 ** -8
    assert _one_pixel([0, v], [2.0 ** 15, v]) == v * v


def test_products_shifted_32_bits_or_more_vanish():
    """1*1 has coarse exponent 6; 2**-14 * 2**-14 (E = 1: coarse 0, mantissa 1024 << 1) has 0,
    so it is shifted 24 bits: 2048**2 / 2**24 = 0.25 -> 0. A denormal 2**-24 (E = 0, mantissa
    1 << 1 = 2) ... With 1 * 0.125 (0.125: E = 12, coarse 3, mantissa 1024; product 2**23 at
    coarse 6, value 2**-3) instead of 1 * 1 the result fits fp32: the negative product
    -2**-28 = -2**22 LSB / 2**24 floors to -1 LSB, giving 2**-3 - 2**-26."""
    tiny = 2.0 ** -14
    assert _one_pixel([1, tiny], [1, tiny]) == 1.0
    assert _one_pixel([1, tiny], [0.125, tiny]) == 0.125
    assert _one_pixel([1, tiny], [0.125, -tiny]) == 0.125 - 2.0 ** -26
    # with a product 8 coarse steps (32 bits) below, even a negative one is dropped: 0, not -1
    big = 2.0 ** 15   # E = 30: coarse 7; 2**15 * 2**15 has coarse 14 vs 2**-14 * 2**-14 at 0
    assert _one_pixel([big, tiny], [big, -tiny]) == 2.0 ** 30


def test_nvidia_tolerance_is_not_a_worst_case_bound():
    """Two cancelling products 2*2 - 2*2 (coarse 4 + 4 = 8, cell LSB 2**(32 - 50) = 2**-18) and
    30 tiny negative products 2**-10 * -2**-10 (E = 5: coarse 1, mantissa 1024 << 1 = 2048;
    product coarse 2, shifted 4 * (8 - 2) = 24): -2048**2 / 2**24 = -0.25 floors to -1 LSB
    each, so the cell is -30 * 2**-18 while the exact sum is -30 * 2**-20. NVIDIA's bound:
    max_exp = (1 & ~3) + (1 & ~3) = 0 (2 has exp 1), so 2**-20 * 32 * 2 + 2**(exp(a) - 10),
    a = -30 * 2**-18 = -1.875 * 2**-14 (exp -14): 2**-14 + 2**-24, smaller than the error
    22.5 * 2**-18 = 1.40625 * 2**-14."""
    xs = [2, 2] + [2.0 ** -10] * 30
    ws = [2, -2] + [-(2.0 ** -10)] * 30
    x = np.array(xs, F16).reshape(1, 1, 1, 32)
    w = np.array(ws, F16).reshape(1, 1, 1, 32)
    acc = conv_fp16(x, w, atomic_c=32)
    assert float(acc[0, 0, 0, 0]) == -30 * 2.0 ** -18
    exact = float(numpy_conv64(x, w)[0, 0, 0, 0])
    assert exact == -30 * 2.0 ** -20
    out = to_fp16_out(acc)
    tol = conv_fp16_tolerance(x, w, out)
    assert float(tol[0, 0, 0, 0]) == 2.0 ** -14 + 2.0 ** -24
    assert abs(float(out[0, 0, 0, 0]) - exact) == 22.5 * 2.0 ** -18 > tol[0, 0, 0, 0]


# ---------------------------------------------------------------------- CACC by hand
def _three_cells(p1, p2, p3):
    """1x1 conv over 24 channels, atomic_c 8: one product per cell, cells added in order."""
    x = np.zeros((1, 1, 1, 24), F16)
    w = np.zeros((1, 1, 1, 24), F16)
    for i, (a, b) in enumerate((p1, p2, p3)):
        x[0, 0, 0, 8 * i], w[0, 0, 0, 8 * i] = a, b
    return float(conv_fp16(x, w, atomic_c=8)[0, 0, 0, 0])


def test_cacc_is_wider_than_fp32():
    """1 + 2**-30 - 1: fp32 accumulation loses 2**-30 (its ulp at 1 is 2**-23), the 40-bit
    CACC mantissa (39 bits of magnitude, ulp 2**-38 at 1) keeps it. 2**-30 = 2**-15 * 2**-15
    (fp16 denormals)."""
    assert _three_cells((1, 1), (2.0 ** -15, 2.0 ** -15), (1, -1)) == 2.0 ** -30
    acc32 = np.float32(1) + np.float32(2.0 ** -30) - np.float32(1)
    assert acc32 == 0


def test_cacc_rounds_to_39_bits_ties_away():
    """1 + 2**-45 rounds to 1 (2**-45 < half an ulp 2**-39), so (1 + 2**-45) - 1 = 0 where
    float64 gives 2**-45 (= 2**-24 * 2**-21). 1 + 2**-39 is exactly half an ulp: ties away
    from zero give 1 + 2**-38 (ties-to-even would give 1); -1 - 2**-39 gives -1 - 2**-38."""
    assert _three_cells((1, 1), (2.0 ** -24, 2.0 ** -21), (1, -1)) == 0.0
    assert _three_cells((1, 1), (2.0 ** -24, 2.0 ** -15), (1, -1)) == 2.0 ** -38
    assert _three_cells((1, -1), (2.0 ** -24, -(2.0 ** -15)), (1, 1)) == -(2.0 ** -38)


def test_cacc_rounding_sees_bits_far_below():
    """-2**20 + (2**-20 + 2**-42) + 2**20. Cell 1: 1024 * -1024. Cell 2: 2**-10 * 2**-10
    (coarse 1 + 1, mantissa 2048**2 = 2**22 at LSB 2**(8 - 50)) plus 2**-21 * 2**-21 (denormal
    mantissas 16 * 16 = 256, coarse 0, shifted 8: exactly 1 LSB = 2**-42). Near -2**20 the
    CACC grid step is 2**(20 - 39) = 2**-19, so -2**20 + 2**-20 is a tie, and the 2**-42, 40
    bits below, puts the sum above it: the nearest is -2**20 + 2**-19, and + 2**20 leaves
    2**-19. A rounder that lost the far bits would call it a tie, round away from zero to
    -2**20 and end at 0; float64 gives 2**-20 + 2**-42."""
    x = np.zeros((1, 1, 1, 24), F16)
    w = np.zeros((1, 1, 1, 24), F16)
    x[0, 0, 0, [0, 8, 9, 16]] = [1024, 2.0 ** -10, 2.0 ** -21, 1024]
    w[0, 0, 0, [0, 8, 9, 16]] = [-1024, 2.0 ** -10, 2.0 ** -21, 1024]
    assert float(conv_fp16(x, w, atomic_c=8)[0, 0, 0, 0]) == 2.0 ** -19
    assert float(numpy_conv64(x, w)[0, 0, 0, 0]) == 2.0 ** -20 + 2.0 ** -42


def test_cacc_to_fp32_rounds_ties_away():
    """One cell 1*1 + 2**-24 * 1 = 1 + 2**-24 (the denormal's product 2 * 8192, shifted 12,
    is 4 LSB of 2**-26, exact): a tie at fp32, rounded away from zero to 1 + 2**-23, where
    numpy's float32 (ties to even) gives 1."""
    assert _one_pixel([1, 2.0 ** -24], [1, 1]) == 1 + 2.0 ** -23
    assert np.float32(1 + 2.0 ** -24) == 1.0
    assert _one_pixel([1, 2.0 ** -24], [-1, -1]) == -(1 + 2.0 ** -23)


def test_nan_propagates_and_inf_reads_as_65536():
    x = np.ones((1, 3, 3, 4), F16)
    x[0, 0, 0, 1] = np.nan
    w = np.ones((2, 1, 1, 4), F16)
    acc = conv_fp16(x, w)
    assert np.isnan(acc[0, 0, 0]).all() and not np.isnan(acc[0, 1:]).any()
    assert np.all(acc[0, 1:] == 4)
    # infinity has E = 31 (coarse 7, mantissa 1024 << 3): the MAC reads it as 65536
    assert _one_pixel([np.inf, 1], [1, 1]) == 65537.0
    assert float(to_fp16_out(np.float32([65537.0]))[0]) == 65504.0


def test_large_and_denormal_outputs():
    """Sums beyond 65504 clamp at the output, matching the clipped float64 reference within the
    tolerance; tiny sums come out as fp16 denormals exactly."""
    rng = np.random.default_rng(3)
    x = (rng.uniform(200, 255, (1, 4, 4, 16))).astype(F16)
    w = (rng.uniform(25, 30, (3, 1, 1, 16))).astype(F16)
    out = to_fp16_out(conv_fp16(x, w))
    ref = numpy_conv64(x, w)
    assert ref.min() > 65504 and np.all(out == F16(65504))
    assert np.all(np.abs(out - np.clip(ref, -65504, 65504)) <= conv_fp16_tolerance(x, w, out))
    # 2**-12 * 2**-12 * k: 2**-24 * k, the fp16 denormal k units (k = 1, 3, 5)
    xs = (np.array([1, 3, 5]) * 2.0 ** -12).astype(F16).reshape(1, 1, 3, 1)
    ws = np.array([2.0 ** -12], F16).reshape(1, 1, 1, 1)
    out = to_fp16_out(conv_fp16(xs, ws))
    assert out.ravel().view(np.uint16).tolist() == [1, 3, 5]


# ---------------------------------------------------------------------- output converter
def test_output_converter_edges():
    cases = [
        (1 + 2.0 ** -11, 1.0),                    # tie between 1 and 1 + 2**-10: even (1)
        (1 + 3 * 2.0 ** -11, 1 + 2.0 ** -9),      # tie: even is the upper neighbour
        (65519.99, 65504.0),                      # rounds down to the largest finite
        (65520.0, 65504.0),                       # IEEE would round to inf: clamped
        (1e30, 65504.0), (-1e30, -65504.0),
        (np.inf, 65504.0), (-np.inf, -65504.0),
        (2.0 ** -24, 2.0 ** -24),                 # smallest denormal kept
        (2.0 ** -25, 0.0),                        # tie between 0 and 2**-24: even (0)
        (2.0 ** -25 * 1.0000001, 2.0 ** -24),     # above the tie
        (3 * 2.0 ** -25, 2.0 ** -23),             # tie between 1 and 2 units: even (2)
        (-(2.0 ** -26), -0.0),
    ]
    src = np.array([c[0] for c in cases], np.float32)
    got = to_fp16_out(src)
    for (value, want), g in zip(cases, got):
        assert float(g) == want and np.signbit(g) == np.signbit(want), value
    assert np.isnan(to_fp16_out(np.float32([np.nan]))[0])


def test_output_converter_is_ieee_rne_inside_the_range():
    rng = np.random.default_rng(4)
    v = (rng.standard_normal(20000) * np.exp2(rng.integers(-30, 16, 20000))).astype(np.float32)
    inside = np.abs(v) < 65520
    assert np.array_equal(to_fp16_out(v)[inside].view(np.uint16),
                          v[inside].astype(F16).view(np.uint16))
    assert np.all(np.abs(to_fp16_out(v)[~inside]) == F16(65504))


# ---------------------------------------------------------------------- SDP
def test_sdp_bit_exact_against_numpy_float32():
    rng = np.random.default_rng(5)
    d = (rng.standard_normal((3, 5, 7, 8)) * 100).astype(np.float32)
    bias = (rng.standard_normal(8) * 50).astype(F16)
    scale = rng.uniform(-3, 3, 8).astype(F16)
    d32, b32, s32 = d, bias.astype(np.float32), scale.astype(np.float32)
    got = sdp_fp16(d, alu_algo="sum", alu_op=bias, mul_op=scale, relu=True)
    want = np.maximum((d32 + b32) * s32, np.float32(0))
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    for algo, fn in (("max", np.maximum), ("min", np.minimum)):
        got = sdp_fp16(d, alu_algo=algo, alu_op=bias)
        assert np.array_equal(got, fn(d32, b32))
    got = sdp_fp16(d, mul_op=F16(0.25), prelu=True)  # PReLU: negatives times 0.25
    assert np.array_equal(got, np.where(d32 >= 0, d32, d32 * np.float32(0.25)))
    assert np.array_equal(sdp_fp16(d), d)  # everything bypassed
    # X1 then X2 chain: (d + bias) then * scale, rounded once each
    chained = sdp_fp16(sdp_fp16(d, alu_algo="sum", alu_op=bias), mul_op=scale)
    assert np.array_equal(chained, (d32 + b32) * s32)


def test_sdp_nan_operands_flush_to_zero_on_request():
    d = np.array([[1.5, -2.0]], np.float32)
    ops = np.array([np.nan, 1.0], F16)
    assert np.isnan(sdp_fp16(d, alu_algo="sum", alu_op=ops)[0, 0])
    assert sdp_fp16(d, alu_algo="sum", alu_op=ops, nan_to_zero=True).tolist() == [[1.5, -1.0]]


# ---------------------------------------------------------------------- tolerance functions
def test_conv_tolerance_formula_by_hand():
    """1x1 conv, one channel. x = 2 (exp 1, & ~3 = 0), w = 16 (exp 4 -> 4): max_exp 4;
    a = 32 (exp 5): 2**(4-20) * 1*1*1 * 2 * 1 + 2**(5-10) = 2**-15 + 2**-5.
    x = 0.25 (exp -2 -> -4), w = 0.5 (exp -1 -> -4): max_exp -8; a = 0.125 (exp -3), scale 3:
    2**-28 * 2 * 3 + 2**-13. A padded 3x3 window: padded taps read zeros (exp -15 -> -16)."""
    x = np.array([2.0], F16).reshape(1, 1, 1, 1)
    w = np.array([16.0], F16).reshape(1, 1, 1, 1)
    out = np.array([32.0], F16).reshape(1, 1, 1, 1)
    assert conv_fp16_tolerance(x, w, out)[0, 0, 0, 0] == 2.0 ** -15 + 2.0 ** -5
    x = np.array([0.25], F16).reshape(1, 1, 1, 1)
    w = np.array([0.5], F16).reshape(1, 1, 1, 1)
    tol = conv_fp16_tolerance(x, w, np.array([0.125], F16).reshape(1, 1, 1, 1), scale=3.0)
    assert tol[0, 0, 0, 0] == 2.0 ** -28 * 2 * 3 + 2.0 ** -13
    # 3x3 kernel of 2**-9 weights (exp -9 -> -12) over a padded 1x1 input of 1.0 (exp 0):
    # centre tap 0 - 12, padded taps -16 - 12: max_exp -12, R*S*C = 9; exp(0) = -15
    x = np.ones((1, 1, 1, 1), F16)
    w = np.full((1, 3, 3, 1), 2.0 ** -9, F16)
    out = np.zeros((1, 1, 1, 1), F16)
    tol = conv_fp16_tolerance(x, w, out, padding=(1, 1, 1, 1))
    assert tol[0, 0, 0, 0] == 2.0 ** -32 * 9 * 2 + 2.0 ** -25
    assert fp16_exponent(np.array([1.0, 65504, 2.0 ** -24], F16)).tolist() == [0, 15, -15]


def test_pdp_cdp_criterion():
    a = np.array([1.0, 1.0, 0.05, 0.0, 0.0])
    b = np.array([1.00009, 1.0002, 0.05009, 0.0, 5e-5])
    mx = np.array([1.0, 1.0, 0.05, 0.0, 0.0])
    # abs 9e-5 ok & rel 9e-5; abs 2e-4 fails; abs 9e-5 but rel 1.8e-3 fails; equal at max 0;
    # differ at max 0 fails
    assert pdp_cdp_fp16_close(a, b, mx).tolist() == [True, False, False, True, False]


# ---------------------------------------------------------------------- validation
def test_fp16_needs_a_build_with_fp16():
    x = np.ones((1, 2, 2, 8), F16)
    w = np.ones((1, 1, 1, 8), F16)
    with pytest.raises(ConfigError, match="precision = 'fp16': nv_small supports int8"):
        conv_fp16(x, w, config=load_nvdla_config("nv_small"))
    full = load_nvdla_config("nv_full")
    assert np.array_equal(conv_fp16(x, w, config=full), np.full((1, 2, 2, 1), 8, np.float32))


@pytest.mark.parametrize("call,message", [
    (lambda: conv_fp16(np.ones((1, 2, 2, 4), np.float32), np.ones((1, 1, 1, 4), F16)),
     "x: dtype float32: the fp16 path takes float16"),
    (lambda: conv_fp16(np.ones((1, 2, 2, 4), F16), np.ones((1, 1, 1, 4), np.int8)),
     "w: dtype int8"),
    (lambda: conv_fp16(np.ones((1, 2, 2, 4), F16), np.ones((2, 1, 1, 4), F16), groups=3),
     "groups = 3: must divide"),
    (lambda: conv_fp16(np.ones((1, 2, 2, 4), F16), np.ones((2, 1, 1, 4), F16), atomic_c=12),
     "atomic_c = 12"),
    (lambda: conv_fp16(np.ones((1, 2, 2, 4), F16), np.ones((1, 3, 3, 4), F16)), "does not fit"),
    (lambda: conv_fp16(np.ones((1, 2, 2, 4), F16), np.ones((1, 1, 1, 2), F16)),
     "w: 2 channels per kernel; input has 4"),
    (lambda: sdp_fp16(np.ones((2, 3), np.float32), alu_algo="sum", alu_op=0.1),
     "alu_op = 0.1: SDP operands are fp16 values"),
    (lambda: sdp_fp16(np.ones((2, 3), np.float32), mul_op=np.ones(2, F16)),
     "mul_op: 2 values; give 1 or one per channel"),
    (lambda: sdp_fp16(np.ones((2, 3), np.float32), alu_algo="avg", alu_op=1.0),
     "alu_algo = 'avg'"),
    (lambda: sdp_fp16(np.ones((2, 3), np.float64)), "d: dtype float64"),
    (lambda: to_fp16_out(np.ones(3)), "x: dtype float64"),
])
def test_bad_arguments_are_clear(call, message):
    with pytest.raises(ValueError, match=message):
        call()
