"""Pooling windows larger than PDP's, split into a sequence of PDP passes.

PDP pools with kernels 1..8, strides 1..16 and padding 0..7 (``PDP_MAX_*`` in
:mod:`hw.nvdla.program`). A larger window (global average pooling over 14x14, ...) runs as several
passes inside one ``pdp`` hardware layer: the windows must not overlap (stride == kernel, or one
output); each axis's window size is padded up to the next number whose prime factors are <= 7,
factored greedily into kernels <= 8, one pass per factor (pass i pools non-overlapping ``f_i``
windows of pass i-1's output). Max pooling ignores the padding; for average pooling the padding
reads 0 and the last pass's reciprocal registers (``RECIP_KERNEL_WIDTH/HEIGHT``) are programmed
with ``1/true count`` instead of ``1/kernel``, which is exact (ONNC's NVDLA backend,
``DivideGlobalAPIntoAPs.cpp``, uses the same factorisation with an extra multiply). Overlapping
windows larger than 8 cannot be split.
"""

from __future__ import annotations

from hw.nvdla.program import PDP_MAX_KERNEL, PDP_MAX_PAD, PDP_MAX_STRIDE, PdpPass

__all__ = ["split_pool_window"]


def _smooth7_factors(n: int) -> list[int] | None:
    """Greedy factorisation of ``n`` into factors 8..2 (largest first), or None if a prime > 7
    remains."""
    out = []
    for f in range(PDP_MAX_KERNEL, 1, -1):
        while n % f == 0:
            out.append(f)
            n //= f
    return out if n == 1 else None


def _axis_passes(size: int, kernel: int, stride: int, out: int) -> list[tuple[int, int]] | None:
    """(kernel, pad_after) per pass along one axis, or None when the window cannot be split."""
    if kernel <= PDP_MAX_KERNEL and stride <= PDP_MAX_STRIDE:
        return [(kernel, -1)]  # no split needed on this axis (-1: keep the op's own stride/pad)
    if out == 1 and kernel == size:  # global: pad the window up to a 7-smooth size
        padded = size
        while _smooth7_factors(padded) is None:
            padded += 1
        factors = _smooth7_factors(padded)
        pad = padded - size
        if pad > PDP_MAX_PAD or pad >= factors[0]:
            return None
        return [(f, pad if i == 0 else 0) for i, f in enumerate(factors)]
    if stride == kernel and (size - kernel) % stride == 0:  # tiled windows: exact factors only
        factors = _smooth7_factors(kernel)
        if factors is None:
            return None
        return [(f, 0) for f in factors]
    return None


def split_pool_window(in_h: int, in_w: int, kernel_h: int, kernel_w: int, stride_h: int,
                      stride_w: int, pads: tuple[int, int, int, int] = (0, 0, 0, 0)
                      ) -> tuple[PdpPass, ...] | None:
    """PDP passes computing one pooling (pads = top, bottom, left, right), or None if a window
    larger than PDP's cannot be split (overlapping windows, a prime factor > 7 in a tiled window,
    or padding needs beyond PDP's). A window within PDP's limits is one pass, unchanged."""
    pt, pb, pl, pr = pads
    out_h = (in_h + pt + pb - kernel_h) // stride_h + 1
    out_w = (in_w + pl + pr - kernel_w) // stride_w + 1
    big_h = kernel_h > PDP_MAX_KERNEL or stride_h > PDP_MAX_STRIDE
    big_w = kernel_w > PDP_MAX_KERNEL or stride_w > PDP_MAX_STRIDE
    if not (big_h or big_w):
        return (PdpPass(in_h, in_w, out_h, out_w, kernel_h, kernel_w, stride_h, stride_w,
                        pt, pb, pl, pr),)
    if (big_h and (pt or pb)) or (big_w and (pl or pr)):
        return None
    ah = _axis_passes(in_h, kernel_h, stride_h, out_h)
    aw = _axis_passes(in_w, kernel_w, stride_w, out_w)
    if ah is None or aw is None:
        return None
    n = max(len(ah), len(aw))
    passes = []
    h, w = in_h, in_w
    for i in range(n):
        def axis(steps, j, k_op, s_op, p_lo, p_hi):
            if j >= len(steps):
                return 1, 1, 0, 0
            k, pad = steps[j]
            if pad < 0:
                return k_op, s_op, p_lo, p_hi
            return k, k, 0, pad
        kh, sh, p_t, p_b = axis(ah, i, kernel_h, stride_h, pt, pb)
        kw, sw, p_l, p_r = axis(aw, i, kernel_w, stride_w, pl, pr)
        oh = (h + p_t + p_b - kh) // sh + 1
        ow = (w + p_l + p_r - kw) // sw + 1
        passes.append(PdpPass(h, w, oh, ow, kh, kw, sh, sw, p_t, p_b, p_l, p_r))
        h, w = oh, ow
    if (h, w) != (out_h, out_w):  # the split must reproduce the op's output size
        return None
    return tuple(passes)
