"""SCALE-Sim .cfg reader/writer (compiler/frontends/scalesim_cfg.py)."""

from __future__ import annotations

import configparser
import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.frontends.scalesim_cfg import (
    ScaleSimConfig, ScaleSimConfigError, read_scalesim_cfg, write_scalesim_cfg,
)

SIM_CONFIGS = Path(__file__).resolve().parents[2] / "sim_configs"

# A v2-style file, as in SCALE-Sim v2's configs/scale.cfg: no [layout]/[sparsity], v2 keys only.
V2 = """[general]
run_name = v2_run

[architecture_presets]
ArrayHeight:    16
ArrayWidth:     8
IfmapSramSzkB:   64
FilterSramSzkB:  32
OfmapSramSzkB:   16
IfmapOffset:    0
FilterOffset:   10000000
OfmapOffset:    20000000
Bandwidth : 10
Dataflow : ws
MemoryBanks:   1
"""

# Everything SCALE-Sim 3.0.0's scale_config.read_conf_file() reads without a default.
V3_REQUIRED = {
    "general": {"run_name"},
    "architecture_presets": {
        "ArrayHeight", "ArrayWidth", "IfmapSramSzkB", "FilterSramSzkB", "OfmapSramSzkB",
        "IfmapOffset", "FilterOffset", "OfmapOffset", "Dataflow",
    },
    "run_presets": {"InterfaceBandwidth", "UseRamulatorTrace"},
    "layout": {
        "IfmapCustomLayout", "FilterCustomLayout", "IfmapSRAMBankBandwidth", "IfmapSRAMBankNum",
        "IfmapSRAMBankPort", "FilterSRAMBankBandwidth", "FilterSRAMBankNum", "FilterSRAMBankPort",
    },
    "sparsity": {"SparsitySupport"},
}


def write(tmp_path: Path, text: str, name: str = "x.cfg") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_sample_config():
    cfg = read_scalesim_cfg(SIM_CONFIGS / "scalesim_32x32_os.cfg")
    assert cfg == ScaleSimConfig(
        run_name="scalesim_32x32_os", array_rows=32, array_cols=32, ifmap_sram_kb=64,
        filter_sram_kb=64, ofmap_sram_kb=64, ifmap_offset=0, filter_offset=10_000_000,
        ofmap_offset=20_000_000, dataflow="os", bandwidth=(10,), read_request_buffer=512,
        write_request_buffer=512, interface_bandwidth="CALC",
    )
    assert cfg.pes == 1024 and cfg.sram_bytes == (65536, 65536, 65536)


def test_v2_file_defaults_to_calc(tmp_path):
    cfg = read_scalesim_cfg(write(tmp_path, V2))
    assert (cfg.array_rows, cfg.array_cols) == (16, 8)  # ArrayHeight = rows, ArrayWidth = cols
    assert (cfg.ifmap_sram_kb, cfg.filter_sram_kb, cfg.ofmap_sram_kb) == (64, 32, 16)
    assert cfg.dataflow == "ws" and cfg.interface_bandwidth == "CALC"
    assert cfg.read_request_buffer is None and cfg.write_request_buffer is None


def test_user_bandwidth(tmp_path):
    text = V2.replace("Bandwidth : 10", "Bandwidth : 10, 20") + \
        "[run_presets]\nInterfaceBandwidth: USER\n"
    cfg = read_scalesim_cfg(write(tmp_path, text))
    assert cfg.interface_bandwidth == "USER" and cfg.bandwidth == (10, 20)
    path = write(tmp_path, text.replace("Bandwidth : 10, 20\n", ""), "nobw.cfg")
    with pytest.raises(ScaleSimConfigError, match=r"nobw\.cfg: architecture_presets\.Bandwidth: "
                                                  r"None: missing"):
        read_scalesim_cfg(path)


def test_bandwidth_optional_in_calc_mode(tmp_path):
    cfg = read_scalesim_cfg(write(tmp_path, V2.replace("Bandwidth : 10\n", "")))
    assert cfg.bandwidth == ()


@pytest.mark.parametrize("old, new, key, value", [
    ("Dataflow : ws", "Dataflow : xs", "architecture_presets.Dataflow", "xs"),
    ("Dataflow : ws", "Dataflow : WS", "architecture_presets.Dataflow", "WS"),
    ("ArrayHeight:    16", "ArrayHeight: 16.5", "architecture_presets.ArrayHeight", "16.5"),
    ("ArrayWidth:     8", "ArrayWidth: 0", "architecture_presets.ArrayWidth", "0"),
    ("IfmapOffset:    0", "IfmapOffset: -1", "architecture_presets.IfmapOffset", "-1"),
    ("OfmapSramSzkB:   16", "OfmapSramSzkB: 16kB", "architecture_presets.OfmapSramSzkB", "16kB"),
    ("Bandwidth : 10", "Bandwidth : ten", "architecture_presets.Bandwidth", "ten"),
    ("MemoryBanks:   1", "ReadRequestBuffer: x", "architecture_presets.ReadRequestBuffer", "x"),
    ("run_name = v2_run", "run_name = a/b", "general.run_name", "a/b"),
    ("FilterOffset:   10000000\n", "", "architecture_presets.FilterOffset", None),
    ("[general]\nrun_name = v2_run\n", "", "general.run_name", None),
])
def test_bad_values_name_file_key_and_value(tmp_path, old, new, key, value):
    assert old in V2
    path = write(tmp_path, V2.replace(old, new))
    with pytest.raises(ScaleSimConfigError) as exc:
        read_scalesim_cfg(path)
    assert str(exc.value).startswith(f"{path}: {key}: {value!r}: ")


@pytest.mark.parametrize("extra, key, value", [
    ("[run_presets]\nInterfaceBandwidth: calc\n", "run_presets.InterfaceBandwidth", "calc"),
    ("[sparsity]\nSparsitySupport : true\n", "sparsity.SparsitySupport", "true"),
    ("[layout]\nIfmapCustomLayout: True\n", "layout.IfmapCustomLayout", "True"),
    ("[run_presets]\nUseRamulatorTrace: maybe\n", "run_presets.UseRamulatorTrace", "maybe"),
])
def test_v3_sections(tmp_path, extra, key, value):
    path = write(tmp_path, V2 + extra)
    with pytest.raises(ScaleSimConfigError) as exc:
        read_scalesim_cfg(path)
    assert str(exc.value).startswith(f"{path}: {key}: {value!r}: ")


@pytest.mark.parametrize("key", ["IfmapSRAMBankNum", "IfmapSRAMBankBandwidth",
                                 "IfmapSRAMBankPort", "FilterSRAMBankNum",
                                 "FilterSRAMBankBandwidth", "FilterSRAMBankPort"])
@pytest.mark.parametrize("value", ["-1", "abc", "nan", "0", "2.5"])
def test_layout_bank_keys_are_checked(tmp_path, key, value):
    path = write(tmp_path, V2 + f"[layout]\nIfmapCustomLayout: False\n{key}: {value}\n")
    with pytest.raises(ScaleSimConfigError) as exc:
        read_scalesim_cfg(path)
    assert str(exc.value) == f"{path}: layout.{key}: {value!r}: must be a decimal integer >= 1"
    ok = write(tmp_path, V2 + f"[layout]\n{key}: 10\n", "ok.cfg")
    assert read_scalesim_cfg(ok).array_rows == 16


def test_v3_features_off_are_accepted(tmp_path):
    text = V2 + ("[layout]\nIfmapCustomLayout: False\n[sparsity]\nSparsitySupport : false\n"
                 "[run_presets]\nInterfaceBandwidth: CALC\nUseRamulatorTrace: False\n")
    assert read_scalesim_cfg(write(tmp_path, text)).interface_bandwidth == "CALC"


@pytest.mark.parametrize("text, line, bad", [
    ("run_name = x\n[general]\n", 1, "run_name = x"),
    (V2.replace("Bandwidth : 10", "Bandwidth 10"), 13, "Bandwidth 10"),
    (V2 + "Dataflow: os\n", 16, "Dataflow: os"),
    (V2 + "[general]\n", 16, "[general]"),
])
def test_syntax_errors_carry_line_numbers(tmp_path, text, line, bad):
    path = write(tmp_path, text)
    with pytest.raises(ScaleSimConfigError) as exc:
        read_scalesim_cfg(path)
    assert str(exc.value).startswith(f"{path}:{line}: syntax: {bad!r}: ")


def test_percent_needs_escaping_as_in_scalesim(tmp_path):
    path = write(tmp_path, V2.replace("Dataflow : ws", "Dataflow : w%s"))
    with pytest.raises(ScaleSimConfigError, match=r"architecture_presets\.Dataflow: 'w%s': '%'"):
        read_scalesim_cfg(path)


def test_written_file_loads_in_scalesim3_and_round_trips(tmp_path):
    cfg = read_scalesim_cfg(write(tmp_path, V2))
    out = tmp_path / "out.cfg"
    write_scalesim_cfg(cfg, out)
    assert read_scalesim_cfg(out) == cfg
    parser = configparser.ConfigParser()
    parser.read(out)
    for section, keys in V3_REQUIRED.items():
        assert all(parser.has_option(section, key) for key in keys), section
    assert parser.get("architecture_presets", "Dataflow") == "ws"


configs = st.builds(
    ScaleSimConfig,
    run_name=st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True),
    array_rows=st.integers(1, 512), array_cols=st.integers(1, 512),
    ifmap_sram_kb=st.integers(1, 1 << 14), filter_sram_kb=st.integers(1, 1 << 14),
    ofmap_sram_kb=st.integers(1, 1 << 14), ifmap_offset=st.integers(0, 10**9),
    filter_offset=st.integers(0, 10**9), ofmap_offset=st.integers(0, 10**9),
    dataflow=st.sampled_from(["os", "ws", "is"]),
    bandwidth=st.lists(st.integers(1, 1000), min_size=1, max_size=3).map(tuple),
    read_request_buffer=st.none() | st.integers(1, 4096),
    write_request_buffer=st.none() | st.integers(1, 4096),
    interface_bandwidth=st.sampled_from(["CALC", "USER"]),
)


@settings(max_examples=50, deadline=None)
@given(cfg=configs)
def test_round_trip(tmp_path_factory, cfg):
    path = tmp_path_factory.mktemp("cfg") / "c.cfg"
    write_scalesim_cfg(cfg, path)
    assert read_scalesim_cfg(path) == cfg


@pytest.mark.parametrize("change, field", [
    ({"dataflow": "OS"}, "dataflow"),
    ({"array_rows": 0}, "array_rows"),
    ({"array_cols": True}, "array_cols"),
    ({"ifmap_offset": -1}, "ifmap_offset"),
    ({"run_name": "a%b"}, "run_name"),
    ({"run_name": " a"}, "run_name"),
    ({"interface_bandwidth": "USER"}, "bandwidth"),  # USER needs a bandwidth
    ({"bandwidth": [10]}, "bandwidth"),
    ({"read_request_buffer": 0}, "read_request_buffer"),
])
def test_dataclass_validates(change, field):
    base = dict(run_name="r", array_rows=4, array_cols=4, ifmap_sram_kb=1, filter_sram_kb=1,
                ofmap_sram_kb=1)
    with pytest.raises(ScaleSimConfigError, match=rf"^ScaleSimConfig: {field}: "):
        ScaleSimConfig(**{**base, **change})


def test_frozen():
    cfg = ScaleSimConfig(run_name="r", array_rows=4, array_cols=4, ifmap_sram_kb=1,
                         filter_sram_kb=1, ofmap_sram_kb=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.array_rows = 8  # type: ignore[misc]
