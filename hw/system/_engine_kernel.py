"""The Numba event loop of the flow-level network engine (:mod:`hw.system.engine`, whose
docstring states the model): one kernel, :func:`_run`, for message DAGs and for ring programs,
and the capacity codes it returns when a work array is too small. The Python layer in
:mod:`hw.system.engine` checks the inputs, sizes the work arrays and reruns on those codes."""

from __future__ import annotations

import numpy as np

from hw._jitcache import njit

_I32 = np.int32
_I64 = np.int64
_F64 = np.float64
_TOL = 1e-12        # relative time tolerance of one event batch


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
