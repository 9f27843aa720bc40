"""NVDLA presets and their validation (hw/nvdla/config.py, sim_configs/nv_*.toml).

Expected figures are NVIDIA's (spec/defs via ../shared/reference/nvdla.md): MAC counts, CBUF
sizes, throughputs; the primer's peak of 2 x MACs operations per cycle.
"""

from __future__ import annotations

import pytest

from hw.configfile import load_chip_config
from hw.nvdla.config import FEATURES, NvdlaConfig, load_nvdla_config, nvdla_preset_names
from hw.systolic.config import ConfigError

# preset: (int8 MACs, CBUF KiB, memory atom B, DRAM bus bits, SDP BS/BN/EW, PDP, CDP)
NVIDIA = {
    "nv_full": (2048, 512, 32, 512, (16, 16, 4), 8, 8),
    "nv_large": (2048, 512, 32, 256, (16, 16, 4), 8, 8),
    "nv_medium_1024": (1024, 512, 32, 256, (8, 8, 2), 4, 4),
    "nv_medium_512": (512, 512, 16, 128, (4, 4, 0), 2, 2),
    "nv_small_256": (256, 128, 8, 64, (1, 1, 0), 1, 1),
    "nv_small": (64, 128, 8, 64, (1, 1, 0), 1, 1),
}


def test_all_six_presets_ship():
    assert nvdla_preset_names() == sorted(NVIDIA)


@pytest.mark.parametrize("name", sorted(NVIDIA))
def test_preset_matches_nvidia(name):
    cfg = load_nvdla_config(name)
    macs, cbuf_kib, atom, bus, sdp, pdp, cdp = NVIDIA[name]
    assert cfg.name == name
    assert cfg.macs("int8") == macs and cfg.peak_ops_per_cycle() == 2 * macs
    assert cfg.cbuf_bytes == cbuf_kib * 1024
    assert (cfg.memory_atom_bytes, cfg.dram_bus_bits) == (atom, bus)
    assert (cfg.sdp_bs_throughput, cfg.sdp_bn_throughput, cfg.sdp_ew_throughput) == sdp
    assert (cfg.pdp_throughput, cfg.cdp_throughput) == (pdp, cdp)
    assert ("sdp_ew" in cfg.features) == (sdp[2] > 0)


def test_nv_full_precisions_and_peak():
    full = load_nvdla_config("nv_full")
    assert full.precisions == ("int8", "int16", "fp16")
    # Primer: 2048 int8 MACs, 1024 at 16 bits; 4.1 TOPS int8 at 1 GHz.
    assert full.macs("int16") == full.macs("fp16") == 1024
    assert full.peak_ops_per_cycle("int8") * full.clock_mhz * 1e6 == pytest.approx(4.096e12)
    assert full.max_batch == 32 and "winograd" in full.features


def test_unsupported_precision_and_feature_are_clear_errors():
    small = load_nvdla_config("nv_small")
    with pytest.raises(ConfigError, match="precision = 'fp16': nv_small supports int8; "
                                          "int16 and fp16 need nv_full"):
        small.macs("fp16")
    with pytest.raises(ConfigError, match="'sdp_lut' is not in nv_small's features"):
        small.require_feature("sdp_lut")
    load_nvdla_config("nv_large").require_feature("sdp_lut")  # present: no error


@pytest.mark.parametrize("override,message", [
    ("nvdla.atomic_c=12", "nvdla.atomic_c = 12: must be one of 8, 16, 32, 64, 128"),
    ("nvdla.precisions=['int8','fp32']", "unknown 'fp32'; allowed: int8, int16, fp16"),
    ("nvdla.precisions=['fp16']", "every NVDLA build supports int8"),
    ("nvdla.sdp_ew_throughput=2", "must be > 0 exactly when 'sdp_ew' is in features"),
    ("nvdla.max_batch=8", "must be > 1 exactly when 'batch' is in features"),
    ("nvdla.clock_mhz=0", "clock_mhz = 0: must be a number in (0, 10000]"),
    ("nvdla.cbuf_depth=4", "nvdla.cbuf_depth: unknown key; allowed keys in [nvdla]: name"),
    ("atomic_c=8", "must be nvdla.KEY=VALUE"),
])
def test_bad_overrides_name_key_value_and_allowed(override, message):
    with pytest.raises(ConfigError, match="nv_small.toml") as info:
        load_nvdla_config("nv_small", [override])
    assert message in str(info.value).replace('"', "'")


def test_overrides_apply():
    cfg = load_nvdla_config("nv_small", ["nvdla.clock_mhz=500", "nvdla.features=['sdp_lut']"])
    assert cfg.clock_mhz == 500.0 and cfg.features == ("sdp_lut",)
    assert isinstance(cfg, NvdlaConfig) and set(cfg.features) <= set(FEATURES)


def test_files_and_names_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="NVDLA preset 'nv_tiny': unknown; presets: nv_full"):
        load_nvdla_config("nv_tiny")
    bad = tmp_path / "x.toml"
    bad.write_text("[chip]\nname = 'x'\n")
    with pytest.raises(ConfigError, match="exactly one table, \\[nvdla\\]; found \\[chip\\]"):
        load_nvdla_config(bad)
    bad.write_text("[nvdla\n")
    with pytest.raises(ConfigError, match="x.toml: not valid TOML"):
        load_nvdla_config(bad)


def test_chip_loader_rejects_nvdla_files_clearly():
    from hw.presets import presets_dir
    with pytest.raises(ConfigError, match="nv_full.toml: an NVDLA config"):
        load_chip_config(presets_dir() / "nv_full.toml")


def test_one_loader_for_every_chip_file_kind():
    # hw.configfile.load_chip: presets and files of both kinds, one ChipSpec type
    from hw.configfile import load_chip
    from hw.presets import presets_dir
    nv = load_chip("nv_full")
    assert nv.kind == "nvdla" and nv.config == load_nvdla_config("nv_full")
    assert load_chip(presets_dir() / "nv_full.toml") == nv
    assert nv.peak_macs_per_cycle == nv.config.macs("int8") == 2048
    assert [m.name for m in nv.memory_levels()] == ["cbuf"]
    assert nv.memory_levels()[0].capacity_bytes == nv.config.cbuf_bytes
    chip = load_chip("gemmini_like", ["array.rows=8"])
    assert chip.kind == "systolic" and chip.config == load_chip_config("gemmini_like",
                                                                        ["array.rows=8"])
    assert [m.name for m in chip.memory_levels()] == ["ifmap", "filter", "ofmap"]
    assert chip.peak_macs_per_cycle == 8 * chip.config.array.cols
    assert load_nvdla_config("nv_small", ["nvdla.clock_mhz=500"]).clock_mhz == 500
    with pytest.raises(ConfigError, match="must be nvdla.KEY=VALUE"):
        load_chip("nv_small", ["array.rows=8"])
