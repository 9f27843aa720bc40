"""SRAM scratchpads: banked, optionally dual-ported, optionally double-buffered.

Organisation. A scratchpad of ``capacity_bytes`` is ``banks`` banks, word-interleaved: byte
address a lives in word ``a // bank_width_bytes`` of bank ``(a // bank_width_bytes) % banks``.
Each bank delivers one word per port per cycle.

Timing contract (:func:`bank_access_cycles`). A requester presents one row of lane addresses per
request cycle. Lanes that hit the same word share one access (broadcast); distinct words in one
bank are served ``ports`` per cycle. A row therefore takes ``max(1, ceil(w_max / ports))``
cycles, w_max being the most distinct words any bank must deliver, and the cycles beyond 1 are
*conflict cycles*. A row with every lane idle still takes its one cycle (it is a cycle of the
requester's schedule). :func:`vector_access_cycles` gives the same number in closed form for
the common pattern "``lanes`` elements at a constant stride".

Double buffering. The capacity is split into a ping buffer (``buffer_split`` of it) and a pong
buffer (the rest): one fills from DRAM while the array works on the other, then they swap. A
tile lands in either buffer, so the largest tile is the smaller buffer:
``tile_capacity_bytes = floor(min(split, 1 - split) * capacity_bytes)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from hw._jitcache import njit

from hw.validate import _bool, _nonneg_int, _number_in, _one_of, config_from_table
from hw.systolic.config import ConfigError, _int_in

__all__ = ["SramConfig", "sram_config_from_dict", "sram_config_to_dict", "bank_access_cycles",
           "vector_access_cycles", "Scratchpad", "SramCapacityError", "OperandCounters"]

_MAX_CAPACITY_KIB = float(1 << 30)   # 1 TiB: far beyond any on-chip SRAM, catches unit mistakes


def _power_of_two(value, key: str, where: str, hi: int) -> int:
    value = _int_in(value, key, where, 1, hi)
    if value & (value - 1):
        raise ConfigError(f"{where}: {key} = {value!r}: must be a power of two in 1..{hi}")
    return value


@dataclass(frozen=True)
class SramConfig:
    """One scratchpad.

    Attributes
    ----------
    capacity_kib:
        Capacity in KiB (1024 bytes), > 0; must be a whole number of bank rows
        (``banks * bank_width_bytes`` bytes).
    banks:
        Number of banks, a power of two in 1..1024.
    bank_width_bytes:
        Bytes one bank delivers per port per cycle (its word), a power of two in 1..1024.
    ports:
        1 (a bank serves one word per cycle) or 2 (dual-ported: two words per cycle).
    double_buffer:
        Split the capacity into ping and pong buffers (see the module docstring).
    buffer_split:
        Fraction of the capacity in the ping buffer, 0 < split < 1; only used when double
        buffered. Tiles must fit the smaller buffer.
    """

    capacity_kib: float
    banks: int = 8
    bank_width_bytes: int = 16
    ports: int = 1
    double_buffer: bool = True
    buffer_split: float = 0.5

    def __post_init__(self) -> None:
        self.validate("SramConfig")

    def validate(self, where: str, prefix: str = "") -> None:
        """Check every field; ``where`` and ``prefix`` name the source in error messages."""
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen dataclass)
        set_("banks", _power_of_two(self.banks, prefix + "banks", where, 1024))
        set_("bank_width_bytes", _power_of_two(self.bank_width_bytes, prefix + "bank_width_bytes",
                                               where, 1024))
        set_("ports", _one_of(self.ports, prefix + "ports", where, (1, 2)))
        set_("double_buffer", _bool(self.double_buffer, prefix + "double_buffer", where))
        split = self.buffer_split
        if (isinstance(split, bool) or not isinstance(split, (int, float))
                or not 0 < split < 1):
            raise ConfigError(f"{where}: {prefix}buffer_split = {split!r}: must be a number in "
                              f"(0, 1), the fraction of the capacity in the ping buffer")
        set_("buffer_split", float(split))
        kib = _number_in(self.capacity_kib, prefix + "capacity_kib", where, 0.0, _MAX_CAPACITY_KIB,
                         lo_open=True)
        row = self.banks * self.bank_width_bytes
        nbytes = kib * 1024
        if not nbytes.is_integer() or int(nbytes) % row:
            raise ConfigError(
                f"{where}: {prefix}capacity_kib = {self.capacity_kib!r}: must be a whole number of "
                f"bank rows of {prefix}banks x {prefix}bank_width_bytes = {row} bytes "
                f"({row / 1024:g} KiB)")
        set_("capacity_kib", kib)

    @property
    def capacity_bytes(self) -> int:
        return int(self.capacity_kib * 1024)

    @property
    def tile_capacity_bytes(self) -> int:
        """Largest tile that fits one buffer: the smaller of ping and pong when double
        buffered, the whole capacity otherwise."""
        if not self.double_buffer:
            return self.capacity_bytes
        smaller = min(self.buffer_split, 1.0 - self.buffer_split)
        return math.floor(smaller * self.capacity_bytes + 1e-6)

    @property
    def bytes_per_cycle(self) -> int:
        """Peak bandwidth, all banks and ports busy: banks * bank_width_bytes * ports."""
        return self.banks * self.bank_width_bytes * self.ports


def sram_config_from_dict(data: dict[str, Any], where: str, prefix: str = "") -> SramConfig:
    """Build a :class:`SramConfig` from plain data (``capacity_kib`` is required); unknown keys
    raise :class:`ConfigError` naming the key and the allowed keys."""
    return config_from_table(SramConfig, data, where, prefix)


def sram_config_to_dict(cfg: SramConfig) -> dict[str, Any]:
    """The config as plain data, readable by :func:`sram_config_from_dict`."""
    return {f.name: getattr(cfg, f.name) for f in fields(cfg)}


@njit(cache=True)
def bank_access_cycles(addresses, elem_bytes, banks, bank_width_bytes, ports):
    """Cycles to serve ``addresses`` (int64[request_cycles, lanes], byte addresses; negative =
    idle lane), each lane reading ``elem_bytes`` bytes (an element spanning two words touches
    both). Returns ``(cycles, conflict_cycles)``; ``cycles = request_cycles + conflict_cycles``.
    Timing contract in the module docstring. Arguments are not checked (Numba kernel)."""
    rows, lanes = addresses.shape
    span = (elem_bytes + bank_width_bytes - 1) // bank_width_bytes + 1
    words = np.empty(lanes * span, np.int64)
    per_bank = np.zeros(banks, np.int64)
    conflicts = 0
    for c in range(rows):
        n = 0
        for lane in range(lanes):
            addr = addresses[c, lane]
            if addr < 0:
                continue
            last = (addr + elem_bytes - 1) // bank_width_bytes
            for w in range(addr // bank_width_bytes, last + 1):
                words[n] = w
                n += 1
        if n == 0:
            continue
        touched = np.sort(words[:n])
        per_bank[:] = 0
        worst = 0
        for i in range(n):
            if i == 0 or touched[i] != touched[i - 1]:
                bank = touched[i] % banks
                per_bank[bank] += 1
                worst = max(worst, per_bank[bank])
        conflicts += (worst + ports - 1) // ports - 1
    return rows + conflicts, conflicts


def vector_access_cycles(cfg: SramConfig, lanes: int, elem_bytes: int, stride_bytes: int) -> int:
    """Cycles (>= 1) for one request cycle in which lane l reads the element at byte
    ``l * stride_bytes`` (what an array edge reads per cycle; base address 0, i.e. any address
    aligned to ``banks * bank_width_bytes``). Equals :func:`bank_access_cycles` on that row.

    ``elem_bytes`` must divide ``bank_width_bytes`` and ``stride_bytes`` (>= 0) must be a
    multiple of ``elem_bytes``, so no element spans two words. With W = bank_width_bytes, Bk =
    banks, s = stride, L = lanes, the busiest bank serves

    * s = 0: one word (broadcast);
    * s < W: the consecutive words 0..floor((L-1)s/W), round robin: ceil(words / Bk);
    * s a multiple of W: lane l hits bank l(s/W) mod Bk, cycling through Bk / gcd(s/W, Bk)
      banks: ceil(L / that);
    * otherwise every lane hits its own word and the bank pattern repeats every
      (W/g) * Bk/gcd(s/g, Bk) lanes (g = gcd(s, W)): one period is counted and scaled.
    """
    for name, value, lo in (("lanes", lanes, 1), ("elem_bytes", elem_bytes, 1),
                            ("stride_bytes", stride_bytes, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
            raise ValueError(f"{name} = {value!r}: must be an integer >= {lo}")
    width, banks = cfg.bank_width_bytes, cfg.banks
    if width % elem_bytes or stride_bytes % elem_bytes:
        raise ValueError(f"elem_bytes = {elem_bytes}, stride_bytes = {stride_bytes}: elem_bytes "
                         f"must divide bank_width_bytes ({width}) and stride_bytes")
    if stride_bytes == 0 or lanes == 1:
        worst = 1                                            # one word, broadcast to every lane
    elif stride_bytes < width:
        words = (lanes - 1) * stride_bytes // width + 1      # consecutive words, round robin
        worst = -(-words // banks)
    elif stride_bytes % width == 0:
        hit = banks // math.gcd(stride_bytes // width, banks)   # banks on the stride's orbit
        worst = -(-lanes // hit)
    else:
        g = math.gcd(stride_bytes, width)
        p = stride_bytes // g
        period = (width // g) * (banks // math.gcd(p, banks))   # lanes after which banks repeat
        lane = np.arange(min(lanes, period), dtype=np.int64)
        bank = lane * stride_bytes // width % banks
        full, rest = divmod(lanes, period)
        counts = full * np.bincount(bank, minlength=banks) if full else np.zeros(banks, np.int64)
        counts = counts + np.bincount(bank[:rest], minlength=banks)
        worst = int(counts.max())
    return -(-worst // cfg.ports)


class SramCapacityError(ValueError):
    """A tile does not fit one buffer of a scratchpad."""


@dataclass
class OperandCounters:
    """Accesses of one operand to one scratchpad: elements, bytes and conflict cycles."""

    reads: int = 0
    writes: int = 0
    read_bytes: int = 0
    write_bytes: int = 0
    conflict_cycles: int = 0


class Scratchpad:
    """A scratchpad instance: counts accesses per operand and checks that tiles fit.

    Parameters
    ----------
    name:
        Shown in errors and reports, e.g. ``"ifmap"``.
    config:
        Its :class:`SramConfig`.

    Counters are integers, keyed in :meth:`as_dict` as ``{operand}_sram_reads``,
    ``{operand}_sram_writes``, ``{operand}_sram_read_bytes``, ``{operand}_sram_write_bytes``,
    ``{operand}_sram_conflict_cycles``, plus ``{name}_sram_peak_tile_bytes``.
    """

    def __init__(self, name: str, config: SramConfig) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"name = {name!r}: must be a non-empty string")
        if not isinstance(config, SramConfig):
            raise TypeError(f"config = {config!r}: must be a SramConfig")
        self.name = name
        self.config = config
        self.peak_tile_bytes = 0
        self._operands: dict[str, OperandCounters] = {}

    def reserve(self, nbytes: int, what: str) -> None:
        """Check that a tile of ``nbytes`` (described by ``what``, e.g. ``"conv1 ifmap tile
        3x3x64"``) fits one buffer; record the largest. Raises :class:`SramCapacityError`."""
        _nonneg_int("nbytes", nbytes)
        cfg = self.config
        limit = cfg.tile_capacity_bytes
        if nbytes > limit:
            layout = (f"double-buffered, ping {cfg.buffer_split:g} of it" if cfg.double_buffer
                      else "single-buffered")
            raise SramCapacityError(
                f"scratchpad {self.name!r}: {what} needs {nbytes:,} bytes but one buffer holds "
                f"{limit:,} bytes ({cfg.capacity_kib:g} KiB, {layout}); use smaller tiles or a "
                f"larger {self.name} scratchpad")
        self.peak_tile_bytes = max(self.peak_tile_bytes, int(nbytes))

    def read(self, operand: str, elements: int, elem_bytes: int, conflict_cycles: int = 0) -> None:
        """Count ``elements`` reads of ``elem_bytes`` each by ``operand``."""
        c = self._counters(operand, elements, elem_bytes, conflict_cycles)
        c.reads += int(elements)
        c.read_bytes += int(elements) * int(elem_bytes)
        c.conflict_cycles += int(conflict_cycles)

    def write(self, operand: str, elements: int, elem_bytes: int, conflict_cycles: int = 0) -> None:
        """Count ``elements`` writes of ``elem_bytes`` each by ``operand``."""
        c = self._counters(operand, elements, elem_bytes, conflict_cycles)
        c.writes += int(elements)
        c.write_bytes += int(elements) * int(elem_bytes)
        c.conflict_cycles += int(conflict_cycles)

    def counters(self, operand: str) -> OperandCounters:
        """A copy of ``operand``'s counters (zeros if it never accessed this scratchpad)."""
        c = self._operands.get(operand, OperandCounters())
        return OperandCounters(**vars(c))

    def as_dict(self) -> dict[str, int]:
        """All counters as plain integers (see the class docstring for the keys)."""
        out: dict[str, int] = {}
        for operand, c in self._operands.items():
            for key, value in vars(c).items():
                out[f"{operand}_sram_{key}"] = value
        out[f"{self.name}_sram_peak_tile_bytes"] = self.peak_tile_bytes
        return out

    def _counters(self, operand, elements, elem_bytes, conflict_cycles) -> OperandCounters:
        if not isinstance(operand, str) or not operand.isidentifier():
            raise ValueError(f"operand = {operand!r}: must be a name such as 'ifmap'")
        _nonneg_int("elements", elements)
        _nonneg_int("elem_bytes", elem_bytes)
        _nonneg_int("conflict_cycles", conflict_cycles)
        return self._operands.setdefault(operand, OperandCounters())
