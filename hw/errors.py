"""The one error type of every hardware description a user writes (chip, NVDLA build, DRAM,
system, energy table): :class:`ConfigError`, a one-line message naming where the value came
from, the key, the value and what is allowed. Subclasses (``hw.energy.EnergyError``,
``hw.system.topology.TopologyError``, ...) say which part failed; the command line prints any
of them as ``npulab: error: ...``."""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A configuration value is invalid. The message names where it came from, the key, the
    value and what is allowed."""
