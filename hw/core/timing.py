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

The executor's own models differ on purpose: its vector engine is the cost table of
:mod:`hw.vector.timing` (an engine with ``pipeline_depth`` and packed ALU ops) and its
transfers pay whole rows only; these rules are what this small core does.
"""

from __future__ import annotations

import numpy as np

from hw.core.isa import VOP, CoreProgram, Op

__all__ = ["durations", "transfer_pieces", "pool_beats", "compute_cycles", "VECTOR_OVERHEAD"]

#: Cycles a vector command takes beyond its beats: the read, the lanes, the write.
VECTOR_OVERHEAD = 2 + 3


def transfer_pieces(n2: int, n1: int, chunk: int, row: int) -> int:
    """Pieces of a box of ``n2 x n1`` chunks of ``chunk`` bytes packed into rows of ``row``."""
    starts = np.arange(n2 * n1, dtype=np.int64) * chunk
    return int(((starts + chunk - 1) // row - starts // row + 1).sum())


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


def durations(core: CoreProgram) -> np.ndarray:
    """Every command's cycles on the core, indexed like ``core.program``."""
    from hw.vector.rtl.lane import LATENCY

    assert VECTOR_OVERHEAD == 2 + LATENCY
    out = np.zeros(len(core.program), np.int64)
    geo = core.geometry
    for queue, index in zip(core.queues, core.index):
        for w, i in zip(queue, index):
            if w["op"] in (Op.LOAD, Op.STORE):
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
