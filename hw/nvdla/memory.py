"""The memory the NVDLA's DMA engines (CDMA, SDP/PDP/CDP RDMA and WDMA) see: bandwidth and latency.

An :class:`~hw.nvdla.config.NvdlaConfig` describes the primary memory interface
(``dram_bus_bits``, ``dram_latency_cycles``, ``dram_max_burst``) and the memory behind it
(``dram_gbps``, optionally a ``dram`` preset of npulab's DRAM model). :func:`memory_path` turns
that into the two numbers the cycle model (:mod:`hw.nvdla.cycles`) uses:

* **bytes per core cycle**: ``min(bus, available)`` where the bus moves ``dram_bus_bits / 8``
  bytes per cycle and ``available = dram_gbps * 1000 / clock_mhz`` bytes per cycle (no limit
  when ``dram_gbps`` is 0). With a ``dram`` preset, ``available`` is multiplied by the sustained
  efficiency that the DRAM model (:mod:`hw.memory.dram`, checked against DRAMsim3) measures for
  a long sequential stream of this build's requests (``memory_atom_bytes * dram_max_burst``
  bytes each; a request smaller than the DRAM's column access still costs a whole access, so
  nv_small's 32-byte requests lose half of a DDR4 x64 channel) -- and ``dram_gbps = 0`` then
  means the DRAM preset's peak.
* **latency** in core cycles: ``dram_latency_cycles`` (NVIDIA's ``PRIMARY_MEMIF_LATENCY``, the
  latency the DMA's buffers are sized to hide; it includes the fabric), paid once per fetch
  phase by the cycle model.

The efficiency measurement replays 8,192 requests once per (DRAM preset, request size) and is
cached for the process.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from hw.nvdla.config import NvdlaConfig

__all__ = ["MemoryPath", "memory_path", "stream_efficiency"]

#: Requests replayed to measure a DRAM preset's sustained streaming efficiency.
_STREAM_REQUESTS = 8192


@dataclass(frozen=True)
class MemoryPath:
    """What one NVDLA build's DMAs get from memory.

    bytes_per_cycle: sustained bytes per core cycle, reads and writes together.
    latency_cycles: first-byte latency of a fetch phase, in core cycles.
    bus_bytes_per_cycle: the interface width alone.
    efficiency: DRAM efficiency applied (1.0 without a DRAM preset).
    source: one line saying where the numbers come from (for reports).
    """

    bytes_per_cycle: float
    latency_cycles: int
    bus_bytes_per_cycle: float
    efficiency: float
    source: str


@lru_cache(maxsize=None)
def stream_efficiency(dram: str, request_bytes: int) -> tuple[float, float]:
    """(efficiency, peak GB/s) of DRAM preset ``dram`` for a long sequential read stream of
    ``request_bytes`` requests: useful bytes / (time x peak bandwidth), measured by
    :func:`hw.memory.dram.replay`."""
    import numpy as np

    from hw.memory.dram import dram_preset, replay

    cfg = dram_preset(dram)
    addrs = np.arange(_STREAM_REQUESTS, dtype=np.int64) * int(request_bytes)
    r = replay(cfg, addrs, np.zeros(_STREAM_REQUESTS, bool), np.zeros(_STREAM_REQUESTS, np.int64))
    useful_gbps = _STREAM_REQUESTS * request_bytes / (r.total_cycles * cfg.tck_ns)
    return min(1.0, useful_gbps / cfg.peak_gbps), cfg.peak_gbps


def memory_path(cfg: NvdlaConfig) -> MemoryPath:
    """Bandwidth and latency of ``cfg``'s primary memory path (see the module docstring)."""
    bus = cfg.dram_bytes_per_cycle
    per_gbps = 1000.0 / cfg.clock_mhz        # bytes per core cycle for 1 GB/s
    if cfg.dram:
        request = cfg.memory_atom_bytes * cfg.dram_max_burst
        eff, peak = stream_efficiency(cfg.dram, request)
        gbps = cfg.dram_gbps or peak
        avail = gbps * eff * per_gbps
        source = (f"{gbps:g} GB/s x {eff:.2f} sustained efficiency of {cfg.dram} for "
                  f"{request}-byte requests (npulab DRAM model)")
    elif cfg.dram_gbps:
        eff, avail = 1.0, cfg.dram_gbps * per_gbps
        source = f"{cfg.dram_gbps:g} GB/s at full efficiency (bandwidth model)"
    else:
        eff, avail = 1.0, float(bus)
        source = f"the {cfg.dram_bus_bits}-bit bus at full efficiency (bandwidth model)"
    return MemoryPath(bytes_per_cycle=min(float(bus), avail), latency_cycles=cfg.dram_latency_cycles,
                      bus_bytes_per_cycle=float(bus), efficiency=eff, source=source)
