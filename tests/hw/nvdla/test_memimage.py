"""Sparse memory (hw/nvdla/memimage.py) and NVDLA surface layouts (hw/nvdla/surface.py):
against a dense numpy model of the same address range, the .dat format, format.rst's layout
formula worked by hand, and clear errors."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hw.nvdla.memimage import MAX_REGION, MemoryImageError, SparseMemory, parse_dat
from hw.nvdla.surface import cube_addresses, read_cube, write_cube

BASE = 0x8000_0000


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3 * 4096), st.binary(min_size=1, max_size=5000)),
                min_size=1, max_size=8))
def test_matches_a_dense_model(writes):
    """Writes that cross 4 KiB page boundaries; reads, gathers and CRCs of the whole range."""
    mem, dense = SparseMemory(), np.zeros(4 * 4096 + 5000, np.uint8)
    for off, data in writes:
        mem.write(BASE + off, data)
        dense[off:off + len(data)] = np.frombuffer(data, np.uint8)
    assert np.array_equal(mem.read(BASE, dense.size), dense)
    idx = np.arange(0, dense.size, 7)
    assert np.array_equal(mem.gather(BASE + idx), dense[idx])
    assert mem.crc32(BASE, dense.size) == zlib.crc32(dense.tobytes())


def test_unwritten_memory_reads_zero_and_scatter():
    mem = SparseMemory()
    assert mem.read(0xFFFF_F000, 16).tolist() == [0] * 16 and mem.pages() == 0
    mem.scatter(np.array([[BASE + 1, BASE + 4097]]), np.array([[7, 9]], np.uint8))
    assert mem.read(BASE, 2).tolist() == [0, 7] and mem.read(BASE + 4097, 1)[0] == 9
    assert mem.pages() == 2


def test_fill_patterns():
    mem = SparseMemory()
    mem.fill(BASE, 10, "ALL_ONE")
    assert mem.read(BASE, 11).tolist() == [255] * 10 + [0]
    mem.fill(BASE, 4, "ALL_ZERO")
    assert mem.read(BASE, 5).tolist() == [0, 0, 0, 0, 255]
    a, b = SparseMemory(), SparseMemory()
    a.fill(BASE, 64, "RANDOM")
    b.fill(BASE, 64, "RANDOM")
    assert np.array_equal(a.read(BASE, 64), b.read(BASE, 64))      # deterministic
    with pytest.raises(MemoryImageError, match=r"pattern 'ALL_TWO': must be one of ALL_ZERO"):
        a.fill(BASE, 1, "ALL_TWO")


def test_dat_packets(tmp_path):
    p = tmp_path / "x.dat"
    p.write_text("{\n{offset:0x24, size:4, payload:0x00 0x01 0x48 0xff} ,\n"
                 "{offset:0x0, size:1, payload:0x7f} ,\n}\n")
    assert parse_dat(p) == [(0x24, bytes([0, 1, 0x48, 0xFF])), (0, b"\x7f")]
    mem = SparseMemory()
    assert mem.load_dat(BASE, p) == 5
    assert mem.read(BASE + 0x24, 4).tolist() == [0, 1, 0x48, 0xFF] and mem.read(BASE, 1)[0] == 127
    p.write_text("{offset:0x10, size:3, payload:0x00 0x01}")
    with pytest.raises(MemoryImageError, match=r"x.dat:1: packet at offset 0x10 says size:3 "
                                               r"but carries 2 bytes"):
        parse_dat(p)
    p.write_text("{offset:0x10, size:1, payload:0xzz}")
    with pytest.raises(MemoryImageError, match=r"x.dat:1: payload '0xzz': bytes must be hex"):
        parse_dat(p)
    with pytest.raises(MemoryImageError, match=r"nope.dat: no such .dat file"):
        parse_dat(tmp_path / "nope.dat")


def test_bad_addresses():
    mem = SparseMemory("pri_mem")
    with pytest.raises(MemoryImageError, match=r"pri_mem: read address -1"):
        mem.read(-1, 4)
    with pytest.raises(MemoryImageError, match=r"leaves the 64-bit address space"):
        mem.write((1 << 64) - 2, b"abcd")
    with pytest.raises(MemoryImageError, match=r"shapes must match"):
        mem.scatter(np.array([1, 2]), np.array([1], np.uint8))


def test_layout_formula_by_hand():
    """format.rst: int8, 8-byte atoms: (h, w, c) at base + (c // 8) * surf + h * line + w * 8
    + c % 8; int16: 4 channels per atom, 2 bytes each."""
    a = cube_addresses(0x1000, 0x40, 0x200, 2, 3, 10)
    assert a[1, 2, 9] == 0x1000 + 1 * 0x200 + 1 * 0x40 + 2 * 8 + 1
    b = cube_addresses(0x1000, 0x40, 0x200, 2, 3, 10, elem_bytes=2)
    assert b[1, 2, 9] == 0x1000 + 2 * 0x200 + 1 * 0x40 + 2 * 8 + 1 * 2
    c = cube_addresses(0, 0x400, 0x1000, 1, 2, 40, atom_bytes=32)    # nv_full: 32 int8 lanes
    assert c[0, 1, 33] == 0x1000 + 32 + 1


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint8])
def test_write_then_read_cube_round_trips(dtype):
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype)
    cube = rng.integers(info.min, info.max + 1, (3, 5, 11)).astype(dtype)
    mem = SparseMemory()
    write_cube(mem, BASE, 0x80, 0x400, cube)
    assert np.array_equal(read_cube(mem, BASE, 0x80, 0x400, 3, 5, 11, dtype=dtype), cube)
    if dtype == np.int16:     # little-endian bytes of element (0, 0, 1) at base + 2
        v = int(cube[0, 0, 1]) & 0xFFFF
        assert mem.read(BASE + 2, 2).tolist() == [v & 0xFF, v >> 8]
    with pytest.raises(ValueError, match=r"cube: shape \(3, 5\)"):
        write_cube(mem, BASE, 0x80, 0x400, cube[..., 0])
