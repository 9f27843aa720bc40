"""One ONNX import's state: the sorted nodes, their shapes, which tensors are constants, and
the IR ops each activation tensor comes from.

:class:`Importer` reads the shape-inferred model once; the converters
(:mod:`compiler.frontends.onnx_ops`) read shapes and sources through it and append IR ops with
:meth:`Importer.emit`, which also records which tensors a later node may fold into its producer.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from compiler.frontends.onnx_model import has_subgraph, shape_of, topological
from compiler.frontends.onnx_support import (
    OnnxImportError, first_line, is_static, node_attrs, node_label, node_type, show_shape,
)
from compiler.ir import IRError, Move, Op

__all__ = ["Importer", "Value"]

# A Constant's attributes that hold numbers, and the ops that pass a constant's values on.
_CONSTANT_VALUES = ("value", "value_float", "value_floats", "value_int", "value_ints")
_VALUE_VIEWS = ("Cast", "Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten")


@dataclass(frozen=True)
class Value:
    """An activation tensor: the IR ops it is the output of (empty: the graph input).

    ``fusable``: the tensor is the only use of one compute op's output, so a folded node may
    modify that op's output without changing what any other consumer reads.
    """

    sources: tuple[str, ...]
    fusable: bool = False


class Importer:
    """The state of one import, and the operations the converters use on it.

    Attributes
    ----------
    shapes:
        Tensor name -> inferred shape (None: unknown), initializers included.
    consts:
        Tensors known at import time: initializers and everything computed from them only.
    consumers:
        Tensor -> the non-constant nodes reading it, each once, in topological order.
    values:
        Activation tensor -> the IR ops it is the output of (:class:`Value`).
    nodes:
        The graph's nodes in topological order.
    ops:
        The IR ops emitted so far, in execution order.
    report:
        ``skipped``/``folded``/``moves``/``elided``/``fused`` lists of ``(op_type, node name)``
        and ``fused_patterns`` of ``(pattern, first node, node count)``.
    batch:
        The first input's first dimension (the samples), or None when it has none.
    """

    def __init__(self, onnx, proto, prepared, inferred, label, name, skip_unsupported):
        self.onnx, self.prepared, self.label, self.name = onnx, prepared, label, name
        self.skip_unsupported = skip_unsupported
        graph = proto.graph
        self.shapes: dict[str, tuple[int | None, ...] | None] = {}
        for value in list(inferred.graph.input) + list(inferred.graph.value_info) + list(
                inferred.graph.output):
            self.shapes[value.name] = shape_of(value)
        for tensor in graph.initializer:
            self.shapes[tensor.name] = tuple(tensor.dims)
        for sparse in graph.sparse_initializer:
            self.shapes[sparse.values.name] = tuple(sparse.dims)
        self.consts = {t.name for t in graph.initializer} | {
            s.values.name for s in graph.sparse_initializer}
        inputs = [i.name for i in graph.input if i.name not in self.consts]
        self.values: dict[str, Value] = {name: Value(()) for name in inputs}
        # Samples: the first axis of the first input, the axis ``batch`` fixes.
        first = self.shapes.get(inputs[0]) if inputs else None
        self.batch = first[0] if first and isinstance(first[0], int) and first[0] >= 1 else None
        self.nodes = topological(list(graph.node), self.consts | set(self.values))
        for node in self.nodes:
            if node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx"):
                const = True
            else:
                const = not has_subgraph(onnx, node) and all(
                    t in self.consts for t in node.input if t)
            if const:
                self.consts.update(t for t in node.output if t)
        self.graph_outputs = {o.name for o in graph.output}
        self.producers = {t: node for node in self.nodes for t in node.output if t}
        self.users: Counter[str] = Counter()
        self.consumers: dict[str, list] = {}
        for node in self.nodes:
            if not self.is_const_node(node):
                for t in dict.fromkeys(t for t in node.input if t):
                    self.users[t] += 1
                    self.consumers.setdefault(t, []).append(node)
        self._initializers = {t.name: t for t in prepared.graph.initializer}
        self.ops: list[Op] = []
        self.used: set[str] = set()
        self.report: dict[str, list[tuple]] = {
            "skipped": [], "folded": [], "moves": [], "elided": [], "fused": [],
            "fused_patterns": []}
        self.strict_reason: str | None = None

    def is_const_node(self, node) -> bool:
        """Every output of the node is known at import time (it adds no op)."""
        outs = [t for t in node.output if t]
        return bool(outs) and all(t in self.consts for t in outs)

    def fail(self, node, message: str) -> OnnxImportError:
        """The error for ``node``, naming the model and the node (the caller raises it)."""
        return OnnxImportError(f"{self.label}: node {node_label(node)!r} ({node.op_type}): "
                               f"{message}")

    def shape(self, node, tensor: str) -> tuple[int, ...]:
        """The static, non-empty shape of ``tensor``; else an error saying where it got lost."""
        shape = self.shapes.get(tensor)
        if not is_static(shape):
            if self.strict_reason is None:
                try:
                    self.onnx.shape_inference.infer_shapes(self.prepared, strict_mode=True,
                                                           data_prop=True)
                    self.strict_reason = ""
                except Exception as exc:
                    self.strict_reason = f"; ONNX shape inference reports: {first_line(exc)}"
            known = "unknown" if shape is None else f"not static {show_shape(shape)}"
            root, producer = self._unknown_root(tensor)
            origin = ""
            if root != tensor and producer is not None:
                origin = (f" (it depends on {root!r}, output of node {node_label(producer)!r} "
                          f"({node_type(producer)}), whose shape is unknown)")
            raise self.fail(node, f"the shape of {tensor!r} is {known} after ONNX shape "
                            f"inference{origin}{self.strict_reason}; export the model with "
                            "static shapes (or shapes in its value_info)")
        if 0 in shape:
            raise self.fail(node, f"{tensor!r} has shape {show_shape(shape)}: an empty tensor")
        return shape

    def _unknown_root(self, tensor: str):
        """The furthest upstream tensor with an unknown shape that ``tensor`` derives from."""
        seen: set[str] = set()
        while tensor in self.producers and tensor not in seen:
            seen.add(tensor)
            upstream = [t for t in self.producers[tensor].input
                        if t and not is_static(self.shapes.get(t))]
            if not upstream:
                break
            tensor = upstream[0]
        return tensor, self.producers.get(tensor)

    def sources(self, tensors, node, strict: bool = True) -> tuple[str, ...]:
        """The IR ops ``tensors`` come from, each once; ``strict``: an unknown tensor fails."""
        out: list[str] = []
        for tensor in tensors:
            if tensor not in self.values:
                if not strict:
                    continue
                raise self.fail(node, f"reads {tensor!r}, which no imported node produces")
            out += [s for s in self.values[tensor].sources if s not in out]
        return tuple(out)

    def acts(self, node) -> list[str]:
        """The node's activation inputs (not constants)."""
        return [t for t in node.input if t and t not in self.consts]

    def const_value(self, tensor: str) -> np.ndarray | None:
        """The values of a constant tensor, flattened: a (small) initializer or a ``Constant``
        output, also seen through ``Cast`` and views. None for anything else (a constant
        computed by arithmetic, a weight whose data stays on disk)."""
        helper = self.onnx.numpy_helper
        for _ in range(8):  # a few casts and views between a Constant and its use
            node = self.producers.get(tensor)
            try:
                if tensor in self._initializers:
                    return helper.to_array(self._initializers[tensor]).reshape(-1)
                if node is not None and node.op_type == "Constant" and node.attribute:
                    attr = node.attribute[0]
                    if attr.name not in _CONSTANT_VALUES:
                        return None
                    value = self.onnx.helper.get_attribute_value(attr)
                    if attr.name == "value":
                        value = helper.to_array(value)
                    return np.asarray(value).reshape(-1)
            except Exception:  # onnx's errors for data it cannot read (external, typed)
                return None
            if node is None or tensor not in self.consts or node.op_type not in _VALUE_VIEWS:
                return None
            tensor = node.input[0]
        return None

    def const_scalar(self, tensor: str) -> float | None:
        """The value of a one-element numeric constant (:meth:`const_value`); else None."""
        shape = self.shapes.get(tensor)
        if tensor not in self.consts or not is_static(shape) or math.prod(shape) != 1:
            return None
        values = self.const_value(tensor)
        if values is None or values.size != 1 or values.dtype.kind not in "biuf":
            return None
        return float(values[0])

    def reduce_axes(self, node, rank: int) -> list[int] | None:
        """A reduction's axes, sorted and non-negative (an attribute before opset 18, an input
        from 18); None when they are not known at import time."""
        axes = node_attrs(self.onnx, node).get("axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            values = self.const_value(node.input[1])
            if values is None:
                return None
            axes = [int(a) for a in values]
        if axes is None:
            return list(range(rank))
        return sorted(int(a) % rank for a in axes)

    def exclusive(self, tensor: str) -> bool:
        """Exactly one node reads ``tensor`` and it is not a graph output."""
        return self.users[tensor] == 1 and tensor not in self.graph_outputs

    def emit(self, node, op: Op, outputs: list[str] | None = None) -> None:
        """Append ``op``; ``outputs`` (default: the node's first output) now come from it."""
        self.ops.append(op)
        self.used.add(op.name)
        for out in outputs if outputs is not None else [t for t in node.output[:1] if t]:
            fusable = not isinstance(op, Move) and self.exclusive(out)
            self.values[out] = Value((op.name,), fusable)

    def op_name(self, node, suffix: str = "") -> str:
        """A fresh IR op name: the node's label (+ suffix), numbered when taken."""
        base = node_label(node) + suffix
        name, i = base, 1
        while name in self.used:
            name, i = f"{base}_{i}", i + 1
        return name

    #: With ``import_onnx(..., sparsity_from_weights=True)``: reads weights for ``weight_nm``
    #: and ``weight_density``.
    weight_reader = None

    def build(self, node, cls, **fields) -> Op:
        """``cls(**fields)``; an IR validation error names the node. With a weight reader, a
        convolution's or matrix product's ``weight_nm`` and ``weight_density`` come from its
        weights' zeros."""
        if self.weight_reader is not None and cls.__name__ in ("Conv2d", "Gemm") \
                and "weight_nm" not in fields and not fields.get("kv_cache") \
                and len(fields.get("inputs", ())) < 2:
            facts = self.weight_reader.weight_facts(node, self.producers)
            if facts is not None:
                nm, density, rows = facts
                if nm is not None:
                    fields["weight_nm"] = nm
                if rows is not None:
                    fields["weight_nm_rows"] = rows
                fields["weight_density"] = density
        try:
            return cls(**fields)
        except IRError as exc:
            raise self.fail(node, str(exc)) from exc

    def pass_through(self, node, report: str) -> None:
        """The node's output is its first input's value (elided or folded)."""
        source = self.values.get(node.input[0]) if node.input else None
        if source is None:
            raise self.fail(node, f"reads {node.input[0]!r}, which no imported node produces")
        out = node.output[0]
        self.values[out] = Value(source.sources, source.fusable and self.exclusive(out))
        self.report[report].append((node.op_type, node_label(node)))

    def elements(self, node, tensors=None) -> int:
        """Elements of ``tensors`` (default: the node's first output)."""
        tensors = tensors if tensors is not None else [t for t in node.output if t][:1]
        return sum(math.prod(self.shape(node, t)) for t in tensors)
