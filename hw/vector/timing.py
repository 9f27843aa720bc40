"""Cycles of a tile of vector work on a vector engine (a Numba kernel, batched over tiles).

A tile is ``rows`` rows of ``cols`` elements of one :class:`~hw.vector.work.VectorWork`, with
``in_bytes`` to read (once per pass) and ``out_bytes`` to write through the engine's ports.
Its cycles, in the engine's clock (the chip's), are::

    cycles = pipeline_depth + reductions * levels * reduction_stage_cycles
             + max(alu, sfu, read, write)

    alu    = ceil(sum over ALU ops of count * cost / (lanes * packing)) + tree
    sfu    = ceil(sum over special-function ops of count * cost / lanes)
    tree   = reductions * ceil(rows * min(cols, lanes) / lanes)
    read   = ceil(passes * in_bytes / read_bytes_per_cycle)
    write  = ceil(out_bytes / write_bytes_per_cycle)
    levels = ceil(log2(min(cols, lanes)))       (0 for one-element rows)

where ``count`` is the op's count in the tile (per element x rows x cols + per row x rows).
The ALU and special-function paths and the two ports run concurrently, so the busiest one sets
the pace. A row's reduction is ``ceil(cols / lanes)`` lane-wise steps (counted in the ALU ops)
then a tree across the lanes holding the row; one tree is issued per cycle on the ALU path, and
its ``levels`` of latency show once per pass boundary that waits for it (the next row's work
hides the rest), hence once per reduction per tile. The pipeline fills once per tile.

So a tile's cycles are never below ``count / (lanes x rate)`` for any of its ops (``rate`` =
``packing / cost`` on the ALU path, ``1 / cost`` on the special-function path): the floor the
property tests check.
"""

from __future__ import annotations

import numpy as np

from hw._jitcache import njit
from hw.vector.config import OPS, SFU_OPS, VectorConfig
from hw.vector.work import VectorWork

__all__ = ["tile_cycles", "tiles_cycles", "TileTiming", "T_CYCLES", "T_ALU", "T_SFU", "T_TREE",
           "T_READ", "T_WRITE", "T_LATENCY"]

#: Columns of the kernel's result rows.
T_CYCLES, T_ALU, T_SFU, T_TREE, T_READ, T_WRITE, T_LATENCY = range(7)
_EPS = 1e-9


@njit(cache=True)
def _ceil(x):
    return int(np.ceil(x - _EPS)) if x > 0 else 0


@njit(cache=True)
def _tiles_kernel(profile, rows, cols, in_bytes, out_bytes, per_element, per_row, reductions,
                  passes, cost, is_sfu, lanes, pack, depth, stage, read_bpc, write_bpc):
    """``out[t]`` = the :data:`T_CYCLES`.. columns of tile ``t``, whose work is row
    ``profile[t]`` of ``per_element``/``per_row`` (float64[profiles, ops]), ``reductions`` and
    ``passes`` (int64[profiles]). Arguments are not checked (Numba kernel)."""
    n = rows.shape[0]
    n_ops = cost.shape[0]
    out = np.zeros((n, 7), np.int64)
    for t in range(n):
        p = profile[t]
        r = rows[t]
        c = cols[t]
        alu = 0.0
        sfu = 0.0
        for o in range(n_ops):
            count = per_element[p, o] * r * c + per_row[p, o] * r
            if count > 0:
                if is_sfu[o]:
                    sfu += count * cost[o] / lanes
                else:
                    alu += count * cost[o] / (lanes * pack)
        width = c if c < lanes else lanes
        levels = 0
        while (1 << levels) < width:
            levels += 1
        tree = reductions[p] * ((r * width + lanes - 1) // lanes)
        a = _ceil(alu) + tree
        s = _ceil(sfu)
        rd = _ceil(passes[p] * in_bytes[t] / read_bpc)
        wr = _ceil(out_bytes[t] / write_bpc)
        latency = depth + reductions[p] * levels * stage
        busy = max(max(a, s), max(rd, wr))
        out[t, 0] = latency + busy
        out[t, 1] = a
        out[t, 2] = s
        out[t, 3] = tree
        out[t, 4] = rd
        out[t, 5] = wr
        out[t, 6] = latency
    return out


class TileTiming:
    """A vector engine's timing for a fixed list of works (the kernel's arrays built once)."""

    def __init__(self, cfg: VectorConfig, works):
        self.cfg = cfg
        self.works = list(works)
        arrays = [w.arrays() for w in self.works] or [(np.zeros(len(OPS)), np.zeros(len(OPS)))]
        self.per_element = np.array([a[0] for a in arrays], dtype=np.float64)
        self.per_row = np.array([a[1] for a in arrays], dtype=np.float64)
        self.reductions = np.array([w.reductions for w in self.works] or [0], dtype=np.int64)
        self.passes = np.array([w.passes for w in self.works] or [1], dtype=np.int64)
        self.cost = np.array([cfg.cost_of(op) for op in OPS], dtype=np.float64)
        self.is_sfu = np.array([op in SFU_OPS for op in OPS], dtype=np.bool_)

    def cycles(self, profile, rows, cols, in_bytes, out_bytes) -> np.ndarray:
        """int64[tiles, 7]: the :data:`T_CYCLES`.. columns of each tile."""
        cfg = self.cfg
        as64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
        return _tiles_kernel(as64(profile), as64(rows), as64(cols), as64(in_bytes),
                             as64(out_bytes), self.per_element, self.per_row, self.reductions,
                             self.passes, self.cost, self.is_sfu, cfg.lanes, cfg.pack,
                             cfg.pipeline_depth, cfg.reduction_stage_cycles,
                             cfg.read_bytes_per_cycle, cfg.write_bytes_per_cycle)


def tiles_cycles(cfg: VectorConfig, works, profile, rows, cols, in_bytes, out_bytes) -> np.ndarray:
    """Timing of many tiles at once (see :class:`TileTiming`)."""
    return TileTiming(cfg, works).cycles(profile, rows, cols, in_bytes, out_bytes)


def tile_cycles(cfg: VectorConfig, work: VectorWork, rows: int, cols: int, in_bytes: int,
                out_bytes: int) -> dict[str, int]:
    """One tile's timing as a dict: ``cycles``, ``alu``, ``sfu``, ``tree``, ``read``,
    ``write``, ``latency`` (module docstring)."""
    for key, value in (("rows", rows), ("cols", cols), ("in_bytes", in_bytes),
                       ("out_bytes", out_bytes)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"tile_cycles: {key} = {value!r}: must be an integer >= 0")
    row = tiles_cycles(cfg, [work], [0], [rows], [cols], [in_bytes], [out_bytes])[0]
    keys = ("cycles", "alu", "sfu", "tree", "read", "write", "latency")
    return {k: int(v) for k, v in zip(keys, row)}
