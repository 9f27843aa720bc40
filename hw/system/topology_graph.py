"""The interconnect of a multi-chip system as a directed graph: :class:`Topology`.

A :class:`Topology` is a directed graph. Nodes ``0 .. n_ranks-1`` are the accelerators (rank r IS
node r); switches and the host follow. Every physical full-duplex link is two directed links, each
with its own nominal bandwidth per direction (``link_gbps``, GB/s = 1e9 B/s, the unit of
:mod:`hw.memory.link`), an achievable fraction (``link_efficiency``) and a per-hop latency.

The class validates its nodes and links, finds links by their ends and turns node paths into
link routes (:meth:`Topology.routes`; the paths come from :mod:`hw.system.topology_routes`). Ring
embeddings (:meth:`Topology.rings`) are built in :mod:`hw.system.topology_rings`; hierarchical
groups for 2D/hierarchical algorithms come from :meth:`Topology.levels`. Builders are in
:mod:`hw.system.topology_builders`, inline specs and graph files in
:mod:`hw.system.topology_specs`; :mod:`hw.system.topology` gathers them all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from hw.system.topology_rings import ring_embeddings
from hw.system.topology_routes import bfs_paths, structured_paths
from hw.systolic.config import ConfigError

__all__ = ["TopologyError", "Topology", "KINDS", "MAX_LINKS", "check_links"]


class TopologyError(ConfigError):
    """A topology spec, builder argument or graph file is invalid; the message names the source,
    the key or spec, the value and what is allowed."""


KINDS = ("ring", "mesh2d", "torus2d", "mesh3d", "torus3d", "switch", "fattree", "fc",
         "hierarchical", "graph")

#: The most directed links a topology may have (a builder checks its closed-form link count
#: before allocating anything): 262,144 holds ring:100000 (200,000) and fc:500 (249,500) and
#: builds in seconds; fc:2000 (3,998,000) or torus3d:64x64x64 (1,572,864) are refused.
MAX_LINKS = 1 << 18


def check_links(where: str, n_links: int) -> None:
    """Refuse a topology of more than MAX_LINKS directed links (called with the closed-form
    count before a builder allocates its links)."""
    if n_links > MAX_LINKS:
        raise TopologyError(f"{where}: {n_links:,} directed links; the simulator takes at most "
                            f"{MAX_LINKS:,} (fewer ranks, or a switch/fattree instead of fc)")


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
        check_links(where, L)
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
        set_("_bfs", {})          # breadth-first search cache of bfs_paths

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
        # The closed forms ask for the same rings again and again (a plan search times one
        # group at many sizes): small route sets are kept, read-only.
        memo = self.__dict__.setdefault("_route_memo", {}) if len(src) <= 4096 else None
        if memo is not None:
            key = (src.tobytes(), dst.tobytes())
            if key not in memo:
                if len(memo) >= 512:
                    memo.clear()
                ptr, links = self._routes(src, dst)
                ptr.flags.writeable = links.flags.writeable = False
                memo[key] = (ptr, links)
            return memo[key]
        return self._routes(src, dst)

    def _routes(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = len(src)
        nhops = np.zeros(k, dtype=np.int64)
        paths = []      # (message indices, hops, flat node paths)
        moving = src != dst
        structured = moving & (src < self.n_ranks) & (dst < self.n_ranks)
        if self.kind == "graph":
            structured[:] = False
        idx = np.flatnonzero(structured)
        if idx.size:
            h, nodes = structured_paths(self, src[idx], dst[idx])
            nhops[idx] = h
            paths.append((idx, h, nodes))
        rest = np.flatnonzero(moving & ~structured)
        if rest.size:
            h, nodes = bfs_paths(self, src[rest], dst[rest], self._bfs)
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

    # ----------------------------------------------------------------------------------------
    def rings(self, group: tuple[int, ...] | None = None) -> list[tuple[tuple[int, ...], float]]:
        """The ring embeddings ring collectives use for ``group`` (default: all ranks): a list
        of (rank order, share of the data); the shares sum to 1. The constructions (Walecki
        cycles on fully connected groups, Hamiltonian cycles of 2D tori and meshes, snakes,
        a ring and its reverse) are described in
        :func:`hw.system.topology_rings.ring_embeddings`."""
        return ring_embeddings(self, group)

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
