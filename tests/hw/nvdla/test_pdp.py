"""NVDLA PDP pooling (hw/nvdla/pdp.py) against an independent plain-loop reference, hand-worked
rounding vectors, NVIDIA's 12 nv_small PDP trace tests (output CRCs) and split-width equality.

Reference semantics (NVIDIA ``cmod/pdp/NV_NVDLA_pdp.cpp``): max/min over the real elements only;
average = (real sum + pad values) * RECIP_KERNEL_WIDTH / 2**16, rounded half away from zero, then
the same with RECIP_KERNEL_HEIGHT.
"""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hw.nvdla.pdp import (PdpSplit, pdp, pdp_output_shape, pdp_pad_values_from_regs,
                          pdp_split_plan)


# ---------------------------------------------------------------------- independent reference
def rnd16(v):
    """v / 2**16 rounded half away from zero, in Python integers."""
    mag = (abs(v) + (1 << 15)) >> 16
    return mag if v >= 0 else -mag


def ref_pool(x, kernel, stride, padding, method, pad_regs, rw, rh, bits):
    """Plain loops: each window clipped to the input; the average adds PAD_VALUE_{n_w}X once per
    real row and kernel_w * PAD_VALUE_{n_h}X once (n_w/n_h = padded columns/rows)."""
    kh, kw = kernel
    sh, sw = stride
    top, bottom, left, right = padding
    n_img, h, w, c_all = x.shape
    oh = (h + top + bottom - kh) // sh + 1
    ow = (w + left + right - kw) // sw + 1
    out = np.zeros((n_img, oh, ow, c_all), np.int64)
    for n in range(n_img):
        for p in range(oh):
            rows = [r for r in range(p * sh - top, p * sh - top + kh) if 0 <= r < h]
            for q in range(ow):
                cols = [s for s in range(q * sw - left, q * sw - left + kw) if 0 <= s < w]
                for c in range(c_all):
                    vals = [int(x[n, r, s, c]) for r in rows for s in cols]
                    if method == "max":
                        out[n, p, q, c] = max(vals)
                    elif method == "min":
                        out[n, p, q, c] = min(vals)
                    else:
                        total = sum(vals)
                        if kw - len(cols):
                            total += len(rows) * pad_regs[kw - len(cols) - 1]
                        if kh - len(rows):
                            total += kw * pad_regs[kh - len(rows) - 1]
                        v = rnd16(rnd16(total * rw) * rh)
                        half = 1 << (bits - 1)  # static_cast to int8/int16: wrap
                        out[n, p, q, c] = ((v + half) % (2 * half)) - half
    return out


def ref_average_padded(x, kernel, stride, padding, pad_value, rw, rh):
    """Average with one pad value, by materializing the padded tensor (np.pad): an independent
    statement of 'padded positions count as pad_value' (what PAD_VALUE_NX = N * value means)."""
    top, bottom, left, right = padding
    xp = np.pad(x.astype(np.int64), ((0, 0), (top, bottom), (left, right), (0, 0)),
                constant_values=pad_value)
    kh, kw = kernel
    oh, ow = pdp_output_shape(x.shape[1], x.shape[2], kernel, stride, padding)
    out = np.zeros((x.shape[0], oh, ow, x.shape[3]), np.int64)
    for p in range(oh):
        for q in range(ow):
            y0, x0 = p * stride[0], q * stride[1]
            sums = xp[:, y0:y0 + kh, x0:x0 + kw, :].sum(axis=(1, 2))
            out[:, p, q, :] = [[rnd16(rnd16(int(s) * rw) * rh) for s in row] for row in sums]
    return out


@st.composite
def pool_case(draw):
    precision = draw(st.sampled_from(["int8", "int16"]))
    kh, kw = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    sh = draw(st.one_of(st.integers(1, 3), st.integers(1, 16)))
    sw = draw(st.one_of(st.integers(1, 3), st.integers(1, 16)))
    pads = tuple(draw(st.integers(0, min(7, k - 1))) for k in (kh, kh, kw, kw))
    h = max(draw(st.integers(1, 11)), kh - pads[0] - pads[1])
    w = max(draw(st.integers(1, 11)), kw - pads[2] - pads[3])
    c = draw(st.integers(1, 5))
    method = draw(st.sampled_from(["max", "min", "average"]))
    seed = draw(st.integers(0, 2**31 - 1))
    return precision, (draw(st.integers(1, 2)), h, w, c), (kh, kw), (sh, sw), pads, method, seed


def random_input(precision, shape, seed):
    bits = 8 if precision == "int8" else 16
    rng = np.random.default_rng(seed)
    dtype = np.int8 if bits == 8 else np.int16
    return rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), shape).astype(dtype), bits, rng


@settings(max_examples=120, deadline=None)
@given(pool_case())
def test_random_pooling_matches_reference(case):
    precision, shape, kernel, stride, padding, method, seed = case
    x, bits, rng = random_input(precision, shape, seed)
    # arbitrary PAD_VALUE_1X..7X registers within the widths the C model reads
    widths = (8, 9, 10, 10, 11, 11, 11) if bits == 8 else (16, 17, 18, 18, 19, 19, 19)
    regs = [int(rng.integers(-(1 << (b - 1)), 1 << (b - 1))) for b in widths]
    got = pdp(x, kernel, stride, padding, method, pad_values=regs)
    rw, rh = (1 << 16) // kernel[1], (1 << 16) // kernel[0]
    want = ref_pool(x, kernel, stride, padding, method, regs, rw, rh, bits)
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, want)


@settings(max_examples=60, deadline=None)
@given(pool_case(), st.integers(-128, 127))
def test_single_pad_value_means_padded_positions_hold_it(case, pad_value):
    precision, shape, kernel, stride, padding, _, seed = case
    x, bits, _ = random_input(precision, shape, seed)
    pad_value = pad_value * (1 if bits == 8 else 256)
    got = pdp(x, kernel, stride, padding, "average", pad_values=pad_value)
    want = ref_average_padded(x, kernel, stride, padding, pad_value,
                              (1 << 16) // kernel[1], (1 << 16) // kernel[0])
    np.testing.assert_array_equal(got, want)


def test_max_min_exclude_padding():
    # all-negative input, pad 1 all round: padded zeros must not win the max, and a positive
    # pad value must not win the min of an all-positive input (pad values are ignored)
    x = np.full((1, 2, 2, 1), -100, np.int8)
    x[0, 1, 1, 0] = -7
    out = pdp(x, (3, 3), (1, 1), (1, 1, 1, 1), "max", pad_values=127)
    np.testing.assert_array_equal(out[0, :, :, 0], [[-7, -7], [-7, -7]])
    y = np.full((1, 2, 2, 1), 100, np.int8)
    y[0, 0, 0, 0] = 3
    out = pdp(y, (2, 2), (1, 1), (1, 1, 1, 1), "min", pad_values=-128)
    np.testing.assert_array_equal(out[0, :, :, 0], [[3, 3, 100], [3, 3, 100], [100, 100, 100]])


# ---------------------------------------------------------------------- hand-worked rounding
def window(values, dtype):
    """One kernel-sized window (kh, kw) as a 1x kh x kw x 1 tensor."""
    return np.asarray(values, dtype)[None, :, :, None]


def avg1(x, k):
    """The single output of a k x k average over the single window ``x``."""
    return pdp(x, (k, k), (1, 1), method="average")[0, 0, 0, 0]


def test_2x2_double_rounding_differs_from_exact_mean():
    # sum 5 = 1+1+1+2, mean 1.25 -> 1 exactly; the PDP: 5 * 32768 / 2**16 = 2.5 -> 3 (tie away
    # from zero), then 3 * 32768 / 2**16 = 1.5 -> 2.
    assert avg1(window([[1, 1], [1, 2]], np.int8), 2) == 2
    # negative ties round away from zero too: -5 -> -2.5 -> -3 -> -1.5 -> -2 (exact -1.25 -> -1)
    assert avg1(window([[-1, -1], [-1, -2]], np.int8), 2) == -2
    # -10: -5 -> -2.5 -> -3 (exact mean -2.5 rounds to -3 as well)
    assert avg1(window([[-1, -2], [-3, -4]], np.int8), 2) == -3


def test_1x6_reciprocal_loses_the_half():
    # recip(6) = floor(65536 / 6) = 10922 (exact would be 10922.67).
    # 127*5 + 124 = 759, mean 126.5 -> 127 exactly; the PDP: 759 * 10922 = 8289798,
    # / 65536 = 126.4923 -> 126; then * 65536 / 65536 (kernel height 1) stays 126.
    x = window([[127, 127, 127, 127, 127, 124]], np.int8)
    assert pdp(x, (1, 6), (1, 6), method="average")[0, 0, 0, 0] == 126
    # -128*5 - 125 = -765, mean -127.5 -> -128 exactly; the PDP: -765 * 10922 = -8355330,
    # / 65536 = -127.4922 -> -127.
    x = window([[-128, -128, -128, -128, -128, -125]], np.int8)
    assert pdp(x, (1, 6), (1, 6), method="average")[0, 0, 0, 0] == -127


def test_int16_extremes_3x3_and_7x7():
    # 3x3 of -32768: sum -294912; * 21845 = -6442352640; / 65536 = -98302.5 -> -98303 (tie,
    # away from zero); * 21845 = -2147429035; / 65536 = -32767.17 -> -32767 (not -32768).
    x = np.full((1, 3, 3, 1), -32768, np.int16)
    assert avg1(x, 3) == -32767
    # 3x3 of 32767: sum 294903; * 21845 = 6442156035; / 65536 = 98299.5000458 -> 98300;
    # * 21845 = 2147363500; / 65536 = 32766.17 -> 32766.
    assert avg1(np.full((1, 3, 3, 1), 32767, np.int16), 3) == 32766
    # 7x7 of 32767: sum 1605583; * 9362 (floor(65536/7), 2/65536 short) = 15031468046;
    # / 65536 = 229362.0002 -> 229362; * 9362 = 2147287044; / 65536 = 32765.00006 -> 32765.
    assert avg1(np.full((1, 7, 7, 1), 32767, np.int16), 7) == 32765
    # 8x8 reciprocals are exact: -32768 * 64 / 64 and 32767 * 64 / 64 come back unchanged
    assert avg1(np.full((1, 8, 8, 1), -32768, np.int16), 8) == -32768
    assert avg1(np.full((1, 8, 8, 1), 32767, np.int16), 8) == 32767
    # max/min keep the extremes
    y = np.array([[[[-32768], [32767]]]], np.int16)
    assert pdp(y, (1, 2), method="max")[0, 0, 0, 0] == 32767
    assert pdp(y, (1, 2), method="min")[0, 0, 0, 0] == -32768


def test_int8_3x3_and_7x7_match_exact_rounding_for_every_sum():
    # With int8 sums the reciprocal error never shows for 3x3 and 7x7: every possible window sum
    # (one per channel) gives round_half_away(sum / k^2). (9 and 49 are odd, so no exact ties.)
    for k in (3, 7):
        n = k * k
        sums = np.arange(-128 * n, 127 * n + 1)
        base, extra = np.divmod(sums, n)  # spread each sum over the window: base + 0/1
        flat = base[:, None] + (np.arange(n)[None, :] < extra[:, None])
        x = flat.reshape(sums.size, k, k, 1).astype(np.int8)  # one image per sum
        assert np.array_equal(x.astype(np.int64).sum(axis=(1, 2, 3)), sums)
        got = pdp(x, (k, k), method="average")[:, 0, 0, 0].astype(np.int64)
        exact = np.sign(sums) * ((2 * np.abs(sums) + n) // (2 * n))
        np.testing.assert_array_equal(got, exact)


def test_average_with_padding_by_hand():
    # 2x2 input [[10, 20], [30, 40]], 3x3 kernel, stride 1, pad 1 all round, pad value 85
    # (the trace pdp_24x16x1_8x8_ave_int8_0 writes PAD_VALUE_NX = N * 85).
    # Top-left window: real 10+20+30+40 = 100; padded positions 5 -> total 100 + 5*85 = 525.
    # As the C model adds it: 2 real rows x PAD_VALUE_1X (85) + kernel_w 3 x PAD_VALUE_1X (85)
    # for the padded row = 170 + 255 = 425, the same.
    # 525 * 21845 = 11468625, / 65536 = 174.99 -> 175; 175 * 21845 / 65536 = 58.33 -> 58.
    x = np.array([[10, 20], [30, 40]], np.int8)[None, :, :, None]
    out = pdp(x, (3, 3), (1, 1), (1, 1, 1, 1), "average", pad_values=85)
    assert out[0, 0, 0, 0] == 58
    assert np.all(out == 58)  # every window holds all 4 real elements and 5 pads


# ---------------------------------------------------------------------- registers and traces
def test_pad_value_register_decoding():
    # pdp_24x16x1_8x8_ave_int8_0: PAD_VALUE_1X..7X = 0x55, 0xaa, ... = N * 85
    assert pdp_pad_values_from_regs([0x55, 0xAA, 0xFF, 0x154, 0x1A9, 0x1FE, 0x253], "int8") == \
        (85, 170, 255, 340, 425, 510, 595)
    # sign-extended -3 for int8 in a 19-bit field: 0x7fffd -> -3 at every width
    assert pdp_pad_values_from_regs([0x7FFFD] * 7, "int8") == (-3,) * 7
    assert pdp_pad_values_from_regs([0x7FFFD] * 7, "int16") == (-3,) * 7
    # the C model ORs the whole word in: 0x100 with sign bit 7 clear reads 256 for 1X (int8)
    assert pdp_pad_values_from_regs([0x100] + [0] * 6, "int8")[0] == 256


def test_split_registers_of_the_split_trace():
    # pdp_5x7x8_4x1_split_max_int8_0: OPERATION_MODE 0x111 (max, off-flying, SPLIT_NUM 1),
    # PARTIAL_WIDTH_IN 0x100402 (first 2+1, last 1+1, mid 1+1), PARTIAL_WIDTH_OUT 0.
    split = PdpSplit.from_regs(0x111, 0x100402, 0x0)
    assert split == PdpSplit(2, 3, 2, 2, 1, 1, 1)
    # kernel 4 wide, stride 2, pad left 1: slice 0 reads columns 0..2, slice 1 starts at
    # 3 - (4 - 2) = 1 and reads 2 + 2 = 4 columns
    assert split.slices(4, 2, 1, 0) == [(0, 3, 1, 0, 0, 1), (1, 4, 0, 0, 1, 1)]
    assert PdpSplit.from_regs(0x11, 0x2EB9F0BB, 0x2C5F1256) is None  # SPLIT_NUM 0: ignored
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 7, 5, 8)).astype(np.int8)
    for method in ("max", "min", "average"):
        whole = pdp(x, (1, 4), (2, 2), (0, 0, 1, 0), method)
        np.testing.assert_array_equal(pdp(x, (1, 4), (2, 2), (0, 0, 1, 0), method, split=split),
                                      whole)
        assert whole.shape == (1, 4, 2, 8)


@settings(max_examples=60, deadline=None)
@given(pool_case(), st.integers(1, 40), st.integers(1, 8))
def test_split_width_equals_unsplit(case, w, max_out):
    precision, shape, kernel, stride, padding, method, seed = case
    w = max(w, kernel[1] - padding[2] - padding[3])
    x, _, _ = random_input(precision, shape[:2] + (w,) + shape[3:], seed)
    try:
        split = pdp_split_plan(w, kernel[1], stride[1], padding[2], padding[3], max_out)
    except ValueError as err:  # no hardware split exists for this slice width
        assert "before the cube" in str(err) or "no new input column" in str(err)
        return
    whole = pdp(x, kernel, stride, padding, method, pad_values=-3)
    if split is None:
        assert whole.shape[2] <= max_out
        return
    assert max(split.out_first, split.out_mid, split.out_last) <= max_out
    np.testing.assert_array_equal(pdp(x, kernel, stride, padding, method, pad_values=-3,
                                      split=split), whole)


def test_split_with_stride_larger_than_kernel():
    # kernel 2, stride 3 (negative overlap: slices skip a column), pad 1 left and right;
    # 17 columns -> (17 + 2 - 2) // 3 + 1 = 6 outputs in slices of 2: in_first = 1*3 + 2 - 1 = 4,
    # in_mid = 6, in_last = 17 - 4 - 6 = 7; slice 1 starts at 4 - (2 - 3) = 5 = 2*3 - 1.
    split = pdp_split_plan(17, 2, 3, 1, 1, 2)
    assert split == PdpSplit(3, 4, 6, 7, 2, 2, 2)
    x = np.arange(-60, 59, dtype=np.int8)[:119].reshape(1, 7, 17, 1)
    for method in ("max", "average"):
        np.testing.assert_array_equal(
            pdp(x, (2, 2), (3, 3), (1, 1, 1, 1), method, split=split),
            pdp(x, (2, 2), (3, 3), (1, 1, 1, 1), method))


# (all 12 pdp_* traces replay through the register-level player in test_trace.py)


# ---------------------------------------------------------------------- validation
@pytest.mark.parametrize("kwargs, match", [
    (dict(kernel=(9, 1)), r"kernel height = 9: must be an integer in 1\.\.8"),
    (dict(kernel=(1, 0)), r"kernel width = 0"),
    (dict(stride=(17, 1)), r"stride height = 17: must be an integer in 1\.\.16"),
    (dict(kernel=(3, 3), padding=(3, 0, 0, 0)), r"padding top = 3: must be an integer in 0\.\.2"),
    (dict(kernel=(8, 8), padding=(0, 0, 0, 8)), r"padding right = 8: must be an integer in 0\.\.7"),
    (dict(padding=(0, 0, 0)), r"padding = \(0, 0, 0\): must be \(top, bottom, left, right\)"),
    (dict(method="mean"), r"method = 'mean': must be one of 'average', 'max', 'min'"),
    (dict(precision="fp16"), r"precision = 'fp16'"),
    (dict(method="average", pad_values=200), r"pad_values = 200: .* -128\.\.127"),
    (dict(method="average", pad_values=[0] * 6), r"6 values given"),
    (dict(method="average", pad_values=[0, 0, 0, 0, 0, 0, 1024]),
     r"pad_values\[6\] \(PAD_VALUE_7X\) = 1024: .* -1024\.\.1023"),
    (dict(method="average", recip_width=1 << 17), r"recip_width = 131072: .* 0\.\.131071"),
    (dict(kernel=(8, 1)), r"kernel 8x1 does not fit the padded 4x6 input"),
    (dict(split=PdpSplit(2, 3, 1, 2, 3, 1, 3)),
     r"in_first \+ 0 \* in_mid \+ in_last = 5, but the input width is 6"),
    (dict(split=PdpSplit(2, 3, 1, 3, 3, 1, 2)),
     r"out_first \+ 0 \* out_mid \+ out_last = 5, but the output width is 6"),
    (dict(split=PdpSplit(2, 3, 1, 3, 2, 1, 4)),  # kernel 1: 3 columns hold 3 windows, not 2
     r"slice 0 \(3 input columns, pad 0/0\) holds 3 windows, but its PARTIAL_WIDTH_OUT says 2"),
    (dict(split=PdpSplit(1, 3, 1, 3, 3, 1, 3)), r"split.num = 1: must be in 2\.\.256"),
    (dict(split="yes"), r"split = 'yes': must be a PdpSplit or None"),
])
def test_bad_arguments_raise_clear_errors(kwargs, match):
    x = np.zeros((1, 4, 6, 2), np.int8)
    with pytest.raises(ValueError, match=match):
        pdp(x, **kwargs)


def test_bad_input_tensor():
    with pytest.raises(ValueError, match=r"x: value 128 is outside the int8 range -128\.\.127"):
        pdp(np.full((1, 2, 2, 1), 128, np.int32), precision="int8")
    with pytest.raises(ValueError, match=r"x: dtype float32: pass precision="):
        pdp(np.zeros((1, 2, 2, 1), np.float32))
    with pytest.raises(ValueError, match=r"x: shape \(2, 2, 1\): must be non-empty \(N, H, W, C\)"):
        pdp(np.zeros((2, 2, 1), np.int8))
    with pytest.raises(ValueError, match=r"max_out_width = 0"):
        pdp_split_plan(10, 3, 1, 0, 0, 0)
    # stride 1, pad 3 and one output per slice: slice 1 would start at column 1*1 - 3 = -2
    with pytest.raises(ValueError, match=r"slice 1 starts at input column -2: .* before the cube"):
        pdp_split_plan(10, 4, 1, 3, 0, 1)
