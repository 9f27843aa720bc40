"""NVDLA fp16 datapath: MAC cell, CACC, SDP X unit and output converter, and NVIDIA's tolerances.

fp16 convolution on NVDLA is not IEEE arithmetic per product. This module models what NVIDIA's
C model of ``nv_full`` (branch ``nvdlav1``) does, stage by stage:

MAC cell (``cmod/cmac/NV_NVDLA_cmac.h``: ``cal_fp16_exp``, ``cal_fp16_mul``, ``calculation_fp16``)
    Each fp16 operand with biased exponent field ``E`` and fraction ``f`` is split into a coarse
    exponent ``E >> 2`` and a 14-bit mantissa ``(f | hidden) << (E & 3)`` (a denormal, ``E == 0``,
    uses shift 1 and no hidden bit; an infinity is read as the normal number 65536). A product's
    coarse exponent is ``g = (Ed >> 2) + (Ew >> 2)``; the cell takes ``G = max g`` over its
    non-zero products (zero operands are masked and take no part), shifts every 28-bit product
    right by ``4 * (G - g)`` bits, truncating, and adds the results exactly into a 38-bit sum
    (``FP16_MUL_BIT_WIDTH``). The cell's value is ``sum * 2**(4*G - 50)``. A shift of 32 or more
    gives 0. Truncation is a floor on the two's-complement product, so negative products round
    toward minus infinity. (The C model's Booth multiplier truncates its carry-save sum and carry
    vectors separately, which its own ``DEBUG_ERROR_CHECK`` allows to differ from the single
    truncation by one LSB per product; we model the single truncation, ``floor(P / 2**shift)``.)
    A NaN operand anywhere in the cell makes the cell, and so the output, NaN.
CACC (``cmod/cacc/NV_NVDLA_cacc.cpp``: ``cacc_fp16_add``, ``cacc_fp48_to_fp32``)
    A 48-bit float: 8-bit exponent and a 40-bit two's-complement mantissa (``FP16_MLEN = 40``).
    Each addition of a cell's value is exact, then rounded to the normalized 40-bit mantissa,
    to nearest with ties away from zero. The result goes to the SDP as fp32, again rounded to
    nearest, ties away from zero (on the magnitude, from the guard bit). Accumulation order is
    the hardware's: channel group, then kernel row, then kernel column.
SDP X unit (``cmod/hls/sdp/sdp_x.cpp``, FP path)
    fp32 ALU (max, min or sum with an fp16 operand widened to fp32), then fp32 MUL by an fp16
    operand (PReLU passes values whose sign bit is 0), then ReLU; IEEE binary32 with
    round-to-nearest-even. No shifters or truncation in fp16 mode. Optionally NaN operands are
    flushed to zero (``NAN_TO_ZERO``).
Output converter (``cmod/hls/include/nvdla_float.h``: ``FpMantRNE``, ``SetToInf``)
    fp32 to fp16 rounds to nearest even, keeps fp16 denormals, and clamps overflow (and
    infinities) to +-65504, the largest finite fp16.

NVIDIA's pass criteria (``doc/hw/v1/ias/precision.rst``, "FP16 error threshold"):

* direct convolution: ``|a - b| <= 2**(max_exp - 20) * R*S*C * 2 * scale + 2**(exp(a) - 10)``
  where ``exp(v) = ((bits(v) >> 10) & 0x1f) - 15`` and ``max_exp`` is, per output, the maximum
  over the kernel window of ``(exp(data) & ~3) + (exp(wt) & ~3)`` (:func:`conv_fp16_tolerance`);
* SDP: bit-exact;
* PDP and CDP: ``|a - b| <= 1e-4 and |a - b| / max_value <= 1e-3``, ``max_value`` the largest
  value of the pooling or square-sum window (:func:`pdp_cdp_fp16_close`).

The document does not define ``scale``; we read it as the magnitude of the SDP multiplier
between CACC and the output (1 for a plain convolution).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from hw._jitcache import njit

from hw.numerics import fp32_to_fp16_bits
from hw.nvdla.conv import check_geometry

if TYPE_CHECKING:
    from hw.nvdla.config import NvdlaConfig

__all__ = ["conv_fp16", "sdp_fp16", "to_fp16_out", "conv_fp16_tolerance", "pdp_cdp_fp16_close",
           "fp16_exponent", "FP16_MAX", "CACC_MANTISSA_BITS", "MAC_SUM_BITS"]

#: Largest finite fp16; the output converter clamps overflow here.
FP16_MAX = 65504.0
#: CACC mantissa width (two's complement; ``FP16_MLEN`` in ``NV_NVDLA_cacc.h``).
CACC_MANTISSA_BITS = 40
#: Width of a MAC cell's aligned sum (``FP16_MUL_BIT_WIDTH`` in ``NV_NVDLA_cmac.h``).
MAC_SUM_BITS = 38

_ALU_CODES = {None: 0, "max": 1, "min": 2, "sum": 3}


# ---------------------------------------------------------------------- Numba kernels
@njit(cache=True, inline="always")
def _bitlen(v):
    """Number of bits of a non-negative int64 (0 for 0)."""
    n = 0
    while v > 0xFFFF:
        v >>= 16
        n += 16
    while v > 0:
        v >>= 1
        n += 1
    return n


@njit(cache=True)
def _cacc_add(m, e, p, pe):
    """CACC addition: ``m * 2**e + p * 2**pe`` rounded to a normalized 40-bit two's-complement
    mantissa (positive: [2**38, 2**39), negative: [-2**39, -2**38)), ties away from zero.

    Both operands are aligned at 21 bits below the larger one's normalized mantissa; a smaller
    operand further down is floored with a sticky flag, which is all the rounding needs (the
    result then has at least 20 bits below its LSB)."""
    if p == 0:
        return m, e
    if m == 0:
        return p, pe  # exact: a cell sum has at most 38 bits
    s1 = 40 - _bitlen(abs(m))
    s2 = 40 - _bitlen(abs(p))
    m1, e1 = m << s1, e - s1
    m2, e2 = p << s2, pe - s2
    if e1 >= e2:
        big, eb, small, d = m1, e1, m2, e1 - e2
    else:
        big, eb, small, d = m2, e2, m1, e2 - e1
    sticky = False
    if d <= 21:
        a = small << (21 - d)
    else:
        k = d - 21
        if k > 62:
            k = 62
        a = small >> k
        sticky = (a << k) != small
    total = (big << 21) + a  # |total| < 2**62
    if total == 0:
        return np.int64(0), np.int64(0)
    t = _bitlen(total) - 39 if total > 0 else _bitlen(-total - 1) - 39
    if t <= 0:
        return total << (-t), eb - 21 + t
    q = total >> t
    rem = total - (q << t)
    half = np.int64(1) << (t - 1)
    if total > 0:
        up = rem >= half
    else:
        up = rem > half or (rem == half and sticky)
    if up:
        q += 1
    if q == (np.int64(1) << 39):
        q = np.int64(1) << 38
        t += 1
    return q, eb - 21 + t


@njit(cache=True)
def _fp48_to_fp32(m, e):
    """CACC to SDP: ``m * 2**e`` rounded to 24 significant bits, ties away from zero."""
    if m == 0:
        return np.float32(0.0)
    a = abs(m)
    n = _bitlen(a)
    if n > 24:
        sh = n - 24
        q = (a >> sh) + ((a >> (sh - 1)) & 1)
        val = np.float64(q) * 2.0 ** (e + sh)
    else:
        val = np.float64(a) * 2.0 ** e
    return np.float32(-val if m < 0 else val)


@njit(cache=True)
def _conv_fp16_kernel(xm, xg, xnan, wm, wg, wnan, any_nan, sy, sx, pad_top, pad_left, dy, dx,
                      groups, atomic_c, out):
    n_img, h, wid, _ = xm.shape
    k_all, r_all, s_all, c_group = wm.shape
    p_all, q_all = out.shape[1], out.shape[2]
    k_group = k_all // groups
    prods = np.empty(atomic_c, np.int64)  # one cell's exact products and coarse exponents
    gsum = np.empty(atomic_c, np.int64)
    for n in range(n_img):
        for p in range(p_all):
            for q in range(q_all):
                for k in range(k_all):
                    c_base = (k // k_group) * c_group
                    acc_m = np.int64(0)
                    acc_e = np.int64(0)
                    is_nan = False
                    for c0 in range(0, c_group, atomic_c):
                        c1 = min(c0 + atomic_c, c_group)
                        for r in range(r_all):
                            iy = p * sy - pad_top + r * dy
                            for s in range(s_all):
                                ix = q * sx - pad_left + s * dx
                                inside = 0 <= iy < h and 0 <= ix < wid
                                if any_nan:  # a NaN operand anywhere in the cell
                                    for c in range(c0, c1):
                                        if wnan[k, r, s, c] or (
                                                inside and xnan[n, iy, ix, c_base + c]):
                                            is_nan = True
                                if is_nan or not inside:
                                    continue  # padded pixels are zeros: every product masked
                                gmax = np.int64(0)
                                used = 0
                                for c in range(c0, c1):
                                    gx = xg[n, iy, ix, c_base + c]
                                    gw = wg[k, r, s, c]
                                    if gx >= 0 and gw >= 0:  # zero operands are masked
                                        g = np.int64(gx) + np.int64(gw)
                                        gsum[used] = g
                                        prods[used] = (np.int64(xm[n, iy, ix, c_base + c])
                                                       * np.int64(wm[k, r, s, c]))
                                        used += 1
                                        if g > gmax:
                                            gmax = g
                                cell = np.int64(0)
                                for i in range(used):
                                    shift = 4 * (gmax - gsum[i])
                                    if shift < 32:
                                        cell += prods[i] >> shift  # floor: truncating alignment
                                if cell != 0:
                                    acc_m, acc_e = _cacc_add(acc_m, acc_e, cell, 4 * gmax - 50)
                    out[n, p, q, k] = np.float32(np.nan) if is_nan else _fp48_to_fp32(acc_m, acc_e)


@njit(cache=True)
def _max_exp_kernel(xe, we, sy, sx, pad_top, pad_left, dy, dx, groups, out):
    """NVIDIA's ``max_exp`` per output: max over the window of ``xe + we`` (padded pixels are
    zeros, whose ``exp & ~3`` is -16)."""
    n_img, h, wid, _ = xe.shape
    k_all, r_all, s_all, c_group = we.shape
    p_all, q_all = out.shape[1], out.shape[2]
    k_group = k_all // groups
    for n in range(n_img):
        for p in range(p_all):
            for q in range(q_all):
                for k in range(k_all):
                    c_base = (k // k_group) * c_group
                    best = -1000
                    for r in range(r_all):
                        iy = p * sy - pad_top + r * dy
                        for s in range(s_all):
                            ix = q * sx - pad_left + s * dx
                            inside = 0 <= iy < h and 0 <= ix < wid
                            for c in range(c_group):
                                v = np.int64(we[k, r, s, c]) + (
                                    np.int64(xe[n, iy, ix, c_base + c]) if inside else -16)
                                if v > best:
                                    best = v
                    out[n, p, q, k] = best


@njit(cache=True)
def _sdp_x_fp16_kernel(d, channels, alu_mode, alu_ops, mul_on, mul_ops, prelu, relu):
    out = np.empty(d.shape[0], np.float32)
    n_alu = alu_ops.shape[0]
    n_mul = mul_ops.shape[0]
    for i in range(d.shape[0]):
        c = i % channels
        v = d[i]
        if alu_mode != 0:
            op = alu_ops[c if n_alu > 1 else 0]
            if alu_mode == 1:
                v = v if v > op else op
            elif alu_mode == 2:
                v = v if v < op else op
            else:
                v = np.float32(v + op)
        if mul_on and not (prelu and not np.signbit(v)):
            v = np.float32(v * mul_ops[c if n_mul > 1 else 0])
        if relu and not v > 0 and not np.isnan(v):
            v = np.float32(0.0)
        out[i] = v
    return out


@njit(cache=True)
def _to_fp16_kernel(x):
    out = np.empty(x.shape[0], np.uint16)
    for i in range(x.shape[0]):
        b = fp32_to_fp16_bits(x[i])
        if (b & 0x7FFF) == 0x7C00:  # overflow or infinity: clamp to the largest finite value
            b = np.uint16((b & 0x8000) | 0x7BFF)
        out[i] = b
    return out


# ---------------------------------------------------------------------- Python layer
def fp16_exponent(a) -> np.ndarray:
    """NVIDIA's ``exp(a) = ((bits(a) >> 10) & 0x1f) - 15`` of fp16 values (int32 array)."""
    bits = np.asarray(a, np.float16).view(np.uint16).astype(np.int32)
    return ((bits >> 10) & 0x1F) - 15


def _decode(a: np.ndarray):
    """Split fp16 values the way the MAC cell does: signed 14-bit mantissa, coarse exponent
    ``E >> 2`` (-1 for zeros and NaNs, which take no part in alignment) and a NaN flag."""
    bits = a.view(np.uint16).astype(np.int32)
    e = (bits >> 10) & 0x1F
    f = bits & 0x3FF
    mant = (f | np.where(e != 0, 0x400, 0)) << np.where(e == 0, 1, e & 3)
    mant = np.where(bits >> 15, -mant, mant).astype(np.int32)
    nan = (e == 0x1F) & (f != 0)
    group = np.where(((e == 0) & (f == 0)) | nan, -1, e >> 2).astype(np.int8)
    return mant, group, nan


def _check(x, w, stride, padding, dilation, groups, atomic_c):
    p, q = check_geometry(x, w, stride, padding, dilation, groups, atomic_c)
    for name, arr in (("x", x), ("w", w)):
        if arr.dtype != np.float16:
            raise ValueError(f"{name}: dtype {arr.dtype}: the fp16 path takes float16 arrays "
                             f"(convert with {name}.astype(numpy.float16))")
    return p, q


def conv_fp16(x, w, *, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups: int = 1,
              atomic_c: int | None = None, config: NvdlaConfig | None = None) -> np.ndarray:
    """What CACC delivers to the SDP (float32, ``(N, P, Q, K)``) for a direct fp16 convolution
    of ``x`` (N, H, W, C) with ``w`` (K, R, S, C/groups), both float16.

    ``padding`` is (top, left, bottom, right); padded pixels are zeros (fp16 has no pad value,
    ``precision.rst``). ``atomic_c`` is the products per MAC cell: ``config.atomic_c`` when a
    config is given, else 64 (nv_full). A ``config`` without fp16 raises its
    :meth:`~hw.nvdla.config.NvdlaConfig.require_precision` ConfigError; bad shapes or dtypes
    raise ValueError before any kernel runs."""
    if config is not None:
        config.require_precision("fp16", where=f"{config.name}: conv_fp16")
        if atomic_c is None:
            atomic_c = config.atomic_c
    if atomic_c is None:
        atomic_c = 64
    x = np.asarray(x)
    w = np.asarray(w)
    stride, dilation, padding = tuple(stride), tuple(dilation), tuple(padding)
    p, q = _check(x, w, stride, padding, dilation, groups, atomic_c)
    xm, xg, xnan = _decode(np.ascontiguousarray(x))
    wm, wg, wnan = _decode(np.ascontiguousarray(w))
    out = np.empty((x.shape[0], p, q, w.shape[0]), np.float32)
    any_nan = bool(xnan.any() or wnan.any())
    _conv_fp16_kernel(xm, xg, xnan, wm, wg, wnan, any_nan, stride[0], stride[1], padding[0],
                      padding[1], dilation[0], dilation[1], int(groups), int(atomic_c), out)
    return out


def _operand(name, value, channels):
    """An SDP operand as float32 (fp16 values widened): a scalar or one per channel."""
    arr = np.asarray(value)
    if arr.dtype != np.float16:
        ok = np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
        if ok:
            with np.errstate(over="ignore", invalid="ignore"):
                as16 = arr.astype(np.float16)
            ok = np.array_equal(as16.astype(np.float64), arr.astype(np.float64), equal_nan=True)
        if not ok:
            raise ValueError(f"{name} = {value!r}: SDP operands are fp16 values; this one is "
                             f"not exactly representable (round it with numpy.float16)")
        arr = as16
    arr = arr.reshape(-1)
    if arr.shape[0] not in (1, channels):
        raise ValueError(f"{name}: {arr.shape[0]} values; give 1 or one per channel "
                         f"({channels})")
    return arr.astype(np.float32)


def sdp_fp16(d, *, alu_algo: str | None = None, alu_op=None, mul_op=None, prelu: bool = False,
             relu: bool = False, nan_to_zero: bool = False) -> np.ndarray:
    """One SDP X unit (X1 bias or X2 batch-norm) in fp16 mode on float32 data ``d`` (channels
    last): ALU ``d (max|min|sum) op``, then MUL ``* op``, then ReLU, all IEEE binary32.

    ``alu_op``/``mul_op`` are fp16 values (a scalar or one per channel); ``None`` bypasses the
    ALU/MUL. ``alu_algo`` is "max", "min" or "sum" (needed with ``alu_op``). ``prelu`` passes
    values with a clear sign bit unmultiplied. ``nan_to_zero`` flushes NaN operands to 0.
    Chain two calls for X1 then X2."""
    d = np.asarray(d)
    if d.dtype != np.float32:
        raise ValueError(f"d: dtype {d.dtype}: the SDP takes the float32 CACC output")
    if d.ndim == 0 or d.size == 0:
        raise ValueError(f"d: shape {d.shape}: must be a non-empty array, channels last")
    channels = d.shape[-1]
    if (alu_op is None) != (alu_algo is None):
        raise ValueError(f"alu_algo = {alu_algo!r}, alu_op = {alu_op!r}: give both or neither")
    if alu_algo not in _ALU_CODES:
        raise ValueError(f"alu_algo = {alu_algo!r}: must be 'max', 'min' or 'sum'")
    if prelu and mul_op is None:
        raise ValueError("prelu = True needs mul_op (the negative slope)")
    alu = _operand("alu_op", 0.0 if alu_op is None else alu_op, channels)
    mul = _operand("mul_op", 1.0 if mul_op is None else mul_op, channels)
    if nan_to_zero:
        alu[np.isnan(alu)] = 0.0
        mul[np.isnan(mul)] = 0.0
    out = _sdp_x_fp16_kernel(np.ascontiguousarray(d).reshape(-1), channels, _ALU_CODES[alu_algo],
                             alu, mul_op is not None, mul, bool(prelu), bool(relu))
    return out.reshape(d.shape)


def to_fp16_out(x) -> np.ndarray:
    """The output converter: float32 to float16, round to nearest even, fp16 denormals kept,
    overflow and infinities clamped to +-65504, NaN kept."""
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise ValueError(f"x: dtype {x.dtype}: the output converter takes float32 (SDP output)")
    bits = _to_fp16_kernel(np.ascontiguousarray(x).reshape(-1))
    return bits.view(np.float16).reshape(x.shape)


def conv_fp16_tolerance(x, w, out, *, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                        groups: int = 1, scale: float = 1.0) -> np.ndarray:
    """NVIDIA's per-element bound for fp16 direct convolution (``precision.rst``, "CC DC"):
    ``2**(max_exp - 20) * R*S*C * 2 * scale + 2**(exp(out) - 10)`` (float64, ``out``'s shape).

    ``out`` holds the fp16 results being judged (``a``); C is the channels per kernel."""
    x = np.asarray(x)
    w = np.asarray(w)
    stride, dilation, padding = tuple(stride), tuple(dilation), tuple(padding)
    p, q = _check(x, w, stride, padding, dilation, groups, 64)
    out = np.asarray(out)
    shape = (x.shape[0], p, q, w.shape[0])
    if out.shape != shape or out.dtype != np.float16:
        raise ValueError(f"out: {out.dtype} {out.shape}: must be float16 of shape {shape}")
    if not np.isfinite(scale) or scale < 0:
        raise ValueError(f"scale = {scale!r}: must be a finite number >= 0")
    xe = (fp16_exponent(x) & ~3).astype(np.int8)
    we = (fp16_exponent(w) & ~3).astype(np.int8)
    max_exp = np.empty(shape, np.int32)
    _max_exp_kernel(np.ascontiguousarray(xe), np.ascontiguousarray(we), stride[0], stride[1],
                    padding[0], padding[1], dilation[0], dilation[1], int(groups), max_exp)
    rsc = w.shape[1] * w.shape[2] * w.shape[3]
    return (np.ldexp(1.0, max_exp - 20) * (rsc * 2 * float(scale))
            + np.ldexp(1.0, fp16_exponent(out) - 10))


def pdp_cdp_fp16_close(a, b, max_value) -> np.ndarray:
    """NVIDIA's PDP/CDP fp16 criterion per element: ``|a-b| <= 1e-4`` and
    ``|a-b| / |max_value| <= 1e-3``, ``max_value`` the largest value of the pooling window
    (PDP) or square-sum window (CDP); where it is 0 the relative test needs ``a == b``."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    mx = np.abs(np.asarray(max_value, np.float64))
    diff = np.abs(a - b)
    rel_ok = np.where(mx > 0, diff <= 1e-3 * mx, diff == 0)
    return (diff <= 1e-4) & rel_ok
