"""One run pipeline (issue 22): ``npulab.run(workload, device, options)`` for every chip kind.

The gold: each kind's own runner called directly (``simulate`` for systolic chips,
``simulate_nvdla`` for NVDLA builds) gives the same record; the command line and the
multi-chip planner go through the same call.
"""

from __future__ import annotations

import pytest

from compiler.frontends import zoo
from compiler.ir import Graph
from compiler.options import CompileOptions
from hw.configfile import load_chip, load_chip_config
from hw.nvdla.config import load_nvdla_config
from hw.spec import ENGINE_KINDS, chip_spec
from npulab.nvdla_run import simulate_nvdla
from npulab.pipeline import RUNNERS, RunOptions, resolve_device, run
from npulab.simulate import simulate

GRAPH = zoo.get("resnet18", image_size=16)


@pytest.mark.parametrize("timing", ["native", "compute", "scalesim"])
def test_a_systolic_chip_runs_as_simulate_does(timing):
    chip = load_chip_config("gemmini_like")
    got = run(GRAPH, "gemmini_like", RunOptions(timing=timing))
    assert got.to_dict() == simulate(GRAPH, chip, timing).to_dict()


def test_an_nvdla_build_runs_as_simulate_nvdla_does():
    got = run(GRAPH, "nv_small", RunOptions(precision="int8"))
    assert got.to_dict() == simulate_nvdla(GRAPH, load_nvdla_config("nv_small")).to_dict()


def test_every_device_form_is_the_same_chip():
    spec = load_chip("tpu_v1_like")
    assert resolve_device("tpu_v1_like") == spec
    assert resolve_device(spec.config) == chip_spec(spec.config)
    assert resolve_device(spec) is spec
    assert resolve_device(None) == load_chip(None)


def test_every_engine_kind_has_a_runner():
    assert set(RUNNERS) == set(ENGINE_KINDS)


def test_options_are_typed_and_checked_for_the_chip_kind():
    with pytest.raises(TypeError):
        RunOptions(timng="compute")                       # a misspelt option is an error
    with pytest.raises(ValueError, match="timing = 'fast'"):
        RunOptions(timing="fast")
    # on a systolic chip --precision is the array's (as --set array.precision=int16)
    r16 = run(GRAPH, "default", RunOptions(precision="int16"))
    assert r16.spec.config.array.precision.value == "int16"
    assert r16.spec.config.array.acc_bits == 64          # int16's default accumulators
    assert run(GRAPH, "default", RunOptions(precision="int8")).spec == run(GRAPH, "default").spec
    with pytest.raises(ValueError, match="NVDLA build"):
        run(GRAPH, "nv_small", RunOptions(timing="compute"))
    with pytest.raises(ValueError, match="does not tile"):
        run(GRAPH, "default", RunOptions(timing="compute", compile=CompileOptions(map="best-edp")))


@pytest.mark.parametrize("device, options, option, value", [
    ("default", RunOptions(skip_unsupported=True), "skip_unsupported", True),
    ("default", RunOptions(timing="scalesim", compile=CompileOptions(loop_order="knm")),
     "compile.loop_order", "knm"),
    ("nv_small", RunOptions(timing="compute"), "timing", "compute"),
    ("nv_small", RunOptions(compile=CompileOptions(keep_on_chip=False)),
     "compile.keep_on_chip", False),
])
def test_an_option_the_chip_does_not_read_names_its_field(device, options, option, value):
    # one rule, checked before any work (check_options) and by the runner (run); the command
    # line words the same error with its flags
    import pickle
    from npulab.pipeline import OptionError, check_options
    for call in (lambda: check_options(device, options), lambda: run(GRAPH, device, options)):
        with pytest.raises(OptionError) as info:
            call()
        assert (info.value.option, info.value.value) == (option, value)
        assert str(info.value).startswith(f"{option} = {value!r} applies to ")
    again = pickle.loads(pickle.dumps(info.value))          # sweeps send it between processes
    assert (again.option, again.value, str(again)) == (option, value, str(info.value))
    check_options(device, RunOptions())                     # the defaults suit every chip
    # only the energy table is set: it is the mapper's, no tiling choice
    check_options("nv_small", RunOptions(compile=CompileOptions(tech="45nm")))


def test_option_errors_are_worded_by_the_caller():
    from npulab.pipeline import OptionError, check_options
    with pytest.raises(OptionError) as info:
        check_options("default", RunOptions(timing="compute",
                                            compile=CompileOptions(map="best-edp")))
    assert str(info.value) == ("compile.map = 'best-edp' applies to timing = native (it tiles "
                               "layers for the full chip); timing = compute does not tile")
    flags = {"compile.map": "--map", "timing": "--timing"}
    assert info.value.words(lambda o, v: flags[o], lambda f, v: f"{flags[f]} {v}") == (
        "--map applies to --timing native (it tiles layers for the full chip); --timing "
        "compute does not tile")


def test_the_planner_times_ops_on_any_chip_kind_through_the_pipeline():
    # a system of NVDLA builds: before, op_time_for loaded every chip device as a systolic chip
    from hw.system.system import load_system
    from npulab.system_run import op_time_for
    system = load_system("ring:4", device="nv_small")
    from dataclasses import replace
    op = GRAPH.op("layer1.0.conv1")
    seconds = op_time_for(system)(op)
    one = run(Graph("one", (replace(op, inputs=()),)), "nv_small")
    assert seconds == one.totals["cycles"] / (load_nvdla_config("nv_small").clock_mhz * 1e6)


def test_one_device_interface_for_roofline_and_simulated_chips():
    # npulab.devices: the planner asks every device the same questions
    from hw.system.system import DEVICES, ChipDevice
    from npulab.devices import RooflineModel, SimulatedChip, device_model, op_cost
    op = GRAPH.op("fc")
    a100 = DEVICES["a100"]
    roof = device_model(a100)
    assert isinstance(roof, RooflineModel)
    assert (roof.peak_flops, roof.memory_bytes) == (a100.peak_tflops * 1e12, a100.mem_bytes)
    assert roof.op_seconds(op) == a100.op_seconds(*op_cost(op))
    chip = device_model(ChipDevice("small", "nv_small"))
    assert isinstance(chip, SimulatedChip) and chip.peak_flops is None
    one = run(Graph("one", (op.__class__(**{**vars(op), "inputs": ()}),)), "nv_small")
    assert chip.op_seconds(op) == one.totals["cycles"] / chip.spec.clock_hz
    with pytest.raises(TypeError, match="unknown device"):
        device_model("a100")
