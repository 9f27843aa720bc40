"""NVDLA feature surfaces in memory, and what a unit executor returns.

Feature data layout (NVIDIA ``doc/hw/format.rst``, "Feature Data Format"): a cube of H x W x C
elements is split along C into *surfaces* of ``atom_bytes / elem_bytes`` channels (8 int8 or
4 int16 channels for nv_small's 8-byte atoms, 32/16 for nv_full's 32-byte atoms). Within a surface,
each pixel is one atom; pixels of a line are contiguous; lines are ``line_stride`` apart and
surfaces ``surface_stride`` apart. So element (h, w, c) of a cube at ``base`` starts at::

    base + (c // cpa) * surface_stride + h * line_stride + w * atom_bytes + (c % cpa) * elem_bytes

with ``cpa = atom_bytes // elem_bytes``; multi-byte elements are little-endian. The channels past
C in the last surface are still written by the hardware's WDMAs (a whole atom per pixel); the
executors write only the cube's own channels unless they know what the hardware puts there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["cube_addresses", "read_cube", "write_cube", "LayerRun"]

_DTYPES = {np.dtype(np.int8): 1, np.dtype(np.uint8): 1, np.dtype(np.int16): 2,
           np.dtype(np.uint16): 2}


def cube_addresses(base: int, line_stride: int, surface_stride: int, h: int, w: int, c: int, *,
                   elem_bytes: int = 1, atom_bytes: int = 8) -> np.ndarray:
    """int64 (h, w, c): the byte address of the first byte of each element (module docstring)."""
    if elem_bytes not in (1, 2) or atom_bytes not in (8, 32) or atom_bytes % elem_bytes:
        raise ValueError(f"elem_bytes = {elem_bytes}, atom_bytes = {atom_bytes}: elements are "
                         f"1 or 2 bytes, atoms 8 (nv_small) or 32 bytes (nv_full)")
    if min(h, w, c) < 1:
        raise ValueError(f"cube {h}x{w}x{c}: every dimension must be >= 1")
    cpa = atom_bytes // elem_bytes
    hh = np.arange(h, dtype=np.int64)[:, None, None]
    ww = np.arange(w, dtype=np.int64)[None, :, None]
    cc = np.arange(c, dtype=np.int64)[None, None, :]
    return (int(base) + (cc // cpa) * int(surface_stride) + hh * int(line_stride)
            + ww * atom_bytes + (cc % cpa) * elem_bytes)


def read_cube(mem, base: int, line_stride: int, surface_stride: int, h: int, w: int, c: int, *,
              dtype=np.int8, atom_bytes: int = 8) -> np.ndarray:
    """The (h, w, c) cube of ``dtype`` (int8/uint8/int16/uint16) stored at ``base``."""
    dt = np.dtype(dtype)
    if dt not in _DTYPES:
        raise ValueError(f"dtype {dt}: feature elements are int8, uint8, int16 or uint16")
    nb = _DTYPES[dt]
    addr = cube_addresses(base, line_stride, surface_stride, h, w, c, elem_bytes=nb,
                          atom_bytes=atom_bytes)
    if nb == 1:
        return mem.gather(addr).view(dt)
    lo = mem.gather(addr).astype(np.uint16)
    hi = mem.gather(addr + 1).astype(np.uint16)
    return (lo | (hi << 8)).view(dt)


def write_cube(mem, base: int, line_stride: int, surface_stride: int, cube, *,
               atom_bytes: int = 8) -> None:
    """Store the (h, w, c) cube (int8/uint8/int16/uint16) at ``base`` in NVDLA's layout."""
    cube = np.asarray(cube)
    if cube.ndim != 3 or cube.dtype not in _DTYPES:
        raise ValueError(f"cube: shape {cube.shape}, dtype {cube.dtype}: must be (H, W, C) "
                         f"int8, uint8, int16 or uint16")
    nb = _DTYPES[cube.dtype]
    addr = cube_addresses(base, line_stride, surface_stride, *cube.shape, elem_bytes=nb,
                          atom_bytes=atom_bytes)
    raw = cube.view(np.uint8 if nb == 1 else np.uint16)
    if nb == 1:
        mem.scatter(addr, raw)
    else:
        mem.scatter(addr, (raw & 0xFF).astype(np.uint8))
        mem.scatter(addr + 1, (raw >> 8).astype(np.uint8))


@dataclass
class LayerRun:
    """One hardware layer a register program ran.

    unit: ``"conv"``, ``"sdp"``, ``"pdp"`` or ``"cdp"``; out: the output cube (H, W, C) as written
    to memory; reference: the same cube from an independent numpy model (``npulab nvdla trace
    --dump`` writes both); out_base: destination address; detail: what is worth printing (shapes,
    modes); cycles: the cycle model's estimate of the layer (:mod:`hw.nvdla.cycles`); regs: the
    :class:`~hw.nvdla.regfile.RegView` the layer ran with (set by the trace player);
    cycle_layer: a convolution as :class:`hw.nvdla.conv_layer.ConvLayer` for the cycle model (None
    for other units, or when the cycle model cannot describe the layer).
    """

    unit: str
    out: np.ndarray
    reference: np.ndarray
    out_base: int
    detail: dict = field(default_factory=dict)
    cycles: int | None = None
    regs: object = field(default=None, repr=False)   # the RegView the layer ran with
    cycle_layer: object = field(default=None, repr=False)   # conv: its conv_layer.ConvLayer

    @property
    def mismatches(self) -> int:
        """How many elements of ``out`` differ from ``reference``."""
        if self.out.shape != self.reference.shape:
            return int(self.out.size)
        return int(np.count_nonzero(self.out.astype(np.int64) != self.reference.astype(np.int64)))
