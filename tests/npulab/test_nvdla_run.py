"""``npulab run`` on NVDLA builds: the lowering, the cycle model and the report agree.

Gold values: every hardware layer's cycles equal what the cycle model gives for the lowered
layer (hw.nvdla.cycles, tested against hand-worked formulas in tests/hw/nvdla/test_cycles.py);
the MACs equal the graph's (torchvision's ResNet-50 count, 4.09 GMACs incl. the FC); fps is
1 / latency; an FC layer in batch mode fetches its weights once per ``fc_batch`` images.
"""

from __future__ import annotations

import csv
import io
import json

import pytest

from compiler.backends.nvdla import lower_graph
from compiler.frontends import zoo
from hw.nvdla.config import load_nvdla_config
from hw.nvdla.conv_layer import ConvLayer
from hw.nvdla.cycles import conv_cycles, engine_cycles
from npulab.cli import main
from npulab.nvdla_run import _fc_as_batched_conv, simulate_nvdla

RESNET50_MACS = 4_089_184_256


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_resnet50_on_nv_full_table(capsys):
    code, out, _ = run(capsys, "run", "--config", "nv_full", "--model", "resnet50")
    assert code == 0
    assert out.startswith("npulab: resnet50 on nv_full (NVDLA, 64x32 atomic C x K, int8, "
                          "512 KiB CBUF, 1000 MHz), timing: nvdla")
    assert f"total MACs            {RESNET50_MACS:,}" in out
    assert "hardware layers       54 conv" in out
    assert "conv+bias+bn+relu+pdp" in out                  # conv1 with its max pool fused
    assert "20 GB/s at full efficiency (bandwidth model)" in out


def test_totals_are_the_cycle_model_of_the_lowered_layers():
    cfg = load_nvdla_config("nv_full")
    graph = zoo.get("resnet50")
    result = simulate_nvdla(graph, cfg)
    program = lower_graph(graph, cfg, "int8")
    expected = [conv_cycles(cfg, hl.conv).total for hl in program.layers]
    assert [x.cycles for x in result.layers] == expected
    t = result.totals
    assert t["cycles"] == sum(expected)
    assert t["macs"] == RESNET50_MACS == graph.macs
    assert t["fps"] == pytest.approx(1.0 / t["latency_s"])
    assert t["latency_s"] == pytest.approx(t["cycles"] / 1e9)
    assert t["utilization_pct"] == pytest.approx(100 * RESNET50_MACS / (2048 * t["cycles"]))
    assert 0 < t["utilization_pct"] <= 100
    for layer in result.layers:
        assert layer.cycles >= layer.compute_cycles > 0
        assert layer.dram_read_bytes > 0 and layer.dram_write_bytes > 0
    # a slower memory never makes the network faster
    slow = simulate_nvdla(graph, load_nvdla_config("nv_full", ["nvdla.dram_gbps=5"]))
    assert slow.totals["cycles"] > t["cycles"]


def test_standalone_layers_use_the_engine_model():
    cfg = load_nvdla_config("nv_full")
    graph = zoo.get("googlenet")
    result = simulate_nvdla(graph, cfg)
    program = lower_graph(graph, cfg, "int8")
    assert program.counts() == {"conv": 58, "pdp": 12}
    for hl, layer in zip(program.layers, result.layers):
        if hl.kind != "pdp":
            continue
        assert len(hl.passes) == 1
        p = hl.passes[0]
        n_in, n_out = hl.batch * hl.in_c * p.in_h * p.in_w, hl.batch * hl.out_c * p.out_h * p.out_w
        assert layer.cycles == engine_cycles(cfg, "pdp", n_in, n_out, n_in, n_out).total
        assert layer.macs == 0 and layer.engine == "pdp"


def test_fc_batch_shares_one_weight_fetch():
    cfg = load_nvdla_config("nv_full", ["nvdla.dram_gbps=5"])
    fc = ConvLayer.fc(2048, 1000, batch=32, bias=True)
    (batched, reps), = _fc_as_batched_conv(fc, 32)
    assert reps == 1 and batched.C == 2048 and batched.W == 32 and batched.K == 1000
    assert [(x.W, n) for x, n in _fc_as_batched_conv(ConvLayer.fc(2048, 1000, batch=40), 16)] \
        == [(16, 2), (8, 1)]
    [(batched, reps16)] = _fc_as_batched_conv(fc, 16)
    assert reps16 == 2 and batched.W == 16
    one = conv_cycles(cfg, ConvLayer.fc(2048, 1000, bias=True))
    b = conv_cycles(cfg, batched)
    assert b.weight_bytes == one.weight_bytes               # fetched once for 16 images
    assert b.mac_cycles == 16 * one.mac_cycles
    # per image, batching amortises the 2 MB weight stream: far fewer cycles than 16 x one
    assert b.total < 16 * one.total / 4
    # ResNet-50 at batch 40 on nv_full (max_batch 32): two FC hardware layers, 32 + 8 images
    graph = zoo.get("resnet50", batch=40)
    hl = next(x for x in lower_graph(graph, cfg, "int8").layers if x.conv and x.name == "fc")
    assert hl.fc_batch == 32 and hl.conv.batch == 40
    fc_layer = next(x for x in simulate_nvdla(graph, cfg).layers if x.name == "fc")
    (b32, n32), (b8, n8) = _fc_as_batched_conv(hl.conv, 32)
    assert (b32.W, n32, b8.W, n8) == (32, 1, 8, 1) and "fc_batch 32" in fc_layer.tiling
    assert fc_layer.cycles == conv_cycles(cfg, b32).total + conv_cycles(cfg, b8).total


def test_json_csv_and_output_dir(capsys, tmp_path):
    code, out, _ = run(capsys, "run", "--config", "nv_small", "--model", "alexnet",
                       "--format", "json", "-o", str(tmp_path))
    doc = json.loads(out)
    assert code == 0 and doc["timing"] == "nvdla" and doc["chip"] == "nv_small"
    assert doc["config"]["nvdla"]["atomic_c"] == 8
    assert doc["totals"]["cycles"] == sum(x["cycles"] for x in doc["layers"])
    assert doc["totals"]["macs"] == zoo.get("alexnet").macs
    rows = list(csv.DictReader(io.StringIO((tmp_path / "layers.csv").read_text())))
    assert len(rows) == len(doc["layers"]) and rows[0]["engine"] == "conv"
    assert (tmp_path / "report.txt").read_text().startswith("npulab: alexnet on nv_small (NVDLA")


def test_precision_and_skip_unsupported(capsys):
    code, out, _ = run(capsys, "run", "-c", "nv_full", "-m", "resnet18", "--precision", "int16")
    assert code == 0 and "int16" in out.splitlines()[0]
    i8 = simulate_nvdla(zoo.get("resnet18"), load_nvdla_config("nv_full"))
    i16 = simulate_nvdla(zoo.get("resnet18"), load_nvdla_config("nv_full"), "int16")
    assert i16.totals["cycles"] > i8.totals["cycles"]       # half the MACs per cycle
    code, out, _ = run(capsys, "run", "-c", "nv_full", "-m", "bert_base_layer",
                       "--skip-unsupported")
    assert code == 0 and "ops skipped           3" in out and "softmax" in out


@pytest.mark.parametrize("argv, message", [
    (["-c", "nv_small", "--precision", "fp16"], "precision = 'fp16': nv_small supports int8"),
    (["-c", "nv_full", "--timing", "compute"], "--timing applies to systolic chips"),
    (["-c", "nv_full", "--loop-order", "mnk"], "--loop-order applies to systolic chips"),
    (["--skip-unsupported"], "--skip-unsupported applies to --onnx models"),
    (["-c", "nv_full", "-m", "bert_base_layer"], "softmax"),
    (["-c", "nv_full", "--set", "nvdla.dram_gbps=-1"], "nvdla.dram_gbps = -1"),
    (["-c", "nv_tiny"], "NVDLA builds: nv_full"),
    # VGG-16's first FC layer (512x7x7 inputs): one kernel group of weights outgrows the CBUF
    (["-c", "nv_small", "-m", "vgg16"], "layer classifier.0: not even 7 input rows (25088 B) plus "
     "one kernel group of weights (200704 B) fit in nv_small's CBUF (131072 B)"),
])
def test_errors_are_one_line(capsys, argv, message):
    code, out, err = run(capsys, "run", *argv)
    assert code == 2 and out == ""
    assert err.startswith("npulab: error: ") and message in err and err.count("\n") == 1
