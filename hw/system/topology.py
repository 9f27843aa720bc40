"""Interconnect topologies of a multi-chip system: nodes, directed links, routes, ring embeddings.

A :class:`Topology` is a directed graph. Nodes ``0 .. n_ranks-1`` are the accelerators (rank r IS
node r); switches and the host follow. Every physical full-duplex link is two directed links, each
with its own nominal bandwidth per direction (``link_gbps``, GB/s = 1e9 B/s, the unit of
:mod:`hw.memory.link`), an achievable fraction (``link_efficiency``) and a per-hop latency.

Routing is deterministic and minimal (:meth:`Topology.routes`):

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

Ring embeddings (:meth:`Topology.rings`) say how the ring collectives lay out rings over the
ranks; see that method. Hierarchical groups for 2D/hierarchical algorithms come from
:meth:`Topology.levels`.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from hw.systolic.config import ConfigError
from hw.validate import read_toml

__all__ = ["TopologyError", "Topology", "KINDS", "INLINE_FORMS", "topology_from_spec",
           "topology_from_file", "topology_from_dict", "ring", "mesh2d", "torus2d", "mesh3d",
           "torus3d", "switch", "fattree", "fully_connected", "hierarchical", "with_host",
           "DEFAULT_LINK_GBPS", "DEFAULT_LINK_LATENCY_NS", "DEFAULT_LINK_EFFICIENCY", "MAX_LINKS"]


class TopologyError(ConfigError):
    """A topology spec, builder argument or graph file is invalid; the message names the source,
    the key or spec, the value and what is allowed."""


KINDS = ("ring", "mesh2d", "torus2d", "mesh3d", "torus3d", "switch", "fattree", "fc",
         "hierarchical", "graph")
INLINE_FORMS = ("ring:N", "mesh2d:AxB", "torus2d:AxB", "mesh3d:AxBxC", "torus3d:AxBxC",
                "switch:N", "fc:N", "fattree:NxK")
#: Defaults of inline specs (a generic 25 GB/s link, e.g. one NVLink2/3 link per direction).
DEFAULT_LINK_GBPS = 25.0
#: Assumed per-hop latency of an inline spec (an estimate in the 0.5-1 us range quoted for
#: NVLink/PCIe hops; not a measurement).
DEFAULT_LINK_LATENCY_NS = 500.0
DEFAULT_LINK_EFFICIENCY = 1.0
_MAX_NODES = 1 << 20
#: The most directed links a topology may have (a builder checks its closed-form link count
#: before allocating anything): 262,144 holds ring:100000 (200,000) and fc:500 (249,500) and
#: builds in seconds; fc:2000 (3,998,000) or torus3d:64x64x64 (1,572,864) are refused.
MAX_LINKS = 1 << 18


# --------------------------------------------------------------------------------------------
# the dataclass
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Topology:
    """Nodes and directed links of a multi-chip system (see the module docstring).

    ``params`` holds the structure a builder knows (fat-tree leaves, hierarchical levels); it
    drives the fast routers and is empty for graph topologies.
    """

    name: str
    kind: str
    n_ranks: int
    node_names: tuple[str, ...]
    node_kinds: tuple[str, ...]
    host: int | None
    link_src: np.ndarray
    link_dst: np.ndarray
    link_gbps: np.ndarray
    link_efficiency: np.ndarray
    link_latency_ns: np.ndarray
    dims: tuple[int, ...]
    link_names: tuple[str, ...]
    params: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        where = f"topology {self.name!r}"
        if self.kind not in KINDS:
            raise TopologyError(f"{where}: kind = {self.kind!r}: must be one of {', '.join(KINDS)}")
        n_nodes = len(self.node_names)
        if not isinstance(self.n_ranks, (int, np.integer)) or not 1 <= self.n_ranks <= n_nodes:
            raise TopologyError(f"{where}: n_ranks = {self.n_ranks!r}: must be an integer in "
                                f"1..{n_nodes} (the number of nodes)")
        if len(self.node_kinds) != n_nodes:
            raise TopologyError(f"{where}: {len(self.node_kinds)} node kinds for {n_nodes} nodes")
        for i, k in enumerate(self.node_kinds):
            want = ("rank",) if i < self.n_ranks else ("switch", "host")
            if k not in want:
                raise TopologyError(f"{where}: node {i} ({self.node_names[i]}) kind {k!r}: must be "
                                    f"{' or '.join(want)} (ranks come first)")
        hosts = [i for i, k in enumerate(self.node_kinds) if k == "host"]
        if hosts != ([] if self.host is None else [self.host]):
            raise TopologyError(f"{where}: host = {self.host!r} but host nodes are {hosts}")
        if len(set(self.node_names)) != n_nodes:
            raise TopologyError(f"{where}: node names are not unique")
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen dataclass)
        src = np.ascontiguousarray(self.link_src, dtype=np.int32)
        dst = np.ascontiguousarray(self.link_dst, dtype=np.int32)
        L = len(src)
        arrays = {"link_gbps": self.link_gbps, "link_efficiency": self.link_efficiency,
                  "link_latency_ns": self.link_latency_ns}
        _check_links(where, L)
        conv = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in arrays.items()}
        if len(dst) != L or any(len(v) != L for v in conv.values()) or len(self.link_names) != L:
            raise TopologyError(f"{where}: link arrays have different lengths")
        if L and (src.min() < 0 or dst.min() < 0 or max(src.max(), dst.max()) >= n_nodes):
            raise TopologyError(f"{where}: a link names a node outside 0..{n_nodes - 1}")
        if np.any(src == dst):
            i = int(np.flatnonzero(src == dst)[0])
            raise TopologyError(f"{where}: link {self.link_names[i]} connects a node to itself")
        if not np.all(np.isfinite(conv["link_gbps"]) & (conv["link_gbps"] > 0)):
            raise TopologyError(f"{where}: link_gbps must be finite numbers > 0")
        eff = conv["link_efficiency"]
        if not np.all((eff > 0) & (eff <= 1)):
            raise TopologyError(f"{where}: link_efficiency must be in (0, 1]")
        lat = conv["link_latency_ns"]
        if not np.all(np.isfinite(lat) & (lat >= 0)):
            raise TopologyError(f"{where}: link_latency_ns must be finite numbers >= 0")
        keys = src.astype(np.int64) * n_nodes + dst
        order = np.argsort(keys, kind="stable")
        skeys = keys[order]
        if L > 1 and np.any(skeys[1:] == skeys[:-1]):
            i = int(order[1:][skeys[1:] == skeys[:-1]][0])
            raise TopologyError(f"{where}: two directed links {self.node_names[src[i]]}->"
                                f"{self.node_names[dst[i]]}; merge them (a graph file uses "
                                f"count = k for k parallel links)")
        dims = tuple(int(d) for d in self.dims)
        if math.prod(dims) != self.n_ranks:
            raise TopologyError(f"{where}: dims {dims} do not multiply to n_ranks = {self.n_ranks}")
        for name, arr in (("link_src", src), ("link_dst", dst), *conv.items()):
            arr.setflags(write=False)
            set_(name, arr)
        set_("dims", dims)
        set_("n_ranks", int(self.n_ranks))
        set_("_keys", skeys)
        set_("_order", order.astype(np.int32))
        set_("_bfs", {})

    # ----------------------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    @property
    def n_links(self) -> int:
        return len(self.link_src)

    @property
    def link_bytes_per_s(self) -> np.ndarray:
        """Achievable bytes per second of each directed link: gbps x efficiency x 1e9."""
        return self.link_gbps * self.link_efficiency * 1e9

    def link_ids(self, src, dst) -> np.ndarray:
        """Directed link id of each (src, dst) node pair; a pair without a link is an error."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        keys = src * self.n_nodes + dst
        pos = np.searchsorted(self._keys, keys)
        pos_c = np.minimum(pos, max(len(self._keys) - 1, 0))
        ok = (pos < len(self._keys)) & (self._keys[pos_c] == keys) if len(self._keys) else (
            np.zeros(len(keys), dtype=bool))
        if not np.all(ok):
            i = int(np.flatnonzero(~ok)[0])
            raise ValueError(f"topology {self.name!r}: no link {self.node_names[src[i]]}->"
                             f"{self.node_names[dst[i]]}")
        return self._order[pos_c].astype(np.int32)

    def has_link(self, src: int, dst: int) -> bool:
        key = int(src) * self.n_nodes + int(dst)
        pos = int(np.searchsorted(self._keys, key))
        return pos < len(self._keys) and int(self._keys[pos]) == key

    # ----------------------------------------------------------------------------------------
    def routes(self, src, dst) -> tuple[np.ndarray, np.ndarray]:
        """The directed links each message ``src[i] -> dst[i]`` crosses, in order, as CSR:
        ``(ptr int64 [k+1], links int32 [ptr[-1]])``. ``src == dst`` gives an empty route."""
        src = np.atleast_1d(np.asarray(src))
        dst = np.atleast_1d(np.asarray(dst))
        if src.shape != dst.shape or src.ndim != 1:
            raise ValueError(f"routes: src and dst must be 1-D arrays of the same length, got "
                             f"shapes {src.shape} and {dst.shape}")
        if src.size and (not np.issubdtype(src.dtype, np.integer)
                         or not np.issubdtype(dst.dtype, np.integer)):
            raise ValueError("routes: src and dst must be integer node ids")
        src = src.astype(np.int64)
        dst = dst.astype(np.int64)
        n = self.n_nodes
        if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
            raise ValueError(f"routes: node ids must be in 0..{n - 1} (topology {self.name!r})")
        k = len(src)
        nhops = np.zeros(k, dtype=np.int64)
        paths = []      # (message indices, hops, flat node paths)
        moving = src != dst
        structured = moving & (src < self.n_ranks) & (dst < self.n_ranks)
        if self.kind == "graph":
            structured[:] = False
        idx = np.flatnonzero(structured)
        if idx.size:
            h, nodes = self._structured(src[idx], dst[idx])
            nhops[idx] = h
            paths.append((idx, h, nodes))
        rest = np.flatnonzero(moving & ~structured)
        if rest.size:
            h, nodes = self._graph_paths(src[rest], dst[rest])
            nhops[rest] = h
            paths.append((rest, h, nodes))
        ptr = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(nhops, out=ptr[1:])
        links = np.empty(int(ptr[-1]), dtype=np.int32)
        for idx, h, nodes in paths:
            # consecutive node pairs inside each path (a path of h hops has h + 1 nodes)
            starts = np.zeros(len(h) + 1, dtype=np.int64)
            np.cumsum(h + 1, out=starts[1:])
            first = np.repeat(starts[:-1], h)
            within = np.arange(int(h.sum())) - np.repeat(np.cumsum(h) - h, h)
            a = nodes[first + within]
            b = nodes[first + within + 1]
            ids = self.link_ids(a, b)
            out = np.repeat(ptr[idx], h) + within
            links[out] = ids
        return ptr, links

    def _structured(self, s: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        kind = self.kind
        if kind in ("ring", "mesh2d", "torus2d", "mesh3d", "torus3d"):
            wrap = kind in ("ring", "torus2d", "torus3d")
            return _grid_paths(s, d, self.dims, (wrap,) * len(self.dims))
        if kind == "fc":
            return np.ones(len(s), np.int64), np.stack([s, d], axis=1).ravel()
        if kind == "switch":
            sw = np.full(len(s), self.params["switch"], dtype=np.int64)
            return np.full(len(s), 2, np.int64), np.stack([s, sw, d], axis=1).ravel()
        if kind == "fattree":
            return self._fattree_paths(s, d)
        if kind == "hierarchical":
            return self._hier_paths(s, d)
        raise AssertionError(kind)

    def _fattree_paths(self, s, d):
        p = self.params
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

    def _hier_paths(self, s, d):
        p = self.params
        dims = self.dims
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

    def _bfs_parents(self, source: int) -> np.ndarray:
        cached = self._bfs.get(source)
        if cached is not None:
            return cached
        n = self.n_nodes
        if "_csr" not in self._bfs:
            order = np.lexsort((self.link_dst, self.link_src))
            ptr = np.zeros(n + 1, dtype=np.int64)
            np.add.at(ptr, self.link_src.astype(np.int64) + 1, 1)
            self._bfs["_csr"] = (np.cumsum(ptr), self.link_dst[order].astype(np.int64))
        ptr, nbr = self._bfs["_csr"]
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
        self._bfs[source] = parent
        return parent

    def _graph_paths(self, s, d):
        h = np.zeros(len(s), dtype=np.int64)
        seqs = []
        for i, (a, b) in enumerate(zip(s.tolist(), d.tolist())):
            if self.has_link(a, b):
                seq = [a, b]
            else:
                parent = self._bfs_parents(a)
                if parent[b] < 0:
                    raise ValueError(f"topology {self.name!r}: no path from {self.node_names[a]} "
                                     f"to {self.node_names[b]}")
                seq = [b]
                while seq[-1] != a:
                    seq.append(int(parent[seq[-1]]))
                seq.reverse()
            h[i] = len(seq) - 1
            seqs.append(seq)
        flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int64)
        return h, flat

    # ----------------------------------------------------------------------------------------
    def rings(self, group: tuple[int, ...] | None = None) -> list[tuple[tuple[int, ...], float]]:
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
        full = tuple(range(self.n_ranks))
        if group is None:
            group = full
        group = tuple(int(g) for g in group)
        if (not group or len(set(group)) != len(group) or min(group) < 0
                or max(group) >= self.n_ranks):
            raise ValueError(f"rings: group {group!r}: must be distinct ranks in "
                             f"0..{self.n_ranks - 1}")
        if len(group) == 1:
            return [(group, 1.0)]
        if self.kind == "fc":
            return [(tuple(group[i] for i in order), share)
                    for order, share in _fc_rings(len(group))]
        if group == full and len(group) > 2:
            rings = None
            if self.kind == "torus2d":
                rings = _torus2d_rings(self.dims)
            elif self.kind == "mesh2d":
                rings = _mesh2d_rings(self.dims)
            elif self.kind in ("mesh3d", "torus3d"):
                order = _snake(self.dims)
                rings = [(order, 0.5), (_reverse(order), 0.5)]
            if rings is not None:
                return rings
        rev = _reverse(group)
        if len(group) > 2 and not (set(self._ring_links(group)) & set(self._ring_links(rev))):
            return [(group, 0.5), (rev, 0.5)]
        return [(group, 1.0)]

    def _ring_links(self, order: tuple[int, ...]) -> np.ndarray:
        a = np.array(order, dtype=np.int64)
        return self.routes(a, np.roll(a, -1))[1].tolist()

    def levels(self) -> list[list[tuple[int, ...]]]:
        """Groups for hierarchical algorithms, innermost level first. Mesh/torus/hierarchical:
        one level per dimension (level l = ranks that differ only in coordinate l, x fastest);
        fat tree with more than one leaf: ranks of a leaf, then ranks with the same port index
        across leaves (when the leaves are full); flat topologies: [[all ranks]]. Levels whose
        groups have one rank are left out."""
        dims = self.dims
        if self.kind == "fattree" and self.params["n_leaves"] > 1 and (
                self.n_ranks % self.params["leaf_ports"] == 0):
            dims = (self.params["leaf_ports"], self.params["n_leaves"])
        elif self.kind not in ("mesh2d", "torus2d", "mesh3d", "torus3d", "hierarchical"):
            return [[tuple(range(self.n_ranks))]]
        out = []
        ranks = np.arange(self.n_ranks).reshape(dims[::-1])     # [.., y, x]
        for lv in range(len(dims)):
            if dims[lv] == 1:
                continue
            axis = len(dims) - 1 - lv
            moved = np.moveaxis(ranks, axis, -1).reshape(-1, dims[lv])
            groups = sorted(tuple(int(r) for r in row) for row in moved)
            out.append(groups)
        return out or [[tuple(range(self.n_ranks))]]

    def injection_bytes_per_s(self, rank: int) -> float:
        """Sum of the achievable bandwidth of the rank's outgoing links, bytes/s (links to the
        host are not counted: they carry host traffic, not collectives)."""
        if not 0 <= int(rank) < self.n_ranks:
            raise ValueError(f"injection_bytes_per_s: rank {rank!r}: must be in "
                             f"0..{self.n_ranks - 1}")
        mask = self.link_src == int(rank)
        if self.host is not None:
            mask &= self.link_dst != self.host
        return float(self.link_bytes_per_s[mask].sum())

    def describe(self) -> dict:
        """A JSON-able summary: kind, ranks, switches, links, injection and bisection bandwidth
        (achievable GB/s in one direction; bisection is a closed form for the regular kinds and
        ``None`` for hierarchical and graph topologies)."""
        bw = self.link_gbps * self.link_efficiency
        return {
            "name": self.name, "kind": self.kind, "ranks": self.n_ranks,
            "switches": self.node_kinds.count("switch"),
            "host": None if self.host is None else self.node_names[self.host],
            "dims": list(self.dims), "directed_links": self.n_links,
            "link_gbps_min": float(self.link_gbps.min()) if self.n_links else 0.0,
            "link_gbps_max": float(self.link_gbps.max()) if self.n_links else 0.0,
            "injection_gbps": self.injection_bytes_per_s(0) / 1e9,
            "bisection_gbps": self._bisection(bw),
        }

    def _bisection(self, bw: np.ndarray) -> float | None:
        n = self.n_ranks
        if n < 2 or not self.n_links:
            return None
        rank_links = np.ones(self.n_links, dtype=bool)
        if self.host is not None:
            rank_links = (self.link_src != self.host) & (self.link_dst != self.host)
        b = float(bw[rank_links].min())
        kind = self.kind
        if kind == "ring":
            return (2 if n > 2 else 1) * b
        if kind in ("mesh2d", "mesh3d", "torus2d", "torus3d"):
            longest = max(self.dims)
            wraps = 2 if kind.startswith("torus") and longest > 2 else 1
            return wraps * (n // longest) * b
        if kind == "switch":
            return (n // 2) * b
        if kind == "fc":
            return (n // 2) * (n - n // 2) * b
        if kind == "fattree":
            p = self.params
            down = (n // 2) * b
            if p["n_spines"] == 0:
                return down
            return min(down, (p["n_leaves"] // 2) * p["n_spines"] * b)
        return None


# --------------------------------------------------------------------------------------------
# path helpers (numpy)
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# builders
# --------------------------------------------------------------------------------------------

def _check_count(name: str, value, lo: int = 1) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or (
            value < lo) or value > _MAX_NODES:
        raise TopologyError(f"{name} = {value!r}: must be an integer in {lo}..{_MAX_NODES}")
    return int(value)


def _check_links(where: str, n_links: int) -> None:
    """Refuse a topology of more than MAX_LINKS directed links (called with the closed-form
    count before a builder allocates its links)."""
    if n_links > MAX_LINKS:
        raise TopologyError(f"{where}: {n_links:,} directed links; the simulator takes at most "
                            f"{MAX_LINKS:,} (fewer ranks, or a switch/fattree instead of fc)")


def _link_params(where: str, gbps, latency_ns, efficiency) -> tuple[float, float, float]:
    gbps = DEFAULT_LINK_GBPS if gbps is None else gbps
    latency_ns = DEFAULT_LINK_LATENCY_NS if latency_ns is None else latency_ns
    efficiency = DEFAULT_LINK_EFFICIENCY if efficiency is None else efficiency
    for key, v, ok, allowed in (
            ("gbps", gbps, lambda v: 0 < v < math.inf, "a number > 0 (GB/s per direction)"),
            ("latency_ns", latency_ns, lambda v: 0 <= v < math.inf, "a number >= 0"),
            ("efficiency", efficiency, lambda v: 0 < v <= 1, "a number in (0, 1]")):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer,
                                                                 np.floating)) or not ok(v):
            raise TopologyError(f"{where}: {key} = {v!r}: must be {allowed}")
    return float(gbps), float(latency_ns), float(efficiency)


class _Builder:
    """Collects nodes and full-duplex links, then makes a Topology."""

    def __init__(self, n_ranks: int, rank_names=None):
        self.names = list(rank_names or (f"r{i}" for i in range(n_ranks)))
        self.kinds = ["rank"] * n_ranks
        self.links: dict[tuple[int, int], list[float]] = {}
        self.host = None

    def node(self, name: str, kind: str) -> int:
        self.names.append(name)
        self.kinds.append(kind)
        if kind == "host":
            self.host = len(self.names) - 1
        return len(self.names) - 1

    def duplex(self, a, b, gbps, lat, eff, duplex=True):
        for u, v in ((a, b), (b, a)) if duplex else ((a, b),):
            if (u, v) not in self.links:        # e.g. a size-2 torus wrap = the direct link
                self.links[(int(u), int(v))] = [gbps, lat, eff]

    def build(self, name, kind, n_ranks, dims, params=None) -> Topology:
        pairs = list(self.links)
        vals = np.array([self.links[p] for p in pairs], dtype=np.float64).reshape(-1, 3)
        src = np.array([p[0] for p in pairs], dtype=np.int32)
        dst = np.array([p[1] for p in pairs], dtype=np.int32)
        return Topology(name=name, kind=kind, n_ranks=n_ranks, node_names=tuple(self.names),
                        node_kinds=tuple(self.kinds), host=self.host, link_src=src, link_dst=dst,
                        link_gbps=vals[:, 0], link_efficiency=vals[:, 2],
                        link_latency_ns=vals[:, 1], dims=tuple(dims),
                        link_names=tuple(f"{self.names[a]}->{self.names[b]}" for a, b in pairs),
                        params=dict(params or {}))


def _grid(kind: str, dims: tuple[int, ...], gbps, latency_ns, efficiency, name) -> Topology:
    where = name or f"{kind}:{'x'.join(str(d) for d in dims)}"
    dims = tuple(_check_count(f"{where}: dimension", d) for d in dims)
    n = _check_count(f"{where}: ranks", math.prod(dims))
    g, lat, eff = _link_params(where, gbps, latency_ns, efficiency)
    wrap = kind in ("ring", "torus2d", "torus3d")
    _check_links(where, sum(2 * (n if d > 2 else n // 2) if wrap else 2 * (n // d) * (d - 1)
                            for d in dims))
    b = _Builder(n)
    strides = np.cumprod((1,) + dims[:-1])
    ranks = np.arange(n)
    for j, size in enumerate(dims):
        c = (ranks // strides[j]) % size
        ok = (c + 1 < size) if not wrap else np.full(n, size > 1)
        nb = ranks + (((c + 1) % size) - c) * strides[j]
        for u, v in zip(ranks[ok].tolist(), nb[ok].tolist()):
            b.duplex(u, v, g, lat, eff)
    return b.build(where, kind, n, dims)


def ring(n: int, *, gbps=None, latency_ns=None, efficiency=None, name=None) -> Topology:
    """N ranks on a bidirectional ring (rank i <-> i+1 mod N)."""
    return _grid("ring", (_check_count(f"{name or 'ring'}: N", n),), gbps, latency_ns,
                 efficiency, name or f"ring:{n}")


def mesh2d(a: int, b: int, **kw) -> Topology:
    """An a x b 2D mesh (x fastest: rank = x + a*y), links to the 4 neighbours."""
    return _grid("mesh2d", (a, b), kw.get("gbps"), kw.get("latency_ns"), kw.get("efficiency"),
                 kw.get("name"))


def torus2d(a: int, b: int, **kw) -> Topology:
    """An a x b 2D torus (mesh plus wraparound links)."""
    return _grid("torus2d", (a, b), kw.get("gbps"), kw.get("latency_ns"), kw.get("efficiency"),
                 kw.get("name"))


def mesh3d(a: int, b: int, c: int, **kw) -> Topology:
    """An a x b x c 3D mesh (rank = x + a*(y + b*z))."""
    return _grid("mesh3d", (a, b, c), kw.get("gbps"), kw.get("latency_ns"),
                 kw.get("efficiency"), kw.get("name"))


def torus3d(a: int, b: int, c: int, **kw) -> Topology:
    """An a x b x c 3D torus."""
    return _grid("torus3d", (a, b, c), kw.get("gbps"), kw.get("latency_ns"),
                 kw.get("efficiency"), kw.get("name"))


def switch(n: int, *, gbps=None, latency_ns=None, efficiency=None, name=None) -> Topology:
    """N ranks each with one link (``gbps`` per direction) to one non-blocking switch (a star;
    e.g. NVSwitch, whose several chips act as one crossbar). A route is rank -> switch -> rank,
    two hops of ``latency_ns`` each."""
    where = name or f"switch:{n}"
    n = _check_count(f"{where}: N", n)
    g, lat, eff = _link_params(where, gbps, latency_ns, efficiency)
    _check_links(where, 2 * n)
    b = _Builder(n)
    sw = b.node("sw0", "switch")
    for r in range(n):
        b.duplex(r, sw, g, lat, eff)
    return b.build(where, "switch", n, (n,), {"switch": sw})


def fattree(n: int, leaf_ports: int, *, oversubscription: float = 1.0, gbps=None,
            latency_ns=None, efficiency=None, name=None) -> Topology:
    """Two-level fat tree (folded Clos): leaf switch i serves ranks i*K .. i*K+K-1 (K =
    ``leaf_ports`` down-ports); each leaf has U = K / ``oversubscription`` up-links, one to each
    of U spine switches, all links ``gbps``. Oversubscription 1 = full bisection (Leiserson
    1985; Al-Fares et al. 2008). One leaf: no spines."""
    where = name or f"fattree:{n}x{leaf_ports}"
    n = _check_count(f"{where}: N", n)
    k = _check_count(f"{where}: leaf_ports", leaf_ports)
    if isinstance(oversubscription, bool) or not isinstance(oversubscription, (int, float)) or (
            not oversubscription >= 1) or not math.isfinite(oversubscription):
        raise TopologyError(f"{where}: oversubscription = {oversubscription!r}: must be a number "
                            f">= 1")
    ups = k / oversubscription
    if abs(ups - round(ups)) > 1e-9 or round(ups) < 1:
        raise TopologyError(f"{where}: oversubscription = {oversubscription!r}: leaf_ports / "
                            f"oversubscription = {ups:g} must be a whole number >= 1 (up-links "
                            f"per leaf)")
    g, lat, eff = _link_params(where, gbps, latency_ns, efficiency)
    n_leaves = -(-n // k)
    n_spines = int(round(ups)) if n_leaves > 1 else 0
    _check_links(where, 2 * n + 2 * n_leaves * n_spines)
    b = _Builder(n)
    leaf0 = len(b.names)
    for i in range(n_leaves):
        b.node(f"leaf{i}", "switch")
    spine0 = len(b.names)
    for j in range(n_spines):
        b.node(f"spine{j}", "switch")
    for r in range(n):
        b.duplex(r, leaf0 + r // k, g, lat, eff)
    for i in range(n_leaves):
        for j in range(n_spines):
            b.duplex(leaf0 + i, spine0 + j, g, lat, eff)
    return b.build(where, "fattree", n, (n,), {"leaf_ports": k, "n_leaves": n_leaves,
                                                "n_spines": n_spines, "leaf0": leaf0,
                                                "spine0": spine0,
                                                "oversubscription": float(oversubscription)})


def fully_connected(n: int, links_per_pair: int = 1, *, gbps=None, latency_ns=None,
                    efficiency=None, name=None) -> Topology:
    """N ranks with a direct link between every pair; ``links_per_pair`` parallel links act as
    one link of ``links_per_pair x gbps`` (e.g. 4 NVLink3 links per pair on HGX A100 4-GPU)."""
    where = name or f"fc:{n}"
    n = _check_count(f"{where}: N", n)
    lpp = _check_count(f"{where}: links_per_pair", links_per_pair)
    g, lat, eff = _link_params(where, gbps, latency_ns, efficiency)
    _check_links(where, n * (n - 1))
    b = _Builder(n)
    for u in range(n):
        for v in range(u + 1, n):
            b.duplex(u, v, g * lpp, lat, eff)
    return b.build(where, "fc", n, (n,), {"links_per_pair": lpp})


def hierarchical(levels: Sequence, *, name: str | None = None) -> Topology:
    """Multi-level system, innermost level first. ``levels`` is a list of ``(count, kind)`` or
    ``(count, kind, {"gbps": .., "latency_ns": .., "efficiency": ..})``:

    * level 0: groups of ``count`` ranks on their own fabric, kind ``switch`` (one switch per
      group, e.g. the NVSwitch of an 8-GPU node), ``ring`` or ``fc``;
    * level l >= 1, kind ``switch``: groups of ``count`` level-(l-1) groups share a level-l
      switch. At level 1 every rank has its own NIC link (``gbps``) to it; at level l >= 2 each
      level-(l-1) switch has one up-link of ``gbps`` x (ranks below it), i.e. the tree is non-
      blocking (a rail-less fat tree model).

    ``dims`` = the counts, innermost first; rank = local index + count0 x (group index) ...
    """
    where = name or "hierarchical"
    if not isinstance(levels, (list, tuple)) or not levels:
        raise TopologyError(f"{where}: levels = {levels!r}: must be a non-empty list of "
                            f"(count, kind[, link params])")
    counts, kinds, lp = [], [], []
    for i, lv in enumerate(levels):
        if not isinstance(lv, (list, tuple)) or len(lv) not in (2, 3):
            raise TopologyError(f"{where}: levels[{i}] = {lv!r}: must be (count, kind) or "
                                f"(count, kind, {{gbps, latency_ns, efficiency}})")
        count = _check_count(f"{where}: levels[{i}].count", lv[0])
        kind = lv[1]
        allowed = ("switch", "ring", "fc") if i == 0 else ("switch",)
        if kind not in allowed:
            raise TopologyError(f"{where}: levels[{i}].kind = {kind!r}: must be one of "
                                f"{', '.join(allowed)}")
        params = dict(lv[2]) if len(lv) == 3 else {}
        unknown = set(params) - {"gbps", "latency_ns", "efficiency"}
        if unknown:
            raise TopologyError(f"{where}: levels[{i}]: unknown link keys {sorted(unknown)}; "
                                f"allowed: gbps, latency_ns, efficiency")
        lp.append(_link_params(f"{where}: levels[{i}]", params.get("gbps"),
                               params.get("latency_ns"), params.get("efficiency")))
        counts.append(count)
        kinds.append(kind)
    n = _check_count(f"{where}: ranks", math.prod(counts))
    _check_links(where, (n * (counts[0] - 1) if kinds[0] == "fc" else 2 * n)
                 + 2 * n * (len(counts) - 1))
    b = _Builder(n)
    switch0 = [0] * len(counts)
    k0 = counts[0]
    g, lat, eff = lp[0]
    if kinds[0] == "switch":
        switch0[0] = len(b.names)
        for grp in range(n // k0):
            b.node(f"g{grp}.sw", "switch")
    for grp in range(n // k0):
        base = grp * k0
        if kinds[0] == "switch":
            for r in range(base, base + k0):
                b.duplex(r, switch0[0] + grp, g, lat, eff)
        elif kinds[0] == "ring":
            for i in range(k0 if k0 > 2 else k0 - 1):
                b.duplex(base + i, base + (i + 1) % k0, g, lat, eff)
        else:
            for u in range(base, base + k0):
                for v in range(u + 1, base + k0):
                    b.duplex(u, v, g, lat, eff)
    for lv in range(1, len(counts)):
        span = math.prod(counts[:lv + 1])
        switch0[lv] = len(b.names)
        for grp in range(n // span):
            b.node(f"net{lv}.{grp}", "switch")
        g, lat, eff = lp[lv]
        if lv == 1:
            for r in range(n):
                b.duplex(r, switch0[1] + r // span, g, lat, eff)
        else:
            below = math.prod(counts[:lv])
            for grp in range(n // below):
                b.duplex(switch0[lv - 1] + grp, switch0[lv] + (grp * below) // span,
                         g * below, lat, eff)
    return b.build(where, "hierarchical", n, tuple(counts),
                   {"level_kinds": tuple(kinds), "switch0": tuple(switch0)})


def with_host(topo: Topology, *, gbps: float, latency_ns: float = DEFAULT_LINK_LATENCY_NS,
              efficiency: float = 1.0, attach: str = "ranks", name: str = "host") -> Topology:
    """The topology plus a host node: ``attach="ranks"`` gives the host one full-duplex link to
    every rank (e.g. a PCIe x16 link per GPU), ``attach="switch"`` one link to the topology's
    switch (``switch`` kind only; e.g. the host port of a PCIe switch)."""
    where = f"{topo.name}: host"
    g, lat, eff = _link_params(where, gbps, latency_ns, efficiency)
    if topo.host is not None:
        raise TopologyError(f"{where}: the topology already has a host")
    if attach not in ("ranks", "switch"):
        raise TopologyError(f"{where}: attach = {attach!r}: must be 'ranks' or 'switch'")
    if attach == "switch" and topo.kind != "switch":
        raise TopologyError(f"{where}: attach = 'switch' needs a switch topology, not "
                            f"{topo.kind!r}")
    hid = topo.n_nodes
    targets = list(range(topo.n_ranks)) if attach == "ranks" else [topo.params["switch"]]
    src = [hid] * len(targets) + targets
    dst = targets + [hid] * len(targets)
    names = topo.node_names + (name,)
    m = 2 * len(targets)
    return Topology(
        name=topo.name, kind=topo.kind, n_ranks=topo.n_ranks, node_names=names,
        node_kinds=topo.node_kinds + ("host",), host=hid,
        link_src=np.concatenate([topo.link_src, np.array(src, np.int32)]),
        link_dst=np.concatenate([topo.link_dst, np.array(dst, np.int32)]),
        link_gbps=np.concatenate([topo.link_gbps, np.full(m, g)]),
        link_efficiency=np.concatenate([topo.link_efficiency, np.full(m, eff)]),
        link_latency_ns=np.concatenate([topo.link_latency_ns, np.full(m, lat)]),
        dims=topo.dims,
        link_names=topo.link_names + tuple(f"{names[a]}->{names[b]}" for a, b in zip(src, dst)),
        params=dict(topo.params))


# --------------------------------------------------------------------------------------------
# inline specs and graph files
# --------------------------------------------------------------------------------------------

_SPEC = re.compile(r"^(ring|switch|fc|mesh2d|torus2d|mesh3d|torus3d|fattree):(\d+(?:x\d+)*)$")
_ARITY = {"ring": 1, "switch": 1, "fc": 1, "mesh2d": 2, "torus2d": 2, "mesh3d": 3, "torus3d": 3,
          "fattree": 2}


def topology_from_spec(spec: str, *, link_gbps=None, link_latency_ns=None,
                       link_efficiency=None) -> Topology:
    """An inline topology: ``ring:N``, ``mesh2d:AxB``, ``torus2d:AxB``, ``mesh3d:AxBxC``,
    ``torus3d:AxBxC``, ``switch:N``, ``fc:N``, ``fattree:NxK``. Link defaults: 25 GB/s per
    direction, 500 ns per hop, efficiency 1."""
    text = spec.strip().lower() if isinstance(spec, str) else spec
    m = _SPEC.match(text) if isinstance(text, str) else None
    bad = (f"topology spec {spec!r}: must be one of {', '.join(INLINE_FORMS)} "
           f"(N, A, B, C, K integers >= 1)")
    if not m:
        raise TopologyError(bad)
    kind, nums = m.group(1), [int(x) for x in m.group(2).split("x")]
    if len(nums) != _ARITY[kind] or min(nums) < 1:
        raise TopologyError(bad)
    kw = dict(gbps=link_gbps, latency_ns=link_latency_ns, efficiency=link_efficiency,
              name=text)
    if kind in ("ring", "mesh2d", "torus2d", "mesh3d", "torus3d"):
        return _grid(kind, tuple(nums), link_gbps, link_latency_ns, link_efficiency, text)
    if kind == "switch":
        return switch(nums[0], **kw)
    if kind == "fc":
        return fully_connected(nums[0], **kw)
    return fattree(nums[0], nums[1], **kw)


_NODE_KEYS = ("name", "kind")
_LINK_KEYS = ("a", "b", "gbps", "latency_ns", "efficiency", "count", "duplex")
_GRAPH_SECTIONS = ("graph", "defaults", "nodes", "links")


def topology_from_file(path) -> Topology:
    """A graph topology from a TOML file::

        [graph]
        name = "my-box"              # optional; default the file stem
        [defaults]                   # optional link defaults: gbps, latency_ns, efficiency
        gbps = 25.0
        [[nodes]]
        name = "gpu0"
        kind = "rank"                # rank | switch | host (at most one host)
        [[links]]
        a = "gpu0"
        b = "gpu1"
        count = 2                    # parallel links: bandwidth count x gbps (default 1)
        duplex = true                # false: only a -> b (default true)

    Ranks are numbered in file order, then the other nodes follow. Errors name the file and key.
    """
    where = str(path)
    data = read_toml(path)
    return topology_from_dict(data, where, default_name=Path(path).stem)


def topology_from_dict(data: Mapping, where: str, default_name: str = "graph") -> Topology:
    """A graph topology from parsed TOML (see :func:`topology_from_file`)."""
    for key in data:
        if key not in _GRAPH_SECTIONS:
            raise TopologyError(f"{where}: [{key}]: unknown section; allowed: "
                                f"{', '.join(_GRAPH_SECTIONS)}")
    graph = data.get("graph", {})
    if not isinstance(graph, dict) or set(graph) - {"name"}:
        raise TopologyError(f"{where}: [graph] may only hold name = \"...\"")
    name = graph.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise TopologyError(f"{where}: graph.name = {name!r}: must be a non-empty string")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise TopologyError(f"{where}: defaults = {defaults!r}: must be a table")
    for key in defaults:
        if key not in ("gbps", "latency_ns", "efficiency"):
            raise TopologyError(f"{where}: defaults.{key}: unknown key; allowed: gbps, "
                                f"latency_ns, efficiency")
    nodes = data.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise TopologyError(f"{where}: nodes: missing or empty; list the nodes as [[nodes]] "
                            f"tables with name and kind")
    ranks, others = [], []
    seen: set[str] = set()
    for i, nd in enumerate(nodes):
        key = f"nodes[{i}]"
        if not isinstance(nd, dict):
            raise TopologyError(f"{where}: {key} = {nd!r}: must be a table with name and kind")
        for k in nd:
            if k not in _NODE_KEYS:
                raise TopologyError(f"{where}: {key}.{k}: unknown key; allowed: name, kind")
        nm, kind = nd.get("name"), nd.get("kind", "rank")
        if not isinstance(nm, str) or not nm:
            raise TopologyError(f"{where}: {key}.name = {nm!r}: must be a non-empty string")
        if nm in seen:
            raise TopologyError(f"{where}: {key}.name = {nm!r}: duplicate node name")
        seen.add(nm)
        if kind not in ("rank", "switch", "host"):
            raise TopologyError(f"{where}: {key}.kind = {kind!r}: must be one of rank, switch, "
                                f"host")
        (ranks if kind == "rank" else others).append((nm, kind))
    if not ranks:
        raise TopologyError(f"{where}: nodes: no node has kind = \"rank\"")
    if sum(k == "host" for _, k in others) > 1:
        raise TopologyError(f"{where}: nodes: more than one host")
    b = _Builder(len(ranks), [nm for nm, _ in ranks])
    for nm, kind in others:
        b.node(nm, kind)
    ids = {nm: i for i, nm in enumerate(b.names)}
    links = data.get("links")
    if not isinstance(links, list) or not links:
        raise TopologyError(f"{where}: links: missing or empty; list the links as [[links]] "
                            f"tables with a, b (node names)")
    for i, ln in enumerate(links):
        key = f"links[{i}]"
        if not isinstance(ln, dict):
            raise TopologyError(f"{where}: {key} = {ln!r}: must be a table")
        for k in ln:
            if k not in _LINK_KEYS:
                raise TopologyError(f"{where}: {key}.{k}: unknown key; allowed: "
                                    f"{', '.join(_LINK_KEYS)}")
        ends = []
        for end in ("a", "b"):
            v = ln.get(end)
            if v not in ids:
                raise TopologyError(f"{where}: {key}.{end} = {v!r}: must name a node "
                                    f"({', '.join(b.names)})")
            ends.append(ids[v])
        if ends[0] == ends[1]:
            raise TopologyError(f"{where}: {key}: a and b are the same node {ln['a']!r}")
        g, lat, eff = _link_params(f"{where}: {key}", ln.get("gbps", defaults.get("gbps")),
                                   ln.get("latency_ns", defaults.get("latency_ns")),
                                   ln.get("efficiency", defaults.get("efficiency")))
        count = ln.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1024:
            raise TopologyError(f"{where}: {key}.count = {count!r}: must be an integer in "
                                f"1..1024")
        duplex = ln.get("duplex", True)
        if not isinstance(duplex, bool):
            raise TopologyError(f"{where}: {key}.duplex = {duplex!r}: must be true or false")
        pairs = [(ends[0], ends[1])] + ([(ends[1], ends[0])] if duplex else [])
        for u, v in pairs:
            if (u, v) in b.links:
                raise TopologyError(f"{where}: {key}: {b.names[u]}->{b.names[v]} is listed "
                                    f"twice; give one link with count = k instead")
            b.links[(u, v)] = [g * count, lat, eff]
    _check_connected(b, len(ranks), where)
    return b.build(name, "graph", len(ranks), (len(ranks),))


def _check_connected(b: _Builder, n_ranks: int, where: str) -> None:
    """Every rank of a graph file reaches every other over its (directed) links: all reach
    rank 0 and rank 0 reaches all. Otherwise a TopologyError naming the file and a rank."""
    def reached(forward: bool) -> set[int]:
        nbrs: dict[int, list[int]] = {}
        for u, v in b.links:
            a, z = (u, v) if forward else (v, u)
            nbrs.setdefault(a, []).append(z)
        seen, todo = {0}, [0]
        while todo:
            for nxt in nbrs.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    for forward in (True, False):
        missing = [r for r in range(n_ranks) if r not in reached(forward)]
        if missing:
            names = ", ".join(b.names[r] for r in missing[:5]) + (" ..." if len(missing) > 5
                                                                   else "")
            first = b.names[0]
            how = f"from {first} to" if forward else f"to {first} from"
            raise TopologyError(f"{where}: links: no path {how} rank(s) {names}; every rank "
                                f"must reach every other rank over the links")
