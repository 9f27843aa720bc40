"""Pipeline schedules, closed-form formulas and the training-step planner of compiler.parallel.

Gold values: the closed forms of Huang et al. 2019 / Narayanan et al. 2021 (pipeline bubble),
Megatron-LM (4 all-reduces of b*s*h per layer), Rajbhandari et al. 2020 (ZeRO memory and
communication), Korthikanti et al. 2022 Table 2 (activation memory), and hand-worked timings
written out in the comments.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from compiler.ir import Conv2d, Eltwise, Gemm, Graph, Move
from compiler.parallel import (TransformerModel, activation_bytes_per_layer, bubble_fraction,
                               dp_allreduce_bytes, parse_strategy, plan_step, simulate_pipeline,
                               tp_allreduce_bytes, zero_comm_bytes, zero_memory_bytes)

PEAK = 100e12


def flops_time(op):
    """Matrix ops at 100 TFLOP/s, vector ops free: an exact FLOP counter."""
    if isinstance(op, (Gemm, Conv2d)):
        return 2.0 * op.macs / PEAK
    return 0.0


def roofline(op):
    if isinstance(op, (Gemm, Conv2d)):
        g = op.gemm_shape()
        return max(2.0 * g.macs / PEAK, 2.0 * g.count * (g.m * g.k + g.k * g.n + g.m * g.n) / 1e12)
    if isinstance(op, Eltwise):
        return 2.0 * op.elements * (op.operands + 1) / 1e12
    if isinstance(op, Move):
        return 4.0 * op.elements / 1e12
    return 0.0


def zero_comm(op, nbytes, groups):
    return 0.0


def alpha_beta(op, nbytes, groups):
    p = len(groups[0])
    beta = 1 / 50e9
    return {"allreduce": 2 * (p - 1) / p, "allgather": (p - 1) / p,
            "reducescatter": (p - 1) / p, "broadcast": 1.0}[op] * nbytes * beta + 5e-6


class Recorder:
    def __init__(self, fn=alpha_beta):
        self.fn = fn
        self.calls = []

    def __call__(self, op, nbytes, groups):
        self.calls.append((op, nbytes, groups))
        return self.fn(op, nbytes, groups)


SMALL = TransformerModel("small", layers=8, hidden=256, heads=8, seq_len=128, vocab=1024,
                         global_batch=16, micro_batch=2)


# --------------------------------------------------------------------------- pipeline schedule
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p, m", [(2, 1), (4, 4), (4, 16), (8, 3), (6, 24)])
def test_simulated_bubble_equals_closed_form(schedule, p, m):
    res = simulate_pipeline(1.0, 2.0, m, p=p, schedule=schedule)
    # uniform stages, free sends: makespan (m + p - 1)(t_f + t_b)
    assert res.makespan_s == pytest.approx((m + p - 1) * 3.0)
    measured = 1.0 - res.busy_s / res.makespan_s
    np.testing.assert_allclose(measured, bubble_fraction(p, m), rtol=1e-12)
    np.testing.assert_allclose(measured, (p - 1) / (m + p - 1), rtol=1e-12)


@pytest.mark.parametrize("p, v, m", [(2, 2, 4), (4, 2, 8), (4, 3, 8), (3, 4, 6)])
def test_interleaved_bubble_is_p_minus_1_over_v_m(p, v, m):
    # a rank's stage costs t_f = 1, t_b = 2 per micro-batch, split over v chunks
    res = simulate_pipeline(1.0 / v, 2.0 / v, m, p=p, v=v)
    ideal = m * 3.0
    assert res.makespan_s == pytest.approx(ideal * (1 + (p - 1) / (v * m)))
    assert 1 - res.busy_s[0] / res.makespan_s == pytest.approx(bubble_fraction(p, m, v))


def test_gpipe_with_sends_adds_two_hops_per_boundary():
    # forward: stage p-1 gets micro-batch 0 after (p-1)(t_f + c), then runs m forwards;
    # backward mirrors it: (m + p - 1)(t_f + t_b) + 2 (p - 1) c
    res = simulate_pipeline(1.0, 2.0, 5, p=4, schedule="gpipe", send_s=0.25)
    assert res.makespan_s == pytest.approx(8 * 3.0 + 2 * 3 * 0.25)


def test_activations_in_flight():
    p, m = 4, 8
    assert simulate_pipeline(1.0, 2.0, m, p=p).max_in_flight.tolist() == [4, 3, 2, 1]
    assert simulate_pipeline(1.0, 2.0, m, p=p, schedule="gpipe").max_in_flight.tolist() == [8] * 4
    # interleaved, rank 0 holds 2(p-1) + (v-1)p + 1 chunks of L/(p v) layers:
    # L/(pv) (vp + p - 1) = L (1 + (p-1)/(p v)), Korthikanti et al. 2022 §4.2.3
    v = 2
    res = simulate_pipeline(0.5, 1.0, m, p=p, v=v)
    assert res.max_in_flight[0] == 2 * (p - 1) + (v - 1) * p + 1


def test_pipeline_errors():
    with pytest.raises(ValueError, match="m = 3 must be a multiple of p = 2"):
        simulate_pipeline(1.0, 1.0, 3, p=2, v=2)
    with pytest.raises(ValueError, match="t_f must be finite"):
        simulate_pipeline(-1.0, 1.0, 3, p=2)


# --------------------------------------------------------------------------- closed forms
def test_formula_functions():
    psi, nd = 1e9, 64
    assert tp_allreduce_bytes(1, 2048, 12288) == 4 * 2048 * 12288 * 2
    assert tp_allreduce_bytes(1, 2048, 12288, recompute="full") == 6 * 2048 * 12288 * 2
    assert dp_allreduce_bytes(psi, 8) == 2 * 7 / 8 * psi * 2
    # ZeRO §3: 16 Psi -> 4 Psi + 12 Psi/Nd, 2 Psi + 14 Psi/Nd, 16 Psi/Nd
    assert zero_memory_bytes(psi, nd, 0)["total"] == 16 * psi
    assert zero_memory_bytes(psi, nd, 1)["total"] == pytest.approx(4 * psi + 12 * psi / nd)
    assert zero_memory_bytes(psi, nd, 2)["total"] == pytest.approx(2 * psi + 14 * psi / nd)
    assert zero_memory_bytes(psi, nd, 3)["total"] == pytest.approx(16 * psi / nd)
    # ZeRO §7: 2 Psi (stages 1, 2) and 3 Psi (stage 3) of fp16, large-Nd limit
    assert zero_comm_bytes(psi, nd, 1) == pytest.approx(2 * psi * 2 * 63 / 64)
    assert zero_comm_bytes(psi, nd, 3) == pytest.approx(3 * psi * 2 * 63 / 64)
    assert zero_comm_bytes(psi, nd, 0) == dp_allreduce_bytes(psi, nd)
    assert bubble_fraction(8, 64, 3) == pytest.approx(7 / (3 * 64 + 7))
    # Korthikanti Table 2, s=2048, b=1, h=12288, a=96, t=8
    sbh = 2048 * 12288
    assert activation_bytes_per_layer(2048, 1, 12288, 96, 1) == sbh * (34 + 5 * 96 * 2048 / 12288)
    assert activation_bytes_per_layer(2048, 1, 12288, 96, 8, sequence_parallel=True,
                                      recompute="selective") == 34 * sbh / 8
    assert activation_bytes_per_layer(2048, 1, 12288, 96, 8, recompute="selective") == \
        sbh * (10 + 24 / 8)
    assert activation_bytes_per_layer(2048, 1, 12288, 96, 8, recompute="full") == 2 * sbh


# --------------------------------------------------------------------------- planner
def test_breakdown_sums_to_step():
    r = plan_step(SMALL, "dp=2,tp=2,pp=2,recompute=selective", 8, None, roofline, alpha_beta)
    parts = (r.compute_s + r.exposed_tp_s + r.bubble_s + r.exposed_pp_s + r.exposed_dp_s
             + r.optimizer_s)
    assert parts == pytest.approx(r.step_s, rel=1e-12)
    assert r.exposed_comm_s == pytest.approx(r.exposed_tp_s + r.exposed_pp_s + r.exposed_dp_s)
    assert r.microbatches == 16 // (2 * 2)
    assert r.tokens_per_step == 16 * 128
    assert r.to_dict()["tokens_per_s"] == pytest.approx(16 * 128 / r.step_s)


def test_dp_with_free_comm_step_equals_compute():
    r = plan_step(SMALL, "dp=4", 4, None, roofline, zero_comm)
    assert r.exposed_comm_s == 0 and r.bubble_s == 0
    assert r.step_s == pytest.approx(r.compute_s + r.optimizer_s, rel=1e-12)
    # compute = m micro-batches x (forward + backward) of all ops, computed independently
    from compiler.parallel import backward_ops
    layer = SMALL.layer_ops(1)
    bwd = backward_ops(Graph("l", tuple(layer))).ops
    head, emb = SMALL.head_ops(1), SMALL.embedding_ops(1)
    per_mb = (8 * sum(map(roofline, layer + list(bwd)))
              + sum(map(roofline, head + list(backward_ops(Graph("h", tuple(head))).ops)))
              + sum(map(roofline, emb + list(backward_ops(Graph("e", tuple(emb))).ops))))
    assert r.compute_s == pytest.approx(2 * per_mb, rel=1e-12)


def test_mfu_is_one_for_an_exact_flop_counter():
    # op_time = matmul FLOPs / peak, everything else free -> MFU exactly 1 (tp splits FLOPs)
    for st, n in (("tp=1", 1), ("tp=2", 2), ("tp=4", 4)):
        r = plan_step(SMALL, st + ",m=1", n, None, flops_time, zero_comm, peak_flops=PEAK)
        assert r.mfu == pytest.approx(1.0, rel=1e-12)


def test_dp_overlap_hand_computed():
    # one weighted Gemm reading the graph input: forward 1 s, backward = wgrad only, 1 s.
    # Gradients 2 bytes x 1024 x 2048 = 4 MiB -> four 1-MiB buckets, each all-reduce 0.1 s.
    g = Graph("fc", (Gemm(name="fc", m=64, n=2048, k=1024),))

    def one_second(op):
        return 1.0 if isinstance(op, Gemm) else 0.0

    def ar(op, nbytes, groups):
        assert op == "allreduce" and nbytes == 2**20
        return 0.1

    on = plan_step(g, "dp=2,bucket_mb=1", 2, None, one_second, ar)
    off = plan_step(g, "dp=2,bucket_mb=1,overlap_dp=false", 2, None, one_second, ar)
    # buckets ready at 0.25, 0.5, 0.75, 1.0 s of the backward; they end at 0.35, 0.6, 0.85, 1.1
    assert on.exposed_dp_s == pytest.approx(0.1)
    assert off.exposed_dp_s == pytest.approx(0.4)
    assert on.step_s == pytest.approx(2.1) and off.step_s == pytest.approx(2.4)


@pytest.mark.parametrize("st", ["dp=4,tp=2", "dp=8,zero=1", "dp=2,tp=2,pp=2,zero=2",
                                "dp=8,zero=3", "dp=4,pp=2,v=2"])
def test_overlap_never_exposes_more(st):
    on = plan_step(SMALL, st, 8, None, roofline, alpha_beta)
    off = plan_step(SMALL, st + ",overlap_dp=false", 8, None, roofline, alpha_beta)
    assert on.exposed_dp_s <= off.exposed_dp_s + 1e-15
    assert on.step_s <= off.step_s + 1e-15


def small_stage_params(tp, pp):
    """Per-rank parameters of SMALL's stage 0 and last stage, by hand (Megatron layout):
    column-parallel QKV (3h^2 + 3h)/t, fc1 (4h^2 + 4h)/t, row-parallel out_proj h^2/t + h,
    fc2 4h^2/t + h, two layer norms 4h -> (8h^2 + 7h)/t ... per layer."""
    h, s, v = 256, 128, 1024
    layer = (3 * h * h + 3 * h + 4 * h * h + 4 * h + h * h + 4 * h * h) / tp + 6 * h
    lc = 8 // pp
    first = lc * layer + v * h / tp + s * h
    last = lc * layer + 2 * h + (v * h / tp if pp > 1 else 0)
    return (first + last - lc * layer) if pp == 1 else first, last


def test_volumes_handed_to_comm_time_match_megatron_and_zero():
    rec = Recorder()
    b, s, h, m = 2, 128, 256, 4           # dp=2 -> 16 / (2*2) = 4 micro-batches
    r = plan_step(SMALL, "dp=2,tp=2,pp=2,zero=1", 8, None, roofline, rec)
    buf = b * s * h * 2
    # TP: all-reduces of b*s*h elements on consecutive-rank pairs, stage 0 groups (0,1),(2,3)
    assert ("allreduce", float(buf), [(0, 1), (2, 3)]) in rec.calls
    assert ("allreduce", float(buf), [(4, 5), (6, 7)]) in rec.calls
    # per rank: layers/pp = 4 layers x m micro-batches x 4 b*s*h (Megatron) + 1 embedding
    # all-reduce per micro-batch
    assert r.comm_bytes["tp"] == 4 * m * tp_allreduce_bytes(b, s, h) + m * buf
    # PP: sends of b*s*h/t per TP rank between stage 0 and stage 1 ranks
    assert ("broadcast", buf / 2, [(0, 4), (1, 5), (2, 6), (3, 7)]) in rec.calls
    emb = 1024 * 256 / 2 * 2
    assert r.sent_bytes["pp"] == m * buf / 2 + emb
    # DP / ZeRO-1: reduce-scatter + all-gather of the stage's fp16 gradients, groups (0,2),(1,3)
    first, _ = small_stage_params(2, 2)
    assert r.sent_bytes["dp"] == pytest.approx(zero_comm_bytes(first, 2, 1))
    assert any(c[0] == "reducescatter" and c[2] == [(0, 2), (1, 3)] for c in rec.calls)


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_zero_memory_and_comm_in_planner(zero):
    r = plan_step(SMALL, f"dp=4,zero={zero},m=1", 4, None, roofline, alpha_beta)
    first, _ = small_stage_params(1, 1)
    expect = zero_memory_bytes(first, 4, zero)
    for key in ("params", "grads", "optimizer"):
        assert r.memory[key] == pytest.approx(expect[key])
    # m = 1: ZeRO-3 gathers once for forward, once for backward -> 3 Psi
    assert r.sent_bytes["dp"] == pytest.approx(zero_comm_bytes(first, 4, zero))


def test_activation_memory_from_schedule():
    # pp=1, tp=2 + SP, selective: 34 s b h / t per layer, one micro-batch in flight
    r = plan_step(SMALL, "tp=2,sp=true,recompute=selective", 2, None, roofline, alpha_beta)
    assert r.memory["activations"] == pytest.approx(8 * 34 * 128 * 2 * 256 / 2)
    # pp=4 1F1B: stage 0 holds 4 micro-batches of 2 layers: L x per-layer (Korthikanti §4.2.3)
    r = plan_step(SMALL, "pp=4", 4, None, roofline, alpha_beta)
    per_layer = 128 * 2 * 256 * (34 + 5 * 8 * 128 / 256)
    assert r.stage_memory_bytes[0]["activations"] == pytest.approx(8 * per_layer)
    assert r.stage_memory_bytes[3]["activations"] == pytest.approx(2 * per_layer)
    assert plan_step(SMALL, "pp=4", 4, None, roofline, alpha_beta,
                     device_mem_bytes=1e3).fits is False


def test_recompute_costs_and_tp_collective_counts():
    rec_none, rec_full = Recorder(), Recorder()
    none = plan_step(SMALL, "tp=2,m=1", 2, None, flops_time, rec_none)
    full = plan_step(SMALL, "tp=2,m=1,recompute=full", 2, None, flops_time, rec_full)
    layer_fwd = sum(flops_time(op) for op in SMALL.layer_ops(2))
    assert full.recompute_s == pytest.approx(8 * layer_fwd)
    assert full.compute_s - none.compute_s == pytest.approx(8 * layer_fwd)
    buf = 2 * 128 * 256 * 2
    # 6 all-reduces per layer with full recompute (+1 embedding, +1 logits backward)
    assert full.comm_bytes["tp"] == 8 * tp_allreduce_bytes(2, 128, 256, recompute="full") + 2 * buf
    sel = plan_step(SMALL, "tp=2,m=1,recompute=selective", 2, None, flops_time, zero_comm)
    attn = [op for op in SMALL.layer_ops(2) if ".attn.scores" in op.name
            or ".attn.context" in op.name]
    assert sel.recompute_s == pytest.approx(8 * sum(map(flops_time, attn)))


def test_sequence_parallel_moves_same_volume_as_allreduce():
    # an all-reduce = reduce-scatter + all-gather: per-rank sent bytes equal (tp=4)
    a = plan_step(SMALL, "tp=4,m=1", 4, None, roofline, alpha_beta)
    b = plan_step(SMALL, "tp=4,m=1,sp=true", 4, None, roofline, alpha_beta)
    buf = 2 * 128 * 256 * 2
    # Per layer: 4 all-reduces x 2(p-1)/p = 6 buf vs 4 AG + 4 RS x (p-1)/p = 6 buf, plus SP's
    # backward re-gather of 2 inputs (2 x 3/4 buf). Edges: embedding AR + logits AR (2 x 1.5 buf)
    # become embedding RS + logits AG + RS (3 x 0.75 buf): 0.75 buf less.
    assert b.sent_bytes["tp"] == pytest.approx(a.sent_bytes["tp"] + 8 * 2 * buf * 3 / 4
                                               - 0.75 * buf)


def test_rank_map_reaches_comm_time():
    rec = Recorder()
    perm = [3, 2, 1, 0]
    plan_step(SMALL, "tp=2,dp=2", 4, perm, roofline, rec)
    assert ("allreduce", float(2 * 128 * 256 * 2), [(3, 2), (1, 0)]) in rec.calls


def test_conv_graph_data_parallel():
    from compiler.frontends import zoo
    g = zoo.resnet18(batch=4, image_size=64)
    r = plan_step(g, "dp=4,m=2", 4, None, flops_time, zero_comm, peak_flops=PEAK)
    # forward + backward without conv1's dgrad: (3 x MACs - conv1) x 2 FLOP / peak, 2 micro-batches
    conv1 = g.op("conv1").macs
    assert r.compute_s == pytest.approx(2 * 2 * (3 * g.macs - conv1) / PEAK)
    assert r.samples_per_step == 4 * 2 * 4
    with pytest.raises(ValueError, match="data parallelism only"):
        plan_step(g, "tp=2,dp=2", 4, None, flops_time, zero_comm)


def test_planner_errors():
    with pytest.raises(ValueError, match="must equal the number of ranks, 8"):
        plan_step(SMALL, "tp=2", 8, None, roofline, alpha_beta)
    with pytest.raises(ValueError, match=r"op_time\('layer.ln1'\) returned -1.0"):
        plan_step(SMALL, "tp=1", 1, None, lambda op: -1.0, alpha_beta)
    with pytest.raises(ValueError, match=r"comm_time\('allreduce', .*\) returned nan"):
        plan_step(SMALL, "tp=2", 2, None, roofline, lambda *a: math.nan)
    with pytest.raises(ValueError, match="rank_map must list 2 distinct"):
        plan_step(SMALL, "tp=2", 2, [0, 0], roofline, alpha_beta)
    with pytest.raises(ValueError, match="unknown key 'tpp'"):
        plan_step(SMALL, "tpp=2", 2, None, roofline, alpha_beta)


def test_scaling_efficiency():
    one = plan_step(SMALL, "dp=1", 1, None, roofline, zero_comm)
    four = plan_step(SMALL.__class__(**{**SMALL.to_dict(), "global_batch": 64}), "dp=4", 4,
                     None, roofline, zero_comm)
    # weak scaling with free communication: same time per micro-batch -> efficiency 1
    assert four.scaling_efficiency(one) == pytest.approx(1.0)
