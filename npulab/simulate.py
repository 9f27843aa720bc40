"""Run a workload graph on a chip: per-layer cycles, MACs, utilization and SRAM accesses.

Scope today (said in every report): **compute only**. Operands are assumed to be resident in
SRAM with unlimited bandwidth; DRAM, host links and stalls arrive with the memory system.
Each layer starts on an empty array (no overlap between layers), so a network's cycles are
the sum of its layers'. Pool and Eltwise ops have no matrix engine to run on in this chip
model: they are listed with ``engine = "none"`` and no cycles, and the totals say how many
there were.

Timing modes:

* ``native``: the timing engine (:mod:`hw.systolic.timing`), which equals the register-level
  model cycle for cycle. A layer with several GEMMs (conv groups, batched GEMMs) streams them
  back to back through the array.
* ``scalesim``: SCALE-Sim's closed-form compute model (:mod:`hw.systolic.scalesim_compat`); a
  layer with several GEMMs runs them as separate SCALE-Sim layers (how SCALE-Sim expands
  depthwise layers), and its cycles are their sum.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from compiler.ir import Graph
from hw.chip import ChipConfig
from hw.configfile import chip_config_to_dict
from hw.systolic.mapping import map_gemm
from hw.systolic.scalesim_compat import scalesim_timing
from hw.systolic.timing import gemm_timing

__all__ = ["TIMING_MODES", "LayerResult", "RunResult", "simulate", "SCOPE_NOTE"]

TIMING_MODES = ("native", "scalesim")
SCOPE_NOTE = ("compute-only: operands assumed resident in SRAM with unlimited bandwidth "
              "(no DRAM, no stalls); layers run one after another on an empty array")


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


@dataclass(frozen=True)
class RunResult:
    """A whole run: the inputs that produced it, every layer, and the totals."""

    model: str
    chip: str
    config: dict
    timing: str
    scope: str
    layers: tuple[LayerResult, ...]
    totals: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _array_layer(op, chip: ChipConfig, timing: str) -> LayerResult:
    shape = op.gemm_shape()
    cfg = chip.array
    if timing == "native":
        c = gemm_timing(cfg, shape.m, shape.n, shape.k, shape.count)
        cycles, busy, folds = c.cycles, c.pe_busy_cycles, c.folds
        ifmap, filt, ofw, ofr = c.ifmap_reads, c.filter_reads, c.ofmap_writes, c.ofmap_reads
    else:
        s = scalesim_timing(cfg, shape.m, shape.n, shape.k)
        n = shape.count
        cycles, busy, folds = n * s.total_cycles, n * s.macs, n * s.folds
        ifmap, filt = n * s.ifmap_sram_reads, n * s.filter_sram_reads
        ofw, ofr = n * s.ofmap_sram_writes, 0
    return LayerResult(
        name=op.name, op=type(op).__name__, engine="array", gemm_count=shape.count,
        gemm_m=shape.m, gemm_n=shape.n, gemm_k=shape.k, macs=shape.macs, cycles=cycles,
        pe_busy_cycles=busy, utilization_pct=100.0 * shape.macs / (cfg.pes * cycles),
        mapping_efficiency_pct=_mapping_efficiency(cfg, shape, folds),
        ifmap_sram_reads=ifmap, filter_sram_reads=filt, ofmap_sram_writes=ofw,
        ofmap_sram_reads=ofr, folds=folds,
    )


def _mapping_efficiency(cfg, shape, folds: int) -> float:
    """Mean fraction of PEs holding work per fold (SCALE-Sim's "Mapping Efficiency")."""
    mp = map_gemm(cfg, shape.m, shape.n, shape.k, shape.count)
    return 100.0 * shape.count * mp.spatial_rows * mp.spatial_cols / (folds * cfg.pes)


def _idle_layer(op) -> LayerResult:
    return LayerResult(
        name=op.name, op=type(op).__name__, engine="none", gemm_count=None, gemm_m=None,
        gemm_n=None, gemm_k=None, macs=0, cycles=None, pe_busy_cycles=None,
        utilization_pct=None, mapping_efficiency_pct=None, ifmap_sram_reads=None,
        filter_sram_reads=None, ofmap_sram_writes=None, ofmap_sram_reads=None, folds=None,
    )


def _totals(layers: list[LayerResult], chip: ChipConfig) -> dict:
    run = [layer for layer in layers if layer.engine == "array"]
    cycles = sum(layer.cycles for layer in run)
    macs = sum(layer.macs for layer in run)
    latency_s = cycles / chip.clock_hz
    totals = {
        "cycles": cycles,
        "macs": macs,
        "pe_busy_cycles": sum(layer.pe_busy_cycles for layer in run),
        "utilization_pct": 100.0 * macs / (chip.array.pes * cycles) if cycles else 0.0,
        "ifmap_sram_reads": sum(layer.ifmap_sram_reads for layer in run),
        "filter_sram_reads": sum(layer.filter_sram_reads for layer in run),
        "ofmap_sram_writes": sum(layer.ofmap_sram_writes for layer in run),
        "ofmap_sram_reads": sum(layer.ofmap_sram_reads for layer in run),
        "latency_s": latency_s,
        # 2 ops per MAC (multiply and add), the usual TOPS convention.
        "effective_tops": 2 * macs / latency_s / 1e12 if cycles else 0.0,
        "peak_tops": 2 * chip.array.pes * chip.clock_hz / 1e12,
        "layers_simulated": len(run),
        "layers_not_simulated": len(layers) - len(run),
    }
    return totals


def simulate(graph: Graph, chip: ChipConfig, timing: str = "native", progress=None) -> RunResult:
    """Simulate every op of ``graph`` on ``chip``.

    ``progress``, if given, is called as ``progress(done, total, op_name)`` after each op.
    """
    if timing not in TIMING_MODES:
        raise ValueError(f"timing = {timing!r}: must be one of {', '.join(TIMING_MODES)}")
    layers = []
    for index, op in enumerate(graph.ops):
        layers.append(_array_layer(op, chip, timing) if op.gemm_shape() is not None else _idle_layer(op))
        if progress is not None:
            progress(index + 1, len(graph.ops), op.name)
    return RunResult(
        model=graph.name, chip=chip.name, config=chip_config_to_dict(chip),
        timing=timing, scope=SCOPE_NOTE, layers=tuple(layers), totals=_totals(layers, chip),
    )
