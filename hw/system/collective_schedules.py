"""The message schedules of the collective algorithms: which rank sends what to whom, after what.

Each schedule adds its messages to a :class:`~hw.system.collective_dag.MessageDag` (vectorized
with numpy) and returns, per receiving rank, the ids of its last messages, so the next phase of
a composed algorithm can wait for them. :func:`add_schedule` picks the schedule of an algorithm.

Delays (see :mod:`hw.system.engine` for the start rule): a message leaves ``dag.o`` after its
inputs are ready; a message that forwards data reduced from what the rank received also waits
``received bytes x dag.gamma``. Several reductions on one rank (two rings, two trees) proceed in
parallel (NCCL runs each channel on its own SMs).

Algorithms (p ranks of a group, n bytes):

* ``ring``: the rings of ``topology.rings(group)``, each carrying its share of the data.
  all-reduce = reduce-scatter + all-gather, 2(p-1) steps of n/p per ring share; reduce-scatter,
  all-gather p-1 steps; broadcast / reduce: a pipelined chain along the ring from / to the root.
  ``chunks`` splits each step's block; a port sends its chunks in order.
* ``tree``: pipelined double binary tree (NCCL): two heap-ordered binary trees over the group,
  the second one the first with ranks rotated by the smallest shift that makes the two trees'
  links disjoint (a shift of 1 if none up to 16 does), each carries n/2 in ``chunks`` chunks,
  reduced up to the root and broadcast down. Broadcast / reduce use one binary tree rooted at
  ``root`` carrying all of n.
* ``rhd``: recursive halving (reduce-scatter) and doubling (all-gather), Rabenseifner's
  all-reduce; binomial trees for broadcast, scatter, gather, reduce (Thakur et al. 2005). Not a
  power of two: the standard fold, the first 2r ranks (r = p - 2^floor(lg p)) pair up, odd
  ones hand their data to their even neighbour first and get the result back last.
* ``direct``: every rank sends to every peer at once (all-to-all style); all-reduce is a direct
  reduce-scatter then a direct all-gather.
* ``hierarchical``: ``topology.levels()``: ring reduce-scatter inside level 0, all-reduce of
  n/p0 across the next levels (recursively), ring all-gather inside level 0 (all-reduce only,
  one group of all ranks).
* ``ps``: parameter server on the host (if the system has one) or the group's first rank:
  push n from every rank, reduce, pull n back (all-reduce only).
"""

from __future__ import annotations

import numpy as np

from hw.system.collective_dag import finals_by_dst

__all__ = ["add_schedule", "ring_program", "RING_PROGRAM_OPS"]


def add_schedule(dag, topo, algorithm, op, group, n, chunks, root) -> None:
    """Add the messages of ``algorithm`` running ``op`` on ``n`` bytes over ``group`` (a rank
    tuple; ``hierarchical`` always runs over ``topo.levels()``) to ``dag``. ``chunks``: pipeline
    chunks per step (an int); ``root``: the root's position in the group."""
    if algorithm == "ring":
        _ring_op(dag, topo, op, group, n, chunks, root=root)
    elif algorithm == "tree":
        _tree_op(dag, op, group, n, chunks, root)
    elif algorithm == "rhd":
        _rhd_op(dag, op, group, n, root)
    elif algorithm == "direct":
        _direct_op(dag, op, group, n, root)
    elif algorithm == "ps":
        _ps_op(dag, topo, group, n)
    elif algorithm == "hierarchical":
        _hier_op(dag, topo, topo.levels(), n, chunks)


# --------------------------------------------------------------------------- ring

def _ring_steps(dag, order, share, n, steps, reduce_steps, chunks, gates=None, tail_last=False,
                gate_delay=0.0):
    """One ring: ``steps`` steps over positions 0..p-1 (position i sends to i+1), block =
    share*n/p split in ``chunks``; steps in ``reduce_steps`` (a range) forward data reduced
    from the previous step's arrival. Returns final messages by receiving rank."""
    p = len(order)
    order = np.asarray(order, dtype=np.int32)
    c = chunks
    blk = share * n / p / c
    m = steps * c * p
    ids = np.arange(m, dtype=np.int32)
    s = np.repeat(np.arange(steps, dtype=np.int32), c * p)
    k = np.tile(np.repeat(np.arange(c, dtype=np.int32), p), steps) if c > 1 else \
        np.zeros(m, np.int32)
    i = np.tile(np.arange(p, dtype=np.int32), steps * c)
    nxt = np.roll(order, -1)
    if dag.gamma or (gates is not None and gate_delay):
        red = (s >= reduce_steps.start) & (s < reduce_steps.stop)
        delay = dag.o + np.where(red, dag.gamma * blk, 0.0)
        if gates is not None and gate_delay:
            delay = delay + np.where(s == 0, gate_delay, 0.0)
    else:
        delay = dag.o
    tail = np.where(s == steps - 1, dag.gamma * blk, 0.0) if (tail_last and dag.gamma) else 0.0
    base = int(dag.add(order[i], nxt[i], blk, delay, tail)[0])
    # data: (s, k, i) -> (s+1, k, i+1), i.e. id + c p + (1 or 1 - p)
    mm = (steps - 1) * c * p
    pr = ids[:mm]
    nx = pr + (c * p + 1)
    nx[i[:mm] == p - 1] -= p
    dag.dep(base + pr, base + nx)
    if c > 1:           # port order: (s, k, i) -> (s, k+1, i) or (s+1, 0, i)
        pr = ids[(s < steps - 1) | (k < c - 1)]
        dag.after_send(base + pr, base + pr + p)
    if gates is not None:
        roots = ids[s == 0]
        dag.gate(gates, order[i[roots]], base + roots)
    last = ids[s == steps - 1]
    return finals_by_dst(nxt[i[last]], base + last)


def _ring_op(dag, topo, op, group, n, chunks, gates=None, root=0, gate_delay=0.0):
    p = len(group)
    finals: dict = {}
    rings = topo.rings(tuple(group))
    for order, share in rings:
        if op == "allreduce":
            f = _ring_steps(dag, order, share, n, 2 * (p - 1), range(1, p), chunks, gates,
                            gate_delay=gate_delay)
        elif op == "reducescatter":
            f = _ring_steps(dag, order, share, n, p - 1, range(1, p - 1), chunks, gates,
                            tail_last=True)
        elif op == "allgather":
            f = _ring_steps(dag, order, share, n, p - 1, range(0, 0), chunks, gates,
                            gate_delay=gate_delay)
        else:   # broadcast / reduce: a pipelined chain along the ring
            order = list(order)
            r0 = order.index(group[root])
            chain = order[r0:] + order[:r0]
            if op == "reduce":
                chain = chain[1:] + chain[:1]       # ... -> root
            f = _chain(dag, chain, share * n, chunks, reduce=(op == "reduce"))
        for r, v in f.items():
            finals.setdefault(r, []).append(v)
    return {r: np.concatenate(v) for r, v in finals.items()}


RING_PROGRAM_OPS = ("allreduce", "reducescatter", "allgather")


def ring_program(topo, op, groups, n, chunks, o, gamma):
    """The ``ring`` schedule of ``op`` (one of :data:`RING_PROGRAM_OPS`) over ``groups`` as one
    :class:`~hw.system.engine.RingProgram` the engine generates message by message: the same
    messages and dependencies as :func:`_ring_op` builds into a DAG (tests hold the two equal),
    without per-message memory. Returns (program, group index of each ring)."""
    from hw.system.engine import RingProgram
    p = len(groups[0])
    orders, blocks, owner = [], [], []
    for gi, grp in enumerate(groups):
        for order, share in topo.rings(tuple(grp)):
            orders.append(order)
            blocks.append(share * n / p / chunks)
            owner.append(gi)
    steps, reduce, tail = {"allreduce": (2 * (p - 1), (1, p), False),
                           "reducescatter": (p - 1, (1, p - 1), True),
                           "allgather": (p - 1, (0, 0), False)}[op]
    prog = RingProgram(np.asarray(orders, dtype=np.int64), np.asarray(blocks), steps, chunks,
                       reduce, o, gamma, tail and gamma > 0)
    return prog, np.asarray(owner, dtype=np.int64)


def _chain(dag, chain, n, chunks, reduce):
    """Pipelined chain chain[0] -> chain[1] -> ... of n bytes in ``chunks`` chunks."""
    h_n = len(chain) - 1
    c = chunks
    blk = n / c
    ids = np.arange(h_n * c, dtype=np.int64)
    h = ids // c
    k = ids % c
    ch = np.asarray(chain, dtype=np.int32)
    red = reduce & (h >= 1)
    delay = dag.o + np.where(red, dag.gamma * blk, 0.0)
    tail = np.where(h == h_n - 1, dag.gamma * blk, 0.0) if reduce else 0.0
    base = dag.add(ch[h], ch[h + 1], blk, delay, tail)[0]
    pr = ids[h < h_n - 1]
    dag.dep(base + pr, base + pr + c)
    if c > 1:
        pr = ids[k < c - 1]
        dag.after_send(base + pr, base + pr + 1)
    last = ids[h == h_n - 1]
    return finals_by_dst(ch[h[last] + 1], base + last)


# --------------------------------------------------------------------------- trees

def _heap_parent(p):
    par = (np.arange(p) - 1) // 2
    par[0] = -1
    return par


def _tree_shift(p: int) -> int:
    """Smallest rotation b (1..16) so that the heap tree and its copy with ranks rotated by b
    share no link (either direction); 1 if none does."""
    par = _heap_parent(p)
    v = np.arange(1, p)
    a, b = v, par[1:]
    e1 = np.minimum(a, b) * p + np.maximum(a, b)
    for s in range(1, min(p, 17)):
        a2, b2 = (a + s) % p, (b + s) % p
        e2 = np.minimum(a2, b2) * p + np.maximum(a2, b2)
        if not np.isin(e2, e1).any():
            return s
    return 1


def _tree_pipeline(dag, ranks, par, n, chunks, up, down):
    """One pipelined tree over ``ranks`` (position -> rank) with parent array ``par``
    (positions; root has -1): ``up`` reduces chunks to the root, ``down`` broadcasts them
    from it. Returns final messages by receiving rank."""
    p = len(ranks)
    ranks = np.asarray(ranks, dtype=np.int32)
    c = chunks
    blk = n / c
    kids = np.bincount(par[par >= 0], minlength=p)
    nodes = np.flatnonzero(par >= 0)                # every non-root position has one edge
    ne = len(nodes)
    finals = {}
    up_base = down_base = None
    if up:
        ids = np.arange(ne * c, dtype=np.int64)     # (edge j, chunk k) -> j * c + k
        j, k = ids // c, ids % c
        v = nodes[j]
        delay = dag.o + dag.gamma * blk * kids[v]
        tail = np.where(par[v] == 0, dag.gamma * blk, 0.0) if not down else 0.0
        up_base = dag.add(ranks[v], ranks[par[v]], blk, delay, tail)[0]
        pos_of_edge = np.full(p, -1)
        pos_of_edge[nodes] = np.arange(ne)
        # child edge (v's child u) chunk k -> v's edge chunk k
        u = nodes[par[nodes] > 0]
        for_child = pos_of_edge[u]
        for_parent = pos_of_edge[par[u]]
        kk = np.arange(c)
        dag.dep(up_base + (for_child[:, None] * c + kk).ravel(),
                up_base + (for_parent[:, None] * c + kk).ravel())
        if c > 1:
            pr = ids[k < c - 1]
            dag.after_send(up_base + pr, up_base + pr + 1)
        if not down:
            last = ids[par[v] == 0]
            finals = finals_by_dst(ranks[par[v[last]]], up_base + last)
    if down:
        ids = np.arange(ne * c, dtype=np.int64)
        j, k = ids // c, ids % c
        v = nodes[j]
        from_root = par[v] == 0
        delay = dag.o + np.where(from_root & up, dag.gamma * blk * kids[0], 0.0)
        down_base = dag.add(ranks[par[v]], ranks[v], blk, delay)[0]
        pos_of_edge = np.full(p, -1)
        pos_of_edge[nodes] = np.arange(ne)
        kk = np.arange(c)
        u = nodes[par[nodes] > 0]                   # u's edge waits for its parent's edge
        dag.dep(down_base + (pos_of_edge[par[u]][:, None] * c + kk).ravel(),
                down_base + (pos_of_edge[u][:, None] * c + kk).ravel())
        if up:                                      # root's sends wait for its children
            rc = nodes[par[nodes] == 0]
            for a in rc:
                for b in rc:
                    dag.dep(up_base + pos_of_edge[a] * c + kk, down_base + pos_of_edge[b] * c + kk)
        if c > 1:
            pr = ids[k < c - 1]
            dag.after_send(down_base + pr, down_base + pr + 1)
        finals = finals_by_dst(ranks[v], down_base + ids)
    return finals


def _tree_op(dag, op, group, n, chunks, root):
    p = len(group)
    g = np.asarray(group, dtype=np.int32)
    par = _heap_parent(p)
    if op == "allreduce":
        s = _tree_shift(p)
        f1 = _tree_pipeline(dag, g, par, n / 2, chunks, True, True)
        f2 = _tree_pipeline(dag, np.roll(g, -s), par, n / 2, chunks, True, True)
        return {r: np.concatenate([f.get(r, np.zeros(0, np.int64)) for f in (f1, f2)])
                for r in set(f1) | set(f2)}
    ranks = np.roll(g, -root)                       # root at position 0
    return _tree_pipeline(dag, ranks, par, n, chunks, up=(op == "reduce"),
                          down=(op == "broadcast"))


# --------------------------------------------------------------------------- rhd / binomial

def _rhd_op(dag, op, group, n, root, gates=None):
    p = len(group)
    g = np.asarray(group, dtype=np.int32)
    o, gam = dag.o, dag.gamma
    if op in ("broadcast", "scatter", "gather", "reduce"):
        return _binomial(dag, op, np.roll(g, -root), n)
    p2 = 1 << (p.bit_length() - 1)
    r = p - p2
    # fold: positions 2i+1 (i < r) hand over to 2i; participants: evens < 2r and all >= 2r
    part = np.concatenate([np.arange(0, 2 * r, 2), np.arange(2 * r, p)]).astype(np.int64)
    ranks = g[part]
    odd = np.arange(1, 2 * r, 2)
    pre = None
    if r:
        pre_bytes = n / p if op == "allgather" else n
        pre = dag.add(g[odd], g[odd - 1], pre_bytes, o)
        dag.gate(gates, g[odd], pre)
        gates = dict(gates or {})
        for q, rank in enumerate(g[odd - 1].tolist()):
            gates[rank] = np.concatenate([gates.get(rank, np.zeros(0, np.int64)), pre[q:q + 1]])
        extra = gam * n if op != "allgather" else 0.0       # reduce the handed-over data
    else:
        extra = 0.0
    lg = p2.bit_length() - 1
    v = np.arange(p2)
    finals = gates
    last_recv = None                                # last message into each participant
    fin: dict = {}
    if op in ("allreduce", "reducescatter"):
        prev = None
        for k in range(lg):
            d = p2 >> (k + 1)
            b = n / (1 << (k + 1))
            recv_prev = 0.0 if k == 0 else n / (1 << k)
            delay = o + gam * recv_prev + (extra if k == 0 else 0.0)
            ids = dag.add(ranks[v], ranks[v ^ d], b, delay,
                          gam * b if (k == lg - 1 and op == "reducescatter" and not r) else 0.0)
            if prev is None:
                dag.gate(finals, ranks[v], ids)
            else:
                dag.dep(prev[v ^ (d << 1)], ids)    # v's step-k send waits for its receipt
                dag.after_send(prev, ids)           # ... and its own step-(k-1) send
            prev = ids
        last_recv = prev[v ^ 1] if lg else None     # message received by v in the last step
        tail_rs = gam * n / p2
        if op == "reducescatter":
            if r:   # hand the odd ranks their block
                post = dag.add(g[odd - 1], g[odd], n / p, o + tail_rs)
                dag.dep(last_recv[np.arange(0, r)], post)
                fin = finals_by_dst(g[odd], post)
                for q in range(p2):
                    fin.setdefault(int(ranks[q]), np.asarray([last_recv[q]]))
            elif lg:
                fin = {int(ranks[q]): np.asarray([last_recv[q]]) for q in range(p2)}
            return fin          # one rank: nothing to send
        ag_delay = o + tail_rs
    else:
        ag_delay = o + 0.0
    # recursive doubling all-gather (distances 1, 2, 4, ...)
    prev = last_recv
    base_bytes = n / p2 if op == "allreduce" else n / p2
    first_gate = finals if op == "allgather" else None
    prev_ag = None      # the previous distance's sends (set by the first pass)
    for k in range(lg):
        d = 1 << k
        b = base_bytes * d
        delay = ag_delay if k == 0 else o
        ids = dag.add(ranks[v], ranks[v ^ d], b, delay)
        if k == 0:
            if prev is not None:
                dag.dep(prev, ids)                  # own reduced block is ready
            else:
                dag.gate(first_gate, ranks[v], ids)
        else:
            dag.dep(prev_ag[v ^ (d >> 1)], ids)
            dag.after_send(prev_ag, ids)
        prev_ag = ids
    last = prev_ag[v ^ (1 << (lg - 1))] if lg else np.zeros(0, np.int64)
    fin = {int(ranks[q]): np.asarray([last[q]]) for q in range(p2)} if lg else {}
    if r:
        post = dag.add(g[odd - 1], g[odd], n, o)
        if lg:
            dag.dep(last[np.arange(0, r)], post)
        fin.update(finals_by_dst(g[odd], post))
    return fin


def _binomial(dag, op, ranks, n):
    """Binomial trees over positions (root at position 0): Thakur et al. 2005."""
    p = len(ranks)
    o, gam = dag.o, dag.gamma
    K = max(1, (p - 1).bit_length())
    recv: dict = {}         # position -> ids of messages into it
    sends: dict = {}        # position -> ids of its sends in order
    if op in ("broadcast", "scatter"):
        rounds = range(K) if op == "broadcast" else range(K - 1, -1, -1)
        for k in rounds:
            mask = 1 << k
            if op == "broadcast":
                snd = np.arange(0, min(mask, p - mask)) if mask < p else np.zeros(0, int)
            else:
                snd = np.arange(0, p, 2 * mask)
                snd = snd[snd + mask < p]
            if not len(snd):
                continue
            dst = snd + mask
            if op == "broadcast":
                b = np.full(len(snd), float(n))
            else:
                b = n / p * np.minimum(mask, p - dst)
            ids = dag.add(ranks[snd], ranks[dst], b, o)
            for q, s in enumerate(snd.tolist()):
                if s in recv:
                    dag.dep(recv[s], [ids[q]])
                if s in sends:
                    dag.after_send([sends[s][-1]], [ids[q]])
                sends.setdefault(s, []).append(int(ids[q]))
                recv[int(dst[q])] = np.asarray([ids[q]])
        return {int(ranks[q]): v for q, v in recv.items()}
    # gather / reduce: leaves first
    for k in range(K):
        mask = 1 << k
        snd = np.arange(mask, p, 2 * mask)
        if not len(snd):
            continue
        dst = snd - mask
        if op == "gather":
            b = n / p * np.minimum(mask, p - snd)
            delay = np.full(len(snd), o)
        else:
            b = np.full(len(snd), float(n))
            delay = np.array([o + (gam * n if s in recv else 0.0) for s in snd.tolist()])
        tail = np.where(dst == 0, gam * n, 0.0) if op == "reduce" else 0.0
        ids = dag.add(ranks[snd], ranks[dst], b, delay, tail)
        for q, s in enumerate(snd.tolist()):
            if s in recv:
                dag.dep(np.asarray(recv[s]), np.full(len(recv[s]), ids[q]))
            recv.setdefault(int(dst[q]), []).append(int(ids[q]))
    return {int(ranks[0]): np.asarray(recv.get(0, []), np.int64)}


# --------------------------------------------------------------------------- direct / ps

def _direct_op(dag, op, group, n, root):
    p = len(group)
    g = np.asarray(group, dtype=np.int32)
    o, gam = dag.o, dag.gamma
    a, b = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    off = a != b
    si, di = a[off], b[off]                         # all ordered pairs, by sender
    if op in ("alltoall", "allgather", "reducescatter", "allreduce"):
        tail = gam * (p - 1) * n / p if op == "reducescatter" else 0.0
        ids = dag.add(g[si], g[di], n / p, o, tail)
        fin = finals_by_dst(g[di], ids)
        if op != "allreduce":
            return fin
        # join per rank: its reduced block is ready, then send it to everyone
        out = []
        for q in range(p):
            out.append(dag.barrier(int(g[q]), fin[int(g[q])], 0.0))
        ag = dag.add(g[si], g[di], n / p, o + gam * (p - 1) * n / p)
        dag.dep(np.asarray(out)[si], ag)
        return finals_by_dst(g[di], ag)
    others = np.array([q for q in range(p) if q != root])
    if op in ("broadcast", "scatter"):
        ids = dag.add(np.full(len(others), g[root]), g[others], n if op == "broadcast" else n / p,
                      o)
        return finals_by_dst(g[others], ids)
    tail = gam * (p - 1) * n if op == "reduce" else 0.0
    ids = dag.add(g[others], np.full(len(others), g[root]), n if op == "reduce" else n / p, o,
                  tail)
    return finals_by_dst(np.full(len(others), g[root]), ids)


def _ps_op(dag, topo, group, n):
    host = getattr(topo, "host", None)
    g = [int(x) for x in group]
    server = host if host is not None else g[0]
    clients = np.asarray([r for r in g if r != server], dtype=np.int32)
    o, gam = dag.o, dag.gamma
    push = dag.add(clients, np.full(len(clients), server), n, o)
    join = dag.barrier(server, push, 0.0)
    pull = dag.add(np.full(len(clients), server), clients, n, o + gam * len(clients) * n)
    dag.dep(np.full(len(clients), join), pull)
    return finals_by_dst(clients, pull)


# --------------------------------------------------------------------------- hierarchical

def _hier_op(dag, topo, levels, n, chunks, gates=None, gate_delay=0.0):
    """RS on level 0 groups, all-reduce of n/p0 across the remaining levels (recursively),
    AG on level 0. ``levels``: list of lists of rank tuples (``Topology.levels()``)."""
    lv0 = levels[0]
    if len(levels) == 1:
        fin: dict = {}
        for grp in lv0:
            fin.update(_ring_op(dag, topo, "allreduce", grp, n, chunks, gates,
                                gate_delay=gate_delay))
        return fin
    p0 = len(lv0[0])
    rs: dict = {}
    share = 0.0
    for grp in lv0:
        rs.update(_ring_op(dag, topo, "reducescatter", grp, n, chunks, gates,
                           gate_delay=gate_delay))
        share = max(share, max(s for _, s in topo.rings(tuple(grp))))
    # the reduce-scatter's last reduction delays the next phase's first sends
    mid = _hier_op(dag, topo, levels[1:], n / p0, chunks, rs,
                   dag.gamma * share * n / p0 / chunks)
    fin = {}
    for grp in lv0:
        fin.update(_ring_op(dag, topo, "allgather", grp, n, chunks, mid))
    return fin

