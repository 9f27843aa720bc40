"""Reading a sweep spec: TOML -> a validated :class:`~npulab.sweep.spec.SweepSpec`.

Every table is checked before anything runs: unknown keys, unknown models, presets or energy
tables, a base that does not load, bad objectives and constraints. Errors are
:class:`~hw.systolic.config.ConfigError` naming the spec file, the key, the value and what is
allowed. The ``[[axis]]`` tables are checked in :mod:`npulab.sweep.axes`.
"""

from __future__ import annotations

import math
import re
from dataclasses import fields
from pathlib import Path

from hw.energy.tech import DEFAULT_TECHNOLOGY
from hw.systolic.config import ConfigError
from npulab.sweep.axes import _axes, _count_points
from npulab.sweep.spec import (_CHIP_BASE_KEYS, _CHIP_SETTINGS, _DIRECTIONS, _MAX_POINTS, _OPS,
                               _SWEEP_KEYS, _SYSTEM_BASE_KEYS, _TOP_KEYS, CHIP_METRICS, KINDS,
                               SYSTEM_METRICS, SweepSpec, _check_keys, _check_tech, _err,
                               _fill_chips, _known_models, _looks_like_path, _model_params,
                               _relative, _resolve_chip_config, resolve_spec)

__all__ = ["load_spec", "spec_from_dict"]


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
    from compiler.options import CompileOptions
    try:
        CompileOptions(**table)
    except (TypeError, ValueError) as exc:
        allowed = ", ".join(f.name for f in fields(CompileOptions))
        raise ConfigError(f"{where}: [run]: {exc} (the [run] table holds "
                          f"compiler.options.CompileOptions fields: {allowed})") from None
    return dict(table)


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
