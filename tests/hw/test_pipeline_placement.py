"""Layer-pipelined placement (compiler.backends.stages, npulab.stage_run): the cuts, the stage
partition against a brute-force search, one stage is the split placement exactly, the
pipeline's cycles and period from its stages, contention never speeds a stage up, and every
view shows the same stages."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from compiler.backends.stages import _partition, cut_points, plan_stages, stage_chip, stage_graph
from compiler.backends.systolic import compile_graph
from compiler.frontends import zoo
from compiler.options import CompileOptions
from hw.configfile import load_chip_config
from hw.executor import execute
from npulab.pipeline import OptionError
from npulab.report import csv_table, render
from npulab.simulate import simulate
from npulab.timeline import chrome_trace, validate_trace

PIPE = CompileOptions(placement="pipeline")


@pytest.fixture(scope="module")
def tpu():
    return load_chip_config("tpu_v4_like")


@pytest.fixture(scope="module")
def resnet18():
    return zoo.get("resnet18", image_size=112)


@pytest.fixture(scope="module")
def piped(tpu, resnet18):
    return simulate(resnet18, tpu, options=replace(PIPE, stages=2))


def test_cuts_are_where_one_tensor_crosses_and_stages_rebuild_the_graph(resnet18):
    cuts = cut_points(resnet18)
    names = [resnet18.ops[i].name for i in cuts]
    # ResNet-18: after the stem's pool, after each block's residual add but the last (its
    # conv, add and the avgpool are one fused group) and after the avgpool
    assert names == (["maxpool"] + [f"layer{s}.{b}.add" for s in (1, 2, 3, 4) for b in (0, 1)
                                    if (s, b) != (4, 1)] + ["avgpool"])
    # a transformer block cuts nowhere inside its fused add + norm and attention
    assert cut_points(zoo.get("gpt2_block", seq_len=64)) == []
    bounds = [(0, cuts[2] + 1), (cuts[2] + 1, cuts[6] + 1), (cuts[6] + 1, len(resnet18.ops))]
    pieces = [stage_graph(resnet18, a, b) for a, b in bounds]
    assert [op.name for g in pieces for op in g.ops] == [op.name for op in resnet18.ops]
    # the next stage's first conv and its shortcut add read the stage's input
    first = pieces[1].ops
    assert first[0].inputs == () and first[0].name == "layer2.0.conv1"
    assert all(op.inputs != () or op is first[0] or op.name.endswith("downsample.0")
               for op in first)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=1, max_size=8), st.integers(1, 8))
def test_partition_minimises_the_slowest_stage_as_brute_force_does(costs, parts):
    parts = min(parts, len(costs))
    cost = [float(c) for c in costs]
    runs = _partition(cost, list(itertools.accumulate(cost, initial=0.0)), parts)
    assert len(runs) == parts and runs[0][0] == 0 and runs[-1][1] == len(costs)
    assert all(a < b for a, b in runs) and all(x[1] == y[0] for x, y in zip(runs, runs[1:]))
    best = min(max(sum(costs[a:b]) for a, b in zip((0,) + cut, cut + (len(costs),)))
               for cut in itertools.combinations(range(1, len(costs)), parts - 1))
    assert max(sum(costs[a:b]) for a, b in runs) == best


def test_one_stage_is_the_split_placement_number_for_number(tpu, resnet18):
    split = simulate(resnet18, tpu)
    one = simulate(resnet18, tpu, options=replace(PIPE, stages=1))
    assert one.totals["cycles"] == split.totals["cycles"]
    assert [x.cycles for x in one.layers] == [x.cycles for x in split.layers]
    assert one.totals["pipeline_period_cycles"] == split.totals["cycles"]
    assert one.totals["dram_read_bytes"] == split.totals["dram_read_bytes"]


def test_pipeline_cycles_period_and_rate_come_from_its_stages(piped, tpu):
    t = piped.totals
    stage_cycles = t["pipeline_stage_cycles"]
    assert t["pipeline_stages"] == len(stage_cycles) == 2 and t["pipeline_cores_per_stage"] == 1
    # one input's pass: the stages one after another; a new input every slowest stage
    assert t["cycles"] == sum(stage_cycles) == sum(x.cycles or 0 for x in piped.layers)
    assert t["pipeline_period_cycles"] == max(stage_cycles)
    for s, cycles in enumerate(stage_cycles):
        assert sum(x.cycles or 0 for x in piped.layers if x.stage == s) == cycles
    # no stage beats its compute: its MACs over its one core's PEs
    for s, cycles in enumerate(stage_cycles):
        macs = sum(x.macs for x in piped.layers if x.stage == s)
        assert cycles >= macs / tpu.array.pes
    m = piped.metrics().network
    assert m["inferences_per_s"] == pytest.approx(
        piped.totals["batch"] * tpu.clock_hz / t["pipeline_period_cycles"])
    assert t["pipeline_inputs_per_s"] == pytest.approx(1 / t["pipeline_period_s"])
    # each input's leakage is a period's (the chip works on every stage's input at once), not
    # the whole pass's as it would be without the pipeline
    plain = replace(piped, totals={k: v for k, v in t.items() if not k.startswith("pipeline_")})
    static = m["energy_breakdown_j"]["static"]
    assert static == pytest.approx(plain.metrics().network["energy_breakdown_j"]["static"]
                                   * t["pipeline_period_cycles"] / t["cycles"])


def test_sharing_the_dram_never_speeds_a_stage_up(resnet18):
    # two NCE tiles on one LPDDR5 (the cycle-level DRAM): the stages queue behind each other
    npu = load_chip_config("meteor_lake_npu_like")
    piped = simulate(resnet18, npu, options=replace(PIPE, stages=2))
    plan = plan_stages(resnet18, npu, 2)
    slower = []
    for s, (a, b) in enumerate(plan.bounds):
        chip = stage_chip(npu, plan, s)
        alone = execute(compile_graph(stage_graph(resnet18, a, b), chip,
                                      CompileOptions()), chip).cycles
        assert piped.totals["pipeline_stage_cycles"][s] >= alone
        slower.append(piped.totals["pipeline_stage_cycles"][s] > alone)
    assert any(slower)


def test_the_planner_fixes_what_it_is_asked_and_refuses_more_than_the_cuts(tpu, resnet18):
    plan = plan_stages(resnet18, tpu, 2)
    assert plan.stages == 2 and plan.cores_per_stage == 1
    # each stage's chip: its cores and half the L2 (capacity and banks)
    chip = stage_chip(tpu, plan, 1)
    assert chip.cores == 1 and chip.l2.capacity_bytes == tpu.l2.capacity_bytes // 2
    assert chip.model_input == "dram" and chip.model_output == tpu.model_output
    with pytest.raises(OptionError, match=r"compile.stages = 3: resnet18 on tpu-v4-like takes "
                                          r"1..2 pipeline stages"):
        simulate(resnet18, tpu, options=replace(PIPE, stages=3))
    with pytest.raises(ValueError, match="stages = 2: applies to placement = 'pipeline'"):
        CompileOptions(stages=2)
    with pytest.raises(ValueError, match="placement = 'ring': must be one of split, pipeline"):
        CompileOptions(placement="ring")
    with pytest.raises(OptionError, match=r"needs a chip with 2 or more cores \(npulab-default "
                                          r"has 1\)"):
        simulate(resnet18, load_chip_config(), options=PIPE)


def test_every_view_shows_the_same_stages(piped):
    text = render(piped, "table", piped.metrics())
    t = piped.totals
    line = next(x for x in text.splitlines() if x.startswith("pipeline"))
    assert f"a new input every {t['pipeline_period_cycles']:,} cycles" in line
    assert ", ".join(f"{c:,}" for c in t["pipeline_stage_cycles"]) in line
    head, rows = csv_table(piped)
    stages = [row[head.index("stage")] for row in rows]
    assert stages == [x.stage for x in piped.layers] and set(stages) == {0, 1}
    doc = json.loads(render(piped, "json", piped.metrics()))
    assert doc["totals"]["pipeline_stage_cycles"] == t["pipeline_stage_cycles"]
    assert [x["stage"] for x in doc["layers"]] == stages
    trace = chrome_trace(piped)
    validate_trace(trace)
    # stage 1's layers are on core 1's track, stage 0's on core 0's
    by_core = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and "core" in e.get("args", {}):
            by_core.setdefault(e["args"]["core"], set()).add(e["args"]["layer"])
    stage_of = {x.name: x.stage for x in piped.layers}
    assert {stage_of[n] for n in by_core[0]} == {0} and {stage_of[n] for n in by_core[1]} == {1}


def test_the_command_line_runs_a_pipeline_and_says_what_is_wrong_in_one_line():
    ok = subprocess.run([sys.executable, "-m", "npulab", "run", "--config", "tpu_v4_like",
                         "--image-size", "64", "--placement", "pipeline", "-q"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "pipeline" in ok.stdout and "inputs/s" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "npulab", "run", "--stages", "2", "-q"],
                         capture_output=True, text=True)
    assert bad.returncode != 0
    assert bad.stderr.strip() == "npulab: error: --stages 2: applies to --placement pipeline"


def test_the_chosen_stage_count_never_has_a_longer_period_than_the_split(tpu, resnet18):
    split = simulate(resnet18, tpu).totals["cycles"]
    auto = simulate(resnet18, tpu, options=PIPE).totals
    # the planner's count is simulated beside one stage (the split placement) and two
    assert auto["pipeline_stages_simulated"] == [1, 2]
    assert auto["pipeline_period_cycles"] <= split
    fixed = {n: simulate(resnet18, tpu, options=replace(PIPE, stages=n)).totals
             for n in (1, 2)}
    best = min(fixed, key=lambda n: (fixed[n]["pipeline_period_cycles"], n))
    assert auto["pipeline_stages"] == best
    assert auto["pipeline_period_cycles"] == fixed[best]["pipeline_period_cycles"]


def test_the_tensor_between_two_stages_goes_through_the_l2(tpu, resnet18):
    from hw.program import Kind, Location, Operand
    plan = plan_stages(resnet18, tpu, 2)
    (a0, b0), (a1, b1) = plan.bounds
    first, second = stage_graph(resnet18, a0, b0), stage_graph(resnet18, a1, b1)
    c0, c1 = stage_chip(tpu, plan, 0), stage_chip(tpu, plan, 1)

    def dram_bytes(program, kind, operand=None):
        cols = program.columns
        sel = (cols["kind"] == kind) & (cols["location"] == Location.DRAM)
        if operand is not None:
            sel &= cols["operand"] == operand
        return int((cols["n2"] * cols["n1"] * cols["chunk_bytes"] * cols["copies"])[sel].sum())

    # stage 0 leaves its output in the L2: no output store reaches DRAM
    through = compile_graph(first, c0, CompileOptions(), output_in_l2=True)
    alone = compile_graph(first, c0, CompileOptions())
    out_bytes = first.ops[-1].output_bytes(2)
    assert dram_bytes(alone, Kind.STORE, Operand.OFMAP) >= out_bytes
    assert dram_bytes(through, Kind.STORE, Operand.OFMAP) == (
        dram_bytes(alone, Kind.STORE, Operand.OFMAP) - out_bytes)
    # stage 1 finds its input there: fewer input bytes from DRAM
    held = compile_graph(second, c1, CompileOptions(), input_in_l2=True)
    cold = compile_graph(second, c1, CompileOptions())
    assert dram_bytes(held, Kind.LOAD, Operand.IFMAP) < dram_bytes(cold, Kind.LOAD, Operand.IFMAP)
    # and the pipeline's DRAM writes are the stages' without the hand-over's
    run = simulate(resnet18, tpu, options=replace(PIPE, stages=2)).totals
    apart = [execute(p, c).totals for p, c in ((alone, c0), (cold, c1))]
    assert run["dram_write_bytes"] == sum(t["dram_ofmap_write_bytes"] + t["dram_psum_write_bytes"]
                                          for t in apart) - out_bytes
