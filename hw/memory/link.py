"""Host link: PCI Express between host memory and the accelerator, as a closed-form timing model.

Timing contract (:func:`link_transfer_ns`): one host<->device copy of ``nbytes`` costs

* **pinned** host memory (DMA'd directly)::

      latency_ns + wire_bytes / encoded_gbps
      wire_bytes = nbytes + tlps * tlp_overhead_bytes,   tlps = ceil(nbytes / max_payload_bytes)

* **pageable** host memory: the driver copies through a pinned staging buffer in chunks of
  ``staging_chunk_bytes``; the host copy of chunk i+1 overlaps the link transfer of chunk i
  (two staging slots). With chunk copy times c_i and link times l_i (all chunks full but the
  last)::

      latency_ns + c_0 + sum_{i=1}^{k-1} max(c_i, l_{i-1}) + l_{k-1}

  i.e. the first chunk's host copy is exposed, then each step costs the slower of the two
  stages, then the last chunk's link time. This is the exact makespan of the two-stage pipeline
  when every chunk but the last has the same size (a two-machine flow shop).

``GB`` is 10^9 bytes, so bytes / (GB/s) = nanoseconds. ``latency_ns`` is paid once per copy:
it is the time from the DMA engine's first read request to the first data at the destination
(root complex and host memory round trip, switch hops); later requests of the same copy are
pipelined behind it. Data-link-layer traffic (Ack/Nak and flow-control DLLPs), read-request
TLPs on the opposite direction and ECRC are not modelled; the first two are why measured
throughput sits a few percent below :attr:`HostLinkConfig.effective_gbps`.

The functions here depend on nothing but the config; counters are integers
(:func:`link_transfer_stats`), times are derived from them.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from hw.systolic.config import ConfigError, _enum_value, _int_in
from hw.validate import _bool, _nonneg_int, _number_in, _one_of, config_from_table

__all__ = ["HostMemory", "HostLinkConfig", "PCIE_GENERATIONS", "host_link_from_dict",
           "host_link_to_dict", "link_transfer_ns", "link_transfer_cycles", "link_transfer_stats",
           "ceil_cycles"]


class HostMemory(str, enum.Enum):
    """Where the host-side buffer lives. ``PINNED`` (page-locked) memory is DMA'd directly;
    ``PAGEABLE`` memory is first copied into a pinned staging buffer by the host CPU."""

    PINNED = "pinned"
    PAGEABLE = "pageable"


@dataclass(frozen=True)
class PcieGeneration:
    """Signalling of one PCIe generation, per lane and direction."""

    gt_per_s: float        # transfers (bits on the wire) per second per lane, in 1e9
    encoding: str          # line code
    efficiency: float      # payload bits per line bit of the line code


#: PCI Express Base Specification rev. 1.0a-6.0, physical layer (chapter 4): 8b/10b for Gen1/2,
#: 128b/130b for Gen3-5; Gen6 signals PAM4 at 32 GBd (64 GT/s) in 256 B FLITs carrying 242 B of
#: TLP + DLLP bytes (the rest is 8 B CRC and 6 B FEC).
PCIE_GENERATIONS: dict[int, PcieGeneration] = {
    1: PcieGeneration(2.5, "8b/10b", 8 / 10),
    2: PcieGeneration(5.0, "8b/10b", 8 / 10),
    3: PcieGeneration(8.0, "128b/130b", 128 / 130),
    4: PcieGeneration(16.0, "128b/130b", 128 / 130),
    5: PcieGeneration(32.0, "128b/130b", 128 / 130),
    6: PcieGeneration(64.0, "PAM4 FLIT 242/256", 242 / 256),
}
_LANES = (1, 2, 4, 8, 16)
_MAX_PAYLOADS = (128, 256, 512, 1024, 2048, 4096)
_MAX_STAGING_BYTES = 1 << 30








@dataclass(frozen=True)
class HostLinkConfig:
    """A PCI Express link between host memory and the accelerator (per direction; full duplex).

    Attributes
    ----------
    generation:
        PCIe generation 1..6 (:data:`PCIE_GENERATIONS` gives rate and line code).
    lanes:
        Link width: 1, 2, 4, 8 or 16.
    max_payload_bytes:
        Max Payload Size (MPS), a power of two in 128..4096: data bytes per TLP.
    tlp_overhead_bytes:
        Bytes each TLP adds on the wire, 0..128. Default 24 = Gen3+ framing token with sequence
        number (4 B) + 4DW header for 64-bit addresses (16 B) + LCRC (4 B); a 3DW header (32-bit
        address) gives 20 B, ECRC adds 4 B (PCIe Base Spec, chapters 2-4).
    latency_ns:
        Per-copy latency in ns, >= 0: first request to first data (see the module docstring).
    host_memory:
        :class:`HostMemory`: ``"pinned"`` or ``"pageable"``.
    host_copy_gbps:
        Host memcpy bandwidth in GB/s (> 0) for the pageable staging copy.
    staging_chunk_bytes:
        Pageable copies are staged in chunks of this many bytes (a multiple of
        ``max_payload_bytes``, at most 1 GiB); default 2 MiB, an assumption, not a measurement.
    ideal:
        Unlimited bandwidth and zero latency: every transfer takes 0 ns (compute-only runs).
    """

    generation: int = 4
    lanes: int = 16
    max_payload_bytes: int = 256
    tlp_overhead_bytes: int = 24
    latency_ns: float = 500.0
    host_memory: HostMemory = HostMemory.PINNED
    host_copy_gbps: float = 12.0
    staging_chunk_bytes: int = 2 << 20
    ideal: bool = False

    def __post_init__(self) -> None:
        self.validate("HostLinkConfig")

    def validate(self, where: str, prefix: str = "host_link.") -> None:
        """Check and normalise every field; ``where`` and ``prefix`` name the source in errors."""
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen dataclass)
        set_("generation", _one_of(self.generation, prefix + "generation", where,
                                   tuple(PCIE_GENERATIONS)))
        set_("lanes", _one_of(self.lanes, prefix + "lanes", where, _LANES))
        set_("max_payload_bytes", _one_of(self.max_payload_bytes, prefix + "max_payload_bytes",
                                          where, _MAX_PAYLOADS))
        set_("tlp_overhead_bytes", _int_in(self.tlp_overhead_bytes, prefix + "tlp_overhead_bytes",
                                           where, 0, 128))
        set_("latency_ns", _number_in(self.latency_ns, prefix + "latency_ns", where, 0.0, 1e9))
        set_("host_memory", _enum_value(HostMemory, self.host_memory, prefix + "host_memory",
                                        where))
        set_("host_copy_gbps", _number_in(self.host_copy_gbps, prefix + "host_copy_gbps", where,
                                          0.0, 1e6, lo_open=True))
        chunk = _int_in(self.staging_chunk_bytes, prefix + "staging_chunk_bytes", where,
                        self.max_payload_bytes, _MAX_STAGING_BYTES)
        if chunk % self.max_payload_bytes:
            raise ConfigError(
                f"{where}: {prefix}staging_chunk_bytes = {chunk!r}: must be a multiple of "
                f"{prefix}max_payload_bytes ({self.max_payload_bytes})")
        set_("staging_chunk_bytes", chunk)
        set_("ideal", _bool(self.ideal, prefix + "ideal", where))

    @property
    def encoded_gbps(self) -> float:
        """Per-direction data rate after line encoding, GB/s (1e9 B/s): GT/s x efficiency x
        lanes / 8. Gen3 x16 = 15.754, Gen4 x16 = 31.51, Gen5 x16 = 63.02 (quoted as 15.75, 31.5
        and 63.0)."""
        gen = PCIE_GENERATIONS[self.generation]
        return gen.gt_per_s * gen.efficiency * self.lanes / 8

    @property
    def effective_gbps(self) -> float:
        """Large-copy throughput after TLP overhead, GB/s: MPS / (MPS + overhead) x encoded."""
        mps = self.max_payload_bytes
        return self.encoded_gbps * mps / (mps + self.tlp_overhead_bytes)


def host_link_from_dict(data: dict[str, Any], where: str,
                        prefix: str = "host_link.") -> HostLinkConfig:
    """Build a :class:`HostLinkConfig` from plain data (e.g. a TOML table); missing keys take the
    defaults, unknown keys raise :class:`ConfigError` naming the key and the allowed keys."""
    return config_from_table(HostLinkConfig, data, where, prefix)


def host_link_to_dict(cfg: HostLinkConfig) -> dict[str, Any]:
    """The config as plain data (``host_memory`` as its string), readable by
    :func:`host_link_from_dict`."""
    return {f.name: (v.value if isinstance(v := getattr(cfg, f.name), enum.Enum) else v)
            for f in fields(cfg)}






def _wire_bytes(cfg: HostLinkConfig, nbytes: int) -> int:
    return nbytes + -(-nbytes // cfg.max_payload_bytes) * cfg.tlp_overhead_bytes


def link_transfer_stats(cfg: HostLinkConfig, nbytes: int) -> dict[str, int]:
    """Integer counters of one copy: ``payload_bytes`` (= nbytes), ``wire_bytes`` (payload +
    per-TLP overhead), ``tlps`` and ``host_copy_bytes`` (bytes the host CPU copies into the
    staging buffer: nbytes if pageable, else 0). Physical counts, also for ``ideal`` links."""
    nbytes = _nonneg_int("nbytes", nbytes)
    return {
        "payload_bytes": nbytes,
        "wire_bytes": _wire_bytes(cfg, nbytes),
        "tlps": -(-nbytes // cfg.max_payload_bytes),
        "host_copy_bytes": nbytes if cfg.host_memory is HostMemory.PAGEABLE else 0,
    }


def link_transfer_ns(cfg: HostLinkConfig, nbytes: int) -> float:
    """Nanoseconds for one host<->device copy of ``nbytes`` (either direction), from the start of
    the copy (host staging included) to the last byte delivered; 0 for 0 bytes or an ideal link.
    Formulas in the module docstring."""
    nbytes = _nonneg_int("nbytes", nbytes)
    if nbytes == 0 or cfg.ideal:
        return 0.0
    rate = cfg.encoded_gbps
    if cfg.host_memory is HostMemory.PINNED:
        return cfg.latency_ns + _wire_bytes(cfg, nbytes) / rate
    chunk = cfg.staging_chunk_bytes
    chunks = -(-nbytes // chunk)
    last = nbytes - (chunks - 1) * chunk
    copy_full, link_full = chunk / cfg.host_copy_gbps, _wire_bytes(cfg, chunk) / rate
    copy_last, link_last = last / cfg.host_copy_gbps, _wire_bytes(cfg, last) / rate
    if chunks == 1:
        return cfg.latency_ns + copy_last + link_last
    return (cfg.latency_ns + copy_full + (chunks - 2) * max(copy_full, link_full)
            + max(copy_last, link_full) + link_last)


def ceil_cycles(value: float) -> int:
    """``ceil`` that forgives float noise: a value within 1e-9 (relative) of an integer rounds to
    it, so 500 ns at 1000 MHz is 500 cycles, not 501."""
    nearest = round(value)
    if abs(value - nearest) <= 1e-9 * max(1.0, abs(value)):
        return int(nearest)
    return math.ceil(value)


def link_transfer_cycles(cfg: HostLinkConfig, nbytes: int, clock_mhz: float) -> int:
    """:func:`link_transfer_ns` in core cycles at ``clock_mhz``, rounded up; 0 bytes or an ideal
    link take 0 cycles."""
    if (isinstance(clock_mhz, (bool, np.bool_)) or not isinstance(clock_mhz, (int, float))
            or not math.isfinite(clock_mhz) or clock_mhz <= 0):
        raise ValueError(f"clock_mhz = {clock_mhz!r}: must be a positive number")
    return ceil_cycles(link_transfer_ns(cfg, nbytes) * clock_mhz / 1e3)
