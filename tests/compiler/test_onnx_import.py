"""ONNX frontend (compiler/frontends/onnx_import.py).

Every model is built here with ``onnx.helper`` (zero initializers of the right shapes, kept in
memory); nothing is downloaded. The gold models are the zoo's hand-written ResNet and BERT
graphs, the IR's conv/pool output-size formulas, and ONNX's own reference evaluator.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from compiler.frontends import zoo  # noqa: E402
from compiler.frontends.onnx_import import (  # noqa: E402
    OnnxImportError, OnnxImportReport, import_onnx,
)
from compiler.ir import (  # noqa: E402
    Conv2d, Eltwise, Gemm, Graph, IRError, Move, Pool, Softmax,
)

OPSET = 21


class Net:
    """Builds an ONNX graph node by node; a node's output tensor is named ``<node>:0``."""

    def __init__(self) -> None:
        self.nodes: list = []
        self.inits: list = []

    def weight(self, name: str, shape, dtype=np.float32) -> str:
        self.inits.append(numpy_helper.from_array(np.zeros(shape, dtype), name))
        return name

    def const(self, name: str, values, dtype=np.int64) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(values, dtype), name))
        return name

    def node(self, op_type: str, inputs, name: str, outputs: int = 1, domain: str = "",
             **attrs) -> str:
        outs = [f"{name}:{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, domain=domain,
                                           **attrs))
        return outs[0]

    def model(self, inputs: dict, outputs, opsets: dict | None = None,
              dtype=TensorProto.FLOAT) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "net", [helper.make_tensor_value_info(n, dtype, s) for n, s in
                                inputs.items()],
            [helper.make_tensor_value_info(o, dtype, None) for o in outputs], self.inits)
        imports = [helper.make_opsetid("", OPSET)] + [
            helper.make_opsetid(d, v) for d, v in (opsets or {}).items()]
        return helper.make_model(graph, opset_imports=imports)


# --- ResNet-18 / ResNet-50, as torchvision exports them -------------------------------------


def _conv_bn(net: Net, name: str, x: str, cin: int, cout: int, k: int, stride: int = 1,
             pad: int = 0, relu: bool = True) -> str:
    w = net.weight(f"{name}.weight", (cout, cin, k, k))
    y = net.node("Conv", [x, w], name, kernel_shape=[k, k], strides=[stride, stride],
                 pads=[pad] * 4)
    stats = [net.weight(f"{name}.bn.{p}", (cout,)) for p in ("scale", "bias", "mean", "var")]
    y = net.node("BatchNormalization", [y, *stats], f"{name}.bn")
    return net.node("Relu", [y], f"{name}.relu") if relu else y


def _block(net: Net, prefix: str, x: str, cin: int, planes: int, stride: int,
           bottleneck: bool) -> tuple[str, int]:
    if bottleneck:
        cout = planes * 4
        y = _conv_bn(net, f"{prefix}.conv1", x, cin, planes, 1)
        y = _conv_bn(net, f"{prefix}.conv2", y, planes, planes, 3, stride, 1)
        y = _conv_bn(net, f"{prefix}.conv3", y, planes, cout, 1, relu=False)
    else:
        cout = planes
        y = _conv_bn(net, f"{prefix}.conv1", x, cin, planes, 3, stride, 1)
        y = _conv_bn(net, f"{prefix}.conv2", y, planes, planes, 3, 1, 1, relu=False)
    shortcut = x
    if stride != 1 or cin != cout:
        shortcut = _conv_bn(net, f"{prefix}.downsample.0", x, cin, cout, 1, stride, relu=False)
    y = net.node("Add", [y, shortcut], f"{prefix}.add")
    return net.node("Relu", [y], f"{prefix}.relu"), cout


def onnx_resnet(layers, bottleneck: bool, flatten: str = "Flatten") -> onnx.ModelProto:
    """torchvision ResNet in inference form with a symbolic batch axis ``N``.

    ``flatten="shape"`` writes ``x.view(x.size(0), -1)`` as old exporters did:
    Shape -> Gather -> Unsqueeze -> Concat -> Reshape.
    """
    net = Net()
    x = _conv_bn(net, "conv1", "image", 3, 64, 7, 2, 3)
    x = net.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2],
                 pads=[1, 1, 1, 1])
    channels = 64
    for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers), start=1):
        for i in range(blocks):
            stride = 2 if stage > 1 and i == 0 else 1
            x, channels = _block(net, f"layer{stage}.{i}", x, channels, planes, stride,
                                 bottleneck)
    x = net.node("GlobalAveragePool", [x], "avgpool")
    if flatten == "Flatten":
        x = net.node("Flatten", [x], "flatten", axis=1)
    else:
        shape = net.node("Shape", [x], "size")
        n = net.node("Gather", [shape, net.const("zero", 0)], "size0", axis=0)
        n = net.node("Unsqueeze", [n, net.const("axes0", [0])], "size0_1d")
        target = net.node("Concat", [n, net.const("minus_one", [-1])], "view_shape", axis=0)
        x = net.node("Reshape", [x, target], "view")
    w = net.weight("fc.weight", (1000, channels))
    y = net.node("Gemm", [x, w, net.weight("fc.bias", (1000,))], "fc", transB=1)
    return net.model({"image": ["N", 3, 224, 224]}, [y])


@pytest.mark.parametrize("model, layers, bottleneck, flatten, batch", [
    ("resnet18", (2, 2, 2, 2), False, "shape", 2),
    ("resnet50", (3, 4, 6, 3), True, "Flatten", None),
])
def test_resnet_matches_zoo_layer_by_layer(model, layers, bottleneck, flatten, batch):
    graph, report = import_onnx(onnx_resnet(layers, bottleneck, flatten), batch=batch,
                                name=model)
    gold = zoo.get(model, batch=batch or 1)
    assert graph.batch == gold.batch == (batch or 1)
    compute = [op for op in graph if isinstance(op, (Conv2d, Gemm))]
    gold_compute = [op for op in gold if isinstance(op, (Conv2d, Gemm))]
    assert len(compute) == len(gold_compute)
    for op, ref in zip(compute, gold_compute):
        assert op.name == ref.name
        if isinstance(ref, Conv2d):
            fields = ("in_channels", "out_channels", "kernel_h", "kernel_w", "stride_h",
                      "stride_w", "pad_top", "pad_bottom", "pad_left", "pad_right", "in_h",
                      "in_w", "out_h", "out_w", "groups", "batch")
        else:
            fields = ("m", "n", "k", "batch")
        assert {f: getattr(op, f) for f in fields} == {f: getattr(ref, f) for f in fields}
        assert op.macs == ref.macs
    assert graph.macs == gold.macs
    # BN and ReLU fold away, Flatten is a view: the whole graph, edges included, is the zoo's.
    assert graph.ops == gold.ops
    assert graph.name == model
    convs = len(gold_compute) - 1
    folded = {t for t, _ in report.folded}
    assert folded == {"BatchNormalization", "Relu"}
    assert sum(t == "BatchNormalization" for t, _ in report.folded) == convs
    assert report.moves == () and report.skipped == ()
    assert ("Flatten" if flatten == "Flatten" else "Reshape") in {t for t, _ in report.elided}


def onnx_mobilenetv2() -> onnx.ModelProto:
    """torchvision MobileNetV2: Conv+BN+ReLU6 (Clip with min/max inputs), depthwise 3x3."""
    net = Net()
    lo, hi = net.const("zero_f", 0.0, np.float32), net.const("six", 6.0, np.float32)

    def conv_bn(name, x, cin, cout, k, stride=1, groups=1, relu6=True):
        w = net.weight(f"{name}.weight", (cout, cin // groups, k, k))
        y = net.node("Conv", [x, w], name, strides=[stride] * 2, pads=[k // 2] * 4, group=groups)
        stats = [net.weight(f"{name}.bn.{p}", (cout,)) for p in ("scale", "bias", "mean", "var")]
        y = net.node("BatchNormalization", [y, *stats], f"{name}.bn")
        return net.node("Clip", [y, lo, hi], f"{name}.relu6") if relu6 else y

    x, cin, index = conv_bn("features.0.0", "image", 3, 32, 3, 2), 32, 1
    for t, c, n, first_stride in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                                  (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride, prefix, hidden = first_stride if i == 0 else 1, f"features.{index}", cin * t
            y, j = x, 0
            if t != 1:
                y, j = conv_bn(f"{prefix}.conv.0.0", x, cin, hidden, 1), 1
            y = conv_bn(f"{prefix}.conv.{j}.0", y, hidden, hidden, 3, stride, groups=hidden)
            y = conv_bn(f"{prefix}.conv.{j + 1}", y, hidden, c, 1, relu6=False)
            if stride == 1 and cin == c:
                y = net.node("Add", [y, x], f"{prefix}.add")
            x, cin, index = y, c, index + 1
    x = conv_bn(f"features.{index}.0", x, cin, 1280, 1)
    x = net.node("GlobalAveragePool", [x], "avgpool")
    x = net.node("Flatten", [x], "flatten")
    x = net.node("Gemm", [x, net.weight("classifier.1.weight", (1000, 1280))], "classifier.1",
                 transB=1)
    return net.model({"image": ["N", 3, 224, 224]}, [x])


def test_mobilenetv2_depthwise_matches_zoo():
    graph, report = import_onnx(onnx_mobilenetv2(), name="mobilenetv2")
    gold = zoo.mobilenetv2()
    assert graph.ops == gold.ops and graph.macs == gold.macs == 300_774_272
    assert sum(isinstance(op, Conv2d) and op.is_depthwise for op in graph) == 17
    assert {t for t, _ in report.folded} == {"BatchNormalization", "Clip"}


# --- BERT-base encoder layer ---------------------------------------------------------------


def onnx_bert_layer(seq: int = 128, d: int = 768, heads: int = 12, ffn: int = 3072,
                    prefix: str = "layer.0", norm=None, gelu=None) -> onnx.ModelProto:
    """A post-norm BERT encoder layer as torch exports it (opset 21: LayerNormalization, Gelu).

    ``norm(net, name, x, gamma, beta)`` and ``gelu(net, name, x)``, when given, write those two
    ops instead (as older opsets' decompositions) and return their output tensor."""
    net = Net()
    dh = d // heads
    split = net.const("split_heads", [0, 0, heads, dh])
    merge = net.const("merge_heads", [0, 0, d])

    def linear(name: str, x: str, cin: int, cout: int) -> str:
        y = net.node("MatMul", [x, net.weight(f"{name}.weight", (cin, cout))], name)
        return net.node("Add", [y, net.weight(f"{name}.bias", (cout,))], f"{name}.bias_add")

    def heads_of(name: str, x: str, perm) -> str:
        y = net.node("Reshape", [x, split], f"{name}.split")
        return net.node("Transpose", [y], f"{name}.transpose", perm=perm)

    def layer_norm(name: str, x: str) -> str:
        gamma, beta = net.weight(f"{name}.weight", (d,)), net.weight(f"{name}.bias", (d,))
        if norm is not None:
            return norm(net, name, x, gamma, beta)
        return net.node("LayerNormalization", [x, gamma, beta], name, axis=-1)

    a = f"{prefix}.attn"
    q = heads_of(f"{a}.q", linear(f"{a}.q_proj", "x", d, d), [0, 2, 1, 3])
    k = heads_of(f"{a}.k", linear(f"{a}.k_proj", "x", d, d), [0, 2, 3, 1])
    v = heads_of(f"{a}.v", linear(f"{a}.v_proj", "x", d, d), [0, 2, 1, 3])
    scores = net.node("MatMul", [q, k], f"{a}.scores")
    scores = net.node("Div", [scores, net.weight("sqrt_dh", (), np.float32)], f"{a}.scale")
    probs = net.node("Softmax", [scores], f"{a}.softmax", axis=-1)
    context = net.node("MatMul", [probs, v], f"{a}.context")
    context = net.node("Transpose", [context], f"{a}.merge.transpose", perm=[0, 2, 1, 3])
    context = net.node("Reshape", [context, merge], f"{a}.merge")
    y = linear(f"{a}.out_proj", context, d, d)
    y = net.node("Add", [y, "x"], f"{prefix}.add1")
    ln1 = layer_norm(f"{prefix}.ln1", y)
    y = linear(f"{prefix}.ffn.fc1", ln1, d, ffn)
    if gelu is None:
        y = net.node("Gelu", [y], f"{prefix}.ffn.gelu")
    else:
        y = gelu(net, f"{prefix}.ffn.gelu", y)
    y = linear(f"{prefix}.ffn.fc2", y, ffn, d)
    y = net.node("Add", [y, ln1], f"{prefix}.add2")
    y = layer_norm(f"{prefix}.ln2", y)
    return net.model({"x": ["batch", seq, d]}, [y])


def _through_moves(graph: Graph, names: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for name in names:
        op = graph.op(name)
        for src in (_through_moves(graph, op.inputs) if isinstance(op, Move) else (name,)):
            if src not in out:
                out.append(src)
    return tuple(out)


@pytest.mark.parametrize("batch", [None, 3])
def test_bert_layer_matches_zoo(batch):
    graph, report = import_onnx(onnx_bert_layer(), batch=batch)
    gold = zoo.bert_base_layer(seq_len=128, batch=batch or 1)
    # Head split/merge transposes copy bytes here (Move); the zoo calls them layout only.
    moves = [op for op in graph if isinstance(op, Move)]
    assert {op.kind for op in moves} == {"transpose"} and len(moves) == 4
    assert {t for t, _ in report.moves} == {"Transpose"}
    kept = [op for op in graph if not isinstance(op, Move)]
    assert [op.name for op in kept] == [op.name for op in gold]
    for op, ref in zip(kept, gold):
        assert type(op) is type(ref)
        if isinstance(ref, Gemm):
            assert (op.batch, op.m, op.n, op.k) == (ref.batch, ref.m, ref.n, ref.k), op.name
        else:
            assert (op.work(), op.elements, op.operands) == (ref.work(), ref.elements,
                                                             ref.operands)
        assert _through_moves(graph, op.inputs) == ref.inputs, op.name
    assert graph.macs == gold.macs == (batch or 1) * (12 * 128 * 768**2 + 2 * 128**2 * 768)
    # Samples are sequences: not the 12 heads of the attention GEMMs, not the 128 tokens.
    assert graph.batch == gold.batch == (batch or 1)
    # Biases and the 1/sqrt(dh) scale fold into their GEMMs; Softmax stays visible.
    folded = {name for _, name in report.folded}
    assert "layer.0.attn.scale" in folded and "layer.0.ffn.fc1.bias_add" in folded
    assert sum(t == "Add" for t, _ in report.folded) == 6
    softmax = graph.op("layer.0.attn.softmax")
    assert isinstance(softmax, Softmax) and (softmax.rows, softmax.cols) == (
        (batch or 1) * 12 * 128, 128)


# --- conv / pool attributes ----------------------------------------------------------------


def conv_model(in_hw=(9, 11), cin=4, cout=6, kernel=(3, 3), groups=1, batch=1, **attrs):
    net = Net()
    w = net.weight("w", (cout, cin // groups, *kernel))
    y = net.node("Conv", ["x", w], "conv", group=groups, **attrs)
    return net.model({"x": [batch, cin, *in_hw]}, [y])


def onnx_conv_out(size: int, k: int, s: int, d: int, begin: int, end: int, auto_pad: str) -> int:
    """Output size from the ONNX Conv spec (independent of the importer)."""
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return math.ceil(size / s)
    if auto_pad == "VALID":
        begin = end = 0
    return (size + begin + end - d * (k - 1) - 1) // s + 1


def reference_shape(model: onnx.ModelProto, feeds: dict) -> tuple[int, ...]:
    from onnx.reference import ReferenceEvaluator
    (out,) = ReferenceEvaluator(model).run(None, feeds)
    return out.shape


@pytest.mark.parametrize("attrs, pads", [
    (dict(pads=[1, 0, 2, 3]), (1, 2, 0, 3)),  # asymmetric: [top, left, bottom, right]
    (dict(auto_pad="VALID"), (0, 0, 0, 0)),
    (dict(auto_pad="SAME_UPPER", strides=[2, 2]), (1, 1, 1, 1)),  # 9 and 11: 2 pads, 1 + 1
    (dict(auto_pad="SAME_UPPER", kernel_shape=[3, 3]), (1, 1, 1, 1)),
    (dict(auto_pad="SAME_LOWER", strides=[2, 3]), (1, 1, 1, 0)),
    (dict(auto_pad="NOTSET", pads=[0, 0, 0, 0], strides=[2, 2], dilations=[2, 3]), (0, 0, 0, 0)),
])
def test_conv_padding_modes(attrs, pads):
    graph, _ = import_onnx(conv_model(**attrs))
    (op,) = graph.ops
    assert (op.pad_top, op.pad_bottom, op.pad_left, op.pad_right) == pads
    feeds = {"x": np.ones((1, 4, 9, 11), np.float32)}
    assert (1, 6, op.out_h, op.out_w) == reference_shape(conv_model(**attrs), feeds)


def test_conv_same_padding_asymmetric_split():
    # 8 wide, kernel 4, stride 1: 3 padding columns; SAME_UPPER puts the odd one at the end.
    upper, _ = import_onnx(conv_model(in_hw=(8, 8), kernel=(4, 4), auto_pad="SAME_UPPER"))
    lower, _ = import_onnx(conv_model(in_hw=(8, 8), kernel=(4, 4), auto_pad="SAME_LOWER"))
    (u,), (lo,) = upper.ops, lower.ops
    assert (u.pad_top, u.pad_bottom, u.pad_left, u.pad_right) == (1, 2, 1, 2)
    assert (lo.pad_top, lo.pad_bottom, lo.pad_left, lo.pad_right) == (2, 1, 2, 1)
    assert (u.out_h, u.out_w) == (lo.out_h, lo.out_w) == (8, 8)


@settings(max_examples=40, deadline=None)
@given(
    size=st.tuples(st.integers(1, 12), st.integers(1, 12)),
    kernel=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    dilation=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    pads=st.tuples(*[st.integers(0, 3)] * 4),
    auto_pad=st.sampled_from(["NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"]),
    groups=st.sampled_from([1, 2, 4]),
)
def test_conv_attributes_match_onnx_spec(size, kernel, stride, dilation, pads, auto_pad, groups):
    attrs = dict(strides=list(stride), dilations=list(dilation), auto_pad=auto_pad)
    if auto_pad == "NOTSET":
        attrs["pads"] = list(pads)
    outs = [onnx_conv_out(size[i], kernel[i], stride[i], dilation[i], pads[i], pads[i + 2],
                          auto_pad) for i in range(2)]
    model = conv_model(in_hw=size, cin=4, cout=8, kernel=kernel, groups=groups, **attrs)
    if min(outs) < 1:
        with pytest.raises(OnnxImportError):
            import_onnx(model)
        return
    (op,) = import_onnx(model)[0].ops
    assert (op.out_h, op.out_w) == tuple(outs)
    assert (op.in_channels, op.out_channels, op.groups) == (4, 8, groups)
    assert (op.kernel_h, op.kernel_w, op.dilation_h, op.dilation_w) == kernel + dilation
    assert op.macs == 8 * outs[0] * outs[1] * kernel[0] * kernel[1] * (4 // groups)


def test_depthwise_and_1d_conv():
    (op,) = import_onnx(conv_model(cin=8, cout=8, groups=8, pads=[1, 1, 1, 1]))[0].ops
    assert op.is_depthwise and op.gemm_shape().count == 8 and (op.out_h, op.out_w) == (9, 11)
    net = Net()
    y = net.node("Conv", ["x", net.weight("w", (16, 4, 5))], "conv1d", strides=[2], pads=[2, 1])
    (op,) = import_onnx(net.model({"x": [2, 4, 30]}, [y]))[0].ops
    assert (op.in_h, op.kernel_h, op.in_w, op.kernel_w, op.pad_left, op.pad_right) == (
        1, 1, 30, 5, 2, 1)
    assert (op.out_h, op.out_w, op.batch) == (1, 15, 2)


def test_pools_ceil_mode_and_global():
    net = Net()
    y = net.node("MaxPool", ["x"], "pool", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    y = net.node("AveragePool", [y], "avg", kernel_shape=[2, 2], auto_pad="SAME_UPPER",
                 strides=[2, 2])
    y = net.node("ReduceMean", [y, net.const("hw", [2, 3])], "gap", keepdims=0)
    model = net.model({"x": [1, 8, 56, 56]}, [y])
    pool, avg, gap = import_onnx(model)[0].ops
    ref = zoo.googlenet().op("maxpool1")  # torchvision ceil-mode pool, same 3/2 window
    assert (pool.out_h, pool.pad_bottom) == (28, 1) and pool.kind == "max"
    assert isinstance(ref, Pool) and ref.kind == "max"
    assert (avg.out_h, avg.out_w, avg.kind) == (14, 14, "avg")
    assert (gap.kind, gap.kernel_h, gap.kernel_w, gap.out_h, gap.inputs) == ("avg", 14, 14, 1,
                                                                               ("avg",))


# --- GEMMs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("a, b, weight, expected", [
    ((5, 6), (6, 7), True, (1, 5, 7, 6)),
    ((2, 3, 5, 6), (6, 7), True, (1, 30, 7, 6)),  # weight GEMM: leading dims fold into m
    ((2, 1, 5, 6), (3, 6, 7), False, (6, 5, 7, 6)),  # batch broadcast (2, 1) x (3,) -> 6
    ((4, 5, 6), (1, 6, 7), False, (1, 20, 7, 6)),  # B shared by every batch
    ((6,), (2, 6, 7), False, (2, 1, 7, 6)),  # 1-D A: a row vector
    ((3, 5, 6), (6,), True, (1, 15, 1, 6)),  # 1-D B: a column vector
])
def test_matmul_broadcast(a, b, weight, expected):
    net = Net()
    rhs = net.weight("w", b) if weight else "b"
    y = net.node("MatMul", ["a", rhs], "mm")
    inputs = {"a": list(a)} if weight else {"a": list(a), "b": list(b)}
    (op,) = import_onnx(net.model(inputs, [y]))[0].ops
    assert (op.batch, op.m, op.n, op.k) == expected
    assert op.macs == math.prod(reference_shape(
        net.model(inputs, [y]), {k: np.ones(v, np.float32) for k, v in inputs.items()})) * 6


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm_transposes(trans_a, trans_b):
    net = Net()
    w = net.weight("w", (10, 7) if trans_b else (7, 10))
    y = net.node("Gemm", ["a", w, net.weight("bias", (10,))], "fc", transA=trans_a,
                 transB=trans_b)
    (op,) = import_onnx(net.model({"a": [7, 3] if trans_a else [3, 7]}, [y]))[0].ops
    assert (op.m, op.n, op.k, op.inputs) == (3, 10, 7, ())


def test_einsum_attention_scores():
    net = Net()
    y = net.node("Einsum", ["q", "k"], "scores", equation="bhqd,bhkd->bhqk")
    z = net.node("Einsum", [y, "w"], "proj", equation="...k,kn")
    model = net.model({"q": [2, 4, 16, 8], "k": [2, 4, 16, 8], "w": [16, 5]}, [z])
    scores, proj = import_onnx(model)[0].ops
    assert (scores.batch, scores.m, scores.n, scores.k) == (8, 16, 16, 8)
    assert (proj.batch, proj.m, proj.n, proj.k, proj.inputs) == (1, 2 * 4 * 16, 5, 16,
                                                                 ("scores",))


@pytest.mark.parametrize("layout", ["4d", "3d_gqa"])
def test_fused_attention_op(layout):
    from compiler.attention import attention_ops

    b, s, heads, kv_heads, dh = 2, 16, 8, 2, 32
    net = Net()
    if layout == "4d":
        shapes = {"q": [b, heads, s, dh], "k": [b, heads, s, dh], "v": [b, heads, s, dh]}
        y = net.node("Attention", ["q", "k", "v"], "attn")
    else:
        shapes = {"q": [b, s, heads * dh], "k": [b, s, kv_heads * dh],
                  "v": [b, s, kv_heads * dh]}
        y = net.node("Attention", ["q", "k", "v"], "attn", q_num_heads=heads,
                     kv_num_heads=kv_heads)
    model = net.model(shapes, [y])
    model.opset_import[0].version = 24
    graph, _ = import_onnx(model)
    gold = {op.name: op for op in attention_ops("attn", seq_len=s, d_model=heads * dh,
                                                heads=heads, batch=b)}
    assert [op.name for op in graph] == ["attn.scores", "attn.softmax", "attn.context"]
    scores, softmax, context = graph.ops
    for op in (scores, context):
        ref = gold[op.name]
        assert (op.batch, op.m, op.n, op.k) == (ref.batch, ref.m, ref.n, ref.k)
    assert softmax == gold["attn.softmax"]
    assert (scores.inputs, context.inputs) == ((), ("attn.softmax",))  # q, k, v: graph inputs


def test_conv_transpose_is_col2im_gemm():
    net = Net()
    y = net.node("ConvTranspose", ["x", net.weight("w", (8, 3, 4, 4))], "up", strides=[2, 2],
                 pads=[1, 1, 1, 1])
    gemm, col2im = import_onnx(net.model({"x": [1, 8, 5, 5]}, [y]))[0].ops
    assert (gemm.batch, gemm.m, gemm.n, gemm.k) == (1, 25, 3 * 16, 8)
    assert (col2im.op, col2im.elements, col2im.inputs) == ("col2im", 3 * 10 * 10, ("up",))


# --- folding, activations, data movement --------------------------------------------------


def test_bn_and_activation_folding_rules():
    net = Net()
    stats = [net.weight(f"s{i}", (4,)) for i in range(4)]
    x = net.node("BatchNormalization", ["x", *stats], "bn_on_input")  # nothing to fold into
    c = net.node("Conv", [x, net.weight("w", (4, 4, 1, 1))], "conv")
    a = net.node("BatchNormalization", [c, *stats], "bn")  # folds into conv
    a = net.node("Clip", [a, net.const("lo", 0.0, np.float32), net.const("hi", 6.0, np.float32)],
                 "relu6")
    b = net.node("Sigmoid", [a], "sigmoid")  # transcendental: stays
    m = net.node("Mul", [a, b], "swish")  # with the Sigmoid, one SiLU
    r = net.node("Relu", [m], "relu")  # folds into the SiLU
    t = net.node("Mul", [r, net.weight("scale", (1, 4, 1, 1))], "scale")  # folds (affine)
    u = net.node("Relu", [t], "relu_again")  # t is read twice below: cannot fold
    u2 = net.node("Add", [t, u], "sum")
    graph, report = import_onnx(net.model({"x": [1, 4, 6, 6]}, [u2]))
    kinds = [(type(op).__name__, op.work().name if op.gemm_shape() is None else None, op.name,
              op.inputs) for op in graph]
    assert kinds == [
        ("Eltwise", "batchnorm", "bn_on_input", ()),
        ("Conv2d", None, "conv", ("bn_on_input",)),
        ("Activation", "silu", "sigmoid", ("conv",)),
        ("Activation", "relu", "relu_again", ("sigmoid",)),
        ("Binary", "add", "sum", ("sigmoid", "relu_again")),
    ]
    assert report.folded == (("BatchNormalization", "bn"), ("Clip", "relu6"), ("Relu", "relu"),
                             ("Mul", "scale"))
    assert report.fused_patterns == (("silu", "sigmoid", 2),)


def test_moves_and_views():
    net = Net()
    a = net.node("Conv", ["x", net.weight("w", (4, 4, 1, 1))], "conv")
    c = net.node("Concat", [a, "x"], "cat", axis=1)
    s = net.node("Reshape", [c, net.const("shape", [1, 8, 36])], "flat")
    s = net.node("Transpose", [s], "t", perm=[0, 2, 1])
    v = net.node("Unsqueeze", [s, net.const("axis", [0])], "unsq")
    v = net.node("Transpose", [v], "noop_t", perm=[1, 0, 2, 3])  # moves size-1 axes only
    p = net.node("Split", [v, net.const("halves", [4, 4])], "split", outputs=2, axis=3)
    q = net.node("Pad", [p, net.const("pads", [0, 0, 1, 0, 0, 0, 1, 0])], "pad")
    graph, report = import_onnx(net.model({"x": [1, 4, 6, 6]}, [q]))
    assert [(op.name, getattr(op, "kind", None), op.inputs) for op in graph] == [
        ("conv", None, ()), ("cat", "concat", ("conv",)), ("t", "transpose", ("cat",)),
        ("split", "split", ("t",)), ("pad", "pad", ("split",)),
    ]
    assert graph.op("split").elements == 288 and graph.op("pad").elements == 38 * 4
    assert report.moves == (("Concat", "cat"), ("Transpose", "t"), ("Split", "split"),
                            ("Pad", "pad"))
    assert {name for _, name in report.elided} >= {"flat", "unsq", "noop_t"}


# --- unsupported ops, batch, bad files ------------------------------------------------------


def unsupported_model() -> onnx.ModelProto:
    net = Net()
    y = net.node("Conv", ["x", net.weight("w", (4, 4, 3, 3))], "conv", pads=[1, 1, 1, 1])
    y = net.node("Foo", [y], "custom_0", domain="com.example")
    y = net.node("TopK", [y, net.const("k", [6])], "topk_0", outputs=2, axis=-1)
    y = net.node("TopK", [y, net.const("k2", [6])], "topk_1", outputs=2, axis=-1)
    y = net.node("Relu", [y], "relu")
    y = net.node("Conv", [y, net.weight("w2", (2, 4, 1, 1))], "conv2")
    model = net.model({"x": ["N", 4, 6, 6]}, [y], opsets={"com.example": 1})
    # As exporters do for custom ops: the output shape, in the graph's own symbols.
    model.graph.value_info.append(
        helper.make_tensor_value_info("custom_0:0", TensorProto.FLOAT, ["N", 4, 6, 6]))
    return model


def test_unsupported_ops_listed_in_one_error():
    with pytest.raises(OnnxImportError) as info:
        import_onnx(unsupported_model())
    assert str(info.value) == (
        "ONNX model 'net': unsupported ONNX ops: TopK (nodes topk_0, topk_1), "
        "com.example.Foo (node custom_0); run with --skip-unsupported "
        "(skip_unsupported=True) to skip them"
    )


def test_skip_unsupported_rewires_consumers():
    graph, report = import_onnx(unsupported_model(), skip_unsupported=True, batch=4)
    assert report.skipped == (("com.example.Foo", "custom_0"), ("TopK", "topk_0"),
                              ("TopK", "topk_1"))
    conv, relu, conv2 = graph.ops  # Relu cannot fold: its producer is no longer its input
    assert (relu.fn, relu.inputs, relu.elements) == ("relu", ("conv",), 4 * 4 * 6 * 6)
    assert (conv2.inputs, conv2.batch) == (("relu",), 4)


def test_symbolic_batch_and_dims():
    model = conv_model(batch="batch_size")
    for batch, expected in ((None, 1), (8, 8)):
        (op,) = import_onnx(model, batch=batch)[0].ops
        assert op.batch == expected
    with pytest.raises(OnnxImportError, match=r"batch = 2 cannot be applied: every graph "
                                              r"input has a fixed first dimension \('x' has 1\)"):
        import_onnx(conv_model(batch=1), batch=2)
    with pytest.raises(OnnxImportError, match=r"axis 2 is symbolic \('height'\).*: give its "
                                              r"size with npulab run --dim height=SIZE \(Python: "
                                              r"dims=\{'height': SIZE\}\)$"):
        import_onnx(conv_model(in_hw=("height", 9)))
    (op,) = import_onnx(conv_model(in_hw=("height", 9)), dims={"height": 5})[0].ops
    assert (op.in_h, op.in_w) == (5, 9)
    with pytest.raises(OnnxImportError, match=r"dims\['width'\] \(--dim width=\.\.\.\): no graph "
                                              r"input has a symbolic dimension of that name; its "
                                              r"symbolic dimensions: height$"):
        import_onnx(conv_model(in_hw=("height", 9)), dims={"height": 5, "width": 3})
    with pytest.raises(OnnxImportError, match=r"symbolic dimensions: none$"):
        import_onnx(conv_model(), dims={"height": 5})
    with pytest.raises(OnnxImportError, match="batch = 0"):
        import_onnx(model, batch=0)


def test_bad_files(tmp_path):
    garbage = tmp_path / "model.onnx"
    garbage.write_bytes(b"\x08\x07this is not a protobuf\xff\xff")
    with pytest.raises(OnnxImportError, match=f"^{garbage}: not an ONNX model"):
        import_onnx(garbage)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(OnnxImportError, match="empty.onnx: not an ONNX model"):
        import_onnx(str(empty))
    with pytest.raises(OnnxImportError, match="missing.onnx: no such file"):
        import_onnx(tmp_path / "missing.onnx")
    with pytest.raises(TypeError):
        import_onnx(42)


def test_unresolvable_shape_names_file_and_node(tmp_path):
    net = Net()
    y = net.node("Foo", ["x"], "mystery", domain="com.example")
    y = net.node("Relu", [y], "relu")
    path = tmp_path / "net.onnx"
    onnx.save(net.model({"x": [1, 8]}, [y], opsets={"com.example": 1}), path)
    with pytest.raises(OnnxImportError) as info:
        import_onnx(path, skip_unsupported=True)
    assert str(info.value).startswith(
        f"{path}: node 'relu' (Relu): the shape of 'relu:0' is unknown after ONNX shape "
        "inference (it depends on 'mystery:0', output of node 'mystery' (com.example.Foo), "
        "whose shape is unknown)")


def test_file_round_trip_and_report(tmp_path):
    path = tmp_path / "resnet18.onnx"
    onnx.save(onnx_resnet((2, 2, 2, 2), False), path)
    graph, report = import_onnx(str(path))
    assert graph.name == "resnet18" and graph.macs == zoo.resnet18().macs
    assert isinstance(report, OnnxImportReport)
    assert report.summary().startswith("folded 37 (BatchNormalization 20, Relu 17); moves 0;")


def test_external_data_weights_stay_on_disk(tmp_path):
    path = tmp_path / "r18.onnx"
    onnx.save(onnx_resnet((2, 2, 2, 2), False, flatten="shape"), path,
              save_as_external_data=True, all_tensors_to_one_file=True, location="r18.data",
              size_threshold=0)  # even the Reshape's shape constants live in r18.data
    graph, _ = import_onnx(path, batch=2)
    assert graph.ops == zoo.resnet18(batch=2).ops


def test_missing_external_data_file_is_one_line_naming_it(tmp_path):
    path = tmp_path / "r18.onnx"
    model = onnx_resnet((2, 2, 2, 2), False, flatten="shape")
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="r18.data", size_threshold=0)  # shape constants in r18.data too
    (tmp_path / "r18.data").unlink()
    with pytest.raises(OnnxImportError) as exc:
        import_onnx(path)
    msg = str(exc.value)
    assert re.fullmatch(rf"{re.escape(str(path))}: initializer '[^']+': its data is in the "
                        rf"external file '{re.escape(str(tmp_path / 'r18.data'))}', which does "
                        r"not exist; "
                        r"keep the model's data files next to it", msg), msg
    (tmp_path / "r18.data").mkdir()
    with pytest.raises(OnnxImportError, match="r18.data', which is not a file"):
        import_onnx(path)
    # only weights external (more than 4096 elements), their file missing: only dims matter
    big = tmp_path / "big.onnx"
    model = onnx_resnet((2, 2, 2, 2), False, flatten="shape")  # onnx.save changed the first
    onnx.save(model, big, save_as_external_data=True, all_tensors_to_one_file=True,
              location="big.data", size_threshold=4 * 4096 + 4)
    (tmp_path / "big.data").unlink()
    assert import_onnx(big, batch=2)[0].ops == zoo.resnet18(batch=2).ops


def test_embedding_gather_unsorted_nodes_constant_weights():
    net = Net()
    table = net.weight("embed", (1000, 64))
    w = helper.make_tensor("w", TensorProto.FLOAT, [64, 32], np.zeros(64 * 32, np.float32))
    net.node("Constant", [], "w_const", value=w)
    e = net.node("Gather", [table, "ids"], "embed_lookup", axis=0)
    y = net.node("MatMul", [e, "w_const:0"], "proj")
    net.nodes.reverse()  # exporters should sort nodes topologically; not all do
    model = net.model({"ids": ["N", 16]}, [y])
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.INT64
    model.graph.input.append(helper.make_tensor_value_info("embed", TensorProto.FLOAT,
                                                           [1000, 64]))  # IR v3 style
    before = model.SerializeToString()
    graph, report = import_onnx(model, batch=2)
    gather, proj = graph.ops
    assert (gather.kind, gather.elements, gather.inputs) == ("gather", 2 * 16 * 64, ())
    assert (proj.m, proj.n, proj.k, proj.inputs) == (32, 32, 64, ("embed_lookup",))
    assert report.elided == (("Constant", "w_const"),)
    assert model.SerializeToString() == before  # the caller's model is not modified


def test_move_op_validation():
    assert Move(name="m", kind="concat", elements=4).macs == 0
    assert Move(name="m", kind="concat", elements=4).gemm_shape() is None
    with pytest.raises(IRError, match="elements"):
        Move(name="m", kind="concat", elements=0)
    with pytest.raises(IRError, match="kind"):
        Move(name="m", kind="", elements=1)
    assert isinstance(Eltwise(name="e", op="add", elements=1), Eltwise)


def test_docs_example_runs(capsys):
    doc = (Path(__file__).resolve().parents[2] / "docs" / "onnx.md").read_text()
    code = next(block for block in re.findall(r"```python\n(.*?)```", doc, re.S)
                if "batch=4" in block)  # the import example
    exec(compile(code, "docs/onnx.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == ("folded 2 (BatchNormalization 1, Relu 1); moves 0; elided 1 "
                           "(Flatten 1); skipped 0; fused_patterns 0")
    assert printed[-2] == "Gemm(name='fc', m=4, n=10, k=16, batch=1, inputs=('pool',))"
    assert printed[-1] in doc and printed[-2] in doc


# ---- sparsity from the weights (issue 27) ---------------------------------------------------

def test_sparsity_from_weights_reads_each_layers_n_m(tmp_path):
    """A conv pruned 1:4 along its input channels (NHWC order) and a linear layer (MatMul +
    Add) pruned 2:4 along K: the import finds each one's N:M from the
    weights, also when they are stored as external data; without the flag both are dense."""
    from hw.sparsity import prune_n_m
    rng = np.random.default_rng(0)
    cw = rng.normal(size=(16, 8, 3, 3)).astype(np.float32)
    nhwc, _ = prune_n_m(cw.transpose(0, 2, 3, 1).reshape(16, -1), 1, 4, axis=1)
    cw = np.ascontiguousarray(nhwc.reshape(16, 3, 3, 8).transpose(0, 3, 1, 2))
    w, _ = prune_n_m(rng.normal(size=(64, 32)).astype(np.float32), 2, 4, axis=0)
    nodes = [helper.make_node("Conv", ["x", "cw"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MatMul", ["h", "w"], ["mm"]),
             helper.make_node("Add", ["mm", "b"], ["y"])]
    graph = helper.make_graph(
        nodes, "pruned",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8]),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(cw, "cw"), numpy_helper.from_array(w, "w"),
         numpy_helper.from_array(np.zeros(32, np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "pruned.onnx"
    onnx.save(model, path, save_as_external_data=True, size_threshold=0)
    g, _ = import_onnx(path, sparsity_from_weights=True)
    nms = {op.name: op.weight_nm for op in g.ops if op.gemm_shape() is not None}
    assert nms == {"c": (1, 4), "mm": (2, 4)}
    # and the fraction of nonzero weights (what a sparse storage format is sized by)
    dens = {op.name: op.weight_density for op in g.ops if op.gemm_shape() is not None}
    assert dens == {"c": 0.25, "mm": 0.5}
    g, _ = import_onnx(path)
    assert all(getattr(op, "weight_nm", None) is None for op in g.ops)
    assert all(getattr(op, "weight_density", None) is None for op in g.ops)
    with pytest.raises(OnnxImportError, match="sparsity_from_weights = 1: must be True"):
        import_onnx(path, sparsity_from_weights=1)


def test_sparsity_from_weights_reads_only_each_nodes_own_weights():
    """An Einsum after a pruned MatMul keeps its own (dense) weights, one of two activations
    gets none, and a quantized (DequantizeLinear) weight is read through to its integers."""
    from hw.sparsity import prune_n_m
    rng = np.random.default_rng(3)
    w, _ = prune_n_m(rng.normal(size=(64, 32)).astype(np.float32), 2, 4, axis=0)
    q, _ = prune_n_m(rng.integers(-100, 100, (32, 16)).astype(np.int8), 1, 4, axis=0)
    dense = rng.normal(size=(32, 8)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["h", "w"], ["mm"]),
             helper.make_node("Einsum", ["mm", "d"], ["e"], equation="ij,jk->ik"),
             helper.make_node("MatMul", ["h", "w"], ["mm2"]),
             helper.make_node("Einsum", ["mm", "mm2"], ["both"], equation="ij,kj->ik"),
             helper.make_node("DequantizeLinear", ["q", "s"], ["qd"]),
             helper.make_node("MatMul", ["mm", "qd"], ["qm"])]
    graph = helper.make_graph(
        nodes, "mixed", [helper.make_tensor_value_info("h", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in ("e", "both", "qm")],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(dense, "d"),
         numpy_helper.from_array(q, "q"), numpy_helper.from_array(np.float32(0.1), "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    g, _ = import_onnx(model, sparsity_from_weights=True)
    facts = {op.name: (op.weight_nm, op.weight_density) for op in g.ops
             if op.gemm_shape() is not None}
    assert facts["mm"] == ((2, 4), 0.5)
    assert facts["e"] == (None, None)          # an Einsum's weights are not read
    assert facts["both"] == (None, None)       # two activations: no stored weights
    assert facts["qm"] == ((1, 4), 0.25)       # through DequantizeLinear to its int8 zeros


def test_sparsity_from_weights_at_the_arrays_group_size(tmp_path):
    """Weights pruned 1:4 and then one kept value of every 16 zeroed look 3:16 over all group
    sizes (3/16 < 1/4), which a 4-group array runs as 3:4; asked at M = 4 (npulab run passes
    the chip's array.sparse_m) they are 1:4."""
    from hw.sparsity import array_nm, prune_n_m
    rng = np.random.default_rng(4)
    w, _ = prune_n_m(rng.normal(size=(64, 32)).astype(np.float32), 1, 4, axis=0)
    g = w.reshape(4, 16, 32)
    for i, j in np.ndindex(4, 32):
        g[i, np.flatnonzero(g[i, :, j])[0], j] = 0
    nodes = [helper.make_node("MatMul", ["h", "w"], ["mm"])]
    graph = helper.make_graph(
        nodes, "requantized", [helper.make_tensor_value_info("h", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("mm", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(g.reshape(64, 32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    best = import_onnx(model, sparsity_from_weights=True)[0].ops[0].weight_nm
    at4 = import_onnx(model, sparsity_from_weights=True, nm_groups=(4,))[0].ops[0].weight_nm
    assert best == (3, 16) and array_nm(best, 4) == (3, 4) and at4 == (1, 4)
    # npulab run reads the weights at its chip's group size
    import json

    from npulab.cli import main
    path = tmp_path / "requantized.onnx"
    onnx.save(model, path)
    assert main(["run", "--onnx", str(path), "--sparsity-from-weights", "--set",
                 "array.sparse_m=4", "-q", "-o", str(tmp_path / "out")]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["run"]["layers"][0]["tiling"].endswith("sparse 1:4")
    with pytest.raises(OnnxImportError, match="nm_groups = \\(1,\\): must be a tuple"):
        import_onnx(model, sparsity_from_weights=True, nm_groups=(1,))


def test_sparsity_from_weights_skips_weights_with_a_nonzero_zero_point():
    """With zero point 128, a stored 128 is a real zero: such weights are left dense rather
    than read as if 0 were zero; zero point 0 reads as usual."""
    from hw.sparsity import prune_n_m
    rng = np.random.default_rng(5)
    w, _ = prune_n_m(rng.integers(-100, 100, (32, 16)), 1, 2, axis=0)
    out = {}
    for zp in (0, 128):
        nodes = [helper.make_node("MatMulInteger", ["h", "w", "hz", "wz"], ["y"])]
        graph = helper.make_graph(
            nodes, "q", [helper.make_tensor_value_info("h", TensorProto.UINT8, [4, 32])],
            [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
            [numpy_helper.from_array((w + zp).astype(np.uint8 if zp else np.int8), "w"),
             numpy_helper.from_array(np.uint8(0), "hz"),
             numpy_helper.from_array(np.array(zp, np.uint8 if zp else np.int8), "wz")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        op = import_onnx(model, sparsity_from_weights=True)[0].ops[0]
        out[zp] = (op.weight_nm, op.weight_density)
    assert out == {0: ((1, 2), 0.5), 128: (None, None)}


def test_sparsity_from_weights_finds_row_wise_n_m():
    """Output channels pruned to different N (row-wise N:M): a MatMul whose first 24 columns
    are 2:4 and last 8 are 1:4, and a transB Gemm the same by rows, import with weight_nm =
    (2, 4) and the mix of channels by N (hw.sparsity.channel_n); a Conv all 1:4 has none."""
    from hw.sparsity import prune_n_m
    rng = np.random.default_rng(5)
    w = rng.normal(size=(64, 32)).astype(np.float32)
    w[:, :24] = prune_n_m(w[:, :24], 2, 4, axis=0)[0]
    w[:, 24:] = prune_n_m(w[:, 24:], 1, 4, axis=0)[0]
    cw, _ = prune_n_m(rng.normal(size=(16, 72)).astype(np.float32), 1, 4, axis=1)
    cw = np.ascontiguousarray(cw.reshape(16, 3, 3, 8).transpose(0, 3, 1, 2))
    nodes = [helper.make_node("MatMul", ["h", "w"], ["mm"]),
             helper.make_node("Gemm", ["h", "wt"], ["gm"], transB=1),
             helper.make_node("Conv", ["x", "cw"], ["c"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "rows", [helper.make_tensor_value_info("h", TensorProto.FLOAT, [4, 64]),
                        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
        [helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in ("mm", "gm", "c")],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w.T.copy(), "wt"),
         numpy_helper.from_array(cw, "cw")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    g, _ = import_onnx(model, sparsity_from_weights=True, nm_groups=(4,))
    facts = {op.name: (op.weight_nm, op.weight_nm_rows) for op in g.ops}
    assert facts["mm"] == facts["gm"] == ((2, 4), ((2, 24), (1, 8)))
    assert facts["c"] == ((1, 4), None)


def test_sparsity_from_weights_finds_sparse_channels_beside_dense_ones():
    """8 output channels keep every weight and 24 are 1:4: no layer-wise N:M exists, so the
    import takes the group size whose channels keep the fewest weights on average and gives
    the layer weight_nm = (M, M) with the mix; the dense channels then run dense."""
    from hw.sparsity import prune_n_m
    rng = np.random.default_rng(6)
    w = rng.normal(size=(64, 32)).astype(np.float32) + 5.0        # no zeros
    w[:, 8:] = prune_n_m(w[:, 8:], 1, 4, axis=0)[0]
    nodes = [helper.make_node("MatMul", ["h", "w"], ["mm"])]
    graph = helper.make_graph(
        nodes, "dense_and_sparse", [helper.make_tensor_value_info("h", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("mm", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for groups in ((4,), None):
        g, _ = import_onnx(model, sparsity_from_weights=True, nm_groups=groups)
        op = g.ops[0]
        assert (op.weight_nm, op.weight_nm_rows) == ((4, 4), ((4, 8), (1, 24))), groups
