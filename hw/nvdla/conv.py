"""NVDLA direct convolution on real values: MAC cells into CACC, in the hardware's order.

:func:`conv_cacc` computes what CACC holds for every output of a direct convolution (NHWC input,
KRSC weights; stride, zero or constant padding, dilation, groups) with int8 or int16 operands,
and :func:`conv_to_sdp` what CACC delivers to the SDP (``sat32`` of the rounded, truncated
accumulator, :func:`hw.nvdla.numerics.cacc_output`).

Order of accumulation (it matters once the accumulator saturates): CSC runs a *channel
operation* per group of ``atomic_c`` input channels, and within it a *block* of R x S stripes,
one per kernel tap; each MAC cell sums ``atomic_c`` products exactly (:func:`mac_cell`) and CACC
adds that partial sum with saturation at ``acc_bits`` (34 bits in the RTL, 48 in the C model for
int8; 48 for int16). So an output's sum is: for each channel group, for each r, for each s, add
the partial sum over that group's channels. Without saturation the result is the exact integer
convolution, which the tests check against numpy.
"""

from __future__ import annotations

import numpy as np
from hw._jitcache import njit

from hw.numerics import saturate
from hw.nvdla.numerics import cacc_output_array, shift_right_sat

__all__ = ["conv_cacc", "conv_to_sdp", "conv_output_shape", "check_geometry", "reference_conv",
           "cdma_convert"]


@njit(cache=True)
def _conv_kernel(x, w, sy, sx, pad_top, pad_left, dy, dx, groups, atomic_c, acc_bits, pad_value,
                 out):
    n_img, h, wid, _ = x.shape
    k_all, r_all, s_all, c_group = w.shape
    p_all, q_all = out.shape[1], out.shape[2]
    k_group = k_all // groups
    for n in range(n_img):
        for p in range(p_all):
            for q in range(q_all):
                for k in range(k_all):
                    c_base = (k // k_group) * c_group
                    acc = np.int64(0)
                    for c0 in range(0, c_group, atomic_c):
                        c1 = min(c0 + atomic_c, c_group)
                        for r in range(r_all):
                            iy = p * sy - pad_top + r * dy
                            for s in range(s_all):
                                ix = q * sx - pad_left + s * dx
                                partial = np.int64(0)
                                if 0 <= iy < h and 0 <= ix < wid:
                                    for c in range(c0, c1):
                                        partial += np.int64(x[n, iy, ix, c_base + c]) * np.int64(w[k, r, s, c])
                                else:
                                    for c in range(c0, c1):
                                        partial += np.int64(pad_value) * np.int64(w[k, r, s, c])
                                acc = saturate(acc + partial, acc_bits)
                    out[n, p, q, k] = acc


def conv_output_shape(h: int, w: int, r: int, s: int, stride=(1, 1), padding=(0, 0, 0, 0),
                      dilation=(1, 1)) -> tuple[int, int]:
    """(P, Q) of a convolution; ``padding`` is (top, left, bottom, right)."""
    top, left, bottom, right = padding
    p = (h + top + bottom - ((r - 1) * dilation[0] + 1)) // stride[0] + 1
    q = (w + left + right - ((s - 1) * dilation[1] + 1)) // stride[1] + 1
    return p, q


def check_geometry(x, w, stride, padding, dilation, groups, atomic_c) -> tuple[int, int]:
    """The shape checks every convolution path shares (int and fp16): 4-d non-empty arrays,
    groups, channels per kernel, stride/dilation/padding, atomic-C; returns (P, Q). Raises
    ValueError naming the argument, its value and what is allowed."""
    for name, arr, layout in (("x", x, "N, H, W, C"), ("w", w, "K, R, S, C/groups")):
        if arr.ndim != 4 or 0 in arr.shape:
            raise ValueError(f"{name}: shape {arr.shape}: must be non-empty ({layout})")
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1 \
            or x.shape[3] % groups or w.shape[0] % groups:
        raise ValueError(f"groups = {groups!r}: must divide the input channels ({x.shape[3]}) "
                         f"and the kernels ({w.shape[0]})")
    if x.shape[3] // groups != w.shape[3]:
        raise ValueError(f"w: {w.shape[3]} channels per kernel; input has {x.shape[3]} channels "
                         f"in {groups} group(s), so it needs {x.shape[3] // groups}")
    if len(stride) != 2 or len(dilation) != 2 or len(padding) != 4:
        raise ValueError(f"stride {stride} and dilation {dilation} take 2 values, padding "
                         f"{padding} takes 4 (top, left, bottom, right)")
    if min(stride) < 1 or min(dilation) < 1 or min(padding) < 0:
        raise ValueError(f"stride {stride}, dilation {dilation} must be >= 1 and padding "
                         f"{padding} >= 0")
    if atomic_c not in (8, 16, 32, 64, 128):
        raise ValueError(f"atomic_c = {atomic_c!r}: must be one of 8, 16, 32, 64, 128")
    p, q = conv_output_shape(x.shape[1], x.shape[2], w.shape[1], w.shape[2], stride, padding,
                             dilation)
    if p < 1 or q < 1:
        raise ValueError(f"kernel {w.shape[1]}x{w.shape[2]} (dilation {dilation}) does not fit "
                         f"the padded {x.shape[1]}x{x.shape[2]} input")
    return p, q


def _check(x, w, stride, padding, dilation, groups, atomic_c, acc_bits, precision):
    bits = {"int8": 8, "int16": 16}.get(precision)
    if bits is None:
        raise ValueError(f"precision = {precision!r}: conv_cacc takes 'int8' or 'int16' "
                         f"(fp16 has its own path)")
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    p, q = check_geometry(x, w, stride, padding, dilation, groups, atomic_c)
    for name, arr in (("x", x), ("w", w)):
        if not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"{name}: dtype {arr.dtype}: {precision} takes integers")
        if arr.min() < lo or arr.max() > hi:
            bad = arr.min() if arr.min() < lo else arr.max()
            raise ValueError(f"{name}: value {int(bad)} is outside the {precision} range {lo}..{hi}")
    if not 2 <= acc_bits <= 63:
        raise ValueError(f"acc_bits = {acc_bits!r}: must be in 2..63 (34 RTL / 48 C model)")
    return p, q


def conv_cacc(x, w, *, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups: int = 1,
              atomic_c: int = 64, acc_bits: int = 34, precision: str = "int8",
              pad_value: int = 0) -> np.ndarray:
    """CACC contents (int64, ``(N, P, Q, K)``) of a direct convolution of ``x`` (N, H, W, C)
    with ``w`` (K, R, S, C/groups); ``padding`` is (top, left, bottom, right) and padded pixels
    read ``pad_value`` (CDMA's pad value register). Raises ValueError for bad shapes or values."""
    x = np.asarray(x)
    w = np.asarray(w)
    stride, dilation, padding = tuple(stride), tuple(dilation), tuple(padding)
    p, q = _check(x, w, stride, padding, dilation, groups, atomic_c, acc_bits, precision)
    out = np.zeros((x.shape[0], p, q, w.shape[0]), np.int64)
    _conv_kernel(np.ascontiguousarray(x, np.int32), np.ascontiguousarray(w, np.int32),
                 stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1], groups,
                 atomic_c, acc_bits, int(pad_value), out)
    return out


def conv_to_sdp(acc: np.ndarray, clip_truncate: int = 0, acc_bits: int = 34) -> np.ndarray:
    """What CACC delivers to the SDP: ``sat32(shift_right(acc, clip_truncate))`` per element."""
    if not 0 <= clip_truncate <= 63:
        raise ValueError(f"clip_truncate = {clip_truncate!r}: must be in 0..63")
    flat = cacc_output_array(np.ascontiguousarray(acc, np.int64).ravel(), clip_truncate, acc_bits)
    return flat.reshape(np.shape(acc))


def reference_conv(x, w, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups: int = 1,
                   pad_value=0, dtype=np.int64) -> np.ndarray:
    """The gold model the NVDLA paths are tested against: an exact convolution in ``dtype``
    (int64 for the integer paths, float64 for fp16) by explicit kernel taps and numpy
    ``einsum``, independent of the hardware's accumulation order. Shapes as :func:`conv_cacc`;
    ``padding`` is (top, left, bottom, right); padded pixels read ``pad_value``."""
    n, h, wid, c = x.shape
    k, r, s, cg = w.shape
    top, left, bottom, right = padding
    xp = np.full((n, h + top + bottom, wid + left + right, c), pad_value, dtype)
    xp[:, top:top + h, left:left + wid, :] = x
    p, q = conv_output_shape(h, wid, r, s, stride, padding, dilation)
    out = np.zeros((n, p, q, k), dtype)
    kg = k // groups
    for g in range(groups):
        xs = xp[..., g * cg:(g + 1) * cg]
        ws = w[g * kg:(g + 1) * kg].astype(dtype)
        for rr in range(r):
            for ss in range(s):
                y0, x0 = rr * dilation[0], ss * dilation[1]
                patch = xs[:, y0:y0 + (p - 1) * stride[0] + 1:stride[0],
                           x0:x0 + (q - 1) * stride[1] + 1:stride[1], :]
                out[..., g * kg:(g + 1) * kg] += np.einsum("npqc,kc->npqk", patch, ws[:, rr, ss, :])
    return out


# ------------------------------------------------------------------ CDMA input converter
@njit(cache=True)
def _cdma_cvt_kernel(x, offsets, scale, truncate, out_bits, out):
    n_off = offsets.shape[0]
    for i in range(x.shape[0]):
        diff = np.int64(x[i]) - np.int64(offsets[i % n_off])  # 17 bits
        out[i] = shift_right_sat(diff * np.int64(scale), truncate, 64, out_bits)


def cdma_convert(x, offsets, scale: int, truncate: int, out_bits: int = 8) -> np.ndarray:
    """CDMA's input data converter (``D_CVT_CFG.CVT_EN``), element by element:
    ``sat_out(shift_right((x - offset) * scale, truncate))`` with ``offset`` and ``scale``
    int16, ``truncate`` 0..63, rounding half away from zero and saturation to ``out_bits``
    (8 for int8 processing). NVIDIA C model ``cmod/cdma/NV_NVDLA_cdma.cpp`` (``hls_convertor``:
    17-bit input minus offset, times scale, divided by ``2**truncate`` and rounded away from
    zero, clamped to int8/int16).

    ``x``: integers (any shape) whose last axis holds the channels; ``offsets``: one offset for
    all (shape (1,) or a scalar) or one per channel of the last axis (the mean registers
    ``D_MEAN_RY/GU/BV/AX`` in image mode). Returns int64 of ``x``'s shape."""
    x = np.asarray(x)
    offs = np.atleast_1d(np.asarray(offsets))
    if not np.issubdtype(x.dtype, np.integer) or not np.issubdtype(offs.dtype, np.integer):
        raise ValueError(f"x ({x.dtype}) and offsets ({offs.dtype}): must be integer arrays")
    if x.size and (x.min() < -32768 or x.max() > 65535):
        raise ValueError(f"x: values {int(x.min())}..{int(x.max())}: the converter takes 8- or "
                         f"16-bit pixels (-32768..65535)")
    if offs.ndim != 1 or offs.size not in (1, x.shape[-1] if x.ndim else 1):
        raise ValueError(f"offsets: shape {offs.shape}: one offset, or one per channel "
                         f"({x.shape[-1] if x.ndim else 1})")
    for name, v, lo, hi in (("offsets", offs, -32768, 32767), ("scale", scale, -32768, 32767),
                            ("truncate", truncate, 0, 63)):
        arr = np.asarray(v)
        if arr.min() < lo or arr.max() > hi:
            raise ValueError(f"{name} = {v!r}: must be in {lo}..{hi}")
    if out_bits not in (8, 16):
        raise ValueError(f"out_bits = {out_bits!r}: the converter writes int8 (8) or int16 (16)")
    flat = np.ascontiguousarray(x, np.int64).ravel()
    out = np.empty(flat.size, np.int64)
    _cdma_cvt_kernel(flat, np.ascontiguousarray(offs, np.int64), int(scale), int(truncate),
                     int(out_bits), out)
    return out.reshape(x.shape)
