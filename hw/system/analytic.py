"""Closed-form (alpha-beta-gamma) collective times: the reference table of
``docs/multichip.md``.

p ranks, n bytes (nccl-tests convention, see :func:`hw.system.collectives.collective`),
``alpha`` seconds per message (software overhead + route latency of one logical hop),
``beta`` seconds per byte on the bandwidth the algorithm gets per rank, ``gamma`` seconds per
byte reduced. Sources: Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication
Operations in MPICH", IJHPCA 2005 (ring, recursive halving/doubling, Rabenseifner, binomial);
Chan et al., "Collective communication: theory, practice, and experience", CCPE 2007;
Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations",
JPDC 2009 (ring all-reduce is bandwidth optimal).

Pipelined formulas (``chunks`` c > 1) follow from the engine's start rule (a chunk leaves
when the previous chunk on its port has left and its data has arrived, plus the overhead o):
with S = chunk bytes x beta, L = link latency, o = overhead (alpha = o + L), a pipeline of H
hops takes ``H (S + L + o) + (c - 1)(S + o)``; a ring, whose port carries every step's chunks,
takes ``o + (c - 1)(S + o) + (steps - 1) max(S + L + o, c (S + o)) + S + L``.
"""

from __future__ import annotations

import math

__all__ = ["ring_allreduce", "ring_reducescatter", "ring_allgather", "ring_pipelined",
           "chain_pipelined", "rhd_allreduce", "rhd_reducescatter", "rhd_allgather",
           "binomial_broadcast", "binomial_reduce", "binomial_scatter", "binomial_gather",
           "direct_time", "ps_allreduce", "busbw_factor"]


def busbw_factor(op: str, p: int) -> float:
    """NCCL's bus-bandwidth factor (nccl-tests doc/PERFORMANCE.md): all-reduce 2(p-1)/p;
    all-gather, reduce-scatter, all-to-all (and here scatter/gather) (p-1)/p; broadcast,
    reduce 1."""
    if p <= 1:
        return 1.0
    if op == "allreduce":
        return 2 * (p - 1) / p
    if op in ("allgather", "reducescatter", "alltoall", "scatter", "gather"):
        return (p - 1) / p
    return 1.0


def ring_pipelined(steps: int, chunk_s: float, latency: float, overhead: float, chunks: int,
                   extra_per_step: float = 0.0) -> float:
    """``steps`` ring steps, each of ``chunks`` chunks of ``chunk_s`` seconds of wire time; a
    port sends every step's chunks in order. ``extra_per_step`` is added to the data edge
    (e.g. a reduction). c = 1 gives steps (S + L + o)."""
    s, lat, o, c = chunk_s, latency, overhead, chunks
    step = max(s + lat + o + extra_per_step, c * (s + o))
    return o + (c - 1) * (s + o) + (steps - 1) * step + s + lat


def ring_allreduce(p, n, alpha, beta, gamma=0.0):
    """2(p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma (Patarasuk & Yuan 2009)."""
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma


def ring_reducescatter(p, n, alpha, beta, gamma=0.0):
    """(p-1) alpha + (p-1)/p n beta (+ (p-1)/p n gamma)."""
    return (p - 1) * alpha + (p - 1) / p * n * beta + (p - 1) / p * n * gamma


def ring_allgather(p, n, alpha, beta):
    """(p-1) alpha + (p-1)/p n beta."""
    return (p - 1) * alpha + (p - 1) / p * n * beta


def chain_pipelined(hops: int, chunk_s: float, latency: float, overhead: float, chunks: int,
                    extra_per_hop: float = 0.0) -> float:
    """A pipeline of ``hops`` message hops (a chain, or a tree's deepest path):
    H (S + L + o + extra) + (c - 1)(S + o)."""
    return hops * (chunk_s + latency + overhead + extra_per_hop) + (chunks - 1) * (chunk_s + overhead)


def rhd_reducescatter(p, n, alpha, beta, gamma=0.0):
    """Recursive halving: lg p alpha + (p-1)/p n beta + (p-1)/p n gamma (p a power of two)."""
    return math.log2(p) * alpha + (p - 1) / p * n * (beta + gamma)


def rhd_allgather(p, n, alpha, beta):
    """Recursive doubling: lg p alpha + (p-1)/p n beta (p a power of two)."""
    return math.log2(p) * alpha + (p - 1) / p * n * beta


def rhd_allreduce(p, n, alpha, beta, gamma=0.0):
    """Rabenseifner: 2 lg p alpha + 2 (p-1)/p n beta + (p-1)/p n gamma (p a power of two)."""
    return 2 * math.log2(p) * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma


def binomial_broadcast(p, n, alpha, beta):
    """ceil(lg p)(alpha + n beta)."""
    return math.ceil(math.log2(p)) * (alpha + n * beta)


def binomial_reduce(p, n, alpha, beta, gamma=0.0):
    """ceil(lg p)(alpha + n beta + n gamma)."""
    return math.ceil(math.log2(p)) * (alpha + n * beta + n * gamma)


def binomial_scatter(p, n, alpha, beta):
    """lg p alpha + (p-1)/p n beta (p a power of two)."""
    return math.ceil(math.log2(p)) * alpha + (p - 1) / p * n * beta


binomial_gather = binomial_scatter


def direct_time(alpha, bytes_per_message, link_bw, bytes_per_port, port_bw, phases=1,
                gamma_bytes=0.0, gamma=0.0):
    """Direct (all messages of a phase at once): each phase costs alpha plus the larger of
    one message over its link and all of a rank's bytes over its port."""
    per = alpha + max(bytes_per_message / link_bw, bytes_per_port / port_bw)
    return phases * per + gamma_bytes * gamma


def ps_allreduce(p_clients, n, alpha, server_bw, gamma=0.0):
    """Parameter server: every client pushes n to the server, which reduces and sends n back
    to every client: 2 alpha + 2 p n / server port bandwidth + p n gamma."""
    return 2 * alpha + 2 * p_clients * n / server_bw + p_clients * n * gamma
