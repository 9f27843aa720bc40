"""Flow-level, event-driven network engine: a DAG of point-to-point messages over directed links.

Model (the timing contract the collectives and their tests rely on)
-------------------------------------------------------------------
* A **message** ``i`` goes from node ``src[i]`` to node ``dst[i]`` along the topology's route
  (a list of directed links, :meth:`Topology.routes`). It **starts** at::

      start_i = max(release_i,  max_{p in arrival preds} (arrival_p + delay_i),
                                max_{q in send preds}    (send_done_q + delay_i))

  Arrival predecessors (``succ_ptr``/``succ``, the spec's DAG) hand over data: the successor
  waits for the data to *arrive*. Send predecessors (``chain_ptr``/``chain``, optional) order
  messages that leave through the same port one after the other (a pipeline of chunks, a
  rank's sequence of sends in a binomial tree): the successor waits until the predecessor's
  last byte has *left*. ``delay_i`` is what the sender spends between the two (software
  overhead, reducing the received block). Messages without predecessors start at
  ``release_i``.
* While it is sending, a message is a **fluid flow** over all links of its route at once.
  Flows that share a directed link share its bandwidth **max-min fairly** (progressive
  filling: the link with the smallest fair share fixes the rate of all its flows, which are
  then removed with their bandwidth, and so on; Bertsekas & Gallager, *Data Networks*, 1992,
  section 6.5.2). Rates are recomputed only when a flow starts or ends, and only for the
  flows connected to it through shared links.
* Its last byte leaves at ``send_done_i``; it **arrives** at
  ``arrival_i = send_done_i + sum of the link latencies on its route`` (latency is a pipe
  delay, it does not hold bandwidth). A message with an empty route (``src == dst``) or zero
  bytes takes no bandwidth (``arrival = start + route latency``).
* ``contention=False`` gives every flow its route's bottleneck bandwidth as if it were alone
  (the congestion-unaware mode of analytical simulators, for comparison only).

A rank therefore never injects faster than its links: all flows leaving through one port
share it.

Implementation: one Numba kernel (:func:`_run`). Events sharing a timestamp (to 1e-12
relative) are handled as one batch: every flow ending or starting in the batch is applied,
then the rates of the connected flows are recomputed once (a breadth-first search over
link -> flows -> links from the links that changed; a component of one flow takes its route's
bottleneck directly). Projected send-done times sit in a binary heap with lazy invalidation
(an entry is valid while it equals the flow's current projection). Messages whose
predecessors are done are started at once when their start time falls in the current batch,
else pushed on the same heap. Per message the kernel keeps 20 bytes (predecessor count,
start, arrival); flows live in slots reused as they end, so memory follows the number of
*concurrent* flows, not the number of messages. Messages between the same (src, dst) pair
share one route. A flow that starts alone on its links takes its route's bottleneck at once;
the max-min pass runs only for links a second flow joins or a flow leaves to others.

Ring collectives need no per-message memory at all: :func:`simulate_rings` runs a
:class:`RingProgram` (rings, steps, chunks, block bytes, costs) and the kernel derives each
message's successors from its (ring, step, chunk, position). It keeps, per (ring, chunk,
position), a window of ``W`` steps (start time, predecessors left); ``W`` starts at 2 and
doubles, with a rerun, when a position is asked to hold a step while an earlier one is still
waiting (a slow link lets the positions before it run ahead).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hw._jitcache import njit

__all__ = ["Messages", "FlowResult", "simulate", "simulate_links", "messages_from_edges",
           "csr_from_edges", "RingProgram", "RingResult", "simulate_rings"]

_I32 = np.int32
_I64 = np.int64
_F64 = np.float64
_TOL = 1e-12        # relative time tolerance of one event batch


@dataclass
class Messages:
    """A DAG of point-to-point messages (node ids, bytes, seconds).

    ``succ_ptr``/``succ``: CSR of *arrival* successors (a successor waits for the data to
    arrive). ``chain_ptr``/``chain`` (optional, an extension of the spec): CSR of *send*
    successors (a successor waits until this message's last byte has left; used to send the
    chunks of a pipeline through one port in order). See the module docstring for the start
    rule."""

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    delay_s: np.ndarray
    release_s: np.ndarray
    succ_ptr: np.ndarray
    succ: np.ndarray
    chain_ptr: np.ndarray | None = None
    chain: np.ndarray | None = None

    def __len__(self) -> int:
        return int(len(self.src))


@dataclass
class FlowResult:
    """Outcome of :func:`simulate`. ``start_s``: when each message started sending;
    ``send_done_s``: when its last byte left; ``finish_s``: its arrival at ``dst``.
    ``events`` counts event batches (distinct event times), ``rate_updates`` the times a
    flow's rate was set or changed, ``max_flows`` the most flows in flight at once."""

    start_s: np.ndarray
    finish_s: np.ndarray
    makespan_s: float
    link_bytes: np.ndarray
    events: int
    rate_updates: int = 0
    max_flows: int = 0
    send_done_s: np.ndarray = field(default_factory=lambda: np.zeros(0))


def csr_from_edges(m: int, pred: np.ndarray, succ: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR (ptr int64 [m+1], succ int32) of the edges ``pred[k] -> succ[k]`` (edges of one
    predecessor keep their order). Skips the sort when ``pred`` is already non-decreasing."""
    pred = np.asarray(pred)
    pred = pred if pred.dtype in (np.int32, np.int64) else pred.astype(_I64)
    succ = np.asarray(succ, dtype=_I32)
    if len(pred) and np.any(pred[1:] < pred[:-1]):
        order = np.argsort(pred, kind="stable")
        pred, succ = pred[order], succ[order]
    ptr = np.zeros(m + 1, dtype=_I64)
    if len(pred):
        np.cumsum(np.bincount(pred, minlength=m), out=ptr[1:])
    return ptr, np.ascontiguousarray(succ)


def messages_from_edges(src, dst, nbytes, delay_s=0.0, release_s=0.0, edges=None,
                        send_edges=None) -> Messages:
    """Build :class:`Messages` from per-message arrays (scalars broadcast) and edge lists
    ``edges = (pred, succ)`` (arrival) and ``send_edges = (pred, succ)`` (send order)."""
    src = np.ascontiguousarray(src, dtype=_I32)
    m = len(src)

    def col(x, dtype):
        a = np.asarray(x, dtype=dtype)
        return np.full(m, a, dtype=dtype) if a.ndim == 0 else np.ascontiguousarray(a)

    e = edges if edges is not None else (np.zeros(0, _I64), np.zeros(0, _I32))
    sptr, succ = csr_from_edges(m, *e)
    cptr = chain = None
    if send_edges is not None and len(send_edges[0]):
        cptr, chain = csr_from_edges(m, *send_edges)
    return Messages(src, col(dst, _I32), col(nbytes, _F64), col(delay_s, _F64),
                    col(release_s, _F64), sptr, succ, cptr, chain)


# --------------------------------------------------------------------------- Numba kernel
#
# Event queue: a binary heap of *buckets* (time, first node of a linked list of events sharing
# that time). Node ``i < m`` is "start message i" (a message is queued at most once); nodes
# ``m + j`` come from a pool and mean "flow slot ``nd_slot[j]`` projected to finish sending",
# valid while the slot's version still equals ``nd_ver[j]``. A push whose time equals the last
# bucket pushed for its kind (start / send-done) joins that bucket instead of the heap:
# collectives create thousands of events with bit-identical times, so the heap stays small.
#
# The kernel allocates its work arrays once from the capacities it is given and never grows
# them (Numba reference-counts array variables that are reassigned inside loops, which cost
# more than the simulation itself). If a capacity is exceeded it returns a negative code; the
# Python layer doubles that capacity and runs again (capacities start from safe guesses, so
# this is rare).

_OVER_SLOTS, _OVER_NODES, _OVER_HEAP, _OVER_PEND, _OVER_DONE, _OVER_WINDOW = range(-1, -7, -1)


@njit(inline="always")
def _heap_push(keys, vals, n, key, val):
    """Sift ``(key, val)`` up a binary min-heap of ``n`` entries; returns the new size. Inlined
    into the kernel at Numba IR level (no call overhead)."""
    i = n
    while i > 0:
        pa = (i - 1) >> 1
        if keys[pa] <= key:
            break
        keys[i] = keys[pa]
        vals[i] = vals[pa]
        i = pa
    keys[i] = key
    vals[i] = val
    return n + 1


@njit(inline="always")
def _heap_pop(keys, vals, n):
    """Remove the root of a binary min-heap of ``n`` entries (read it first); returns the new
    size."""
    n -= 1
    lt = keys[n]
    lc = vals[n]
    i = 0
    while True:
        k = 2 * i + 1
        if k >= n:
            break
        if k + 1 < n and keys[k + 1] < keys[k]:
            k += 1
        if keys[k] >= lt:
            break
        keys[i] = keys[k]
        vals[i] = vals[k]
        i = k
    if n > 0:
        keys[i] = lt
        vals[i] = lc
    return n


@njit(cache=True)
def _run(cap, rlat, rptr, rlinks, hmax, mroute, nbytes, delay, sptr, succ, cptr, csucc,
         npred, roots, contention, start, sdone, finish, link_bytes, S, D, HC, PC,
         rg, rgf, rg_blk, rg_tab, tag, ring_done):
    """Event loop over *entries*: a message id (explicit DAG) or, with a ring program
    (``len(rg) > 0``), a window entry ``(slot << log2 W) | (step mod W)`` where a slot is a
    (ring, chunk, position) and ``rg_tab`` holds per slot its arrival successor's slot, ring,
    chunk and route; a ring message is then ``(step << 32) | slot``. ``start`` holds each
    entry's release time on entry and its ready time until it starts; ``npred`` its
    predecessors still to come.
    Capacities: S flow slots, D send-done nodes, HC heap buckets, PC pending starts/completions
    per batch. Returns (status, batches, rate_updates, max_flows)."""
    ring = len(rg) > 0
    m = len(start)            # entries (queue nodes 0..m-1 are "start entry e")
    if ring:
        rP, rC, rT, rWs = rg[0], rg[1], rg[2], rg[7]
        red0, red1, tail_last = rg[4], rg[5], rg[6] != 0
        r_o, r_gamma = rgf[0], rgf[1]
    else:
        rP, rC, rT, rWs = 1, 1, 1, 0
        red0, red1, tail_last = 0, 0, False
        r_o, r_gamma = 0.0, 0.0
    nl = len(cap)
    Hs = 0                    # link entries of slot s: (s << Hs) + hop, 2**Hs >= hmax
    while (1 << Hs) < hmax:
        Hs += 1
    H = 1 << Hs
    rWm = (1 << rWs) - 1
    has_chain = len(cptr) > 1
    inf = np.inf
    # flow slots
    s_msg = np.full(S, -1, _I64)
    s_rem = np.zeros(S, _F64)
    s_rate = np.zeros(S, _F64)
    s_new = np.zeros(S, _F64)
    s_t = np.zeros(S, _F64)
    s_proj = np.zeros(S, _F64)
    s_route = np.zeros(S, _I64)
    s_stamp = np.zeros(S, _I64)
    s_frz = np.zeros(S, _I64)
    s_ver = np.zeros(S, _I64)
    free = np.arange(S - 1, -1, -1).astype(_I64)
    nfree = S
    e_next = np.full(S * H, -1, _I32)
    e_prev = np.full(S * H, -1, _I32)
    comp_f = np.empty(S, _I64)
    # links
    l_head = np.full(nl, -1, _I32)
    l_cnt = np.zeros(nl, _I32)
    l_stamp = np.zeros(nl, _I64)
    l_dirty = np.zeros(nl, _I64)
    cap_rem = np.zeros(nl, _F64)
    cnt_unf = np.zeros(nl, _I32)
    dirty = np.empty(max(nl, 1), _I64)
    comp_l = np.empty(max(nl, 1), _I64)
    lht = np.empty(nl + 1, _F64)
    lhc = np.empty(nl + 1, _I64)
    # event queue: nodes, pool of send-done nodes, heap of buckets
    nd_next = np.empty(m + D, _I32)
    nd_slot = np.empty(D, _I64)
    nd_ver = np.empty(D, _I64)
    for j in range(D - 1):
        nd_next[m + j] = m + j + 1
    if D > 0:
        nd_next[m + D - 1] = -1
    fl = m if D > 0 else -1
    ht = np.empty(HC, _F64)
    hh = np.empty(HC, _I64)
    hn = 0
    c0_t = 0.0
    c0_h = -1
    c1_t = 0.0
    c1_h = -1
    # per-batch work lists
    pend = np.empty(PC, _I64)
    pn = 0
    done_c = np.empty(PC, _I64)       # slot >= 0 (flow) or -(msg + 1) (no-bandwidth message)
    done_t = np.empty(PC, _F64)
    dc = 0
    stamp = 0
    batch = 0
    rate_updates = 0
    active = 0
    max_active = 0
    rp = 0
    nroots = len(roots)
    while True:
        tn = inf
        if hn > 0:
            tn = ht[0]
        if rp < nroots and start[roots[rp]] < tn:
            tn = start[roots[rp]]
        if tn == inf:
            break
        batch += 1
        tb = tn + _TOL * abs(tn)
        dn = 0
        busy = False
        while True:
            # 1. due roots and queued events
            while rp < nroots and start[roots[rp]] <= tb:
                if pn == PC:
                    return _OVER_PEND, batch, rate_updates, max_active
                pend[pn] = roots[rp]
                pn += 1
                rp += 1
            while hn > 0 and ht[0] <= tb:
                t = ht[0]
                node = hh[0]
                hn = _heap_pop(ht, hh, hn)
                if c0_h == node:
                    c0_h = -1
                if c1_h == node:
                    c1_h = -1
                while node >= 0:
                    nxt = nd_next[node]
                    if node < m:
                        if pn == PC:
                            return _OVER_PEND, batch, rate_updates, max_active
                        pend[pn] = node
                        pn += 1
                    else:
                        j = node - m
                        slot = nd_slot[j]
                        valid = s_ver[slot] == nd_ver[j] and s_msg[slot] >= 0
                        nd_next[node] = fl
                        fl = node
                        if valid:
                            if dc == PC:
                                return _OVER_DONE, batch, rate_updates, max_active
                            done_c[dc] = slot
                            done_t[dc] = t
                            dc += 1
                            s_ver[slot] += 1     # later copies of this event are stale
                    node = nxt
            if pn == 0 and dc == 0:
                break
            busy = True
            # 2. completions: free the flow, hand over to successors
            for q in range(dc):
                c = done_c[q]
                t = done_t[q]
                if c >= 0:
                    slot = c
                    msg = s_msg[slot]
                    r = s_route[slot]
                    if contention:
                        b0 = rptr[r]
                        for h in range(rptr[r + 1] - b0):
                            e = (slot << Hs) + h
                            lk = rlinks[b0 + h]
                            nx = e_next[e]
                            pv = e_prev[e]
                            if pv >= 0:
                                e_next[pv] = nx
                            else:
                                l_head[lk] = nx
                            if nx >= 0:
                                e_prev[nx] = pv
                            l_cnt[lk] -= 1
                            if l_cnt[lk] > 0 and l_dirty[lk] != batch:    # flows remain
                                l_dirty[lk] = batch
                                dirty[dn] = lk
                                dn += 1
                    s_msg[slot] = -1
                    free[nfree] = slot
                    nfree += 1
                    active -= 1
                else:
                    msg = -c - 1
                    if ring:
                        r = rg_tab[3, msg & 0xFFFFFFFF]
                    else:
                        r = mroute[msg]
                arr = t + rlat[r]
                if ring:
                    sl = msg & 0xFFFFFFFF
                    rs = msg >> 32
                    ri = rg_tab[1, sl]
                    rk = rg_tab[2, sl]
                    if arr > ring_done[ri]:
                        ring_done[ri] = arr
                    fin = arr + r_gamma * rg_blk[ri] if tail_last and rs == rT - 1 else arr
                    if fin > ring_done[len(rg_blk) + ri]:
                        ring_done[len(rg_blk) + ri] = fin
                    nsucc = 1 if rs < rT - 1 else 0
                    nch = 1 if rC > 1 and (rs < rT - 1 or rk < rC - 1) else 0
                else:
                    sdone[msg] = t
                    finish[msg] = arr
                    nsucc = sptr[msg + 1] - sptr[msg]
                    nch = (cptr[msg + 1] - cptr[msg]) if has_chain else 0
                for k in range(nsucc + nch):
                    if ring:
                        # the ring's successors: the next step's block at the next position
                        # (on arrival), the port's next send (when its last byte has left)
                        if k < nsucc:
                            s2, k2, sl2, t0 = rs + 1, rk, rg_tab[0, sl], arr
                        elif rk + 1 < rC:
                            s2, k2, sl2, t0 = rs, rk + 1, sl + rP, t
                        else:
                            s2, k2, sl2, t0 = rs + 1, 0, sl - (rC - 1) * rP, t
                        ready = t0 + r_o
                        if red0 <= s2 < red1:
                            ready += r_gamma * rg_blk[ri]
                        s = (sl2 << rWs) | (s2 & rWm)
                        if tag[s] != s2:
                            if tag[s] >= 0:         # the entry still holds an earlier step
                                return _OVER_WINDOW, batch, rate_updates, max_active
                            tag[s] = s2
                            start[s] = r_o
                            npred[s] = (1 if s2 > 0 else 0) + (1 if rC > 1 and (s2 > 0 or k2 > 0)
                                                               else 0)
                    elif k < nsucc:
                        s = succ[sptr[msg] + k]
                        ready = arr + delay[s]
                    else:
                        s = csucc[cptr[msg] + k - nsucc]
                        ready = t + delay[s]
                    if ready > start[s]:
                        start[s] = ready
                    npred[s] -= 1
                    if npred[s] != 0:
                        continue
                    st = start[s]
                    if st <= tb:
                        if pn == PC:
                            return _OVER_PEND, batch, rate_updates, max_active
                        pend[pn] = s
                        pn += 1
                    elif c0_h >= 0 and c0_t == st:
                        nd_next[s] = nd_next[c0_h]
                        nd_next[c0_h] = s
                    else:
                        if hn == HC:
                            return _OVER_HEAP, batch, rate_updates, max_active
                        nd_next[s] = -1
                        hn = _heap_push(ht, hh, hn, st, s)
                        c0_t = st
                        c0_h = s
            dc = 0
            # 3. start flows
            for q in range(pn):
                e = pend[q]
                st = start[e]
                if ring:
                    rs = tag[e]
                    tag[e] = -1                     # the window entry is free again
                    sl = e >> rWs
                    msg = (np.int64(rs) << 32) | sl
                    r = rg_tab[3, sl]
                    nb = rg_blk[rg_tab[1, sl]]
                else:
                    msg = e
                    r = mroute[msg]
                    nb = nbytes[msg]
                b0 = rptr[r]
                nh = rptr[r + 1] - b0
                if nh == 0 or nb <= 0.0:
                    if dc == PC:
                        return _OVER_DONE, batch, rate_updates, max_active
                    done_c[dc] = -(msg + 1)       # needs no bandwidth: done at once
                    done_t[dc] = st
                    dc += 1
                    continue
                if nfree == 0:
                    return _OVER_SLOTS, batch, rate_updates, max_active
                nfree -= 1
                slot = free[nfree]
                active += 1
                if active > max_active:
                    max_active = active
                s_msg[slot] = msg
                s_route[slot] = r
                s_rem[slot] = nb
                s_t[slot] = st
                for h in range(nh):
                    link_bytes[rlinks[b0 + h]] += nb
                alone = True
                if contention:
                    s_rate[slot] = 0.0
                    s_proj[slot] = inf
                    for h in range(nh):
                        if l_cnt[rlinks[b0 + h]] != 0:
                            alone = False
                    for h in range(nh):
                        lk = rlinks[b0 + h]
                        e = (slot << Hs) + h
                        hd = l_head[lk]
                        e_prev[e] = -1
                        e_next[e] = hd
                        if hd >= 0:
                            e_prev[hd] = e
                        l_head[lk] = e
                        l_cnt[lk] += 1
                        if not alone and l_dirty[lk] != batch:
                            l_dirty[lk] = batch
                            dirty[dn] = lk
                            dn += 1
                if alone:
                    # no other flow on its links: its route's bottleneck (a flow that joins
                    # one of them later marks the link for the max-min pass below)
                    rate = inf
                    for h in range(nh):
                        cl = cap[rlinks[b0 + h]]
                        if cl < rate:
                            rate = cl
                    s_rate[slot] = rate
                    s_proj[slot] = st + nb / rate
                    rate_updates += 1
                    # queue the send-done event
                    if fl < 0:
                        return _OVER_NODES, batch, rate_updates, max_active
                    node = fl
                    fl = nd_next[node]
                    nd_slot[node - m] = slot
                    nd_ver[node - m] = s_ver[slot]
                    tp = s_proj[slot]
                    if c1_h >= 0 and c1_t == tp:
                        nd_next[node] = nd_next[c1_h]
                        nd_next[c1_h] = node
                    else:
                        if hn == HC:
                            return _OVER_HEAP, batch, rate_updates, max_active
                        nd_next[node] = -1
                        hn = _heap_push(ht, hh, hn, tp, node)
                        c1_t = tp
                        c1_h = node
            pn = 0
        if not busy:
            batch -= 1          # only superseded projections: not an event batch
            continue
        if not contention or dn == 0:
            continue
        # ---- max-min fair rates, one connected component (via shared links) at a time
        stamp0 = stamp
        for di in range(dn):
            seed = dirty[di]
            if l_stamp[seed] > stamp0 or l_head[seed] < 0:
                continue
            stamp += 1
            l_stamp[seed] = stamp
            e = l_head[seed]
            slot = e >> Hs
            r = s_route[slot]
            if l_cnt[seed] == 1 and rptr[r + 1] - rptr[r] == 1:
                comp_f[0] = slot            # one flow alone on a one-link route
                ncf = 1
                s_new[slot] = cap[seed]
            else:
                comp_l[0] = seed
                ncl = 1
                ncf = 0
                i = 0
                while i < ncl:
                    lk = comp_l[i]
                    i += 1
                    e = l_head[lk]
                    while e >= 0:
                        slot = e >> Hs
                        if s_stamp[slot] != stamp:
                            s_stamp[slot] = stamp
                            comp_f[ncf] = slot
                            ncf += 1
                            r = s_route[slot]
                            for k in range(rptr[r], rptr[r + 1]):
                                l2 = rlinks[k]
                                if l_stamp[l2] != stamp:
                                    l_stamp[l2] = stamp
                                    comp_l[ncl] = l2
                                    ncl += 1
                        e = e_next[e]
                if ncf == 1:
                    slot = comp_f[0]
                    r = s_route[slot]
                    rate = inf
                    for k in range(rptr[r], rptr[r + 1]):
                        cl = cap[rlinks[k]]
                        if cl < rate:
                            rate = cl
                    s_new[slot] = rate
                else:
                    # progressive filling with a lazy min-heap of link fair shares (a link's
                    # share only grows as flows elsewhere are frozen)
                    lhn = 0
                    for i in range(ncl):
                        lk = comp_l[i]
                        cap_rem[lk] = cap[lk]
                        cnt_unf[lk] = l_cnt[lk]
                        if l_cnt[lk] > 0:
                            lhn = _heap_push(lht, lhc, lhn, cap[lk] / l_cnt[lk], lk)
                    while lhn > 0:
                        share = lht[0]
                        lk = lhc[0]
                        lhn = _heap_pop(lht, lhc, lhn)
                        if cnt_unf[lk] == 0:
                            continue
                        cur = cap_rem[lk] / cnt_unf[lk]
                        if cur != share:
                            lhn = _heap_push(lht, lhc, lhn, cur, lk)
                            continue
                        e = l_head[lk]
                        while e >= 0:
                            slot = e >> Hs
                            if s_frz[slot] != stamp:
                                s_frz[slot] = stamp
                                s_new[slot] = cur
                                r = s_route[slot]
                                for k in range(rptr[r], rptr[r + 1]):
                                    l2 = rlinks[k]
                                    v = cap_rem[l2] - cur
                                    cap_rem[l2] = v if v > 0.0 else 0.0
                                    cnt_unf[l2] -= 1
                            e = e_next[e]
            for i in range(ncf):
                slot = comp_f[i]
                nr = s_new[slot]
                if nr == s_rate[slot]:
                    continue
                if s_rate[slot] > 0.0:
                    dt = tn - s_t[slot]
                    if dt > 0.0:
                        rem = s_rem[slot] - s_rate[slot] * dt
                        s_rem[slot] = rem if rem > 0.0 else 0.0
                        s_t[slot] = tn
                s_rate[slot] = nr
                tp = s_t[slot] + s_rem[slot] / nr
                s_proj[slot] = tp
                s_ver[slot] += 1
                rate_updates += 1
                if fl < 0:
                    return _OVER_NODES, batch, rate_updates, max_active
                node = fl
                fl = nd_next[node]
                nd_slot[node - m] = slot
                nd_ver[node - m] = s_ver[slot]
                if c1_h >= 0 and c1_t == tp:
                    nd_next[node] = nd_next[c1_h]
                    nd_next[c1_h] = node
                else:
                    if hn == HC:
                        return _OVER_HEAP, batch, rate_updates, max_active
                    nd_next[node] = -1
                    hn = _heap_push(ht, hh, hn, tp, node)
                    c1_t = tp
                    c1_h = node
    return 0, batch, rate_updates, max_active


# --------------------------------------------------------------------------- Python layer

def _check_messages(messages: Messages, n_nodes: int) -> tuple:
    m = len(messages.src)
    arrays = {}
    for name, dtype in (("src", _I32), ("dst", _I32), ("nbytes", _F64), ("delay_s", _F64),
                        ("release_s", _F64)):
        a = np.ascontiguousarray(getattr(messages, name), dtype=dtype)
        if a.shape != (m,):
            raise ValueError(f"Messages.{name} has shape {a.shape}; expected ({m},) like src")
        arrays[name] = a
    for name in ("src", "dst"):
        a = arrays[name]
        if m and (a.min() < 0 or a.max() >= n_nodes):
            bad = a[(a < 0) | (a >= n_nodes)][0]
            raise ValueError(f"Messages.{name} = {bad}: node ids must be in 0..{n_nodes - 1}")
    for name in ("nbytes", "delay_s", "release_s"):
        a = arrays[name]
        if m and not (np.isfinite(a).all() and a.min() >= 0):
            bad = a[~(np.isfinite(a) & (a >= 0))][0]
            raise ValueError(f"Messages.{name} = {bad}: must be finite and >= 0")

    def csr(ptr, idx, what):
        if ptr is None:
            return np.zeros(1, _I64), np.zeros(0, _I32)
        ptr = np.ascontiguousarray(ptr, dtype=_I64)
        idx = np.ascontiguousarray(idx, dtype=_I32)
        if ptr.shape != (m + 1,) or ptr[0] != 0 or ptr[-1] != len(idx) or (
                m and np.any(ptr[1:] < ptr[:-1])):
            raise ValueError(f"Messages.{what}_ptr must be a CSR pointer of length {m + 1} "
                             f"from 0 to len({what}) = {len(idx)}")
        if len(idx) and (idx.min() < 0 or idx.max() >= m):
            raise ValueError(f"Messages.{what} holds a message id outside 0..{m - 1}")
        return ptr, idx

    sptr, succ = csr(messages.succ_ptr, messages.succ, "succ")
    cptr, chain = csr(messages.chain_ptr, messages.chain, "chain")
    return arrays, sptr, succ, cptr, chain


def _pair_ids(src: np.ndarray, dst: np.ndarray, n_nodes: int):
    """Unique (src, dst) pairs and each message's pair index (a dense table when small)."""
    key = src.astype(_I64) * n_nodes + dst
    if n_nodes <= 8192:
        mark = np.zeros(n_nodes * n_nodes, dtype=np.bool_)
        mark[key] = True
        uniq = np.flatnonzero(mark)
        index = np.zeros(n_nodes * n_nodes, dtype=_I32)
        index[uniq] = np.arange(len(uniq), dtype=_I32)
        inv = index[key]
    else:
        uniq, inv = np.unique(key, return_inverse=True)
        inv = inv.astype(_I32)
    return (uniq // n_nodes).astype(_I64), (uniq % n_nodes).astype(_I64), inv


def _links(link_bytes_per_s, link_latency_s, route_ptr, route_links):
    """(capacity, each route's latency, route CSR pointer and links, longest route's hops),
    checked."""
    cap = np.ascontiguousarray(link_bytes_per_s, dtype=_F64)
    lat = np.ascontiguousarray(link_latency_s, dtype=_F64)
    if cap.ndim != 1 or lat.shape != cap.shape:
        raise ValueError("link capacity and latency must be 1-D arrays of one length")
    if len(cap) and not (np.isfinite(cap).all() and cap.min() > 0):
        raise ValueError(f"link bandwidth must be finite and > 0; got {cap[~(cap > 0)][:1]}")
    if len(lat) and not (np.isfinite(lat).all() and lat.min() >= 0):
        raise ValueError("link latency must be finite and >= 0")
    rptr = np.ascontiguousarray(route_ptr, dtype=_I64)
    rlinks = np.ascontiguousarray(route_links, dtype=_I32)
    if len(rlinks) and (rlinks.min() < 0 or rlinks.max() >= len(cap)):
        raise ValueError(f"route link ids must be in 0..{len(cap) - 1}")
    # each route's latency summed hop by hop (a difference of running sums would give routes
    # of equal latency values that differ in the last bits, and split their event batches)
    rlat = np.zeros(len(rptr) - 1)
    nonempty = np.flatnonzero(rptr[1:] > rptr[:-1])
    if len(nonempty):
        rlat[nonempty] = np.add.reduceat(lat[rlinks], rptr[:-1][nonempty])
    hmax = int(np.max(np.diff(rptr))) if len(rptr) > 1 else 0
    return cap, rlat, rptr, rlinks, hmax


_NO_I32, _NO_I64, _NO_F64 = np.zeros(0, _I32), np.zeros(0, _I64), np.zeros(0, _F64)
_NO_PROGRAM = (_NO_I64, _NO_F64, _NO_F64, np.zeros((4, 0), _I64), _NO_I32, _NO_F64)
_NO_DAG = (_NO_I32, _NO_F64, _NO_F64, np.zeros(1, _I64), _NO_I32, np.zeros(1, _I64), _NO_I32)


def _drive(net, first: int, fresh, contention: bool, max_window: int = 0,
           window_limit=None):
    """Run the kernel on ``net`` = (cap, rlat, rptr, rlinks, hmax); ``fresh(window)`` returns
    the per-run arguments (dag, npred, roots, start, sdone, finish, program). A work array that
    was too small is doubled and the run repeated (``first``: messages released at the first
    instant, to size the first guesses); ``window_limit(window)`` may refuse a larger window.
    Returns (state, link_bytes, batches, updates, flows)."""
    cap, rlat, rptr, rlinks, hmax = net
    caps = {"S": max(1024, 2 * first), "D": max(4096, 4 * first), "HC": 1024,
            "PC": max(4096, 2 * first), "W": min(2, max_window)}
    over = {_OVER_SLOTS: ("S", "D"), _OVER_NODES: ("D",), _OVER_HEAP: ("HC",),
            _OVER_PEND: ("PC",), _OVER_DONE: ("PC",), _OVER_WINDOW: ("W",)}
    while True:
        st = fresh(caps["W"])
        dag, npred, roots, start, sdone, finish, prog = st
        link_bytes = np.zeros(len(cap))
        status, batches, updates, flows = _run(
            cap, rlat, rptr, rlinks, hmax, *dag, npred, roots, bool(contention), start, sdone,
            finish, link_bytes, caps["S"], caps["D"], caps["HC"], caps["PC"], *prog)
        if status == 0:
            return st, link_bytes, int(batches), int(updates), int(flows)
        for key in over[int(status)]:       # a work array was too small: double, rerun
            caps[key] *= 2
        if status == _OVER_WINDOW and window_limit is not None:
            window_limit(caps["W"])


def simulate_links(link_bytes_per_s, link_latency_s, route_ptr, route_links, msg_route,
                   messages: Messages, *, contention: bool = True) -> FlowResult:
    """Run ``messages`` over explicit links: capacity (bytes/s) and latency (s) per directed
    link, routes as CSR (``route_ptr`` int64 [R+1], ``route_links`` int32), and the route index
    of each message (``msg_route``). :func:`simulate` derives these from a topology."""
    net = _links(link_bytes_per_s, link_latency_s, route_ptr, route_links)
    rptr = net[2]
    arrays, sptr, succ, cptr, chain = _check_messages(messages, np.iinfo(_I32).max)
    m = len(arrays["src"])
    mroute = np.ascontiguousarray(msg_route, dtype=_I32)
    if mroute.shape != (m,) or (m and (mroute.min() < 0 or mroute.max() >= len(rptr) - 1)):
        raise ValueError(f"msg_route must hold {m} route ids in 0..{len(rptr) - 2}")

    def count_preds():
        npred = np.bincount(succ, minlength=m).astype(_I32)
        if len(chain):
            npred += np.bincount(chain, minlength=m).astype(_I32)
        return npred

    npred = count_preds()
    release = arrays["release_s"]
    roots = np.flatnonzero(npred == 0).astype(_I64)
    rel = release[roots]
    if len(rel) and np.any(rel[1:] < rel[:-1]):
        roots = roots[np.argsort(rel, kind="stable")]
    # first guesses: everything released at the first instant runs at once
    first = int(np.count_nonzero(release[roots] == release[roots[0]])) if len(roots) else 0
    dag = (mroute, arrays["nbytes"], arrays["delay_s"], sptr, succ, cptr, chain)
    runs = []

    def fresh(_window):
        runs.append(1)
        return (dag, npred if len(runs) == 1 else count_preds(), roots, release.copy(),
                np.full(m, np.nan), np.full(m, np.nan), _NO_PROGRAM)

    st, link_bytes, batches, updates, flows = _drive(net, first, fresh, contention)
    start, sdone, finish = st[3], st[4], st[5]
    if m and np.isnan(finish).any():
        stuck = int(np.isnan(finish).sum())
        raise ValueError(f"messages contain a dependency cycle: {stuck} of {m} messages "
                         "never became ready")
    start[np.isnan(sdone)] = np.nan
    return FlowResult(start, finish, float(finish.max()) if m else 0.0, link_bytes,
                      batches, updates, flows, sdone)


@dataclass
class RingProgram:
    """Ring collectives that the kernel generates message by message instead of reading them
    from a :class:`Messages` DAG (same messages, same start rule, no per-message memory).

    Ring ``r`` (a row of ``orders``, node ids; position ``i`` sends to ``i + 1`` mod P) runs
    ``steps`` steps; each step's block of ``block_bytes[r]`` is sent in ``chunks`` chunks.
    Message ``(r, s, k, i)`` (step s, chunk k, position i) waits for the arrival of
    ``(r, s-1, k, i-1)`` (data) and, with ``chunks > 1``, for the last byte of the port's
    previous send ``(r, s, k-1, i)`` or ``(r, s-1, chunks-1, i)`` to have left; it then pays
    ``overhead_s``, plus ``gamma_s_per_byte x block`` on the steps of ``reduce_steps`` (a
    ``(start, stop)`` range: the block forwards data reduced from the last arrival). The
    first step's first chunks start at ``overhead_s``. With ``tail_last`` the receiver of the
    last step reduces that block too (its finish includes ``gamma x block``). This is the DAG
    of :func:`hw.system.collective_schedules._ring_steps` (tests hold the two equal)."""

    orders: np.ndarray
    block_bytes: np.ndarray
    steps: int
    chunks: int
    reduce_steps: tuple = (0, 0)
    overhead_s: float = 0.0
    gamma_s_per_byte: float = 0.0
    tail_last: bool = False

    @property
    def messages(self) -> int:
        r, p = np.shape(self.orders)
        return int(r * self.steps * self.chunks * p)


@dataclass
class RingResult:
    """Outcome of :func:`simulate_rings`: per ring, its last arrival (``arrival_s``) and
    its finish including the last step's reduction (``finish_s``); the bytes each link
    carried; event batches, rate updates, most flows at once, and the window depth used
    (steps a ring position may run ahead, found by doubling)."""

    arrival_s: np.ndarray
    finish_s: np.ndarray
    link_bytes: np.ndarray
    events: int
    rate_updates: int
    max_flows: int
    window: int


def simulate_rings(topology, program: RingProgram, *, contention: bool = True,
                   max_window_bytes: float | None = None) -> RingResult:
    """Simulate a :class:`RingProgram` on ``topology`` with the engine of :func:`simulate`.
    Memory is per (ring, chunk, position, window step), not per message: the window (how many
    steps a position may run ahead of its successor) starts at 2 and doubles when a run needs
    more; ``max_window_bytes`` refuses (:class:`~hw.system.budget.BudgetError`) a window whose
    state would need more memory (16 bytes per entry)."""
    orders = np.ascontiguousarray(program.orders, dtype=_I64)
    if orders.ndim != 2 or orders.shape[1] < 2:
        raise ValueError(f"RingProgram.orders must be (rings, positions >= 2); got "
                         f"{orders.shape}")
    n_rings, p = orders.shape
    n_nodes = len(topology.node_names)
    if orders.min() < 0 or orders.max() >= n_nodes:
        raise ValueError(f"RingProgram.orders: node ids of topology {topology.name!r} are "
                         f"0..{n_nodes - 1}")
    blk = np.ascontiguousarray(program.block_bytes, dtype=_F64)
    T, C = int(program.steps), int(program.chunks)
    if blk.shape != (n_rings,) or not (np.isfinite(blk).all() and blk.min() >= 0):
        raise ValueError(f"RingProgram.block_bytes must be {n_rings} finite values >= 0")
    if T < 1 or C < 1:
        raise ValueError(f"RingProgram: steps = {T} and chunks = {C} must be >= 1")
    o, gamma = float(program.overhead_s), float(program.gamma_s_per_byte)
    if not (np.isfinite(o) and o >= 0 and np.isfinite(gamma) and gamma >= 0):
        raise ValueError("RingProgram: overhead_s and gamma_s_per_byte must be finite, >= 0")
    pairs = np.stack([orders.ravel(), np.roll(orders, -1, axis=1).ravel()], axis=1)
    usrc, udst, inv = _pair_ids(pairs[:, 0].astype(_I32), pairs[:, 1].astype(_I32), n_nodes)
    rptr, rlinks = topology.routes(usrc, udst)
    net = _links(np.asarray(topology.link_bytes_per_s, dtype=_F64),
                 np.asarray(topology.link_latency_ns, dtype=_F64) * 1e-9, rptr, rlinks)
    if n_rings * C * p >= 1 << 31 or T >= 1 << 31:
        raise ValueError(f"RingProgram: {n_rings} rings x {C} chunks x {p} positions or "
                         f"{T} steps is beyond the engine's 2**31 limit")
    # per slot (ring, chunk, position): arrival successor's slot, ring, chunk, route
    ring_i, chunk_i, pos_i = np.indices((n_rings, C, p), dtype=_I64)
    tab = np.stack([((ring_i * C + chunk_i) * p + (pos_i + 1) % p).ravel(), ring_i.ravel(),
                    chunk_i.ravel(), inv.astype(_I64)[(ring_i * p + pos_i).ravel()]])
    max_window = 1 << max(1, (T - 1).bit_length())        # >= steps: never runs out
    r0, r1 = program.reduce_steps

    def fresh(window):
        shift = window.bit_length() - 1
        e = n_rings * C * p << shift
        tag = np.full(e, -1, _I32)
        start = np.zeros(e)
        npred = np.zeros(e, _I32)
        # roots: step 0's first chunk (every chunk without a port order) at each position
        roots = (np.flatnonzero((chunk_i.ravel() == 0) | (C == 1)) << shift).astype(_I64)
        tag[roots] = 0
        start[roots] = o
        rg = np.array([p, C, T, n_rings, r0, r1, int(program.tail_last), shift], _I64)
        prog = (rg, np.array([o, gamma]), blk, tab, tag, np.zeros(2 * n_rings))
        return _NO_DAG, npred, roots, start, _NO_F64, _NO_F64, prog

    def limit(window):
        need = 16.0 * n_rings * C * p * window
        if max_window_bytes is not None and need > max_window_bytes:
            from hw.system.budget import BudgetError
            raise BudgetError(f"ring program: ring positions ran more than {window // 2} steps "
                              f"apart; tracking them would need {need / (1 << 30):.1f} GiB (the "
                              f"limit is {max_window_bytes / (1 << 30):.1f} GiB): use --mode "
                              "analytic or fewer ranks")

    first = n_rings * p * (1 if C > 1 else C)
    st, link_bytes, batches, updates, flows = _drive(net, first, fresh, contention, max_window,
                                                     limit)
    done, window = st[6][5], 1 << int(st[6][0][7])
    if program.messages and (st[6][4] >= 0).any():
        raise ValueError("ring program: some messages never became ready")
    return RingResult(done[:n_rings].copy(), done[n_rings:].copy(), link_bytes, batches,
                      updates, flows, window)


def simulate(topology, messages: Messages, *, contention: bool = True) -> FlowResult:
    """Simulate ``messages`` on ``topology`` (a :class:`hw.system.topology.Topology`): routes
    from ``topology.routes``, achievable bandwidth ``link_bytes_per_s``, per-hop
    ``link_latency_ns``. See the module docstring for the model."""
    n_nodes = len(topology.node_names)
    src = np.ascontiguousarray(messages.src, dtype=_I32)
    dst = np.ascontiguousarray(messages.dst, dtype=_I32)
    if src.shape != dst.shape or src.ndim != 1:
        raise ValueError(f"Messages.src and dst must be 1-D of one length; got {src.shape} "
                         f"and {dst.shape}")
    for name, a in (("src", src), ("dst", dst)):
        if len(a) and (a.min() < 0 or a.max() >= n_nodes):
            bad = a[(a < 0) | (a >= n_nodes)][0]
            raise ValueError(f"Messages.{name} = {bad}: node ids of topology "
                             f"{topology.name!r} are 0..{n_nodes - 1}")
    usrc, udst, inv = _pair_ids(src, dst, n_nodes)
    rptr, rlinks = topology.routes(usrc, udst)
    return simulate_links(np.asarray(topology.link_bytes_per_s, dtype=_F64),
                          np.asarray(topology.link_latency_ns, dtype=_F64) * 1e-9,
                          rptr, rlinks, inv, messages, contention=contention)
