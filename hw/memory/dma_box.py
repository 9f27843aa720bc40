"""A DMA transfer of a strided box against the cycle-level DRAM model, and the clock crossing.

The executor's ``LOAD``/``STORE``/host copies describe their DRAM side as a 3-level strided box
(``n2`` blocks of ``n1`` chunks of ``chunk`` contiguous bytes, chunk ``(i2, i1)`` at
``addr + i2*stride2 + i1*stride1``; :mod:`hw.program`). :func:`dram_box_transfer` offers every
column request of the box to the DRAM model (:mod:`hw.memory.dram`) as one in-order stream, and
:class:`Clocks` converts between the core's and the DRAM's clocks around it.
"""

from __future__ import annotations

import math

import numpy as np
from hw._jitcache import njit

from hw.memory import _dram_requests as K
from hw.memory.dram import DramModel

__all__ = ["dram_box_transfer", "box_requests", "Clocks"]


@njit(cache=True)
def box_requests(addr, n2, stride2, n1, stride1, chunk, request_bytes):
    """Addresses of the column requests covering every chunk of a strided box, in order."""
    rb = request_bytes
    count = 0
    for i2 in range(n2):
        for i1 in range(n1):
            a = addr + i2 * stride2 + i1 * stride1
            count += (a + chunk - 1) // rb - a // rb + 1
    addrs = np.empty(count, np.int64)
    k = 0
    for i2 in range(n2):
        for i1 in range(n1):
            a = addr + i2 * stride2 + i1 * stride1
            for r in range(a // rb, (a + chunk - 1) // rb + 1):
                addrs[k] = r * rb
                k += 1
    return addrs


def dram_box_transfer(dram: DramModel, addr, n2, stride2, n1, stride1, chunk, is_write, start,
                      max_outstanding) -> int:
    """Offer every request of a strided box to the DRAM model as one in-order stream (so the
    DMA's outstanding-request window spans chunk boundaries); return the last completion.
    (Plain Python around the kernel's entry points: a Numba function here calling into another
    module's kernel would keep a stale copy of it in its on-disk cache.)"""
    if n2 * n1 == 1:
        return dram.transfer(addr, chunk, is_write, start, max_outstanding)
    addrs = box_requests(addr, n2, stride2, n1, stride1, chunk, dram.cfg.request_bytes)
    count = addrs.shape[0]
    window = max(min(max_outstanding, count), 1)
    return int(K.run_requests(
        dram.params, dram.state, dram.stats, addrs, np.full(count, int(is_write), np.uint8),
        np.full(count, start, np.int64), 0, bool(is_write), np.int64(start), count, window,
        np.empty(window, np.int64), np.empty((0, K.LOG_FIELDS), np.int64), np.zeros(1, np.int64)))


class Clocks:
    """Core <-> DRAM clock conversion (rounding up: data is usable on the next edge)."""

    def __init__(self, core_mhz: float, dram_mhz: float):
        self.ratio = dram_mhz / core_mhz

    def to_dram(self, t: int) -> int:
        return int(math.ceil(t * self.ratio - 1e-9))

    def to_core(self, t: int) -> int:
        return int(math.ceil(t / self.ratio - 1e-9))
