"""Many chips: interconnect topologies (:mod:`hw.system.topology`), multi-chip system configs and
presets (:mod:`hw.system.system`, ``sim_configs/systems/``), the flow-level network engine and
collectives built on them, and the shared-DRAM SoC (:mod:`hw.system.soc`)."""
