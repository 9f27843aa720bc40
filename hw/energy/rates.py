"""Energy rates of one chip: every per-action energy, the area and the leakage, computed once.

The mapper's cost kernel (:mod:`compiler.mapper`) and the metrics (:mod:`npulab.metrics`) both
charge a layer's actions with one :class:`EnergyRates`, so each rule has one home: the register
bits a PE latches per MAC (:func:`register_bits_per_mac`, also the rule of the runner's
``actions``), the bank an SRAM access touches, the DRAM type a preset implies (``custom`` and
``ideal`` are costed as ``ddr4``, flagged as assumed), and the area leakage is charged on.

:func:`energy_rates` reads a :class:`~hw.energy.Technology` and the :class:`HardwareFacts` the
rates depend on; :meth:`HardwareFacts.systolic` and :meth:`HardwareFacts.nvdla` read them from a
systolic chip and an NVDLA build. The table rules themselves (MAC, SRAM fit, area) are
:class:`~hw.energy.Technology`'s; see ``docs/energy.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hw.energy.tech import Technology, dram_kind_for_preset
from hw.systolic.config import Dataflow
from hw.vector.config import OPS as VECTOR_OPS

if TYPE_CHECKING:
    from hw.chip import ChipConfig
    from hw.nvdla.config import NvdlaConfig
    from hw.spec import ChipSpec

__all__ = ["EnergyRates", "ScratchpadRates", "HardwareFacts", "energy_rates",
           "register_bits_per_mac", "ASSUMED_DRAM_KIND"]

#: The DRAM type charged when the DRAM preset does not name one (``custom``, ``ideal``, none).
ASSUMED_DRAM_KIND = "ddr4"


def register_bits_per_mac(dataflow: Dataflow | str, operand_bits: int, acc_bits: int,
                          sparse_m: int = 0) -> int:
    """Bits a systolic PE latches per MAC: the operands it passes on
    (:attr:`~hw.systolic.geometry.DataflowGeometry.passed_operands`: both in OS, the streamed
    one in WS and IS) plus its accumulator or partial sum (``2 op + acc`` in OS, ``op + acc``
    in WS/IS). Idle PEs are taken to be clock-gated. N:M sparse PEs running compressed
    weights (``sparse_m = M``) pass a group of M activations (``M op``) and each weight with
    its ``ceil(log2 M)``-bit index: OS ``(M + 1) op + index + acc``, WS ``M op + acc``, IS
    ``op + index + acc`` (:mod:`hw.systolic.regmodel`)."""
    from hw.systolic.geometry import GemmOperand, geometry   # numpy: not on --help's path
    geo = geometry(dataflow)
    if not sparse_m:
        return geo.passed_operands * operand_bits + acc_bits
    from hw.sparsity import nm_index_bits
    act = sparse_m * operand_bits
    weight = operand_bits + nm_index_bits(sparse_m)
    if geo.output_stationary:
        return act + weight + acc_bits
    streamed_is_act = geo.left_operand is GemmOperand.IFMAP
    return (act if streamed_is_act else weight) + acc_bits


@dataclass(frozen=True)
class HardwareFacts:
    """What the energy rates of a chip depend on.

    Attributes
    ----------
    precision: operand precision (``int8``, ``int16``, ``fp16``, ``fp32``).
    operand_bits: operand width in bits.
    acc_bits: accumulator width in bits.
    dataflow: the array's own dataflow (``os``, ``ws``, ``is``); None for an engine whose
        register bits are not a per-MAC rule (NVDLA counts weight loads and CACC updates).
    macs_per_cycle: MAC units (the area leakage is charged on).
    scratchpads: ``{name: (capacity_bytes, bank_bytes)}`` in report order; an access touches
        one bank, so its energy follows the bank's size.
    dram_preset: the DRAM preset name (``""`` when none is named).
    vector_dtype: the vector engine's compute datatype (None: no vector engine).
    """

    precision: str
    operand_bits: int
    acc_bits: int
    dataflow: str | None
    macs_per_cycle: int
    scratchpads: dict[str, tuple[int, float]]
    dram_preset: str
    vector_dtype: str | None = None

    @classmethod
    def of(cls, spec: ChipSpec, precision: str | None = None) -> HardwareFacts:
        """The facts of a chip (:class:`~hw.spec.ChipSpec`) running at ``precision`` (NVDLA:
        the run's; a systolic array has its own). An engine kind npulab does not ship gets
        :meth:`generic` facts."""
        if spec.kind == "systolic":
            return cls.systolic(spec.config)
        if spec.kind == "nvdla":
            return cls.nvdla(spec.config, precision or "int8")
        return cls.generic(spec, precision or "int8")

    @classmethod
    def generic(cls, spec: ChipSpec, precision: str) -> HardwareFacts:
        """Any chip from its spec alone: its engines' MAC units, every on-chip memory level
        (an access touches one bank) and its DRAM preset; 32-bit accumulators, no per-MAC
        register rule."""
        bits = {"int8": 8, "int16": 16, "fp16": 16, "bf16": 16, "fp8_e4m3": 8, "fp8_e5m2": 8,
                "fp32": 32, "int4": 4, "binary": 1}
        if precision not in bits:
            raise ValueError(f"precision = {precision!r}: must be one of {', '.join(bits)}")
        return cls(precision=precision, operand_bits=bits[precision], acc_bits=32,
                   dataflow=None, macs_per_cycle=spec.peak_macs_per_cycle,
                   scratchpads={m.name: (m.capacity_bytes, m.capacity_bytes / m.banks)
                                for m in spec.memory_levels()},
                   dram_preset=spec.dram.preset if spec.dram is not None else "")

    @classmethod
    def systolic(cls, chip: ChipConfig) -> HardwareFacts:
        """A systolic chip: its arrays and its ifmap, filter and ofmap scratchpads (every core's:
        an access touches one bank of one core's, the area is all of them) and its L2."""
        from hw.chip import SRAM_NAMES
        pads = {}
        for name in SRAM_NAMES:
            s = chip.sram(name)
            capacity = int(s.capacity_kib * 1024)
            pads[name] = (capacity * chip.cores, capacity / s.banks)
        if chip.l2.present:
            pads["l2"] = (chip.l2.capacity_bytes, chip.l2.capacity_bytes / chip.l2.banks)
        a = chip.array
        return cls(precision=a.precision.value, operand_bits=a.precision.bits,
                   acc_bits=a.acc_bits, dataflow=a.dataflow.value,
                   macs_per_cycle=chip.peak_macs_per_cycle,
                   scratchpads=pads, dram_preset=chip.dram.preset,
                   vector_dtype=chip.vector.dtype)

    @classmethod
    def nvdla(cls, cfg: NvdlaConfig, precision: str) -> HardwareFacts:
        """An NVDLA build running ``precision``: its MAC cells, CACC's accumulator width and
        the convolution buffer (CBUF)."""
        from hw.nvdla.config import CACC_BITS
        from hw.nvdla.cycles import BYTES
        bank = cfg.cbuf_bank_width_bytes * cfg.cbuf_bank_depth
        return cls(precision=precision, operand_bits=8 * BYTES[precision],
                   acc_bits=CACC_BITS[precision], dataflow=None,
                   macs_per_cycle=cfg.macs(precision),
                   scratchpads={"cbuf": (bank * cfg.cbuf_banks, bank)}, dram_preset=cfg.dram)


@dataclass(frozen=True)
class ScratchpadRates:
    """One scratchpad: its capacity, the bank one access touches, pJ per bit read and written."""

    capacity_bytes: int
    bank_bytes: float
    read_pj_per_bit: float
    write_pj_per_bit: float


@dataclass(frozen=True)
class EnergyRates:
    """Energy per action, area and leakage of one chip under one technology.

    Attributes
    ----------
    technology: the table's name.
    precision, acc_bits: the MAC's operand precision and accumulator width.
    mac_pj: one MAC (:meth:`~hw.energy.Technology.mac_pj`).
    vector_op_pj: one post-processing element operation (NVDLA SDP/PDP/CDP): a 32-bit add plus
        a 16-bit multiply, in fp32 for floating-point precisions.
    vector_pj: one operation of the vector engine, by kind (:data:`hw.vector.config.OPS`), in
        its compute datatype (:meth:`~hw.energy.Technology.vector_op_pj`); empty without one.
    register_pj_per_bit: one PE register bit written.
    dataflow: the array's own dataflow (None for NVDLA).
    register_bits_per_mac_by_dataflow: :func:`register_bits_per_mac` for every dataflow (the
        mapper may try each); empty for NVDLA.
    scratchpads: :class:`ScratchpadRates` by scratchpad name.
    dram_preset: the DRAM preset (``""`` when none).
    dram_kind: the DRAM type charged; ``dram_kind_assumed`` when the preset does not say and
        :data:`ASSUMED_DRAM_KIND` is charged.
    dram_pj_per_bit, link_kind, link_pj_per_bit: per bit on the DRAM bus, over the host link.
    noc_pj_per_bit_hop: per bit per hop on a multi-core chip's on-chip network.
    area_mm2: the area leakage is charged on: ``mac`` and ``sram.<name>`` per scratchpad.
    leakage_w: static power of that area.
    """

    technology: str
    precision: str
    acc_bits: int
    mac_pj: float
    vector_op_pj: float
    vector_pj: dict[str, float]
    register_pj_per_bit: float
    dataflow: str | None
    register_bits_per_mac_by_dataflow: dict[str, int]
    scratchpads: dict[str, ScratchpadRates]
    dram_preset: str
    dram_kind: str
    dram_kind_assumed: bool
    dram_pj_per_bit: float
    link_kind: str
    link_pj_per_bit: float
    area_mm2: dict[str, float]
    leakage_w: float
    noc_pj_per_bit_hop: float

    @property
    def register_bits_per_mac(self) -> int | None:
        """Register bits per MAC in the array's own dataflow (None for NVDLA)."""
        return self.register_bits_per_mac_by_dataflow.get(self.dataflow)

    @property
    def area_total_mm2(self) -> float:
        return sum(self.area_mm2.values())


def energy_rates(tech: Technology, facts: HardwareFacts, *, dram_kind: str | None = None,
                 link_kind: str = "pcie") -> EnergyRates:
    """The rates of the chip ``facts`` describe under ``tech``. ``dram_kind`` overrides the DRAM
    type the preset implies; ``link_kind`` is the host link's type. An unknown type is an
    :class:`~hw.energy.EnergyError` naming the table and the allowed types."""
    precision, acc = facts.precision, facts.acc_bits
    implied = dram_kind or dram_kind_for_preset(facts.dram_preset)
    fp = precision not in ("int8", "int16")
    vector = (tech.add_pj("fp", 32) + tech.mult_pj("fp", 32)) if fp else \
        (tech.add_pj("int", 32) + tech.mult_pj("int", 16))
    registers = {}
    if facts.dataflow is not None:
        registers = {df.value: register_bits_per_mac(df, facts.operand_bits, acc)
                     for df in Dataflow}
    pads = {name: ScratchpadRates(capacity, bank, tech.sram_pj_per_bit(bank),
                                  tech.sram_pj_per_bit(bank, write=True))
            for name, (capacity, bank) in facts.scratchpads.items()}
    area = tech.chip_area_mm2(facts.macs_per_cycle, precision, acc,
                              {name: capacity for name, (capacity, _) in facts.scratchpads.items()})
    kind = implied or ASSUMED_DRAM_KIND
    return EnergyRates(
        technology=tech.name, precision=precision, acc_bits=acc,
        mac_pj=tech.mac_pj(precision, acc), vector_op_pj=vector,
        vector_pj=({op: tech.vector_op_pj(op, facts.vector_dtype) for op in VECTOR_OPS}
                   if facts.vector_dtype else {}),
        register_pj_per_bit=tech.register_pj_per_bit, dataflow=facts.dataflow,
        register_bits_per_mac_by_dataflow=registers, scratchpads=pads,
        dram_preset=facts.dram_preset, dram_kind=kind, dram_kind_assumed=implied is None,
        dram_pj_per_bit=tech.dram_energy_pj_per_bit(kind), link_kind=link_kind,
        link_pj_per_bit=tech.link_energy_pj_per_bit(link_kind), area_mm2=area,
        leakage_w=tech.leakage_w(sum(area.values())),
        noc_pj_per_bit_hop=tech.noc_pj_per_bit_hop)
