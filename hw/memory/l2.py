"""The shared L2 (global buffer) of a multi-core chip: between the cores' scratchpads and DRAM.

Organisation. ``capacity_kib`` of SRAM in ``banks`` banks of ``bank_width_bytes``, shared by
every core through the on-chip network (:mod:`hw.memory.noc`). Like a scratchpad it has a read
side and a write side, each moving ``banks x bank_width_bytes`` bytes a cycle (the chip's
aggregate L2 bandwidth: the cores' requests spread over the banks, address-interleaved, so the
banks are the limit only in aggregate); a hit costs ``latency_cycles`` before its first byte.

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

from hw.systolic.config import ConfigError, _int_in
from hw.validate import _bool, _number_in, config_from_table

__all__ = ["L2Config", "l2_config_from_dict", "l2_config_to_dict"]

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
    """

    capacity_kib: float = 0.0
    banks: int = 16
    bank_width_bytes: int = 64
    latency_cycles: int = 0
    keep_outputs: bool = True

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


def l2_config_from_dict(data: dict[str, Any], where: str, prefix: str = "l2.") -> L2Config:
    """An :class:`L2Config` from its TOML table, validated (one-line errors name the key)."""
    return config_from_table(L2Config, data, where, prefix)


def l2_config_to_dict(cfg: L2Config) -> dict[str, Any]:
    return {f.name: getattr(cfg, f.name) for f in fields(L2Config)}
