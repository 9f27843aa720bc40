"""The kernels of one LLM inference step on one tensor-parallel rank (issue 25).

A step runs a batch of ``batch`` sequences, each adding ``new_tokens`` tokens to ``context``
tokens already in its KV cache (:class:`StepShape`): a prefill is ``context = 0, new_tokens =
prompt``; a decode step at KV length ``t`` is ``context = t, new_tokens = 1``; a chunk of a
chunked prefill has both. With ``T = batch * new_tokens`` tokens, ``keys = context +
new_tokens``, ``d`` = d_model, ``h`` / ``g`` = query / KV heads, ``dh`` = head_dim, ``f`` = ffn
and ``p`` = the tensor-parallel degree, one layer is (:func:`layer_ops`; Megatron-style TP:
heads and FFN columns split, two all-reduces per layer, Shoeybi et al. 2019 §3)::

    name              kernel                                                  notes
    layernorm_attn    Norm(rows=T, cols=d)                                    rmsnorm_attn for RMSNorm
    qkv_proj          Gemm(m=T, n=(h+2g)dh/p, k=d)                            column-parallel
    rotary            Eltwise rotary, T(h+g)dh/p elements                     rotary models only
    q_mul_k           Gemm(batch=b g/p, m=new h/g, n=keys, k=dh)              K^T from the cache
    softmax           Softmax(rows=b h/p new, cols=keys)
    a_mul_v           Gemm(batch=b g/p, m=new h/g, n=dh, k=keys)              V from the cache
    out_proj          Gemm(m=T, n=d, k=h dh/p)                                row-parallel
    allreduce_attn    all-reduce of T d elements over the p ranks             p > 1
    residual_attn     Binary add, T d elements
    layernorm_ffn     Norm(rows=T, cols=d)
    ffn1              Gemm(m=T, n=f/p, k=d); SwiGLU: n=2f/p (gate and up)     column-parallel
    gelu | relu       Activation, T f/p elements; SwiGLU: Eltwise swiglu      the FFN's
    ffn2              Gemm(m=T, n=d, k=f/p)                                   row-parallel
    allreduce_ffn     all-reduce of T d elements                              p > 1
    residual_ffn      Binary add, T d elements

The names are LLMCompass's (Zhang et al., ISCA 2024) where it has the op. Grouped-query
attention packs a KV head's ``h/g`` query heads into the rows of one GEMM (``m = new x h/g``),
so the cache is read once per KV head, as FlashDecoding and vLLM's kernels do. Attention is
computed as GEMMs and a softmax over the whole ``new x keys`` score matrix, causal mask included
(PyTorch's eager attention, which LLMCompass models and measures; a fused FlashAttention kernel
is not modelled yet). When ``context > 0`` both attention GEMMs read their second operand from
the KV cache in memory (``Gemm.kv_cache``): ``2 x b x g/p x keys x dh`` elements a step and
layer, each exactly once. A model with more ranks than KV heads keeps one KV head per rank
(``p`` a multiple of ``g``: each head is replicated ``p/g`` times, as vLLM does).

Mixture of experts (``experts > 1``): a ``router`` GEMM ``(T x d) @ (d x experts)`` and its
``router_softmax``, then the experts' FFNs as batched GEMMs over the experts on this rank
(``experts / ep``, each split ``p/ep`` ways by columns): the ``T x top_k / ep`` token-expert
pairs routed to this rank's experts are spread evenly over as many of them as they can reach
(``min(experts / ep, pairs)``: one decode token runs only ``top_k`` experts), each running
``ceil(capacity x pairs / experts)`` tokens, the capacity factor scaling it (1.0: none dropped,
none padded). Expert parallelism shares the tensor-parallel group (``ep`` divides
``p``): every rank holds all the tokens after the attention all-reduce, runs its experts on
them, and the FFN all-reduce sums the experts' outputs, so no all-to-all is needed (vLLM's
TP + EP layout).

:func:`head_ops` adds the per-step kernels outside the layers: the ``embedding`` gather of the
``T`` tokens (first stage), the ``final_norm`` (all tokens), the ``lm_head`` (vocab-parallel,
``ceil(V/p)`` columns, only the last token of each sequence: ``m = batch``), the
``allgather_logits`` and ``sample`` (softmax over the vocabulary per sequence).

A kernel over the IR's per-op limit (:data:`compiler.ir.MAX_OP_MACS`: a 128k-token prompt's
attention) is split along its queries into equal kernels: ``repeat`` counts them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from compiler.frontends.llm import DecoderConfig
from compiler.ir import MAX_OP_MACS, Activation, Binary, Eltwise, Gemm, Move, Norm, Op, Softmax

__all__ = ["StepShape", "StepOp", "LlmStepError", "layer_ops", "head_ops", "kv_cache_bytes",
           "check_layout", "check_int", "check_bits", "check_context", "context_warning",
           "attention_ops",
           "ATTENTION", "weight_bytes"]


class LlmStepError(ValueError):
    """A step that the model or the parallel layout cannot run; the message names the value."""


def check_int(key: str, value: object, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (
            hi is not None and value > hi):
        allowed = f"an integer >= {lo}" if hi is None else f"an integer in {lo}..{hi:,}"
        raise LlmStepError(f"{key} = {value!r}: must be {allowed}")


@dataclass(frozen=True)
class StepShape:
    """``batch`` sequences, each adding ``new_tokens`` to ``context`` cached tokens."""

    batch: int
    new_tokens: int
    context: int = 0

    def __post_init__(self) -> None:
        check_int("batch", self.batch, 1, 1 << 20)
        check_int("new_tokens", self.new_tokens, 1, 1 << 24)
        check_int("context", self.context, 0, 1 << 24)

    @property
    def tokens(self) -> int:
        """Tokens the step computes: ``batch x new_tokens``."""
        return self.batch * self.new_tokens

    @property
    def keys(self) -> int:
        """Keys each new token attends to: the cached context and the new tokens."""
        return self.context + self.new_tokens

    @property
    def phase(self) -> str:
        if self.context == 0:
            return "prefill"
        return "decode" if self.new_tokens == 1 else "chunk"


@dataclass(frozen=True)
class StepOp:
    """One kernel of a step: an IR op run ``repeat`` times, or a collective over the
    tensor-parallel group, or over the first ``group`` ranks (``collective``: ``allreduce``,
    ``allgather`` or ``alltoall``, ``nbytes`` in nccl-tests' convention: the per-rank buffer
    for all-reduce, the gathered one for all-gather, what a rank sends for all-to-all)."""

    name: str
    op: Op | None = None
    repeat: int = 1
    collective: str | None = None
    nbytes: int = 0
    group: int = 0              # ranks the collective spans (0: the tensor-parallel group)

    @property
    def flops(self) -> int:
        """Matrix FLOPs (2 per MAC) of every repeat."""
        return 2 * self.op.macs * self.repeat if self.op is not None else 0


def check_layout(cfg: DecoderConfig, tp: int, ep: int = 1) -> None:
    """Refuse a tensor/expert-parallel degree the model cannot be split by."""
    check_int("tp", tp, 1, 4096)
    check_int("ep", ep, 1, 4096)
    if cfg.heads % tp:
        raise LlmStepError(f"tp = {tp}: must divide the {cfg.heads} query heads of {cfg.name}")
    if cfg.kv_heads % tp and tp % cfg.kv_heads:
        raise LlmStepError(f"tp = {tp}: must divide the {cfg.kv_heads} KV heads of {cfg.name} "
                           f"or be a multiple of them (each rank then keeps one KV head)")
    if ep > 1:
        if cfg.experts == 1:
            raise LlmStepError(f"ep = {ep}: {cfg.name} is dense (experts = 1); ep needs a "
                               f"mixture of experts")
        if cfg.experts % ep or (tp > 1 and tp % ep):
            raise LlmStepError(f"ep = {ep}: must divide experts = {cfg.experts} and, with "
                               f"tensor parallelism, tp = {tp} (experts spread over the "
                               f"tensor-parallel group; tp = 1 spreads them over ep ranks with "
                               f"data-parallel attention)")
        if tp == 1:
            return
    if cfg.ffn % (tp // ep):
        raise LlmStepError(f"tp = {tp}: tp / ep = {tp // ep} must divide ffn = {cfg.ffn} of "
                           f"{cfg.name} (FFN columns are split)")


def _kv_heads_per_rank(cfg: DecoderConfig, tp: int) -> int:
    return max(1, cfg.kv_heads // tp)


def kv_cache_bytes(cfg: DecoderConfig, tokens: int, tp: int = 1, dtype_bytes: float = 2,
                   layers: int | None = None) -> float:
    """KV-cache bytes of ``tokens`` cached tokens on one of ``tp`` ranks over ``layers``
    (default: all): ``2 x g/p x dh x bytes`` per token and layer."""
    layers = cfg.layers if layers is None else layers
    return 2 * _kv_heads_per_rank(cfg, tp) * cfg.head_dim * dtype_bytes * tokens * layers


def weight_bytes(cfg: DecoderConfig, tp: int = 1, dtype_bytes: float = 2,
                 weight_bits: int | None = None, layers: int | None = None,
                 embeddings: bool = True, ep: int = 1) -> float:
    """Weight bytes on one of ``tp`` ranks: ``layers`` layers (default all) with their
    projections and FFN at ``weight_bits`` (norms, biases and the router at ``dtype_bytes``),
    and the embeddings and LM head (kept at ``dtype_bytes``, as weight-only quantization
    leaves them) when ``embeddings``. With ``tp = 1`` and ``ep > 1`` a rank holds every
    weight but the experts, and ``experts / ep`` of those."""
    layers = cfg.layers if layers is None else layers
    attn, experts = cfg.attention_weights, cfg.experts * cfg.ffn_weights
    rest = cfg.layer_params() - attn - experts
    narrow = (_bits(weight_bits) or 8 * dtype_bytes) / 8
    split = ep if tp == 1 and ep > 1 else 1
    total = layers * (rest * dtype_bytes + (attn + experts / split) * narrow)
    if embeddings:
        total += (cfg.embedding_params + cfg.norm_params) * dtype_bytes
    return total / tp


#: How far beyond its ``max_seq_len`` a model's step may go (timed with a warning); further is
#: an error: a typo'd length would otherwise simulate for hours.
CONTEXT_SLACK = 4


def check_context(cfg: DecoderConfig, tokens: int, what: str = "context + new tokens") -> None:
    if tokens > CONTEXT_SLACK * cfg.max_seq_len:
        raise LlmStepError(f"{what} = {tokens:,}: at most {CONTEXT_SLACK} x {cfg.name}'s "
                           f"max_seq_len = {CONTEXT_SLACK * cfg.max_seq_len:,} tokens")


def context_warning(cfg: DecoderConfig, shape: StepShape) -> str | None:
    """A warning when the step's ``keys`` exceed the model's ``max_seq_len``: the model was
    not trained for it (learned positions end there), but its kernels' shapes are still what
    such a step would run, so they are timed as asked (LLMCompass times GPT-3 decode at
    3,072 cached tokens, beyond its 2,048)."""
    if shape.keys > cfg.max_seq_len:
        return (f"context {shape.context} + new tokens {shape.new_tokens} = {shape.keys} is "
                f"beyond {cfg.name}'s max_seq_len = {cfg.max_seq_len:,}; timed as asked")
    return None


def _query_chunks(new: int, macs: int) -> list[tuple[int, int]]:
    """``(queries, repeat)`` kernels covering ``new`` queries of an attention GEMM of ``macs``
    MACs, each within the IR's per-op limit: one kernel, or equal chunks and a shorter last."""
    pieces = -(-macs // MAX_OP_MACS)
    if pieces <= 1:
        return [(new, 1)]
    chunk = -(-new // pieces)
    full, rest = divmod(new, chunk)
    return [(chunk, full)] + ([(rest, 1)] if rest else [])


def check_bits(weight_bits: int | None, kv_bits: int | None) -> None:
    """Storage widths: weights 16, 8 or 4 bits; the KV cache 16 or 8 (None: 16)."""
    for key, v, allowed in (("weight_bits", weight_bits, (4, 8, 16)),
                            ("kv_bits", kv_bits, (8, 16))):
        if v is not None and (isinstance(v, bool) or v not in allowed):
            raise LlmStepError(f"{key} = {v!r}: must be one of {', '.join(map(str, allowed))}")


def _bits(v: int | None) -> int | None:
    return None if v in (None, 16) else v


def layer_ops(cfg: DecoderConfig, shape: StepShape, tp: int = 1, ep: int = 1, *,
              dtype_bytes: int = 2, capacity: float = 1.0, kv_block: int = 1,
              weight_bits: int | None = None, kv_bits: int | None = None,
              kv_in_l2: bool = False) -> list[StepOp]:
    """One decoder layer's kernels on one of ``tp`` ranks (module docstring). ``kv_block``:
    a paged cache's block size in tokens; attention over a cache (``context > 0``) reads whole
    blocks, ``keys`` rounded up to a multiple of it (vLLM's PagedAttention masks the rest).
    ``weight_bits`` (8, 4: weight-only quantization) and ``kv_bits`` (8: an fp8 cache) store
    the projections' and FFN's weights and the cache narrower (``Gemm.w_bits``), widened as
    they are loaded: fewer bytes, the same arithmetic. ``kv_in_l2``: the cache is held in the
    chip's L2 (``Gemm.w_in_l2``), not read from DRAM."""
    check_layout(cfg, tp, ep)
    check_context(cfg, shape.keys)
    check_int("kv_block", kv_block, 1, 1 << 16)
    check_bits(weight_bits, kv_bits)
    wb = _bits(weight_bits)
    if not (isinstance(capacity, (int, float)) and not isinstance(capacity, bool)
            and 0 < capacity <= 64):
        raise LlmStepError(f"capacity = {capacity!r}: must be a number in (0, 64] (the MoE "
                           f"capacity factor)")
    d, h, dh = cfg.d_model, cfg.heads, cfg.head_dim
    g = _kv_heads_per_rank(cfg, tp)
    hp = h // tp                       # query heads on this rank
    b, new, keys, T = shape.batch, shape.new_tokens, shape.keys, shape.tokens
    a2a = tp == 1 and ep > 1           # data-parallel attention, experts over ep ranks
    if a2a:
        if b % ep:
            raise LlmStepError(f"batch = {b}: must be a multiple of ep = {ep} (with tp = 1 "
                               f"each of the ep ranks runs the attention of batch / ep "
                               f"sequences)")
        b //= ep
        T = b * new
    cached = shape.context > 0
    if cached:
        keys = -(-keys // kv_block) * kv_block
    norm = cfg.norm
    ops: list[StepOp] = [
        StepOp(f"{norm}_attn", Norm(name=f"{norm}_attn", kind=norm, rows=T, cols=d)),
        StepOp("qkv_proj", Gemm(name="qkv_proj", m=T, n=(hp + 2 * g) * dh, k=d, w_bits=wb)),
    ]
    if cfg.positions == "rotary":
        ops.append(StepOp("rotary", Eltwise(name="rotary", op="rotary",
                                            elements=T * (hp + g) * dh)))
    ops += attention_ops(cfg, b, new, keys, tp, cached, kv_bits, kv_in_l2)
    ops.append(StepOp("out_proj", Gemm(name="out_proj", m=T, n=d, k=hp * dh, w_bits=wb)))
    if tp > 1:
        ops.append(StepOp("allreduce_attn", collective="allreduce", nbytes=T * d * dtype_bytes))
    ops += [StepOp("residual_attn", Binary(name="residual_attn", fn="add", elements=T * d)),
            StepOp(f"{norm}_ffn", Norm(name=f"{norm}_ffn", kind=norm, rows=T, cols=d))]
    ops += _ffn_ops(cfg, T, tp, ep, capacity, wb, shape.tokens, dtype_bytes if a2a else 0)
    if tp > 1:
        ops.append(StepOp("allreduce_ffn", collective="allreduce", nbytes=T * d * dtype_bytes))
    ops.append(StepOp("residual_ffn", Binary(name="residual_ffn", fn="add", elements=T * d)))
    return ops


#: The kernels of attention proper, whose shapes depend on each sequence's length.
ATTENTION = ("q_mul_k", "softmax", "a_mul_v")


def attention_ops(cfg: DecoderConfig, batch: int, new: int, keys: int, tp: int = 1,
                  cached: bool = False, kv_bits: int | None = None,
                  kv_in_l2: bool = False) -> list[StepOp]:
    """The :data:`ATTENTION` kernels of ``batch`` sequences each with ``new`` queries over
    ``keys`` keys on one of ``tp`` ranks (module docstring), split along the queries when over
    the IR's per-op limit. ``cached``: the keys and values are read from the KV cache, stored
    at ``kv_bits`` (8: fp8), and held in the L2 with ``kv_in_l2``."""
    kb = _bits(kv_bits) if cached else None
    in_l2 = bool(kv_in_l2 and cached)
    h, dh = cfg.heads, cfg.head_dim
    g = _kv_heads_per_rank(cfg, tp)
    hp = h // tp
    group = hp // g
    ops = []
    for q, n in _query_chunks(new, batch * hp * new * keys * dh):
        ops += [
            StepOp("q_mul_k", Gemm(name="q_mul_k", batch=batch * g, m=q * group, n=keys, k=dh,
                                   kv_cache=cached, w_bits=kb, w_in_l2=in_l2), repeat=n),
            StepOp("softmax", Softmax(name="softmax", rows=batch * hp * q, cols=keys),
                   repeat=n),
            StepOp("a_mul_v", Gemm(name="a_mul_v", batch=batch * g, m=q * group, n=dh, k=keys,
                                   kv_cache=cached, w_bits=kb, w_in_l2=in_l2), repeat=n),
        ]
    return ops


def _ffn_ops(cfg: DecoderConfig, T: int, tp: int, ep: int, capacity: float,
             wb: int | None, total: int, a2a_bytes: int) -> list[StepOp]:
    """The FFN of ``T`` tokens on this rank (``total`` in the step); ``a2a_bytes``: the element
    bytes of an all-to-all dispatch and combine (data-parallel attention), 0 for none."""
    d, f = cfg.d_model, cfg.ffn
    fp = f // max(1, tp // ep)         # FFN columns of one expert on this rank
    up = 2 * fp if cfg.ffn_kind == "swiglu" else fp
    ops: list[StepOp] = []
    if cfg.experts > 1:
        e = cfg.experts
        routed = -(-total * cfg.top_k // ep)      # token-expert pairs for this rank's experts
        experts = min(e // ep, routed)             # a few tokens reach only a few experts
        m = max(1, math.ceil(capacity * routed / experts))
        ops += [StepOp("router", Gemm(name="router", m=T, n=e, k=d)),
                StepOp("router_softmax", Softmax(name="router_softmax", rows=T, cols=e))]
        if a2a_bytes:                  # this rank's tokens go to their experts' ranks
            ops.append(StepOp("alltoall_dispatch", collective="alltoall", group=ep,
                              nbytes=T * cfg.top_k * d * a2a_bytes))
    else:
        experts, m = 1, T
    ops.append(StepOp("ffn1", Gemm(name="ffn1", batch=experts, m=m, n=up, k=d, w_bits=wb)))
    if cfg.ffn_kind == "swiglu":
        ops.append(StepOp("swiglu", Eltwise(name="swiglu", op="swiglu",
                                            elements=experts * m * fp, operands=2)))
    else:
        ops.append(StepOp(cfg.ffn_kind, Activation(name=cfg.ffn_kind, fn=cfg.ffn_kind,
                                                   elements=experts * m * fp)))
    ops.append(StepOp("ffn2", Gemm(name="ffn2", batch=experts, m=m, n=d, k=fp, w_bits=wb)))
    if a2a_bytes and cfg.experts > 1:   # and the experts' outputs come back
        ops.append(StepOp("alltoall_combine", collective="alltoall", group=ep,
                          nbytes=T * cfg.top_k * d * a2a_bytes))
    return ops


def head_ops(cfg: DecoderConfig, shape: StepShape, tp: int = 1, *,
             dtype_bytes: int = 2, ep: int = 1) -> list[StepOp]:
    """The step's kernels outside the layers (module docstring): embedding on the first
    pipeline stage; final norm, LM head, logits gather and sampling on the last. With
    ``tp = 1`` and ``ep > 1`` (data-parallel attention) a rank runs ``batch / ep`` sequences."""
    check_layout(cfg, tp, ep)
    b, T, d = shape.batch, shape.tokens, cfg.d_model
    if tp == 1 and ep > 1:
        b //= ep
        T = b * shape.new_tokens
    vocab = -(-cfg.vocab // tp)
    ops = [StepOp("embedding", Move(name="embedding", kind="gather", elements=T * d)),
           StepOp("final_norm", Norm(name="final_norm", kind=cfg.norm, rows=T, cols=d)),
           StepOp("lm_head", Gemm(name="lm_head", m=b, n=vocab, k=d))]
    if tp > 1:
        ops.append(StepOp("allgather_logits", collective="allgather",
                          nbytes=b * vocab * tp * dtype_bytes))
    ops.append(StepOp("sample", Softmax(name="sample", rows=b, cols=cfg.vocab)))
    return ops
