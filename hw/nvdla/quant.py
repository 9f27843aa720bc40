"""int8 per-channel quantization of a float conv layer into NVDLA register parameters.

The pass follows NVDLA's compiler convention for per-channel int8 (``shared/reference/nvdla.md``;
NVIDIA's ``sw/umd/core/src/compiler`` lowers the same way): CACC truncate 0; SDP X1 (``BS``)
adds an int16 bias with one common left shift in its ALU and multiplies by an int16
per-channel scale ``s[k]`` with one common right shift in its MUL; X2, Y bypassed; output
converter identity. Arithmetic: :mod:`hw.nvdla.numerics` (C model ``cmod/hls/sdp/sdp_x.cpp``).

Requantization contract
-----------------------
Float layer (batch-norm folded): ``y = relu(conv(x, W) + b)``. Scales are symmetric (zero point
0): input ``s_x``, per-channel weights ``s_w[k] = max|W[k]| / 127`` (``per_channel=False``: one
``max|W| / 127`` for all), output ``s_y``. Then with ``x_q = round(x / s_x)``,
``W_q = round(W / s_w)`` and the CACC sum ``A = conv(x_q, W_q)``::

    y / s_y  ~  (A + b_acc[k]) * M[k],  M[k] = s_x * s_w[k] / s_y,  b_acc[k] = b[k] / (s_x s_w[k])

and the registers hold ``M[k] ~ s[k] / 2**mul_shift`` and ``b_acc[k] ~ B[k] * 2**alu_shift``:

* ``mul_shift`` (``BS_MUL_SHIFT_VALUE``) is the largest value in 0..48 with
  ``max_k round(M[k] * 2**mul_shift) <= 32767``, so the largest ``s[k]`` is in 16384..32767
  (unless the shift hits 48) and ``|s[k] / 2**mul_shift - M[k]| <= 2**-(mul_shift + 1)``:
  a relative error ``<= 2**-15 * max(M) / M[k]``. One common shift is what costs precision on
  channels with a small ``M[k]``; a channel whose ``s[k]`` would round to 0 is an error.
* ``alu_shift`` (``BS_ALU_SHIFT_VALUE``) is the smallest value in 0..16 with
  ``max_k |round(b_acc[k] / 2**alu_shift)| <= 32767``; the bias error is
  ``|B[k] * 2**alu_shift - b_acc[k]| <= 2**(alu_shift - 1)`` accumulator units (0.5 at shift 0).

No path overflows (the bounds the hardware widths need):

1. CACC: ``|A| <= 128 * sum|W_q[k]|``, checked ``<= 2**31 - 1``, so every partial sum fits the
   34-bit accumulator and ``conv_to_sdp`` (truncate 0) delivers ``A`` exactly.
2. ALU operand: ``|B| <= 32767`` and ``alu_shift <= 16`` give ``|B << alu_shift| < 2**31``: the
   operand's 32-bit saturation never acts. ALU: ``|A + B*2**alu_shift| < 2**32`` fits 33 bits.
3. MUL: ``|(A + B*2**alu_shift) * s| < 2**32 * 2**15 = 2**47`` fits the 49-bit product.
4. Truncate, ReLU, ``sat32``, the identity output converter's ``sat17`` and the int8 saturation
   are nested monotone clamps, so the int8 output is exactly
   ``clamp(relu(round_half_away((A + B*2**alu_shift) * s / 2**mul_shift)), -128, 127)``.

Hence, per element, with ``v = (A + b_acc[k]) * M[k]`` the exact rescaled value::

    |(A + B*2**alu_shift) * s / 2**mul_shift - v| <= |A + B*2**alu_shift| * 2**-(mul_shift+1)
                                                      + 2**(alu_shift-1) * M[k]

(:meth:`QuantizedConv.requant_bound` gives it with the actual, smaller, rounding errors), and
the int8 output equals ``clamp(round(v))`` except where ``v`` lies that close to a rounding
boundary; then it differs by 1.

Calibration (:func:`calibrate_scale`): ``max|v| / 127`` by default (no clipping), or a
percentile of ``|v|`` (clips outliers, trading saturation for resolution).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from hw.nvdla.conv import conv_cacc, conv_output_shape, conv_to_sdp
from hw.nvdla.sdp import SdpParams, SdpXParams, sdp_apply

__all__ = ["FloatConv", "QuantizedConv", "QuantReport", "calibrate_scale",
           "quantize_activations", "quantize_conv", "run_int8_conv", "error_stages",
           "quantization_report", "float_conv"]

INT8_MAX = 127
_MAX_MUL_SHIFT = 48  # a truncate of 49 or more zeroes the 49-bit product
_MAX_ALU_SHIFT = 16  # int16 << 16 still fits 32 bits unsaturated


def _round(v):
    """Round half away from zero (the hardware's rule), on float arrays."""
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def _scale(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} = {value!r}: must be a finite number > 0")
    return float(value)


def _float_array(name, arr, shape_desc, ndim=None, length=None):
    a = np.asarray(arr)
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"{name}: dtype {a.dtype}: must be numeric")
    a = a.astype(np.float64)
    if (ndim is not None and a.ndim != ndim) or (length is not None and a.shape != (length,)) \
            or a.size == 0:
        raise ValueError(f"{name}: shape {a.shape}: must be {shape_desc}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: contains NaN or infinity")
    return a


def float_conv(x, w, b, stride=(1, 1), padding=(0, 0, 0, 0), relu=False) -> np.ndarray:
    """float64 reference convolution: ``x`` (N, H, W, C), ``w`` (K, R, S, C), ``b`` (K,) or
    None; zero padding (top, left, bottom, right); optional ReLU. Returns (N, P, Q, K)."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    n, h, wid, c = x.shape
    k, r, s, _ = w.shape
    top, left, bottom, right = padding
    p, q = conv_output_shape(h, wid, r, s, stride, padding)
    xp = np.zeros((n, h + top + bottom, wid + left + right, c))
    xp[:, top:top + h, left:left + wid] = x
    out = np.zeros((n, p, q, k))
    for rr in range(r):
        for ss in range(s):
            patch = xp[:, rr:rr + (p - 1) * stride[0] + 1:stride[0],
                       ss:ss + (q - 1) * stride[1] + 1:stride[1]]
            out += np.einsum("npqc,kc->npqk", patch, w[:, rr, ss, :])
    if b is not None:
        out += np.asarray(b, np.float64)
    return np.maximum(out, 0.0) if relu else out


@dataclass(frozen=True, eq=False)
class FloatConv:
    """A float conv layer: ``weight`` (K, R, S, C), ``bias`` (K,) or None, optional batch-norm
    (``bn_gamma``, ``bn_beta``, ``bn_mean``, ``bn_var``, all (K,), and ``bn_eps``), ReLU,
    ``stride`` and zero ``padding`` (top, left, bottom, right). Validated on construction."""

    weight: np.ndarray
    bias: np.ndarray | None = None
    bn_gamma: np.ndarray | None = None
    bn_beta: np.ndarray | None = None
    bn_mean: np.ndarray | None = None
    bn_var: np.ndarray | None = None
    bn_eps: float = 1e-5
    relu: bool = False
    stride: tuple = (1, 1)
    padding: tuple = (0, 0, 0, 0)

    def __post_init__(self):
        w = _float_array("FloatConv.weight", self.weight, "non-empty (K, R, S, C)", ndim=4)
        k = w.shape[0]
        object.__setattr__(self, "weight", w)
        if self.bias is not None:
            object.__setattr__(self, "bias", _float_array("FloatConv.bias", self.bias,
                                                          f"({k},)", length=k))
        bn = ("bn_gamma", "bn_beta", "bn_mean", "bn_var")
        given = [getattr(self, n) is not None for n in bn]
        if any(given) and not all(given):
            raise ValueError(f"FloatConv: batch-norm needs all of {', '.join(bn)}; got only "
                             f"{', '.join(n for n, g in zip(bn, given) if g)}")
        for n in bn if all(given) else ():
            object.__setattr__(self, n, _float_array(f"FloatConv.{n}", getattr(self, n),
                                                     f"({k},)", length=k))
        if all(given) and self.bn_var.min() < 0:
            raise ValueError(f"FloatConv.bn_var: value {float(self.bn_var.min())!r} < 0: variances "
                             f"must be >= 0")
        _scale("FloatConv.bn_eps", self.bn_eps)
        stride, padding = tuple(self.stride), tuple(self.padding)
        if len(stride) != 2 or min(stride) < 1 or len(padding) != 4 or min(padding) < 0:
            raise ValueError(f"FloatConv: stride {stride} must be 2 integers >= 1 and padding "
                             f"{padding} 4 integers >= 0 (top, left, bottom, right)")
        object.__setattr__(self, "stride", stride)
        object.__setattr__(self, "padding", padding)
        object.__setattr__(self, "relu", bool(self.relu))

    def folded(self) -> tuple[np.ndarray, np.ndarray]:
        """(weight, bias) with batch-norm folded in: ``g = gamma / sqrt(var + eps)``,
        ``W' = W * g[k]``, ``b' = (b - mean) * g + beta``."""
        b = self.bias if self.bias is not None else np.zeros(self.weight.shape[0])
        if self.bn_gamma is None:
            return self.weight, b
        g = self.bn_gamma / np.sqrt(self.bn_var + self.bn_eps)
        return self.weight * g[:, None, None, None], (b - self.bn_mean) * g + self.bn_beta

    def forward(self, x) -> np.ndarray:
        """The float64 reference output (N, P, Q, K) for input ``x`` (N, H, W, C)."""
        x = _float_array("x", x, "non-empty (N, H, W, C)", ndim=4)
        if x.shape[3] != self.weight.shape[3]:
            raise ValueError(f"x: {x.shape[3]} channels; the layer's weights have "
                             f"{self.weight.shape[3]}")
        w, b = self.folded()
        return float_conv(x, w, b, self.stride, self.padding, self.relu)


def calibrate_scale(values, method: str = "max", percentile: float = 99.99) -> float:
    """Symmetric int8 scale from a float reference run: ``max|values| / 127`` (``"max"``, the
    default: nothing saturates) or ``percentile(|values|, percentile) / 127``
    (``"percentile"``)."""
    v = np.abs(_float_array("values", values, "non-empty"))
    if method == "max":
        top = float(v.max())
    elif method == "percentile":
        if not 0 < percentile <= 100:
            raise ValueError(f"percentile = {percentile!r}: must be in (0, 100]")
        top = float(np.percentile(v, percentile))
    else:
        raise ValueError(f"method = {method!r}: must be 'max' or 'percentile'")
    if top <= 0:
        raise ValueError(f"values: the calibration magnitude is {top}: all zero, no scale")
    return top / INT8_MAX


def quantize_activations(x, scale) -> np.ndarray:
    """``clip(round_half_away(x / scale), -127, 127)`` as int8 (symmetric)."""
    scale = _scale("scale", scale)
    x = _float_array("x", x, "non-empty")
    return np.clip(_round(x / scale), -INT8_MAX, INT8_MAX).astype(np.int8)


@dataclass(frozen=True, eq=False)
class QuantizedConv:
    """The int8 layer and its register-level parameters (see the module docstring).

    weight_q: int8 (K, R, S, C). weight_scale: (K,) float. input_scale, output_scale: float.
    multiplier: M[k] (float64). bias_acc: b_acc[k] (float64, accumulator units).
    bias_operand: B[k] (int16 values), alu_shift_value. scale_operand: s[k] (int16 values),
    mul_shift_value. acc_bound: max |A| any int8 input can produce. sdp: the SDP registers.
    """

    weight_q: np.ndarray
    weight_scale: np.ndarray
    input_scale: float
    output_scale: float
    per_channel: bool
    relu: bool
    stride: tuple
    padding: tuple
    multiplier: np.ndarray
    bias_acc: np.ndarray
    bias_operand: np.ndarray
    alu_shift_value: int
    scale_operand: np.ndarray
    mul_shift_value: int
    acc_bound: int
    sdp: SdpParams = field(repr=False)

    @property
    def multiplier_error(self) -> np.ndarray:
        """``|s[k] / 2**mul_shift - M[k]|`` per channel (<= ``2**-(mul_shift+1)``)."""
        return np.abs(self.scale_operand / 2.0 ** self.mul_shift_value - self.multiplier)

    @property
    def bias_error(self) -> np.ndarray:
        """``|B[k] * 2**alu_shift - b_acc[k]|`` per channel (<= ``2**(alu_shift-1)``)."""
        return np.abs(self.bias_operand * 2.0 ** self.alu_shift_value - self.bias_acc)

    def requant_bound(self, acc: np.ndarray) -> np.ndarray:
        """Per-element bound on ``|(A + B 2**ls) s / 2**sh - (A + b_acc) M|`` for CACC values
        ``acc`` (N, P, Q, K)."""
        a = np.abs(acc + self.bias_operand * 2.0 ** self.alu_shift_value)
        return a * self.multiplier_error + self.bias_error * self.multiplier

    def register_value(self, acc: np.ndarray) -> np.ndarray:
        """The exact real value the registers compute before rounding,
        ``relu((A + B 2**ls) s / 2**sh)``, in output units (float64)."""
        a = np.asarray(acc, np.float64) + self.bias_operand * 2.0 ** self.alu_shift_value
        v = a * self.scale_operand / 2.0 ** self.mul_shift_value
        return np.maximum(v, 0.0) if self.relu else v


def quantize_conv(layer: FloatConv, input_scale, output_scale, *,
                  per_channel: bool = True) -> QuantizedConv:
    """Quantize ``layer`` (batch-norm folded) for int8 inputs of scale ``input_scale`` and int8
    outputs of scale ``output_scale``; see the module docstring for the formulas and bounds.
    Raises ValueError for bad scales, an all-zero layer, a bias or scale ratio the registers
    cannot hold, or a layer whose CACC sum could exceed int32."""
    if not isinstance(layer, FloatConv):
        raise ValueError(f"layer = {layer!r}: must be a FloatConv")
    s_x = _scale("input_scale", input_scale)
    s_y = _scale("output_scale", output_scale)
    w, b = layer.folded()
    k = w.shape[0]
    ch_max = np.abs(w).reshape(k, -1).max(axis=1)
    if ch_max.max() == 0:
        raise ValueError("layer.weight: all weights are zero; no weight scale exists")
    tensor_scale = ch_max.max() / INT8_MAX
    if per_channel:
        # An all-zero kernel has no range of its own: it takes the tensor's scale.
        s_w = np.where(ch_max > 0, ch_max / INT8_MAX, tensor_scale)
    else:
        s_w = np.full(k, tensor_scale)
    w_q = np.clip(_round(w / s_w[:, None, None, None]), -INT8_MAX, INT8_MAX).astype(np.int8)

    acc_bound = int(128 * np.abs(w_q.astype(np.int64)).reshape(k, -1).sum(axis=1).max())
    if acc_bound > 2**31 - 1:
        raise ValueError(f"layer.weight: R*S*C = {w[0].size}: the CACC sum can reach "
                         f"{acc_bound}, beyond int32; the int8 pass with CACC truncate 0 "
                         f"needs 128 * sum|W_q[k]| <= 2**31 - 1")

    mult = s_x * s_w / s_y
    mul_shift = _MAX_MUL_SHIFT
    while mul_shift > 0 and _round(mult.max() * 2.0 ** mul_shift) > 32767:
        mul_shift -= 1
    s_op = _round(mult * 2.0 ** mul_shift)
    if s_op.max() > 32767:
        raise ValueError(f"output_scale = {s_y!r}: the multiplier s_x * s_w / s_y = "
                         f"{mult.max():.6g} exceeds the int16 MUL operand (<= 32767 at shift 0)")
    if s_op.min() < 1:
        j = int(np.argmin(s_op))
        raise ValueError(f"channel {j}: multiplier {mult[j]:.6g} rounds to 0 with the common "
                         f"shift {mul_shift} set by the largest channel ({mult.max():.6g}); a "
                         f"ratio of {mult.max() / mult[j]:.4g} exceeds what one int16 scale "
                         f"with one shift can hold (65534)")

    bias_acc = b / (s_x * s_w)
    alu_shift = 0
    while alu_shift <= _MAX_ALU_SHIFT and np.abs(_round(bias_acc / 2.0 ** alu_shift)).max() > 32767:
        alu_shift += 1
    if alu_shift > _MAX_ALU_SHIFT:
        j = int(np.argmax(np.abs(bias_acc)))
        raise ValueError(f"channel {j}: bias {b[j]:.6g} is {bias_acc[j]:.6g} accumulator units, "
                         f"beyond int16 << 16 (the int32 range of the ALU operand)")
    b_op = _round(bias_acc / 2.0 ** alu_shift)

    sdp = SdpParams(bs=SdpXParams(
        bypass=False, alu_bypass=False, alu_algo="SUM", alu_src="MEM",
        alu_shift_value=alu_shift, mul_bypass=False, mul_src="MEM", mul_shift_value=mul_shift,
        relu_bypass=not layer.relu, data_mode="PER_KERNEL", data_size="TWO_BYTE",
        alu_data=b_op.astype(np.int64), mul_data=s_op.astype(np.int64)))
    return QuantizedConv(
        weight_q=w_q, weight_scale=s_w, input_scale=s_x, output_scale=s_y,
        per_channel=bool(per_channel), relu=layer.relu, stride=layer.stride,
        padding=layer.padding, multiplier=mult, bias_acc=bias_acc,
        bias_operand=b_op.astype(np.int64), alu_shift_value=alu_shift,
        scale_operand=s_op.astype(np.int64), mul_shift_value=mul_shift, acc_bound=acc_bound,
        sdp=sdp)


def _check_xq(x_q, qconv):
    if not isinstance(qconv, QuantizedConv):
        raise ValueError(f"qconv = {qconv!r}: must be a QuantizedConv (from quantize_conv)")
    x_q = np.asarray(x_q)
    if x_q.ndim != 4 or x_q.shape[3] != qconv.weight_q.shape[3]:
        raise ValueError(f"x_q: shape {x_q.shape}: must be (N, H, W, "
                         f"{qconv.weight_q.shape[3]}) int8")
    return x_q


def _acc(x_q, qconv, atomic_c=64, acc_bits=34):
    return conv_cacc(x_q, qconv.weight_q, stride=qconv.stride, padding=qconv.padding,
                     atomic_c=atomic_c, acc_bits=acc_bits, precision="int8")


def run_int8_conv(x_q, qconv: QuantizedConv, *, atomic_c: int = 64,
                  acc_bits: int = 34) -> np.ndarray:
    """The bit-exact int8 layer: ``conv_cacc`` -> ``conv_to_sdp`` (truncate 0) ->
    ``sdp_apply(qconv.sdp)``. ``x_q``: int8 (N, H, W, C). Returns int8 (N, P, Q, K)."""
    x_q = _check_xq(x_q, qconv)
    acc = _acc(x_q, qconv, atomic_c, acc_bits)
    return sdp_apply(conv_to_sdp(acc, 0, acc_bits), qconv.sdp)


def error_stages(layer: FloatConv, qconv: QuantizedConv, x_float) -> dict[str, np.ndarray]:
    """The float64 outputs (N, P, Q, K) along the quantization chain, in real units:

    ``reference`` the float layer; ``input`` on the quantized input ``x_q * s_x``; ``weight``
    also with the quantized weights ``W_q * s_w`` (= ``(A + b_acc) M s_y``); ``register`` the
    value the registers define before rounding (``(A + B 2**ls) s / 2**sh * s_y``);
    ``hardware`` the bit-exact int8 output times ``s_y``. Also ``acc`` (CACC values) and
    ``x_q``. Consecutive differences are the error budget's terms; they sum to the total."""
    ref = layer.forward(x_float)
    x_q = quantize_activations(x_float, qconv.input_scale)
    _, b = layer.folded()
    xd = x_q.astype(np.float64) * qconv.input_scale
    stage_in = float_conv(xd, layer.folded()[0], b, layer.stride, layer.padding, layer.relu)
    wd = qconv.weight_q.astype(np.float64) * qconv.weight_scale[:, None, None, None]
    stage_w = float_conv(xd, wd, b, layer.stride, layer.padding, layer.relu)
    acc = _acc(x_q, qconv)
    stage_reg = qconv.register_value(acc) * qconv.output_scale
    hw = sdp_apply(conv_to_sdp(acc, 0, 34), qconv.sdp).astype(np.float64) * qconv.output_scale
    return {"reference": ref, "input": stage_in, "weight": stage_w, "register": stage_reg,
            "hardware": hw, "acc": acc, "x_q": x_q}


@dataclass(frozen=True)
class QuantReport:
    """Dequantized int8 output against the float64 reference, all in real units.

    ``budget`` maps each error source to its ``{"rms": .., "max_abs": ..}``:
    ``input_rounding``, ``weight_rounding``, ``requant_rounding`` (the int16 scale and bias
    and their shifts), ``output_rounding`` (final rounding and saturation). The terms
    telescope: their per-element sum is the total error."""

    per_channel: bool
    max_abs_error: float
    rms_error: float
    sqnr_db: float
    min_channel_sqnr_db: float
    saturated_fraction: float
    budget: dict

    def as_text(self) -> str:
        """A short human-readable table."""
        lines = [f"{'per-channel' if self.per_channel else 'per-tensor'}: SQNR "
                 f"{self.sqnr_db:.2f} dB (worst channel {self.min_channel_sqnr_db:.2f} dB), "
                 f"max |err| {self.max_abs_error:.4g}, RMS {self.rms_error:.4g}, saturated "
                 f"{100 * self.saturated_fraction:.3f} %"]
        for name, term in self.budget.items():
            lines.append(f"  {name:<17} RMS {term['rms']:.4g}  max {term['max_abs']:.4g}")
        return "\n".join(lines)


def _sqnr(ref, err):
    signal, noise = float(np.sum(ref ** 2)), float(np.sum(err ** 2))
    if noise == 0:
        return math.inf
    return -math.inf if signal == 0 else 10 * math.log10(signal / noise)


def quantization_report(layer: FloatConv, qconv: QuantizedConv, x_float) -> QuantReport:
    """Compare the bit-exact int8 output (dequantized) with the float64 reference on
    ``x_float``: max abs and RMS error, SQNR (``10 log10(sum ref^2 / sum err^2)``, whole tensor
    and worst channel), the fraction of outputs saturated by the int8 range (the register
    value rounds outside -128..127), and the error budget (:class:`QuantReport`)."""
    st = error_stages(layer, qconv, x_float)
    ref, hw = st["reference"], st["hardware"]
    err = hw - ref
    chain = ("reference", "input", "weight", "register", "hardware")
    names = ("input_rounding", "weight_rounding", "requant_rounding", "output_rounding")
    budget = {}
    for name, a, b in zip(names, chain[:-1], chain[1:]):
        d = st[b] - st[a]
        budget[name] = {"rms": float(np.sqrt(np.mean(d ** 2))), "max_abs": float(np.abs(d).max())}
    q = _round(st["register"] / qconv.output_scale)
    k = ref.shape[3]
    # Worst channel among those with signal (a channel ReLU zeroes everywhere has no SQNR).
    per_ch = [_sqnr(ref[..., j], err[..., j]) for j in range(k) if np.any(ref[..., j])]
    return QuantReport(
        per_channel=qconv.per_channel, max_abs_error=float(np.abs(err).max()),
        rms_error=float(np.sqrt(np.mean(err ** 2))), sqnr_db=_sqnr(ref, err),
        min_channel_sqnr_db=float(min(per_ch)) if per_ch else math.inf,
        saturated_fraction=float(np.mean((q > INT8_MAX) | (q < -INT8_MAX - 1))),
        budget=budget)
