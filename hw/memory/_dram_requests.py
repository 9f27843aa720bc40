"""The DRAM controller's driver: requests offered to the channels, windowed transfers, idle time
skipped, and the entry points of the DRAM model's Numba code.

:func:`run_requests` offers requests in order to the controller of :mod:`hw.memory._dram_kernel`
(which states the per-cycle semantics and the state layout) and simulates until all complete;
``replay`` and ``DramModel.transfer`` both run it. :func:`dram_transfer` is the entry point for
other Numba code (one DMA burst).

Idle time is skipped (:func:`_skip_idle`): while a channel waits more than ``SKIP_ROUNDS``
refresh rounds (``ranks x tREFI/ranks`` cycles each) for its next request, the only events are
refreshes, and once two consecutive rounds change the whole state and the counters by the same
amounts, every later idle round does too (the controller's rules depend on time differences
only), so the kernel adds ``m`` times that change at once instead of simulating ``m`` rounds.
The results are identical to stepping through (a test replays the same traces both ways; a
command log, when requested, disables the skip so it lists every command). The cost of a gap
is then a few rounds, not gap / tREFI.
"""

from __future__ import annotations

import numpy as np
from hw._jitcache import njit

from hw.memory._dram_kernel import (
    INF, LOG_FIELDS, NO_LIMIT, P_CHANNELS, P_IDEAL, P_LG_BANKS, P_O_FM, P_O_FM_VALID,
    P_O_MAXFIN, P_O_QCOUNT, P_O_REF_HEAD, P_O_REF_NEXT, P_O_SCRATCH, P_O_TIME, P_O_TQ_ARR,
    P_O_TQ_BANK, P_O_TQ_Q, P_O_TQ_REQ, P_O_TQ_ROW, P_O_TQ_WR, P_O_TQHEAD, P_O_TQLEN, P_PER_RANK,
    P_RANKS, P_REF_INTERVAL, P_REFRESH, P_REQ_BYTES, P_TQDEPTH, REF_FIFO, ST_READS, ST_WRITES,
    _phys, _step, decode_address,
)

__all__ = ["dram_transfer", "run_requests", "LOG_FIELDS"]

SKIP_ROUNDS = 4     # gaps longer than this many refresh rounds are skipped (_skip_idle)


@njit(cache=True, _nrt=False)
def _run_until(p, s, st, ch, limit, finish, log, logn):
    while _step(p, s, st, ch, limit, finish, log, logn) >= 0:
        pass


@njit(cache=True, _nrt=False)
def _snapshot(s, st, core, snap):
    for i in range(core):
        s[snap + i] = s[i]
    for i in range(st.shape[0]):
        s[snap + core + i] = st[i]


@njit(cache=True, _nrt=False)
def _skip_idle(p, s, st, ch, arrival, finish, log, logn):
    """Bring channel ``ch`` close to ``arrival`` (its next request) without simulating idle
    refresh rounds one by one (module docstring); exact. No-op without refresh or with a
    command log."""
    if not p[P_REFRESH] or log.shape[0] > 0:
        return
    period = p[P_REF_INTERVAL] * p[P_RANKS]
    core = p[P_O_SCRATCH]
    nst = st.shape[0]
    snap = core
    dlt = core + core + nst
    while arrival - s[p[P_O_REF_NEXT] + ch] > SKIP_ROUNDS * period:
        b = s[p[P_O_REF_NEXT] + ch]
        _run_until(p, s, st, ch, b + period, finish, log, logn)
        if s[p[P_O_QCOUNT] + ch] > 0 or s[p[P_O_TQLEN] + ch] > 0:
            continue                                # still busy: one round at a time
        _snapshot(s, st, core, snap)
        _run_until(p, s, st, ch, b + 2 * period, finish, log, logn)
        for i in range(core):
            s[dlt + i] = s[i] - s[snap + i]
        for i in range(nst):
            s[dlt + core + i] = st[i] - s[snap + core + i]
        _snapshot(s, st, core, snap)
        _run_until(p, s, st, ch, b + 3 * period, finish, log, logn)
        same = s[p[P_O_QCOUNT] + ch] == 0 and s[p[P_O_TQLEN] + ch] == 0
        for i in range(core):
            if s[i] - s[snap + i] != s[dlt + i]:
                same = False
                break
        for i in range(nst):
            if st[i] - s[snap + core + i] != s[dlt + core + i]:
                same = False
                break
        if same:
            m = (arrival - s[p[P_O_REF_NEXT] + ch]) // period - 2
            if m > 0:
                for i in range(core):
                    s[i] += m * s[dlt + i]
                for i in range(nst):
                    st[i] += m * s[dlt + core + i]
                # the one modular field that moves while idle: the refresh FIFO's head (the
                # FIFO is empty at a round boundary, so only its position mod REF_FIFO counts)
                s[p[P_O_REF_HEAD] + ch] %= REF_FIFO
            return


@njit(cache=True, _nrt=False)
def run_requests(p, s, st, addrs, writes, issues, base_addr, base_write, start, n, max_outstanding,
                 finish, log, logn):
    """Offer n requests in order and simulate until all complete; return the last completion.

    Request k is ``(addrs[k], writes[k], issues[k])`` if ``addrs`` is non-empty, otherwise
    ``(base_addr + k * request_bytes, base_write, start)``. ``finish`` (length F >= 1) receives
    request k's completion cycle at ``k % F``: F must be ``min(max_outstanding, n)``. ``log``
    (rows of LOG_FIELDS) receives commands while it has room; ``logn[0]`` counts all of them.
    """
    nf = finish.shape[0]
    use_arrays = addrs.shape[0] > 0
    if p[P_IDEAL]:
        last = -1
        for k in range(n):
            t = issues[k] if use_arrays else start
            w = writes[k] != 0 if use_arrays else base_write
            finish[k % nf] = t
            if w:
                st[ST_WRITES] += 1
            else:
                st[ST_READS] += 1
            last = max(last, t)
        return last
    for k in range(nf):
        finish[k] = -1
    s[p[P_O_MAXFIN]] = -1
    rb = p[P_REQ_BYTES]
    tdepth = p[P_TQDEPTH]
    prev = -INF
    for k in range(n):
        if use_arrays:
            addr = addrs[k]
            w = 1 if writes[k] != 0 else 0
            arrival = issues[k]
        else:
            addr = base_addr + k * rb
            w = 1 if base_write else 0
            arrival = start
        arrival = max(arrival, prev)
        if k >= max_outstanding:
            # the window slides in request order: k waits for k - max_outstanding
            j = k - max_outstanding
            slot = j % nf
            if finish[slot] < 0:
                ch_j, _b, _r = decode_address(p, addrs[j] if use_arrays else base_addr + j * rb)
                while finish[slot] < 0:
                    if _step(p, s, st, ch_j, NO_LIMIT, finish, log, logn) < 0:
                        raise RuntimeError("DRAM model: a queued request can never issue")
            arrival = max(arrival, finish[slot])
            finish[slot] = -1
        ch, lbank, row = decode_address(p, addr)
        arrival = max(arrival, s[p[P_O_TIME] + ch] + 1)  # a channel cannot go back in time
        _skip_idle(p, s, st, ch, arrival, finish, log, logn)
        while _step(p, s, st, ch, arrival, finish, log, logn) >= 0:
            pass
        while s[p[P_O_TQLEN] + ch] >= tdepth:
            c = _step(p, s, st, ch, NO_LIMIT, finish, log, logn)
            if c < 0:
                raise RuntimeError("DRAM model: transaction queue full but nothing can move")
            arrival = max(arrival, c + 1)
        m = s[p[P_O_TQLEN] + ch]
        o = ch * tdepth + _phys(s[p[P_O_TQHEAD] + ch], m, tdepth)
        s[p[P_O_TQ_BANK] + o] = lbank
        s[p[P_O_TQ_ROW] + o] = row
        s[p[P_O_TQ_WR] + o] = w
        s[p[P_O_TQ_REQ] + o] = k
        s[p[P_O_TQ_Q] + o] = lbank >> p[P_LG_BANKS] if p[P_PER_RANK] else lbank
        s[p[P_O_TQ_ARR] + o] = arrival
        s[p[P_O_TQLEN] + ch] = m + 1
        if s[p[P_O_FM] + ch] < 0:  # the cached "nothing movable" may no longer hold
            s[p[P_O_FM_VALID] + ch] = 0
        prev = arrival
    for ch in range(p[P_CHANNELS]):
        while s[p[P_O_QCOUNT] + ch] > 0 or s[p[P_O_TQLEN] + ch] > 0:
            if _step(p, s, st, ch, NO_LIMIT, finish, log, logn) < 0:
                raise RuntimeError("DRAM model: a queued request can never issue")
    return s[p[P_O_MAXFIN]]


@njit(cache=True)
def dram_transfer(params, state, stats, address, nbytes, is_write, start_cycle, max_outstanding):
    """One DMA burst: the column requests covering bytes ``[address, address + nbytes)``, in
    address order, offered from ``start_cycle`` with at most ``max_outstanding`` in flight
    (request k waits for request k - max_outstanding to complete). Returns the cycle the last
    one completes: ``start_cycle`` if ``nbytes <= 0`` and on the ideal model. ``params``,
    ``state`` and ``stats`` are :class:`hw.memory.dram.DramModel`'s arrays."""
    if nbytes <= 0:
        return np.int64(start_cycle)
    rb = params[P_REQ_BYTES]
    first = address // rb
    n = (address + nbytes - 1) // rb - first + 1
    window = max(np.int64(max_outstanding), np.int64(1))
    finish = np.empty(min(window, n), np.int64)
    no_addrs = np.empty(0, np.int64)
    no_writes = np.empty(0, np.uint8)
    log = np.empty((0, LOG_FIELDS), np.int64)
    logn = np.zeros(1, np.int64)
    return run_requests(params, state, stats, no_addrs, no_writes, no_addrs, first * rb,
                        is_write != 0, np.int64(start_cycle), n, window, finish, log, logn)
