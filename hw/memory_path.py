"""The executor's memory side: how a load or store of :mod:`hw.executor` reaches DRAM, the L2
and the on-chip network.

:class:`MemoryPath` is the part of the executor's per-chip state (``hw.executor._ChipRun``) that
times transfers:

* ``_dram``: a transfer's box in the cycle-level DRAM model (:mod:`hw.memory.dram`), once per
  distinct copy the layer's cores move (another core's copy continues the box's outer
  dimension at its own addresses, :func:`_box_span` apart);
* ``_cached``: the same on a ``dram.model = "cached"`` DRAM, each box shape simulated once;
* ``_shared``: a load or store of a multi-core chip (:mod:`compiler.backends.multicore`). The
  core's network port and the whole network carry every core's bytes after the network's
  latency; an ``L2`` transfer books the L2's read or write side for every core; a ``DRAM``
  one goes to DRAM for its copies and, with an L2, fills the L2 (loads are then read from it
  by every core) or writes through it. The core's own scratchpad side is booked last. The
  core's DMA engine is free again once the transfer's bytes have passed its network port.

Every booking on a shared resource (``_res``) starts when the transfer starts or when the
resource is free, whichever is later, so no resource moves more than its bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from hw.layer_windows import CAUSE_DRAM, CAUSE_SRAM
from hw.memory import _dram_kernel as K
from hw.memory.dma_box import dram_box_transfer
from hw.memory.dram import DramModel
from hw.memory.l2 import busiest_bank_bytes
from hw.program import Kind, Location, Operand
from hw.systolic.geometry import GemmOperand

__all__ = ["MemoryPath"]

_STAT_INDEX = {"reads": K.ST_READS, "writes": K.ST_WRITES, "row_hits": K.ST_ROW_HITS,
               "row_misses": K.ST_ROW_MISSES, "row_conflicts": K.ST_ROW_CONFLICTS,
               "activates": K.ST_ACTIVATES}
_STAT_KEYS = ("reads", "writes", "row_hits", "row_misses", "row_conflicts", "activates")
_STAT_COLS = ("dram_bus_read_bytes", "dram_bus_write_bytes", "dram_row_hits",
              "dram_row_misses", "dram_row_conflicts", "dram_activates")
#: ``(statistic, column, counts requests)`` for :meth:`MemoryPath._dram_stats`
_STAT_PLAN = tuple((_STAT_INDEX[key], c, key in ("reads", "writes"))
                   for key, c in zip(_STAT_KEYS, _STAT_COLS))
_SRAMS = tuple(o.sram for o in GemmOperand)   # indexed by GemmOperand: ifmap, filter, ofmap
_READ, _WRITE = 0, 1


def _box_span(n2: int, s2: int, n1: int, s1: int, chunk: int) -> int:
    """Bytes from a box's first byte past its last, rounded up to 4 KiB: where the next copy
    of it (another core's) starts."""
    return -(-((n2 - 1) * s2 + (n1 - 1) * s1 + chunk) // 4096) * 4096


def _copied(n2: int, s2: int, n1: int, s1: int, chunk: int, copies: int) -> tuple[int, int]:
    """``(n2, stride2)`` of a box moved ``copies`` times: the other cores' copies continue its
    outer dimension, each at its own addresses."""
    if copies > 1 and n2 == 1:        # the copies are the outer dimension of one box
        return copies, _box_span(1, 0, n1, s1, chunk)
    return n2 * max(1, copies), s2


def box_extent(n2: int, s2: int, n1: int, s1: int, chunk: int, copies: int = 1) -> int:
    """Bytes from a box's first byte past the last of its ``copies`` (as the executor moves
    them), rounded up to 4 KiB."""
    n2, s2 = _copied(n2, s2, n1, s1, chunk, copies)
    return _box_span(n2, s2, n1, s1, chunk)


class MemoryPath:
    """Transfer timing, mixed into the executor's per-chip state: it reads the state's command
    columns (``cols``, ``layers``, ``locations``, ``layer_cores``; ``boxes``: each command's
    DRAM box ``(addr, n2, stride2, n1, stride1, chunk_bytes)`` as Python ints), the DRAM (``dram``,
    ``clocks``, ``max_out``, ``req_bytes``, ``addr_offset``) and the shared resources' free
    cycles (``res_free``), and adds to a layer's counter ``row``."""

    def _dram(self, i: int, t_start: int, is_write: bool, copies: int, row) -> int:
        """Command ``i``'s box in the DRAM model from core cycle ``t_start``, ``copies`` times
        (the other cores' copies continue the box's outer dimension, each at its own
        addresses); the core cycle the last request completes. Adds the DRAM's statistics to
        ``row``. A ``cached`` DRAM (``dram.model``) times it with :meth:`_cached`."""
        dram = self.dram
        if dram is None:
            return t_start
        addr, n2, s2, n1, s1, chunk = self.boxes[i]
        addr += self.addr_offset
        n2, s2 = _copied(n2, s2, n1, s1, chunk, copies)
        t0 = self.clocks.to_dram(t_start)
        if self.dram_cached:
            done, delta = self._cached(addr, n2, s2, n1, s1, chunk, is_write, t0)
        else:
            before = dram.stats.copy()
            done = dram_box_transfer(dram, addr, n2, s2, n1, s1, chunk, is_write, t0,
                                     self.max_out)
            delta = dram.stats - before
        self._dram_stats(delta, row)
        return max(t_start, self.clocks.to_core(done))

    def _cached(self, addr, n2, s2, n1, s1, chunk, is_write, t0):
        """A ``cached`` DRAM (``dram.model``): each box shape (and its address within an 8 KiB
        stretch, which fixes its first channels and banks) is simulated once on an idle DRAM
        without refresh, giving its time ``D`` and statistics. A box of more than 4 blocks and
        4,096 requests is simulated for enough whole blocks to make 4,096 requests and scaled
        to all of them (a stream's rate is steady). The data bus is held for the box's
        *occupancy*: the time one more such box adds when they stream back to back (a short box
        is simulated again four times over: ``(D4 - D) / 3``; a long one: ``D`` less one
        request's latency); refresh stretches it by ``trefi / (trefi - trfc)``, the share of
        time a channel is not refreshing. The transfer ends at ``max(start + D, bus free +
        occupancy)``: alone it takes ``D``, behind others its latency overlaps them. ``(finish,
        statistics)`` in DRAM cycles."""
        key = (addr % 8192, n2, s2, n1, s1, chunk, is_write)
        hit = self.shape_cache.get(key)
        if hit is None:
            first = self.first_latency.get(is_write)
            if first is None:
                first = self.first_latency[is_write] = dram_box_transfer(
                    self._idle_dram(), 0, 1, 0, 1, 0, self.req_bytes, is_write, 0, self.max_out)
            per_block = n1 * -(-chunk // self.req_bytes)
            blocks = n2
            if n2 > 4 and n2 * per_block > 4096:
                blocks = max(2, -(-4096 // per_block))
            idle = self._idle_dram()
            done = dram_box_transfer(idle, addr, blocks, s2, n1, s1, chunk, is_write, 0,
                                     self.max_out)
            scale = n2 / blocks
            stats = np.rint(idle.stats * scale).astype(np.int64)
            if n2 * per_block >= 4096:
                alone = first + (done - first) * scale
                occupancy = alone - first
            else:                 # short: its marginal time among boxes like it
                span = _box_span(n2, s2, n1, s1, chunk)
                box4 = (4, span) if n2 == 1 else (4 * n2, s2)
                four = dram_box_transfer(self._idle_dram(), addr, box4[0], box4[1], n1, s1,
                                         chunk, is_write, 0, self.max_out)
                alone = done
                occupancy = max(1.0, (four - done) / 3)
            hit = self.shape_cache[key] = (
                round(first + (alone - first) * self.refresh_stretch),
                max(1, round(occupancy * self.refresh_stretch)), stats)
        alone, occupancy, stats = hit
        end = max(t0 + alone, self.bus_free + occupancy)
        self.bus_free = end
        self.dram.stats += stats        # the DRAM's totals count it as if it had run there
        return end, stats

    def _idle_dram(self) -> DramModel:
        """A DRAM model without refresh in its initial state (one model, reset: building one
        costs ~1 ms)."""
        if self.idle is None:
            cfg = self.dram.cfg
            self.idle = DramModel(replace(cfg, refresh=False))
            self.idle_state = self.idle.state.copy()
            self.refresh_stretch = (cfg.trefi / (cfg.trefi - cfg.trfc) if cfg.refresh else 1.0)
        self.idle.state[:] = self.idle_state
        self.idle.stats[:] = 0
        return self.idle

    def _dram_stats(self, delta, row) -> None:
        """Add the DRAM statistics ``delta`` (the kernel's layout) to ``row``: requests as bus
        bytes, row hits, misses, conflicts and activates as counts."""
        d, col = delta.tolist(), self.col
        for stat, c, scale in _STAT_PLAN:
            row[col[c]] += d[stat] * (self.req_bytes if scale else 1)

    def _res(self, name: str, start: int, nbytes: float, per_cycle: float, row, column: str) -> int:
        """Book ``nbytes`` on shared resource ``name`` (``per_cycle`` bytes a cycle) from
        ``start`` or when it is free; the cycle the booking ends."""
        cycles = math.ceil(nbytes / per_cycle) if nbytes else 0
        if cycles <= 0:
            return start
        end = max(start, self.res_free[name]) + cycles
        self.res_free[name] = end
        row[self.col[column]] += cycles
        return end

    def _bank_skew(self, i: int, copies: int) -> tuple[int, int] | None:
        """``(busiest bank's bytes x banks, bytes)`` of command ``i``'s box and its ``copies``
        on an L2 with plain bank interleaving (``l2.bank_hash = false``,
        :func:`hw.memory.l2.busiest_bank_bytes`); None where every bank takes an even share
        (hashed banks, or nothing to move)."""
        l2 = self.chip.l2
        if l2.bank_hash:
            return None
        addr, n2, s2, n1, s1, chunk = self.boxes[i]
        n2, s2 = _copied(n2, s2, n1, s1, chunk, copies)
        box = n2 * n1 * chunk
        if not box:
            return None
        worst = busiest_bank_bytes(l2, addr + self.addr_offset, n2, s2, n1, s1, chunk)
        return worst * l2.banks, box

    def _l2(self, side: str, start: int, total: int, skew: tuple[int, int] | None, row) -> int:
        """Book ``total`` bytes on an L2 side (each byte of the box ``skew`` describes moved
        ``total / box`` times); the cycle the booking ends. With plain bank interleaving
        (``skew``, :meth:`_bank_skew`) the booking lasts as long as the busiest bank needs; the
        cycles that adds are ``l2_conflict_cycles``."""
        per_cycle = self.chip.l2.bytes_per_cycle
        booked = total
        if skew is not None and total:
            worst_banks, box = skew
            booked = max(total, math.ceil(worst_banks * total / box))
            row[self.col["l2_conflict_cycles"]] += (math.ceil(booked / per_cycle)
                                                    - math.ceil(total / per_cycle))
        return self._res(side, start, booked, per_cycle, row, f"{side}_port_cycles")

    def _shared(self, i: int, t_start: int, kind: int, operand: int, nbytes: int, copies: int,
                row) -> tuple[int, int]:
        """A load or store of a multi-core chip (module docstring): its DRAM copies, the L2 and
        the network for every core of the layer, one core's scratchpad side. ``(finish,
        release)``: the core's DMA engine is free for its next transfer once this one's bytes
        have passed its network port (its requests are issued; their latency and the shared
        resources' queues overlap the next transfer, as a GPU SM keeps many loads in
        flight)."""
        col, lay = self.col, int(self.layers[i])
        cores = int(self.layer_cores[lay])
        l2, noc = self.chip.l2, self.chip.noc
        location = int(self.locations[i])
        load = kind == Kind.LOAD
        t1 = t_dram = t_start
        if kind == Kind.STORE and operand == Operand.NONE:     # an L2 write-back
            t1 = self._l2("l2_read", t_start, nbytes, self._bank_skew(i, 1), row)
            t_dram = self._dram(i, t_start, True, 1, row)
            row[col["l2_read_bytes"]] += nbytes
            row[col["dram_ofmap_write_bytes"]] += nbytes
            self.cause[i] = CAUSE_DRAM
            return max(t1, t_dram), max(t1, t_dram)
        every = nbytes * cores                  # all cores' bytes on the network
        lat = self.noc_latency
        # the network: this core's port and, in aggregate, every core's transfer
        t_port = self._res("noc_in" if load else "noc_out", t_start + lat, nbytes,
                           noc.link_bytes_per_cycle, row,
                           "noc_in_port_cycles" if load else "noc_out_port_cycles")
        t_net = max(t_port, self._res("net_in" if load else "net_out", t_start + lat, every,
                                      self.noc_aggregate, row,
                                      "noc_network_in_cycles" if load
                                      else "noc_network_out_cycles"))
        row[col["noc_bytes"]] += every
        self.cause[i] = CAUSE_DRAM
        skew = self._bank_skew(i, copies)     # one box for every L2 booking below
        if location == Location.L2:           # served by the L2 / kept in it
            side = "l2_read" if load else "l2_write"
            t1 = self._l2(side, t_start + lat + l2.latency_cycles, every, skew, row)
            row[col["l2_read_bytes" if load else "l2_write_bytes"]] += every
            if load:
                row[col["l2_hit_bytes"]] += every
        else:
            t_dram = self._dram(i, t_start, not load, copies, row) if nbytes else t_start
            t1 = t_dram
            if l2.present:                    # through the L2: a fill, or a write-through
                t1 = max(t1, self._l2("l2_write", t_start, nbytes * copies, skew, row))
                row[col["l2_write_bytes"]] += nbytes * copies
                if load:                      # every core then reads its tile from the L2
                    t1 = max(t1, self._l2("l2_read", t_start + l2.latency_cycles, every,
                                          skew, row))
                    row[col["l2_read_bytes"]] += every
                    row[col["l2_miss_bytes"]] += nbytes * copies
                    row[col["l2_hit_bytes"]] += every - nbytes * copies
            row[col["dram_transfer_cycles"]] += max(0, t_dram - max(t_start, self.dram_busy_until))
            self.dram_busy_until = max(self.dram_busy_until, t_dram)
            dram_bytes = nbytes * copies
            if load:
                name = {Operand.IFMAP: "ifmap", Operand.FILTER: "filter", Operand.PSUM: "psum",
                        Operand.RESIDUAL: "ifmap"}[operand]
                row[col[f"dram_{name}_read_bytes"]] += dram_bytes
                if operand == Operand.RESIDUAL:
                    row[col["dram_residual_read_bytes"]] += dram_bytes
            else:
                row[col["dram_psum_write_bytes" if operand == Operand.PSUM
                        else "dram_ofmap_write_bytes"]] += dram_bytes
        t1 = max(t1, t_net)
        # this core's scratchpad side (the other cores' are theirs)
        sram = (2 if not load or operand in (Operand.PSUM, Operand.RESIDUAL)
                else 0 if operand == Operand.IFMAP else 1)
        t_port = self._book(sram, _WRITE if load else _READ, t_start, 8 * nbytes, row)
        if t_port > t1:
            t1 = t_port
            self.cause[i] = CAUSE_SRAM
        if load:
            if operand == Operand.RESIDUAL:
                row[col["ofmap_sram_fill_bytes"]] += nbytes
            elif operand != Operand.PSUM:
                row[col[f"{_SRAMS[sram]}_sram_fill_bytes"]] += nbytes
            row[col["loads"]] += 1
        else:
            row[col["ofmap_sram_drain_bytes"]] += nbytes
            row[col["stores"]] += 1
        return t1, t_port
