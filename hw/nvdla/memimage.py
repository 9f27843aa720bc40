"""A sparse, byte-addressed memory image: NVDLA's primary memory (and CV-SRAM) in trace replays.

NVIDIA's trace tests address a 64-bit space sparsely: a few kilobytes of input and output surfaces
around ``0x8000_0000``. :class:`SparseMemory` keeps only the 4 KiB pages that were touched; bytes
never written read as 0 (the traces' ``mem_init(..., ALL_ZERO)`` state, and the rule their CRCs
assume, ``shared/reference/nvdla.md``).

Input surfaces come as ``.dat`` files of text packets (the format of NVIDIA's
``verif/tests/trace_tests``)::

    {offset:0x24, size:4, payload:0x00 0x00 0x48 0x00} ,

each placing ``size`` bytes at ``base + offset``; :func:`parse_dat` reads them and
:meth:`SparseMemory.load_dat` stores them. ``mem_init`` patterns: ``ALL_ZERO``, ``ALL_ONE``
(0xFF bytes), ``RANDOM`` (seeded, so a replay is deterministic).
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np

from hw.files import read_text

__all__ = ["SparseMemory", "MemoryImageError", "parse_dat", "region_problem", "INIT_PATTERNS",
           "ADDR_LIMIT", "MAX_REGION"]

PAGE_BITS = 12
PAGE = 1 << PAGE_BITS
ADDR_LIMIT = 1 << 64
#: The largest range one trace command (``mem_init``, ``check_crc``) may fill or check: 256 MiB
#: (NVIDIA's nv_small traces use at most 16 MiB). Larger ranges would be allocated whole.
MAX_REGION = 1 << 28
INIT_PATTERNS = ("ALL_ZERO", "ALL_ONE", "RANDOM")
_PACKET = re.compile(r"\{\s*offset\s*:\s*(0x[0-9a-fA-F]+|\d+)\s*,\s*size\s*:\s*(\d+)\s*,"
                     r"\s*payload\s*:([^}]*)\}")


class MemoryImageError(ValueError):
    """A bad memory access or ``.dat`` file; the message names the address or file and line."""


def _line(text: str, m) -> int:
    """The 1-based line of a match (counted only for error messages: it is O(file size))."""
    return text.count("\n", 0, m.start()) + 1


def region_problem(addr: int, size: int | None = None) -> str | None:
    """Why ``size`` bytes at ``addr`` are outside what a trace command may touch (address in
    ``0 .. 2**64 - 1``, size in ``1 .. MAX_REGION``, the range inside the 64-bit space), or
    None when they are fine. ``size`` None checks the address alone."""
    if not 0 <= addr < ADDR_LIMIT:
        return f"address {addr:#x}: must be in 0x0..{ADDR_LIMIT - 1:#x} (64-bit addresses)"
    if size is None:
        return None
    if not 1 <= size <= MAX_REGION:
        return (f"size {size:#x} ({size:,} bytes): must be 1..{MAX_REGION:#x} "
                f"({MAX_REGION:,} bytes, the largest range the memory model fills or checks "
                f"in one command)")
    if addr + size > ADDR_LIMIT:
        return (f"{size:#x} bytes at {addr:#x} end past the 64-bit address space "
                f"(0x0..{ADDR_LIMIT - 1:#x})")
    return None


def parse_dat(path) -> list[tuple[int, bytes]]:
    """The packets of a ``.dat`` file as (offset, bytes). Raises MemoryImageError naming the file and
    the packet when a payload's byte count differs from its ``size`` or a byte is not 0x00..0xFF."""
    path = Path(path)
    text = read_text(path, ".dat file", error=MemoryImageError)
    packets = []
    for m in _PACKET.finditer(text):
        off, size = int(m[1], 0), int(m[2])
        words = m[3].split()
        try:
            data = bytes(int(b, 16) for b in words)
        except ValueError:
            raise MemoryImageError(f"{path}:{_line(text, m)}: payload {m[3].strip()[:40]!r}: "
                                   f"bytes must be hex values 0x00..0xff") from None
        if len(data) != size:
            raise MemoryImageError(f"{path}:{_line(text, m)}: packet at offset {off:#x} says "
                                   f"size:{size} but carries {len(data)} bytes")
        packets.append((off, data))
    if not packets and text.strip().strip("{}").strip():
        raise MemoryImageError(f"{path}: no '{{offset:..., size:..., payload:...}}' packets found")
    return packets


class SparseMemory:
    """Byte-addressed 64-bit memory; unwritten bytes read 0. Pages of 4 KiB are allocated on
    first write. ``name`` appears in error messages (``pri_mem``, ``cv_sram``)."""

    def __init__(self, name: str = "pri_mem"):
        self.name = name
        self._pages: dict[int, np.ndarray] = {}

    # ---------------------------------------------------------------- checks
    def _check(self, addr, size, what):
        if isinstance(addr, bool) or not isinstance(addr, (int, np.integer)) or addr < 0:
            raise MemoryImageError(f"{self.name}: {what} address {addr!r}: must be a non-negative "
                               f"integer")
        if size < 0 or addr + size > ADDR_LIMIT:
            raise MemoryImageError(f"{self.name}: {what} of {size} bytes at {addr:#x} leaves the "
                               f"64-bit address space")

    def _check_region(self, addr, size, what):
        why = region_problem(int(addr), int(size))
        if why:
            raise MemoryImageError(f"{self.name}: {what}: {why}")

    # ---------------------------------------------------------------- contiguous
    @staticmethod
    def _spans(addr: int, size: int):
        """(page, offset in page, position in the buffer, length) of each page a range touches."""
        pos = 0
        while pos < size:
            a = addr + pos
            off = a & (PAGE - 1)
            n = min(PAGE - off, size - pos)
            yield a >> PAGE_BITS, off, pos, n
            pos += n

    def read(self, addr: int, size: int) -> np.ndarray:
        """``size`` bytes from ``addr`` as a new uint8 array."""
        self._check(addr, size, "read")
        out = np.zeros(size, np.uint8)
        for page, off, pos, n in self._spans(addr, size):
            p = self._pages.get(page)
            if p is not None:
                out[pos:pos + n] = p[off:off + n]
        return out

    def write(self, addr: int, data) -> None:
        """Store ``data`` (bytes or a uint8 array) at ``addr``."""
        buf = np.frombuffer(bytes(data), np.uint8) if isinstance(data, (bytes, bytearray)) \
            else np.ascontiguousarray(data, np.uint8).ravel()
        self._check(addr, buf.size, "write")
        for page, off, pos, n in self._spans(addr, buf.size):
            p = self._pages.get(page)
            if p is None:
                p = self._pages[page] = np.zeros(PAGE, np.uint8)
            p[off:off + n] = buf[pos:pos + n]

    # ---------------------------------------------------------------- scattered
    def gather(self, addrs) -> np.ndarray:
        """The byte at each address of ``addrs`` (any shape) as uint8 of the same shape."""
        a = np.asarray(addrs, np.int64)
        if a.size and a.min() < 0:
            raise MemoryImageError(f"{self.name}: gather address {int(a.min())}: must be >= 0")
        out = np.zeros(a.shape, np.uint8)
        pages = a >> PAGE_BITS
        for page in np.unique(pages):
            p = self._pages.get(int(page))
            if p is not None:
                sel = pages == page
                out[sel] = p[a[sel] & (PAGE - 1)]
        return out

    def scatter(self, addrs, values) -> None:
        """Store ``values`` (uint8, same shape as ``addrs``) at ``addrs``; later duplicates win."""
        a = np.asarray(addrs, np.int64)
        v = np.asarray(values)
        if v.shape != a.shape:
            raise MemoryImageError(f"{self.name}: scatter of {v.shape} values to {a.shape} "
                               f"addresses: shapes must match")
        if a.size and a.min() < 0:
            raise MemoryImageError(f"{self.name}: scatter address {int(a.min())}: must be >= 0")
        v = v.astype(np.uint8, copy=False)
        pages = a >> PAGE_BITS
        for page in np.unique(pages):
            p = self._pages.get(int(page))
            if p is None:
                p = self._pages[int(page)] = np.zeros(PAGE, np.uint8)
            sel = pages == page
            p[a[sel] & (PAGE - 1)] = v[sel]

    # ---------------------------------------------------------------- trace commands
    def fill(self, addr: int, size: int, pattern: str = "ALL_ZERO", seed: int = 0) -> None:
        """``mem_init``: fill ``size`` bytes from ``addr`` with ``pattern`` (INIT_PATTERNS)."""
        if pattern not in INIT_PATTERNS:
            raise MemoryImageError(f"{self.name}: mem_init pattern {pattern!r}: must be one of "
                               f"{', '.join(INIT_PATTERNS)}")
        self._check_region(addr, size, "mem_init")
        if pattern == "ALL_ZERO":
            data = np.zeros(size, np.uint8)
        elif pattern == "ALL_ONE":
            data = np.full(size, 0xFF, np.uint8)
        else:
            data = np.random.default_rng([seed, addr, size]).integers(0, 256, size, np.uint8)
        self.write(addr, data)

    def load_dat(self, addr: int, path) -> int:
        """``mem_load``: store every packet of the ``.dat`` file at ``addr + offset``; returns
        the number of bytes loaded."""
        total = 0
        for off, data in parse_dat(path):
            self.write(addr + off, data)
            total += len(data)
        return total

    def crc32(self, addr: int, size: int) -> int:
        """CRC-32 (zlib's, as NVIDIA's ``check_crc``) of ``size`` bytes from ``addr``."""
        self._check_region(addr, size, "check_crc")
        return zlib.crc32(self.read(addr, size).tobytes())

    def pages(self) -> int:
        """How many 4 KiB pages hold data."""
        return len(self._pages)
