"""What one ``COMPUTE`` command of a :class:`~hw.program.Program` costs on the systolic
array, independent of when it runs (:mod:`hw.executor` runs the commands in time).

A layer runs on a *variant* of the chip's array: its own dataflow on a reconfigurable array
(the mapper's choice, ``Tiling.dataflow``), N:M compressed weights on sparse PEs
(``Tiling.nm``), or weights kept in a sparse storage format (``Tiling.weight_store``, read at
their stored bits per element through the filter port). A compute's cost on its variant is:

* its cycles and counters from the timing engine (:func:`hw.systolic.timing.tile_counters`;
  an N:M K tile runs its whole groups compressed);
* the cycles by which bank conflicts stretch it, when the vectors an edge reads per cycle
  collide in SRAM banks (:func:`hw.memory.sram.vector_access_cycles`);
* the bits it books on the scratchpads' sides: operands at operand width (weights with their
  N:M index, or at their stored bits), accumulators at accumulator width.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from hw.chip import ChipConfig
from hw.memory.sram import vector_access_cycles
from hw.memory_path import _READ, _SRAMS, _WRITE
from hw.packing import nbytes
from hw.program import Program
from hw.sparsity import filter_read_bits, nm_or_dense, whole_groups
from hw.systolic.config import ArrayConfig, Dataflow
from hw.systolic.geometry import GemmOperand, geometry
from hw.systolic.mapping import (
    K_BUSY, K_CYCLES, K_LEFT_READS, K_PSUM_READS, K_TOP_READS, K_WRITES, map_gemm,
)
from hw.systolic.timing import tile_counters

__all__ = ["ComputeCosts"]


@functools.lru_cache(maxsize=65536)
def _tile_lanes(cfg: ArrayConfig, m: int, n: int, k: int, count: int) -> tuple[int, int]:
    """PEs a tile occupies along the left and top edges (vector widths read per cycle)."""
    mp = map_gemm(cfg, m, n, k, count)
    return min(cfg.rows, mp.spatial_rows), min(cfg.cols, mp.spatial_cols)


class ComputeCosts:
    """The array variants of ``program``'s computes on ``chip`` and the cost of a compute on
    each. ``array_id[layer]`` indexes ``arrays``, ``nm`` (the variant's N:M, None: dense) and
    ``store`` (its weights' ``(format, bytes, elements)``, None: dense); a compute of a
    row-wise N:M layer runs on its tile's variant (:meth:`command_arrays`)."""

    def __init__(self, program: Program, chip: ChipConfig):
        arr = chip.array
        self.arrays, self.nm, self.store = [arr], [None], [None]
        self._index = {(arr.dataflow.value, None, None): 0}
        self.array_id = []
        self._program = program
        for ls in program.layers:
            t = ls.tiling
            flow = None if t is None else t.dataflow
            nm = None if t is None else t.nm
            store = None if t is None else t.weight_store
            self.array_id.append(self._variant(flow or arr.dataflow.value, nm, store))
        self.sram_cfgs = [chip.sram(name) for name in _SRAMS]
        self.bits = arr.precision.bits
        self.acc_bits = arr.acc_bits

    def _variant(self, flow: str, nm, store) -> int:
        key = (flow, nm, store)
        index = self._index.get(key)
        if index is None:
            index = self._index[key] = len(self.arrays)
            self.arrays.append(replace(self.arrays[0], dataflow=Dataflow(flow)))
            self.nm.append(nm)
            self.store.append(store)
        return index

    def command_arrays(self, commands) -> list[int]:
        """The variant each of ``commands`` (compute indices) runs on: its layer's, or for a
        compute of a row-wise N:M layer (``nm_n`` > 0) the variant with its tile's N."""
        cols = self._program.columns
        out = np.asarray(self.array_id, np.int64)[cols["layer"][commands]]
        ns = cols["nm_n"][commands]
        for i in np.flatnonzero(ns).tolist():
            a = int(out[i])
            out[i] = self._variant(self.arrays[a].dataflow.value,
                                   nm_or_dense(int(ns[i]), self.nm[a][1]), self.store[a])
        return out.tolist()

    def _access(self, cfg, lanes: int, stride: int) -> int:
        """Cycles of one edge read of ``lanes`` operands ``stride`` apart
        (:func:`hw.memory.sram.vector_access_cycles`). Operands packed narrower than a byte
        have their stride in bits: contiguous ones are read as the bytes they fill, others one
        byte each."""
        bits = self.bits
        if bits % 8 == 0:
            return vector_access_cycles(cfg, lanes, bits // 8, stride)
        if stride == bits:
            return vector_access_cycles(cfg, nbytes(lanes, bits), 1, 1)
        return vector_access_cycles(cfg, lanes, 1, -(-stride // 8))

    def cost(self, array: int, count: int, m: int, n: int, k: int, left_stride: int,
             top_stride: int) -> tuple:
        """What a ``COMPUTE`` of this shape on variant ``array`` costs: ``(cycles, conflict
        stretch, (scratchpad, side, bits) of its four bookings, its counter increments in
        the executor's _COMPUTE_COLUMNS order less the bandwidth)``."""
        arr = self.arrays[array]
        nm = self.nm[array]
        geo = geometry(arr.dataflow)
        left_pad, top_pad = int(geo.left_operand), int(geo.top_operand)
        k = whole_groups(k, nm)     # a K tile runs its whole N:M groups compressed
        vec = tile_counters(arr, m, n, k, count, nm)
        cyc, left, top = vec[K_CYCLES], vec[K_LEFT_READS], vec[K_TOP_READS]
        writes, psum, macs = vec[K_WRITES], vec[K_PSUM_READS], vec[K_BUSY]
        lanes_l, lanes_t = _tile_lanes(arr, m, n, k if nm is None else k // nm[1] * nm[0],
                                       count)
        stretch = 0
        vl = self._access(self.sram_cfgs[left_pad], lanes_l, left_stride)
        vt = self._access(self.sram_cfgs[top_pad], lanes_t, top_stride)
        if vl > 1 or vt > 1:
            stretch = max((vl - 1) * -(-left // lanes_l), (vt - 1) * -(-top // lanes_t))
        # The scratchpads' ports: operands at operand width, accumulators at acc width.
        # Compressed weights carry their ceil(log2 M)-bit indices through the filter port.
        # Weights kept in a sparse format: the stored bits per element, on average.
        eb8, acc = self.bits, self.acc_bits
        ifmap_r, filt_r = geo.by_operand(left, top)
        w_num, w_den = filter_read_bits(eb8, nm, self.store[array])
        filt_bits = -(-filt_r * w_num // w_den)
        if geo.top_operand is GemmOperand.FILTER:
            left_bits, top_bits = left * eb8, filt_bits
        else:
            left_bits, top_bits = filt_bits, top * eb8
        bookings = ((left_pad, _READ, left_bits), (top_pad, _READ, top_bits),
                    (2, _WRITE, writes * acc), (2, _READ, psum * acc))
        return cyc, stretch, bookings, (cyc, macs, ifmap_r, filt_r, writes, psum, stretch)
