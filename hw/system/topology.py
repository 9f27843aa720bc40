"""Interconnect topologies of a multi-chip system: nodes, directed links, routes, ring embeddings.

The public entry point; the parts live in one module per topic:

* :mod:`hw.system.topology_graph`: :class:`Topology`, the directed graph (nodes ``0 ..
  n_ranks-1`` are the ranks, switches and the host follow; each directed link has its
  bandwidth, efficiency and latency), link lookup, routes, levels, summary;
* :mod:`hw.system.topology_routes`: deterministic minimal routing (dimension order, up/down
  trees, breadth-first search on graph files);
* :mod:`hw.system.topology_rings`: the ring embeddings of the ring collectives;
* :mod:`hw.system.topology_builders`: ring, mesh, torus, switch, fat tree, fully connected,
  hierarchical, with a host;
* :mod:`hw.system.topology_specs`: inline specs (``ring:8``) and TOML graph files.
"""

from hw.system.topology_builders import (
    DEFAULT_LINK_EFFICIENCY, DEFAULT_LINK_GBPS, DEFAULT_LINK_LATENCY_NS, fattree, fully_connected,
    hierarchical, mesh2d, mesh3d, ring, switch, torus2d, torus3d, with_host,
)
from hw.system.topology_graph import KINDS, MAX_LINKS, Topology, TopologyError
from hw.system.topology_specs import (
    INLINE_FORMS, topology_from_dict, topology_from_file, topology_from_spec,
)

__all__ = ["TopologyError", "Topology", "KINDS", "INLINE_FORMS", "topology_from_spec",
           "topology_from_file", "topology_from_dict", "ring", "mesh2d", "torus2d", "mesh3d",
           "torus3d", "switch", "fattree", "fully_connected", "hierarchical", "with_host",
           "DEFAULT_LINK_GBPS", "DEFAULT_LINK_LATENCY_NS", "DEFAULT_LINK_EFFICIENCY", "MAX_LINKS"]
