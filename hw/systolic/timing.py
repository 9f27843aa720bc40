"""Timing engine: the register-level model's cycles and access counts, without the values.

It walks the folds of a GEMM (in :mod:`hw.systolic.mapping` order) and applies the start-time
recurrences that the register model's handshakes produce (see :mod:`hw.systolic.regmodel` for
the microarchitecture). Per fold f with ``rows_used x cols_used`` PEs and ``T`` streamed steps:

Output-stationary::

    S_f   = f * max(T, R)                      # fold f's first operand presented
    end_f = S_f + T + 2R + cols_used - 2        # last write of its drain, plus one

Weight/input-stationary (W = weight port start, S = first streamed vector)::

    W_0 = 0,  S_0 = 1
    W_f = max(W_{f-1} + R, S_{f-1} + C - 1)     # port free; row 0 of fold f-1 copied
    S_f = max(S_{f-1} + T, W_f + 1)             # stream free; row 0 of fold f loaded
    end_f = S_f + T + R + cols_used - 1

``cycles = max_f end_f``. N:M sparse weights (``nm = (N, M)``) run the same recurrences on
``K' = K * N / M``; the activation edge carries groups of M, read once per group: OS reads
``M * ceil(T / N)`` per row and fold, WS/IS ``M`` per group its rows touch (per streamed step
in WS, per fold's weight load in IS). Dual-MAC PEs (``macs_per_pe = 2``, int4) run
``ceil(K / 2)`` on operand pairs: both edges read two operands per PE and ``pe_busy_cycles``
counts PE-cycles of two MACs each. A property test holds this equal to the register model on every
counter for random shapes, dataflows and array sizes.
"""

from __future__ import annotations

import functools

import numpy as np
from hw._jitcache import njit

from hw.systolic.config import ArrayConfig
from hw.systolic.geometry import GemmOperand, geometry
from hw.systolic.mapping import (
    K_BUSY, K_CYCLES, K_FOLDS, K_LEFT_READS, K_PSUM_READS, K_TOP_READS, K_WRITES,
    N_KERNEL_COUNTERS, ArrayCounters, check_nm, counters_from_kernel, fold_geometry, map_gemm,
)

__all__ = ["gemm_timing", "timing_counters", "tile_counters"]


@njit(cache=True)
def _timing_kernel(output_stationary, rows, cols, count, spatial_rows, spatial_cols, temporal,
                   left_group, left_share, top_group, top_share, counters):
    row_folds = (spatial_rows + rows - 1) // rows
    col_folds = (spatial_cols + cols - 1) // cols
    n_folds = count * row_folds * col_folds
    t = temporal
    cycles = 0
    busy = 0
    left = 0
    top = 0
    writes = 0
    psum_reads = 0
    start = 0
    port = 0
    for f in range(n_folds):
        inst, r0, ru, c0, cu = fold_geometry(f, row_folds, col_folds, spatial_rows,
                                             spatial_cols, rows, cols)
        busy += ru * cu * t
        if output_stationary:
            if f > 0:
                start += max(t, rows)
            end = start + t + 2 * rows + cu - 2
            # a row reads its group of activations once per `left_share` steps (dense: 1 x 1)
            left += ru * left_group * ((t + left_share - 1) // left_share)
            top += cu * top_group * t
            writes += ru * cu
        else:
            if f == 0:
                port = 0
                start = 1
            else:
                port = max(port + rows, start + cols - 1)
                start = max(start + t, port + 1)
            end = start + t + rows + cu - 1
            # rows sharing a group of activations share its reads (dense: every row reads)
            left += t * left_group * ((r0 + ru - 1) // left_share - r0 // left_share + 1)
            top += cu * top_group * ((r0 + ru - 1) // top_share - r0 // top_share + 1)
            writes += cu * t
            if r0 > 0:
                psum_reads += cu * t
        if end > cycles:
            cycles = end
    counters[K_CYCLES] = cycles
    counters[K_BUSY] = busy
    counters[K_LEFT_READS] = left
    counters[K_TOP_READS] = top
    counters[K_WRITES] = writes
    counters[K_PSUM_READS] = psum_reads
    counters[K_FOLDS] = n_folds


def timing_counters(cfg: ArrayConfig, m: int, n: int, k: int, count: int = 1,
                    nm: tuple[int, int] | None = None) -> np.ndarray:
    """The raw int64 counter vector (kernel layout of :mod:`hw.systolic.mapping`)."""
    sparse = check_nm(cfg, nm, k, "gemm_timing")
    geo = geometry(cfg.dataflow)
    if cfg.macs_per_pe > 1:
        # dual-MAC PEs: ceil(K / 2) rows or steps of operand pairs, both edges two per PE
        lanes = cfg.macs_per_pe
        k_run, sides = -(-k // lanes), (lanes, 1, lanes, 1)
    elif sparse is None:
        k_run, sides = k, (1, 1, 1, 1)
    else:
        # N:M weights: K' = K * N / M rows of compressed weights; the activations' edge
        # carries groups of M, each shared by the N compressed weights of its group
        n_keep, group = sparse
        k_run = k // group * n_keep
        act_left = geo.left_operand is GemmOperand.IFMAP
        sides = (group, n_keep, 1, 1) if act_left else (1, 1, group, n_keep)
    mp = map_gemm(cfg, m, n, k_run, count)
    vec = np.zeros(N_KERNEL_COUNTERS, np.int64)
    _timing_kernel(geo.output_stationary, cfg.rows, cfg.cols, count, mp.spatial_rows,
                   mp.spatial_cols, mp.temporal, *sides, vec)
    return vec


@functools.lru_cache(maxsize=65536)
def tile_counters(cfg: ArrayConfig, m: int, n: int, k: int, count: int = 1,
                  nm: tuple[int, int] | None = None) -> tuple[int, ...]:
    """:func:`timing_counters` as a tuple of ints, memoised: the tiler and the executor time
    the same few tile shapes thousands of times per network."""
    return tuple(timing_counters(cfg, m, n, k, count, nm).tolist())


def gemm_timing(cfg: ArrayConfig, m: int, n: int, k: int, count: int = 1,
                nm: tuple[int, int] | None = None) -> ArrayCounters:
    """Cycles and accesses of ``count`` back-to-back GEMMs ``(m x k) @ (k x n)`` on ``cfg``.

    The GEMMs are issued as one stream of folds (instance-major), so the next GEMM's first
    fold overlaps the previous one's drain exactly as consecutive folds of one GEMM do.
    ``nm = (N, M)``: the weights ``b`` are N:M sparse along K on the array's sparse PEs
    (:func:`hw.systolic.regmodel.run_gemm`): the array runs ``K * N / M`` compressed rows;
    ``filter_reads`` count compressed values (each comes with its ``ceil(log2 M)``-bit index)
    and ``ifmap_reads`` the activations the groups carry.
    """
    for key, value in (("m", m), ("n", n), ("k", k), ("count", count)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"gemm_timing: {key} = {value!r}: must be an integer >= 1")
    return counters_from_kernel(cfg.dataflow, timing_counters(cfg, int(m), int(n), int(k),
                                                              int(count), nm))
