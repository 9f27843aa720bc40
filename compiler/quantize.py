"""Post-training quantization and N:M magnitude pruning of weights and activations, producing
the values and scales the register-level array model runs (issue 27).

Quantization (:func:`quantize`, :class:`QuantSpec`)
----------------------------------------------------
* **Integer** (``int8``, ``int4``): ``q = clamp(round(x / scale) + zero_point, qmin, qmax)``,
  round half to even (numpy's). Symmetric: ``zero_point = 0``, ``scale = max|x| / qmax`` (the
  range ``-qmax..qmax``, -127..127 and -7..7, so that zero and negation are exact).
  Asymmetric: ``scale = (max - min) / (qmax - qmin)`` with the range widened to include 0,
  ``zero_point = round(qmin - min / scale)``. (Jacob et al., CVPR 2018; Nagel et al., "A White
  Paper on Neural Network Quantization", 2021.)
* **Floating point** (``fp8_e4m3``, ``fp8_e5m2``, ``bf16``, ``fp16``): ``q = fmt(x / scale)``,
  rounded to nearest even by :func:`hw.numerics.to_float_format`, with ``scale = max|x| /
  fmt.max`` so the largest magnitude lands on the format's largest value (the per-tensor
  scaling of NVIDIA's Transformer Engine; Micikevicius et al., "FP8 Formats for Deep
  Learning", 2022); bf16 and fp16 use ``scale = 1``.
* **Binary** (``binary``): ``q = +1`` where ``x >= 0``, else ``-1``, with ``scale = mean|x|``,
  the scale that minimises ``||x - scale * q||^2`` for those signs (XNOR-Net, Rastegari et al.,
  ECCV 2016); always symmetric.
* **Granularity**: one scale per tensor, or per channel (one per slice along ``axis``: the
  output channels of a weight, a GEMM's N).
* :func:`sqnr_db` is ``10 log10(sum x^2 / sum (x - x_hat)^2)``.

Pruning (:func:`prune_n_m`, from :mod:`hw.sparsity`)
----------------------------------------------------
N:M structured sparsity: in every group of M consecutive elements along ``axis`` (a weight's
K, the reduction dimension), keep the N of largest magnitude (ties: the earlier element) and
zero the rest (NVIDIA's 2:4 sparse tensor cores; Mishra et al., "Accelerating Sparse Deep
Neural Networks", 2021). K must be a multiple of M.

Running it (:func:`quantized_gemm`, :func:`ptq_report`)
-------------------------------------------------------
A GEMM of symmetric quantized operands runs on :func:`hw.systolic.regmodel.run_gemm` in the
operands' precision (integers exact; floats accumulated in fp32) and is rescaled by
``scale_a x scale_w`` (per output channel with per-channel weights). :func:`ptq_report` does it
for a list of weights on seeded inputs and reports each layer's SQNR against the fp64 GEMM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hw.numerics import FLOAT_FORMATS, to_float_format
from hw.sparsity import prune_n_m

__all__ = ["QuantSpec", "Quantized", "quantize", "dequantize", "sqnr_db", "prune_n_m",
           "quantized_gemm", "ptq_report", "INT_RANGES"]

#: (qmin, qmax) of the integer types, two's complement.
INT_RANGES = {"int8": (-128, 127), "int4": (-8, 7)}
_DTYPES = tuple(INT_RANGES) + tuple(FLOAT_FORMATS) + ("binary",)
_GRANULARITIES = ("tensor", "channel")


@dataclass(frozen=True)
class QuantSpec:
    """How to quantize: ``dtype`` (int8, int4, fp8_e4m3, fp8_e5m2, bf16, fp16, binary), ``granularity``
    (tensor or channel), ``symmetric`` (integers only; floats are always symmetric)."""

    dtype: str = "int8"
    granularity: str = "tensor"
    symmetric: bool = True

    def __post_init__(self):
        if self.dtype not in _DTYPES:
            raise ValueError(f"QuantSpec: dtype = {self.dtype!r}: must be one of "
                             f"{', '.join(_DTYPES)}")
        if self.granularity not in _GRANULARITIES:
            raise ValueError(f"QuantSpec: granularity = {self.granularity!r}: must be tensor or "
                             f"channel")
        if not isinstance(self.symmetric, bool):
            raise ValueError(f"QuantSpec: symmetric = {self.symmetric!r}: must be true or false")
        if not self.symmetric and self.dtype not in INT_RANGES:
            raise ValueError(f"QuantSpec: symmetric = False: only the integer types have a zero "
                             f"point; {self.dtype} is symmetric")


@dataclass(frozen=True)
class Quantized:
    """Quantized values (int64 for the integer types, float32 holding the format's values for
    the float ones), the ``scale`` and ``zero_point`` (scalars, or arrays broadcast along the
    quantized tensor), and the spec."""

    values: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray
    spec: QuantSpec


def _amax(x: np.ndarray, spec: QuantSpec, axis: int, fn) -> np.ndarray:
    if spec.granularity == "tensor":
        return np.asarray(fn(x))
    other = tuple(i for i in range(x.ndim) if i != axis % x.ndim)
    return fn(x, axis=other, keepdims=True)


def quantize(x, spec: QuantSpec = QuantSpec(), axis: int = -1) -> Quantized:
    """``x`` quantized by ``spec`` (module docstring); per-channel scales run along ``axis``
    (default the last: a K x N weight's output channels)."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0 or not np.isfinite(x).all():
        raise ValueError("quantize: x must be a non-empty array of finite values")
    if spec.dtype in INT_RANGES:
        qmin, qmax = INT_RANGES[spec.dtype]
        if spec.symmetric:
            amax = _amax(np.abs(x), spec, axis, np.max)
            scale = np.where(amax > 0, amax / qmax, 1.0)
            zp = np.zeros_like(scale)
            q = np.clip(np.round(x / scale), -qmax, qmax)
        else:
            lo = np.minimum(_amax(x, spec, axis, np.min), 0.0)
            hi = np.maximum(_amax(x, spec, axis, np.max), 0.0)
            scale = np.where(hi > lo, (hi - lo) / (qmax - qmin), 1.0)
            zp = np.clip(np.round(qmin - lo / scale), qmin, qmax)
            q = np.clip(np.round(x / scale) + zp, qmin, qmax)
        return Quantized(q.astype(np.int64), scale, zp, spec)
    if spec.dtype == "binary":
        amean = _amax(np.abs(x), spec, axis, np.mean)
        scale = np.where(amean > 0, amean, 1.0)
        return Quantized(np.where(x >= 0, 1, -1).astype(np.int64), scale, np.zeros_like(scale),
                         spec)
    fmt = FLOAT_FORMATS[spec.dtype]
    if spec.dtype in ("bf16", "fp16"):
        scale = np.ones_like(_amax(np.abs(x), spec, axis, np.max))
    else:
        amax = _amax(np.abs(x), spec, axis, np.max)
        scale = np.where(amax > 0, amax / fmt.max, 1.0)
    return Quantized(to_float_format(x / scale, spec.dtype), scale, np.zeros_like(scale), spec)


def dequantize(q: Quantized) -> np.ndarray:
    """The real values ``q`` stands for: ``(values - zero_point) x scale`` (float64)."""
    return (q.values.astype(np.float64) - q.zero_point) * q.scale


def sqnr_db(x, x_hat) -> float:
    """Signal-to-quantization-noise ratio in dB (``inf`` when ``x_hat == x``)."""
    x = np.asarray(x, np.float64)
    err = float(np.sum((x - np.asarray(x_hat, np.float64)) ** 2))
    sig = float(np.sum(x ** 2))
    return float("inf") if err == 0 else float(10.0 * np.log10(sig / err))


def quantized_gemm(a: Quantized, w: Quantized, cfg) -> np.ndarray:
    """``dequantize(a) @ dequantize(w)`` computed the way an accelerator does: the quantized
    values on the register-level array (``cfg``: a :class:`hw.systolic.config.ArrayConfig` of
    the operands' precision), then one rescale by ``scale_a x scale_w``. Both operands must be
    symmetric with a per-tensor activation scale (a per-channel weight scale runs along N)."""
    from hw.systolic.regmodel import run_gemm
    for name, q in (("a", a), ("w", w)):
        if np.any(q.zero_point != 0):
            raise ValueError(f"quantized_gemm: operand {name} is asymmetric: the array takes "
                             f"symmetric values (fold the zero point into a bias instead)")
    if a.spec.dtype != w.spec.dtype or cfg.precision.value != a.spec.dtype:
        raise ValueError(f"quantized_gemm: operands {a.spec.dtype} and {w.spec.dtype} on a "
                         f"{cfg.precision.value} array: all three must match")
    if np.ndim(a.scale) and np.size(a.scale) != 1:
        raise ValueError("quantized_gemm: the activation scale must be per tensor")
    out = run_gemm(cfg, a.values, w.values).output.astype(np.float64)
    return out * float(np.asarray(a.scale).ravel()[0]) * np.asarray(w.scale).reshape(1, -1)


def ptq_report(weights, spec: QuantSpec = QuantSpec(), *, tokens: int = 32, seed: int = 0,
               rows: int = 16, cols: int = 16, prune: tuple[int, int] | None = None) -> list:
    """Per layer (``weights``: ``[(name, K x N array)]``): a seeded ``tokens x K`` standard
    normal input, the fp64 GEMM of the original weights, and the same GEMM with the weights
    N:M-pruned (``prune=(n, m)``) and quantized by ``spec`` and the input quantized per tensor,
    run on a ``rows x cols`` WS array of that precision. Returns dicts: layer, shape, the
    output's SQNR (dB) against the original GEMM, the compressed weights' SQNR against the
    original weights, and the kept weight density."""
    from hw.systolic.config import ArrayConfig
    if prune is not None and spec.dtype == "binary":
        raise ValueError("ptq_report: prune with dtype binary: binary weights are +1 or -1, so "
                         "a pruned zero has no value; prune or binarize, not both")
    rng = np.random.default_rng(seed)
    cfg = ArrayConfig(rows=rows, cols=cols, dataflow="ws", precision=spec.dtype)
    a_spec = QuantSpec(spec.dtype, "tensor", True)
    w_spec = QuantSpec(spec.dtype, spec.granularity, True)
    out = []
    for name, w0 in weights:
        w0 = np.asarray(w0, np.float64)
        if w0.ndim != 2:
            raise ValueError(f"ptq_report: weight {name!r} has shape {w0.shape}: must be K x N")
        w, density = w0, 1.0
        if prune is not None:
            w, mask = prune_n_m(w0, *prune, axis=0)
            density = float(mask.mean())
        x = rng.standard_normal((tokens, w0.shape[0]))
        qw = quantize(w, w_spec, axis=-1)
        got = quantized_gemm(quantize(x, a_spec), qw, cfg)
        out.append({"layer": name, "shape": list(w0.shape), "sqnr_db": sqnr_db(x @ w0, got),
                    "weight_sqnr_db": sqnr_db(w0, dequantize(qw)), "density": density})
    return out
