"""The on-chip network between the cores and the shared L2 of a multi-core chip.

Two topologies, each with a per-link bandwidth and a latency per hop:

* ``crossbar``: every core has its own port (``link_bytes_per_cycle`` in each direction) to
  every L2 bank; one hop. The aggregate is the cores' ports together; the L2's own banks
  (:mod:`hw.memory.l2`) are then the shared limit.
* ``mesh``: the cores sit on a ``rows x cols`` grid (``cols = ceil(sqrt(cores))``, ``rows =
  ceil(cores / cols)``) with an L2 slice at every node, addresses interleaved over the slices,
  and dimension-order (XY) routing. Under that uniform traffic a transfer travels the mean
  distance between two nodes, ``(c^2-1)/(3c) + (r^2-1)/(3r)`` hops, and half of it crosses the
  bisection (the cut across the longer side, ``rows`` links each way), so the network carries
  at most ``4 x rows x link_bytes_per_cycle`` bytes a cycle in aggregate (the bisection bound
  of Dally and Towles, *Principles and Practices of Interconnection Networks*, 2004, sec. 3.3:
  ideal throughput ``4b/k`` per node of a k x k mesh).

Timing (:mod:`hw.executor`): a transfer's bytes hold its core's port for ``bytes / link``
cycles and, in aggregate, the network (every core doing the same step: bytes x cores over the
aggregate bound); the first byte arrives after ``hops x hop_latency_cycles``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from hw.systolic.config import ConfigError, _int_in
from hw.validate import _number_in, config_from_table

__all__ = ["NocConfig", "TOPOLOGIES", "noc_config_from_dict", "noc_config_to_dict"]

#: The network shapes npulab models.
TOPOLOGIES = ("crossbar", "mesh")


@dataclass(frozen=True)
class NocConfig:
    """The on-chip network.

    Attributes
    ----------
    topology:
        ``"crossbar"`` (default) or ``"mesh"`` (module docstring).
    link_bytes_per_cycle:
        Bytes a link (a core's port on a crossbar) moves a cycle in each direction, > 0.
    hop_latency_cycles:
        Core cycles per hop (router and wire), 0..10000.
    """

    topology: str = "crossbar"
    link_bytes_per_cycle: float = 64.0
    hop_latency_cycles: int = 1

    def __post_init__(self) -> None:
        self.validate("NocConfig")

    def validate(self, where: str, prefix: str = "noc.") -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen dataclass)
        if self.topology not in TOPOLOGIES:
            raise ConfigError(f"{where}: {prefix}topology = {self.topology!r}: must be one of "
                              f"{', '.join(repr(t) for t in TOPOLOGIES)}")
        set_("link_bytes_per_cycle", _number_in(self.link_bytes_per_cycle,
                                                prefix + "link_bytes_per_cycle", where, 0.0,
                                                1e6, lo_open=True))
        set_("hop_latency_cycles", _int_in(self.hop_latency_cycles, prefix + "hop_latency_cycles",
                                           where, 0, 10000))

    def dims(self, cores: int) -> tuple[int, int]:
        """``(rows, cols)`` of the mesh the cores sit on (a crossbar: ``(1, cores)``)."""
        if self.topology == "crossbar":
            return 1, cores
        cols = math.ceil(math.sqrt(cores))
        return math.ceil(cores / cols), cols

    def mean_hops(self, cores: int) -> float:
        """Hops a transfer travels on average (module docstring)."""
        if self.topology == "crossbar":
            return 1.0
        rows, cols = self.dims(cores)
        return (cols * cols - 1) / (3 * cols) + (rows * rows - 1) / (3 * rows)

    def latency_cycles(self, cores: int) -> int:
        """Cycles before a transfer's first byte arrives across the network."""
        return math.ceil(self.mean_hops(cores) * self.hop_latency_cycles)

    def aggregate_bytes_per_cycle(self, cores: int) -> float:
        """Bytes a cycle the whole network carries when every core moves data (module
        docstring): the cores' ports on a crossbar, the bisection bound on a mesh."""
        ports = cores * self.link_bytes_per_cycle
        if self.topology == "crossbar":
            return ports
        rows, _ = self.dims(cores)
        return min(ports, 4 * rows * self.link_bytes_per_cycle)


def noc_config_from_dict(data: dict[str, Any], where: str, prefix: str = "noc.") -> NocConfig:
    """A :class:`NocConfig` from its TOML table, validated (one-line errors name the key)."""
    return config_from_table(NocConfig, data, where, prefix)


def noc_config_to_dict(cfg: NocConfig) -> dict[str, Any]:
    return {f.name: getattr(cfg, f.name) for f in fields(NocConfig)}
