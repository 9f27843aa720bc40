"""Metrics: a small case against a hand calculation from the 45 nm table, the identities every
run must satisfy, DRAM energy independent of the bus width, and roofline consistency."""

import json
import math

import numpy as np
import pytest

from compiler.frontends import zoo
from compiler.ir import Gemm, Graph, conv2d
from hw.configfile import load_chip_config
from hw.nvdla.config import load_nvdla_config
from npulab.cli.common import resolve_config
from npulab.metrics import compute_metrics
from npulab.nvdla_run import simulate_nvdla
from npulab.simulate import simulate

SMALL = ["array.rows=4", "array.cols=4", "array.dataflow=ws", "sram.ifmap.capacity_kib=8",
         "sram.filter.capacity_kib=8", "sram.ofmap.capacity_kib=8"]


def test_small_gemm_energy_equals_the_hand_calculation():
    # Gemm M=10 N=6 K=8 on a 4x4 WS int8 array, compute-only timing (no DRAM, no link).
    chip = load_chip_config(None, SMALL)
    run = simulate(Graph("g", (Gemm(name="g", m=10, n=6, k=8),)), chip, "compute")
    layer = run.layers[0]
    m = compute_metrics(run, "45nm").layers[0]
    macs = 10 * 6 * 8
    e = m["energy_breakdown_j"]
    # Horowitz 45 nm: int8 MAC = 8-bit multiply 0.2 pJ + 32-bit accumulate 0.1 pJ.
    assert e["mac"] == pytest.approx(macs * 0.3e-12)
    # WS PE latches the passing input (8 bits) and partial sum (32 bits) per MAC; a register bit
    # costs the 32-bit add / 32 = 0.1 / 32 pJ.
    assert e["rf"] == pytest.approx(macs * 40 * 0.1 / 32 * 1e-12)
    # SRAM: least-squares E64 = a + b sqrt(KiB) through (8, 10), (32, 20), (1024, 100) pJ;
    # a bank of an 8 KiB, 8-bank scratchpad is 1 KiB, below the table: clamped to 8 KiB.
    b, a = np.polyfit(np.sqrt([8, 32, 1024]), [10, 20, 100], 1)
    per_bit = (a + b * math.sqrt(8)) / 64 * 1e-12
    assert e["sram.ifmap"] == pytest.approx(layer.ifmap_sram_reads * 8 * per_bit)
    assert e["sram.filter"] == pytest.approx(layer.filter_sram_reads * 8 * per_bit)
    assert e["sram.ofmap"] == pytest.approx(
        (layer.ofmap_sram_writes + layer.ofmap_sram_reads) * 32 * per_bit)
    assert e["dram"] == e["link"] == e["vector"] == 0
    # Leakage: 20 mW/mm2 x (16 MACs x (282 + 137) um2 + 24 KiB x 8 bits x 0.346 um2 / 0.7).
    area_mm2 = (16 * (282 + 137) + 24 * 1024 * 8 * 0.346 / 0.7) / 1e6
    seconds = layer.cycles / 1e9
    assert e["static"] == pytest.approx(20e-3 * area_mm2 * seconds)
    assert m["energy_j"] == pytest.approx(sum(e.values()))


def _graph():
    x = zoo.get("resnet18", image_size=32)
    return Graph("tiny", x.ops[:6])


def test_dram_energy_does_not_depend_on_bus_width_at_equal_bytes():
    # One 64-bit DDR4 channel with BL8 vs a 128-bit bus with BL4: both move 64-byte column
    # accesses, so the same bytes cross the bus, in half as many beats on the wider bus. Energy
    # is per bit, so DRAM energy is equal although the time and the beat count are not.
    narrow = simulate(_graph(), load_chip_config(None))
    wide = simulate(_graph(), load_chip_config(None, ["dram.bus_width_bits=128",
                                                       "dram.burst_length=4"]))
    n, w = compute_metrics(narrow, "16nm"), compute_metrics(wide, "16nm")
    assert narrow.totals["dram_bus_bytes"] == wide.totals["dram_bus_bytes"] > 0
    assert narrow.totals["cycles"] != wide.totals["cycles"]
    beats = [r.totals["dram_bus_bytes"] // (bits // 8) for r, bits in ((narrow, 64), (wide, 128))]
    assert beats[0] == 2 * beats[1]
    assert n.network["energy_breakdown_j"]["dram"] == w.network["energy_breakdown_j"]["dram"]
    # 20.3 pJ per bit on the bus (DDR4 row of the table)
    assert n.network["energy_breakdown_j"]["dram"] == pytest.approx(
        narrow.totals["dram_bus_bytes"] * 8 * 20.3e-12)


def _runs():
    g = zoo.get("resnet18", image_size=64)
    chip = load_chip_config(None)
    return {
        "native": simulate(g, chip),
        "compute": simulate(g, chip, "compute"),
        "scalesim": simulate(g, chip, "scalesim"),
        "nvdla": simulate_nvdla(g, load_nvdla_config(resolve_config("nv_small"))),
    }


@pytest.fixture(scope="module")
def runs():
    return _runs()


@pytest.mark.parametrize("kind", ["native", "compute", "scalesim", "nvdla"])
@pytest.mark.parametrize("tech", ["45nm", "16nm", "7nm"])
def test_identities(runs, kind, tech):
    run = runs[kind]
    m = compute_metrics(run, tech)
    net = m.network
    assert net["energy_j"] == pytest.approx(sum(net["energy_breakdown_j"].values()))
    assert net["energy_j"] == pytest.approx(sum(x["energy_j"] for x in m.layers))
    assert net["average_power_w"] == pytest.approx(net["energy_j"] / net["seconds"])
    assert net["tops_per_w"] == pytest.approx(net["ops_per_s"] / 1e12 / net["average_power_w"])
    assert net["seconds"] == pytest.approx(run.totals["cycles"] / net["clock_hz"])
    assert net["inferences_per_s"] == pytest.approx(1 / net["seconds"])
    assert net["energy_per_mac_j"] == pytest.approx(net["energy_j"] / net["macs"])
    assert 0 < net["compute_utilization"] <= 1
    assert net["peak_power_w"] >= net["average_power_w"] * (1 - 1e-9)
    assert net["on_chip_power_w"] <= net["average_power_w"]
    for x in m.layers + [net]:
        for level, lv in x["memory"].items():
            if lv["utilization"] is not None:
                assert 0 <= lv["utilization"] <= 1, (x.get("name"), level)
    for x in m.layers:
        assert x["energy_j"] == pytest.approx(sum(x["energy_breakdown_j"].values()))
        assert 0 <= x["compute_utilization"] <= 1
        if x["ops"]:
            roof = x["roofline"]
            assert roof["bound"] == min(roof["ceilings_macs_per_s"], key=roof["ceilings_macs_per_s"].get)
            # a layer never runs faster than its roofline allows
            assert x["macs_per_s"] <= roof["attainable_macs_per_s"] * (1 + 1e-9)
            dram = x["memory"]["dram"]
            # useful bytes never exceed the bytes on the bus
            assert dram["useful_bytes"] <= dram["bytes"] + 1e-9
            assert x["tops_per_w"] == pytest.approx(x["ops_per_s"] / 1e12 / x["power_w"])
    if kind in ("compute", "scalesim"):
        assert net["energy_breakdown_j"]["dram"] == 0          # operands assumed resident
    else:
        assert net["energy_breakdown_j"]["dram"] > 0


def test_a_saved_run_recosts_to_the_same_numbers(runs):
    run = runs["native"]
    saved = json.loads(json.dumps(run.to_dict()))
    a = compute_metrics(run, "7nm").to_dict()
    b = compute_metrics(saved, "7nm").to_dict()
    assert a == b
    assert compute_metrics(saved, "45nm").network["energy_j"] > b["network"]["energy_j"]


def test_custom_dram_is_costed_as_ddr4_and_flagged(runs):
    m = compute_metrics(runs["nvdla"], "16nm")         # nv_small names no DRAM device
    assert m.chip["dram"] == {**m.chip["dram"], "kind": "ddr4", "kind_assumed": True}
    hbm = compute_metrics(runs["nvdla"], "16nm", dram_kind="hbm2")
    ratio = hbm.network["energy_breakdown_j"]["dram"] / m.network["energy_breakdown_j"]["dram"]
    assert ratio == pytest.approx(3.9 / 20.3)


def test_nvdla_conv_actions_follow_the_atomic_operations():
    # One 3x3 conv, 64 -> 64 channels on 14x14 on nv_full: atomic-C 64, 32 kernels in
    # parallel (int8). Every atomic op reads one 64-byte input vector from CBUF.
    g = Graph("c", (conv2d("c", 14, 64, 64, 3, padding=1),))
    run = simulate_nvdla(g, load_nvdla_config(resolve_config("nv_full")))
    a = run.layers[0].actions
    atomic_ops = 9 * 14 * 14 * 2                          # taps x points x kernel groups
    stripes_bits = a.level("cbuf").read_bits - atomic_ops * 64 * 8
    assert stripes_bits > 0 and stripes_bits % (32 * 64 * 8) == 0   # whole weight loads
    assert a.macs == 9 * 64 * 64 * 14 * 14


def test_one_default_energy_table_for_the_mapper_and_the_metrics():
    # Issue 22: the mapper (CompileOptions.tech, map_op) defaulted to 45nm while the CLI and
    # run.metrics() used 16nm, so a best-energy mapping was chosen with one table and reported
    # with another, and compute_metrics(run) differed from run.metrics().
    from compiler.options import CompileOptions
    from hw.energy import DEFAULT_TECHNOLOGY, load_technology
    assert DEFAULT_TECHNOLOGY == "16nm"                     # docs/energy.md: the default
    assert CompileOptions().tech == load_technology().name == DEFAULT_TECHNOLOGY
    run = simulate(zoo.get("resnet18", image_size=16), load_chip_config(),
                   options=CompileOptions(map="best-energy"))
    assert compute_metrics(run).to_dict() == run.metrics().to_dict()
    assert run.metrics().technology["name"] == DEFAULT_TECHNOLOGY
    chosen = simulate(zoo.get("resnet18", image_size=16), load_chip_config(),
                      options=CompileOptions(map="best-energy", tech=DEFAULT_TECHNOLOGY))
    assert [x.tiling for x in chosen.layers] == [x.tiling for x in run.layers]
