"""A reconfigurable array: the mapper picks the dataflow per layer and the executor runs it.

Gold models: the executor's counters for a layer must equal the mapper's prediction for the
dataflow it chose (the same cost model a fixed-dataflow chip of that dataflow reports), and a
reconfigurable chip without ``--map`` must run exactly like the fixed chip."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compiler.ir import Gemm, Graph, conv2d
from compiler.backends.systolic import tile_problem, compile_graph
from compiler.options import CompileOptions
from compiler.mapper import map_op
from hw.chip import ChipConfig
from hw.configfile import load_chip_config
from hw.memory.sram import SramConfig
from hw.systolic.config import ArrayConfig, ConfigError, Dataflow
from npulab.metrics import compute_metrics
from npulab.simulate import simulate


def _chip(reconfigurable: bool, dataflow: str = "ws") -> ChipConfig:
    return ChipConfig(array=ArrayConfig(rows=8, cols=8, dataflow=Dataflow(dataflow),
                                        reconfigurable=reconfigurable),
                      ifmap_sram=SramConfig(capacity_kib=8), filter_sram=SramConfig(capacity_kib=8),
                      ofmap_sram=SramConfig(capacity_kib=8), model_input="dram",
                      model_output="dram")


# A 4-row GEMM (on WS each 8x8 weight fold serves only 4 streamed rows; IS and OS keep the
# small operand in place) and a 3-channel 7x7 stem convolution (K = 147 folds badly onto WS/IS
# rows, OS puts output pixels x channels on the PEs): the mapper picks OS or IS for them.
OPS = (Gemm(name="short", m=4, n=64, k=64), conv2d("stem", 28, 3, 16, 7, stride=2, padding=3))


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
@pytest.mark.parametrize("mode", ("best-latency", "best-energy", "best-edp"))
def test_each_layer_runs_the_dataflow_the_mapper_chose(op, mode):
    chip = _chip(True)
    options = CompileOptions(map=mode, keep_on_chip=False)
    objective = mode.split("-")[1]
    best = map_op(tile_problem(op, chip, options), chip, objective, dataflows=tuple(Dataflow)).best
    graph = Graph("t", (op,))
    program = compile_graph(graph, chip, options)
    assert program.layers[0].tiling.dataflow == best.dataflow.value
    run = simulate(graph, chip, options=options)
    c = run.execution.layers[0]
    # The same counters the mapper predicted for its dataflow (SRAM roles swap for IS).
    assert c["array_busy_cycles"] == best.compute_cycles
    for name in ("ifmap_sram_reads", "filter_sram_reads", "ofmap_sram_writes", "ofmap_sram_reads",
                 "pe_busy_cycles"):
        assert c[name] == best.counters[name], name
    # ... and the same as a chip whose array is fixed to that dataflow, running that tiling.
    fixed = _chip(False, best.dataflow.value)
    t = program.layers[0].tiling
    forced = map_op(tile_problem(op, fixed, options), fixed, objective).best
    assert (forced.m_tile, forced.n_tile, forced.k_tile, forced.order) == (
        t.m_tile, t.n_tile, t.k_tile, t.order)
    # Energy: register bits per MAC follow the layer's dataflow (2 op + acc for OS, op + acc
    # otherwise; npulab.simulate.array_actions).
    layer = run.layers[0]
    per_mac = (2 * 8 if best.dataflow is Dataflow.OS else 8) + 32
    assert layer.actions.reg_bits == op.macs * per_mac
    assert layer.tiling.endswith(" " + best.dataflow.value)
    energy = compute_metrics(run).layers[0]["energy_breakdown_j"]   # the mapper's default table
    for name in ("mac", "rf", "sram.ifmap", "sram.filter", "sram.ofmap"):
        assert energy[name] == pytest.approx(best.energy_breakdown_j[name], rel=1e-12), name


def test_the_mapper_leaves_ws_for_these_ops():
    # Not vacuous: the first test only proves something if choices other than the chip's WS
    # occur, IS among them (its SRAM roles are swapped).
    chip = _chip(True)
    chosen = {map_op(tile_problem(op, chip, CompileOptions()), chip, o,
                     dataflows=tuple(Dataflow)).best.dataflow
              for op in OPS for o in ("latency", "energy", "edp")}
    assert {Dataflow.OS, Dataflow.IS} <= chosen


@pytest.mark.parametrize("objective", ("latency", "energy", "edp"))
def test_more_dataflows_never_cost_more(objective):
    # The reconfigurable space contains the fixed one, and the search of a small space is
    # exhaustive, so its optimum can only be as good or better.
    for op in OPS:
        chip = _chip(True)
        p = tile_problem(op, chip, CompileOptions())
        fixed = map_op(p, chip, objective)
        free = map_op(p, chip, objective, dataflows=tuple(Dataflow))
        assert fixed.exhaustive and free.exhaustive
        assert free.best.objective <= fixed.best.objective


def test_without_map_a_reconfigurable_chip_runs_like_the_fixed_one():
    graph = Graph("t", OPS)
    a = simulate(graph, _chip(False))
    b = simulate(graph, _chip(True))
    assert a.totals == b.totals
    assert [x.tiling for x in a.layers] == [x.tiling for x in b.layers]


def test_reconfigurable_must_be_a_boolean(tmp_path):
    path = tmp_path / "chip.toml"
    path.write_text('[array]\nreconfigurable = "yes"\n')
    with pytest.raises(ConfigError, match=r"chip.toml: array.reconfigurable = 'yes': must be "
                                          r"true or false"):
        load_chip_config(path)
    assert load_chip_config(None, ["array.reconfigurable=true"]).array.reconfigurable is True
    assert replace(ChipConfig().array, reconfigurable=True).reconfigurable


def test_npulab_map_searches_every_dataflow_on_a_reconfigurable_chip(capsys):
    import json

    from npulab.cli import main
    args = ["map", "--gemm", "4,64,64", "--set", "array.rows=8", "--set", "array.cols=8",
            "--objective", "edp", "--format", "json", "--tech", "45nm"]
    assert main(args) == 0
    fixed = json.loads(capsys.readouterr().out)
    assert main(args + ["--set", "array.reconfigurable=true"]) == 0
    free = json.loads(capsys.readouterr().out)
    # Three dataflows: the space is the sum of the three per-dataflow spaces, so larger.
    assert free["space_size"] > fixed["space_size"]
    assert free["dataflows"] == ["os", "ws", "is"] and fixed["dataflows"] == ["ws"]
    assert free["ranked"][0]["objective"] <= fixed["ranked"][0]["objective"]
