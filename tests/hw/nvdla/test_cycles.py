"""Tests of the NVDLA layer cycle model (hw/nvdla/cycles.py) against hand-derived formulas."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from hw.nvdla.config import load_nvdla_config
from hw.nvdla.conv_layer import ConvLayer, layers_from_spreadsheet_rows
from hw.nvdla.cycles import (CMAC_PIPELINE_CYCLES, CbufCapacityError, conv_cycles, engine_cycles,
                             network_cycles, stripe_limits, weight_load_cycles)
from hw.systolic.config import ConfigError

PRESETS = ["nv_full", "nv_large", "nv_medium_1024", "nv_medium_512", "nv_small_256", "nv_small"]
SPREADSHEET = Path("/work/shared/reference/nvdla_spreadsheet/resnet50.csv")


@pytest.fixture(scope="module")
def cfgs():
    """The presets with the bus as the only memory limit (``dram_gbps = 0``), so that a test's
    ``dram_bytes_per_cycle`` is the only DRAM limit."""
    return {name: load_nvdla_config(name, ["nvdla.dram_gbps=0"]) for name in PRESETS}


def ceil(a, b):
    return -(-a // b)


# ------------------------------------------------------------------ ideal MAC cycles
@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("shape", [
    (3, 32, 32, 16, 3, 1, 1), (64, 19, 19, 192, 3, 1, 1), (100, 9, 7, 70, 1, 1, 0),
    (256, 14, 14, 512, 3, 2, 1), (2048, 1, 1, 1000, 1, 1, 0)])
def test_ideal_mac_cycles_formula(cfgs, preset, shape):
    C, H, W, K, R, stride, pad = shape
    cfg = cfgs[preset]
    layer = ConvLayer.conv(C, H, W, K, R, stride=stride, pad=pad)
    P = (H + 2 * pad - R) // stride + 1
    Q = (W + 2 * pad - R) // stride + 1
    r = conv_cycles(cfg, layer)
    expect = ceil(C, cfg.atomic_c) * ceil(K, cfg.atomic_k) * P * Q * R * R
    assert r.mac_cycles == expect == r.atomic_ops
    assert r.total >= r.mac_cycles
    assert r.compute_cycles == r.mac_cycles + r.bubble_cycles


def test_ideal_mac_cycles_16bit_uses_half_atomic_k(cfgs):
    layer = ConvLayer.conv(64, 19, 19, 192, 3, pad=1, precision="int16")
    r = conv_cycles(cfgs["nv_full"], layer)
    assert r.mac_cycles == 1 * ceil(192, 16) * 19 * 19 * 9 == 38988
    fp = conv_cycles(cfgs["nv_full"], ConvLayer.conv(64, 19, 19, 192, 3, pad=1, precision="fp16"))
    assert fp.mac_cycles == 38988


def test_grouped_and_depthwise(cfgs):
    cfg = cfgs["nv_small"]  # atomic 8 x 8
    dw = ConvLayer.conv(32, 10, 10, 32, 3, pad=1, groups=32)
    assert conv_cycles(cfg, dw).mac_cycles == 32 * 1 * 1 * 100 * 9
    g2 = ConvLayer.conv(48, 10, 10, 64, 3, pad=1, groups=2)  # 24 ch -> 3 groups, 32 k -> 4
    assert conv_cycles(cfg, g2).mac_cycles == 2 * 3 * 4 * 100 * 9


def test_image_input_folds_s_into_channels(cfgs):
    cfg = cfgs["nv_full"]
    layer = ConvLayer.conv(3, 224, 224, 64, 7, stride=2, pad=3, image_input=True)
    # C*S = 21 channels in one atomic op; R = 7 stripes per block.
    assert conv_cycles(cfg, layer).mac_cycles == 1 * 2 * 112 * 112 * 7


# ------------------------------------------------------------------ stripes and bubbles
def test_stripe_limits_and_weight_load(cfgs):
    assert stripe_limits(cfgs["nv_full"], "int8") == (16, 32)
    assert stripe_limits(cfgs["nv_full"], "int16") == (16, 32)
    # 32 kernels x 64 ch x 1 B (int8) or 16 x 64 x 2 B (int16) over a 128 B CBUF read port.
    assert weight_load_cycles(cfgs["nv_full"], "int8") == 16
    assert weight_load_cycles(cfgs["nv_full"], "int16") == 16
    assert weight_load_cycles(cfgs["nv_full"], "int8", kernels=8) == 4
    # master configs: one kernel per cycle -> atomic_k; stripes up to 2 x atomic_k.
    assert stripe_limits(cfgs["nv_small"]) == (8, 16)
    assert stripe_limits(cfgs["nv_large"]) == (32, 64)


def test_stripes_by_hand_nv_full(cfgs):
    cfg = cfgs["nv_full"]
    # 6x6 output, 3x3, 64 ch, 32 kernels: per tap 36 points -> ceil(36/32) = 2 balanced
    # stripes of 18 (within 16..32): no bubble; 18 stripes in all.
    r = conv_cycles(cfg, ConvLayer.conv(64, 6, 6, 32, 3, pad=1))
    assert r.cbuf_mode == "full_input_full_weight"
    assert r.atomic_ops == 36 * 9
    assert r.stripes == 2 * 9
    assert r.bubble_cycles == 0 and r.compute_cycles == 36 * 9
    assert r.stripe_length == 32
    # 3x3 output: one 9-op stripe per tap, the 16-cycle weight load is not hidden:
    # 7 bubble cycles per stripe.
    r3 = conv_cycles(cfg, ConvLayer.conv(64, 3, 3, 32, 3, pad=1))
    assert (r3.stripes, r3.compute_cycles, r3.bubble_cycles) == (9, 16 * 9, 7 * 9)
    # 40 kernels: a full kernel group (load 16) and one of 8 kernels (load 4); 1x1, 3x3 points:
    # each stripe of 9 points -> 16 and 9 cycles.
    r40 = conv_cycles(cfg, ConvLayer.conv(64, 3, 3, 40, 1))
    assert r40.compute_cycles == max(9, 16) + max(9, 4)
    assert r40.bubble_cycles == 7
    # int16: 16 kernels per group, load still 16 cycles; 2x5 = 10 points per pass.
    r16 = conv_cycles(cfg, ConvLayer.conv(64, 2, 5, 32, 1, precision="int16"))
    assert r16.mac_cycles == 2 * 10 and r16.compute_cycles == 2 * 16


def test_stripes_by_hand_nv_small(cfgs):
    cfg = cfgs["nv_small"]  # stripes <= 16, weight load 8
    r = conv_cycles(cfg, ConvLayer.conv(8, 5, 5, 8, 1))      # 25 -> 13 + 12: no bubble
    assert (r.stripes, r.bubble_cycles, r.compute_cycles) == (2, 0, 25)
    r = conv_cycles(cfg, ConvLayer.conv(8, 2, 3, 8, 1))      # 6 points < load 8: 2 bubbles
    assert (r.stripes, r.bubble_cycles, r.compute_cycles) == (1, 2, 8)
    r = conv_cycles(cfg, ConvLayer.conv(16, 2, 3, 16, 3, pad=1))  # 2 cg x 2 kg x 9 taps
    assert r.compute_cycles == 2 * 2 * 9 * 8 and r.stripes == 36


def test_fc_is_weight_bound(cfgs):
    # FC: one output point per stripe, each stripe waits the full weight load and the weights
    # (2 MB) stream from DRAM: far from MAC-bound.
    r = conv_cycles(cfgs["nv_full"], ConvLayer.fc(2048, 1000))
    assert r.mac_cycles == 32 * 32
    # 31 full kernel groups (load 16) + one of 8 kernels (load 4), for each of 32 channel groups
    assert r.compute_cycles == 32 * (31 * 16 + 4)
    assert r.bound == "cdma"
    assert r.weight_bytes == 2048 * 1000


# ------------------------------------------------------------------ CBUF plans and boundedness
def test_fitting_layer_is_mac_bound_on_nv_full(cfgs):
    cfg = cfgs["nv_full"]
    layer = ConvLayer.conv(128, 28, 28, 128, 3, pad=1, bias=True, relu=True)
    r = conv_cycles(cfg, layer)
    assert r.cbuf_mode == "full_input_full_weight" and r.h_slices == 1
    assert r.bound == "mac"
    assert r.mac_cycles == 2 * 4 * 784 * 9
    assert r.data_bytes == 28 * 28 * 128 and r.weight_bytes == 128 * 9 * 128
    # total = startup + compute + drain exactly when MAC-bound
    assert r.total == math.ceil(r.startup_cycles + r.compute_cycles + r.drain_cycles)
    assert r.drain_cycles >= CMAC_PIPELINE_CYCLES
    assert r.startup_cycles >= cfg.dram_latency_cycles


def test_split_h_refetches_overlap_rows(cfgs):
    cfg = cfgs["nv_small"]  # 128 KB CBUF; this input is 56*56*64 = 196 KB
    layer = ConvLayer.conv(64, 56, 56, 64, 3, pad=1)
    r = conv_cycles(cfg, layer)
    assert r.cbuf_mode == "split_h" and r.h_slices > 1
    assert r.data_bytes > 56 * 56 * 64           # halo rows fetched twice
    assert r.data_banks + r.weight_banks <= cfg.cbuf_banks


def test_partial_weights_when_weights_do_not_fit(cfgs):
    cfg = cfgs["nv_full"]
    layer = ConvLayer.conv(512, 7, 7, 512, 3, pad=1)   # 2.25 MB of weights, 25 KB input
    r = conv_cycles(cfg, layer)
    assert r.cbuf_mode == "full_input_partial_weight"
    assert r.weight_bytes == 512 * 512 * 9           # streamed exactly once


LAYERS = [ConvLayer.conv(64, 56, 56, 64, 3, pad=1), ConvLayer.conv(256, 56, 56, 64, 1),
          ConvLayer.conv(3, 224, 224, 64, 7, stride=2, pad=3, image_input=True,
                         pool_kernel=3, pool_stride=2),
          ConvLayer.conv(512, 14, 14, 512, 3, pad=1, eltwise=True, bn=True),
          ConvLayer.conv(96, 27, 27, 128, 5, pad=2, groups=2), ConvLayer.fc(1024, 1000)]


@pytest.mark.parametrize("preset", ["nv_full", "nv_small", "nv_medium_512"])
@pytest.mark.parametrize("layer", LAYERS, ids=range(len(LAYERS)))
def test_larger_cbuf_never_increases_cycles(preset, layer):
    totals = []
    for depth in (128, 256, 512):
        for banks in (16, 32):
            cfg = load_nvdla_config(preset, [f"nvdla.cbuf_bank_depth={depth}",
                                             f"nvdla.cbuf_banks={banks}"])
            try:
                totals.append((cfg.cbuf_bytes, conv_cycles(cfg, layer, 8).total))
            except ValueError:      # does not fit at all: no plan on that small a CBUF
                totals.append((cfg.cbuf_bytes, math.inf))
    totals.sort()
    for (b0, t0), (b1, t1) in zip(totals, totals[1:]):
        if b1 > b0:
            assert t1 <= t0, totals


@pytest.mark.parametrize("preset", ["nv_full", "nv_small"])
@pytest.mark.parametrize("layer", LAYERS, ids=range(len(LAYERS)))
def test_less_dram_bandwidth_never_decreases_cycles(cfgs, preset, layer):
    cfg = cfgs[preset]
    prev = 0
    for bw in (None, 64, 32, 20, 10, 4, 1, 0.5):
        t = conv_cycles(cfg, layer, bw).total
        assert t >= prev, (bw, t, prev)
        prev = t


def test_total_is_at_least_each_term(cfgs):
    for layer in LAYERS:
        for preset in ("nv_full", "nv_small"):
            r = conv_cycles(cfgs[preset], layer, 4)
            assert r.total >= max(r.compute_cycles, r.sdp_cycles, r.pdp_cycles, r.write_cycles)
            assert r.bound in ("mac", "cdma", "sdp", "pdp")


def test_slow_sdp_bounds_a_1x1_layer_on_nv_small(cfgs):
    # nv_small SDP: 1 element per cycle; 1x1 conv with 8 channels, 64 kernels: MAC 8 kernel
    # outputs per cycle vs SDP 1 -> SDP-bound.
    r = conv_cycles(cfgs["nv_small"], ConvLayer.conv(8, 16, 16, 64, 1))
    assert r.sdp_cycles == 64 * 256
    assert r.bound == "sdp"


# ------------------------------------------------------------------ errors
def test_precision_errors(cfgs):
    layer = ConvLayer.conv(16, 8, 8, 16, 3, precision="int16")
    for preset in PRESETS[1:]:
        with pytest.raises(ConfigError, match="int16"):
            conv_cycles(cfgs[preset], layer)
    with pytest.raises(ConfigError, match="fp16"):
        conv_cycles(cfgs["nv_small"], ConvLayer.conv(16, 8, 8, 16, 3, precision="fp16"))


@pytest.mark.parametrize("kw, match", [
    (dict(C=0), "C = 0"), (dict(K=-1), "K = -1"), (dict(stride_y=0), "stride_y = 0"),
    (dict(stride_x=0), "stride_x = 0"), (dict(C=10, groups=4), "divisible by groups"),
    (dict(K=10, groups=4, C=8), "divisible by groups"), (dict(pad_top=-1), "pad_top"),
    (dict(precision="int4"), "precision"), (dict(R=9), "larger than the padded input"),
    (dict(pool_kernel=(3, 3)), "together"),
    (dict(pool_kernel=(9, 9), pool_stride=(1, 1)), "PDP"), (dict(dilation=0), "dilation"),
])
def test_invalid_layers(kw, match):
    base = dict(C=8, H=8, W=8, K=8, R=3, S=3)
    base.update(kw)
    with pytest.raises(ValueError, match=match):
        ConvLayer(**base)


def test_bad_dram_rate_and_unplannable_layer(cfgs):
    with pytest.raises(ValueError, match="dram_bytes_per_cycle"):
        conv_cycles(cfgs["nv_full"], ConvLayer.conv(8, 8, 8, 8, 3), 0)
    # A 8192-wide, 512-channel row does not fit nv_small's CBUF even as 3 rows.
    with pytest.raises(CbufCapacityError, match="nv_small's CBUF.*W splitting"):
        conv_cycles(cfgs["nv_small"], ConvLayer.conv(512, 8, 8192, 8, 3))


# ------------------------------------------------------------------ networks and data points
def test_network_cycles_sums_layers(cfgs):
    cfg = cfgs["nv_full"]
    n = network_cycles(cfg, LAYERS, 20)
    assert n.total == sum(conv_cycles(cfg, layer, 20).total for layer in LAYERS)
    assert n.fps == pytest.approx(cfg.clock_mhz * 1e6 / n.total)
    assert sum(n.bounds().values()) == n.total


def test_googlenet_conv2_3x3_int16_vs_rtl(cfgs):
    layer = ConvLayer.conv(64, 19, 19, 192, 3, pad=1, precision="int16",
                           name="googlenet_conv2_3x3_int16")
    r = conv_cycles(cfgs["nv_full"], layer)
    assert r.mac_cycles == 38988
    assert r.total >= 38988
    print(f"\ngooglenet_conv2_3x3_int16 on nv_full: estimate {r.total} cycles "
          f"(ideal {r.mac_cycles}, bubbles {r.bubble_cycles}, startup {r.startup_cycles:.0f}, "
          f"bound {r.bound}, {r.cbuf_mode}); RTL (Verilator) ~98,000 -> "
          f"estimate/RTL = {r.total / 98000:.2f}")


def _resnet_rows():
    with open(SPREADSHEET) as f:
        table = list(csv.reader(line for line in f if not line.startswith("#")))
    header = next(row for row in table if row[0] == "name")
    return [dict(zip(header, row)) for row in table if row[0] == "layer"]


@pytest.mark.skipif(not SPREADSHEET.exists(), reason="spreadsheet CSV not available")
def test_resnet50_fps_print(cfgs):
    layers = layers_from_spreadsheet_rows(_resnet_rows())
    assert len(layers) == 54 and layers[0].image_input and layers[0].pool_kernel == (3, 3)
    assert layers[0].P == 112 and layers[0].pooled_shape == (56, 56)
    for preset, bw, primer in (("nv_full", 20, 269), ("nv_small", 1, 7.3)):
        n = network_cycles(cfgs[preset], layers, bw)
        ideal = sum(c.mac_cycles for c in n.layers)
        assert n.total >= ideal
        print(f"\nResNet-50 int8 on {preset} @1 GHz, DRAM {bw} B/cycle: {n.total} cycles, "
              f"{n.fps:.1f} fps (primer {primer}); ideal MAC cycles {ideal}; "
              f"bounds {n.bounds()}")


# ----------------------------------------------------------------- memory path, bank split
def test_memory_path_bandwidth_model_and_dram_preset():
    from hw.nvdla.memory import memory_path, stream_efficiency
    full = load_nvdla_config("nv_full")
    p = memory_path(full)
    assert full.dram_gbps == 20 and p.bytes_per_cycle == 20.0 and p.efficiency == 1.0
    assert memory_path(load_nvdla_config("nv_full", ["nvdla.dram_gbps=0"])).bytes_per_cycle == 64
    assert memory_path(load_nvdla_config("nv_full", ["nvdla.dram_gbps=500"])).bytes_per_cycle == 64
    # 500 MHz core: 20 GB/s is 40 bytes per core cycle
    assert memory_path(load_nvdla_config("nv_full", ["nvdla.clock_mhz=500"])).bytes_per_cycle == 40
    small = load_nvdla_config("nv_small", ['nvdla.dram="ddr4-3200"', "nvdla.dram_gbps=0"])
    eff, peak = stream_efficiency("ddr4-3200", 32)
    assert peak == pytest.approx(25.6, rel=0.01)
    # a 32-byte request costs a whole 64-byte DDR4 column access: at most half the peak
    assert 0 < eff <= 0.5
    ps = memory_path(small)
    assert ps.efficiency == eff
    assert ps.bytes_per_cycle == pytest.approx(min(8.0, peak * eff * 1000 / small.clock_mhz))
    assert "ddr4-3200" in ps.source
    lp = stream_efficiency("lpddr4-3200", 32)[0]
    assert lp > 2 * eff  # LPDDR4's 32-byte access matches the request


def test_conv_uses_the_config_memory_path():
    layer = ConvLayer.conv(256, 14, 14, 1024, 1, name="memory_bound")
    fast = conv_cycles(load_nvdla_config("nv_full", ["nvdla.dram_gbps=0"]), layer)
    slow = conv_cycles(load_nvdla_config("nv_full", ["nvdla.dram_gbps=5"]), layer)
    explicit = conv_cycles(load_nvdla_config("nv_full", ["nvdla.dram_gbps=0"]), layer, 5.0)
    assert slow.total == explicit.total > fast.total
    # weights alone (256 KiB) at 5 bytes/cycle take more than 52,000 cycles
    assert slow.total >= 256 * 1024 * 1024 // 1024 / 5


def test_bank_split_forces_the_plan(cfgs):
    layer = ConvLayer.conv(64, 19, 19, 192, 3, pad=1, precision="int16", name="g")
    free = conv_cycles(cfgs["nv_full"], layer, 32.0)
    forced = conv_cycles(cfgs["nv_full"], layer, 32.0, bank_split=(13, 3))
    assert (free.data_banks, free.weight_banks) != (13, 3)
    assert (forced.data_banks, forced.weight_banks) == (13, 3)
    assert forced.cbuf_mode == "full_input_partial_weight"  # 216 KiB of weights > 3 x 32 KiB
    assert forced.total >= free.total
    with pytest.raises(ValueError, match="bank_split = \\(15, 2\\)"):
        conv_cycles(cfgs["nv_full"], layer, bank_split=(15, 2))
    with pytest.raises(ValueError, match="cannot run with this split"):
        conv_cycles(cfgs["nv_full"], ConvLayer.conv(512, 56, 56, 64, 3, pad=1), bank_split=(1, 1))


def test_engine_cycles_standalone_layers(cfgs):
    full = cfgs["nv_full"]
    # 56x56x256 int8 max pool 3x3/2 -> 28x28x256: 802,816 inputs at 8 per cycle
    r = engine_cycles(full, "pdp", 802816, 200704, 802816, 200704, dram_bytes_per_cycle=64.0)
    assert r.engine_cycles == 802816 / 8 and r.bound == "engine"
    assert r.total == full.dram_latency_cycles + 802816 // 8
    r2 = engine_cycles(full, "pdp", 802816, 200704, 802816, 200704, dram_bytes_per_cycle=1.0)
    assert r2.bound == "dram" and r2.total == full.dram_latency_cycles + 802816 + 200704
    with pytest.raises(ConfigError, match="sdp_ew"):
        engine_cycles(cfgs["nv_small"], "sdp_ew", 10, 10, 20, 10)
    with pytest.raises(ValueError, match="engine kind = 'lrn'"):
        engine_cycles(full, "lrn", 1, 1, 1, 1)
