"""Routing over a :class:`~hw.system.topology_graph.Topology`: the nodes each message passes.

Routing is deterministic and minimal (:meth:`Topology.routes` turns these node paths into links):

* ring / mesh / torus: dimension order, x then y then z; a torus (and a ring) takes the shorter
  way round each dimension, ties go in the + direction (Dally & Towles, *Principles and Practices
  of Interconnection Networks*, 2004, ch. 14 "dimension-order routing");
* switch: rank -> switch -> rank; two-level fat tree: up to the leaf, to spine
  ``(src + dst) % n_spines`` (a deterministic stand-in for ECMP hashing), down (Leiserson 1985;
  Al-Fares et al. 2008 use the same two-level up/down paths);
* hierarchical: inside the innermost group on its own fabric, otherwise up the switch levels
  through the rank's own NIC link as far as needed and down again;
* graph (file) and any route with a switch or the host as an end: hop-shortest path by breadth-
  first search from the source; among equal paths, each node's predecessor is the lowest-id node
  one hop closer to the source. Intermediate hops may be ranks (NCCL forwards through GPUs that
  are not directly linked, e.g. on a DGX-1) or switches.

Structured kinds compute routes with numpy over all requested pairs at once (4096-rank neighbour
routes take milliseconds); graph routes run one breadth-first search per distinct source, cached.

Both path functions return ``(hops int64 [k], flat node paths)``: message i's path is its
``hops[i] + 1`` nodes, the paths one after the other.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

__all__ = ["structured_paths", "bfs_paths"]


def structured_paths(topo, s: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Paths between ranks ``s[i] -> d[i]`` (``s != d``) of a structured (non-graph) topology,
    from its kind, ``dims`` and ``params``."""
    kind = topo.kind
    if kind in ("ring", "mesh2d", "torus2d", "mesh3d", "torus3d"):
        wrap = kind in ("ring", "torus2d", "torus3d")
        return _grid_paths(s, d, topo.dims, (wrap,) * len(topo.dims))
    if kind == "fc":
        return np.ones(len(s), np.int64), np.stack([s, d], axis=1).ravel()
    if kind == "switch":
        sw = np.full(len(s), topo.params["switch"], dtype=np.int64)
        return np.full(len(s), 2, np.int64), np.stack([s, sw, d], axis=1).ravel()
    if kind == "fattree":
        return _fattree_paths(topo, s, d)
    if kind == "hierarchical":
        return _hier_paths(topo, s, d)
    raise AssertionError(kind)


def _fattree_paths(topo, s, d):
    p = topo.params
    k = p["leaf_ports"]
    ls, ld = s // k + p["leaf0"], d // k + p["leaf0"]
    same = ls == ld
    h = np.where(same, 2, 4).astype(np.int64)
    rows = np.full((len(s), 5), -1, dtype=np.int64)
    rows[:, 0] = s
    rows[:, 1] = ls
    if p["n_spines"]:
        spine = (s + d) % p["n_spines"] + p["spine0"]
    else:
        spine = np.full(len(s), -1, dtype=np.int64)
    rows[:, 2] = np.where(same, d, spine)
    rows[:, 3] = ld
    rows[:, 4] = d
    return h, _pack(rows, h)


def _hier_paths(topo, s, d):
    p = topo.params
    dims = topo.dims
    nlev = len(dims)
    strides = np.cumprod((1,) + dims[:-1])
    cs = (s[:, None] // strides) % np.array(dims)
    cd = (d[:, None] // strides) % np.array(dims)
    diff = cs != cd
    top = nlev - 1 - np.argmax(diff[:, ::-1], axis=1)      # highest differing level
    h = np.zeros(len(s), dtype=np.int64)
    parts = []
    inner = top == 0
    if inner.any():
        ii = np.flatnonzero(inner)
        k0 = dims[0]
        base = (s[ii] // k0) * k0
        kind0 = p["level_kinds"][0]
        if kind0 == "fc":
            hh = np.ones(len(ii), np.int64)
            nodes = np.stack([s[ii], d[ii]], axis=1).ravel()
        elif kind0 == "switch":
            sw = s[ii] // k0 + p["switch0"][0]
            hh = np.full(len(ii), 2, np.int64)
            nodes = np.stack([s[ii], sw, d[ii]], axis=1).ravel()
        else:   # ring inside the group
            hh, local = _grid_paths(s[ii] - base, d[ii] - base, (k0,), (True,))
            nodes = local + np.repeat(base, hh + 1)
        h[ii] = hh
        parts.append((ii, hh, nodes))
    for t in range(1, nlev):
        ii = np.flatnonzero(top == t)
        if not ii.size:
            continue
        # up: rank, level-1 switch, ..., level-t switch, down: ..., level-1 switch, rank
        rows = np.empty((len(ii), 2 * t + 1), dtype=np.int64)
        rows[:, 0] = s[ii]
        rows[:, -1] = d[ii]
        for lv in range(1, t + 1):
            span = math.prod(dims[:lv + 1])
            rows[:, lv] = s[ii] // span + p["switch0"][lv]
            rows[:, 2 * t - lv] = d[ii] // span + p["switch0"][lv]
        hh = np.full(len(ii), 2 * t, np.int64)
        h[ii] = hh
        parts.append((ii, hh, rows.ravel()))
    return h, _merge_paths(len(s), h, parts)


def _bfs_parents(topo, source: int, cache: dict) -> np.ndarray:
    cached = cache.get(source)
    if cached is not None:
        return cached
    n = topo.n_nodes
    if "_csr" not in cache:
        order = np.lexsort((topo.link_dst, topo.link_src))
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.add.at(ptr, topo.link_src.astype(np.int64) + 1, 1)
        cache["_csr"] = (np.cumsum(ptr), topo.link_dst[order].astype(np.int64))
    ptr, nbr = cache["_csr"]
    parent = np.full(n, -1, dtype=np.int64)
    parent[source] = source
    frontier = np.array([source], dtype=np.int64)
    while frontier.size:
        counts = ptr[frontier + 1] - ptr[frontier]
        owners = np.repeat(frontier, counts)
        offs = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        cand = nbr[np.repeat(ptr[frontier], counts) + offs]
        fresh = parent[cand] == -1
        cand, owners = cand[fresh], owners[fresh]
        if not cand.size:
            break
        best = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(best, cand, owners)          # lowest-id predecessor wins the tie
        frontier = np.unique(cand)
        parent[frontier] = best[frontier]
    cache[source] = parent
    return parent


def bfs_paths(topo, s, d, cache: dict):
    """Hop-shortest paths ``s[i] -> d[i]`` (``s != d``) by breadth-first search; ``cache`` (the
    topology's own dict) keeps each source's predecessor array and the adjacency."""
    h = np.zeros(len(s), dtype=np.int64)
    seqs = []
    for i, (a, b) in enumerate(zip(s.tolist(), d.tolist())):
        if topo.has_link(a, b):
            seq = [a, b]
        else:
            parent = _bfs_parents(topo, a, cache)
            if parent[b] < 0:
                raise ValueError(f"topology {topo.name!r}: no path from {topo.node_names[a]} "
                                 f"to {topo.node_names[b]}")
            seq = [b]
            while seq[-1] != a:
                seq.append(int(parent[seq[-1]]))
            seq.reverse()
        h[i] = len(seq) - 1
        seqs.append(seq)
    flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int64)
    return h, flat


def _pack(rows: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Flatten padded node rows, keeping the first h+1 entries of each row (a 2-hop fat-tree row
    is stored as (src, leaf, dst, -, -))."""
    width = rows.shape[1]
    keep = np.arange(width)[None, :] <= h[:, None]
    return rows[keep]


def _merge_paths(k: int, h: np.ndarray, parts) -> np.ndarray:
    starts = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(h + 1, out=starts[1:])
    out = np.empty(int(starts[-1]), dtype=np.int64)
    for ii, hh, nodes in parts:
        pos = np.repeat(starts[ii], hh + 1) + (
            np.arange(int((hh + 1).sum())) - np.repeat(np.cumsum(hh + 1) - (hh + 1), hh + 1))
        out[pos] = nodes
    return out


def _grid_paths(s: np.ndarray, d: np.ndarray, dims: tuple[int, ...],
                wrap: tuple[bool, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Dimension-order routes on a mesh/torus (x fastest). Returns (hops, flat node paths)."""
    nd = len(dims)
    dims_a = np.array(dims, dtype=np.int64)
    strides = np.cumprod(np.concatenate(([1], dims_a[:-1])))
    cs = (s[:, None] // strides) % dims_a
    cd = (d[:, None] // strides) % dims_a
    step = cd - cs
    for j in range(nd):
        if wrap[j]:
            fwd = (cd[:, j] - cs[:, j]) % dims_a[j]
            back = dims_a[j] - fwd
            step[:, j] = np.where(fwd <= back, fwd, -back)     # ties go +
    nsteps = np.abs(step)
    h = nsteps.sum(axis=1)
    k = len(s)
    total = int(h.sum())
    msg = np.repeat(np.arange(k), h)
    local = np.arange(total) - np.repeat(np.cumsum(h) - h, h)
    bounds = np.cumsum(nsteps, axis=1)                      # [k, nd]
    dim = (local[:, None] >= bounds[msg]).sum(axis=1)       # dimension of each hop
    before = np.where(dim > 0, bounds[msg, np.maximum(dim - 1, 0)], 0)
    t = local - before                                      # steps already taken in that dim
    coords = np.where(np.arange(nd)[None, :] < dim[:, None], cd[msg], cs[msg])
    sign = np.sign(step[msg, dim])
    cur = coords.copy()
    cur[np.arange(total), dim] = (cs[msg, dim] + sign * t) % dims_a[dim]
    a = (cur * strides).sum(axis=1)
    # node paths: for each message its hops' start nodes, then its destination
    starts = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(h + 1, out=starts[1:])
    flat = np.empty(int(starts[-1]), dtype=np.int64)
    flat[np.repeat(starts[:-1], h) + local] = a
    flat[starts[1:] - 1] = d
    return h.astype(np.int64), flat
