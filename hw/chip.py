"""A chip: ``cores`` identical cores (each a systolic array, a vector engine and three SRAM
scratchpads) at a clock frequency, a shared L2 and the on-chip network between them (when there
is more than one core or an L2), DRAM, a host link and a DMA engine.

The three scratchpads follow the operands of the array (the SCALE-Sim / Gemmini organisation):
``ifmap`` holds the streamed input activations (``a`` of the GEMM view), ``filter`` the weights
(``b``), ``ofmap`` the accumulators / outputs. Defaults are documented in ``docs/configs.md``
and reproduced by ``sim_configs/default.toml``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hw.memory.dma import DmaConfig
from hw.memory.dram import DramConfig, dram_preset
from hw.memory.l2 import L2Config
from hw.memory.link import HostLinkConfig
from hw.memory.noc import NocConfig
from hw.memory.sram import SramConfig
from hw.packing import elem_size
from hw.systolic.config import ArrayConfig, ConfigError, _int_in
from hw.validate import _number_in
from hw.vector.config import VectorConfig

__all__ = ["ChipConfig", "SRAM_NAMES", "TENSOR_LOCATIONS"]

#: The scratchpads of a chip, by the operand they hold.
SRAM_NAMES = ("ifmap", "filter", "ofmap")
#: Where the network's input comes from and its output goes.
TENSOR_LOCATIONS = ("host", "dram")


def _default_dram() -> DramConfig:
    return dram_preset("ddr4-3200")


@dataclass(frozen=True)
class ChipConfig:
    """The hardware a workload runs on.

    Attributes
    ----------
    name:
        Free-form label used in reports.
    clock_mhz:
        Core clock in MHz (1 <= clock_mhz <= 10000; below 1 MHz a core cycle would span
        thousands of DRAM cycles and cycle counts overflow) of the array, SRAMs and DMA; turns cycles into
        seconds. The DRAM runs at its own clock (``dram.tck_ns``).
    cores:
        Identical cores, 1..4096 (default 1). Each has the array, the vector engine and the
        scratchpads below; they share the L2, the network, the DMA engines' DRAM and the host
        link. The compiler splits each op over them (:mod:`compiler.backends.multicore`).
    launch_overhead_us:
        Per-kernel launch overhead in µs (0 <= value <= 1e6, default 0): the host's time to
        start each op (a kernel) on the device, added once per op to a run's ``latency_s`` (its
        ``cycles`` are the device's alone). 0 for an accelerator that runs a whole compiled
        program from a command queue; a GPU-like device driven op by op pays a few to tens of µs
        (``docs/vector.md`` cites measurements).
    launch_overhead_by_op:
        Per-kernel overheads in µs of some op kinds, instead of ``launch_overhead_us``: pairs
        ``(kind, µs)``, a kind being ``gemm``, ``conv`` or a vector op's work name
        (``softmax``, ``layernorm``, ``gelu``, ...; :func:`npulab.simulate.launch_key`). In a config file, the
        table ``[chip.launch_overhead_by_op]``.
    model_input, model_output:
        ``"host"`` (default): the network's input arrives over the host link into DRAM before the
        first layer reads it, and its output returns over the link after the last layer wrote
        it. ``"dram"``: they already are / stay in DRAM. Weights are always resident in DRAM
        (loaded once when the model is deployed).
    array:
        The systolic array (:class:`~hw.systolic.config.ArrayConfig`).
    ifmap_sram, filter_sram, ofmap_sram:
        The scratchpads (:class:`~hw.memory.sram.SramConfig`); defaults 512, 512 and 256 KiB.
    dram:
        Off-chip memory (:class:`~hw.memory.dram.DramConfig`), default preset ``ddr4-3200``, one
        64-bit channel (25.6 GB/s).
    host_link:
        Link to the host (:class:`~hw.memory.link.HostLinkConfig`), default PCIe Gen4 x16.
    dma:
        The DMA engines between DRAM/host and the scratchpads (:class:`~hw.memory.dma.DmaConfig`).
    vector:
        The vector engine beside the array (:class:`~hw.vector.config.VectorConfig`): softmax,
        norms, activations, pooling and element-wise ops run on it; default 32 lanes.
    l2:
        The L2 shared by the cores (:class:`~hw.memory.l2.L2Config`); none by default.
    noc:
        The network between the cores and the L2 (:class:`~hw.memory.noc.NocConfig`); modelled
        when the chip has more than one core or an L2.
    """

    name: str = "npulab-default"
    clock_mhz: float = 1000.0
    model_input: str = "host"
    model_output: str = "host"
    launch_overhead_us: float = 0.0
    launch_overhead_by_op: tuple = ()
    cores: int = 1
    array: ArrayConfig = field(default_factory=ArrayConfig)
    ifmap_sram: SramConfig = field(default_factory=lambda: SramConfig(capacity_kib=512))
    filter_sram: SramConfig = field(default_factory=lambda: SramConfig(capacity_kib=512))
    ofmap_sram: SramConfig = field(default_factory=lambda: SramConfig(capacity_kib=256))
    dram: DramConfig = field(default_factory=_default_dram)
    host_link: HostLinkConfig = field(default_factory=HostLinkConfig)
    dma: DmaConfig = field(default_factory=DmaConfig)
    vector: VectorConfig = field(default_factory=VectorConfig)
    l2: L2Config = field(default_factory=L2Config)
    noc: NocConfig = field(default_factory=NocConfig)

    def __post_init__(self) -> None:
        self.validate("ChipConfig")

    def validate(self, where: str, prefix: str = "chip.") -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"{where}: {prefix}name = {self.name!r}: must be a non-empty string")
        object.__setattr__(self, "clock_mhz", _number_in(self.clock_mhz, f"{prefix}clock_mhz", where,
                                                         1, 10000))
        object.__setattr__(self, "launch_overhead_us", _number_in(
            self.launch_overhead_us, f"{prefix}launch_overhead_us", where, 0, 1e6))
        object.__setattr__(self, "cores", _int_in(self.cores, f"{prefix}cores", where, 1, 4096))
        by_op = self.launch_overhead_by_op
        if isinstance(by_op, dict):
            by_op = tuple(by_op.items())
        if not isinstance(by_op, (tuple, list)) or not all(
                isinstance(p, (tuple, list)) and len(p) == 2 for p in by_op):
            raise ConfigError(f"{where}: {prefix}launch_overhead_by_op = {by_op!r}: must be a "
                              f"table of op kind = µs")
        checked = []
        for kind, us in by_op:
            if not (isinstance(kind, str) and kind.isidentifier()):
                raise ConfigError(f"{where}: {prefix}launch_overhead_by_op.{kind} : not an op "
                                  f"kind (gemm, conv or a vector op such as softmax, gelu)")
            checked.append((kind, _number_in(us, f"{prefix}launch_overhead_by_op.{kind}", where,
                                             0, 1e6)))
        object.__setattr__(self, "launch_overhead_by_op", tuple(sorted(checked)))
        for key in ("model_input", "model_output"):
            value = getattr(self, key)
            if value not in TENSOR_LOCATIONS:
                raise ConfigError(f"{where}: {prefix}{key} = {value!r}: must be one of "
                                  f"{', '.join(repr(v) for v in TENSOR_LOCATIONS)}")
        for key, cls in (("array", ArrayConfig), ("ifmap_sram", SramConfig),
                         ("filter_sram", SramConfig), ("ofmap_sram", SramConfig),
                         ("dram", DramConfig), ("host_link", HostLinkConfig), ("dma", DmaConfig),
                         ("vector", VectorConfig), ("l2", L2Config), ("noc", NocConfig)):
            if not isinstance(getattr(self, key), cls):
                raise ConfigError(f"{where}: {key} = {getattr(self, key)!r}: must be a {cls.__name__}")

        eb = max(1, self.array.precision.bits // 8)     # packed sub-byte operands: 1
        for name in SRAM_NAMES:
            width = self.sram(name).bank_width_bytes
            if width % eb:
                raise ConfigError(
                    f"{where}: sram.{name}.bank_width_bytes = {width}: must be a multiple of the "
                    f"{eb}-byte {self.array.precision.value} operand")

    @property
    def elem_size(self):
        """Bytes per operand in the chip's memories: an int, or for int4 and binary operands
        (two and eight per byte) a :class:`hw.packing.Packed` (:mod:`hw.packing`)."""
        return elem_size(self.array.precision.bits)

    @property
    def clock_hz(self) -> float:
        return self.clock_mhz * 1e6

    def launch_overhead_s(self, kind: str) -> float:
        """Seconds the host needs to start one kernel of op kind ``kind``."""
        return dict(self.launch_overhead_by_op).get(kind, self.launch_overhead_us) * 1e-6

    @property
    def multicore(self) -> bool:
        """More than one core or an L2: the network and the L2 are modelled."""
        return self.cores > 1 or self.l2.present

    @property
    def peak_macs_per_cycle(self) -> int:
        """Every core's array: cores x PEs x MACs per PE."""
        return self.cores * self.array.macs_per_cycle

    def sram(self, name: str) -> SramConfig:
        """The scratchpad holding operand ``name`` (one of :data:`SRAM_NAMES`)."""
        return getattr(self, f"{name}_sram")

    @property
    def fetch_bytes_per_cycle(self) -> float:
        """Bytes a cycle one core can count on fetching from below its scratchpads: the DRAM's
        peak on a one-core chip without an L2; on a multi-core chip its share of the L2 (or,
        without one, of the DRAM) when every core fetches, at most its network port."""
        if not self.multicore:
            return self.dram_bytes_per_cycle
        below = self.l2.bytes_per_cycle if self.l2.present else self.dram_bytes_per_cycle
        return min(self.noc.link_bytes_per_cycle, below / self.cores)

    @property
    def dram_bytes_per_cycle(self) -> float:
        """DRAM peak bandwidth in bytes per core cycle (infinite for the ideal preset)."""
        if self.dram.is_ideal:
            return math.inf
        return self.dram.peak_gbps * 1e9 / self.clock_hz
