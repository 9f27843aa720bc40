"""Run one workload on every accelerator of an SoC that shares one DRAM (``npulab soc``).

:func:`soc_of` is the SoC of ``n`` copies of one chip (a device as :func:`npulab.pipeline.run`
takes it) on its DRAM or another; :func:`run_soc_workload` compiles the workload for each
distinct accelerator with the systolic backend (:func:`compiler.backends.systolic.compile_graph`, the
compiler choices of ``npulab run``'s defaults unless given) and runs the programs alone and all
together on the shared DRAM (:func:`hw.system.soc.run_soc`; ``hw`` does not import the
compiler, so the programs are compiled here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compiler.ir import Graph
from compiler.options import CompileOptions
from npulab.pipeline import resolve_device

if TYPE_CHECKING:   # hw.system.soc (and the executor) load when an SoC runs
    from hw.memory.dram import DramConfig
    from hw.system.soc import CpuStream, SocConfig, SocResult

__all__ = ["soc_of", "run_soc_workload"]


def soc_of(device, n: int, *, dram: DramConfig | None = None,
           cpu: CpuStream | None = None) -> SocConfig:
    """The SoC ``{n}x{chip name}``: ``n`` copies of ``device``
    (:func:`~npulab.pipeline.resolve_device`) sharing ``dram`` (default: the chip's own), with
    an optional CPU stream. :class:`~hw.systolic.config.ConfigError` for a chip the SoC does not
    run (:class:`hw.system.soc.SocConfig` takes systolic chips)."""
    from hw.system.soc import SocConfig
    spec = resolve_device(device)
    return SocConfig(name=f"{n}x{spec.name}", accelerators=(spec,) * n,
                     dram=spec.dram if dram is None else dram, cpu=cpu)


def run_soc_workload(graph: Graph, soc: SocConfig,
                     options: CompileOptions | None = None) -> SocResult:
    """Compile ``graph`` for each accelerator of ``soc`` (identical accelerators share one
    program) and run them alone and together on the shared DRAM."""
    from compiler.backends.systolic import compile_graph
    from hw.system.soc import run_soc
    options = options if options is not None else CompileOptions()
    programs, cache = [], {}
    for j in range(len(soc.accelerators)):
        chip = soc.chip(j)
        if chip not in cache:
            cache[chip] = compile_graph(graph, chip, options)
        programs.append(cache[chip])
    return run_soc(soc, programs)
