"""Energy tables: the shipped numbers equal their cited sources, the rules (interpolation, SRAM
fit) are computed independently here, and bad tables give errors naming file, key and value.
A chip's energy rates (hw.energy.rates) equal a hand calculation from the table."""

import math
import tomllib

import numpy as np
import pytest

from hw.configfile import load_chip_config
from hw.energy import (
    DRAM_KINDS, EnergyError, HardwareFacts, energy_rates, load_technology, register_bits_per_mac,
    technology_names,
)
from hw.energy.tech import DATA_DIR
from hw.nvdla.config import load_nvdla_config
from hw.systolic.config import Dataflow


def test_shipped_tables():
    assert technology_names() == ["45nm", "16nm", "7nm"]
    for name in technology_names():
        assert load_technology(name).name == name


def test_45nm_is_horowitz_isscc_2014():
    # Horowitz, ISSCC 2014 (45 nm, 0.9 V): 8b add 0.03, 32b add 0.1, 8b mult 0.2, 32b mult 3.1,
    # fp16 add 0.4 / mult 1.1, fp32 add 0.9 / mult 3.7 pJ; 64-bit SRAM read 8 KB 10 pJ, 32 KB
    # 20 pJ, 1 MB 100 pJ.
    t = load_technology("45nm")
    assert (t.int_add(8), t.int_add(32), t.int_mult(8), t.int_mult(32)) == (0.03, 0.1, 0.2, 3.1)
    assert t.fp_ops_pj == {"fp16_add": 0.4, "fp32_add": 0.9, "fp16_mult": 1.1, "fp32_mult": 3.7}
    assert t.sram_read_pj_per_64b == (10.0, 20.0, 100.0)
    # MACs: multiply at the operand width + add at the accumulator width.
    assert t.mac_pj("int8") == pytest.approx(0.2 + 0.1)
    assert t.mac_pj("fp16") == pytest.approx(1.1 + 0.9)
    assert t.mac_pj("fp32") == pytest.approx(3.7 + 0.9)
    # bf16 and fp8 (estimates, upper bounds): an fp16 multiply / an 8-bit integer multiply,
    # each with an fp32 add (they accumulate in fp32)
    assert t.mac_pj("bf16") == pytest.approx(1.1 + 0.9)
    assert t.mac_pj("fp8_e4m3") == t.mac_pj("fp8_e5m2") == pytest.approx(0.2 + 0.9)
    # int16 multiply: power law through (8, 0.2) and (32, 3.1): 0.2 * 2^(log(15.5)/log(4)).
    assert t.mac_pj("int16", 32) == pytest.approx(0.2 * 15.5 ** 0.5 + 0.1)


def test_7nm_is_jouppi_isca_2021():
    t = load_technology("7nm")
    assert (t.int_add(8), t.int_add(32), t.int_mult(8), t.int_mult(32)) == (0.007, 0.03, 0.07, 1.48)
    assert t.fp_ops_pj == {"fp16_add": 0.16, "fp32_add": 0.38, "fp16_mult": 0.34, "fp32_mult": 1.31}
    assert t.sram_read_pj_per_64b == (7.5, 8.5, 14.0)


def test_16nm_is_the_log_node_interpolation_of_45_and_7():
    a, b, m = (load_technology(n) for n in ("45nm", "16nm", "7nm"))
    t = math.log(45 / 16) / math.log(45 / 7)

    def interp(x45, x7):
        return x45 * (x7 / x45) ** t

    pairs = [(a.int_add(8), m.int_add(8), b.int_add(8)), (a.int_add(32), m.int_add(32), b.int_add(32)),
             (a.int_mult(8), m.int_mult(8), b.int_mult(8)),
             (a.int_mult(32), m.int_mult(32), b.int_mult(32)),
             (a.register_pj_per_bit, m.register_pj_per_bit, b.register_pj_per_bit)]
    pairs += [(a.fp_ops_pj[k], m.fp_ops_pj[k], b.fp_ops_pj[k]) for k in a.fp_ops_pj]
    pairs += list(zip(a.sram_read_pj_per_64b, m.sram_read_pj_per_64b, b.sram_read_pj_per_64b))
    for x45, x7, x16 in pairs:
        assert x16 == pytest.approx(interp(x45, x7), rel=0.01)   # 3 significant digits
    # Memory and links do not depend on the logic node.
    assert a.dram_pj_per_bit == b.dram_pj_per_bit == m.dram_pj_per_bit
    assert a.link_pj_per_bit == b.link_pj_per_bit == m.link_pj_per_bit


@pytest.mark.parametrize("name", ["45nm", "16nm", "7nm"])
def test_sram_fit_is_a_least_squares_sqrt_fit(name):
    t = load_technology(name)
    x = np.sqrt(np.array(t.sram_capacity_kib))
    b, a = np.polyfit(x, np.array(t.sram_read_pj_per_64b), 1)
    assert t.sram_fit == pytest.approx((a, b))
    for kib, e64 in zip(t.sram_capacity_kib, t.sram_read_pj_per_64b):
        got = 64 * t.sram_pj_per_bit(kib * 1024)
        assert got == pytest.approx(a + b * math.sqrt(kib))
        assert abs(got / e64 - 1) < 0.1          # the fit stays within 10 % of the table
    # Energy grows with capacity, is linear in access width, clamps outside the table.
    assert t.sram_pj_per_bit(64 * 1024) > t.sram_pj_per_bit(16 * 1024)
    assert t.sram_access_pj(32 * 1024, 128) == pytest.approx(2 * t.sram_access_pj(32 * 1024, 64))
    assert t.sram_pj_per_bit(1024) == t.sram_pj_per_bit(8 * 1024)
    assert t.sram_pj_per_bit(8 << 20, write=True) == t.sram_pj_per_bit(1 << 20) * t.sram_write_to_read


def test_every_number_has_a_source_and_every_source_is_cited():
    for name in technology_names():
        t = load_technology(name)
        data = tomllib.loads((DATA_DIR / f"{name}.toml").read_text())
        used = set()
        assert len(t.entries) >= 25
        for e in t.entries:
            key = e.source.split(":")[0]
            assert key in t.sources or key in ("derived", "estimate"), (name, e)
            used.add(key)
        for key in data["sources"]:
            assert key in used or any(key in e.source for e in t.entries), (name, key)
        for kind in DRAM_KINDS:
            assert t.dram_energy_pj_per_bit(kind) > 0
        # to_dict carries the full citation text for reports
        cited = t.to_dict()["entries"]
        assert all(c["source"] for c in cited)
        assert all(c["references"] for c in cited if not c["source"].startswith("estimate"))
        assert any("ISSCC 2014" in r for c in cited for r in c["references"])


def _write(tmp_path, text: str):
    p = tmp_path / "my.toml"
    p.write_text(text)
    return p


def _base_text() -> str:
    return (DATA_DIR / "45nm.toml").read_text()


@pytest.mark.parametrize("edit, message", [
    (("int_mult = { bits = [8, 32], pj = [0.2, 3.1], source = \"horowitz2014\" }",
      "int_mult = { bits = [8, 32], pj = [0.2, -3.1], source = \"horowitz2014\" }"),
     "[ops] int_mult.pj[1] = -3.1: must be a positive number"),
    (("fp16_add = { pj = 0.4, source = \"horowitz2014\" }", "fp16_add = { pj = 0.4 }"),
     "[ops] fp16_add.source = None: every number needs a source"),
    (("fp16_add = { pj = 0.4, source = \"horowitz2014\" }",
      "fp16_add = { pj = 0.4, source = \"somebody2020\" }"),
     "[ops] fp16_add.source = 'somebody2020': must name a [sources] key"),
    (("hbm3 = {", "hbm9 = {"), "[dram] hbm3 = None: missing"),
    (("[static]", "[statics]"), "unknown table [statics]"),
    (("pj_per_bit_hop = { value = 0.24", "pj_per_bit_hop = { value = -1"),
     "[noc] pj_per_bit_hop.value = -1: must be a positive number"),
    (("pj_per_bit_hop = {", "pj_per_hop = {"), "[noc] pj_per_hop"),
])
def test_bad_tables_name_file_key_and_value(tmp_path, edit, message):
    old, new = edit
    text = _base_text()
    assert old in text
    path = _write(tmp_path, text.replace(old, new, 1))
    with pytest.raises(EnergyError) as err:
        load_technology(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_bad_names_and_requests():
    with pytest.raises(EnergyError, match="'5nm': not a shipped table .*45nm, 16nm, 7nm"):
        load_technology("5nm")
    with pytest.raises(EnergyError, match="no such energy table"):
        load_technology("/nonexistent/x.toml")
    t = load_technology("45nm")
    with pytest.raises(EnergyError, match="precision = 'int2': must be one of .*binary"):
        t.mac_pj("int2")
    with pytest.raises(EnergyError, match="dram type = 'sdram'"):
        t.dram_energy_pj_per_bit("sdram")


def test_a_user_copy_is_used(tmp_path):
    path = _write(tmp_path, _base_text().replace("pj = [0.2, 3.1]", "pj = [0.4, 3.1]"))
    assert load_technology(path).mac_pj("int8") == pytest.approx(0.4 + 0.1)


def test_the_network_figure_is_park_2012_per_hop_and_optional_in_a_user_copy(tmp_path):
    """[noc]: Park et al. (DAC 2012) measured 531.4 mW at 892 Gb/s on a 4x4 mesh; over its
    2.5 mean hops that is 0.24 pJ per bit per hop, the same in every shipped table. A copy
    written before the table existed leaves it out and gets that figure."""
    per_bit = 531.4e-3 / 892e9 * 1e12
    for name in technology_names():
        assert load_technology(name).noc_pj_per_bit_hop == pytest.approx(per_bit / 2.5, rel=0.01)
    text = _base_text()
    start = text.index("[noc]")
    old = _write(tmp_path, text[:start] + text[text.index("\n[", start + 1):])
    assert "[noc]" not in old.read_text()
    assert load_technology(old).noc_pj_per_bit_hop == load_technology("45nm").noc_pj_per_bit_hop


# ---- energy rates of a chip (hw.energy.rates) ----------------------------------------------

SMALL = ["array.rows=4", "array.cols=4", "array.dataflow=ws", "sram.ifmap.capacity_kib=8",
         "sram.filter.capacity_kib=8", "sram.ofmap.capacity_kib=8"]


def test_register_bits_per_mac_follow_the_dataflow():
    # WS and IS latch the passing operand and the partial sum, OS both operands and its sum.
    assert [register_bits_per_mac(df, 8, 32) for df in ("ws", "is", "os")] == [40, 40, 48]
    assert register_bits_per_mac(Dataflow.OS, 16, 64) == 96


def test_systolic_rates_by_hand():
    chip = load_chip_config(None, SMALL)
    t = load_technology("45nm")
    r = energy_rates(t, HardwareFacts.systolic(chip))
    assert (r.technology, r.precision, r.acc_bits, r.dataflow) == ("45nm", "int8", 32, "ws")
    assert r.mac_pj == pytest.approx(0.2 + 0.1)                          # Horowitz 45 nm
    assert r.vector_op_pj == pytest.approx(0.1 + t.int_mult(16))          # 32-bit add, 16-bit mult
    assert r.register_bits_per_mac == 40
    assert r.register_bits_per_mac_by_dataflow == {"os": 48, "ws": 40, "is": 40}
    for name in ("ifmap", "filter", "ofmap"):
        s = r.scratchpads[name]
        banks = chip.sram(name).banks
        assert (s.capacity_bytes, s.bank_bytes) == (8192, 8192 / banks)
        assert s.read_pj_per_bit == t.sram_pj_per_bit(8192 / banks)
        assert s.write_pj_per_bit == t.sram_pj_per_bit(8192 / banks, write=True)
    assert (r.dram_preset, r.dram_kind, r.dram_kind_assumed) == ("ddr4-3200", "ddr4", False)
    assert (r.dram_pj_per_bit, r.link_kind, r.link_pj_per_bit) == (20.3, "pcie", 1.9)
    # 16 MACs x (282 + 137) um2 and 24 KiB of bit cells (0.346 um2 / 0.7 efficiency), 20 mW/mm2
    assert r.area_mm2["mac"] == pytest.approx(16 * (282 + 137) / 1e6)
    assert r.area_total_mm2 == pytest.approx((16 * (282 + 137) + 24 * 1024 * 8 * 0.346 / 0.7) / 1e6)
    assert r.leakage_w == pytest.approx(20e-3 * r.area_total_mm2)


@pytest.mark.parametrize("preset, override, kind, assumed", [
    ("ddr4-3200", None, "ddr4", False), ("hbm2", None, "hbm2", False),
    ("lpddr5-6400", None, "lpddr5", False), ("ideal", None, "ddr4", True),
    ("ideal", "hbm3", "hbm3", False), ("ddr4-3200", "lpddr4", "lpddr4", False),
])
def test_the_dram_type_follows_the_preset_else_ddr4_is_assumed(preset, override, kind, assumed):
    t = load_technology("16nm")
    chip = load_chip_config(None, [f'dram.preset="{preset}"'])
    r = energy_rates(t, HardwareFacts.systolic(chip), dram_kind=override)
    assert (r.dram_kind, r.dram_kind_assumed) == (kind, assumed)
    assert r.dram_pj_per_bit == t.dram_energy_pj_per_bit(kind)


def test_nvdla_rates_charge_cbuf_banks_and_cacc_width():
    cfg = load_nvdla_config("nv_small")
    t = load_technology("16nm")
    r = energy_rates(t, HardwareFacts.nvdla(cfg, "int8"), link_kind="on_package")
    bank = cfg.cbuf_bank_width_bytes * cfg.cbuf_bank_depth
    assert list(r.scratchpads) == ["cbuf"]
    assert (r.scratchpads["cbuf"].capacity_bytes, r.scratchpads["cbuf"].bank_bytes) == (
        bank * cfg.cbuf_banks, bank)
    assert (r.acc_bits, r.mac_pj) == (34, t.mac_pj("int8", 34))          # CACC's 34-bit sums
    assert r.register_bits_per_mac is None and r.register_bits_per_mac_by_dataflow == {}
    assert (r.dram_kind, r.dram_kind_assumed) == ("ddr4", True)            # nv_small names none
    assert r.link_pj_per_bit == t.link_energy_pj_per_bit("on_package")
    assert r.area_mm2["mac"] == pytest.approx(cfg.macs("int8") * t.mac_area_um2("int8", 34) / 1e6)


def test_unknown_dram_and_link_types_are_errors():
    chip = HardwareFacts.systolic(load_chip_config(None, SMALL))
    t = load_technology("45nm")
    with pytest.raises(EnergyError, match="dram type = 'sdram': must be one of"):
        energy_rates(t, chip, dram_kind="sdram")
    with pytest.raises(EnergyError, match="link type = 'usb': must be one of"):
        energy_rates(t, chip, link_kind="usb")
