"""Topology builders: ring, 2D/3D mesh and torus, switch, fat tree, fully connected,
hierarchical, and a host attached to any of them.

Each builder checks its arguments (a :class:`~hw.system.topology_graph.TopologyError` names the
argument, the value and what is allowed) and the closed-form link count against
:data:`~hw.system.topology_graph.MAX_LINKS` before it allocates anything. Links are full duplex;
omitted link parameters take the defaults below.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from hw.system.topology_graph import Topology, TopologyError, check_links

__all__ = ["ring", "mesh2d", "torus2d", "mesh3d", "torus3d", "switch", "fattree",
           "fully_connected", "hierarchical", "with_host", "DEFAULT_LINK_GBPS",
           "DEFAULT_LINK_LATENCY_NS", "DEFAULT_LINK_EFFICIENCY", "TopologyBuilder",
           "grid_topology", "link_params"]

#: Link defaults of the builders and inline specs (a generic 25 GB/s link, e.g. one NVLink2/3
#: link per direction).
DEFAULT_LINK_GBPS = 25.0
#: Assumed per-hop latency of an inline spec (an estimate in the 0.5-1 us range quoted for
#: NVLink/PCIe hops; not a measurement).
DEFAULT_LINK_LATENCY_NS = 500.0
DEFAULT_LINK_EFFICIENCY = 1.0
_MAX_NODES = 1 << 20


def _check_count(name: str, value, lo: int = 1) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or (
            value < lo) or value > _MAX_NODES:
        raise TopologyError(f"{name} = {value!r}: must be an integer in {lo}..{_MAX_NODES}")
    return int(value)


def link_params(where: str, gbps, latency_ns, efficiency) -> tuple[float, float, float]:
    """(gbps, latency_ns, efficiency) with the defaults filled in; a bad value is a
    TopologyError naming ``where``, the key and what is allowed."""
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


class TopologyBuilder:
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


def grid_topology(kind: str, dims: tuple[int, ...], gbps, latency_ns, efficiency,
                  name) -> Topology:
    """A ring, mesh or torus of ``dims`` ranks per dimension (x fastest), full-duplex links to
    the neighbours (and round the wrap for ring and torus kinds)."""
    where = name or f"{kind}:{'x'.join(str(d) for d in dims)}"
    dims = tuple(_check_count(f"{where}: dimension", d) for d in dims)
    n = _check_count(f"{where}: ranks", math.prod(dims))
    g, lat, eff = link_params(where, gbps, latency_ns, efficiency)
    wrap = kind in ("ring", "torus2d", "torus3d")
    check_links(where, sum(2 * (n if d > 2 else n // 2) if wrap else 2 * (n // d) * (d - 1)
                           for d in dims))
    b = TopologyBuilder(n)
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
    return grid_topology("ring", (_check_count(f"{name or 'ring'}: N", n),), gbps, latency_ns,
                         efficiency, name or f"ring:{n}")


def mesh2d(a: int, b: int, **kw) -> Topology:
    """An a x b 2D mesh (x fastest: rank = x + a*y), links to the 4 neighbours."""
    return grid_topology("mesh2d", (a, b), kw.get("gbps"), kw.get("latency_ns"),
                         kw.get("efficiency"), kw.get("name"))


def torus2d(a: int, b: int, **kw) -> Topology:
    """An a x b 2D torus (mesh plus wraparound links)."""
    return grid_topology("torus2d", (a, b), kw.get("gbps"), kw.get("latency_ns"),
                         kw.get("efficiency"), kw.get("name"))


def mesh3d(a: int, b: int, c: int, **kw) -> Topology:
    """An a x b x c 3D mesh (rank = x + a*(y + b*z))."""
    return grid_topology("mesh3d", (a, b, c), kw.get("gbps"), kw.get("latency_ns"),
                         kw.get("efficiency"), kw.get("name"))


def torus3d(a: int, b: int, c: int, **kw) -> Topology:
    """An a x b x c 3D torus."""
    return grid_topology("torus3d", (a, b, c), kw.get("gbps"), kw.get("latency_ns"),
                         kw.get("efficiency"), kw.get("name"))


def switch(n: int, *, gbps=None, latency_ns=None, efficiency=None, name=None) -> Topology:
    """N ranks each with one link (``gbps`` per direction) to one non-blocking switch (a star;
    e.g. NVSwitch, whose several chips act as one crossbar). A route is rank -> switch -> rank,
    two hops of ``latency_ns`` each."""
    where = name or f"switch:{n}"
    n = _check_count(f"{where}: N", n)
    g, lat, eff = link_params(where, gbps, latency_ns, efficiency)
    check_links(where, 2 * n)
    b = TopologyBuilder(n)
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
    g, lat, eff = link_params(where, gbps, latency_ns, efficiency)
    n_leaves = -(-n // k)
    n_spines = int(round(ups)) if n_leaves > 1 else 0
    check_links(where, 2 * n + 2 * n_leaves * n_spines)
    b = TopologyBuilder(n)
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
    g, lat, eff = link_params(where, gbps, latency_ns, efficiency)
    check_links(where, n * (n - 1))
    b = TopologyBuilder(n)
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
        lp.append(link_params(f"{where}: levels[{i}]", params.get("gbps"),
                              params.get("latency_ns"), params.get("efficiency")))
        counts.append(count)
        kinds.append(kind)
    n = _check_count(f"{where}: ranks", math.prod(counts))
    check_links(where, (n * (counts[0] - 1) if kinds[0] == "fc" else 2 * n)
                 + 2 * n * (len(counts) - 1))
    b = TopologyBuilder(n)
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
    g, lat, eff = link_params(where, gbps, latency_ns, efficiency)
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
