"""DMA engine: descriptor setup, a window of outstanding requests, the closed-form transfer time.

Model (the gold model in ``tests/hw/memory/test_dma.py`` simulates exactly this, event by
event). A transfer of N bytes is one descriptor. The engine spends ``S =
descriptor_setup_cycles`` fetching and decoding it, then splits the N bytes into ``n =
ceil(N / R)`` requests of ``R = request_bytes`` (the last one may be shorter) and keeps at most
``O = max_outstanding`` of them in flight: request i is issued as soon as request i-O has
completed (issue itself is free). The target answers a request after a latency of ``Lat``
cycles (request to first data) and returns its bytes over one shared data path of ``B`` bytes
per cycle, first come first served, so a request of b bytes holds the path for b / B cycles.

Closed form (:func:`dma_transfer_cycles`), exact for that model in continuous time, then
rounded up to whole cycles::

    T = S + Lat + N / B + k * max(0, Lat - (O - 1) * R / B)        k = (n - 1) // O

Derivation. Let d_i be the completion of request i and a_i its issue: a_i = S for i < O,
a_i = d_{i-O} otherwise, and d_i = max(a_i + Lat, d_{i-1}) + b_i / B. Unrolled, d_{n-1} is
S + Lat plus the heaviest path from request 0 to n-1 whose steps are either i -> i+1 (the data
path, weight b_{i+1}/B) or i -> i+O (the window, weight Lat + b_{i+O}/B). A path with m window
steps skips m(O-1) full requests, so it weighs N/B + m(Lat - (O-1)R/B): linear in m, so the
heaviest path uses no window step (bandwidth-bound: S + Lat + N/B) or as many as fit, k.

Little's law says the same in steady state: with O requests of R bytes in flight, each
occupying a slot for its round trip Lat + R/B, throughput is min(B, O R / (Lat + R/B)); the
max(0, ...) term is positive exactly when the window, not the bandwidth, is the limit
(:func:`dma_steady_bytes_per_cycle`). Keeping a link of bandwidth B and latency Lat busy needs
O R >= B Lat + R bytes in flight (the bandwidth-delay product).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from hw.memory.link import ceil_cycles
from hw.validate import _nonneg_int, config_from_table
from hw.systolic.config import ConfigError, _int_in

__all__ = ["DmaConfig", "dma_config_from_dict", "dma_config_to_dict", "dma_transfer_cycles",
           "dma_steady_bytes_per_cycle"]

_MAX_REQUEST_BYTES = 4096


@dataclass(frozen=True)
class DmaConfig:
    """One DMA engine.

    Attributes
    ----------
    descriptor_setup_cycles:
        Core cycles (0..1e6) to fetch and decode one descriptor before its first request.
    max_outstanding:
        Requests in flight at once, 1..4096.
    request_bytes:
        Bytes per request, a power of two in 1..4096.
    """

    descriptor_setup_cycles: int = 32
    max_outstanding: int = 32
    request_bytes: int = 64

    def __post_init__(self) -> None:
        self.validate("DmaConfig")

    def validate(self, where: str, prefix: str = "dma.") -> None:
        """Check every field; ``where`` and ``prefix`` name the source in error messages."""
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen dataclass)
        key = prefix + "descriptor_setup_cycles"
        set_("descriptor_setup_cycles", _int_in(self.descriptor_setup_cycles, key, where, 0, 10**6))
        set_("max_outstanding", _int_in(self.max_outstanding, prefix + "max_outstanding", where,
                                        1, 4096))
        size = _int_in(self.request_bytes, prefix + "request_bytes", where, 1, _MAX_REQUEST_BYTES)
        if size & (size - 1):
            raise ConfigError(f"{where}: {prefix}request_bytes = {size!r}: must be a power of two "
                              f"in 1..{_MAX_REQUEST_BYTES}")
        set_("request_bytes", size)


def dma_config_from_dict(data: dict[str, Any], where: str, prefix: str = "dma.") -> DmaConfig:
    """Build a :class:`DmaConfig` from plain data; missing keys take the defaults, unknown keys
    raise :class:`ConfigError` naming the key and the allowed keys."""
    return config_from_table(DmaConfig, data, where, prefix)


def dma_config_to_dict(cfg: DmaConfig) -> dict[str, Any]:
    """The config as plain data, readable by :func:`dma_config_from_dict`."""
    return {f.name: getattr(cfg, f.name) for f in fields(cfg)}


def _check_target(latency_cycles, bytes_per_cycle) -> None:
    _nonneg_int("latency_cycles", latency_cycles)
    if (isinstance(bytes_per_cycle, (bool, np.bool_))
            or not isinstance(bytes_per_cycle, (int, float, np.integer, np.floating))
            or math.isnan(bytes_per_cycle) or bytes_per_cycle <= 0):
        raise ValueError(f"bytes_per_cycle = {bytes_per_cycle!r}: must be a number > 0 "
                         f"(inf allowed)")


def dma_transfer_cycles(cfg: DmaConfig, nbytes: int, latency_cycles: int,
                        bytes_per_cycle: float) -> int:
    """Cycles for one descriptor moving ``nbytes`` from/to a target with per-request latency
    ``latency_cycles`` and data bandwidth ``bytes_per_cycle`` (``inf``: latency only).

    Counts from the start of descriptor setup to the cycle the last byte has arrived: setup,
    one latency, the data time and any window stalls (formula and derivation in the module
    docstring), rounded up. 0 bytes: 0 cycles (no descriptor is issued).
    """
    nbytes = _nonneg_int("nbytes", nbytes)
    _check_target(latency_cycles, bytes_per_cycle)
    if nbytes == 0:
        return 0
    size, window = cfg.request_bytes, cfg.max_outstanding
    requests = -(-nbytes // size)
    rounds = (requests - 1) // window
    stall = max(0.0, latency_cycles - (window - 1) * size / bytes_per_cycle)
    return ceil_cycles(cfg.descriptor_setup_cycles + latency_cycles + nbytes / bytes_per_cycle
                       + rounds * stall)


def dma_steady_bytes_per_cycle(cfg: DmaConfig, latency_cycles: int,
                               bytes_per_cycle: float) -> float:
    """Steady-state throughput by Little's law: min(B, O R / (Lat + R / B)) bytes per cycle."""
    _check_target(latency_cycles, bytes_per_cycle)
    size = cfg.request_bytes
    round_trip = latency_cycles + size / bytes_per_cycle
    if round_trip == 0:
        return math.inf
    return min(float(bytes_per_cycle), cfg.max_outstanding * size / round_trip)
