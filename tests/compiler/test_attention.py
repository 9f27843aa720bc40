"""Attention and transformer blocks as IR ops: shapes, edges, MACs and argument checks.

Expected shapes and MAC counts are written out by hand from the definition of multi-head
attention (Vaswani et al. 2017, §3.2.2), never taken from the code under test.
"""

from __future__ import annotations

import pytest

from compiler.attention import attention_ops, transformer_block_ops
from compiler.ir import Eltwise, Gemm, Graph, IRError, Softmax


def by_name(ops):
    return {op.name: op for op in ops}


def shape(op: Gemm) -> tuple[int, int, int, int]:
    return (op.batch, op.m, op.n, op.k)


def test_self_attention_shapes():
    ops = by_name(attention_ops("a", seq_len=10, d_model=64, heads=4, batch=3))
    assert list(ops) == ["a.q_proj", "a.k_proj", "a.v_proj", "a.scores", "a.softmax",
                         "a.context", "a.out_proj"]
    # Projections: 3 sequences of 10 tokens, 64 -> 64.
    for name in ("a.q_proj", "a.k_proj", "a.v_proj", "a.out_proj"):
        assert shape(ops[name]) == (1, 30, 64, 64)
    # 3 * 4 heads of (10 x 16) @ (16 x 10), then (10 x 10) @ (10 x 16).
    assert shape(ops["a.scores"]) == (12, 10, 10, 16)
    assert shape(ops["a.context"]) == (12, 10, 16, 10)
    softmax = ops["a.softmax"]
    # one row per head and query, reduced along the keys
    assert isinstance(softmax, Softmax) and (softmax.rows, softmax.cols) == (3 * 4 * 10, 10)
    assert softmax.elements == 3 * 4 * 10 * 10


def test_cross_attention_uses_kv_len_for_keys_and_values():
    ops = by_name(attention_ops("x", seq_len=5, d_model=32, heads=2, kv_len=7,
                                inputs=("dec",), kv_inputs=("enc",)))
    assert shape(ops["x.q_proj"]) == (1, 5, 32, 32)
    assert shape(ops["x.k_proj"]) == (1, 7, 32, 32)
    assert shape(ops["x.v_proj"]) == (1, 7, 32, 32)
    assert shape(ops["x.scores"]) == (2, 5, 7, 16)
    assert shape(ops["x.context"]) == (2, 5, 16, 7)
    assert ops["x.softmax"].elements == 2 * 5 * 7
    assert shape(ops["x.out_proj"]) == (1, 5, 32, 32)
    assert ops["x.q_proj"].inputs == ("dec",)
    assert ops["x.k_proj"].inputs == ops["x.v_proj"].inputs == ("enc",)


def test_attention_edges():
    ops = by_name(attention_ops("a", seq_len=4, d_model=8, heads=2, inputs=("emb",)))
    assert ops["a.q_proj"].inputs == ("emb",)
    assert ops["a.k_proj"].inputs == ("emb",)  # kv_inputs defaults to inputs
    assert ops["a.scores"].inputs == ("a.q_proj", "a.k_proj")
    assert ops["a.softmax"].inputs == ("a.scores",)
    assert ops["a.context"].inputs == ("a.softmax", "a.v_proj")
    assert ops["a.out_proj"].inputs == ("a.context",)
    # Reading the graph input, the ops form a valid graph in the order returned.
    Graph("attn", tuple(attention_ops("a", seq_len=4, d_model=8, heads=2)))


@pytest.mark.parametrize("b, s, t, d, h", [
    (1, 128, 128, 768, 12), (2, 7, 7, 96, 3), (1, 1, 1024, 768, 12), (4, 33, 65, 512, 8),
])
def test_attention_macs_closed_form(b, s, t, d, h):
    # Q and output projections b*s*d*d each, K and V b*t*d*d each; scores and context each
    # b*h * s*t*(d/h) = b*s*t*d.
    expected = 2 * b * s * d * d + 2 * b * t * d * d + 2 * b * s * t * d
    ops = attention_ops("a", seq_len=s, d_model=d, heads=h, batch=b, kv_len=t)
    assert sum(op.macs for op in ops) == expected


def test_post_norm_block_order_and_edges():
    ops = transformer_block_ops("L", seq_len=4, d_model=8, heads=2, inputs=("x",))
    names = [op.name for op in ops]
    assert names[:7] == ["L.attn.q_proj", "L.attn.k_proj", "L.attn.v_proj", "L.attn.scores",
                         "L.attn.softmax", "L.attn.context", "L.attn.out_proj"]
    assert names[7:] == ["L.add1", "L.ln1", "L.ffn.fc1", "L.ffn.gelu", "L.ffn.fc2", "L.add2",
                         "L.ln2"]
    o = by_name(ops)
    assert o["L.add1"].inputs == ("L.attn.out_proj", "x")
    assert o["L.ln1"].inputs == ("L.add1",)
    assert o["L.ffn.fc1"].inputs == ("L.ln1",)
    assert o["L.add2"].inputs == ("L.ffn.fc2", "L.ln1")
    assert o["L.ln2"].inputs == ("L.add2",)
    Graph("block", (Eltwise(name="x", op="copy", elements=32),) + tuple(ops))


def test_pre_norm_block_order_and_edges():
    ops = transformer_block_ops("L", seq_len=4, d_model=8, heads=2, pre_norm=True,
                                inputs=("x",))
    o = by_name(ops)
    assert ops[0].name == "L.ln1" and o["L.ln1"].inputs == ("x",)
    assert o["L.attn.q_proj"].inputs == ("L.ln1",)
    assert o["L.add1"].inputs == ("L.attn.out_proj", "x")
    assert o["L.ln2"].inputs == ("L.add1",)
    assert o["L.ffn.fc1"].inputs == ("L.ln2",)
    assert o["L.add2"].inputs == ("L.ffn.fc2", "L.add1")
    assert ops[-1].name == "L.add2"


def test_block_shapes_and_vector_ops():
    ops = by_name(transformer_block_ops("L", seq_len=6, d_model=16, heads=4, batch=2))
    # FFN hidden width defaults to 4 * d_model.
    assert shape(ops["L.ffn.fc1"]) == (1, 12, 64, 16)
    assert shape(ops["L.ffn.fc2"]) == (1, 12, 16, 64)
    assert (ops["L.ffn.gelu"].fn, ops["L.ffn.gelu"].elements) == ("gelu", 12 * 64)
    for name in ("L.add1", "L.add2"):
        assert (ops[name].fn, ops[name].operands, ops[name].elements) == ("add", 2, 12 * 16)
    for name in ("L.ln1", "L.ln2"):
        assert (ops[name].kind, ops[name].rows, ops[name].cols) == ("layernorm", 12, 16)
    custom = by_name(transformer_block_ops("L", seq_len=6, d_model=16, heads=4, ffn_dim=40))
    assert shape(custom["L.ffn.fc1"]) == (1, 6, 40, 16)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_block_macs_closed_form(pre_norm):
    b, s, d, f = 2, 50, 256, 1024
    expected = b * (4 * s * d * d + 2 * s * s * d + 2 * s * d * f)
    ops = transformer_block_ops("L", seq_len=s, d_model=d, heads=8, ffn_dim=f, batch=b,
                                pre_norm=pre_norm)
    assert sum(op.macs for op in ops) == expected


def test_tensor_parallel_rank_of_a_block():
    # Megatron-LM §3 by hand: 2 sequences of 6 tokens, d = 16, 4 heads, f = 64, tp = 2: Q/K/V
    # and fc1 keep n / 2 columns, out_proj and fc2 k / 2 rows, each rank 2 * 4 / 2 heads.
    ops = by_name(transformer_block_ops("L", seq_len=6, d_model=16, heads=4, batch=2, tp=2))
    for name in ("L.attn.q_proj", "L.attn.k_proj", "L.attn.v_proj"):
        assert shape(ops[name]) == (1, 12, 8, 16)
    assert shape(ops["L.attn.scores"]) == (4, 6, 6, 4)
    assert shape(ops["L.attn.context"]) == (4, 6, 4, 6)
    assert ops["L.attn.softmax"].elements == 4 * 6 * 6
    assert shape(ops["L.attn.out_proj"]) == (1, 12, 16, 8)
    assert shape(ops["L.ffn.fc1"]) == (1, 12, 32, 16)
    assert shape(ops["L.ffn.fc2"]) == (1, 12, 16, 32)
    assert ops["L.ffn.gelu"].elements == 12 * 32
    assert ops["L.add1"].elements == ops["L.ln2"].elements == 12 * 16
    sp = by_name(transformer_block_ops("L", seq_len=6, d_model=16, heads=4, batch=2, tp=2,
                                       sequence_parallel=True))
    for name in ("L.ln1", "L.add1", "L.ln2", "L.add2"):
        assert sp[name].elements == 12 * 16 // 2


def test_fused_qkv_and_attention_dropout():
    ops = attention_ops("a", seq_len=10, d_model=64, heads=4, batch=3, tp=2, fused_qkv=True,
                        dropout=True)
    assert [op.name for op in ops] == ["a.qkv", "a.scores", "a.softmax", "a.dropout",
                                       "a.context", "a.out_proj"]
    o = by_name(ops)
    assert shape(o["a.qkv"]) == (1, 30, 3 * 64 // 2, 64)
    assert o["a.scores"].inputs == ("a.qkv",)
    assert (o["a.dropout"].op, o["a.dropout"].elements) == ("dropout", 6 * 10 * 10)
    assert o["a.context"].inputs == ("a.dropout", "a.qkv")
    # Fusing moves no MAC: the separate projections cost the same.
    plain = attention_ops("a", seq_len=10, d_model=64, heads=4, batch=3, tp=2)
    assert sum(op.macs for op in ops) == sum(op.macs for op in plain)


@pytest.mark.parametrize("kwargs, expected", [
    ({"tp": 5}, "tp = 5 does not divide heads = 12"),
    ({"tp": 0}, "tp = 0"),
    ({"fused_qkv": 1}, "fused_qkv = 1: must be True or False"),
    ({"fused_qkv": True, "kv_len": 8}, "fused_qkv = True needs self-attention"),
    ({"d_model": 770}, "d_model = 770 is not divisible by heads = 12"),
    ({"seq_len": 0}, "seq_len = 0: must be an integer >= 1"),
    ({"heads": -1}, "heads = -1"),
    ({"batch": True}, "batch = True"),
    ({"d_model": 768.0}, "d_model = 768.0"),
    ({"kv_len": 0}, "kv_len = 0"),
    ({"inputs": "x"}, "inputs = 'x'"),
    ({"inputs": ("x",), "kv_inputs": ("",)}, "kv_inputs = ('',)"),
])
def test_attention_rejects_bad_arguments(kwargs, expected):
    args = {"seq_len": 16, "d_model": 768, "heads": 12} | kwargs
    with pytest.raises(IRError) as excinfo:
        attention_ops("enc", **args)
    assert expected in str(excinfo.value)
    assert "'enc'" in str(excinfo.value)


def test_attention_rejects_empty_prefix():
    with pytest.raises(IRError, match="prefix = ''"):
        attention_ops("", seq_len=1, d_model=8, heads=2)


@pytest.mark.parametrize("kwargs, expected", [
    ({"ffn_dim": 0}, "ffn_dim = 0"),
    ({"pre_norm": 1}, "pre_norm = 1"),
    ({"d_model": 10, "heads": 4}, "d_model = 10 is not divisible by heads = 4"),
    ({"d_model": 0}, "d_model = 0"),
    ({"tp": 4, "ffn_dim": 30}, "tp = 4 does not divide ffn_dim = 30"),
    ({"sequence_parallel": "yes"}, "sequence_parallel = 'yes'"),
])
def test_block_rejects_bad_arguments(kwargs, expected):
    args = {"seq_len": 16, "d_model": 64, "heads": 4} | kwargs
    with pytest.raises(IRError) as excinfo:
        transformer_block_ops("blk", **args)
    assert expected in str(excinfo.value)
