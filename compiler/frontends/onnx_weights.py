"""Reading an ONNX model's weights for what their values say (issue 27): the N:M structure of
each convolution's and matrix product's zeros, and the fraction that are nonzero
(``import_onnx(..., sparsity_from_weights=True)``).

Weights are read one tensor at a time when an op asks, external data included (the importer
otherwise never reads large initializers), and dropped after.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from hw.sparsity import detect_nm

__all__ = ["WeightReader"]


class WeightReader:
    """The weights of ``proto`` (loaded from ``model``, a path or a ``ModelProto``)."""

    def __init__(self, onnx, proto, model):
        self.onnx = onnx
        self.initializers = {t.name: t for t in proto.graph.initializer}
        self.base_dir = (str(Path(model).parent) if isinstance(model, (str, os.PathLike))
                         else None)

    def array(self, name: str) -> np.ndarray | None:
        tensor = self.initializers.get(name)
        if tensor is None:
            return None
        return self.onnx.numpy_helper.to_array(tensor, self.base_dir or "")

    def weight_facts(self, node, producers=None) -> tuple[tuple[int, int] | None, float] | None:
        """``(N:M structure or None, fraction nonzero)`` of ``node``'s weights (None: no weight
        initializer). The N:M structure runs along the GEMM's K. Conv ``(O, I/g, kh, kw)``: K runs over ``(kh, kw, I/g)``, input
        channels innermost; Gemm ``B`` (``(K, N)``, ``(N, K)`` with transB); MatMul ``B``
        ``(..., K, N)``. An op the importer built from a chain (MatMul + Add) is named by its
        last node: ``producers`` (tensor -> node) leads back to the matrix node, a few hops."""
        frontier, seen = [node], set()
        for _ in range(4):
            found = next((n for n in frontier if n.op_type in ("Conv", "Gemm", "MatMul")), None)
            if found is not None:
                return self._node_facts(found)
            if not producers:
                return None
            seen.update(id(n) for n in frontier)
            frontier = [producers[t] for n in frontier for t in n.input
                        if t in producers and id(producers[t]) not in seen]
        return None

    def _node_facts(self, node):
        if len(node.input) < 2:
            return None
        w = self.array(node.input[1])
        if w is None or w.ndim < 2 or w.size == 0:
            return None
        density = float(np.count_nonzero(w)) / w.size
        if node.op_type == "Conv":
            if w.ndim != 4:
                return None
            return detect_nm(w.transpose(0, 2, 3, 1).reshape(w.shape[0], -1), axis=1), density
        trans_b = node.op_type == "Gemm" and any(
            a.name == "transB" and a.i for a in node.attribute)
        return detect_nm(w, axis=-1 if trans_b else -2), density
