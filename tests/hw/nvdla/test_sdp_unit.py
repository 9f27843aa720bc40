"""The SDP from its registers (hw/nvdla/sdp_unit.py): NVIDIA's 20 nv_small sdp_* trace tests,
register decoding checked by hand on two traces, the operand DMA layouts on hand-placed memory,
the numpy gold model against the Numba datapath on random registers, and clear errors.

Sources: C model cmod/sdp/NV_NVDLA_sdp.cpp (SdpRdmaCore, ExtractRdmaResponsePayloadCore,
WdmaSequenceDC), cmod/include/NvdlaPacker.cpp (ALU/MUL interleave of DATA_USE = BOTH),
cmod/hls/sdp/sdp.h + sdp_y_inp.cpp and vmod/nvdla/sdp/NV_NVDLA_SDP_HLS_Y_int_inp.v (the LUT's
signed slope shift); register fields: shared/nvdla/rdl/NVDLA_SDP.rdl, NVDLA_SDP_RDMA.rdl."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hw.nvdla.lut import LutParams
from hw.nvdla.memimage import SparseMemory
from hw.nvdla.regfile import RegView, register_map
from hw.nvdla.sdp import SdpCvtParams, SdpParams, SdpXParams, SdpYParams, sdp_apply
from hw.nvdla.sdp_unit import (operand_addresses, run_sdp, sdp_params_from_registers,
                               sdp_reference)
from hw.nvdla.surface import read_cube, write_cube
from hw.nvdla.trace import default_trace_dir, load_trace, play
from hw.systolic.config import ConfigError

REPO = Path(__file__).resolve().parents[3]
NV_SMALL = default_trace_dir(REPO) / "nv_small"
SDP_TRACES = sorted(p.name for p in NV_SMALL.glob("sdp_*")) if NV_SMALL.is_dir() else []


# ---------------------------------------------------------------------- helpers
def encode(fields: dict) -> dict:
    """{"UNIT.REG": {"FIELD": value or enum name}} -> {"UNIT.REG": word}, unnamed fields at
    their reset values (the register map of NVIDIA's RDL)."""
    m = register_map()
    out = {}
    for key, fs in fields.items():
        reg = m[key]
        word = reg.reset
        for name, val in fs.items():
            f = reg.field(name)
            if isinstance(val, str):
                val = f.enum[val]
            word = (word & ~f.mask) | ((val << f.lsb) & f.mask)
        out[key] = word
    return out


def layer(h, w, c, *, precision="INT8", src=0x1000, dst=0x9000, flying=False, **extra):
    """Registers of an SDP layer, every unit bypassed, identity output converter: input from
    memory at ``src`` (line stride w * 8, surface stride h * w * 8) or on the fly, output at
    ``dst`` with the same strides. ``extra``: more {"UNIT.REG": {field: value}}."""
    ls, ss = w * 8, h * w * 8
    f = {
        "SDP.D_DATA_CUBE_WIDTH": {"WIDTH": w - 1}, "SDP.D_DATA_CUBE_HEIGHT": {"HEIGHT": h - 1},
        "SDP.D_DATA_CUBE_CHANNEL": {"CHANNEL": c - 1},
        "SDP.D_DATA_FORMAT": {"PROC_PRECISION": precision, "OUT_PRECISION": precision},
        "SDP.D_FEATURE_MODE_CFG": {"FLYING_MODE": "ON" if flying else "OFF"},
        "SDP.D_DST_BASE_ADDR_LOW": {"DST_BASE_ADDR_LOW": dst},
        "SDP.D_DST_LINE_STRIDE": {"DST_LINE_STRIDE": ls},
        "SDP.D_DST_SURFACE_STRIDE": {"DST_SURFACE_STRIDE": ss},
        "SDP.D_DST_DMA_CFG": {"DST_RAM_TYPE": "MC"},
        "SDP.D_CVT_SCALE": {"CVT_SCALE": 1},
        "SDP_RDMA.D_DATA_CUBE_WIDTH": {"WIDTH": w - 1},
        "SDP_RDMA.D_DATA_CUBE_HEIGHT": {"HEIGHT": h - 1},
        "SDP_RDMA.D_DATA_CUBE_CHANNEL": {"CHANNEL": c - 1},
        "SDP_RDMA.D_FEATURE_MODE_CFG": {"FLYING_MODE": "ON" if flying else "OFF",
                                        "IN_PRECISION": precision,
                                        "PROC_PRECISION": precision,
                                        "OUT_PRECISION": precision},
        "SDP_RDMA.D_SRC_BASE_ADDR_LOW": {"SRC_BASE_ADDR_LOW": src},
        "SDP_RDMA.D_SRC_LINE_STRIDE": {"SRC_LINE_STRIDE": ls},
        "SDP_RDMA.D_SRC_SURFACE_STRIDE": {"SRC_SURFACE_STRIDE": ss},
        "SDP_RDMA.D_SRC_DMA_CFG": {"SRC_RAM_TYPE": "MC"},
    }
    for key, fs in extra.items():
        f.setdefault(key.replace("__", "."), {}).update(fs)
    return f


def view(fields, luts=None) -> RegView:
    return RegView.from_dict(encode(fields), luts)


def trace_inputs(name):
    """(RegView, SparseMemory) of an SDP-only trace: every reg_write before the SDP starts, the
    LUT tables as S_LUT_ACCESS_CFG/DATA write them, and the memory after its mem_init/mem_load."""
    t = load_trace(NV_SMALL / name)
    values, tables, addr, tid = {}, {0: [0] * 65, 1: [0] * 257}, 0, 0
    mem = SparseMemory()
    for c in t.commands:
        if c.op == "reg_write":
            key, v = c.args
            if key == "SDP.S_LUT_ACCESS_CFG":   # LUT_ADDR[9:0], LUT_TABLE_ID[16]
                addr, tid = v & 0x3FF, (v >> 16) & 1
            elif key == "SDP.S_LUT_ACCESS_DATA":  # each write stores one entry, address + 1
                tables[tid][addr] = v & 0xFFFF
                addr += 1
            elif not key.endswith("D_OP_ENABLE"):
                values[key] = v
        elif c.op == "mem_init":
            mem.fill(c.args[1], c.args[2], c.args[3])
        elif c.op == "mem_load":
            mem.load_dat(c.args[1], t.folder / c.args[2])
    return RegView.from_dict(values, {"SDP": (tables[0], tables[1])}), mem


# ---------------------------------------------------------------------- NVIDIA's traces
def test_all_twenty_sdp_traces_are_found(nv_small_traces):
    # every trace's CRC and numpy agreement: tests/hw/nvdla/test_trace.py
    assert len(SDP_TRACES) == 20


def test_sdp_to_pdp_on_the_fly(nv_small_traces):
    """OUTPUT_DST = PDP: the SDP's cube goes to the PDP, not to memory."""
    r = play(nv_small_traces / "sdp_pdp_32x16x32_pass_through_int8_0")
    assert r.passed, r.line()
    sdp = r.layers[0]
    assert sdp.unit == "sdp" and sdp.detail["output"].startswith("PDP")
    assert r.layers[1].unit == "pdp" and sdp.out.shape == (16, 32, 32)


def test_trace_registers_decode_by_hand(nv_small_traces):
    """sdp_5x24x18_bs_int8_mem_0: D_DP_BS_CFG 0x50 = BS on, ALU on, ALGO 0 (MAX), MUL_BYPASS,
    no PReLU, RELU_BYPASS; BS_ALU_CFG 0x1401 = SRC MEM, shift 0x14 = 20; BS_MUL_CFG 0x1e01 =
    SRC MEM, shift 30; operands 0xd3bf = -11329, 0xa798 = -22632; BRDMA_CFG 0x32 = enabled,
    DATA_USE 1 (ALU), ONE_BYTE, PER_ELEMENT (bit 4), MC; cube W 4+1, H 0x17+1 = 24, C 0x11+1
    = 18 -> 24 lanes (3 atoms of 8). BS base 0x900000c0, line 0xc0, surface 0x1360: operand
    (h, w, k) at 0x900000c0 + (k // 8) * 0x1360 + h * 0xc0 + w * 8 + k % 8 (one byte)."""
    regs, mem = trace_inputs("sdp_5x24x18_bs_int8_mem_0")
    params, ew = sdp_params_from_registers(regs, mem)
    bs = params.bs
    assert (bs.bypass, bs.alu_bypass, bs.alu_algo, bs.alu_src, bs.alu_shift_value) == \
        (False, False, "MAX", "MEM", 20)
    assert (bs.mul_bypass, bs.mul_src, bs.mul_shift_value, bs.mul_prelu, bs.relu_bypass) == \
        (True, "MEM", 30, False, True)
    assert (bs.alu_operand, bs.mul_operand) == (-11329, -22632)
    assert (bs.data_mode, bs.data_size) == ("PER_ELEMENT", "ONE_BYTE")
    assert params.bn.bypass and params.ew.bypass and ew is None
    assert (params.cvt.cvt_offset, params.cvt.cvt_scale, params.cvt.cvt_shift) == (0, 1, 0)
    assert bs.alu_data.shape == (24, 5, 24) and bs.mul_data is None
    # first bytes of sdp_5x24x18_bs_int8_mem_0_bs.dat (loaded at 0x900000c0):
    # offset 0x0: 00 78 f0 68 e0 58 d0 48, offset 0x8: 01 79 ...
    assert bs.alu_data[0, 0, :8].tolist() == [0, 0x78, 0xF0 - 256, 0x68, 0xE0 - 256, 0x58,
                                              0xD0 - 256, 0x48]
    assert bs.alu_data[0, 1, :2].tolist() == [1, 0x79]
    for (h, w, k) in ((1, 0, 0), (23, 4, 17), (5, 2, 9)):
        a = 0x900000C0 + (k // 8) * 0x1360 + h * 0xC0 + w * 8 + k % 8
        assert bs.alu_data[h, w, k] == mem.read(a, 1).view(np.int8)[0], (h, w, k)


def test_lut_trace_registers_decode_by_hand(nv_small_traces):
    """sdp_3x3x32_ew_lo_lin_int8: D_DP_EW_CFG 0x2f -> EW on, ALU/MUL bypassed, LUT on;
    S_LUT_CFG 0x71 = LE linear, all priorities LO; S_LUT_INFO 0x1fb00 -> offset 0, LE select
    0xfb = -5, LO select 1; LO slope scale 0x7f5c12b3 -> uflow 0x12b3 = 4787, oflow 0x7f5c =
    32604; LO slope shift 0x396 -> uflow 0x16, oflow 0x1c: the SDP reads these 5-bit fields as
    signed (cmod/hls/sdp/sdp.h yLutSlopeShiftType = ACINTT(5)): -10 and -4, left shifts."""
    regs, mem = trace_inputs("sdp_3x3x32_ew_lo_lin_int8")
    params, _ = sdp_params_from_registers(regs, mem)
    y = params.ew
    assert (y.bypass, y.alu_bypass, y.mul_bypass, y.lut_bypass) == (False, True, True, False)
    t = y.lut
    assert (t.le_function, t.uflow_priority, t.oflow_priority, t.hybrid_priority) == (1, 1, 1, 1)
    assert (t.le_index_offset, t.le_index_select, t.lo_index_select) == (0, -5, 1)
    assert (t.le_start, t.le_end, t.lo_start, t.lo_end) == (0x7F, 0x81, 0x53B19EB3, 0x53B1A0B3)
    assert (t.lo_slope_uflow_scale, t.lo_slope_oflow_scale) == (4787, 32604)
    assert (t.lo_slope_uflow_shift, t.lo_slope_oflow_shift) == (-10, -4)
    assert (t.le_slope_uflow_shift, t.le_slope_oflow_shift) == (9, 9)  # 0x129: 9 | 9 << 5


# ---------------------------------------------------------------------- operand layouts
def test_brdma_both_two_byte_per_element_interleaves_alu_and_mul():
    """X1 = (x + a) * m with a, m from one BRDMA, DATA_USE BOTH, TWO_BYTE, PER_ELEMENT: an
    element is 4 bytes (ALU int16, then MUL int16, NvdlaPacker's A0 M0 A1 M1), a channel group
    of 8 is 32 bytes per pixel. Cube 2x2x10 -> 16 lanes; BS base 0x40000, line 0x80, surface
    0x400: element (h, w, k) ALU at 0x40000 + (k // 8) * 0x400 + h * 0x80 + w * 32
    + (k % 8) * 4, MUL 2 bytes later; e.g. (1, 1, 9): 0x40000 + 0x400 + 0x80 + 32 + 4 = 0x404a4."""
    h, w, c = 2, 2, 10
    rng = np.random.default_rng(1)
    x = rng.integers(-5, 6, (h, w, 16)).astype(np.int8)
    a = rng.integers(-300, 300, (h, w, 16))
    m = rng.integers(-3, 4, (h, w, 16))
    mem = SparseMemory()
    write_cube(mem, 0x1000, w * 8, h * w * 8, x)
    for hh in range(h):
        for ww in range(w):
            for k in range(16):
                addr = 0x40000 + (k // 8) * 0x400 + hh * 0x80 + ww * 32 + (k % 8) * 4
                mem.write(addr, int(a[hh, ww, k]).to_bytes(2, "little", signed=True)
                          + int(m[hh, ww, k]).to_bytes(2, "little", signed=True))
    assert mem.read(0x404A4, 2).view(np.int16)[0] == a[1, 1, 9]
    f = layer(h, w, c, **{
        "SDP.D_DP_BS_CFG": {"BS_BYPASS": "NO", "BS_ALU_BYPASS": "NO", "BS_ALU_ALGO": "SUM",
                            "BS_MUL_BYPASS": "NO", "BS_MUL_PRELU": "NO",
                            "BS_RELU_BYPASS": "YES"},
        "SDP.D_DP_BS_ALU_CFG": {"BS_ALU_SRC": "MEM", "BS_ALU_SHIFT_VALUE": 0},
        "SDP.D_DP_BS_MUL_CFG": {"BS_MUL_SRC": "MEM", "BS_MUL_SHIFT_VALUE": 0},
        "SDP_RDMA.D_BRDMA_CFG": {"BRDMA_DISABLE": "NO", "BRDMA_DATA_USE": "BOTH",
                                 "BRDMA_DATA_SIZE": "TWO_BYTE",
                                 "BRDMA_DATA_MODE": "PER_ELEMENT", "BRDMA_RAM_TYPE": "MC"},
        "SDP_RDMA.D_BS_BASE_ADDR_LOW": {"BS_BASE_ADDR_LOW": 0x40000},
        "SDP_RDMA.D_BS_LINE_STRIDE": {"BS_LINE_STRIDE": 0x80},
        "SDP_RDMA.D_BS_SURFACE_STRIDE": {"BS_SURFACE_STRIDE": 0x400}})
    r = run_sdp(view(f), mem)
    want = np.clip((x.astype(np.int64) + a) * m, -128, 127)
    assert r.out.tolist() == want[..., :c].tolist() and r.mismatches == 0
    # the WDMA writes whole atoms: lanes 10..15 of the second surface hold their results too
    assert read_cube(mem, 0x9000, w * 8, h * w * 8, h, w, 16).tolist() == want.tolist()
    assert r.detail["read_bytes"] == h * w * 16 + h * w * 16 * 4


def test_nrdma_both_one_byte_per_kernel_and_erdma_per_element():
    """NRDMA BOTH ONE_BYTE PER_KERNEL: channel k's ALU byte at base + 2k, MUL byte at
    base + 2k + 1 (one contiguous run of C_pad * 2 bytes). X2 = max(x, a[k] << 2) * m[k] >> 1.
    ERDMA ALU ONE_BYTE PER_ELEMENT (converter bypassed): Y = X2 + e[h, w, k], e at
    base + (k // 8) * surface + h * line + w * 8 + k % 8."""
    h, w, c = 3, 2, 8
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, (h, w, c)).astype(np.int8)
    a = rng.integers(-20, 20, c)
    m = rng.integers(-3, 4, c)
    e = rng.integers(-50, 50, (h, w, c))
    mem = SparseMemory()
    write_cube(mem, 0x1000, w * 8, h * w * 8, x)
    for k in range(c):
        mem.write(0x50000 + 2 * k, bytes([int(a[k]) & 0xFF, int(m[k]) & 0xFF]))
    write_cube(mem, 0x60000, 0x20, 0x100, e.astype(np.int8))
    f = layer(h, w, c, **{
        "SDP.D_DP_BN_CFG": {"BN_BYPASS": "NO", "BN_ALU_BYPASS": "NO", "BN_ALU_ALGO": "MAX",
                            "BN_MUL_BYPASS": "NO", "BN_MUL_PRELU": "NO",
                            "BN_RELU_BYPASS": "YES"},
        "SDP.D_DP_BN_ALU_CFG": {"BN_ALU_SRC": "MEM", "BN_ALU_SHIFT_VALUE": 2},
        "SDP.D_DP_BN_MUL_CFG": {"BN_MUL_SRC": "MEM", "BN_MUL_SHIFT_VALUE": 1},
        "SDP_RDMA.D_NRDMA_CFG": {"NRDMA_DISABLE": "NO", "NRDMA_DATA_USE": "BOTH",
                                 "NRDMA_DATA_SIZE": "ONE_BYTE",
                                 "NRDMA_DATA_MODE": "PER_KERNEL", "NRDMA_RAM_TYPE": "MC"},
        "SDP_RDMA.D_BN_BASE_ADDR_LOW": {"BN_BASE_ADDR_LOW": 0x50000},
        "SDP.D_DP_EW_CFG": {"EW_BYPASS": "NO", "EW_ALU_BYPASS": "NO", "EW_ALU_ALGO": "SUM",
                            "EW_MUL_BYPASS": "YES", "EW_LUT_BYPASS": "YES"},
        "SDP.D_DP_EW_ALU_CFG": {"EW_ALU_SRC": "MEM", "EW_ALU_CVT_BYPASS": "YES"},
        "SDP_RDMA.D_ERDMA_CFG": {"ERDMA_DISABLE": "NO", "ERDMA_DATA_USE": "ALU",
                                 "ERDMA_DATA_SIZE": "ONE_BYTE",
                                 "ERDMA_DATA_MODE": "PER_ELEMENT", "ERDMA_RAM_TYPE": "MC"},
        "SDP_RDMA.D_EW_BASE_ADDR_LOW": {"EW_BASE_ADDR_LOW": 0x60000},
        "SDP_RDMA.D_EW_LINE_STRIDE": {"EW_LINE_STRIDE": 0x20},
        "SDP_RDMA.D_EW_SURFACE_STRIDE": {"EW_SURFACE_STRIDE": 0x100}})
    r = run_sdp(view(f), mem)
    x2 = np.maximum(x.astype(np.int64), a << 2) * m
    x2 = np.sign(x2) * ((np.abs(x2) + 1) >> 1)  # >> 1 rounding half away from zero
    assert r.out.tolist() == np.clip(x2 + e, -128, 127).tolist() and r.mismatches == 0
    assert operand_addresses("PER_KERNEL", 0x50000, 0, 0, h, w, 16, size=1, both=True,
                             group=8)[5] == 0x5000A


def test_int16_layer_reads_and_writes_two_byte_elements():
    """PROC/OUT INT16 on 8-byte atoms: 4 channels per atom. X1 ALU SUM with a per-kernel
    TWO_BYTE BRDMA operand (channel k at base + 2k); output = x + b[k] saturated to int16."""
    h, w, c = 2, 3, 6
    rng = np.random.default_rng(3)
    x = rng.integers(-32768, 32768, (h, w, 8)).astype(np.int16)
    b = rng.integers(-32768, 32768, 8)
    mem = SparseMemory()
    write_cube(mem, 0x1000, w * 8, h * w * 8, x)
    mem.write(0x30000, b.astype("<i2").tobytes())
    f = layer(h, w, c, precision="INT16", **{
        "SDP.D_DP_BS_CFG": {"BS_BYPASS": "NO", "BS_ALU_BYPASS": "NO", "BS_ALU_ALGO": "SUM",
                            "BS_MUL_BYPASS": "YES", "BS_RELU_BYPASS": "YES"},
        "SDP.D_DP_BS_ALU_CFG": {"BS_ALU_SRC": "MEM"},
        "SDP_RDMA.D_BRDMA_CFG": {"BRDMA_DISABLE": "NO", "BRDMA_DATA_USE": "ALU",
                                 "BRDMA_DATA_SIZE": "TWO_BYTE",
                                 "BRDMA_DATA_MODE": "PER_KERNEL", "BRDMA_RAM_TYPE": "MC"},
        "SDP_RDMA.D_BS_BASE_ADDR_LOW": {"BS_BASE_ADDR_LOW": 0x30000}})
    r = run_sdp(view(f), mem)
    want = np.clip(x.astype(np.int64) + b, -32768, 32767)
    assert r.out.dtype == np.int16 and r.out.tolist() == want[..., :c].tolist()
    got = read_cube(mem, 0x9000, w * 8, h * w * 8, h, w, 8, dtype=np.int16)
    assert got.tolist() == want.tolist()


def test_flying_input_padding_and_output_to_pdp():
    """FLYING_MODE ON: the int32 cube from CACC; lanes past C are fed 0, so with
    CVT_OFFSET = -3 (out = x + 3) the padding lanes of the last atom are written as 3.
    OUTPUT_DST = PDP: nothing is written."""
    h, w, c = 1, 2, 5
    x = np.arange(h * w * c, dtype=np.int64).reshape(h, w, c) * 1000 - 4000
    f = layer(h, w, c, flying=True, **{"SDP.D_CVT_OFFSET": {"CVT_OFFSET": (-3) & 0xFFFFFFFF}})
    mem = SparseMemory()
    r = run_sdp(view(f), mem, flying=x)
    assert r.out.tolist() == np.clip(x + 3, -128, 127).tolist() and r.mismatches == 0
    assert mem.read(0x9000, 16).view(np.int8).tolist() == \
        [-128, -128, -128, -128, 3, 3, 3, 3, 127, 127, 127, 127, 127, 3, 3, 3]
    f["SDP.D_FEATURE_MODE_CFG"]["OUTPUT_DST"] = "PDP"
    mem = SparseMemory()
    r = run_sdp(view(f), mem, flying=x)
    assert mem.pages() == 0 and r.out.shape == (h, w, c)
    assert r.detail["output"].startswith("PDP")


def test_one_by_one_cube_is_read_and_written_packed():
    """A 1x1 cube is one run of atoms (SdpRdmaCore / WdmaSequenceDC), whatever the surface
    stride registers say: channel k at base + k for int8."""
    f = layer(1, 1, 12)
    f["SDP_RDMA.D_SRC_SURFACE_STRIDE"] = {"SRC_SURFACE_STRIDE": 0x400}
    f["SDP.D_DST_SURFACE_STRIDE"] = {"DST_SURFACE_STRIDE": 0x400}
    mem = SparseMemory()
    mem.write(0x1000, np.arange(1, 17, dtype=np.uint8))
    r = run_sdp(view(f), mem)
    assert r.out.ravel().tolist() == list(range(1, 13))
    assert mem.read(0x9000, 16).tolist() == list(range(1, 17))


def test_lut_slope_shift_is_signed_for_the_sdp():
    """Both tables underflow, LE answers: y = le[0] + sat32((x - le_start) * scale >> shift).
    Shift field 0x1e reads -2 (a left shift by 2): x = 10, le_start = 20, scale 3:
    (10 - 20) * 3 = -30, << 2 = -120; le[0] = 100 -> -20. Field 2 (right shift): -30 / 4 =
    -7.5 -> -8 (half away from zero); 100 - 8 = 92."""
    le = [100] + [0] * 64
    for field, want in ((0x1E, -20), (0x2, 92)):
        lut = LutParams.from_registers({"S_LUT_CFG": 1, "S_LUT_LE_START": 20,
                                        "S_LUT_LO_START": 20, "S_LUT_LE_SLOPE_SCALE": 3,
                                        "S_LUT_LE_SLOPE_SHIFT": field}, le, [0] * 257, "sdp")
        p = SdpParams(ew=SdpYParams(bypass=False, lut_bypass=False, lut=lut))
        x = np.array([10]).reshape(1, 1, 1, 1)
        assert sdp_apply(x, p).item() == want == sdp_reference(x, p).item()
    # a large product saturates to int32 before y is added: (-2**31 - 20) * 3 << 2
    x = np.array([-2**31]).reshape(1, 1, 1, 1)
    lut = LutParams(le_table=tuple(le), lo_table=(0,) * 257, le_start=20, lo_start=20,
                    le_slope_uflow_scale=3, le_slope_uflow_shift=-2)
    p = SdpParams(ew=SdpYParams(bypass=False, lut_bypass=False, lut=lut))
    assert sdp_apply(x, p).item() == -128 == sdp_reference(x, p).item()


# ---------------------------------------------------------------------- numpy vs Numba
def _random_x(rng, shape, mem_mode):
    size = str(rng.choice(["ONE_BYTE", "TWO_BYTE"]))
    mode = str(rng.choice(["PER_KERNEL", "PER_ELEMENT"]))
    lim = 128 if size == "ONE_BYTE" else 32768
    dshape = shape[-1:] if mode == "PER_KERNEL" else shape[1:]
    kw = dict(bypass=bool(rng.random() < 0.2), alu_bypass=bool(rng.random() < 0.3),
              alu_algo=str(rng.choice(["MAX", "MIN", "SUM"])),
              alu_shift_value=int(rng.integers(0, 64)),
              alu_operand=int(rng.integers(-32768, 32768)),
              mul_bypass=bool(rng.random() < 0.3), mul_shift_value=int(rng.integers(0, 70)),
              mul_operand=int(rng.integers(-32768, 32768)), mul_prelu=bool(rng.random() < 0.3),
              relu_bypass=bool(rng.random() < 0.5), data_mode=mode, data_size=size)
    for op in ("alu", "mul"):
        if mem_mode and rng.random() < 0.6:
            kw[f"{op}_src"] = "MEM"
            kw[f"{op}_data"] = rng.integers(-lim, lim, dshape)
    return SdpXParams(**kw)


def _random_lut(rng):
    shifts = {f"{t}_slope_{f}_{k}": int(rng.integers(-16, 16)) if k == "shift"
              else int(rng.integers(-32768, 32768))
              for t in ("le", "lo") for f in ("uflow", "oflow") for k in ("scale", "shift")}
    start = int(rng.integers(-2**20, 2**20))
    return LutParams(le_table=tuple(int(v) for v in rng.integers(-32768, 32768, 65)),
                     lo_table=tuple(int(v) for v in rng.integers(-32768, 32768, 257)),
                     le_function=int(rng.integers(0, 2)), le_start=start,
                     le_end=start + int(rng.integers(0, 2**20)),
                     lo_start=int(rng.integers(-2**20, 2**20)),
                     lo_end=int(rng.integers(-2**20, 2**20)),
                     le_index_offset=int(rng.integers(-6, 20)),
                     le_index_select=int(rng.integers(-25, 40)),
                     lo_index_select=int(rng.integers(-25, 40)),
                     uflow_priority=int(rng.integers(0, 2)),
                     oflow_priority=int(rng.integers(0, 2)),
                     hybrid_priority=int(rng.integers(0, 2)), **shifts)


@pytest.mark.parametrize("seed", range(6))
def test_numpy_reference_equals_numba_datapath_on_random_registers(seed):
    rng = np.random.default_rng(100 + seed)
    shape = (1, 3, 4, 11)
    for trial in range(12):
        mem_mode = trial % 2 == 1
        y_size = str(rng.choice(["ONE_BYTE", "TWO_BYTE"]))
        y_mode = str(rng.choice(["PER_KERNEL", "PER_ELEMENT"]))
        ykw = dict(bypass=bool(rng.random() < 0.2), alu_bypass=bool(rng.random() < 0.3),
                   alu_algo=str(rng.choice(["MAX", "MIN", "SUM", "EQL"])),
                   alu_operand=int(rng.integers(-2**31, 2**31)),
                   mul_bypass=bool(rng.random() < 0.3),
                   mul_operand=int(rng.integers(-2**31, 2**31)),
                   mul_prelu=bool(rng.random() < 0.3), truncate=int(rng.integers(0, 80)),
                   data_mode=y_mode, data_size=y_size, lut_bypass=bool(rng.random() < 0.5))
        if not ykw["lut_bypass"]:
            ykw["lut"] = _random_lut(rng)
        ops = {}
        lim = 128 if y_size == "ONE_BYTE" else 32768
        for op in ("alu", "mul"):
            ykw[f"{op}_cvt_bypass"] = bool(rng.random() < 0.4)
            ykw[f"{op}_cvt_offset"] = int(rng.integers(-2**31, 2**31))
            ykw[f"{op}_cvt_scale"] = int(rng.integers(-32768, 32768))
            ykw[f"{op}_cvt_truncate"] = int(rng.integers(0, 64))
            if mem_mode and rng.random() < 0.6:
                ykw[f"{op}_src"] = "MEM"
                ops[op] = rng.integers(-lim, lim, shape[-1:] if y_mode == "PER_KERNEL"
                                       else shape[1:])
        y = SdpYParams(**ykw)
        used = y._mem_ops()
        ew = None if not used else ops[used[0]] if len(used) == 1 else (ops["alu"], ops["mul"])
        prec = str(rng.choice(["INT8", "INT16"]))
        p = SdpParams(bs=_random_x(rng, shape, mem_mode), bn=_random_x(rng, shape, mem_mode),
                      ew=y, cvt=SdpCvtParams(cvt_offset=int(rng.integers(-2**31, 2**31)),
                                             cvt_scale=int(rng.integers(-32768, 32768)),
                                             cvt_shift=int(rng.integers(0, 64))),
                      proc_precision=prec, out_precision=prec)
        x = np.concatenate([rng.integers(-2**31, 2**31, 66),
                            rng.integers(-3000, 3000, 66)]).reshape(shape)
        got, ref = sdp_apply(x, p, ew), sdp_reference(x, p, ew)
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got, ref, err_msg=f"seed {seed} trial {trial}: {p}")


@pytest.mark.parametrize("seed", range(3))
def test_numpy_lut_equals_numba_lut_near_the_tables(seed):
    """Y's LUT alone (cvt shift 8 keeps int16 outputs informative), inputs around both tables'
    start and end so every state is hit: hits in both tables, under/overflows with small slope
    products (left shifts that do not saturate), exponent tables with offsets of both signs."""
    rng = np.random.default_rng(200 + seed)
    for trial in range(25):
        t = _random_lut(rng)
        small = {f"{a}_slope_{b}_scale": int(rng.integers(-60, 60))
                 for a in ("le", "lo") for b in ("uflow", "oflow")}
        sel = int(rng.integers(-3, 8))
        t = LutParams(**{**t.registers(), **small, "le_index_select": sel,
                         "lo_index_select": int(rng.integers(-3, 8)),
                         "le_index_offset": int(rng.integers(-3, 6))})
        centers = [t.le_start, t.le_end, t.lo_start, t.lo_end, t.le_start + (64 << max(sel, 0))]
        x = np.concatenate([c + rng.integers(-3000, 3000, 60) for c in centers])
        x = np.clip(x, -2**31, 2**31 - 1).reshape(1, 1, -1, 1)
        p = SdpParams(ew=SdpYParams(bypass=False, lut_bypass=False, lut=t),
                      cvt=SdpCvtParams(cvt_shift=8), proc_precision="INT16",
                      out_precision="INT16")
        np.testing.assert_array_equal(sdp_apply(x, p), sdp_reference(x, p),
                                      err_msg=f"seed {seed} trial {trial}: {t}")


# ---------------------------------------------------------------------- errors
BS_MEM = {"SDP.D_DP_BS_CFG": {"BS_BYPASS": "NO", "BS_ALU_BYPASS": "NO"},
          "SDP.D_DP_BS_ALU_CFG": {"BS_ALU_SRC": "MEM"}}


@pytest.mark.parametrize("extra, match", [
    ({"SDP.D_DATA_FORMAT": {"PROC_PRECISION": "FP16"}},
     r"SDP\.D_DATA_FORMAT\.PROC_PRECISION = FP16 \(2\): supported: INT8, INT16; the fp16 SDP"),
    ({"SDP.D_DATA_FORMAT": {"OUT_PRECISION": "INT16"}},
     r"OUT_PRECISION = INT16 with PROC_PRECISION = INT8: precision conversion"),
    ({"SDP_RDMA.D_FEATURE_MODE_CFG": {"IN_PRECISION": "INT16"}},
     r"SDP_RDMA\.D_FEATURE_MODE_CFG\.IN_PRECISION = INT16"),
    ({"SDP.D_FEATURE_MODE_CFG": {"BATCH_NUMBER": 3}}, r"BATCH_NUMBER = 3: only 0"),
    ({"SDP.D_FEATURE_MODE_CFG": {"WINOGRAD": "ON"}}, r"WINOGRAD = ON \(1\): supported: OFF"),
    ({"SDP.D_DP_EW_CFG": {"EW_BYPASS": "NO", "EW_ALU_BYPASS": "NO", "EW_ALU_ALGO": "EQL"}},
     r"EW_ALU_ALGO = EQL \(3\): the compare mode writes no surface"),
    (BS_MEM, r"BS_ALU_SRC = MEM but SDP_RDMA\.D_BRDMA_CFG\.BRDMA_DISABLE = YES"),
    ({**BS_MEM, "SDP_RDMA.D_BRDMA_CFG": {"BRDMA_DISABLE": "NO", "BRDMA_DATA_USE": "MUL"}},
     r"BRDMA_DATA_USE = MUL: the DMA reads the MUL operand\(s\) but the unit uses BS_ALU"),
    ({"SDP_RDMA.D_NRDMA_CFG": {"NRDMA_DISABLE": "NO", "NRDMA_DATA_USE": "BOTH"}},
     r"NRDMA_DATA_USE = BOTH: .* uses no operand from memory"),
    ({**BS_MEM, "SDP_RDMA.D_BRDMA_CFG": {"BRDMA_DISABLE": "NO", "BRDMA_DATA_USE": "ALU",
                                         "BRDMA_RAM_TYPE": "CV"}},
     r"BRDMA_RAM_TYPE = CV: .* no cv_mem image was given \(nv_small has no CV-SRAM"),
    ({"SDP_RDMA.D_DATA_CUBE_CHANNEL": {"CHANNEL": 3}},
     r"SDP_RDMA\.D_DATA_CUBE_CHANNEL = 3: the RDMA cube must match"),
    ({"SDP.D_DP_BS_CFG": {"BS_BYPASS": "NO", "BS_ALU_BYPASS": "NO", "BS_ALU_ALGO": 3}},
     r"SDP\.D_DP_BS_CFG\.BS_ALU_ALGO = 3: not a defined value; allowed: MAX \(0\), MIN"),
])
def test_unsupported_registers_are_named(extra, match):
    f = layer(2, 2, 8)
    for key, fs in extra.items():
        f.setdefault(key, {}).update(fs)
    mem = SparseMemory()
    with pytest.raises((ConfigError, KeyError), match=match):
        run_sdp(view(f), mem)
    assert mem.pages() == 0  # nothing was written


def test_flying_argument_must_match_the_mode():
    mem = SparseMemory()
    with pytest.raises(ValueError, match="flying = None: .*FLYING_MODE = ON"):
        run_sdp(view(layer(1, 2, 3, flying=True)), mem)
    with pytest.raises(ValueError, match=r"must be an integer cube of the registers' shape "
                                         r"\(1, 2, 3\)"):
        run_sdp(view(layer(1, 2, 3, flying=True)), mem, flying=np.zeros((1, 2, 4), np.int32))
    with pytest.raises(ValueError, match="int32 range"):
        run_sdp(view(layer(1, 2, 3, flying=True)), mem,
                flying=np.full((1, 2, 3), 2**31, np.int64))
    with pytest.raises(ValueError, match="flying is given but .*FLYING_MODE = OFF"):
        run_sdp(view(layer(1, 2, 3)), mem, flying=np.zeros((1, 2, 3), np.int32))
