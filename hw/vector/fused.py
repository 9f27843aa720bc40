"""Fused forms of vector work and their unfused references: what fusion must compute.

Each fused form here computes, tile by tile, what the compiler's fusion pass schedules (issue 23):
attention in FlashAttention-2 order with an online softmax, a GEMM epilogue applied per output
tile, a residual add fused with the layer norm that follows it, and pooling computed per tile of
the producing convolution's output rows. Each has an unfused reference; the tests hold the pairs
equal (bitwise where the order of operations is the same, within float32 rounding where the
fused form reorders sums). Conventions as :mod:`hw.vector.functional`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hw.vector.functional import (
    ACTIVATIONS, Requant, _affine, _axis, _fail, _flag, _floats, _ieee, _int, _ints, _nhwc,
    _number, _pool_args, exp, pool2d, pool_input_rows, requantize, softmax,
)

__all__ = ["attention", "flash_attention", "FlashStep", "FlashStats", "gemm_epilogue",
           "tiled_epilogue", "add_layernorm", "conv_pool_tiled"]


# --- attention: reference and FlashAttention-2 order ---------------------------------------------

def _attention_args(func: str, q, k, v, scale, causal):
    q, k, v = _floats(func, "q", q), _floats(func, "k", k), _floats(func, "v", v)
    for name, arr in (("q", q), ("k", k), ("v", v)):
        if arr.ndim < 2 or 0 in arr.shape:
            _fail(func, name, arr, "must be a non-empty array of shape (..., length, features)")
    if k.shape[:-2] != q.shape[:-2] or k.shape[-1] != q.shape[-1]:
        _fail(func, "k", k, f"must have shape (..., Nkv, {q.shape[-1]}) with q's leading "
              f"dimensions {q.shape[:-2]}")
    if v.shape[:-1] != k.shape[:-1]:
        _fail(func, "v", v, f"must have shape {k.shape[:-1] + ('dv',)} (k's, but for the features)")
    scale = np.float32(1 / math.sqrt(q.shape[-1])) if scale is None else _number(func, "scale", scale)
    nq, nkv = q.shape[-2], k.shape[-2]
    if _flag(func, "causal", causal) and nq > nkv:
        _fail(func, "causal", causal, f"needs Nq <= Nkv (here {nq} > {nkv}): query i sees keys "
              f"j <= i + Nkv - Nq, so the first rows would see none")
    return q, k, v, scale, nkv - nq


def _visible(q0: int, q1: int, k0: int, k1: int, offset: int) -> np.ndarray:
    """Causal mask of query rows [q0, q1) against keys [k0, k1): key j <= query i + offset."""
    return np.arange(k0, k1)[None, :] <= np.arange(q0, q1)[:, None] + offset


@_ieee
def attention(q, k, v, scale=None, causal: bool = False) -> np.ndarray:
    """softmax(q k^T * scale) v, the unfused reference; q (..., Nq, d), k (..., Nkv, d),
    v (..., Nkv, dv); ``scale`` defaults to 1/sqrt(d).

    ``causal`` masks key j > query i + (Nkv - Nq): the decode convention, where the last query
    sees every key (a KV cache of Nkv - Nq earlier tokens); it needs Nq <= Nkv.
    """
    q, k, v, scale, offset = _attention_args("attention", q, k, v, scale, causal)
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if causal:
        scores = np.where(_visible(0, q.shape[-2], 0, k.shape[-2], offset), scores, -np.inf)
    return np.matmul(softmax(scores), v)


@dataclass(frozen=True)
class FlashStep:
    """The work of one (query block, key/value block) step, summed over the leading dims."""

    q_block: int
    kv_block: int
    score_elements: int     #: S = Q_i K_j^T elements computed (masked ones included)
    exp_calls: int          #: exp(S - m) per score, plus exp(m_old - m_new) per row after step 1
    rescale_multiplies: int  #: rows x (dv + 1): O and l rescaled by exp(m_old - m_new)


@dataclass(frozen=True)
class FlashStats:
    """What :func:`flash_attention` computed, step by step, and the blocks it skipped."""

    steps: tuple[FlashStep, ...]
    skipped_blocks: int     #: (query block, key/value block) pairs fully masked under causal

    @property
    def score_elements(self) -> int:
        return sum(s.score_elements for s in self.steps)

    @property
    def exp_calls(self) -> int:
        return sum(s.exp_calls for s in self.steps)

    @property
    def rescale_multiplies(self) -> int:
        return sum(s.rescale_multiplies for s in self.steps)


@_ieee
def flash_attention(q, k, v, block_q: int, block_kv: int, scale=None, causal: bool = False,
                    return_stats: bool = False):
    """:func:`attention` computed as FlashAttention-2 does (Dao 2023, arXiv 2307.08691, Alg. 1).

    Outer loop over query blocks of ``block_q`` rows, inner loop over key/value blocks of
    ``block_kv`` rows (the last blocks may be shorter). Per step: S = Q_i K_j^T * scale,
    m_new = max(m, rowmax S), P = exp(S - m_new), l = exp(m - m_new) l + rowsum P,
    O = exp(m - m_new) O + P V_j (O unscaled); after the last step O / l, one division per row
    element. The first step of a query block has nothing to rescale and skips the correction.
    Under ``causal`` a block whose keys all follow every query of the query block is skipped; the
    first key/value block is never skipped (key 0 is visible to every query as Nq <= Nkv), so
    m is finite from step 1 on. Equals :func:`attention` within float32 rounding, not bitwise
    (the row sums are accumulated in another order).

    Returns the output (..., Nq, dv), or ``(output, FlashStats)`` with ``return_stats``; the
    counts cover all leading (batch, head) instances.
    """
    func = "flash_attention"
    q, k, v, scale, offset = _attention_args(func, q, k, v, scale, causal)
    block_q, block_kv = _int(func, "block_q", block_q), _int(func, "block_kv", block_kv)
    return_stats = _flag(func, "return_stats", return_stats)
    nq, nkv, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    instances = math.prod(q.shape[:-2])
    out = np.empty(q.shape[:-1] + (dv,), np.float32)
    steps, skipped = [], 0
    for q0 in range(0, nq, block_q):
        q1 = min(q0 + block_q, nq)
        rows = q1 - q0
        qi = q[..., q0:q1, :]
        m = l = o = None
        for k0 in range(0, nkv, block_kv):
            k1 = min(k0 + block_kv, nkv)
            if causal and k0 > q1 - 1 + offset:
                skipped += 1
                continue
            s = np.matmul(qi, np.swapaxes(k[..., k0:k1, :], -1, -2)) * scale
            if causal:
                s = np.where(_visible(q0, q1, k0, k1, offset), s, -np.inf)
            row_max = np.max(s, axis=-1, keepdims=True)
            m_new = row_max if m is None else np.maximum(m, row_max)
            p = exp(s - m_new)
            pv = np.matmul(p, v[..., k0:k1, :])
            exps, rescales = rows * (k1 - k0), 0
            if m is None:
                l, o = np.sum(p, axis=-1, keepdims=True), pv
            else:
                alpha = exp(m - m_new)
                l = alpha * l + np.sum(p, axis=-1, keepdims=True)
                o = alpha * o + pv
                exps, rescales = exps + rows, rows * (dv + 1)
            m = m_new
            steps.append(FlashStep(q0 // block_q, k0 // block_kv, instances * rows * (k1 - k0),
                                   instances * exps, instances * rescales))
        out[..., q0:q1, :] = o / l
    return (out, FlashStats(tuple(steps), skipped)) if return_stats else out


# --- GEMM/conv epilogue, whole and per output tile -----------------------------------------------

def _epilogue_args(func: str, acc, bias, activation, residual, requant):
    """Checked operands: (acc, bias, residual) as float32 or, with ``requant``, int64."""
    as_array = _floats if requant is None else _ints
    acc = as_array(func, "acc", acc)
    if acc.ndim < 2 or 0 in acc.shape:
        _fail(func, "acc", acc, "must be a non-empty array of shape (..., M, N)")
    if bias is not None:
        bias = as_array(func, "bias", bias)
        if bias.shape not in ((), (acc.shape[-1],)):
            _fail(func, "bias", bias, f"must be a scalar or one per output column (shape ({acc.shape[-1]},))")
    if residual is not None:
        residual = as_array(func, "residual", residual)
        if residual.shape != acc.shape:
            _fail(func, "residual", residual, f"must have acc's shape {acc.shape}")
    if requant is None:
        if activation is not None and activation not in ACTIVATIONS:
            _fail(func, "activation", activation, f"must be None or one of {', '.join(ACTIVATIONS)}")
    else:
        if not isinstance(requant, Requant):
            _fail(func, "requant", requant, "must be None or a Requant(scale, zero_point, dtype)")
        if activation not in (None, "relu"):
            _fail(func, "activation", activation, "must be None or 'relu' with requant (it is fused "
                  "into the requantisation)")
    return acc, bias, residual


@_ieee
def gemm_epilogue(acc, bias=None, activation: str | None = None, residual=None,
                  requant: Requant | None = None) -> np.ndarray:
    """What the vector unit applies to a GEMM/conv output tile before it is stored.

    Without ``requant`` (float path, float32): ``activation((acc + bias) + residual)``, ``bias``
    one value per output column (last axis) or a scalar, ``residual`` of acc's shape,
    ``activation`` a name in :data:`ACTIVATIONS`. With ``requant`` (integer path): ``acc``,
    ``bias`` and ``residual`` are integers in accumulator units, summed in the int32 accumulator
    (wrapping, like the array's, :func:`hw.numerics.mac`), then :func:`requantize` with
    ``relu=(activation == "relu")``. Every step is element-wise, so tiling cannot change a bit.
    """
    acc, bias, residual = _epilogue_args("gemm_epilogue", acc, bias, activation, residual, requant)
    y = acc
    if bias is not None:
        y = y + bias
    if residual is not None:
        y = y + residual
    if requant is not None:
        return requantize(y.astype(np.int32), requant.scale, requant.zero_point, requant.dtype,
                          relu=activation == "relu")
    return y if activation is None else ACTIVATIONS[activation](y)


def tiled_epilogue(acc, tile_m: int, tile_n: int, bias=None, activation: str | None = None,
                   residual=None, requant: Requant | None = None) -> np.ndarray:
    """:func:`gemm_epilogue` applied output tile by output tile (``tile_m`` x ``tile_n`` of the
    last two axes; edge tiles may be smaller), as a fused epilogue runs; equals the whole-tensor
    form bit for bit."""
    func = "tiled_epilogue"
    acc, bias, residual = _epilogue_args(func, acc, bias, activation, residual, requant)
    tile_m, tile_n = _int(func, "tile_m", tile_m), _int(func, "tile_n", tile_n)
    if requant is not None:
        requantize(np.zeros(acc.shape[-1:], np.int32), requant.scale, requant.zero_point,
                   requant.dtype)  # a bad Requant fails here, naming requantize's argument
    m, n = acc.shape[-2:]
    out = None
    for m0 in range(0, m, tile_m):
        for n0 in range(0, n, tile_n):
            rows, cols = slice(m0, m0 + tile_m), slice(n0, n0 + tile_n)
            tile = gemm_epilogue(
                acc[..., rows, cols],
                bias=bias if bias is None or bias.ndim == 0 else bias[cols],
                activation=activation,
                residual=None if residual is None else residual[..., rows, cols],
                requant=None if requant is None else requant.columns(cols))
            if out is None:
                out = np.empty(acc.shape, tile.dtype)
            out[..., rows, cols] = tile
    return out


# --- residual add + layer norm, fused ------------------------------------------------------------

@_ieee
def add_layernorm(x, residual, gamma=None, beta=None, eps: float = 1e-5, chunk: int = 32,
                  return_sum: bool = False):
    """``layernorm(x + residual)`` over the last axis, fused: one pass adds and gathers statistics.

    The row is read in chunks of ``chunk`` columns (the vector unit's lanes); each chunk's sum
    s = x + residual is kept on chip, and its float32 count, mean and M2 (sum of squared
    deviations from the chunk mean) are merged into the row's running ones with Welford's
    update as Chan, Golub & LeVeque (1979) give it for chunks. Unlike sum / sum-of-squares, this
    does not cancel catastrophically when the mean is large against the spread. The normalisation
    then reads s back from the chip. Agrees with ``layernorm(x + residual)`` within float32
    rounding: ``rtol=1e-5, atol=1e-5`` in the tests, for row means up to 10 standard deviations
    (the difference grows with |mean| / std, as the rounding of the float32 mean itself does).

    Returns the normalised rows, or ``(normalised, s)`` with ``return_sum`` (a pre-norm block
    needs s as its next residual).
    """
    func = "add_layernorm"
    x, residual = _floats(func, "x", x), _floats(func, "residual", residual)
    if residual.shape != x.shape:
        _fail(func, "residual", residual, f"must have x's shape {x.shape}")
    axis = _axis(func, -1, x.shape)
    eps = _number(func, "eps", eps)
    chunk = _int(func, "chunk", chunk)
    return_sum = _flag(func, "return_sum", return_sum)
    n = x.shape[-1]
    total = np.empty_like(x)
    count, mean, m2 = 0, None, None
    for c0 in range(0, n, chunk):
        c1 = min(c0 + chunk, n)
        s = x[..., c0:c1] + residual[..., c0:c1]
        total[..., c0:c1] = s
        size = c1 - c0
        chunk_mean = np.mean(s, axis=-1, keepdims=True)
        dev = s - chunk_mean
        chunk_m2 = np.sum(dev * dev, axis=-1, keepdims=True)
        if mean is None:
            mean, m2 = chunk_mean, chunk_m2
        else:
            delta = chunk_mean - mean
            merged = count + size
            mean = mean + delta * np.float32(size / merged)
            m2 = m2 + chunk_m2 + delta * delta * np.float32(count * size / merged)
        count += size
    y = (total - mean) / np.sqrt(m2 / np.float32(n) + eps)
    y = _affine(func, y, gamma, beta, axis)
    return (y, total) if return_sum else y


# --- pooling fused into the producing conv's store -----------------------------------------------

def conv_pool_tiled(y, kind: str, kernel, stride, pads, tile_rows: int) -> np.ndarray:
    """:func:`pool2d` of a conv output ``y`` (NHWC), one tile of ``tile_rows`` pooled rows at a
    time, each reading only its rows plus the halo (:func:`pool_input_rows`): what pooling fused
    into the producing conv's store computes. Equals :func:`pool2d` bit for bit."""
    func = "conv_pool_tiled"
    y = _nhwc(func, y)
    kh, _, sh, _, (pt, pl, pb, pr) = _pool_args(func, kind, kernel, stride, pads)
    tile_rows = _int(func, "tile_rows", tile_rows)
    height = y.shape[1]
    out_rows = (height + pt + pb - kh) // sh + 1
    if out_rows < 1:
        _fail(func, "kernel", kernel, f"must fit the padded input height {height + pt + pb}")
    tiles = []
    for o0 in range(0, out_rows, tile_rows):
        o1 = min(o0 + tile_rows, out_rows)
        r0, r1, top, bottom = pool_input_rows(o0, o1, kh, sh, pt, height)
        tiles.append(pool2d(y[:, r0:r1], kind, kernel, stride, (top, pl, bottom, pr)))
    return np.concatenate(tiles, axis=1)
