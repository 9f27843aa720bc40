"""What a collective simulation will cost, estimated in closed form BEFORE anything is built.

:func:`check_collective` counts the messages an algorithm's DAG will hold (steps x ranks x
chunks x rings x groups; the formulas mirror the schedules of :mod:`.collective_schedules`, and
a test holds them to the real DAG: the estimate is never below the real count and at most a few
times above it) and the route entries the engine will store (distinct (src, dst) pairs x a bound
on their hops), turns both into bytes and refuses, with a :class:`BudgetError` that says how
much it would need and suggests ``--mode analytic``, anything above the budget:

* ``MAX_MESSAGES`` messages (2**24 = 16,777,216: about half a minute of simulation and ~2.5 GB);
* ``MAX_MEMORY_BYTES`` of estimated memory (4 GiB), at ``BYTES_PER_MESSAGE`` per message (the
  DAG's columns, edges and the engine's per-message state; measured 93-130 B on ring all-reduce,
  rounded up) plus ``BYTES_PER_ROUTE_ENTRY`` per (pair, hop) of the routes;
* ``MAX_CHUNKS`` pipeline chunks per message (65,536), in both modes.

Ring reduce-scatter, all-gather and all-reduce are *generated* inside the engine (a
:class:`~hw.system.engine.RingProgram`): no per-message memory, ~40-100 ns per message. They
are held to ``MAX_GENERATED_MESSAGES`` (2**28 = 268,435,456: ~10-30 s) and to memory of
``BYTES_PER_RING_SLOT`` per (ring, chunk, position) (the engine refuses a run whose positions
drift so far apart that its window would pass ``MAX_MEMORY_BYTES``).

The closed form (``mode="analytic"``) builds no messages; its rhd / direct / tree formulas look
at the routes of every ordered pair of a group, so it is held to the route budget only.
Topology size is bounded where topologies are built (:data:`hw.system.topology.MAX_LINKS`).
"""

from __future__ import annotations

import numbers

__all__ = ["BudgetError", "MAX_MESSAGES", "MAX_MEMORY_BYTES", "MAX_CHUNKS", "BYTES_PER_MESSAGE",
           "MAX_GENERATED_MESSAGES", "BYTES_PER_RING_SLOT",
           "BYTES_PER_ROUTE_ENTRY", "estimate_messages", "estimate_route_entries",
           "check_chunks", "check_collective"]

MAX_MESSAGES = 1 << 24
MAX_MEMORY_BYTES = 4 << 30
MAX_CHUNKS = 1 << 16
MAX_GENERATED_MESSAGES = 1 << 28
BYTES_PER_MESSAGE = 160
BYTES_PER_RING_SLOT = 256         # window entries (4 x 16 B), route, flow slot, event node
BYTES_PER_ROUTE_ENTRY = 48


class BudgetError(ValueError):
    """A collective (or its routes) would not fit the simulation budget; the message says how
    many messages / bytes it would need, the limit, and what to do instead."""


def check_chunks(chunks) -> int | None:
    """``chunks`` as an int in 1..MAX_CHUNKS (None stays None: the default)."""
    if chunks is None:
        return None
    if isinstance(chunks, bool) or not isinstance(chunks, numbers.Integral):
        raise BudgetError(f"chunks = {chunks!r}: must be an integer in 1..{MAX_CHUNKS:,}")
    c = int(chunks)
    if not 1 <= c <= MAX_CHUNKS:
        raise BudgetError(f"chunks = {c}: must be an integer in 1..{MAX_CHUNKS:,} (pipeline "
                          f"chunks per message)")
    return c


def _n_rings(topo, group) -> int:
    return len(topo.rings(tuple(group)))


def _ring_msgs(op: str, p: int, c: int, rings: int) -> int:
    if op == "allreduce":
        return rings * 2 * (p - 1) * p * c
    if op in ("reducescatter", "allgather"):
        return rings * (p - 1) * p * c
    return rings * (p - 1) * c                      # broadcast / reduce: a chain


def _rhd_msgs(op: str, p: int) -> int:
    if op in ("broadcast", "scatter", "gather", "reduce"):
        return p - 1
    p2 = 1 << (p.bit_length() - 1)
    lg = p2.bit_length() - 1
    r = p - p2
    phases = 2 if op == "allreduce" else 1
    return phases * lg * p2 + 2 * r


def _direct_msgs(op: str, p: int) -> int:
    if op in ("alltoall", "allgather", "reducescatter"):
        return p * (p - 1)
    if op == "allreduce":
        return 2 * p * (p - 1) + p
    return p - 1


def estimate_messages(topo, op: str, alg: str, groups, chunks: int) -> int:
    """Messages in the DAG of ``alg`` for ``op`` over ``groups`` (equal-size rank tuples)."""
    p = len(groups[0])
    g = len(groups)
    c = int(chunks)
    if alg == "ring":
        return g * _ring_msgs(op, p, c, _n_rings(topo, groups[0]))
    if alg == "tree":
        return g * (4 if op == "allreduce" else 1) * (p - 1) * c
    if alg == "rhd":
        return g * _rhd_msgs(op, p)
    if alg == "direct":
        return g * _direct_msgs(op, p)
    if alg == "ps":
        return g * (2 * p + 1)
    if alg == "hierarchical":
        total = 0
        for level in topo.levels():
            pl = len(level[0])
            total += len(level) * _ring_msgs("allreduce", pl, c, _n_rings(topo, level[0]))
        return total
    raise ValueError(f"estimate_messages: unknown algorithm {alg!r}")


def _hops_bound(topo) -> int:
    """An upper bound on the hops of a route between two nodes of ``topo``."""
    dims = topo.dims
    extra = 1 if topo.host is not None else 0
    bound = {"ring": dims[0] // 2, "torus2d": sum(d // 2 for d in dims),
             "torus3d": sum(d // 2 for d in dims), "mesh2d": sum(d - 1 for d in dims),
             "mesh3d": sum(d - 1 for d in dims), "switch": 2, "fattree": 4, "fc": 1,
             "hierarchical": 2 * len(dims)}.get(topo.kind, topo.n_nodes - 1)
    return max(1, bound) + extra


def estimate_route_entries(topo, op: str, alg: str, groups, mode: str = "sim") -> int:
    """(distinct (src, dst) pairs) x (hops bound) the routes of ``alg`` will hold. Ring and
    hierarchical algorithms route ring neighbours (<= 4 rings of p hops, a few hops each); the
    closed form of rhd, direct and tree looks at every ordered pair of a group."""
    p = len(groups[0])
    g = len(groups)
    hops = _hops_bound(topo)
    if alg in ("ring", "hierarchical"):
        return g * (4 * 2 * p + hops)
    if alg == "direct" or (mode == "analytic" and alg in ("rhd", "tree")):
        pairs = p * (p - 1)
    elif alg == "rhd":
        pairs = p * max(1, p.bit_length()) + 2 * p
    else:                                           # tree (two trees up and down), ps
        pairs = 4 * p
    return g * pairs * hops


def _gib(n: float) -> str:
    return f"{n / (1 << 30):,.1f} GiB" if n >= 1 << 28 else f"{n / (1 << 20):,.1f} MiB"


def check_collective(topo, op: str, alg: str, groups, chunks: int, mode: str = "sim",
                     generated: bool = False) -> int:
    """Refuse (BudgetError) a collective whose estimated messages or memory exceed the budget;
    returns the estimated message count (0 in analytic mode). ``generated``: the engine
    generates the messages (a ring program), see the module docstring."""
    what = f"{op} ({alg}) over {len(groups)} group(s) of {len(groups[0]):,} ranks"
    routes = estimate_route_entries(topo, op, alg, groups, mode)
    route_bytes = routes * BYTES_PER_ROUTE_ENTRY
    if mode == "analytic":
        if route_bytes > MAX_MEMORY_BYTES:
            raise BudgetError(f"{what}: the closed form would look at {routes:,} route hops "
                              f"(~{_gib(route_bytes)}); the limit is {_gib(MAX_MEMORY_BYTES)}: "
                              f"use --algorithm ring or fewer ranks (--ranks)")
        return 0
    msgs = estimate_messages(topo, op, alg, groups, chunks)
    if generated:
        limit = MAX_GENERATED_MESSAGES
        slots = len(groups) * _n_rings(topo, groups[0]) * int(chunks) * len(groups[0])
        need = slots * BYTES_PER_RING_SLOT + route_bytes
    else:
        limit = MAX_MESSAGES
        need = msgs * BYTES_PER_MESSAGE + route_bytes
    hint = "use --mode analytic (npulab system: --comm analytic), fewer ranks or fewer --chunks"
    if msgs > limit:
        raise BudgetError(f"{what}: the simulation would need {msgs:,} messages (~{_gib(need)}); "
                          f"the limit is {limit:,} messages: {hint}")
    if need > MAX_MEMORY_BYTES:
        raise BudgetError(f"{what}: the simulation would need ~{_gib(need)} ({msgs:,} messages, "
                          f"{routes:,} route hops); the limit is {_gib(MAX_MEMORY_BYTES)}: {hint}")
    return msgs
