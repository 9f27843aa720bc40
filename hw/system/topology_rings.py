"""Ring embeddings: how the ring collectives lay rings over the ranks of a topology.

:func:`ring_embeddings` (what :meth:`Topology.rings <hw.system.topology_graph.Topology.rings>`
returns) gives a list of (rank order, share of the data) whose shares sum to 1; the constructions
and their sources are listed there. Hierarchical groups for 2D/hierarchical algorithms come from
:meth:`Topology.levels <hw.system.topology_graph.Topology.levels>`.
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["ring_embeddings"]


def ring_embeddings(
        topo, group: tuple[int, ...] | None = None) -> list[tuple[tuple[int, ...], float]]:
    """The ring embeddings ring collectives use for ``group`` (default: all ranks): a list
    of (rank order, share of the data); the shares sum to 1.

    * ``fc:N`` (and any group of a fully connected topology): directed Hamiltonian cycles
      covering the directed links evenly. N = 4: all six directed Hamiltonian cycles of K4,
      1/6 each, so every directed link carries 1/3 of the data (K4* has no decomposition
      into three arc-disjoint Hamiltonian cycles: Tillson 1980). Odd N: Walecki's
      decomposition of K_N into (N-1)/2 Hamiltonian cycles, both orientations: every directed
      link used exactly once. Even N >= 6: Walecki's decomposition of K_N minus a perfect
      matching, both orientations: (N-2)/(N-1) of the directed links are used, once each
      (the matching stays idle). (Alspach, "The wonderful Walecki construction", 2008.)
    * ``torus2d:AxB`` with A | B or B | A (A, B >= 3): a "shifted raster" Hamiltonian cycle
      using only + links (row y starts at column -y); when the torus links it leaves unused
      form one Hamiltonian cycle too (checked: e.g. every square torus, 4x8, 4x16, 3x9),
      both cycles in both orientations: 4 rings, 1/4 each, every directed link used once
      (a 2D torus splits into two Hamiltonian cycles: Kotzig 1973). Otherwise a snake
      (boustrophedon) order closed by a wrap link, and its reverse (half the links).
    * ``mesh2d:AxB`` with an even side: a comb-shaped Hamiltonian cycle and its reverse;
      both sides odd: the snake order (its closing hop is routed) and its reverse.
    * 3D mesh/torus: the 3D snake order and its reverse (closing hop routed).
    * everything else, and any other group: the group in the given order, plus its reverse
      if the reverse's routes share no directed link with the forward ring's (``ring:N``:
      both directions; switch / fat tree / hierarchical: one ring, a second would share
      each rank's port).
    Consecutive ranks of a ring need not be neighbours: the collectives route each hop.
    """
    full = tuple(range(topo.n_ranks))
    if group is None:
        group = full
    group = tuple(int(g) for g in group)
    if (not group or len(set(group)) != len(group) or min(group) < 0
            or max(group) >= topo.n_ranks):
        raise ValueError(f"rings: group {group!r}: must be distinct ranks in "
                         f"0..{topo.n_ranks - 1}")
    if len(group) == 1:
        return [(group, 1.0)]
    if topo.kind == "fc":
        return [(tuple(group[i] for i in order), share)
                for order, share in _fc_rings(len(group))]
    if group == full and len(group) > 2:
        rings = None
        if topo.kind == "torus2d":
            rings = _torus2d_rings(topo.dims)
        elif topo.kind == "mesh2d":
            rings = _mesh2d_rings(topo.dims)
        elif topo.kind in ("mesh3d", "torus3d"):
            order = _snake(topo.dims)
            rings = [(order, 0.5), (_reverse(order), 0.5)]
        if rings is not None:
            return rings
    rev = _reverse(group)
    if len(group) > 2 and not (set(_ring_links(topo, group)) & set(_ring_links(topo, rev))):
        return [(group, 0.5), (rev, 0.5)]
    return [(group, 1.0)]


def _ring_links(topo, order: tuple[int, ...]) -> list[int]:
    """The directed links the routes of a ring's hops cross (with repeats)."""
    a = np.array(order, dtype=np.int64)
    return topo.routes(a, np.roll(a, -1))[1].tolist()


def _reverse(order: tuple[int, ...]) -> tuple[int, ...]:
    return (order[0],) + tuple(reversed(order[1:]))


def _snake(dims: tuple[int, ...]) -> tuple[int, ...]:
    """Boustrophedon order over a grid (x fastest): the reflected mixed-radix Gray code, so
    consecutive ranks differ by one step in one coordinate."""
    order = [(c,) for c in range(dims[0])]
    for size in dims[1:]:
        nxt = []
        for c in range(size):
            seq = order if c % 2 == 0 else order[::-1]
            nxt += [prev + (c,) for prev in seq]
        order = nxt
    strides = np.cumprod((1,) + tuple(dims[:-1]))
    return tuple(int(sum(ci * si for ci, si in zip(c, strides))) for c in order)


def _mesh2d_rings(dims):
    a, b = dims
    if a >= 2 and b >= 2 and (a % 2 == 0 or b % 2 == 0):
        if b % 2 == 0:
            cyc = _comb(a, b, lambda x, y: x + a * y)
        else:   # a even: the same comb with x and y swapped
            cyc = _comb(b, a, lambda y, x: x + a * y)
        return [(cyc, 0.5), (_reverse(cyc), 0.5)]
    order = _snake(dims)
    return [(order, 0.5), (_reverse(order), 0.5)]


def _comb(a, b, rank):
    """Hamiltonian cycle of an a x b grid with b even: row 0 left to right, then rows 1..b-1
    snake over columns 1..a-1, then back down column 0."""
    order = [rank(x, 0) for x in range(a)]
    for y in range(1, b):
        xs = range(a - 1, 0, -1) if y % 2 == 1 else range(1, a)
        order += [rank(x, y) for x in xs]
    order += [rank(0, y) for y in range(b - 1, 0, -1)]
    return tuple(order)


def _torus2d_rings(dims):
    a, b = dims
    for swap in (False, True):
        x_n, y_n = (b, a) if swap else (a, b)
        rank = (lambda x, y: y + a * x) if swap else (lambda x, y: x + a * y)
        if x_n >= 3 and y_n >= 3 and y_n % x_n == 0:
            h1 = tuple(rank((-y + i) % x_n, y) for y in range(y_n) for i in range(x_n))
            h2 = _complement_cycle(h1, x_n, y_n, rank)
            if h2 is not None:
                return [(h1, 0.25), (_reverse(h1), 0.25), (h2, 0.25), (_reverse(h2), 0.25)]
    for swap in (False, True):
        x_n, y_n = (b, a) if swap else (a, b)
        if y_n % 2 == 0 and x_n >= 2:
            order = _snake((x_n, y_n))
            if swap:   # snake computed on (y, x) coordinates: map back to ranks
                order = tuple((r // x_n) + a * (r % x_n) for r in order)
            return [(order, 0.5), (_reverse(order), 0.5)]
    order = _snake(dims)
    return [(order, 0.5), (_reverse(order), 0.5)]


def _complement_cycle(h1, x_n, y_n, rank):
    """The undirected torus edges h1 does not use, if they form one Hamiltonian cycle."""
    n = x_n * y_n
    used = {frozenset((h1[i], h1[(i + 1) % n])) for i in range(n)}
    adj = {r: [] for r in range(n)}
    for x in range(x_n):
        for y in range(y_n):
            u = rank(x, y)
            for v in (rank((x + 1) % x_n, y), rank(x, (y + 1) % y_n)):
                if frozenset((u, v)) not in used:
                    adj[u].append(v)
                    adj[v].append(u)
    if any(len(v) != 2 for v in adj.values()):
        return None
    order = [0]
    prev, cur = None, 0
    while True:
        nxt = adj[cur][0] if adj[cur][0] != prev else adj[cur][1]
        if nxt == 0:
            break
        order.append(nxt)
        prev, cur = cur, nxt
    return tuple(order) if len(order) == n else None


def _fc_rings(n: int) -> list[tuple[tuple[int, ...], float]]:
    """Directed Hamiltonian cycles of the complete graph on n ranks (see Topology.rings)."""
    if n == 2:
        return [((0, 1), 1.0)]
    if n == 3:
        return [((0, 1, 2), 0.5), ((0, 2, 1), 0.5)]
    if n == 4:
        cycles = [(0,) + p for p in itertools.permutations((1, 2, 3))]
        return [(c, 1 / 6) for c in cycles]
    undirected = []
    if n % 2 == 1:
        m = (n - 1) // 2                       # Z_2m plus "infinity" = rank n-1
        for i in range(m):
            zig = [i]
            for j in range(1, m + 1):
                zig.append((i + j) % (2 * m))
                if len(zig) < 2 * m:
                    zig.append((i - j) % (2 * m))
            undirected.append(tuple([n - 1] + zig))
    else:
        m = n // 2                             # Z_(2m-1) plus infinity = rank n-1
        mod = 2 * m - 1
        for i in range(m - 1):
            zig = [i]
            for j in range(1, m):
                zig.append((i + j) % mod)
                zig.append((i - j) % mod)
            undirected.append(tuple([n - 1] + zig))
    share = 1.0 / (2 * len(undirected))
    out = []
    for cyc in undirected:
        cyc = _rotate_to_zero(cyc)
        out += [(cyc, share), (_reverse(cyc), share)]
    return out


def _rotate_to_zero(cyc):
    i = cyc.index(0)
    return tuple(cyc[i:] + cyc[:i])
