"""NVDLA direct convolution (hw/nvdla/conv.py) against a numpy int64 reference, and the
saturation order of CACC worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from hw.nvdla.conv import conv_cacc, conv_output_shape, conv_to_sdp, reference_conv


def numpy_conv(x, w, stride, padding, dilation, groups, pad_value=0):
    """Exact int64 convolution by explicit windows (independent of the kernel's loop order)."""
    return reference_conv(x, w, stride, padding, dilation, groups, pad_value, np.int64)


CASES = [
    # (N, H, W, C, K, R, S, stride, padding, dilation, groups)
    (1, 7, 6, 5, 4, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),
    (2, 9, 9, 70, 9, 3, 3, (2, 2), (0, 1, 1, 0), (1, 1), 1),   # partial channel group (70 = 64+6)
    (1, 8, 8, 16, 16, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 16),  # depthwise
    (1, 10, 11, 12, 6, 3, 2, (1, 2), (2, 0, 1, 1), (2, 1), 3),  # grouped, dilated, asymmetric
    (1, 5, 5, 3, 8, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),     # 1x1 (FC-like)
]


@pytest.mark.parametrize("precision", ["int8", "int16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:7])))
def test_conv_equals_numpy_int64(case, precision):
    n, h, w_, c, k, r, s, stride, padding, dilation, groups = case
    rng = np.random.default_rng(hash(case) % 2**32)
    lo, hi = (-128, 127) if precision == "int8" else (-32768, 32767)
    x = rng.integers(lo, hi + 1, (n, h, w_, c))
    w = rng.integers(lo, hi + 1, (k, r, s, c // groups))
    x.flat[::7] = lo  # extremes
    got = conv_cacc(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups,
                    atomic_c=8 if precision == "int8" else 64, acc_bits=48, precision=precision)
    assert np.array_equal(got, numpy_conv(x, w, stride, padding, dilation, groups))


def test_pad_value_is_read_for_padded_pixels():
    x = np.ones((1, 2, 2, 1), np.int64)
    w = np.ones((1, 3, 3, 1), np.int64)
    got = conv_cacc(x, w, padding=(1, 1, 1, 1), pad_value=-3, atomic_c=8)
    # each output sees the 4 real pixels and 5 padded ones: 4 - 15 = -11
    assert np.array_equal(got[0, :, :, 0], np.full((2, 2), -11))
    assert np.array_equal(got, numpy_conv(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1, pad_value=-3))


def test_cacc_saturates_in_hardware_order():
    """int16, atomic_c=8, 1x1 kernel, 16 channels: two channel groups. Group 0's partial is
    8 * 2**30 = 2**33, which a 34-bit accumulator clamps to 2**33 - 1; group 1 then adds
    -8 * 2**30. Hardware: 2**33 - 1 - 2**33 = -1. Exact sum: 0."""
    x = np.full((1, 1, 1, 16), -32768, np.int64)
    w = np.concatenate([np.full(8, -32768), np.full(8, 32767)]).reshape(1, 1, 1, 16)
    # group 0 products: 2**30 each; group 1 products: -32768 * 32767 = -1073709056 each
    got = int(conv_cacc(x, w, atomic_c=8, acc_bits=34, precision="int16")[0, 0, 0, 0])
    assert got == (2**33 - 1) + 8 * (-32768 * 32767)
    exact = 8 * 2**30 + 8 * (-32768 * 32767)
    assert got == exact - 1  # one below exact: the clamp lost 1
    assert int(conv_cacc(x, w, atomic_c=8, acc_bits=48, precision="int16")[0, 0, 0, 0]) == exact


def test_cacc_to_sdp_rounds_and_saturates():
    acc = np.array([[1004, -1004, 2**40]], np.int64)
    assert conv_to_sdp(acc, 3, 48).tolist() == [[126, -126, 2**31 - 1]]


@pytest.mark.parametrize("kwargs,message", [
    (dict(precision="fp16"), "precision = 'fp16'"),
    (dict(groups=3), "groups = 3: must divide"),
    (dict(atomic_c=12), "atomic_c = 12"),
    (dict(stride=(0, 1)), "must be >= 1"),
])
def test_bad_arguments_are_clear(kwargs, message):
    x = np.zeros((1, 4, 4, 4), np.int64)
    w = np.zeros((2, 3, 3, 4), np.int64)
    with pytest.raises(ValueError, match=message.replace("(", "\\(")):
        conv_cacc(x, w, **kwargs)


def test_out_of_range_values_and_shapes():
    with pytest.raises(ValueError, match="x: value 128 is outside the int8 range"):
        conv_cacc(np.full((1, 2, 2, 1), 128), np.ones((1, 1, 1, 1)))
    with pytest.raises(ValueError, match="w: 2 channels per kernel; input has 1"):
        conv_cacc(np.ones((1, 2, 2, 1), np.int64), np.ones((1, 1, 1, 2), np.int64))
    with pytest.raises(ValueError, match="does not fit"):
        conv_cacc(np.ones((1, 2, 2, 1), np.int64), np.ones((1, 3, 3, 1), np.int64))
