"""A native run of the layer-pipelined placement (:mod:`compiler.backends.stages`).

Every stage's program is compiled for its own chip (its cores and share of the L2) and all of
them run at once against the chip's one DRAM (:func:`hw.executor.execute_shared`), as in the
steady state, where each stage works on another input. The result is one input's pass: its
layers are the stages' layers in graph order (each with its ``stage`` and ``cores``), its
cycles the sum of the stages' (an input entering a full pipeline waits for no stage, as each
takes at most the period), and its timeline the stages one after another. The totals add the
pipeline's ``pipeline_period_cycles`` (the slowest stage: a new input every period) and the
steady-state ``pipeline_inputs_per_s``; the metrics' inferences/s is that rate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from compiler.backends.multicore import with_sums
from compiler.backends.stages import cut_points, plan_stages, stage_chip, stage_graph
from compiler.backends.systolic import compile_graph, split_score
from hw.chip import ChipConfig
from hw.executor import ExecutionResult, Trace, execute_shared
from hw.memory_path import box_extent
from hw.program import Location, Program
from npulab.option_error import OptionError, literal

__all__ = ["StageRun", "PipelineRun", "run_pipeline"]


@dataclass(frozen=True)
class StageRun:
    """One stage: its ``program`` on its ``chip``, what running it cost (``result``, beside the
    other stages) and the op each of its layers stands for (``ops``)."""

    program: Program
    result: ExecutionResult
    ops: tuple
    chip: ChipConfig


@dataclass(frozen=True)
class PipelineRun:
    """The pipeline kept (module docstring): its ``stages`` in order, each on
    ``cores_per_stage`` cores, their executions merged into one input's pass (``run``) and the
    pipeline's totals."""

    stages: tuple[StageRun, ...]
    cores_per_stage: int
    run: ExecutionResult
    totals: dict


def run_pipeline(graph, chip: ChipConfig, options, progress=None) -> PipelineRun:
    """``graph`` pipelined over ``chip``'s cores (module docstring): ``options.stages`` stages,
    or the planner's count checked against one stage (the split placement) and, when the
    planner says one, two; the shortest period is kept (ties: fewer stages)."""
    if chip.cores < 2:
        raise OptionError("compile.placement", "pipeline", f"{{}} needs a chip with 2 or more "
                          f"cores ({literal(chip.name)} has {chip.cores})")
    pieces = len(cut_points(graph)) + 1
    most = min(chip.cores, pieces)
    if options.stages is not None and options.stages > most:
        raise OptionError("compile.stages", options.stages, f"{{}}: {literal(graph.name)} on "
                          f"{literal(chip.name)} takes 1..{most} pipeline stages (the cuts "
                          f"between its layers leave {_pieces(pieces)}; {chip.cores} cores)")
    split_options = replace(options, placement="split", stages=None)
    if options.stages is not None:
        plans = [plan_stages(graph, chip, options.stages)]
    else:       # the estimate's choice, checked against the split placement (and 2 stages)
        chosen = plan_stages(graph, chip)
        others = {1} | ({2} if chosen.stages == 1 and most >= 2 else set())
        plans = [chosen] + [plan_stages(graph, chip, n) for n in sorted(others - {chosen.stages})]
    runs = [_run_plan(graph, chip, plan, split_options, progress) for plan in plans]
    best = min(runs, key=lambda r: (r.totals["pipeline_period_cycles"],
                                    r.totals["pipeline_stages"]))
    best.totals["pipeline_stages_simulated"] = sorted(p.stages for p in plans)
    return best


def _pieces(n: int) -> str:
    return f"{n} piece" if n == 1 else f"{n} pieces"


def _run_plan(graph, chip: ChipConfig, plan, options, progress) -> PipelineRun:
    """Compile and run ``plan``'s stages at once."""
    graphs = [stage_graph(graph, a, b) for a, b in plan.bounds]
    chips = [stage_chip(chip, plan, s) for s in range(plan.stages)]
    # the tensor between two stages goes through the L2 when the chip has one (and it fits)
    last = plan.stages - 1
    programs = [compile_graph(g, c, options, input_in_l2=s > 0 and c.l2.present,
                              output_in_l2=s < last and c.l2.present)
                for s, (g, c) in enumerate(zip(graphs, chips))]
    offsets, top = [], 0
    for p in programs:
        offsets.append(top)
        top += _footprint(p)
    total = sum(len(p.layers) for p in programs)
    shared = execute_shared(programs, chips, chip.dram, addr_offsets=offsets,
                            progress=progress, progress_total=total)
    stages = tuple(
        StageRun(p, r, with_sums(g, c, split_score(c, options)).ops if c.multicore else g.ops, c)
        for g, c, p, r in zip(graphs, chips, programs, shared.results))
    stage_cycles = [r.cycles for r in shared.results]
    totals = {
        "pipeline_stages": plan.stages,
        "pipeline_cores_per_stage": plan.cores_per_stage,
        "pipeline_stage_cycles": stage_cycles,
        "pipeline_period_cycles": max(stage_cycles),
        "pipeline_first_ops": [graph.ops[a].name for a, _ in plan.bounds],
    }
    return PipelineRun(stages, plan.cores_per_stage, _merge(shared.results, shared.dram, chip),
                       totals)


def _footprint(program) -> int:
    """Bytes past the last DRAM byte ``program`` touches, every core's copy included, rounded
    up to 1 MiB (each stage gets its own region of the shared DRAM)."""
    cols = program.columns
    ends = [int(cols["addr"][i]) + box_extent(*(int(cols[c][i]) for c in (
                "n2", "stride2", "n1", "stride1", "chunk_bytes", "copies")))
            for i in np.flatnonzero(cols["location"] == Location.DRAM)]
    return max(1, -(-max(ends, default=0) // (1 << 20))) * (1 << 20)


def _merge(results: list[ExecutionResult], dram: dict, chip: ChipConfig) -> ExecutionResult:
    """The stages' executions as one input's pass: counters added, the traces one after
    another (stage ``s`` shifted by the cycles of the stages before it)."""
    layers = [layer for r in results for layer in r.layers]
    keys = results[0].totals.keys()
    totals = {k: sum(r.totals[k] for r in results) for k in keys}
    cycles = sum(r.cycles for r in results)
    totals["cycles"] = cycles
    shift, layer_base, work_base = [], [], []
    at = lay = work = 0
    for r in results:
        shift.append(at)
        layer_base.append(lay)
        work_base.append(work)
        at += r.cycles
        lay += len(r.trace.layer_names)
        work += len(r.trace.work_names)

    def cat(name, offsets=None, keep_negative=False):
        parts = []
        for r, off in zip(results, offsets or [0] * len(results)):
            col = getattr(r.trace, name)
            if keep_negative:
                col = np.where(col >= 0, col + off, col)
            else:
                col = col + off
            parts.append(col)
        return np.concatenate(parts)
    t0 = results[0].trace
    trace = Trace(
        start=cat("start", shift), finish=cat("finish", shift), engine=cat("engine"),
        kind=cat("kind"), layer=cat("layer", layer_base),
        layer_names=tuple(n for r in results for n in r.trace.layer_names),
        clock_mhz=t0.clock_mhz, operand=cat("operand"), tile_g=cat("tile_g"),
        tile_m=cat("tile_m"), tile_n=cat("tile_n"), tile_k=cat("tile_k"), nbytes=cat("nbytes"),
        dram_finish=cat("dram_finish", shift), link_start=cat("link_start", shift, True),
        link_finish=cat("link_finish", shift, True), work=cat("work", work_base, True),
        work_names=tuple(n for r in results for n in r.trace.work_names))
    return ExecutionResult(cycles=cycles, layers=layers, totals=totals, dram=dram, trace=trace)
