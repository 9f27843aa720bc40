"""LLM inference on a system of chips: one layer's kernels, or a batch's prefill and decode.

:func:`llm_layer` times one decoder layer of one step (:mod:`compiler.frontends.llm_step`) on
one tensor-parallel rank of a system: every compute kernel alone on the system's device
(:func:`npulab.devices.device_model`: a simulated npulab chip runs it through the run pipeline,
a roofline device costs it), every all-reduce on the system's network
(:func:`npulab.system_run.comm_time_for`). The kernels run one after another, as a framework
launches them, so the layer's time is the sum of its kernels' latencies; a kernel's latency is
its device time plus the chip's launch overhead for its kind (``a100_like``: LLMCompass's
measured per-kernel overheads; ``launch=False`` leaves them out, as a CUDA graph would).

:func:`llm_generate` runs one batch of equal requests: the prefill of ``prompt`` tokens gives
the first output token (time to first token: embedding, every layer, final norm, LM head,
sampling), then ``output - 1`` decode steps each add one token per sequence at KV lengths
``prompt .. prompt + output - 2`` (time per output token: their mean). With ``pp`` pipeline
stages the layers are split evenly and one batch crosses the stages in turn, each hand-off a
point-to-point send of the step's activations.

Kernels are simulated once per distinct shape (a cache shared by every step), the distinct ones
of a call in parallel worker processes (``jobs``, default all cores). Decode attention reads
the paged KV cache in whole blocks (``kv_block`` tokens, default 16 as vLLM), so the decode
steps of one block share their attention kernels.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from compiler.frontends.llm import DecoderConfig, get_llm, llm_names, load_llm_config
from compiler.frontends.llm_step import (StepOp, StepShape, check_int, check_layout,
                                         context_warning,
                                         head_ops, kv_cache_bytes, layer_ops, weight_bytes)
from hw.system.system import SystemConfig

__all__ = ["KernelTimer", "LayerResult", "GenerateResult", "llm_layer", "llm_generate",
           "resolve_llm", "resolve_system", "kv_in_l2", "KV_PLACEMENTS"]


def resolve_llm(name: str | DecoderConfig) -> DecoderConfig:
    """A :class:`DecoderConfig`, a preset name, or a TOML file with an ``[llm]`` table."""
    if isinstance(name, DecoderConfig):
        return name
    text = str(name)
    if text in llm_names():
        return get_llm(text)
    if text.endswith(".toml") or "/" in text or Path(text).exists():
        return load_llm_config(text)
    return get_llm(text)            # the unknown-preset error lists the presets


def resolve_system(spec: str | SystemConfig) -> SystemConfig:
    """A system preset or file (:func:`hw.system.system.load_system`), or one chip: a chip
    preset name (``a100_like``) or chip TOML file is a system of that one chip."""
    if isinstance(spec, SystemConfig):
        return spec
    from hw.presets import chip_preset_names
    from hw.system.system import load_system, system_names
    text = str(spec)
    if text not in system_names() and (text in chip_preset_names() or (
            text.endswith(".toml") and Path(text).is_file()
            and "\n[system]" not in "\n" + Path(text).read_text(errors="replace"))):
        from dataclasses import replace
        return replace(load_system("fc:1", device=text), name=Path(text).stem)
    return load_system(text)


def _cost_hint(op) -> float:
    """A size to order the simulations by (the longest first balances the workers)."""
    return float(op.macs or op.traffic_bytes(2))


class KernelTimer:
    """Times a step's kernels on ``system``: compute kernels on its device (cached per shape,
    the uncached ones simulated in ``jobs`` processes), collectives over the ranks of each
    ``groups`` entry on its network (cached per size)."""

    def __init__(self, system: SystemConfig, *, dtype_bytes: int = 2, launch: bool = True,
                 jobs: int | None = None, progress: Callable | None = None,
                 chip_loader: Callable | None = None):
        from npulab.devices import device_model
        from npulab.system_run import comm_time_for
        if jobs is not None:
            check_int("jobs", jobs, 1, 1024)
        self.system = system
        self.device = device_model(system.device, dtype_bytes, chip_loader)
        # a simulated chip computes at its own precision: the sizes of what it moves follow
        self.dtype_bytes = getattr(self.device, "element_bytes", dtype_bytes)
        self.launch = launch
        self.jobs = jobs
        self.progress = progress
        self._comm = comm_time_for(system)
        self._roofline: dict = {}
        self.simulated = 0          # distinct kernels simulated so far
        self.sim_seconds = 0.0      # wall time spent simulating them

    # -- compute kernels ---------------------------------------------------------------------
    def _record(self, op) -> dict:
        from npulab.devices import _shape_key, op_cost
        key = _shape_key(op)
        run = getattr(self.device, "op_run", None)
        if run is not None:
            if key not in self.device._cache:      # not prefetched: simulated here
                t0 = time.perf_counter()
                record = run(op)
                self.simulated += 1
                self.sim_seconds += time.perf_counter() - t0
                return record
            return run(op)
        if key not in self._roofline:
            flops, nbytes, _ = op_cost(op, self.dtype_bytes)
            t = self.device.op_seconds(op)
            self._roofline[key] = {"device_s": t, "launch_s": 0.0, "cycles": None,
                                   "dram_read_bytes": int(nbytes), "dram_write_bytes": 0,
                                   "bound": ""}
        return self._roofline[key]

    def prefetch(self, ops: list[StepOp]) -> None:
        """Simulate every distinct compute kernel of ``ops`` not yet cached (a simulated chip
        only), in worker processes when more than one is missing and ``jobs`` allows."""
        from npulab.devices import _shape_key, simulate_op
        cache = getattr(self.device, "_cache", None)
        if cache is None:
            return
        todo: dict = {}
        for s in ops:
            if s.op is not None:
                key = _shape_key(s.op)
                if key not in cache and key not in todo:
                    todo[key] = s.op
        if not todo:
            return
        t0 = time.perf_counter()
        items = sorted(todo.items(), key=lambda kv: -_cost_hint(kv[1]))
        jobs = self.jobs or os.cpu_count() or 1
        total = len(items)
        if self.progress:
            self.progress(0, total, "")
        if jobs > 1 and total > 2:
            from concurrent.futures import ProcessPoolExecutor, as_completed
            from npulab.sweep.executors import _pool_context
            # the cheapest kernel here first: it loads the compiled kernels, which the forked
            # workers then share instead of each loading them again
            key, op = items.pop()
            cache[key] = simulate_op(self.device.spec, op)
            if self.progress:
                self.progress(1, total, op.name)
            with ProcessPoolExecutor(max_workers=min(jobs, len(items)),
                                     mp_context=_pool_context()) as pool:
                futures = {pool.submit(simulate_op, self.device.spec, op): key
                           for key, op in items}
                for done, fut in enumerate(as_completed(futures), 2):
                    cache[futures[fut]] = fut.result()
                    if self.progress:
                        self.progress(done, total, todo[futures[fut]].name)
        else:
            for done, (key, op) in enumerate(items, 1):
                cache[key] = simulate_op(self.device.spec, op)
                if self.progress:
                    self.progress(done, total, op.name)
        self.simulated += total
        self.sim_seconds += time.perf_counter() - t0

    def kernel(self, s: StepOp, ranks: list[tuple[int, ...]]) -> dict:
        """One step kernel's timing row (``repeat`` times); ``ranks``: the tensor-parallel
        groups its collectives run over (all at once)."""
        if s.op is None:
            if s.group:
                ranks = [tuple(range(s.group))]
            t = self._comm(s.collective, float(s.nbytes), ranks) * s.repeat
            return {"name": s.name, "kind": "collective", "repeat": s.repeat, "latency_s": t,
                    "device_s": t, "launch_s": 0.0, "flops": 0, "dram_bytes": 0,
                    "comm_bytes": s.nbytes * s.repeat, "bound": "network"}
        r = self._record(s.op)
        launch = r["launch_s"] if self.launch else 0.0
        return {"name": s.name, "kind": "compute", "repeat": s.repeat,
                "latency_s": (r["device_s"] + launch) * s.repeat,
                "device_s": r["device_s"] * s.repeat, "launch_s": launch * s.repeat,
                "flops": s.flops, "dram_bytes": (r["dram_read_bytes"] + r["dram_write_bytes"])
                * s.repeat, "comm_bytes": 0, "bound": r["bound"]}


KV_PLACEMENTS = ("auto", "dram", "l2")


def kv_in_l2(placement: str, timer: KernelTimer, kv_bytes: float) -> bool:
    """Where the KV cache lives: ``dram``, ``l2`` (held in the chip's L2), or ``auto``: the L2
    when the chip has one and the whole cache of a chip (every layer's: the weights stream
    through the L2 between them) fits the half of it kept tensors may take, else DRAM."""
    if placement not in KV_PLACEMENTS:
        raise ValueError(f"kv_placement = {placement!r}: must be one of "
                         f"{', '.join(KV_PLACEMENTS)}")
    if placement != "auto":
        return placement == "l2"
    config = getattr(getattr(timer.device, "spec", None), "config", None)
    l2 = getattr(config, "l2", None)
    return bool(l2 is not None and l2.present and l2.keep_outputs
                and kv_bytes <= l2.capacity_bytes // 2)


#: A timing row's quantities that add up (over repeats, layers and steps).
_SUMMED = ("repeat", "latency_s", "device_s", "launch_s", "flops", "dram_bytes", "comm_bytes")


def _scaled(row: dict, times: int) -> dict:
    """``row`` run ``times`` times (every layer of a model)."""
    return dict(row, **{k: row[k] * times for k in _SUMMED})


def _accumulate(acc: dict[str, dict], rows) -> None:
    """Add ``rows`` into ``acc`` by name (a new name keeps its first-seen place)."""
    for r in rows:
        m = acc.get(r["name"])
        if m is None:
            acc[r["name"]] = dict(r)
        else:
            for k in _SUMMED:
                m[k] += r[k]


def _merge(rows: list[dict]) -> list[dict]:
    """Rows of the same name (a split attention's chunks) summed, in first-seen order."""
    acc: dict[str, dict] = {}
    _accumulate(acc, rows)
    return list(acc.values())


def _tp_groups(system: SystemConfig, tp: int, pp: int = 1, ep: int = 1
               ) -> list[tuple[int, ...]]:
    """The tensor-parallel groups of one pipeline stage (ranks 0..tp-1: the first stage's;
    every stage's groups are alike on a symmetric network); a stage takes ``max(tp, ep)``
    chips (expert parallelism with data-parallel attention: ``ep`` ranks)."""
    n = system.topology.n_ranks
    width = max(tp, ep)
    if width * pp > n:
        what = f"tp x pp = {tp} x {pp}" if width == tp else f"ep x pp = {ep} x {pp}"
        raise ValueError(f"{what} = {width * pp}: the system {system.name!r} has {n} chips")
    return [tuple(range(tp))]


@dataclass
class LayerResult:
    """One decoder layer of one step on one tensor-parallel rank: ``ops`` rows (name, kind,
    repeat, latency_s, device_s, launch_s, flops, dram_bytes, comm_bytes, bound) in launch
    order, and their sum ``total_s``."""

    model: str
    system: str
    device: str
    phase: str
    shape: StepShape
    tp: int
    ep: int
    ops: list[dict]
    sim_seconds: float = 0.0
    kernels_simulated: int = 0
    warnings: list[str] = field(default_factory=list)
    kv_placement: str = "dram"

    @property
    def total_s(self) -> float:
        return sum(r["latency_s"] for r in self.ops)

    def to_dict(self) -> dict:
        return {"model": self.model, "system": self.system, "device": self.device,
                "phase": self.phase, "batch": self.shape.batch,
                "new_tokens": self.shape.new_tokens, "context": self.shape.context,
                "tp": self.tp, "ep": self.ep, "ops": [dict(r) for r in self.ops],
                "total_s": self.total_s, "kv_placement": self.kv_placement,
                "warnings": list(self.warnings),
                "simulation": {"kernels_simulated": self.kernels_simulated,
                               "seconds": self.sim_seconds}}

    def to_pandas(self):
        import pandas as pd
        return pd.DataFrame(self.ops)


def _check_launch(launch: object) -> None:
    if not isinstance(launch, bool):
        raise ValueError(f"launch = {launch!r}: must be True or False")


def llm_layer(model, system: SystemConfig | str, *, phase: str, batch: int = 1, prompt: int = 0,
              kv_len: int = 0, tp: int = 1, ep: int = 1, launch: bool = True,
              kv_block: int = 1, jobs: int | None = None, progress: Callable | None = None,
              timer: KernelTimer | None = None, weight_bits: int | None = None,
              kv_bits: int | None = None, kv_placement: str = "auto") -> LayerResult:
    """One layer of a ``prefill`` (``batch`` prompts of ``prompt`` tokens) or a ``decode``
    step (``batch`` sequences, one new token each, ``kv_len`` tokens already cached) on one of
    ``tp`` ranks of ``system`` (module docstring). ``timer``: a :class:`KernelTimer` to share
    (its cache and launch setting) across calls. ``weight_bits`` / ``kv_bits``: weight-only
    quantization (8, 4) and an fp8 KV cache (8) (:func:`~compiler.frontends.llm_step.layer_ops`);
    ``kv_placement``: :func:`kv_in_l2`."""
    cfg = resolve_llm(model)
    system = resolve_system(system)
    _check_launch(launch)
    if phase == "prefill":
        shape = StepShape(batch, prompt, 0)
    elif phase == "decode":
        shape = StepShape(batch, 1, kv_len)
    else:
        raise ValueError(f"phase = {phase!r}: must be prefill or decode")
    check_layout(cfg, tp, ep)
    groups = _tp_groups(system, tp, 1, ep)
    timer = timer or KernelTimer(system, launch=launch, jobs=jobs, progress=progress)
    kv_eb = kv_bits / 8 if kv_bits else timer.dtype_bytes
    per_rank = batch // ep if tp == 1 and ep > 1 else batch     # data-parallel attention
    in_l2 = kv_in_l2(kv_placement, timer,
                     kv_cache_bytes(cfg, per_rank * shape.keys, tp, kv_eb))
    ops = layer_ops(cfg, shape, tp, ep, dtype_bytes=timer.dtype_bytes, kv_block=kv_block,
                    weight_bits=weight_bits, kv_bits=kv_bits, kv_in_l2=in_l2)
    before, t0 = timer.simulated, timer.sim_seconds
    timer.prefetch(ops)
    rows = _merge([timer.kernel(s, groups) for s in ops])
    warning = context_warning(cfg, shape)
    return LayerResult(cfg.name, system.name, timer.device.name, phase, shape, tp, ep, rows,
                       timer.sim_seconds - t0, timer.simulated - before,
                       [warning] if warning else [], "l2" if in_l2 else "dram")


@dataclass
class GenerateResult:
    """A batch's prefill and decode: ``ttft_s`` (the prefill step, which yields the first
    token), ``decode_s`` (each decode step's time, in order), ``phases`` (per phase, each
    kernel's time summed over layers and steps)."""

    model: str
    system: str
    device: str
    batch: int
    prompt: int
    output: int
    tp: int
    pp: int
    ep: int
    ttft_s: float
    decode_s: list[float]
    phases: dict[str, list[dict]] = field(default_factory=dict)
    kv_cache_bytes_per_chip: float = 0.0
    weight_bytes_per_chip: float = 0.0
    memory_bytes: float | None = None
    sim_seconds: float = 0.0
    kernels_simulated: int = 0
    warnings: list[str] = field(default_factory=list)
    kv_placement: str = "dram"

    @property
    def tpot_s(self) -> float:
        """Mean time per output token after the first (0 with one output token)."""
        return sum(self.decode_s) / len(self.decode_s) if self.decode_s else 0.0

    @property
    def total_s(self) -> float:
        return self.ttft_s + sum(self.decode_s)

    @property
    def tokens_per_s(self) -> float:
        """Output tokens of the whole batch per second of end-to-end latency."""
        return self.batch * self.output / self.total_s

    @property
    def fits(self) -> bool | None:
        if self.memory_bytes is None:
            return None
        return self.weight_bytes_per_chip + self.kv_cache_bytes_per_chip <= self.memory_bytes

    def to_dict(self) -> dict:
        return {"model": self.model, "system": self.system, "device": self.device,
                "batch": self.batch, "prompt": self.prompt, "output": self.output,
                "tp": self.tp, "pp": self.pp, "ep": self.ep, "ttft_s": self.ttft_s,
                "tpot_s": self.tpot_s, "total_s": self.total_s,
                "tokens_per_s": self.tokens_per_s, "decode_s": list(self.decode_s),
                "weight_bytes_per_chip": self.weight_bytes_per_chip,
                "kv_cache_bytes_per_chip": self.kv_cache_bytes_per_chip,
                "memory_bytes": self.memory_bytes, "fits": self.fits,
                "kv_placement": self.kv_placement,
                "phases": {k: [dict(r) for r in v] for k, v in self.phases.items()},
                "warnings": list(self.warnings), "simulation": {"kernels_simulated": self.kernels_simulated,
                               "seconds": self.sim_seconds}}


def _stage_layers(layers: int, pp: int) -> list[int]:
    base, extra = divmod(layers, pp)
    return [base + (1 if i < extra else 0) for i in range(pp)]


def llm_generate(model, system: SystemConfig | str, *, batch: int = 1, prompt: int,
                 output: int, tp: int = 1, pp: int = 1, ep: int = 1, launch: bool = True,
                 kv_block: int = 16, jobs: int | None = None, progress: Callable | None = None,
                 weight_bits: int | None = None, kv_bits: int | None = None,
                 kv_placement: str = "auto") -> GenerateResult:
    """``batch`` requests of ``prompt`` tokens each generating ``output`` tokens, on ``tp x
    pp`` chips of ``system`` (module docstring); ``weight_bits`` / ``kv_bits`` as
    :func:`llm_layer`'s."""
    cfg = resolve_llm(model)
    system = resolve_system(system)
    _check_launch(launch)
    check_int("output", output, 1, 1 << 20)
    check_int("pp", pp, 1, 4096)
    if pp > cfg.layers:
        raise ValueError(f"pp = {pp}: {cfg.name} has only {cfg.layers} layers to split")
    last = StepShape(batch, 1, prompt + output - 1) if output > 1 else StepShape(batch, prompt)
    layer_ops(cfg, last, tp, ep, kv_block=kv_block, weight_bits=weight_bits,
              kv_bits=kv_bits)                           # checks the layout and the widths
    groups = _tp_groups(system, tp, pp, ep)
    timer = KernelTimer(system, launch=launch, jobs=jobs, progress=progress)
    dtype_bytes = timer.dtype_bytes
    kv_eb = kv_bits / 8 if kv_bits else dtype_bytes
    ranks = ep if tp == 1 and ep > 1 else 1         # data-parallel attention: batch / ep each
    in_l2 = kv_in_l2(kv_placement, timer,
                     kv_cache_bytes(cfg, batch * (prompt + output) // ranks, tp, kv_eb))
    steps = [StepShape(batch, prompt, 0)] + [StepShape(batch, 1, prompt + i)
                                            for i in range(output - 1)]
    step_ops = [(layer_ops(cfg, s, tp, ep, dtype_bytes=dtype_bytes, kv_block=kv_block,
                           weight_bits=weight_bits, kv_bits=kv_bits, kv_in_l2=in_l2),
                 head_ops(cfg, s, tp, dtype_bytes=dtype_bytes, ep=ep)) for s in steps]
    timer.prefetch([o for lay, head in step_ops for o in lay + head])
    stages = _stage_layers(cfg.layers, pp)
    phases: dict[str, dict[str, dict]] = {"prefill": {}, "decode": {}}
    times = []
    for shape, (lay, head) in zip(steps, step_ops):
        acc = phases["prefill" if shape.context == 0 else "decode"]
        rows = [_scaled(r, cfg.layers) for r in _merge([timer.kernel(s, groups) for s in lay])]
        rows += [dict(r, name=f"head.{r['name']}") for r in
                 (timer.kernel(s, groups) for s in head)]
        if pp > 1:
            hand = shape.tokens * cfg.d_model * dtype_bytes
            send = timer._comm("broadcast", float(hand), [(0, max(tp, ep))])
            rows.append({"name": "pipeline_send", "kind": "collective", "repeat": pp - 1,
                         "latency_s": send * (pp - 1), "device_s": send * (pp - 1),
                         "launch_s": 0.0, "flops": 0, "dram_bytes": 0,
                         "comm_bytes": hand * (pp - 1), "bound": "network"})
        _accumulate(acc, rows)
        times.append(sum(r["latency_s"] for r in rows))
    max_stage = max(stages)
    weights = weight_bytes(cfg, tp, dtype_bytes, weight_bits, layers=max_stage, ep=ep)
    kv = kv_cache_bytes(cfg, batch * (prompt + output) // ranks, tp, kv_eb, layers=max_stage)
    return GenerateResult(
        cfg.name, system.name, timer.device.name, batch, prompt, output, tp, pp, ep,
        times[0], times[1:], {k: list(v.values()) for k, v in phases.items() if v},
        kv, weights, timer.device.memory_bytes, timer.sim_seconds, timer.simulated,
        [w for w in [context_warning(cfg, last)] if w], "l2" if in_l2 else "dram")
