"""Automatic parallelization: the best training plan for a model, a system and a global batch.

Two levels, as Alpa (Zheng et al., OSDI'22):

* **intra-op** (:mod:`.intra_op`): for each tensor-parallel degree ``t``, micro-batch size and
  recomputation, an integer program picks every op's sharding on the ``t``-device mesh
  (Megatron-LM's column/row split and sequence parallelism come out of it when they are best);
* **inter-op** (:mod:`.inter_op`): for each pipeline depth, dynamic programming slices the
  layers into stages (uneven when the embedding or the logits make a stage slower, or when the
  first stages' activations do not fit).

Around them the search enumerates the device-mesh slicing ``dp x tp x pp = N``, the micro-batch
size, the schedule (GPipe, 1F1B, interleaved 1F1B with ``v`` chunks), the ZeRO stage and the
recomputation. Every candidate first gets a **lower bound** on its step time: its stages'
compute plus the collectives of one mesh alone (concurrent meshes can only slow them down),
through the pipeline's dependency chain (stage ``s`` starts after the forwards before it, runs
its ``B`` micro-batches, and the backwards below it follow: ``(B + p - 1)(t_f + t_b)`` for even
stages), plus the optimizer. Candidates are then simulated in full
(:func:`~compiler.parallel.step.plan_step`, the same step ``npulab system`` prints) in order of
their bound, until the bound of the next one is no better than the best step found: so the
result equals trying every candidate (``tests/compiler/test_parallel_search.py`` checks it
against brute force). Candidates whose memory (model state per ZeRO stage plus activations
times the micro-batches in flight, the same formulas as the step's) exceeds the device are
dropped before any simulation. The throughput-memory Pareto front is found the same way, going
through the candidates by memory.

The search is deterministic: candidates are ordered by (bound, strategy text), ties keep the
first.
"""

from __future__ import annotations

import bisect
import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from compiler.ir import Graph
from compiler.parallel.backward import backward_ops
from compiler.parallel.formulas import zero_memory_bytes
from compiler.parallel.inter_op import slice_stages
from compiler.parallel.intra_op import IntraOpPlan, IntraOpProblem
from compiler.parallel.llm import TransformerModel, get_model
from compiler.parallel.step import StepReport, optimizer_seconds, plan_step
from compiler.parallel.strategy import Strategy
from compiler.parallel.training import HostOffload

__all__ = ["SearchSpace", "Candidate", "SearchResult", "search_plans"]

SCHEDULE_KINDS = ("1f1b", "gpipe", "interleaved")


def _ints(key: str, values, minimum: int = 1) -> tuple:
    vals = tuple(values)
    if not vals or any(isinstance(v, bool) or not isinstance(v, int) or v < minimum
                       for v in vals):
        raise ValueError(f"search space: {key} = {values!r}: must be a non-empty list of "
                         f"integers >= {minimum}")
    return tuple(sorted(set(vals)))


@dataclass(frozen=True)
class SearchSpace:
    """What the search may choose. ``tp``/``pp``/``dp`` ``None``: every divisor of the device
    count (``pp`` up to the layers); ``interleave``: chunks per rank tried with the interleaved
    schedule; ``uneven``: let the stage-slicing DP give stages different layer counts;
    ``offload``: try ZeRO-Offload for a plan that does not fit without it (only then: a
    choice, since on HBM devices the device update is faster)."""

    tp: tuple | None = None
    pp: tuple | None = None
    dp: tuple | None = None
    micro_batch: tuple = (1, 2, 4, 8)
    schedules: tuple = SCHEDULE_KINDS
    interleave: tuple = (2, 3, 4)
    zero: tuple = (0, 1, 2, 3)
    recompute: tuple = ("none", "selective", "full")
    uneven: bool = True
    max_tp: int | None = None
    offload: bool = True

    def __post_init__(self) -> None:
        for key in ("tp", "pp", "dp"):
            if getattr(self, key) is not None:
                object.__setattr__(self, key, _ints(key, getattr(self, key)))
        object.__setattr__(self, "micro_batch", _ints("micro_batch", self.micro_batch))
        object.__setattr__(self, "interleave", _ints("interleave", self.interleave, 2))
        object.__setattr__(self, "zero", _ints("zero", self.zero, 0))
        if any(z > 3 for z in self.zero):
            raise ValueError(f"search space: zero = {self.zero!r}: stages are 0..3")
        for key, allowed in (("schedules", SCHEDULE_KINDS),
                             ("recompute", ("none", "selective", "full"))):
            vals = tuple(getattr(self, key))
            if not vals or any(v not in allowed for v in vals):
                raise ValueError(f"search space: {key} = {vals!r}: each must be one of "
                                 f"{', '.join(allowed)}")
            object.__setattr__(self, key, vals)
        if not isinstance(self.offload, bool) or not isinstance(self.uneven, bool):
            raise ValueError(f"search space: offload = {self.offload!r}, uneven = "
                             f"{self.uneven!r}: must be true or false")
        if self.max_tp is not None and (isinstance(self.max_tp, bool)
                                        or not isinstance(self.max_tp, int) or self.max_tp < 1):
            raise ValueError(f"search space: max_tp = {self.max_tp!r}: must be an integer >= 1")


@dataclass
class Candidate:
    """One plan of the space: its strategy, its layer sharding, bound, memory and (when
    simulated) its step."""

    strategy: Strategy
    layer_plan: IntraOpPlan
    bound_s: float
    memory_bytes: float
    report: StepReport | None = None
    model: TransformerModel | None = field(default=None, repr=False)

    @property
    def micro_batch(self) -> int:
        return self.model.micro_batch

    @property
    def text(self) -> str:
        """The ``--strategy`` text; the micro-batch size is ``--micro-batch``."""
        return strategy_text(self.strategy)

    @property
    def label(self) -> str:
        return f"{self.text} (micro-batch {self.micro_batch})"

    @property
    def step_s(self) -> float:
        return self.report.step_s if self.report is not None else math.nan

    def to_dict(self) -> dict:
        out = {"strategy": self.text, "micro_batch": self.micro_batch,
               "microbatches": self.report.microbatches if self.report else None,
               "bound_s": self.bound_s,
               "memory_bytes": self.memory_bytes, "layer_plan": self.layer_plan.to_dict()}
        if self.report is not None:
            r = self.report
            out.update(step_s=r.step_s, samples_per_s=r.samples_per_s,
                       tokens_per_s=r.tokens_per_s, mfu=r.mfu, breakdown=r.breakdown())
        return out


def strategy_text(st: Strategy) -> str:
    """The ``--strategy`` text of a strategy (only the keys that differ from the defaults)."""
    parts = [f"dp={st.dp}", f"tp={st.tp}", f"pp={st.pp}"]
    if st.microbatches is not None:
        parts.append(f"m={st.microbatches}")
    if st.interleave > 1:
        parts.append(f"v={st.interleave}")
    if st.schedule != "1f1b":
        parts.append(f"schedule={st.schedule}")
    if st.zero:
        parts.append(f"zero={st.zero}")
    if st.recompute != "none":
        parts.append(f"recompute={st.recompute}")
    if st.sequence_parallel:
        parts.append("sp=true")
    if st.offload:
        parts.append("offload=true")
    if st.stage_layers is not None:
        parts.append("stage_layers=" + "/".join(map(str, st.stage_layers)))
    return ",".join(parts)


@dataclass
class SearchResult:
    """The best plan, the Pareto front, why the others lose, and what the search did."""

    model: str
    n_devices: int
    global_batch: int
    best: Candidate
    pareto: list
    evaluated: list
    losers: list                     # per mesh shape (dp, tp, pp): its best and why it loses
    space: int                       # strategies enumerated
    sharding_space: int              # per-layer sharding assignments the ILPs chose among
    ilps: int
    pruned_memory: int
    pruned_bound: int
    search_s: float
    device_mem_bytes: float | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"model": self.model, "n_devices": self.n_devices,
                "global_batch": self.global_batch, "best": self.best.to_dict(),
                "pareto": [c.to_dict() for c in self.pareto],
                "evaluated": [c.to_dict() for c in self.evaluated], "losers": self.losers,
                "space": self.space, "sharding_space": self.sharding_space, "ilps": self.ilps,
                "simulated": len(self.evaluated), "pruned_memory": self.pruned_memory,
                "pruned_bound": self.pruned_bound, "search_s": self.search_s,
                "device_mem_bytes": self.device_mem_bytes, **self.extra}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _in_flight(p: int, m: int, schedule: str, v: int) -> list[int]:
    """Most micro-batch chunks each rank holds at once, which its task order alone decides
    (:func:`~compiler.parallel.pipeline.schedule_order`): GPipe ``m``; 1F1B the warm-up
    forwards plus one, ``min(w + 1, m v)`` with ``w = 2(p - s - 1) + (v - 1) p`` interleaved
    (``p - s - 1`` plain)."""
    if schedule == "gpipe":
        return [m] * p
    if v == 1:
        return [min(p - s, m) for s in range(p)]
    return [min(2 * (p - s - 1) + (v - 1) * p + 1, m * v) for s in range(p)]


def search_plans(model, n_devices: int, op_time: Callable, comm_time: Callable, *,
                 global_batch: int | None = None, device_mem_bytes: float | None = None,
                 peak_flops: float | None = None, dtype_bytes: int = 2,
                 space: SearchSpace | None = None, progress: Callable | None = None,
                 pareto: bool = True, input_pipeline=None, host=None,
                 exhaustive: bool = False) -> SearchResult:
    """Search the plans of ``model`` (a :class:`TransformerModel` or preset name) on
    ``n_devices`` (module docstring). ``op_time`` and ``comm_time`` are
    :func:`~compiler.parallel.step.plan_step`'s callbacks; ``global_batch`` overrides the
    model's; ``exhaustive`` simulates every candidate (to check the bound); ``input_pipeline``
    is the loader every plan waits for (the bound leaves it out: it is still a lower bound);
    ``progress(done, total, text)`` is called as candidates are simulated (``total``: the
    simulations the best plan so far does not rule out yet)."""
    t_start = time.perf_counter()
    if isinstance(model, str):
        model = get_model(model)
    if not isinstance(model, TransformerModel):
        raise ValueError(f"search_plans: model = {model!r}: must be a TransformerModel or a "
                         f"preset name (the search splits transformer layers)")
    if isinstance(n_devices, bool) or not isinstance(n_devices, int) or n_devices < 1:
        raise ValueError(f"search_plans: n_devices = {n_devices!r}: must be an integer >= 1")
    gb = model.global_batch if global_batch is None else global_batch
    if isinstance(gb, bool) or not isinstance(gb, int) or gb < 1:
        raise ValueError(f"search_plans: global_batch = {gb!r}: must be an integer >= 1")
    space = space or SearchSpace()
    host = host if host is not None else HostOffload()
    L = model.layers
    N = n_devices

    op_cache: dict = {}

    def ot(op) -> float:
        if op not in op_cache:
            op_cache[op] = float(op_time(op))
        return op_cache[op]

    # ---- intra-op plans, one per (t, micro-batch, recompute) --------------------------------
    ilp: dict = {}
    sharding_space = 0

    def layer_plan(t: int, b: int, rc: str) -> IntraOpPlan:
        nonlocal sharding_space
        key = (t, b, rc)
        if key not in ilp:
            group = [tuple(range(t))]
            prob = IntraOpProblem(model.layer_ops(1, micro_batch=b), t, ot,
                                  lambda op, nb: comm_time(op, nb, group), recompute=rc,
                                  dtype_bytes=dtype_bytes)
            sharding_space = max(sharding_space, prob.space)
            ilp[key] = prob.solve()
        return ilp[key]

    def edge_times(t: int, b: int) -> tuple[float, float, float, float]:
        emb = model.embedding_ops(t, micro_batch=b)
        head = model.head_ops(t, micro_batch=b)
        tot = lambda ops: sum(ot(o) for o in ops)                    # noqa: E731
        return (tot(emb), tot(backward_ops(Graph("e", tuple(emb))).ops),
                tot(head), tot(backward_ops(Graph("h", tuple(head))).ops))

    # ---- enumerate ----------------------------------------------------------------------------
    tps = [t for t in (space.tp or _divisors(N)) if N % t == 0 and model.ffn % t == 0
           and (space.max_tp is None or t <= space.max_tp)]
    cands: list[Candidate] = []
    pruned_memory = 0
    n_space = 0
    losers: dict = {}
    for tp in tps:
        for pp in (space.pp or _divisors(N // tp)):
            if (N // tp) % pp or pp > L:
                continue
            dp = N // (tp * pp)
            if space.dp is not None and dp not in space.dp:
                continue
            key = (dp, tp, pp)
            first_params, last_params = model.edge_params(tp, pp)
            for b in space.micro_batch:
                if gb % (dp * b):
                    continue
                m = gb // (dp * b)
                mdl = replace(model, global_batch=gb, micro_batch=b)
                ef, eb, hf, hb = edge_times(tp, b)
                for rc in space.recompute:
                    plan = layer_plan(tp, b, rc)
                    lf = plan.forward_s
                    lb = plan.objective_s - lf
                    for zero in (space.zero if dp > 1 else (0,)):
                        # one stage: every schedule is the same run of micro-batches
                        # (plain 1F1B when allowed: interleaving needs stages; GPipe holds
                        # every micro-batch at once)
                        kinds = space.schedules if pp > 1 else (
                            ("gpipe",) if set(space.schedules) == {"gpipe"} else ("1f1b",))
                        for kind in kinds:
                            vs = [1] if kind != "interleaved" else [
                                v for v in space.interleave if L % (pp * v) == 0 and m % pp == 0
                                and pp > 1]
                            for v in vs:
                                if v == 1 and not space.uneven and L % pp:
                                    continue        # even stages cannot split the layers
                                n_space += 1
                                sched = "gpipe" if kind == "gpipe" else "1f1b"
                                fl = _in_flight(pp, m, sched, v)
                                trans = plan.activation_bytes_full if rc == "full" else 0.0
                                # ZeRO-Offload only when the plan does not fit without
                                # it (a choice: on HBM devices the update is faster on the
                                # device than across the host link)
                                chosen = None
                                for off in ((False, True) if space.offload else (False,)):
                                    chosen = _fit(L, pp, v, lf + lb, ef, eb, hf, hb, plan,
                                                  zero_memory_bytes(1.0, dp, zero, off)["total"],
                                                  first_params, last_params, fl, trans,
                                                  dp, zero, off, device_mem_bytes, space.uneven)
                                    if chosen is not None:
                                        break
                                if chosen is None:
                                    pruned_memory += 1
                                    losers.setdefault(key, {"reason": "memory"})
                                    continue
                                lcs, mem, off, params = chosen
                                st = Strategy(dp=dp, tp=tp, pp=pp, schedule=sched, zero=zero,
                                              recompute=rc,
                                              sequence_parallel=plan.sequence_parallel,
                                              interleave=v, offload=off,
                                              stage_layers=tuple(lcs) if v == 1 and pp > 1 and len(
                                                  set(lcs)) > 1 else None)
                                shard = dp if zero >= 1 else 1
                                bound = _bound(lcs, pp, v, m, lf, lb, ef, eb, hf, hb) + max(
                                    optimizer_seconds(max(int(math.ceil(p / shard)), 1), off,
                                                      host, ot) for p in params)
                                cands.append(Candidate(st, plan, bound, mem, model=mdl))
    if not cands and pruned_memory:
        raise ValueError(f"search_plans: no plan of {model.name} on {N} devices with global "
                         f"batch {gb} fits in {device_mem_bytes:.4g} bytes per device; "
                         f"try more devices, a smaller micro-batch or recompute=full")
    if not cands:
        raise ValueError(f"search_plans: no strategy of the search space applies to "
                         f"{model.name} on {N} devices with global batch {gb}: tp must divide "
                         f"the devices and the FFN width ({model.ffn}), pp the devices, dp * "
                         f"micro-batch the global batch")

    def simulate(c: Candidate) -> None:
        c.report = plan_step(c.model, c.strategy, N, None, ot, comm_time,
                             device_mem_bytes=device_mem_bytes, dtype_bytes=dtype_bytes,
                             peak_flops=peak_flops, layer_plan=c.layer_plan,
                             input_pipeline=input_pipeline, host=host)

    cands.sort(key=lambda c: (c.bound_s, c.label))
    bounds = [c.bound_s for c in cands]
    best: Candidate | None = None
    done = 0
    for c in cands:
        if best is not None and c.bound_s > best.step_s and not exhaustive:
            break
        simulate(c)
        done += 1
        if progress:     # total: those the current best does not rule out yet
            left = bisect.bisect_right(bounds, best.step_s if best else c.step_s)
            progress(done, max(done, left), c.label)
        if best is None or c.step_s < best.step_s:
            best = c
    # ties: the least memory, then the text
    best = min((c for c in cands if c.report is not None),
               key=lambda c: (c.step_s, c.memory_bytes, c.label))
    front: list[Candidate] = []
    if pareto:
        run = math.inf
        for c in sorted(cands, key=lambda c: (c.memory_bytes, c.bound_s, c.label)):
            if c.bound_s >= run:
                continue
            if c.report is None:
                simulate(c)
                done += 1
                if progress:
                    progress(done, done + 1, c.label)
            if c.step_s < run * (1 - 1e-12):
                if front and front[-1].memory_bytes == c.memory_bytes:
                    front.pop()
                front.append(c)
                run = c.step_s
    evaluated = [c for c in cands if c.report is not None]
    pruned_bound = len(cands) - len(evaluated)
    if progress:
        progress(done, done, "")
    # the best plan of each mesh shape, and why it loses to the best
    shapes: dict = {}
    for c in sorted(cands, key=lambda c: (c.report is None, c.step_s if c.report else c.bound_s,
                                          c.memory_bytes, c.label)):
        shapes.setdefault((c.strategy.dp, c.strategy.tp, c.strategy.pp), c)
    rows = []
    for k in sorted(set(shapes) | set(losers)):
        dp, tp, pp = k
        if k not in shapes:
            rows.append({"dp": dp, "tp": tp, "pp": pp, "strategy": None, "step_s": None,
                         "reason": "memory: no candidate fits", **{
                             kk: vv for kk, vv in losers[k].items() if kk != "reason"}})
            continue
        c = shapes[k]
        rows.append({"dp": dp, "tp": tp, "pp": pp, "strategy": c.text,
                     "micro_batch": c.micro_batch,
                     "step_s": c.step_s if c.report is not None else None,
                     "bound_s": c.bound_s, "memory_bytes": c.memory_bytes,
                     "reason": _why(c, best)})
    rows.sort(key=lambda r: (r["step_s"] is None, r["step_s"] or r.get("bound_s") or math.inf))
    return SearchResult(model=model.name, n_devices=N, global_batch=gb, best=best, pareto=front,
                        evaluated=sorted(evaluated, key=lambda c: (c.step_s, c.label)),
                        losers=rows, space=n_space, sharding_space=sharding_space,
                        ilps=len(ilp), pruned_memory=pruned_memory, pruned_bound=pruned_bound,
                        search_s=time.perf_counter() - t_start,
                        device_mem_bytes=device_mem_bytes)


def _fit(L, pp, v, layer_s, ef, eb, hf, hb, plan, zc, first_params, last_params, fl, trans,
         dp, zero, off, device_mem_bytes, uneven):
    """(layers per virtual stage, memory of the fullest stage, offload, parameters per
    pipeline rank) of a candidate, with the stages sliced by
    :func:`~compiler.parallel.inter_op.slice_stages` under the memory limit; None when it does
    not fit. Memory and parameters are plan_step's own counts."""
    if v == 1:
        sl = slice_stages(layer_s, L, pp, first_s=ef + eb if pp > 1 else ef + eb + hf + hb,
                          last_s=hf + hb if pp > 1 else 0.0, layer_mem=zc * plan.params,
                          first_mem=zc * first_params, last_mem=zc * last_params,
                          layer_act=plan.activation_bytes, in_flight=fl, fixed_mem=trans,
                          memory_limit=device_mem_bytes) if uneven else None
        if uneven and sl is None:
            return None
        lcs = list(sl.stage_layers) if sl else ([L // pp] * pp if L % pp == 0 else None)
        if lcs is None:
            return None
    else:
        lcs = [L // (pp * v)] * (pp * v)
    nv = pp * v
    mem, stage_params = 0.0, []
    for s in range(pp):
        layers_s = sum(lcs[k] for k in range(nv) if k % pp == s)
        params = layers_s * plan.params + (first_params if s == 0 else 0) + (
            last_params if s == pp - 1 else 0)
        stage_params.append(params)
        act = float(fl[s]) * (lcs[s] * plan.activation_bytes) + trans
        mem = max(mem, zero_memory_bytes(params, dp, zero, off)["total"] + act)
    if device_mem_bytes is not None and mem > device_mem_bytes:
        return None
    return lcs, mem, off, stage_params


def _bound(lcs: Sequence[int], pp: int, v: int, m: int, lf: float, lb: float, ef: float,
           eb: float, hf: float, hb: float) -> float:
    """Lower bound of the pipeline's makespan (module docstring)."""
    nv = pp * v
    f = [lcs[k] * lf for k in range(nv)]
    b = [lcs[k] * lb for k in range(nv)]
    f[0] += ef
    b[0] += eb
    f[-1] += hf
    b[-1] += hb
    best = 0.0
    for r in range(pp):
        busy = m * sum(f[k] + b[k] for k in range(r, nv, pp))
        best = max(best, sum(f[:r]) + busy + sum(b[:r]))
    return best


def _why(c: Candidate, best: Candidate) -> str:
    """The part of the step where ``c`` loses most to ``best``."""
    if c is best:
        return "best"
    if c.report is None:
        return (f"bound {c.bound_s:.4g} s >= best {best.step_s:.4g} s (compute and bubble alone)")
    mine, theirs = c.report.breakdown(), best.report.breakdown()
    names = {"compute": "compute (incl. recompute)", "input": "input pipeline",
             "tp": "exposed TP communication",
             "pp": "pipeline sends", "dp": "exposed DP communication", "bubble": "pipeline bubble",
             "optimizer": "optimizer"}
    diff = {k: mine[k] - theirs[k] for k in mine}
    k = max(diff, key=lambda x: diff[x])
    return f"{names[k]} +{diff[k]:.4g} s"
