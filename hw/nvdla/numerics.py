"""NVDLA integer arithmetic, bit for bit: MAC cell, CACC, SDP X1/X2 and Y, converters, PDP.

Sources (facts, not code): NVIDIA's C model ``cmod/hls/sdp/sdp_x.cpp``, ``sdp_y_core.cpp`` and
``cmod/hls/include/nvdla_int.h``, the RTL under ``vmod/``, ``doc/hw/v1/ias/precision.rst``;
summarized in ``../shared/reference/nvdla.md``.

One rounding rule everywhere (:func:`shift_right`): an arithmetic right shift that rounds half
away from zero (the C model's ``ac_fixed`` ``AC_RND_INF``), then saturation to the output width
(``AC_SAT``). A shift of at least the input's width gives 0. Left shifts of operands
(:func:`shift_left_sat`) saturate.

Widths along the datapath (int8 and int16 alike):

* MAC cell: atomic-C products summed exactly (int8: 22 bits for 64 products; int16: 38 bits).
* CACC: partial sums accumulate with saturation at ``acc_bits`` (int8: 34 in the RTL, 48 in the
  C model; int16: 48), then ``sat32(shift_right(acc, clip_truncate))`` goes to the SDP.
* SDP X1/X2 (``sdp_x``): ALU ``a = d (max|min|sum) sat32(op16 << alu_shift)`` kept in 33 bits
  (not saturated); MUL ``m = a * op16`` (49 bits); truncate ``sat32(shift_right(m, mul_shift))``
  with the 49-bit input width, applied even when the multiplier is bypassed; PReLU: when
  ``a >= 0`` multiply and truncate are skipped (the 33-bit ``a`` is kept to 32 bits by dropping
  the top bit, as the C model's assignment does; software bypasses the ALU with PReLU); ReLU last.
* SDP Y (``sdp_y``): MUL first, ``sat32(shift_right(d * op32, truncate))`` (64-bit product;
  PReLU as in X), then ALU ``sat32(d (max|min|sum|eql) op)`` where EQL gives 0 when equal and 1
  otherwise (C model ``Y_alu``).
* Operand converter (``cvt_operand``): ``sat32(shift_right((op16 - offset32) * scale16, trunc))``.
* Output converter (``cvt_out``): ``sat_out(sat17(shift_right((x - offset32) * scale16, shift)))``.
* PDP average (``pdp_average``): ``shift_right(sum * recip_width, 16)`` then the same with the
  height reciprocal (17-bit reciprocals, value * 2**16).

Every function is Numba-compiled and callable from Python; the ``*_array`` kernels apply one
unit to a whole tensor.
"""

from __future__ import annotations

import numpy as np
from hw._jitcache import njit

from hw.numerics import round_shift, saturate, wrap

__all__ = [
    "ALU_MAX", "ALU_MIN", "ALU_SUM", "ALU_EQL",
    "shift_right", "shift_left_sat", "mac_cell", "cacc_accumulate", "cacc_output", "sdp_x",
    "sdp_y", "cvt_operand", "cvt_out", "pdp_average", "pdp_recip",
    "sdp_x_array", "cvt_out_array", "cacc_output_array", "round_half_away",
]

#: SDP ALU algorithms (register field values: SDP_ALU_MODE_*).
ALU_MAX = 0
ALU_MIN = 1
ALU_SUM = 2
ALU_EQL = 3

#: Width of the SDP X multiplier output (33-bit ALU result x 16-bit operand).
X_MUL_BITS = 49
#: Width of the SDP Y multiplier output (32-bit data x 32-bit operand).
Y_MUL_BITS = 64


@njit(cache=True)
def shift_right(x, shift, in_bits):
    """``x`` (an ``in_bits``-wide value) shifted right by ``shift`` with rounding half away from
    zero; a shift of ``in_bits`` or more gives 0."""
    if shift >= in_bits:
        return np.int64(0)
    return round_shift(np.int64(x), shift)


@njit(cache=True)
def shift_right_sat(x, shift, in_bits, out_bits):
    """:func:`shift_right`, then saturation to ``out_bits``."""
    return saturate(shift_right(x, shift, in_bits), out_bits)


@njit(cache=True)
def shift_left_sat(x, shift, out_bits):
    """``x << shift`` saturated to ``out_bits`` (the SDP ALU operand shifter)."""
    x = np.int64(x)
    if x == 0:
        return np.int64(0)
    if shift >= out_bits:  # any non-zero value leaves the range
        return saturate(np.int64(1) << np.int64(62) if x > 0 else -(np.int64(1) << np.int64(62)),
                        out_bits)
    return saturate(x << np.int64(shift), out_bits)  # |x| < 2**16, shift < 32: fits


@njit(cache=True)
def mac_cell(data, weight):
    """One MAC cell's partial sum: the exact dot product of one atomic-C vector of input data
    and one kernel's weights (int8 or int16; at most 38 bits, no overflow)."""
    total = np.int64(0)
    for i in range(data.shape[0]):
        total += np.int64(data[i]) * np.int64(weight[i])
    return total


@njit(cache=True)
def cacc_accumulate(acc, partial, acc_bits):
    """CACC: add one partial sum, saturating at ``acc_bits`` (34 RTL / 48 C model for int8)."""
    return saturate(np.int64(acc) + np.int64(partial), acc_bits)


@njit(cache=True)
def cacc_output(acc, clip_truncate, acc_bits):
    """CACC to SDP: ``sat32(shift_right(acc, clip_truncate))``."""
    return shift_right_sat(acc, clip_truncate, acc_bits, 32)


@njit(cache=True)
def _alu(a, b, algo):
    if algo == ALU_MAX:
        return a if a > b else b
    if algo == ALU_MIN:
        return a if a < b else b
    if algo == ALU_EQL:
        return np.int64(0) if a == b else np.int64(1)
    return a + b


@njit(cache=True)
def sdp_x(d, bypass, alu_bypass, alu_algo, alu_op, alu_shift, mul_bypass, mul_op, mul_shift,
          prelu, relu_bypass):
    """One SDP X unit (X1 bias or X2 batch-norm) on one 32-bit value ``d``.

    ``alu_algo`` is :data:`ALU_MAX`, :data:`ALU_MIN` or :data:`ALU_SUM`; the X ALU has no EQL,
    and any other code adds, as the C model's ``X_alu`` does. ``alu_op``/``mul_op`` are the int16
    operands (per channel or from the register)."""
    d = np.int64(d)
    if bypass:
        return d
    if alu_bypass:
        a = d
    else:
        operand = shift_left_sat(alu_op, alu_shift, 32)
        algo = alu_algo if alu_algo == ALU_MAX or alu_algo == ALU_MIN else ALU_SUM
        a = _alu(d, operand, algo)  # 33 bits, not saturated
    if not mul_bypass and prelu and a >= 0:
        out = wrap(a, 32)  # multiply and truncate skipped; a 33-bit ALU sum loses its top bit
    else:
        m = a if mul_bypass else a * np.int64(mul_op)
        out = shift_right_sat(m, mul_shift, X_MUL_BITS, 32)
    if not relu_bypass and out < 0:
        out = np.int64(0)
    return out


@njit(cache=True)
def sdp_y(d, mul_bypass, mul_op, truncate, prelu, alu_bypass, alu_algo, alu_op):
    """The SDP Y (element-wise) core on one 32-bit value: MUL (64-bit product, rounded and
    saturated to 32 bits; PReLU passes ``d >= 0`` through), then ALU with saturation."""
    d = np.int64(d)
    if mul_bypass or (prelu and d >= 0):
        m = d
    else:
        m = shift_right_sat(d * np.int64(mul_op), truncate, Y_MUL_BITS, 32)
    if alu_bypass:
        return m
    return saturate(_alu(m, np.int64(alu_op), alu_algo), 32)


@njit(cache=True)
def cvt_operand(op, offset, scale, truncate):
    """SDP Y operand converter: ``sat32(shift_right((op16 - offset32) * scale16, truncate))``
    (the product is 49 bits)."""
    return shift_right_sat((np.int64(op) - np.int64(offset)) * np.int64(scale), truncate,
                           X_MUL_BITS, 32)


@njit(cache=True)
def cvt_out(x, offset, scale, shift, out_bits):
    """Output converter: ``sat_out(sat17(shift_right((x - offset32) * scale16, shift)))``; the
    product of the 33-bit difference and the 16-bit scale is 49 bits wide."""
    v = shift_right_sat((np.int64(x) - np.int64(offset)) * np.int64(scale), shift, X_MUL_BITS, 17)
    return saturate(v, out_bits)


@njit(cache=True)
def pdp_average(total, recip_width, recip_height):
    """PDP integer average: ``shift_right(total * recip_width, 16)`` then the same with the
    height reciprocal. Reciprocals are 17-bit register values, ``2**16 / kernel`` (see
    :func:`pdp_recip`)."""
    w = round_shift(np.int64(total) * np.int64(recip_width), 16)
    return round_shift(w * np.int64(recip_height), 16)


def pdp_recip(kernel: int) -> int:
    """The reciprocal register value npulab's lowering writes for a pooling kernel size
    (1..8): ``floor(2**16 / kernel)`` (exact for powers of two; 65536 for 1)."""
    if isinstance(kernel, bool) or not isinstance(kernel, (int, np.integer)) or not 1 <= kernel <= 8:
        raise ValueError(f"pooling kernel = {kernel!r}: must be an integer in 1..8")
    return (1 << 16) // int(kernel)


# ---------------------------------------------------------------------- whole tensors
@njit(cache=True)
def sdp_x_array(d, channel_axis_len, bypass, alu_bypass, alu_algo, alu_ops, alu_shift,
                mul_bypass, mul_ops, mul_shift, prelu, relu_bypass):
    """:func:`sdp_x` over a flat int64 array whose last axis has ``channel_axis_len`` channels
    (NHWC order); ``alu_ops``/``mul_ops`` hold one operand per channel (length 1: one for all)."""
    out = np.empty(d.shape[0], np.int64)
    n_alu = alu_ops.shape[0]
    n_mul = mul_ops.shape[0]
    for i in range(d.shape[0]):
        c = i % channel_axis_len
        out[i] = sdp_x(d[i], bypass, alu_bypass, alu_algo, alu_ops[c if n_alu > 1 else 0],
                       alu_shift, mul_bypass, mul_ops[c if n_mul > 1 else 0], mul_shift, prelu,
                       relu_bypass)
    return out


@njit(cache=True)
def cvt_out_array(x, offset, scale, shift, out_bits):
    """:func:`cvt_out` over a flat int64 array."""
    out = np.empty(x.shape[0], np.int64)
    for i in range(x.shape[0]):
        out[i] = cvt_out(x[i], offset, scale, shift, out_bits)
    return out


@njit(cache=True)
def cacc_output_array(acc, clip_truncate, acc_bits):
    """:func:`cacc_output` over a flat int64 array."""
    out = np.empty(acc.shape[0], np.int64)
    for i in range(acc.shape[0]):
        out[i] = cacc_output(acc[i], clip_truncate, acc_bits)
    return out


def round_half_away(v, s) -> np.ndarray:
    """numpy (no Numba), for the gold models: ``v / 2**s`` rounded half away from zero, int64,
    element-wise over arrays ``v`` and ``s`` (0 <= s < 64) without overflow for any int64
    ``v``: ``floor(|v| / 2**s)`` plus the bit just below the cut, with ``v``'s sign."""
    v = np.asarray(v, np.int64)
    s = np.asarray(s, np.int64)
    a = np.abs(v)
    q = np.where(s > 0, (a >> s) + ((a >> np.maximum(s - 1, 0)) & 1), a)
    return np.sign(v) * q

