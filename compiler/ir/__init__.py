"""The workload graph: a small typed IR of the ops a deep-learning accelerator runs.

Every op is a frozen dataclass validated when built. Ops that run on a matrix engine
(:class:`Gemm`, :class:`Conv2d`) expose :meth:`gemm_shape`, the matrix view the hardware
models consume. The vector engine's ops (:class:`Pool`, :class:`Activation`, :class:`Binary`,
:class:`Softmax`, :class:`Norm`, :class:`Reduce`, :class:`Cast` and the generic
:class:`Eltwise`; :data:`VECTOR_OPS`) state their work with :meth:`work` (operations per element
by kind, :mod:`compiler.ir.vector`); :class:`Move` is data movement only.

Tensor sizes have one home, here: every op has ``input_elements`` (its main input),
``weight_elements`` (a matrix op's second operand ``w``: the weights, or the second activation of
an attention product), ``output_elements``, ``read_elements`` (every operand read once) and
``macs``, and the same in bytes at a given element width (``op.output_bytes(2)``).
:attr:`Graph.batch` is the workload's sample count.

Matrix view conventions (shared with SCALE-Sim, see ``../shared/reference/scalesim.md``):
a convolution is lowered by im2col to ``out (M x N) = ifmap (M x K) @ filter (K x N)`` with
``M = batch * out_h * out_w``, ``N = out_channels / groups``, ``K = kernel_h * kernel_w *
in_channels / groups``, repeated once per group. Depthwise convolution is ``groups ==
in_channels``: one small GEMM per channel.
"""

from compiler.ir.base import (
    MAX_DIM, MAX_ELEMENTS, MAX_GRAPH_MACS, MAX_OP_MACS, GemmShape, IRError,
)
from compiler.ir.graph import Graph, Op
from compiler.ir.matrix import Conv2d, Gemm, conv2d
from compiler.ir.vector import (
    ACTIVATIONS, BINARY, ELEMENTWISE_OPS, NORMS, REDUCTIONS, VECTOR_OPS, VIEW_MOVES, Activation, Binary, Cast,
    Eltwise, Move, Norm, Pool, Reduce, Softmax,
)

__all__ = [
    "IRError",
    "GemmShape",
    "Gemm",
    "Conv2d",
    "Pool",
    "Eltwise",
    "Move",
    "Activation",
    "Binary",
    "Softmax",
    "Norm",
    "Reduce",
    "Cast",
    "ACTIVATIONS",
    "BINARY",
    "NORMS",
    "REDUCTIONS",
    "VECTOR_OPS",
    "ELEMENTWISE_OPS",
    "VIEW_MOVES",
    "Op",
    "Graph",
    "conv2d",
    "MAX_DIM",
    "MAX_OP_MACS",
    "MAX_ELEMENTS",
    "MAX_GRAPH_MACS",
]
