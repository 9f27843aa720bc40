"""ONNX frontend: the decompositions exporters emit, each imported as one typed vector op
(compiler/frontends/onnx_patterns.py).

Every chain below is written as an exporter writes it; the gold model is the vector unit's
functional model (hw.vector.functional): ONNX's reference evaluator runs each chain and must
compute the op it is imported as. Near misses (a second reader, a wrong constant, a
non-trailing axis) must import node by node.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from compiler.frontends.onnx_import import import_onnx  # noqa: E402
from compiler.ir import Activation, Gemm, Norm  # noqa: E402
from hw.vector import functional  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "onnx_import_tests", Path(__file__).with_name("test_onnx_import.py"))
_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tests)
Net, onnx_bert_layer = _tests.Net, _tests.onnx_bert_layer

SHAPE = [2, 8, 16]
RNG = np.random.default_rng(23)
GAMMA, BETA = RNG.standard_normal(16).astype(np.float32), RNG.standard_normal(16).astype(np.float32)


def scalar(net: Net, name: str, value: float, node: bool = False) -> str:
    """A float constant: an initializer, or (``node``) a Constant node as torch often writes."""
    if node:
        tensor = numpy_helper.from_array(np.array(value, np.float32))
        return net.node("Constant", [], name, value=tensor)
    return net.const(name, value, np.float32)


def layer_norm(net: Net, name: str, x: str, gamma: str | None = None, beta: str | None = None,
               *, variance: str = "centered", axes=(-1,), eps: float = 1e-5, two: float = 2.0,
               casts: bool = False, opset: int = 21) -> str:
    """PyTorch's layer_norm below opset 17; ``variance="moments"`` is E[x^2] - E[x]^2 (its
    first version). The first ReduceMean is named ``name``; ``casts`` adds fp16-export casts."""
    axes_input = [net.const(f"{name}.axes", list(axes))] if opset >= 18 else []
    attrs = {} if opset >= 18 else {"axes": list(axes)}  # an attribute before opset 18

    def mean(t: str, label: str) -> str:
        return net.node("ReduceMean", [t, *axes_input], label, **attrs)

    if casts:
        x = net.node("Cast", [x], f"{name}.cast_in", to=TensorProto.FLOAT)
    mu = mean(x, name)
    centered = net.node("Sub", [x, mu], f"{name}.sub")
    square = scalar(net, f"{name}.two", two)
    if variance == "centered":
        var = mean(net.node("Pow", [centered, square], f"{name}.pow"), f"{name}.var")
    else:
        ex2 = mean(net.node("Pow", [x, square], f"{name}.pow"), f"{name}.ex2")
        var = net.node("Sub", [ex2, net.node("Pow", [mu, square], f"{name}.mean_sq")],
                       f"{name}.var")
    var = net.node("Add", [var, scalar(net, f"{name}.eps", eps)], f"{name}.eps_add")
    y = net.node("Div", [centered, net.node("Sqrt", [var], f"{name}.sqrt")], f"{name}.div")
    if casts:
        y = net.node("Cast", [y], f"{name}.cast_out", to=TensorProto.FLOAT)
    if gamma:
        y = net.node("Mul", [y, gamma], f"{name}.gamma")
    if beta:
        y = net.node("Add", [y, beta], f"{name}.beta")
    return y


def rms_norm(net: Net, name: str, x: str, gamma: str | None = None, *, form: str = "div",
             gamma_first: bool = True) -> str:
    """``x * rsqrt(mean(x^2) + eps) * w`` (Llama, T5): rsqrt as Div(1, Sqrt) (``div_one``,
    torch's export), Reciprocal(Sqrt) (``reciprocal``) or a Div by the Sqrt (``div``)."""
    var = net.node("ReduceMean", [net.node("Pow", [x, scalar(net, f"{name}.two", 2.0)], name),
                                  net.const(f"{name}.axes", [-1])], f"{name}.var")
    var = net.node("Add", [var, scalar(net, f"{name}.eps", 1e-6)], f"{name}.eps_add")
    root = net.node("Sqrt", [var], f"{name}.sqrt")
    if form == "div":
        y = net.node("Div", [x, root], f"{name}.div")
    else:
        inverse = (net.node("Reciprocal", [root], f"{name}.rsqrt") if form == "reciprocal" else
                   net.node("Div", [scalar(net, f"{name}.one", 1.0), root], f"{name}.rsqrt"))
        y = net.node("Mul", [x, inverse], f"{name}.mul")
    if gamma:
        y = net.node("Mul", [gamma, y] if gamma_first else [y, gamma], f"{name}.gamma")
    return y


def gelu_erf(net: Net, name: str, x: str, form: str = "div", *, sqrt2: float = math.sqrt(2),
             half: float = 0.5, const_nodes: bool = False) -> str:
    """PyTorch's GELU below opset 20: x / sqrt 2 (``mul``: x * 0.7071) -> Erf -> Add(1) ->
    Mul(x) -> Mul(0.5); ``half_first`` is (0.5 x) * gate, ``half_gate`` x * (gate * 0.5)."""
    def c(label: str, value: float) -> str:
        return scalar(net, f"{name}.const_{label}", value, const_nodes)

    if form == "mul":
        z = net.node("Mul", [x, c("inv_sqrt2", 1 / sqrt2)], name)
    else:
        z = net.node("Div", [x, c("sqrt2", sqrt2)], name)
    if form == "half_first":
        x_half = net.node("Mul", [x, c("half", half)], f"{name}.half")
    gate = net.node("Add", [net.node("Erf", [z], f"{name}.erf"), c("one", 1.0)], f"{name}.add")
    if form == "half_first":
        return net.node("Mul", [x_half, gate], f"{name}.mul")
    if form == "half_gate":
        return net.node("Mul", [x, net.node("Mul", [gate, c("half", half)], f"{name}.half")],
                        f"{name}.mul")
    return net.node("Mul", [net.node("Mul", [x, gate], f"{name}.mul"), c("half", half)],
                    f"{name}.half")


def gelu_tanh(net: Net, name: str, x: str, cube: str = "pow", cubic: float = 0.044715) -> str:
    """Hugging Face ``gelu_new`` as torch exports it: 0.5 * x first (named ``name``), then
    Pow(x, 3) (``mul``: x * x * x) -> Mul(0.044715) -> Add(x) -> Mul(sqrt(2/pi)) -> Tanh ->
    Add(1) -> Mul."""
    x_half = net.node("Mul", [scalar(net, f"{name}.half", 0.5), x], name)
    if cube == "pow":
        x3 = net.node("Pow", [x, scalar(net, f"{name}.three", 3.0)], f"{name}.pow")
    else:
        x3 = net.node("Mul", [net.node("Mul", [x, x], f"{name}.x2"), x], f"{name}.x3")
    t = net.node("Mul", [scalar(net, f"{name}.c", cubic), x3], f"{name}.cubic")
    t = net.node("Add", [x, t], f"{name}.inner")
    t = net.node("Mul", [scalar(net, f"{name}.k", math.sqrt(2 / math.pi)), t], f"{name}.scale")
    gate = net.node("Add", [scalar(net, f"{name}.one", 1.0), net.node("Tanh", [t],
                                                                       f"{name}.tanh")],
                    f"{name}.add")
    return net.node("Mul", [x_half, gate], f"{name}.mul")


def silu(net: Net, name: str, x: str) -> str:
    return net.node("Mul", [x, net.node("Sigmoid", [x], name)], f"{name}.mul")


def _gamma_beta(net: Net, shape=(16,)) -> tuple[str, str]:
    """GAMMA and BETA, repeated or cut to ``shape``."""
    return (net.const("gamma", np.resize(GAMMA, shape), np.float32),
            net.const("beta", np.resize(BETA, shape), np.float32))


def _ln(**kw):
    def build(net, x):
        gamma, beta = _gamma_beta(net)
        return layer_norm(net, "ln", x, gamma, beta, **kw)
    return build


def _rms(**kw):
    def build(net, x):
        return rms_norm(net, "rms", x, _gamma_beta(net)[0], **kw)
    return build


LN = Norm(name="ln", kind="layernorm", rows=16, cols=16)
RMS = Norm(name="rms", kind="rmsnorm", rows=16, cols=16)
GELU = Activation(name="gelu", fn="gelu", elements=256)
GELU_TANH = Activation(name="gelu", fn="gelu_tanh", elements=256)


def _ref_ln(x):
    return functional.layernorm(x, GAMMA, BETA, eps=1e-5)


def _ref_rms(x):
    return functional.rmsnorm(x, GAMMA, eps=1e-6)


CHAINS = [  # (build, the IR op, node count, reference)
    pytest.param(_ln(), LN, 9, _ref_ln, id="layernorm"),
    pytest.param(_ln(variance="moments"), LN, 11, _ref_ln, id="layernorm-moments"),
    pytest.param(_ln(casts=True), LN, 11, _ref_ln, id="layernorm-casts"),
    pytest.param(lambda net, x: layer_norm(net, "ln", x), Norm(
        name="ln", kind="layernorm", rows=16, cols=16, affine=False), 7,
        lambda x: functional.layernorm(x), id="layernorm-plain"),
    pytest.param(lambda net, x: layer_norm(net, "ln", x, *_gamma_beta(net, (8, 16)),
                                           axes=(-2, -1)),
                 Norm(name="ln", kind="layernorm", rows=2, cols=128), 9,
                 lambda x: functional.layernorm(x.reshape(2, 128), np.resize(GAMMA, 128),
                                                np.resize(BETA, 128)).reshape(SHAPE),
                 id="layernorm-two-axes"),
    pytest.param(_rms(), RMS, 6, _ref_rms, id="rmsnorm-div"),
    pytest.param(_rms(form="reciprocal"), RMS, 7, _ref_rms, id="rmsnorm-reciprocal"),
    pytest.param(_rms(form="div_one", gamma_first=False), RMS, 7, _ref_rms,
                 id="rmsnorm-div-one"),
    pytest.param(lambda net, x: rms_norm(net, "rms", x), Norm(
        name="rms", kind="rmsnorm", rows=16, cols=16, affine=False), 5,
        lambda x: functional.rmsnorm(x), id="rmsnorm-plain"),
    pytest.param(lambda net, x: gelu_erf(net, "gelu", x), GELU, 5, functional.gelu,
                 id="gelu-div"),
    pytest.param(lambda net, x: gelu_erf(net, "gelu", x, "mul", const_nodes=True), GELU, 5,
                 functional.gelu, id="gelu-mul-constant-nodes"),
    pytest.param(lambda net, x: gelu_erf(net, "gelu", x, "half_first"), GELU, 5,
                 functional.gelu, id="gelu-half-first"),
    pytest.param(lambda net, x: gelu_erf(net, "gelu", x, "half_gate"), GELU, 5,
                 functional.gelu, id="gelu-half-gate"),
    pytest.param(lambda net, x: gelu_tanh(net, "gelu", x), GELU_TANH, 8,
                 lambda x: functional.gelu(x, "tanh"), id="gelu-tanh"),
    pytest.param(lambda net, x: gelu_tanh(net, "gelu", x, cube="mul"), GELU_TANH, 9,
                 lambda x: functional.gelu(x, "tanh"), id="gelu-tanh-mul-cube"),
    pytest.param(lambda net, x: silu(net, "silu", x),
                 Activation(name="silu", fn="silu", elements=256), 2, functional.silu,
                 id="silu"),
]


@pytest.mark.parametrize("build, op, count, reference", CHAINS)
def test_chain_is_one_typed_op(build, op, count, reference):
    net = Net()
    y = build(net, "x")
    model = net.model({"x": SHAPE}, [y])
    graph, report = import_onnx(model)
    assert graph.ops == (op,)
    chain = [n for n in net.nodes if n.op_type != "Constant"]
    assert report.fused == tuple((n.op_type, n.name) for n in chain) and len(chain) == count
    pattern = getattr(op, "kind", None) or op.fn
    assert report.fused_patterns == ((pattern, op.name, count),)
    assert report.folded == report.skipped == report.moves == ()
    x = RNG.standard_normal(SHAPE).astype(np.float32)
    (out,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(out, reference(x), rtol=1e-4, atol=1e-5)


def test_chain_reads_and_feeds_its_neighbours():
    """The op reads the chain's producer and its readers read it; a Relu after it folds."""
    net = Net()
    x = net.node("MatMul", ["x", net.weight("w1", (16, 16))], "fc1")
    gamma, beta = _gamma_beta(net)
    y = layer_norm(net, "ln", x, gamma, beta)
    y = net.node("MatMul", [y, net.weight("w2", (16, 64))], "fc2")
    y = gelu_tanh(net, "act", y)
    y = net.node("Relu", [silu(net, "swish", y)], "relu")
    y = net.node("MatMul", [y, net.weight("w3", (64, 16))], "fc3")
    graph, report = import_onnx(net.model({"x": SHAPE}, [y]))
    assert [(type(op).__name__, op.name, op.inputs) for op in graph] == [
        ("Gemm", "fc1", ()), ("Norm", "ln", ("fc1",)), ("Gemm", "fc2", ("ln",)),
        ("Activation", "act", ("fc2",)), ("Activation", "swish", ("act",)),
        ("Gemm", "fc3", ("swish",)),
    ]
    assert graph.op("act").elements == graph.op("swish").elements == 16 * 64
    assert [p for p, _, _ in report.fused_patterns] == ["layernorm", "gelu_tanh", "silu"]
    assert report.folded == (("Relu", "relu"),)


def test_entry_cast_read_elsewhere_stays_outside():
    net = Net()
    x = net.node("Cast", ["x"], "to_fp32", to=TensorProto.FLOAT)
    y = gelu_erf(net, "gelu", x)
    z = net.node("Relu", [x], "other")
    graph, report = import_onnx(net.model({"x": SHAPE}, [y, z]))
    assert report.fused_patterns == (("gelu", "gelu", 5),)
    assert ("Cast", "to_fp32") in report.elided and ("Cast", "to_fp32") not in report.fused
    assert [(op.name, op.fn, op.inputs) for op in graph] == [("gelu", "gelu", ()),
                                                            ("other", "relu", ())]


def _types(graph) -> list[tuple[str, str | None]]:
    return [(type(op).__name__, getattr(op, "fn", None) or getattr(op, "kind", None))
            for op in graph]


# A layer norm imported node by node; the Add(eps) folds into the variance's Reduce unless
# something else reads the variance, the Mul(gamma) and Add(beta) into the Div.
NODE_BY_NODE_LN = [("Reduce", "mean"), ("Binary", "sub"), ("Activation", "square"),
                   ("Reduce", "mean"), ("Activation", "sqrt"), ("Binary", "div")]
# GELU node by node: the Add(1) folds into the Erf, the Mul(0.5) into the Mul(x).
NODE_BY_NODE_GELU = [("Binary", "div"), ("Activation", "erf"), ("Binary", "mul")]


def _second_reader(tensor: str):
    def build(net, x):
        return [layer_norm(net, "ln", x, *_gamma_beta(net)), tensor]
    return build


@pytest.mark.parametrize("build, types, patterns", [
    pytest.param(_second_reader("ln.var:0"), NODE_BY_NODE_LN[:4] + [("Binary", "add")]
                 + NODE_BY_NODE_LN[4:], (), id="variance-read-twice"),
    # x - mean is read twice: the mean and the Sub stay, the rest is an RMS norm of x - mean
    pytest.param(_second_reader("ln.sub:0"), [("Reduce", "mean"), ("Binary", "sub"),
                                              ("Norm", "rmsnorm")],
                 (("rmsnorm", "ln.pow", 6),), id="centered-read-twice"),
    # the normalized tensor is a graph output: the norm has no gamma, Mul(gamma) is its own op
    pytest.param(_second_reader("ln.div:0"), [("Norm", "layernorm"), ("Binary", "mul")],
                 (("layernorm", "ln", 7),), id="gamma-input-read-twice"),
    pytest.param(lambda net, x: [layer_norm(net, "ln", x, *_gamma_beta(net), axes=(1,))],
                 [("Eltwise", None), ("Binary", "sub"), ("Activation", "square"),
                  ("Eltwise", None), ("Activation", "sqrt"), ("Binary", "div")], (),
                 id="non-trailing-axis"),
    pytest.param(lambda net, x: [layer_norm(net, "ln", x, *_gamma_beta(net), eps=0.5)],
                 NODE_BY_NODE_LN, (), id="eps-too-large"),
    pytest.param(lambda net, x: [layer_norm(net, "ln", x, *_gamma_beta(net), two=3.0)],
                 NODE_BY_NODE_LN[:2] + [("Binary", "pow")] + NODE_BY_NODE_LN[3:], (),
                 id="cube-not-square"),
    # gamma and beta per row, not per column: a norm without them, they fold into it
    pytest.param(lambda net, x: [layer_norm(net, "ln", x, *_gamma_beta(net, (8, 1)))],
                 [("Norm", "layernorm")], (("layernorm", "ln", 7),), id="gamma-per-row"),
    pytest.param(lambda net, x: [gelu_erf(net, "gelu", x, sqrt2=1.5)], NODE_BY_NODE_GELU, (),
                 id="gelu-wrong-sqrt2"),
    pytest.param(lambda net, x: [gelu_erf(net, "gelu", x, half=0.6)], NODE_BY_NODE_GELU, (),
                 id="gelu-wrong-half"),
    pytest.param(lambda net, x: [gelu_erf(net, "gelu", x), "gelu.erf:0"],
                 NODE_BY_NODE_GELU[:2] + [("Binary", "add"), ("Binary", "mul")], (),
                 id="gelu-erf-read-twice"),
    pytest.param(lambda net, x: [gelu_tanh(net, "gelu", x, cubic=0.05)],
                 [("Binary", "mul"), ("Binary", "pow"), ("Binary", "add"), ("Activation", "tanh"),
                  ("Binary", "mul")], (), id="gelu-tanh-wrong-constant"),
    pytest.param(lambda net, x: [silu(net, "silu", x), "silu:0"],
                 [("Activation", "sigmoid"), ("Binary", "mul")], (), id="silu-sigmoid-read-twice"),
    pytest.param(lambda net, x: [net.node("Mul", ["y", net.node("Sigmoid", [x], "silu")],
                                          "silu.mul")],
                 [("Activation", "sigmoid"), ("Binary", "mul")], (), id="silu-other-operand"),
])
def test_near_misses_import_node_by_node(build, types, patterns):
    net = Net()
    outputs = build(net, "x")
    graph, report = import_onnx(net.model({"x": SHAPE, "y": SHAPE}, outputs))
    assert _types(graph) == types
    assert report.fused_patterns == patterns


@pytest.mark.parametrize("exponent, fn", [(2.0, "square"), (0.5, "sqrt"), (-0.5, "rsqrt"),
                                          (-1.0, "reciprocal")])
def test_pow_by_a_constant_is_an_activation(exponent, fn):
    net = Net()
    y = net.node("Pow", ["x", net.const("p", exponent, np.float32)], "pow")
    (op,) = import_onnx(net.model({"x": SHAPE}, [y]))[0].ops
    assert op == Activation(name="pow", fn=fn, elements=256)


def test_sqrt_reciprocal_and_division_of_a_constant():
    net = Net()
    a = net.node("Conv", ["x", net.weight("w", (4, 4, 1, 1))], "conv")
    a = net.node("Div", [net.const("one", 1.0, np.float32), a], "inv")  # 1 / x: reciprocal
    b = net.node("Sqrt", [net.node("Conv", [a, net.weight("w2", (4, 4, 1, 1))], "conv2")],
                 "sqrt")
    c = net.node("Reciprocal", [b], "rcp")
    d = net.node("Div", [net.const("two", 2.0, np.float32),
                         net.node("Conv", [c, net.weight("w3", (4, 4, 1, 1))], "conv3")], "div")
    graph, report = import_onnx(net.model({"x": [1, 4, 6, 6]}, [d]))
    assert _types(graph) == [("Conv2d", None), ("Activation", "reciprocal"), ("Conv2d", None),
                             ("Activation", "sqrt"), ("Activation", "reciprocal"),
                             ("Conv2d", None), ("Binary", "div")]
    assert graph.op("div").other_elements == 1
    assert report.folded == ()  # c / x is not an affine map of x: nothing folds


def test_old_opset_bert_layer_imports_as_the_fused_ops_export():
    """A BERT layer exported below opset 17 (ReduceMean axes as attributes, decomposed layer
    norms and GELU) imports to the same graph as its opset-21 export."""
    def norm(net, name, x, gamma, beta):
        return layer_norm(net, name, x, gamma, beta, opset=13)

    old = onnx_bert_layer(seq=16, d=64, heads=4, ffn=128, norm=norm, gelu=gelu_erf)
    old.opset_import[0].version = 13
    graph, report = import_onnx(old)
    gold, _ = import_onnx(onnx_bert_layer(seq=16, d=64, heads=4, ffn=128))
    assert graph.ops == gold.ops
    assert report.fused_patterns == (("layernorm", "layer.0.ln1", 9),
                                     ("gelu", "layer.0.ffn.gelu", 5),
                                     ("layernorm", "layer.0.ln2", 9))
    assert isinstance(graph.op("layer.0.ln1"), Norm) and isinstance(graph.op("layer.0.ffn.fc1"),
                                                                    Gemm)
    assert report.summary().endswith("fused_patterns 3 (gelu 1, layernorm 2)")

