"""Numba core of the DRAM timing model: one event-driven FR-FCFS controller per channel.

Everything here takes plain int64 arrays and scalars; :mod:`hw.memory.dram` builds them from a
:class:`~hw.memory.dram.DramConfig` and owns objects and errors. This module is the controller
(its state layout and one event, :func:`_step`); :mod:`hw.memory._dram_requests` offers requests
to it and holds the entry points (``dram_transfer`` for other Numba code, ``run_requests``,
which ``replay`` and ``DramModel.transfer`` both run).

Semantics (per channel, per cycle ``c``, in this order, as in DRAMsim3's controller tick)
---------------------------------------------------------------------------------------
1. At ``c = k * (tREFI // ranks)``, ``k >= 1``, a refresh is requested for the next rank in turn.
   The command queues of that rank are frozen until its REF issues.
2. One command issues (two with ``dual_command_issue``, if one is a column command and the
   other is not). A pending refresh goes first: PRE of the first open bank (in bank order) whose
   PRE is legal, then REF once all banks are closed. Otherwise the first command queue,
   round-robin after the last queue that issued, holding a command that is legal at ``c``;
   inside a queue, the first entry in arrival order whose next command is legal: ACT if its bank
   is closed, RD/WR (RDA/WRA with closed pages) if its row is open, PRE if another row is. A PRE
   is only for the first entry of its bank in the queue and only if no queued entry hits the
   open row, unless 4 column commands have hit it since it opened (DRAMsim3's cap).
3. The first transaction (in order) whose command queue has room moves into it; its first
   command may issue from ``c + 1``.

Request k is offered to its channel's transaction queue at ``a_k = max(issue_k, a_{k-1})``, later
while that queue is full (then one cycle after the move that frees a slot) or, for windowed
transfers, until request ``k - max_outstanding`` has completed. A read completes when its last
data beat is on the bus (RD + CL + tBurst), a write when its last beat is written
(WR + CWL + tBurst).

The kernel jumps from event to event (refresh request, move, command) instead of ticking. At
each event it computes every candidate command's earliest legal cycle from the constraint state
below, so it makes the choice a per-cycle controller makes; the tests hold it to one.

Idle time is skipped between requests (:mod:`hw.memory._dram_requests`, ``_skip_idle``).

Array layout
------------
``params`` (int64, read only): the ``P_*`` entries. Timings are command-to-command distances in
cycles, derived in ``dram/model.py`` (e.g. ``P_RTRL = max(tBurst, tCCD_L)``); ``P_O_*`` entries are
offsets of the state regions.

``state`` (int64, mutable, persists across calls). C channels, R ranks, G bank groups, B banks per
rank (index ``g * banks_per_group + b``; channel-local bank ``r * B + b``), Q command queues per
channel (one per bank, or one per rank) of D entries, transaction queues of T entries. Every bank
keeps its queued requests in its own ring, in arrival order; a per-rank queue is the rings of its
banks sharing one capacity, ordered across banks by arrival sequence numbers.

===============================  ==========  ===================================================
region (offset ``P_O_...``)      size        meaning
===============================  ==========  ===================================================
TIME, RR                         C           last simulated cycle (-1 at start); round robin
REF_NEXT, REF_RANK               C           next refresh request: cycle, rank
REF_HEAD, REF_LEN, REF_FIFO      C, C, C*64  FIFO of ranks with a pending refresh
QCOUNT, QMASK, SEQ               C           queued commands; bitmask of non-empty queues;
                                             arrival sequence counter
TQHEAD, TQLEN, FM_VALID, FM      C           transaction ring; cached first movable entry
SEL_VALID/T/Q/B/I/K              C           cached next command (see ``_step``)
MAXFIN                           1           latest completion in the current call
OPEN, HITS                       C*R*B       open row (-1 closed); column commands since ACT
NACT, NPRE, NRD, NWR, NREF       C*R*B       earliest cycle from the bank's own history
BHEAD, BLEN, BNWR                C*R*B       the bank's ring of queued requests; writes in it
QC_VALID, QC_A, QC_RD, QC_WR     C*R*B       cached candidates of the ring (``_candidates``)
QT_A, QT_RD, QT_WR               C*R*B       ... and their earliest cycles, valid while
QT_ROW_EPOCH, QT_COL_EPOCH       C*R*B       these equal the epochs of the bank's rank, which
RK_ROW_EPOCH, RK_COL_EPOCH       C*R         count changes to the rank's (and its groups')
                                             ACT/PRE and RD/WR constraints
BG_NACT, BG_NRD, BG_NWR          C*R*G       from its bank group (tRRD_L, tCCD_L, tWTR_L)
RK_NACT/NRD/NWR/NPRE/NREF        C*R         from its rank (tRRD_S, tCCD_S, tWTR_S, RD->WR,
                                             tPPD, tRFC)
OTH_NRD, OTH_NWR                 C*R         RD/WR imposed by the other ranks (tRTRS)
FAW, FAW_IDX                     C*R*4, C*R  the rank's last four ACT cycles (ring)
RBMASK                           C*R         bitmask of the rank's banks with queued requests
QLEN                             C*Q         requests in each command queue (its capacity)
BE_ROW/WR/REQ/FLAG/SEQ           C*R*B*D     ring entries: row, write?, request index, flags
                                             (1: it had an ACT, 2: it had a PRE), sequence
TQ_BANK/ROW/WR/REQ/Q/ARR         C*T         transactions: ..., command queue, arrival cycle
SCRATCH                          2*(S+N)     idle skipping: a snapshot and a per-round change of
                                             the state above (S entries) and the N stats
===============================  ==========  ===================================================

Splitting every constraint into bank, bank-group, rank and other-rank terms is exact because
same-group spacings are never shorter than other-group ones (``_L >= _S``, checked by the config).

``stats`` (int64): the ``ST_*`` counters.
"""

from __future__ import annotations

import numpy as np
from hw._jitcache import njit

try:  # LLVM cttz; present in every Numba this project supports
    from numba.cpython.unsafe.numbers import trailing_zeros as _cttz
except ImportError:  # pragma: no cover
    _cttz = None

__all__ = ["decode_address"]

INF = 1 << 62
# typed constants: passing a bare literal would compile a second, literal-typed specialization
NO_LIMIT = np.int64(INF)
ONE = np.int64(1)
ZERO = np.int64(0)
REF_FIFO = 64
HIT_CAP = 4  # DRAMsim3: a PRE may close a row with pending hits after 4 column commands to it
LOG_FIELDS = 7  # command log row: cycle, channel, rank, bankgroup, bank, row, kind

# command kinds (also the command-log codes)
K_ACT, K_PRE, K_RD, K_WR, K_RDA, K_WRA, K_REF = 0, 1, 2, 3, 4, 5, 6

(P_CHANNELS, P_RANKS, P_BANKGROUPS, P_BPG, P_BANKS, P_LG_BANKS, P_LG_BPG, P_REQ_BYTES, P_SHIFT,
 P_CH_POS, P_CH_MASK, P_RA_POS, P_RA_MASK, P_BG_POS, P_BG_MASK, P_BA_POS, P_BA_MASK,
 P_RO_POS, P_RO_MASK,
 P_BURST, P_RL, P_WL,
 P_RTRL, P_RTRS, P_RTRO, P_RTW, P_RTWO, P_RTP, P_RDA_ACT, P_RDA_REF,
 P_WTRL, P_WTRS, P_WTRO, P_WTWL, P_WTWS, P_WTWO, P_WTP, P_WRA_ACT,
 P_RP, P_RC, P_RAS, P_RCDRD, P_RCDWR, P_RRDL, P_RRDS, P_FAW, P_RFC, P_REF_INTERVAL, P_PPD,
 P_CLOSED, P_PER_RANK, P_NQ, P_MASKED, P_QDEPTH, P_TQDEPTH, P_DUAL, P_REFRESH, P_IDEAL,
 P_CH_BITS, P_CH_HASH,
 P_O_TIME, P_O_RR, P_O_REF_NEXT, P_O_REF_RANK, P_O_REF_HEAD, P_O_REF_LEN, P_O_REF_FIFO,
 P_O_QCOUNT, P_O_QMASK, P_O_SEQ, P_O_TQHEAD, P_O_TQLEN, P_O_FM_VALID, P_O_FM,
 P_O_SEL_VALID, P_O_SEL_T, P_O_SEL_Q, P_O_SEL_B, P_O_SEL_I, P_O_SEL_K, P_O_MAXFIN,
 P_O_OPEN, P_O_HITS, P_O_NACT, P_O_NPRE, P_O_NRD, P_O_NWR, P_O_NREF, P_O_BHEAD, P_O_BLEN, P_O_BNWR,
 P_O_QC_VALID, P_O_QC_A, P_O_QC_RD, P_O_QC_WR, P_O_QT_A, P_O_QT_RD, P_O_QT_WR,
 P_O_QT_ROW_EPOCH, P_O_QT_COL_EPOCH,
 P_O_BG_NACT, P_O_BG_NRD, P_O_BG_NWR,
 P_O_RK_NACT, P_O_RK_NRD, P_O_RK_NWR, P_O_RK_NPRE, P_O_RK_NREF, P_O_OTH_NRD, P_O_OTH_NWR,
 P_O_FAW_IDX, P_O_RK_ROW_EPOCH, P_O_RK_COL_EPOCH, P_O_RBMASK, P_O_FAW, P_O_QLEN,
 P_O_BE_ROW, P_O_BE_WR, P_O_BE_REQ, P_O_BE_FLAG, P_O_BE_SEQ,
 P_O_TQ_BANK, P_O_TQ_ROW, P_O_TQ_WR, P_O_TQ_REQ, P_O_TQ_Q, P_O_TQ_ARR,
 P_O_SCRATCH, P_STATE_SIZE, N_PARAMS) = range(130)

(ST_READS, ST_WRITES, ST_ROW_HITS, ST_ROW_MISSES, ST_ROW_CONFLICTS, ST_ACTIVATES,
 ST_PRECHARGES, ST_REFRESHES, ST_DATA_CYCLES, ST_REFRESH_CYCLES, N_STATS) = range(11)

BE_FIELDS = (P_O_BE_ROW, P_O_BE_WR, P_O_BE_REQ, P_O_BE_FLAG, P_O_BE_SEQ)
TQ_FIELDS = (P_O_TQ_BANK, P_O_TQ_ROW, P_O_TQ_WR, P_O_TQ_REQ, P_O_TQ_Q, P_O_TQ_ARR)


@njit(cache=True, _nrt=False, inline="always")
def _ctz(x):
    if _cttz is not None:
        return _cttz(x)
    n = 0  # pragma: no cover
    while (x & 1) == 0:
        x >>= 1
        n += 1
    return n


@njit(cache=True, _nrt=False)
def decode_address(p, address):
    """(channel, channel-local bank = rank * B + bankgroup * banks_per_group + bank, row).
    With ``channel_hash`` (``P_CH_HASH`` > 0: the address bits above the channel field) the
    channel is XORed with those bits folded into channel-wide groups."""
    a = address >> p[P_SHIFT]
    ch = (a >> p[P_CH_POS]) & p[P_CH_MASK]
    if p[P_CH_HASH] > 0:
        rest = (a >> (p[P_CH_POS] + p[P_CH_BITS])) & ((ONE << p[P_CH_HASH]) - 1)
        while rest:
            ch ^= rest & p[P_CH_MASK]
            rest >>= p[P_CH_BITS]
    ra = (a >> p[P_RA_POS]) & p[P_RA_MASK]
    bg = (a >> p[P_BG_POS]) & p[P_BG_MASK]
    ba = (a >> p[P_BA_POS]) & p[P_BA_MASK]
    row = (a >> p[P_RO_POS]) & p[P_RO_MASK]
    return ch, (ra << p[P_LG_BANKS]) + (bg << p[P_LG_BPG]) + ba, row


@njit(cache=True, _nrt=False, inline="always")
def _phys(head, i, depth):
    """Slot of logical entry i of a ring starting at head."""
    j = head + i
    return j - depth if j >= depth else j


@njit(cache=True, _nrt=False, inline="always")
def _bump(s, index, value):
    if s[index] < value:
        s[index] = value


@njit(cache=True, _nrt=False, inline="always")
def _ready(p, s, ch, lbank, kind):
    """Earliest cycle ``kind`` (ACT, PRE, RD or WR) may issue to a bank, all constraints."""
    b = lbank & (p[P_BANKS] - 1)
    grk = ch * p[P_RANKS] + (lbank >> p[P_LG_BANKS])
    gb = (grk << p[P_LG_BANKS]) + b
    ggb = grk * p[P_BANKGROUPS] + (b >> p[P_LG_BPG])
    if kind == K_ACT:
        t = max(s[p[P_O_NACT] + gb], s[p[P_O_BG_NACT] + ggb], s[p[P_O_RK_NACT] + grk])
        return max(t, s[p[P_O_FAW] + grk * 4 + s[p[P_O_FAW_IDX] + grk]] + p[P_FAW])
    if kind == K_PRE:
        return max(s[p[P_O_NPRE] + gb], s[p[P_O_RK_NPRE] + grk])
    if kind == K_WR:
        return max(max(s[p[P_O_NWR] + gb], s[p[P_O_BG_NWR] + ggb]),
                   max(s[p[P_O_RK_NWR] + grk], s[p[P_O_OTH_NWR] + grk]))
    return max(max(s[p[P_O_NRD] + gb], s[p[P_O_BG_NRD] + ggb]),
               max(s[p[P_O_RK_NRD] + grk], s[p[P_O_OTH_NRD] + grk]))


@njit(cache=True, _nrt=False, inline="always")
def _ring_remove(p, s, fields, base, o_head, i, n, depth):
    """Remove logical entry i of the n in a ring at ``base`` (head at ``s[o_head]``), keeping
    the order: shift whichever side of it is shorter."""
    head = s[o_head]
    if i < n - 1 - i:
        for k in range(i, 0, -1):
            dst = base + _phys(head, k, depth)
            src = base + _phys(head, k - 1, depth)
            for f in fields:
                s[p[f] + dst] = s[p[f] + src]
        s[o_head] = _phys(head, 1, depth)
    else:
        for k in range(i, n - 1):
            dst = base + _phys(head, k, depth)
            src = base + _phys(head, k + 1, depth)
            for f in fields:
                s[p[f] + dst] = s[p[f] + src]


@njit(cache=True, _nrt=False)
def _candidates(p, s, ch, lbank):
    """Cache which requests of a bank's ring may issue next. This depends on the ring and the
    bank's open row, not on time. QC_A: ACT or PRE for the head, or -1; QC_RD/QC_WR: first
    read/write hitting the open row, or -1. A PRE is for the head only and only if no queued
    request hits the open row, unless HIT_CAP column commands hit it already."""
    gb = ch * p[P_RANKS] * p[P_BANKS] + lbank
    depth = p[P_QDEPTH]
    base = gb * depth
    head = s[p[P_O_BHEAD] + gb]
    n = s[p[P_O_BLEN] + gb]
    open_row = s[p[P_O_OPEN] + gb]
    a = -1
    rd = -1
    wr = -1
    if open_row < 0:
        a = K_ACT
    else:
        o_row = p[P_O_BE_ROW] + base
        o_wr = p[P_O_BE_WR] + base
        writes_left = s[p[P_O_BNWR] + gb]  # stop once no unseen request can matter
        reads_left = n - writes_left
        for i in range(n):
            j = _phys(head, i, depth)
            if s[o_wr + j]:
                writes_left -= 1
                if wr < 0 and s[o_row + j] == open_row:
                    wr = i
            else:
                reads_left -= 1
                if rd < 0 and s[o_row + j] == open_row:
                    rd = i
            if (rd >= 0 or reads_left == 0) and (wr >= 0 or writes_left == 0):
                break
        if s[o_row + head] != open_row and ((rd < 0 and wr < 0) or s[p[P_O_HITS] + gb] >= HIT_CAP):
            a = K_PRE
    s[p[P_O_QC_A] + gb] = a
    s[p[P_O_QC_RD] + gb] = rd
    s[p[P_O_QC_WR] + gb] = wr
    s[p[P_O_QC_VALID] + gb] = 1
    s[p[P_O_QT_ROW_EPOCH] + gb] = -1
    s[p[P_O_QT_COL_EPOCH] + gb] = -1


@njit(cache=True, _nrt=False)
def _candidate_times(p, s, ch, lbank):
    """Earliest cycles of a bank's cached candidates (INF if none), for those whose constraints
    changed since they were computed."""
    gb = ch * p[P_RANKS] * p[P_BANKS] + lbank
    grk = ch * p[P_RANKS] + (lbank >> p[P_LG_BANKS])
    row_epoch = s[p[P_O_RK_ROW_EPOCH] + grk]
    if s[p[P_O_QT_ROW_EPOCH] + gb] != row_epoch:
        a = s[p[P_O_QC_A] + gb]
        s[p[P_O_QT_A] + gb] = _ready(p, s, ch, lbank, a) if a >= 0 else INF
        s[p[P_O_QT_ROW_EPOCH] + gb] = row_epoch
    col_epoch = s[p[P_O_RK_COL_EPOCH] + grk]
    if s[p[P_O_QT_COL_EPOCH] + gb] != col_epoch:
        s[p[P_O_QT_RD] + gb] = _ready(p, s, ch, lbank, K_RD) if s[p[P_O_QC_RD] + gb] >= 0 else INF
        s[p[P_O_QT_WR] + gb] = _ready(p, s, ch, lbank, K_WR) if s[p[P_O_QC_WR] + gb] >= 0 else INF
        s[p[P_O_QT_COL_EPOCH] + gb] = col_epoch


@njit(cache=True, _nrt=False)
def _eval_bank(p, s, ch, lbank, lb):
    """First request of a bank's ring whose next command is legal earliest (>= lb):
    (cycle, ring index, kind); cycle INF if none can issue."""
    gb = ch * p[P_RANKS] * p[P_BANKS] + lbank
    if s[p[P_O_QC_VALID] + gb] == 0:
        _candidates(p, s, ch, lbank)
    grk = ch * p[P_RANKS] + (lbank >> p[P_LG_BANKS])
    if (s[p[P_O_QT_ROW_EPOCH] + gb] != s[p[P_O_RK_ROW_EPOCH] + grk]
            or s[p[P_O_QT_COL_EPOCH] + gb] != s[p[P_O_RK_COL_EPOCH] + grk]):
        _candidate_times(p, s, ch, lbank)
    auto_pre = 2 if p[P_CLOSED] else 0
    best = INF
    best_i = -1
    best_k = -1
    a = s[p[P_O_QC_A] + gb]
    if a >= 0:  # the head (index 0) wins ties
        best = max(s[p[P_O_QT_A] + gb], lb)
        best_i = 0
        best_k = a
        if best == lb:
            return best, best_i, best_k
    rd = s[p[P_O_QC_RD] + gb]
    if rd >= 0:
        e = max(s[p[P_O_QT_RD] + gb], lb)
        if e < best or (e == best and rd < best_i):
            best = e
            best_i = rd
            best_k = K_RD + auto_pre
    wr = s[p[P_O_QC_WR] + gb]
    if wr >= 0:
        e = max(s[p[P_O_QT_WR] + gb], lb)
        if e < best or (e == best and wr < best_i):
            best = e
            best_i = wr
            best_k = K_WR + auto_pre
    return best, best_i, best_k


@njit(cache=True, _nrt=False)
def _eval_queue(p, s, ch, q, lb):
    """First request of command queue q, in arrival order, whose next command is legal
    earliest (>= lb): (cycle, bank, ring index, kind); cycle INF if none can issue."""
    if not p[P_PER_RANK]:
        e, i, k = _eval_bank(p, s, ch, q, lb)
        return e, q, i, k
    # a per-rank queue: the banks' candidates, ties broken by arrival order
    nb = p[P_BANKS]
    depth = p[P_QDEPTH]
    best = INF
    best_seq = INF
    best_b = -1
    best_i = -1
    best_k = -1
    bits = s[p[P_O_RBMASK] + ch * p[P_RANKS] + q]
    while bits != 0:
        lbank = q * nb + _ctz(bits)
        bits &= bits - 1
        e, i, k = _eval_bank(p, s, ch, lbank, lb)
        if e > best or e >= INF:
            continue
        gb = ch * p[P_RANKS] * nb + lbank
        seq = s[p[P_O_BE_SEQ] + gb * depth + _phys(s[p[P_O_BHEAD] + gb], i, depth)]
        if e < best or seq < best_seq:
            best = e
            best_seq = seq
            best_b = lbank
            best_i = i
            best_k = k
    return best, best_b, best_i, best_k


@njit(cache=True, _nrt=False)
def _refresh_ready(p, s, ch, rank, lb):
    """Next command of the pending refresh of ``rank``: (cycle, bank) of the first open bank
    whose PRE is legal earliest, or (cycle, -1) for the REF once every bank is closed."""
    nb = p[P_BANKS]
    grk = ch * p[P_RANKS] + rank
    gbase = grk * nb
    best = INF
    best_b = -1
    ref_t = max(lb, s[p[P_O_RK_NREF] + grk])
    for b in range(nb):
        if s[p[P_O_OPEN] + gbase + b] >= 0:
            t = max(lb, max(s[p[P_O_NPRE] + gbase + b], s[p[P_O_RK_NPRE] + grk]))
            if t < best:
                best = t
                best_b = b
        else:
            ref_t = max(ref_t, s[p[P_O_NREF] + gbase + b])
    if best_b >= 0:
        return best, best_b
    return ref_t, -1


@njit(cache=True, _nrt=False, inline="always")
def _blocked_rank(p, s, ch):
    """Rank whose refresh is pending (its command queues are frozen), or -1."""
    if s[p[P_O_REF_LEN] + ch] == 0:
        return -1
    return s[p[P_O_REF_FIFO] + ch * REF_FIFO + s[p[P_O_REF_HEAD] + ch]]


@njit(cache=True, _nrt=False, inline="always")
def _queue_rank(p, q):
    return q if p[P_PER_RANK] else q >> p[P_LG_BANKS]


@njit(cache=True, _nrt=False)
def _select(p, s, ch, lb, with_refresh):
    """Earliest command of channel ``ch`` at a cycle >= lb: (cycle, queue, bank, ring index,
    kind). queue = -1 marks a refresh command (its bank's PRE, or the REF with index -1)."""
    nq = p[P_NQ]
    rr = s[p[P_O_RR] + ch]
    blocked = _blocked_rank(p, s, ch)
    ref_t = INF
    ref_b = -1
    if blocked >= 0 and with_refresh != 0:
        ref_t, ref_b = _refresh_ready(p, s, ch, blocked, lb)
    best = INF
    best_q = -1
    best_b = -1
    best_i = -1
    best_k = -1
    if p[P_MASKED]:
        # non-empty queues after rr, then those up to rr: the round-robin order
        mask = s[p[P_O_QMASK] + ch]
        high = (mask >> (rr + 1)) << (rr + 1) if rr < 63 else 0
        for part in range(2):
            bits = high if part == 0 else mask & ~high
            while bits != 0:
                q = _ctz(bits)
                bits &= bits - 1
                if blocked >= 0 and _queue_rank(p, q) == blocked:
                    continue
                e, b, i, k = _eval_queue(p, s, ch, q, lb)
                if e < best:
                    best = e
                    best_q = q
                    best_b = b
                    best_i = i
                    best_k = k
                    if e == lb:
                        break
            if best == lb:
                break
    else:
        o_qlen = p[P_O_QLEN] + ch * nq
        for j in range(1, nq + 1):
            q = rr + j
            if q >= nq:
                q -= nq
            if s[o_qlen + q] == 0:
                continue
            if blocked >= 0 and _queue_rank(p, q) == blocked:
                continue
            e, b, i, k = _eval_queue(p, s, ch, q, lb)
            if e < best:
                best = e
                best_q = q
                best_b = b
                best_i = i
                best_k = k
                if e == lb:
                    break
    if ref_t <= best and ref_t < INF:
        lbank = (blocked << p[P_LG_BANKS]) + max(ref_b, 0)
        return ref_t, -1, lbank, -1, (K_PRE if ref_b >= 0 else K_REF)
    return best, best_q, best_b, best_i, best_k


@njit(cache=True, _nrt=False)
def _issue(p, s, st, ch, c, q, lbank, i, kind, finish, log, logn):
    """Issue one command at cycle c to a bank: bank state, timing constraints, counters, the
    log. q = -1 marks a refresh command. A column command completes its request, which leaves
    its queue."""
    nb = p[P_BANKS]
    nr = p[P_RANKS]
    depth = p[P_QDEPTH]
    r = lbank >> p[P_LG_BANKS]
    b = lbank & (nb - 1)
    grk = ch * nr + r
    gb = grk * nb + b
    ggb = grk * p[P_BANKGROUPS] + (b >> p[P_LG_BPG])
    e = -1
    row = -1
    if q >= 0:
        e = gb * depth + _phys(s[p[P_O_BHEAD] + gb], i, depth)
        row = s[p[P_O_BE_ROW] + e]
    s[p[P_O_QC_VALID] + gb] = 0  # its open row or its ring changes
    if kind == K_ACT:
        s[p[P_O_OPEN] + gb] = row
        s[p[P_O_HITS] + gb] = 0
        _bump(s, p[P_O_NACT] + gb, c + p[P_RC])
        _bump(s, p[P_O_NRD] + gb, c + p[P_RCDRD])
        _bump(s, p[P_O_NWR] + gb, c + p[P_RCDWR])
        _bump(s, p[P_O_NPRE] + gb, c + p[P_RAS])
        _bump(s, p[P_O_BG_NACT] + ggb, c + p[P_RRDL])
        _bump(s, p[P_O_RK_NACT] + grk, c + p[P_RRDS])
        fi = s[p[P_O_FAW_IDX] + grk]
        s[p[P_O_FAW] + grk * 4 + fi] = c
        s[p[P_O_FAW_IDX] + grk] = (fi + 1) & 3
        s[p[P_O_RK_ROW_EPOCH] + grk] += 1
        st[ST_ACTIVATES] += 1
        s[p[P_O_BE_FLAG] + e] |= 1
    elif kind == K_PRE:
        row = s[p[P_O_OPEN] + gb]
        s[p[P_O_OPEN] + gb] = -1
        s[p[P_O_HITS] + gb] = 0
        _bump(s, p[P_O_NACT] + gb, c + p[P_RP])
        _bump(s, p[P_O_NREF] + gb, c + p[P_RP])
        if p[P_PPD] > 0:
            _bump(s, p[P_O_RK_NPRE] + grk, c + p[P_PPD])
            s[p[P_O_RK_ROW_EPOCH] + grk] += 1
        st[ST_PRECHARGES] += 1
        if e >= 0:
            s[p[P_O_BE_FLAG] + e] |= 2
    elif kind == K_REF:
        _bump(s, p[P_O_RK_NACT] + grk, c + p[P_RFC])
        _bump(s, p[P_O_RK_NREF] + grk, c + p[P_RFC])
        s[p[P_O_RK_ROW_EPOCH] + grk] += 1
        s[p[P_O_REF_HEAD] + ch] = (s[p[P_O_REF_HEAD] + ch] + 1) % REF_FIFO
        s[p[P_O_REF_LEN] + ch] -= 1
        st[ST_REFRESHES] += 1
        st[ST_REFRESH_CYCLES] += p[P_RFC]
    else:
        is_write = kind == K_WR or kind == K_WRA
        if is_write:
            _bump(s, p[P_O_NPRE] + gb, c + p[P_WTP])
            _bump(s, p[P_O_BG_NRD] + ggb, c + p[P_WTRL])
            _bump(s, p[P_O_BG_NWR] + ggb, c + p[P_WTWL])
            _bump(s, p[P_O_RK_NRD] + grk, c + p[P_WTRS])
            _bump(s, p[P_O_RK_NWR] + grk, c + p[P_WTWS])
            to_rd = c + p[P_WTRO]
            to_wr = c + p[P_WTWO]
            done = c + p[P_WL] + p[P_BURST]
            st[ST_WRITES] += 1
        else:
            _bump(s, p[P_O_NPRE] + gb, c + p[P_RTP])
            _bump(s, p[P_O_BG_NRD] + ggb, c + p[P_RTRL])
            _bump(s, p[P_O_RK_NRD] + grk, c + p[P_RTRS])
            _bump(s, p[P_O_RK_NWR] + grk, c + p[P_RTW])
            to_rd = c + p[P_RTRO]
            to_wr = c + p[P_RTWO]
            done = c + p[P_RL] + p[P_BURST]
            st[ST_READS] += 1
        for r2 in range(nr):
            s[p[P_O_RK_COL_EPOCH] + ch * nr + r2] += 1
            if r2 != r:
                _bump(s, p[P_O_OTH_NRD] + ch * nr + r2, to_rd)
                _bump(s, p[P_O_OTH_NWR] + ch * nr + r2, to_wr)
        if kind == K_RDA or kind == K_WRA:
            s[p[P_O_OPEN] + gb] = -1
            s[p[P_O_HITS] + gb] = 0
            _bump(s, p[P_O_NACT] + gb, c + (p[P_WRA_ACT] if is_write else p[P_RDA_ACT]))
            _bump(s, p[P_O_NREF] + gb, c + (p[P_WRA_ACT] if is_write else p[P_RDA_REF]))
        else:
            s[p[P_O_HITS] + gb] += 1
        flag = s[p[P_O_BE_FLAG] + e]
        if flag & 2:
            st[ST_ROW_CONFLICTS] += 1
        elif flag & 1:
            st[ST_ROW_MISSES] += 1
        else:
            st[ST_ROW_HITS] += 1
        st[ST_DATA_CYCLES] += p[P_BURST]
        req = s[p[P_O_BE_REQ] + e]
        finish[req % finish.shape[0]] = done
        _bump(s, p[P_O_MAXFIN], done)
        if is_write:
            s[p[P_O_BNWR] + gb] -= 1
        _ring_remove(p, s, BE_FIELDS, gb * depth, p[P_O_BHEAD] + gb, i, s[p[P_O_BLEN] + gb], depth)
        s[p[P_O_BLEN] + gb] -= 1
        if s[p[P_O_BLEN] + gb] == 0:
            s[p[P_O_RBMASK] + grk] &= ~(1 << b)
        cq = ch * p[P_NQ] + q
        s[p[P_O_QLEN] + cq] -= 1
        if s[p[P_O_QLEN] + cq] == 0:
            s[p[P_O_QMASK] + ch] &= ~(1 << (q & 63))
        s[p[P_O_QCOUNT] + ch] -= 1
        s[p[P_O_FM_VALID] + ch] = 0  # a queue has room again
    k = logn[0]
    if k < log.shape[0]:
        log[k, 0] = c
        log[k, 1] = ch
        log[k, 2] = r
        log[k, 3] = b >> p[P_LG_BPG]
        log[k, 4] = b & (p[P_BPG] - 1)
        log[k, 5] = row
        log[k, 6] = kind
    logn[0] = k + 1


@njit(cache=True, _nrt=False)
def _first_movable(p, s, ch):
    """Logical index of the first transaction whose command queue has room, or -1 (cached)."""
    if s[p[P_O_FM_VALID] + ch]:
        return s[p[P_O_FM] + ch]
    nq = p[P_NQ]
    depth = p[P_TQDEPTH]
    head = s[p[P_O_TQHEAD] + ch]
    o_q = p[P_O_TQ_Q] + ch * depth
    o_len = p[P_O_QLEN] + ch * nq
    qdepth = p[P_QDEPTH]
    found = -1
    for j in range(s[p[P_O_TQLEN] + ch]):
        if s[o_len + s[o_q + _phys(head, j, depth)]] < qdepth:
            found = j
            break
    s[p[P_O_FM] + ch] = found
    s[p[P_O_FM_VALID] + ch] = 1
    return found


@njit(cache=True, _nrt=False)
def _move(p, s, ch, j):
    """Move transaction j of channel ch into its command queue (the tail of its bank's ring);
    returns the queue."""
    tdepth = p[P_TQDEPTH]
    tbase = ch * tdepth
    thead = s[p[P_O_TQHEAD] + ch]
    src = tbase + _phys(thead, j, tdepth)
    q = s[p[P_O_TQ_Q] + src]
    lbank = s[p[P_O_TQ_BANK] + src]
    nb = p[P_BANKS]
    gb = ch * p[P_RANKS] * nb + lbank
    depth = p[P_QDEPTH]
    n = s[p[P_O_BLEN] + gb]
    dst = gb * depth + _phys(s[p[P_O_BHEAD] + gb], n, depth)
    s[p[P_O_BE_ROW] + dst] = s[p[P_O_TQ_ROW] + src]
    s[p[P_O_BE_WR] + dst] = s[p[P_O_TQ_WR] + src]
    s[p[P_O_BE_REQ] + dst] = s[p[P_O_TQ_REQ] + src]
    s[p[P_O_BE_FLAG] + dst] = 0
    s[p[P_O_BE_SEQ] + dst] = s[p[P_O_SEQ] + ch]
    s[p[P_O_SEQ] + ch] += 1
    s[p[P_O_BLEN] + gb] = n + 1
    s[p[P_O_BNWR] + gb] += s[p[P_O_TQ_WR] + src]
    s[p[P_O_RBMASK] + ch * p[P_RANKS] + (lbank >> p[P_LG_BANKS])] |= 1 << (lbank & (nb - 1))
    s[p[P_O_QC_VALID] + gb] = 0
    s[p[P_O_QLEN] + ch * p[P_NQ] + q] += 1
    s[p[P_O_QMASK] + ch] |= 1 << (q & 63)
    s[p[P_O_QCOUNT] + ch] += 1
    _ring_remove(p, s, TQ_FIELDS, tbase, p[P_O_TQHEAD] + ch, j, s[p[P_O_TQLEN] + ch], tdepth)
    s[p[P_O_TQLEN] + ch] -= 1
    s[p[P_O_FM_VALID] + ch] = 0
    return q


@njit(cache=True, _nrt=False)
def _after_move(p, s, ch, q, lb):
    """Update the cached next command after a request moved into queue q (no command issued).
    Every other queue's earliest command is at or after the cached one and the move cannot
    change it, so only q is evaluated again."""
    sel_q = s[p[P_O_SEL_Q] + ch]
    if sel_q == q:  # the new request may even delay this queue's command (a pending hit
        s[p[P_O_SEL_VALID] + ch] = 0  # blocks a PRE): evaluate everything again
        return
    blocked = _blocked_rank(p, s, ch)
    if blocked >= 0 and _queue_rank(p, q) == blocked:
        return
    e, b, i, k = _eval_queue(p, s, ch, q, lb)
    t = s[p[P_O_SEL_T] + ch]
    if e > t or e >= INF:
        return
    if e == t:
        if sel_q < 0:  # a refresh command wins ties
            return
        nq = p[P_NQ]
        rr = s[p[P_O_RR] + ch]
        if (q - rr - 1) % nq > (sel_q - rr - 1) % nq:  # round-robin order decides
            return
    s[p[P_O_SEL_T] + ch] = e
    s[p[P_O_SEL_Q] + ch] = q
    s[p[P_O_SEL_B] + ch] = b
    s[p[P_O_SEL_I] + ch] = i
    s[p[P_O_SEL_K] + ch] = k


@njit(cache=True, _nrt=False)
def _step(p, s, st, ch, limit, finish, log, logn):
    """Simulate the next cycle of channel ``ch`` at which something happens, if it is before
    ``limit``. Returns that cycle, or -1 if nothing happens before ``limit``."""
    lb = s[p[P_O_TIME] + ch] + 1
    if s[p[P_O_SEL_VALID] + ch] == 0:
        t, q, b, i, k = _select(p, s, ch, lb, ONE)
        s[p[P_O_SEL_T] + ch] = t
        s[p[P_O_SEL_Q] + ch] = q
        s[p[P_O_SEL_B] + ch] = b
        s[p[P_O_SEL_I] + ch] = i
        s[p[P_O_SEL_K] + ch] = k
        s[p[P_O_SEL_VALID] + ch] = 1
    t_cmd = s[p[P_O_SEL_T] + ch]
    t_ref = s[p[P_O_REF_NEXT] + ch] if p[P_REFRESH] else INF
    j = _first_movable(p, s, ch)
    o_arr = p[P_O_TQ_ARR] + ch * p[P_TQDEPTH]
    thead = s[p[P_O_TQHEAD] + ch]
    t_move = INF
    if j >= 0:
        t_move = max(lb, s[o_arr + _phys(thead, j, p[P_TQDEPTH])])
    c = min(t_cmd, min(t_ref, t_move))
    if c >= limit or c >= INF:
        return -1
    s[p[P_O_TIME] + ch] = c
    if c == t_ref:
        n = s[p[P_O_REF_LEN] + ch]
        if n >= REF_FIFO:
            raise RuntimeError("DRAM model: refresh requests pile up (tREFI too short for tRFC)")
        fifo = p[P_O_REF_FIFO] + ch * REF_FIFO
        s[fifo + (s[p[P_O_REF_HEAD] + ch] + n) % REF_FIFO] = s[p[P_O_REF_RANK] + ch]
        s[p[P_O_REF_LEN] + ch] = n + 1
        s[p[P_O_REF_RANK] + ch] = (s[p[P_O_REF_RANK] + ch] + 1) % p[P_RANKS]
        s[p[P_O_REF_NEXT] + ch] += p[P_REF_INTERVAL]
        s[p[P_O_SEL_VALID] + ch] = 0
        t, q, b, i, k = _select(p, s, ch, c, ONE)
    else:
        t = t_cmd
        q = s[p[P_O_SEL_Q] + ch]
        b = s[p[P_O_SEL_B] + ch]
        i = s[p[P_O_SEL_I] + ch]
        k = s[p[P_O_SEL_K] + ch]
    if t == c:
        s[p[P_O_SEL_VALID] + ch] = 0
        first_is_column = k >= K_RD and k <= K_WRA
        _issue(p, s, st, ch, c, q, b, i, k, finish, log, logn)
        if q >= 0:
            s[p[P_O_RR] + ch] = q
        if p[P_DUAL]:
            # HBM: separate row and column command buses; DRAMsim3 looks for a second
            # command in the same cycle and issues it only if it is of the other kind
            t2, q2, b2, i2, k2 = _select(p, s, ch, c, ZERO)
            if t2 == c:
                s[p[P_O_RR] + ch] = q2
                if (k2 >= K_RD and k2 <= K_WRA) != first_is_column:
                    _issue(p, s, st, ch, c, q2, b2, i2, k2, finish, log, logn)
        j = _first_movable(p, s, ch)
    if j >= 0 and s[o_arr + _phys(s[p[P_O_TQHEAD] + ch], j, p[P_TQDEPTH])] <= c:
        qm = _move(p, s, ch, j)
        if s[p[P_O_SEL_VALID] + ch] == 1:
            _after_move(p, s, ch, qm, c + 1)
    return c
