"""The vector engine's configuration: lanes, datatypes, a per-operation cost table, reductions,
pipeline depth and its ports to the scratchpads (the ``[vector]`` table of a chip file).

A vector engine is ``lanes`` SIMD lanes of 32 bits beside the matrix engine, like the TPU's
vector unit beside its MXUs, NVDLA's SDP/PDP/CDP after CACC, Gemmini's activation and pooling
path on the accumulator read-out, or the FP32/INT32 and special-function pipes of a GPU SM.
Everything a network does besides matrix products runs on it: softmax, norms, activations,
element-wise ops, reductions, pooling, requantization.

The cost table
--------------
Every operation a vector op decomposes into (:mod:`hw.vector.work`) is one of :data:`OPS`.
``cost[op]`` is its cost in **cycles per element per lane**: a lane finishes one ``op`` every
``cost[op]`` cycles. Two paths run side by side (their cycles overlap; a tile takes the longer):

* the ALU path (:data:`ALU_OPS`: add/subtract, multiply, fused multiply-add, max/min, compare,
  select, cast/requantize, shift): a 32-bit lane packs ``packing[dtype]`` narrower elements
  (packed SIMD, as NVIDIA's ``half2`` or ARM NEON), so it does ``lanes * packing[dtype] /
  cost[op]`` ops per cycle in the engine's compute datatype ``dtype``;
* the special-function path (:data:`SFU_OPS`: exp, log, reciprocal, reciprocal square root,
  tanh, erf), one element per lane, ``lanes / cost[op]`` per cycle, like a GPU's MUFU units or
  NVDLA's lookup-table path; it has no packing.

Defaults and their sources (``docs/vector.md`` has the table; figures from the public sources
collected in ``docs/references.md``):

* ALU ops 1 cycle: one result per lane per cycle, as the FP32 and INT32 pipes of an NVIDIA A100
  SM (64 fp32 FMA, add, multiply and int32 add/compare/min/max results per clock per SM for 64
  lanes; CUDA C++ Programming Guide, "Throughput of Native Arithmetic Instructions").
* Special functions 4 cycles: the A100's 16 special-function results (exp2, log2, rcp, rsqrt,
  sin, cos) per clock per SM against 64 FP32 results, a 1:4 rate (same table).
* tanh 4 (a MUFU op since sm_75, PTX ``tanh.approx.f32``); erf 4: no GPU has an erf
  instruction (CUDA computes ``erff`` as a ~10-FMA polynomial), but a lookup-table unit such as
  NVDLA's SDP Y-path LUT evaluates any smooth function at its one-lookup rate; the default
  takes that rate. Set ``cost.erf = 10`` and move it to an FMA polynomial mentally for a
  GPU-like engine.
* ``packing``: a 32-bit lane holds 4 int8, 2 int16/fp16/bf16 or 1 int32/fp32 element.
* ``pipeline_depth`` 4 cycles from a tile's first operand to its first result (NVDLA's SDP
  and Gemmini's scaler are pipelines of a few stages; Gemmini's ``acc_scale_args`` latency is
  configurable, 4 in one published config).
* ``reduction_stage_cycles`` 1: a cross-lane reduction is a tree of ``ceil(log2(lanes))``
  adder (or max) levels, one cycle each.
* ``read_bytes_per_cycle`` / ``write_bytes_per_cycle``: 4 bytes per lane, one 32-bit word per
  lane each way per cycle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from hw.systolic.config import ConfigError, _int_in
from hw.validate import _bool, _number_in, config_from_table

__all__ = ["VectorConfig", "OPS", "ALU_OPS", "SFU_OPS", "DTYPES", "DTYPE_BITS", "DEFAULT_COST",
           "DEFAULT_PACKING", "vector_config_from_dict", "vector_config_to_dict", "MAX_LANES"]

#: Operations of the ALU path: add/subtract, multiply, fused multiply-add, max or min, compare,
#: select (a mux on a predicate), cast or requantize (scale, round, saturate), shift.
ALU_OPS = ("add", "mul", "fma", "max", "cmp", "select", "cast", "shift")
#: Operations of the special-function path.
SFU_OPS = ("exp", "log", "rcp", "rsqrt", "tanh", "erf")
#: Every operation of the cost table, in the order of the timing kernel's arrays.
OPS = ALU_OPS + SFU_OPS
#: Compute datatypes and their widths in bits.
DTYPE_BITS = {"int8": 8, "int16": 16, "int32": 32, "fp16": 16, "bf16": 16, "fp32": 32}
DTYPES = tuple(DTYPE_BITS)

DEFAULT_COST = {**{op: 1.0 for op in ALU_OPS}, **{op: 4.0 for op in SFU_OPS}}
DEFAULT_PACKING = {dtype: 32 // bits for dtype, bits in DTYPE_BITS.items()}

#: Upper bounds checked when a config is read.
MAX_LANES = 1 << 16
_MAX_COST = 1024.0
_MAX_DEPTH = 4096
_MAX_PORT_BYTES = 1 << 20


def _table(value, key: str, where: str, defaults: dict[str, float], check) -> tuple:
    """A sub-table (``cost`` or ``packing``) as ``((name, value), ...)`` in the defaults' order:
    a TOML table overrides some entries, a tuple of pairs is the stored form."""
    if isinstance(value, tuple):
        value = dict(value)
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {key} = {value!r}: must be a [{key}] table of "
                          f"{', '.join(defaults)}")
    for name in value:
        if name not in defaults:
            raise ConfigError(f"{where}: {key}.{name}: unknown key; allowed keys in [{key}]: "
                              f"{', '.join(defaults)}")
    merged = {**defaults, **value}
    return tuple((name, check(merged[name], f"{key}.{name}")) for name in defaults)


@dataclass(frozen=True)
class VectorConfig:
    """One vector engine (module docstring: the cost model and the defaults' sources).

    Attributes
    ----------
    lanes:
        SIMD lanes of 32 bits, 1..65536.
    dtype:
        Datatype the lanes compute in, one of :data:`DTYPES` (data stored at the chip's
        precision is converted on the way in and out, like NVDLA's SDP, which runs fp16 data in
        fp32); sets the ALU path's packing.
    pipeline_depth:
        Cycles from a tile's first operand to its first result, 0..4096.
    reduction_stage_cycles:
        Cycles per level of the cross-lane reduction tree (``ceil(log2(lanes))`` levels), 0..64.
    read_bytes_per_cycle, write_bytes_per_cycle:
        The engine's own ports to the scratchpads: bytes it reads and writes per cycle,
        1..1048576 (default 4 per lane).
    cost:
        Cycles per element per lane of every operation in :data:`OPS` (0 < cost <= 1024); a
        TOML ``[vector.cost]`` table sets some and keeps the defaults for the rest.
    packing:
        Elements of each datatype a 32-bit lane processes per ALU operation (1..32).
    ideal:
        True: an infinitely fast engine whose operands never leave the chip, so vector ops cost
        no cycles and move no bytes (the matrix-only bound: npulab's numbers before it had a
        vector engine). Their operations are still counted.
    """

    lanes: int = 32
    dtype: str = "fp32"
    pipeline_depth: int = 4
    reduction_stage_cycles: int = 1
    read_bytes_per_cycle: int | None = None
    write_bytes_per_cycle: int | None = None
    cost: tuple = field(default_factory=lambda: tuple(DEFAULT_COST.items()))
    packing: tuple = field(default_factory=lambda: tuple(DEFAULT_PACKING.items()))
    ideal: bool = False

    def __post_init__(self) -> None:
        self.validate("VectorConfig")

    def validate(self, where: str, prefix: str = "") -> None:
        """Check every field; ``where`` and ``prefix`` name the source in error messages."""
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen dataclass)
        set_("lanes", _int_in(self.lanes, prefix + "lanes", where, 1, MAX_LANES))
        if self.dtype not in DTYPES:
            raise ConfigError(f"{where}: {prefix}dtype = {self.dtype!r}: must be one of "
                              f"{', '.join(DTYPES)}")
        set_("pipeline_depth", _int_in(self.pipeline_depth, prefix + "pipeline_depth", where, 0,
                                       _MAX_DEPTH))
        set_("reduction_stage_cycles", _int_in(self.reduction_stage_cycles,
                                               prefix + "reduction_stage_cycles", where, 0, 64))
        for key in ("read_bytes_per_cycle", "write_bytes_per_cycle"):
            value = getattr(self, key)
            set_(key, 4 * self.lanes if value is None
                 else _int_in(value, prefix + key, where, 1, _MAX_PORT_BYTES))
        cost = _table(self.cost, prefix + "cost", where, DEFAULT_COST,
                      lambda v, k: _number_in(v, k, where, 0.0, _MAX_COST, lo_open=True))
        set_("cost", cost)
        set_("packing", _table(self.packing, prefix + "packing", where, DEFAULT_PACKING,
                               lambda v, k: _int_in(v, k, where, 1, 32)))
        set_("ideal", _bool(self.ideal, prefix + "ideal", where))

    def cost_of(self, op: str) -> float:
        """Cycles per element per lane of ``op`` (one of :data:`OPS`)."""
        return dict(self.cost)[op]

    @property
    def pack(self) -> int:
        """ALU elements per lane per operation in the compute datatype."""
        return dict(self.packing)[self.dtype]

    def ops_per_cycle(self, op: str) -> float:
        """Peak rate of ``op``: elements per cycle over all lanes."""
        lanes = self.lanes * (self.pack if op in ALU_OPS else 1)
        return lanes / self.cost_of(op)

    @property
    def tree_levels(self) -> int:
        """Levels of the full cross-lane reduction tree."""
        return math.ceil(math.log2(self.lanes)) if self.lanes > 1 else 0


def vector_config_from_dict(data: dict[str, Any], where: str, prefix: str = "vector.") -> VectorConfig:
    """Build a :class:`VectorConfig` from a ``[vector]`` table (unknown keys are errors naming
    the allowed ones)."""
    return config_from_table(VectorConfig, data, where, prefix)


def vector_config_to_dict(cfg: VectorConfig) -> dict[str, Any]:
    """The config as plain data (``cost`` and ``packing`` as tables), readable by
    :func:`vector_config_from_dict`."""
    out = {f.name: getattr(cfg, f.name) for f in fields(cfg)}
    out["cost"] = dict(cfg.cost)
    out["packing"] = dict(cfg.packing)
    return out
