"""One LLM inference step's kernels (compiler.frontends.llm_step) against closed forms: FLOPs per
token (2 x the weights a token multiplies, plus attention), KV-cache bytes read once per decode
step, tensor-parallel shares summing to the whole, GQA packing, MoE routing, and the split of a
long prompt's attention under the IR's per-op limit."""

from __future__ import annotations

import pytest

from compiler.frontends.llm import LLM_PRESETS, DecoderConfig, get_llm
from compiler.frontends.llm_step import (
    LlmStepError, StepShape, context_warning, head_ops, kv_cache_bytes, layer_ops,
)
from compiler.ir import MAX_OP_MACS, Gemm, GemmShape

TINY = DecoderConfig(name="tiny", layers=2, d_model=256, heads=4, kv_heads=2, ffn=688,
                     vocab=1000, max_seq_len=512, ffn_kind="swiglu", norm="rmsnorm",
                     positions="rotary", tied_embeddings=False, biases=False)

LLMCOMPASS_NAMES = ["qkv_proj", "q_mul_k", "a_mul_v", "out_proj", "ffn1", "ffn2", "softmax",
                    "layernorm_attn", "layernorm_ffn", "gelu", "allreduce_attn",
                    "allreduce_ffn"]


def _step_flops(cfg, shape, tp=1, ep=1):
    """Every rank's matrix FLOPs of one step: layers x the layer's, plus the LM head."""
    layer = sum(o.flops for o in layer_ops(cfg, shape, tp, ep))
    head = sum(o.flops for o in head_ops(cfg, shape, tp))
    return tp * (cfg.layers * layer + head)


@pytest.mark.parametrize("name", sorted(LLM_PRESETS))
def test_decode_step_flops_equal_the_closed_form(name):
    """A decode token at KV length t costs 2 x the weights it multiplies plus 4 x L x keys x
    h x dh (DecoderConfig.decode_flops, checked against the published shapes there); the
    keys include the new token. Tensor parallelism splits the same FLOPs over the ranks (the
    vocabulary is padded to a multiple of tp)."""
    cfg = get_llm(name)
    t = 1000
    assert _step_flops(cfg, StepShape(1, 1, t)) == cfg.decode_flops(t + 1)
    tp = 8 if cfg.heads % 8 == 0 else 4
    padded = 2 * cfg.d_model * (-(-cfg.vocab // tp) * tp - cfg.vocab)
    # a MoE router is replicated: every rank routes every token
    router = 2 * cfg.layers * cfg.d_model * cfg.experts if cfg.experts > 1 else 0
    assert _step_flops(cfg, StepShape(1, 1, t), tp) == (cfg.decode_flops(t + 1) + padded
                                                        + (tp - 1) * router)


def test_dense_decode_flops_are_twice_the_parameters_plus_attention():
    """The issue's closed form for a dense decoder: 2 x params per token, plus attention's
    2 x layers x context x d_model MACs, less what a token does not multiply (the input
    embedding, norms; Llama has no biases)."""
    cfg = get_llm("llama2-7b")
    t = 4000
    norms = (2 * cfg.layers + 1) * cfg.d_model
    matmul_params = cfg.params - cfg.vocab * cfg.d_model - norms
    assert _step_flops(cfg, StepShape(1, 1, t - 1)) == (
        2 * matmul_params + 2 * 2 * cfg.layers * t * cfg.d_model)


def test_prefill_flops_equal_the_closed_form():
    """Prefill of b prompts of s tokens: 2 x b x s x (layer weights) per layer, attention's
    two full s x s products (eager attention computes the masked half too), and the LM head for
    the last token of each prompt only."""
    cfg = get_llm("gpt3-175b")
    b, s = 8, 2048
    d, f, L = cfg.d_model, cfg.ffn, cfg.layers
    per_layer = 2 * b * s * (4 * d * d + 2 * d * f) + 2 * 2 * b * s * s * d
    assert _step_flops(cfg, StepShape(b, s), tp=4) == L * per_layer + 2 * b * d * cfg.vocab + (
        2 * b * d * (-(-cfg.vocab // 4) * 4 - cfg.vocab))


def test_gpt3_tp4_prefill_has_llmcompass_kernels_with_their_shapes():
    """LLMCompass's GPT-3 layer (batch 8, prompt 2048, TP 4): fused QKV 16384 x 9216 x 12288,
    192 heads of 2048 x 2048 x 128 per rank, FFN 16384 x 12288 x 12288, and an all-reduce of
    the 16384 x 12288 fp16 activations after each row-parallel GEMM."""
    ops = {o.name: o for o in layer_ops(get_llm("gpt3-175b"), StepShape(8, 2048), tp=4)}
    assert [n for n in LLMCOMPASS_NAMES if n not in ops] == []
    assert ops["qkv_proj"].op.gemm_shape() == GemmShape(1, 16384, 9216, 12288)
    q, a = ops["q_mul_k"].op, ops["a_mul_v"].op
    assert (q.batch, q.m, q.n, q.k, q.kv_cache) == (192, 2048, 2048, 128, False)
    assert (a.batch, a.m, a.n, a.k) == (192, 2048, 128, 2048)
    assert ops["ffn1"].op.gemm_shape() == GemmShape(1, 16384, 12288, 12288)
    assert ops["ffn2"].op.gemm_shape() == GemmShape(1, 16384, 12288, 12288)
    assert ops["allreduce_attn"].nbytes == ops["allreduce_ffn"].nbytes == 16384 * 12288 * 2
    assert ops["softmax"].op.rows == 192 * 2048 and ops["softmax"].op.cols == 2048


@pytest.mark.parametrize("name,tp", [("gpt3-175b", 4), ("llama2-70b", 8), ("llama2-70b", 16),
                                     ("llama3-8b", 1)])
def test_decode_reads_the_kv_cache_once(name, tp):
    """The decode attention GEMMs' cache operands are exactly the closed form
    2 x g/p x keys x dh x bytes per sequence and layer (GQA: a KV head's query heads share one
    read; more ranks than KV heads keep one head each)."""
    cfg = get_llm(name)
    b, t = 8, 3000
    ops = layer_ops(cfg, StepShape(b, 1, t), tp)
    cache = [o.op for o in ops if isinstance(o.op, Gemm) and o.op.kv_cache]
    assert [o.name for o in cache] == ["q_mul_k", "a_mul_v"]
    read = sum(o.weight_elements for o in cache) * 2
    g = max(1, cfg.kv_heads // tp)
    assert read == 2 * b * g * (t + 1) * cfg.head_dim * 2 == kv_cache_bytes(cfg, b * (t + 1), tp,
                                                                               layers=1)
    q = cache[0]
    assert q.m == cfg.heads // tp // g            # a KV head's query heads in one GEMM's rows


def test_paged_cache_reads_whole_blocks():
    ops = layer_ops(TINY, StepShape(2, 1, 100), kv_block=16)
    q = next(o.op for o in ops if o.name == "q_mul_k")
    assert q.n == 112                             # 101 keys in 7 blocks of 16
    prefill = next(o.op for o in layer_ops(TINY, StepShape(2, 100), kv_block=16)
                   if o.name == "q_mul_k")
    assert prefill.n == 100 and not prefill.kv_cache


def test_swiglu_rotary_rmsnorm_kernels():
    names = [o.name for o in layer_ops(TINY, StepShape(1, 8))]
    assert names == ["rmsnorm_attn", "qkv_proj", "rotary", "q_mul_k", "softmax", "a_mul_v",
                     "out_proj", "residual_attn", "rmsnorm_ffn", "ffn1", "swiglu", "ffn2",
                     "residual_ffn"]
    ops = {o.name: o.op for o in layer_ops(TINY, StepShape(1, 8))}
    assert ops["ffn1"].n == 2 * 688 and ops["ffn2"].k == 688
    assert ops["swiglu"].operands == 2 and ops["swiglu"].elements == 8 * 688
    assert ops["rotary"].elements == 8 * (4 + 2) * 64     # Q and K heads, not V


def test_moe_routes_top_k_tokens_per_expert_and_ep_shares_the_experts():
    cfg = get_llm("mixtral-8x7b")
    T = 4 * 512
    ops = {o.name: o.op for o in layer_ops(cfg, StepShape(4, 512), tp=2)}
    assert ops["router"].gemm_shape() == GemmShape(1, T, 8, 4096)
    assert ops["ffn1"].gemm_shape() == GemmShape(8, T * 2 // 8, 2 * 14336 // 2, 4096)
    ep = {o.name: o.op for o in layer_ops(cfg, StepShape(4, 512), tp=2, ep=2)}
    assert ep["ffn1"].gemm_shape() == GemmShape(4, T * 2 // 8, 2 * 14336, 4096)
    assert ep["ffn1"].macs == ops["ffn1"].macs    # the same work per rank, other layout
    cap = {o.name: o.op for o in layer_ops(cfg, StepShape(4, 512), capacity=1.25)}
    assert cap["ffn1"].m == 640
    # active FLOPs: decode_flops uses top_k experts
    assert _step_flops(cfg, StepShape(1, 1, 99)) == cfg.decode_flops(100)


def test_long_prompt_attention_is_split_under_the_per_op_limit():
    """Llama-3.1-70B, one 128k-token prompt on one chip: the scores are 64 x 131072^2 x 128
    MACs (1.4e14), over the IR's 2**46 per op; they are split along the queries into equal
    kernels whose MACs add up to the whole."""
    cfg = get_llm("llama3.1-70b")
    s = 131072
    ops = [o for o in layer_ops(cfg, StepShape(1, s)) if o.name == "q_mul_k"]
    assert all(o.op.macs <= MAX_OP_MACS for o in ops)
    assert sum(o.op.macs * o.repeat for o in ops) == 64 * s * s * 128
    assert sum(o.repeat for o in ops) > 1


def test_a_context_far_beyond_the_model_is_refused():
    with pytest.raises(LlmStepError, match=r"context \+ new tokens = 8,193: at most 4 x "
                                           r"gpt3-175b's max_seq_len = 8,192 tokens"):
        layer_ops(get_llm("gpt3-175b"), StepShape(1, 1, 8192))


def test_context_beyond_the_model_is_timed_with_a_warning():
    assert context_warning(get_llm("gpt3-175b"), StepShape(8, 1, 3072)).startswith(
        "context 3072 + new tokens 1 = 3073 is beyond gpt3-175b's max_seq_len = 2,048")
    assert context_warning(get_llm("gpt3-175b"), StepShape(8, 1, 2047)) is None


@pytest.mark.parametrize("kwargs,message", [
    (dict(tp=5), "tp = 5: must divide the 4 query heads of tiny"),
    (dict(tp=4, ep=2), "ep = 2: tiny is dense (experts = 1)"),
    (dict(capacity=0), "capacity = 0: must be a number in (0, 64]"),
    (dict(kv_block=0), "kv_block = 0: must be an integer in 1..65,536"),
])
def test_bad_layouts_are_one_line_errors(kwargs, message):
    with pytest.raises(LlmStepError, match=message.replace("(", r"\(").replace(")", r"\)")):
        layer_ops(TINY, StepShape(1, 4), **kwargs)


def test_bad_shapes_are_one_line_errors():
    with pytest.raises(LlmStepError, match=r"batch = 0: must be an integer in 1\.\.1,048,576"):
        StepShape(0, 4)
    with pytest.raises(LlmStepError, match=r"new_tokens = -1"):
        StepShape(1, -1)


def test_expert_parallel_with_data_parallel_attention_routes_through_all_to_alls():
    """tp = 1, ep = 4 (Mixtral on 4 ranks, DeepSeek-style): each rank runs the attention of
    batch / 4 sequences and 2 of the 8 experts on every token routed to them; an all-to-all
    sends each rank's tokens (top-2 copies) to the experts' ranks and another brings them back;
    no all-reduce. The ranks' FLOPs add up to the batch's decode FLOPs."""
    cfg = get_llm("mixtral-8x7b")
    shape = StepShape(8, 1, 99)
    ops = layer_ops(cfg, shape, tp=1, ep=4)
    by = {o.name: o for o in ops}
    assert "allreduce_attn" not in by and "allreduce_ffn" not in by
    for name in ("alltoall_dispatch", "alltoall_combine"):
        assert by[name].collective == "alltoall" and by[name].group == 4
        assert by[name].nbytes == 2 * 2 * 4096 * 2       # 2 tokens x top-2 x d x fp16
    assert by["qkv_proj"].op.m == 2                       # this rank's 2 sequences
    assert by["ffn1"].op.batch == 2                       # 8 experts / 4 ranks
    assert by["ffn1"].op.m == 2                           # 8 tokens x 2 / 4 ranks / 2 experts
    per_rank = sum(o.flops for o in ops) * cfg.layers + sum(
        o.flops for o in head_ops(cfg, shape, 1, ep=4))
    assert 4 * per_rank == 8 * cfg.decode_flops(100)
    with pytest.raises(LlmStepError, match=r"batch = 6: must be a multiple of ep = 4"):
        layer_ops(cfg, StepShape(6, 1, 99), tp=1, ep=4)
    with pytest.raises(LlmStepError, match=r"ep = 3: must divide experts = 8"):
        layer_ops(cfg, shape, tp=1, ep=3)
