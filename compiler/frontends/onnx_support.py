"""What the ONNX importer accepts and how it answers: the op tables, the check that names an
unsupported node and why, the error type and the report of what happened to each node.

The tables say how each ONNX op type is imported (see :mod:`compiler.frontends.onnx_import`
for what becomes what); :data:`SUPPORTED` is their union. The small node helpers here name
nodes and shapes the same way in every message.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

__all__ = ["OnnxImportError", "OnnxImportReport"]

# ONNX op type -> IR name, by how the op is imported (see compiler.frontends.onnx_import).
AFFINE = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}
FUSED_ACTIVATIONS = {
    "Relu": "relu", "LeakyRelu": "leaky_relu", "PRelu": "prelu", "Clip": "clip",
    "HardSigmoid": "hard_sigmoid", "HardSwish": "hard_swish", "ThresholdedRelu": "thresholded_relu",
}
ELTWISE = {
    "Sigmoid": "sigmoid", "Tanh": "tanh", "Gelu": "gelu", "Erf": "erf", "Elu": "elu",
    "Selu": "selu", "Celu": "celu", "Softplus": "softplus", "Softsign": "softsign", "Mish": "mish",
    "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Neg": "neg",
    "Abs": "abs", "Sin": "sin", "Cos": "cos", "Floor": "floor", "Ceil": "ceil", "Round": "round",
    "Sign": "sign", "Not": "not", "IsNaN": "isnan", "IsInf": "isinf", "Pow": "pow", "Max": "max",
    "Min": "min", "Sum": "add", "Mean": "mean", "Mod": "mod", "Equal": "equal",
    "Greater": "greater", "Less": "less", "GreaterOrEqual": "greater_equal",
    "LessOrEqual": "less_equal", "And": "and", "Or": "or", "Xor": "xor", "Where": "where",
    "Trilu": "trilu", "Softmax": "softmax", "LogSoftmax": "log_softmax", "Hardmax": "hardmax",
    "LayerNormalization": "layernorm", "RMSNormalization": "rmsnorm",
    "InstanceNormalization": "instancenorm", "GroupNormalization": "groupnorm",
    "LpNormalization": "lpnorm", "MeanVarianceNormalization": "mvn", "LRN": "lrn",
    "BatchNormalization": "batchnorm",
}
REDUCTIONS = {
    "ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max",
    "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod", "ReduceL1": "reduce_l1",
    "ReduceL2": "reduce_l2", "ReduceLogSum": "reduce_log_sum",
    "ReduceLogSumExp": "reduce_log_sum_exp", "ReduceSumSquare": "reduce_sum_square",
    "ArgMax": "argmax", "ArgMin": "argmin",
}
MOVES = {
    "Concat": "concat", "Transpose": "transpose", "Split": "split", "Slice": "slice", "Pad": "pad",
    "Gather": "gather", "GatherElements": "gather", "GatherND": "gather", "Expand": "expand",
    "Tile": "tile", "DepthToSpace": "depth_to_space", "SpaceToDepth": "space_to_depth",
    "Resize": "resize", "Upsample": "resize", "ScatterND": "scatter",
    "ScatterElements": "scatter",
}
ELIDED = {
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Cast", "CastLike",
    "QuantizeLinear", "DequantizeLinear",
}
POOLS = {"MaxPool": "max", "AveragePool": "avg", "GlobalMaxPool": "max",
         "GlobalAveragePool": "avg"}
# Where the data and weight operands sit, per conv/matmul flavour (quantized ones included).
CONVS = {"Conv": (0, 1), "ConvInteger": (0, 1), "QLinearConv": (0, 3)}
MATMULS = {"MatMul": (0, 1), "MatMulInteger": (0, 1), "QLinearMatMul": (0, 3)}
OTHER = {"Gemm", "ConvTranspose", "Einsum", "Attention"}
SUPPORTED = (set(AFFINE) | set(FUSED_ACTIVATIONS) | set(ELTWISE) | set(REDUCTIONS)
             | set(MOVES) | ELIDED | set(POOLS) | set(CONVS) | set(MATMULS) | OTHER)


class OnnxImportError(ValueError):
    """An ONNX model cannot be imported; the message names the file, the node and the fix."""


@dataclass(frozen=True)
class OnnxImportReport:
    """What :func:`import_onnx` did with the nodes that did not become ops one to one.

    Each entry is ``(op_type, node name)``; a node without a name is named after its first
    output tensor, as its IR op is.

    Attributes
    ----------
    skipped:
        Unsupported nodes skipped with ``skip_unsupported=True``; their consumers read the
        skipped node's inputs instead.
    folded:
        Nodes folded into the op producing their input: BatchNormalization, Add/Sub/Mul/Div
        by a constant, piecewise-linear activations.
    moves:
        Data-movement nodes kept as :class:`~compiler.ir.Move` ops.
    elided:
        Nodes that add no op: byte-preserving views, precision casts, and constants computed
        at import time (``Constant``, ``Shape``, shape arithmetic).
    fused:
        The nodes of the recognised decompositions (:mod:`~compiler.frontends.onnx_patterns`),
        each chain imported as one typed op named after its first node.
    fused_patterns:
        One entry per recognised chain: ``(pattern, first node, node count)``, ``pattern``
        being ``layernorm``, ``rmsnorm``, ``gelu``, ``gelu_tanh`` or ``silu`` and the count
        including the chain's casts.
    """

    skipped: tuple[tuple[str, str], ...] = ()
    folded: tuple[tuple[str, str], ...] = ()
    moves: tuple[tuple[str, str], ...] = ()
    elided: tuple[tuple[str, str], ...] = ()
    fused: tuple[tuple[str, str], ...] = ()
    fused_patterns: tuple[tuple[str, str, int], ...] = ()

    def summary(self) -> str:
        """One line, e.g. ``folded 37 (BatchNormalization 20, Relu 17); moves 0; ...;
        fused_patterns 2 (gelu 1, layernorm 1)``."""
        parts = []
        for field in ("folded", "moves", "elided", "skipped", "fused_patterns"):
            entries = getattr(self, field)
            counts = Counter(entry[0] for entry in entries)
            detail = ", ".join(f"{op_type} {n}" for op_type, n in sorted(counts.items()))
            parts.append(f"{field} {len(entries)}" + (f" ({detail})" if detail else ""))
        return "; ".join(parts)


# --------------------------------------------------------------------------------------------
# Limits: which nodes cannot be imported, and the one message that lists them
# --------------------------------------------------------------------------------------------

def why_unsupported(onnx, node, shapes: dict) -> str | None:
    """Why ``node`` cannot be imported (``""``: its type is unknown), or None.

    ``shapes`` maps tensor names to their inferred shapes (None when unknown)."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in SUPPORTED:
        return ""
    attrs = node_attrs(onnx, node)
    if node.op_type in CONVS or node.op_type in POOLS or node.op_type == "ConvTranspose":
        shape = shapes.get(node.input[0])
        if shape is not None and len(shape) not in (3, 4):
            return f"{len(shape) - 2}-D; npulab models 1-D and 2-D windows"
    dilated = any(d != 1 for d in attrs.get("dilations", ()))
    if node.op_type in ("MaxPool", "AveragePool") and dilated:
        return "dilated pooling"
    if node.op_type == "Einsum":
        return _einsum_problem(attrs.get("equation", ""), len(node.input))
    return None


def unsupported_message(label: str, unsupported) -> str:
    """One message listing every unsupported node, grouped by op type; ``unsupported`` holds
    ``(node, why)`` pairs as :func:`why_unsupported` gives them."""
    groups: dict[str, list[str]] = {}
    for node, why in unsupported:
        groups.setdefault(node_type(node), []).append(
            node_label(node) + (f": {why}" if why else ""))
    listed = ", ".join(f"{op_type} ({'node' if len(names) == 1 else 'nodes'} "
                       f"{', '.join(names)})" for op_type, names in sorted(groups.items()))
    return (f"{label}: unsupported ONNX ops: {listed}; run with --skip-unsupported "
            "(skip_unsupported=True) to skip them")


def _einsum_problem(equation: str, operands: int) -> str | None:
    """Why an Einsum is not a batched matrix product, or None."""
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if operands != 2 or len(terms) != 2:
        return "only two-operand Einsum (a batched matrix product) is supported"
    labels = [t.replace("...", "") for t in terms]
    if any(len(set(t)) != len(t) for t in labels):
        return "a repeated label within one operand (diagonal or trace)"
    if arrow:
        out = set(rhs.replace("...", ""))
        a, b = set(labels[0]), set(labels[1])
        if (a - b - out) or (b - a - out):
            return "sums an axis of only one operand"
    return None


# --------------------------------------------------------------------------------------------
# Naming nodes and shapes in messages
# --------------------------------------------------------------------------------------------

def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (onnx's errors span many lines)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def node_attrs(onnx, node) -> dict[str, Any]:
    """The node's attributes as Python values (strings decoded)."""
    out = {}
    for attr in node.attribute:
        value = onnx.helper.get_attribute_value(attr)
        out[attr.name] = value.decode() if isinstance(value, bytes) else value
    return out


def is_static(shape) -> bool:
    """Known, with every dimension known."""
    return shape is not None and all(d is not None for d in shape)


def show_shape(shape) -> str:
    """``[1, ?, 224]``: a shape in a message, unknown dimensions as ``?``."""
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def node_label(node) -> str:
    """The node's name, else its first output's (what its IR op is named after)."""
    return node.name or next((t for t in node.output if t), node.op_type)


def node_type(node) -> str:
    """The op type, with its domain when not the default one."""
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
