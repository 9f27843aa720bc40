"""Run a workload graph on a chip: per-layer cycles, stalls, memory traffic and bandwidths.

Timing modes:

* ``native`` (default): the full chip. The compiler (:mod:`compiler.backends.systolic`) tiles every matrix
  op to fit the scratchpads and emits load / compute / store commands; the executor
  (:mod:`hw.executor`) runs them against the systolic timing engine, the cycle-level DRAM model
  and the host link. Layers overlap where the schedule allows (the next layer's weights are
  prefetched while the current one computes); a layer's ``cycles`` is the window between the
  previous layer's end and its own, so they add up to the network's; a window always holds
  the layer's own compute (it ends early where the next layer's compute starts under this
  layer's stores), so no layer shows fewer cycles than MACs / PEs.
On a multi-core chip ``compute`` and ``scalesim`` time each op's share on one core (the split
of :mod:`compiler.backends.multicore`; the layer's ``cores`` says how many run it).

* ``compute``: compute only. Operands are assumed resident in SRAM with unlimited bandwidth;
  each layer starts on an empty array and its cycles are the timing engine's
  (:mod:`hw.systolic.timing`, which equals the register-level model cycle for cycle). A layer
  with several GEMMs (conv groups, batched GEMMs) streams them back to back.
* ``scalesim``: SCALE-Sim's closed-form compute model (:mod:`hw.systolic.scalesim_compat`); a
  layer with several GEMMs runs them as separate SCALE-Sim layers, and its cycles are their sum.

Vector ops (pooling, activations, element-wise ops, softmax, norms, reductions, casts, copies)
run on the chip's vector engine (:mod:`hw.vector`): ``native`` tiles them through the
scratchpads beside the GEMMs (:mod:`compiler.backends.systolic_vector`); ``compute`` times the
same tiles on the engine alone, one after another. Their layers have ``engine = "vector"``.
``scalesim`` lists them with ``engine = "none"`` and no cycles, as SCALE-Sim has no vector
unit; so does every mode on a chip whose vector engine is ``ideal`` (their output is taken to be
in DRAM as soon as their inputs are), and views (a reshape). The totals say how many there
were.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from compiler.ir import Conv2d, Graph
from npulab.choices import TIMING_MODES
from compiler.backends.multicore import share_graph, with_sums
from compiler.backends.systolic import compile_graph, split_score
from compiler.backends.systolic_vector import is_vector_op
from compiler.options import CompileOptions
from hw.chip import SRAM_NAMES, ChipConfig
from hw.energy.rates import register_bits_per_mac
from hw.energy.tech import DEFAULT_TECHNOLOGY
from hw.executor import ExecutionResult, execute
from hw.program import Kind
from hw.spec import ChipSpec, chip_spec
from hw.systolic.config import Dataflow
from hw.systolic.mapping import map_gemm
from hw.systolic.scalesim_compat import scalesim_timing
from hw.sparsity import array_nm, filter_read_bits, mix_label, whole_groups
from hw.systolic.timing import gemm_timing
from hw.vector.config import OPS as VECTOR_OP_KINDS
from hw.vector.timing import T_CYCLES, TileTiming
from npulab.record import (
    IDEAL_VECTOR_NOTE, SCOPE_NOTE, SCOPE_NOTES, LayerActions, LayerResult, RunRecord, SramAccess,
)

__all__ = ["TIMING_MODES", "LayerResult", "RunRecord", "RunResult", "simulate", "SCOPE_NOTE"]

class RunResult(RunRecord):
    """A run as :func:`simulate` returns it: the :class:`~npulab.record.RunRecord` with a
    notebook face (a short ``repr``, an HTML table, ``metrics()``, ``to_pandas()``, ``summary()``
    and the plots), each a view from :mod:`npulab.metrics`, :mod:`npulab.report`,
    :mod:`npulab.output` and :mod:`npulab.plots`. ``RunResult.from_dict(summary["run"])``
    gives one back from a saved ``summary.json``."""

    def summary_lines(self) -> list[str]:
        """The headline numbers, one short line each (``repr`` and the HTML view show them)."""
        t = self.totals
        lines = [
            f"cycles {t['cycles']:,} = {t['latency_s'] * 1e3:.4g} ms at {self._clock_mhz():g} MHz",
            f"MACs {t['macs']:,}, utilization {t['utilization_pct']:.1f} %, "
            f"{t['effective_tops']:.3g} of {t['peak_tops']:.3g} TOPS",
        ]
        if t.get("dram_read_bytes") is not None:
            # the metrics' words and numbers (npulab.metrics.network_items), as every view
            from npulab.metrics import network_items
            lines += [f"{label} {text}" for label, text in network_items(self.metrics())]
        done = t.get("layers_simulated", len(self.layers))
        lines.append(f"layers {done} simulated, {len(self.layers) - done} not "
                     f"(to_pandas() for the table, metrics() for energy and power)")
        return lines

    def __repr__(self) -> str:
        head = (f"RunResult: {self.model} on {self.chip} ({self._hardware()}), timing "
                f"{self.timing}, {len(self.layers)} layers")
        return "\n".join([head] + ["  " + line for line in self.summary_lines()])

    def _repr_html_(self) -> str:
        from hw._notebook import html_table
        from npulab.report import csv_table
        cols = ["name", "op", "cycles", "macs", "compute_util_pct", "bound", "dram_read_bytes",
                "dram_write_bytes", "stall_dram_cycles"]
        header, rows = csv_table(self)
        idx = [header.index(c) for c in cols]
        keep = [i for i in idx if any(r[i] is not None for r in rows)]
        return html_table(
            f"RunResult: {self.model} on {self.chip} ({self._hardware()}), timing {self.timing}",
            [header[i] for i in keep], [[r[i] for i in keep] for r in rows],
            lines=self.summary_lines())

    def metrics(self, tech=DEFAULT_TECHNOLOGY, *, dram_kind: str | None = None, link_kind: str = "pcie"):
        """:func:`npulab.metrics.compute_metrics` of this run (energy, power, roofline), with
        the energy table ``tech`` (a name such as ``"45nm"``/``"7nm"``, a TOML path or a
        :class:`hw.energy.Technology`; default: ``npulab run``'s ``--tech`` default,
        :data:`hw.energy.DEFAULT_TECHNOLOGY`), so the numbers equal the CLI's."""
        from npulab.metrics import compute_metrics
        return compute_metrics(self, tech, dram_kind=dram_kind, link_kind=link_kind)

    def to_pandas(self, metrics=None):
        """One row per layer, the columns of ``layers.csv`` (:func:`npulab.report.to_csv`):
        every scalar :class:`LayerResult` field, plus the per-layer metric columns when
        ``metrics`` (from :meth:`metrics`) is given -- ``npulab run -o DIR`` writes
        ``layers.csv`` with the metrics of ``--tech``, :meth:`metrics`' default). Needs pandas."""
        from hw._notebook import frame
        from npulab.report import csv_table
        header, rows = csv_table(self, metrics)
        return frame(header, rows)

    def summary(self, metrics=None) -> dict:
        """The ``summary.json`` dict (``npulab run -o``) of this run; ``metrics`` default to
        :meth:`metrics` (the CLI's default energy table)."""
        from npulab.output import summary_dict
        return summary_dict(self, metrics if metrics is not None else self.metrics())

    def plot_roofline(self, metrics=None):
        """The roofline of every layer (:func:`npulab.plots.roofline`): a matplotlib Figure
        (a notebook shows it inline; ``fig.savefig(path)`` writes it)."""
        from npulab.plots import roofline
        return roofline(self.summary(metrics))

    def plot_breakdown(self, metrics=None):
        """Compute and stall cycles per layer, stacked (:func:`npulab.plots.cycle_breakdown`)."""
        from npulab.plots import cycle_breakdown
        return cycle_breakdown(self.summary(metrics))

    def plot_energy(self, metrics=None):
        """Energy by component, network and per layer (:func:`npulab.plots.energy_breakdown`)."""
        from npulab.plots import energy_breakdown
        return energy_breakdown(self.summary(metrics))

    def plot_utilization(self, metrics=None):
        """Compute and memory-level utilization per layer (:func:`npulab.plots.utilization`)."""
        from npulab.plots import utilization
        return utilization(self.summary(metrics))


@functools.lru_cache(maxsize=4096)
def _array_timing(cfg, timing: str, count: int, m: int, n: int, k: int,
                  nm: tuple[int, int] | None = None) -> tuple[int, ...]:
    """``(cycles, busy, folds, ifmap, filter, ofmap writes, ofmap reads)`` of one op shape on
    the array (``nm``: its weights N:M compressed on sparse PEs, compute timing), memoised:
    networks and long topologies repeat layer shapes, and identical layers (same shape, same
    array, same timing mode) are timed once (the result depends on nothing else)."""
    if timing == "compute":
        c = gemm_timing(cfg, m, n, whole_groups(k, nm), count, nm=nm)
        return (c.cycles, c.pe_busy_cycles, c.folds, c.ifmap_reads, c.filter_reads,
                c.ofmap_writes, c.ofmap_reads)
    s = scalesim_timing(cfg, m, n, k)
    return (count * s.total_cycles, count * s.macs, count * s.folds, count * s.ifmap_sram_reads,
            count * s.filter_sram_reads, count * s.ofmap_sram_writes, 0)


def _array_layer(op, chip: ChipConfig, timing: str) -> LayerResult:
    """The op alone on the array: the timing engine (``compute``) or SCALE-Sim's formulas.
    The op's own sparsity counts as in a native run: N:M weights on the array's sparse PEs
    (compute timing; SCALE-Sim's formulas are dense), zero activations gating MAC energy."""
    shape = op.gemm_shape()
    cfg = chip.array
    nm = (array_nm(getattr(op, "weight_nm", None), cfg.sparse_m)
          if timing == "compute" and op.stored_weights else None)
    cycles, busy, folds, ifmap, filt, ofw, ofr = _array_timing(
        cfg, timing, shape.count, shape.m, shape.n, shape.k, nm)
    return LayerResult(
        name=op.name, op=type(op).__name__, engine="array", gemm_count=shape.count,
        gemm_m=shape.m, gemm_n=shape.n, gemm_k=shape.k, macs=shape.macs, cycles=cycles,
        pe_busy_cycles=busy,
        utilization_pct=100.0 * (busy if nm else shape.macs) / (cfg.macs_per_cycle * cycles),
        mapping_efficiency_pct=_mapping_efficiency(cfg, shape, folds),
        ifmap_sram_reads=ifmap, filter_sram_reads=filt, ofmap_sram_writes=ofw,
        ofmap_sram_reads=ofr, folds=folds,
        tiling=f"sparse {nm[0]}:{nm[1]}" if nm else None,
        actions=array_actions(cfg, busy if nm else shape.macs, ifmap, filt, ofw, ofr, nm=nm,
                              act_zeros=getattr(op, "act_zeros", None) or 0.0),
    )


def array_actions(cfg, macs: int, ifmap_reads: int, filter_reads: int, ofmap_writes: int,
                  ofmap_reads: int, fills: tuple[int, ...] = (0, 0, 0), dram_bytes: int = 0,
                  link_bytes: int = 0, active_cycles: int | None = None,
                  vector: dict | None = None, l2: tuple[int, int] | None = None,
                  noc_bit_hops: int = 0, nm: tuple[int, int] | None = None,
                  act_zeros: float = 0.0,
                  weight_store: tuple[str, int, int] | None = None) -> LayerActions:
    """The systolic array's actions (see :attr:`LayerResult.actions`).

    Register bits per MAC: the operands that move through the PE are latched each cycle
    (:func:`hw.energy.register_bits_per_mac`, the mapper's rule too). The array reads operands from the ifmap/filter scratchpads at operand
    width and writes (and, for partial sums, reads back) the ofmap scratchpad at accumulator
    width; ``fills`` are the bytes the DMA writes into ifmap/filter and reads out of ofmap
    (and, fourth, writes into ofmap: a fused epilogue's residual tiles).
    ``active_cycles``: the time the layer's own work needed (rates and utilizations of the layer
    are taken over it; see :mod:`npulab.metrics`). ``vector``: the vector engine's part
    (:func:`_vector_part`): its scratchpad bytes and operations by kind. ``l2``: bytes the
    shared L2 read and wrote (a chip with an L2); ``noc_bit_hops`` bits x hops on the on-chip
    network (:func:`_noc_bit_hops`). ``nm``: the layer's weights ran N:M compressed on sparse
    PEs (``macs`` are then the MACs performed; each filter read carries its index bits).
    ``act_zeros``: the fraction of those MACs whose activation was zero (gated: no MAC
    energy). ``weight_store``: ``(format, bytes, elements)`` of weights kept in a sparse format:
    the filter port reads their stored bits, ``8 x bytes / elements`` per element read."""
    op, acc = cfg.precision.bits, cfg.acc_bits
    per_mac = register_bits_per_mac(cfg.dataflow, op, acc, 0 if nm is None else nm[1])
    w_num, w_den = filter_read_bits(op, nm, weight_store)
    filter_bits = -(-int(filter_reads) * w_num // w_den)
    fill_in, fill_filter, drain, *fill_out = fills
    fill_out = fill_out[0] if fill_out else 0
    v = vector or {}
    rd = {name: 8 * int(v.get(f"{name}_read_bytes", 0)) for name in SRAM_NAMES}
    by_op = v.get("ops")
    return LayerActions(
        macs=int(macs), precision=cfg.precision.value, acc_bits=int(acc),
        reg_bits=int(macs) * per_mac,
        sram={"ifmap": SramAccess(int(ifmap_reads) * op + rd["ifmap"], 8 * int(fill_in)),
              "filter": SramAccess(filter_bits + rd["filter"],
                                   8 * int(fill_filter)),
              "ofmap": SramAccess(int(ofmap_reads) * acc + 8 * int(drain) + rd["ofmap"],
                                  int(ofmap_writes) * acc + 8 * int(v.get("ofmap_write_bytes", 0))
                                  + 8 * int(fill_out)),
              **({"l2": SramAccess(8 * int(l2[0]), 8 * int(l2[1]))} if l2 is not None else {})},
        dram_bits=8 * int(dram_bytes), link_bits=8 * int(link_bytes),
        vector_ops=sum(by_op.values()) if by_op else 0,
        active_cycles=None if active_cycles is None else int(active_cycles),
        vector_by_op=by_op, vector_dtype=v.get("dtype"), noc_bit_hops=int(noc_bit_hops),
        act_zeros=float(act_zeros),
    )


def _vector_part(c: dict, chip: ChipConfig) -> dict | None:
    """The vector engine's share of a layer's counters (None when it did nothing)."""
    if not c.get("vectors"):
        return None
    return {"ifmap_read_bytes": c["ifmap_vector_read_bytes"],
            "filter_read_bytes": c["filter_vector_read_bytes"],
            "ofmap_read_bytes": c["ofmap_vector_read_bytes"],
            "ofmap_write_bytes": c["ofmap_vector_write_bytes"],
            "ops": {op: c[f"vector_{op}_ops"] for op in VECTOR_OP_KINDS if c[f"vector_{op}_ops"]},
            "dtype": chip.vector.dtype}


@functools.lru_cache(maxsize=4096)
def _mapping_efficiency(cfg, shape, folds: int) -> float:
    """Mean fraction of PEs holding work per fold (SCALE-Sim's "Mapping Efficiency")."""
    mp = map_gemm(cfg, shape.m, shape.n, shape.k, shape.count)
    return 100.0 * shape.count * mp.spatial_rows * mp.spatial_cols / (folds * cfg.pes)


def _traffic(c: dict, chip: ChipConfig) -> tuple:
    """A layer's executor counters as moved bytes: DRAM read, DRAM written, host link, the
    scratchpad fills and drains (:func:`array_actions`' ``fills``) and the DRAM bytes energy is
    charged for (those on the bus, whole column accesses; an ideal DRAM has no bus, so the bytes
    asked for)."""
    rd = c["dram_ifmap_read_bytes"] + c["dram_filter_read_bytes"] + c["dram_psum_read_bytes"]
    wr = c["dram_ofmap_write_bytes"] + c["dram_psum_write_bytes"]
    fills = (c["ifmap_sram_fill_bytes"], c["filter_sram_fill_bytes"], c["ofmap_sram_drain_bytes"],
             c["ofmap_sram_fill_bytes"])
    energy_bytes = (c["dram_bus_read_bytes"] + c["dram_bus_write_bytes"]
                    if not chip.dram.is_ideal else rd + wr)
    return rd, wr, c["link_in_bytes"] + c["link_out_bytes"], fills, energy_bytes


def _l2(c: dict, chip: ChipConfig) -> tuple[int, int] | None:
    """Bytes the shared L2 read and wrote in a layer (None without an L2)."""
    return (c["l2_read_bytes"], c["l2_write_bytes"]) if chip.l2.present else None


def _noc_bit_hops(c: dict, chip: ChipConfig) -> int:
    """Bits x hops a layer moved on a multi-core chip's network: its bytes on it (every
    core's) x 8 x the network's mean hops (:meth:`hw.memory.noc.NocConfig.mean_hops`)."""
    if not chip.multicore:
        return 0
    return round(8 * c["noc_bytes"] * chip.noc.mean_hops(chip.cores))


def _shared_busy(c: dict, chip: ChipConfig) -> dict:
    """A multi-core chip's shared resources' busy cycles in a layer: the L2's busier side and
    the network (a core's port or the whole network, the busier)."""
    if not chip.multicore:
        return {}
    return {"l2": max(c["l2_read_port_cycles"], c["l2_write_port_cycles"]),
            "noc": max(c["noc_in_port_cycles"], c["noc_out_port_cycles"],
                       c["noc_network_in_cycles"], c["noc_network_out_cycles"])}


def _vector_layer(op, chip: ChipConfig, c: dict, native: bool = True) -> LayerResult:
    """A vector op's layer from its counters: the executor's (``native``) or the engine alone
    (``compute``, :func:`_vector_compute`)."""
    cycles = c["cycles"]
    busy = c["vector_busy_cycles"]
    ports = [c.get(f"{s}_{d}_port_cycles", 0) for s in SRAM_NAMES for d in ("read", "write")]
    active = max(cycles, busy, c.get("dram_transfer_cycles", 0), c.get("link_transfer_cycles", 0),
                 *ports)
    dram_rd = dram_wr = link = None
    fills = (0, 0, 0)
    dram_bytes = 0
    demand = {"vector": busy}
    if native:
        dram_rd, dram_wr, link, fills, dram_bytes = _traffic(c, chip)
        demand.update(dram=c["dram_transfer_cycles"], link=c["link_transfer_cycles"],
                      **_shared_busy(c, chip))
        active = max(active, *demand.values())
    return LayerResult(
        name=op.name, op=type(op).__name__, engine="vector", gemm_count=None, gemm_m=None,
        gemm_n=None, gemm_k=None, macs=0, cycles=cycles, pe_busy_cycles=0,
        utilization_pct=0.0, mapping_efficiency_pct=None, ifmap_sram_reads=0,
        filter_sram_reads=0, ofmap_sram_writes=0, ofmap_sram_reads=0, folds=None,
        compute_cycles=c.get("compute_cycles") if native else None,
        stall_dram_cycles=c.get("stall_dram_cycles") if native else None,
        stall_link_cycles=c.get("stall_link_cycles") if native else None,
        stall_sram_cycles=c.get("stall_sram_cycles") if native else None,
        stall_vector_cycles=c.get("stall_vector_cycles") if native else cycles,
        dram_read_bytes=dram_rd, dram_write_bytes=dram_wr, link_bytes=link,
        bound=max(demand, key=demand.get) if native else None,
        actions=array_actions(chip.array, 0, 0, 0, 0, 0, fills, dram_bytes=dram_bytes,
                              link_bytes=link or 0, active_cycles=active,
                              vector=_vector_part(c, chip), l2=_l2(c, chip) if native else None,
                              noc_bit_hops=_noc_bit_hops(c, chip) if native else 0),
        units={"vector": busy},
    )


def _vector_compute(op, chip: ChipConfig) -> dict:
    """``compute`` mode: the op's tiles (as ``native`` cuts them) on the vector engine alone,
    one after another, operands in the scratchpads: counters in the executor's names."""
    from compiler.backends.systolic_vector import tile_list, vector_plan  # noqa: I001
    tiles = tile_list(op, vector_plan(op, chip))
    works = sorted({t.work for t in tiles}, key=lambda w: w.name)
    index = {w: i for i, w in enumerate(works)}
    passes = [t.work.passes for t in tiles]
    timing = TileTiming(chip.vector, works).cycles(
        [index[t.work] for t in tiles], [t.rows for t in tiles], [t.cols for t in tiles],
        [t.a_bytes + -(-t.b_bytes // p) for t, p in zip(tiles, passes)],
        [t.out_bytes for t in tiles])
    busy = int(timing[:, T_CYCLES].sum())
    c = {"cycles": busy, "vector_busy_cycles": busy, "vectors": len(tiles),
         "ifmap_vector_read_bytes": sum(t.a_bytes * p for t, p in zip(tiles, passes)),
         "filter_vector_read_bytes": sum(t.b_bytes for t in tiles),
         "ofmap_vector_read_bytes": 0,
         "ofmap_vector_write_bytes": sum(t.out_bytes for t in tiles)}
    ops = {op_kind: 0.0 for op_kind in VECTOR_OP_KINDS}
    for t in tiles:
        for op_kind, n in t.work.op_counts(t.rows, t.cols).items():
            ops[op_kind] += n
    c.update({f"vector_{k}_ops": int(round(v)) for k, v in ops.items()})
    return c


def _idle_layer(op, fused: str | None = None) -> LayerResult:
    """An op no engine ran: not simulated, or (``fused``) run in its group's anchor's layer."""
    return LayerResult(
        name=op.name, op=type(op).__name__, engine="none" if fused is None else "fused",
        fused=fused, gemm_count=None, gemm_m=None,
        gemm_n=None, gemm_k=None, macs=0, cycles=None, pe_busy_cycles=None,
        utilization_pct=None, mapping_efficiency_pct=None, ifmap_sram_reads=None,
        filter_sram_reads=None, ofmap_sram_writes=None, ofmap_sram_reads=None, folds=None,
    )


def launch_key(op) -> str:
    """The kind of kernel ``op`` is, for ``chip.launch_overhead_by_op``: ``conv``, ``gemm``, or
    a vector op's work name (``softmax``, ``layernorm``, ``gelu``, ``add``, ...)."""
    if op.gemm_shape() is not None:
        return "conv" if isinstance(op, Conv2d) else "gemm"
    return op.work().name


def _performed(macs: int, busy: int, tiling) -> int:
    """The MACs a layer's PEs performed: ``macs``, or on N:M sparse PEs (``tiling.nm``) its
    PE-busy cycles (every kept weight's MAC, padding included)."""
    return busy if tiling is not None and tiling.nm is not None else macs


def _performed_total(layers, chip: ChipConfig) -> int:
    """The MACs the PEs performed over ``layers``: their PE-busy cycles (on N:M sparse PEs the
    kept weights' MACs), or on PEs with several MACs each the layers' performed MACs (their
    actions; a lane padding K is no MAC)."""
    if chip.array.macs_per_pe == 1:
        return sum(layer.pe_busy_cycles or 0 for layer in layers)
    return sum(layer.actions.macs for layer in layers
               if layer.engine == "array" and layer.actions is not None)


def _sparse_label(t) -> str:
    """The tiling column's N:M: `` sparse 2:4``, row-wise `` sparse rows 1-2:4``."""
    if t.nm is None:
        return ""
    if t.nm_rows is not None:
        return f" sparse rows {mix_label(t.nm_rows, t.nm[1])}"
    return f" sparse {t.nm[0]}:{t.nm[1]}"


def _totals(layers: list[LayerResult], chip: ChipConfig, ops=None) -> dict:
    ran = [(layer, op) for layer, op in zip(layers, ops or [None] * len(layers))
           if layer.engine in ("array", "vector")]
    run = [layer for layer, _ in ran]
    cycles = sum(layer.cycles for layer in run)
    macs = sum(layer.macs for layer in run)
    # one kernel per op that ran
    launch_s = (sum(chip.launch_overhead_s(launch_key(op)) for _, op in ran)
                if chip.launch_overhead_by_op and ops is not None
                else len(run) * chip.launch_overhead_us * 1e-6)
    latency_s = cycles / chip.clock_hz + launch_s
    totals = {
        "cycles": cycles,
        "macs": macs,
        "pe_busy_cycles": sum(layer.pe_busy_cycles for layer in run),
        # the MACs the PEs performed: all of them dense, the kept ones on N:M sparse PEs
        "utilization_pct": (100.0 * _performed_total(run, chip)
                            / (chip.peak_macs_per_cycle * cycles) if cycles else 0.0),
        "ifmap_sram_reads": sum(layer.ifmap_sram_reads for layer in run),
        "filter_sram_reads": sum(layer.filter_sram_reads for layer in run),
        "ofmap_sram_writes": sum(layer.ofmap_sram_writes for layer in run),
        "ofmap_sram_reads": sum(layer.ofmap_sram_reads for layer in run),
        "latency_s": latency_s,
        # 2 ops per MAC (multiply and add), the usual TOPS convention.
        "effective_tops": 2 * macs / latency_s / 1e12 if cycles else 0.0,
        "peak_tops": 2 * chip.peak_macs_per_cycle * chip.clock_hz / 1e12,
        "peak_macs_per_cycle": chip.peak_macs_per_cycle,
        "layers_simulated": len(run),
        "kernels": len(run),
        "launch_overhead_s": launch_s,
        "layers_not_simulated": sum(1 for layer in layers if layer.engine == "none"),
        "layers_fused": sum(1 for layer in layers if layer.engine == "fused"),
    }
    return totals


def _native_layers(graph: Graph, ops, chip: ChipConfig, options: CompileOptions | None,
                   progress=None):
    """``graph``'s layers run natively; ``ops``: the op each program layer stands for
    (``graph.ops``, with the K-split sums on a multi-core chip: :func:`with_sums`)."""
    program = compile_graph(graph, chip, options)
    run = execute(program, chip, progress=progress)
    return _program_layers(program, run, ops, chip), run


def _program_layers(program, run: ExecutionResult, ops, chip: ChipConfig) -> list[LayerResult]:
    """The layer results of ``program`` run on ``chip`` (``run``); ``ops``: the op each of its
    layers stands for."""
    layers = []
    kinds = program.columns["kind"]
    for op, ls, c in zip(ops, program.layers, run.layers):
        if ls.fused is not None and ls.last == ls.first:     # run in its anchor's layer
            layers.append(_idle_layer(op, ls.fused))
            continue
        if op.gemm_shape() is None:
            ran = ls.last > ls.first and (kinds[ls.first:ls.last] == Kind.VECTOR).any()
            layers.append(replace(_vector_layer(op, chip, c), fused=ls.fused,
                                  cores=ls.cores if chip.multicore else None) if ran
                          else _idle_layer(op))
            continue
        t = ls.tiling
        # A reconfigurable array runs each layer in the dataflow the mapper chose for it.
        lchip = chip if t.dataflow in (None, chip.array.dataflow.value) else replace(
            chip, array=replace(chip.array, dataflow=Dataflow(t.dataflow)))
        shape = op.gemm_shape()
        ran = shape             # what the array ran: N:M compressed, K' = K * N / M
        if t.nm is not None:
            ran = replace(shape, k=whole_groups(shape.k, t.nm) // t.nm[1] * t.nm[0])
        folds = map_gemm(lchip.array, ran.m, ran.n, ran.k, ran.count).folds
        cycles = c["cycles"]
        # the layer's window, or longer when its own work overlapped the previous window
        # (prefetch): array, DRAM, link and scratchpad-port busy time
        active = max(cycles, c["array_busy_cycles"] + c["sram_conflict_cycles"]
                     + c["sram_bandwidth_cycles"],
                     c["dram_transfer_cycles"], c["link_transfer_cycles"],
                     *(c[f"{s}_{d}_port_cycles"] for s in SRAM_NAMES for d in ("read", "write")))
        dram_rd, dram_wr, link, fills, dram_bytes = _traffic(c, chip)
        # The busiest resource: array compute, DRAM transfers or link transfers (cycles each
        # spent working for this layer); on a multi-core chip the L2 and the network too.
        demand = {"compute": c["array_busy_cycles"], "dram": c["dram_transfer_cycles"],
                  "link": c["link_transfer_cycles"], **_shared_busy(c, chip)}
        active = max(active, *demand.values())
        # every field from the executor's counters and the layer's mapping: nothing is timed
        # twice (the folds and mapping efficiency are the GEMM's on the array, untiled)
        layers.append(LayerResult(
            name=op.name, op=type(op).__name__, engine="array", gemm_count=shape.count,
            gemm_m=shape.m, gemm_n=shape.n, gemm_k=shape.k, macs=ls.macs, cycles=cycles,
            pe_busy_cycles=c["pe_busy_cycles"], folds=folds,
            mapping_efficiency_pct=_mapping_efficiency(lchip.array, ran, folds),
            # over the busy span, as npulab.metrics' compute_utilization; the MACs the PEs
            # performed (the kept ones on N:M sparse PEs; ls.macs scaled to this layer's share)
            utilization_pct=(100.0 * _performed(ls.macs, c["pe_busy_cycles"], ls.tiling)
                             / (chip.peak_macs_per_cycle * active) if active else 0.0),
            ifmap_sram_reads=c["ifmap_sram_reads"], filter_sram_reads=c["filter_sram_reads"],
            ofmap_sram_writes=c["ofmap_sram_writes"], ofmap_sram_reads=c["ofmap_sram_reads"],
            compute_cycles=c["compute_cycles"], stall_dram_cycles=c["stall_dram_cycles"],
            stall_link_cycles=c["stall_link_cycles"], stall_sram_cycles=c["stall_sram_cycles"],
            stall_vector_cycles=c["stall_vector_cycles"],
            dram_read_bytes=dram_rd, dram_write_bytes=dram_wr, link_bytes=link,
            bound=max(demand, key=demand.get),
            tiling=(f"{t.lowering} g{t.group_tile} m{t.m_tile} n{t.n_tile} k{t.k_tile} "
                    f"{t.order}{' in:sram' if t.input_resident else ''}"
                    f"{' out:sram' if t.output_resident else ''}"
                    f"{' ' + t.dataflow if t.dataflow else ''}"
                    f"{_sparse_label(t)}"
                    f"{f' zeros {t.act_zeros:.2f}' if t.act_zeros else ''}"
                    f"{f' weights {t.weight_store[0]}' if t.weight_store else ''}"),
            actions=array_actions(
                lchip.array, _performed(ls.macs, c["pe_busy_cycles"], t),
                c["ifmap_sram_reads"], c["filter_sram_reads"],
                c["ofmap_sram_writes"], c["ofmap_sram_reads"], fills, dram_bytes=dram_bytes,
                link_bytes=link, active_cycles=active, vector=_vector_part(c, chip),
                l2=_l2(c, chip), noc_bit_hops=_noc_bit_hops(c, chip), nm=t.nm,
                act_zeros=t.act_zeros, weight_store=t.weight_store),
            units={"array": c["array_busy_cycles"], "vector": c["vector_busy_cycles"]},
            fused=ls.fused, cores=ls.cores if chip.multicore else None))
    return layers


def simulate(graph: Graph, chip: ChipConfig | ChipSpec, timing: str = "native", progress=None,
             options: CompileOptions | None = None) -> RunResult:
    """Simulate every op of ``graph`` on ``chip`` (a systolic :class:`~hw.chip.ChipConfig`, or
    its :class:`~hw.spec.ChipSpec`) in one of :data:`TIMING_MODES`.

    ``progress``, if given, is called as ``progress(done, total, op_name)`` as ops finish
    (``native`` mode: as the executor completes each layer). ``options`` are the
    compiler's (:class:`~compiler.options.CompileOptions`, ``native`` mode only).
    """
    if timing not in TIMING_MODES:
        raise ValueError(f"timing = {timing!r}: must be one of {', '.join(TIMING_MODES)}")
    spec = chip_spec(chip)
    chip = spec.config
    if not isinstance(chip, ChipConfig):
        raise ValueError(f"chip = {spec.name}: a {spec.kind} chip; simulate times systolic "
                         f"chips (npulab.run takes every kind)")
    run = None
    score = split_score(chip, options)
    pipeline = None
    if timing == "native" and options is not None and options.placement == "pipeline":
        from npulab.stage_run import run_pipeline
        piped = run_pipeline(graph, chip, options, progress)
        layers = [replace(layer, stage=s, cores=piped.cores_per_stage)
                  for s, st in enumerate(piped.stages)
                  for layer in _program_layers(st.program, st.result, st.ops, st.chip)]
        run, pipeline = piped.run, piped.totals
        whole_graph = Graph(graph.name, tuple(op for st in piped.stages for op in st.ops),
                            batch=graph.batch, tokens=graph.tokens)
    elif timing == "native":
        whole_graph = with_sums(graph, chip, score) if chip.multicore else graph
        layers, run = _native_layers(graph, whole_graph.ops, chip, options, progress)
    else:
        whole_graph = with_sums(graph, chip, score) if chip.multicore else graph
        layers = []
        vector = timing == "compute" and not chip.vector.ideal
        # a multi-core chip: each op's share on one core (compiler.backends.multicore)
        shares, splits = share_graph(graph, chip, score) if chip.multicore else (graph, None)
        for index, (whole, op) in enumerate(zip(whole_graph.ops, shares.ops)):
            if op.gemm_shape() is not None:
                layer = _array_layer(op, chip, timing)
            elif vector and is_vector_op(op):
                layer = _vector_layer(op, chip, _vector_compute(op, chip), native=False)
            else:
                layer = _idle_layer(op)
            if splits is not None and layer.cycles is not None:
                layer = replace(layer, macs=whole.macs, cores=splits[op.name].cores,
                                utilization_pct=(100.0 * whole.macs
                                                 / (chip.peak_macs_per_cycle * layer.cycles)
                                                 if layer.cycles else 0.0))
            layers.append(layer)
            if progress is not None:
                progress(index + 1, len(shares.ops), op.name)
    totals = _totals(layers, chip, whole_graph.ops)
    totals["batch"] = graph.batch
    if run is not None:
        totals = _memory_totals(totals, layers, run, chip)
    if pipeline is not None:
        totals.update(_pipeline_totals(pipeline, layers, whole_graph.ops, chip, graph.batch))
    return RunResult(
        model=graph.name, chip=chip.name, spec=spec,
        timing=timing, scope=SCOPE_NOTES[timing] + (
            IDEAL_VECTOR_NOTE if chip.vector.ideal and timing != "scalesim" else ""),
        layers=tuple(layers), totals=totals,
        dram=run.dram if run is not None else {}, execution=run,
    )


def _pipeline_totals(pipeline: dict, layers, ops, chip: ChipConfig, batch: int) -> dict:
    """The pipeline's totals (:mod:`npulab.stage_run`) and its steady state in seconds: the
    slowest stage's cycles and kernel launches (``pipeline_period_s``), and ``batch`` samples
    every period (``pipeline_inputs_per_s``)."""
    stage_s = []
    for s, cycles in enumerate(pipeline["pipeline_stage_cycles"]):
        mine = [(x, op) for x, op in zip(layers, ops) if x.stage == s]
        launch = _totals([x for x, _ in mine], chip, [op for _, op in mine])["launch_overhead_s"]
        stage_s.append(cycles / chip.clock_hz + launch)
    period_s = max(stage_s)
    return {**pipeline, "pipeline_period_s": period_s,
            "pipeline_inputs_per_s": batch / period_s if period_s else 0.0}


def _memory_totals(totals: dict, layers, run: ExecutionResult, chip: ChipConfig) -> dict:
    t = run.totals
    cycles = run.cycles
    latency_s = cycles / chip.clock_hz + totals["launch_overhead_s"]
    out = dict(totals)
    out.update(
        cycles=cycles, latency_s=latency_s,
        effective_tops=2 * totals["macs"] / latency_s / 1e12 if cycles else 0.0,
        utilization_pct=(100.0 * _performed_total(layers, chip)
                         / (chip.peak_macs_per_cycle * cycles) if cycles else 0.0),
        compute_cycles=t["compute_cycles"], stall_dram_cycles=t["stall_dram_cycles"],
        stall_link_cycles=t["stall_link_cycles"], stall_sram_cycles=t["stall_sram_cycles"],
        stall_vector_cycles=t["stall_vector_cycles"],
        vector_busy_cycles=t["vector_busy_cycles"],
        dram_read_bytes=t["dram_ifmap_read_bytes"] + t["dram_filter_read_bytes"] + t["dram_psum_read_bytes"],
        dram_write_bytes=t["dram_ofmap_write_bytes"] + t["dram_psum_write_bytes"],
        dram_bus_bytes=t["dram_bus_read_bytes"] + t["dram_bus_write_bytes"],
        link_bytes=t["link_in_bytes"] + t["link_out_bytes"],
        dram_peak_gbps=chip.dram.peak_gbps if not chip.dram.is_ideal else None,
        memory_bound_layers=sum(1 for x in layers if x.bound in ("dram", "link")),
    )
    for key in ("ifmap_sram_reads", "filter_sram_reads", "ofmap_sram_writes", "ofmap_sram_reads"):
        out[key] = t[key]
    if chip.multicore:
        out.update(_multicore_totals(t, layers, run, chip, latency_s))
    return out


def _multicore_totals(t: dict, layers, run: ExecutionResult, chip: ChipConfig,
                      latency_s: float) -> dict:
    """A multi-core chip's totals: its cores' PE utilization (each core's MACs over the run;
    the cores of a layer share its work), the L2's bytes, hits, bandwidth and busiest side, and
    the network's bytes and busiest link (port or the whole network)."""
    cycles = run.cycles
    per_core = [0.0] * chip.cores
    for x in layers:
        if x.cores and x.pe_busy_cycles:
            first = (x.stage or 0) * x.cores        # a pipeline stage's cores follow the last's
            for core in range(first, first + x.cores):
                per_core[core] += x.pe_busy_cycles / x.cores
    peak = chip.array.pes * cycles
    busy = [100.0 * b / peak if peak else 0.0 for b in per_core]
    loads = t["l2_hit_bytes"] + t["l2_miss_bytes"]
    seconds = cycles / chip.clock_hz

    def pct(n):
        return 100.0 * n / cycles if cycles else 0.0
    return {
        "cores": chip.cores,
        "core_utilization_min_pct": min(busy), "core_utilization_mean_pct": sum(busy) / len(busy),
        "core_utilization_max_pct": max(busy),
        "cores_idle": sum(1 for b in per_core if not b),
        "l2_read_bytes": t["l2_read_bytes"], "l2_write_bytes": t["l2_write_bytes"],
        "l2_hit_bytes": t["l2_hit_bytes"], "l2_miss_bytes": t["l2_miss_bytes"],
        "l2_hit_pct": 100.0 * t["l2_hit_bytes"] / loads if loads else 0.0,
        "l2_gbps": ((t["l2_read_bytes"] + t["l2_write_bytes"]) / seconds / 1e9
                    if seconds else 0.0),
        "l2_peak_gbps": chip.l2.bytes_per_cycle * chip.clock_hz / 1e9 if chip.l2.present else None,
        "l2_utilization_pct": pct(max(t["l2_read_port_cycles"], t["l2_write_port_cycles"])),
        # plain bank interleaving: the cycles the busiest banks added (hw.memory.l2)
        **({"l2_conflict_cycles": t["l2_conflict_cycles"]}
           if chip.l2.present and not chip.l2.bank_hash else {}),
        "noc_bytes": t["noc_bytes"],
        "noc_port_utilization_pct": pct(max(t["noc_in_port_cycles"], t["noc_out_port_cycles"])),
        "noc_network_utilization_pct": pct(max(t["noc_network_in_cycles"],
                                               t["noc_network_out_cycles"])),
    }
