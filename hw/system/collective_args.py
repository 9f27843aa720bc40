"""A collective's arguments: the checks, the system's message costs, the algorithm "auto" picks
and the default chunk count. Shared by the simulated and the analytic mode.

``auto``: ``hierarchical`` for all-reduce over all ranks when ``levels()`` has more than one
level; otherwise ``ring`` for all-reduce / reduce-scatter / all-gather when p > 8 or
n >= 1 MiB (bandwidth-bound), else ``rhd``; ``direct`` for all-to-all; ``rhd`` (binomial)
for broadcast, reduce, scatter, gather.
"""

from __future__ import annotations

import math

import numpy as np

from hw.system import ALGORITHMS, OPS

__all__ = ["MODES", "SUPPORTED", "PIPELINE_CHUNK_BYTES", "MAX_DEFAULT_CHUNKS", "resolve_network",
           "check_groups", "check_op_alg", "check_nbytes", "message_costs", "auto_algorithm",
           "default_chunks"]

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


def resolve_network(system_or_topology):
    """(topology, system or None): a system's topology, or a bare topology."""
    topo = getattr(system_or_topology, "topology", None)
    if topo is not None:
        return topo, system_or_topology
    return system_or_topology, None


def check_groups(topo, groups):
    """The concurrent groups as a list of rank tuples (default: one group of all ranks); a
    group of fewer than 2 ranks, a rank out of range or in two groups is a ValueError."""
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


def auto_algorithm(topo, op, p, n, whole):
    """The algorithm ``auto`` runs for ``op`` on ``p`` ranks and ``n`` bytes (see the module
    docstring); ``whole``: one group of all ranks."""
    if op == "allreduce" and whole and len(topo.levels()) > 1:
        return "hierarchical"
    if op in ("allreduce", "reducescatter", "allgather"):
        return "ring" if (p > 8 or n >= (1 << 20)) else "rhd"
    if op == "alltoall":
        return "direct"
    return "rhd"


def check_op_alg(op, algorithm, mode):
    """A ValueError unless ``op``, ``algorithm`` and ``mode`` are known and go together."""
    if op not in OPS:
        raise ValueError(f"op = {op!r}: unknown collective; allowed: {', '.join(OPS)}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm = {algorithm!r}: unknown; allowed: {', '.join(ALGORITHMS)}")
    if mode not in MODES:
        raise ValueError(f"mode = {mode!r}: allowed: {', '.join(MODES)}")
    if algorithm != "auto" and algorithm not in SUPPORTED[op]:
        raise ValueError(f"algorithm = {algorithm!r} does not implement {op}; allowed for "
                         f"{op}: auto, {', '.join(SUPPORTED[op])}")


def default_chunks(algorithm, op, n_per_pipe):
    """Chunks of a pipelined chain or tree: one per PIPELINE_CHUNK_BYTES of ``n_per_pipe``, at
    most MAX_DEFAULT_CHUNKS; 1 for the algorithms that do not pipeline."""
    pipelined = algorithm == "tree" or (algorithm == "ring" and op in ("broadcast", "reduce"))
    if not pipelined:
        return 1
    return int(min(MAX_DEFAULT_CHUNKS, max(1, math.ceil(n_per_pipe / PIPELINE_CHUNK_BYTES))))


def check_nbytes(nbytes):
    """``nbytes`` as a float; a ValueError unless it is a finite number > 0."""
    try:
        v = float(nbytes)
    except (TypeError, ValueError):
        raise ValueError(f"nbytes = {nbytes!r}: must be a number of bytes > 0") from None
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"nbytes = {nbytes!r}: must be a finite number of bytes > 0")
    return v


def message_costs(system, reduce_gbps, overhead_ns):
    """(overhead s per message, reduction s per byte): the arguments, else the system's
    ``overhead_ns`` and ``reduce_gbps``, else none."""
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

