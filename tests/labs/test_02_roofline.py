"""Lab 2 (examples/labs/02_roofline): the roofline claims against hand calculations.

* the ridge point is peak MACs/s over DRAM bytes/s computed by hand from the array
  (32 x 32 PEs at 1 GHz) and the DDR4-3200 preset (one 64-bit channel, two transfers per 0.63 ns
  clock, DRAMsim3's DDR4_8Gb_x8_3200.ini);
* every layer's roofline bound is its intensity (MACs / DRAM bus bytes, summed from the
  layer's own DRAM bit counter) against that ridge, and attainable = min(peak, I x B)
  (Williams, Waterman, Patterson, CACM 2009); no layer beats its roof;
* with 8x less SRAM no layer moves fewer DRAM bytes (less reuse), and the layers the sheet lists
  cross the ridge;
* with more SRAM a layer may move *more* bytes (the sheet explains why): every such layer got
  a tiling with fewer array cycles, because the tiler minimises time, not bytes.
"""

from __future__ import annotations


import pytest
from labload import LABS, load_script

LAB = LABS / "02_roofline"


roofline = load_script(LAB, "roofline")

PEAK = 32 * 32 * 1e9                     # MACs/s: 1024 PEs, one MAC per cycle, 1 GHz
DDR4 = 64 / 8 * 2 / 0.63e-9              # bytes/s: 64-bit bus, double data rate, tCK 0.63 ns
HBM2 = 8 * 128 / 8 * 2 / 1.0e-9          # 8 channels x 128 bit, DDR, tCK 1 ns


@pytest.fixture(scope="module")
def runs():
    return {"A": roofline.run_config("resnet50", []),
            "small": roofline.run_config("resnet50", ["sram.capacity_kib=64"]),
            "big": roofline.run_config("resnet50", ["sram.capacity_kib=1024"])}


def _hand_bound(layer, ridge):
    return "dram" if layer["macs"] / layer["dram_bytes"] < ridge else "compute"


def test_ridge_by_hand(runs):
    chip = runs["A"]["chip"]
    assert chip["peak_macs_per_s"] == pytest.approx(PEAK, rel=1e-12)
    assert chip["dram_peak_bytes_per_s"] == pytest.approx(DDR4, rel=1e-12)
    assert chip["ridge_macs_per_byte"] == pytest.approx(PEAK / DDR4, rel=1e-12)
    assert round(PEAK / DDR4, 1) == 40.3


def test_hbm2_ridge_by_hand():
    from hw.configfile import load_chip_config
    dram = load_chip_config(None, ["dram.preset=hbm2"]).dram
    assert dram.peak_gbps * 1e9 == pytest.approx(HBM2, rel=1e-12)
    assert round(PEAK / HBM2, 1) == 4.0


@pytest.mark.parametrize("name", ["A", "small", "big"])
def test_bound_is_intensity_vs_ridge(runs, name):
    run = runs[name]
    ridge = PEAK / DDR4
    assert len(run["layers"]) == 54
    for x in run["layers"]:
        assert x["dram_bytes"] > 0
        assert x["intensity"] == pytest.approx(x["macs"] / x["dram_bytes"], rel=1e-12)
        assert x["roofline_bound"] == _hand_bound(x, ridge), x["name"]
        attainable = min(PEAK, x["intensity"] * DDR4)
        assert x["attainable_macs_per_s"] == pytest.approx(attainable, rel=1e-9), x["name"]
        assert x["achieved_macs_per_s"] <= attainable * (1 + 1e-9), x["name"]


def test_dram_bytes_are_the_layer_bus_counter():
    """The lab's bytes are the simulator's DRAM bus bits / 8 for the layer (its own counter)."""
    from compiler.options import CompileOptions
    from npulab import load_chip_config, simulate, zoo
    result = simulate(zoo.get("resnet18"), load_chip_config(None),
                      options=CompileOptions(fusion=False))
    run = roofline.run_config("resnet18", [])
    bus = {x.name: x.actions.dram_bits // 8 for x in result.layers if x.macs}
    assert {x["name"]: x["dram_bytes"] for x in run["layers"]} == bus


def test_fc_is_memory_bound_at_batch_1(runs):
    """fc reads each of its 2048 x 1000 int8 weights once for one MAC: about 1 MAC per byte."""
    fc = next(x for x in runs["A"]["layers"] if x["name"] == "fc")
    assert fc["macs"] == 2048 * 1000
    assert 2048 * 1000 <= fc["dram_bytes"] < 1.01 * 2048 * 1000 + 4096
    assert fc["roofline_bound"] == "dram"
    assert [x["name"] for x in runs["A"]["layers"] if x["roofline_bound"] == "dram"] == ["fc"]


def test_less_sram_never_fewer_bytes(runs):
    a = {x["name"]: x for x in runs["A"]["layers"]}
    crossed = []
    for y in runs["small"]["layers"]:
        x = a[y["name"]]
        assert y["dram_bytes"] >= x["dram_bytes"], y["name"]
        if x["roofline_bound"] == "compute" and y["roofline_bound"] == "dram":
            crossed.append(y["name"])
            assert y["intensity"] < PEAK / DDR4 <= x["intensity"]
    assert len(crossed) == 13


def test_more_sram_more_bytes_only_for_faster_tilings(runs):
    a = {x["name"]: x for x in runs["A"]["layers"]}
    more = []
    for y in runs["big"]["layers"]:
        x = a[y["name"]]
        if y["dram_bytes"] > x["dram_bytes"]:
            more.append(y["name"])
            assert y["tiling"] != x["tiling"]
            assert y["compute_cycles"] < x["compute_cycles"], y["name"]
    assert more == ["layer2.0.downsample.0"]


def test_cli_errors(capsys):
    assert roofline.main(["--vs", "sram.capacity_kib"]) == 2
    assert "is not KEY=VALUE" in capsys.readouterr().err
    assert roofline.main(["--vs", "dram.preset=ddr9"]) == 2
    assert "dram.preset = 'ddr9': must be one of" in capsys.readouterr().err
