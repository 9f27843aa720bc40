"""Adding an engine kind end to end, with a toy "copy engine" (issue 22, docs/architecture.md
"Adding an engine").

The copy engine has no MAC units: it runs an op by moving its input tensor from DRAM into the
core's ``ifmap`` scratchpad and its output tensor from the ``ofmap`` scratchpad back to DRAM
(the data movement an op cannot avoid). Everything it needs is an interface npulab already
has, and nothing here edits npulab's code:

* the chip: a :class:`hw.spec.ChipSpec` whose core holds an :class:`~hw.spec.Engine` of kind
  ``copy`` beside the default chip's scratchpads, DRAM and DMA;
* the compiler backend: a :class:`hw.program.Program` of DMA commands, built with
  :class:`~hw.program.ProgramBuilder`;
* the timing model: :func:`hw.executor.execute`, unchanged (its core loop times the DMA
  commands on the cycle-level DRAM model and books the scratchpad ports);
* the runner: :func:`npulab.pipeline.register_runner`, returning a
  :class:`~npulab.record.RunRecord` whose layers carry typed :class:`~npulab.record.LayerActions`;
* the views: ``npulab.run`` dispatches to it; the metrics (generic energy facts), the terminal
  table (the generic engine table) and the Perfetto timeline read its record as they read any.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from compiler.ir import Gemm, Graph, conv2d
from hw.configfile import load_chip
from hw.energy import HardwareFacts, energy_rates, load_technology
from hw.executor import execute
from hw.program import Kind, LayerSchedule, Location, Operand, ProgramBuilder
from hw.spec import Engine
from npulab import pipeline
from npulab.metrics import compute_metrics
from npulab.record import LayerActions, LayerResult, RunRecord, SramAccess
from npulab.report import to_table
from npulab.timeline import TID_LOAD, TID_STORE, chrome_trace, validate_trace

ELEM_BYTES = 1          # int8 tensors
OUTPUT_BASE = 1 << 32   # outputs go to their own DRAM region


# ---------------------------------------------------------------- the new engine kind

def copy_chip(base: str | None = None):
    """The default chip with its systolic array replaced by a copy engine (no MACs)."""
    spec = load_chip(base)
    core = spec.cores[0]
    engine = Engine(kind="copy", name="copy engine", peak_macs_per_cycle=0, config=None,
                    label="copy engine")
    return dataclasses.replace(spec, cores=(dataclasses.replace(core, engines=(engine,)),),
                               name=f"{spec.name}+copy")


def copy_program(graph: Graph, chip):
    """The copy engine's compiler backend: per op, its input in chunks of half the ifmap
    scratchpad (double buffered) DRAM -> ifmap, then its output in chunks of half the ofmap
    scratchpad ofmap -> DRAM, once the input is in."""
    pb = ProgramBuilder(graph.name)
    in_chunk = chip.sram("ifmap").capacity_bytes // 2
    out_chunk = chip.sram("ofmap").capacity_bytes // 2
    addr_in, addr_out = 0, OUTPUT_BASE
    for index, op in enumerate(graph.ops):
        first = len(pb)
        last_load = None
        nbytes = op.input_bytes(ELEM_BYTES)
        for at in range(0, nbytes, in_chunk):
            size = min(in_chunk, nbytes - at)
            last_load = pb.transfer(Kind.LOAD, Operand.IFMAP, Location.DRAM, index,
                                    (addr_in + at, 1, 0, 1, 0, size))
        nbytes_out = op.output_bytes(ELEM_BYTES)
        for at in range(0, nbytes_out, out_chunk):
            size = min(out_chunk, nbytes_out - at)
            pb.transfer(Kind.STORE, Operand.OFMAP, Location.DRAM, index,
                        (addr_out + at, 1, 0, 1, 0, size), deps=(last_load,))
        addr_in += nbytes
        addr_out += nbytes_out
        pb.layers.append(LayerSchedule(op_index=index, name=op.name, op="copy", first=first,
                                       last=len(pb), macs=0, tiling=None))
    return pb.build()


def run_copy(graph: Graph, spec, options, progress) -> RunRecord:
    """The copy engine's runner: compile, time on the executor, record."""
    # the spec keeps the base chip's config: the memory system the executor times
    memory = spec.config
    run = execute(copy_program(graph, memory), memory, progress=progress)
    layers = []
    for op, c in zip(graph.ops, run.layers):
        rd, wr = c["dram_ifmap_read_bytes"], c["dram_ofmap_write_bytes"]
        layers.append(LayerResult(
            name=op.name, op=type(op).__name__, engine="copy", gemm_count=None, gemm_m=None,
            gemm_n=None, gemm_k=None, macs=0, cycles=c["cycles"], pe_busy_cycles=None,
            utilization_pct=None, mapping_efficiency_pct=None, ifmap_sram_reads=None,
            filter_sram_reads=None, ofmap_sram_writes=None, ofmap_sram_reads=None, folds=None,
            compute_cycles=c["compute_cycles"], stall_dram_cycles=c["stall_dram_cycles"],
            stall_link_cycles=c["stall_link_cycles"], stall_sram_cycles=c["stall_sram_cycles"],
            dram_read_bytes=rd, dram_write_bytes=wr, link_bytes=0, bound="dram",
            actions=LayerActions(
                macs=0, precision="int8", acc_bits=32, reg_bits=0,
                sram={"ifmap": SramAccess(write_bits=8 * c["ifmap_sram_fill_bytes"]),
                      "ofmap": SramAccess(read_bits=8 * c["ofmap_sram_drain_bytes"])},
                dram_bits=8 * (c["dram_bus_read_bytes"] + c["dram_bus_write_bytes"]),
                link_bits=0, vector_ops=0)))
    totals = {"cycles": run.cycles, "macs": 0, "latency_s": run.cycles / spec.clock_hz,
              "batch": graph.batch, "peak_macs_per_cycle": spec.peak_macs_per_cycle,
              "dram_read_bytes": sum(x.dram_read_bytes for x in layers),
              "dram_write_bytes": sum(x.dram_write_bytes for x in layers)}
    return RunRecord(model=graph.name, chip=spec.name, spec=spec, timing="native",
                     scope="copy engine: every op's input and output through the scratchpads",
                     layers=tuple(layers), totals=totals, dram=run.dram, execution=run)


def check_copy(spec, options) -> None:
    """The copy engine reads no option: it neither tiles nor has timing modes or precisions."""
    if options != pipeline.RunOptions():
        changed = next(f.name for f in dataclasses.fields(options)
                       if getattr(options, f.name) != getattr(pipeline.RunOptions(), f.name))
        raise pipeline.OptionError(changed, getattr(options, changed),
                                   f"{{}} does not apply to {pipeline.literal(spec.name)}'s "
                                   f"copy engine")


@pytest.fixture(scope="module")
def registered():
    pipeline.register_runner("copy", run_copy, check_copy)
    yield
    pipeline.RUNNERS.pop("copy", None)
    pipeline.CHECKS.pop("copy", None)


GRAPH = Graph("toy", (conv2d("conv", 16, 8, 16, 3, padding=1), Gemm(name="fc", m=4, n=256, k=512)))


# ---------------------------------------------------------------- the tests

def test_an_unregistered_kind_is_one_named_error():
    with pytest.raises(ValueError, match=r"engine kind 'copy' has no runner; registered: "
                                         r"systolic, nvdla"):
        pipeline.run(GRAPH, copy_chip())


def test_shipped_kinds_cannot_be_replaced():
    with pytest.raises(ValueError, match="kind = 'systolic': a shipped engine kind"):
        pipeline.register_runner("systolic", run_copy)


def test_copy_engine_runs_through_the_pipeline(registered):
    spec = copy_chip()
    result = pipeline.run(GRAPH, spec)
    assert result.kind == "copy" and result.spec is spec
    # every byte the program asked for went over the DRAM bus (gold: the IR's tensor sizes)
    for op, layer in zip(GRAPH.ops, result.layers):
        assert layer.dram_read_bytes == op.input_bytes(ELEM_BYTES)
        assert layer.dram_write_bytes == op.output_bytes(ELEM_BYTES)
        assert layer.actions.dram_bits >= 8 * (layer.dram_read_bytes + layer.dram_write_bytes)
    # no run moves bytes faster than the DRAM's peak: cycles >= bytes / (peak bytes per cycle)
    moved = result.totals["dram_read_bytes"] + result.totals["dram_write_bytes"]
    per_cycle = spec.dram.peak_gbps * 1e9 / spec.clock_hz
    assert result.totals["cycles"] >= math.ceil(moved / per_cycle)
    assert sum(x.cycles for x in result.layers) == result.totals["cycles"]


def test_the_kind_option_check_runs_first(registered):
    with pytest.raises(pipeline.OptionError, match="timing = 'compute' does not apply to "
                                                   "npulab-default\\+copy's copy engine"):
        pipeline.run(GRAPH, copy_chip(), pipeline.RunOptions(timing="compute"))


def test_metrics_charge_the_copy_engine_actions(registered):
    spec = copy_chip()
    result = pipeline.run(GRAPH, spec)
    tech = load_technology()
    metrics = compute_metrics(result, tech)
    rates = energy_rates(tech, HardwareFacts.generic(spec, "int8"))
    for layer, m in zip(result.layers, metrics.layers):
        energy = m["energy_breakdown_j"]
        assert energy["mac"] == 0 and energy["rf"] == 0
        assert energy["dram"] == pytest.approx(layer.actions.dram_bits * rates.dram_pj_per_bit
                                               * 1e-12, rel=1e-12)
        ifmap = rates.scratchpads["ifmap"]
        assert energy["sram.ifmap"] == pytest.approx(
            layer.actions.level("ifmap").write_bits * ifmap.write_pj_per_bit * 1e-12, rel=1e-12)
        assert m["compute_utilization"] == 0.0
        assert m["memory"]["dram"]["utilization"] <= 1.0
    assert metrics.network["energy_j"] == pytest.approx(
        sum(metrics.network["energy_breakdown_j"].values()), rel=1e-12)


def test_every_view_reads_the_copy_engine_record(registered):
    result = pipeline.run(GRAPH, copy_chip())
    metrics = compute_metrics(result)
    text = to_table(result, metrics)
    head = text.splitlines()[0]
    assert head == (f"npulab: toy on {result.chip} (copy engine, "
                    f"{result.spec.clock_mhz:g} MHz), timing: native")
    assert f"total cycles          {result.totals['cycles']:,}" in text
    doc = chrome_trace(result)
    validate_trace(doc)
    loads = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == TID_LOAD]
    stores = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == TID_STORE]
    kinds = result.execution.trace.kind
    assert len(loads) == int((kinds == Kind.LOAD).sum()) > 0
    assert len(stores) == int((kinds == Kind.STORE).sum()) > 0


def test_the_copy_engine_run_is_saved_and_read_back(registered, tmp_path):
    # every -o file of `npulab run`, then `npulab report DIR --tech 7nm`'s path: the record
    # comes back from summary.json (its chip as a spec table) and is re-costed
    from npulab.output import read_summary, recost, write_run_outputs, write_summary_outputs
    from npulab.record import RunRecord
    result = pipeline.run(GRAPH, copy_chip())
    metrics = compute_metrics(result)
    paths = write_run_outputs(result, metrics, tmp_path)
    assert [p.name for p in paths] == ["summary.json", "layers.csv", "report.txt",
                                       "report.html", "trace.json"]
    summary = read_summary(tmp_path)
    back = RunRecord.from_dict(summary["run"])
    assert back.kind == "copy" and back.spec.memory_levels() == result.spec.memory_levels()
    assert back.layers == result.layers and back.totals == result.totals
    assert compute_metrics(back).to_dict() == metrics.to_dict()
    before = (tmp_path / "report.txt").read_bytes()
    write_summary_outputs(summary, tmp_path)
    assert (tmp_path / "report.txt").read_bytes() == before       # `npulab report DIR`
    assert "copy engine" in (tmp_path / "report.html").read_text(encoding="utf-8")
    hot = recost(summary, "7nm")
    assert hot["metrics"]["technology"]["name"] == "7nm"
    assert hot["metrics"]["network"]["energy_j"] != summary["metrics"]["network"]["energy_j"]
