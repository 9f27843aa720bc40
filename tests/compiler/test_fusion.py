"""compiler.fusion: which ops run as one group (the patterns and their near misses)."""

import pytest

from compiler.attention import transformer_block_ops
from compiler.frontends import zoo
from compiler.fusion import PATTERNS, find_groups
from compiler.ir import Activation, Binary, Eltwise, Gemm, Graph, Norm, Pool, Softmax, conv2d


def _groups(graph, **kw):
    return {g.members: g.kind for g in {id(g): g for g in find_groups(graph, **kw).values()}.values()}


def test_a_bert_layer_fuses_attention_add_norm_and_the_gelu_epilogue():
    g = Graph("bert", tuple(transformer_block_ops("L", seq_len=16, d_model=64, heads=4)))
    assert _groups(g) == {
        ("L.attn.scores", "L.attn.softmax", "L.attn.context"): "attention",
        ("L.add1", "L.ln1"): "add_norm",
        ("L.add2", "L.ln2"): "add_norm",
        ("L.ffn.fc1", "L.ffn.gelu"): "epilogue",
    }


def test_gpt2_pre_norm_residual_goes_into_fc2_and_dropout_joins_attention():
    ops = transformer_block_ops("h", seq_len=16, d_model=64, heads=4, pre_norm=True,
                                attn_dropout=True)
    groups = _groups(Graph("gpt2", tuple(ops)))
    assert groups[("h.attn.scores", "h.attn.softmax", "h.attn.dropout", "h.attn.context")] == \
        "attention"
    assert groups[("h.ffn.fc2", "h.add2")] == "epilogue"     # add2 feeds no norm: the epilogue
    assert groups[("h.add1", "h.ln2")] == "add_norm"         # add1 is also add2's residual


def test_resnet_stem_pool_and_residual_adds():
    groups = _groups(zoo.get("resnet18"))
    assert groups[("conv1", "maxpool")] == "conv_pool"
    # the add runs on the output of the later-produced input (the other is already in DRAM)
    assert groups[("layer2.0.downsample.0", "layer2.0.add")] == "epilogue"
    assert groups[("layer1.0.conv2", "layer1.0.add")] == "epilogue"
    # every residual add is fused; the last one with the global average pool after it
    assert sum(any(m.endswith(".add") for m in members) for members in groups) == 8
    assert groups[("layer4.1.conv2", "layer4.1.add", "avgpool")] == "conv_pool"


def test_near_misses_stay_apart():
    a = Gemm(name="a", m=8, n=16, k=8)
    relu = Activation(name="r", fn="relu", elements=128, inputs=("a",))
    twice = Activation(name="t", fn="gelu", elements=128, inputs=("a",))   # a second reader
    assert _groups(Graph("g", (a, relu, twice))) == {}
    # a softmax over other rows than the scores' is not attention
    s = Gemm(name="s", batch=2, m=4, n=8, k=16, inputs=("x1", "x2"))
    x1 = Gemm(name="x1", m=8, n=16, k=8)
    x2 = Gemm(name="x2", m=16, n=8, k=8)
    soft = Softmax(name="p", rows=4, cols=16, inputs=("s",))
    ctx = Gemm(name="c", batch=2, m=4, n=16, k=8, inputs=("p", "x2"))
    assert not any(k == "attention" for k in _groups(Graph("g", (x1, x2, s, soft, ctx))).values())
    # a norm that does not read the add alone
    add = Binary(name="add", fn="add", elements=64, inputs=("x",))
    x = Gemm(name="x", m=4, n=16, k=4)
    norm = Norm(name="n", kind="layernorm", rows=4, cols=16, inputs=("add", "x"))
    assert "add_norm" not in _groups(Graph("g", (x, add, norm))).values()


def test_a_residual_from_a_later_op_or_a_second_reader_blocks_the_epilogue():
    c1 = conv2d("c1", 8, 4, 4, 3, padding=1)
    c2 = conv2d("c2", 8, 4, 4, 3, padding=1, inputs=("c1",))
    c3 = conv2d("c3", 8, 4, 4, 3, padding=1, inputs=("c1",))
    add = Binary(name="add", fn="add", elements=256, inputs=("c2", "c3"))
    assert _groups(Graph("g", (c1, c2, c3, add))) == {("c3", "add"): "epilogue"}
    pool = Pool(name="p", kind="max", in_h=8, in_w=8, channels=4, kernel_h=2, kernel_w=2,
                stride_h=2, stride_w=2, inputs=("c1",))
    assert _groups(Graph("g", (c1, c2, pool))) == {}         # c1 is also read by c2


def test_patterns_can_be_turned_off():
    g = zoo.get("bert_base_layer", seq_len=16)
    assert find_groups(g, patterns=()) == {}
    only = _groups(g, patterns=("attention",))
    assert set(only.values()) == {"attention"}
    with pytest.raises(ValueError, match="fusion pattern 'flash': must be one of attention"):
        find_groups(g, patterns=("flash",))
    assert PATTERNS == ("attention", "add_norm", "epilogue", "conv_pool")


def test_dropout_outside_attention_is_not_swallowed():
    a = Gemm(name="a", m=8, n=16, k=8)
    drop = Eltwise(name="d", op="dropout", elements=128, inputs=("a",))
    assert _groups(Graph("g", (a, drop))) == {}
