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

Code: this module holds the two dataflow kernels (OS; WS/IS) and :func:`run_gemm`; what the
sparse and dual-MAC PEs do per cycle is in :mod:`hw.systolic._pe_kernels`, the snapshot layout
and recording in :mod:`hw.systolic.snapshots` (:func:`snapshot_layout` is re-exported here).
Each kernel is compiled apart for dense PEs (``grouped=None``) and with snapshots or without
(``snap=None``): each variant holds only the work it does. What a cycle costs on small arrays
is its fixed work (feeders, delay lines, the bottom edge), so the kernels keep it lean: no
array objects made in the loop (Numba counts references to each, atomically), no calls
passing arrays on a busy cycle (an idle feeder's :func:`_zero_row` aside), indices the loops
compute taken as unsigned (:func:`_u`: no negative-index wrap, so LLVM vectorizes), no
division per cycle, and every register in one block of memory (:func:`_carve`) at a place
that moves from run to run (``_PLACES``).
"""

from __future__ import annotations

import itertools
from dataclasses import astuple, dataclass, fields

import numpy as np

from hw._jitcache import njit
from hw.numerics import FLOAT_FORMATS, accumulate, observe, round_to_format
from hw.sparsity import channel_n, compress_nm, row_tiles
from hw.systolic._pe_kernels import (
    FIRST, LAST, VALID, _os_macs_grouped, _product, _shift, _shift_bank, _stationary_macs_sparse,
)
from hw.systolic.config import ArrayConfig, ConfigError, Dataflow, Overflow, Precision
from hw.systolic.geometry import GemmDim, geometry
from hw.systolic.mapping import (
    K_BUSY, K_CYCLES, K_FOLDS, K_HAZARDS, K_LEFT_READS, K_PSUM_READS, K_TOP_READS, K_WRITES,
    N_KERNEL_COUNTERS, ArrayCounters, check_nm, counters_from_kernel, fold_geometry, map_gemm,
)
from hw.systolic.snapshots import (
    O_OUT, O_OUT_VALID, _os_snapshot, _snapshot_fields, _stationary_snapshot, snapshot_layout,
)

_NO_OFFSETS = np.zeros(0, np.int64)  # snapshot offsets of a run without snapshots
# Where in its block of memory a kernel puts its registers, in bytes: 64 places 576 bytes apart
# modulo 4096, one run after the other. A load whose address shares its low 12 bits with a
# store in flight waits for it (4K aliasing); for about 1 place in 16 the registers collide so
# with the kernel's stack, and the run is 1.5x slower. With separate allocations, or one place
# for all runs, a process kept its (un)lucky layout for every run: 4x4 runs took 1.0x to 1.8x
# the best time from process to process. Moving the place each run makes a slow run one in
# ~16, in every process (mitigated, not removed; best-of-N timings do not show them).
_PLACES = itertools.cycle([(i * 576) % 4096 for i in range(64)])

__all__ = ["RegisterResult", "run_gemm", "run_gemm_rows", "check_nm", "max_cycles_bound",
           "snapshot_layout"]


@njit(cache=True, inline="always")
def _u(i):
    """An index as unsigned: Numba then leaves out the negative-index wrap, whose select kept
    LLVM from vectorizing the loops over the PEs (where it could not prove ``p + d >= 0``)."""
    return np.uint64(i)


@njit(cache=True)
def _zero_row(bank, row):
    """``bank[row, :] = 0`` as a loop (a slice would be an array object, refcounted)."""
    for i in range(bank.shape[1]):
        bank[row, i] = 0


@njit(cache=True)
def _arena_bytes(sizes):
    """Bytes of one block holding arrays of ``sizes`` bytes, each at a 64-byte boundary, from
    any offset below 4096 (see _PLACES)."""
    total = 4096 + 64
    for n in sizes:
        total += (n + 63) // 64 * 64
    return total


@njit(cache=True)
def _carve(arena, pos, n, like):
    """``n`` elements of ``like``'s dtype from ``arena`` at byte ``pos``, and the next 64-byte
    boundary after them (64-byte boundaries relative to the block's start)."""
    nbytes = n * like.itemsize
    return arena[pos:pos + nbytes].view(like.dtype), pos + (nbytes + 63) // 64 * 64


@njit(cache=True)
def _os_kernel(a, b, b_idx_src, share, rows, cols, acc_bits, saturating, out, counters,
               trace_value, trace_valid, snap, off, place, grouped):
    # a: (inst, M, groups, group) and b: (inst, K', N, gb); dense: group = gb = share = 1,
    # a[..., k, 0] is a[k] and b[:, k, :, 0] is b[k]. Sparse (gb = 1): a[inst, m, g, e] is
    # activation g * group + e, shared by the `share` (N) compressed weights of group g, which
    # are b with indices b_idx_src. Dual-MAC (group = gb = lanes, share 1): step s carries the
    # lanes operands k = s * lanes + e of both.
    n_inst, m_dim = a.shape[0], a.shape[1]
    # grouped None: dense PEs, known when compiling (a separate compilation that leaves the
    # group loops out: 1.2x faster on 4x4); otherwise the widths come from the shapes.
    group = 1 if grouped is None else a.shape[3]
    gb = 1 if grouped is None else b.shape[3]
    sparse = group > 1 and gb == 1
    dot = gb > 1
    k_dim = b.shape[1]
    n_dim = b.shape[2]
    row_folds = (m_dim + rows - 1) // rows
    col_folds = (n_dim + cols - 1) // cols
    n_folds = n_inst * row_folds * col_folds
    trace_len = trace_value.shape[0]
    n_pe = rows * cols

    # The registers in one block of memory, each bank at a 64-byte boundary (as in
    # _stationary_kernel). Edge delay lines are ring buffers: slot (t % rows) holds what the
    # feeder presented at t; row i reads the slot of cycle t - i, i.e. after i register stages.
    u8 = np.zeros(0, np.uint8)  # dtype carriers for _carve
    i64 = np.zeros(0, np.int64)
    na, nb, ni = n_pe * group, n_pe * gb, n_pe if sparse else 0
    # Geometry of the folds in flight, by fold number modulo fr (a power of two >= R + C + 4:
    # folds start >= max(K, R) cycles apart and the last column drains within K + R + C
    # cycles of the start), so the drains look it up without dividing.
    fr = 1
    while fr < rows + cols + 4:
        fr *= 2
    arena = np.zeros(_arena_bytes((2 * na * a.itemsize, 2 * n_pe, 2 * nb * b.itemsize, 2 * ni,
                                   2 * n_pe, n_pe * out.itemsize, n_pe * out.itemsize, n_pe,
                                   rows * rows * group * a.itemsize, rows * rows,
                                   cols * cols * gb * b.itemsize, cols * (cols if sparse else 0),
                                   cols * cols, 8 * cols, 8 * cols, 40 * cols, 40 * fr)),
                     np.uint8)
    a_reg, pos = _carve(arena, place, 2 * na, a)
    a_flags, pos = _carve(arena, pos, 2 * n_pe, u8)
    b_reg, pos = _carve(arena, pos, 2 * nb, b)
    b_idx, pos = _carve(arena, pos, 2 * ni, u8)
    b_valid, pos = _carve(arena, pos, 2 * n_pe, u8)
    acc, pos = _carve(arena, pos, n_pe, out)
    res, pos = _carve(arena, pos, n_pe, out)
    drain_loaded, pos = _carve(arena, pos, n_pe, u8)  # res registers the drain loads this cycle
    ring_a, pos = _carve(arena, pos, rows * rows * group, a)
    ring_flags, pos = _carve(arena, pos, rows * rows, u8)
    ring_b, pos = _carve(arena, pos, cols * cols * gb, b)
    ring_b_idx, pos = _carve(arena, pos, cols * (cols if sparse else 0), u8)
    ring_b_valid, pos = _carve(arena, pos, cols * cols, u8)
    drain_left, pos = _carve(arena, pos, cols, i64)
    drain_started, pos = _carve(arena, pos, cols, i64)
    drain_geom, pos = _carve(arena, pos, cols * 5, i64)
    fold_ring, pos = _carve(arena, pos, fr * 5, i64)
    if pos > arena.size:
        raise AssertionError("register model: the OS kernel's block of memory is too small")
    a_reg = a_reg.reshape((2, na))
    a_flags = a_flags.reshape((2, n_pe))
    b_reg = b_reg.reshape((2, nb))
    b_idx = b_idx.reshape((2, ni))
    b_valid = b_valid.reshape((2, n_pe))
    ring_a = ring_a.reshape((rows, rows * group))
    ring_flags = ring_flags.reshape((rows, rows))
    ring_b = ring_b.reshape((cols, cols * gb))
    ring_b_idx = ring_b_idx.reshape((cols, cols if sparse else 0))
    ring_b_valid = ring_b_valid.reshape((cols, cols))
    drain_geom = drain_geom.reshape((cols, 5))  # per draining column: inst, row0, rows, cols, col0
    fold_ring = fold_ring.reshape((fr, 5))
    bottom = (rows - 1) * cols  # PE (R-1, 0)

    fold = 0
    f_inst = f_r0 = f_ru = f_c0 = f_cu = 0  # geometry of the fold being streamed
    sa = rows - 1  # ring slots of cycle t: t % rows, t % cols (kept without divisions)
    sb = cols - 1
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
    draining = 0
    t = 0
    while drains_total < n_folds * cols or draining > 0:
        cur = t & 1
        nxt = cur ^ 1
        # 1. Feeders: start the next fold once streaming is done and R cycles have passed.
        if not streaming and fold < n_folds and t >= last_start + rows:
            streaming = True
            step = 0
            last_start = t
            f_inst, f_r0, f_ru, f_c0, f_cu = fold_geometry(fold, row_folds, col_folds, m_dim,
                                                           n_dim, rows, cols)
            fr_at = _u(fold & (fr - 1))
            fold_ring[fr_at, 0] = f_inst
            fold_ring[fr_at, 1] = f_r0
            fold_ring[fr_at, 2] = f_ru
            fold_ring[fr_at, 3] = f_cu
            fold_ring[fr_at, 4] = f_c0
        sa = 0 if sa == rows - 1 else sa + 1
        sb = 0 if sb == cols - 1 else sb + 1
        if streaming:
            inst, r0, ru, c0, cu = f_inst, f_r0, f_ru, f_c0, f_cu
            ctrl = (FIRST if step == 0 else 0) | (LAST if step == k_dim - 1 else 0)
            # a sparse row holds its group of activations for the N steps that use it
            g = step if share == 1 else step // share
            for i in range(rows):
                ok = i < ru
                if group > 1:
                    for e in range(group):
                        ring_a[sa, i * group + e] = a[inst, r0 + i, g, e] if ok else 0
                else:
                    ring_a[sa, i] = a[inst, _u(r0 + i), g, 0] if ok else 0
                ring_flags[sa, i] = ctrl | (VALID if ok else 0)
            for j in range(cols):
                ok = j < cu
                if dot:
                    for e in range(gb):
                        ring_b[sb, j * gb + e] = b[inst, step, c0 + j, e] if ok else 0
                else:
                    ring_b[sb, j] = b[inst, step, _u(c0 + j), 0] if ok else 0
                if sparse:
                    ring_b_idx[sb, j] = b_idx_src[inst, step, c0 + j] if ok else 0
                ring_b_valid[sb, j] = 1 if ok else 0
            if share == 1 or step % share == 0:
                reads_a += ru * group
            reads_b += cu * gb
            step += 1
            if step == k_dim:
                streaming = False
                fold += 1
        else:
            _zero_row(ring_a, sa)
            _zero_row(ring_flags, sa)
            _zero_row(ring_b, sb)
            _zero_row(ring_b_idx, sb)
            _zero_row(ring_b_valid, sb)

        # 2. Drain: bottom register of each draining column to the output SRAM, then shift
        #    (during shift s only rows >= s load from above).
        if draining > 0:
            for p in range(n_pe):
                drain_loaded[p] = 0
            for j in range(cols):
                if drain_left[j] == 0:
                    continue
                s = rows - drain_left[j] + 1
                inst = drain_geom[j, 0]
                r0 = drain_geom[j, 1]
                c0 = drain_geom[j, 4]
                r = rows - s
                ok = r < drain_geom[j, 2] and j < drain_geom[j, 3]
                value = observe(res[_u(bottom + j)], acc_bits)
                if snap is not None:
                    if t < snap.shape[0]:
                        snap[t, off[O_OUT] + j] = np.int64(value)
                        snap[t, off[O_OUT_VALID] + j] = 1
                if ok:
                    out[inst, _u(r0 + r), _u(c0 + j)] = value
                    writes += 1
                    last_write = t
                if t < trace_len:
                    trace_value[t, j] = value
                    trace_valid[t, j] = ok
                for i in range(rows - 1, s - 1, -1):
                    res[_u(i * cols + j)] = res[_u((i - 1) * cols + j)]
                    drain_loaded[_u(i * cols + j)] = 1
                drain_left[j] -= 1
                if drain_left[j] == 0:
                    draining -= 1

        # 3. Operands move (a right, b down); edge PEs take the delay-line outputs.
        if sparse or dot:
            _shift_bank(a_reg, cur, nxt, group)
            _shift_bank(a_flags, cur, nxt, 1)
            _shift_bank(b_reg, cur, nxt, cols * gb)
            _shift_bank(b_valid, cur, nxt, cols)
            if sparse:
                _shift_bank(b_idx, cur, nxt, cols)
        else:  # _shift(a_reg, a_flags, cur, nxt, 1), _shift(b_reg, b_valid, cur, nxt, cols)
            # (indices written as p + d, with p from 0: LLVM then vectorizes the copies)
            for p in range(n_pe - 1):
                a_reg[nxt, _u(p + 1)] = a_reg[cur, p]
                a_flags[nxt, _u(p + 1)] = a_flags[cur, p]
            for p in range(n_pe - cols):
                b_reg[nxt, _u(p + cols)] = b_reg[cur, p]
                b_valid[nxt, _u(p + cols)] = b_valid[cur, p]
        for i in range(rows):
            slot = _u(sa - i if sa >= i else sa - i + rows)  # (t - i) % rows
            if group > 1:
                for e in range(group):
                    a_reg[nxt, i * cols * group + e] = ring_a[slot, i * group + e]
            else:
                a_reg[nxt, _u(i * cols)] = ring_a[slot, i]
            a_flags[nxt, _u(i * cols)] = ring_flags[slot, i]
        for j in range(cols):
            slot = _u(sb - j if sb >= j else sb - j + cols)  # (t - j) % cols
            if dot:
                for e in range(gb):
                    b_reg[nxt, j * gb + e] = ring_b[slot, j * gb + e]
            else:
                b_reg[nxt, j] = ring_b[slot, j]
            if sparse:
                b_idx[nxt, j] = ring_b_idx[slot, j]
            b_valid[nxt, j] = ring_b_valid[slot, j]

        # 4. Every PE multiplies what arrived; `last` at the bottom row starts that column's drain.
        if sparse or dot:
            n_busy, n_hazards = _os_macs_grouped(a_reg, a_flags, b_reg, b_idx, b_valid, nxt,
                                                 group, gb, acc, res, drain_loaded, acc_bits,
                                                 saturating)
        else:  # the dense PEs' multiply-accumulate (a call passing a dozen arrays cost more)
            n_busy = 0
            n_hazards = 0
            if saturating:
                for p in range(n_pe):
                    fl = a_flags[nxt, p]
                    on = fl & b_valid[nxt, p] & VALID
                    prod = _product(a_reg[nxt, p], b_reg[nxt, p])
                    total = prod if fl & FIRST else accumulate(acc[p], prod, acc_bits, True)
                    acc[p] = total if on else acc[p]
                    done = on & (fl >> 2)
                    res[p] = total if done else res[p]
                    n_busy += on
                    n_hazards += done & drain_loaded[p]
            else:  # wrapping (or fp32) accumulation: plain adds; see hw.numerics.observe
                for p in range(n_pe):
                    fl = a_flags[nxt, p]
                    on = fl & b_valid[nxt, p] & VALID
                    prod = _product(a_reg[nxt, p], b_reg[nxt, p])
                    total = prod if fl & FIRST else acc[p] + prod
                    acc[p] = total if on else acc[p]
                    done = on & (fl >> 2)
                    res[p] = total if done else res[p]
                    n_busy += on
                    n_hazards += done & drain_loaded[p]
        busy += n_busy
        hazards += n_hazards
        for j in range(cols):
            if a_flags[nxt, bottom + j] & LAST:
                if drain_left[j] > 0:
                    hazards += 1
                else:
                    draining += 1
                drain_left[j] = rows
                drain_started[j] += 1
                drains_total += 1
                fr_at = _u((drain_started[j] - 1) & (fr - 1))  # the fold now draining
                for e in range(5):
                    drain_geom[j, e] = fold_ring[fr_at, e]
        if snap is not None:  # None: a separate compilation without snapshots, faster
            if t < snap.shape[0]:
                _os_snapshot(snap[t], off, sa, sb, rows, cols, acc_bits, ring_a, ring_flags,
                             ring_b, ring_b_idx, ring_b_valid, a_reg, a_flags, b_reg, b_idx,
                             b_valid, nxt, acc, res, drain_left)
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
def _stationary_kernel(stream, x_idx_src, share_x, stat, s_idx_src, share_s, k_dim, rows, cols,
                       acc_bits, saturating, out, counters, trace_value, trace_valid, snap, off,
                       place, grouped):
    # stream (inst, T, groups, gx) and stat (inst, groups, S, gs): array row k (of k_dim)
    # takes the streamed group k // share_x and the stationary group k // share_s. Dense:
    # widths and shares 1. Sparse WS: the stream carries groups of gx = M activations, each
    # shared by share_x = N rows of compressed weights (indices s_idx_src (inst, K', S)).
    # Sparse IS: the stationary holds the groups (gs = M, share_s = N) and the streamed
    # compressed weights carry their indices (x_idx_src (inst, T, K')).
    n_inst, t_dim = stream.shape[0], stream.shape[1]
    gx = 1 if grouped is None else stream.shape[3]  # grouped None: dense (as in _os_kernel)
    gs = 1 if grouped is None else stat.shape[3]
    s_cols = stat.shape[2]
    sparse = gx > 1 or gs > 1
    has_xi = x_idx_src.shape[0] > 0
    has_si = s_idx_src.shape[0] > 0
    row_folds = (k_dim + rows - 1) // rows
    col_folds = (s_cols + cols - 1) // cols
    n_folds = n_inst * row_folds * col_folds
    trace_len = trace_value.shape[0]
    n_pe = rows * cols

    # The registers in one block of memory, each bank at a 64-byte boundary: where separate
    # allocations landed decided the speed (up to 1.8x: 4K aliasing, see _PLACES).
    u8 = np.zeros(0, np.uint8)  # dtype carriers for _carve
    i64 = np.zeros(0, np.int64)
    nx, nps, nr, ni = n_pe * gx, n_pe + cols, rows * gx, n_pe if sparse else 0
    # Row 0's `valid` bit as the feeder presented it, the last `vh` cycles (a power of two
    # >= 2 (R + C)): the psum_valid bits form a delay line, so PE (i, j)'s after cycle t is the
    # bit of cycle t - i - j. The bottom edge reads it here; the bank is kept for snapshots.
    vh = 1
    while vh < 2 * (rows + cols):
        vh *= 2
    arena = np.zeros(_arena_bytes((2 * nx * stream.itemsize, 2 * ni, 2 * n_pe,
                                   2 * nps * out.itemsize, 2 * nps, n_pe * gs * stat.itemsize,
                                   n_pe * gs * stat.itemsize, ni, ni, n_pe, n_pe,
                                   rows * nr * stream.itemsize, rows * (rows if sparse else 0),
                                   rows * rows, vh, 24 * vh)), np.uint8)
    x_reg, pos = _carve(arena, place, 2 * nx, stream)
    x_idx, pos = _carve(arena, pos, 2 * ni, u8)
    x_flags, pos = _carve(arena, pos, 2 * n_pe, u8)
    # psum row i lives at (i + 1) * cols; the first `cols` entries stay zero: row 0's adder input.
    psum, pos = _carve(arena, pos, 2 * nps, out)
    psum_valid, pos = _carve(arena, pos, 2 * nps, u8)
    shadow, pos = _carve(arena, pos, n_pe * gs, stat)
    active, pos = _carve(arena, pos, n_pe * gs, stat)
    shadow_idx, pos = _carve(arena, pos, ni, u8)
    active_idx, pos = _carve(arena, pos, ni, u8)
    shadow_valid, pos = _carve(arena, pos, n_pe, u8)
    active_valid, pos = _carve(arena, pos, n_pe, u8)
    ring_x, pos = _carve(arena, pos, rows * nr, stream)
    ring_xi, pos = _carve(arena, pos, rows * (rows if sparse else 0), u8)
    ring_flags, pos = _carve(arena, pos, rows * rows, u8)
    valid0, pos = _carve(arena, pos, vh, u8)
    # Column j's outputs are column 0's, j cycles later: per cycle of column 0's, where its
    # output goes (flat index into `out` of column 0, the fold's row0, its columns used).
    out_rec, pos = _carve(arena, pos, 3 * vh, i64)
    if pos > arena.size:
        raise AssertionError("register model: the WS/IS kernel's block of memory is too small")
    out_rec = out_rec.reshape((vh, 3))
    x_reg = x_reg.reshape((2, nx))
    x_idx = x_idx.reshape((2, ni))
    x_flags = x_flags.reshape((2, n_pe))
    psum = psum.reshape((2, nps))
    psum_valid = psum_valid.reshape((2, nps))
    ring_x = ring_x.reshape((rows, nr))
    ring_xi = ring_xi.reshape((rows, rows if sparse else 0))
    ring_flags = ring_flags.reshape((rows, rows))
    out_flat = out.reshape(out.size)
    o_m = o_fold = o_inst = o_r0 = o_c0 = o_cu = 0  # column 0: next output, its fold

    feed_fold = 0
    f_inst = f_r0 = f_ru = f_c0 = f_cu = f_reads = 0  # the fold being streamed: geometry, reads
    l_inst = l_r0 = l_ru = l_c0 = l_cu = 0  # geometry of the fold the weight port loads
    sx = rows - 1  # ring slot of cycle t: t % rows (kept without divisions)
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
    hazards = 0  # snapshot runs: psum_valid bits that disagree with valid0
    last_write = -1
    outputs_total = 0
    bottom = n_pe  # index of row R-1's psum registers
    t = 0
    while outputs_total < n_folds * t_dim * cols:
        cur = t & 1
        nxt = cur ^ 1
        # 1. Feeder: start the next fold when the last one is streamed and its row 0 is loaded.
        if not streaming and feed_fold < n_folds and row0_loaded > feed_fold:
            streaming = True
            step = 0
            f_inst, f_r0, f_ru, f_c0, f_cu = fold_geometry(feed_fold, row_folds, col_folds,
                                                           k_dim, s_cols, rows, cols)
            # the rows of one group share one read of it (dense: one read per row)
            f_reads = gx * ((f_r0 + f_ru - 1) // share_x - f_r0 // share_x + 1)
        sx = 0 if sx == rows - 1 else sx + 1
        if streaming:
            inst, r0, ru, c0, cu = f_inst, f_r0, f_ru, f_c0, f_cu
            ctrl = FIRST if step == 0 else 0
            for i in range(rows):
                ok = i < ru
                k = r0 + i
                if sparse:
                    g = k // share_x
                    for e in range(gx):
                        ring_x[sx, i * gx + e] = stream[inst, step, g, e] if ok else 0
                    if has_xi:
                        ring_xi[sx, i] = x_idx_src[inst, step, k] if ok else 0
                else:
                    ring_x[sx, i] = stream[inst, step, _u(k), 0] if ok else 0
                ring_flags[sx, i] = ctrl | (VALID if ok else 0)
            reads_x += f_reads
            step += 1
            if step == t_dim:
                streaming = False
                feed_fold += 1
        else:
            _zero_row(ring_x, sx)
            _zero_row(ring_xi, sx)
            _zero_row(ring_flags, sx)
        valid0[_u(t & (vh - 1))] = ring_flags[sx, 0] & VALID

        # 2. Bottom edge: last cycle's psum of row R-1 goes to the output SRAM (accumulating).
        if valid0[_u((t - rows) & (vh - 1))]:  # column 0 outputs: record where to
            if o_m == 0:  # first output of the next fold: look its geometry up once
                o_inst, o_r0, _, o_c0, o_cu = fold_geometry(o_fold, row_folds, col_folds,
                                                               k_dim, s_cols, rows, cols)
            rec = _u(t & (vh - 1))
            out_rec[rec, 0] = (o_inst * t_dim + o_m) * s_cols + o_c0
            out_rec[rec, 1] = o_r0
            out_rec[rec, 2] = o_cu
            o_m += 1
            if o_m == t_dim:
                o_m = 0
                o_fold += 1
        if snap is not None:  # the delay-line identity valid0 rests on, against the bank
            for j in range(cols):
                if psum_valid[cur, bottom + j] != valid0[_u((t - rows - j) & (vh - 1))]:
                    hazards += 1
        for j in range(cols):
            if not valid0[_u((t - rows - j) & (vh - 1))]:  # psum_valid[cur, bottom + j]
                if t < trace_len:
                    trace_valid[t, j] = False
                continue
            rec = _u((t - j) & (vh - 1))
            outputs_total += 1
            value = observe(psum[cur, _u(bottom + j)], acc_bits)
            ok = j < out_rec[rec, 2]
            if ok:
                at = _u(out_rec[rec, 0] + j)
                if out_rec[rec, 1] == 0:
                    out_flat[at] = value
                else:
                    out_flat[at] = accumulate(out_flat[at], value, acc_bits, saturating)
                    psum_reads += 1
                writes += 1
                last_write = t
            if t < trace_len:
                trace_value[t, j] = value
                trace_valid[t, j] = ok

        # 3. Streamed operand moves right; PEs copy on `first`, multiply, pass psum down.
        if sparse:
            _shift_bank(x_reg, cur, nxt, gx)
            _shift(x_idx, x_flags, cur, nxt, 1)
        else:
            for p in range(n_pe - 1):  # _shift(x_reg, x_flags, cur, nxt, 1), written out
                x_reg[nxt, _u(p + 1)] = x_reg[cur, p]
                x_flags[nxt, _u(p + 1)] = x_flags[cur, p]
        for i in range(rows):
            slot = _u(sx - i if sx >= i else sx - i + rows)  # (t - i) % rows
            if sparse:
                for e in range(gx):
                    x_reg[nxt, i * cols * gx + e] = ring_x[slot, i * gx + e]
                x_idx[nxt, i * cols] = ring_xi[slot, i]
            else:
                x_reg[nxt, _u(i * cols)] = ring_x[slot, i]
            x_flags[nxt, _u(i * cols)] = ring_flags[slot, i]
        if sparse:
            busy += _stationary_macs_sparse(x_reg, x_idx, x_flags, nxt, cur, gx, shadow,
                                            shadow_idx, shadow_valid, active, active_idx,
                                            active_valid, gs, psum, acc_bits, saturating)
        else:  # the dense PEs' cycle (a call passing a dozen arrays cost more than it)
            for p in range(n_pe):
                if x_flags[nxt, p] & FIRST:
                    active[p] = shadow[p]
                    active_valid[p] = shadow_valid[p]
            if saturating:
                for p in range(n_pe):
                    on = x_flags[nxt, p] & active_valid[p] & VALID
                    pin = psum[cur, p]
                    total = accumulate(pin, _product(x_reg[nxt, p], active[p]), acc_bits, True)
                    psum[nxt, _u(p + cols)] = total if on else pin
                    busy += on
            else:
                for p in range(n_pe):
                    on = x_flags[nxt, p] & active_valid[p] & VALID
                    pin = psum[cur, p]
                    total = pin + _product(x_reg[nxt, p], active[p])
                    psum[nxt, _u(p + cols)] = total if on else pin
                    busy += on
        if snap is not None:
            for p in range(cols, n_pe):
                psum_valid[nxt, p + cols] = psum_valid[cur, p]
            for j in range(cols):
                psum_valid[nxt, cols + j] = x_flags[nxt, j] & VALID

        # 4. Weight port: fold f may start once fold f-1's `first` has reached PE (0, C-1)
        #    (this cycle or before); it writes after the PEs, so a copy this cycle still saw
        #    the old shadow.
        if x_flags[nxt, cols - 1] & FIRST:
            firsts_at_top_right += 1
        if load_row < 0 and load_fold < n_folds:
            if load_fold == 0 or firsts_at_top_right >= load_fold:
                load_row = 0
                l_inst, l_r0, l_ru, l_c0, l_cu = fold_geometry(load_fold, row_folds, col_folds,
                                                               k_dim, s_cols, rows, cols)
        w_row = load_row  # the weight-port row written this cycle (-1: none), for snapshots
        if load_row >= 0:
            inst, r0, ru, c0, cu = l_inst, l_r0, l_ru, l_c0, l_cu
            row_ok = load_row < ru
            base = load_row * cols
            k = r0 + load_row
            g = k if share_s == 1 else k // share_s
            for j in range(cols):
                ok = row_ok and j < cu
                if sparse:
                    for e in range(gs):
                        shadow[(base + j) * gs + e] = stat[inst, g, c0 + j, e] if ok else 0
                    if has_si:
                        shadow_idx[base + j] = s_idx_src[inst, k, c0 + j] if ok else 0
                else:
                    shadow[base + j] = stat[inst, k, c0 + j, 0] if ok else 0
                shadow_valid[base + j] = 1 if ok else 0
            # the port reads a group once for the rows that share it (dense: every row)
            if row_ok and (share_s == 1 or load_row == 0 or k % share_s == 0):
                reads_w += cu * gs
            if load_row == 0:
                row0_loaded += 1
            load_row += 1
            if load_row == rows:
                load_row = -1
                load_fold += 1
        if snap is not None:  # None: a separate compilation without snapshots, faster
            if t < snap.shape[0]:
                _stationary_snapshot(snap[t], off, sx, rows, cols, acc_bits, ring_x, ring_xi,
                                     ring_flags, x_reg, x_idx, x_flags, nxt, cur, shadow,
                                     shadow_idx, shadow_valid, active, active_idx, active_valid,
                                     psum, psum_valid, w_row, gs)
        t += 1

    counters[K_CYCLES] = last_write + 1
    counters[K_BUSY] = busy
    counters[K_LEFT_READS] = reads_x
    counters[K_TOP_READS] = reads_w
    counters[K_WRITES] = writes
    counters[K_PSUM_READS] = psum_reads
    counters[K_HAZARDS] = hazards
    counters[K_FOLDS] = n_folds


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
