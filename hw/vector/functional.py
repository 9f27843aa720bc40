"""Functional (numpy) model of the vector unit: what every vector operation computes.

The reference semantics the correctness tests of the vector unit and of fusion check against
(the fused forms are in :mod:`hw.vector.fused`). Plain vectorised numpy (loops run over tiles and kernel offsets, never over elements);
nothing here counts cycles except the work counts :func:`flash_attention` reports.

Conventions
-----------
* **Arithmetic in float32**, as NVDLA's SDP runs fp16 data through fp32 ALUs and multipliers
  (:mod:`hw.nvdla.fp16`). Every function takes array-likes, computes in IEEE binary32 with
  round-to-nearest-even and returns float32 (:func:`requantize` returns int8/int16). Storage
  datatypes apply at the unit's boundary: a load or store rounds with :func:`to_dtype`; in
  between nothing is narrower than float32.
* **Special functions** (exp, tanh, erf, rsqrt) are evaluated in float64 and rounded once to
  float32: the correctly rounded value (barring a rare double rounding), whatever the platform's
  libm. A hardware approximation is compared against it with a stated tolerance. add, sub, mul,
  div and sqrt are IEEE float32 operations and exact to the bit.
* **IEEE special values**: overflow gives inf, 0/0 and sqrt(-1) give NaN, NaN propagates; no
  floating-point warning is raised (the ops run under ``numpy.errstate(all="ignore")``).
* **Summation order**: ``reduce``, ``softmax`` and the norms sum with numpy's pairwise summation;
  the unit's lane tree adds in another order, so results agree within float32 rounding. Pooling
  accumulates each window in row-major kernel order, so tiled pooling is bit-identical.
* Bad arguments raise a one-line ``ValueError``: ``function: name = value: what is allowed``.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

import numpy as np

from hw.validate import _is_bool, _is_int
from hw.vector.config import DTYPES

__all__ = [
    "DTYPES", "to_dtype",
    "relu", "relu6", "leaky_relu", "sigmoid", "tanh", "gelu", "silu", "erf", "exp", "reciprocal",
    "rsqrt", "sqrt", "ACTIVATIONS",
    "BINARY", "binary", "REDUCTIONS", "reduce", "softmax", "layernorm", "rmsnorm",
    "pool2d", "global_pool", "pool_input_rows", "requantize", "Requant",
    "quantize_multiplier", "requantize_fixed",
]

# Saturation bounds held in float32; 2**31 - 1 is not a float32, so int32 saturates at the
# largest float32 below it (then ``.astype(np.int32)`` of a result never overflows).
_INT_RANGE = {"int8": (-128.0, 127.0), "int16": (-32768.0, 32767.0),
              "int32": (-2147483648.0, 2147483520.0)}
_INT_TYPES = {"int8": np.int8, "int16": np.int16}


# --- argument checks (each raises a one-line ValueError) -----------------------------------------

def _show(value) -> str:
    if isinstance(value, np.ndarray):
        return f"array of shape {value.shape} and dtype {value.dtype}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fail(func: str, name: str, value, allowed: str):
    raise ValueError(f"{func}: {name} = {_show(value)}: {allowed}")


def _floats(func: str, name: str, x) -> np.ndarray:
    """``x`` as a float32 array."""
    try:
        arr = np.asarray(x)
    except ValueError:  # ragged nested lists
        arr = None
    if arr is None or arr.dtype.kind not in "biuf":
        _fail(func, name, x, "must be a real numeric array")
    return arr.astype(np.float32, copy=False)


def _ints(func: str, name: str, x) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        _fail(func, name, x, "must be an integer array (accumulator values)")
    return arr.astype(np.int64, copy=False)


def _int(func: str, name: str, value, lo: int = 1) -> int:
    """An integer >= ``lo``."""
    if not _is_int(value) or value < lo:
        _fail(func, name, value, "must be a positive integer" if lo == 1 else f"must be an integer >= {lo}")
    return int(value)


def _flag(func: str, name: str, value) -> bool:
    if not _is_bool(value):
        _fail(func, name, value, "must be True or False")
    return bool(value)


def _number(func: str, name: str, value, positive: bool = True) -> np.float32:
    """A finite real scalar (> 0 if ``positive``) as float32."""
    if _is_bool(value) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or (positive and value <= 0):
        _fail(func, name, value, "must be a finite number" + (" > 0" if positive else ""))
    return np.float32(value)


def _axis(func: str, axis, shape: tuple) -> int:
    """``axis`` normalised to 0..ndim-1, over a non-empty dimension."""
    ndim = len(shape)
    if not _is_int(axis) or not -ndim <= axis < ndim:
        _fail(func, "axis", axis, f"must be an integer in [-{ndim}, {ndim}) for a {ndim}-d input")
    axis = int(axis) % ndim
    if shape[axis] == 0:
        _fail(func, "axis", axis, f"the input's shape {shape} is empty along it")
    return axis


def _ieee(fn):
    """Run ``fn`` with IEEE special values and no floating-point warnings."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)
    return wrapper


# --- datatypes -----------------------------------------------------------------------------------

@_ieee
def to_dtype(x, dtype: str) -> np.ndarray:
    """``x`` rounded to ``dtype``, as a float32 array holding only values ``dtype`` represents.

    ``x`` is taken as float32 first (everything in the unit is). fp16 and bf16 round to nearest
    even, overflow to inf, keep subnormals, and NaN stays NaN (bf16: the quiet NaN of its sign, as
    ``ml_dtypes.bfloat16`` gives). Integer types round half to even and saturate; NaN
    becomes 0; int32 saturates at 2**31 - 128 above (the largest float32 below 2**31).
    """
    if dtype not in DTYPES:
        _fail("to_dtype", "dtype", dtype, f"must be one of {', '.join(DTYPES)}")
    x = _floats("to_dtype", "x", x)
    if dtype == "fp32":
        return x.copy()
    if dtype == "fp16":
        return x.astype(np.float16).astype(np.float32)
    if dtype == "bf16":
        bits = x.view(np.uint32)
        rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)
        quiet = (bits & np.uint32(0x80000000)) | np.uint32(0x7FC00000)
        return np.where(np.isnan(x), quiet, rounded).astype(np.uint32).view(np.float32)
    lo, hi = _INT_RANGE[dtype]
    return np.clip(np.nan_to_num(np.rint(x), nan=0.0), lo, hi).astype(np.float32)


# --- activations and special functions (float32 in, float32 out) ---------------------------------

def _special(fn, x: np.ndarray) -> np.ndarray:
    """``fn`` evaluated in float64 and rounded once to float32."""
    return fn(x.astype(np.float64)).astype(np.float32)


@_ieee
def relu(x) -> np.ndarray:
    """max(x, 0)."""
    return np.maximum(_floats("relu", "x", x), np.float32(0))


@_ieee
def relu6(x) -> np.ndarray:
    """min(max(x, 0), 6)."""
    return np.minimum(np.maximum(_floats("relu6", "x", x), np.float32(0)), np.float32(6))


@_ieee
def leaky_relu(x, alpha: float = 0.01) -> np.ndarray:
    """x where x >= 0, else alpha * x (alpha taken as float32)."""
    x = _floats("leaky_relu", "x", x)
    return np.where(x >= 0, x, _number("leaky_relu", "alpha", alpha, positive=False) * x)


@_ieee
def exp(x) -> np.ndarray:
    """e**x, correctly rounded to float32 (overflow gives inf)."""
    return _special(np.exp, _floats("exp", "x", x))


@_ieee
def tanh(x) -> np.ndarray:
    """tanh(x), correctly rounded to float32."""
    return _special(np.tanh, _floats("tanh", "x", x))


@_ieee
def erf(x) -> np.ndarray:
    """The error function, ``math.erf`` in float64 rounded to float32."""
    return _special(np.vectorize(math.erf, otypes=[np.float64]), _floats("erf", "x", x))


@_ieee
def rsqrt(x) -> np.ndarray:
    """1 / sqrt(x), correctly rounded to float32 (0 gives inf, x < 0 gives NaN)."""
    return _special(lambda v: 1.0 / np.sqrt(v), _floats("rsqrt", "x", x))


@_ieee
def sqrt(x) -> np.ndarray:
    """IEEE float32 square root (x < 0 gives NaN)."""
    return np.sqrt(_floats("sqrt", "x", x))


@_ieee
def reciprocal(x) -> np.ndarray:
    """1 / x, an IEEE float32 division (0 gives inf)."""
    return np.float32(1) / _floats("reciprocal", "x", x)


@_ieee
def sigmoid(x) -> np.ndarray:
    """1 / (1 + e**-x), written with e**-|x| so that no step overflows."""
    x = _floats("sigmoid", "x", x)
    e = exp(-np.abs(x))
    return np.where(x >= 0, np.float32(1) / (1 + e), e / (1 + e))


@_ieee
def silu(x) -> np.ndarray:
    """x * sigmoid(x) (Swish with beta = 1)."""
    x = _floats("silu", "x", x)
    return x * sigmoid(x)


_SQRT2 = np.float32(math.sqrt(2))
_SQRT_2_PI = np.float32(math.sqrt(2 / math.pi))


@_ieee
def gelu(x, approximate: str = "none") -> np.ndarray:
    """GELU (Hendrycks & Gimpel 2016): erf form 0.5x(1 + erf(x/sqrt2)) or, with
    ``approximate="tanh"``, 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) (the ONNX Gelu attribute)."""
    x = _floats("gelu", "x", x)
    if approximate == "none":
        return np.float32(0.5) * x * (1 + erf(x / _SQRT2))
    if approximate == "tanh":
        return np.float32(0.5) * x * (1 + tanh(_SQRT_2_PI * (x + np.float32(0.044715) * x * x * x)))
    _fail("gelu", "approximate", approximate, "must be 'none' (erf form) or 'tanh'")


#: Element-wise functions by name (what an epilogue's ``activation`` names).
ACTIVATIONS = {
    "relu": relu, "relu6": relu6, "leaky_relu": leaky_relu, "sigmoid": sigmoid, "tanh": tanh,
    "gelu": gelu, "gelu_tanh": functools.partial(gelu, approximate="tanh"), "silu": silu,
    "erf": erf, "exp": exp, "reciprocal": reciprocal, "rsqrt": rsqrt, "sqrt": sqrt,
}


# --- binary ops, reductions, softmax, norms ------------------------------------------------------

_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
           "max": np.maximum, "min": np.minimum, "pow": np.power}
#: Element-wise binary operations of :func:`binary`.
BINARY = tuple(_BINARY)
_REDUCE = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}
#: Reductions of :func:`reduce`.
REDUCTIONS = tuple(_REDUCE)


@_ieee
def binary(fn: str, a, b) -> np.ndarray:
    """``a fn b`` in float32 with numpy broadcasting; max/min propagate NaN."""
    if fn not in _BINARY:
        _fail("binary", "fn", fn, f"must be one of {', '.join(BINARY)}")
    a, b = _floats("binary", "a", a), _floats("binary", "b", b)
    try:
        np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        _fail("binary", "b", b, f"shape does not broadcast with a's shape {a.shape}")
    return _BINARY[fn](a, b)


@_ieee
def reduce(fn: str, x, axis: int = -1, keepdims: bool = False) -> np.ndarray:
    """sum, mean, max or min of ``x`` along ``axis`` (mean = float32 sum / count)."""
    if fn not in _REDUCE:
        _fail("reduce", "fn", fn, f"must be one of {', '.join(REDUCTIONS)}")
    x = _floats("reduce", "x", x)
    axis = _axis("reduce", axis, x.shape)
    return np.asarray(_REDUCE[fn](x, axis=axis, keepdims=_flag("reduce", "keepdims", keepdims)))


@_ieee
def softmax(x, axis: int = -1) -> np.ndarray:
    """e**(x - max) / sum(e**(x - max)) along ``axis``; the row max is subtracted first so no
    exponent overflows, and ``-inf`` entries (masked) get probability 0."""
    x = _floats("softmax", "x", x)
    axis = _axis("softmax", axis, x.shape)
    e = exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _affine(func: str, y: np.ndarray, gamma, beta, axis: int) -> np.ndarray:
    """``y * gamma + beta``, each a vector of ``y.shape[axis]`` values applied along ``axis``."""
    shape = [1] * y.ndim
    shape[axis] = y.shape[axis]
    for name, param in (("gamma", gamma), ("beta", beta)):
        if param is None:
            continue
        p = _floats(func, name, param)
        if p.shape != (y.shape[axis],):
            _fail(func, name, param, f"must have shape ({y.shape[axis]},), the normalised axis")
        y = y * p.reshape(shape) if name == "gamma" else y + p.reshape(shape)
    return y


@_ieee
def layernorm(x, gamma=None, beta=None, eps: float = 1e-5, axis: int = -1) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) * gamma + beta over ``axis``, with the biased variance
    mean((x - mean)^2) computed in two passes (torch.nn.LayerNorm, ONNX LayerNormalization)."""
    x = _floats("layernorm", "x", x)
    axis = _axis("layernorm", axis, x.shape)
    eps = _number("layernorm", "eps", eps)
    centered = x - np.mean(x, axis=axis, keepdims=True)
    var = np.mean(centered * centered, axis=axis, keepdims=True)
    return _affine("layernorm", centered / np.sqrt(var + eps), gamma, beta, axis)


@_ieee
def rmsnorm(x, gamma=None, eps: float = 1e-6) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * gamma over the last axis (Zhang & Sennrich 2019)."""
    x = _floats("rmsnorm", "x", x)
    axis = _axis("rmsnorm", -1, x.shape)
    eps = _number("rmsnorm", "eps", eps)
    y = x / np.sqrt(np.mean(x * x, axis=axis, keepdims=True) + eps)
    return _affine("rmsnorm", y, gamma, None, axis)


# --- pooling (NHWC) ------------------------------------------------------------------------------

def _nhwc(func: str, x) -> np.ndarray:
    x = _floats(func, "x", x)
    if x.ndim != 4 or 0 in x.shape:
        _fail(func, "x", x, "must be a non-empty NHWC array (4 dimensions)")
    return x


def _pair(func: str, name: str, value) -> tuple[int, int]:
    pair = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(pair) != 2:
        _fail(func, name, value, "must be a positive integer or a (height, width) pair")
    return _int(func, name, pair[0]), _int(func, name, pair[1])


def _pool_args(func: str, kind, kernel, stride, pads):
    if kind not in ("max", "avg"):
        _fail(func, "kind", kind, "must be 'max' or 'avg'")
    kh, kw = _pair(func, "kernel", kernel)
    sh, sw = _pair(func, "stride", stride)
    if (not isinstance(pads, (tuple, list)) or len(pads) != 4
            or any(not _is_int(p) or p < 0 for p in pads)
            or max(pads[0], pads[2]) >= kh or max(pads[1], pads[3]) >= kw):
        _fail(func, "pads", pads, "must be (top, left, bottom, right) integers >= 0, each smaller "
              "than the kernel in its dimension (every window then holds a real element)")
    return kh, kw, sh, sw, tuple(int(p) for p in pads)


def _real_counts(size: int, outputs: int, kernel: int, stride: int, pad: int) -> np.ndarray:
    """How many of each window's positions along one axis lie inside the unpadded input."""
    start = np.arange(outputs) * stride - pad
    return np.minimum(start + kernel, size) - np.maximum(start, 0)


@_ieee
def pool2d(x, kind: str, kernel, stride=1, pads=(0, 0, 0, 0)) -> np.ndarray:
    """Max or average pooling of an NHWC array; ``kernel``/``stride`` an int or (h, w) pair,
    ``pads`` (top, left, bottom, right) as ONNX orders them.

    Output size ``(in + pads - kernel) // stride + 1`` per axis. Max ignores padding; average
    divides the window's float32 sum (accumulated in row-major kernel order) by the number of
    window elements inside the unpadded input (ONNX AveragePool ``count_include_pad=0``).
    """
    x = _nhwc("pool2d", x)
    kh, kw, sh, sw, (pt, pl, pb, pr) = _pool_args("pool2d", kind, kernel, stride, pads)
    _, h, w, _ = x.shape
    oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
    if oh < 1 or ow < 1:
        _fail("pool2d", "kernel", kernel, f"must fit the padded input of {h + pt + pb}x{w + pl + pr}")
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=fill)
    acc = None
    for i in range(kh):
        for j in range(kw):
            win = xp[:, i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw, :]
            if acc is None:
                acc = win.copy()
            elif kind == "max":
                acc = np.maximum(acc, win)
            else:
                acc = acc + win
    if kind == "max":
        return acc
    count = np.outer(_real_counts(h, oh, kh, sh, pt), _real_counts(w, ow, kw, sw, pl))
    return acc / count.astype(np.float32)[None, :, :, None]


def global_pool(x, kind: str) -> np.ndarray:
    """Max or average over H and W of an NHWC array, keeping them as size 1: (N, 1, 1, C)."""
    x = _nhwc("global_pool", x)
    return pool2d(x, kind, x.shape[1:3])


def pool_input_rows(out_row0: int, out_row1: int, kernel_h: int, stride_h: int, pad_top: int,
                    height: int) -> tuple[int, int, int, int]:
    """The input rows that pooled output rows ``[out_row0, out_row1)`` read.

    Returns ``(row0, row1, pad_top, pad_bottom)``: the real rows ``[row0, row1)`` (the tile's
    rows plus the ``kernel_h - stride_h`` halo rows shared with its neighbour) and the padding
    rows above and below them that lie outside the input.
    """
    func = "pool_input_rows"
    kernel_h, stride_h = _int(func, "kernel_h", kernel_h), _int(func, "stride_h", stride_h)
    height = _int(func, "height", height)
    if _int(func, "pad_top", pad_top, lo=0) >= kernel_h:
        _fail(func, "pad_top", pad_top, f"must be smaller than kernel_h = {kernel_h}")
    if _int(func, "out_row1", out_row1) <= _int(func, "out_row0", out_row0, lo=0):
        _fail(func, "out_row1", out_row1, f"must be greater than out_row0 = {out_row0}")
    top = out_row0 * stride_h - pad_top
    bottom = (out_row1 - 1) * stride_h - pad_top + kernel_h
    return max(top, 0), min(bottom, height), max(-top, 0), max(bottom - height, 0)


# --- requantisation ------------------------------------------------------------------------------

@_ieee
def requantize(acc, scale, zero_point: int = 0, dtype: str = "int8", relu: bool = False) -> np.ndarray:
    """int32 accumulators to int8/int16: Gemmini's accumulator scaler rule.

    ``acc`` is converted to float32 (round-nearest-even; exact below 2**24), multiplied by
    ``scale`` in float32 (per tensor, or one value per channel on the last axis), rounded to the
    nearest integer with ties to even, and saturated to ``dtype``; as Gemmini's default
    ``acc_scale_args`` do (ucb-bar/gemmini README "Scratchpad and Accumulator";
    ``Configs.scala``: INToRecFN, MulAddRecFN, RecFNToIN, all ``round_near_even``, saturating).
    Then ``zero_point`` is added and, with ``relu``, the result is clamped below at the zero
    point (the quantised 0.0, as TFLite's fused activation), before the saturation.
    """
    func = "requantize"
    acc = _ints(func, "acc", acc)
    if dtype not in _INT_TYPES:
        _fail(func, "dtype", dtype, "must be 'int8' or 'int16'")
    lo, hi = _INT_RANGE[dtype]
    scale_arr = _floats(func, "scale", scale)
    channels = acc.shape[-1] if acc.ndim else None
    if (scale_arr.shape not in ((), (channels,)) or not np.all(np.isfinite(scale_arr))
            or not np.all(scale_arr > 0)):
        _fail(func, "scale", scale, f"must be finite and > 0, a scalar or one per channel "
              f"(shape ({channels},))")
    if not _is_int(zero_point) or not lo <= zero_point <= hi:
        _fail(func, "zero_point", zero_point, f"must be an integer in [{lo:.0f}, {hi:.0f}]")
    y = np.rint(acc.astype(np.float32) * scale_arr)
    if _flag(func, "relu", relu):
        y = np.maximum(y, np.float32(0))
    return np.clip(y + np.float32(zero_point), lo, hi).astype(_INT_TYPES[dtype])


_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


def quantize_multiplier(scale) -> tuple[int, int]:
    """``(multiplier, shift)`` with ``scale ~= multiplier * 2**(shift - 31)``: a Q0.31 int32
    multiplier in [2**30, 2**31) and a power-of-two shift, as TFLite's ``QuantizeMultiplier``
    derives them (``frexp``, the fraction rounded to 31 bits). ``scale`` in (0, 2**31)."""
    func = "quantize_multiplier"
    value = _number(func, "scale", scale)
    if not 0 < float(value) < 2.0 ** 31:
        _fail(func, "scale", scale, "must be finite, > 0 and < 2**31")
    frac, exp = math.frexp(float(scale))
    q = round(frac * (1 << 31))
    if q == 1 << 31:                # the fraction rounded up to 1.0
        q, exp = q // 2, exp + 1
    return int(q), int(exp)


def requantize_fixed(acc, multiplier: int, shift: int, zero_point: int = 0,
                     dtype: str = "int8", relu: bool = False) -> np.ndarray:
    """int32 accumulators to int8/int16 in integer arithmetic only: multiply, shift, round,
    saturate, the rule of gemmlowp and TFLite's int8 kernels (``MultiplyByQuantizedMultiplier``),
    which a hardware lane implements with one 32x32 multiplier and a shifter.

    ``acc * 2**max(shift, 0)`` (saturated to int32) is multiplied by the Q0.31
    ``multiplier`` and its high half taken, rounding to nearest with ties toward +infinity
    (``SaturatingRoundingDoublingHighMul``: a nudge of 2**30, or 1 - 2**30 below zero, then
    division truncating toward zero; the one overflowing case, both operands -2**31, gives
    2**31 - 1); then it is divided by ``2**max(-shift, 0)``, rounding to nearest with ties
    away from zero (``RoundingDivideByPOT``).
    ``zero_point`` is added and, with ``relu``, the result is clamped below at the zero point
    (the quantised 0.0); then it is saturated to ``dtype``. :func:`quantize_multiplier` derives
    ``(multiplier, shift)`` from a real scale."""
    func = "requantize_fixed"
    acc = _ints(func, "acc", acc).astype(np.int64)
    if dtype not in _INT_TYPES:
        _fail(func, "dtype", dtype, "must be 'int8' or 'int16'")
    lo, hi = (int(v) for v in _INT_RANGE[dtype])
    if not _is_int(multiplier) or not 0 <= multiplier <= _INT32_MAX:
        _fail(func, "multiplier", multiplier, "must be an integer in [0, 2**31 - 1]")
    if not _is_int(shift) or not -31 <= shift <= 30:
        _fail(func, "shift", shift, "must be an integer in [-31, 30]")
    if not _is_int(zero_point) or not lo <= zero_point <= hi:
        _fail(func, "zero_point", zero_point, f"must be an integer in [{lo}, {hi}]")
    if ((acc < _INT32_MIN) | (acc > _INT32_MAX)).any():
        _fail(func, "acc", "values", "must be int32")
    left, right = max(shift, 0), max(-shift, 0)
    x = np.clip(acc << left, _INT32_MIN, _INT32_MAX)     # the shifted operand stays int32
    # SaturatingRoundingDoublingHighMul: (x * m + nudge) / 2**31, truncated toward zero
    ab = x * np.int64(multiplier)
    nudge = np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    total = ab + nudge
    high = np.where(total >= 0, total >> 31, -((-total) >> 31))
    high = np.where((x == _INT32_MIN) & (multiplier == _INT32_MIN), _INT32_MAX, high)
    # RoundingDivideByPOT: x / 2**right, rounding half away from zero
    if right:
        mask = (1 << right) - 1
        remainder = high & mask
        threshold = (mask >> 1) + (high < 0)
        high = (high >> right) + (remainder > threshold)
    y = high + zero_point
    if _flag(func, "relu", relu):
        y = np.maximum(y, zero_point)
    return np.clip(y, lo, hi).astype(_INT_TYPES[dtype])


@dataclass(frozen=True)
class Requant:
    """The requantisation step of an epilogue, see :func:`requantize`."""

    scale: object
    zero_point: int = 0
    dtype: str = "int8"

    def columns(self, cols: slice) -> "Requant":
        """The same step for the output columns ``cols`` (slices a per-channel scale)."""
        scale = np.asarray(self.scale)
        return self if scale.ndim == 0 else Requant(scale[cols], self.zero_point, self.dtype)
