"""A chip is cores x engines x memory levels: :class:`ChipSpec`, the one description of the
hardware that the compiler, the run pipeline, the SoC and the multi-chip layer are given.

* A :class:`Core` has its :class:`Engine` s (a systolic array, an NVDLA datapath; later a vector
  unit) and its local scratchpads.
* A :class:`MemoryLevel` says how big it is, how it is banked, how many bytes a cycle it moves,
  which operands it holds and which cores share it (none: the core's own).
* Below the cores: shared levels (the L2 of a multi-core chip, :mod:`hw.memory.l2`, shared by
  every core through the on-chip network), DRAM, the host link and the DMA engines.

:func:`hw.configfile.load_chip` is the one loader: a shipped preset by name
(:mod:`hw.presets`) or a TOML file of either kind (a systolic chip's ``[chip]``/``[array]``/
``[sram]``... tables or an NVDLA build's ``[nvdla]`` table), with ``--set`` style overrides;
every error is a :class:`hw.errors.ConfigError`. :func:`chip_spec` describes an in-memory
config the same way.
A systolic chip is ``cores`` identical cores, each with a ``systolic`` engine, its ``vector``
engine and three scratchpads (ifmap, filter, ofmap), and an ``l2`` level when it has one; an
NVDLA build is one core with one ``nvdla`` engine and its convolution buffer.
Each engine keeps its kind's own config (:attr:`Engine.config`), which that kind's compiler
backend and timing model read; :attr:`ChipSpec.config` is the whole config of that kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from hw.chip import SRAM_NAMES, ChipConfig
from hw.errors import ConfigError
from hw.memory.dma import DmaConfig
from hw.memory.dram import DramConfig
from hw.memory.link import HostLinkConfig
from hw.nvdla.config import NvdlaConfig

__all__ = ["ChipSpec", "Core", "Engine", "MemoryLevel", "ENGINE_KINDS", "HELPER_ENGINE_KINDS", "OPERANDS",
           "chip_spec"]

#: The engine kinds npulab ships. A new kind needs no entry here: it is a name, a compiler
#: backend and a runner registered with :func:`npulab.pipeline.register_runner`
#: (docs/architecture.md, "Adding an engine").
ENGINE_KINDS = ("systolic", "nvdla")
#: Engines a core has beside its matrix engine (they get no runner of their own: the chip's
#: kind, its first engine's, compiles and times their work): the vector engine of a systolic
#: chip (hw.vector).
HELPER_ENGINE_KINDS = ("vector",)
#: The roles of the tensors a memory level can hold.
OPERANDS = ("input", "weight", "output")
#: The operand each systolic scratchpad holds (the array's edges: ifmap = A, filter = B).
_SRAM_OPERANDS = {"ifmap": ("input",), "filter": ("weight",), "ofmap": ("output",)}

#: The config an engine kind reads.
EngineConfig = Union[ChipConfig, NvdlaConfig]


@dataclass(frozen=True)
class MemoryLevel:
    """One memory level: a scratchpad of a core, or a level shared by several cores."""

    name: str
    capacity_bytes: int
    banks: int
    bank_width_bytes: int
    ports: int
    holds: tuple[str, ...]
    shared_by: tuple[str, ...] = ()      # cores sharing it; () = local to the core it is in

    @property
    def bytes_per_cycle(self) -> int:
        """Peak bytes a cycle on one side (read or write): banks x width x ports."""
        return self.banks * self.bank_width_bytes * self.ports


@dataclass(frozen=True)
class Engine:
    """A compute engine of a core: its kind (a name such as those of :data:`ENGINE_KINDS`), its
    name, its peak MACs per cycle, the config its kind reads (an ``ArrayConfig``, an
    ``NvdlaConfig``) and ``label``, the short description reports show (``16x16 ws int8``)."""

    kind: str
    name: str
    peak_macs_per_cycle: int
    config: Any
    label: str = ""

    def __post_init__(self) -> None:
        if not (isinstance(self.kind, str) and self.kind.isidentifier()
                and self.kind == self.kind.lower()):
            raise ConfigError(f"engine {self.name!r}: kind = {self.kind!r}: must be a lower-case "
                              f"name (shipped: {', '.join(ENGINE_KINDS)})")
        if not isinstance(self.peak_macs_per_cycle, int) or self.peak_macs_per_cycle < 0:
            raise ConfigError(f"engine {self.name!r}: peak_macs_per_cycle = "
                              f"{self.peak_macs_per_cycle!r}: must be an integer >= 0")


@dataclass(frozen=True)
class Core:
    """A core: its engines and its local scratchpads."""

    name: str
    engines: tuple[Engine, ...]
    scratchpads: tuple[MemoryLevel, ...]


@dataclass(frozen=True)
class ChipSpec:
    """A chip: clock, cores, the shared memory levels below them, DRAM, host link and DMA.

    ``config`` is the chip's config of its engine kind (:class:`~hw.chip.ChipConfig` for a
    systolic chip, :class:`~hw.nvdla.config.NvdlaConfig` for an NVDLA build), what that kind's
    backend reads; ``source`` names where it was loaded from."""

    name: str
    clock_mhz: float
    cores: tuple[Core, ...]
    levels: tuple[MemoryLevel, ...]
    dram: DramConfig | None
    host_link: HostLinkConfig | None
    dma: DmaConfig | None
    config: EngineConfig
    source: str = field(default="<config>", compare=False)

    @property
    def kind(self) -> str:
        """The kind of the chip's matrix engine (the first engine of the first core): which
        compiler backend and timing model run a workload on it."""
        return self.engine.kind

    @property
    def engine(self) -> Engine:
        """The chip's matrix engine (the first engine of the first core)."""
        return self.cores[0].engines[0]

    @property
    def engines(self) -> tuple[Engine, ...]:
        return tuple(e for core in self.cores for e in core.engines)

    @property
    def clock_hz(self) -> float:
        return self.clock_mhz * 1e6

    @property
    def peak_macs_per_cycle(self) -> int:
        return sum(e.peak_macs_per_cycle for e in self.engines)

    def memory_levels(self) -> tuple[MemoryLevel, ...]:
        """Every on-chip level, the cores' scratchpads first, then the shared levels."""
        return tuple(m for core in self.cores for m in core.scratchpads) + self.levels

    def describe(self) -> str:
        """One line: cores, engines, memory levels and DRAM (identical cores listed once)."""
        core = self.cores[0]
        same = all(c.engines == core.engines and c.scratchpads == core.scratchpads
                   for c in self.cores)
        cores = [core] if same else list(self.cores)
        per = f"{len(self.cores)} x " if same and len(self.cores) > 1 else ""
        engines = ", ".join(f"{per}{e.kind} {e.name} ({e.peak_macs_per_cycle} MAC/cycle)"
                            for c in cores for e in c.engines)
        pads = tuple(m for c in cores for m in c.scratchpads) + self.levels
        mem = ", ".join(f"{per if m.shared_by == () else ''}{m.name} "
                        f"{m.capacity_bytes // 1024} KiB" for m in pads)
        dram = ((self.dram.preset or "custom DRAM") if self.dram is not None
                else "bandwidth-only memory interface")
        return (f"{self.name}: {len(self.cores)} core(s) at {self.clock_mhz:g} MHz; {engines}; "
                f"{mem}; {dram}")


def _systolic(cfg: ChipConfig, source: str) -> ChipSpec:
    arr = cfg.array
    pads = tuple(MemoryLevel(name=name, capacity_bytes=cfg.sram(name).capacity_bytes,
                             banks=cfg.sram(name).banks,
                             bank_width_bytes=cfg.sram(name).bank_width_bytes,
                             ports=cfg.sram(name).ports, holds=_SRAM_OPERANDS[name])
                 for name in SRAM_NAMES)
    engine = Engine(kind="systolic", name=f"array {arr.rows}x{arr.cols}",
                    peak_macs_per_cycle=arr.macs_per_cycle, config=arr,
                    label=f"{arr.rows}x{arr.cols} {arr.dataflow.value} {arr.precision.value}")
    engines = (engine,)
    vec = cfg.vector
    if not vec.ideal:       # an ideal vector engine costs nothing: no engine to model
        engines += (Engine(kind="vector", name=f"vector {vec.lanes} lanes",
                           peak_macs_per_cycle=0, config=vec,
                           label=f"{vec.lanes} lanes {vec.dtype}"),)
    names = tuple(f"core{i}" for i in range(cfg.cores))
    levels = ()
    if cfg.l2.present:
        levels = (MemoryLevel(name="l2", capacity_bytes=cfg.l2.capacity_bytes, banks=cfg.l2.banks,
                              bank_width_bytes=cfg.l2.bank_width_bytes, ports=1,
                              holds=OPERANDS, shared_by=names),)
    return ChipSpec(name=cfg.name, clock_mhz=cfg.clock_mhz,
                    cores=tuple(Core(name=n, engines=engines, scratchpads=pads) for n in names),
                    levels=levels, dram=cfg.dram, host_link=cfg.host_link, dma=cfg.dma, config=cfg,
                    source=source)


def _nvdla(cfg: NvdlaConfig, source: str) -> ChipSpec:
    from hw.memory.dram import dram_preset
    cbuf = MemoryLevel(name="cbuf", capacity_bytes=cfg.cbuf_bytes, banks=cfg.cbuf_banks,
                       bank_width_bytes=cfg.cbuf_bank_width_bytes, ports=1,
                       holds=("input", "weight"))
    engine = Engine(kind="nvdla", name=f"atomic {cfg.atomic_c}x{cfg.atomic_k}",
                    peak_macs_per_cycle=cfg.macs("int8"), config=cfg,
                    label=f"NVDLA {cfg.atomic_c}x{cfg.atomic_k} atomic C x K")
    return ChipSpec(name=cfg.name, clock_mhz=cfg.clock_mhz,
                    cores=(Core(name="core0", engines=(engine,), scratchpads=(cbuf,)),),
                    levels=(), dram=dram_preset(cfg.dram) if cfg.dram else None,
                    host_link=None, dma=None, config=cfg, source=source)


def chip_spec(config: EngineConfig | ChipSpec, source: str = "<config>") -> ChipSpec:
    """The :class:`ChipSpec` of an in-memory config (a ChipSpec is returned as it is)."""
    if isinstance(config, ChipSpec):
        return config
    if isinstance(config, ChipConfig):
        return _systolic(config, source)
    if isinstance(config, NvdlaConfig):
        return _nvdla(config, source)
    raise ConfigError(f"{source}: {type(config).__name__}: not a chip config (a ChipConfig, an "
                      f"NvdlaConfig or a ChipSpec)")
