"""Issue 21, items 17-20: the same option means the same thing in every command, a flag that
needs another says so, the Python API resolves presets like the CLI, ``system`` makes a plan that
does not fit visible, and the lists the help shows come from the code."""

from __future__ import annotations

import io
import json

import pytest

from compiler.ir import Gemm, Graph, conv2d
from hw.configfile import load_chip_config, resolve_chip_path
from hw.presets import chip_preset_names, nvdla_preset_names, presets_dir
from hw.system import system_names
from hw.systolic.config import ConfigError
from npulab import cli
from npulab.cli import common
from npulab.cli import main
from npulab.simulate import simulate

SMALL = ["--set", "array.rows=8", "--set", "array.cols=8"]


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _cycles(capsys, *argv) -> dict:
    code, out, err = _run(capsys, "run", *argv, "--format", "json", *SMALL)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("timing", ["compute", "native"])
def test_run_gemm_is_one_gemm_op_simulated_as_the_api_does(capsys, timing):
    doc = _cycles(capsys, "--gemm", "40,24,72", "--batch", "2", "--timing", timing)
    [layer] = doc["layers"]
    assert layer["macs"] == 2 * 40 * 24 * 72
    chip = load_chip_config(None, [s for s in SMALL if s != "--set"])
    op = Gemm(name="gemm 40x24x72", m=40, n=24, k=72, batch=2)
    expected = simulate(Graph(name="gemm_40x24x72", ops=(op,)), chip, timing)
    assert layer["cycles"] == expected.layers[0].cycles
    assert doc["totals"]["cycles"] == expected.totals["cycles"]


def test_run_conv_takes_maps_spec_grammar(capsys):
    doc = _cycles(capsys, "--conv", "12x12x16-24k3p1", "--timing", "compute")
    op = conv2d("c", in_hw=(12, 12), in_channels=16, out_channels=24, kernel=(3, 3), padding=1)
    assert doc["layers"][0]["macs"] == op.macs


@pytest.mark.parametrize("argv, hint", [
    (["run", "--gemm"], "--topology-format gemm"),
    (["map", "--gemm"], "--topology-format gemm"),
    (["run", "--topology-format", "gemm"], "applies to --topology"),
    (["run", "--gemm", "8,8,8", "--timing", "compute", "--loop-order", "mnk"],
     "--loop-order applies to --timing native"),
    (["run", "--gemm", "8,8,8", "--timing", "scalesim", "--no-keep-on-chip"],
     "--no-keep-on-chip applies to --timing native"),
    (["run", "--gemm", "8,8,8", "--timing", "compute", "--no-fusion"],
     "--no-fusion applies to --timing native"),
    (["run", "--gemm", "8,8,8", "--image-size", "32"], "apply to zoo models"),
])
def test_a_flag_that_needs_another_says_so(capsys, argv, hint):
    # before: `run --gemm` silently ran ResNet-18; `run --gemm M,N,K` was rejected by argparse;
    # --loop-order and friends were ignored outside native timing.
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("npulab: error: ") and hint in err


def test_topology_format_reads_gemm_rows(capsys, tmp_path):
    csv = tmp_path / "g.csv"
    csv.write_text("Layer, M, N, K,\ng0, 16, 8, 24,\n")
    code, out, err = _run(capsys, "run", "-t", str(csv), "--topology-format", "gemm",
                          "--timing", "compute", "--format", "json", *SMALL)
    assert code == 0, err
    assert json.loads(out)["layers"][0]["macs"] == 16 * 8 * 24


def test_scalesim_points_gemm_users_to_the_topology_format(capsys):
    code, _, err = _run(capsys, "scalesim", "-c", "x.cfg", "-t", "x.csv", "-o", "o", "--gemm")
    assert code == 2 and "--topology-format gemm" in err


@pytest.mark.parametrize("name", ["gemmini_like", "tpu_v1_like", "default"])
def test_the_python_api_takes_preset_names_like_the_cli(name):
    # before: load_chip_config("gemmini_like") raised "no such config file"
    assert load_chip_config(name) == load_chip_config(presets_dir() / f"{name}.toml")
    assert resolve_chip_path(name) == common.resolve_config(name)


def test_an_unknown_preset_names_every_preset():
    with pytest.raises(ConfigError) as info:
        load_chip_config("gemini_like")
    for name in chip_preset_names() + nvdla_preset_names():
        assert name in str(info.value)


def test_an_nvdla_preset_through_the_chip_loader_says_what_it_is():
    with pytest.raises(ConfigError, match="NVDLA config"):
        load_chip_config("nv_full")


def _help(argv: list[str], raw: bool = False) -> str:
    out = io.StringIO()
    parser = cli.build_parser(argv)
    sub = parser._subparsers._group_actions[0]
    sub.choices[argv[0]].print_help(out)
    return out.getvalue() if raw else " ".join(out.getvalue().split())


@pytest.mark.parametrize("command", ["run", "map", "config"])
def test_config_help_lists_every_preset_and_nvdla_build(command):
    argv = [command, "show"] if command == "config" else [command]
    text = _help(argv[:1]) if command != "config" else None
    if command == "config":
        out = io.StringIO()
        cli.build_parser(["config"])._subparsers._group_actions[0].choices["config"] \
            ._subparsers._group_actions[0].choices["show"].print_help(out)
        text = " ".join(out.getvalue().split())
    for name in chip_preset_names() + nvdla_preset_names():   # before: no NVDLA builds
        assert name in text


@pytest.mark.parametrize("command", ["system", "collective"])
def test_system_help_lists_every_shipped_system(command):
    text = _help([command])
    assert {"dgx1-v100", "selene"} <= set(system_names())      # before: both missing
    for name in system_names():
        assert name in text


def _system(capsys, *argv):
    return _run(capsys, "system", *argv)


def test_system_help_examples_fit(capsys):
    text = _help(["system"], raw=True)
    examples = [line.split("npulab system ", 1)[1] for line in
                text.split("examples (each plan fits in the chips' memory):")[1]
                .split("LLM presets")[0].splitlines() if "npulab system " in line]
    assert len(examples) >= 2
    for example in examples:
        code, out, err = _system(capsys, *example.split(), "--strict")
        assert code == 0 and "does NOT fit" not in out and err == "", example


def test_a_plan_that_does_not_fit_warns_and_fails_with_strict(capsys):
    argv = ["--system", "dgx-a100", "--model", "megatron-22b", "--strategy", "tp=8",
            "--global-batch", "8"]
    code, out, err = _system(capsys, *argv)
    assert code == 0 and "does NOT fit" in out
    assert err.startswith("npulab: warning: the plan does not fit: ") and err.count("\n") == 1
    code, out, err = _system(capsys, *argv, "--strict")
    assert code == 1 and "does NOT fit" in out and "warning" in err
    code, out, err = _system(capsys, *argv, "--strict", "--format", "json")
    assert code == 1 and json.loads(out)["fits"] is False


def test_scalesim_timing_says_why_a_1x1_os_layer_is_one_cycle_short(capsys):
    # issue 21 item 13: 262,143 cycles for 262,144 MACs on one PE, unexplained. The number is
    # SCALE-Sim's own (folds x (T + R + C - 2) - 1 = 4096 x 64 - 1); the scope now says so.
    code, out, _ = _run(capsys, "run", "--gemm", "64,64,64", "--timing", "scalesim", "--set",
                        "array.rows=1", "--set", "array.cols=1", "--set", "array.dataflow=os",
                        "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["totals"]["cycles"] == 64 * 64 * 64 - 1
    assert "one cycle less than its folds take" in doc["scope"]
    assert "issue 125" in doc["scope"]
