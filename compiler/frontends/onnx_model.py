"""Reading an ONNX model and preparing it for shape inference.

:func:`load_model` reads a file (weights stay on disk: only small external initializers, which
shape inference must see, are read) or takes a ``ModelProto``. :func:`prepare_for_inference`
makes the copy that shape inference sees: input dimensions fixed (batch, ``dims``), large
initializers reduced to their type. :func:`infer_shapes` runs ONNX shape inference with data
propagation; :func:`shape_of` and :func:`topological` read the result.
"""

from __future__ import annotations

import heapq
import math
import os
from pathlib import Path
from typing import Any

from compiler.frontends.onnx_support import OnnxImportError, first_line

__all__ = ["load_model", "prepare_for_inference", "infer_shapes", "shape_of", "topological",
           "has_subgraph"]

# Initializers larger than this are shown to shape inference as typed inputs (their shape is
# all it needs): no copy of the weights, and external data is never read.
_INLINE_LIMIT = 4096


def load_model(onnx, model) -> tuple[Any, str, str]:
    """``(proto, label, default name)`` of a file path or ``ModelProto``; model-local functions
    are inlined. ``label`` names the model in messages."""
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
            raise OnnxImportError(f"{path}: not an ONNX model ({first_line(exc)})") from exc
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
                                      f"{str(data)!r}: {first_line(exc)}") from exc
            tensor.data_location = onnx.TensorProto.DEFAULT
            del tensor.external_data[:]


def prepare_for_inference(onnx, proto, label: str, batch: int | None, dims: dict[str, int]):
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



def infer_shapes(onnx, prepared, label: str):
    """ONNX shape inference with data propagation (so ``Shape -> Gather -> Concat -> Reshape``
    chains resolve); a failure is an :class:`OnnxImportError` naming the model."""
    try:
        return onnx.shape_inference.infer_shapes(prepared, data_prop=True)
    except Exception as exc:  # onnx raises several types (InferenceError, ValidationError...)
        raise OnnxImportError(f"{label}: ONNX shape inference failed: {first_line(exc)}") from exc


def shape_of(value) -> tuple[int | None, ...] | None:
    if not value.type.HasField("tensor_type") or not value.type.tensor_type.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None
                 for d in value.type.tensor_type.shape.dim)



def has_subgraph(onnx, node) -> bool:
    kinds = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    return any(attr.type in kinds for attr in node.attribute)


def topological(nodes, known: set[str]) -> list:
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

