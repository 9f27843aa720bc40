"""The analytic mode of a collective: alpha-beta-gamma closed forms on a real topology.

The formulas are those of :mod:`hw.system.analytic`; this module finds their parameters on the
topology: alpha = overhead + the route latency of the algorithm's logical hop (the worst one),
beta = 1 / the bandwidth the algorithm gets per rank (a ring's bottleneck link times its share,
shared with the other rings on that link; a port for direct and ps), gamma = 1 / reduction rate.
No message is built; the route budget of :mod:`hw.system.budget` still applies.
"""

from __future__ import annotations

import numpy as np

from hw.system import analytic as af
from hw.system.budget import check_chunks, check_collective
from hw.system.collective_args import auto_algorithm, check_groups, default_chunks, message_costs

__all__ = ["analytic_time"]


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


def analytic_time(topo, system, op, n, algorithm, groups, root, chunks, reduce_gbps,
                  overhead_ns):
    """(algorithm used, groups, seconds) of ``op`` on ``n`` bytes by the closed forms (see the
    module docstring). Concurrent groups are assumed not to interfere: every group takes the
    time of the first."""
    gs = check_groups(topo, groups)
    o, gamma = message_costs(system, reduce_gbps, overhead_ns)
    whole = len(gs) == 1 and len(gs[0]) == topo.n_ranks
    grp = gs[0]
    p = len(grp)
    alg = algorithm if algorithm != "auto" else auto_algorithm(topo, op, p, n, whole)
    chunks = check_chunks(chunks)
    if chunks is None:
        chunks = default_chunks(alg, op, n / 2 if (alg == "tree" and op == "allreduce") else n)
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
    return alg, gs, t
