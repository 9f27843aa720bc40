"""The sweep spec: its types, vocabulary and the names a spec may refer to.

:class:`SweepSpec` is a parsed, validated spec (:func:`npulab.sweep.load.load_spec` builds
it); :class:`Axis` one of its axes. The key tables and metric names here are what the reader
(:mod:`npulab.sweep.load`, :mod:`npulab.sweep.axes`) accepts; the helpers resolve what a spec
names (chip presets, zoo and LLM models, energy tables, shipped sweeps) and are shared with
the jobs built from it (:mod:`npulab.sweep.points`, :mod:`npulab.sweep.evaluation`).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from hw.systolic.config import ConfigError

__all__ = ["SweepSpec", "Axis", "sweep_names", "resolve_spec", "KINDS", "CHIP_METRICS",
           "SYSTEM_METRICS"]

KINDS = ("chip", "system")

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
_MAX_POINTS = 10_000_000


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
    """A parsed, validated sweep spec (see :mod:`npulab.sweep`; ``docs/sweeps.md``).

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


def _relative(value: str, base_dir: Path | None) -> str:
    """A path in the spec, relative to the spec's folder."""
    if base_dir is None or Path(value).is_absolute():
        return value
    return str((base_dir / value).resolve())


def _looks_like_path(value: str) -> bool:
    return value.endswith(".toml") or "/" in value


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
