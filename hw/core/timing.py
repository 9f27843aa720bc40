"""The cycles each command takes on the RTL core (:mod:`hw.core.rtl`), from its command word.

The executor (:func:`hw.executor.execute` with ``durations=``) schedules a lowered program with
these, engines in order and dependencies as always; the co-simulation (:mod:`hw.core.cosim`)
holds every command's start and end in the RTL equal to the executor's. Rules (``P`` the row
bytes of the scratchpad a transfer uses, ``L`` the vector lanes):

* ``LOAD`` / ``STORE``: ``setup + pieces``, a piece being the part of one chunk of the DRAM
  box inside one scratchpad row (the box lands packed from byte 0 of its half). When every
  chunk is a whole number of rows this is ``setup + bytes / P``, the executor's own rule on an
  ideal DRAM with a free scratchpad port; unaligned chunks take a cycle per row they touch.
* ``COMPUTE``: :func:`compute_cycles`: the register model's cycles for the tile on a
  weight-stationary array whose output is de-skewed (a fold with fewer than C columns still
  ends C - 1 cycles after its last vector enters), plus the read cycle and the write.
* ``VECTOR``: ``beats + 2 + LATENCY``: one beat per cycle from the cycle after the start, the
  scratchpad's read cycle, the lanes' pipeline (:data:`hw.vector.rtl.lane.LATENCY`), and the
  write. Element-wise ops: ``ceil(elements / L)`` beats; pooling: one beat per real window
  element (padding is skipped) per block of ``L`` channels; an epilogue one beat per row of
  ``L`` int32 accumulators.

With the AXI4 port (:class:`hw.core.rtl.axi.AxiCore`) and a slave that answers every
handshake at once, ``latency`` cycles after an address (reads) or a burst's last data beat
(writes), a piece of ``b`` bytes at DRAM address ``a`` takes
``2 + beats + bursts x (1 + latency)`` cycles instead of one (:func:`axi_piece_cycles`:
``beats`` the aligned bus beats it touches, ``bursts`` 2 where it crosses 4 KB, else 1).

The executor's own models differ on purpose: its vector engine is the cost table of
:mod:`hw.vector.timing` (an engine with ``pipeline_depth`` and packed ALU ops) and its
transfers pay whole rows only; these rules are what this small core does.
"""

from __future__ import annotations

import numpy as np

from hw.core.isa import VOP, CoreProgram, Op

__all__ = ["durations", "transfer_pieces", "box_pieces", "axi_piece_cycles", "pool_beats",
           "compute_cycles", "VECTOR_OVERHEAD"]

#: Cycles a vector command takes beyond its beats: the read, the lanes, the write.
VECTOR_OVERHEAD = 2 + 3


def transfer_pieces(n2: int, n1: int, chunk: int, row: int) -> int:
    """Pieces of a box of ``n2 x n1`` chunks of ``chunk`` bytes packed into rows of ``row``."""
    starts = np.arange(n2 * n1, dtype=np.int64) * chunk
    return int(((starts + chunk - 1) // row - starts // row + 1).sum())


def box_pieces(w: dict, row: int) -> tuple[np.ndarray, np.ndarray]:
    """The DRAM address and bytes of every piece of a LOAD or STORE word's box, in the DMA's
    order (chunks packed from byte 0 of the half, cut at every ``row`` bytes)."""
    i2, i1 = np.divmod(np.arange(w["n2"] * w["n1"], dtype=np.int64), w["n1"])
    base = w["dram_addr"] + i2 * w["stride2"] + i1 * w["stride1"]
    chunk = w["chunk"]
    start = np.arange(len(base), dtype=np.int64) * chunk        # packed place of each chunk
    cuts = [np.unique(np.concatenate([[s], np.arange(-(-s // row) * row, s + chunk, row),
                                      [s + chunk]])) for s in start]
    addr = np.concatenate([b + c[:-1] - s for b, c, s in zip(base, cuts, start)])
    size = np.concatenate([np.diff(c) for c in cuts])
    return addr, size


def axi_piece_cycles(addr: np.ndarray, size: np.ndarray, data_bytes: int,
                     latency: int) -> np.ndarray:
    """Cycles of each piece through :class:`hw.core.rtl.axi.AxiBridge` with a slave that
    never waits beyond ``latency`` (module docstring)."""
    addr, size = np.asarray(addr, np.int64), np.asarray(size, np.int64)
    last = addr + size - 1
    beats = last // data_bytes - addr // data_bytes + 1
    bursts = 1 + (last // 4096 != addr // 4096)
    return 2 + beats + bursts * (1 + latency)


def pool_beats(w: dict) -> int:
    """Beats of a pooling command word: real window elements x channel blocks."""
    oy = w["r0"] + np.arange(w["rows"])
    ox = np.arange(w["out_w"])

    def real(o, stride, pad, kernel, size):
        first = o * stride - pad
        return np.minimum(kernel, size - first) - np.maximum(0, -first)

    taps = np.outer(real(oy, w["sh"], w["pad_t"], w["kh"], w["in_h"]),
                    real(ox, w["sw"], w["pad_l"], w["kw"], w["in_w"]))
    return int(taps.sum()) * w["blocks"]


def compute_cycles(m: int, n: int, k: int, rows: int, cols: int) -> int:
    """Cycles of a COMPUTE: the register model's fold recurrences (:mod:`hw.systolic.timing`,
    weight-stationary: ``W_f``, ``S_f``) with every fold ending ``R + C - 1`` cycles after its
    last vector, as the de-skewed output row is written once its last column is out, plus 2:
    the scratchpad read cycle before the array's cycle 0 and the cycle after the last write."""
    folds = -(-k // rows) * -(-n // cols)
    port, start = 0, 1
    end = start + m + rows + cols - 1
    for _ in range(1, folds):
        port = max(port + rows, start + cols - 1)
        start = max(start + m, port + 1)
        end = max(end, start + m + rows + cols - 1)
    return end + 2


def durations(core: CoreProgram, axi: tuple[int, int] | None = None) -> np.ndarray:
    """Every command's cycles on the core, indexed like ``core.program``; with ``axi =
    (data_bytes, latency)``, on :class:`hw.core.rtl.axi.AxiCore` with a slave that answers
    every handshake at once after ``latency`` cycles."""
    from hw.vector.rtl.lane import LATENCY

    assert VECTOR_OVERHEAD == 2 + LATENCY
    out = np.zeros(len(core.program), np.int64)
    geo = core.geometry
    for queue, index in zip(core.queues, core.index):
        for w, i in zip(queue, index):
            if w["op"] in (Op.LOAD, Op.STORE) and axi is not None:
                pieces = box_pieces(w, geo.row_bytes[w["spad"]])
                out[i] = geo.setup + int(axi_piece_cycles(*pieces, *axi).sum())
            elif w["op"] in (Op.LOAD, Op.STORE):
                out[i] = geo.setup + transfer_pieces(w["n2"], w["n1"], w["chunk"],
                                                     geo.row_bytes[w["spad"]])
            elif w["op"] == Op.COMPUTE:
                arr = geo.array
                out[i] = compute_cycles(w["m"], w["n"], w["k"], arr.rows, arr.cols)
            elif w["op"] == Op.VECTOR:
                if w["vop"] in (VOP["maxpool"], VOP["avgpool"]):
                    beats = pool_beats(w)
                else:
                    beats = -(-w["elems"] // geo.lanes)
                out[i] = beats + VECTOR_OVERHEAD
    return out
