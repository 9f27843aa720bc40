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

Implementation: one Numba kernel (:func:`hw.system._engine_kernel._run`). Events sharing a timestamp (to 1e-12
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

from hw.system._engine_kernel import (_OVER_DONE, _OVER_HEAP, _OVER_NODES, _OVER_PEND,
                                      _OVER_SLOTS, _OVER_WINDOW, _run)

__all__ = ["Messages", "FlowResult", "simulate", "simulate_links", "messages_from_edges",
           "csr_from_edges", "RingProgram", "RingResult", "simulate_rings"]

_I32 = np.int32
_I64 = np.int64
_F64 = np.float64


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
        roots = (np.flatnonzero(chunk_i.ravel() == 0) << shift).astype(_I64)
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

    first = n_rings * p             # step 0's first chunk at every position starts at once
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
