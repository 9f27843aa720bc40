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
  (Softmax) and ``<node>.context`` (Gemm), as :mod:`compiler.attention` writes attention.
* **Folded into the producing op** (listed in :attr:`OnnxImportReport.folded`), as an NVDLA-like
  post-processing unit applies them to the op's output on the fly: ``BatchNormalization`` and
  ``Add``/``Sub``/``Mul``/``Div`` by a constant (per-channel affine: bias, scale), and the
  piecewise-linear activations ``Relu``, ``LeakyRelu``, ``PRelu``, ``Clip``, ``HardSigmoid``,
  ``HardSwish``, ``ThresholdedRelu``. Folding needs a compute producer (not a Move, not the
  graph input) whose output nothing else reads; otherwise the node becomes a vector op.
* **Always visible** as typed vector ops where the IR has one (:class:`Activation`,
  :class:`Binary`, :class:`Softmax`, :class:`Norm`, :class:`Reduce`), else :class:`Eltwise`:
  transcendental activations (``Gelu``, ``Sigmoid``, ``Tanh``, ``Erf``...), which need a LUT or
  a vector unit; row-wise normalizations (``Softmax``, ``LayerNormalization``...), which need
  statistics of the whole row; element-wise ops of two activations; reductions. Global
  ``ReduceMean``/``ReduceMax`` over H and W are :class:`Pool`, like ``GlobalAveragePool``.
* **Decompositions** that exporters write for layer norm (below opset 17), RMS norm, GELU
  (below opset 20, erf and tanh forms) and SiLU become that one typed op, named after the
  chain's first node, when nothing outside the chain reads its intermediate tensors
  (:mod:`~compiler.frontends.onnx_patterns`; listed in :attr:`OnnxImportReport.fused`).
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

The import is split by topic: :mod:`~compiler.frontends.onnx_model` reads the model and
prepares it for shape inference, :mod:`~compiler.frontends.onnx_graph` holds one import's state,
:mod:`~compiler.frontends.onnx_ops` converts nodes to IR ops,
:mod:`~compiler.frontends.onnx_patterns` recognises the chains of nodes that are one op, and
:mod:`~compiler.frontends.onnx_support` has the op tables, the limits, the error and the report.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Union

from compiler.frontends.onnx_graph import Importer, Value
from compiler.frontends.onnx_model import infer_shapes, load_model, prepare_for_inference
from compiler.frontends.onnx_ops import lower
from compiler.frontends.onnx_patterns import emit_pattern, find_patterns
from compiler.frontends.onnx_support import (
    OnnxImportError, OnnxImportReport, node_label, node_type, unsupported_message,
    why_unsupported,
)
from compiler.frontends.onnx_weights import WeightReader
from compiler.ir import Graph, IRError

__all__ = ["OnnxImportError", "OnnxImportReport", "import_onnx"]

PathLike = Union[str, "os.PathLike[str]"]


def import_onnx(
    model: PathLike | Any,
    *,
    batch: int | None = None,
    skip_unsupported: bool = False,
    name: str | None = None,
    dims: Mapping[str, int] | None = None,
    sparsity_from_weights: bool = False,
    nm_groups: tuple[int, ...] | None = None,
) -> tuple[Graph, OnnxImportReport]:
    """Import an ONNX model (a file path or an ``onnx.ModelProto``) as a :class:`Graph`.

    Parameters
    ----------
    batch:
        The batch size. It replaces a symbolic or unknown first dimension of every graph input
        (default 1); a model with a fixed batch dimension must agree with it. The first input's
        first dimension is the graph's :attr:`~compiler.ir.Graph.batch` (samples per run).
    skip_unsupported:
        Skip nodes npulab cannot express instead of failing; they are listed in the report.
    name:
        The graph's name; defaults to the file's stem, else the ONNX graph's name.
    dims:
        Values for other symbolic input dimensions, by their ``dim_param`` name (e.g.
        ``{"sequence": 128}``); npulab simulates static shapes.
    sparsity_from_weights:
        Read each convolution's and matrix product's weights and set the op's ``weight_nm`` to
        the N:M structure their zeros have along K (:func:`hw.sparsity.detect_nm`; conv weights
        in NHWC order, input channels innermost, as 2:4 pruning tools prune them). When the
        output channels differ in N at that M, ``weight_nm_rows`` gets their mix (row-wise
        N:M, :func:`hw.sparsity.channel_n`; 2-D weights). Weights are read one tensor at a
        time (external data too).
    nm_groups:
        With ``sparsity_from_weights``: the group sizes M to look for N:M structure at (default
        2, 4, 8 and 16, the sparsest wins). Give an array's ``sparse_m`` alone to find the N its
        PEs can skip: weights pruned 1:4 and then quantized may also look 3:16, which a 4-group
        array runs as 3:4.

    Returns
    -------
    ``(graph, report)``: ops in execution order (the ONNX topological order), and the nodes
    that were folded, kept as moves, elided, skipped or fused into one op with their chain.

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
    if not isinstance(sparsity_from_weights, bool):
        raise OnnxImportError(f"sparsity_from_weights = {sparsity_from_weights!r}: must be True "
                              f"or False")
    if nm_groups is not None and (
            not isinstance(nm_groups, tuple) or not nm_groups
            or any(isinstance(g, bool) or not isinstance(g, int) or not 2 <= g <= 64
                   for g in nm_groups)):
        raise OnnxImportError(f"nm_groups = {nm_groups!r}: must be a tuple of group sizes in "
                              f"2..64, or None")
    proto, label, default_name = load_model(onnx, model)
    if name is None:
        name = default_name
    prepared = prepare_for_inference(onnx, proto, label, batch, dims)
    inferred = infer_shapes(onnx, prepared, label)
    imp = Importer(onnx, proto, prepared, inferred, label, name, skip_unsupported)
    if sparsity_from_weights:
        imp.weight_reader = WeightReader(onnx, proto, model, nm_groups or (2, 4, 8, 16))
    return _run(imp)


def _run(imp: Importer) -> tuple[Graph, OnnxImportReport]:
    """Walk the sorted nodes once: constants are elided, unsupported nodes fail the import (or
    are skipped), a recognised chain becomes its op at its last node, every other node goes to
    its converter."""
    unsupported = [(node, why) for node in imp.nodes if not imp.is_const_node(node)
                   for why in [why_unsupported(imp.onnx, node, imp.shapes)] if why is not None]
    if unsupported and not imp.skip_unsupported:
        raise OnnxImportError(unsupported_message(imp.label, unsupported))
    skip = {id(node) for node, _ in unsupported}
    chains = find_patterns(imp)
    for node in imp.nodes:
        if imp.is_const_node(node):
            imp.report["elided"].append((node.op_type, node_label(node)))
        elif id(node) in chains:
            if node is chains[id(node)].nodes[-1]:  # the chain's output is made here
                emit_pattern(imp, chains[id(node)])
        elif id(node) in skip:
            imp.report["skipped"].append((node_type(node), node_label(node)))
            sources = imp.sources([t for t in node.input if t and t not in imp.consts],
                                  node, strict=False)
            for out in node.output:
                if out:
                    imp.values[out] = Value(sources)
        else:
            lower(imp, node)
    if not imp.ops:
        raise OnnxImportError(f"{imp.label}: the model has no op npulab can simulate "
                              "(every node is a constant, a view or skipped)")
    try:
        graph = Graph(imp.name, tuple(imp.ops), batch=imp.batch)
    except IRError as exc:
        raise OnnxImportError(f"{imp.label}: {exc}") from exc
    report = OnnxImportReport(**{k: tuple(v) for k, v in imp.report.items()})
    return graph, report
