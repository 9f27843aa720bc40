"""Import an ONNX model as an npulab :class:`~compiler.ir.Graph` workload.

:func:`import_onnx` loads the model, fixes its batch dimension, runs ONNX shape inference (with
data propagation, so ``Shape -> Gather -> Concat -> Reshape`` chains resolve) and walks the
nodes in topological order, turning each into IR ops. What becomes what (the full table is in
``docs/onnx.md``):

* **Matrix ops.** ``Conv`` (1-D and 2-D, every pad/stride/dilation/group/auto_pad form) becomes
  :class:`Conv2d`; ``Gemm``, ``MatMul`` and two-operand ``Einsum`` become :class:`Gemm`. A
  MatMul whose second operand is shared by every batch (rank <= 2, e.g. a weight) folds the
  first operand's leading dims into ``m``, as ``nn.Linear`` does; otherwise ``batch`` is the
  product of the broadcast leading dims. ``ConvTranspose`` is the col2im GEMM
  (``m = N*H*W``, ``n = C_out/g*kh*kw``, ``k = C_in/g``) plus an Eltwise ``col2im`` scatter-add.
  The fused ``Attention`` op (opset 23+) becomes ``<node>.scores`` (Gemm), ``<node>.softmax``
  (Eltwise) and ``<node>.context`` (Gemm), as :mod:`compiler.attention` writes attention.
* **Folded into the producing op** (listed in :attr:`OnnxImportReport.folded`), as an NVDLA-like
  post-processing unit applies them to the op's output on the fly: ``BatchNormalization`` and
  ``Add``/``Sub``/``Mul``/``Div`` by a constant (per-channel affine: bias, scale), and the
  piecewise-linear activations ``Relu``, ``LeakyRelu``, ``PRelu``, ``Clip``, ``HardSigmoid``,
  ``HardSwish``, ``ThresholdedRelu``. Folding needs a compute producer (not a Move, not the
  graph input) whose output nothing else reads; otherwise the node becomes an :class:`Eltwise`.
* **Always visible** as :class:`Eltwise`: transcendental activations (``Gelu``, ``Sigmoid``,
  ``Tanh``, ``Erf``...), which need a LUT or a vector unit; row-wise normalizations
  (``Softmax``, ``LayerNormalization``...), which need statistics of the whole row; element-wise
  ops of two activations; reductions (``elements`` = the elements read). Global
  ``ReduceMean``/``ReduceMax`` over H and W are :class:`Pool`, like ``GlobalAveragePool``.
* **Data movement** that copies bytes becomes :class:`Move` (``Concat``, real ``Transpose``,
  ``Split``, ``Slice``, ``Pad``, ``Gather``, ``Expand``, ``Tile``, ``Resize``...). Views that
  change no byte (``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze``, ``Identity``,
  ``Dropout``, a transpose moving only size-1 axes) and precision markers (``Cast``,
  ``QuantizeLinear``, ``DequantizeLinear``: the chip config sets the precision) are elided:
  their consumers read the producer directly.
* **Constants.** A node whose inputs are all constant (initializers, ``Constant``, ``Shape``,
  ``Size``, arithmetic on those) is computed at import time and adds no op.

Every op's ``inputs`` names the IR ops it reads, looking through elided and folded nodes; a
graph input is not named (empty ``inputs`` reads the graph input, as in :class:`Graph`).
"""

from __future__ import annotations

import heapq
import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Union

from compiler.ir import Conv2d, Eltwise, Gemm, Graph, IRError, Move, Op, Pool

__all__ = ["OnnxImportError", "OnnxImportReport", "import_onnx"]

PathLike = Union[str, "os.PathLike[str]"]

# ONNX op type -> IR name, by how the op is imported (see the module docstring).
_AFFINE = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}
_FUSED_ACTIVATIONS = {
    "Relu": "relu", "LeakyRelu": "leaky_relu", "PRelu": "prelu", "Clip": "clip",
    "HardSigmoid": "hard_sigmoid", "HardSwish": "hard_swish", "ThresholdedRelu": "thresholded_relu",
}
_ELTWISE = {
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
_REDUCTIONS = {
    "ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max",
    "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod", "ReduceL1": "reduce_l1",
    "ReduceL2": "reduce_l2", "ReduceLogSum": "reduce_log_sum",
    "ReduceLogSumExp": "reduce_log_sum_exp", "ReduceSumSquare": "reduce_sum_square",
    "ArgMax": "argmax", "ArgMin": "argmin",
}
_MOVES = {
    "Concat": "concat", "Transpose": "transpose", "Split": "split", "Slice": "slice", "Pad": "pad",
    "Gather": "gather", "GatherElements": "gather", "GatherND": "gather", "Expand": "expand",
    "Tile": "tile", "DepthToSpace": "depth_to_space", "SpaceToDepth": "space_to_depth",
    "Resize": "resize", "Upsample": "resize", "ScatterND": "scatter",
    "ScatterElements": "scatter",
}
_ELIDED = {
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Cast", "CastLike",
    "QuantizeLinear", "DequantizeLinear",
}
_POOLS = {"MaxPool": "max", "AveragePool": "avg", "GlobalMaxPool": "max",
          "GlobalAveragePool": "avg"}
# Where the data and weight operands sit, per conv/matmul flavour (quantized ones included).
_CONVS = {"Conv": (0, 1), "ConvInteger": (0, 1), "QLinearConv": (0, 3)}
_MATMULS = {"MatMul": (0, 1), "MatMulInteger": (0, 1), "QLinearMatMul": (0, 3)}
_OTHER = {"Gemm", "ConvTranspose", "Einsum", "Attention"}
_SUPPORTED = (set(_AFFINE) | set(_FUSED_ACTIVATIONS) | set(_ELTWISE) | set(_REDUCTIONS)
              | set(_MOVES) | _ELIDED | set(_POOLS) | set(_CONVS) | set(_MATMULS) | _OTHER)

# Initializers larger than this are shown to shape inference as typed inputs (their shape is
# all it needs): no copy of the weights, and external data is never read.
_INLINE_LIMIT = 4096


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
    """

    skipped: tuple[tuple[str, str], ...] = ()
    folded: tuple[tuple[str, str], ...] = ()
    moves: tuple[tuple[str, str], ...] = ()
    elided: tuple[tuple[str, str], ...] = ()

    def summary(self) -> str:
        """One line, e.g. ``folded 37 (BatchNormalization 20, Relu 17); moves 0; ...``."""
        parts = []
        for field in ("folded", "moves", "elided", "skipped"):
            entries = getattr(self, field)
            counts = Counter(op_type for op_type, _ in entries)
            detail = ", ".join(f"{op_type} {n}" for op_type, n in sorted(counts.items()))
            parts.append(f"{field} {len(entries)}" + (f" ({detail})" if detail else ""))
        return "; ".join(parts)


@dataclass(frozen=True)
class _Value:
    """An activation tensor: the IR ops it is the output of (empty: the graph input).

    ``fusable``: the tensor is the only use of one compute op's output, so a folded node may
    modify that op's output without changing what any other consumer reads.
    """

    sources: tuple[str, ...]
    fusable: bool = False


def import_onnx(
    model: PathLike | Any,
    *,
    batch: int | None = None,
    skip_unsupported: bool = False,
    name: str | None = None,
    dims: Mapping[str, int] | None = None,
) -> tuple[Graph, OnnxImportReport]:
    """Import an ONNX model (a file path or an ``onnx.ModelProto``) as a :class:`Graph`.

    Parameters
    ----------
    batch:
        The batch size. It replaces a symbolic or unknown first dimension of every graph input
        (default 1); a model with a fixed batch dimension must agree with it.
    skip_unsupported:
        Skip nodes npulab cannot express instead of failing; they are listed in the report.
    name:
        The graph's name; defaults to the file's stem, else the ONNX graph's name.
    dims:
        Values for other symbolic input dimensions, by their ``dim_param`` name (e.g.
        ``{"sequence": 128}``); npulab simulates static shapes.

    Returns
    -------
    ``(graph, report)``: ops in execution order (the ONNX topological order), and the nodes
    that were folded, kept as moves, elided or skipped.

    Raises
    ------
    OnnxImportError
        The file is missing or not an ONNX model, a shape stays unknown after shape inference,
        an input dimension is symbolic, or nodes are unsupported (all listed in one message).
    """
    try:
        import onnx
    except ImportError as exc:  # an optional dependency: pip install 'npulab[onnx]'
        raise OnnxImportError("importing ONNX models needs the onnx package: "
                              "pip install 'npulab[onnx]'") from exc
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise OnnxImportError(f"batch = {batch!r}: must be an integer >= 1 or None")
    dims = dict(dims or {})
    for key, value in dims.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise OnnxImportError(f"dims[{key!r}] = {value!r}: must be an integer >= 1")
    if not isinstance(skip_unsupported, bool):
        raise OnnxImportError(f"skip_unsupported = {skip_unsupported!r}: must be True or False")
    proto, label, default_name = _load(onnx, model)
    if name is None:
        name = default_name
    prepared = _prepare(onnx, proto, label, batch, dims)
    try:
        inferred = onnx.shape_inference.infer_shapes(prepared, data_prop=True)
    except Exception as exc:  # onnx raises several types (InferenceError, ValidationError...)
        raise OnnxImportError(f"{label}: ONNX shape inference failed: {_first_line(exc)}") from exc
    return _Importer(onnx, proto, prepared, inferred, label, name, skip_unsupported).run()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _load(onnx, model) -> tuple[Any, str, str]:
    if isinstance(model, onnx.ModelProto):
        label = f"ONNX model {model.graph.name!r}" if model.graph.name else "ONNX model"
        proto, default_name = model, model.graph.name or "onnx_model"
    elif isinstance(model, (str, os.PathLike)):
        path = Path(model)
        label, default_name = str(path), path.stem or "onnx_model"
        if not path.is_file():
            raise OnnxImportError(f"{path}: no such file")
        try:
            proto = onnx.load(path, load_external_data=False)
        except Exception as exc:  # protobuf's DecodeError and friends
            raise OnnxImportError(f"{path}: not an ONNX model ({_first_line(exc)})") from exc
        _load_small_external_data(onnx, proto, path.parent, label)
    else:
        raise TypeError(f"model = {model!r}: must be a file path or an onnx.ModelProto")
    if not proto.HasField("graph") or not proto.graph.node:
        raise OnnxImportError(f"{label}: not an ONNX model (no graph nodes)")
    if proto.functions:  # model-local functions (torch.onnx dynamo exports): inline them
        inliner = getattr(onnx, "inliner", None)
        if inliner is not None:
            proto = inliner.inline_local_functions(proto)
    return proto, label, default_name


def _load_small_external_data(onnx, proto, base_dir: Path, label: str) -> None:
    """Read the small externally stored initializers (shape tensors that shape inference must
    see); weights stay on disk, since only their dims matter here (their files are not even
    opened). A small initializer whose data file is missing is an OnnxImportError naming it."""
    helper = onnx.external_data_helper
    for tensor in proto.graph.initializer:
        if helper.uses_external_data(tensor) and math.prod(tensor.dims) <= _INLINE_LIMIT:
            where = f"{label}: initializer {tensor.name!r}"
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            data = base_dir / location
            if not location:
                raise OnnxImportError(f"{where}: stored as external data without a location")
            if not data.is_file():
                state = "is not a file" if data.exists() else "does not exist"
                raise OnnxImportError(f"{where}: its data is in the external file {str(data)!r}, "
                                      f"which {state}; keep the model's data files next to it")
            try:
                helper.load_external_data_for_tensor(tensor, str(base_dir))
            except Exception as exc:  # onnx's checker (ValidationError), OSError
                raise OnnxImportError(f"{where}: cannot read its external data in "
                                      f"{str(data)!r}: {_first_line(exc)}") from exc
            tensor.data_location = onnx.TensorProto.DEFAULT
            del tensor.external_data[:]


def _prepare(onnx, proto, label: str, batch: int | None, dims: dict[str, int]):
    """A copy for shape inference: input dims fixed, large initializers reduced to their type."""
    graph = proto.graph
    prepared = onnx.ModelProto()
    prepared.ir_version = proto.ir_version
    prepared.opset_import.extend(proto.opset_import)
    prepared.functions.extend(proto.functions)
    g = prepared.graph
    g.name = graph.name
    g.node.extend(graph.node)
    g.output.extend(graph.output)
    g.value_info.extend(graph.value_info)
    g.sparse_initializer.extend(graph.sparse_initializer)
    weights = {t.name for t in graph.initializer} | {s.values.name for s in
                                                     graph.sparse_initializer}
    listed = {i.name for i in graph.input}
    for tensor in graph.initializer:
        if (math.prod(tensor.dims) <= _INLINE_LIMIT
                and not onnx.external_data_helper.uses_external_data(tensor)):
            g.initializer.append(tensor)
        elif tensor.name not in listed:
            g.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type,
                                                              list(tensor.dims)))
    fixed: dict[str, int] = dict(dims)  # dim_param -> value, applied everywhere below
    batch_set, fixed_batches = False, []
    symbols: list[str] = []  # the dim_params of the graph inputs, in order
    for value in graph.input:
        entry = g.input.add()
        entry.CopyFrom(value)
        if value.name in weights:
            continue
        if not entry.type.HasField("tensor_type") or not entry.type.tensor_type.HasField("shape"):
            raise OnnxImportError(f"{label}: graph input {value.name!r} has no shape; npulab "
                                  "needs the input shapes to size every layer")
        for axis, dim in enumerate(entry.type.tensor_type.shape.dim):
            if dim.HasField("dim_value"):
                if axis == 0 and dim.dim_value != batch:
                    fixed_batches.append(f"{value.name!r} has {dim.dim_value}")
                continue
            param = dim.dim_param
            if param and param not in symbols:
                symbols.append(param)
            if param in fixed:
                dim.dim_value = fixed[param]
            elif axis == 0:
                dim.dim_value = batch if batch is not None else 1
                batch_set = True
                if param:
                    fixed[param] = dim.dim_value
            else:
                what = f"symbolic ({param!r})" if param else "unknown"
                fix = (f"give its size with npulab run --dim {param}=SIZE (Python: "
                       f"dims={{{param!r}: SIZE}})" if param else "export with static shapes")
                raise OnnxImportError(
                    f"{label}: graph input {value.name!r} axis {axis} is {what}; npulab "
                    f"simulates static shapes: {fix}")
    unknown = [key for key in dims if key not in symbols]
    if unknown:
        raise OnnxImportError(
            f"{label}: dims[{unknown[0]!r}] (--dim {unknown[0]}=...): no graph input has a "
            f"symbolic dimension of that name; its symbolic dimensions: "
            f"{', '.join(symbols) if symbols else 'none'}")
    if batch is not None and not batch_set and fixed_batches:
        raise OnnxImportError(
            f"{label}: batch = {batch} cannot be applied: every graph input has a fixed first "
            f"dimension ({', '.join(fixed_batches)}); re-export the model with a dynamic batch "
            "axis")
    # The same symbol names the same size in the exporter's stored value_info and outputs.
    for value in list(g.value_info) + list(g.output):
        if value.type.HasField("tensor_type"):
            for dim in value.type.tensor_type.shape.dim:
                if not dim.HasField("dim_value") and dim.dim_param in fixed:
                    dim.dim_value = fixed[dim.dim_param]
    return prepared


def _attrs(onnx, node) -> dict[str, Any]:
    out = {}
    for attr in node.attribute:
        value = onnx.helper.get_attribute_value(attr)
        out[attr.name] = value.decode() if isinstance(value, bytes) else value
    return out


def _has_subgraph(onnx, node) -> bool:
    kinds = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    return any(attr.type in kinds for attr in node.attribute)


def _topological(nodes, known: set[str]) -> list:
    """Kahn's algorithm, keeping file order among ready nodes (ONNX requires sorted graphs,
    but some exporters do not comply)."""
    produced_by = {out: i for i, node in enumerate(nodes) for out in node.output if out}
    waiting = [{produced_by[t] for t in node.input if t in produced_by and t not in known}
               - {i} for i, node in enumerate(nodes)]
    users: dict[int, list[int]] = {}
    for i, deps in enumerate(waiting):
        for d in deps:
            users.setdefault(d, []).append(i)
    ready = [i for i, deps in enumerate(waiting) if not deps]
    order, done = [], set()
    heapq.heapify(ready)
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i])
        done.add(i)
        for u in users.get(i, ()):
            waiting[u].discard(i)
            if not waiting[u]:
                heapq.heappush(ready, u)
    order.extend(node for i, node in enumerate(nodes) if i not in done)  # cycles: fail later
    return order


class _Importer:
    """One import: walks the sorted nodes once, appending IR ops."""

    def __init__(self, onnx, proto, prepared, inferred, label, name, skip_unsupported):
        self.onnx, self.prepared, self.label, self.name = onnx, prepared, label, name
        self.skip_unsupported = skip_unsupported
        graph = proto.graph
        self.shapes: dict[str, tuple[int | None, ...] | None] = {}
        for value in list(inferred.graph.input) + list(inferred.graph.value_info) + list(
                inferred.graph.output):
            self.shapes[value.name] = _shape_of(value)
        for tensor in graph.initializer:
            self.shapes[tensor.name] = tuple(tensor.dims)
        for sparse in graph.sparse_initializer:
            self.shapes[sparse.values.name] = tuple(sparse.dims)
        self.consts = {t.name for t in graph.initializer} | {
            s.values.name for s in graph.sparse_initializer}
        inputs = [i.name for i in graph.input if i.name not in self.consts]
        self.values: dict[str, _Value] = {name: _Value(()) for name in inputs}
        self.nodes = _topological(list(graph.node), self.consts | set(self.values))
        for node in self.nodes:
            if node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx"):
                const = True
            else:
                const = not _has_subgraph(onnx, node) and all(
                    t in self.consts for t in node.input if t)
            if const:
                self.consts.update(t for t in node.output if t)
        self.graph_outputs = {o.name for o in graph.output}
        self.producers = {t: node for node in self.nodes for t in node.output if t}
        self.users: Counter[str] = Counter()
        for node in self.nodes:
            if not self._is_const_node(node):
                self.users.update({t for t in node.input if t})
        self.ops: list[Op] = []
        self.used: set[str] = set()
        self.report: dict[str, list[tuple[str, str]]] = {
            "skipped": [], "folded": [], "moves": [], "elided": []}
        self.strict_reason: str | None = None

    # --- driver ---------------------------------------------------------------------------

    def run(self) -> tuple[Graph, OnnxImportReport]:
        unsupported = [(node, why) for node in self.nodes if not self._is_const_node(node)
                       for why in [self._unsupported(node)] if why is not None]
        if unsupported and not self.skip_unsupported:
            raise OnnxImportError(self._unsupported_message(unsupported))
        skip = {id(node) for node, _ in unsupported}
        for node in self.nodes:
            if self._is_const_node(node):
                self.report["elided"].append((node.op_type, _label(node)))
            elif id(node) in skip:
                self.report["skipped"].append((_type(node), _label(node)))
                sources = self._sources([t for t in node.input if t and t not in self.consts],
                                        node, strict=False)
                for out in node.output:
                    if out:
                        self.values[out] = _Value(sources)
            else:
                self._lower(node)
        if not self.ops:
            raise OnnxImportError(f"{self.label}: the model has no op npulab can simulate "
                                  "(every node is a constant, a view or skipped)")
        try:
            graph = Graph(self.name, tuple(self.ops))
        except IRError as exc:
            raise OnnxImportError(f"{self.label}: {exc}") from exc
        report = OnnxImportReport(**{k: tuple(v) for k, v in self.report.items()})
        return graph, report

    def _is_const_node(self, node) -> bool:
        outs = [t for t in node.output if t]
        return bool(outs) and all(t in self.consts for t in outs)

    def _unsupported(self, node) -> str | None:
        """Why ``node`` cannot be imported (``""``: its type is unknown), or None."""
        if node.domain not in ("", "ai.onnx") or node.op_type not in _SUPPORTED:
            return ""
        attrs = _attrs(self.onnx, node)
        if node.op_type in _CONVS or node.op_type in _POOLS or node.op_type == "ConvTranspose":
            shape = self.shapes.get(node.input[0])
            if shape is not None and len(shape) not in (3, 4):
                return f"{len(shape) - 2}-D; npulab models 1-D and 2-D windows"
        dilated = any(d != 1 for d in attrs.get("dilations", ()))
        if node.op_type in ("MaxPool", "AveragePool") and dilated:
            return "dilated pooling"
        if node.op_type == "Einsum":
            return _einsum_problem(attrs.get("equation", ""), len(node.input))
        return None

    def _unsupported_message(self, unsupported) -> str:
        groups: dict[str, list[str]] = {}
        for node, why in unsupported:
            groups.setdefault(_type(node), []).append(
                _label(node) + (f": {why}" if why else ""))
        listed = ", ".join(f"{op_type} ({'node' if len(names) == 1 else 'nodes'} "
                           f"{', '.join(names)})" for op_type, names in sorted(groups.items()))
        return (f"{self.label}: unsupported ONNX ops: {listed}; run with --skip-unsupported "
                "(skip_unsupported=True) to skip them")

    # --- helpers --------------------------------------------------------------------------

    def _fail(self, node, message: str) -> OnnxImportError:
        return OnnxImportError(f"{self.label}: node {_label(node)!r} ({node.op_type}): {message}")

    def _shape(self, node, tensor: str) -> tuple[int, ...]:
        shape = self.shapes.get(tensor)
        if not _static(shape):
            if self.strict_reason is None:
                try:
                    self.onnx.shape_inference.infer_shapes(self.prepared, strict_mode=True,
                                                           data_prop=True)
                    self.strict_reason = ""
                except Exception as exc:
                    self.strict_reason = f"; ONNX shape inference reports: {_first_line(exc)}"
            known = "unknown" if shape is None else f"not static {_show(shape)}"
            root, producer = self._unknown_root(tensor)
            origin = ""
            if root != tensor and producer is not None:
                origin = (f" (it depends on {root!r}, output of node {_label(producer)!r} "
                          f"({_type(producer)}), whose shape is unknown)")
            raise self._fail(node, f"the shape of {tensor!r} is {known} after ONNX shape "
                             f"inference{origin}{self.strict_reason}; export the model with "
                             "static shapes (or shapes in its value_info)")
        if 0 in shape:
            raise self._fail(node, f"{tensor!r} has shape {_show(shape)}: an empty tensor")
        return shape

    def _unknown_root(self, tensor: str):
        """The furthest upstream tensor with an unknown shape that ``tensor`` derives from."""
        seen: set[str] = set()
        while tensor in self.producers and tensor not in seen:
            seen.add(tensor)
            upstream = [t for t in self.producers[tensor].input
                        if t and not _static(self.shapes.get(t))]
            if not upstream:
                break
            tensor = upstream[0]
        return tensor, self.producers.get(tensor)

    def _sources(self, tensors, node, strict: bool = True) -> tuple[str, ...]:
        out: list[str] = []
        for tensor in tensors:
            if tensor not in self.values:
                if not strict:
                    continue
                raise self._fail(node, f"reads {tensor!r}, which no imported node produces")
            out += [s for s in self.values[tensor].sources if s not in out]
        return tuple(out)

    def _acts(self, node) -> list[str]:
        return [t for t in node.input if t and t not in self.consts]

    def _exclusive(self, tensor: str) -> bool:
        return self.users[tensor] == 1 and tensor not in self.graph_outputs

    def _emit(self, node, op: Op, outputs: list[str] | None = None) -> None:
        self.ops.append(op)
        self.used.add(op.name)
        for out in outputs if outputs is not None else [t for t in node.output[:1] if t]:
            fusable = not isinstance(op, Move) and self._exclusive(out)
            self.values[out] = _Value((op.name,), fusable)

    def _op_name(self, node, suffix: str = "") -> str:
        base = _label(node) + suffix
        name, i = base, 1
        while name in self.used:
            name, i = f"{base}_{i}", i + 1
        return name

    def _build(self, node, cls, **fields) -> Op:
        try:
            return cls(**fields)
        except IRError as exc:
            raise self._fail(node, str(exc)) from exc

    def _pass_through(self, node, report: str) -> None:
        """The node's output is its first input's value (elided or folded)."""
        source = self.values.get(node.input[0]) if node.input else None
        if source is None:
            raise self._fail(node, f"reads {node.input[0]!r}, which no imported node produces")
        out = node.output[0]
        self.values[out] = _Value(source.sources, source.fusable and self._exclusive(out))
        self.report[report].append((node.op_type, _label(node)))

    def _elements(self, node, tensors=None) -> int:
        tensors = tensors if tensors is not None else [t for t in node.output if t][:1]
        return sum(math.prod(self._shape(node, t)) for t in tensors)

    # --- lowering -------------------------------------------------------------------------

    def _lower(self, node) -> None:
        op_type = node.op_type
        if op_type in _CONVS:
            self._conv(node, *_CONVS[op_type])
        elif op_type in _MATMULS:
            self._matmul(node, *_MATMULS[op_type])
        elif op_type == "Gemm":
            self._gemm(node)
        elif op_type == "Einsum":
            self._einsum(node)
        elif op_type == "ConvTranspose":
            self._conv_transpose(node)
        elif op_type == "Attention":
            self._attention(node)
        elif op_type in _POOLS:
            self._pool(node)
        elif op_type in _ELIDED:
            self._pass_through(node, "elided")
        elif op_type in _MOVES:
            self._move(node)
        elif op_type in _REDUCTIONS:
            self._reduce(node)
        else:
            self._vector(node)

    def _vector(self, node) -> None:
        """Affine-by-constant, activations, normalizations, element-wise ops."""
        op_type, acts = node.op_type, self._acts(node)
        foldable = (
            (op_type in _AFFINE or op_type == "BatchNormalization") and len(acts) == 1
            or op_type in _FUSED_ACTIVATIONS and acts == [node.input[0]]
        )
        if foldable:
            value = self.values.get(acts[0])
            same_shape = self.shapes.get(acts[0]) == self.shapes.get(node.output[0])
            if value is not None and value.fusable and same_shape:
                self.values[node.output[0]] = _Value(value.sources,
                                                     self._exclusive(node.output[0]))
                self.report["folded"].append((op_type, _label(node)))
                return
        ir_op = _AFFINE.get(op_type) or _FUSED_ACTIVATIONS.get(op_type) or _ELTWISE[op_type]
        self._emit(node, self._build(
            node, Eltwise, name=self._op_name(node), op=ir_op, elements=self._elements(node),
            operands=max(1, len(acts)), inputs=self._sources(acts, node)))

    def _conv(self, node, x_index: int, w_index: int) -> None:
        x, w = node.input[x_index], node.input[w_index]
        xs, ws = self._shape(node, x), self._shape(node, w)
        attrs = _attrs(self.onnx, node)
        group = attrs.get("group", 1)
        if ws[1] * group != xs[1]:
            raise self._fail(node, f"weight {_show(ws)} with group {group} does not fit the "
                             f"{xs[1]}-channel input {_show(xs)}")
        window = self._window(node, attrs, xs, list(attrs.get("kernel_shape", ws[2:])))
        self._emit_checked(node, self._build(
            node, Conv2d, name=self._op_name(node), in_channels=xs[1], out_channels=ws[0],
            groups=group, batch=xs[0], inputs=self._sources(self._acts(node), node), **window))

    def _window(self, node, attrs, xs, kernel: list[int], pool: bool = False) -> dict[str, int]:
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
            raise self._fail(node, f"auto_pad = {auto_pad!r}: must be NOTSET, VALID, SAME_UPPER "
                             "or SAME_LOWER")
        if rank == 1:  # a 1-D window is a 2-D one of height 1
            sizes, kernel, strides, dilations = [1] + sizes, [1] + kernel, [1] + strides, [
                1] + dilations
            begin, end = [0] + begin, [0] + end
        if len(kernel) != 2 or len(strides) != 2 or len(begin) != 2 or len(end) != 2:
            raise self._fail(node, f"window attributes {attrs} do not match the "
                             f"{rank}-D input {_show(xs)}")
        fields = dict(in_h=sizes[0], in_w=sizes[1], kernel_h=kernel[0], kernel_w=kernel[1],
                      stride_h=strides[0], stride_w=strides[1], pad_top=begin[0],
                      pad_left=begin[1], pad_bottom=end[0], pad_right=end[1])
        if not pool:
            fields.update(dilation_h=dilations[0], dilation_w=dilations[1])
        return fields

    def _out_hw(self, node) -> tuple[int, int]:
        shape = self._shape(node, node.output[0])
        return (1, shape[2]) if len(shape) == 3 else (shape[2], shape[3])

    def _emit_checked(self, node, op: Conv2d | Pool) -> None:
        expected = self._out_hw(node)
        if (op.out_h, op.out_w) != expected:
            raise self._fail(node, f"the IR window gives a {op.out_h}x{op.out_w} output but "
                             f"ONNX shape inference gives {expected[0]}x{expected[1]}")
        self._emit(node, op)

    def _pool(self, node) -> None:
        x = node.input[0]
        xs = self._shape(node, x)
        attrs = _attrs(self.onnx, node)
        if node.op_type.startswith("Global"):
            attrs = {"kernel_shape": list(xs[2:]), "strides": list(xs[2:])}
        window = self._window(node, attrs, xs, list(attrs.get("kernel_shape", [])), pool=True)
        if attrs.get("ceil_mode", 0):
            # Extra bottom/right padding admits the last partial window (as the zoo's max_pool).
            out_h, out_w = self._out_hw(node)
            for out, size, k, s, lo, hi in (
                (out_h, "in_h", "kernel_h", "stride_h", "pad_top", "pad_bottom"),
                (out_w, "in_w", "kernel_w", "stride_w", "pad_left", "pad_right"),
            ):
                span = window[size] + window[lo] + window[hi]
                window[hi] += max(0, (out - 1) * window[s] + window[k] - span)
        self._emit_checked(node, self._build(
            node, Pool, name=self._op_name(node), kind=_POOLS[node.op_type], channels=xs[1],
            batch=xs[0], inputs=self._sources(self._acts(node), node), **window))

    def _gemm(self, node) -> None:
        attrs = _attrs(self.onnx, node)
        a, b = self._shape(node, node.input[0]), self._shape(node, node.input[1])
        m, k = (a[1], a[0]) if attrs.get("transA", 0) else (a[0], a[1])
        k2, n = (b[1], b[0]) if attrs.get("transB", 0) else (b[0], b[1])
        if k != k2:
            raise self._fail(node, f"inner dimensions differ: A {_show(a)}, B {_show(b)} "
                             f"(transA={attrs.get('transA', 0)}, transB={attrs.get('transB', 0)})")
        acts = [t for t in self._acts(node) if t in node.input[:2]]
        self._emit(node, self._build(node, Gemm, name=self._op_name(node), m=m, n=n, k=k,
                                     inputs=self._sources(acts, node)))

    def _matmul(self, node, a_index: int, b_index: int) -> None:
        a_name, b_name = node.input[a_index], node.input[b_index]
        a, b = list(self._shape(node, a_name)), list(self._shape(node, b_name))
        a = [1] + a if len(a) == 1 else a
        b = b + [1] if len(b) == 1 else b
        (m, k), (k2, n) = a[-2:], b[-2:]
        if k != k2:
            raise self._fail(node, f"inner dimensions differ: {_show(a)} @ {_show(b)}")
        if math.prod(b[:-2]) == 1:  # one B for every batch (a weight): fold batch into m
            batch, m = 1, math.prod(a[:-1])
        else:
            lead = _broadcast(a[:-2], b[:-2])
            if lead is None:
                raise self._fail(node, f"batch dims do not broadcast: {_show(a)} @ {_show(b)}")
            batch = math.prod(lead)
        acts = [t for t in (a_name, b_name) if t not in self.consts]
        self._emit(node, self._build(node, Gemm, name=self._op_name(node), m=m, n=n, k=k,
                                     batch=batch, inputs=self._sources(acts, node)))

    def _einsum(self, node) -> None:
        equation = _attrs(self.onnx, node)["equation"].replace(" ", "")
        shapes = [self._shape(node, t) for t in node.input]
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
        self._emit(node, self._build(node, Gemm, name=self._op_name(node), **dims,
                                     inputs=self._sources(self._acts(node), node)))

    def _conv_transpose(self, node) -> None:
        # col2im form (Caffe/PyTorch): columns (N*H*W x C_out/g*kh*kw) = x^T @ w per group,
        # then scatter-added into the output. MACs are exactly the transposed conv's.
        xs, ws = self._shape(node, node.input[0]), self._shape(node, node.input[1])
        group = _attrs(self.onnx, node).get("group", 1)
        if ws[0] != xs[1] or xs[1] % group:
            raise self._fail(node, f"weight {_show(ws)} with group {group} does not fit the "
                             f"{xs[1]}-channel input {_show(xs)}")
        gemm = self._build(node, Gemm, name=self._op_name(node), batch=group,
                           m=math.prod(xs[:1] + xs[2:]), n=math.prod(ws[1:]), k=xs[1] // group,
                           inputs=self._sources(self._acts(node), node))
        self._emit(node, gemm, outputs=[])
        self._emit(node, self._build(node, Eltwise, name=self._op_name(node, ".col2im"),
                                     op="col2im", elements=self._elements(node),
                                     inputs=(gemm.name,)))

    def _attention(self, node) -> None:
        # The fused op (opset 23+) as compiler.attention writes it: scores, softmax, context.
        # Grouped-query attention shares K/V heads, but every query head still does its own
        # s x t x dh products. Optional inputs: 3 attn_mask, 4 past_key, 5 past_value.
        inputs = list(node.input) + [""] * 7
        attrs = _attrs(self.onnx, node)
        q, k, v = (self._shape(node, t) for t in inputs[:3])
        if len(q) == 4:
            (batch, heads, seq, head_dim), kv_len, value_dim = q, k[2], v[3]
        else:
            heads, kv_heads = attrs.get("q_num_heads", 0), attrs.get("kv_num_heads", 0)
            if heads < 1 or kv_heads < 1:
                raise self._fail(node, "3-D inputs need the q_num_heads and kv_num_heads "
                                 "attributes")
            batch, seq, head_dim = q[0], q[1], q[2] // heads
            kv_len, value_dim = k[1], v[2] // kv_heads
        if inputs[4]:
            kv_len += self._shape(node, inputs[4])[2]  # cached keys come first

        def acts(*indices: int) -> list[str]:
            return [inputs[i] for i in indices if inputs[i] and inputs[i] not in self.consts]

        scores = self._build(node, Gemm, name=self._op_name(node, ".scores"),
                             batch=batch * heads, m=seq, n=kv_len, k=head_dim,
                             inputs=self._sources(acts(0, 1, 4), node))
        self._emit(node, scores, outputs=[])
        softmax = self._build(node, Eltwise, name=self._op_name(node, ".softmax"), op="softmax",
                              elements=batch * heads * seq * kv_len,
                              inputs=(scores.name,) + self._sources(acts(3), node))
        self._emit(node, softmax, outputs=[])
        context = self._build(node, Gemm, name=self._op_name(node, ".context"),
                              batch=batch * heads, m=seq, n=value_dim, k=kv_len,
                              inputs=(softmax.name,) + self._sources(acts(2, 5), node))
        self._emit(node, context)
        outputs = list(node.output) + [""] * 4
        for out, value in ((outputs[1], acts(1, 4)), (outputs[2], acts(2, 5))):
            if out:  # the K/V cache out: the inputs, concatenated in place
                self.values[out] = _Value(self._sources(value, node))
        if outputs[3]:
            self.values[outputs[3]] = _Value((scores.name,))

    def _move(self, node) -> None:
        op_type, acts = node.op_type, self._acts(node)
        outputs = [t for t in node.output if t]
        x = node.input[0]
        noop = False
        if op_type == "Concat":
            noop = len([t for t in node.input if t]) == 1
        elif op_type == "Transpose":
            shape = self._shape(node, x)
            perm = _attrs(self.onnx, node).get("perm", list(range(len(shape)))[::-1])
            moved = [axis for axis in perm if shape[axis] != 1]
            noop = moved == sorted(moved)
        elif op_type in ("Slice", "Pad", "Expand", "Tile", "Resize", "Upsample"):
            noop = x not in self.consts and self._shape(node, x) == self._shape(node, outputs[0])
        if noop:
            self._pass_through(node, "elided")
            return
        kind = _MOVES[op_type]
        if op_type in ("Resize", "Upsample"):
            mode = _attrs(self.onnx, node).get("mode", "nearest")
            if mode != "nearest":  # interpolation is arithmetic, not a copy
                self._emit(node, self._build(
                    node, Eltwise, name=self._op_name(node), op=f"resize_{mode}",
                    elements=self._elements(node), inputs=self._sources(acts[:1], node)))
                return
            acts = acts[:1]
        move = self._build(node, Move, name=self._op_name(node), kind=kind,
                           elements=self._elements(node, outputs),
                           inputs=self._sources(acts, node))
        self._emit(node, move, outputs=outputs)
        self.report["moves"].append((op_type, _label(node)))

    def _reduce(self, node) -> None:
        x = node.input[0]
        xs, ys = self._shape(node, x), self._shape(node, node.output[0])
        kind = {"ReduceMean": "avg", "ReduceMax": "max"}.get(node.op_type)
        if kind and len(xs) == 4 and ys in (xs[:2], xs[:2] + (1, 1)):  # global spatial pooling
            self._emit(node, self._build(
                node, Pool, name=self._op_name(node), kind=kind, in_h=xs[2], in_w=xs[3],
                channels=xs[1], kernel_h=xs[2], kernel_w=xs[3], stride_h=xs[2],
                stride_w=xs[3], batch=xs[0], inputs=self._sources([x], node)))
            return
        self._emit(node, self._build(
            node, Eltwise, name=self._op_name(node), op=_REDUCTIONS[node.op_type],
            elements=math.prod(xs), inputs=self._sources([x], node)))


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


def _einsum_problem(equation: str, operands: int) -> str | None:
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


def _broadcast(a: list[int], b: list[int]) -> list[int] | None:
    width = max(len(a), len(b))
    a, b = [1] * (width - len(a)) + a, [1] * (width - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return out


def _shape_of(value) -> tuple[int | None, ...] | None:
    if not value.type.HasField("tensor_type") or not value.type.tensor_type.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None
                 for d in value.type.tensor_type.shape.dim)


def _static(shape) -> bool:
    return shape is not None and all(d is not None for d in shape)


def _show(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _label(node) -> str:
    return node.name or next((t for t in node.output if t), node.op_type)


def _type(node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
