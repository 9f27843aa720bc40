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


def systems_dir():
    """``sim_configs/systems/`` (of the checkout or the installed package data:
    :func:`hw.presets.presets_dir`)."""
    from hw.presets import presets_dir
    return presets_dir() / "systems"


def system_names() -> tuple[str, ...]:
    """The shipped systems: :data:`PRESETS`, then any other ``sim_configs/systems/*.toml`` with
    a ``[system]`` table (e.g. ``dgx1-v100``); graph files alone are not systems."""
    from hw.files import read_text
    extra = []
    for path in sorted(systems_dir().glob("*.toml")):
        if path.stem not in PRESETS and "\n[system]" in "\n" + read_text(path, "system file"):
            extra.append(path.stem)
    return PRESETS + tuple(extra)
