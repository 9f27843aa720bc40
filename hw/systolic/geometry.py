"""Dataflow geometry: where each GEMM dimension and operand goes on the array, per dataflow.

A GEMM ``out (M x N) = a (M x K) @ b (K x N)`` (``a`` is the ifmap, ``b`` the filter) is laid
out on an ``R x C`` array as (the same convention as SCALE-Sim, ``../shared/reference/scalesim.md``):

=========  ===============  ===============  =============  ===========  ===========  ==========
dataflow   array rows hold  array cols hold  streamed (T)   left edge    top edge     stationary
=========  ===============  ===============  =============  ===========  ===========  ==========
OS         M                N                K              ``a``        ``b``        ``out``
WS         K                N                M              ``a``        ``b``        ``b``
IS         K                M                N              ``b``        ``a``        ``a``
=========  ===============  ===============  =============  ===========  ===========  ==========

The left edge feeds one element per array row per cycle, so the vector it reads runs along the
rows' dimension; the top edge feeds one element per column (streamed in OS, loaded row by row
into the stationary registers through the weight port in WS/IS), a vector along the columns'
dimension.

This table is the one home of these rules: :func:`hw.systolic.mapping.map_gemm` (extents and
folds), the timing engine, the tiler's granules, the lowering's edge strides, the executor
(which scratchpad each edge reads), the energy rates (register bits per MAC) and, through
:data:`GEOMETRY_CODES`, the mapper's Numba cost kernel all read it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from hw.systolic.config import Dataflow

__all__ = ["GemmDim", "GemmOperand", "DataflowGeometry", "geometry", "DATAFLOW_CODES",
           "GEOMETRY_CODES", "G_ROWS_DIM", "G_COLS_DIM", "G_TIME_DIM", "G_LEFT", "G_TOP",
           "G_OUTPUT_STATIONARY"]


class GemmDim(enum.IntEnum):
    """A dimension of ``out (M x N) = a (M x K) @ b (K x N)``; the value is the kernels' code."""

    M = 0
    N = 1
    K = 2


class GemmOperand(enum.IntEnum):
    """A GEMM operand, named by the scratchpad that holds it; the value is the kernels' code."""

    IFMAP = 0    # a (M x K)
    FILTER = 1   # b (K x N)
    OFMAP = 2    # out (M x N)

    @property
    def dims(self) -> tuple[GemmDim, GemmDim]:
        """``(row dimension, column dimension)`` of the operand's matrix."""
        return _OPERAND_DIMS[self]

    @property
    def sram(self) -> str:
        """The scratchpad's name (``ifmap``, ``filter``, ``ofmap``)."""
        return self.name.lower()


_OPERAND_DIMS = {GemmOperand.IFMAP: (GemmDim.M, GemmDim.K),
                 GemmOperand.FILTER: (GemmDim.K, GemmDim.N),
                 GemmOperand.OFMAP: (GemmDim.M, GemmDim.N)}


@dataclass(frozen=True)
class DataflowGeometry:
    """One row of the module's table.

    Attributes
    ----------
    dataflow: the dataflow this row describes.
    rows_dim, cols_dim: the GEMM dimensions spread over the array's rows and columns (spatial).
    time_dim: the GEMM dimension streamed through the array over time (temporal).
    left_operand: the operand entering at the left edge, one element per row per cycle.
    top_operand: the operand entering at the top edge, one element per column.
    stationary: what stays in the PEs during a fold (the output in OS).
    """

    dataflow: Dataflow
    rows_dim: GemmDim
    cols_dim: GemmDim
    time_dim: GemmDim
    left_operand: GemmOperand
    top_operand: GemmOperand
    stationary: GemmOperand

    def __post_init__(self) -> None:
        where = f"DataflowGeometry({self.dataflow.name})"
        if {self.rows_dim, self.cols_dim, self.time_dim} != set(GemmDim):
            raise ValueError(f"{where}: rows_dim, cols_dim, time_dim must be M, N, K in some order")
        if {self.left_operand, self.top_operand} != {GemmOperand.IFMAP, GemmOperand.FILTER}:
            raise ValueError(f"{where}: left_operand and top_operand must be IFMAP and FILTER")
        if (self.rows_dim not in self.left_operand.dims
                or self.cols_dim not in self.top_operand.dims):
            raise ValueError(f"{where}: the left operand must span rows_dim and the top operand "
                             f"cols_dim")

    @property
    def output_stationary(self) -> bool:
        """The PEs hold the outputs (both operands stream) rather than an operand."""
        return self.stationary is GemmOperand.OFMAP

    @property
    def passed_operands(self) -> int:
        """Operands a PE latches and passes on per MAC: both when the output is stationary,
        only the streamed one when an operand is."""
        return 2 if self.output_stationary else 1

    def split(self, m: int, n: int, k: int) -> tuple[int, int, int]:
        """``(spatial rows, spatial cols, temporal)`` extents of an ``m x k @ k x n`` GEMM."""
        ext = (m, n, k)
        return ext[self.rows_dim], ext[self.cols_dim], ext[self.time_dim]

    def per_dim(self, rows, cols, time) -> tuple:
        """``(for M, for N, for K)``: ``rows`` for the dimension on the array's rows, ``cols``
        for the one on its columns, ``time`` for the streamed one."""
        out = [None, None, None]
        out[self.rows_dim], out[self.cols_dim], out[self.time_dim] = rows, cols, time
        return tuple(out)

    def by_operand(self, left, top) -> tuple:
        """Per-edge quantities ``left, top`` named by operand: ``(ifmap's, filter's)``."""
        return (left, top) if self.left_operand is GemmOperand.IFMAP else (top, left)

    def row_major_edge_strides(self, m: int, n: int, k: int) -> tuple[int, int]:
        """Element strides of the vectors the left and top edges read per cycle when every
        operand tile (``m x k`` ifmap, ``k x n`` filter) is stored row-major: the left edge's
        vector runs along ``rows_dim`` of the left operand, the top edge's along ``cols_dim`` of
        the top operand."""
        ext = (m, n, k)
        return (_row_major_stride(self.left_operand, self.rows_dim, ext),
                _row_major_stride(self.top_operand, self.cols_dim, ext))


def _row_major_stride(operand: GemmOperand, dim: GemmDim, ext) -> int:
    row_dim, col_dim = operand.dims
    return ext[col_dim] if dim is row_dim else 1


_M, _N, _K = GemmDim.M, GemmDim.N, GemmDim.K
_IFMAP, _FILTER, _OFMAP = GemmOperand.IFMAP, GemmOperand.FILTER, GemmOperand.OFMAP
_GEOMETRIES = {
    Dataflow.OS: DataflowGeometry(Dataflow.OS, _M, _N, _K, _IFMAP, _FILTER, _OFMAP),
    Dataflow.WS: DataflowGeometry(Dataflow.WS, _K, _N, _M, _IFMAP, _FILTER, _FILTER),
    Dataflow.IS: DataflowGeometry(Dataflow.IS, _K, _M, _N, _FILTER, _IFMAP, _IFMAP),
}


def geometry(dataflow: Dataflow | str) -> DataflowGeometry:
    """The geometry of ``dataflow`` (a :class:`Dataflow` or its value, ``"os"``/``"ws"``/``"is"``)."""
    return _GEOMETRIES[Dataflow(dataflow)]


#: Dataflow -> its row in :data:`GEOMETRY_CODES` (the Numba kernels' dataflow code).
DATAFLOW_CODES = {df: code for code, df in enumerate(Dataflow)}

#: Columns of :data:`GEOMETRY_CODES`.
G_ROWS_DIM, G_COLS_DIM, G_TIME_DIM, G_LEFT, G_TOP, G_OUTPUT_STATIONARY = range(6)

#: The table as plain int64 codes for Numba kernels: row ``DATAFLOW_CODES[df]``, columns
#: ``G_*`` (dimensions as :class:`GemmDim`, operands as :class:`GemmOperand`, 0/1 flag).
GEOMETRY_CODES = np.array(
    [[g.rows_dim, g.cols_dim, g.time_dim, g.left_operand, g.top_operand, g.output_stationary]
     for g in (_GEOMETRIES[df] for df in DATAFLOW_CODES)], np.int64)
GEOMETRY_CODES.flags.writeable = False
