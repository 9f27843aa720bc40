"""NVIDIA's NVDLA performance spreadsheet reproduced cell by cell (hw.nvdla.spreadsheet), read
from the reference CSVs (hw.nvdla.sheet_reference)."""

import math
from pathlib import Path

import pytest

from hw.nvdla.sheet_reference import read_sheet_csv
from hw.nvdla.spreadsheet import (
    SheetConfig,
    SheetLayer,
    SramPlacement,
    sheet_block_dram,
    sheet_layer,
    sheet_network,
)

SHEETS = ("resnet50.csv", "googlenet.csv")


def _same(got, want) -> bool:
    if want is None or isinstance(want, str) or got is None or isinstance(got, str):
        return got == want
    return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)


@pytest.fixture(scope="module", params=SHEETS)
def sheet(request, shared_dir):
    path = shared_dir / "reference" / "nvdla_spreadsheet" / request.param
    cfg, layers, expected = read_sheet_csv(path)
    return request.param, cfg, layers, expected, sheet_network(cfg, layers)


def test_every_cell_of_every_layer_row(sheet):
    name, cfg, layers, expected, net = sheet
    assert len(layers) == len(expected["rows"]) > 50
    mismatches = []
    checked = 0
    for i, row in enumerate(expected["rows"]):
        for (model, key), want in row.cells.items():
            src = net["dram"][i] if model == "dram" else net["sram"][i]
            got = src[key]
            checked += 1
            if not _same(got, want):
                mismatches.append(f"{name}:{row.line} {row.name} {model}.{key}: {got!r} != {want!r}")
    assert not mismatches, "\n".join(mismatches[:40])
    assert checked == 24 * len(expected["rows"])


def test_every_computed_column_is_compared(sheet):
    _, _, _, expected, _ = sheet
    letters = set(expected["columns"])
    # X..AT are all computed columns (W = Calculation too)
    want = {"W", "X", "Y", "Z", "AA", "AB", "AC", "AD", "AE", "AF", "AG", "AH", "AI", "AJ",
            "AK", "AL", "AM", "AN", "AO", "AP", "AQ", "AR", "AS", "AT"}
    assert letters == want


def test_totals_match_sheet(sheet):
    name, _, _, expected, net = sheet
    assert expected["totals"]["dram"]  # the loader found the totals rows
    for model, vals in expected["totals"].items():
        for key, want in vals.items():
            assert net["totals"][model][key] == pytest.approx(want, rel=1e-9), (name, model, key)


def test_googlenet_inception_block_dram_rows(shared_dir):
    path = shared_dir / "reference" / "nvdla_spreadsheet" / "googlenet.csv"
    cfg, layers, expected = read_sheet_csv(path)
    blocks = expected["blocks"]
    assert len(blocks) == 7  # 3a, 3b, 4a..4e
    # the sheet divides every block's weights by 3b's CV-SRAM batching size (absolute reference)
    div = next(ly.sram_batch for ly in layers if ly.name.lower().startswith("inception 3b"))
    assert div == 11
    for b in blocks:
        got = sheet_block_dram(cfg, layers[b["start"]:b["stop"]], div)
        assert got["dram_traffic"] == pytest.approx(b["dram_traffic"], rel=1e-9), b["line"]
        assert got["dram_cycles"] == b["dram_cycles"], b["line"]
        assert (got["max_cycles"], got["long_pole"]) == (b["max_cycles"], b["long_pole"])


def test_published_totals(shared_dir):
    d = shared_dir / "reference" / "nvdla_spreadsheet"
    cfg, layers, _ = read_sheet_csv(d / "resnet50.csv")
    tot = sheet_network(cfg, layers)["totals"]
    assert tot["dram"]["total_time_ms"] == pytest.approx(7.113691, rel=1e-12)
    assert tot["sram"]["total_time_ms"] == pytest.approx(5.161544, rel=1e-12)
    assert tot["dram"]["fps"] == pytest.approx(140.57400019202407, rel=1e-12)
    assert tot["dram"]["hw_mac_effi"] == pytest.approx(0.23158160791634047, rel=1e-12)
    assert tot["dram"]["network_mac_effi"] == pytest.approx(0.26745496817334347, rel=1e-12)
    assert tot["sram"]["hw_mac_effi"] == pytest.approx(0.27511922788994919, rel=1e-12)
    assert tot["sram"]["network_mac_effi"] == pytest.approx(0.36860908286357724, rel=1e-12)
    cfg, layers, _ = read_sheet_csv(d / "googlenet.csv")
    tot = sheet_network(cfg, layers)["totals"]
    assert tot["dram"]["total_cycles"] == 1222071
    assert tot["dram"]["total_time_ms"] == pytest.approx(1.222071, rel=1e-12)
    assert tot["dram"]["fps"] == pytest.approx(818.28306211341248, rel=1e-12)
    assert tot["dram"]["hw_mac_effi"] == pytest.approx(0.43188079906977583, rel=1e-12)
    assert tot["dram"]["network_mac_effi"] == pytest.approx(0.62722787792198653, rel=1e-12)
    assert tot["sram"]["total_cycles"] == pytest.approx(579712.5)
    assert tot["sram"]["fps"] == pytest.approx(1724.9929922159693, rel=1e-12)


def test_config_header(shared_dir):
    path = shared_dir / "reference" / "nvdla_spreadsheet" / "resnet50.csv"
    cfg = SheetConfig.from_csv(path)
    assert cfg == SheetConfig()  # defaults are the ResNet sheet's inputs
    assert (cfg.n_mac, cfg.cbuf_kb, cfg.dram_gbs, cfg.fc_batch) == (2048, 512, 10, 16)
    g = SheetConfig.from_csv(path.with_name("googlenet.csv"))
    assert g.smaller_rule == "min_weight" and g.min_input_extra_row == "always"


# ---- hand-computed single layers: independent of the CSV loader -------------------------------

RESNET = SheetConfig()


def _conv(**kw):
    base = dict(name="x", attribute="conv", C=64, H=56, W=56, K=64, R=3, S=3, Z=1)
    base.update(kw)
    return SheetLayer(**base)


def test_hand_resnet_res2a_branch2b():
    """64 -> 64, 3x3, 56x56: Winograd MACs, 4x4 weights, DRAM-only K rounded to 128."""
    ly = _conv()
    d = sheet_layer(RESNET, ly, sram=False)
    assert d["calculation"] == 64 * 64 * 9 * 56 * 56
    assert d["input_data_size"] == 64 * 56 * 56 / 1024 == 196
    assert d["min_input_data_size"] == 64 * 56 * 3 / 1024 == 10.5
    assert d["weight_data_size"] == 64 * 16 * 64 / 1024 == 64  # Winograd 4x4 kernels
    assert d["min_weight_data_size"] == 64 * 9 * 32 / 1024 == 18
    assert d["smaller_sized"] == "weight" and d["factor"] == 1
    assert d["dram_traffic"] == 196 + 196 + 64
    assert d["dram_cycles"] == 45600  # 456 KB / 10 GB/s at 1 GHz (sheet units)
    assert d["mac_cycles"] == 64 * 3136 * 128 * 9 / 2048 / 2.25 == 50176
    assert d["max_cycles"] == 50176 and d["long_pole"] == "MAC"
    s = sheet_layer(RESNET, ly, sram=True)  # default placement: weights from DRAM, fmaps in SRAM
    assert s["mac_cycles"] == 25088
    assert (s["dram_traffic"], s["dram_cycles"]) == (64, 6400)
    assert (s["cvsram_read_cycles"], s["cvsram_write_cycles"]) == (7840, 7840)
    assert s["max_cycles"] == 25088 and s["long_pole"] == "MAC"


def test_hand_resnet_weight_restream():
    """Res3a_branch1: 256 -> 512, 1x1 stride 2: 512 KB of weights do not fit next to the
    minimum input window (512 - 28 KB), so the input is streamed twice."""
    ly = _conv(C=256, K=512, R=1, S=1, stride_h=2, stride_w=2)
    d = sheet_layer(RESNET, ly, sram=False)
    assert d["input_data_size"] == 1024 * 28 * 28 / 1024 == 784
    assert d["min_input_data_size"] == 28
    assert d["weight_data_size"] == 512
    assert d["factor"] == 2
    assert d["dram_traffic"] == 784 * 2 + 392 + 512 == 2472
    assert d["dram_traffic_batched"] == 1688
    assert d["mac_cycles"] == 1024 * 28 * 28 * 512 / 4 / 2048 == 50176
    assert d["long_pole"] == "DRAM" and d["max_cycles"] == 247200


def test_hand_feature_resident_and_elwise():
    ly = _conv(attribute="conv + elwise", C=512, H=7, W=7, K=2048, R=1, S=1)
    d = sheet_layer(RESNET, ly, sram=False)
    assert d["smaller_sized"] == "feature" and d["factor"] == 1
    assert d["dram_traffic"] == 24.5 + 98 + 1024 + 98  # elwise operand read back


def test_hand_fc_and_sram_placement():
    ly = SheetLayer(name="fc1000", attribute="fc", C=2048, H=1, W=1, K=1000, R=1, S=1,
                    placement=SramPlacement(dram_input=1, dram_weight_div=16))
    d = sheet_layer(RESNET, ly, sram=False)
    assert d["mac_cycles"] == 1000  # C*K/MACs, no rounding
    assert d["output_data_size"] == 1008 / 1024
    assert d["dram_traffic_batched"] == 2 + 1008 / 1024 + 2000 / 16
    s = sheet_layer(RESNET, ly, sram=True)
    assert s["dram_traffic"] == 2 + 2000 / 16 and s["dram_cycles"] == 12700


def test_hand_pooling_output():
    ly = _conv(C=3, H=224, W=224, K=64, R=7, S=7, stride_h=2, stride_w=2, pooling=True,
               pool_h=3, pool_w=3, pool_stride_h=2, pool_stride_w=2)
    assert ly.out_hw() == (112, 112) and ly.pooled_hw() == (56, 56)
    d = sheet_layer(RESNET, ly, sram=False)
    assert d["min_input_data_size"] == 16 * 112 * 8 / 1024 == 14  # strided: one extra row
    assert d["output_data_size"] == 196 and d["weight_data_size"] == 16


# ---- malformed input -------------------------------------------------------------------------

def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "bad.csv"
    p.write_text(text)
    return p


def test_malformed_csv_errors(tmp_path, shared_dir):
    good = (shared_dir / "reference" / "nvdla_spreadsheet" / "resnet50.csv").read_text()
    lines = good.splitlines()
    idx = next(i for i, ln in enumerate(lines) if ln.startswith("layer,"))
    cells = lines[idx].split(",")
    cells[4] = "abc"  # column E (C)
    bad = lines[:idx] + [",".join(cells)] + lines[idx + 1:]
    with pytest.raises(ValueError, match=rf"bad.csv:{idx + 1}: column E"):
        read_sheet_csv(_write(tmp_path, "\n".join(bad)))
    bad = [ln for ln in lines if not ln.startswith("col,")]
    with pytest.raises(ValueError, match="missing the 'col'"):
        read_sheet_csv(_write(tmp_path, "\n".join(bad)))
    bad = lines[:idx] + [lines[idx] + ",extra"] + lines[idx + 1:]
    with pytest.raises(ValueError, match=rf"bad.csv:{idx + 1}: .*cells"):
        read_sheet_csv(_write(tmp_path, "\n".join(bad)))
    bad = [ln.replace("#,DRAM BW Limitation,10", "#,DRAM BW Limitation,ten") for ln in lines]
    with pytest.raises(ValueError, match=r"bad.csv:\d+: column 3"):
        read_sheet_csv(_write(tmp_path, "\n".join(bad)))
