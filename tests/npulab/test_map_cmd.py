"""``npulab map``: one op's mapping space through the CLI. Gold models:
:func:`compiler.mapper.map_op` on the same op/chip/objective,
:func:`compiler.backends.systolic_tiling.choose_tiling`, and GEMM shapes worked out by hand."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from compiler.backends.systolic import tile_problem
from compiler.backends.systolic_tiling import choose_tiling
from compiler.frontends import zoo
from compiler.ir import Gemm, conv2d
from compiler.mapper import DEFAULT_EXHAUSTIVE_LIMIT, DEFAULT_SAMPLES, OBJECTIVES, map_op
from compiler.options import CompileOptions
from hw.configfile import load_chip_config
from compiler.frontends.opspec import parse_conv
from npulab.cli import map as map_cmd
from npulab.cli import main

SMALL = ["--set", "array.rows=8", "--set", "array.cols=8"]
SMALL_SETS = ["array.rows=8", "array.cols=8"]


def _json(capsys, *argv) -> dict:
    assert main(["map", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def _error(capsys, *argv) -> str:
    assert main(["map", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err
    assert err.startswith("npulab: error: ") and err.count("\n") == 1, err
    return err


def test_constants_match_the_mapper():
    # repeated in map_cmd so that building the parser does not import the mapper
    assert map_cmd.OBJECTIVES == OBJECTIVES
    assert map_cmd.DEFAULT_SAMPLES == DEFAULT_SAMPLES
    assert map_cmd.DEFAULT_EXHAUSTIVE_LIMIT == DEFAULT_EXHAUSTIVE_LIMIT


def test_building_the_parser_does_not_import_the_mapper():
    code = ("import sys\nfrom npulab.cli import build_parser\nbuild_parser()\n"
            "print(sorted(m for m in sys.modules if m.startswith('compiler.mapper')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_best_rows_and_counts_equal_map_op(capsys, objective):
    out = _json(capsys, "--gemm", "40,24,72", "--objective", objective, "--top", "4", *SMALL)
    chip = load_chip_config(None, SMALL_SETS)
    p = tile_problem(Gemm(name="g", m=40, n=24, k=72), chip, CompileOptions())
    ref = map_op(p, chip, objective, tech="16nm", keep=4)
    assert out["evaluated"] == ref.evaluated
    assert out["space_size"] == ref.space_size
    assert out["exhaustive"] is ref.exhaustive is True
    assert len(out["ranked"]) == 4
    for row, mp in zip(out["ranked"], ref.ranked):
        for key in ("group_tile", "m_tile", "n_tile", "k_tile", "order", "latency_cycles",
                    "dram_bytes", "tiles", "energy_j", "edp_js", "index"):
            assert row[key] == mp.to_dict()[key], key
        # utilization = MACs / (PEs x latency); 40*24*72 = 69,120 MACs on 8x8 = 64 PEs
        assert row["utilization"] == pytest.approx(69_120 / (64 * mp.latency_cycles))
    # the table's first row is the same mapping
    assert main(["map", "--gemm", "40,24,72", "--objective", objective, "--top", "4",
                 *SMALL]) == 0
    table = capsys.readouterr().out.splitlines()
    first = table[table.index(next(x for x in table if x.lstrip().startswith("#"))) + 1].split()
    b = ref.best
    assert first[:5] == ["1", f"g{b.group_tile}", f"m{b.m_tile}", f"n{b.n_tile}",
                         f"k{b.k_tile}"]
    assert first[5:8] == [b.order, b.dataflow.value, f"{b.latency_cycles:,}"]
    assert first[10] == f"{b.dram_bytes:,}"


def test_default_op_is_resnet18_conv2_1(capsys):
    out = _json(capsys, "--top", "1")
    # layer1.0.conv1: 56x56x64 -> 64, 3x3, stride 1, pad 1: out 56x56, so M = 56*56 = 3,136,
    # N = 64, K = 3*3*64 = 576; on the default chip 14 M x 15 N x 15 K options, 19,980
    # feasible mappings (docs/mapper.md)
    assert (out["layer"], out["source"]) == ("layer1.0.conv1", "resnet18")
    assert out["gemm"] == {"count": 1, "m": 3136, "n": 64, "k": 576}
    assert out["space_size"] == out["evaluated"] == 19_980
    assert out["lowering"] == "direct"


def test_gemm_conv_and_model_build_the_right_gemm(capsys):
    # --gemm M,N,K with --batch 3: three independent 20x12x36 GEMMs
    out = _json(capsys, "--gemm", "20,12,36", "--batch", "3", "--top", "1", *SMALL)
    assert out["gemm"] == {"count": 3, "m": 20, "n": 12, "k": 36}
    assert out["op_kind"] == "Gemm"
    # MACs = 3 * 20 * 12 * 36 = 25,920 on 64 PEs
    assert out["macs"] == 25_920
    row = out["ranked"][0]
    assert row["utilization"] == pytest.approx(25_920 / (64 * row["latency_cycles"]))
    # --conv 14x14x32-16k3s2p1, 2 images: out = (14 + 2 - 3) // 2 + 1 = 7, so
    # M = 2*7*7 = 98, N = 16, K = 3*3*32 = 288
    out = _json(capsys, "--conv", "14x14x32-16k3s2p1", "--batch", "2", "--top", "1", *SMALL)
    assert out["gemm"] == {"count": 1, "m": 98, "n": 16, "k": 288}
    op = conv2d("c", 14, 32, 16, 3, stride=2, padding=1, batch=2)
    g = op.gemm_shape()
    assert (g.count, g.m, g.n, g.k) == (1, 98, 16, 288)
    # rectangular and depthwise: 10x12 input, 3x1 kernel, no pad, 16 groups of 1 -> 1:
    # out 8x12, so 16 GEMMs of M = 96, N = 1, K = 3*1*1 = 3
    out = _json(capsys, "--conv", "10x12x16-16k3x1g16", "--top", "1", *SMALL)
    assert out["gemm"] == {"count": 16, "m": 96, "n": 1, "k": 3}
    # square shorthand HxCIN: 9x9 input, 8 -> 4 channels, 1x1: M = 81, N = 4, K = 8
    out = _json(capsys, "--conv", "9x8-4k1", "--conv-lowering", "im2col", "--top", "1", *SMALL)
    assert out["gemm"] == {"count": 1, "m": 81, "n": 4, "k": 8}
    assert out["lowering"] == "im2col"
    # resnet18 at 32x32: conv1 (7x7 s2 p3) -> 16x16, maxpool (3x3 s2 p1) -> 8x8, layer1 keeps
    # 8x8, layer2.0.conv1 (3x3 s2 p1, 64 -> 128) -> 4x4: M = 16, N = 128, K = 3*3*64 = 576
    out = _json(capsys, "--model", "resnet18", "--image-size", "32", "--layer",
                "layer2.0.conv1", "--top", "1", *SMALL)
    assert out["gemm"] == {"count": 1, "m": 16, "n": 128, "k": 576}
    g = zoo.get("resnet18", image_size=32).op("layer2.0.conv1").gemm_shape()
    assert (g.count, g.m, g.n, g.k) == (1, 16, 128, 576)


def test_parse_conv_grammar():
    assert parse_conv("56x56x64-64k3s1p1") == dict(
        in_hw=(56, 56), in_channels=64, out_channels=64, kernel=(3, 3), stride=1, padding=1,
        groups=1)
    assert parse_conv("7x9x3-8K5x3S2") == dict(
        in_hw=(7, 9), in_channels=3, out_channels=8, kernel=(5, 3), stride=2, padding=0,
        groups=1)


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("spec", [("--gemm", "40,24,72"), ("--conv", "12x12x16-24k3p1")])
def test_tiler_comparison_is_costed_by_the_same_model(capsys, objective, spec):
    out = _json(capsys, *spec, "--objective", objective, "--top", "1", *SMALL)
    assert out["exhaustive"] is True
    chip = load_chip_config(None, SMALL_SETS)
    op = (Gemm(name="g", m=40, n=24, k=72) if spec[0] == "--gemm"
          else conv2d("c", 12, 16, 24, 3, padding=1))
    p = tile_problem(op, chip, CompileOptions())
    tiler = out["tiler"]
    # the tiler's own choice and traffic
    choice = choose_tiling(p, chip)
    assert (tiler["group_tile"], tiler["m_units"], tiler["n_tile"], tiler["k_units"],
            tiler["order"]) == (choice.group_tile, choice.m_units, choice.n_tile,
                                choice.k_units, choice.order)
    assert tiler["dram_bytes"] == choice.dram_bytes
    assert tiler["compute_cycles"] == choice.compute_cycles
    # the same mapping in an exhaustive map_op that keeps every mapping has the same costs
    full = map_op(p, chip, objective, tech="16nm", keep=out["space_size"])
    same = [m for m in full.ranked if (m.group_tile, m.m_units, m.n_tile, m.k_units, m.order)
            == (choice.group_tile, choice.m_units, choice.n_tile, choice.k_units, choice.order)]
    assert len(same) == 1
    for key in ("latency_cycles", "energy_j", "edp_js", "objective", "dram_bytes", "tiles"):
        assert tiler[key] == same[0].to_dict()[key], key
    # exhaustive: the tiler's choice is in the space, so the best is never worse
    best = out["ranked"][0]["objective"]
    expect = 100 * (tiler["objective"] - best) / tiler["objective"]
    assert out["better_than_tiler_pct"] == pytest.approx(expect)
    assert out["better_than_tiler_pct"] >= 0


def test_table_header_and_tiler_line(capsys):
    assert main(["map", "--gemm", "40,24,72", "--top", "2", *SMALL]) == 0
    lines = capsys.readouterr().out.splitlines()
    chip = load_chip_config(None, SMALL_SETS)
    ref = map_op(tile_problem(Gemm(name="g", m=40, n=24, k=72), chip, CompileOptions()), chip,
                 "latency", tech="16nm", keep=2)
    assert lines[0].startswith("npulab map: gemm 40x24x72 (Gemm 40x72 @ 72x24), GEMM 1 x M 40 "
                               "x N 24 x K 72 = 69,120 MACs")
    assert "8x8 ws int8" in lines[1] and "objective latency" in lines[1]
    assert lines[2].startswith(f"space {ref.space_size:,} mappings; evaluated "
                               f"{ref.evaluated:,} (exhaustive")
    assert "mappings/s" in lines[2]
    assert lines[-1].startswith("default tiler (choose_tiling): ")
    assert "lower in latency" in lines[-1] or "ties it in latency" in lines[-1]


def test_pruned_search_states_its_guarantee(capsys):
    args = ("--gemm", "40,24,72", "--exhaustive-limit", "0", "--samples", "300", "--seed", "5",
            "--top", "3", *SMALL)
    out = _json(capsys, *args)
    chip = load_chip_config(None, SMALL_SETS)
    ref = map_op(tile_problem(Gemm(name="g", m=40, n=24, k=72), chip, CompileOptions()), chip,
                 "latency", tech="16nm", exhaustive_limit=0, samples=300, seed=5, keep=3)
    assert out["exhaustive"] is False and out["search"] == "pruned"
    assert out["evaluated"] == ref.evaluated and out["phases"] == ref.phases
    assert [r["index"] for r in out["ranked"]] == [m.index for m in ref.ranked]
    n = ref.phases["samples_drawn"]
    assert out["guarantee"]["samples"] == n
    assert out["guarantee"]["best_fraction"] == pytest.approx(1 - 0.01 ** (1 / n))
    assert main(["map", *args]) == 0
    text = capsys.readouterr().out
    assert f"from {n:,} uniform samples" in text
    assert "never worse than the tiler's grid" in text
    assert "with probability >= 99 %" in text


def test_guarantee_formula():
    # 1 - (1 - q)^n = 0.99  ->  q = 1 - 0.01^(1/n); n = 20,000: 4.6052 / 20,000 = 0.023 %
    from npulab.map_run import guarantee
    assert guarantee(20_000) == pytest.approx(2.3025e-4, rel=1e-3)
    assert guarantee(1) == pytest.approx(0.99)
    assert guarantee(0) == 1.0
    assert math.isclose(1 - (1 - guarantee(500)) ** 500, 0.99)


def test_dataflows_loop_order_and_set(capsys):
    out = _json(capsys, "--gemm", "40,24,72", "--dataflows", "all", "--loop-order", "knm",
                "--top", "5", *SMALL)
    chip = load_chip_config(None, SMALL_SETS)
    p = tile_problem(Gemm(name="g", m=40, n=24, k=72), chip, CompileOptions())
    ref = map_op(p, chip, "latency", tech="16nm", dataflows=("os", "ws", "is"), orders="knm",
                 keep=5)
    assert out["dataflows"] == ["os", "ws", "is"] and out["orders"] == ["knm"]
    assert out["space_size"] == ref.space_size and out["evaluated"] == ref.evaluated
    assert [r["index"] for r in out["ranked"]] == [m.index for m in ref.ranked]
    assert {r["order"] for r in out["ranked"]} == {"knm"}
    assert out["tiler"]["order"] == "knm" and out["tiler"]["dataflow"] == "ws"
    assert out["pes"] == 64
    # a what-if on other dataflows only: the comparison may go either way but is the same ratio
    out = _json(capsys, "--gemm", "40,24,72", "--dataflows", "os,is", "--top", "1", *SMALL)
    assert out["dataflows"] == ["os", "is"] and out["ranked"][0]["dataflow"] in ("os", "is")
    t, b = out["tiler"]["objective"], out["ranked"][0]["objective"]
    assert out["better_than_tiler_pct"] == pytest.approx(100 * (t - b) / t)


def test_errors_are_one_line(capsys):
    err = _error(capsys, "--layer", "layer1.0.cnv1")
    assert "--layer layer1.0.cnv1: no such op in resnet18" in err
    assert "did you mean layer1.0.conv1" in err and "21 matrix ops" in err
    err = _error(capsys, "--layer", "maxpool")
    assert "--layer maxpool: a Pool op" in err
    err = _error(capsys, "--model", "resnet50")
    assert "--model resnet50: give --layer LAYER" in err
    assert "--model nope" in _error(capsys, "--model", "nope", "--layer", "x")
    for bad in ("64,64", "a,b,c", "64,0,64"):
        assert f"--gemm {bad}: " in _error(capsys, "--gemm", bad)
    assert "--conv 56x56: expected HxWxCIN-COUT" in _error(capsys, "--conv", "56x56")
    assert "--conv 5x5x3-4k7: " in _error(capsys, "--conv", "5x5x3-4k7")
    err = _error(capsys, "--config", "nv_small")
    assert "--config nv_small: nv_small is an NVDLA build" in err and "default" in err
    # the chip is loaded once, with --set; a build is refused as a build, not for its --set keys
    for key in ("array.rows=8", "nvdla.clock_mhz=0", "nvdla.clock_mhz=500"):
        assert _error(capsys, "--config", "nv_small", "--set", key) == err
    err = _error(capsys, "--objective", "speed")
    assert "--objective speed: must be one of latency, energy, edp" in err
    assert "--top 0: must be an integer >= 1" in _error(capsys, "--top", "0")
    assert "--samples x: must be an integer >= 0" in _error(capsys, "--samples", "x")
    assert "--dataflows ws,xs: must be chip, all" in _error(capsys, "--dataflows", "ws,xs")
    assert "--loop-order abc: must be one of mnk" in _error(capsys, "--loop-order", "abc")
    assert "--format csv: must be one of table, json" in _error(capsys, "--format", "csv")
    assert "--tech 3nm: " in _error(capsys, "--tech", "3nm")
    assert "--layer applies to --model" in _error(capsys, "--gemm", "4,4,4", "--layer", "fc")
    assert "--image-size/--seq-len apply to zoo models" in _error(
        capsys, "--conv", "8x8x8-8k1", "--image-size", "32")
    assert "array.rows = 0" in _error(capsys, "--set", "array.rows=0")


def test_json_is_byte_identical_across_runs_and_wall_time_is_opt_in(capsys):
    # issue 21 item 22: the JSON carried the search's wall-clock seconds and rate.
    argv = ["map", "--gemm", "40,24,72", "--top", "2", "--format", "json", *SMALL]
    outs = []
    for _ in range(2):
        assert main(argv) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]
    data = json.loads(outs[0])
    assert "seconds" not in data and "mappings_per_s" not in data and "wall_time" not in data
    assert main(argv + ["--wall-time"]) == 0
    timed = json.loads(capsys.readouterr().out)
    assert timed["wall_time"]["seconds"] >= 0
    assert timed["wall_time"]["mappings_per_s"] is None or timed["wall_time"]["mappings_per_s"] > 0
    timed.pop("wall_time")
    assert timed == data


def test_compression_flags_map_the_compressed_op(capsys):
    """--sparsity, --act-zeros and --weight-format map the op as the run pipeline tiles it
    (CompileOptions' fields): the best rows equal compiler.mapper.map_op on that problem, and
    utilization counts the MACs the sparse PEs perform."""
    sets = [*SMALL_SETS, "array.sparse_m=4"]
    argv = ["--gemm", "40,24,72", "--objective", "energy", "--top", "3",
            *(a for s in sets for a in ("--set", s))]
    chip = load_chip_config(None, sets)
    op = Gemm(name="g", m=40, n=24, k=72)
    for flags, options in [
            (["--sparsity", "2:4"], CompileOptions(sparsity="2:4")),
            (["--act-zeros", "0.5"], CompileOptions(act_zeros=0.5)),
            (["--weight-format", "bitmask:0.25"], CompileOptions(weight_format="bitmask:0.25")),
            (["--weight-bits", "4"], CompileOptions(weight_bits=4))]:
        out = _json(capsys, *argv, *flags)
        ref = map_op(tile_problem(op, chip, options), chip, "energy", tech="16nm", keep=3)
        for row, mp in zip(out["ranked"], ref.ranked):
            assert (row["latency_cycles"], row["energy_j"], row["dram_bytes"]) == (
                mp.latency_cycles, mp.energy_j, mp.dram_bytes), flags
            busy = mp.counters["pe_busy_cycles"] if flags[0] == "--sparsity" else 40 * 24 * 72
            assert row["utilization"] == pytest.approx(busy / (64 * mp.latency_cycles))
            assert row["utilization"] <= 1
    dense = _json(capsys, *argv)["ranked"][0]
    sparse = _json(capsys, *argv, "--sparsity", "2:4")["ranked"][0]
    assert sparse["latency_cycles"] < dense["latency_cycles"]
    err = _error(capsys, "--gemm", "40,24,72", "--sparsity", "2:4")
    assert "--sparsity 2:4: the array has dense PEs; set array.sparse_m = 4" in err
    assert "--act-zeros 2: must be a ratio in 0..1" in _error(capsys, "--gemm", "4,4,4",
                                                             "--act-zeros", "2")
    assert "--weight-format coo: format 'coo'" in _error(capsys, "--gemm", "4,4,4",
                                                        "--weight-format", "coo")
