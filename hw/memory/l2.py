"""The shared L2 (global buffer) of a multi-core chip: between the cores' scratchpads and DRAM.

Organisation. ``capacity_kib`` of SRAM in ``banks`` banks of ``bank_width_bytes``, shared by
every core through the on-chip network (:mod:`hw.memory.noc`). Like a scratchpad it has a read
side and a write side, each moving ``banks x bank_width_bytes`` bytes a cycle (the chip's
aggregate L2 bandwidth); a hit costs ``latency_cycles`` before its first byte.

Banks. With ``bank_hash`` (the default) addresses are hashed over the banks, as GPUs' L2
slices are, so any stride spreads evenly and the banks are the limit only in aggregate. Without
it, line ``address // interleave_bytes`` lives in bank ``line mod banks`` (plain interleaving,
as in many NPU global buffers): a tile whose rows are a multiple of ``banks x
interleave_bytes`` apart camps on a few banks, and a transfer takes as long as its busiest
bank needs (:func:`busiest_bank_bytes`): the rest of the banks wait. The executor counts the
extra cycles as ``l2_conflict_cycles``.

What it holds is the compiler's choice (:mod:`compiler.backends.multicore`), as on a TPU's CMEM
or an NPU's global buffer, and as LLMCompass models the A100's L2: tiles that several cores or
several passes read are loaded from DRAM once and then served from the L2, and an op's output
stays in the L2 for the ops that read it next when it fits (``keep_outputs``). Timing
(:mod:`hw.executor`): a load served by the L2 books its bytes on the L2 read side and on the
network; a load from DRAM books the DRAM, the L2 write side (the fill) and the network; a store
books the network and the L2 write side, and the DRAM unless the tensor stays in the L2.

``capacity_kib = 0`` (the default) is a chip without an L2: transfers go between DRAM and the
scratchpads as on a one-core chip, and no number differs from a chip that predates the L2.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from hw.systolic.config import ConfigError, _int_in
from hw.validate import _bool, _number_in, config_from_table

__all__ = ["L2Config", "l2_config_from_dict", "l2_config_to_dict", "busiest_bank_bytes"]

_MAX_CAPACITY_KIB = float(1 << 30)   # 1 TiB, as the scratchpads: catches unit mistakes


@dataclass(frozen=True)
class L2Config:
    """The shared L2.

    Attributes
    ----------
    capacity_kib:
        Capacity in KiB, 0 (no L2: the default) .. 2^30.
    banks:
        Banks, 1..4096; each delivers ``bank_width_bytes`` a cycle on each side.
    bank_width_bytes:
        Bytes one bank moves a cycle, 1..4096.
    latency_cycles:
        Core cycles from a request to the first byte of a hit, 0..100000.
    keep_outputs:
        Keep an op's output in the L2 for its readers when it fits half the capacity (the
        other half holds the tiles in flight): its store and their loads skip DRAM.
    bank_hash:
        Addresses are hashed over the banks (default): every access pattern spreads evenly.
        False: plain interleaving, and strided tiles can conflict (module docstring).
    interleave_bytes:
        Consecutive bytes in one bank before the next bank (plain interleaving), 1..2^20.
    """

    capacity_kib: float = 0.0
    banks: int = 16
    bank_width_bytes: int = 64
    latency_cycles: int = 0
    keep_outputs: bool = True
    bank_hash: bool = True
    interleave_bytes: int = 128

    def __post_init__(self) -> None:
        self.validate("L2Config")

    def validate(self, where: str, prefix: str = "l2.") -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen dataclass)
        set_("capacity_kib", _number_in(self.capacity_kib, prefix + "capacity_kib", where, 0.0,
                                        _MAX_CAPACITY_KIB))
        if not (self.capacity_kib * 1024).is_integer():
            raise ConfigError(f"{where}: {prefix}capacity_kib = {self.capacity_kib!r}: must be a "
                              f"whole number of bytes (a multiple of 1/1024 KiB)")
        set_("banks", _int_in(self.banks, prefix + "banks", where, 1, 4096))
        set_("bank_width_bytes", _int_in(self.bank_width_bytes, prefix + "bank_width_bytes",
                                         where, 1, 4096))
        set_("latency_cycles", _int_in(self.latency_cycles, prefix + "latency_cycles", where,
                                       0, 100000))
        set_("keep_outputs", _bool(self.keep_outputs, prefix + "keep_outputs", where))
        set_("bank_hash", _bool(self.bank_hash, prefix + "bank_hash", where))
        set_("interleave_bytes", _int_in(self.interleave_bytes, prefix + "interleave_bytes",
                                         where, 1, 1 << 20))

    @property
    def present(self) -> bool:
        """The chip has an L2 (``capacity_kib > 0``)."""
        return self.capacity_kib > 0

    @property
    def capacity_bytes(self) -> int:
        return int(self.capacity_kib * 1024)

    @property
    def bytes_per_cycle(self) -> int:
        """Peak bytes a cycle on each side: banks x bank_width_bytes."""
        return self.banks * self.bank_width_bytes


def busiest_bank_bytes(cfg: L2Config, addr: int, n2: int, s2: int, n1: int, s1: int,
                       chunk: int) -> int:
    """Bytes of a box (``n2 x n1`` runs of ``chunk`` contiguous bytes at ``addr + i2 * s2 +
    i1 * s1``) that fall in its busiest bank under plain interleaving: line ``a //
    interleave_bytes`` in bank ``line mod banks``. Exact: bank ``b`` holds ``F_b(end) -
    F_b(start)`` bytes of a run, ``F_b(x) = (x // P) g + clip(x mod P - b g, 0, g)`` with ``g``
    the interleave and ``P = banks x g``; summed over the runs with one histogram."""
    g, banks = cfg.interleave_bytes, cfg.banks
    if chunk <= 0 or n1 <= 0 or n2 <= 0:
        return 0
    period = g * banks
    starts = (addr + np.arange(n2, dtype=np.int64)[:, None] * s2
              + np.arange(n1, dtype=np.int64)[None, :] * s1).ravel()
    ends = starts + chunk
    even = int((ends // period - starts // period).sum()) * g
    hist = np.full(banks, even, np.int64)
    for sign, x in ((1, ends % period), (-1, starts % period)):
        q, rem = x // g, x % g          # banks below q hold g bytes of [0, x mod P), bank q rem
        below = np.bincount(q, minlength=banks + 1)
        hist += sign * (g * (len(x) - np.cumsum(below)[:banks])
                        + np.bincount(q, weights=rem, minlength=banks + 1)[:banks].astype(np.int64))
    return int(hist.max())


def l2_config_from_dict(data: dict[str, Any], where: str, prefix: str = "l2.") -> L2Config:
    """An :class:`L2Config` from its TOML table, validated (one-line errors name the key)."""
    return config_from_table(L2Config, data, where, prefix)


def l2_config_to_dict(cfg: L2Config) -> dict[str, Any]:
    return {f.name: getattr(cfg, f.name) for f in fields(L2Config)}
