"""Per-layer accounting windows of an executed program, and the array timeline charged to them.

The executor (:mod:`hw.executor`) cuts the array's timeline into segments: compute cycles
(:data:`COMPUTE`) and cycles stalled for one of :data:`STALL_CAUSES` (codes ``CAUSE_DRAM``,
``CAUSE_LINK``, ``CAUSE_SRAM``, ``CAUSE_VECTOR``: waiting for the vector engine). This module
gives each layer its window and charges the segments to the windows.

Layer ``i`` owns the window ``(E[i-1], E[i]]`` where ``E[i]`` is the finish of its last command
(never before ``E[i-1]``), cut back to the start of a later layer's first compute when that
compute began earlier (it ran under layer ``i``'s stores); so the layers' cycles add up to the
program's, every compute command lies in its own layer's window (a layer's ``cycles`` is never
below its compute cycles, hence never below MACs / PEs), and in each window ``cycles = compute +
stall_dram + stall_link + stall_sram + stall_vector`` exactly. A layer's loads may still run in
the previous layer's window (prefetch) and its stores in the next one's. Only the array's
computes cut windows: the vector engine runs beside the array, so a vector layer's commands
may run under an earlier layer's window (its work then shows there as the ``vector`` cause
only where the array waited for it).
"""

from __future__ import annotations

import numpy as np

from hw.program import Kind, Program

__all__ = ["STALL_CAUSES", "CAUSE_NONE", "CAUSE_DRAM", "CAUSE_LINK", "CAUSE_SRAM", "CAUSE_VECTOR",
           "COMPUTE",
           "layer_ends", "window_cycles", "charge_windows"]

#: What a stalled array waited for; ``CAUSE_*`` are indices into it. ``vector``: the vector
#: engine's work on the critical path (a softmax between two GEMMs, a layer of pooling).
STALL_CAUSES = ("dram", "link", "sram", "vector")
CAUSE_NONE, CAUSE_DRAM, CAUSE_LINK, CAUSE_SRAM, CAUSE_VECTOR = -1, 0, 1, 2, 3
#: Segment category of busy array cycles.
COMPUTE = 4


def layer_ends(program: Program, finish, start, kinds, total: int) -> np.ndarray:
    """``ends[i]``: the end of layer ``i``'s window ``(ends[i-1], ends[i]]`` (module docstring).

    ``E[i]`` = the finish of the layer's last command (never before ``E[i-1]``), cut back to the
    start of the next compute of a later layer when that compute began earlier (it overlapped
    layer ``i``'s stores): so every compute command lies in its own layer's window. The array
    runs its commands one at a time in layer order, so the cut never falls inside layer ``i``'s
    own compute."""
    n_layers = len(program.layers)
    ends = np.zeros(n_layers, np.int64)
    first_compute = np.full(n_layers + 1, total, np.int64)
    prev = 0
    for li, ls in enumerate(program.layers):
        if ls.last > ls.first:
            seg = slice(ls.first, ls.last)
            prev = max(prev, int(finish[seg].max()))
            comp = kinds[seg] == Kind.COMPUTE
            if comp.any():
                first_compute[li] = int(start[seg][comp].min())
        ends[li] = prev
    # earliest compute start of any later layer (suffix minimum)
    later = np.minimum.accumulate(first_compute[::-1])[::-1][1:]
    ends = np.minimum(ends, later)
    return np.maximum.accumulate(ends) if n_layers else ends


def charge_windows(counters, col, ends, seg_start, seg_end, seg_cat) -> None:
    """Split the array timeline's segments over the layer windows ``(ends[i-1], ends[i]]``."""
    names = {COMPUTE: "compute_cycles", CAUSE_DRAM: "stall_dram_cycles",
             CAUSE_LINK: "stall_link_cycles", CAUSE_SRAM: "stall_sram_cycles",
             CAUSE_VECTOR: "stall_vector_cycles"}
    w = 0
    for s, e, c in zip(seg_start, seg_end, seg_cat):
        while s < e:
            while w < len(ends) and ends[w] <= s:
                w += 1
            if w == len(ends):
                return
            cut = min(e, int(ends[w]))
            counters[w, col[names[c]]] += cut - s
            s = cut


def window_cycles(counters, col, ends) -> None:
    """Each layer's ``cycles``: the length of its window."""
    prev = 0
    for w, e in enumerate(ends):
        counters[w, col["cycles"]] = int(e) - prev
        prev = int(e)
