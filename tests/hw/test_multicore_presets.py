"""The multi-core presets of issue 24 hold the figures their sources give (each preset's comments
cite them): cores, clock, peak, on-chip memories, DRAM bandwidth. The numbers are written out
here from the datasheets and repos, not read back from the TOML files."""

import pytest

from hw.configfile import load_chip_config


def peak_tflops(chip) -> float:
    return 2 * chip.cores * chip.array.pes * chip.clock_hz / 1e12


def per_core_sram_kib(chip) -> float:
    return (chip.ifmap_sram.capacity_kib + chip.filter_sram.capacity_kib
            + chip.ofmap_sram.capacity_kib)


def test_tpu_v4_two_tensorcores():
    chip = load_chip_config("tpu_v4_like")
    # Cloud TPU v4 docs: 2 TensorCores x 4 MXUs of 128 x 128, 275 TFLOP/s bf16, HBM2 1,200 GB/s;
    # the clock is derived from them (1.049 GHz; the TPU v4 paper's 1,050 MHz)
    assert chip.cores == 2 and chip.array.pes == 4 * 128 * 128
    assert chip.clock_mhz == 1050
    assert peak_tflops(chip) == pytest.approx(275, abs=0.5)
    assert chip.array.precision.value == "fp16"           # the same-width stand-in for bf16
    # tpu_info.py: VMEM 16 MiB per TensorCore, CMEM ~128 MiB per chip
    assert per_core_sram_kib(chip) == 16 * 1024
    assert chip.l2.capacity_kib == 128 * 1024
    assert chip.dram.peak_gbps == pytest.approx(1200, rel=1e-6)
    assert chip.vector.lanes == 8 * 128 and chip.vector.ops_per_cycle("fma") == 2 * 8 * 128


def test_mi210_compute_units():
    chip = load_chip_config("mi210_like")
    # AMD: 104 CUs, 1,700 MHz boost, 181 TFLOP/s fp16 matrix = 512 MACs per CU per clock
    assert chip.cores == 104 and chip.clock_mhz == 1700
    assert chip.array.pes == round(181e12 / (2 * 104 * 1.7e9)) == 512
    assert peak_tflops(chip) == pytest.approx(181, abs=0.5)
    # 22.6 TFLOP/s fp32 vector = 64 fp32 FMA lanes per CU
    assert 2 * 104 * chip.vector.lanes * 1.7e9 / 1e12 == pytest.approx(22.6, abs=0.1)
    # ROCm spec table: LDS 64 KiB + L1 16 KiB, VGPR file 512 KiB per CU; L2 8 MiB
    assert chip.ifmap_sram.capacity_kib + chip.filter_sram.capacity_kib == 64 + 16
    assert chip.ofmap_sram.capacity_kib == 512
    assert chip.l2.capacity_kib == 8 * 1024
    # LLMCompass's MI210: L2 4,096 B per clock
    assert chip.l2.banks * chip.l2.bank_width_bytes == 4096
    # HBM2e 4,096 bit at 3.2 Gb/s
    assert chip.dram.peak_gbps == pytest.approx(4096 / 8 * 3.2, rel=1e-6)
    # LLMCompass's overhead_dict for MI210 (us)
    assert chip.launch_overhead_us == 34
    assert dict(chip.launch_overhead_by_op) == {"softmax": 22, "layernorm": 28, "gelu": 21}


def test_meteor_lake_npu_two_nce_tiles():
    chip = load_chip_config("meteor_lake_npu_like")
    # Intel datasheet: 2 NCE tiles x 2K MACs; Chips and Cheese: 1.16 GHz, 9.5 TOPS int8
    assert chip.cores == 2 and chip.array.pes == 2048 and chip.clock_mhz == 1160
    assert chip.array.precision.value == "int8"
    assert peak_tflops(chip) == pytest.approx(9.5, abs=0.05)
    # npu_plugin: 1,982,464 B of CMX per tile; no shared L2
    assert per_core_sram_kib(chip) * 1024 == 1_982_464
    assert chip.l2.capacity_kib == 0
    # LPDDR5X-7467 on a 128-bit bus
    assert chip.dram.peak_gbps == pytest.approx(128 / 8 * 7.467, rel=1e-4)
    # two activation SHAVEs with 128-bit vector units
    assert chip.vector.lanes == 2 * 128 // 32
