"""The register-level model's two dataflow kernels (:mod:`hw.systolic.regmodel` states their
contract; its :func:`~hw.systolic.regmodel.run_gemm` calls them): ``_os_kernel`` (OS) and
``_stationary_kernel`` (WS, and IS on the transposed problem), Numba, one cycle per loop
iteration over whole register banks, and the memory-block helpers they share.

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

import numpy as np

from hw._jitcache import njit
from hw.numerics import accumulate, observe
from hw.systolic._pe_kernels import (
    FIRST, LAST, VALID, _os_macs_grouped, _product, _shift, _shift_bank, _stationary_macs_sparse,
)
from hw.systolic.mapping import (
    K_BUSY, K_CYCLES, K_FOLDS, K_HAZARDS, K_LEFT_READS, K_PSUM_READS, K_TOP_READS, K_WRITES,
    fold_geometry,
)
from hw.systolic.snapshots import O_OUT, O_OUT_VALID, _os_snapshot, _stationary_snapshot

# Where in its block of memory a kernel puts its registers, in bytes: 64 places 576 bytes apart
# modulo 4096, one run after the other. A load whose address shares its low 12 bits with a
# store in flight waits for it (4K aliasing); for about 1 place in 16 the registers collide so
# with the kernel's stack, and the run is 1.5x slower. With separate allocations, or one place
# for all runs, a process kept its (un)lucky layout for every run: 4x4 runs took 1.0x to 1.8x
# the best time from process to process. Moving the place each run makes a slow run one in
# ~16, in every process (mitigated, not removed; best-of-N timings do not show them).
_PLACES = itertools.cycle([(i * 576) % 4096 for i in range(64)])


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
