"""Register-level model of the systolic array: real values through every PE register, every cycle.

This is the executable specification the Amaranth RTL is checked against, cycle for cycle and
bit for bit. Everything below is a *contract*; the timing engine (:mod:`hw.systolic.timing`)
reproduces its cycle counts and access counters without computing values.

Cycle conventions (all dataflows)
---------------------------------
* Cycle 0 is the first cycle in which an operand (or weight) is read from SRAM.
* "At cycle t" means during cycle t; registers load at the clock edge that ends the cycle.
  A value read from a register during cycle t is the value loaded at the end of cycle t-1.
* Edge skew: the operand SRAM port of each edge presents one vector per cycle; row ``i``'s
  left-edge input passes through a delay line of ``i`` registers, column ``j``'s top-edge
  input (OS) through ``j`` registers. So PE (i, j) sees the element the feeder presented at
  cycle t during cycle ``t + i + j``: the classic wavefront.
* Operands moving right (and, in OS, down) are latched by every PE they pass: one hop per cycle.
* ``cycles`` counts up to and including the cycle in which the last output is written.

Output-stationary (OS) microarchitecture
----------------------------------------
PE (i, j) owns output (m0+i, n0+j). Per PE: operand registers ``a`` (to the right) and ``b``
(downward), an accumulator ``acc`` and a result register ``res`` that doubles as one stage of
the column's drain shift chain. Control bits ``first``/``last`` travel with ``a``.

* Fold f (started at cycle S_f) presents ``a[m0+i, k]`` on row i and ``b[k, n0+j]`` on column
  j at cycle ``S_f + k`` (before skew), so PE (i, j) performs MAC k during cycle
  ``S_f + k + i + j``: ``acc <= a*b`` on ``first``, else ``acc <= acc + a*b``; on ``last`` the
  final sum is also loaded into ``res``.
* Drain: when ``last`` reaches the bottom PE of column j (cycle ``S_f + K + R + j - 2``), the
  column's ``res`` chain shifts down once per cycle for the next R cycles; the bottom
  register is written to the output SRAM each of those cycles (bottom row first). During
  shift s (1..R) only rows ``i >= s`` load from above, so a PE that finishes its next fold
  may load ``res`` while the drain is still passing older values below it.
* The next fold starts when the current one has finished streaming **and** at least R cycles
  after the current one started: fold interval ``max(K, R)``. With the interval R a row's
  next ``res`` load lands exactly on the edge where its old value moves down, never earlier.
  Folds of back-to-back work (next output tile, next GEMM in a batch) thus overlap fully.

Weight/input-stationary (WS, IS) microarchitecture
--------------------------------------------------
WS holds ``b[k0+i, n0+j]`` in PE (i, j) and streams rows of ``a`` from the left; IS is the
same hardware on the transposed problem (``a`` stationary, ``b`` streamed, output
transposed back). Per PE: the streamed operand register ``x`` (to the right) with ``valid``
and ``first`` bits, a **double-buffered** stationary operand (``shadow``, ``active``) and a
partial-sum register ``psum`` that flows down the column. Each stationary value carries a
``valid`` bit; a PE whose value is not valid (unused rows/columns of a partial fold) passes
``psum`` through without computing.

* Weight port: one array row of C stationary values per cycle, written into the ``shadow``
  registers of that row (rows 0, 1, ..., R-1 on consecutive cycles; R cycles per fold).
* When a fold's ``first`` input reaches PE (i, j) the PE copies ``shadow`` into ``active`` and
  uses it in the same cycle. Row i's first input arrives at ``S_f + i + j``, one row per
  cycle -- the same pace the weight port writes rows -- so a fold's weights only need to be
  one cycle ahead of its inputs: preloading is hidden except for a single cycle.
* ``psum(i, j) <= psum(i-1, j) + x * active`` (row 0 adds to zero). The sum for input row m
  leaves the bottom of column j at cycle ``S_f + m + R + j`` and is written to the output
  SRAM; for K-folds after the first it is first read and added there (an accumulator
  read-modify-write in the same cycle).
* Handshakes (what the controller actually checks):
  the weight port may start fold f+1 once fold f's ``first`` has reached PE (0, C-1) (the last
  ``active`` copy of row 0; later rows trail by one cycle, as do their writes) and the port
  has finished fold f; the feeder starts fold f+1 once it has streamed fold f's T vectors
  and the port wrote row 0 of fold f+1 in an earlier cycle.

N:M sparse PEs (``cfg.sparse_m = M``, ``run_gemm(..., nm=(N, M))``)
-------------------------------------------------------------------
The weights ``b`` are N:M sparse along K (every group of M consecutive k holds at most N
nonzeros) and stored compressed: ``K' = K * N / M`` rows of values, each with its
``ceil(log2 M)``-bit position in its group (:func:`hw.sparsity.compress_nm`; the scheme of
NVIDIA's sparse tensor cores). Compressed row r belongs to group ``r // N``. The array runs
the dense contract above on K' instead of K (the reduction shrinks, so OS streams K' steps and
WS/IS fold K' rows), with one change per PE: the register that carries activations carries the
whole group of M, and the weight's index selects the one the PE multiplies (a M:1 mux).

* OS: ``a`` carries group ``step // N`` of row i (the feeder reads it once and presents it for
  the N steps of its compressed weights); ``b`` carries each weight with its index down the
  column.
* WS: the stationary registers hold weight and index; row r's streamed operand is group
  ``r // N`` of the input row (rows of one group share one read of it).
* IS: the stationary registers hold activation groups (the weight port reads a group once for
  the N rows that share it); the streamed weights carry their indices.

Compressed slots of a group with fewer than N nonzeros hold zero weights (they still occupy a
PE cycle). Sums add the kept products in k order within each group.

Dual-MAC int4 PEs (``cfg.macs_per_pe = 2``)
-------------------------------------------
K is padded with zeros to whole pairs and the array runs the dense contract on ``K / 2``: row
(or step) r carries operands k = 2r and 2r + 1 on both sides, every operand register holds
the pair, and the PE adds both products to its sum in one addition (on ``first`` a pair's sum
alone is saturated, when a narrow accumulator saturates).

Numerics: integer operands are int8/int16; accumulators follow :mod:`hw.numerics`
(``acc_bits`` wide, wrapping or saturating at every addition). OS adds products in k order.
WS/IS add down each column (k order within a fold), then add each fold's sum to the
accumulator (k order across folds): with saturation, or in fp32, that grouping is part of the
contract. Floating-point operands (fp16, bf16, fp8 E4M3 / E5M2) enter as float32 (exact);
each product and each addition rounds to nearest-even in fp32 (:func:`hw.numerics.float_mac`;
products are exact except a bf16 product beyond fp32's range).

Code: this module holds the contract above, :func:`run_gemm` and :func:`run_gemm_rows`; the
two dataflow kernels (OS; WS/IS) and what makes them fast are in
:mod:`hw.systolic._dataflow_kernels`, what the sparse and dual-MAC PEs do per cycle in
:mod:`hw.systolic._pe_kernels`, the snapshot layout and recording in
:mod:`hw.systolic.snapshots` (:func:`snapshot_layout` is re-exported here).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields

import numpy as np

from hw.numerics import FLOAT_FORMATS, round_to_format
from hw.sparsity import channel_n, compress_nm, row_tiles
from hw.systolic._dataflow_kernels import _PLACES, _os_kernel, _stationary_kernel
from hw.systolic.config import ArrayConfig, ConfigError, Dataflow, Overflow, Precision
from hw.systolic.geometry import GemmDim, geometry
from hw.systolic.mapping import (
    K_CYCLES, K_HAZARDS, N_KERNEL_COUNTERS, ArrayCounters, check_nm, counters_from_kernel,
    map_gemm,
)
from hw.systolic.snapshots import _snapshot_fields, snapshot_layout

_NO_OFFSETS = np.zeros(0, np.int64)  # snapshot offsets of a run without snapshots

__all__ = ["RegisterResult", "run_gemm", "run_gemm_rows", "check_nm", "max_cycles_bound",
           "snapshot_layout"]


@dataclass(frozen=True)
class RegisterResult:
    """Output of :func:`run_gemm`.

    Attributes
    ----------
    output:
        ``(M, N)`` (or ``(batch, M, N)``) result: int64 holding ``acc_bits``-wide values for
        integer precisions, float32 for the floating-point ones.
    counters:
        :class:`~hw.systolic.mapping.ArrayCounters` measured by the simulation.
    trace_value, trace_valid:
        With ``trace=True``: per cycle and per array column, the value on the output port at
        the bottom edge and whether it was written to SRAM; ``None`` otherwise.
    snapshots:
        With ``snapshots=True``: an int64 ``(cycles, width)`` array whose row t holds every
        register of the array after the clock edge that ends cycle t, the bottom output port
        during cycle t and the edge stimulus of cycle t, laid out as
        :func:`snapshot_layout` describes (for IS: of the transposed problem the hardware runs).
    """

    output: np.ndarray
    counters: ArrayCounters
    trace_value: np.ndarray | None = None
    trace_valid: np.ndarray | None = None
    snapshots: np.ndarray | None = None

    def __repr__(self) -> str:
        c = self.counters
        extra = [name for name in ("trace_value", "snapshots") if getattr(self, name) is not None]
        return (f"RegisterResult: output {'x'.join(map(str, self.output.shape))} "
                f"{self.output.dtype}, {c.cycles:,} cycles, {c.folds:,} folds, "
                f"{c.pe_busy_cycles:,} PE-busy cycles\n"
                f"  SRAM: {c.ifmap_reads:,} ifmap reads, {c.filter_reads:,} filter reads, "
                f"{c.ofmap_writes:,} ofmap writes, {c.ofmap_reads:,} psum reads"
                + (f"\n  recorded: {', '.join(extra)}" if extra else ""))


def max_cycles_bound(cfg: ArrayConfig, folds: int, temporal: int) -> int:
    """An upper bound on the cycles of a run (sizes trace buffers)."""
    r, c = cfg.rows, cfg.cols
    return folds * (temporal + r + c + 2) + temporal + 2 * r + 2 * c + 4


def _as_operand(x, name: str, cfg: ArrayConfig) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3 or 0 in arr.shape:
        raise ValueError(f"operand {name}: shape {np.shape(x)}: must be a non-empty 2-D matrix "
                         f"or a 3-D batch of matrices")
    p = cfg.precision
    if p.is_float:
        fmt = FLOAT_FORMATS[p.value]
        if arr.dtype == fmt.dtype:
            return arr.astype(np.float32)
        if not np.issubdtype(arr.dtype, np.floating):
            raise ValueError(f"operand {name}: dtype {arr.dtype}: {p.value} precision takes "
                             f"{fmt.dtype.name} values or floats it holds exactly")
        held, exact = round_to_format(arr, p.value)
        if not exact.all():
            v = float(arr[~exact].flat[0])
            raise ValueError(f"operand {name}: value {v!r} is not exactly representable in "
                             f"{p.value}")
        return held
    if arr.dtype.kind not in "iu":
        raise ValueError(f"operand {name}: dtype {arr.dtype}: {p.value} precision takes integers")
    if p is Precision.BINARY:
        bad = (arr != 1) & (arr != -1)
        if bad.any():
            raise ValueError(f"operand {name}: value {int(arr[bad].flat[0])} is not a binary "
                             f"operand: must be +1 or -1")
    lo, hi = p.operand_range
    info = np.iinfo(arr.dtype)  # (no scan where the dtype cannot leave the range: int8 for int8)
    if (info.min < lo or info.max > hi) and (arr.min() < lo or arr.max() > hi):
        v = arr.min() if arr.min() < lo else arr.max()
        raise ValueError(f"operand {name}: value {int(v)} is outside the {p.value} range {lo}..{hi}")
    return np.ascontiguousarray(arr, dtype=np.int32)


def run_gemm(cfg: ArrayConfig, a, b, *, nm=None, trace: bool = False,
             snapshots: bool = False) -> RegisterResult:
    """Multiply ``a (M x K) @ b (K x N)`` (or batches of them) on the register-level model.

    ``nm = (N, M)`` runs ``b`` as N:M sparse along K on the array's sparse PEs
    (``cfg.sparse_m = M``): ``b`` is compressed to ``K * N / M`` rows of values with their
    positions (:func:`hw.sparsity.compress_nm`; every group of M must hold at most N nonzeros)
    and each PE's index picks its activation out of a group of M. The result equals ``a @ b``.
    ``trace`` records the bottom output port per cycle; ``snapshots`` records every register
    per cycle (for co-simulation with the RTL; integer precisions only).
    Raises ``ValueError`` for shapes that do not chain or values outside the precision.
    """
    if not isinstance(cfg, ArrayConfig):
        raise ConfigError(f"run_gemm: cfg = {cfg!r}: must be an ArrayConfig")
    a3 = _as_operand(a, "a", cfg)
    b3 = _as_operand(b, "b", cfg)
    if a3.shape[0] != b3.shape[0] or a3.shape[2] != b3.shape[1]:
        raise ValueError(f"operands a {np.shape(a)} and b {np.shape(b)} do not chain: "
                         f"need a (..., M, K) and b (..., K, N)")
    n_inst, m, k = a3.shape
    n = b3.shape[2]
    sparse = check_nm(cfg, nm, k)
    acc_dtype = np.float32 if cfg.precision.is_float else np.int64
    saturating = cfg.overflow is Overflow.SATURATE
    counters = np.zeros(N_KERNEL_COUNTERS, np.int64)
    rows, cols = cfg.rows, cfg.cols
    lanes = cfg.macs_per_pe
    if sparse is not None:
        n_keep, group = sparse
        bv, bi = compress_nm(b3, n_keep, group, axis=1)
        bv = np.ascontiguousarray(bv)
        bi = np.ascontiguousarray(bi)
        k_run = bv.shape[1]
    else:
        n_keep, group = 1, 1
        bv, bi = b3, np.zeros((0, 0, 0), np.uint8)
        k_run = k
    if lanes > 1:
        # dual-MAC PEs: K padded with zeros to whole pairs; row/step r carries k = 2r, 2r + 1
        k_run = -(-k // lanes)
        pad = k_run * lanes - k
        if pad:
            a3 = np.concatenate([a3, np.zeros((n_inst, m, pad), a3.dtype)], axis=2)
            b3 = np.concatenate([b3, np.zeros((n_inst, pad, n), b3.dtype)], axis=1)
        group = lanes
    # weights as (inst, K', N, lanes): lanes operands of consecutive k per row (dense: 1)
    b4 = (np.ascontiguousarray(b3.reshape(n_inst, k_run, lanes, n).transpose(0, 1, 3, 2))
          if lanes > 1 else bv[..., None])
    mapping = map_gemm(cfg, m, n, k_run, n_inst)
    tlen = max_cycles_bound(cfg, mapping.folds, mapping.temporal) if trace else 0
    tv = np.zeros((tlen, cols), acc_dtype)
    tvalid = np.zeros((tlen, cols), np.bool_)
    if snapshots:
        if cfg.precision.is_float:
            raise ValueError("run_gemm: snapshots are for integer precisions (the RTL is "
                             "int4/int8/int16)")
        if cfg.sparse_m and sparse is None:
            raise ValueError("run_gemm: snapshots of an array with sparse PEs need nm = (N, M) "
                             "(the RTL's sparse PEs run N:M GEMMs; a dense one is M:M)")
        _, off, width = _snapshot_fields(cfg)
        snap = np.zeros((max_cycles_bound(cfg, mapping.folds, mapping.temporal), width), np.int64)
    else:
        off, snap = _NO_OFFSETS, None
    # activations grouped: a4[inst, m, g, e] is column g * group + e of a (dense: group 1)
    a4 = a3.reshape(n_inst, m, a3.shape[2] // group, group)
    no_idx = np.zeros((0, 0, 0), np.uint8)
    place = next(_PLACES)
    # A compile-time switch, like snap=None: None for PEs with one operand per register (their
    # own, leaner compilation), any int when the operands come in groups (sparse, dual-MAC).
    grouped = None if a4.shape[3] == 1 and b4.shape[3] == 1 else 1
    if cfg.dataflow is Dataflow.OS:
        out = np.zeros((n_inst, m, n), acc_dtype)
        _os_kernel(a4, b4, bi, n_keep, rows, cols, cfg.acc_bits, saturating, out, counters, tv,
                   tvalid, snap, off, place, grouped)
    elif cfg.dataflow is Dataflow.WS:
        out = np.zeros((n_inst, m, n), acc_dtype)
        _stationary_kernel(a4, no_idx, n_keep, b4, bi, 1, k_run, rows, cols,
                           cfg.acc_bits, saturating, out, counters, tv, tvalid, snap, off, place,
                           grouped)
    else:
        out_t = np.zeros((n_inst, n, m), acc_dtype)
        stream = np.ascontiguousarray(b4.transpose(0, 2, 1, 3))
        x_idx = np.ascontiguousarray(bi.transpose(0, 2, 1)) if sparse else no_idx
        stat = np.ascontiguousarray(a4.transpose(0, 2, 1, 3))
        _stationary_kernel(stream, x_idx, 1, stat, no_idx, n_keep, k_run, rows, cols,
                           cfg.acc_bits, saturating, out_t, counters, tv, tvalid, snap, off,
                           place, grouped)
        out = np.ascontiguousarray(out_t.transpose(0, 2, 1))
    if counters[K_HAZARDS]:
        raise RuntimeError(f"register model hazard ({counters[K_HAZARDS]} register conflicts): "
                           f"this is a bug in npulab, please report it with the GEMM shape")
    result_out = out[0] if np.ndim(a) == 2 and np.ndim(b) == 2 else out
    cyc = int(counters[K_CYCLES])
    return RegisterResult(
        output=result_out,
        counters=counters_from_kernel(cfg.dataflow, counters),
        trace_value=tv[:cyc] if trace else None,
        trace_valid=tvalid[:cyc] if trace else None,
        snapshots=snap[:cyc] if snapshots else None,
    )


def run_gemm_rows(cfg: ArrayConfig, a, b) -> RegisterResult:
    """Row-wise N:M on the register model: ``a (M x K) @ b (K x N)`` where each output channel
    (column of ``b``) has its own N of ``cfg.sparse_m`` (the most nonzeros any of its groups
    holds). As the compiler runs one N tile (:func:`hw.sparsity.row_tiles`): the channels
    sorted by N and cut where N changes, at whole column folds where the dataflow spreads them
    over the columns (OS, WS) and exactly where it streams them (IS); each run a
    :func:`run_gemm` at its largest N (dense where that is M), one after the other. The output
    is in the original channel order and equals ``a @ b``; the counters are the runs' sums."""
    if not cfg.sparse_m:
        raise ConfigError("run_gemm_rows: the array has dense PEs: set sparse_m = M")
    a2, b2 = np.asarray(a), np.asarray(b)
    if a2.ndim != 2 or b2.ndim != 2:
        raise ValueError(f"run_gemm_rows: a {a2.shape} and b {b2.shape}: need 2-D operands")
    m = cfg.sparse_m
    fold = geometry(cfg.dataflow).per_dim(cfg.rows, cfg.cols, 1)[GemmDim.N]
    order, tiles = row_tiles(channel_n(b2, m, axis=0, channel_axis=1), m, fold)
    out = None
    total = np.zeros(len(fields(ArrayCounters)), np.int64)
    for first, size, nm in tiles:
        cols = order[first:first + size]
        res = run_gemm(cfg, a2, b2[:, cols], nm=nm)
        if out is None:
            out = np.zeros((a2.shape[0], b2.shape[1]), res.output.dtype)
        out[:, cols] = res.output
        total += np.array(astuple(res.counters), np.int64)
    return RegisterResult(output=out, counters=ArrayCounters(*(int(v) for v in total)))
