"""ONNX op converters: one function per op family, each reading a node's shapes and sources
through the :class:`~compiler.frontends.onnx_graph.Importer` and emitting IR ops to it.

:func:`lower` picks the converter by op type (tables in :mod:`compiler.frontends.onnx_support`);
what each ONNX op becomes is listed in :mod:`compiler.frontends.onnx_import`. To support a new
op, add it to a table there and, if no converter fits, a function here.
"""

from __future__ import annotations

import math
from collections import Counter

from compiler.frontends.onnx_graph import Importer, Value
from compiler.frontends.onnx_support import (
    AFFINE, CONVS, ELIDED, ELTWISE, FUSED_ACTIVATIONS, MATMULS, MOVES, POOLS, REDUCTIONS,
    node_attrs, node_label, show_shape,
)
from compiler.ir import (
    ACTIVATIONS, BINARY, Activation, Binary, Conv2d, Eltwise, Gemm, Move, Norm, Pool, Reduce,
    Softmax,
)
from compiler.ir import REDUCTIONS as IR_REDUCTIONS

__all__ = ["lower"]

#: ``Pow(x, p)`` by a constant exponent that is an activation of the vector engine.
_POWERS = {2.0: "square", 0.5: "sqrt", -0.5: "rsqrt", -1.0: "reciprocal"}


def lower(imp: Importer, node) -> None:
    """Convert one supported, non-constant node (see :func:`why_unsupported
    <compiler.frontends.onnx_support.why_unsupported>`) into IR ops."""
    op_type = node.op_type
    if op_type in CONVS:
        _conv(imp, node, *CONVS[op_type])
    elif op_type in MATMULS:
        _matmul(imp, node, *MATMULS[op_type])
    elif op_type == "Gemm":
        _gemm(imp, node)
    elif op_type == "Einsum":
        _einsum(imp, node)
    elif op_type == "ConvTranspose":
        _conv_transpose(imp, node)
    elif op_type == "Attention":
        _attention(imp, node)
    elif op_type in POOLS:
        _pool(imp, node)
    elif op_type in ELIDED:
        imp.pass_through(node, "elided")
    elif op_type in MOVES:
        _move(imp, node)
    elif op_type in REDUCTIONS:
        _reduce(imp, node)
    else:
        _vector(imp, node)


def _vector(imp: Importer, node) -> None:
    """Affine-by-constant, activations, normalizations, element-wise ops."""
    op_type, acts = node.op_type, imp.acts(node)
    foldable = (
        (op_type in AFFINE or op_type == "BatchNormalization") and len(acts) == 1
        and not (op_type == "Div" and acts[0] != node.input[0])  # c / x is not affine
        or op_type in FUSED_ACTIVATIONS and acts == [node.input[0]]
    )
    if foldable:
        value = imp.values.get(acts[0])
        same_shape = imp.shapes.get(acts[0]) == imp.shapes.get(node.output[0])
        if value is not None and value.fusable and same_shape:
            imp.values[node.output[0]] = Value(value.sources,
                                               imp.exclusive(node.output[0]))
            imp.report["folded"].append((op_type, node_label(node)))
            return
    ir_op = AFFINE.get(op_type) or FUSED_ACTIVATIONS.get(op_type) or ELTWISE[op_type]
    name, inputs = imp.op_name(node), imp.sources(acts, node)
    fields = _typed_vector(imp, node, ir_op, acts)
    if fields is None:
        imp.emit(node, imp.build(
            node, Eltwise, name=name, op=ir_op, elements=imp.elements(node),
            operands=max(1, len(acts)), inputs=inputs))
    else:
        cls, fields = fields
        imp.emit(node, imp.build(node, cls, name=name, inputs=inputs, **fields))


def _opset(imp: Importer) -> int:
    """The model's default-domain opset version."""
    return max((o.version for o in imp.prepared.opset_import if o.domain in ("", "ai.onnx")),
               default=1)


def _rows_cols(imp: Importer, node, axis: int, flatten: bool) -> tuple[int, int]:
    """``(rows, cols)`` of a row-wise op along ``axis`` of the node's first input: ``cols`` is
    that axis (or, ``flatten``, every axis from it on, the opset < 13 Softmax rule)."""
    shape = imp.shape(node, node.input[0])
    rank = len(shape)
    if not -rank <= axis < rank:
        raise imp.fail(node, f"axis = {axis}: must be in {-rank}..{rank - 1} for a rank-{rank} "
                       f"input")
    axis %= rank
    cols = math.prod(shape[axis:]) if flatten else shape[axis]
    return math.prod(shape) // cols, cols


def _typed_vector(imp: Importer, node, ir_op: str, acts: list[str]):
    """``(IR class, fields)`` for a node the vector engine has a typed op for; None keeps the
    generic :class:`Eltwise`. Softmax's axis follows the model's opset: before opset 13 the
    input is flattened to 2-D at ``axis`` (default 1), from 13 on it is one axis (default -1)."""
    op_type = node.op_type
    attrs = node_attrs(imp.onnx, node)
    elements = imp.elements(node)
    if op_type in ("Softmax", "LayerNormalization", "RMSNormalization"):
        old = op_type == "Softmax" and _opset(imp) < 13
        axis = attrs.get("axis", 1 if old else -1)
        rows, cols = _rows_cols(imp, node, axis, flatten=old or op_type != "Softmax")
        if op_type == "Softmax":
            return Softmax, dict(rows=rows, cols=cols)
        return Norm, dict(kind=ir_op, rows=rows, cols=cols)
    if op_type == "Pow" and acts == [node.input[0]]:
        fn = _POWERS.get(imp.const_scalar(node.input[1]))
        if fn is not None:
            return Activation, dict(fn=fn, elements=elements)
    if op_type == "Div" and acts == [node.input[1]] and imp.const_scalar(node.input[0]) == 1:
        return Activation, dict(fn="reciprocal", elements=elements)
    if op_type == "Gelu" and attrs.get("approximate", "none") == "tanh":
        return Activation, dict(fn="gelu_tanh", elements=elements)
    if ir_op in ACTIVATIONS and len(acts) == 1 and op_type not in AFFINE:
        return Activation, dict(fn=ir_op, elements=elements)
    if ir_op in BINARY and len([t for t in node.input if t]) == 2:
        sizes = sorted(math.prod(imp.shape(node, t)) for t in node.input if t)
        if elements == sizes[1] and elements % sizes[0] == 0:
            return Binary, dict(fn=ir_op, elements=elements, other_elements=sizes[0])
    return None


def _conv(imp: Importer, node, x_index: int, w_index: int) -> None:
    x, w = node.input[x_index], node.input[w_index]
    xs, ws = imp.shape(node, x), imp.shape(node, w)
    attrs = node_attrs(imp.onnx, node)
    group = attrs.get("group", 1)
    if ws[1] * group != xs[1]:
        raise imp.fail(node, f"weight {show_shape(ws)} with group {group} does not fit the "
                       f"{xs[1]}-channel input {show_shape(xs)}")
    window = _window(imp, node, attrs, xs, list(attrs.get("kernel_shape", ws[2:])))
    _emit_checked(imp, node, imp.build(
        node, Conv2d, name=imp.op_name(node), in_channels=xs[1], out_channels=ws[0],
        groups=group, batch=xs[0], inputs=imp.sources(imp.acts(node), node), **window))


def _window(imp: Importer, node, attrs, xs, kernel: list[int],
            pool: bool = False) -> dict[str, int]:
    """Conv2d/Pool window fields from ONNX attributes; a 1-D window gets height 1."""
    rank = len(xs) - 2
    strides = list(attrs.get("strides", [1] * rank))
    dilations = list(attrs.get("dilations", [1] * rank))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    sizes = list(xs[2:])
    if auto_pad in ("NOTSET", ""):
        pads = list(attrs.get("pads", [0] * 2 * rank))
        begin, end = pads[:rank], pads[rank:]
    elif auto_pad == "VALID":
        begin, end = [0] * rank, [0] * rank
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        # ONNX Conv spec: output = ceil(in / stride), odd padding goes at the end for
        # SAME_UPPER and at the beginning for SAME_LOWER.
        begin, end = [], []
        for size, k, s, d in zip(sizes, kernel, strides, dilations):
            total = max(0, (-(-size // s) - 1) * s + d * (k - 1) + 1 - size)
            small, large = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else large)
            end.append(large if auto_pad == "SAME_UPPER" else small)
    else:
        raise imp.fail(node, f"auto_pad = {auto_pad!r}: must be NOTSET, VALID, SAME_UPPER "
                       "or SAME_LOWER")
    if rank == 1:  # a 1-D window is a 2-D one of height 1
        sizes, kernel, strides, dilations = [1] + sizes, [1] + kernel, [1] + strides, [
            1] + dilations
        begin, end = [0] + begin, [0] + end
    if len(kernel) != 2 or len(strides) != 2 or len(begin) != 2 or len(end) != 2:
        raise imp.fail(node, f"window attributes {attrs} do not match the "
                       f"{rank}-D input {show_shape(xs)}")
    fields = dict(in_h=sizes[0], in_w=sizes[1], kernel_h=kernel[0], kernel_w=kernel[1],
                  stride_h=strides[0], stride_w=strides[1], pad_top=begin[0],
                  pad_left=begin[1], pad_bottom=end[0], pad_right=end[1])
    if not pool:
        fields.update(dilation_h=dilations[0], dilation_w=dilations[1])
    return fields


def _out_hw(imp: Importer, node) -> tuple[int, int]:
    shape = imp.shape(node, node.output[0])
    return (1, shape[2]) if len(shape) == 3 else (shape[2], shape[3])


def _emit_checked(imp: Importer, node, op: Conv2d | Pool) -> None:
    expected = _out_hw(imp, node)
    if (op.out_h, op.out_w) != expected:
        raise imp.fail(node, f"the IR window gives a {op.out_h}x{op.out_w} output but "
                       f"ONNX shape inference gives {expected[0]}x{expected[1]}")
    imp.emit(node, op)


def _pool(imp: Importer, node) -> None:
    x = node.input[0]
    xs = imp.shape(node, x)
    attrs = node_attrs(imp.onnx, node)
    if node.op_type.startswith("Global"):
        attrs = {"kernel_shape": list(xs[2:]), "strides": list(xs[2:])}
    window = _window(imp, node, attrs, xs, list(attrs.get("kernel_shape", [])), pool=True)
    if attrs.get("ceil_mode", 0):
        # Extra bottom/right padding admits the last partial window (as the zoo's max_pool).
        out_h, out_w = _out_hw(imp, node)
        for out, size, k, s, lo, hi in (
            (out_h, "in_h", "kernel_h", "stride_h", "pad_top", "pad_bottom"),
            (out_w, "in_w", "kernel_w", "stride_w", "pad_left", "pad_right"),
        ):
            span = window[size] + window[lo] + window[hi]
            window[hi] += max(0, (out - 1) * window[s] + window[k] - span)
    _emit_checked(imp, node, imp.build(
        node, Pool, name=imp.op_name(node), kind=POOLS[node.op_type], channels=xs[1],
        batch=xs[0], inputs=imp.sources(imp.acts(node), node), **window))


def _gemm(imp: Importer, node) -> None:
    attrs = node_attrs(imp.onnx, node)
    a, b = imp.shape(node, node.input[0]), imp.shape(node, node.input[1])
    m, k = (a[1], a[0]) if attrs.get("transA", 0) else (a[0], a[1])
    k2, n = (b[1], b[0]) if attrs.get("transB", 0) else (b[0], b[1])
    if k != k2:
        raise imp.fail(node, f"inner dimensions differ: A {show_shape(a)}, B {show_shape(b)} "
                       f"(transA={attrs.get('transA', 0)}, transB={attrs.get('transB', 0)})")
    acts = [t for t in imp.acts(node) if t in node.input[:2]]
    imp.emit(node, imp.build(node, Gemm, name=imp.op_name(node), m=m, n=n, k=k,
                             inputs=imp.sources(acts, node)))


def _matmul(imp: Importer, node, a_index: int, b_index: int) -> None:
    a_name, b_name = node.input[a_index], node.input[b_index]
    a, b = list(imp.shape(node, a_name)), list(imp.shape(node, b_name))
    a = [1] + a if len(a) == 1 else a
    b = b + [1] if len(b) == 1 else b
    (m, k), (k2, n) = a[-2:], b[-2:]
    if k != k2:
        raise imp.fail(node, f"inner dimensions differ: {show_shape(a)} @ {show_shape(b)}")
    if math.prod(b[:-2]) == 1:  # one B for every batch (a weight): fold batch into m
        batch, m = 1, math.prod(a[:-1])
    else:
        lead = _broadcast(a[:-2], b[:-2])
        if lead is None:
            raise imp.fail(node, f"batch dims do not broadcast: {show_shape(a)} @ {show_shape(b)}")
        batch = math.prod(lead)
    acts = [t for t in (a_name, b_name) if t not in imp.consts]
    imp.emit(node, imp.build(node, Gemm, name=imp.op_name(node), m=m, n=n, k=k,
                             batch=batch, inputs=imp.sources(acts, node)))


def _einsum(imp: Importer, node) -> None:
    equation = node_attrs(imp.onnx, node)["equation"].replace(" ", "")
    shapes = [imp.shape(node, t) for t in node.input]
    terms, output = _einsum_terms(equation, [len(s) for s in shapes])
    size: dict[str, int] = {}
    for term, shape in zip(terms, shapes):
        for label, dim in zip(term, shape):
            size[label] = max(size.get(label, 1), dim)
    a, b = set(terms[0]), set(terms[1])
    groups = {
        "batch": a & b & set(output), "m": (a - b) & set(output),
        "n": (b - a) & set(output), "k": (a & b) - set(output),
    }
    dims = {key: math.prod(size[label] for label in labels) for key, labels in groups.items()}
    imp.emit(node, imp.build(node, Gemm, name=imp.op_name(node), **dims,
                             inputs=imp.sources(imp.acts(node), node)))


def _conv_transpose(imp: Importer, node) -> None:
    # col2im form (Caffe/PyTorch): columns (N*H*W x C_out/g*kh*kw) = x^T @ w per group,
    # then scatter-added into the output. MACs are exactly the transposed conv's.
    xs, ws = imp.shape(node, node.input[0]), imp.shape(node, node.input[1])
    group = node_attrs(imp.onnx, node).get("group", 1)
    if ws[0] != xs[1] or xs[1] % group:
        raise imp.fail(node, f"weight {show_shape(ws)} with group {group} does not fit the "
                       f"{xs[1]}-channel input {show_shape(xs)}")
    gemm = imp.build(node, Gemm, name=imp.op_name(node), batch=group,
                     m=math.prod(xs[:1] + xs[2:]), n=math.prod(ws[1:]), k=xs[1] // group,
                     inputs=imp.sources(imp.acts(node), node))
    imp.emit(node, gemm, outputs=[])
    imp.emit(node, imp.build(node, Eltwise, name=imp.op_name(node, ".col2im"),
                             op="col2im", elements=imp.elements(node),
                             inputs=(gemm.name,)))


def _attention(imp: Importer, node) -> None:
    # The fused op (opset 23+) as compiler.attention writes it: scores, softmax, context.
    # Grouped-query attention shares K/V heads, but every query head still does its own
    # s x t x dh products. Optional inputs: 3 attn_mask, 4 past_key, 5 past_value.
    inputs = list(node.input) + [""] * 7
    attrs = node_attrs(imp.onnx, node)
    q, k, v = (imp.shape(node, t) for t in inputs[:3])
    if len(q) == 4:
        (batch, heads, seq, head_dim), kv_len, value_dim = q, k[2], v[3]
    else:
        heads, kv_heads = attrs.get("q_num_heads", 0), attrs.get("kv_num_heads", 0)
        if heads < 1 or kv_heads < 1:
            raise imp.fail(node, "3-D inputs need the q_num_heads and kv_num_heads "
                           "attributes")
        batch, seq, head_dim = q[0], q[1], q[2] // heads
        kv_len, value_dim = k[1], v[2] // kv_heads
    if inputs[4]:
        kv_len += imp.shape(node, inputs[4])[2]  # cached keys come first

    def acts(*indices: int) -> list[str]:
        return [inputs[i] for i in indices if inputs[i] and inputs[i] not in imp.consts]

    scores = imp.build(node, Gemm, name=imp.op_name(node, ".scores"),
                       batch=batch * heads, m=seq, n=kv_len, k=head_dim,
                       inputs=imp.sources(acts(0, 1, 4), node))
    imp.emit(node, scores, outputs=[])
    softmax = imp.build(node, Softmax, name=imp.op_name(node, ".softmax"),
                        rows=batch * heads * seq, cols=kv_len,
                        inputs=(scores.name,) + imp.sources(acts(3), node))
    imp.emit(node, softmax, outputs=[])
    context = imp.build(node, Gemm, name=imp.op_name(node, ".context"),
                        batch=batch * heads, m=seq, n=value_dim, k=kv_len,
                        inputs=(softmax.name,) + imp.sources(acts(2, 5), node))
    imp.emit(node, context)
    outputs = list(node.output) + [""] * 4
    for out, value in ((outputs[1], acts(1, 4)), (outputs[2], acts(2, 5))):
        if out:  # the K/V cache out: the inputs, concatenated in place
            imp.values[out] = Value(imp.sources(value, node))
    if outputs[3]:
        imp.values[outputs[3]] = Value((scores.name,))


def _move(imp: Importer, node) -> None:
    op_type, acts = node.op_type, imp.acts(node)
    outputs = [t for t in node.output if t]
    x = node.input[0]
    noop = False
    if op_type == "Concat":
        noop = len([t for t in node.input if t]) == 1
    elif op_type == "Transpose":
        shape = imp.shape(node, x)
        perm = node_attrs(imp.onnx, node).get("perm", list(range(len(shape)))[::-1])
        moved = [axis for axis in perm if shape[axis] != 1]
        noop = moved == sorted(moved)
    elif op_type in ("Slice", "Pad", "Expand", "Tile", "Resize", "Upsample"):
        noop = x not in imp.consts and imp.shape(node, x) == imp.shape(node, outputs[0])
    if noop:
        imp.pass_through(node, "elided")
        return
    kind = MOVES[op_type]
    if op_type in ("Resize", "Upsample"):
        mode = node_attrs(imp.onnx, node).get("mode", "nearest")
        if mode != "nearest":  # interpolation is arithmetic, not a copy
            imp.emit(node, imp.build(
                node, Eltwise, name=imp.op_name(node), op=f"resize_{mode}",
                elements=imp.elements(node), inputs=imp.sources(acts[:1], node)))
            return
        acts = acts[:1]
    move = imp.build(node, Move, name=imp.op_name(node), kind=kind,
                     elements=imp.elements(node, outputs),
                     inputs=imp.sources(acts, node))
    imp.emit(node, move, outputs=outputs)
    imp.report["moves"].append((op_type, node_label(node)))


def _reduce(imp: Importer, node) -> None:
    x = node.input[0]
    xs, ys = imp.shape(node, x), imp.shape(node, node.output[0])
    kind = {"ReduceMean": "avg", "ReduceMax": "max"}.get(node.op_type)
    if kind and len(xs) == 4 and ys in (xs[:2], xs[:2] + (1, 1)):  # global spatial pooling
        imp.emit(node, imp.build(
            node, Pool, name=imp.op_name(node), kind=kind, in_h=xs[2], in_w=xs[3],
            channels=xs[1], kernel_h=xs[2], kernel_w=xs[3], stride_h=xs[2],
            stride_w=xs[3], batch=xs[0], inputs=imp.sources([x], node)))
        return
    fn = REDUCTIONS[node.op_type].removeprefix("reduce_")
    axes = imp.reduce_axes(node, len(xs))
    if fn in IR_REDUCTIONS and axes is not None and axes == list(range(len(xs) - len(axes),
                                                                       len(xs))):
        cols = math.prod(xs[len(xs) - len(axes):])
        imp.emit(node, imp.build(
            node, Reduce, name=imp.op_name(node), fn=fn, rows=math.prod(xs) // cols, cols=cols,
            inputs=imp.sources([x], node)))
        return
    imp.emit(node, imp.build(
        node, Eltwise, name=imp.op_name(node), op=REDUCTIONS[node.op_type],
        elements=math.prod(xs), inputs=imp.sources([x], node)))


def _einsum_terms(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """Operand and output labels with ``...`` expanded (right-aligned, as numpy broadcasts)."""
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    width = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t),
                default=0)
    ellipsis = [chr(0x2460 + i) for i in range(width)]  # labels no equation uses
    out_terms = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            head, _, tail = term.partition("...")
            count = rank - len(head) - len(tail)
            term = head + "".join(ellipsis[width - count:]) + tail
        out_terms.append(term)
    if arrow:
        output = rhs.replace("...", "".join(ellipsis))
    else:  # implicit output: broadcast dims, then labels used once, alphabetically
        letters = Counter("".join(t for t in terms)).items()
        output = "".join(ellipsis) + "".join(sorted(c for c, n in letters if n == 1 and c != "."))
    return out_terms, output


def _broadcast(a: list[int], b: list[int]) -> list[int] | None:
    width = max(len(a), len(b))
    a, b = [1] * (width - len(a)) + a, [1] * (width - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return out
