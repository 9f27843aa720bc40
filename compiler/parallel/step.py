"""The training-step planner: one step of data, tensor and pipeline parallel training.

``plan_step(model, strategy, n_ranks, rank_map, op_time, comm_time)`` composes a step from two
callbacks so that ``compiler`` stays independent of the device and network models::

    op_time(op) -> seconds           one IR op on one chip (npulab wires a roofline or a chip sim)
    comm_time(op, nbytes, groups)    a collective run by all ``groups`` at once (npulab wires
                                     hw.system.collectives.collective(...).time_s)

``nbytes`` follows nccl-tests: the whole buffer for all-reduce / broadcast, the full gathered
buffer for all-gather / reduce-scatter. A point-to-point pipeline send is a ``"broadcast"`` over
the 2-rank group ``(sender, receiver)``.

Step composition (per data-parallel replica; every rank of a stage does the same work):

1. **Stage work per micro-batch.** Forward and backward of the stage's layers on the TP-split
   ops (:meth:`TransformerModel.layer_ops`, :func:`backward_ops`), plus recomputation (``full``:
   the forward again before the backward; ``selective``: only the attention core -- scores,
   softmax, dropout, context -- Korthikanti et al. 2022 §5), plus the TP collectives, which sit
   on the critical path. Per layer per micro-batch: 2 all-reduces of ``b*s*h`` elements forward
   and 2 backward (Megatron-LM), 2 more with full recompute (the recomputed forward repeats
   them). With sequence parallelism each all-reduce becomes an all-gather + reduce-scatter of the
   same buffer, and the backward re-gathers the 2 sharded layer-norm outputs for the weight
   gradients (Megatron-LM does not keep the gathered input), so 2 AG + 2 RS forward and
   4 AG + 2 RS backward. The first stage adds the vocab-parallel embedding's all-reduce (SP:
   reduce-scatter), the last stage the logits input's backward all-reduce (SP: AG fwd + RS bwd).
2. **Pipeline.** The per-stage times run through
   :func:`~compiler.parallel.pipeline.simulate_pipeline` (GPipe, 1F1B,
   interleaved 1F1B) with the measured send time per boundary: ``b*s*h/t`` elements per TP rank
   (Megatron's scatter/gather optimisation, Narayanan et al. 2021 §4.1), forward and backward.
   With more than one stage, the tied embedding gradients (``v*h/t``) are all-reduced between the
   first and last stage after the backward (exposed, counted as ``pp``).
3. **Data parallelism.** Gradients are bucketed (``bucket_mb`` MiB) in backward order. With
   ``overlap_dp`` a bucket's all-reduce (ZeRO-1/2: reduce-scatter) may start once the backward of
   the last micro-batch has produced it (uniformly over that backward) and buckets go one after
   another; the exposed part is what ends after the stage's last backward. Without overlap all
   buckets run after it. ZeRO-1/2 then all-gather the updated parameters (exposed); ZeRO-3
   all-gathers the stage's parameters before every micro-batch's forward and backward
   (``2m`` gathers; hidden behind that pass's compute when ``overlap_dp``, else exposed).
4. **Optimizer.** A memory-bound Adam update over the rank's (ZeRO-sharded) parameters:
   ``op_time(Eltwise("adam", elements=P, operands=13))`` -- mixed-precision Adam touches
   28 bytes per parameter (read fp16 grad, fp32 master, m, v; write those three and the fp16
   copy), i.e. 14 accesses of a 2-byte element (``operands + 1``). With ``offload`` the
   update runs on the host instead (:class:`~compiler.parallel.training.HostOffload`: the
   gradient shard down the host link, CPU Adam, the fp16 parameters back).

Breakdown (all seconds, for the busiest rank): ``step = compute + tp + bubble + pp + dp +
optimizer + input``: ``bubble`` = pipeline makespan without send cost minus the rank's busy time,
``pp`` = extra makespan caused by sends (+ the tied-embedding sync), ``dp`` = DP communication
not hidden by compute.

Memory per rank (bytes; Rajbhandari et al. 2020 "ZeRO" §3 for mixed-precision Adam, 16 bytes per
parameter: 2 fp16 weights + 2 fp16 gradients + 12 optimizer state): weights, gradients and
optimizer state divided by ``dp`` per ZeRO stage; activations per layer from Korthikanti et al.
2022 Table 2 (16-bit activations, 1-byte dropout masks; scaled by ``dtype_bytes / 2``)::

    recompute   TP only                         TP + sequence parallel
    none        s*b*h*(10 + 24/t + 5*a*s/(h*t))  s*b*h/t*(34 + 5*a*s/h)
    selective   s*b*h*(10 + 24/t)                34*s*b*h/t
    full        2*s*b*h                          2*s*b*h/t   (+ one layer's full working set)

times the layers per chunk times the most micro-batch chunks in flight on that rank, taken from
the simulated schedule (1F1B: ``min(p - s, m)``; GPipe: ``m``; interleaved: Korthikanti eq. 5).
Embedding / logits activations are not counted.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

from compiler.ir import Eltwise, Gemm, Graph, Op
from compiler.parallel.backward import backward_ops, graph_params, has_weights
from compiler.parallel.formulas import (activation_bytes_per_layer, collective_sent_bytes,
                                        zero_memory_bytes)
from compiler.parallel.llm import TransformerModel, get_model, model_flops
from compiler.parallel.pipeline import simulate_pipeline
from compiler.parallel.strategy import Strategy, parse_strategy
from compiler.parallel.timeline import step_timeline
from compiler.parallel.training import (GradCompression, HostOffload, InputPipeline,
                                        KernelLaunch)
from hw._lazy import lazy_module

np = lazy_module("numpy")   # loaded by the first schedule: the CLI's --help lists models without it

__all__ = ["OpTime", "CommTime", "StepReport", "plan_step", "optimizer_seconds", "KERNELS"]

OpTime = Callable[[Op], float]
CommTime = Callable[[str, float, list], float]


@dataclass
class StepReport:
    """One training step. Seconds for the busiest rank; bytes per rank per step (the maximum
    over pipeline stages) unless a field says otherwise."""

    model: str
    strategy: dict
    n_ranks: int
    microbatches: int
    step_s: float
    compute_s: float              # forward + backward + recompute ops (includes recompute_s)
    recompute_s: float
    exposed_tp_s: float
    exposed_pp_s: float
    exposed_dp_s: float
    bubble_s: float
    optimizer_s: float
    pipeline_s: float             # makespan of the forward/backward pipeline
    critical_stage: int
    samples_per_step: int
    tokens_per_step: int
    model_flops: float            # per step, no recompute (Narayanan et al. 2021 eq. 3)
    peak_flops: float | None
    memory: dict                  # bytes on the rank with the most: params, grads, optimizer,
                                  # activations, total, stage
    device_mem_bytes: float | None
    comm_bytes: dict              # nccl-tests nbytes handed to comm_time: tp, pp, dp
    sent_bytes: dict              # bytes a rank sends (ring algorithms): tp, pp, dp
    stage_memory_bytes: list = field(default_factory=list)
    comm_calls: list = field(default_factory=list)   # distinct comm_time calls made
    input_s: float = 0.0          # the step's wait for its input (what prefetch does not hide)
    input_load_s: float = 0.0     # one batch through the loader (storage + CPU + host copy)
    compress_s: float = 0.0       # gradient compression compute (inside the exposed DP part)
    input_pipeline: dict | None = None
    compression: dict | None = None
    launch: dict | None = None
    kernels: str = "fused"        # fused (Megatron-LM's kernels) or unfused element-wise ops
    timeline: dict | None = None  # plan_step(timeline=True): compiler.parallel.timeline

    @property
    def exposed_comm_s(self) -> float:
        return self.exposed_tp_s + self.exposed_pp_s + self.exposed_dp_s

    @property
    def comm_breakdown(self) -> dict:
        return {"tp": self.exposed_tp_s, "pp": self.exposed_pp_s, "dp": self.exposed_dp_s}

    @property
    def samples_per_s(self) -> float:
        return self.samples_per_step / self.step_s if self.step_s > 0 else math.inf

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s if self.step_s > 0 else math.inf

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilization (Chowdhery et al. 2022, App. B): model FLOPs per second over
        the peak of all ranks; ``None`` without a peak."""
        if not self.peak_flops or self.step_s <= 0:
            return None
        return self.model_flops / (self.step_s * self.n_ranks * self.peak_flops)

    @property
    def fits(self) -> bool | None:
        if self.device_mem_bytes is None:
            return None
        return self.memory["total"] <= self.device_mem_bytes

    def scaling_efficiency(self, baseline: "StepReport") -> float:
        """Throughput per rank relative to ``baseline`` (1.0 = perfect weak/strong scaling)."""
        mine = self.samples_per_s / self.n_ranks
        base = baseline.samples_per_s / baseline.n_ranks
        return mine / base

    # ---- notebook API ------------------------------------------------------------------------

    def breakdown(self) -> dict:
        """Seconds of the step by part: ``compute`` (incl. recompute), ``input`` (the wait for
        data), exposed ``tp``/``pp``/``dp`` communication, pipeline ``bubble``, ``optimizer``."""
        return {"compute": self.compute_s, "input": self.input_s, "tp": self.exposed_tp_s,
                "pp": self.exposed_pp_s,
                "dp": self.exposed_dp_s, "bubble": self.bubble_s, "optimizer": self.optimizer_s}

    def summary_lines(self) -> list[str]:
        st = self.strategy
        mfu = f", MFU {100 * self.mfu:.1f} %" if self.mfu is not None else ""
        fits = {None: "", True: " (fits)", False: " (does NOT fit)"}[self.fits]
        return [
            f"strategy dp={st.get('dp')} tp={st.get('tp')} pp={st.get('pp')} on {self.n_ranks} "
            f"ranks, {self.microbatches} micro-batches",
            f"step {self.step_s * 1e3:.4g} ms: compute {self.compute_s * 1e3:.4g} ms, exposed comm "
            f"{self.exposed_comm_s * 1e3:.4g} ms, bubble {self.bubble_s * 1e3:.4g} ms",
            f"{self.samples_per_s:.4g} samples/s, {self.tokens_per_s:.4g} tokens/s{mfu}",
            f"memory {self.memory['total'] / 1e9:.3g} GB on the busiest rank{fits}",
        ]

    def __repr__(self) -> str:
        return "\n".join([f"StepReport: {self.model}"] + ["  " + x for x in self.summary_lines()])

    def to_pandas(self):
        """One row per pipeline stage: its bytes of parameters, gradients, optimizer state,
        activations and total (the ``stage_memory_bytes`` entries). Needs pandas."""
        from hw._notebook import frame
        keys = list(dict.fromkeys(k for d in self.stage_memory_bytes for k in d))
        return frame(keys, [[d.get(k) for k in keys] for d in self.stage_memory_bytes])

    def plot_breakdown(self):
        """The step time by part (:meth:`breakdown`) as horizontal bars: a matplotlib Figure."""
        from hw._notebook import figure
        parts = self.breakdown()
        fig = figure(6.5, 3.2)
        ax = fig.add_subplot()
        ax.barh(list(parts), [v * 1e3 for v in parts.values()], color="#1f77b4")
        ax.invert_yaxis()
        ax.set_xlabel("ms per step (busiest rank)")
        ax.set_title(f"{self.model}: step {self.step_s * 1e3:.4g} ms", fontsize=10)
        ax.grid(True, axis="x", alpha=0.3)
        return fig

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("timeline")                   # its own view: trace.json (npulab system -o)
        out["breakdown"] = self.breakdown()
        for key in ("exposed_comm_s", "samples_per_s", "tokens_per_s", "mfu", "fits"):
            out[key] = getattr(self, key)
        return out


_SELECTIVE = (".attn.scores", ".attn.softmax", ".attn.dropout", ".attn.context")
_SELECTIVE_EXTRA = (".attn.scale", ".attn.mask")
#: How the layer's element-wise work runs (plan_step's ``kernels``).
KERNELS = ("fused", "unfused")


class _Timer:
    def __init__(self, fn: OpTime):
        self.fn = fn
        self.cache: dict = {}

    def __call__(self, op: Op) -> float:
        if op not in self.cache:
            t = self.fn(op)
            if isinstance(t, bool) or not isinstance(t, (int, float, np.floating)) \
                    or not math.isfinite(t) or t < 0:
                raise ValueError(f"plan_step: op_time({op.name!r}) returned {t!r}: must be a "
                                 f"finite number of seconds >= 0")
            self.cache[op] = float(t)
        return self.cache[op]

    def total(self, ops) -> float:
        return sum(self(op) for op in ops)


class _Comm:
    def __init__(self, fn: CommTime):
        self.fn = fn
        self.cache: dict = {}
        self.calls: list = []

    def __call__(self, category: str, op: str, nbytes: float, groups: list) -> float:
        groups = [tuple(int(r) for r in g) for g in groups]
        if len(groups[0]) < 2 or nbytes <= 0:
            return 0.0
        key = (op, float(nbytes), tuple(groups))
        if key not in self.cache:
            t = self.fn(op, float(nbytes), groups)
            if isinstance(t, bool) or not isinstance(t, (int, float, np.floating)) \
                    or not math.isfinite(t) or t < 0:
                raise ValueError(f"plan_step: comm_time({op!r}, {nbytes}) returned {t!r}: must "
                                 f"be a finite number of seconds >= 0")
            self.cache[key] = float(t)
            self.calls.append({"category": category, "op": op, "nbytes": float(nbytes),
                               "groups": len(groups), "group_size": len(groups[0]),
                               "seconds": float(t)})
        return self.cache[key]


def optimizer_seconds(elements: int, offload: bool, host: HostOffload,
                      op_time: Callable[[Op], float]) -> float:
    """The optimizer step over ``elements`` parameters: mixed-precision Adam on the device
    (``op_time`` of a 13-operand element-wise op, module docstring), or on the host with
    ZeRO-Offload (:meth:`HostOffload.step_s`)."""
    if offload:
        return host.step_s(float(elements))
    return op_time(Eltwise(name="optimizer.adam", op="adam", elements=elements, operands=13))


def _compression_time(comp: GradCompression, elements: float, mats: list, timer) -> float:
    """Device seconds to compress and decompress one rank's gradients (module docstring of
    :mod:`compiler.parallel.training`): element-wise passes, and PowerSGD's three GEMMs per
    weight (``M Q``, ``M^T P``, ``P Q^T``)."""
    t = timer(Eltwise(name="dp.compress", op=f"{comp.kind}_compress",
                      elements=max(int(comp.compute_elements(elements)), 1), operands=1))
    if comp.kind == "powersgd":
        r = comp.rank
        for m_, n_ in mats:
            t += timer(Gemm(name="dp.powersgd.p", m=m_, n=r, k=n_))
            t += timer(Gemm(name="dp.powersgd.q", m=n_, n=r, k=m_))
            t += timer(Gemm(name="dp.powersgd.out", m=m_, n=n_, k=r))
    return t


def _counted(colls) -> list:
    """((op, nbytes), ...) -> [(op, count, nbytes)], sorted by op name and size."""
    counts: dict = {}
    for op, nbytes in colls:
        counts[(op, float(nbytes))] = counts.get((op, float(nbytes)), 0) + 1
    return [(op, n, x) for (op, x), n in sorted(counts.items())]


def _check_int(key: str, value: object, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"plan_step: {key} = {value!r}: must be an integer >= {minimum}")


def plan_step(model, strategy, n_ranks: int, rank_map: Sequence[int] | None = None,
              op_time: OpTime | None = None, comm_time: CommTime | None = None,
              device_mem_bytes: float | None = None, dtype_bytes: int = 2, *,
              peak_flops: float | None = None, graph_batch: int | None = None,
              layer_plan=None, input_pipeline=None, compression=None,
              timeline: bool = False, launch=None, host=None,
              kernels: str = "fused") -> StepReport:
    """Plan one training step (module docstring). ``model``: a :class:`TransformerModel`, a
    preset name, or a :class:`compiler.ir.Graph` for one micro-batch on one rank (data
    parallelism only); ``strategy``: a :class:`Strategy` or its text form; ``rank_map[r]`` = the
    physical rank of logical (Megatron-order) rank ``r`` (default: identity); ``peak_flops``
    (FLOP/s per rank) enables MFU; ``graph_batch`` = samples per micro-batch of a graph
    (default: :attr:`compiler.ir.Graph.batch`); ``layer_plan``: an
    :class:`~compiler.parallel.intra_op.IntraOpPlan` whose sharding replaces Megatron-LM's
    (its ``t``, recomputation and sequence parallelism must be the strategy's);
    ``input_pipeline``: a :class:`~compiler.parallel.training.InputPipeline` (data loading per
    replica: the step waits for what prefetch does not hide); ``compression``: a
    :class:`~compiler.parallel.training.GradCompression` of the data-parallel gradients
    (``zero = 0`` only); ``timeline``: keep every task, collective and region of the step
    (:attr:`StepReport.timeline`, :func:`compiler.parallel.timeline.step_timeline`);
    ``launch``: a :class:`~compiler.parallel.training.KernelLaunch` (what each kernel launch
    costs: eager, synchronized or CUDA graphs); ``host``: a
    :class:`~compiler.parallel.training.HostOffload`, the host a ``Strategy(offload=True)``
    updates on (default: its defaults); ``kernels``: ``fused`` (Megatron-LM's fused
    bias-GeLU, bias-dropout-add and scale-mask-softmax kernels: the layer's ops as
    :meth:`~compiler.parallel.llm.TransformerModel.layer_ops` lists them) or ``unfused`` (each
    bias add, hidden dropout, attention scale and mask is a kernel of its own, forward,
    backward and recomputed: :meth:`~compiler.parallel.llm.TransformerModel.unfused_ops`;
    transformer models only)."""
    if isinstance(strategy, str):
        strategy = parse_strategy(strategy)
    if not isinstance(strategy, Strategy):
        raise ValueError(f"plan_step: strategy = {strategy!r}: must be a Strategy or a string "
                         f"like 'dp=2,tp=4,pp=2'")
    if isinstance(model, str):
        model = get_model(model)
    if not isinstance(model, (TransformerModel, Graph)):
        raise ValueError(f"plan_step: model = {model!r}: must be a TransformerModel, a preset "
                         f"name or a compiler.ir.Graph")
    _check_int("n_ranks", n_ranks)
    _check_int("dtype_bytes", dtype_bytes)
    if not callable(op_time) or not callable(comm_time):
        raise ValueError("plan_step: op_time and comm_time must be callables (see OpTime, "
                         "CommTime)")
    if rank_map is None:
        phys = np.arange(n_ranks)
    else:
        phys = np.asarray(rank_map)
        if phys.shape != (n_ranks,) or phys.dtype.kind not in "iu" \
                or len(set(phys.tolist())) != n_ranks or phys.min() < 0:
            raise ValueError(f"plan_step: rank_map must list {n_ranks} distinct physical rank "
                             f"ids >= 0 (got {rank_map!r:.80})")
    for key, val in (("device_mem_bytes", device_mem_bytes), ("peak_flops", peak_flops)):
        if val is not None and (isinstance(val, bool) or not isinstance(val, (int, float))
                                or not val > 0):
            raise ValueError(f"plan_step: {key} = {val!r}: must be a number > 0 or None")

    st = strategy
    tp, dp, pp, v = st.tp, st.dp, st.pp, st.interleave
    if input_pipeline is not None and not isinstance(input_pipeline, InputPipeline):
        raise ValueError(f"plan_step: input_pipeline = {input_pipeline!r}: must be an "
                         f"InputPipeline")
    if compression is not None and not isinstance(compression, GradCompression):
        raise ValueError(f"plan_step: compression = {compression!r}: must be a GradCompression")
    comp = compression if compression is not None and compression.kind != "none" else None
    if comp is not None and st.zero:
        raise ValueError(f"strategy: zero = {st.zero}: gradient compression "
                         f"({comp.kind}) compresses all-reduced gradients; use zero=0")
    if kernels not in KERNELS:
        raise ValueError(f"plan_step: kernels = {kernels!r}: must be one of "
                         f"{', '.join(KERNELS)}")
    if kernels == "unfused" and not isinstance(model, TransformerModel):
        raise ValueError("plan_step: kernels = 'unfused' splits a transformer layer's fused "
                         "kernels; a graph model runs its ops as they are")
    if launch is not None and not isinstance(launch, KernelLaunch):
        raise ValueError(f"plan_step: launch = {launch!r}: must be a KernelLaunch")
    if launch is not None:
        base_time = op_time
        op_time = lambda op: launch.kernel_s(float(base_time(op)))   # noqa: E731
    timer, comm = _Timer(op_time), _Comm(comm_time)
    per_pass = launch.per_pass_s() if launch is not None else 0.0
    if host is not None and not isinstance(host, HostOffload):
        raise ValueError(f"plan_step: host = {host!r}: must be a HostOffload")
    host = host if host is not None else HostOffload()

    def rank(ti: int, di: int, s: int) -> int:
        return int(phys[st.rank(ti, di, s)])

    def tp_groups(s: int) -> list:
        return [tuple(rank(ti, di, s) for ti in range(tp)) for di in range(dp)]

    def dp_groups(s: int) -> list:
        return [tuple(rank(ti, di, s) for di in range(dp)) for ti in range(tp)]

    nv = pp * v
    f_comp, b_comp, r_comp = np.zeros(nv), np.zeros(nv), np.zeros(nv)
    f_tp, b_tp = np.zeros(nv), np.zeros(nv)
    tp_bytes_chunk = np.zeros(nv)       # nccl nbytes per micro-batch, per virtual stage
    tp_sent_chunk = np.zeros(nv)
    send = np.zeros(max(nv - 1, 0))
    send_nbytes = 0.0
    segs_f: list = [[] for _ in range(nv)]    # (region, compute s, TP comm s) per task, in order
    segs_b: list = [[] for _ in range(nv)]
    stage_params = np.zeros(pp)
    stage_mats: list = [[] for _ in range(pp)]      # (rows, cols) of each weight (PowerSGD)
    act_chunk = 0.0
    act_transient = 0.0

    if layer_plan is not None:
        if not isinstance(model, TransformerModel):
            raise ValueError("plan_step: layer_plan needs a TransformerModel")
        if (layer_plan.t, layer_plan.recompute, layer_plan.sequence_parallel) != (
                tp, st.recompute, st.sequence_parallel):
            raise ValueError(f"plan_step: layer_plan is for t = {layer_plan.t}, recompute = "
                             f"{layer_plan.recompute}, sequence_parallel = "
                             f"{layer_plan.sequence_parallel}; the strategy has tp = {tp}, "
                             f"recompute = {st.recompute}, sp = {st.sequence_parallel}")
    if isinstance(model, TransformerModel):
        m = st.validate(n_ranks, layers=model.layers,
                        heads=model.heads if layer_plan is None else None,
                        global_batch=None if st.microbatches else model.global_batch,
                        micro_batch=model.micro_batch)
        b, s_len, h, a, f = (model.micro_batch, model.seq_len, model.hidden, model.heads,
                             model.ffn)
        lcs = list(st.stage_layers) if st.stage_layers else [model.layers // nv] * nv
        sp = st.sequence_parallel
        if layer_plan is None:
            fwd = model.layer_ops(tp, sequence_parallel=sp)
            bwd = backward_ops(Graph("layer", tuple(fwd))).ops
        else:
            fwd, bwd = layer_plan.forward_ops, layer_plan.backward_ops
        tf_l, tb_l = timer.total(fwd), timer.total(bwd)
        if layer_plan is not None:
            tr_l = timer.total(layer_plan.recompute_ops)
        elif st.recompute == "full":
            tr_l = tf_l
        elif st.recompute == "selective":
            tr_l = timer.total(op for op in fwd if op.name.endswith(_SELECTIVE))
        else:
            tr_l = 0.0
        if kernels == "unfused":
            extra = model.unfused_ops(tp, sequence_parallel=sp)
            tf_l += timer.total(extra)
            tb_l += timer.total(backward_ops(Graph("unfused", tuple(extra))).ops)
            if st.recompute == "full":
                tr_l += timer.total(extra)
            elif st.recompute == "selective":      # the scale and mask are attention core
                tr_l += timer.total(op for op in extra if op.name.endswith(_SELECTIVE_EXTRA))
        emb = model.embedding_ops(tp)
        head = model.head_ops(tp)
        emb_f, emb_b = timer.total(emb), timer.total(backward_ops(Graph("e", tuple(emb))).ops)
        head_f = timer.total(head)
        head_b = timer.total(backward_ops(Graph("h", tuple(head))).ops)
        buf = float(b * s_len * h * dtype_bytes)
        if sp:
            fwd_coll = [("allgather", 2, buf), ("reducescatter", 2, buf)]
            bwd_coll = [("allgather", 4, buf), ("reducescatter", 2, buf)]
            if st.recompute == "full":
                bwd_coll = [("allgather", 6, buf), ("reducescatter", 4, buf)]
            emb_coll = ([("reducescatter", 1, buf)], [])
            head_coll = ([("allgather", 1, buf)], [("reducescatter", 1, buf)])
        else:
            fwd_coll = [("allreduce", 2, buf)]
            bwd_coll = [("allreduce", 4 if st.recompute == "full" else 2, buf)]
            emb_coll = ([("allreduce", 1, buf)], [])
            head_coll = ([], [("allreduce", 1, buf)])
        if layer_plan is not None:
            fwd_coll = _counted(layer_plan.fwd_collectives)
            bwd_coll = _counted(layer_plan.bwd_collectives)
        for k in range(nv):
            s = k % pp
            groups = tp_groups(s)

            def ctime(colls) -> tuple[float, float, float]:
                if tp == 1:
                    return 0.0, 0.0, 0.0
                t = sum(n * comm("tp", op, x, groups) for op, n, x in colls)
                nb = sum(n * x for _, n, x in colls)
                sent = sum(n * collective_sent_bytes(op, x, tp) for op, n, x in colls)
                return t, nb, sent

            (tf_c, nf, sf), (tb_c, nb_, sb) = ctime(fwd_coll), ctime(bwd_coll)
            lc = lcs[k]
            f_comp[k] = lc * tf_l + per_pass
            b_comp[k] = lc * (tb_l + tr_l) + per_pass
            r_comp[k] = lc * tr_l
            f_tp[k], b_tp[k] = lc * tf_c, lc * tb_c
            tp_bytes_chunk[k] = lc * (nf + nb_)
            tp_sent_chunk[k] = lc * (sf + sb)
            first = sum(lcs[:k])
            segs_f[k] = [(f"layer {first + i}", tf_l, tf_c) for i in range(lc)]
            segs_b[k] = [(f"layer {first + i}", tb_l + tr_l, tb_c) for i in reversed(range(lc))]
            if per_pass:
                segs_f[k].insert(0, ("graph launch", per_pass, 0.0))
                segs_b[k].insert(0, ("graph launch", per_pass, 0.0))
            for is_edge, name, ops_f, ops_b, (cf, cb) in (
                    (k == 0, "embedding", emb_f, emb_b, emb_coll),
                    (k == nv - 1, "head", head_f, head_b, head_coll)):
                if is_edge:
                    f_comp[k] += ops_f
                    b_comp[k] += ops_b
                    (xf, nxf, sxf), (xb, nxb, sxb) = ctime(cf), ctime(cb)
                    f_tp[k] += xf
                    b_tp[k] += xb
                    tp_bytes_chunk[k] += nxf + nxb
                    tp_sent_chunk[k] += sxf + sxb
                    if name == "embedding":
                        segs_f[k].insert(0, (name, ops_f, xf))
                        segs_b[k].append((name, ops_b, xb))
                    else:
                        segs_f[k].append((name, ops_f, xf))
                        segs_b[k].insert(0, (name, ops_b, xb))
        send_nbytes = b * s_len * h * dtype_bytes / tp
        for k in range(nv - 1):
            s0, s1 = k % pp, (k + 1) % pp
            if s0 != s1:
                pairs = [(rank(ti, di, s0), rank(ti, di, s1)) for di in range(dp)
                         for ti in range(tp)]
                send[k] = comm("pp", "broadcast", send_nbytes, pairs)
        vocab_rank = -(-model.vocab // tp)
        if layer_plan is None:
            layer_rank = (4 * h * h + 2 * h * f + 3 * h + f) / tp + 6 * h
        else:
            layer_rank = layer_plan.params
        rank_layers = [sum(lcs[k] for k in range(nv) if k % pp == s) for s in range(pp)]
        for s in range(pp):
            stage_params[s] = rank_layers[s] * layer_rank
        if comp is not None:
            mats = [(op.k, op.n) for op in fwd if has_weights(op)]
            for s in range(pp):
                stage_mats[s] = mats * rank_layers[s]
            stage_mats[0].append((vocab_rank, h))
            if pp > 1:
                stage_mats[-1].append((vocab_rank, h))
        first_params, last_params = model.edge_params(tp, pp)
        stage_params[0] += first_params
        stage_params[-1] += last_params
        if layer_plan is None:
            act_layer = activation_bytes_per_layer(s_len, b, h, a, tp, sequence_parallel=sp,
                                                   recompute=st.recompute,
                                                   dtype_bytes=dtype_bytes)
        else:
            act_layer = layer_plan.activation_bytes
        act_chunk = [lcs[s] * act_layer for s in range(pp)]
        if st.recompute == "full":
            act_transient = activation_bytes_per_layer(s_len, b, h, a, tp, sequence_parallel=sp,
                                                       dtype_bytes=dtype_bytes) \
                if layer_plan is None else layer_plan.activation_bytes_full
        samples = dp * m * b
        tokens = samples * s_len
        flops = model_flops(model, samples)
        name = model.name
    else:
        if tp > 1 or pp > 1:
            raise ValueError(f"strategy: tp = {tp}, pp = {pp}: a compiler.ir.Graph model "
                             f"supports data parallelism only (tp = 1, pp = 1)")
        if st.recompute != "none":
            raise ValueError(f"strategy: recompute = {st.recompute!r}: must be 'none' for a "
                             f"compiler.ir.Graph model")
        m = st.validate(n_ranks)
        graph = model
        gb = graph.batch if graph_batch is None else graph_batch
        _check_int("graph_batch", gb)
        f_comp[0] = timer.total(graph.ops) + per_pass
        b_comp[0] = timer.total(backward_ops(graph, input_grad=False).ops) + per_pass
        segs_f[0] = [(graph.name, f_comp[0], 0.0)]
        segs_b[0] = [(graph.name, b_comp[0], 0.0)]
        stage_params[0] = graph_params(graph)
        stage_mats[0] = [(g.k, g.n) for op in graph if has_weights(op)
                         for g in [op.gemm_shape()] for _ in range(g.count)]
        act_chunk = [float(sum(op.output_elements for op in graph) * dtype_bytes)]
        samples = dp * m * gb
        tokens = samples * graph.tokens          # sequence positions (1 per image for a CNN)
        flops = 6.0 * graph.macs * dp * m
        name = graph.name

    t_f, t_b = f_comp + f_tp, b_comp + b_tp
    res = simulate_pipeline(t_f, t_b, m, p=pp, schedule=st.schedule, v=v, send_s=send,
                            record=timeline)
    res0 = simulate_pipeline(t_f, t_b, m, p=pp, schedule=st.schedule, v=v) if pp > 1 else res
    crit = int(np.argmax(res.busy_s))
    mine = [k for k in range(nv) if k % pp == crit]
    compute_s = m * float(sum(f_comp[k] + b_comp[k] for k in mine))
    recompute_s = m * float(sum(r_comp[k] for k in mine))
    tp_s = m * float(sum(f_tp[k] + b_tp[k] for k in mine))
    makespan = res.makespan_s
    bubble_s = max(res0.makespan_s - float(res.busy_s[crit]), 0.0)
    pp_s = makespan - res0.makespan_s

    # tied embedding gradients between the first and last stage
    emb_sync = 0.0
    emb_nbytes = 0.0
    if isinstance(model, TransformerModel) and pp > 1:
        emb_nbytes = float(-(-model.vocab // tp) * model.hidden * dtype_bytes)
        pairs = [(rank(ti, di, 0), rank(ti, di, pp - 1)) for di in range(dp) for ti in range(tp)]
        emb_sync = comm("pp", "allreduce", emb_nbytes, pairs)
    pp_s += emb_sync

    # data parallelism, per stage
    bucket = st.bucket_mb * 2**20
    done = np.array(res.end_s, dtype=np.float64)
    compress_s = np.zeros(pp)
    dp_events: list = [[] for _ in range(pp)]     # (name, start s, end s) per stage
    dp_bytes = np.zeros(pp)
    dp_sent = np.zeros(pp)
    opt = np.zeros(pp)
    for s in range(pp):
        grad = float(stage_params[s] * dtype_bytes)
        shard = dp if st.zero >= 1 else 1
        elems = max(int(math.ceil(stage_params[s] / shard)), 1)
        opt[s] = optimizer_seconds(elems, st.offload, host, timer)
        if dp == 1:
            continue
        groups = dp_groups(s)
        op = "allreduce" if st.zero == 0 else "reducescatter"
        nb = max(int(math.ceil(grad / bucket)), 1)
        sizes = [bucket] * (nb - 1) + [grad - bucket * (nb - 1)]
        if comp is None:
            full = comm("dp", op, bucket, groups) if nb > 1 else 0.0   # all buckets but the last
            costs = [full] * (nb - 1) + [comm("dp", op, sizes[-1], groups)]
        else:      # compressed buckets: their own bytes and collective, plus the compute
            op = comp.collective
            ctot = _compression_time(comp, float(stage_params[s]), stage_mats[s], timer)
            compress_s[s] = ctot
            if comp.kind == "powersgd":
                total = comp.wire_bytes(float(stage_params[s]), dtype_bytes,
                                        matrices=stage_mats[s])
                wire = [total * x / grad for x in sizes]
            else:
                wire = [comp.wire_bytes(x / dtype_bytes, dtype_bytes, ranks=dp) for x in sizes]
            costs = [ctot * x / grad + comm("dp", op, y, groups) for x, y in zip(sizes, wire)]
        window = float(res.last_backward_s[s])
        what = f"{'reduce-scatter' if op == 'reducescatter' else op} bucket"
        if st.overlap_dp:
            t, cum = 0.0, 0.0
            w0 = float(res.end_s[s]) - window
            for i, (x, c) in enumerate(zip(sizes, costs)):
                cum += x
                start = max(t, window * cum / grad)
                t = start + c
                dp_events[s].append((f"{what} {i}", w0 + start, w0 + t))
            exposed = max(t - window, 0.0)
        else:
            exposed = float(sum(costs))
            t0 = float(res.end_s[s])
            for i, c in enumerate(costs):
                dp_events[s].append((f"{what} {i}", t0, t0 + c))
                t0 += c
        dp_bytes[s] = grad if comp is None else float(sum(wire))
        dp_sent[s] = collective_sent_bytes(op, grad, dp) if comp is None else float(
            sum(collective_sent_bytes(op, y, dp) for y in wire))
        extra = 0.0
        if st.zero in (1, 2):
            extra = comm("dp", "allgather", grad, groups)
            dp_bytes[s] += grad
            dp_sent[s] += collective_sent_bytes("allgather", grad, dp)
        elif st.zero == 3:
            ag = comm("dp", "allgather", grad, groups)
            fs = float(sum(t_f[k] for k in range(nv) if k % pp == s))
            bs = float(sum(t_b[k] for k in range(nv) if k % pp == s))
            if st.overlap_dp:
                extra = m * (max(ag - fs, 0.0) + max(ag - bs, 0.0))
            else:
                extra = 2 * m * ag
            dp_bytes[s] += 2 * m * grad
            dp_sent[s] += 2 * m * collective_sent_bytes("allgather", grad, dp)
        if extra:
            dp_events[s].append(("ZeRO parameter all-gather (exposed)", float(done[s]) + exposed,
                                 float(done[s]) + exposed + extra))
        done[s] += exposed + extra
    dp_s = float(done.max()) - makespan
    optimizer_s = float(opt.max())
    step_s = makespan + emb_sync + dp_s + optimizer_s
    input_s = input_load_s = 0.0
    if input_pipeline is not None:      # one loader per data-parallel replica
        input_load_s = input_pipeline.load_s(samples / dp)
        input_s = input_pipeline.exposed_s(samples / dp, step_s)
        step_s += input_s

    # volumes per stage (nccl nbytes and bytes sent), maximum over stages
    tp_b, tp_snt, pp_b = np.zeros(pp), np.zeros(pp), np.zeros(pp)
    for k in range(nv):
        s = k % pp
        tp_b[s] += m * tp_bytes_chunk[k]
        tp_snt[s] += m * tp_sent_chunk[k]
        if k < nv - 1 and (k + 1) % pp != s:
            pp_b[s] += m * send_nbytes          # forward activation
        if k > 0 and (k - 1) % pp != s:
            pp_b[s] += m * send_nbytes          # backward gradient
    pp_snt = pp_b.copy()
    if emb_sync or emb_nbytes:
        for s in (0, pp - 1):
            pp_b[s] += emb_nbytes
            pp_snt[s] += collective_sent_bytes("allreduce", emb_nbytes, 2)

    # memory per stage
    stage_mem = []
    for s in range(pp):
        state = zero_memory_bytes(float(stage_params[s]), dp, st.zero, st.offload)
        act = float(res.max_in_flight[s]) * act_chunk[s] + act_transient
        stage_mem.append({"stage": s, "params": state["params"], "grads": state["grads"],
                          "optimizer": state["optimizer"], "activations": act,
                          "total": state["total"] + act})
    memory = max(stage_mem, key=lambda d: d["total"])

    return StepReport(
        model=name, strategy=st.to_dict(), n_ranks=n_ranks, microbatches=m, step_s=step_s,
        compute_s=compute_s, recompute_s=recompute_s, exposed_tp_s=tp_s, exposed_pp_s=pp_s,
        exposed_dp_s=dp_s, bubble_s=bubble_s, optimizer_s=optimizer_s, pipeline_s=makespan,
        critical_stage=crit, samples_per_step=samples, tokens_per_step=tokens,
        model_flops=flops, peak_flops=peak_flops, memory=memory,
        device_mem_bytes=device_mem_bytes,
        comm_bytes={"tp": float(tp_b.max()), "pp": float(pp_b.max()),
                    "dp": float(dp_bytes.max())},
        sent_bytes={"tp": float(tp_snt.max()), "pp": float(pp_snt.max()),
                    "dp": float(dp_sent.max())},
        stage_memory_bytes=stage_mem, comm_calls=comm.calls, input_s=input_s,
        input_load_s=input_load_s, compress_s=float(compress_s.max()),
        input_pipeline=input_pipeline.to_dict() if input_pipeline is not None else None,
        compression=compression.to_dict() if compression is not None else None,
        launch=launch.to_dict() if launch is not None else None, kernels=kernels,
        timeline=None if not timeline else step_timeline(
            tasks=res.tasks, pp=pp, nv=nv, segs_f=segs_f, segs_b=segs_b, send=send,
            dp_events=dp_events, emb_sync=emb_sync, opt=opt, makespan=makespan, dp_s=dp_s,
            input_load_s=input_load_s, input_s=input_s,
            prefetch=input_pipeline.prefetch if input_pipeline is not None else None,
            step_s=step_s, ranks=[[rank(ti, di, s) for di in range(dp) for ti in range(tp)]
                                  for s in range(pp)], n_ranks=n_ranks))
