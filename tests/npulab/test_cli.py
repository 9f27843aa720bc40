"""The command line as a user meets it: defaults, formats, output files, overrides, errors."""

import csv
import io
import json
import subprocess
import sys
import tomllib

import pytest

import npulab
from hw.chip import ChipConfig
from hw.configfile import chip_config_to_toml
from npulab.cli import main

RESNET18_MACS = 1_814_073_344  # sum over conv + fc layers; torchvision lists 1.814 GFLOPS


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_default_run_is_resnet18_on_the_default_chip(capsys):
    code, out, _ = run(capsys, "run")
    assert code == 0 and out.startswith("npulab: resnet18 on npulab-default (32x32 ws int8, 1000 MHz)")
    assert "full chip" in out and "stall dram" in out and "DRAM bandwidth" in out
    assert f"total MACs            {RESNET18_MACS:,}" in out
    assert "layer1.0.conv1" in out and "fc" in out


def test_json_has_layers_and_totals(capsys):
    code, out, _ = run(capsys, "run", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and isinstance(doc["layers"], list)
    assert doc["totals"]["macs"] == RESNET18_MACS
    assert doc["totals"]["cycles"] == sum(layer["cycles"] or 0 for layer in doc["layers"])
    assert doc["config"] == tomllib.loads(chip_config_to_toml(ChipConfig()))
    assert doc["timing"] == "native" and doc["model"] == "resnet18"


def test_csv_has_one_row_per_op(capsys):
    code, out, _ = run(capsys, "run", "--model", "mobilenetv2", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and len(rows) == len(npulab.zoo.get("mobilenetv2").ops)
    depthwise = [r for r in rows if r["name"] == "features.2.conv.1.0"]
    assert depthwise[0]["gemm_count"] == "96"  # 96 channels, one GEMM each


def test_output_dir_gets_all_formats(capsys, tmp_path):
    code, out, err = run(capsys, "run", "--format", "json", "-o", str(tmp_path / "res"))
    assert code == 0
    summary = json.loads((tmp_path / "res" / "summary.json").read_text())
    doc = json.loads(out)
    assert summary["run"] == {k: v for k, v in doc.items() if k != "metrics"}
    assert summary["metrics"] == doc["metrics"]
    assert (tmp_path / "res" / "layers.csv").read_text().startswith("name,op,engine")
    assert "total cycles" in (tmp_path / "res" / "report.txt").read_text()
    assert "wrote summary.json" in err


def test_set_and_presets_change_the_chip(capsys):
    _, out, _ = run(capsys, "run", "--config", "gemmini_like", "--set", "array.rows=8",
                    "--format", "json", "--model", "bert_base_layer", "--seq-len", "64")
    doc = json.loads(out)
    assert doc["config"]["array"]["rows"] == 8 and doc["config"]["array"]["dataflow"] == "os"
    assert doc["chip"] == "gemmini-like"
    # BERT-base layer, s = 64, d = 768: 4sd^2 + 2s^2d + 8sd^2 (projections, attention, FFN)
    s, d = 64, 768
    assert doc["totals"]["macs"] == 4 * s * d * d + 2 * s * s * d + 8 * s * d * d


def test_config_show_prints_effective_toml(capsys):
    code, out, _ = run(capsys, "config", "show", "--set", "array.cols=7")
    assert code == 0 and tomllib.loads(out)["array"]["cols"] == 7
    code, out, _ = run(capsys, "config", "list")
    lines = out.splitlines()
    from hw.presets import chip_preset_names
    names = chip_preset_names()                 # every shipped chip file, sorted
    assert lines[:len(names)] == names
    assert {"default", "eyeriss_like", "gemmini_like", "tpu_v1_like", "tpu_v5e_like",
            "a100_like"} <= set(names)
    assert lines[len(names)] == ("# NVDLA builds (hw.nvdla.config.load_nvdla_config): nv_full, nv_large, "
                        "nv_medium_1024, nv_medium_512, nv_small, nv_small_256")


@pytest.mark.parametrize("preset", ["nv_full", "nv_small"])
def test_config_show_prints_an_nvdla_build_that_reads_back(capsys, tmp_path, preset):
    # one loader for both kinds: `config show` of a build is TOML that load_chip reads back
    from hw.configfile import load_chip
    code, out, _ = run(capsys, "config", "show", "--config", preset, "--set",
                       "nvdla.clock_mhz=500")
    assert code == 0 and tomllib.loads(out)["nvdla"]["clock_mhz"] == 500
    (tmp_path / "b.toml").write_text(out)
    assert load_chip(tmp_path / "b.toml").config == load_chip(preset,
                                                              ["nvdla.clock_mhz=500"]).config


def test_topology_run(capsys, tmp_path):
    topo = tmp_path / "t.csv"
    topo.write_text("Layer, M, N, K,\nfc1, 64, 64, 64,\n")
    code, out, _ = run(capsys, "run", "--topology", str(topo), "--config", "default",
                       "--set", "array.rows=8", "--set", "array.cols=8", "--set",
                       "array.dataflow=os", "--timing", "scalesim", "--format", "json")
    # SCALE-Sim G_64x64x64 on 8x8 OS: 4991 cycles (../shared/reference/scalesim_reference.csv)
    assert code == 0 and json.loads(out)["totals"]["cycles"] == 4991


@pytest.mark.parametrize("argv, fragment", [
    (["run", "--model", "resnet19"], "unknown zoo model 'resnet19'; known models: alexnet"),
    (["run", "--config", "nope"], "--config nope: no such file or preset"),
    (["run", "--set", "array.rows=-1"], "array.rows = -1: must be an integer in 1..4096"),
    (["run", "--model", "resnet18", "--seq-len", "5"], "unknown parameter 'seq_len'"),
    (["run", "--topology", "/nonexistent/x.csv"], "/nonexistent/x.csv"),
    (["config", "show", "--config", "/nonexistent/c.toml"], "/nonexistent/c.toml: no such config file"),
    (["run", "--set", "sram.ifmap.capacity_kib=0.25", "--set", "sram.banks=1",
      "--set", "sram.bank_width_bytes=1", "--model", "vgg16"], "no tiling fits the scratchpads"),
    (["run", "--set", "dram.preset=ddr9"], "dram.preset = 'ddr9'"),
    (["run", "--set", "sram.ifmap.size=3"], "sram.ifmap.size"),
    (["run", "--skip-unsupported"], "--skip-unsupported applies to --onnx"),
    (["run", "--onnx", "/nonexistent/m.onnx"], "/nonexistent/m.onnx"),
    (["run", "--set", "sram.buffer_split=1e-9"], "sram.ifmap.buffer_split = 1e-09"),
])
def test_user_errors_are_one_line(capsys, argv, fragment):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("npulab: error: ") and err.count("\n") == 1
    assert fragment in err


def _symbolic_conv(path, dims=("N", 3, "H", "W")):
    """A 3x3 conv (16 filters, pad 1) whose input has symbolic dimensions."""
    import onnx
    from onnx import TensorProto, helper

    w = helper.make_tensor("w", TensorProto.FLOAT, [16, 3, 3, 3], [0.0] * 432)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv0", pads=[1, 1, 1, 1])],
        "sym", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    onnx.save(helper.make_model(graph), str(path))
    return path


def test_run_onnx_dim_sets_symbolic_dimensions(capsys, tmp_path):
    pytest.importorskip("onnx")
    path = _symbolic_conv(tmp_path / "sym.onnx")
    code, _, err = run(capsys, "run", "--onnx", str(path))
    assert code == 2 and err == (
        f"npulab: error: {path}: graph input 'x' axis 2 is symbolic ('H'); npulab simulates "
        "static shapes: give its size with npulab run --dim H=SIZE (Python: dims={'H': SIZE})\n")
    code, out, _ = run(capsys, "run", "--onnx", str(path), "--dim", "H=8", "--dim", "W=4",
                       "--batch", "2", "--format", "json", "--timing", "compute")
    assert code == 0 and json.loads(out)["totals"]["macs"] == 2 * 8 * 4 * 16 * 27


@pytest.mark.parametrize("dims, message", [
    (["H"], "--dim H: expected NAME=SIZE, e.g. --dim sequence=128"),
    (["=4"], "--dim =4: expected NAME=SIZE"),
    (["H=0"], "--dim H=0: SIZE '0' must be an integer >= 1"),
    (["H=-3"], "--dim H=-3: SIZE '-3' must be an integer >= 1"),
    (["H=1e3"], "--dim H=1e3: SIZE '1e3' must be an integer >= 1"),
    (["H=4", "H=5"], "--dim H=5: H is given twice"),
    (["H=4", "W=4", "C=3"], "dims['C'] (--dim C=...): no graph input has a symbolic dimension "
                            "of that name; its symbolic dimensions: N, H, W"),
])
def test_run_onnx_dim_errors(capsys, tmp_path, dims, message):
    pytest.importorskip("onnx")
    path = _symbolic_conv(tmp_path / "sym.onnx")
    options = [a for d in dims for a in ("--dim", d)]
    code, out, err = run(capsys, "run", "--onnx", str(path), *options)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert message in err, err


def test_skip_unsupported_with_onnx_is_the_imports_on_a_systolic_chip(capsys, tmp_path):
    # --skip-unsupported is read by the ONNX import, and by an NVDLA build's run; a systolic
    # chip runs every op, so the run (npulab.pipeline.check_options) does not get it
    pytest.importorskip("onnx")
    path = _symbolic_conv(tmp_path / "conv.onnx", dims=(1, 3, 8, 8))
    for config in ("default", "nv_small"):
        code, out, err = run(capsys, "run", "--onnx", str(path), "--skip-unsupported", "-c",
                             config, "--format", "json")
        assert code == 0, err
        assert json.loads(out)["totals"]["macs"] == 8 * 8 * 16 * 27
    code, _, err = run(capsys, "run", "--onnx", str(path), "--skip-unsupported", "--timing",
                       "compute", "--map", "best-edp")       # the other checks still run
    assert code == 2 and err.startswith("npulab: error: --map applies to --timing native")


def test_dim_needs_onnx(capsys):
    code, _, err = run(capsys, "run", "--dim", "H=4")
    assert code == 2 and err == ("npulab: error: --dim applies to --onnx models (symbolic input "
                                 "dimensions); zoo models take --batch, --image-size and "
                                 "--seq-len\n")


def test_bad_topology_line_is_reported(capsys, tmp_path):
    topo = tmp_path / "bad.csv"
    topo.write_text("name,H,W,R,S,C,K,s,\nc1,10,10,3,3,4,x,1,\n")
    code, _, err = run(capsys, "run", "--topology", str(topo))
    assert code == 2 and f"{topo}:2: num_filters: 'x'" in err


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["scalesim", "--help"],
                                  ["config", "show", "--help"]])
def test_help_has_examples(capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    assert "examples:" in capsys.readouterr().out


def test_bare_command_prints_help(capsys):
    code, out, _ = run(capsys)
    assert code == 2 and "usage: npulab" in out and "run" in out


def test_version(capsys):
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"npulab {npulab.__version__}"


def test_module_entry_point_runs():
    done = subprocess.run([sys.executable, "-m", "npulab", "run", "--model", "alexnet",
                           "--format", "json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    # torchvision AlexNet_Weights.IMAGENET1K_V1: 0.714 GFLOPS
    assert json.loads(done.stdout)["totals"]["macs"] == pytest.approx(0.714e9, rel=1e-3)


def test_compute_timing_and_compiler_flags(capsys):
    code, out, _ = run(capsys, "run", "--timing", "compute", "--format", "json")
    assert code == 0 and json.loads(out)["scope"].startswith("compute-only")
    code, out, _ = run(capsys, "run", "--model", "alexnet", "--conv-lowering", "im2col",
                       "--loop-order", "nmk", "--no-keep-on-chip", "--format", "json")
    doc = json.loads(out)
    tilings = [layer["tiling"] for layer in doc["layers"] if layer["tiling"]]
    assert code == 0 and all(t.endswith("nmk") for t in tilings)
    assert any(t.startswith("im2col") for t in tilings)


def test_run_onnx_model(capsys, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    w = helper.make_tensor("w", TensorProto.FLOAT, [16, 3, 3, 3], [0.0] * 432)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv0", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["y"], ["z"], name="relu0")],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], [w])
    path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph), str(path))
    code, out, _ = run(capsys, "run", "--onnx", str(path), "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["totals"]["macs"] == 32 * 32 * 16 * 27


def test_no_fusion_runs_every_op_alone_in_every_view(capsys, tmp_path):
    """--no-fusion: no fused column, one kernel per op; fused (default): the terminal table,
    CSV, JSON and HTML name the same groups."""
    def out(*argv):
        code, text, err = run(capsys, "run", "--model", "bert_base_layer", "--seq-len", "16",
                              "-q", *argv)
        assert code == 0, err
        return text

    table = out("-o", str(tmp_path))
    fused = json.loads((tmp_path / "summary.json").read_text())["run"]
    alone = json.loads(out("--format", "json", "--no-fusion"))
    groups = {x["fused"] for x in fused["layers"] if x["fused"]}
    assert {g.split(":")[0] for g in groups} == {"attention", "add_norm", "epilogue"}
    members = sum(1 for x in fused["layers"] if x["engine"] == "fused")
    assert fused["totals"]["layers_fused"] == members
    assert fused["totals"]["kernels"] == alone["totals"]["kernels"] - members
    assert not any(x["fused"] for x in alone["layers"]) and alone["totals"]["layers_fused"] == 0
    rows = list(csv.DictReader(io.StringIO((tmp_path / "layers.csv").read_text())))
    assert [r["fused"] or None for r in rows] == [x["fused"] for x in fused["layers"]]
    assert all(g in table for g in groups) and f"{members} fused into them" in table
    html = (tmp_path / "report.html").read_text()
    assert all(html.count(g) >= 2 for g in groups)      # the anchor and each member
    assert html.count("in its fused group") == members
