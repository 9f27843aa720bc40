"""Design-space sweeps: a TOML spec expanded to design points, run in parallel, stored in SQLite.

A sweep spec (``sim_configs/sweeps/*.toml`` are examples; every key is in ``docs/sweeps.md``)
names a base design, the axes to vary, the workloads, and the objectives and constraints the
report ranks points by::

    [sweep]
    name = "shapes"
    kind = "chip"                 # chip: one chip (simulate + compute_metrics); system: many chips
    timing = "native"             # chip: native | compute | scalesim
    tech = "16nm"                 # chip: energy table (name or TOML path, relative to the spec)

    [base]
    config = "default"            # chip preset or TOML path (relative to the spec)
    set = ["dram.preset=hbm2"]    # fixed SECTION.KEY=VALUE overrides

    [run]                         # chip, native timing: compiler.lower.CompileOptions(**table)
    loop_order = "mnk"

    [[workload]]
    model = "resnet50"            # a zoo model (system kind: an LLM preset or a zoo model)
    image_size = 224

    [[axis]]
    key = "array.dataflow"
    values = ["os", "ws", "is"]

    [[axis]]                      # a zipped axis: several keys move together
    name = "shape"
    keys = ["array.rows", "array.cols"]
    range = {start = 8, stop = 128, factor = 2}     # or values = [[16, 16], [32, 8]]

    [objectives]
    latency_s = "min"
    energy_j = "min"

    [constraints]
    area_mm2 = "<= 2.0"

Expansion (:func:`expand`): workloads outermost, then the axes in file order, the last axis
fastest (``itertools.product``). Each :class:`DesignPoint` has an ``index`` in that order and a
stable ``id``: the first 16 hex digits of the SHA-256 of its canonical parameter JSON (sorted
keys, no spaces), so a resumed sweep matches stored points exactly whatever their order.

Running (:func:`run_sweep`): executors ``local`` (a process pool, ``os.cpu_count()`` workers by
default), ``serial`` (in this process) and ``ray`` (``ray.init(address)``; a local cluster
without an address). Each result is committed to ``DIR/sweep.sqlite`` (WAL, the parent process
is the only writer) as it arrives, so a killed sweep resumes where it stopped; a point that
raises is stored as ``failed`` with ``Type: message``; a worker process that dies takes no
other point with it (the points it may have been running are re-run one by one in fresh
processes, and the one that kills its process again is stored failed).

Reporting (:func:`write_report`): ``points.csv``, ``pareto.csv`` (the feasible non-dominated
points per workload) and PNG plots (Pareto scatter, heatmap over two axes, sensitivity per axis).

Spec errors are :class:`~hw.systolic.config.ConfigError` naming the spec file, the key, the
value and what is allowed, raised before anything runs; output-directory errors are
:class:`SweepError` (a ValueError).
"""

from __future__ import annotations

import csv
import hashlib
import inspect
import itertools
import json
import math
import operator
import os
import re
import socket
import sqlite3
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable

from hw.energy.tech import DEFAULT_TECHNOLOGY
from hw.systolic.config import ConfigError

__all__ = ["SweepSpec", "Axis", "DesignPoint", "SweepSummary", "SweepStore", "SweepError",
           "load_spec", "spec_from_dict", "expand", "point_job", "evaluate", "run_sweep",
           "pareto_front", "feasible", "write_report", "load_results", "SweepResults",
           "csv_table", "sweep_names", "resolve_spec",
           "KINDS", "EXECUTORS", "CHIP_METRICS", "SYSTEM_METRICS", "STORE_NAME"]

KINDS = ("chip", "system")
EXECUTORS = ("local", "serial", "ray")
STORE_NAME = "sweep.sqlite"
SPEC_COPY = "spec.toml"
SCHEMA = "npulab.sweep/1"

#: Metrics of a ``chip`` point (flat scalars; ``None`` where the timing mode has no value).
CHIP_METRICS = (
    "cycles", "latency_s", "inferences_per_s", "energy_j", "energy_per_inference_j", "power_w",
    "peak_power_w", "tops_per_w", "effective_tops", "peak_tops", "utilization", "area_mm2",
    "edp_js", "dram_bytes", "stall_dram_cycles", "memory_bound_layers")
#: Metrics of a ``system`` point (one training step).
SYSTEM_METRICS = (
    "step_s", "samples_per_s", "tokens_per_s", "scaling_efficiency", "speedup", "compute_s",
    "exposed_comm_s", "bubble_s", "optimizer_s", "memory_gb", "fits", "mfu", "ranks",
    "microbatches")
_DIRECTIONS = ("min", "max")
_OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt,
        "==": operator.eq, "!=": operator.ne}

_TOP_KEYS = ("sweep", "base", "run", "workload", "axis", "objectives", "constraints")
_SWEEP_KEYS = ("name", "kind", "description", "timing", "tech", "dram_type", "link_type")
_CHIP_BASE_KEYS = ("config", "set")
_SYSTEM_BASE_KEYS = ("system", "strategy", "chips", "comm", "algorithm", "microbatches",
                     "link_gbps", "link_latency_ns", "device")
_CHIP_SETTINGS = ("timing", "tech", "dram_type", "link_type")
_SYSTEM_WORKLOAD_PARAMS = ("seq_len", "global_batch", "micro_batch", "batch", "image_size")
_AXIS_KEYS = ("name", "key", "keys", "values", "range")
_RANGE_KEYS = (("start", "stop", "step"), ("start", "stop", "factor"))
_MAX_POINTS = 10_000_000


class SweepError(ValueError):
    """An output directory that does not fit the request (not empty, another sweep, ...)."""


# ---- the spec ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Axis:
    """One axis: ``keys`` (one, or several moving together) and its ``values`` (scalars for a
    single key, tuples of ``len(keys)`` for a zipped axis)."""

    name: str
    keys: tuple[str, ...]
    values: tuple

    @property
    def zipped(self) -> bool:
        return len(self.keys) > 1

    def assignments(self, value) -> dict[str, Any]:
        """``{key: value}`` for one value of the axis."""
        return dict(zip(self.keys, value)) if self.zipped else {self.keys[0]: value}


@dataclass(frozen=True)
class SweepSpec:
    """A parsed, validated sweep spec (see the module docstring; ``docs/sweeps.md``).

    ``base``: chip kind ``{"config": path | None, "set": [...]}``; system kind the
    ``_SYSTEM_BASE_KEYS`` with defaults. ``settings``: chip kind ``timing``, ``tech``,
    ``dram_type``, ``link_type``. ``workloads``: ``(label, {"model": ..., params})``.
    ``objectives``: ``(metric, "min"|"max")``. ``constraints``: ``(metric, op, number)``."""

    path: str
    name: str
    kind: str
    description: str
    base: dict
    settings: dict
    run: dict
    workloads: tuple
    axes: tuple[Axis, ...]
    objectives: tuple
    constraints: tuple
    text: str = field(default="", repr=False, compare=False)
    base_dir: str | None = field(default=None, repr=False, compare=False)

    @property
    def metric_names(self) -> tuple[str, ...]:
        return CHIP_METRICS if self.kind == "chip" else SYSTEM_METRICS

    def design(self) -> dict:
        """Everything that determines the results (not objectives, constraints, name)."""
        return {"kind": self.kind, "base": self.base, "settings": self.settings, "run": self.run,
                "workloads": [list(w) for w in self.workloads],
                "axes": [{"name": a.name, "keys": list(a.keys), "values": list(a.values)}
                         for a in self.axes]}

    def design_hash(self) -> str:
        return hashlib.sha256(_canonical(self.design()).encode()).hexdigest()

    def report_info(self) -> dict:
        """What ``npulab sweep report`` needs (stored in the database)."""
        return {"name": self.name, "kind": self.kind, "description": self.description,
                "workloads": [w[0] for w in self.workloads],
                "axes": [{"name": a.name, "keys": list(a.keys)} for a in self.axes],
                "objectives": [list(o) for o in self.objectives],
                "constraints": [list(c) for c in self.constraints],
                "metrics": list(self.metric_names)}


def _canonical(data) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=True)


def _err(where: str, key: str, value, allowed: str) -> ConfigError:
    return ConfigError(f"{where}: {key} = {value!r}: {allowed}")


def _check_keys(table: dict, allowed: Iterable[str], where: str, section: str) -> None:
    allowed = tuple(allowed)
    for key in table:
        if key not in allowed:
            raise ConfigError(f"{where}: {section}{key}: unknown key; allowed keys: "
                              f"{', '.join(allowed)}")


def _scalar(value) -> bool:
    return isinstance(value, (str, int, float, bool))


def _shipped_dir():
    from hw.presets import presets_dir
    return presets_dir() / "sweeps"


def sweep_names() -> list[str]:
    """The shipped example sweeps (``sim_configs/sweeps/*.toml``)."""
    d = _shipped_dir()
    try:
        return sorted(f.name[:-5] for f in d.iterdir() if f.name.endswith(".toml"))
    except (FileNotFoundError, NotADirectoryError):
        return []


def resolve_spec(name_or_path: str | Path) -> Path:
    """A spec path, or the name of a shipped sweep (``resnet50_shapes``)."""
    text = str(name_or_path)
    path = Path(text)
    if path.suffix == ".toml" or path.exists() or "/" in text:
        return path
    if text in sweep_names():
        return Path(str(_shipped_dir() / f"{text}.toml"))
    raise ConfigError(f"sweep spec {text!r}: no such file or shipped sweep; shipped sweeps: "
                      f"{', '.join(sweep_names()) or '(none)'}")


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep spec file (a path or a shipped sweep name)."""
    from hw.validate import read_config_text
    path = resolve_spec(path)
    text = read_config_text(path, missing="no such sweep spec")
    import tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return spec_from_dict(data, str(path), base_dir=Path(path).resolve().parent, text=text)


def _relative(value: str, base_dir: Path | None) -> str:
    """A path in the spec, relative to the spec's folder."""
    if base_dir is None or Path(value).is_absolute():
        return value
    return str((base_dir / value).resolve())


def _looks_like_path(value: str) -> bool:
    return value.endswith(".toml") or "/" in value


def spec_from_dict(data: dict, where: str = "<sweep>", base_dir: Path | None = None,
                   text: str = "") -> SweepSpec:
    """Validate parsed TOML (``where`` names the source in errors; relative paths in the spec
    are taken from ``base_dir``)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a TOML document")
    _check_keys(data, _TOP_KEYS, where, "")
    for section in ("sweep", "base", "run", "objectives", "constraints"):
        if section in data and not isinstance(data[section], dict):
            raise _err(where, section, data[section], f"must be a [{section}] table")
    sweep = data.get("sweep", {})
    _check_keys(sweep, _SWEEP_KEYS, where, "sweep.")
    kind = sweep.get("kind", "chip")
    if kind not in KINDS:
        raise _err(where, "sweep.kind", kind, f"must be one of {', '.join(KINDS)}")
    name = sweep.get("name", Path(where).stem if where != "<sweep>" else "sweep")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.+-]+", name):
        raise _err(where, "sweep.name", name, "must be a name of letters, digits, _ . + -")
    description = sweep.get("description", "")
    if not isinstance(description, str):
        raise _err(where, "sweep.description", description, "must be a string")
    if kind == "chip":
        settings = _chip_settings(sweep, where, base_dir)
        base = _chip_base(data.get("base", {}), where, base_dir)
        run = _run_options(data.get("run", {}), where)
    else:
        for key in _CHIP_SETTINGS:
            if key in sweep:
                raise ConfigError(f"{where}: sweep.{key}: applies to kind = \"chip\" sweeps only")
        if "run" in data:
            raise ConfigError(f"{where}: [run]: applies to kind = \"chip\" sweeps only")
        settings, run = {}, {}
        base = _system_base(data.get("base", {}), where, base_dir)
    workloads = _workloads(data.get("workload"), kind, where)
    _count_points(data.get("axis", []), len(workloads), where)
    axes = _axes(data.get("axis", []), kind, workloads, where, base_dir)
    metrics = CHIP_METRICS if kind == "chip" else SYSTEM_METRICS
    objectives = _objectives(data.get("objectives"), metrics, kind, where)
    constraints = _constraints(data.get("constraints", {}), metrics, where)
    spec = SweepSpec(path=where, name=name, kind=kind, description=description, base=base,
                     settings=settings, run=run, workloads=workloads, axes=axes,
                     objectives=objectives, constraints=constraints, text=text,
                     base_dir=None if base_dir is None else str(base_dir))
    count = len(workloads) * math.prod(len(a.values) for a in axes)
    if count > _MAX_POINTS:
        raise ConfigError(f"{where}: {count:,} design points: at most {_MAX_POINTS:,} allowed")
    return spec


def _chip_settings(sweep: dict, where: str, base_dir) -> dict:
    from hw.energy import DRAM_KINDS, LINK_KINDS, technology_names
    from npulab.simulate import TIMING_MODES
    timing = sweep.get("timing", "native")
    if timing not in TIMING_MODES:
        raise _err(where, "sweep.timing", timing, f"must be one of {', '.join(TIMING_MODES)}")
    tech = sweep.get("tech", DEFAULT_TECHNOLOGY)
    if not isinstance(tech, str) or not tech:
        raise _err(where, "sweep.tech", tech, f"must be one of {', '.join(technology_names())} "
                   f"or a TOML file")
    if tech not in technology_names():
        tech = _relative(tech, base_dir)
    _check_tech(tech, where, "sweep.tech")
    dram_type = sweep.get("dram_type")
    if dram_type is not None and dram_type not in DRAM_KINDS:
        raise _err(where, "sweep.dram_type", dram_type, f"must be one of {', '.join(DRAM_KINDS)} "
                   f"(omitted: from the DRAM preset)")
    link_type = sweep.get("link_type", "pcie")
    if link_type not in LINK_KINDS:
        raise _err(where, "sweep.link_type", link_type, f"must be one of {', '.join(LINK_KINDS)}")
    return {"timing": timing, "tech": tech, "dram_type": dram_type, "link_type": link_type}


def _tech_names() -> list[str]:
    from hw.energy import technology_names
    return list(technology_names())


def _check_tech(tech: str, where: str, key: str) -> None:
    from hw.energy import load_technology
    try:
        load_technology(tech)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {key}: {exc}") from None


def _resolve_chip_config(value, where: str, key: str, base_dir) -> str | None:
    """A chip preset name or a path (relative to the spec) -> a path string, or None."""
    from hw.presets import chip_preset_names as preset_names
    from hw.presets import nvdla_preset_names, presets_dir
    if value is None or value == "default":
        return None
    if not isinstance(value, str) or not value:
        raise _err(where, key, value, "must be a chip preset name or a TOML path")
    if _looks_like_path(value) or value not in preset_names():
        if value in nvdla_preset_names():
            raise _err(where, key, value, "an NVDLA build; sweeps run systolic chips; presets: "
                       + ", ".join(preset_names()))
        path = Path(_relative(value, base_dir))
        if not path.is_file():
            raise _err(where, key, value, "no such file or chip preset; presets: "
                       + ", ".join(preset_names()))
        return str(path)
    return str(presets_dir() / f"{value}.toml")


def _chip_base(base: dict, where: str, base_dir) -> dict:
    from hw.configfile import load_chip_config
    _check_keys(base, _CHIP_BASE_KEYS, where, "base.")
    config = _resolve_chip_config(base.get("config"), where, "base.config", base_dir)
    overrides = base.get("set", [])
    if not isinstance(overrides, list) or not all(isinstance(s, str) for s in overrides):
        raise _err(where, "base.set", overrides,
                   "must be a list of \"SECTION.KEY=VALUE\" strings")
    try:
        load_chip_config(config, overrides)
    except ConfigError as exc:
        raise ConfigError(f"{where}: [base]: {exc}") from None
    return {"config": config, "set": list(overrides)}


def _system_base(base: dict, where: str, base_dir) -> dict:
    from compiler.parallel import parse_strategy
    from hw.system.system import load_system
    _check_keys(base, _SYSTEM_BASE_KEYS, where, "base.")
    out = {"system": base.get("system", "switch:{chips}"), "strategy": base.get("strategy",
           "dp={chips}"), "chips": base.get("chips", 8), "comm": base.get("comm", "analytic"),
           "algorithm": base.get("algorithm", "auto"), "microbatches": base.get("microbatches"),
           "link_gbps": base.get("link_gbps"), "link_latency_ns": base.get("link_latency_ns"),
           "device": base.get("device")}
    for key in ("system", "strategy"):
        if not isinstance(out[key], str) or not out[key]:
            raise _err(where, f"base.{key}", out[key], "must be a non-empty string")
    if _looks_like_path(out["system"]) and ":" not in out["system"]:
        out["system"] = _relative(out["system"], base_dir)
    if isinstance(out["device"], str) and out["device"].endswith(".toml"):
        out["device"] = _relative(out["device"], base_dir)
    if out["comm"] not in ("sim", "analytic"):
        raise _err(where, "base.comm", out["comm"], "must be sim or analytic")
    chips = out["chips"]
    if isinstance(chips, bool) or not isinstance(chips, int) or chips < 1:
        raise _err(where, "base.chips", chips, "must be an integer >= 1")
    # the base alone must make sense (axes may change any of it; their values are checked
    # per point)
    try:
        parse_strategy(_fill_chips(out["strategy"], chips, "base.strategy"))
        load_system(_fill_chips(out["system"], chips, "base.system"),
                    link_gbps=out["link_gbps"], link_latency_ns=out["link_latency_ns"],
                    device=out["device"])
    except (ConfigError, ValueError) as exc:
        raise ConfigError(f"{where}: [base]: {exc}") from None
    return out


def _run_options(table: dict, where: str) -> dict:
    from compiler.lower import CompileOptions
    try:
        CompileOptions(**table)
    except (TypeError, ValueError) as exc:
        allowed = ", ".join(f.name for f in fields(CompileOptions))
        raise ConfigError(f"{where}: [run]: {exc} (the [run] table holds "
                          f"compiler.lower.CompileOptions fields: {allowed})") from None
    return dict(table)


def _model_params(model: str, kind: str) -> tuple[str, ...] | None:
    """The parameters a workload ``model`` takes, or None if the model is unknown."""
    from compiler.frontends import zoo
    if kind == "system":
        from compiler.parallel import model_names
        if model in model_names() or model in zoo.names():
            return _SYSTEM_WORKLOAD_PARAMS
        return None
    if model in zoo.names():
        return tuple(inspect.signature(zoo._builders()[model]).parameters)
    return None


def _known_models(kind: str) -> str:
    from compiler.frontends import zoo
    if kind == "system":
        from compiler.parallel import model_names
        return f"LLM presets: {', '.join(model_names())}; zoo models: {', '.join(zoo.names())}"
    return f"zoo models: {', '.join(zoo.names())}"


def _workloads(items, kind: str, where: str) -> tuple:
    if items is None:
        raise ConfigError(f"{where}: [[workload]]: missing; give at least one, e.g. "
                          f"[[workload]] model = \"resnet18\"")
    if not isinstance(items, list) or not items or not all(isinstance(w, dict) for w in items):
        raise _err(where, "workload", items, "must be one or more [[workload]] tables")
    out, labels = [], set()
    for i, w in enumerate(items):
        key = f"workload[{i}]"
        model = w.get("model")
        params = _model_params(model, kind) if isinstance(model, str) else None
        if params is None:
            raise _err(where, f"{key}.model", model, f"unknown model; {_known_models(kind)}")
        allowed = ("model", "label") + params
        _check_keys(w, allowed, where, f"{key}.")
        values = {k: v for k, v in w.items() if k not in ("model", "label")}
        for k, v in values.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise _err(where, f"{key}.{k}", v, "must be an integer >= 1")
        label = w.get("label")
        if label is None:
            label = model + ("" if not values else
                             "(" + ",".join(f"{k}={v}" for k, v in values.items()) + ")")
        if not isinstance(label, str) or not label:
            raise _err(where, f"{key}.label", label, "must be a non-empty string")
        if label in labels:
            raise _err(where, f"{key}.label", label, "two workloads have this label; give each "
                       "a unique label")
        labels.add(label)
        out.append((label, {"model": model, **values}))
    return tuple(out)


def _chip_keys() -> set[str]:
    from hw.chip import ChipConfig
    from hw.configfile import chip_config_to_dict
    keys = set()
    for section, values in chip_config_to_dict(ChipConfig()).items():
        for key, value in values.items():
            if isinstance(value, dict):
                keys.update(f"{section}.{key}.{k}" for k in value)
                keys.update(f"{section}.{k}" for k in value)       # sram.KEY: all three
            else:
                keys.add(f"{section}.{key}")
    return keys


def _axis_key_ok(key: str, kind: str, workloads, where: str, akey: str) -> None:
    """Raise unless ``key`` is something a point of this kind can vary."""
    if key.startswith("workload."):
        param = key.split(".", 1)[1]
        for label, w in workloads:
            params = _model_params(w["model"], kind)
            if param not in params:
                raise _err(where, akey, key, f"workload {label!r} ({w['model']}) takes no "
                           f"{param!r}; it takes: {', '.join(params)}")
        return
    if kind == "system":
        allowed = [k for k in _SYSTEM_BASE_KEYS] + [f"workload.{p}" for p in
                                                   _SYSTEM_WORKLOAD_PARAMS]
        if key not in _SYSTEM_BASE_KEYS:
            raise _err(where, akey, key, f"not a system sweep key; allowed: {', '.join(allowed)}")
        return
    if key.startswith("run."):
        from compiler.lower import CompileOptions
        names = [f.name for f in fields(CompileOptions)]
        if key[4:] not in names:
            raise _err(where, akey, key, f"not a compiler option; run.* keys: {', '.join(names)}")
        return
    if key in _CHIP_SETTINGS or key == "config":
        return
    if key not in _chip_keys():
        raise _err(where, akey, key, "not a chip config key (SECTION.KEY such as array.rows, "
                   "sram.ifmap.capacity_kib, dram.preset, chip.clock_mhz; see docs/configs.md), "
                   "run.* (compiler option), workload.* (model parameter), "
                   f"{', '.join(_CHIP_SETTINGS)} or config")


def _range_count(r, where: str, key: str) -> int:
    """How many values range table ``r`` gives (validated; nothing is expanded)."""
    if not isinstance(r, dict):
        raise _err(where, key, r, "must be a table {start, stop, step} or {start, stop, factor}")
    if tuple(sorted(r)) not in [tuple(sorted(k)) for k in _RANGE_KEYS]:
        raise _err(where, key, r, "must have exactly start, stop and step (linear) or start, "
                   "stop and factor (geometric); stop is inclusive")
    for k, v in r.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise _err(where, f"{key}.{k}", v, "must be a finite number")
    start, stop = r["start"], r["stop"]
    if "step" in r:
        step = r["step"]
        if step == 0 or (stop - start) * step < 0:
            raise _err(where, f"{key}.step", step, f"must be nonzero and lead from start = "
                       f"{start} to stop = {stop}")
        return int(math.floor((stop - start) / step + 1e-9)) + 1
    factor = r["factor"]
    if start <= 0 or stop <= 0 or factor <= 0 or factor == 1 or \
            (stop - start) * (factor - 1) < 0:
        raise _err(where, f"{key}.factor", factor, f"must be > 0, != 1 and lead from "
                   f"start = {start} to stop = {stop} (both > 0)")
    return int(math.floor(math.log(stop / start) / math.log(factor) + 1e-9)) + 1


def _expand_range(r, where: str, key: str) -> list:
    n = _range_count(r, where, key)
    if n > _MAX_POINTS:
        raise _err(where, key, r, f"gives {n:,} values; at most {_MAX_POINTS:,}")
    start = r["start"]
    ints = all(isinstance(v, int) for v in r.values())
    if "step" in r:
        out = [start + i * r["step"] for i in range(n)]
    else:
        out = [start * r["factor"] ** i for i in range(n)]
    return out if ints else [float(f"{v:.12g}") for v in out]


def _count_points(items, n_workloads: int, where: str) -> None:
    """Refuse a spec with more than ``_MAX_POINTS`` points before any axis is expanded or
    checked value by value (the count is the product of the axis sizes; axes too malformed to
    count are left to :func:`_axes`)."""
    if not isinstance(items, list):
        return
    count = n_workloads
    for i, a in enumerate(items):
        n = None
        if isinstance(a, dict) and isinstance(a.get("values"), list) and "range" not in a:
            n = len(a["values"])
        elif isinstance(a, dict) and "range" in a and "values" not in a:
            try:
                n = _range_count(a["range"], where, f"axis[{i}].range")
            except ConfigError:
                n = None
        if n:
            count *= n
    if count > _MAX_POINTS:
        raise ConfigError(f"{where}: {count:,} design points: at most {_MAX_POINTS:,} allowed "
                          f"(workloads x the values of every axis)")


def _axes(items, kind: str, workloads, where: str, base_dir) -> tuple[Axis, ...]:
    if not isinstance(items, list) or not all(isinstance(a, dict) for a in items):
        raise _err(where, "axis", items, "must be [[axis]] tables")
    out, names, used = [], set(), set()
    for i, a in enumerate(items):
        akey = f"axis[{i}]"
        _check_keys(a, _AXIS_KEYS, where, f"{akey}.")
        if ("key" in a) == ("keys" in a):
            raise ConfigError(f"{where}: {akey}: give exactly one of key = \"SECTION.KEY\" or "
                              f"keys = [...] (a zipped axis)")
        keys = [a["key"]] if "key" in a else a["keys"]
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
            raise _err(where, f"{akey}.keys", keys, "must be a non-empty list of key strings")
        for k in keys:
            _axis_key_ok(k, kind, workloads, where, f"{akey}.key")
            if k in used:
                raise _err(where, f"{akey}.key", k, "already varied by another axis")
            used.add(k)
        if ("values" in a) == ("range" in a):
            raise ConfigError(f"{where}: {akey} ({', '.join(keys)}): give exactly one of "
                              f"values = [...] or range = {{start, stop, step|factor}}")
        if "range" in a:
            values = _expand_range(a["range"], where, f"{akey}.range")
            if len(keys) > 1:
                values = [tuple([v] * len(keys)) for v in values]
        else:
            values = a["values"]
            if not isinstance(values, list) or not values:
                raise _err(where, f"{akey}.values", values, "must be a non-empty list")
            if len(keys) > 1:
                bad = [v for v in values if not isinstance(v, list) or len(v) != len(keys)
                       or not all(_scalar(x) for x in v)]
                if bad:
                    raise _err(where, f"{akey}.values", bad[0], f"each value of a zipped axis "
                               f"must be a list of {len(keys)} scalars, one per key "
                               f"({', '.join(keys)})")
                values = [tuple(v) for v in values]
            elif not all(_scalar(v) for v in values):
                bad = next(v for v in values if not _scalar(v))
                raise _err(where, f"{akey}.values", bad, "each value must be a string, number "
                           "or boolean")
        for j, k in enumerate(keys):
            if k == "config":
                for v in values:
                    _resolve_chip_config(v[j] if len(keys) > 1 else v, where, f"{akey}.values",
                                         base_dir)
        seen = set()
        for v in values:
            c = _canonical(v)
            if c in seen:
                raise _err(where, f"{akey}.values", v, "appears twice")
            seen.add(c)
        name = a.get("name", "+".join(keys))
        if not isinstance(name, str) or not name or name == "workload":
            raise _err(where, f"{akey}.name", name, "must be a non-empty string other than "
                       "'workload'")
        if name in names:
            raise _err(where, f"{akey}.name", name, "two axes have this name")
        names.add(name)
        out.append(Axis(name=name, keys=tuple(keys), values=tuple(values)))
    return tuple(out)


def _objectives(table, metrics, kind: str, where: str) -> tuple:
    if table is None:
        table = {"latency_s": "min", "energy_j": "min"} if kind == "chip" else \
            {"step_s": "min", "ranks": "min"}
    out = []
    for metric, direction in table.items():
        if metric not in metrics:
            raise _err(where, "objectives", metric, f"unknown metric; {kind} metrics: "
                       f"{', '.join(metrics)}")
        if direction not in _DIRECTIONS:
            raise _err(where, f"objectives.{metric}", direction, "must be min or max")
        out.append((metric, direction))
    if not out:
        raise ConfigError(f"{where}: [objectives]: empty; name at least one metric = "
                          f"\"min\"|\"max\"")
    return tuple(out)


def _constraints(table, metrics, where: str) -> tuple:
    out = []
    for metric, conds in table.items():
        if metric not in metrics:
            raise _err(where, "constraints", metric, f"unknown metric; metrics: "
                       f"{', '.join(metrics)}")
        for cond in conds if isinstance(conds, list) else [conds]:
            m = re.fullmatch(r"\s*(<=|>=|==|!=|<|>)\s*(\S+)\s*", cond) \
                if isinstance(cond, str) else None
            number = None
            if m:
                try:
                    number = float(m.group(2))
                except ValueError:
                    pass
            if number is None or not math.isfinite(number):
                raise _err(where, f"constraints.{metric}", cond, "must be \"OP NUMBER\" (OP: "
                           f"{', '.join(_OPS)}), e.g. \"<= 20\", or a list of such strings")
            out.append((metric, m.group(1), number))
    return tuple(out)


# ---- design points ----------------------------------------------------------------------------

@dataclass(frozen=True)
class DesignPoint:
    """One point: ``params`` = ``{"workload": label, axis name: value, ...}`` (zipped axis
    values are lists); ``id`` = hash of the canonical JSON of the workload's full parameters
    and the axis values."""

    index: int
    id: str
    params: dict

    def label(self) -> str:
        parts = [str(self.params["workload"])]
        for k, v in self.params.items():
            if k != "workload":
                parts.append(f"{k}={_fmt_value(v)}")
        return " ".join(parts)


def _fmt_value(v) -> str:
    if isinstance(v, (list, tuple)):
        return "x".join(_fmt_value(x) for x in v)
    if isinstance(v, float) and v.is_integer():
        return str(int(v)) if abs(v) < 1e15 else repr(v)
    return str(v)


def expand(spec: SweepSpec) -> list[DesignPoint]:
    """Every design point in the stable order (workloads outermost, last axis fastest)."""
    points = []
    workloads = dict(spec.workloads)
    combos = itertools.product([w[0] for w in spec.workloads], *[a.values for a in spec.axes])
    for index, combo in enumerate(combos):
        params = {"workload": combo[0]}
        for axis, value in zip(spec.axes, combo[1:]):
            params[axis.name] = list(value) if axis.zipped else value
        identity = {"workload": workloads[combo[0]],
                    "axes": {k: v for k, v in params.items() if k != "workload"}}
        pid = hashlib.sha256(_canonical(identity).encode()).hexdigest()[:16]
        points.append(DesignPoint(index=index, id=pid, params=params))
    return points


def _assignments(spec: SweepSpec, point: DesignPoint) -> dict[str, Any]:
    out = {}
    for axis in spec.axes:
        out.update(axis.assignments(point.params[axis.name]))
    return out


def _toml_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))


def _fill_chips(text: str, chips: int, key: str) -> str:
    """``{chips}`` and ``{chips/K}`` in a system or strategy string -> numbers."""
    def sub(m):
        div = int(m.group(1)) if m.group(1) else 1
        if div < 1 or chips % div:
            raise ValueError(f"{key} = {text!r}: chips = {chips} is not divisible by {div}")
        return str(chips // div)
    out = re.sub(r"\{chips(?:/(\d+))?\}", sub, text)
    if "{" in out or "}" in out:
        raise ValueError(f"{key} = {text!r}: the only placeholders are {{chips}} and "
                         f"{{chips/K}}")
    return out


def point_job(spec: SweepSpec, point: DesignPoint) -> dict:
    """The plain-data job a worker runs for ``point`` (picklable, no spec object)."""
    assign = _assignments(spec, point)
    base_dir = None if spec.base_dir is None else Path(spec.base_dir)
    workload = dict(dict(spec.workloads)[point.params["workload"]])
    for key, value in assign.items():
        if key.startswith("workload."):
            workload[key[9:]] = value
    job = {"kind": spec.kind, "id": point.id, "where": spec.path, "workload": workload}
    if spec.kind == "chip":
        settings = {**spec.settings, **{k: v for k, v in assign.items() if k in _CHIP_SETTINGS}}
        run = dict(spec.run)
        run.update({k[4:]: v for k, v in assign.items() if k.startswith("run.")})
        overrides = list(spec.base["set"]) + [
            f"{k}={_toml_text(v)}" for k, v in assign.items()
            if "." in k and not k.startswith(("run.", "workload."))]
        config = spec.base["config"]
        if "config" in assign:
            config = _resolve_chip_config(assign["config"], spec.path, "config", base_dir)
        if "tech" in assign and assign["tech"] not in _tech_names():
            settings["tech"] = _relative(assign["tech"], base_dir)
        job.update(config=config, overrides=overrides, run=run, **settings)
    else:
        base = dict(spec.base)
        base.update({k: v for k, v in assign.items() if k in _SYSTEM_BASE_KEYS})
        for key in ("system", "device"):
            if key in assign and isinstance(base[key], str) and base[key].endswith(".toml"):
                base[key] = _relative(base[key], base_dir)
        job.update(base)
    return job


def evaluate(job: dict) -> dict:
    """Run one job (:func:`point_job`) and return its metrics (a flat dict of scalars);
    raises whatever the models raise for a bad point."""
    if job["kind"] == "chip":
        return _evaluate_chip(job)
    return _evaluate_system(job)


def _evaluate_chip(job: dict) -> dict:
    from compiler.frontends import zoo
    from compiler.lower import CompileOptions
    from hw.configfile import load_chip_config
    from npulab.metrics import compute_metrics
    from npulab.simulate import simulate
    chip = load_chip_config(job["config"], job["overrides"])
    try:
        # the sweep's energy table also costs the mapper's choices ([run] map = "best-energy")
        options = CompileOptions(**{"tech": job["tech"], **job["run"]})
    except TypeError as exc:
        raise ValueError(f"[run]: {exc}") from None
    params = {k: v for k, v in job["workload"].items() if k != "model"}
    graph = zoo.get(job["workload"]["model"], **params)
    run = simulate(graph, chip, job["timing"], options=options)
    m = compute_metrics(run, job["tech"], dram_kind=job["dram_type"],
                        link_kind=job["link_type"])
    n, t = m.network, run.totals
    native = job["timing"] == "native"
    dram = (t["dram_read_bytes"] + t["dram_write_bytes"]) if native else None
    return {
        "cycles": int(n["cycles"]), "latency_s": n["seconds"],
        "inferences_per_s": n["inferences_per_s"], "energy_j": n["energy_j"],
        "energy_per_inference_j": n["energy_per_inference_j"], "power_w": n["average_power_w"],
        "peak_power_w": n["peak_power_w"], "tops_per_w": n["tops_per_w"],
        "effective_tops": n["ops_per_s"] / 1e12, "peak_tops": n["peak_ops_per_s"] / 1e12,
        "utilization": n["compute_utilization"], "area_mm2": m.chip["area_total_mm2"],
        "edp_js": n["energy_j"] * n["seconds"], "dram_bytes": dram,
        "stall_dram_cycles": t.get("stall_dram_cycles") if native else None,
        "memory_bound_layers": t.get("memory_bound_layers") if native else None,
    }


def _evaluate_system(job: dict) -> dict:
    from hw.system.system import load_system
    from npulab.system_run import plan, resolve_model
    chips = job["chips"]
    if isinstance(chips, bool) or not isinstance(chips, int) or chips < 1:
        raise ValueError(f"chips = {chips!r}: must be an integer >= 1")
    system = load_system(_fill_chips(job["system"], chips, "system"),
                         link_gbps=job["link_gbps"], link_latency_ns=job["link_latency_ns"],
                         device=job["device"])
    w = job["workload"]
    model = resolve_model(w["model"], **{k: v for k, v in w.items() if k != "model"})
    if job["comm"] not in ("sim", "analytic"):
        raise ValueError(f"comm = {job['comm']!r}: must be sim or analytic")
    p = plan(system, model, _fill_chips(job["strategy"], chips, "strategy"),
             comm_mode=job["comm"], algorithm=job["algorithm"],
             microbatches=job["microbatches"])
    r = p.report
    return {
        "step_s": r.step_s, "samples_per_s": r.samples_per_s, "tokens_per_s": r.tokens_per_s,
        "scaling_efficiency": p.scaling_efficiency, "speedup": p.baseline.step_s / r.step_s,
        "compute_s": r.compute_s, "exposed_comm_s": r.exposed_comm_s, "bubble_s": r.bubble_s,
        "optimizer_s": r.optimizer_s, "memory_gb": r.memory["total"] / 1e9,
        "fits": None if r.fits is None else int(r.fits), "mfu": r.mfu, "ranks": r.n_ranks,
        "microbatches": r.microbatches,
    }


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_job(job: dict) -> dict:
    """Run one job, never raising: ``{"id", "status": "done"|"failed", "metrics", "error",
    "elapsed_s", "worker"}`` (this is what executors ship back to the parent)."""
    start = time.perf_counter()
    try:
        metrics, error, status = evaluate(job), None, "done"
    except Exception as exc:     # a failing point is a result, not a crash of the sweep
        metrics, status = None, "failed"
        error = f"{type(exc).__name__}: {exc}"
    return {"id": job["id"], "status": status, "metrics": metrics, "error": error,
            "elapsed_s": time.perf_counter() - start, "worker": _worker_name()}


# ---- the store --------------------------------------------------------------------------------

class SweepStore:
    """``DIR/sweep.sqlite``: table ``meta`` (key, value) and table ``points`` (one row per
    design point: ``id`` primary key, ``idx``, ``params`` JSON, ``status`` pending | done |
    failed, ``metrics`` JSON, ``error``, ``elapsed_s``, ``worker``, ``attempts``). WAL journal;
    each :meth:`record` is its own committed transaction. A file that SQLite cannot read (not
    a database, damaged) raises :class:`SweepError` naming it, from any method."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.db = None
        with self._guard():
            self.db = sqlite3.connect(str(self.path), timeout=30.0)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            with self.db:
                self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, "
                                "value TEXT)")
                self.db.execute(
                    "CREATE TABLE IF NOT EXISTS points (id TEXT PRIMARY KEY, idx INTEGER NOT "
                    "NULL, params TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'pending', "
                    "metrics TEXT, error TEXT, elapsed_s REAL, worker TEXT, attempts INTEGER "
                    "NOT NULL DEFAULT 0)")

    @contextmanager
    def _guard(self):
        """sqlite3 errors -> one :class:`SweepError` naming the file and what to do."""
        try:
            yield
        except (sqlite3.DatabaseError, ValueError) as exc:
            if isinstance(exc, SweepError):
                raise
            if self.db is not None:
                self.db.close()
            raise SweepError(
                f"{self.path}: damaged or not a sweep store ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else 'unreadable'}); move it aside and "
                f"run the sweep again into a new -o DIR (points.csv, if written, keeps the "
                f"results of the last report)") from None

    def close(self) -> None:
        if self.db is not None:
            self.db.close()

    def __enter__(self) -> "SweepStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def meta(self) -> dict[str, Any]:
        with self._guard():
            return {k: json.loads(v) for k, v in self.db.execute("SELECT key, value FROM meta")}

    def set_meta(self, **values) -> None:
        with self._guard(), self.db:
            self.db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                                [(k, json.dumps(v)) for k, v in values.items()])

    def add_points(self, points: Iterable[DesignPoint]) -> None:
        """Insert points not stored yet (pending)."""
        with self._guard(), self.db:
            self.db.executemany("INSERT OR IGNORE INTO points (id, idx, params) VALUES (?, ?, ?)",
                                [(p.id, p.index, json.dumps(p.params)) for p in points])

    def statuses(self) -> dict[str, str]:
        with self._guard():
            return dict(self.db.execute("SELECT id, status FROM points"))

    def record(self, result: dict) -> None:
        metrics = None if result["metrics"] is None else json.dumps(result["metrics"])
        with self._guard(), self.db:
            self.db.execute("UPDATE points SET status = ?, metrics = ?, error = ?, elapsed_s = ?, "
                            "worker = ?, attempts = attempts + 1 WHERE id = ?",
                            (result["status"], metrics, result["error"], result["elapsed_s"],
                             result["worker"], result["id"]))

    def rows(self) -> list[dict]:
        """Every point in index order, JSON decoded."""
        out = []
        with self._guard():
            cur = self.db.execute("SELECT id, idx, params, status, metrics, error, elapsed_s, "
                                  "worker, attempts FROM points ORDER BY idx")
            for pid, idx, params, status, metrics, error, elapsed, worker, attempts in cur:
                out.append({"id": pid, "index": idx, "params": json.loads(params),
                            "status": status,
                            "metrics": None if metrics is None else json.loads(metrics),
                            "error": error, "elapsed_s": elapsed, "worker": worker,
                            "attempts": attempts})
        return out

    def counts(self) -> dict[str, int]:
        out = {"pending": 0, "done": 0, "failed": 0}
        with self._guard():
            for status, n in self.db.execute("SELECT status, COUNT(*) FROM points "
                                             "GROUP BY status"):
                out[status] = n
        return out


# ---- running ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class SweepSummary:
    """What one :func:`run_sweep` call did: ``ran`` points this call (``done`` + ``failed`` of
    them), ``skipped`` already stored, totals in the store after the call."""

    out_dir: str
    total: int
    ran: int
    done: int
    failed: int
    skipped: int
    wall_s: float
    stored_done: int
    stored_failed: int
    interrupted: bool = False

    @property
    def points_per_s(self) -> float:
        return self.ran / self.wall_s if self.wall_s > 0 else 0.0

    def __repr__(self) -> str:
        return f"SweepSummary: {self.line()}"

    def results(self) -> "SweepResults":
        """The points stored in :attr:`out_dir` (:func:`load_results`)."""
        return load_results(self.out_dir)

    def line(self) -> str:
        from npulab.progress import _clock_text
        return (f"npulab sweep: {self.ran} run ({self.done} done, {self.failed} failed), "
                f"{self.skipped} skipped, in {_clock_text(self.wall_s)} "
                f"({self.points_per_s:.2f} points/s); store: {self.stored_done} done, "
                f"{self.stored_failed} failed of {self.total}"
                f"{' (interrupted: continue with --resume)' if self.interrupted else ''}; "
                f"results in {self.out_dir}")


def _check_dir(out: Path, resume: bool) -> None:
    """Raise unless ``out`` can take this sweep (the lock file alone does not count)."""
    from npulab.sweep_lock import LOCK_NAME
    store_path = out / STORE_NAME
    if out.exists() and not out.is_dir():
        raise SweepError(f"-o {out}: exists and is not a directory")
    nonempty = out.is_dir() and any(f.name != LOCK_NAME for f in out.iterdir())
    if nonempty and not resume:
        what = "holds a sweep" if store_path.is_file() else "is not empty"
        raise SweepError(f"-o {out}: {what}; pass --resume to continue the sweep there, or "
                         f"choose another directory")
    if nonempty and not store_path.is_file():
        raise SweepError(f"-o {out}: --resume: no {STORE_NAME} there (not a sweep directory) "
                         f"and the directory is not empty")


def _lock_dir(out: Path, resume: bool, wait: bool, notice):
    """Check ``out``, create it and take its lock (:class:`npulab.sweep_lock.SweepLock`);
    checked again under the lock (another sweep may have started there meanwhile)."""
    from npulab.sweep_lock import SweepLock
    _check_dir(out, resume)
    out.mkdir(parents=True, exist_ok=True)
    lock = SweepLock(out, wait=wait, notice=notice).acquire()
    try:
        _check_dir(out, resume)
    except BaseException:
        lock.release()
        raise
    return lock


def _prepare_dir(spec: SweepSpec, out: Path, resume: bool) -> SweepStore:
    """Open (or create) the store in ``out`` (checked and locked by :func:`_lock_dir`)."""
    store_path = out / STORE_NAME
    fresh = not store_path.is_file()
    store = SweepStore(store_path)
    if fresh:
        store.set_meta(schema=SCHEMA, design_hash=spec.design_hash(), spec=spec.report_info(),
                       spec_path=spec.path)
    else:
        meta = store.meta()
        if meta.get("schema") != SCHEMA:
            store.close()
            raise SweepError(f"{store_path}: not an npulab sweep store (schema "
                             f"{meta.get('schema')!r}, expected {SCHEMA!r})")
        if meta.get("design_hash") != spec.design_hash():
            store.close()
            raise SweepError(f"{spec.path}: the design (kind, base, run options, settings, "
                             f"workloads or axes) differs from the sweep in {out} (started from "
                             f"{meta.get('spec_path')}); objectives and constraints may change on "
                             f"resume, anything else needs a new -o DIR")
        store.set_meta(spec=spec.report_info(), spec_path=spec.path)
    if spec.text:
        (out / SPEC_COPY).write_text(spec.text, encoding="utf-8")
    return store


def run_sweep(spec: SweepSpec | str | Path, out_dir: str | Path, *, executor: str = "local",
              jobs: int | None = None, address: str | None = None, resume: bool = False,
              retry_failed: bool = False, progress: Callable | None = None,
              report: bool = False, limit: int | None = None, wait: bool = False,
              notice: Callable[[str], None] | None = None) -> SweepSummary:
    """Run every point of ``spec`` not stored yet in ``out_dir`` (module docstring).

    ``resume``: continue the sweep stored in ``out_dir`` (skip done and failed points; with
    ``retry_failed`` run failed ones again); without it ``out_dir`` must be empty or new.
    ``progress``: a ``progress(done, total, name)`` callable (:class:`npulab.progress.Progress`).
    ``report``: also :func:`write_report` at the end. ``limit``: run at most the first N
    points that are due (in index order; the rest stay pending). A KeyboardInterrupt stops the sweep
    cleanly (``interrupted`` in the summary; stored results stay).

    One sweep at a time writes a directory (:mod:`npulab.sweep_lock`): when another process
    holds ``out_dir``, raise :class:`~npulab.sweep_lock.SweepLocked` naming it, or with
    ``wait`` block until it ends (``notice(text)`` says so once)."""
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec)
    if executor not in EXECUTORS:
        raise ValueError(f"executor = {executor!r}: must be one of {', '.join(EXECUTORS)}")
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ValueError(f"jobs = {jobs!r}: must be an integer >= 1")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit = {limit!r}: must be an integer >= 1")
    if address is not None and executor != "ray":
        raise ValueError(f"address = {address!r}: applies to the ray executor only")
    if retry_failed:
        resume = True
    if executor == "ray":
        _import_ray()
    points = expand(spec)
    out = Path(out_dir)
    lock = _lock_dir(out, resume, wait, notice)
    try:
        store = _prepare_dir(spec, out, resume)
    except BaseException:
        lock.release()
        raise
    try:
        store.add_points(points)
        status = store.statuses()
        rerun = ("pending", "failed") if retry_failed else ("pending",)
        todo = [p for p in points if status[p.id] in rerun]
        skipped = len(points) - len(todo)
        if limit is not None:
            todo = todo[:limit]
        labels = {p.id: p.label() for p in todo}
        counts = {"done": 0, "failed": 0}
        start = time.perf_counter()

        def on_result(result: dict) -> None:
            store.record(result)
            counts[result["status"]] += 1
            if progress is not None:
                progress(counts["done"] + counts["failed"], len(todo), labels[result["id"]])

        tasks = [point_job(spec, p) for p in todo]
        interrupted = False
        try:
            if todo:
                if executor == "serial":
                    for task in tasks:
                        on_result(run_job(task))
                elif executor == "local":
                    _run_local(tasks, jobs or os.cpu_count() or 1, on_result)
                else:
                    _run_ray(tasks, jobs, address, on_result)
        except KeyboardInterrupt:
            interrupted = True
        wall = time.perf_counter() - start
        stored = store.counts()
    finally:
        store.close()
        lock.release()
    summary = SweepSummary(out_dir=str(out), total=len(points),
                           ran=counts["done"] + counts["failed"], done=counts["done"],
                           failed=counts["failed"], skipped=skipped, wall_s=wall,
                           stored_done=stored["done"], stored_failed=stored["failed"],
                           interrupted=interrupted)
    if report and not interrupted:
        write_report(out)
    return summary


def _crash_result(job: dict, detail: str) -> dict:
    return {"id": job["id"], "status": "failed", "metrics": None,
            "error": f"WorkerDied: the worker process running this point died ({detail}); the "
                     f"point alone kills its process again",
            "elapsed_s": 0.0, "worker": None}


def _ignore_sigint() -> None:
    """Pool workers leave Ctrl-C to the parent, which stops them (no traceback per worker),
    and do not keep the parent's directory lock alive (a killed parent releases it)."""
    import signal

    from npulab.sweep_lock import close_inherited
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    close_inherited()


def _pool_context():
    import multiprocessing as mp
    # fork shares the parent's loaded modules and JIT-compiled kernels (fast start-up); other
    # platforms use their default start method.
    if sys.platform.startswith("linux") and "fork" in mp.get_all_start_methods():
        return mp.get_context("fork")
    return mp.get_context()


def _run_local(tasks: list[dict], workers: int, on_result: Callable) -> None:
    """A process pool with at most ``2 * workers`` points in flight. When a worker process
    dies, the pool breaks and every point in flight is suspect: each is re-run alone in a
    one-process pool, and the one that breaks it again is recorded failed."""
    from collections import deque
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool
    ctx = _pool_context()
    queue = deque(tasks)
    while queue:
        suspects = []
        pool = ProcessPoolExecutor(max_workers=min(workers, len(queue)), mp_context=ctx,
                                   initializer=_ignore_sigint)
        in_flight = {}
        try:
            while queue or in_flight:
                while queue and len(in_flight) < 2 * workers:
                    task = queue.popleft()
                    in_flight[pool.submit(run_job, task)] = task
                finished, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                broken = False
                for fut in finished:
                    task = in_flight.pop(fut)
                    try:
                        on_result(fut.result())
                    except BrokenProcessPool:
                        suspects.append(task)
                        broken = True
                if broken:
                    suspects.extend(in_flight.values())
                    in_flight.clear()
                    break
        except BaseException:
            procs = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in procs:          # our workers: stop what they run (an interrupt)
                if proc.is_alive():
                    proc.terminate()
            raise
        pool.shutdown(wait=True, cancel_futures=True)
        for task in suspects:
            with ProcessPoolExecutor(max_workers=1, mp_context=ctx,
                                     initializer=_ignore_sigint) as alone:
                try:
                    result = alone.submit(run_job, task).result()
                except BrokenProcessPool as exc:
                    result = _crash_result(task, str(exc) or "BrokenProcessPool")
            on_result(result)


def _import_ray():
    try:
        import ray
    except ImportError as exc:
        raise SweepError(f"--executor ray needs the ray package ({exc}); install it with "
                         f"pip install 'npulab[ray]'") from None
    return ray


def _run_ray(tasks: list[dict], jobs: int | None, address: str | None,
             on_result: Callable) -> None:
    """Ray tasks (one per point, no retries). ``address``: ``ray.init(address=...)``;
    none: an already initialised Ray, or a new local cluster (``num_cpus=jobs``). A task whose
    worker died is recorded failed; at most ``2 x cluster CPUs`` tasks are in flight."""
    ray = _import_ray()
    started = False
    if not ray.is_initialized():
        kwargs = {"include_dashboard": False, "log_to_driver": False}
        if address is not None:
            kwargs["address"] = address
        elif jobs is not None:
            kwargs["num_cpus"] = jobs
        ray.init(**kwargs)
        started = True
    in_flight: dict = {}
    try:
        remote = ray.remote(max_retries=0, num_cpus=1)(run_job)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        limit = 2 * max(1, cpus if jobs is None else min(jobs, cpus))
        queue = list(reversed(tasks))
        while queue or in_flight:
            while queue and len(in_flight) < limit:
                task = queue.pop()
                in_flight[remote.remote(task)] = task
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            for ref in ready:
                task = in_flight.pop(ref)
                try:
                    result = ray.get(ref)
                except (ray.exceptions.WorkerCrashedError, ray.exceptions.RayTaskError,
                        ray.exceptions.NodeDiedError) as exc:
                    result = _crash_result(task, f"{type(exc).__name__}: "
                                                 f"{str(exc).splitlines()[0]}")
                on_result(result)
    finally:
        for ref in in_flight:
            ray.cancel(ref, force=True)
        if started:
            ray.shutdown()


# ---- the report -------------------------------------------------------------------------------

def feasible(metrics: dict | None, constraints) -> bool:
    """True when every constraint ``(metric, op, number)`` holds (a missing value fails)."""
    if metrics is None:
        return False
    for metric, op, number in constraints:
        value = metrics.get(metric)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return False
        if not _OPS[op](value, number):
            return False
    return True


def pareto_front(values: list, directions: list[str]) -> list[int]:
    """Indices (ascending) of the non-dominated rows of ``values`` (one tuple of objective
    values per row; ``directions`` "min"/"max" per objective). A row is dominated when another
    is at least as good in every objective and better in one; equal rows are all kept. Rows
    with a missing or NaN value are never on the front."""
    import numpy as np
    if not directions:
        raise ValueError("pareto_front: need at least one objective")
    sign = np.array([1.0 if d == "min" else -1.0 for d in directions])
    keep = [i for i, v in enumerate(values)
            if len(v) == len(directions) and all(x is not None and not
                                                 (isinstance(x, float) and math.isnan(x))
                                                 for x in v)]
    if not keep:
        return []
    a = np.array([values[i] for i in keep], dtype=float) * sign
    front = []
    for row, i in enumerate(keep):
        le = np.all(a <= a[row], axis=1)
        lt = np.any(a < a[row], axis=1)
        if not np.any(le & lt):
            front.append(i)
    return front


def _flat_params(info: dict, params: dict) -> dict:
    out = {"workload": params["workload"]}
    for axis in info["axes"]:
        value = params[axis["name"]]
        if len(axis["keys"]) > 1:
            out.update(zip(axis["keys"], value))
        else:
            out[axis["keys"][0]] = value
    return out


def _report_rows(store: SweepStore, info: dict) -> list[dict]:
    """Rows with ``feasible`` and ``pareto`` decided per workload."""
    rows = store.rows()
    objectives = [tuple(o) for o in info["objectives"]]
    constraints = [tuple(c) for c in info["constraints"]]
    for r in rows:
        r["feasible"] = r["status"] == "done" and feasible(r["metrics"], constraints)
        r["pareto"] = False
    for workload in info["workloads"]:
        group = [r for r in rows if r["feasible"] and r["params"]["workload"] == workload]
        vals = [tuple(r["metrics"].get(m) for m, _ in objectives) for r in group]
        for i in pareto_front(vals, [d for _, d in objectives]):
            group[i]["pareto"] = True
    return rows


def _csv_value(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return v


def csv_table(rows: list[dict], info: dict) -> tuple[list[str], list[list]]:
    """The header and rows of ``points.csv`` as Python values (``None`` for an empty cell);
    :meth:`SweepResults.to_pandas` builds its DataFrame from the same rows."""
    param_cols = ["workload"] + [k for a in info["axes"] for k in a["keys"]]
    metric_cols = list(info["metrics"])
    # a metric named like a parameter column gets a suffix in the header
    names = [f"{c}_metric" if c in param_cols else c for c in metric_cols]
    header = (["index", "id"] + param_cols + ["status", "feasible", "pareto"] + names
              + ["elapsed_s", "worker", "error"])
    out = []
    for r in rows:
        flat = _flat_params(info, r["params"])
        m = r["metrics"] or {}
        out.append([r["index"], r["id"]] + [flat[c] for c in param_cols]
                   + [r["status"], r["feasible"], r["pareto"]]
                   + [m.get(c) for c in metric_cols]
                   + [r["elapsed_s"], r["worker"], r["error"]])
    return header, out


def _write_csv(path: Path, rows: list[dict], info: dict) -> None:
    header, table = csv_table(rows, info)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for row in table:
            w.writerow([_csv_value(v) for v in row])


def load_results(out_dir: str | Path) -> "SweepResults":
    """The points stored in ``out_dir`` (a directory :func:`run_sweep` wrote), with
    ``feasible`` and ``pareto`` decided as :func:`write_report` does."""
    out = Path(out_dir)
    store_path = out / STORE_NAME
    if not store_path.is_file():
        raise SweepError(f"{out}: no {STORE_NAME} (run npulab sweep SPEC -o {out} first)")
    with SweepStore(store_path) as store:
        meta = store.meta()
        if meta.get("schema") != SCHEMA:
            raise SweepError(f"{store_path}: not an npulab sweep store")
        info = meta["spec"]
        rows = _report_rows(store, info)
    return SweepResults(out_dir=str(out), info=info, rows=rows)


@dataclass(frozen=True)
class SweepResults:
    """A sweep's points as a table (:func:`load_results`, :meth:`SweepSummary.results`):
    ``info`` is the spec as the store keeps it (name, kind, axes, workloads, metrics,
    objectives, constraints), ``rows`` one dict per point in index order (``params``,
    ``status``, ``metrics``, ``feasible``, ``pareto``, ...)."""

    out_dir: str
    info: dict = field(repr=False)
    rows: list = field(repr=False)

    def counts(self) -> dict[str, int]:
        out = {"done": 0, "failed": 0, "pending": 0}
        for r in self.rows:
            out[r["status"]] = out.get(r["status"], 0) + 1
        return out

    @property
    def objectives(self) -> list[tuple[str, str]]:
        return [tuple(o) for o in self.info["objectives"]]

    def best(self, metric: str | None = None, workload: str | None = None) -> dict | None:
        """The feasible done point (a row dict) with the best ``metric`` (default: the first
        objective, in its direction; other metrics are minimised), None when there is none."""
        objectives = dict(self.objectives)
        metric = metric or self.objectives[0][0]
        if metric not in self.info["metrics"]:
            raise ValueError(f"metric = {metric!r}: not a metric of this sweep; metrics: "
                             f"{', '.join(self.info['metrics'])}")
        sign = -1.0 if objectives.get(metric) == "max" else 1.0
        rows = [r for r in self.rows if r["feasible"] and r["metrics"].get(metric) is not None
                and (workload is None or r["params"]["workload"] == workload)]
        return min(rows, key=lambda r: (sign * r["metrics"][metric], r["index"])) if rows else None

    def table(self, pareto_only: bool = False) -> tuple[list[str], list[list]]:
        return csv_table([r for r in self.rows if r["pareto"] or not pareto_only], self.info)

    def to_pandas(self, pareto_only: bool = False):
        """One row per design point, the columns of ``points.csv`` (``pareto_only``: the rows
        of ``pareto.csv``). Needs pandas."""
        from hw._notebook import frame
        return frame(*self.table(pareto_only))

    def _summary_lines(self) -> list[str]:
        c = self.counts()
        axes = ", ".join(f"{a['name']} ({len({_canonical(r['params'][a['name']]) for r in self.rows})}"
                         f" values)" for a in self.info["axes"])
        objs = ", ".join(f"{m} {d}" for m, d in self.objectives)
        lines = [f"{len(self.rows)} points: {c['done']} done, {c['failed']} failed, "
                 f"{c['pending']} pending; {sum(1 for r in self.rows if r['pareto'])} on the "
                 f"Pareto front",
                 f"workloads: {', '.join(self.info['workloads'])}",
                 f"axes: {axes or '-'}",
                 f"objectives: {objs or '-'}"]
        if self.objectives:
            best = self.best()
            if best is not None:
                m = self.objectives[0][0]
                lines.append(f"best {m}: {best['metrics'][m]:.4g} at point {best['index']} "
                             f"({_point_label(self.info, best['params'])})")
        return lines

    def __repr__(self) -> str:
        head = f"SweepResults: {self.info['name']} ({self.info['kind']}) in {self.out_dir}"
        return "\n".join([head] + ["  " + line for line in self._summary_lines()])

    def _repr_html_(self) -> str:
        from hw._notebook import html_table
        header, rows = self.table()
        drop = {"id", "elapsed_s", "worker", "error"}
        keep = [i for i, h in enumerate(header) if h not in drop]
        return html_table(f"SweepResults: {self.info['name']} ({self.info['kind']})",
                          [header[i] for i in keep], [[r[i] for i in keep] for r in rows],
                          lines=self._summary_lines())

    def _group(self, workload: str | None) -> tuple[list[dict], str]:
        workloads = self.info["workloads"]
        if workload is None:
            workload = workloads[0]
        elif workload not in workloads:
            raise ValueError(f"workload = {workload!r}: not in this sweep; workloads: "
                             f"{', '.join(workloads)}")
        return ([r for r in self.rows if r["params"]["workload"] == workload],
                f"{self.info['name']}: {workload}")

    def plot_pareto(self, x: str | None = None, y: str | None = None,
                    workload: str | None = None):
        """Scatter of two metrics (default: the first two objectives) with the Pareto front,
        for one workload (default: the first): a matplotlib Figure."""
        directions = dict(self.objectives)
        names = [m for m, _ in self.objectives]
        x = x or (names[0] if names else None)
        y = y or (names[1] if len(names) > 1 else None)
        for key, value in (("x", x), ("y", y)):
            if value not in self.info["metrics"]:
                raise ValueError(f"{key} = {value!r}: not a metric of this sweep; metrics: "
                                 f"{', '.join(self.info['metrics'])}")
        rows, title = self._group(workload)
        return _pareto_plot(rows, [(x, directions.get(x, "min")), (y, directions.get(y, "min"))],
                            title)

    def plot_sensitivity(self, metric: str | None = None, workload: str | None = None):
        """Per varied axis: the median and range of ``metric`` (default: the first objective)
        over the other points, per value of the axis."""
        metric = metric or self.objectives[0][0]
        rows, title = self._group(workload)
        varied = [a["name"] for a in self.info["axes"]
                  if len({_canonical(r["params"][a["name"]]) for r in rows}) > 1]
        return _sensitivity_plot(rows, varied, metric, title)


def _point_label(info: dict, params: dict) -> str:
    return ", ".join(f"{k}={_fmt_value(v)}" for k, v in _flat_params(info, params).items())


def write_report(out_dir: str | Path, *, heatmap: tuple[str, str] | None = None,
                 objective: str | None = None) -> list[Path]:
    """Write ``points.csv``, ``pareto.csv`` and the plots (``pareto*.png``, ``heatmap*.png``,
    ``sensitivity*.png``; one per workload, suffixed ``_<workload>`` when there are several)
    into ``out_dir`` from its store. ``heatmap``: two axis names (default: the first two axes
    with more than one value); ``objective``: the metric of the heatmap and sensitivity plots
    (default: the first objective). Returns the paths written."""
    out = Path(out_dir)
    loaded = load_results(out)
    info, rows = loaded.info, loaded.rows
    objectives = [tuple(o) for o in info["objectives"]]
    directions = dict(objectives)
    if objective is None:
        objective = objectives[0][0]
    elif objective not in info["metrics"]:
        raise SweepError(f"--objective {objective}: unknown metric; metrics: "
                         f"{', '.join(info['metrics'])}")
    direction = directions.get(objective, "min")
    varied = [a["name"] for a in info["axes"]
              if len({_canonical(r["params"][a["name"]]) for r in rows}) > 1]
    names = [a["name"] for a in info["axes"]]
    if heatmap is not None:
        for name in heatmap:
            if name not in names:
                raise SweepError(f"--heatmap {','.join(heatmap)}: {name!r} is not an axis; "
                                 f"axes: {', '.join(names)}")
        if heatmap[0] == heatmap[1]:
            raise SweepError(f"--heatmap {','.join(heatmap)}: give two different axes")
    elif len(varied) >= 2:
        heatmap = (varied[0], varied[1])
    paths = [out / "points.csv", out / "pareto.csv"]
    _write_csv(paths[0], rows, info)
    _write_csv(paths[1], [r for r in rows if r["pareto"]], info)
    several = len(info["workloads"]) > 1
    for workload in info["workloads"]:
        group = [r for r in rows if r["params"]["workload"] == workload]
        suffix = f"_{re.sub(r'[^A-Za-z0-9_.+-]', '_', workload)}" if several else ""
        title = f"{info['name']}: {workload}"
        if len(objectives) >= 2:
            paths.append(_save(_pareto_plot(group, objectives[:2], title),
                               out / f"pareto{suffix}.png"))
        if heatmap is not None:
            paths.append(_save(_heatmap_plot(group, heatmap, objective, direction, title),
                               out / f"heatmap{suffix}.png"))
        if varied:
            paths.append(_save(_sensitivity_plot(group, varied, objective, title),
                               out / f"sensitivity{suffix}.png"))
    return paths


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    return path


def _figure(width: float, height: float):
    from npulab.plots import _figure as figure
    return figure(width, height)


def _done(rows, metric):
    return [r for r in rows if r["status"] == "done" and r["metrics"].get(metric) is not None]


def _pareto_plot(rows, objectives, title):
    (mx, dx), (my, dy) = objectives
    fig = _figure(7.0, 5.0)
    ax = fig.add_subplot()
    pts = [r for r in _done(rows, mx) if r["metrics"].get(my) is not None]
    groups = (("infeasible", [r for r in pts if not r["feasible"]], "#bbbbbb", "x"),
              ("feasible", [r for r in pts if r["feasible"] and not r["pareto"]], "#1f77b4", "o"),
              ("Pareto front", sorted([r for r in pts if r["pareto"]],
                                      key=lambda r: r["metrics"][mx]), "#d62728", "o"))
    for label, grp, color, marker in groups:
        if grp:
            xs = [r["metrics"][mx] for r in grp]
            ys = [r["metrics"][my] for r in grp]
            ax.scatter(xs, ys, c=color, marker=marker, s=28 if label != "Pareto front" else 44,
                       label=f"{label} ({len(grp)})", zorder=3 if label == "Pareto front" else 2)
            if label == "Pareto front":
                ax.plot(xs, ys, color=color, linewidth=1, drawstyle="steps-post" if dx == "min"
                        and dy == "min" else "default", zorder=2)
    _log_if_wide(ax, [r["metrics"][mx] for r in pts], "x")
    _log_if_wide(ax, [r["metrics"][my] for r in pts], "y")
    ax.set_xlabel(f"{mx} ({dx})")
    ax.set_ylabel(f"{my} ({dy})")
    ax.set_title(f"{title}: Pareto front", fontsize=10)
    ax.grid(True, alpha=0.3)
    if pts:
        ax.legend(fontsize=8)
    return fig


def _log_if_wide(ax, values, which):
    pos = [v for v in values if isinstance(v, (int, float)) and v > 0]
    if pos and len(pos) == len(values) and max(pos) / min(pos) > 100:
        (ax.set_xscale if which == "x" else ax.set_yscale)("log")


def _axis_values(rows, name):
    """The values of axis ``name`` in the order the spec lists them."""
    seen = {}
    for r in rows:
        seen.setdefault(_canonical(r["params"][name]), r["params"][name])
    return list(seen.values())      # rows are in index order: the spec's order


def _heatmap_plot(rows, axes, metric, direction, title):
    """The best value of ``metric`` (over the other axes) in each cell of two axes."""
    import numpy as np
    xname, yname = axes
    xs, ys = _axis_values(rows, xname), _axis_values(rows, yname)
    xi = {_canonical(v): i for i, v in enumerate(xs)}
    yi = {_canonical(v): i for i, v in enumerate(ys)}
    grid = np.full((len(ys), len(xs)), np.nan)
    pick = min if direction == "min" else max
    for r in _done(rows, metric):
        i, j = yi[_canonical(r["params"][yname])], xi[_canonical(r["params"][xname])]
        v = float(r["metrics"][metric])
        grid[i, j] = v if np.isnan(grid[i, j]) else pick(grid[i, j], v)
    fig = _figure(max(5.0, 1.0 + 0.7 * len(xs)), max(4.0, 1.2 + 0.45 * len(ys)))
    ax = fig.add_subplot()
    im = ax.imshow(np.ma.masked_invalid(grid), origin="lower", aspect="auto", cmap="viridis")
    fig.colorbar(im, ax=ax, label=f"{metric} ({'best' if len(rows) > len(xs) * len(ys) else ''}"
                                  f" {direction})".replace("( ", "("))
    ax.set_xticks(range(len(xs)), [_fmt_value(v) for v in xs], rotation=45, ha="right",
                  fontsize=8)
    ax.set_yticks(range(len(ys)), [_fmt_value(v) for v in ys], fontsize=8)
    ax.set_xlabel(xname)
    ax.set_ylabel(yname)
    if len(xs) * len(ys) <= 144:
        finite = grid[np.isfinite(grid)]
        mid = (finite.min() + finite.max()) / 2 if finite.size else 0.0
        for i in range(len(ys)):
            for j in range(len(xs)):
                if np.isfinite(grid[i, j]):
                    ax.text(j, i, f"{grid[i, j]:.3g}", ha="center", va="center", fontsize=7,
                            color="white" if grid[i, j] < mid else "black")
    ax.set_title(f"{title}: {metric}", fontsize=10)
    return fig


def _sensitivity_plot(rows, axes, metric, title):
    """Per axis and value: the median of ``metric`` over all other points, with its range."""
    import numpy as np
    n = len(axes)
    fig = _figure(min(22.0, 3.2 * n + 1.0), 4.0)
    done = _done(rows, metric)
    for k, name in enumerate(axes):
        ax = fig.add_subplot(1, n, k + 1)
        values = _axis_values(rows, name)
        med, lo, hi = [], [], []
        for v in values:
            c = _canonical(v)
            sel = [float(r["metrics"][metric]) for r in done if _canonical(r["params"][name]) == c]
            med.append(np.median(sel) if sel else np.nan)
            lo.append(min(sel) if sel else np.nan)
            hi.append(max(sel) if sel else np.nan)
        x = np.arange(len(values))
        med, lo, hi = np.array(med), np.array(lo), np.array(hi)
        ax.vlines(x, lo, hi, color="#1f77b4", alpha=0.5, linewidth=6)
        ax.plot(x, med, "o-", color="#d62728", markersize=4)
        ax.set_xticks(x, [_fmt_value(v) for v in values], rotation=45, ha="right", fontsize=7)
        ax.set_xlabel(name, fontsize=8)
        if k == 0:
            ax.set_ylabel(f"{metric} (median, range)", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"{title}: sensitivity of {metric}", fontsize=10)
    return fig
