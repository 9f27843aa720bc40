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

This module is the public entry point; the parts live in one module per topic:

* :mod:`hw.system.collective_args`: argument checks, message costs, the algorithm ``auto``
  picks, default chunks;
* :mod:`hw.system.collective_dag`: the message DAG being built;
* :mod:`hw.system.collective_schedules`: each algorithm's messages (``ring``, ``tree``,
  ``rhd``, ``direct``, ``hierarchical``, ``ps``; described there);
* :mod:`hw.system.collective_analytic`: ``mode="analytic"`` on the topology's routes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from hw.system import ALGORITHMS, OPS
from hw.system import analytic as af
from hw.system import budget
from hw.system.budget import check_chunks, check_collective
from hw.system.collective_analytic import analytic_time
from hw.system.collective_args import (SUPPORTED, auto_algorithm, check_groups, check_nbytes,
                                       check_op_alg, default_chunks, message_costs,
                                       resolve_network)
from hw.system.collective_dag import MessageDag
from hw.system.collective_schedules import RING_PROGRAM_OPS, add_schedule, ring_program
from hw.system.engine import simulate, simulate_rings

__all__ = ["OPS", "ALGORITHMS", "CollectiveResult", "collective", "compare_algorithms",
           "applicable_algorithms", "build_messages"]


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


def applicable_algorithms(system_or_topology, op: str, groups=None) -> tuple[str, ...]:
    """The algorithms ``collective`` can run for ``op`` on this system (not "auto")."""
    topo, _ = resolve_network(system_or_topology)
    check_op_alg(op, "auto", "sim")
    gs = check_groups(topo, groups)
    whole = len(gs) == 1 and len(gs[0]) == topo.n_ranks
    return tuple(a for a in SUPPORTED[op]
                 if not (a == "hierarchical" and (not whole or len(topo.levels()) < 2)))


def _prepare(system_or_topology, op, nbytes, algorithm, groups, root, chunks, reduce_gbps,
             overhead_ns):
    """Checked arguments of a simulated collective: (topology, nbytes, groups, o, gamma,
    algorithm used, chunks)."""
    topo, system = resolve_network(system_or_topology)
    check_op_alg(op, algorithm, "sim")
    nbytes = check_nbytes(nbytes)
    gs = check_groups(topo, groups)
    o, gamma = message_costs(system, reduce_gbps, overhead_ns)
    whole = len(gs) == 1 and len(gs[0]) == topo.n_ranks
    for grp in gs:
        if not 0 <= root < len(grp):
            raise ValueError(f"root = {root}: must be a position in the group, 0..{len(grp) - 1}")
    alg = (algorithm if algorithm != "auto"
           else auto_algorithm(topo, op, len(gs[0]), nbytes, whole))
    if alg == "hierarchical" and not whole:
        raise ValueError("algorithm = 'hierarchical' runs over all ranks (groups=None); "
                         "use 'ring' for subgroups")
    chunks = check_chunks(chunks)
    if chunks is None:
        per = nbytes / 2 if (alg == "tree" and op == "allreduce") else nbytes
        chunks = default_chunks(alg, op, per)
    return topo, nbytes, gs, o, gamma, alg, int(chunks)


def _generated(op, alg, groups) -> bool:
    """Whether the engine generates this collective's messages itself (a ring program)."""
    return alg == "ring" and op in RING_PROGRAM_OPS and len(groups[0]) >= 2


def build_messages(system_or_topology, op, nbytes, *, algorithm="ring", groups=None, root=0,
                   chunks=None, reduce_gbps=None, overhead_ns=None):
    """The message DAG of one collective: (Messages, tail_s, group_start, algorithm used,
    chunks, groups). ``tail_s`` (per message, or one value for all) is a reduction the
    receiver does after the message arrives (the op's last step); ``group_start[g]`` is the
    index of group g's first message (groups are laid out one after the other).
    :func:`collective` runs ring reduce-scatter / all-gather / all-reduce as a ring program
    instead (the same messages, generated inside the engine)."""
    topo, nbytes, gs, o, gamma, alg, chunks = _prepare(
        system_or_topology, op, nbytes, algorithm, groups, root, chunks, reduce_gbps,
        overhead_ns)
    check_collective(topo, op, alg, gs, chunks, "sim")      # before building anything
    dag = MessageDag(o, gamma)
    for gi, grp in enumerate(gs):
        dag.group = gi
        add_schedule(dag, topo, alg, op, grp, nbytes, chunks, root)
    msgs, tail, group = dag.messages()
    return msgs, tail, group, alg, chunks, gs


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
    topo, system = resolve_network(system_or_topology)
    check_op_alg(op, algorithm, mode)
    nbytes = check_nbytes(nbytes)
    if mode == "analytic":
        gs = check_groups(topo, groups)
        if len(gs[0]) == 1:         # one rank per group: nothing moves
            return _result(topo, op, algorithm if algorithm != "auto" else "ring", mode,
                           nbytes, gs, 0.0, tuple(0.0 for _ in gs), 0, None, 0)
        alg, gs, t = analytic_time(topo, system, op, nbytes, algorithm, groups, root, chunks,
                                   reduce_gbps, overhead_ns)
        return _result(topo, op, alg, "analytic", nbytes, gs, t, tuple(t for _ in gs), 0,
                       None, 0)
    args = (system_or_topology, op, nbytes, algorithm, groups, root, chunks, reduce_gbps,
            overhead_ns)
    topo, nbytes, gs, o, gamma, alg, c = _prepare(*args)
    if len(gs[0]) == 1:             # one rank per group: nothing moves
        return _result(topo, op, alg, "sim", nbytes, gs, 0.0, tuple(0.0 for _ in gs), 0,
                       None, 0)
    if _generated(op, alg, gs):
        check_collective(topo, op, alg, gs, c, "sim", generated=True)
        prog, owner = ring_program(topo, op, gs, nbytes, c, o, gamma)
        res = simulate_rings(topo, prog, contention=contention,
                             max_window_bytes=budget.MAX_MEMORY_BYTES)
        gt = np.full(len(gs), -np.inf)
        np.maximum.at(gt, owner, res.finish_s)
        return _result(topo, op, alg, "sim", nbytes, gs, float(gt.max()),
                       tuple(float(x) for x in gt), prog.messages, res.link_bytes, res.events)
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
    """The CollectiveResult of a time ``t`` (and, simulated, the bytes each link carried)."""
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
