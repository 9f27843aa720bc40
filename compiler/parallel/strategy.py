"""A parallelization strategy (data / tensor / pipeline, ZeRO, recomputation) and its parser.

``parse_strategy("dp=2,tp=4,pp=2,zero=1,schedule=gpipe")``: comma-separated ``key=value`` pairs;
every key is optional. Ranks are laid out in Megatron-LM order (Narayanan et al. 2021, §3.3):
tensor-parallel index innermost, then data-parallel, then pipeline stage outermost::

    rank = tp_i + tp * (dp_i + dp * pp_i)

so a TP group is ``tp`` consecutive ranks (one NVSwitch node when ``tp = 8``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

__all__ = ["Strategy", "parse_strategy", "SCHEDULES", "RECOMPUTE"]

SCHEDULES = ("1f1b", "gpipe")
RECOMPUTE = ("none", "full", "selective")


def _bad(key: str, value: object, allowed: str) -> ValueError:
    return ValueError(f"strategy: {key} = {value!r}: must be {allowed}")


@dataclass(frozen=True)
class Strategy:
    """How one training step is split over ``dp * tp * pp`` ranks.

    ``microbatches`` = micro-batches per step per data-parallel replica; ``None`` derives it from
    the model (``global_batch / (dp * micro_batch)``). ``interleave`` = virtual pipeline stages
    per rank (Megatron's interleaved 1F1B, Narayanan et al. 2021 §2.2.2; 1 = plain).
    ``bucket_mb`` = gradient bucket size in MiB (PyTorch DDP's default ``bucket_cap_mb`` is 25).
    ``stage_layers`` = layers on each pipeline stage, first to last (uneven stages, e.g. fewer
    layers on the stages that also hold the embedding or the logits; Megatron-LM's
    ``--decoder-first/last-pipeline-num-layers``); ``None`` splits the layers evenly.
    ``offload`` = keep the fp32 master weights and Adam's moments in host memory and run the
    update on the CPU (ZeRO-Offload, Ren et al., USENIX ATC'21).
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    microbatches: int | None = None
    schedule: str = "1f1b"
    zero: int = 0
    recompute: str = "none"
    sequence_parallel: bool = False
    bucket_mb: float = 25.0
    overlap_dp: bool = True
    interleave: int = 1
    stage_layers: tuple | None = None
    offload: bool = False

    def __post_init__(self) -> None:
        for key in ("dp", "tp", "pp", "interleave"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise _bad(key, v, "an integer >= 1")
        m = self.microbatches
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise _bad("microbatches", m, "an integer >= 1 (or omitted: derived from the batch)")
        if self.schedule not in SCHEDULES:
            raise _bad("schedule", self.schedule, f"one of {', '.join(SCHEDULES)}")
        if isinstance(self.zero, bool) or self.zero not in (0, 1, 2, 3):
            raise _bad("zero", self.zero, "0, 1, 2 or 3 (ZeRO stage)")
        if self.recompute not in RECOMPUTE:
            raise _bad("recompute", self.recompute, f"one of {', '.join(RECOMPUTE)}")
        for key in ("sequence_parallel", "overlap_dp", "offload"):
            if not isinstance(getattr(self, key), bool):
                raise _bad(key, getattr(self, key), "true or false")
        bm = self.bucket_mb
        if isinstance(bm, bool) or not isinstance(bm, (int, float)) or not bm > 0:
            raise _bad("bucket_mb", bm, "a number > 0 (MiB)")
        if self.interleave > 1 and self.schedule != "1f1b":
            raise _bad("interleave", self.interleave, "1 with schedule=gpipe (interleaving is a "
                       "1F1B schedule)")
        sl = self.stage_layers
        if sl is not None:
            if isinstance(sl, list):
                sl = tuple(sl)
                object.__setattr__(self, "stage_layers", sl)
            if (not isinstance(sl, tuple) or len(sl) != self.pp or any(
                    isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in sl)):
                raise _bad("stage_layers", sl, f"{self.pp} integers >= 1 (one per pipeline "
                           f"stage), e.g. {'/'.join(['24'] * self.pp)}")
            if self.interleave > 1:
                raise _bad("stage_layers", "/".join(map(str, sl)), "omitted with interleave > 1 "
                           "(interleaved stages are even)")
        if self.zero and self.dp == 1:
            raise _bad("zero", self.zero, "0 when dp = 1 (ZeRO shards state over data-parallel "
                       "ranks; give dp > 1)")

    @property
    def n_ranks(self) -> int:
        return self.dp * self.tp * self.pp

    def rank(self, tp_i: int, dp_i: int, pp_i: int) -> int:
        """Logical rank of (tp index, dp index, stage) in Megatron order."""
        return tp_i + self.tp * (dp_i + self.dp * pp_i)

    def validate(self, n_ranks: int, *, layers: int | None = None, heads: int | None = None,
                 global_batch: int | None = None, micro_batch: int | None = None) -> int:
        """Check the strategy against a system and model; return the micro-batch count.

        Raises ValueError naming the key: ``dp*tp*pp != n_ranks``, ``tp`` not dividing ``heads``,
        ``pp * interleave`` not dividing ``layers`` (without stage_layers), a global
        batch that the data-parallel replicas and micro-batches do not split evenly, or
        interleaving with a micro-batch count that is not a multiple of ``pp`` (Megatron-LM's
        requirement).
        """
        if self.n_ranks != n_ranks:
            raise ValueError(f"strategy: dp*tp*pp = {self.dp}*{self.tp}*{self.pp} = "
                             f"{self.n_ranks}: must equal the number of ranks, {n_ranks}")
        if heads is not None and heads % self.tp:
            raise _bad("tp", self.tp, f"a divisor of the model's heads = {heads}")
        if layers is not None and self.stage_layers is not None:
            if sum(self.stage_layers) != layers:
                raise _bad("stage_layers", "/".join(map(str, self.stage_layers)),
                           f"layers per stage that add up to the model's layers = {layers}")
        elif layers is not None and layers % (self.pp * self.interleave):
            raise _bad("pp", self.pp, f"such that pp * interleave = {self.pp * self.interleave} "
                       f"divides the model's layers = {layers} (or give stage_layers)")
        m = self.microbatches
        if m is None:
            if global_batch is None:
                m = 1
            else:
                mb = micro_batch or 1
                if global_batch % (self.dp * mb):
                    raise _bad("dp", self.dp, f"a divisor of global_batch / micro_batch = "
                               f"{global_batch} / {mb}")
                m = global_batch // (self.dp * mb)
        if self.interleave > 1 and m % self.pp:
            raise _bad("microbatches", m, f"a multiple of pp = {self.pp} with interleave > 1")
        return m

    def to_dict(self) -> dict:
        return asdict(self)


_BOOL = {"1": True, "true": True, "yes": True, "on": True,
         "0": False, "false": False, "no": False, "off": False}


def parse_strategy(text: str) -> Strategy:
    """``"dp=2,tp=4,pp=2,zero=1,schedule=gpipe,recompute=selective,sp=true"`` -> Strategy.

    Keys: the :class:`Strategy` fields; ``sp`` is short for ``sequence_parallel`` and ``m`` /
    ``mb`` for ``microbatches``, ``v`` for ``interleave``; ``stage_layers`` is a slash-separated
    list (``pp=4,stage_layers=23/25/25/23``). Errors name the key, the value and
    what is allowed.
    """
    if not isinstance(text, str):
        raise ValueError(f"strategy: {text!r}: must be a string like 'dp=2,tp=4,pp=2'")
    aliases = {"sp": "sequence_parallel", "m": "microbatches", "mb": "microbatches",
               "v": "interleave"}
    kinds = {f.name: f.type for f in fields(Strategy)}
    values: dict[str, object] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise ValueError(f"strategy: {part!r}: expected key=value (keys: "
                             f"{', '.join(kinds)})")
        key, raw = (x.strip() for x in part.split("=", 1))
        key = aliases.get(key.lower(), key.lower())
        if key not in kinds:
            raise ValueError(f"strategy: unknown key {key!r}; allowed: {', '.join(kinds)}")
        if key in values:
            raise ValueError(f"strategy: key {key!r} given twice")
        kind = kinds[key]
        if key in ("schedule", "recompute"):
            values[key] = raw.lower()
        elif key in ("sequence_parallel", "overlap_dp", "offload"):
            if raw.lower() not in _BOOL:
                raise _bad(key, raw, "true or false")
            values[key] = _BOOL[raw.lower()]
        elif key == "stage_layers":
            try:
                values[key] = tuple(int(x) for x in raw.split("/"))
            except ValueError:
                raise _bad(key, raw, "layers per stage separated by '/', e.g. 23/25/25/23") \
                    from None
        elif key == "bucket_mb":
            try:
                values[key] = float(raw)
            except ValueError:
                raise _bad(key, raw, "a number > 0 (MiB)") from None
        else:
            assert "int" in str(kind)
            try:
                values[key] = int(raw)
            except ValueError:
                raise _bad(key, raw, "an integer") from None
    return Strategy(**values)
