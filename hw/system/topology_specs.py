"""Topologies from text: inline specs (``ring:8``, ``torus2d:4x4``, ...) and TOML graph files.

Both check everything they read; a :class:`~hw.system.topology_graph.TopologyError` names the
spec or file, the key, the value and what is allowed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from hw.system.topology_builders import (TopologyBuilder, fattree, fully_connected, grid_topology,
                                         link_params, switch)
from hw.system.topology_graph import Topology, TopologyError
from hw.validate import read_toml

__all__ = ["INLINE_FORMS", "topology_from_spec", "topology_from_file", "topology_from_dict"]

INLINE_FORMS = ("ring:N", "mesh2d:AxB", "torus2d:AxB", "mesh3d:AxBxC", "torus3d:AxBxC",
                "switch:N", "fc:N", "fattree:NxK")

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
        return grid_topology(kind, tuple(nums), link_gbps, link_latency_ns, link_efficiency,
                             text)
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
    b = TopologyBuilder(len(ranks), [nm for nm, _ in ranks])
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
        g, lat, eff = link_params(f"{where}: {key}", ln.get("gbps", defaults.get("gbps")),
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


def _check_connected(b: TopologyBuilder, n_ranks: int, where: str) -> None:
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
