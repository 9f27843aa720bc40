"""An SoC: a host CPU and one or more npulab accelerators sharing ONE DRAM.

Each accelerator is a full :class:`~hw.chip.ChipConfig` (array, scratchpads, DMA, clock) with
its own compiled :class:`~hw.program.Program`; the SoC's :class:`~hw.memory.dram.DramConfig`
replaces the accelerators' own ``dram``. :func:`run_soc` runs every program twice:

* **alone**: accelerator ``j`` by itself on the SoC's DRAM (the others idle);
* **shared**: all accelerators (and the optional CPU stream) together in one event loop against
  one cycle-level DRAM model (:func:`hw.executor.execute_shared`). Commands of every
  accelerator are simulated in the order they start, so the DRAM controller sees every DMA
  transfer in time order; a transfer that starts while another master's is in flight queues
  behind it. The slowdown therefore comes out of the DRAM model's own timing (bank state, row
  hits and conflicts, refresh, bus turnarounds), not from a bandwidth-division formula.

Granularity: the DRAM serves whole DMA transfers one after another (their column requests are
not interleaved), as a DMA arbiter that grants a descriptor at a time would. The total DRAM
throughput is exact (no more than the peak, each transfer keeps its row-buffer locality); what
a request-level interleaving arbiter would change is *who* waits: here a short transfer can
wait behind a long one of another accelerator, and the row conflicts two interleaved streams
cause inside a transfer are not seen (only those between consecutive transfers are).

Address space: program ``j`` is placed at ``j * region`` bytes (``region`` = the largest
program's DRAM footprint rounded up to a power of two), so the accelerators use disjoint rows;
the CPU stream, if any, gets the region after them. With the presets' mappings (row bits most
significant) such an offset changes only row numbers, so an accelerator's *alone* run is the
same as at offset 0.

Not modelled (future work): the host link is not shared between accelerators (each uses its
own copy of the SoC's link model); no on-chip interconnect or last-level cache between the
masters and the DRAM controller; no QoS/priority arbitration.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hw.chip import ChipConfig
from hw.spec import ChipSpec
from hw.configfile import chip_config_from_dict
from hw.executor import ExecutionResult, execute_shared
from hw.memory.dram import DramConfig, DramModel, dram_config_from_dict, dram_preset
from hw.memory.link import HostLinkConfig, host_link_from_dict
from hw.program import Kind, Program
from hw.systolic.config import ConfigError
from hw.validate import config_from_table, read_toml

__all__ = ["CpuStream", "SocConfig", "AcceleratorResult", "SocResult", "run_soc",
           "soc_config_from_dict", "load_soc_config", "program_dram_extent", "CPU_KINDS"]

CPU_KINDS = ("copy", "read", "write")
_TRANSFERS = (Kind.LOAD, Kind.STORE, Kind.HOST_IN, Kind.HOST_OUT)


def _int_in(value, key: str, where: str, lo: int, hi: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or not lo <= value <= hi:
        raise ConfigError(f"{where}: {key} = {value!r}: must be an integer in {lo}..{hi}")
    return int(value)


def _float_in(value, key: str, where: str, lo: float, hi: float) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                     np.floating)) \
            or not math.isfinite(value) or not lo <= value <= hi:
        raise ConfigError(f"{where}: {key} = {value!r}: must be a number in [{lo:g}, {hi:g}]")
    return float(value)


@dataclass(frozen=True)
class CpuStream:
    """A CPU core streaming through the shared DRAM (a memcpy-like agent).

    ``nbytes`` are copied (``copy``: read ``nbytes`` from one buffer and write them to another),
    read or written, in chunks of ``chunk_bytes``: chunk ``k`` starts when chunk ``k - 1`` has
    completed and no earlier than ``start_ns + k * chunk_bytes / gbps`` (``gbps`` = issue-rate
    cap in GB/s = 1e9 B/s, 0 = as fast as the DRAM serves it; a copy paces its reads and writes
    alike). Inside a chunk at most ``max_outstanding`` column requests are in flight, the
    core's miss-handling limit: 10 L1D line-fill buffers on Intel Sandy Bridge to Broadwell
    cores (Intel 64 and IA-32 Architectures Optimization Reference Manual), the default.
    """

    nbytes: int
    kind: str = "copy"
    chunk_bytes: int = 4096
    max_outstanding: int = 10
    gbps: float = 0.0
    start_ns: float = 0.0

    def __post_init__(self) -> None:
        self.validate("CpuStream")

    def validate(self, where: str, prefix: str = "cpu.") -> None:
        object.__setattr__(self, "nbytes", _int_in(self.nbytes, f"{prefix}nbytes", where, 1, 1 << 40))
        if self.kind not in CPU_KINDS:
            raise ConfigError(f"{where}: {prefix}kind = {self.kind!r}: must be one of "
                              f"{', '.join(repr(k) for k in CPU_KINDS)}")
        object.__setattr__(self, "chunk_bytes",
                           _int_in(self.chunk_bytes, f"{prefix}chunk_bytes", where, 1, 1 << 30))
        object.__setattr__(self, "max_outstanding",
                           _int_in(self.max_outstanding, f"{prefix}max_outstanding", where, 1, 4096))
        object.__setattr__(self, "gbps", _float_in(self.gbps, f"{prefix}gbps", where, 0, 1e6))
        object.__setattr__(self, "start_ns",
                           _float_in(self.start_ns, f"{prefix}start_ns", where, 0, 1e12))

    @property
    def dram_bytes(self) -> int:
        """Bytes the stream moves over the DRAM bus (a copy reads and writes each byte)."""
        return 2 * self.nbytes if self.kind == "copy" else self.nbytes


def _systolic_config(accelerator, where: str):
    """A ChipSpec's systolic config (what the shared-DRAM event loop runs); anything else is
    returned as it is for the caller's type check."""
    if not isinstance(accelerator, ChipSpec):
        return accelerator
    if accelerator.kind != "systolic":
        raise ConfigError(f"{where}: accelerator {accelerator.name!r} has a {accelerator.kind} "
                          f"engine; the SoC runs systolic chips' programs on the shared DRAM")
    return accelerator.config


@dataclass(frozen=True)
class SocConfig:
    """A CPU + ``accelerators`` (one systolic :class:`ChipConfig` or its :class:`~hw.spec.ChipSpec` each, at least one) + ONE shared DRAM.

    ``dram`` replaces every accelerator's own ``dram``; ``host_link``, if given, replaces their
    ``host_link`` (None: each keeps its own). ``cpu``: an optional :class:`CpuStream` the host
    runs at the same time as the accelerators."""

    name: str = "soc"
    accelerators: tuple[ChipConfig, ...] = (ChipConfig(),)
    dram: DramConfig = field(default_factory=lambda: dram_preset("ddr4-3200"))
    host_link: HostLinkConfig | None = None
    cpu: CpuStream | None = None

    def __post_init__(self) -> None:
        self.validate("SocConfig")

    def validate(self, where: str) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"{where}: soc.name = {self.name!r}: must be a non-empty string")
        accs = self.accelerators
        if isinstance(accs, (ChipConfig, ChipSpec)):
            accs = (accs,)
        if isinstance(accs, (tuple, list)):
            accs = tuple(_systolic_config(a, where) for a in accs)
        if not isinstance(accs, (tuple, list)) or not accs \
                or not all(isinstance(a, ChipConfig) for a in accs):
            raise ConfigError(f"{where}: accelerators = {self.accelerators!r}: must be one or "
                              f"more ChipConfig or ChipSpec (an SoC needs at least one "
                              f"accelerator)")
        if len(accs) > 64:
            raise ConfigError(f"{where}: accelerators: {len(accs)} given: must be 1..64")
        object.__setattr__(self, "accelerators", tuple(accs))
        if not isinstance(self.dram, DramConfig):
            raise ConfigError(f"{where}: dram = {self.dram!r}: must be a DramConfig")
        if self.host_link is not None and not isinstance(self.host_link, HostLinkConfig):
            raise ConfigError(f"{where}: host_link = {self.host_link!r}: must be a "
                              f"HostLinkConfig or None")
        if self.cpu is not None and not isinstance(self.cpu, CpuStream):
            raise ConfigError(f"{where}: cpu = {self.cpu!r}: must be a CpuStream or None")

    def chip(self, index: int) -> ChipConfig:
        """Accelerator ``index`` as it runs in the SoC (the SoC's DRAM and host link)."""
        chip = replace(self.accelerators[index], dram=self.dram)
        return chip if self.host_link is None else replace(chip, host_link=self.host_link)


@dataclass(frozen=True)
class AcceleratorResult:
    """One accelerator: cycles (its core clock) alone on the SoC's DRAM and shared with the
    others; ``slowdown = cycles_shared / cycles_alone``; ``dram_bus_bytes`` moved (whole column
    accesses); stall cycles charged to DRAM in each run."""

    index: int
    name: str
    clock_mhz: float
    cycles_alone: int
    cycles_shared: int
    slowdown: float
    seconds_alone: float
    seconds_shared: float
    dram_bus_bytes: int
    stall_dram_cycles_alone: int
    stall_dram_cycles_shared: int


@dataclass(frozen=True)
class SocResult:
    """What sharing the DRAM cost.

    ``makespan_s``: the shared run, until the last master finished. DRAM figures of the shared
    run: ``dram_bus_bytes`` (all masters), ``dram_achieved_gbps = dram_bus_bytes / makespan``,
    ``dram_utilization`` = achieved / peak (= data-bus busy cycles / (channels x elapsed
    cycles)), ``dram_busy_s`` = time at least one transfer was in flight (union of intervals),
    ``dram_busy_alone_s`` = the same summed over the alone runs, row-buffer hits, misses and
    conflicts shared and summed alone. ``cpu``: the CPU stream's bytes, seconds alone / shared,
    achieved GB/s and slowdown (None without one). ``shared``/``alone``: the accelerators'
    :class:`ExecutionResult` s (traces included).
    """

    name: str
    dram: str
    dram_peak_gbps: float
    accelerators: tuple[AcceleratorResult, ...]
    makespan_s: float
    dram_bus_bytes: int
    dram_achieved_gbps: float
    dram_utilization: float
    dram_busy_s: float
    dram_busy_alone_s: float
    row_hits: int
    row_misses: int
    row_conflicts: int
    row_hits_alone: int
    row_misses_alone: int
    row_conflicts_alone: int
    region_bytes: int
    cpu: dict | None = None
    shared: list[ExecutionResult] = field(default_factory=list, repr=False, compare=False)
    alone: list[ExecutionResult] = field(default_factory=list, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (the execution results are left out)."""
        out = {k: v for k, v in asdict(self).items() if k not in ("shared", "alone")}
        out["accelerators"] = [asdict(a) for a in self.accelerators]
        if math.isinf(out["dram_peak_gbps"]):
            out["dram_peak_gbps"] = None
        return out

    def __repr__(self) -> str:
        worst = max((a.slowdown for a in self.accelerators), default=1.0)
        peak = "" if math.isinf(self.dram_peak_gbps) else f" of {self.dram_peak_gbps:.4g}"
        cpu = (f"\n  CPU stream slowdown {self.cpu['slowdown']:.3f}x"
               if self.cpu and self.cpu.get("slowdown") is not None else "")
        return (f"SocResult: {self.name}, {len(self.accelerators)} accelerators on {self.dram}\n"
                f"  makespan {self.makespan_s * 1e3:.4g} ms, worst slowdown {worst:.3f}x\n"
                f"  DRAM {self.dram_bus_bytes:,} B, {self.dram_achieved_gbps:.4g}{peak} GB/s "
                f"({100 * self.dram_utilization:.1f} %), row hits {self.row_hits:,}, misses "
                f"{self.row_misses:,}, conflicts {self.row_conflicts:,}{cpu}")

    def to_pandas(self):
        """One row per accelerator (the :class:`AcceleratorResult` fields). Needs pandas."""
        from dataclasses import fields as _fields

        from hw._notebook import frame
        names = [f.name for f in _fields(AcceleratorResult)]
        return frame(names, [[getattr(a, n) for n in names] for a in self.accelerators])


def program_dram_extent(program: Program) -> int:
    """One past the highest DRAM byte ``program``'s transfers touch (0 if none)."""
    c = program.columns
    if not len(program):
        return 0
    mask = np.isin(c["kind"], [int(k) for k in _TRANSFERS]) & (c["chunk_bytes"] > 0) \
        & (c["n1"] > 0) & (c["n2"] > 0)
    if not mask.any():
        return 0
    end = (c["addr"] + (c["n2"] - 1) * c["stride2"] + (c["n1"] - 1) * c["stride1"]
           + c["chunk_bytes"])[mask]
    return int(end.max())


class _CpuRunner:
    """Agent for :func:`hw.executor.execute_shared`: the :class:`CpuStream`'s chunks, in order."""

    def __init__(self, stream: CpuStream, dram: DramConfig, base: int, region: int):
        self.s, self.tck_s = stream, dram.tck_ns * 1e-9
        self.src, self.dst = base, base + region // 2
        n = -(-stream.nbytes // stream.chunk_bytes)
        # (offset, bytes, is_write) per DRAM transfer: a copy reads chunk k, then writes it
        self.ops: list[tuple[int, int, bool]] = []
        for k in range(n):
            off, size = k * stream.chunk_bytes, min(stream.chunk_bytes,
                                                    stream.nbytes - k * stream.chunk_bytes)
            if stream.kind in ("copy", "read"):
                self.ops.append((self.src + off, size, False))
            if stream.kind in ("copy", "write"):
                self.ops.append((self.dst + off, size, True))
        self.k = 0
        self.moved = 0
        self.ready_s = stream.start_ns * 1e-9
        self.first_s: float | None = None
        self.finish_s = self.ready_s
        self.intervals: list[tuple[float, float]] = []

    def next_time_s(self) -> float | None:
        if self.k == len(self.ops):
            return None
        t = self.ready_s
        if self.s.gbps > 0:   # issue-rate cap on the bytes moved so far
            t = max(t, self.s.start_ns * 1e-9 + self.moved / (self.s.gbps * 1e9))
        return t

    def step(self, model: DramModel | None) -> None:
        t = self.next_time_s()
        addr, size, is_write = self.ops[self.k]
        cycle = int(math.ceil(t / self.tck_s - 1e-9))
        done = cycle if model is None else model.transfer(addr, size, is_write, cycle,
                                                          self.s.max_outstanding)
        done_s = max(t, done * self.tck_s)
        self.intervals.append((t, done_s))
        self.first_s = t if self.first_s is None else self.first_s
        self.k += 1
        self.moved += size
        self.ready_s = self.finish_s = done_s


def _union_s(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of intervals (seconds)."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _dram_intervals(run: ExecutionResult, chip: ChipConfig) -> list[tuple[float, float]]:
    """Seconds during which each DRAM transfer of ``run`` was in flight (queued or served)."""
    t = run.trace
    mask = np.isin(t.kind, [int(k) for k in _TRANSFERS]) & (t.nbytes > 0)
    setup = chip.dma.descriptor_setup_cycles
    hz = chip.clock_hz
    return [((s + setup) / hz, f / hz) for s, f in zip(t.start[mask].tolist(),
                                                        t.dram_finish[mask].tolist()) if f > s + setup]


def _run(soc: SocConfig, programs, indices, offsets, cpu: CpuStream | None, cpu_base: int,
         region: int):
    agents = [] if cpu is None else [_CpuRunner(cpu, soc.dram, cpu_base, region)]
    shared = execute_shared([programs[j] for j in indices], [soc.chip(j) for j in indices],
                            soc.dram, addr_offsets=[offsets[j] for j in indices], agents=agents)
    return shared, (agents[0] if agents else None)


def run_soc(soc: SocConfig, programs, *, alone: bool = True) -> SocResult:
    """Run ``programs[j]`` on accelerator ``j`` of ``soc``, alone and all together on the shared
    DRAM (module docstring). The caller compiles the programs (``hw`` does not import the
    compiler): one per accelerator, each for that accelerator's config. ``alone=False`` skips
    the alone runs (the ``*_alone`` figures and slowdowns are then those of the shared run)."""
    if not isinstance(soc, SocConfig):
        raise ValueError(f"run_soc: soc = {soc!r}: must be a SocConfig")
    programs = list(programs) if not isinstance(programs, Program) else [programs]
    n = len(soc.accelerators)
    if len(programs) != n or not all(isinstance(p, Program) for p in programs):
        raise ValueError(f"run_soc: programs: {len(programs)} given for {n} accelerator(s) of "
                         f"SoC {soc.name!r}: need one hw.program.Program per accelerator")
    cfg = soc.dram
    extent = max([program_dram_extent(p) for p in programs] + [1])
    if soc.cpu is not None:
        extent = max(extent, 2 * soc.cpu.nbytes)
    region = max(1 << (extent - 1).bit_length(), cfg.row_bytes)
    masters = n + (soc.cpu is not None)
    if not cfg.is_ideal and masters * region > cfg.capacity_bytes:
        raise ValueError(f"run_soc: {masters} DRAM regions of {region:,} bytes (the largest "
                         f"program's footprint, rounded up to a power of two) exceed SoC "
                         f"{soc.name!r}'s DRAM capacity of {cfg.capacity_bytes:,} bytes")
    offsets = [j * region for j in range(n)]
    cpu_base = n * region
    shared, cpu_shared = _run(soc, programs, range(n), offsets, soc.cpu, cpu_base, region)
    if alone:
        alone_runs = [_run(soc, programs, [j], offsets, None, 0, region)[0] for j in range(n)]
        cpu_alone = (_run_cpu_alone(soc, cpu_base, region) if soc.cpu is not None else None)
    else:
        alone_runs, cpu_alone = None, cpu_shared
    accs, busy_shared, busy_alone = [], [], 0.0
    for j in range(n):
        chip = soc.chip(j)
        rs = shared.results[j]
        ra = alone_runs[j].results[0] if alone_runs else rs
        accs.append(AcceleratorResult(
            index=j, name=chip.name, clock_mhz=chip.clock_mhz, cycles_alone=ra.cycles,
            cycles_shared=rs.cycles, slowdown=rs.cycles / ra.cycles if ra.cycles else 1.0,
            seconds_alone=ra.cycles / chip.clock_hz, seconds_shared=rs.cycles / chip.clock_hz,
            dram_bus_bytes=rs.totals["dram_bus_read_bytes"] + rs.totals["dram_bus_write_bytes"],
            stall_dram_cycles_alone=ra.totals["stall_dram_cycles"],
            stall_dram_cycles_shared=rs.totals["stall_dram_cycles"]))
        busy_shared += _dram_intervals(rs, chip)
        busy_alone += _union_s(_dram_intervals(ra, chip))
    makespan = max(a.seconds_shared for a in accs)
    cpu_dict = None
    if cpu_shared is not None:
        busy_shared += cpu_shared.intervals
        makespan = max(makespan, cpu_shared.finish_s)
        busy_alone += _union_s(cpu_alone.intervals)
        cpu_dict = _cpu_summary(soc.cpu, cpu_alone, cpu_shared)
    c = shared.dram
    rb = cfg.request_bytes
    bus = (c["reads"] + c["writes"]) * rb if c else sum(a.dram_bus_bytes for a in accs)
    peak = cfg.peak_gbps
    achieved = bus / makespan / 1e9 if makespan > 0 else 0.0

    def alone_sum(key: str) -> int:
        if not alone:
            return int(c.get(key, 0))
        total = sum(r.results[0].dram.get(key, 0) for r in alone_runs)
        if cpu_alone is not None:
            total += cpu_alone.dram_counters.get(key, 0)
        return int(total)

    return SocResult(
        name=soc.name, dram=cfg.preset, dram_peak_gbps=peak, accelerators=tuple(accs),
        makespan_s=makespan, dram_bus_bytes=int(bus), dram_achieved_gbps=achieved,
        dram_utilization=achieved / peak if math.isfinite(peak) and peak > 0 else 0.0,
        dram_busy_s=_union_s(busy_shared), dram_busy_alone_s=busy_alone,
        row_hits=int(c.get("row_hits", 0)), row_misses=int(c.get("row_misses", 0)),
        row_conflicts=int(c.get("row_conflicts", 0)), row_hits_alone=alone_sum("row_hits"),
        row_misses_alone=alone_sum("row_misses"), row_conflicts_alone=alone_sum("row_conflicts"),
        region_bytes=region, cpu=cpu_dict, shared=list(shared.results),
        alone=[r.results[0] for r in alone_runs] if alone_runs else list(shared.results))


def _run_cpu_alone(soc: SocConfig, base: int, region: int) -> _CpuRunner:
    model = None if soc.dram.is_ideal else DramModel(soc.dram)
    runner = _CpuRunner(soc.cpu, soc.dram, base, region)
    while runner.next_time_s() is not None:
        runner.step(model)
    runner.dram_counters = model.counters() if model is not None else {}
    return runner


def _cpu_summary(stream: CpuStream, alone: _CpuRunner, shared: _CpuRunner) -> dict:
    def span(r: _CpuRunner) -> float:
        return r.finish_s - (r.first_s if r.first_s is not None else r.finish_s)
    a, s = span(alone), span(shared)
    return {"kind": stream.kind, "nbytes": stream.nbytes, "dram_bytes": stream.dram_bytes,
            "seconds_alone": a, "seconds_shared": s,
            "gbps_alone": stream.dram_bytes / a / 1e9 if a > 0 else 0.0,
            "gbps_shared": stream.dram_bytes / s / 1e9 if s > 0 else 0.0,
            "slowdown": s / a if a > 0 else 1.0}


# ---- TOML form --------------------------------------------------------------------------------
_TOP_KEYS = ("soc", "dram", "host_link", "accelerator", "cpu")
_SOC_KEYS = ("name",)


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def soc_config_from_dict(data: dict, where: str = "<soc>", *, base_dir: Path | None = None,
                         resolve: Callable[[str], Any] | None = None) -> SocConfig:
    """Build a :class:`SocConfig` from parsed TOML::

        [soc]
        name = "two-npus"
        [dram]                 # the shared DRAM: a preset plus overrides (as a chip's [dram])
        preset = "ddr4-3200"
        [host_link]            # optional: replaces every accelerator's host link
        [[accelerator]]        # one table per accelerator kind
        config = "default"     # optional chip TOML (relative to the file) or preset name
        count = 2              # optional copies (default 1)
        [accelerator.array]    # optional chip-config sections over the loaded config
        rows = 16
        [cpu]                  # optional CpuStream: nbytes, kind, chunk_bytes, gbps, ...
        nbytes = 16777216

    ``resolve(name)`` maps a ``config`` value to a path (npulab passes its preset resolver);
    without it ``config`` is a path. Every error is a ConfigError naming ``where`` and the key."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: must be a TOML table")
    for key in data:
        if key not in _TOP_KEYS:
            raise ConfigError(f"{where}: [{key}]: unknown section; allowed: {', '.join(_TOP_KEYS)}")
    soc = data.get("soc", {})
    if not isinstance(soc, dict):
        raise ConfigError(f"{where}: soc = {soc!r}: must be a [soc] table")
    for key in soc:
        if key not in _SOC_KEYS:
            raise ConfigError(f"{where}: soc.{key}: unknown key; allowed keys in [soc]: "
                              f"{', '.join(_SOC_KEYS)}")
    dram = dram_config_from_dict(data.get("dram", {}), where, prefix="dram.")
    link = (host_link_from_dict(data["host_link"], where, prefix="host_link.")
            if "host_link" in data else None)
    entries = data.get("accelerator")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{where}: accelerator = {entries!r}: must be one or more "
                          f"[[accelerator]] tables (an SoC needs at least one accelerator)")
    chips: list[ChipConfig] = []
    for k, entry in enumerate(entries):
        here = f"{where}: accelerator[{k}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{here} = {entry!r}: must be a table")
        entry = dict(entry)
        count = _int_in(entry.pop("count", 1), "count", here, 1, 64)
        cfg_name = entry.pop("config", None)
        base: dict = {}
        if cfg_name is not None:
            if not isinstance(cfg_name, str) or not cfg_name:
                raise ConfigError(f"{here}: config = {cfg_name!r}: must be a file name or preset")
            if resolve is None:               # the one preset lookup (hw.presets)
                from hw.configfile import resolve_chip_path as resolve
            path = resolve(cfg_name)
            path = Path(path) if path is not None else None
            if path is not None:
                if not path.is_absolute() and base_dir is not None and (base_dir / path).exists():
                    path = base_dir / path
                if not path.exists():
                    raise ConfigError(f"{here}: config = {cfg_name!r}: no such chip config file")
                base = read_toml(path)
                base.pop("dram", None)   # the SoC's [dram] replaces the chip's
        if "dram" in entry:
            raise ConfigError(f"{here}: [dram]: an accelerator has no DRAM of its own in an SoC; "
                              f"set the shared DRAM in the top-level [dram] table")
        chip = chip_config_from_dict(_merge(base, entry), here)
        chips.extend([chip] * count)
    cpu = None
    if "cpu" in data:
        cpu = config_from_table(CpuStream, data["cpu"], where, "cpu.")
    if len(chips) > 64:
        raise ConfigError(f"{where}: accelerator: {len(chips)} in all: must be 1..64")
    soc_cfg = object.__new__(SocConfig)
    for key, value in (("name", soc.get("name", Path(where).stem if where else "soc")),
                       ("accelerators", tuple(chips)), ("dram", dram), ("host_link", link),
                       ("cpu", cpu)):
        object.__setattr__(soc_cfg, key, value)
    soc_cfg.validate(where)
    return soc_cfg


def load_soc_config(path, *, resolve: Callable[[str], Any] | None = None) -> SocConfig:
    """Read an SoC TOML file (format: :func:`soc_config_from_dict`)."""
    path = Path(path)
    return soc_config_from_dict(read_toml(path), str(path), base_dir=path.parent, resolve=resolve)
