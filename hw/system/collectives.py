"""Collective operations as message DAGs, run by the flow-level engine (:mod:`.engine`).

``collective(system_or_topology, op, nbytes, algorithm=..., groups=...)`` builds the
point-to-point messages of one collective (numpy-vectorized), simulates them with contention
and returns a :class:`CollectiveResult` (time, NCCL algorithm and bus bandwidth).
``mode="analytic"`` returns the alpha-beta-gamma closed form instead (:mod:`.analytic`).

Cost model of one message (see :mod:`.engine` for the start rule): it leaves ``overhead_ns``
after its inputs are ready (``delay``); a message that forwards data reduced from what the
rank received also waits ``received bytes / reduce rate`` (gamma). Each group's first messages
start at ``overhead_ns``. Several reductions on one rank (two rings, two trees) proceed in
parallel (NCCL runs each channel on its own SMs). Defaults: from the ``SystemConfig`` when a
system is passed (``reduce_gbps``, ``overhead_ns``); with a bare topology, no overhead and no
reduction cost.

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
* ``auto``: ``hierarchical`` for all-reduce over all ranks when ``levels()`` has more than one
  level; otherwise ``ring`` for all-reduce / reduce-scatter / all-gather when p > 8 or
  n >= 1 MiB (bandwidth-bound), else ``rhd``; ``direct`` for all-to-all; ``rhd`` (binomial)
  for broadcast, reduce, scatter, gather.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from hw.system import ALGORITHMS, OPS
from hw.system import analytic as af
from hw.system.budget import check_chunks, check_collective
from hw.system.engine import Messages, messages_from_edges, simulate

__all__ = ["OPS", "ALGORITHMS", "CollectiveResult", "collective", "compare_algorithms",
           "applicable_algorithms", "build_messages"]

MODES = ("sim", "analytic")

#: which algorithms implement which op (besides "auto")
SUPPORTED = {
    "allreduce": ("ring", "tree", "rhd", "direct", "hierarchical", "ps"),
    "reducescatter": ("ring", "rhd", "direct"),
    "allgather": ("ring", "rhd", "direct"),
    "alltoall": ("direct",),
    "broadcast": ("ring", "tree", "rhd", "direct"),
    "reduce": ("ring", "tree", "rhd", "direct"),
    "scatter": ("rhd", "direct"),
    "gather": ("rhd", "direct"),
}
PIPELINE_CHUNK_BYTES = 1 << 20     # default chunk of pipelined chains and trees
MAX_DEFAULT_CHUNKS = 64


@dataclass
class CollectiveResult:
    """One collective on one network. ``time_s`` is when the last group finished;
    ``group_times_s`` each group's own time. ``algbw_gbps`` = nbytes / time / 1e9 (per group),
    ``busbw_gbps`` = algbw x NCCL factor. ``max_link_utilization``: the busiest directed link's
    bytes / (its bandwidth x time)."""

    op: str
    algorithm: str
    mode: str
    nbytes: float
    ranks: int
    groups: int
    time_s: float
    algbw_gbps: float
    busbw_gbps: float
    messages: int
    max_link_utilization: float
    group_times_s: tuple = ()
    events: int = 0
    protocol: str = ""           # the system protocol that was fastest ("" without protocols)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["group_times_s"] = list(self.group_times_s)
        d["time_us"] = self.time_s * 1e6
        return d

    def __repr__(self) -> str:
        proto = f", protocol {self.protocol}" if self.protocol else ""
        return (f"CollectiveResult: {self.op} of {self.nbytes:,.0f} B over {self.ranks} ranks "
                f"({self.groups} group{'s' if self.groups != 1 else ''}), {self.algorithm} "
                f"({self.mode}{proto})\n"
                f"  time {self.time_s * 1e6:.4g} us, algbw {self.algbw_gbps:.4g} GB/s, busbw "
                f"{self.busbw_gbps:.4g} GB/s, {self.messages:,} messages, busiest link "
                f"{100 * self.max_link_utilization:.1f} % used")

    def to_pandas(self):
        """One row per group: ``group`` (index) and ``time_s`` (that group's own time).
        Needs pandas."""
        from hw._notebook import frame
        times = self.group_times_s or (self.time_s,)
        return frame(["group", "time_s"], [[i, float(t)] for i, t in enumerate(times)])


# --------------------------------------------------------------------------- DAG builder

class _Dag:
    """Accumulates messages (vectorized blocks) and their edges."""

    def __init__(self, o: float, gamma: float):
        self.o = o
        self.gamma = gamma
        self.cols = {k: [] for k in ("src", "dst", "nbytes", "delay", "tail")}
        self.group_start: list = []
        self.edges = ([], [])
        self.chain = ([], [])
        self.n = 0
        self.group = 0

    def add(self, src, dst, nbytes, delay, tail=0.0) -> np.ndarray:
        src = np.asarray(src, dtype=np.int32)
        k = len(src)
        if self.group >= len(self.group_start):
            self.group_start.append(self.n)
        ids = np.arange(self.n, self.n + k, dtype=np.int64)
        for name, v, dt in (("src", src, np.int32), ("dst", dst, np.int32),
                            ("nbytes", nbytes, np.float64), ("delay", delay, np.float64),
                            ("tail", tail, np.float64)):
            a = np.asarray(v, dtype=dt)
            self.cols[name].append((float(a), k) if a.ndim == 0 else a)
        self.n += k
        return ids

    def dep(self, pred, succ):
        self._edge(self.edges, pred, succ)

    def after_send(self, pred, succ):
        self._edge(self.chain, pred, succ)

    @staticmethod
    def _edge(store, pred, succ):
        pred, succ = np.asarray(pred), np.asarray(succ)
        if pred.shape != succ.shape:
            pred, succ = np.broadcast_arrays(pred, succ)
        store[0].append(pred.ravel().astype(np.int32, copy=False))
        store[1].append(succ.ravel().astype(np.int32, copy=False))

    def gate(self, gates, ranks_of_roots, root_ids):
        """Roots ``root_ids`` (sent by ``ranks_of_roots``) wait for the arrival of
        ``gates[rank]`` (message ids into that rank from the previous phase)."""
        if gates is None:
            return
        for rid, rank in zip(root_ids.tolist(), ranks_of_roots.tolist()):
            g = gates.get(rank)
            if g is not None and len(g):
                self.dep(g, np.full(len(g), rid))

    def barrier(self, rank, preds, delay) -> int:
        """A zero-byte message rank -> rank that waits for ``preds`` (a join node)."""
        bid = int(self.add([rank], [rank], 0.0, delay)[0])
        if len(preds):
            self.dep(preds, np.full(len(preds), bid))
        return bid

    def _column(self, name, dtype):
        parts = self.cols.pop(name)
        if all(isinstance(x, tuple) for x in parts) and len({x[0] for x in parts}) <= 1:
            return parts[0][0] if parts else 0.0          # one value for every message
        out = np.empty(self.n, dtype=dtype)
        i = 0
        for x in parts:
            k = x[1] if isinstance(x, tuple) else len(x)
            out[i:i + k] = x[0] if isinstance(x, tuple) else x
            i += k
        return out

    def messages(self) -> tuple[Messages, np.ndarray | float, np.ndarray]:
        """(Messages, tail per message or one value, index of each group's first message)."""
        cols = {k: self._column(k, dt) for k, dt in (
            ("src", np.int32), ("dst", np.int32), ("nbytes", np.float64),
            ("delay", np.float64), ("tail", np.float64))}
        e = (np.concatenate(self.edges[0]), np.concatenate(self.edges[1])) if self.edges[0] \
            else None
        self.edges = ([], [])
        c = (np.concatenate(self.chain[0]), np.concatenate(self.chain[1])) if self.chain[0] \
            else None
        self.chain = ([], [])
        msgs = messages_from_edges(cols["src"], cols["dst"], cols["nbytes"], cols["delay"],
                                   self.o, e, c)
        return msgs, cols["tail"], np.asarray(self.group_start, np.int64)


def _final_by_dst(dst_ranks, ids) -> dict:
    out: dict = {}
    for r, i in zip(np.asarray(dst_ranks).tolist(), np.asarray(ids).tolist()):
        out.setdefault(r, []).append(i)
    return {r: np.asarray(v, np.int64) for r, v in out.items()}


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
    return _final_by_dst(nxt[i[last]], base + last)


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
    return _final_by_dst(ch[h[last] + 1], base + last)


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
            finals = _final_by_dst(ranks[par[v[last]]], up_base + last)
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
        finals = _final_by_dst(ranks[v], down_base + ids)
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
                fin = _final_by_dst(g[odd], post)
                for q in range(p2):
                    fin.setdefault(int(ranks[q]), np.asarray([last_recv[q]]))
            else:
                fin = {int(ranks[q]): np.asarray([last_recv[q]]) for q in range(p2)}
            return fin
        ag_delay = o + tail_rs
    else:
        ag_delay = o + 0.0
    # recursive doubling all-gather (distances 1, 2, 4, ...)
    prev = last_recv
    base_bytes = n / p2 if op == "allreduce" else n / p2
    first_gate = finals if op == "allgather" else None
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
        fin.update(_final_by_dst(g[odd], post))
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
        fin = _final_by_dst(g[di], ids)
        if op != "allreduce":
            return fin
        # join per rank: its reduced block is ready, then send it to everyone
        out = []
        for q in range(p):
            out.append(dag.barrier(int(g[q]), fin[int(g[q])], 0.0))
        ag = dag.add(g[si], g[di], n / p, o + gam * (p - 1) * n / p)
        dag.dep(np.asarray(out)[si], ag)
        return _final_by_dst(g[di], ag)
    others = np.array([q for q in range(p) if q != root])
    if op in ("broadcast", "scatter"):
        ids = dag.add(np.full(len(others), g[root]), g[others], n if op == "broadcast" else n / p,
                      o)
        return _final_by_dst(g[others], ids)
    tail = gam * (p - 1) * n if op == "reduce" else 0.0
    ids = dag.add(g[others], np.full(len(others), g[root]), n if op == "reduce" else n / p, o,
                  tail)
    return _final_by_dst(np.full(len(others), g[root]), ids)


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
    return _final_by_dst(clients, pull)


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


# --------------------------------------------------------------------------- public API

def _resolve(system_or_topology):
    topo = getattr(system_or_topology, "topology", None)
    if topo is not None:
        return topo, system_or_topology
    return system_or_topology, None


def _check_groups(topo, groups):
    n = topo.n_ranks
    if groups is None:
        return [tuple(range(n))]
    if isinstance(groups, tuple) and groups and all(isinstance(x, (int, np.integer))
                                                     for x in groups):
        groups = [groups]
    out = []
    for grp in groups:
        grp = tuple(int(x) for x in grp)
        if len(grp) < 2:
            raise ValueError(f"groups: {grp}: a group needs at least 2 ranks")
        bad = [x for x in grp if not 0 <= x < n]
        if bad:
            raise ValueError(f"groups: rank {bad[0]} in group {grp} is out of range; "
                             f"topology {topo.name!r} has ranks 0..{n - 1}")
        if len(set(grp)) != len(grp):
            raise ValueError(f"groups: group {grp} lists a rank twice")
        out.append(grp)
    seen = [r for grp in out for r in grp]
    if len(set(seen)) != len(seen):
        raise ValueError("groups: a rank belongs to two groups; concurrent groups must be "
                         "disjoint")
    return out


def _auto(topo, op, p, n, whole):
    if op == "allreduce" and whole and len(topo.levels()) > 1:
        return "hierarchical"
    if op in ("allreduce", "reducescatter", "allgather"):
        return "ring" if (p > 8 or n >= (1 << 20)) else "rhd"
    if op == "alltoall":
        return "direct"
    return "rhd"


def applicable_algorithms(system_or_topology, op: str, groups=None) -> tuple[str, ...]:
    """The algorithms ``collective`` can run for ``op`` on this system (not "auto")."""
    topo, _ = _resolve(system_or_topology)
    _check_op_alg(op, "auto", "sim")
    gs = _check_groups(topo, groups)
    whole = len(gs) == 1 and len(gs[0]) == topo.n_ranks
    return tuple(a for a in SUPPORTED[op]
                 if not (a == "hierarchical" and (not whole or len(topo.levels()) < 2)))


def _check_op_alg(op, algorithm, mode):
    if op not in OPS:
        raise ValueError(f"op = {op!r}: unknown collective; allowed: {', '.join(OPS)}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm = {algorithm!r}: unknown; allowed: {', '.join(ALGORITHMS)}")
    if mode not in MODES:
        raise ValueError(f"mode = {mode!r}: allowed: {', '.join(MODES)}")
    if algorithm != "auto" and algorithm not in SUPPORTED[op]:
        raise ValueError(f"algorithm = {algorithm!r} does not implement {op}; allowed for "
                         f"{op}: auto, {', '.join(SUPPORTED[op])}")


def _default_chunks(algorithm, op, n_per_pipe):
    pipelined = algorithm == "tree" or (algorithm == "ring" and op in ("broadcast", "reduce"))
    if not pipelined:
        return 1
    return int(min(MAX_DEFAULT_CHUNKS, max(1, math.ceil(n_per_pipe / PIPELINE_CHUNK_BYTES))))


def build_messages(system_or_topology, op, nbytes, *, algorithm="ring", groups=None, root=0,
                   chunks=None, reduce_gbps=None, overhead_ns=None):
    """The message DAG of one collective: (Messages, tail_s, group_start, algorithm used,
    chunks, groups). ``tail_s`` (per message, or one value for all) is a reduction the
    receiver does after the message arrives (the op's last step); ``group_start[g]`` is the
    index of group g's first message (groups are laid out one after the other)."""
    topo, system = _resolve(system_or_topology)
    _check_op_alg(op, algorithm, "sim")
    nbytes = _check_nbytes(nbytes)
    gs = _check_groups(topo, groups)
    o, gamma = _costs(system, reduce_gbps, overhead_ns)
    whole = len(gs) == 1 and len(gs[0]) == topo.n_ranks
    for grp in gs:
        if not 0 <= root < len(grp):
            raise ValueError(f"root = {root}: must be a position in the group, 0..{len(grp) - 1}")
    alg = algorithm if algorithm != "auto" else _auto(topo, op, len(gs[0]), nbytes, whole)
    if alg == "hierarchical" and not whole:
        raise ValueError("algorithm = 'hierarchical' runs over all ranks (groups=None); "
                         "use 'ring' for subgroups")
    chunks = check_chunks(chunks)
    if chunks is None:
        per = nbytes / 2 if (alg == "tree" and op == "allreduce") else nbytes
        chunks = _default_chunks(alg, op, per)
    check_collective(topo, op, alg, gs, chunks, "sim")      # before building anything
    dag = _Dag(o, gamma)
    for gi, grp in enumerate(gs):
        dag.group = gi
        if alg == "ring":
            _ring_op(dag, topo, op, grp, nbytes, int(chunks), root=root)
        elif alg == "tree":
            _tree_op(dag, op, grp, nbytes, int(chunks), root)
        elif alg == "rhd":
            _rhd_op(dag, op, grp, nbytes, root)
        elif alg == "direct":
            _direct_op(dag, op, grp, nbytes, root)
        elif alg == "ps":
            _ps_op(dag, topo, grp, nbytes)
        elif alg == "hierarchical":
            _hier_op(dag, topo, topo.levels(), nbytes, int(chunks))
    msgs, tail, group = dag.messages()
    return msgs, tail, group, alg, int(chunks), gs


def _check_nbytes(nbytes):
    try:
        v = float(nbytes)
    except (TypeError, ValueError):
        raise ValueError(f"nbytes = {nbytes!r}: must be a number of bytes > 0") from None
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"nbytes = {nbytes!r}: must be a finite number of bytes > 0")
    return v


def _costs(system, reduce_gbps, overhead_ns):
    if reduce_gbps is None and system is not None:
        reduce_gbps = getattr(system, "reduce_gbps", None)
    if overhead_ns is None and system is not None:
        overhead_ns = getattr(system, "overhead_ns", None)
    if reduce_gbps is not None and not (float(reduce_gbps) > 0):
        raise ValueError(f"reduce_gbps = {reduce_gbps!r}: must be > 0 (GB/s) or None")
    if overhead_ns is not None and not (float(overhead_ns) >= 0):
        raise ValueError(f"overhead_ns = {overhead_ns!r}: must be >= 0")
    gamma = 1.0 / (float(reduce_gbps) * 1e9) if reduce_gbps else 0.0
    return (float(overhead_ns) * 1e-9 if overhead_ns else 0.0), gamma


def collective(system_or_topology, op, nbytes, *, algorithm="auto", groups=None, root=0,
               chunks=None, mode="sim", reduce_gbps=None, overhead_ns=None,
               contention=True, protocol="auto") -> CollectiveResult:
    """Time one collective. ``nbytes`` follows nccl-tests: the per-rank buffer for
    all-reduce, broadcast, reduce; the full gathered buffer for all-gather, reduce-scatter,
    scatter, gather; the total a rank sends for all-to-all. ``groups``: disjoint rank tuples
    that run the op at the same time (default: one group of all ranks). ``root``: position of
    the root in each group. ``mode="analytic"``: the closed form of :mod:`.analytic`.

    A system with :attr:`~hw.system.system.SystemConfig.protocols` is timed under each
    protocol (``protocol="auto"``, the fastest wins, as NCCL's tuner picks) or the one named."""
    protocols = getattr(system_or_topology, "protocols", ())
    if protocols:
        names = [p.name for p in protocols]
        if protocol != "auto" and protocol not in names:
            raise ValueError(f"protocol = {protocol!r}: must be auto or one of "
                             f"{', '.join(names)} (system {system_or_topology.name!r})")
        best = None
        for name in (names if protocol == "auto" else [protocol]):
            result = collective(system_or_topology.with_protocol(name), op, nbytes,
                                algorithm=algorithm, groups=groups, root=root, chunks=chunks,
                                mode=mode, reduce_gbps=reduce_gbps, overhead_ns=overhead_ns,
                                contention=contention)
            if best is None or result.time_s < best.time_s:
                best = replace(result, protocol=name)
        return best
    if protocol != "auto":
        raise ValueError(f"protocol = {protocol!r}: this network has no protocols; use auto")
    topo, system = _resolve(system_or_topology)
    _check_op_alg(op, algorithm, mode)
    nbytes = _check_nbytes(nbytes)
    if mode == "analytic":
        return _analytic(topo, system, op, nbytes, algorithm, groups, root, chunks,
                         reduce_gbps, overhead_ns)
    msgs, tail, group, alg, c, gs = build_messages(
        system_or_topology, op, nbytes, algorithm=algorithm, groups=groups, root=root,
        chunks=chunks, reduce_gbps=reduce_gbps, overhead_ns=overhead_ns)
    res = simulate(topo, msgs, contention=contention)
    done = res.finish_s + tail if not np.isscalar(tail) or tail else res.finish_s
    # messages are laid out group after group (group = index of each group's first message)
    gt = np.maximum.reduceat(done, group) if len(done) else np.zeros(len(gs))
    t = float(gt.max())
    return _result(topo, op, alg, "sim", nbytes, gs, t, tuple(float(x) for x in gt), len(msgs),
                   res.link_bytes, res.events)


def _result(topo, op, alg, mode, nbytes, gs, t, gtimes, nmsg, link_bytes, events):
    p = len(gs[0])
    algbw = nbytes / t / 1e9 if t > 0 else math.inf
    util = 0.0
    if link_bytes is not None and t > 0:
        util = float(np.max(link_bytes / (np.asarray(topo.link_bytes_per_s) * t)))
    return CollectiveResult(op, alg, mode, nbytes, p, len(gs), t, algbw,
                            algbw * af.busbw_factor(op, p), int(nmsg), util, gtimes, int(events))


def compare_algorithms(system_or_topology, op, nbytes, **kw) -> dict:
    """Simulated (or, with mode="analytic", closed-form) result of every applicable
    algorithm, keyed by algorithm name."""
    algs = applicable_algorithms(system_or_topology, op, kw.get("groups"))
    return {a: collective(system_or_topology, op, nbytes, algorithm=a, **kw) for a in algs}


# --------------------------------------------------------------------------- analytic mode

def _route_stats(topo, src, dst):
    """(max route latency s, min bottleneck bandwidth bytes/s) over the pairs."""
    src = np.asarray(src, np.int64)
    dst = np.asarray(dst, np.int64)
    return _routes_stats(topo, *topo.routes(src, dst))


def _routes_stats(topo, ptr, links):
    """:func:`_route_stats` of routes already in CSR form."""
    lat = np.asarray(topo.link_latency_ns, float)[links] * 1e-9
    bw = np.asarray(topo.link_bytes_per_s, float)[links]
    cs = np.concatenate(([0.0], np.cumsum(lat)))
    lat_r = cs[ptr[1:]] - cs[ptr[:-1]]
    bmin = np.minimum.reduceat(bw, ptr[:-1]) if len(links) else np.array([np.inf])
    return float(lat_r.max()), float(bmin.min())


def _analytic(topo, system, op, n, algorithm, groups, root, chunks, reduce_gbps, overhead_ns):
    """Closed forms (see module docstrings): alpha = overhead + the route latency of the
    algorithm's logical hop (the worst one), beta = 1 / the bandwidth the algorithm gets per
    rank on this topology (a ring's bottleneck link times its share; a port for direct and
    ps). Concurrent groups are assumed not to interfere."""
    gs = _check_groups(topo, groups)
    o, gamma = _costs(system, reduce_gbps, overhead_ns)
    whole = len(gs) == 1 and len(gs[0]) == topo.n_ranks
    grp = gs[0]
    p = len(grp)
    alg = algorithm if algorithm != "auto" else _auto(topo, op, p, n, whole)
    chunks = check_chunks(chunks)
    if chunks is None:
        chunks = _default_chunks(alg, op, n / 2 if (alg == "tree" and op == "allreduce") else n)
    c = int(chunks)
    check_collective(topo, op, alg, gs, c, "analytic")
    g = np.asarray(grp)

    def ring_time(group, opn, nb):
        best = 0.0
        pp = len(group)
        rings = topo.rings(tuple(group))
        # Rings that share a directed link share its bandwidth: a link carrying rings with
        # shares summing to L serves each of them at share / L of its bandwidth (on K4 every
        # directed link is on 2 of the 6 Hamiltonian cycles).
        load = np.zeros(len(topo.link_src))
        routes = []
        for order, share in rings:
            od = np.asarray(order)
            ptr, links = topo.routes(od, np.roll(od, -1))
            used = np.unique(links)
            load[used] += share
            routes.append((ptr, links, used))
        for (order, share), (ptr, links, used) in zip(rings, routes):
            lat, _ = _routes_stats(topo, ptr, links)
            bw = float(np.min(np.asarray(topo.link_bytes_per_s)[used] * share / load[used]))
            s = share * nb / pp / c / bw
            red = (pp - 1) * gamma * share * nb / pp / c     # p-1 reductions in a row
            if opn == "allreduce":
                t = af.ring_pipelined(2 * (pp - 1), s, lat, o, c) + red
            elif opn == "reducescatter":
                t = af.ring_pipelined(pp - 1, s, lat, o, c) + red
            elif opn == "allgather":
                t = af.ring_pipelined(pp - 1, s, lat, o, c)
            else:
                sc = share * nb / c / bw
                t = af.chain_pipelined(pp - 1, sc, lat, o, c,
                                       gamma * share * nb / c if opn == "reduce" else 0.0)
            best = max(best, t)
        return best

    if alg == "ring":
        t = ring_time(grp, op, n)
    elif alg == "hierarchical":
        lv = topo.levels()

        def hier(levels, nb):
            if len(levels) == 1:
                return ring_time(levels[0][0], "allreduce", nb)
            p0 = len(levels[0][0])
            return (ring_time(levels[0][0], "reducescatter", nb) + hier(levels[1:], nb / p0)
                    + ring_time(levels[0][0], "allgather", nb))
        t = hier(lv, n)
    elif alg == "direct":
        a, b = np.meshgrid(g, g, indexing="ij")
        off = a != b
        lat, bw = _route_stats(topo, a[off], b[off])
        port = min(topo.injection_bytes_per_s(int(r)) for r in grp)
        alpha = o + lat
        if op in ("alltoall", "allgather", "reducescatter"):
            t = af.direct_time(alpha, n / p, bw, (p - 1) * n / p, port)
            if op == "reducescatter":
                t += gamma * (p - 1) * n / p
        elif op == "allreduce":
            t = af.direct_time(alpha, n / p, bw, (p - 1) * n / p, port, phases=2,
                               gamma_bytes=(p - 1) * n / p, gamma=gamma)
        else:
            per = n if op in ("broadcast", "reduce") else n / p
            t = af.direct_time(alpha, per, bw, (p - 1) * per, port,
                               gamma_bytes=(p - 1) * n if op == "reduce" else 0.0, gamma=gamma)
    elif alg == "ps":
        host = topo.host
        server = host if host is not None else int(g[0])
        clients = [int(r) for r in grp if r != server]
        lat, bw = _route_stats(topo, clients, [server] * len(clients))
        sbw = topo.injection_bytes_per_s(server) if server < topo.n_ranks else float(
            np.asarray(topo.link_bytes_per_s)[np.asarray(topo.link_src) == server].sum())
        t = af.ps_allreduce(len(clients), n, o + lat, min(sbw, bw * len(clients)), gamma)
    elif alg == "rhd":
        a, b = np.meshgrid(g, g, indexing="ij")
        off = a != b
        lat, bw = _route_stats(topo, a[off], b[off])
        alpha, beta = o + lat, 1.0 / bw
        fn = {"allreduce": lambda: af.rhd_allreduce(p, n, alpha, beta, gamma),
              "reducescatter": lambda: af.rhd_reducescatter(p, n, alpha, beta, gamma),
              "allgather": lambda: af.rhd_allgather(p, n, alpha, beta),
              "broadcast": lambda: af.binomial_broadcast(p, n, alpha, beta),
              "reduce": lambda: af.binomial_reduce(p, n, alpha, beta, gamma),
              "scatter": lambda: af.binomial_scatter(p, n, alpha, beta),
              "gather": lambda: af.binomial_gather(p, n, alpha, beta)}
        t = fn[op]()
    else:   # tree
        a, b = np.meshgrid(g, g, indexing="ij")
        off = a != b
        lat, bw = _route_stats(topo, a[off], b[off])
        depth = max(1, (p).bit_length() - 1)
        share = 0.5 if op == "allreduce" else 1.0
        s = share * n / c / bw
        hops = 2 * depth if op == "allreduce" else depth
        t = af.chain_pipelined(hops, s, lat, o, c)
    return _result(topo, op, alg, "analytic", n, gs, t, tuple(t for _ in gs), 0, None, 0)
