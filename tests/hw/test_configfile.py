"""Chip config files: defaults, presets, round trips, overrides and one-line errors."""

import tomllib
from pathlib import Path

import pytest

from hw.chip import ChipConfig
from hw.configfile import chip_config_to_toml, load_chip_config, parse_override
from hw.systolic.config import ArrayConfig, ConfigError, Dataflow, Overflow, Precision

CONFIGS = Path(__file__).resolve().parents[2] / "sim_configs"
PRESETS = sorted(p for p in CONFIGS.glob("*.toml") if not p.name.startswith("nv_"))  # NVDLA: tests/hw/nvdla


def test_default_file_is_the_builtin_default():
    assert load_chip_config(CONFIGS / "default.toml") == ChipConfig() == load_chip_config(None)


def test_presets_cover_every_dataflow():
    dataflows = {load_chip_config(p).array.dataflow for p in PRESETS}
    assert dataflows == set(Dataflow)


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_preset_round_trips_through_toml(path, tmp_path):
    cfg = load_chip_config(path)
    out = tmp_path / "again.toml"
    out.write_text(chip_config_to_toml(cfg))
    assert load_chip_config(out) == cfg


def test_published_preset_figures():
    tpu = load_chip_config(CONFIGS / "tpu_v1_like.toml")
    # Jouppi et al. ISCA 2017: 256x256 MACs at 700 MHz = 92 TOPS peak (2 ops per MAC).
    assert (tpu.array.rows, tpu.array.cols, tpu.clock_mhz) == (256, 256, 700.0)
    assert 2 * tpu.array.pes * tpu.clock_hz / 1e12 == pytest.approx(91.75, abs=0.01)
    eyeriss = load_chip_config(CONFIGS / "eyeriss_like.toml")
    assert eyeriss.array.pes == 168  # Chen et al. JSSC 2017


def test_overrides_apply_with_toml_or_bare_values():
    cfg = load_chip_config(None, ["array.rows=16", "array.dataflow=OS", "chip.clock_mhz=250",
                                  'chip.name="x y"', "array.precision=int16"])
    assert cfg.array == ArrayConfig(rows=16, cols=32, dataflow=Dataflow.OS,
                                    precision=Precision.INT16, overflow=Overflow.WRAP)
    assert cfg.array.acc_bits == 64  # int16 default
    assert (cfg.clock_mhz, cfg.name) == (250.0, "x y")
    assert parse_override("array.cols = 8") == ("array", "cols", 8)


@pytest.mark.parametrize("override, fragments", [
    ("array.rows=0", ["array.rows = 0", "1..4096"]),
    ("array.rows=2.5", ["array.rows = 2.5", "integer"]),
    ("array.rows=true", ["array.rows = True"]),
    ("array.dataflow=rs", ["array.dataflow = 'rs'", "'os', 'ws', 'is'"]),
    ("array.precision=int2", ["array.precision = 'int2'", "'int8', 'int16', 'fp16'"]),
    ("array.acc_bits=15", ["array.acc_bits = 15", "16..64"]),
    ("array.overflow=clip", ["array.overflow = 'clip'", "'wrap', 'saturate'"]),
    ("chip.clock_mhz=0", ["chip.clock_mhz = 0", "[1, 10000]"]),
    ("array.speed=3", ["array.speed: unknown key", "rows, cols, dataflow"]),
    ("mem.size=3", ["[mem]: unknown section", "chip, array"]),
    ("array.rows", ["expected SECTION.KEY=VALUE"]),
])
def test_bad_override_names_key_value_and_allowed(override, fragments):
    with pytest.raises(ConfigError) as err:
        load_chip_config(CONFIGS / "default.toml", [override])
    message = str(err.value)
    assert "\n" not in message
    assert "--set" in message
    for fragment in fragments:
        assert fragment in message


def test_fp16_requires_fp32_accumulator(tmp_path):
    bad = tmp_path / "fp16.toml"
    bad.write_text('[array]\nprecision = "fp16"\nacc_bits = 16\n')
    with pytest.raises(ConfigError, match=r"fp16.toml: array.acc_bits = 16: fp16 accumulates in fp32"):
        load_chip_config(bad)


def test_file_errors_name_the_file_and_line(tmp_path):
    with pytest.raises(ConfigError, match="missing.toml: no such config file"):
        load_chip_config(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[array]\nrows = 32\ncols = = 4\n")
    with pytest.raises(ConfigError, match=r"broken.toml: not valid TOML: .*line 3"):
        load_chip_config(broken)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("[array]\nrow = 32\n")
    with pytest.raises(ConfigError, match=r"unknown.toml: array.row: unknown key"):
        load_chip_config(unknown)
    table = tmp_path / "table.toml"
    table.write_text("array = 3\n")
    with pytest.raises(ConfigError, match=r"table.toml: array = 3: must be a \[array\] table"):
        load_chip_config(table)


def test_toml_output_is_valid_and_complete():
    data = tomllib.loads(chip_config_to_toml(ChipConfig()))
    assert list(data) == ["chip", "array", "vector", "sram", "dram", "host_link", "dma"]
    assert data["vector"]["lanes"] == 32 and data["vector"]["cost"]["exp"] == 4.0
    assert data["vector"]["packing"] == {"int8": 4, "int16": 2, "int32": 1, "fp16": 2,
                                         "bf16": 2, "fp32": 1}
    assert data["chip"] == {"name": "npulab-default", "clock_mhz": 1000.0,
                            "model_input": "host", "model_output": "host",
                            "launch_overhead_us": 0.0}
    assert data["array"] == {"rows": 32, "cols": 32, "dataflow": "ws", "precision": "int8",
                             "acc_bits": 32, "overflow": "wrap", "reconfigurable": False,
                             "sparse_m": 0, "macs_per_pe": 1}
    assert [data["sram"][n]["capacity_kib"] for n in ("ifmap", "filter", "ofmap")] == [512, 256 * 2, 256]
    assert data["dram"]["preset"] == "ddr4-3200" and data["dram"]["channels"] == 1
    assert data["host_link"]["generation"] == 4 and data["host_link"]["lanes"] == 16


def test_memory_sections_shared_and_per_scratchpad_keys(tmp_path):
    path = tmp_path / "mem.toml"
    path.write_text('[sram]\nbanks = 16\n[sram.ofmap]\ncapacity_kib = 64\nports = 2\n'
                    '[dram]\npreset = "hbm2"\nchannels = 4\n[host_link]\ngeneration = 5\n'
                    '[dma]\nmax_outstanding = 8\n')
    cfg = load_chip_config(path, ["sram.ifmap.capacity_kib=1024", "chip.model_input=dram"])
    assert [cfg.sram(n).banks for n in ("ifmap", "filter", "ofmap")] == [16, 16, 16]
    assert cfg.ofmap_sram.capacity_kib == 64 and cfg.ofmap_sram.ports == 2
    assert cfg.ifmap_sram.capacity_kib == 1024 and cfg.filter_sram.capacity_kib == 512
    assert cfg.dram.preset == "hbm2" and cfg.dram.channels == 4
    assert cfg.host_link.generation == 5 and cfg.dma.max_outstanding == 8
    assert cfg.model_input == "dram"
    cfg = load_chip_config(path, ["vector.cost.exp=8", "vector.lanes=64"])
    assert cfg.vector.cost_of("exp") == 8 and cfg.vector.lanes == 64
    assert cfg.vector.cost_of("tanh") == 4          # the rest of the table keeps its defaults
    out = tmp_path / "again.toml"
    out.write_text(chip_config_to_toml(cfg))
    assert load_chip_config(out) == cfg


@pytest.mark.parametrize("override, fragments", [
    ("sram.ifmap.capacity_kib=-1", ["sram.ifmap.capacity_kib = -1"]),
    ("sram.bank_width_bytes=3", ["bank_width_bytes"]),
    ("sram.weights.capacity_kib=1", ["[sram.weights]: unknown scratchpad", "ifmap, filter, ofmap"]),
    ("dram.channels=0", ["dram.channels = 0"]),
    ("host_link.lanes=3", ["host_link.lanes = 3"]),
    ("chip.model_input=disk", ["chip.model_input = 'disk'", "'host', 'dram'"]),
    ("dma.speed=3", ["dma.speed"]),
])
def test_memory_section_errors_name_key_and_value(override, fragments):
    with pytest.raises(ConfigError) as info:
        load_chip_config(None, [override])
    for fragment in fragments:
        assert fragment in str(info.value)


def test_a_chip_takes_every_array_precision_packed_or_whole_bytes():
    """Every array precision loads on a chip: the byte-wide ones (bf16, fp8) and the sub-byte
    int4 and binary, packed two and eight per byte (hw.packing: the chip's element size)."""
    from hw.packing import Packed
    assert load_chip_config(overrides=["array.precision=int4"]).elem_size == Packed(4)
    assert load_chip_config(overrides=["array.precision=binary"]).elem_size == Packed(1)
    assert load_chip_config(overrides=["array.precision=int16"]).elem_size == 2
    for p in ("bf16", "fp8_e4m3", "fp8_e5m2"):
        assert load_chip_config(overrides=[f"array.precision={p}"]).array.precision.value == p
