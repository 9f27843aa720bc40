"""The automatic parallelization search: intra-op ILP, inter-op stage slicing, plan search.

Gold models: exhaustive enumeration of shardings (the ILP), every composition of layers into
stages (the dynamic program), every candidate simulated (the plan search and its Pareto
front), Korthikanti et al. 2022 Table 2 (activation bytes of Megatron's sharding) and the
step planner's own Megatron path (a Megatron ILP plan must cost exactly the same).
"""

from __future__ import annotations

import itertools
import math
import random

import pytest

from compiler.ir import Gemm, Move
from compiler.parallel import (TransformerModel, activation_bytes_per_layer, get_model,
                               parse_strategy, plan_step)
from compiler.parallel.inter_op import slice_stages
from compiler.parallel.intra_op import IntraOpProblem
from compiler.parallel.pipeline import schedule_order
from compiler.parallel.search import (SearchSpace, _in_flight, search_plans, strategy_text)

PEAK, HBM = 100e12, 1e12


def roofline(op):
    """A matrix engine at 100 TFLOP/s and 1 TB/s: ops cost max(compute, bytes)."""
    if isinstance(op, Gemm):
        g = op.gemm_shape()
        return max(2.0 * g.macs / PEAK, 2.0 * g.count * (g.m * g.k + g.k * g.n + g.m * g.n) / HBM)
    if isinstance(op, Move):
        return 4.0 * op.elements / HBM
    return 2.0 * op.output_elements * 3 / HBM


FACTOR = {"allreduce": lambda p: 2 * (p - 1) / p, "allgather": lambda p: (p - 1) / p,
          "reducescatter": lambda p: (p - 1) / p, "alltoall": lambda p: (p - 1) / p,
          "broadcast": lambda p: 1.0}


def alpha_beta(op, nbytes, groups):
    """Ring alpha-beta: 100 GB/s inside a node of 4, 10 GB/s across nodes, 5 us per step."""
    p = len(groups[0])
    bw = 100e9 if len({r // 4 for r in groups[0]}) == 1 else 10e9
    return 5e-6 * (p - 1) + FACTOR[op](p) * nbytes / bw


TINY = TransformerModel("tiny", layers=6, hidden=256, heads=8, seq_len=128, vocab=1000,
                        global_batch=16)


# ---- intra-op: the ILP --------------------------------------------------------------------------

def _mesh_comm(t):
    return lambda op, nbytes: alpha_beta(op, nbytes, [tuple(range(t))])


@pytest.mark.parametrize("unit", [1.0, 1e-6])
@pytest.mark.parametrize("part", ["mlp", "attention"])
@pytest.mark.parametrize("seed", range(4))
def test_ilp_equals_exhaustive_search(part, seed, unit):
    """On a layer's MLP or attention half, with randomly scaled op and collective costs, the
    ILP's sharding costs exactly the least of every assignment tried one by one; also when
    every cost is a million times smaller (below the solver's absolute tolerances)."""
    ops = TINY.layer_ops(1)
    ops = ops[8:] if part == "mlp" else ops[:8]
    if part == "mlp":   # ln2 reads the layer input, add2 its residual: drop the cut edge
        from dataclasses import replace
        ops = [replace(ops[0], inputs=())] + ops[1:4] + [replace(ops[4], inputs=(ops[3].name,))]
    rng = random.Random(seed)
    scale = {op.name: rng.uniform(0.2, 5.0) for op in ops}
    cscale = {k: rng.uniform(0.2, 5.0) for k in FACTOR}

    def op_time(op):       # a backward op (X.dgrad, X.grad) scales as its forward X
        return unit * roofline(op) * scale[op.name.rsplit(".", 1)[0] if op.name not in scale
                                           else op.name]

    def comm(op, nbytes):
        return unit * alpha_beta(op, nbytes, [tuple(range(4))]) * cscale[op]

    rc = ("none", "selective", "full")[seed % 3]
    prob = IntraOpProblem(ops, 4, op_time, comm, recompute=rc)
    plan = prob.solve()
    cost, assign, boundary = prob.exhaustive()
    assert plan.objective_s == pytest.approx(cost, rel=1e-9)
    chosen = [[c.name for c in cs].index(plan.choices[op.name])
              for op, cs in zip(ops, prob.choices)]
    assert prob.evaluate(chosen, plan.boundary)[0] == pytest.approx(plan.objective_s, rel=1e-12)
    assert prob.space == math.prod(len(c) for c in prob.choices) * 2


def test_ilp_respects_a_memory_limit():
    """With activations capped, the ILP gives the cheapest assignment that fits (exhaustive)."""
    ops = TINY.layer_ops(1)[8:]
    from dataclasses import replace
    ops = [replace(ops[0], inputs=())] + ops[1:4] + [replace(ops[4], inputs=(ops[3].name,))]
    free = IntraOpProblem(ops, 4, roofline, _mesh_comm(4)).solve()
    limit = free.activation_bytes * 0.6
    prob = IntraOpProblem(ops, 4, roofline, _mesh_comm(4), memory_limit=limit)
    plan = prob.solve()
    cost, _, _ = prob.exhaustive()
    assert plan.activation_bytes <= limit and plan.objective_s == pytest.approx(cost, rel=1e-9)
    with pytest.raises(ValueError, match="no sharding of the layer on 4 devices fits"):
        IntraOpProblem(ops, 4, roofline, _mesh_comm(4), memory_limit=1.0).solve()


@pytest.mark.parametrize("rc", ["none", "selective", "full"])
@pytest.mark.parametrize("boundary", ["R", "T"])
def test_ilp_finds_megatron_on_a_large_layer(rc, boundary):
    """GPT-3's layer on 8 devices: column-parallel QKV and fc1, row-parallel out_proj and fc2,
    heads split (Megatron-LM §3); its activation bytes are Korthikanti et al.'s Table 2 and its
    parameters the step planner's count, with and without sequence parallelism."""
    m = get_model("gpt3-175b")
    prob = IntraOpProblem(m.layer_ops(1), 8, roofline, _mesh_comm(8), recompute=rc,
                          boundaries=(boundary,))
    plan = prob.solve()
    assert plan.is_megatron() and plan.boundary == boundary
    assert plan.choices == prob.megatron(boundary).choices
    one = IntraOpProblem(m.layer_ops(1), 1, roofline, _mesh_comm(1), recompute=rc).solve()
    assert one.is_megatron() and one.comm_s == 0       # one device: every sharding is the same
    assert plan.choices["layer.attn.scores"] == "head"
    s, h, a, f = m.seq_len, m.hidden, m.heads, m.ffn
    assert plan.activation_bytes == pytest.approx(activation_bytes_per_layer(
        s, 1, h, a, 8, sequence_parallel=boundary == "T", recompute=rc), rel=1e-12)
    assert plan.params == pytest.approx((4 * h * h + 2 * h * f + 3 * h + f) / 8 + 6 * h,
                                        rel=1e-12)
    ar = [c for c in plan.fwd_collectives]
    if boundary == "R":     # 2 forward all-reduces of b*s*h, 2 (4 with full recompute) back
        assert ar == [("allreduce", 2.0 * s * h)] * 2
        assert len(plan.bwd_collectives) == (4 if rc == "full" else 2)
    else:                   # 2 AG + 2 RS forward; 4 AG + 2 RS backward (re-gather)
        assert sorted(op for op, _ in plan.fwd_collectives) == ["allgather"] * 2 + [
            "reducescatter"] * 2
        bwd = sorted(op for op, _ in plan.bwd_collectives)
        assert bwd.count("allgather") == (6 if rc == "full" else 4)


@pytest.mark.parametrize("text", ["dp=2,tp=4,pp=2,recompute=selective,sp=true",
                                  "tp=4,pp=2,v=3,recompute=full,sp=true",
                                  "dp=2,tp=2,pp=2,zero=1", "dp=2,tp=4,schedule=gpipe,pp=2"])
def test_plan_step_with_a_megatron_layer_plan_changes_no_number(text):
    """The step planner costs an ILP plan that is Megatron's exactly as its own Megatron path."""
    st = parse_strategy(text)
    model = TransformerModel("t6", layers=6, hidden=512, heads=8, seq_len=256, vocab=1000,
                             global_batch=8)
    plan = IntraOpProblem(model.layer_ops(1), st.tp, roofline, _mesh_comm(st.tp),
                          recompute=st.recompute).megatron("T" if st.sequence_parallel else "R")
    assert plan.is_megatron()
    a = plan_step(model, st, st.n_ranks, None, roofline, alpha_beta, device_mem_bytes=1e12)
    b = plan_step(model, st, st.n_ranks, None, roofline, alpha_beta, device_mem_bytes=1e12,
                  layer_plan=plan)
    assert b.step_s == pytest.approx(a.step_s, rel=1e-12)
    assert b.breakdown() == pytest.approx(a.breakdown(), rel=1e-12)
    assert b.memory["total"] == pytest.approx(a.memory["total"], rel=1e-12)
    assert b.comm_bytes == pytest.approx(a.comm_bytes, rel=1e-12)


def test_ilp_shards_a_layer_megatron_cannot():
    """12 heads on 8 devices: Megatron's head split is impossible (plan_step refuses tp=8);
    the ILP still finds a plan (attention kept whole) and plan_step costs it."""
    m = get_model("gpt2-small", global_batch=8)
    plan = IntraOpProblem(m.layer_ops(1), 8, roofline, _mesh_comm(8)).solve()
    assert plan.choices["layer.attn.scores"] == "rep"
    with pytest.raises(ValueError, match="heads"):
        plan_step(m, "tp=8", 8, None, roofline, alpha_beta)
    st = parse_strategy(f"tp=8{',sp=true' if plan.sequence_parallel else ''}")
    r = plan_step(m, st, 8, None, roofline, alpha_beta, layer_plan=plan)
    assert r.step_s > 0 and r.memory["params"] > 0


# ---- inter-op: stage slicing --------------------------------------------------------------------

def _brute_slices(layer_s, L, p, first_s, last_s, mem, limit):
    best = None
    for cuts in itertools.combinations(range(1, L), p - 1):
        sizes = [b - a for a, b in zip((0,) + cuts, cuts + (L,))]
        at, worst, ok = 0, 0.0, True
        for s, n in enumerate(sizes):
            t = sum(layer_s[at:at + n]) + (first_s if s == 0 else 0) + (last_s if s == p - 1
                                                                          else 0)
            if limit is not None and mem(s, n) > limit:
                ok = False
            worst = max(worst, t)
            at += n
        if ok and (best is None or worst < best - 1e-15):
            best = worst
    return best


@pytest.mark.parametrize("seed", range(12))
def test_stage_slicing_equals_brute_force(seed):
    """The dynamic program's slowest stage equals the best of every composition of the layers
    into p stages, with per-layer costs, first/last-stage extras and a memory limit that
    depends on the stage (1F1B: early stages hold more micro-batches)."""
    rng = random.Random(seed)
    L, p = rng.randint(3, 9), rng.randint(1, 4)
    p = min(p, L)
    layer_s = [rng.uniform(0.5, 2.0) for _ in range(L)]
    first_s, last_s = rng.uniform(0, 3), rng.uniform(0, 3)
    inflight = [p - s for s in range(p)]
    lm, la = rng.uniform(1, 2), rng.uniform(0, 1)
    limit = None if seed % 3 == 0 else rng.uniform(2, 4) * (lm + la * p) * L / p

    def mem(s, n):
        return n * (lm + la * inflight[s])

    got = slice_stages(layer_s, L, p, first_s=first_s, last_s=last_s, layer_mem=lm,
                       layer_act=la, in_flight=inflight, memory_limit=limit)
    want = _brute_slices(layer_s, L, p, first_s, last_s, mem, limit)
    if want is None:
        assert got is None
    else:
        assert got is not None and got.max_stage_s == pytest.approx(want, rel=1e-12)
        assert sum(got.stage_layers) == L and len(got.stage_layers) == p
        assert max(got.stage_s) == pytest.approx(got.max_stage_s, rel=1e-12)
        if limit is not None:
            assert max(got.stage_memory) <= limit


def test_in_flight_counts_follow_the_schedule_orders():
    for p in (1, 2, 3, 4, 8):
        for m in (1, 2, 4, 8, 12):
            for sched, v in (("gpipe", 1), ("1f1b", 1), ("1f1b", 2), ("1f1b", 3)):
                if v > 1 and m % p:
                    continue
                want = []
                for s in range(p):
                    live = peak = 0
                    for back, _, _ in schedule_order(p, m, sched, v, s):
                        live += -1 if back else 1
                        peak = max(peak, live)
                    want.append(peak)
                assert _in_flight(p, m, sched, v) == want


# ---- the plan search ----------------------------------------------------------------------------

SPACE = SearchSpace(micro_batch=(1, 2), interleave=(2, 3))
MEM = 40e6


def _all_candidates(result_space=SPACE):
    """Every candidate of the search simulated: what the search must equal."""
    res = search_plans(TINY, 8, roofline, alpha_beta, device_mem_bytes=MEM, space=result_space,
                       pareto=True)
    return res


def _brute(space=SPACE):
    """Brute force: every candidate simulated."""
    return search_plans(TINY, 8, roofline, alpha_beta, device_mem_bytes=MEM, space=space,
                        pareto=True, exhaustive=True)


def test_plan_search_equals_brute_force():
    """The search's best plan and Pareto front equal simulating every candidate; every
    candidate's bound is below its simulated step; every reported plan fits in memory and its
    memory is the step's own count."""
    res = _all_candidates()
    brute = _brute()
    assert brute.pruned_bound == 0 and len(brute.evaluated) == brute.space - brute.pruned_memory
    best = min(brute.evaluated, key=lambda c: (c.step_s, c.memory_bytes, c.label))
    assert res.best.step_s == best.step_s and res.best.label == best.label
    assert res.pruned_bound > 0 and len(res.evaluated) < len(brute.evaluated)
    # the Pareto front (memory, step) of every candidate
    pts = sorted(((c.memory_bytes, c.step_s) for c in brute.evaluated))
    front, run = [], math.inf
    for mem, step in pts:
        if step < run * (1 - 1e-12):
            if front and front[-1][0] == mem:
                front.pop()
            front.append((mem, step))
            run = step
    assert [(c.memory_bytes, c.step_s) for c in res.pareto] == front
    for c in brute.evaluated:
        assert c.bound_s <= c.step_s * (1 + 1e-12), c.label
    for c in res.evaluated + res.pareto + [res.best]:
        assert c.report.fits and c.report.memory["total"] == pytest.approx(c.memory_bytes,
                                                                           rel=1e-12)
    assert res.pruned_memory > 0          # the limit matters in this space
    assert res.best.report.memory["total"] <= MEM


def test_search_is_deterministic_and_reports_its_work():
    a, b = _all_candidates(), _all_candidates()
    assert [c.label for c in a.evaluated] == [c.label for c in b.evaluated]
    assert a.best.label == b.best.label and a.space == b.space > 100
    d = a.to_dict()
    assert d["simulated"] == len(a.evaluated) and d["best"]["strategy"] == a.best.text
    # every enumerated candidate is accounted for
    assert d["pruned_memory"] + d["pruned_bound"] + d["simulated"] == d["space"]
    reasons = {r["reason"].split(" ")[0] for r in a.losers}
    assert "best" in reasons and reasons <= {"best", "memory:", "compute", "exposed", "pipeline",
                                             "optimizer", "bound"}


def test_found_plan_reruns_from_its_strategy_text():
    """The best plan's --strategy text, given to plan_step with its micro-batch, gives the
    same step (what ``npulab system`` prints for it)."""
    res = _all_candidates()
    c = res.best
    model = TransformerModel(**{**TINY.to_dict(), "micro_batch": c.micro_batch})
    st = parse_strategy(c.text)
    again = plan_step(model, st, 8, None, roofline, alpha_beta, device_mem_bytes=MEM,
                      layer_plan=c.layer_plan)
    assert again.step_s == c.step_s and strategy_text(st) == c.text


def test_search_errors_are_one_line():
    with pytest.raises(ValueError, match="no plan of tiny on 8 devices"):
        search_plans(TINY, 8, roofline, alpha_beta, device_mem_bytes=1e3, space=SPACE)
    with pytest.raises(ValueError, match="micro_batch"):
        SearchSpace(micro_batch=(0,))
    with pytest.raises(ValueError, match="schedules"):
        SearchSpace(schedules=("zb",))
    with pytest.raises(ValueError, match="n_devices"):
        search_plans(TINY, 0, roofline, alpha_beta)


def test_alltoall_edges_count_their_bytes():
    """A token <-> feature relayout is an all-to-all of the 1/t a device holds; the step's
    bytes-sent count takes it like an all-gather of that buffer ((p-1)/p of it)."""
    from compiler.parallel.formulas import collective_sent_bytes
    assert collective_sent_bytes("alltoall", 1000.0, 4) == 750.0
    prob = IntraOpProblem(TINY.layer_ops(1), 4, roofline, _mesh_comm(4))
    f, b = prob._edge_colls("T", "F", 4096.0, rerun=False)
    assert f == [("alltoall", 1024.0)] and b == [("alltoall", 1024.0)]


def test_one_stage_plans_do_not_depend_on_the_schedule_order():
    """With one pipeline stage the schedule is plain 1F1B whenever the space allows it, so the
    order of ``schedules`` (or asking for interleaving) does not change the plan found."""
    base = dict(pp=(1,), micro_batch=(1,))
    labels = {search_plans(TINY, 4, roofline, alpha_beta, device_mem_bytes=100e6,
                           space=SearchSpace(schedules=sched, **base), pareto=False).best.label
              for sched in (("1f1b", "gpipe"), ("gpipe", "1f1b"), ("interleaved", "1f1b"))}
    assert len(labels) == 1 and "schedule" not in labels.pop()


def test_layers_that_do_not_split_are_not_memory_failures():
    """5 layers on even stages: pp = 2 and 4 are left out of the space, not counted as over
    memory; a space with nothing that applies says why in one line."""
    m5 = TransformerModel("m5", layers=5, hidden=256, heads=8, seq_len=128, vocab=1000,
                          global_batch=16)
    res = search_plans(m5, 4, roofline, alpha_beta, space=SearchSpace(uneven=False),
                       pareto=False)
    assert res.pruned_memory == 0 and {r["pp"] for r in res.losers} == {1}
    with pytest.raises(ValueError, match="no strategy of the search space applies"):
        search_plans(m5, 4, roofline, alpha_beta, space=SearchSpace(tp=(3,)))


def test_selective_recompute_reruns_collectives_inside_the_attention_core():
    """Selective recomputation runs the attention core (scores, softmax, dropout, context)
    again before the backward (Korthikanti et al. §4.2): a resharding between two of those ops
    runs its forward collectives again too; edges from kept ops read saved inputs and do not."""
    ops = get_model("gpt2-small").layer_ops(1)
    comm = lambda op, n: 1e-6 + n / 1e11          # noqa: E731
    probs = {rc: IntraOpProblem(ops, 4, roofline, comm, recompute=rc)
             for rc in ("none", "selective")}
    meg = probs["none"].megatron("R")
    names = [op.name for op in probs["none"].ops]
    assign = []
    for i, name in enumerate(names):
        want = "tok" if name.endswith("attn.softmax") else meg.choices[name]
        assign.append([c.name for c in probs["none"].choices[i]].index(want))
    plans = {rc: p.plan(assign, "R") for rc, p in probs.items()}
    inner = [c for c in plans["none"].fwd_collectives]
    assert len(inner) > len(meg.fwd_collectives)          # softmax by tokens reshards twice
    extra = len(plans["selective"].bwd_collectives) - len(plans["none"].bwd_collectives)
    assert extra == len(inner) - len(meg.fwd_collectives)
    # Megatron's own sharding has no resharding inside the core: nothing to re-run
    assert len(probs["selective"].megatron("R").bwd_collectives) == len(meg.bwd_collectives)
