"""The record of one run: :class:`RunRecord` (the inputs, every layer, the totals) and its
:class:`LayerResult` rows, written to and read from ``summary.json``'s ``run`` here only.

Plain data: every view (terminal table, CSV, JSON, HTML, plots, timeline, metrics) reads a
record and none is imported here. :class:`npulab.simulate.RunResult` adds the notebook face.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import TYPE_CHECKING

from hw.errors import ConfigError
from hw.spec import ChipSpec

if TYPE_CHECKING:
    from hw.executor import ExecutionResult

__all__ = ["LayerActions", "SramAccess", "LayerResult", "RunRecord", "SCOPE_NOTES", "SCOPE_NOTE",
           "IDEAL_VECTOR_NOTE"]

SCOPE_NOTES = {
    "native": ("full chip: tiles scheduled over the scratchpads, cycle-level DRAM, host link and "
               "DMA; stalls included; vector ops on the vector engine"),
    "compute": ("compute-only: operands assumed resident in SRAM with unlimited bandwidth "
                "(no DRAM, no stalls); layers run one after another on an empty array or "
                "vector engine"),
    "scalesim": ("SCALE-Sim compute model (CALC): operands resident in SRAM, no DRAM, no stalls; "
                 "layers run one after another; each layer counts one cycle less than its folds "
                 "take, as SCALE-Sim does (its last-cycle-index convention, issue 125), so a "
                 "fully used array can show a hair over 100 % utilization; vector ops not "
                 "simulated (SCALE-Sim has no vector unit)"),
}
#: Appended to the native and compute scopes of a chip whose vector engine is ideal.
IDEAL_VECTOR_NOTE = "; vector engine ideal: vector ops cost nothing"
#: Kept for callers of the compute-only scope text.
SCOPE_NOTE = SCOPE_NOTES["compute"]


@dataclass(frozen=True)
class SramAccess:
    """Bits read from and written to one on-chip memory level."""

    read_bits: int = 0
    write_bits: int = 0


_NO_ACCESS = SramAccess()


@dataclass(frozen=True)
class LayerActions:
    """What the hardware did in one layer, in the units the energy model charges
    (:mod:`npulab.metrics` x :class:`hw.energy.EnergyRates`).

    Attributes
    ----------
    macs: multiply-accumulates.
    precision, acc_bits: the operand precision and accumulator width they ran at.
    reg_bits: PE register (register-file) bits written.
    sram: :class:`SramAccess` per on-chip memory level, by name (a level not named had none).
    dram_bits: bits on the DRAM bus (whole bursts). link_bits: bits over the host link.
    vector_ops: post-processing element operations.
    active_cycles: the span the layer's own work needed, when it is longer than its window
        (a native run's prefetch); None: the window.
    vector_by_op: a vector engine's operations by kind (:data:`hw.vector.config.OPS`), in
        ``vector_dtype``; None where the chip counts post-processing operations only
        (``vector_ops``, NVDLA).
    noc_bit_hops: bits times hops on a multi-core chip's on-chip network (0: none).
    act_zeros: the fraction of ``macs`` whose streamed activation was zero: the PE gates them,
        so they cost no MAC energy (0: none).
    """

    macs: int
    precision: str
    acc_bits: int
    reg_bits: int
    sram: dict[str, SramAccess]
    dram_bits: int
    link_bits: int
    vector_ops: int
    active_cycles: int | None = None
    vector_by_op: dict | None = None
    vector_dtype: str | None = None
    noc_bit_hops: int = 0
    act_zeros: float = 0.0

    @property
    def gated_macs(self) -> float:
        """MACs gated off by zero activations (``macs x act_zeros``)."""
        return self.macs * self.act_zeros

    def level(self, name: str) -> SramAccess:
        """The accesses of memory level ``name`` (none when the layer did not touch it)."""
        return self.sram.get(name, _NO_ACCESS)

    def to_dict(self) -> dict:
        return {"macs": self.macs, "precision": self.precision, "acc_bits": self.acc_bits,
                "reg_bits": self.reg_bits,
                "sram": {name: {"read_bits": a.read_bits, "write_bits": a.write_bits}
                         for name, a in self.sram.items()},
                "dram_bits": self.dram_bits, "link_bits": self.link_bits,
                "vector_ops": self.vector_ops, "active_cycles": self.active_cycles,
                "vector_by_op": None if self.vector_by_op is None else dict(self.vector_by_op),
                "vector_dtype": self.vector_dtype,
                **({"noc_bit_hops": self.noc_bit_hops} if self.noc_bit_hops else {}),
                **({"act_zeros": self.act_zeros} if self.act_zeros else {})}

    @classmethod
    def from_dict(cls, data: dict, where: str = "actions") -> LayerActions:
        """The actions of :meth:`to_dict`; a missing or malformed entry is a
        :class:`hw.errors.ConfigError` naming ``where``."""
        keys = ("macs", "precision", "acc_bits", "reg_bits", "sram", "dram_bits", "link_bits",
                "vector_ops")
        missing = [k for k in keys if k not in data] if isinstance(data, dict) else list(keys)
        if missing:
            raise ConfigError(f"{where}: lacks {', '.join(missing)}")
        try:
            return cls._from_dict(data)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"{where}: sram = {data['sram']!r}: must map each memory level "
                              f"to its read_bits and write_bits ({type(exc).__name__})") from None

    @classmethod
    def _from_dict(cls, data: dict) -> LayerActions:
        return cls(macs=data["macs"], precision=data["precision"],
                   acc_bits=data["acc_bits"], reg_bits=data["reg_bits"],
                   sram={name: SramAccess(a["read_bits"], a["write_bits"])
                         for name, a in data["sram"].items()},
                   dram_bits=data["dram_bits"], link_bits=data["link_bits"],
                   vector_ops=data["vector_ops"], active_cycles=data.get("active_cycles"),
                   vector_by_op=data.get("vector_by_op"), vector_dtype=data.get("vector_dtype"),
                   noc_bit_hops=data.get("noc_bit_hops", 0),
                   act_zeros=data.get("act_zeros", 0.0))


@dataclass(frozen=True)
class LayerResult:
    """One op of the graph. Array metrics are ``None`` for ops no engine runs (``engine == "none"``)
    and for ops fused into another op's schedule (``engine == "fused"``, see ``fused``)."""

    name: str
    op: str
    engine: str
    gemm_count: int | None
    gemm_m: int | None
    gemm_n: int | None
    gemm_k: int | None
    macs: int
    cycles: int | None
    pe_busy_cycles: int | None
    utilization_pct: float | None
    mapping_efficiency_pct: float | None
    ifmap_sram_reads: int | None
    filter_sram_reads: int | None
    ofmap_sram_writes: int | None
    ofmap_sram_reads: int | None
    folds: int | None
    # native (full chip) timing only; None in the compute-only modes
    compute_cycles: int | None = None
    stall_dram_cycles: int | None = None
    stall_link_cycles: int | None = None
    stall_sram_cycles: int | None = None
    stall_vector_cycles: int | None = None
    dram_read_bytes: int | None = None
    dram_write_bytes: int | None = None
    link_bytes: int | None = None
    # the busiest resource the simulation found (compute, dram, link); bandwidths, MACs per
    # DRAM byte and the roofline are metrics (:mod:`npulab.metrics`), not fields
    bound: str | None = None
    tiling: str | None = None
    # "<kind>:<anchor>" for an op of a fused group (compiler.fusion; docs/vector.md): the
    # anchor's row holds the whole group's cycles, MACs and bytes, the others' engine is "fused"
    fused: str | None = None
    # What the hardware did (:class:`LayerActions`); None for ops no engine runs.
    actions: LayerActions | None = None
    # cores of a multi-core chip the op ran on, each on its share (None on one core)
    cores: int | None = None
    # the pipeline stage the op ran in (compiler.backends.stages; None: not pipelined)
    stage: int | None = None
    # Busy cycles per engine unit within the layer (NVDLA: cdma, cmac, sdp, pdp, cdp, wdma),
    # for the timeline; None where the runner has the command-level trace instead.
    units: dict | None = None

    def __repr__(self) -> str:
        if self.engine == "fused":
            return f"LayerResult({self.name}: {self.op}, fused ({self.fused}))"
        if self.cycles is None:
            return f"LayerResult({self.name}: {self.op}, not simulated (engine {self.engine}))"
        gemm = (f", GEMM {self.gemm_count}x {self.gemm_m}x{self.gemm_n}x{self.gemm_k}"
                if self.gemm_m is not None else "")
        bound = f", bound {self.bound}" if self.bound else ""
        return (f"LayerResult({self.name}: {self.op}{gemm}, {self.cycles:,} cycles, "
                f"{self.macs:,} MACs, util {self.utilization_pct:.1f} %{bound})")


_LAYER_FIELDS = tuple(f.name for f in fields(LayerResult))
_LAYER_NAMES = frozenset(_LAYER_FIELDS)


def _plain_copy(value):
    """A deep copy of plain data (dicts, lists, tuples of scalars), as ``asdict`` makes of a
    field, without its per-object overhead (``to_dict`` runs once per layer of long
    topologies)."""
    if isinstance(value, dict):
        return {k: _plain_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain_copy(v) for v in value)
    return value


def _layer_dict(layer: LayerResult) -> dict:
    """``asdict(layer)``, faster."""
    out = {name: _plain_copy(getattr(layer, name)) for name in _LAYER_FIELDS}
    if layer.cores is None:         # a one-core chip's layers read as they always did
        del out["cores"]
    if layer.stage is None:         # nor do the layers of a chip that is not pipelined
        del out["stage"]
    if layer.actions is not None:
        out["actions"] = layer.actions.to_dict()
    return out


def _layer_from_dict(layer: dict, where: str) -> LayerResult:
    """A layer of ``to_dict()``; keys a layer no longer has (older summaries) are dropped."""
    values = {k: v for k, v in layer.items() if k in _LAYER_NAMES}
    if values.get("actions") is not None:
        values["actions"] = LayerActions.from_dict(
            values["actions"], f"{where}: layer {values.get('name')!r}: actions")
    return LayerResult(**values)


@dataclass(frozen=True)
class RunRecord:
    """A whole run: the inputs that produced it, every layer, and the totals. Plain data: the
    views (:mod:`npulab.report`, :mod:`npulab.metrics`, :mod:`npulab.timeline`,
    :mod:`npulab.output`) read it; :meth:`to_dict` and :meth:`from_dict` are ``summary.json``'s
    ``run``.

    ``spec`` is the chip (:class:`hw.spec.ChipSpec`) the run was timed on, typed from the
    runner to every view; ``config`` is its plain-data form, written to ``summary.json``."""

    model: str
    chip: str
    spec: ChipSpec = field(repr=False)
    timing: str
    scope: str
    layers: tuple[LayerResult, ...]
    totals: dict = field(default_factory=dict)
    dram: dict = field(default_factory=dict)
    execution: ExecutionResult | None = field(default=None, repr=False, compare=False)

    @cached_property
    def config(self) -> dict:
        """The chip's config as plain data (:func:`hw.configfile.chip_spec_to_dict`)."""
        from hw.configfile import chip_spec_to_dict
        return chip_spec_to_dict(self.spec)

    @property
    def kind(self) -> str:
        """The chip's engine kind (``systolic``, ``nvdla``): which runner timed it."""
        return self.spec.kind

    def to_dict(self) -> dict:
        """Plain data (JSON-ready); the execution trace is left out."""
        return {"model": self.model, "chip": self.chip, "config": self.config,
                "timing": self.timing, "scope": self.scope,
                "layers": [_layer_dict(x) for x in self.layers], "totals": self.totals,
                "dram": self.dram}

    @classmethod
    def from_dict(cls, run: dict, where: str = "run"):
        """The run of ``to_dict()`` (e.g. ``summary["run"]``); keys a layer no longer has (older
        summaries) are dropped, missing ones take defaults. The execution trace is not saved.
        A config that no longer loads is a :class:`hw.errors.ConfigError` naming ``where``."""
        from hw.configfile import chip_spec_from_dict
        layers = tuple(_layer_from_dict(layer, where) for layer in run["layers"])
        return cls(model=run["model"], chip=run["chip"],
                   spec=chip_spec_from_dict(run["config"], f"{where}.config"),
                   timing=run["timing"], scope=run.get("scope", ""), layers=layers,
                   totals=run.get("totals") or {}, dram=run.get("dram") or {})

    def _clock_mhz(self) -> float:
        return self.spec.clock_mhz

    def _hardware(self) -> str:
        return self.spec.engine.label or self.spec.engine.name
