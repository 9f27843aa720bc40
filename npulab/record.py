"""The record of one run: :class:`RunRecord` (the inputs, every layer, the totals) and its
:class:`LayerResult` rows, written to and read from ``summary.json``'s ``run`` here only.

Plain data: every view (terminal table, CSV, JSON, HTML, plots, timeline, metrics) reads a
record and none is imported here. :class:`npulab.simulate.RunResult` adds the notebook face.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hw.executor import ExecutionResult

__all__ = ["LayerResult", "RunRecord", "SCOPE_NOTES", "SCOPE_NOTE"]

SCOPE_NOTES = {
    "native": ("full chip: tiles scheduled over the scratchpads, cycle-level DRAM, host link and "
               "DMA; stalls included; pool/eltwise ops not simulated (no vector unit)"),
    "compute": ("compute-only: operands assumed resident in SRAM with unlimited bandwidth "
                "(no DRAM, no stalls); layers run one after another on an empty array"),
    "scalesim": ("SCALE-Sim compute model (CALC): operands resident in SRAM, no DRAM, no stalls; "
                 "layers run one after another; each layer counts one cycle less than its folds "
                 "take, as SCALE-Sim does (its last-cycle-index convention, issue 125), so a "
                 "fully used array can show a hair over 100 % utilization"),
}
#: Kept for callers of the compute-only scope text.
SCOPE_NOTE = SCOPE_NOTES["compute"]


@dataclass(frozen=True)
class LayerResult:
    """One op of the graph. Array metrics are ``None`` for ops no engine runs (``engine == "none"``)."""

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
    dram_read_bytes: int | None = None
    dram_write_bytes: int | None = None
    link_bytes: int | None = None
    # the busiest resource the simulation found (compute, dram, link); bandwidths, MACs per
    # DRAM byte and the roofline are metrics (:mod:`npulab.metrics`), not fields
    bound: str | None = None
    tiling: str | None = None
    # What the hardware did, in the units the energy model charges (:mod:`npulab.metrics`):
    # ``macs``, ``precision``, ``acc_bits``, ``reg_bits`` (PE register bits written),
    # ``sram`` {name: {"read_bits", "write_bits"}}, ``dram_bits`` (on the bus), ``link_bits``,
    # ``vector_ops`` (post-processing element operations). None for ops no engine runs.
    actions: dict | None = None
    # Busy cycles per engine unit within the layer (NVDLA: cdma, cmac, sdp, pdp, cdp, wdma),
    # for the timeline; None where the runner has the command-level trace instead.
    units: dict | None = None

    def __repr__(self) -> str:
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
    return {name: _plain_copy(getattr(layer, name)) for name in _LAYER_FIELDS}


@dataclass(frozen=True)
class RunRecord:
    """A whole run: the inputs that produced it, every layer, and the totals. Plain data: the
    views (:mod:`npulab.report`, :mod:`npulab.metrics`, :mod:`npulab.timeline`,
    :mod:`npulab.output`) read it; :meth:`to_dict` and :meth:`from_dict` are ``summary.json``'s
    ``run``."""

    model: str
    chip: str
    config: dict
    timing: str
    scope: str
    layers: tuple[LayerResult, ...]
    totals: dict = field(default_factory=dict)
    dram: dict = field(default_factory=dict)
    execution: ExecutionResult | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        """Plain data (JSON-ready); the execution trace is left out."""
        return {f: (getattr(self, f) if f != "layers" else [_layer_dict(x) for x in self.layers])
                for f in ("model", "chip", "config", "timing", "scope", "layers", "totals", "dram")}

    @classmethod
    def from_dict(cls, run: dict):
        """The run of ``to_dict()`` (e.g. ``summary["run"]``); keys a layer no longer has (older
        summaries) are dropped, missing ones take defaults. The execution trace is not saved."""
        layers = tuple(LayerResult(**{k: v for k, v in layer.items() if k in _LAYER_NAMES})
                       for layer in run["layers"])
        return cls(model=run["model"], chip=run["chip"], config=run["config"],
                   timing=run["timing"], scope=run.get("scope", ""), layers=layers,
                   totals=run.get("totals") or {}, dram=run.get("dram") or {})

    def _clock_mhz(self) -> float:
        if self.timing == "nvdla":
            return self.config["nvdla"]["clock_mhz"]
        return self.config["chip"]["clock_mhz"]

    def _hardware(self) -> str:
        if self.timing == "nvdla":
            n = self.config["nvdla"]
            return f"NVDLA {n['atomic_c']}x{n['atomic_k']} atomic C x K"
        a = self.config["array"]
        return f"{a['rows']}x{a['cols']} {a['dataflow']} {a['precision']}"
