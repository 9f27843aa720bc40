"""Energy per action, area and static power of a technology, from editable TOML tables.

A :class:`Technology` turns the counts a simulation produces (MACs, register bits, SRAM bits,
DRAM bits, link bits, seconds of leakage) into joules. Its numbers come from a TOML file
(``hw/energy/data/*.toml``: ``45nm``, ``16nm``, ``7nm``) in which every value names its source;
see ``docs/energy.md`` for the tables, the rules (SRAM fit, interpolation over bit widths) and
what each component charges. :func:`energy_rates` turns a table and a chip's
:class:`HardwareFacts` into its :class:`EnergyRates`, the one set of per-action energies, area
and leakage that the mapper and the metrics both charge.
"""

from hw.energy.tech import (
    DEFAULT_TECHNOLOGY, DRAM_KINDS, LINK_KINDS, PRECISIONS, EnergyError, Technology,
    dram_kind_for_preset, load_technology, technology_names,
)
from hw.energy.rates import (
    ASSUMED_DRAM_KIND, EnergyRates, HardwareFacts, ScratchpadRates, energy_rates,
    register_bits_per_mac,
)

__all__ = ["Technology", "EnergyError", "load_technology", "technology_names",
           "EnergyRates", "HardwareFacts", "ScratchpadRates", "energy_rates",
           "register_bits_per_mac", "ASSUMED_DRAM_KIND", "dram_kind_for_preset", "PRECISIONS",
           "DRAM_KINDS", "LINK_KINDS", "DEFAULT_TECHNOLOGY"]
