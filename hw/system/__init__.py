"""Many chips: interconnect topologies (:mod:`hw.system.topology`), multi-chip system configs and
presets (:mod:`hw.system.system`, ``sim_configs/systems/``), the flow-level network engine and
collectives built on them, and the shared-DRAM SoC (:mod:`hw.system.soc`)."""

# The names the command line lists in its help live here, so building the CLI's parser loads no
# model (hw.system.system, .collectives and their Numba kernels load when a command runs).

#: Collective operations (:func:`hw.system.collectives.collective`).
OPS = ("broadcast", "scatter", "gather", "reduce", "allreduce", "allgather", "reducescatter",
       "alltoall")
#: Collective algorithms; "auto" picks one per op and topology.
ALGORITHMS = ("auto", "ring", "tree", "rhd", "direct", "hierarchical", "ps")
#: The named system presets (files in sim_configs/systems/; see
#: :func:`hw.system.system.load_system`).
PRESETS = ("dgx-a100", "hgx-a100-4", "hgx-h100", "tpu-v3-32", "pcie4-x4")
