"""The shipped systolic presets' vector engines hold the figures their sources give (issue 23;
the sources are cited in each preset's comments and in docs/configs.md). The numbers are written
out here from the papers and repos, not read back from the TOML files."""

import pytest

from hw.configfile import load_chip_config
from hw.presets import chip_preset_names
from hw.vector.config import ALU_OPS, SFU_OPS

SYSTOLIC = chip_preset_names()


def test_every_systolic_preset_has_a_vector_engine():
    assert {"default", "tpu_v1_like", "gemmini_like", "eyeriss_like", "tpu_v5e_like"} <= set(SYSTOLIC)
    for name in SYSTOLIC:
        assert not load_chip_config(name).vector.ideal, name


def test_tpu_v1_activation_unit():
    v = load_chip_config("tpu_v1_like").vector
    # Jouppi et al. ISCA 2017 §2: one 256-element row of 32-bit accumulators per cycle,
    # 256-byte paths into the Unified Buffer.
    assert (v.lanes, v.dtype, v.pack) == (256, "int32", 1)
    assert (v.read_bytes_per_cycle, v.write_bytes_per_cycle) == (256 * 4, 256)
    assert v.cost_of("max") == v.cost_of("add") == v.cost_of("tanh") == 1
    # exp, rsqrt, ... emulated on the host: 8 B per element over 14 GiB/s PCIe at 700 MHz, 256 lanes
    host = 256 * 8 / (14 * 2**30 / 700e6)
    for op in ("exp", "log", "rcp", "rsqrt", "erf"):
        assert v.cost_of(op) == pytest.approx(host, rel=0.02)


def test_gemmini_default_config_read_out_path():
    v = load_chip_config("gemmini_like").vector
    # ucb-bar/gemmini Configs.scala defaultConfig: DIM 16, fp32 acc scaler of latency 8,
    # 128-bit DMA beats; a 16 x int32 accumulator row read per cycle.
    assert (v.lanes, v.dtype, v.pipeline_depth) == (16, "fp32", 8)
    assert (v.read_bytes_per_cycle, v.write_bytes_per_cycle) == (16 * 4, 128 // 8)
    assert all(v.cost_of(op) == 1 for op in ALU_OPS)
    # no special functions without has_normalizations: software on the CPU, far slower
    assert all(v.cost_of(op) >= 100 for op in SFU_OPS)


def test_eyeriss_relu_module():
    v = load_chip_config("eyeriss_like").vector
    # Chen et al. JSSC 2017: 4 x 16-bit values per 64-bit GLB word (§V-B), 16-bit fixed point
    # (§V-C), a 64-bit link at 60 MHz against a 200 MHz core (Table V).
    assert (v.lanes, v.dtype, v.pack) == (4, "int16", 1)
    assert v.read_bytes_per_cycle == 64 // 8
    assert v.write_bytes_per_cycle == int(8 * 60 / 200)
    assert v.cost_of("max") == 1                     # the ReLU module
    host = 4 * 4 / (8 * 60 / 200)                    # 4 lanes, 4 B out and back per element
    for op in ALU_OPS + SFU_OPS:
        if op != "max":
            assert v.cost_of(op) == pytest.approx(host, rel=0.06), op


def test_tpu_v5e_single_core():
    chip = load_chip_config("tpu_v5e_like")
    # Cloud TPU v5e docs, JAX tpu_info.py, scaling-book: 4 x 128x128 MXUs at 1.5 GHz = 197 TFLOP/s
    # bf16, 128 MiB VMEM, VPU of 8 x 128 fp32 lanes, HBM at 819 GB/s.
    assert chip.array.pes == 4 * 128 * 128 and chip.clock_mhz == 1500
    assert 2 * chip.array.pes * chip.clock_hz / 1e12 == pytest.approx(197, abs=0.5)
    assert chip.array.precision.value == "fp16"
    kib = (chip.ifmap_sram.capacity_kib + chip.filter_sram.capacity_kib
           + chip.ofmap_sram.capacity_kib)
    assert kib == 128 * 1024
    assert chip.dram.peak_gbps == pytest.approx(819, abs=1)
    v = chip.vector
    assert (v.lanes, v.dtype) == (8 * 128, "fp32")
    assert v.ops_per_cycle("fma") == 2 * 8 * 128     # two ALUs per (sublane, lane), as TPU v4
    assert (v.read_bytes_per_cycle, v.write_bytes_per_cycle) == (3 * 4096, 4096)
