"""NVDLA hardware configurations: the parameters of NVIDIA's ``spec/defs/*.spec`` files.

An :class:`NvdlaConfig` is what one NVDLA build is made of: atomic sizes of the convolution
core, the memory atom, the convolution buffer (CBUF), SDP/PDP/CDP throughputs, the memory
interface, the supported precisions and the optional features. The six presets ship as
``sim_configs/nv_*.toml`` (``load_nvdla_config("nv_small")``); each field cites its source
there. Every value is validated on load against what NVIDIA's build system accepts, and a
request the configuration cannot run (fp16 on nv_small, the LUT on nv_medium_512) is a
:class:`~hw.systolic.config.ConfigError` naming the preset, the key and what is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Iterable

from hw.errors import ConfigError
from hw.presets import looks_like_path, nvdla_preset_names, preset_path
from hw.validate import config_from_table, read_toml, toml_text, toml_value

__all__ = ["NvdlaConfig", "FEATURES", "PRECISIONS", "CACC_BITS", "load_nvdla_config",
           "nvdla_config_from_dict", "nvdla_config_to_dict", "nvdla_preset_names", "is_nvdla_config"]

#: Precisions an NVDLA build may support (int8 always; int16 and fp16 on nv_full only).
PRECISIONS = ("int8", "int16", "fp16")
#: Accumulator width of CACC per precision (int8: 34-bit sums in RTL; int16: 48; fp16: the
#: float accumulator, charged as 32 bits), shared/reference/nvdla.md.
CACC_BITS = {"int8": 34, "int16": 48, "fp16": 32}

#: Optional features of ``spec/defs`` (``*_ENABLE`` / ``*_DISABLE``).
FEATURES = ("winograd", "batch", "weight_compression", "secondary_memif", "sdp_lut", "sdp_ew",
            "bdma", "rubik")

# Values NVIDIA's spec/defs/projects.spec accepts for each parameter.
_ALLOWED = {
    "atomic_c": (8, 16, 32, 64, 128),
    "atomic_k": (8, 16, 32, 64),
    "memory_atom_bytes": (8, 16, 32, 64),
    "cbuf_banks": (16, 32),
    "cbuf_bank_width_bytes": (8, 16, 32, 64, 128),
    "cbuf_bank_depth": (128, 256, 512),
    "dram_bus_bits": (64, 128, 256, 512),
    "sdp_bs_throughput": (1, 2, 4, 8, 16),
    "sdp_bn_throughput": (1, 2, 4, 8, 16),
    "sdp_ew_throughput": (0, 1, 2, 4),
    "pdp_throughput": (1, 2, 4, 8),
    "cdp_throughput": (1, 2, 4, 8),
}


@dataclass(frozen=True)
class NvdlaConfig:
    """One NVDLA build. Sizes are in elements of the build's smallest precision (int8) unless
    the name says bytes.

    Attributes
    ----------
    name: preset name (``nv_full``, ...).
    clock_mhz: core clock (the primer's figures assume 1 GHz).
    precisions: supported data types; int8 always, int16/fp16 only where the spec enables them.
    atomic_c: input channels per atomic operation (int8).
    atomic_k: kernels computed in parallel (int8; 16-bit precisions compute ``atomic_k // 2``
        kernels, each multiplier pair fused).
    memory_atom_bytes: smallest memory access (one 1x1xatom cube of a surface).
    cbuf_banks: banks of the convolution buffer (CBUF).
    cbuf_bank_width_bytes: bytes per CBUF bank entry.
    cbuf_bank_depth: entries per CBUF bank.
    dram_bus_bits: width of the primary memory interface (``PRIMARY_MEMIF_WIDTH``).
    dram_latency_cycles: latency of the primary memory interface (``PRIMARY_MEMIF_LATENCY``).
    dram_max_burst: longest burst of the primary memory interface
        (``PRIMARY_MEMIF_MAX_BURST_LENGTH``), in memory atoms.
    dram_gbps: bandwidth of the memory behind the interface in GB/s (the presets use the
        primer's figure for their MAC count, e.g. 20 for 2048 MACs); 0 = only the bus limits.
    dram: optional npulab DRAM preset (``hw.memory.dram``, e.g. ``"lpddr4-3200"``); when set, the
        CDMA gets ``dram_gbps`` (or the DRAM's peak when 0) times the sustained efficiency that
        the DRAM model measures for a stream of this build's requests
        (``memory_atom_bytes * dram_max_burst`` bytes each), see :mod:`hw.nvdla.memory`.
    sdp_bs_throughput: SDP X1 (bias) elements per cycle.
    sdp_bn_throughput: SDP X2 (batch-norm) elements per cycle.
    sdp_ew_throughput: SDP Y (element-wise) elements per cycle; 0 where the unit is absent.
    pdp_throughput: pooling (PDP) elements per cycle.
    cdp_throughput: LRN (CDP) elements per cycle.
    features: enabled optional features, from :data:`FEATURES`.
    max_batch: largest FC batch (1 without the batch feature).
    """

    name: str
    atomic_c: int
    atomic_k: int
    memory_atom_bytes: int
    cbuf_banks: int
    cbuf_bank_width_bytes: int
    cbuf_bank_depth: int
    dram_bus_bits: int
    dram_latency_cycles: int
    sdp_bs_throughput: int
    sdp_bn_throughput: int
    pdp_throughput: int
    cdp_throughput: int
    sdp_ew_throughput: int = 0
    dram_max_burst: int = 1
    dram_gbps: float = 0.0
    dram: str = ""
    clock_mhz: float = 1000.0
    precisions: tuple[str, ...] = ("int8",)
    features: tuple[str, ...] = ()
    max_batch: int = 1

    def validate(self, where: str, prefix: str = "") -> None:
        """Check every field; errors name ``where``, the key, the value and what is allowed."""
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen dataclass)
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"{where}: {prefix}name = {self.name!r}: must be a non-empty string")
        for key, allowed in _ALLOWED.items():
            value = getattr(self, key)
            if isinstance(value, bool) or value not in allowed:
                raise ConfigError(f"{where}: {prefix}{key} = {value!r}: must be one of "
                                  f"{', '.join(map(str, allowed))}")
        for key, lo, hi in (("dram_latency_cycles", 1, 100_000), ("dram_max_burst", 1, 16),
                            ("max_batch", 1, 32)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ConfigError(f"{where}: {prefix}{key} = {value!r}: must be an integer in "
                                  f"{lo}..{hi}")
        gbps = self.dram_gbps
        if isinstance(gbps, bool) or not isinstance(gbps, (int, float)) or not 0 <= gbps <= 10_000:
            raise ConfigError(f"{where}: {prefix}dram_gbps = {gbps!r}: must be a number in "
                              f"[0, 10000] (GB/s; 0 = limited by the bus only)")
        set_("dram_gbps", float(gbps))
        if not isinstance(self.dram, str):
            raise ConfigError(f"{where}: {prefix}dram = {self.dram!r}: must be a DRAM preset name "
                              f"or \"\" (bandwidth model)")
        if self.dram:
            from hw.memory.dram import DRAM_PRESETS
            allowed_dram = [n for n in DRAM_PRESETS if n != "ideal"]
            if self.dram not in allowed_dram:
                raise ConfigError(f"{where}: {prefix}dram = {self.dram!r}: must be one of "
                                  f"{', '.join(allowed_dram)} or \"\" (bandwidth model)")
        clock = self.clock_mhz
        if isinstance(clock, bool) or not isinstance(clock, (int, float)) or not 0 < clock <= 10_000:
            raise ConfigError(f"{where}: {prefix}clock_mhz = {clock!r}: must be a number in (0, 10000]")
        set_("clock_mhz", float(clock))
        for key, allowed in (("precisions", PRECISIONS), ("features", FEATURES)):
            value = getattr(self, key)
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{where}: {prefix}{key} = {value!r}: must be a list of names "
                                  f"from {', '.join(allowed)}")
            bad = [v for v in value if v not in allowed]
            if bad or len(set(value)) != len(value):
                what = f"unknown {bad[0]!r}" if bad else "repeated names"
                raise ConfigError(f"{where}: {prefix}{key} = {list(value)!r}: {what}; allowed: "
                                  f"{', '.join(allowed)}")
            set_(key, tuple(v for v in allowed if v in value))  # canonical order
        if "int8" not in self.precisions:
            raise ConfigError(f"{where}: {prefix}precisions = {list(self.precisions)!r}: every "
                              f"NVDLA build supports int8; add it")
        # Consistency the spec's build checks enforce.
        if ("sdp_ew" in self.features) != (self.sdp_ew_throughput > 0):
            raise ConfigError(f"{where}: {prefix}sdp_ew_throughput = {self.sdp_ew_throughput}: "
                              f"must be > 0 exactly when 'sdp_ew' is in features")
        if ("batch" in self.features) != (self.max_batch > 1):
            raise ConfigError(f"{where}: {prefix}max_batch = {self.max_batch}: must be > 1 exactly "
                              f"when 'batch' is in features")

    # ------------------------------------------------------------------ derived quantities
    def macs(self, precision: str = "int8") -> int:
        """Multipliers working per cycle at ``precision`` (int8: atomic_c x atomic_k; 16-bit:
        half of that, each pair of 8-bit multipliers fused)."""
        self.require_precision(precision)
        return self.atomic_c * self.atomic_k // (1 if precision == "int8" else 2)

    def peak_ops_per_cycle(self, precision: str = "int8") -> int:
        """2 operations (multiply, add) per MAC per cycle."""
        return 2 * self.macs(precision)

    @property
    def cbuf_bytes(self) -> int:
        return self.cbuf_banks * self.cbuf_bank_width_bytes * self.cbuf_bank_depth

    @property
    def dram_bytes_per_cycle(self) -> int:
        return self.dram_bus_bits // 8

    def require_precision(self, precision: str, where: str | None = None) -> None:
        """A clear error when this build cannot run ``precision``."""
        if precision not in self.precisions:
            raise ConfigError(f"{where or self.name}: precision = {precision!r}: {self.name} "
                              f"supports {', '.join(self.precisions)}"
                              + ("; int16 and fp16 need nv_full" if precision in PRECISIONS else ""))

    def require_feature(self, feature: str, where: str | None = None) -> None:
        """A clear error when this build lacks ``feature`` (e.g. the SDP LUT on nv_small)."""
        if feature not in FEATURES:
            raise ValueError(f"unknown NVDLA feature {feature!r}; known: {', '.join(FEATURES)}")
        if feature not in self.features:
            have = ", ".join(self.features) or "none"
            raise ConfigError(f"{where or self.name}: {feature!r} is not in {self.name}'s "
                              f"features ({have})")


def is_nvdla_config(data: dict[str, Any]) -> bool:
    """Whether parsed TOML is an NVDLA config (it has an ``[nvdla]`` table)."""
    return isinstance(data, dict) and "nvdla" in data


def nvdla_config_from_dict(data: dict[str, Any], where: str = "<config>",
                           overrides: Iterable[str] = ()) -> NvdlaConfig:
    """An :class:`NvdlaConfig` from parsed TOML (exactly one table, ``[nvdla]``), after
    ``nvdla.KEY=VALUE`` overrides (TOML values) validated as the file is; ``where`` names the
    source in errors."""
    extra = [k for k in data if k != "nvdla"]
    if not is_nvdla_config(data) or extra:
        raise ConfigError(f"{where}: an NVDLA config has exactly one table, [nvdla]"
                          + (f"; found [{extra[0]}]" if extra else ""))
    table = dict(data["nvdla"])
    texts = []
    for item in overrides:       # "nvdla.KEY=VALUE" text, or a typed ("nvdla.KEY", value) pair
        if isinstance(item, str):
            key, sep, raw = item.partition("=")
            value, text = toml_value(raw), item
        else:
            (key, value), sep = item, "="
            text = f"{key}={toml_text(value)}"
        if not sep or not key.startswith("nvdla."):
            raise ConfigError(f"{where}: --set {text!r}: must be nvdla.KEY=VALUE")
        table[key[len("nvdla."):]] = value
        texts.append(text)
    if texts:
        where = f"{where} with --set {' --set '.join(texts)}"
    return config_from_table(NvdlaConfig, table, where, "nvdla.")


def nvdla_config_to_dict(cfg: NvdlaConfig) -> dict[str, dict[str, Any]]:
    """The config as plain data, ``{"nvdla": {...}}`` (tuples as lists), what
    :func:`nvdla_config_from_dict` reads back."""
    return {"nvdla": {f.name: (list(v) if isinstance(v := getattr(cfg, f.name), tuple) else v)
                      for f in fields(cfg)}}


def load_nvdla_config(name_or_path: str | Path, overrides: Iterable[str] = ()) -> NvdlaConfig:
    """Load an NVDLA preset by name (``nv_small``) or a TOML file with an ``[nvdla]`` table,
    then apply ``nvdla.KEY=VALUE`` overrides (TOML values) with the same validation. The same
    lookup as every chip (:func:`hw.presets.preset_path`)."""
    if not looks_like_path(name_or_path):
        names = nvdla_preset_names()
        if str(name_or_path) not in names:
            raise ConfigError(f"NVDLA preset {str(name_or_path)!r}: unknown; presets: "
                              f"{', '.join(names)}")
        path = preset_path(str(name_or_path))
    else:
        path = Path(name_or_path)
    return nvdla_config_from_dict(read_toml(path), str(path), overrides)
