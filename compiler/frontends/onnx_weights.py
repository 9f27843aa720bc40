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

from hw.sparsity import channel_n, detect_nm, nm_mix

__all__ = ["WeightReader", "WEIGHT_INPUT"]

#: The input that holds a node's weight zero point, by node type (DequantizeLinear: 2).
ZERO_POINT_INPUT = {"ConvInteger": 3, "MatMulInteger": 3, "QLinearConv": 5, "QLinearMatMul": 5}

#: The input that holds a node's weights, by node type.
WEIGHT_INPUT = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3, "MatMul": 1, "MatMulInteger": 1,
                "QLinearMatMul": 3, "Gemm": 1}


class WeightReader:
    """The weights of ``proto`` (loaded from ``model``, a path or a ``ModelProto``)."""

    def __init__(self, onnx, proto, model, groups=(2, 4, 8, 16)):
        self.onnx, self.groups = onnx, tuple(groups)
        self.initializers = {t.name: t for t in proto.graph.initializer}
        self.base_dir = (str(Path(model).parent) if isinstance(model, (str, os.PathLike))
                         else None)

    def array(self, name: str) -> np.ndarray | None:
        tensor = self.initializers.get(name)
        if tensor is None:
            return None
        return self.onnx.numpy_helper.to_array(tensor, self.base_dir or "")

    def weight_facts(self, node, producers=None):
        """``(N:M structure or None, fraction nonzero, row-wise mix or None)`` of ``node``'s
        stored weights (None: the node has none this reader can read). The mix
        (:func:`hw.sparsity.nm_mix`) counts the output channels by their own N at the N:M's
        M, when they differ (2-D weights). Weights are the input :data:`WEIGHT_INPUT` names
        for the node's type, an initializer or a ``DequantizeLinear`` of one (``producers``:
        tensor -> node); their N:M structure runs along the GEMM's K. Conv ``(O, I/g, kh,
        kw)``: K runs over ``(kh, kw, I/g)``, input channels innermost; Gemm ``B`` (``(K,
        N)``, ``(N, K)`` with transB); MatMul ``B`` ``(..., K, N)``. Other nodes that become
        matrix ops (Einsum, ConvTranspose, Attention) are left alone."""
        index = WEIGHT_INPUT.get(node.op_type)
        if index is None or len(node.input) <= index:
            return None
        name = node.input[index]
        zero_point = ZERO_POINT_INPUT.get(node.op_type)
        dq = (producers or {}).get(name)
        if name not in self.initializers and dq is not None \
                and dq.op_type == "DequantizeLinear":
            name, zero_point, node_zp = dq.input[0], 2, dq   # quantized weights
        else:
            node_zp = node
        # a nonzero zero point stores real zeros as that value: not read (left dense)
        if zero_point is not None and len(node_zp.input) > zero_point \
                and node_zp.input[zero_point]:
            zp = self.array(node_zp.input[zero_point])
            if zp is None or np.any(zp != 0):
                return None
        w = self.array(name)
        if w is None or w.ndim < 2 or w.size == 0:
            return None
        density = float(np.count_nonzero(w)) / w.size
        if node.op_type in ("Conv", "ConvInteger", "QLinearConv"):
            if w.ndim != 4:
                return None
            w2 = w.transpose(0, 2, 3, 1).reshape(w.shape[0], -1)    # (out, K)
            nm, mix = self._nm(w2, 1, 0)
            return nm, density, mix
        trans_b = node.op_type == "Gemm" and any(
            a.name == "transB" and a.i for a in node.attribute)
        axis = -1 if trans_b else -2
        if w.ndim != 2:
            return detect_nm(w, axis=axis, groups=self.groups), density, None
        nm, mix = self._nm(w, axis, -2 if trans_b else -1)
        return nm, density, mix

    def _nm(self, w2: np.ndarray, axis: int, channel_axis: int):
        """``(N:M, row-wise mix or None)`` of 2-D weights ``w2`` (K along ``axis``): the
        layer-wise N:M (:func:`hw.sparsity.detect_nm`) and, when the output channels differ,
        their mix by N at its M (:func:`hw.sparsity.channel_n`). When some channel keeps every
        weight (no layer-wise N:M), the group size M whose channels keep the fewest weights
        on average, with N = M: the mix then says which channels are sparse."""
        nm = detect_nm(w2, axis=axis, groups=self.groups)
        k = w2.shape[axis]
        best = None
        for m in ([nm[1]] if nm is not None else self.groups):
            if k % m:
                continue
            ns = channel_n(w2, m, axis=axis, channel_axis=channel_axis)
            if best is None or ns.mean() * best[0] < best[1].mean() * m:
                best = (m, ns)
        if best is None:
            return nm, None
        m, ns = best
        mix = nm_mix(ns)
        if len(mix) == 1:
            return nm, None
        return (mix[0][0], m), mix

