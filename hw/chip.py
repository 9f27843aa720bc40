"""A chip: one systolic array at a clock frequency. Later issues add memories and links."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hw.systolic.config import ArrayConfig, ConfigError

__all__ = ["ChipConfig"]


@dataclass(frozen=True)
class ChipConfig:
    """The hardware a workload runs on.

    Attributes
    ----------
    name:
        Free-form label used in reports.
    clock_mhz:
        Core clock in MHz (0 < clock_mhz <= 10000); turns cycles into seconds.
    array:
        The systolic array (:class:`~hw.systolic.config.ArrayConfig`).
    """

    name: str = "npulab-default"
    clock_mhz: float = 1000.0
    array: ArrayConfig = field(default_factory=ArrayConfig)

    def __post_init__(self) -> None:
        self.validate("ChipConfig")

    def validate(self, where: str, prefix: str = "chip.") -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"{where}: {prefix}name = {self.name!r}: must be a non-empty string")
        mhz = self.clock_mhz
        if (isinstance(mhz, bool) or not isinstance(mhz, (int, float)) or not math.isfinite(mhz)
                or not 0 < mhz <= 10000):
            raise ConfigError(f"{where}: {prefix}clock_mhz = {mhz!r}: must be a number in (0, 10000]")
        object.__setattr__(self, "clock_mhz", float(mhz))
        if not isinstance(self.array, ArrayConfig):
            raise ConfigError(f"{where}: array = {self.array!r}: must be an ArrayConfig")

    @property
    def clock_hz(self) -> float:
        return self.clock_mhz * 1e6
