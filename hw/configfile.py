"""Chip configs as TOML files: load (with ``SECTION.KEY=VALUE`` overrides), validate, dump.

File format (every key optional; missing keys take the defaults of :class:`~hw.chip.ChipConfig`)::

    [chip]
    name = "npulab-default"
    clock_mhz = 1000.0

    [array]
    rows = 32
    cols = 32
    dataflow = "ws"        # os | ws | is
    precision = "int8"     # int8 | int16 | fp16
    acc_bits = 32          # 16..64 for integers (default 32 for int8, 64 for int16); 32 for fp16
    overflow = "wrap"      # wrap | saturate

    [vector]               # hw.vector.config.VectorConfig: the vector engine
    lanes = 32
    [vector.cost]          # cycles per element per lane, by operation
    exp = 4.0

    [sram]                 # keys shared by the three scratchpads (hw.memory.sram.SramConfig)
    banks = 8
    [sram.ifmap]           # one scratchpad: ifmap | filter | ofmap
    capacity_kib = 512

    [dram]                 # hw.memory.dram.DramConfig: a preset plus field overrides
    preset = "ddr4-3200"

    [host_link]            # hw.memory.link.HostLinkConfig
    [dma]                  # hw.memory.dma.DmaConfig
    [l2]                   # hw.memory.l2.L2Config: the L2 the cores share (none by default)
    [noc]                  # hw.memory.noc.NocConfig: the network between cores and L2

The full list with defaults is ``sim_configs/default.toml`` and ``docs/configs.md``. Overrides
are ``SECTION.KEY=VALUE``, ``sram.NAME.KEY=VALUE`` or ``vector.cost.OP=VALUE``.

Every error is a :class:`~hw.systolic.config.ConfigError` whose one-line message names the
file (or ``--set``), the key, the value and what is allowed.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, Iterable

from hw.chip import SRAM_NAMES, ChipConfig
from hw.memory.dma import dma_config_from_dict, dma_config_to_dict
from hw.memory.dram import dram_config_from_dict, dram_config_to_dict
from hw.memory.l2 import l2_config_from_dict, l2_config_to_dict
from hw.memory.link import host_link_from_dict, host_link_to_dict
from hw.memory.noc import noc_config_from_dict, noc_config_to_dict
from hw.memory.sram import sram_config_from_dict, sram_config_to_dict
from hw.nvdla.config import is_nvdla_config, nvdla_config_from_dict, nvdla_config_to_dict
from hw.presets import chip_preset_names, looks_like_path, nvdla_preset_names, preset_path
from hw.spec import ChipSpec, chip_spec
from hw.systolic.config import ArrayConfig, ConfigError
from hw.validate import config_from_table, read_toml, toml_text, toml_value
from hw.vector.config import vector_config_from_dict, vector_config_to_dict

__all__ = ["load_chip", "load_chip_config", "chip_spec_from_dict", "chip_spec_to_dict",
           "resolve_chip_path", "chip_config_from_dict", "chip_config_to_dict",
           "chip_config_to_toml", "chip_spec_to_toml", "parse_override", "override_text", "SECTIONS"]

#: Allowed top-level sections, in the order they are written.
SECTIONS = ("chip", "array", "vector", "sram", "dram", "host_link", "dma", "l2", "noc")
_CHIP_KEYS = ("name", "clock_mhz", "model_input", "model_output", "launch_overhead_us",
              "launch_overhead_by_op", "cores")
_ARRAY_KEYS = tuple(f.name for f in fields(ArrayConfig))


def _sram_tables(table: dict[str, Any], where: str) -> dict[str, Any]:
    """``[sram]`` keys apply to all three scratchpads; ``[sram.ifmap]`` etc. override one."""
    for key, value in table.items():
        if isinstance(value, dict) and key not in SRAM_NAMES:
            raise ConfigError(f"{where}: [sram.{key}]: unknown scratchpad; allowed: "
                              f"{', '.join(SRAM_NAMES)}")
    shared = {k: v for k, v in table.items() if k not in SRAM_NAMES}
    defaults = ChipConfig()
    out = {}
    for name in SRAM_NAMES:
        sub = table.get(name, {})
        if not isinstance(sub, dict):
            raise ConfigError(f"{where}: sram.{name} = {sub!r}: must be a [sram.{name}] table")
        merged = {"capacity_kib": defaults.sram(name).capacity_kib, **shared, **sub}
        out[name] = sram_config_from_dict(merged, where, prefix=f"sram.{name}.")
    return out


def chip_config_from_dict(data: dict[str, Any], where: str = "<config>",
                          overrides: Iterable[str] = ()) -> ChipConfig:
    """Build a :class:`ChipConfig` from parsed TOML (sections :data:`SECTIONS`), after applying
    ``--set``-style overrides; ``where`` names the source in error messages."""
    overrides = list(overrides)
    if overrides:
        data = apply_overrides(data, overrides)
        where = f"{where} with --set {' --set '.join(map(override_text, overrides))}"
    if "nvdla" in data:
        raise _not_systolic(where)
    for section, value in data.items():
        if section not in SECTIONS:
            raise ConfigError(
                f"{where}: [{section}]: unknown section; allowed sections: {', '.join(SECTIONS)}"
            )
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: {section} = {value!r}: must be a [{section}] table")
    array = config_from_table(ArrayConfig, data.get("array", {}), where, "array.")
    srams = _sram_tables(data.get("sram", {}), where)
    chip_values = dict(data.get("chip", {}))
    for key in chip_values:
        if key not in _CHIP_KEYS:
            raise ConfigError(f"{where}: chip.{key}: unknown key; allowed keys in [chip]: "
                              f"{', '.join(_CHIP_KEYS)}")
    chip_values.update(
        array=array, ifmap_sram=srams["ifmap"], filter_sram=srams["filter"],
        ofmap_sram=srams["ofmap"],
        dram=dram_config_from_dict(data.get("dram", {}), where, prefix="dram."),
        host_link=host_link_from_dict(data.get("host_link", {}), where, prefix="host_link."),
        dma=dma_config_from_dict(data.get("dma", {}), where, prefix="dma."),
        vector=vector_config_from_dict(data.get("vector", {}), where),
        l2=l2_config_from_dict(data.get("l2", {}), where),
        noc=noc_config_from_dict(data.get("noc", {}), where),
    )
    return config_from_table(ChipConfig, chip_values, where, "chip.")


def override_text(item) -> str:
    """An override as the ``SECTION.KEY=VALUE`` text ``--set`` takes (error messages name it)."""
    if isinstance(item, str):
        return item
    dotted, value = item
    return f"{dotted}={toml_text(value)}"


def parse_override(item) -> tuple[str, str, Any]:
    """``"array.rows=16"`` -> ``("array", "rows", 16)``. Values use TOML syntax; a bare word
    that is not valid TOML is taken as a string (``--set array.dataflow=os``). A typed override
    ``("array.rows", 16)`` (a sweep's design point) keeps its value as it is."""
    text = override_text(item)
    where = f"--set {text}"
    if isinstance(item, str):
        if "=" not in text:
            raise ConfigError(f"{where}: expected SECTION.KEY=VALUE, e.g. array.rows=16")
        dotted, raw = text.split("=", 1)
        value = toml_value(raw.strip())
    else:
        dotted, value = item
    parts = [part.strip() for part in dotted.split(".")]
    if not all(parts) or not (len(parts) == 2 or (len(parts) == 3 and parts[0] in ("sram",
                                                                                   "vector",
                                                                                   "chip"))):
        raise ConfigError(f"{where}: {dotted!r}: expected SECTION.KEY (e.g. array.rows), "
                          f"sram.NAME.KEY (e.g. sram.ifmap.capacity_kib), vector.TABLE.KEY "
                          f"(e.g. vector.cost.exp) or chip.launch_overhead_by_op.KIND")
    section, key = parts[0], ".".join(parts[1:])
    if section not in SECTIONS:
        raise ConfigError(f"{where}: [{section}]: unknown section; allowed sections: "
                          f"{', '.join(SECTIONS)}")
    return section, key, value


def apply_overrides(data: dict[str, Any], overrides: Iterable) -> dict[str, Any]:
    """Return a copy of ``data`` with each override (``SECTION.KEY=VALUE`` text or a typed
    ``(SECTION.KEY, value)`` pair) applied."""
    merged = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for item in overrides:
        section, key, value = parse_override(item)
        table = merged.setdefault(section, {})
        if "." in key:  # sram.NAME.KEY, vector.cost.OP
            sub, key = key.split(".")
            table[sub] = dict(table.get(sub, {}))
            table = table[sub]
        table[key] = value
    return merged


def resolve_chip_path(name_or_path: str | Path) -> Path:
    """A config file path, or the file of a shipped preset named ``name_or_path`` (chip presets
    and NVDLA builds alike: :mod:`hw.presets`). The command line's ``--config`` resolves the same
    way."""
    if looks_like_path(name_or_path):
        return Path(name_or_path)
    found = preset_path(str(name_or_path))
    if found is None:
        raise ConfigError(f"{name_or_path}: no such config file or preset; presets: "
                          f"{', '.join(chip_preset_names())}; NVDLA builds: "
                          f"{', '.join(nvdla_preset_names())}")
    return found


def load_chip(name_or_path: str | Path | None = None, overrides: Iterable[str] = ()) -> ChipSpec:
    """The :class:`~hw.spec.ChipSpec` of a shipped preset (``"gemmini_like"``, ``"nv_small"``),
    a TOML file of either kind (a systolic chip, or an NVDLA build's ``[nvdla]`` table) or the
    built-in default (``None``), with ``SECTION.KEY=VALUE`` overrides validated as the file is.
    The one loader behind ``npulab run --config``, system chip devices and the Python API."""
    if name_or_path is None:
        data: dict[str, Any] = {}
        where = "default config"
    else:
        path = resolve_chip_path(name_or_path)
        where = str(path)
        data = read_toml(path)
    return chip_spec_from_dict(data, where, overrides)


def chip_spec_from_dict(data: dict[str, Any], where: str = "<config>",
                        overrides: Iterable[str] = ()) -> ChipSpec:
    """The :class:`~hw.spec.ChipSpec` of a config as plain data (parsed TOML of either kind,
    or :func:`chip_spec_to_dict` of any kind, e.g. a saved run's ``config``), after ``--set``
    style overrides, validated as a file is."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: {data!r}: must be a table of config sections")
    if is_nvdla_config(data):
        return chip_spec(nvdla_config_from_dict(data, where, overrides), where)
    if "spec" in data:
        if list(overrides):
            raise ConfigError(f"{where}: a saved chip spec takes no --set overrides")
        return _spec_from_table(data, where)
    return chip_spec(chip_config_from_dict(data, where, overrides), where)


def chip_spec_to_dict(spec: ChipSpec) -> dict[str, Any]:
    """``spec``'s config as plain data (what a run's ``summary.json`` keeps as ``config``;
    :func:`chip_spec_from_dict` reads it back): the sections of its kind's TOML for a systolic
    chip or an NVDLA build; for any other engine kind, the spec itself (``{"spec": ...}``:
    clock, cores with their engines and scratchpads, shared levels, DRAM, host link, DMA),
    which keeps everything the views read but not the engine's own config."""
    if spec.kind == "nvdla":
        return nvdla_config_to_dict(spec.config)
    if spec.kind == "systolic":
        return chip_config_to_dict(spec.config)

    def levels(items):
        return [dict(vars(m), holds=list(m.holds), shared_by=list(m.shared_by)) for m in items]
    return {"spec": {
        "name": spec.name, "clock_mhz": spec.clock_mhz,
        "cores": [{"name": c.name,
                   "engines": [{"kind": e.kind, "name": e.name, "label": e.label,
                                "peak_macs_per_cycle": e.peak_macs_per_cycle}
                               for e in c.engines],
                   "scratchpads": levels(c.scratchpads)} for c in spec.cores],
        "levels": levels(spec.levels),
        "dram": dram_config_to_dict(spec.dram) if spec.dram is not None else None,
        "host_link": host_link_to_dict(spec.host_link) if spec.host_link is not None else None,
        "dma": dma_config_to_dict(spec.dma) if spec.dma is not None else None,
    }}


def _spec_from_table(data: dict[str, Any], where: str) -> ChipSpec:
    """The spec of ``{"spec": ...}`` (:func:`chip_spec_to_dict` of a kind without a TOML form);
    its engines have no config (``None``)."""
    from hw.spec import Core, Engine, MemoryLevel
    table = data["spec"]
    try:
        def levels(items):
            return tuple(MemoryLevel(**dict(m, holds=tuple(m["holds"]),
                                            shared_by=tuple(m["shared_by"]))) for m in items)
        cores = tuple(Core(name=c["name"],
                           engines=tuple(Engine(config=None, **e) for e in c["engines"]),
                           scratchpads=levels(c["scratchpads"])) for c in table["cores"])
        return ChipSpec(
            name=table["name"], clock_mhz=table["clock_mhz"], cores=cores,
            levels=levels(table["levels"]),
            dram=(dram_config_from_dict(table["dram"], where)
                  if table.get("dram") is not None else None),
            host_link=(host_link_from_dict(table["host_link"], where)
                       if table.get("host_link") is not None else None),
            dma=(dma_config_from_dict(table["dma"], where)
                 if table.get("dma") is not None else None),
            config=None, source=where)
    except ConfigError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: [spec]: {type(exc).__name__}: {exc}: not a chip spec "
                          f"written by hw.configfile.chip_spec_to_dict") from None


def load_chip_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> ChipConfig:
    """Load a systolic chip's config from a TOML file or a shipped preset by name
    (``"gemmini_like"``; ``None``: the built-in default), then apply ``--set``-style overrides
    with the same validation as the file (:func:`load_chip`, which also takes NVDLA builds)."""
    spec = load_chip(path, overrides)
    if spec.kind != "systolic":
        raise _not_systolic(spec.source)
    return spec.config


def _not_systolic(where: str) -> ConfigError:
    return ConfigError(f"{where}: an NVDLA config ([nvdla]), not a systolic chip: load it with "
                       f"hw.configfile.load_chip or hw.nvdla.config.load_nvdla_config (npulab "
                       f"run --config takes either kind)")


def chip_config_to_dict(cfg: ChipConfig) -> dict[str, dict[str, Any]]:
    """The config as plain data, section by section (enums as their string values). A one-core
    chip without an L2 leaves out ``chip.cores``, ``[l2]`` and ``[noc]`` (their defaults), so
    its dump is what it was before chips had several cores."""
    def plain(value):
        return value.value if hasattr(value, "value") else value

    chip_keys = tuple(k for k in _CHIP_KEYS
                      if (k != "cores" or cfg.multicore)
                      and (k != "launch_overhead_by_op" or cfg.launch_overhead_by_op))
    extra = ({"l2": l2_config_to_dict(cfg.l2), "noc": noc_config_to_dict(cfg.noc)}
             if cfg.multicore else {})
    return {
        "chip": {k: (dict(cfg.launch_overhead_by_op) if k == "launch_overhead_by_op"
                     else plain(getattr(cfg, k))) for k in chip_keys},
        "array": {k: plain(getattr(cfg.array, k)) for k in _ARRAY_KEYS},
        "vector": vector_config_to_dict(cfg.vector),
        "sram": {name: sram_config_to_dict(cfg.sram(name)) for name in SRAM_NAMES},
        "dram": dram_config_to_dict(cfg.dram),
        "host_link": host_link_to_dict(cfg.host_link),
        "dma": dma_config_to_dict(cfg.dma),
        **extra,
    }


def chip_config_to_toml(cfg: ChipConfig) -> str:
    """The effective config as TOML that :func:`load_chip_config` reads back unchanged."""
    lines = []
    for section, values in chip_config_to_dict(cfg).items():
        if section == "sram":
            for name, sub in values.items():
                lines += [f"[sram.{name}]"] + [f"{k} = {toml_text(v)}" for k, v in sub.items()] + [""]
            continue
        tables = {k: v for k, v in values.items() if isinstance(v, dict)}   # [vector.cost], ...
        values = {k: v for k, v in values.items() if k not in tables}
        lines += [f"[{section}]"] + [f"{k} = {toml_text(v)}" for k, v in values.items()] + [""]
        for name, sub in tables.items():
            lines += [f"[{section}.{name}]"] + [f"{k} = {toml_text(v)}" for k, v in sub.items()] + [""]
    return "\n".join(lines[:-1]) + "\n"


def chip_spec_to_toml(spec: ChipSpec) -> str:
    """The effective config of a chip of either file kind as TOML that :func:`load_chip` reads
    back unchanged (``npulab config show``); a kind without chip files is a ConfigError."""
    if spec.kind == "systolic":
        return chip_config_to_toml(spec.config)
    if spec.kind == "nvdla":
        table = nvdla_config_to_dict(spec.config)["nvdla"]
        return "\n".join(["[nvdla]"] + [f"{k} = {toml_text(v)}" for k, v in table.items()]) + "\n"
    raise ConfigError(f"{spec.name}: engine kind {spec.kind!r} has no chip file form")
