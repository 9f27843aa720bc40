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

Numerics: integer operands are int8/int16; accumulators follow :mod:`hw.numerics`
(``acc_bits`` wide, wrapping or saturating at every addition). OS adds products in k order.
WS/IS add down each column (k order within a fold), then add each fold's sum to the
accumulator (k order across folds): with saturation, or in fp32, that grouping is part of the
contract. fp16 products are exact in fp32; each addition rounds to nearest-even in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from hw.numerics import accumulate
from hw.systolic.config import ArrayConfig, ConfigError, Dataflow, Overflow, Precision
from hw.systolic.mapping import (
    K_BUSY, K_CYCLES, K_FOLDS, K_HAZARDS, K_LEFT_READS, K_PSUM_READS, K_TOP_READS, K_WRITES,
    N_KERNEL_COUNTERS, ArrayCounters, counters_from_kernel, fold_geometry,
)

__all__ = ["RegisterResult", "run_gemm", "max_cycles_bound"]


@njit(cache=True)
def _os_kernel(a, b, rows, cols, acc_bits, saturating, out, counters, trace_value, trace_valid):
    n_inst, m_dim, k_dim = a.shape
    n_dim = b.shape[2]
    row_folds = (m_dim + rows - 1) // rows
    col_folds = (n_dim + cols - 1) // cols
    n_folds = n_inst * row_folds * col_folds
    trace_len = trace_value.shape[0]

    a_reg = np.zeros((rows, cols), a.dtype)
    a_valid = np.zeros((rows, cols), np.bool_)
    a_first = np.zeros((rows, cols), np.bool_)
    a_last = np.zeros((rows, cols), np.bool_)
    b_reg = np.zeros((rows, cols), b.dtype)
    b_valid = np.zeros((rows, cols), np.bool_)
    acc = np.zeros((rows, cols), out.dtype)
    res = np.zeros((rows, cols), out.dtype)
    # Edge delay lines as ring buffers: slot (t % rows) holds what the feeder presented at t;
    # row i reads the slot of cycle t - i, i.e. after i register stages.
    ring_a = np.zeros((rows, rows), a.dtype)
    ring_a_valid = np.zeros((rows, rows), np.bool_)
    ring_first = np.zeros((rows, rows), np.bool_)
    ring_last = np.zeros((rows, rows), np.bool_)
    ring_b = np.zeros((cols, cols), b.dtype)
    ring_b_valid = np.zeros((cols, cols), np.bool_)
    drain_left = np.zeros(cols, np.int64)
    drain_started = np.zeros(cols, np.int64)
    shift_from_row = np.zeros(cols, np.int64)

    fold = 0
    step = 0
    streaming = False
    last_start = -rows
    busy = 0
    reads_a = 0
    reads_b = 0
    writes = 0
    hazards = 0
    last_write = -1
    drains_total = 0
    t = 0
    while drains_total < n_folds * cols or drain_left.sum() > 0:
        # 1. Feeders: start the next fold once streaming is done and R cycles have passed.
        if not streaming and fold < n_folds and t >= last_start + rows:
            streaming = True
            step = 0
            last_start = t
        sa = t % rows
        sb = t % cols
        if streaming:
            inst, r0, ru, c0, cu = fold_geometry(fold, row_folds, col_folds, m_dim, n_dim, rows, cols)
            for i in range(rows):
                ok = i < ru
                ring_a[sa, i] = a[inst, r0 + i, step] if ok else 0
                ring_a_valid[sa, i] = ok
                ring_first[sa, i] = step == 0
                ring_last[sa, i] = step == k_dim - 1
            for j in range(cols):
                ok = j < cu
                ring_b[sb, j] = b[inst, step, c0 + j] if ok else 0
                ring_b_valid[sb, j] = ok
            reads_a += ru
            reads_b += cu
            step += 1
            if step == k_dim:
                streaming = False
                fold += 1
        else:
            for i in range(rows):
                ring_a[sa, i] = 0
                ring_a_valid[sa, i] = False
                ring_first[sa, i] = False
                ring_last[sa, i] = False
            for j in range(cols):
                ring_b[sb, j] = 0
                ring_b_valid[sb, j] = False

        # 2. Drain: bottom register of each draining column to the output SRAM, then shift.
        for j in range(cols):
            shift_from_row[j] = rows
            if drain_left[j] == 0:
                continue
            s = rows - drain_left[j] + 1
            inst, r0, ru, c0, cu = fold_geometry(
                drain_started[j] - 1, row_folds, col_folds, m_dim, n_dim, rows, cols)
            r = rows - s
            ok = r < ru and j < cu
            if ok:
                out[inst, r0 + r, c0 + j] = res[rows - 1, j]
                writes += 1
                last_write = t
            if t < trace_len:
                trace_value[t, j] = res[rows - 1, j]
                trace_valid[t, j] = ok
            for i in range(rows - 1, s - 1, -1):
                res[i, j] = res[i - 1, j]
            shift_from_row[j] = s
            drain_left[j] -= 1

        # 3. PEs, bottom-right first so every read sees last cycle's register values.
        for i in range(rows - 1, -1, -1):
            for j in range(cols - 1, -1, -1):
                if j == 0:
                    slot = (t - i) % rows
                    ai = ring_a[slot, i]
                    av = ring_a_valid[slot, i]
                    af = ring_first[slot, i]
                    al = ring_last[slot, i]
                else:
                    ai = a_reg[i, j - 1]
                    av = a_valid[i, j - 1]
                    af = a_first[i, j - 1]
                    al = a_last[i, j - 1]
                if i == 0:
                    slot = (t - j) % cols
                    bi = ring_b[slot, j]
                    bv = ring_b_valid[slot, j]
                else:
                    bi = b_reg[i - 1, j]
                    bv = b_valid[i - 1, j]
                if av and bv:
                    prod = ai * bi  # int32 operands promote to int64; fp32 stays fp32 (exact for fp16 inputs)
                    if af:
                        total = prod
                    else:
                        total = accumulate(acc[i, j], prod, acc_bits, saturating)
                    acc[i, j] = total
                    busy += 1
                    if al:
                        if i >= shift_from_row[j]:
                            hazards += 1  # the drain loaded this res register this very edge
                        res[i, j] = total
                a_reg[i, j] = ai
                a_valid[i, j] = av
                a_first[i, j] = af
                a_last[i, j] = al
                b_reg[i, j] = bi
                b_valid[i, j] = bv
                if i == rows - 1 and al:
                    if drain_left[j] > 0:
                        hazards += 1
                    drain_left[j] = rows
                    drain_started[j] += 1
                    drains_total += 1
        t += 1

    counters[K_CYCLES] = last_write + 1
    counters[K_BUSY] = busy
    counters[K_LEFT_READS] = reads_a
    counters[K_TOP_READS] = reads_b
    counters[K_WRITES] = writes
    counters[K_PSUM_READS] = 0
    counters[K_HAZARDS] = hazards
    counters[K_FOLDS] = n_folds


@njit(cache=True)
def _stationary_kernel(stream, stat, rows, cols, acc_bits, saturating, out, counters,
                       trace_value, trace_valid):
    n_inst, t_dim, k_dim = stream.shape
    s_cols = stat.shape[2]
    row_folds = (k_dim + rows - 1) // rows
    col_folds = (s_cols + cols - 1) // cols
    n_folds = n_inst * row_folds * col_folds
    trace_len = trace_value.shape[0]

    x_reg = np.zeros((rows, cols), stream.dtype)
    x_valid = np.zeros((rows, cols), np.bool_)
    x_first = np.zeros((rows, cols), np.bool_)
    shadow = np.zeros((rows, cols), stat.dtype)
    active = np.zeros((rows, cols), stat.dtype)
    shadow_valid = np.zeros((rows, cols), np.bool_)
    active_valid = np.zeros((rows, cols), np.bool_)
    psum = np.zeros((rows, cols), out.dtype)
    psum_valid = np.zeros((rows, cols), np.bool_)
    ring_x = np.zeros((rows, rows), stream.dtype)
    ring_valid = np.zeros((rows, rows), np.bool_)
    ring_first = np.zeros((rows, rows), np.bool_)
    out_count = np.zeros(cols, np.int64)
    zero = np.zeros(1, out.dtype)[0]

    feed_fold = 0
    step = 0
    streaming = False
    load_fold = 0
    load_row = -1
    row0_loaded = 0
    firsts_at_top_right = 0
    busy = 0
    reads_x = 0
    reads_w = 0
    writes = 0
    psum_reads = 0
    last_write = -1
    outputs_total = 0
    t = 0
    while outputs_total < n_folds * t_dim * cols:
        # 1. Feeder: start the next fold when the last one is streamed and its row 0 is loaded.
        if not streaming and feed_fold < n_folds and row0_loaded > feed_fold:
            streaming = True
            step = 0
        sx = t % rows
        if streaming:
            inst, r0, ru, c0, cu = fold_geometry(feed_fold, row_folds, col_folds, k_dim, s_cols, rows, cols)
            for i in range(rows):
                ok = i < ru
                ring_x[sx, i] = stream[inst, step, r0 + i] if ok else 0
                ring_valid[sx, i] = ok
                ring_first[sx, i] = step == 0
            reads_x += ru
            step += 1
            if step == t_dim:
                streaming = False
                feed_fold += 1
        else:
            for i in range(rows):
                ring_x[sx, i] = 0
                ring_valid[sx, i] = False
                ring_first[sx, i] = False

        # 2. Weight port: may start fold f once fold f-1's `first` reaches PE (0, C-1) (now or before).
        if cols == 1:
            arriving = ring_first[t % rows, 0]
        else:
            arriving = x_first[0, cols - 2]
        if load_row < 0 and load_fold < n_folds:
            if load_fold == 0 or firsts_at_top_right + (1 if arriving else 0) >= load_fold:
                load_row = 0

        # 3. Bottom edge: last cycle's psum of row R-1 goes to the output SRAM (accumulating).
        for j in range(cols):
            if not psum_valid[rows - 1, j]:
                if t < trace_len:
                    trace_valid[t, j] = False
                continue
            f = out_count[j] // t_dim
            m = out_count[j] - f * t_dim
            out_count[j] += 1
            outputs_total += 1
            inst, r0, ru, c0, cu = fold_geometry(f, row_folds, col_folds, k_dim, s_cols, rows, cols)
            ok = j < cu
            if ok:
                if r0 == 0:
                    out[inst, m, c0 + j] = psum[rows - 1, j]
                else:
                    out[inst, m, c0 + j] = accumulate(
                        out[inst, m, c0 + j], psum[rows - 1, j], acc_bits, saturating)
                    psum_reads += 1
                writes += 1
                last_write = t
            if t < trace_len:
                trace_value[t, j] = psum[rows - 1, j]
                trace_valid[t, j] = ok

        # 4. PEs, bottom-right first so every read sees last cycle's register values.
        for i in range(rows - 1, -1, -1):
            for j in range(cols - 1, -1, -1):
                if j == 0:
                    slot = (t - i) % rows
                    xi = ring_x[slot, i]
                    xv = ring_valid[slot, i]
                    xf = ring_first[slot, i]
                else:
                    xi = x_reg[i, j - 1]
                    xv = x_valid[i, j - 1]
                    xf = x_first[i, j - 1]
                if xf:
                    active[i, j] = shadow[i, j]
                    active_valid[i, j] = shadow_valid[i, j]
                if i == 0:
                    pin = zero
                    pvin = xv
                else:
                    pin = psum[i - 1, j]
                    pvin = psum_valid[i - 1, j]
                if xv and active_valid[i, j]:
                    pin = accumulate(pin, xi * active[i, j],
                                     acc_bits, saturating)
                    busy += 1
                psum[i, j] = pin
                psum_valid[i, j] = pvin
                x_reg[i, j] = xi
                x_valid[i, j] = xv
                x_first[i, j] = xf
        if arriving:
            firsts_at_top_right += 1

        # 5. Weight port write (after the PEs: a copy in this cycle still sees the old shadow).
        if load_row >= 0:
            inst, r0, ru, c0, cu = fold_geometry(load_fold, row_folds, col_folds, k_dim, s_cols, rows, cols)
            row_ok = load_row < ru
            for j in range(cols):
                if row_ok and j < cu:
                    shadow[load_row, j] = stat[inst, r0 + load_row, c0 + j]
                    shadow_valid[load_row, j] = True
                else:
                    shadow[load_row, j] = 0
                    shadow_valid[load_row, j] = False
            if row_ok:
                reads_w += cu
            if load_row == 0:
                row0_loaded += 1
            load_row += 1
            if load_row == rows:
                load_row = -1
                load_fold += 1
        t += 1

    counters[K_CYCLES] = last_write + 1
    counters[K_BUSY] = busy
    counters[K_LEFT_READS] = reads_x
    counters[K_TOP_READS] = reads_w
    counters[K_WRITES] = writes
    counters[K_PSUM_READS] = psum_reads
    counters[K_HAZARDS] = 0
    counters[K_FOLDS] = n_folds


@dataclass(frozen=True)
class RegisterResult:
    """Output of :func:`run_gemm`.

    Attributes
    ----------
    output:
        ``(M, N)`` (or ``(batch, M, N)``) result: int64 holding ``acc_bits``-wide values for
        integer precisions, float32 for fp16.
    counters:
        :class:`~hw.systolic.mapping.ArrayCounters` measured by the simulation.
    trace_value, trace_valid:
        With ``trace=True``: per cycle and per array column, the value on the output port at
        the bottom edge and whether it was written to SRAM; ``None`` otherwise.
    """

    output: np.ndarray
    counters: ArrayCounters
    trace_value: np.ndarray | None = None
    trace_valid: np.ndarray | None = None


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
        if arr.dtype == np.float16:
            return arr.astype(np.float32)
        if not np.issubdtype(arr.dtype, np.floating):
            raise ValueError(f"operand {name}: dtype {arr.dtype}: fp16 precision takes float16 values")
        as16 = arr.astype(np.float16)
        bad = ~((as16.astype(arr.dtype) == arr) | np.isnan(arr))
        if bad.any():
            v = arr[bad].flat[0]
            raise ValueError(f"operand {name}: value {v!r} is not exactly representable in fp16")
        return as16.astype(np.float32)
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"operand {name}: dtype {arr.dtype}: {p.value} precision takes integers")
    lo, hi = p.operand_range
    if arr.min() < lo or arr.max() > hi:
        v = arr.min() if arr.min() < lo else arr.max()
        raise ValueError(f"operand {name}: value {int(v)} is outside the {p.value} range {lo}..{hi}")
    return np.ascontiguousarray(arr, dtype=np.int32)


def run_gemm(cfg: ArrayConfig, a, b, *, trace: bool = False) -> RegisterResult:
    """Multiply ``a (M x K) @ b (K x N)`` (or batches of them) on the register-level model.

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
    acc_dtype = np.float32 if cfg.precision.is_float else np.int64
    saturating = cfg.overflow is Overflow.SATURATE
    counters = np.zeros(N_KERNEL_COUNTERS, np.int64)
    rows, cols = cfg.rows, cfg.cols
    if cfg.dataflow is Dataflow.OS:
        folds, temporal = n_inst * -(-m // rows) * -(-n // cols), k
    elif cfg.dataflow is Dataflow.WS:
        folds, temporal = n_inst * -(-k // rows) * -(-n // cols), m
    else:
        folds, temporal = n_inst * -(-k // rows) * -(-m // cols), n
    tlen = max_cycles_bound(cfg, folds, temporal) if trace else 0
    tv = np.zeros((tlen, cols), acc_dtype)
    tvalid = np.zeros((tlen, cols), np.bool_)
    if cfg.dataflow is Dataflow.OS:
        out = np.zeros((n_inst, m, n), acc_dtype)
        _os_kernel(a3, b3, rows, cols, cfg.acc_bits, saturating, out, counters, tv, tvalid)
    elif cfg.dataflow is Dataflow.WS:
        out = np.zeros((n_inst, m, n), acc_dtype)
        _stationary_kernel(a3, b3, rows, cols, cfg.acc_bits, saturating, out, counters, tv, tvalid)
    else:
        out_t = np.zeros((n_inst, n, m), acc_dtype)
        stream = np.ascontiguousarray(b3.transpose(0, 2, 1))
        stat = np.ascontiguousarray(a3.transpose(0, 2, 1))
        _stationary_kernel(stream, stat, rows, cols, cfg.acc_bits, saturating, out_t, counters, tv, tvalid)
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
    )
