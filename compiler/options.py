"""The compiler choices a user can make (:class:`CompileOptions`) and the names they take.

Kept apart from the systolic backend (:mod:`compiler.backends.systolic`) so the command line
can list the choices in its help without loading the models (this module imports nothing heavy).
"""

from __future__ import annotations

import fnmatch
import math
import numbers
from dataclasses import dataclass
from functools import lru_cache

from hw.energy.tech import DEFAULT_TECHNOLOGY

__all__ = ["CompileOptions", "CONV_LOWERINGS", "SRAM_LAYOUTS", "MAP_MODES", "ORDERS",
           "PLACEMENTS", "MAX_STAGES", "parse_act_zeros", "WEIGHT_FORMATS",
           "parse_weight_format"]

#: Tile loop orders, outermost first (see :mod:`compiler.backends.systolic_tiling`).
ORDERS = ("mnk", "nmk", "mkn", "kmn", "nkm", "knm")
CONV_LOWERINGS = ("direct", "im2col")
SRAM_LAYOUTS = ("matched", "row-major")
#: ``CompileOptions.map`` values -> the mapper's objective (:func:`compiler.mapper.map_op`).
MAP_MODES = {"best-latency": "latency", "best-energy": "energy", "best-edp": "edp"}
#: Where the ops of a multi-core chip run: each split over every core (``split``), or
#: consecutive layers in stages on their own cores, inputs streaming through (``pipeline``).
PLACEMENTS = ("split", "pipeline")
#: Most pipeline stages a user may ask for (the cores of a chip are at most 4,096).
MAX_STAGES = 4096
#: How stored weights may be kept (:mod:`hw.sparsity`'s formats; N:M is ``sparsity``'s).
WEIGHT_FORMATS = ("dense", "bitmask", "csr", "csc", "ellpack")


@dataclass(frozen=True)
class CompileOptions:
    """Compiler choices a user can make.

    Attributes
    ----------
    conv_lowering:
        ``"direct"`` (default) or ``"im2col"`` (see :mod:`compiler.backends.systolic_tiling`).
    loop_order:
        ``None`` (default: the tiler picks per op) or one of :data:`compiler.options.ORDERS`.
    keep_on_chip:
        Keep a tensor in SRAM between consecutive layers when it fits (default True).
    sram_layout:
        ``"matched"`` (default): each tile is laid out in its scratchpad so the vector an array
        edge reads per cycle is contiguous. ``"row-major"``: tiles keep their DRAM row-major
        layout, so some edges read strided vectors and may hit bank conflicts.
    objective:
        What the tiler minimises per op: ``"latency"`` (default) or ``"traffic"`` (DRAM bytes).
    map:
        ``None`` (default: the tiler above) or ``"best-latency"``, ``"best-energy"``,
        ``"best-edp"``: every matrix op is tiled by the mapper (:func:`compiler.mapper.map_op`),
        which searches tile sizes and loop orders (all six, or ``loop_order``) on the chip's
        dataflow for that objective.
    tech:
        Energy table the mapper costs energy with (name or TOML path; default
        :data:`hw.energy.DEFAULT_TECHNOLOGY`, the table the metrics use by default).
    fusion:
        Fuse ops whose intermediate tensors then never reach DRAM (default True;
        :mod:`compiler.fusion`): GEMM/conv epilogues, FlashAttention-style attention, residual
        add + norm, pooling into its conv. Applies where the chip has a (non-ideal) vector engine.
        A tuple of :data:`compiler.fusion.PATTERNS` fuses only those (``("epilogue",)``:
        epilogues, but a pool runs as its own op, as the RTL core needs).
    placement:
        On a chip with several cores: ``"split"`` (default) splits every op over all the cores
        (:mod:`compiler.backends.multicore`); ``"pipeline"`` runs consecutive layers in stages,
        each on its own cores, inputs streaming through (:mod:`compiler.backends.stages`).
    stages:
        ``None`` (default: the planner chooses) or the number of pipeline stages
        (``placement = "pipeline"`` only).
    sparsity:
        ``None`` (default: each op's own ``weight_nm``, dense unless the model says otherwise)
        or ``"N:M"`` (e.g. ``"2:4"``): every op with stored weights (convolutions, linear
        layers; not attention's activation-by-activation products) takes its weights as N:M
        pruned along K. ``"dense"`` ignores the model's sparsity. An op runs compressed on an
        array with N:M sparse PEs (``array.sparse_m``, :func:`hw.sparsity.array_nm`); its
        weights are then stored compressed, values plus ``ceil(log2 M)``-bit indices.
        ``"LO-HI:M"`` (e.g. ``"1-2:4"``) is row-wise N:M: the output channels take every N
        from LO to HI in equal shares (``weight_nm_rows``).
    act_zeros:
        ``None`` (default: each op's own ``act_zeros``, 0 unless the model says otherwise), a
        ratio in 0..1, or ``"PATTERN=RATIO,..."`` (shell-style patterns of op names, the first
        match wins; :func:`parse_act_zeros`): the fraction of a matrix op's streamed
        activations (its GEMM's ``a``) that are zero. A PE whose activation is zero does not
        switch its multiplier and adder (clock gating, as Eyeriss's), so those MACs cost no
        MAC energy; cycles, register shifts and memory traffic are unchanged.
    weight_bits:
        ``None`` (default: each op's own ``w_bits``, else the array's precision) or 4, 8 or 16:
        every op with stored weights (convolutions, linear layers) keeps them in this many bits
        each and widens them to the array's precision as they are loaded: weight-only
        quantization (W4A8, W8A16). Narrower than the array's operands only; it changes bytes,
        not arithmetic.
    weight_format:
        ``None`` (default: dense) or ``"FORMAT"`` / ``"FORMAT:DENSITY"``: every op with stored
        weights keeps them in DRAM and in the filter scratchpad in that unstructured-sparse
        format (:data:`WEIGHT_FORMATS`, :func:`hw.sparsity.stored_weight_bytes`), decompressed
        at the scratchpad's port as NVDLA's weight decompression does. DENSITY (0..1) is the
        fraction of nonzero weights; without it each op's own ``weight_density`` (from
        ``--sparsity-from-weights``), else 1. The array still multiplies every weight: bytes
        and memory energy change, MACs do not. Ops that run N:M compressed keep that format.
    """

    conv_lowering: str = "direct"
    loop_order: str | None = None
    keep_on_chip: bool = True
    sram_layout: str = "matched"
    objective: str = "latency"
    map: str | None = None
    tech: str = DEFAULT_TECHNOLOGY
    fusion: bool | tuple = True
    placement: str = "split"
    stages: int | None = None
    sparsity: str | None = None
    act_zeros: float | str | None = None
    weight_bits: int | None = None
    weight_format: str | None = None

    def __post_init__(self) -> None:
        if self.conv_lowering not in CONV_LOWERINGS:
            raise ValueError(f"conv_lowering = {self.conv_lowering!r}: must be one of "
                             f"{', '.join(CONV_LOWERINGS)}")
        if self.loop_order is not None and self.loop_order not in ORDERS:
            raise ValueError(f"loop_order = {self.loop_order!r}: must be one of {', '.join(ORDERS)}")
        if self.objective not in ("latency", "traffic"):
            raise ValueError(f"objective = {self.objective!r}: must be 'latency' or 'traffic'")
        if self.sram_layout not in SRAM_LAYOUTS:
            raise ValueError(f"sram_layout = {self.sram_layout!r}: must be one of "
                             f"{', '.join(SRAM_LAYOUTS)}")
        if self.map is not None and self.map not in MAP_MODES:
            raise ValueError(f"map = {self.map!r}: must be None (the tiler) or one of "
                             f"{', '.join(MAP_MODES)}")
        if self.map is not None and self.objective != "latency":
            raise ValueError(f"objective = {self.objective!r} is the tiler's; with map = "
                             f"{self.map!r} the mapper's objective is the map mode")
        if not isinstance(self.fusion, bool):
            from compiler.fusion import PATTERNS

            if (not isinstance(self.fusion, (tuple, list))
                    or not all(p in PATTERNS for p in self.fusion)):
                raise ValueError(f"fusion = {self.fusion!r}: must be true, false or a tuple of "
                                 f"{', '.join(PATTERNS)}")
            object.__setattr__(self, "fusion", tuple(self.fusion))
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement = {self.placement!r}: must be one of "
                             f"{', '.join(PLACEMENTS)}")
        if self.stages is not None:
            if (isinstance(self.stages, bool) or not isinstance(self.stages, int)
                    or not 1 <= self.stages <= MAX_STAGES):
                raise ValueError(f"stages = {self.stages!r}: must be an integer in "
                                 f"1..{MAX_STAGES}")
            if self.placement != "pipeline":
                raise ValueError(f"stages = {self.stages}: applies to placement = 'pipeline' "
                                 f"(placement = {self.placement!r})")
        if self.sparsity is not None:
            from hw.sparsity import parse_sparsity     # numpy: not on the CLI's --help path
            parse_sparsity(self.sparsity)      # raises a one-line ValueError naming the value
        if self.act_zeros is not None:
            parse_act_zeros(self.act_zeros)     # a one-line ValueError naming the value
        if self.weight_format is not None:
            parse_weight_format(self.weight_format)
        if self.weight_bits is not None and (isinstance(self.weight_bits, bool)
                                             or self.weight_bits not in (4, 8, 16)):
            raise ValueError(f"weight_bits = {self.weight_bits!r}: must be 4, 8 or 16 (bits per "
                             f"stored weight), or None")
        if not isinstance(self.tech, str) or not self.tech:
            raise ValueError(f"tech = {self.tech!r}: must be an energy table name or TOML path")

    def act_zeros_of(self, op) -> float:
        """The fraction of ``op``'s streamed activations that are zero under these options."""
        if self.act_zeros is not None:
            for pattern, ratio in parse_act_zeros(self.act_zeros):
                if fnmatch.fnmatchcase(op.name, pattern):
                    return ratio
        return getattr(op, "act_zeros", None) or 0.0

    def w_bits_of(self, op) -> int | None:
        """Bits per stored weight of ``op`` under these options (None: the array's)."""
        if self.weight_bits is not None and not getattr(op, "kv_cache", False) \
                and len(op.inputs) < 2:
            return self.weight_bits
        return getattr(op, "w_bits", None)

    def weight_storage(self, op) -> tuple[str, float] | None:
        """``(format, density)`` ``op``'s stored weights are kept in (None: dense)."""
        if self.weight_format is None:
            return None
        fmt, density = parse_weight_format(self.weight_format)
        if fmt == "dense":
            return None
        if density is None:
            own = getattr(op, "weight_density", None)
            density = 1.0 if own is None else own
        return fmt, density

    def weight_nm(self, op) -> tuple[int, int] | None:
        """The N:M sparsity ``op``'s stored weights have under these options (None: dense;
        row-wise: the largest N, :meth:`weight_nm_rows` the mix)."""
        if self.sparsity is None:
            return getattr(op, "weight_nm", None)
        from hw.sparsity import parse_sparsity
        return parse_sparsity(self.sparsity)[0]

    def weight_nm_rows(self, op) -> tuple[tuple[int, int], ...] | None:
        """Row-wise N:M of ``op``'s weights under these options: ``((N, channels), ...)`` of
        :meth:`weight_nm`'s M, largest N first, as weights of a mix
        (:func:`hw.sparsity.scale_mix`); None when every channel has the same N."""
        if self.sparsity is None:
            return getattr(op, "weight_nm_rows", None)
        from hw.sparsity import parse_sparsity
        return parse_sparsity(self.sparsity)[1]


def _ratio(value, where: str, text) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            value = None
    if (value is None or isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not math.isfinite(value) or not 0 <= value <= 1):
        raise ValueError(f"{where} = {text!r}: must be a ratio in 0..1 or PATTERN=RATIO,... "
                         f"(e.g. 0.5, or 'conv*=0.6,fc=0.3')")
    return float(value)


def parse_act_zeros(spec, where: str = "act_zeros") -> tuple[tuple[str, float], ...]:
    """``(pattern, ratio)`` pairs of an ``act_zeros`` option (:func:`_parse_act_zeros`)."""
    if isinstance(spec, bool) or not isinstance(spec, (str, int, float)):
        raise ValueError(f"{where} = {spec!r}: must be a ratio in 0..1 or PATTERN=RATIO,... "
                         f"(e.g. 0.5, or 'conv*=0.6,fc=0.3')")
    return _parse_act_zeros(spec, where)


@lru_cache(maxsize=256)
def _parse_act_zeros(spec, where: str) -> tuple[tuple[str, float], ...]:
    """``(pattern, ratio)`` pairs of an ``act_zeros`` option: a ratio in 0..1 (every op: the
    pattern ``*``) or ``"PATTERN=RATIO,..."`` (op-name patterns, first match wins). Raises a
    one-line ``ValueError`` naming ``where`` and the value."""
    if not isinstance(spec, str):
        return (("*", _ratio(spec, where, spec)),)
    items = [item.strip() for item in spec.split(",")]
    if not all(items):
        raise ValueError(f"{where} = {spec!r}: an empty item; write a ratio in 0..1 or "
                         f"PATTERN=RATIO,... (e.g. 'conv*=0.6,fc=0.3')")
    out = []
    for item in items:
        pattern, eq, ratio = item.rpartition("=")
        if not eq:
            if len(items) > 1:
                raise ValueError(f"{where} = {spec!r}: item {item!r} lacks PATTERN= (a bare "
                                 f"ratio stands alone)")
            pattern = "*"
        if eq and not pattern.strip():
            raise ValueError(f"{where} = {spec!r}: item {item!r} has no op-name pattern")
        out.append((pattern.strip(), _ratio(ratio.strip(), where, spec)))
    return tuple(out)


def parse_weight_format(spec, where: str = "weight_format") -> tuple[str, float | None]:
    """``(format, density or None)`` of a ``weight_format`` option, ``"csr"`` or
    ``"csr:0.3"``. Raises a one-line ``ValueError`` naming ``where`` and the value."""
    if not isinstance(spec, str):
        raise ValueError(f"{where} = {spec!r}: must be FORMAT or FORMAT:DENSITY, FORMAT one of "
                         f"{', '.join(WEIGHT_FORMATS)}")
    return _parse_weight_format(spec, where)


@lru_cache(maxsize=64)
def _parse_weight_format(spec: str, where: str) -> tuple[str, float | None]:
    fmt, colon, density = spec.partition(":")
    if fmt not in WEIGHT_FORMATS:
        raise ValueError(f"{where} = {spec!r}: format {fmt!r} must be one of "
                         f"{', '.join(WEIGHT_FORMATS)} (N:M structured sparsity is --sparsity)")
    if not colon:
        return fmt, None
    try:
        value = float(density)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 <= value <= 1:
        raise ValueError(f"{where} = {spec!r}: density {density!r} must be a fraction of "
                         f"nonzero weights in 0..1")
    return fmt, value
