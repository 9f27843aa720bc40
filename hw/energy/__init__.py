"""Energy per action, area and static power of a technology, from editable TOML tables.

A :class:`Technology` turns the counts a simulation produces (MACs, register bits, SRAM bits,
DRAM bits, link bits, seconds of leakage) into joules. Its numbers come from a TOML file
(``hw/energy/data/*.toml``: ``45nm``, ``16nm``, ``7nm``) in which every value names its source;
see ``docs/energy.md`` for the tables, the rules (SRAM fit, interpolation over bit widths) and
what each component charges.
"""

from hw.energy.tech import (
    DEFAULT_TECHNOLOGY, DRAM_KINDS, LINK_KINDS, PRECISIONS, EnergyError, Technology,
    dram_kind_for_preset, load_technology, technology_names,
)

__all__ = ["Technology", "EnergyError", "load_technology", "technology_names",
           "dram_kind_for_preset", "PRECISIONS", "DRAM_KINDS", "LINK_KINDS", "DEFAULT_TECHNOLOGY"]
