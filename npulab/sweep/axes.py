"""The ``[[axis]]`` tables of a sweep spec: keys a point can vary, ranges, value checks.

An axis varies one key, or several moving together (a zipped axis), over listed ``values`` or
a ``range`` (``{start, stop, step}`` linear or ``{start, stop, factor}`` geometric, stop
inclusive). :func:`_count_points` refuses a spec with too many points before any axis is
expanded, so a typo cannot make the reader allocate millions of values.
"""

from __future__ import annotations

import math
from dataclasses import fields

from hw.systolic.config import ConfigError
from npulab.sweep.spec import (_CHIP_SETTINGS, _MAX_POINTS, _SYSTEM_BASE_KEYS,
                               _SYSTEM_WORKLOAD_PARAMS, Axis, _canonical, _check_keys, _err,
                               _model_params, _resolve_chip_config, _scalar)

_AXIS_KEYS = ("name", "key", "keys", "values", "range")
_RANGE_KEYS = (("start", "stop", "step"), ("start", "stop", "factor"))


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
        from compiler.options import CompileOptions
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
