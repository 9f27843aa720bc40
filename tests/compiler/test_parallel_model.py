"""Backward ops, transformer specs and strategy parsing for compiler.parallel.

Expected values are worked out by hand in comments, or come from closed forms of the cited
papers (Narayanan et al. 2021 for parameter and FLOP counts; Korthikanti et al. 2022 Table 3
for the preset configurations), never from the code under test.
"""

from __future__ import annotations

import pytest

from compiler.frontends import zoo
from compiler.ir import Eltwise, Gemm, Graph, IRError, Move, Pool, conv2d
from compiler.parallel import (Strategy, TransformerModel, backward_ops, get_model, graph_params,
                               has_weights, is_activation_product, model_flops, param_count,
                               parse_strategy)


def shape(op):
    return (op.batch, op.m, op.n, op.k)


# --------------------------------------------------------------------------- backward
def test_weighted_gemm_backward_shapes_and_macs():
    fc = Gemm(name="fc", m=32, n=10, k=64)
    bwd = {op.name: op for op in backward_ops(Graph("g", (fc,)))}
    # dX (32x64) = dY (32x10) @ W^T (10x64); dW (64x10) = X^T (64x32) @ dY (32x10)
    assert shape(bwd["fc.dgrad"]) == (1, 32, 64, 10)
    assert shape(bwd["fc.wgrad"]) == (1, 64, 10, 32)
    assert sum(op.macs for op in bwd.values()) == 2 * 32 * 10 * 64


def test_input_grad_false_drops_first_layer_dgrad_only():
    g = Graph("g", (Gemm(name="a", m=4, n=8, k=16),
                    Gemm(name="b", m=4, n=2, k=8, inputs=("a",))))
    names = [op.name for op in backward_ops(g, input_grad=False)]
    assert names == ["b.dgrad", "b.wgrad", "a.wgrad"]
    names = [op.name for op in backward_ops(g)]
    assert names == ["b.dgrad", "b.wgrad", "a.dgrad", "a.wgrad"]


def test_conv_backward_is_im2col_gemms():
    # 3x3 conv, 8 -> 16 channels, 10x10 input, pad 1, batch 2, groups 2:
    # im2col M = 2*10*10 = 200, N = 16/2 = 8, K = 9*8/2 = 36, count = 2
    c = conv2d("c", 10, 8, 16, 3, padding=1, groups=2, batch=2)
    bwd = {op.name: op for op in backward_ops(Graph("g", (c,)))}
    assert shape(bwd["c.dgrad"]) == (2, 200, 36, 8)
    assert shape(bwd["c.wgrad"]) == (2, 36, 8, 200)
    assert param_count(c) == 2 * 36 * 8
    assert sum(op.macs for op in bwd.values()) == 2 * c.macs


def test_attention_products_get_two_activation_gradients():
    g = zoo.gpt2_block(seq_len=16)
    scores = g.op("h.0.attn.scores")
    assert is_activation_product(scores) and not has_weights(scores)
    assert param_count(scores) == 0
    bwd = {op.name: op for op in backward_ops(g)}
    # scores: 12 heads of (16 x 64) @ (64 x 16); grads: dQ (16x64) = dS (16x16) @ K,
    # dK^T (64x16) = Q^T (64x16) @ dS (16x16)
    assert shape(bwd["h.0.attn.scores.grad_a"]) == (12, 16, 64, 16)
    assert shape(bwd["h.0.attn.scores.grad_b"]) == (12, 64, 16, 16)
    # a batch-1 single-head product is recognised by its name
    assert is_activation_product(Gemm(name="x.attn.context", m=4, n=4, k=4))


@pytest.mark.parametrize("name", ["resnet18", "mobilenetv2", "gpt2_block", "bert_base_layer"])
def test_backward_macs_are_twice_forward(name):
    g = zoo.get(name, **({"image_size": 64} if name in ("resnet18", "mobilenetv2") else {}))
    assert backward_ops(g).macs == 2 * g.macs


def test_backward_without_input_grad_skips_conv1_dgrad():
    g = zoo.resnet18(image_size=64)
    conv1 = g.op("conv1")  # 7x7/2, 3 -> 64 on 64x64: out 32x32, M=1024, K=147, N=64
    assert conv1.macs == 1024 * 147 * 64
    assert backward_ops(g, input_grad=False).macs == 2 * g.macs - conv1.macs


def test_vector_op_backward_costs():
    g = Graph("g", (Eltwise(name="e", op="gelu", elements=100),
                    Pool(name="p", kind="max", in_h=8, in_w=8, channels=3, kernel_h=2,
                         kernel_w=2, stride_h=2, stride_w=2, batch=2, inputs=("e",)),
                    Move(name="t", kind="transpose", elements=96, inputs=("p",))))
    bwd = {op.name: op for op in backward_ops(g)}
    assert bwd["e.grad"].elements == 100 and bwd["e.grad"].operands == 2
    assert bwd["e.grad"].op == "gelu_grad"
    assert bwd["p.grad"].elements == 2 * 3 * 8 * 8  # input-sized gradient
    assert bwd["t.grad"].elements == 96
    # gradient flows from the consumer's grad op
    assert bwd["e.grad"].inputs == ("p.grad",) and bwd["t.grad"].inputs == ()


def test_gpt2_block_parameters():
    # q, k, v, out: 4 * 768^2; fc1 + fc2: 2 * 768 * 3072 -> 12 * 768^2 = 7,077,888
    assert graph_params(zoo.gpt2_block(seq_len=8)) == 7_077_888


def test_backward_rejects_non_graph():
    with pytest.raises(IRError, match="must be a compiler.ir.Graph"):
        backward_ops([Gemm(name="a", m=1, n=1, k=1)])


# --------------------------------------------------------------------------- models
# Korthikanti et al. 2022, Table 3: heads, hidden, layers (seq 2048).
TABLE3 = {"megatron-22b": (64, 6144, 48), "gpt3-175b": (96, 12288, 96),
          "turing-530b": (128, 20480, 105), "megatron-1t": (160, 25600, 128)}


@pytest.mark.parametrize("name", list(TABLE3))
def test_presets_match_table3_and_narayanan_params(name):
    m = get_model(name)
    a, h, l = TABLE3[name]
    assert (m.heads, m.hidden, m.layers, m.seq_len, m.vocab, m.ffn) == (a, h, l, 2048, 51200,
                                                                         4 * h)
    # Narayanan et al. 2021 §5.1: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)),
    # i.e. 12lh^2 + 13lh + (V+s)h; we also count the final layer norm (2h).
    formula = 12 * l * h * h + 13 * l * h + (51200 + 2048) * h
    assert m.params == formula + 2 * h


def test_gpt3_175b_has_about_175b_parameters():
    assert 174e9 < get_model("gpt3-175b").params < 176e9


def test_layer_ops_tp1_matches_attention_block_macs():
    m = TransformerModel("t", layers=2, hidden=64, heads=4, seq_len=32, vocab=100, micro_batch=3,
                         global_batch=3)
    mine = sum(op.macs for op in m.layer_ops(1))
    ref = m.block_graph().macs
    # 12 b s h^2 + 2 b s^2 h = 12*96*4096 + 2*3*1024*64
    assert mine == ref == 12 * 96 * 64 * 64 + 2 * 3 * 32 * 32 * 64


@pytest.mark.parametrize("tp", [2, 4])
def test_tp_split_divides_every_gemm(tp):
    m = TransformerModel("t", layers=2, hidden=64, heads=4, seq_len=32, vocab=100)
    full = {op.name: op for op in m.layer_ops(1)}
    for op in m.layer_ops(tp):
        if isinstance(op, Gemm):
            assert op.macs * tp == full[op.name].macs
    split = {op.name: op for op in m.layer_ops(tp)}
    # column-parallel QKV/fc1 split n, row-parallel out_proj/fc2 split k (Megatron-LM §3)
    assert split["layer.attn.qkv"].n == 3 * 64 // tp and split["layer.attn.out_proj"].k == 64 // tp
    assert split["layer.ffn.fc1"].n == 256 // tp and split["layer.ffn.fc2"].k == 256 // tp
    assert split["layer.attn.scores"].batch == 4 // tp
    sp = {op.name: op for op in m.layer_ops(tp, sequence_parallel=True)}
    assert sp["layer.ln1"].elements == 32 * 64 // tp


def test_model_flops_matches_narayanan_and_ops():
    m = get_model("gpt3-175b")
    b, s, l, h, v = 64, 2048, 96, 12288, 51200
    closed = 72 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))
    assert model_flops(m) == pytest.approx(closed, rel=1e-12)
    # from the ops: 3 passes x 2 FLOP/MAC x (l layers + logits) per sequence
    small = TransformerModel("t", layers=3, hidden=64, heads=4, seq_len=32, vocab=100)
    per_seq = 3 * sum(op.macs for op in small.layer_ops(1)) + small.head_ops(1)[1].macs
    assert model_flops(small, 5) == 6 * 5 * per_seq


def test_model_errors_name_the_field():
    with pytest.raises(ValueError, match="hidden = 10 is not divisible by heads = 3"):
        TransformerModel("x", layers=1, hidden=10, heads=3, seq_len=4, vocab=8)
    with pytest.raises(ValueError, match="tp = 3 must divide heads = 4"):
        TransformerModel("x", layers=1, hidden=8, heads=4, seq_len=4, vocab=8).layer_ops(3)
    with pytest.raises(ValueError, match="unknown; allowed"):
        get_model("gpt5")
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['depth'\]"):
        get_model("gpt2-small", depth=3)
    assert get_model("gpt2-small", global_batch=8).global_batch == 8


# --------------------------------------------------------------------------- strategy
def test_parse_strategy_roundtrip():
    st = parse_strategy("dp=2, tp=4,pp=2,zero=1,schedule=gpipe,recompute=selective,sp=true,"
                        "bucket_mb=50,overlap_dp=false,m=8")
    assert st == Strategy(dp=2, tp=4, pp=2, zero=1, schedule="gpipe", recompute="selective",
                          sequence_parallel=True, bucket_mb=50.0, overlap_dp=False,
                          microbatches=8)
    assert st.n_ranks == 16
    # Megatron order: tp innermost, then dp, then pp
    assert st.rank(3, 1, 1) == 3 + 4 * (1 + 2 * 1)
    assert parse_strategy("") == Strategy()


@pytest.mark.parametrize("text, match", [
    ("tp=0", r"tp = 0: must be an integer >= 1"),
    ("tp=two", r"tp = 'two': must be an integer"),
    ("zero=4,dp=2", r"zero = 4: must be 0, 1, 2 or 3"),
    ("zero=1", r"zero = 1: must be 0 when dp = 1"),
    ("schedule=zb", r"schedule = 'zb': must be one of 1f1b, gpipe"),
    ("recompute=some", r"recompute = 'some': must be one of none, full, selective"),
    ("sp=maybe", r"sequence_parallel = 'maybe': must be true or false"),
    ("bucket_mb=-1", r"bucket_mb = -1.0: must be a number > 0"),
    ("foo=1", r"unknown key 'foo'; allowed: dp, tp, pp"),
    ("dp", r"'dp': expected key=value"),
    ("dp=1,dp=2", r"key 'dp' given twice"),
    ("v=2,schedule=gpipe", r"interleave = 2: must be 1 with schedule=gpipe"),
])
def test_parse_errors_name_key_and_allowed(text, match):
    with pytest.raises(ValueError, match=match):
        parse_strategy(text)


def test_validate_against_system_and_model():
    st = parse_strategy("dp=2,tp=4,pp=2")
    assert st.validate(16, layers=8, heads=8, global_batch=32, micro_batch=2) == 8
    with pytest.raises(ValueError, match=r"dp\*tp\*pp = 2\*4\*2 = 16: must equal the number of "
                                         r"ranks, 8"):
        st.validate(8)
    with pytest.raises(ValueError, match="tp = 4: must be a divisor of the model's heads = 6"):
        st.validate(16, heads=6)
    with pytest.raises(ValueError, match="divides the model's layers = 7"):
        st.validate(16, layers=7)
    with pytest.raises(ValueError, match="microbatches = 3: must be a multiple of pp = 2"):
        parse_strategy("pp=2,v=2,m=3").validate(2)
