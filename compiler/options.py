"""The compiler choices a user can make (:class:`CompileOptions`) and the names they take.

Kept apart from the systolic backend (:mod:`compiler.backends.systolic`) so the command line
can list the choices in its help without loading the models (this module imports nothing heavy).
"""

from __future__ import annotations

from dataclasses import dataclass

from hw.energy.tech import DEFAULT_TECHNOLOGY

__all__ = ["CompileOptions", "CONV_LOWERINGS", "SRAM_LAYOUTS", "MAP_MODES", "ORDERS",
           "PLACEMENTS", "MAX_STAGES"]

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
    """

    conv_lowering: str = "direct"
    loop_order: str | None = None
    keep_on_chip: bool = True
    sram_layout: str = "matched"
    objective: str = "latency"
    map: str | None = None
    tech: str = DEFAULT_TECHNOLOGY
    fusion: bool = True
    placement: str = "split"
    stages: int | None = None
    sparsity: str | None = None

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
            raise ValueError(f"fusion = {self.fusion!r}: must be true or false")
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
            from hw.sparsity import parse_nm     # numpy: not on the CLI's --help path
            parse_nm(self.sparsity)      # raises a one-line ValueError naming the value
        if not isinstance(self.tech, str) or not self.tech:
            raise ValueError(f"tech = {self.tech!r}: must be an energy table name or TOML path")

    def weight_nm(self, op) -> tuple[int, int] | None:
        """The N:M sparsity ``op``'s stored weights have under these options (None: dense)."""
        if self.sparsity is None:
            return getattr(op, "weight_nm", None)
        from hw.sparsity import parse_nm
        return parse_nm(self.sparsity)
