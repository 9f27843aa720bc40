"""The NVDLA register file (hw/nvdla/regfile.py): the shipped register map equals a fresh
generation from NVIDIA's RDL, addresses and fields checked by hand against the RDL text and
NVIDIA's generated headers, ping-pong groups, launch/complete, interrupts, LUT access, errors."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from hw.nvdla.regfile import RegisterError, RegisterFile, RegView, register_map

REPO = Path(__file__).resolve().parents[3]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_nvdla_registers",
                                                  REPO / "scripts" / "gen_nvdla_registers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_shipped_table_is_the_rdl_regenerated(shared_dir):
    gen = _generator()
    fresh = gen.dumps(gen.generate(shared_dir / "nvdla" / "rdl"))
    shipped = (REPO / "hw" / "nvdla" / "reg_data" / "registers.json").read_text()
    assert fresh == shipped, "run scripts/gen_nvdla_registers.py: the RDL and the table differ"
    assert len(json.loads(shipped)["units"]) == 17


def test_every_rdl_register_is_in_the_map(shared_dir):
    """Count `reg {` blocks in each RDL file independently of the generator's parser."""
    m = register_map()
    for rdl in sorted((shared_dir / "nvdla" / "rdl").glob("NVDLA_*.rdl")):
        unit = rdl.stem.removeprefix("NVDLA_")
        assert len(m.units[unit]) == rdl.read_text().count("reg {"), unit


@pytest.mark.parametrize("key, address, reset", [
    # addresses: unit base (RDL addrmap "NVDLA_SDP_RDMA @0x8000") + register offset; the same
    # numbers NVIDIA's generated register tables list (NVDLA_SDP_RDMA_D_BRDMA_CFG_0 0x8028, reset 1)
    ("SDP_RDMA.S_STATUS", 0x8000, 0x0),
    ("SDP_RDMA.D_BRDMA_CFG", 0x8028, 0x1),
    ("SDP_RDMA.D_BS_LINE_STRIDE", 0x8034, 0x0),
    ("GLB.S_INTR_STATUS", 0x100C, 0x0),
    ("CDMA.S_ARBITER", 0x3008, 0x0003000F),   # ARB_WEIGHT reset 15, ARB_WMB reset 3
    ("SDP.D_FEATURE_MODE_CFG", 0x90B0, 0x0),
    ("CFGROM.CFGROM_HW_VERSION", 0x0, 0x00010001),   # no '@' in the RDL: sequential from 0
])
def test_addresses_and_resets(key, address, reset):
    reg = register_map()[key]
    assert reg.address == address and reg.reset == reset
    assert register_map().at(address) is reg


def test_field_and_enum_decoding():
    v = RegView.from_dict({"SDP.D_FEATURE_MODE_CFG": 0x2, "SDP_RDMA.D_BRDMA_CFG": 0b11011})
    assert v.enum("SDP.D_FEATURE_MODE_CFG", "FLYING_MODE") == "OFF"
    assert v.enum("SDP.D_FEATURE_MODE_CFG", "OUTPUT_DST") == "PDP"
    # 0b11011: DISABLE 1 (YES), DATA_USE 0b01 (ALU), DATA_SIZE 1 (TWO_BYTE), MODE 1 (PER_ELEMENT)
    assert [v.enum("SDP_RDMA.D_BRDMA_CFG", f) for f in
            ("BRDMA_DISABLE", "BRDMA_DATA_USE", "BRDMA_DATA_SIZE", "BRDMA_DATA_MODE")] == \
        ["YES", "ALU", "TWO_BYTE", "PER_ELEMENT"]
    assert v["SDP_RDMA.D_NRDMA_CFG"] == 1          # unwritten: reset (NRDMA_DISABLE = YES)
    v2 = RegView.from_dict({"CDP.D_DATIN_OFFSET": 0xFF80})
    assert v2.signed("CDP.D_DATIN_OFFSET", "DATIN_OFFSET") == -128


def test_ping_pong_groups_launch_and_complete():
    rf = RegisterFile()
    rf.write("PDP.D_DATA_CUBE_IN_WIDTH", 7)        # group 0 (producer 0)
    rf.write("PDP.S_POINTER", 1)
    rf.write("PDP.D_DATA_CUBE_IN_WIDTH", 3)        # group 1
    assert rf.read("PDP.D_DATA_CUBE_IN_WIDTH") == 3
    assert rf.view()["PDP.D_DATA_CUBE_IN_WIDTH"] == 7       # the datapath sees consumer group 0
    rf.write("PDP.D_OP_ENABLE", 1)                 # group 1 enabled while consumer is 0
    assert not rf.ready("PDP") and rf.read("PDP.S_STATUS") == 2 << 16      # PENDING
    rf.write("PDP.S_POINTER", 0)
    rf.write("PDP.D_OP_ENABLE", 1)
    assert rf.ready("PDP") and rf.read("PDP.S_STATUS") == 1 | 2 << 16      # RUNNING, PENDING
    assert rf.complete("PDP", ("PDP",)) == 0
    assert rf.read("PDP.S_POINTER") == 1 << 16     # consumer flipped to group 1
    assert rf.ready("PDP") and rf.view()["PDP.D_DATA_CUBE_IN_WIDTH"] == 3
    assert rf.read("GLB.S_INTR_STATUS") == 1 << 4  # PDP_DONE_STATUS0
    assert rf.interrupt_set("PDP", 0) and not rf.interrupt_set("PDP", 1)
    rf.complete("PDP", ("PDP",))
    assert rf.read("GLB.S_INTR_STATUS") == 0b11 << 4 and rf.read("PDP.S_STATUS") == 0


def test_interrupt_status_is_write_one_to_clear_and_masked_line():
    rf = RegisterFile()
    rf.write("GLB.S_INTR_SET", 0b101)              # SDP_DONE_SET0, CDP_DONE_SET0
    assert rf.read("GLB.S_INTR_STATUS") == 0b101 and rf.interrupt_pending()
    rf.write("GLB.S_INTR_STATUS", 0)               # writing 0 clears nothing
    assert rf.read("GLB.S_INTR_STATUS") == 0b101
    rf.write("GLB.S_INTR_MASK", 0b101)
    assert not rf.interrupt_pending() and rf.read("GLB.S_INTR_STATUS") == 0b101
    rf.write("GLB.S_INTR_STATUS", 0b001)
    assert rf.read("GLB.S_INTR_STATUS") == 0b100


def test_lut_access_auto_increments_and_bounds():
    rf = RegisterFile()
    rf.write("SDP.S_LUT_ACCESS_CFG", 1 << 16 | 255)    # LO table, entry 255
    rf.write("SDP.S_LUT_ACCESS_DATA", 0x1234)
    rf.write("SDP.S_LUT_ACCESS_DATA", 0xABCD5678)      # only LUT_DATA[15:0] is kept
    le, lo = rf.view().lut("SDP")
    assert lo[255:] == [0x1234, 0x5678] and le == [0] * 65
    with pytest.raises(RegisterError, match=r"entry 257 of the LO table, which has 257"):
        rf.write("SDP.S_LUT_ACCESS_DATA", 1)


def test_read_only_writes_are_dropped_and_flush_status_reads_done():
    rf = RegisterFile()
    rf.write("SDP.S_STATUS", 0xFFFFFFFF)
    rf.write("SDP.D_PERF_WDMA_WRITE_STALL", 5)
    assert rf.read("SDP.S_STATUS") == 0 and rf.read("SDP.D_PERF_WDMA_WRITE_STALL") == 0
    assert rf.read("CDMA.S_CBUF_FLUSH_STATUS") == 1


@pytest.mark.parametrize("key, value, match", [
    ("SDP.D_DP_BS_CFX", 0, r"SDP has no register 'D_DP_BS_CFX' .*did you mean D_DP_BS_CFG"),
    ("XYZ.D_OP_ENABLE", 0, r"unknown unit 'XYZ'; units: BDMA, CACC"),
    ("D_OP_ENABLE", 0, r"write it as UNIT.REGISTER"),
    ("SDP.D_OP_ENABLE", 1 << 32, r"32-bit unsigned"),
    ("SDP.D_OP_ENABLE", -1, r"32-bit unsigned"),
])
def test_bad_registers_are_named(key, value, match):
    with pytest.raises(RegisterError, match=match):
        RegisterFile().write(key, value)


def test_bad_field_and_enum_value_are_named():
    v = RegView.from_dict({"PDP.D_OPERATION_MODE_CFG": 3})     # POOLING_METHOD 3 is undefined
    with pytest.raises(RegisterError, match=r"POOLING_METHOD = 3: not a defined value; allowed: "
                                            r"POOLING_METHOD_AVERAGE \(0\)"):
        v.enum("PDP.D_OPERATION_MODE_CFG", "POOLING_METHOD")
    with pytest.raises(RegisterError, match=r"no field 'METHOD'; fields: POOLING_METHOD"):
        v.field("PDP.D_OPERATION_MODE_CFG", "METHOD")
    with pytest.raises(RegisterError, match=r"has no register"):
        RegView.from_dict({"PDP.D_NOPE": 1})
