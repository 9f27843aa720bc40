"""How a GEMM maps onto the array: its extents and folds, the fold order, the result counters.

Which GEMM dimension goes to the array's rows, columns and time, and which operand each edge
reads, is :mod:`hw.systolic.geometry`'s table (per dataflow).

A *fold* is one placement of an ``R x C`` tile of the spatial dimensions. Folds run in this
order: GEMM instance (``count``) outermost, then column folds, then row folds (innermost,
so in WS/IS the K-folds of one output tile are consecutive). A partial fold uses
``rows_used <= R`` rows and ``cols_used <= C`` columns; unused PEs idle.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from hw._jitcache import njit

from hw.systolic.config import ArrayConfig, Dataflow
from hw.systolic.geometry import geometry

__all__ = ["ArrayCounters", "GemmMapping", "map_gemm", "fold_geometry", "counters_from_kernel",
           "check_nm"]

# Index of each counter in the int64 vector the Numba kernels fill (register model and timing
# engine share the layout, so tests compare the vectors element by element). LEFT and TOP count
# the reads of the operands entering at the left and top edges (hw.systolic.geometry).
K_CYCLES, K_BUSY, K_LEFT_READS, K_TOP_READS, K_WRITES, K_PSUM_READS, K_HAZARDS, K_FOLDS = range(8)
N_KERNEL_COUNTERS = 8


@dataclass(frozen=True)
class GemmMapping:
    """Spatial and temporal extents of a GEMM on the array, per :func:`map_gemm`."""

    dataflow: Dataflow
    count: int
    spatial_rows: int
    spatial_cols: int
    temporal: int
    row_folds: int
    col_folds: int

    @property
    def folds(self) -> int:
        return self.count * self.row_folds * self.col_folds


def map_gemm(cfg: ArrayConfig, m: int, n: int, k: int, count: int = 1) -> GemmMapping:
    """Place ``count`` GEMMs of ``m x k @ k x n`` on the array of ``cfg``."""
    sr, sc, t = geometry(cfg.dataflow).split(m, n, k)
    return GemmMapping(
        dataflow=cfg.dataflow, count=count, spatial_rows=sr, spatial_cols=sc, temporal=t,
        row_folds=-(-sr // cfg.rows), col_folds=-(-sc // cfg.cols),
    )


@njit(cache=True, inline="always")
def fold_geometry(f, row_folds, col_folds, spatial_rows, spatial_cols, rows, cols):
    """Fold ``f`` -> (instance, row0, rows_used, col0, cols_used), in the documented order."""
    per_instance = row_folds * col_folds
    instance = f // per_instance
    rest = f - instance * per_instance
    col_fold = rest // row_folds
    row_fold = rest - col_fold * row_folds
    row0 = row_fold * rows
    col0 = col_fold * cols
    return (instance, row0, min(rows, spatial_rows - row0), col0, min(cols, spatial_cols - col0))


@dataclass(frozen=True)
class ArrayCounters:
    """What one run of the array cost. All counts are integers; nothing is estimated.

    Attributes
    ----------
    cycles:
        From cycle 0 (the first operand or weight read from SRAM) to the cycle after the last
        output (or partial sum) is written: includes weight preload, edge skew, pipeline fill,
        compute, drain and every cycle the array waited on its own control (no memory stalls:
        operands are assumed to be in SRAM).
    pe_busy_cycles:
        Sum over PEs of the cycles in which the PE performed a useful multiply-accumulate.
    ifmap_reads, filter_reads:
        Elements read from the ``a`` (ifmap) and ``b`` (filter) operand SRAM ports, counting
        every re-read across folds (for convolutions: every im2col element, no window reuse).
    ofmap_writes:
        Elements written to the output SRAM, partial sums included (WS/IS write each K-fold).
    ofmap_reads:
        Partial sums read back to be accumulated (WS/IS K-folds after the first).
    folds:
        Tiles placed on the array.
    """

    cycles: int
    pe_busy_cycles: int
    ifmap_reads: int
    filter_reads: int
    ofmap_writes: int
    ofmap_reads: int
    folds: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def counters_from_kernel(dataflow: Dataflow, vec: np.ndarray) -> ArrayCounters:
    """Name the kernel's edge-based counters (left / top operand) by operand."""
    ifmap, filt = geometry(dataflow).by_operand(vec[K_LEFT_READS], vec[K_TOP_READS])
    return ArrayCounters(
        cycles=int(vec[K_CYCLES]), pe_busy_cycles=int(vec[K_BUSY]), ifmap_reads=int(ifmap),
        filter_reads=int(filt), ofmap_writes=int(vec[K_WRITES]),
        ofmap_reads=int(vec[K_PSUM_READS]), folds=int(vec[K_FOLDS]),
    )


def check_nm(cfg: ArrayConfig, nm, k: int | None = None, where: str = "run_gemm"):
    """``nm`` as ``(N, M)``, or ``None`` for a dense GEMM; a one-line ``ValueError`` unless the
    array's PEs take it (``cfg.sparse_m == M``, ``1 <= N <= M``, ``K`` a multiple of M)."""
    if nm is None:
        return None
    if (not isinstance(nm, (tuple, list)) or len(nm) != 2
            or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in nm)):
        raise ValueError(f"{where}: nm = {nm!r}: must be (N, M), e.g. (2, 4), or None (dense)")
    n_keep, m_grp = int(nm[0]), int(nm[1])
    if cfg.sparse_m == 0:
        raise ValueError(f"{where}: nm = {n_keep}:{m_grp}: the array has dense PEs "
                         f"(sparse_m = 0); set sparse_m = {m_grp} for N:M sparse PEs")
    if m_grp != cfg.sparse_m or not 1 <= n_keep <= m_grp:
        raise ValueError(f"{where}: nm = {n_keep}:{m_grp}: the array's sparse PEs take N:"
                         f"{cfg.sparse_m} with 1 <= N <= {cfg.sparse_m}")
    if k is not None and k % m_grp:
        raise ValueError(f"{where}: K = {k} with {n_keep}:{m_grp} sparsity: K must be a "
                         f"multiple of M = {m_grp} (pad the weights with zero rows)")
    return n_keep, m_grp
