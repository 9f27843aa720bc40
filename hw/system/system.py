"""A multi-chip system: a :class:`~hw.system.topology.Topology`, the device on every rank, and the
per-message costs the collectives charge beyond the links (reduction rate, software overhead).

Systems come from presets (``sim_configs/systems/<name>.toml``, every number cited there), from a
system TOML file, or from an inline topology spec with an A100-like roofline device::

    [system]
    name = "my-box"
    topology = "ring:8"        # inline spec, or a graph file path relative to this file,
                               # or a [topology] table (below)
    reduce_gbps = 680.0        # rate a rank reduces incoming data, GB/s
    overhead_ns = 1400.0       # software overhead per message, ns

    [topology]                 # instead of system.topology
    spec = "switch:8"          # inline spec | graph = "file.toml" | kind = "hierarchical"
    link_gbps = 300.0          # + link_latency_ns, link_efficiency, links_per_pair (fc),
                               #   oversubscription (fattree)
    levels = [...]             # kind = "hierarchical": list of {count, kind, gbps, ...}
    [topology.host]            # optional host: gbps, latency_ns, efficiency, attach, description

    [device]
    kind = "roofline"          # + the RooflineDevice fields; or a named device: kind = "a100"
                               # (see DEVICES); or kind = "chip", config = "default"

Every error is a :class:`~hw.systolic.config.ConfigError` naming the file, the key, the value
and what is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from hw.system import PRESETS, system_names, systems_dir
from hw.system.topology import (
    Topology, TopologyError, fattree, fully_connected, hierarchical, topology_from_dict,
    topology_from_spec, with_host,
)
from hw.systolic.config import ConfigError
from hw.validate import _number_in, config_from_table, read_toml

__all__ = ["RooflineDevice", "ChipDevice", "Protocol", "SystemConfig", "PRESETS", "DEVICES",
           "system_names", "load_system", "system_from_dict", "systems_dir"]


@dataclass(frozen=True)
class RooflineDevice:
    """A GPU-like device as a roofline: an op takes max(compute time, memory time).

    Attributes
    ----------
    name: label.
    peak_tflops: dense fp16/bf16 matrix (tensor core / MXU) peak, 1e12 FLOP/s (a MAC = 2 FLOP).
    vector_tflops: peak for non-matrix ops (elementwise, softmax, norms), 1e12 FLOP/s.
    mem_gbps: memory (HBM) bandwidth, GB/s = 1e9 B/s.
    mem_bytes: memory capacity, bytes.
    matrix_efficiency, mem_efficiency: achievable fractions of the peaks, in (0, 1]; 1.0 unless
        a measured figure is cited (calibration is the user's choice).
    matrix_efficiency_curve, vector_efficiency_curve: optional size-dependent efficiency as
        ``((min_gflop, efficiency), ...)``: an op of F GFLOP gets the efficiency of the largest
        ``min_gflop <= F`` (a step function, the form Calculon's system files use: small GEMMs
        cannot fill the machine). When given it replaces ``matrix_efficiency`` (vector: 1.0).
    mem_efficiency_curve: the same for memory traffic, ``((min_mb, efficiency), ...)`` with MB =
        1e6 bytes moved by the op; replaces ``mem_efficiency`` when given.
    """

    name: str
    peak_tflops: float
    vector_tflops: float
    mem_gbps: float
    mem_bytes: int
    matrix_efficiency: float = 1.0
    mem_efficiency: float = 1.0
    matrix_efficiency_curve: tuple = ()
    vector_efficiency_curve: tuple = ()
    mem_efficiency_curve: tuple = ()

    def __post_init__(self) -> None:
        self.validate("RooflineDevice")

    def validate(self, where: str, prefix: str = "device.") -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen dataclass)
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"{where}: {prefix}name = {self.name!r}: must be a non-empty string")
        for key in ("peak_tflops", "vector_tflops", "mem_gbps"):
            set_(key, _number_in(getattr(self, key), prefix + key, where, 0.0, 1e9,
                                 lo_open=True))
        mem = self.mem_bytes
        if isinstance(mem, bool) or not isinstance(mem, int) or mem <= 0:
            raise ConfigError(f"{where}: {prefix}mem_bytes = {mem!r}: must be an integer > 0")
        for key in ("matrix_efficiency", "mem_efficiency"):
            set_(key, _number_in(getattr(self, key), prefix + key, where, 0.0, 1.0,
                                 lo_open=True))
        for key in ("matrix_efficiency_curve", "vector_efficiency_curve", "mem_efficiency_curve"):
            set_(key, _efficiency_curve(getattr(self, key), prefix + key, where))

    def op_seconds(self, flops: float, bytes_moved: float, matrix: bool) -> float:
        """Roofline time of one op: max(flops / achievable FLOP/s, bytes / achievable B/s),
        with the matrix peak for ``matrix=True`` and the vector peak otherwise."""
        for key, v in (("flops", flops), ("bytes_moved", bytes_moved)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0 or (
                    v == float("inf")):
                raise ValueError(f"op_seconds: {key} = {v!r}: must be a finite number >= 0")
        if matrix:
            peak = self.peak_tflops * _lookup(self.matrix_efficiency_curve, flops / 1e9,
                                              self.matrix_efficiency)
        else:
            peak = self.vector_tflops * _lookup(self.vector_efficiency_curve, flops / 1e9, 1.0)
        mem = self.mem_gbps * _lookup(self.mem_efficiency_curve, bytes_moved / 1e6,
                                      self.mem_efficiency)
        return max(flops / (peak * 1e12), bytes_moved / (mem * 1e9))


def _efficiency_curve(value, key: str, where: str) -> tuple:
    """Validate ``((threshold, efficiency), ...)`` and sort it by descending threshold."""
    allowed = "a list of [threshold >= 0, efficiency in (0, 1]] pairs, e.g. [[16, 0.9], [0, 0.5]]"
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{where}: {key} = {value!r}: must be {allowed}")
    pairs = []
    for item in value:
        if (not isinstance(item, (list, tuple)) or len(item) != 2
                or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in item)
                or not item[0] >= 0 or not 0 < item[1] <= 1):
            raise ConfigError(f"{where}: {key}: entry {item!r}: must be {allowed}")
        pairs.append((float(item[0]), float(item[1])))
    if pairs and min(t for t, _ in pairs) != 0.0:
        raise ConfigError(f"{where}: {key} = {value!r}: needs a pair with threshold 0 so every "
                          f"op size has an efficiency")
    return tuple(sorted(pairs, reverse=True))


def _lookup(curve: tuple, size: float, default: float) -> float:
    """Efficiency of the first (largest) threshold <= ``size``; ``default`` without a curve."""
    for threshold, efficiency in curve:
        if size >= threshold:
            return efficiency
    return default


@dataclass(frozen=True)
class ChipDevice:
    """An npulab chip (a ``sim_configs`` preset name or a chip TOML path, systolic or NVDLA) on
    every rank. :meth:`spec` loads it with the one chip loader (:func:`hw.configfile.load_chip`);
    the run pipeline (:func:`npulab.pipeline.run`) times ops on it."""

    name: str
    config: str
    memory_gib: float | None = None

    def __post_init__(self) -> None:
        for key in ("name", "config"):
            v = getattr(self, key)
            if not isinstance(v, str) or not v:
                raise ConfigError(f"ChipDevice: {key} = {v!r}: must be a non-empty string")
        m = self.memory_gib
        if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float))
                              or not 0 < m <= 1 << 20):
            raise ConfigError(f"ChipDevice: memory_gib = {m!r}: must be a number of GiB in "
                              f"(0, {1 << 20}]")

    def spec(self):
        """The :class:`~hw.spec.ChipSpec` of :attr:`config`."""
        from hw.configfile import load_chip
        return load_chip(self.config)


@dataclass(frozen=True)
class Protocol:
    """A communication protocol of the collective library (NCCL's LL / LL128 / Simple): its
    per-message software overhead and the fraction of link bandwidth its wire format leaves for
    payload. A system with protocols times every collective under each and keeps the fastest,
    as NCCL's tuner does (NVIDIA/nccl src/graph/tuning.cc: it picks the protocol with the least
    predicted time per size).

    Attributes
    ----------
    name: the protocol's name (``"LL"``, ``"LL128"``, ``"Simple"``).
    overhead_ns: software overhead per message; replaces the system's ``overhead_ns``.
    bandwidth_factor: fraction of link bandwidth left for payload, in (0, 1].
    source: where the figures come from.
    """

    name: str
    overhead_ns: float
    bandwidth_factor: float = 1.0
    source: str = ""

    def __post_init__(self) -> None:
        self.validate(f"protocol {self.name!r}")

    def validate(self, where: str, prefix: str = "") -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"{where}: {prefix}name = {self.name!r}: must be a non-empty string")
        object.__setattr__(self, "overhead_ns", _number_in(self.overhead_ns, prefix + "overhead_ns",
                                                           where, 0.0, 1e12))
        object.__setattr__(self, "bandwidth_factor", _number_in(
            self.bandwidth_factor, prefix + "bandwidth_factor", where, 0.0, 1.0, lo_open=True))


@dataclass(frozen=True)
class SystemConfig:
    """A topology, the device on every rank, and per-message costs.

    ``reduce_gbps``: rate (GB/s) at which a rank reduces incoming data (the gamma term of the
    alpha-beta-gamma model is 1 / (reduce_gbps x 1e9) s/B; Thakur et al. 2005).
    ``overhead_ns``: software overhead per message on top of the route's link latencies.
    ``host_link``: a description of the host attachment, if any.
    ``protocols``: optional :class:`Protocol` alternatives; each replaces ``overhead_ns`` and
    scales link bandwidth, and a collective takes the fastest (none: ``overhead_ns`` alone).
    """

    name: str
    topology: Topology
    device: RooflineDevice | ChipDevice
    reduce_gbps: float
    overhead_ns: float
    host_link: str | None = None
    protocols: tuple = ()

    def __post_init__(self) -> None:
        where = f"system {self.name!r}"
        if not isinstance(self.topology, Topology):
            raise ConfigError(f"{where}: topology must be a Topology, got "
                              f"{type(self.topology).__name__}")
        if not isinstance(self.device, (RooflineDevice, ChipDevice)):
            raise ConfigError(f"{where}: device must be a RooflineDevice or ChipDevice, got "
                              f"{type(self.device).__name__}")
        object.__setattr__(self, "reduce_gbps", _number_in(self.reduce_gbps, "reduce_gbps",
                                                           where, 0.0, 1e9, lo_open=True))
        object.__setattr__(self, "overhead_ns", _number_in(self.overhead_ns, "overhead_ns",
                                                           where, 0.0, 1e12))
        protocols = tuple(self.protocols)
        if not all(isinstance(p, Protocol) for p in protocols):
            raise ConfigError(f"{where}: protocols must be Protocol objects")
        names = [p.name for p in protocols]
        if len(set(names)) != len(names):
            raise ConfigError(f"{where}: protocol names {names} repeat")
        object.__setattr__(self, "protocols", protocols)

    def with_protocol(self, name: str) -> "SystemConfig":
        """This system as one protocol sees it: its overhead per message, link efficiencies
        scaled by its bandwidth factor, no further protocol choice."""
        cache = self.__dict__.setdefault("_by_protocol", {})   # a topology is costly to build
        if name in cache:
            return cache[name]
        for proto in self.protocols:
            if proto.name == name:
                topo = replace(self.topology,
                               link_efficiency=self.topology.link_efficiency
                               * proto.bandwidth_factor)
                cache[name] = replace(self, topology=topo, overhead_ns=proto.overhead_ns,
                                      protocols=())
                return cache[name]
        raise ValueError(f"protocol = {name!r}: system {self.name!r} has "
                         f"{', '.join(p.name for p in self.protocols) or 'no protocols'}")

    @property
    def n_ranks(self) -> int:
        return self.topology.n_ranks

    def describe(self) -> dict:
        """JSON-able summary (topology summary, device fields, costs)."""
        dev = {f.name: getattr(self.device, f.name) for f in fields(self.device)}
        dev["type"] = "roofline" if isinstance(self.device, RooflineDevice) else "chip"
        return {"name": self.name, "topology": self.topology.describe(), "device": dev,
                "reduce_gbps": self.reduce_gbps, "overhead_ns": self.overhead_ns,
                "host_link": self.host_link,
                "protocols": [{f.name: getattr(p, f.name) for f in fields(p)}
                              for p in self.protocols]}


# --------------------------------------------------------------------------------------------
# named devices (datasheet figures)
# --------------------------------------------------------------------------------------------

_GIB = 1 << 30
#: Named roofline devices. Sources:
#: * ``a100``: NVIDIA A100 80GB SXM datasheet: 312 TFLOP/s dense FP16/BF16 tensor, 78 TFLOP/s
#:   FP16 non-tensor, 80 GB HBM2e at 2,039 GB/s (80 GiB as nvidia-smi reports 81920 MiB).
#: * ``h100``: NVIDIA H100 SXM5 datasheet: 989 TFLOP/s dense BF16 tensor, 3.35 TB/s, 80 GB; FP16
#:   non-tensor 133.8 TFLOP/s (NVIDIA H100 Tensor Core GPU Architecture whitepaper, table 3).
#: * ``tpu-v3``: Google Cloud TPU v3 documentation: 123 TFLOP/s bf16 per chip, 32 GiB HBM2 at
#:   900 GB/s. Vector rate: an estimate, 2 TensorCores x 128 lanes x 8 sublanes x 940 MHz
#:   ~= 1.9 TFLOP/s (VPU shape from Norrie et al. 2021, IEEE Micro, "The Design Process for
#:   Google's Training Chips: TPUv2 and TPUv3"; 940 MHz clock from Jouppi et al. 2020, CACM).
DEVICES: dict[str, RooflineDevice] = {
    "a100": RooflineDevice("A100-SXM4-80GB", peak_tflops=312.0, vector_tflops=78.0,
                           mem_gbps=2039.0, mem_bytes=80 * _GIB),
    "h100": RooflineDevice("H100-SXM5-80GB", peak_tflops=989.0, vector_tflops=133.8,
                           mem_gbps=3350.0, mem_bytes=80 * _GIB),
    "tpu-v3": RooflineDevice("TPU-v3", peak_tflops=123.0, vector_tflops=1.9,
                             mem_gbps=900.0, mem_bytes=32 * _GIB),
    # The A100 above with Calculon's size-dependent efficiencies (calculon-ai/calculon,
    # systems/a100_80g.json: matrix >= 128 GFLOP 0.95, >= 16 0.9, >= 1 0.6, else 0.1; vector
    # >= 16 GFLOP 0.95, >= 1 0.5, else 0.1; HBM >= 100 MB 0.9, >= 10 MB 0.75, >= 1 MB 0.6,
    # else 0.3). Calculon's authors chose these figures for their Selene validation; they are
    # theirs, not measured by us (docs/multichip.md).
    "a100-calculon": RooflineDevice(
        "A100-SXM4-80GB (Calculon efficiencies)", peak_tflops=312.0, vector_tflops=78.0,
        mem_gbps=2039.0, mem_bytes=80 * _GIB,
        matrix_efficiency_curve=((128, 0.95), (16, 0.9), (1, 0.6), (0, 0.1)),
        vector_efficiency_curve=((16, 0.95), (1, 0.5), (0, 0.1)),
        mem_efficiency_curve=((100, 0.9), (10, 0.75), (1, 0.6), (0, 0.3))),
}

#: Defaults of a system built from an inline topology spec: the A100 device; reduce rate
#: = HBM bandwidth / 3 (an element-wise sum reads two operands and writes one: an estimate);
#: overhead derived from the reference's measured 8-byte all-reduce on 4 x A100 (12.52 us,
#: LLMCompass artifact): a ring all-reduce has 2(p-1) = 6 steps, 2.09 us each, minus ~0.7 us
#: GPU-to-GPU NVLink latency leaves ~1.4 us of software overhead per step.
_INLINE_DEVICE = "a100"
_INLINE_OVERHEAD_NS = 1400.0


# --------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------

_SYSTEM_KEYS = ("name", "topology", "reduce_gbps", "overhead_ns", "description")
_TOPO_KEYS = ("spec", "graph", "kind", "levels", "name", "link_gbps", "link_latency_ns",
              "link_efficiency", "links_per_pair", "oversubscription", "host")
_HOST_KEYS = ("gbps", "latency_ns", "efficiency", "attach", "description")
_DEVICE_FIELDS = tuple(f.name for f in fields(RooflineDevice))


def load_system(spec: str, *, link_gbps=None, link_latency_ns=None, device=None) -> SystemConfig:
    """A system from a preset name (:data:`PRESETS`), a system or graph TOML file path, or an
    inline topology spec (``ring:8``, ``torus2d:4x4`` ...; device: the A100 roofline).

    ``link_gbps`` / ``link_latency_ns`` override the rank links of a spec-based topology (inline,
    or a file's ``spec``); ``device`` replaces the device: a :class:`RooflineDevice`, a
    :class:`ChipDevice`, a :data:`DEVICES` name, or a chip config name/path (-> ChipDevice).
    """
    if not isinstance(spec, (str, Path)) or not str(spec).strip():
        raise ConfigError(f"system {spec!r}: must be a preset ({', '.join(system_names())}), "
                          f"a system TOML file or an inline topology spec")
    text = str(spec).strip()
    overrides = {"link_gbps": link_gbps, "link_latency_ns": link_latency_ns}
    if text in PRESETS or text in system_names():
        path = systems_dir() / f"{text}.toml"
        cfg = _system_from_file(path, overrides)
    elif text.endswith(".toml") or "/" in text or Path(text).exists():
        cfg = _system_from_file(Path(text), overrides)
    elif ":" in text:
        topo = topology_from_spec(text, link_gbps=link_gbps, link_latency_ns=link_latency_ns)
        dev = DEVICES[_INLINE_DEVICE]
        cfg = SystemConfig(name=text, topology=topo, device=dev, reduce_gbps=dev.mem_gbps / 3,
                           overhead_ns=_INLINE_OVERHEAD_NS)
    else:
        raise ConfigError(f"system {text!r}: unknown; presets: {', '.join(system_names())}; or a "
                          f"system TOML file, or an inline topology spec such as ring:8, "
                          f"torus2d:4x4, switch:8, fc:4, fattree:64x8")
    if device is not None:
        cfg = replace(cfg, device=_device_arg(device))
    return cfg


def _device_arg(device) -> RooflineDevice | ChipDevice:
    if isinstance(device, (RooflineDevice, ChipDevice)):
        return device
    if isinstance(device, (str, Path)) and str(device):
        name = str(device)
        if name in DEVICES:
            return DEVICES[name]
        return ChipDevice(name=Path(name).stem, config=name)
    raise ConfigError(f"device = {device!r}: must be a RooflineDevice, a ChipDevice, one of "
                      f"{', '.join(DEVICES)}, or a chip config name/path")


def _system_from_file(path: Path, overrides: dict) -> SystemConfig:
    data = read_toml(path, missing="no such system file", what="system TOML file")
    where = str(path)
    if "system" not in data and "nodes" in data:      # a bare graph file: default device
        topo = topology_from_dict(data, where, default_name=path.stem)
        topo = _apply_link_overrides(topo, overrides, where, spec_based=False)
        dev = DEVICES[_INLINE_DEVICE]
        return SystemConfig(name=topo.name, topology=topo, device=dev,
                            reduce_gbps=dev.mem_gbps / 3, overhead_ns=_INLINE_OVERHEAD_NS)
    return system_from_dict(data, where, base=path.parent, overrides=overrides)


def _apply_link_overrides(topo, overrides, where, spec_based):
    if any(v is not None for v in overrides.values()) and not spec_based:
        raise ConfigError(f"{where}: link_gbps/link_latency_ns overrides apply to spec-based "
                          f"topologies only; edit the file's links instead")
    return topo


def system_from_dict(data: dict[str, Any], where: str, base: Path | None = None,
                     overrides: dict | None = None) -> SystemConfig:
    """A :class:`SystemConfig` from a parsed system TOML (see the module docstring); ``base``
    resolves relative graph file paths."""
    overrides = overrides or {}
    base = base or Path(".")
    for section in data:
        if section not in ("system", "topology", "device", "protocol"):
            raise ConfigError(f"{where}: [{section}]: unknown section; allowed sections: "
                              f"system, topology, device, [[protocol]]")
    sysd = data.get("system")
    if not isinstance(sysd, dict):
        raise ConfigError(f"{where}: [system]: missing; a system file needs a [system] table")
    for key in sysd:
        if key not in _SYSTEM_KEYS:
            raise ConfigError(f"{where}: system.{key}: unknown key; allowed keys in [system]: "
                              f"{', '.join(_SYSTEM_KEYS)}")
    name = sysd.get("name", Path(where).stem)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: system.name = {name!r}: must be a non-empty string")
    if "topology" in sysd and "topology" in data:
        raise ConfigError(f"{where}: system.topology and a [topology] table: give one")
    if "topology" in sysd:
        tval = sysd["topology"]
        if not isinstance(tval, str):
            raise ConfigError(f"{where}: system.topology = {tval!r}: must be an inline spec or "
                              f"a graph file path (or use a [topology] table)")
        table = {"graph": tval} if tval.endswith(".toml") else {"spec": tval}
    elif "topology" in data:
        table = data["topology"]
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: topology = {table!r}: must be a table")
    else:
        raise ConfigError(f"{where}: no topology: set system.topology or a [topology] table")
    topo, host_desc = _topology_table(table, where, base, overrides)
    if "graph" not in table and "name" not in table:
        topo = replace(topo, name=name)          # e.g. "dgx-a100" rather than "switch:8"
    for key in ("reduce_gbps", "overhead_ns"):
        if key not in sysd:
            raise ConfigError(f"{where}: system.{key}: missing; this key is required")
    reduce_gbps = _number_in(sysd["reduce_gbps"], "system.reduce_gbps", where, 0.0, 1e9,
                             lo_open=True)
    overhead_ns = _number_in(sysd["overhead_ns"], "system.overhead_ns", where, 0.0, 1e12)
    dev = _device_table(data.get("device", {"kind": _INLINE_DEVICE}), where)
    return SystemConfig(name=name, topology=topo, device=dev, reduce_gbps=reduce_gbps,
                        overhead_ns=overhead_ns, host_link=host_desc,
                        protocols=_protocol_tables(data.get("protocol", []), where))


def _protocol_tables(tables, where: str) -> tuple:
    """``[[protocol]]`` arrays of tables: name, overhead_ns, bandwidth_factor, source."""
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(f"{where}: protocol = {tables!r}: must be [[protocol]] tables")
    return tuple(config_from_table(Protocol, table, where, f"protocol[{i}].")
                 for i, table in enumerate(tables))


def _topology_table(table, where, base, overrides):
    for key in table:
        if key not in _TOPO_KEYS:
            raise ConfigError(f"{where}: topology.{key}: unknown key; allowed keys in "
                              f"[topology]: {', '.join(_TOPO_KEYS)}")
    how = [k for k in ("spec", "graph", "levels") if k in table]
    if len(how) != 1:
        raise ConfigError(f"{where}: [topology]: give exactly one of spec (inline spec), graph "
                          f"(file path) or levels (kind = \"hierarchical\"); found "
                          f"{', '.join(how) or 'none'}")
    link = {k: table.get(k, overrides.get(k)) for k in ("link_gbps", "link_latency_ns",
                                                        "link_efficiency")}
    for k in ("link_gbps", "link_latency_ns"):
        if overrides.get(k) is not None:
            link[k] = overrides[k]
    try:
        if how == ["spec"]:
            spec = table["spec"]
            if not isinstance(spec, str):
                raise TopologyError(f"topology.spec = {spec!r}: must be a string")
            extra = {"links_per_pair": "fc:", "oversubscription": "fattree:"}
            for key, prefix in extra.items():
                if key in table and not spec.startswith(prefix):
                    raise TopologyError(f"topology.{key}: only for {prefix}N specs, not {spec!r}")
            if "links_per_pair" in table or "oversubscription" in table:
                base_topo = topology_from_spec(spec)          # validates the spec text
                nums = base_topo.params
                kw = dict(gbps=link["link_gbps"], latency_ns=link["link_latency_ns"],
                          efficiency=link["link_efficiency"], name=table.get("name", spec))
                if "links_per_pair" in table:
                    topo = fully_connected(base_topo.n_ranks, table["links_per_pair"], **kw)
                else:
                    topo = fattree(base_topo.n_ranks, nums["leaf_ports"],
                                   oversubscription=table["oversubscription"], **kw)
            else:
                topo = topology_from_spec(spec, link_gbps=link["link_gbps"],
                                          link_latency_ns=link["link_latency_ns"],
                                          link_efficiency=link["link_efficiency"])
                if "name" in table:
                    topo = replace(topo, name=table["name"])
        elif how == ["graph"]:
            gpath = Path(table["graph"])
            if not gpath.is_absolute():
                gpath = base / gpath
            _apply_link_overrides(None, overrides, where, spec_based=False)
            gdata = read_toml(gpath, missing=f"no such graph file (the topology of {where})",
                              what="graph TOML file")
            topo = topology_from_dict(gdata, str(gpath), default_name=gpath.stem)
        else:
            if table.get("kind", "hierarchical") != "hierarchical":
                raise TopologyError(f"topology.kind = {table['kind']!r}: levels need kind = "
                                    f"\"hierarchical\"")
            _apply_link_overrides(None, overrides, where, spec_based=False)
            levels = table["levels"]
            if not isinstance(levels, list):
                raise TopologyError(f"topology.levels = {levels!r}: must be a list of tables")
            lv = []
            for i, t in enumerate(levels):
                if not isinstance(t, dict) or "count" not in t or "kind" not in t:
                    raise TopologyError(f"topology.levels[{i}] = {t!r}: must be a table with "
                                        f"count, kind (and gbps, latency_ns, efficiency)")
                lv.append((t["count"], t["kind"],
                           {k: v for k, v in t.items() if k not in ("count", "kind")}))
            topo = hierarchical(lv, name=table.get("name", Path(where).stem))
    except TopologyError as exc:
        msg = str(exc)
        raise TopologyError(msg if msg.startswith(where) else f"{where}: {msg}") from None
    host_desc = None
    if "host" in table:
        host = table["host"]
        if not isinstance(host, dict):
            raise ConfigError(f"{where}: topology.host = {host!r}: must be a table")
        for key in host:
            if key not in _HOST_KEYS:
                raise ConfigError(f"{where}: topology.host.{key}: unknown key; allowed keys: "
                                  f"{', '.join(_HOST_KEYS)}")
        if "gbps" not in host:
            raise ConfigError(f"{where}: topology.host.gbps: missing; this key is required")
        try:
            topo = with_host(topo, gbps=host["gbps"], latency_ns=host.get("latency_ns", 500.0),
                             efficiency=host.get("efficiency", 1.0),
                             attach=host.get("attach", "ranks"))
        except TopologyError as exc:
            raise TopologyError(f"{where}: topology.host: {exc}") from None
        host_desc = host.get("description", f"host link {host['gbps']} GB/s per direction "
                                            f"({host.get('attach', 'ranks')})")
    return topo, host_desc


def _device_table(table, where) -> RooflineDevice | ChipDevice:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: device = {table!r}: must be a [device] table")
    kind = table.get("kind", "roofline")
    allowed = ("roofline", "chip") + tuple(DEVICES)
    if kind not in allowed:
        raise ConfigError(f"{where}: device.kind = {kind!r}: must be one of {', '.join(allowed)}")
    rest = {k: v for k, v in table.items() if k != "kind"}
    if kind == "chip":
        for key in rest:
            if key not in ("config", "name", "memory_gib"):
                raise ConfigError(f"{where}: device.{key}: unknown key; allowed keys for kind = "
                                  f"\"chip\": config, name, memory_gib")
        config = rest.get("config")
        if not isinstance(config, str) or not config:
            raise ConfigError(f"{where}: device.config = {config!r}: must name a chip config "
                              f"(a sim_configs preset such as \"default\" or a TOML path)")
        try:
            return ChipDevice(name=rest.get("name", Path(config).stem), config=config,
                              memory_gib=rest.get("memory_gib"))
        except ConfigError as exc:
            raise ConfigError(f"{where}: device.{str(exc).removeprefix('ChipDevice: ')}") from None
    if kind in DEVICES:            # a named device, optionally with fields overridden
        if not rest:
            return DEVICES[kind]
        merged = {f: getattr(DEVICES[kind], f) for f in _DEVICE_FIELDS}
        for key in rest:
            if key not in _DEVICE_FIELDS:
                raise ConfigError(f"{where}: device.{key}: unknown key; allowed keys in "
                                  f"[device]: kind, {', '.join(_DEVICE_FIELDS)}")
        merged.update(rest)
        return config_from_table(RooflineDevice, merged, where, "device.")
    return config_from_table(RooflineDevice, rest, where, "device.")
