"""Lab 5 (scaling out): the physics behind the sheet's claims, at small size.

* A ring all-reduce simulated on the lab's ideal system (ideal8.toml) takes exactly the
  alpha-beta time 2(p-1) alpha + 2(p-1)/p S/B (Patarasuk & Yuan 2009; Thakur et al. 2005).
* With equal stages the planner's GPipe (and 1F1B) bubble is (p-1)/(m+p-1) of the pipeline
  (Huang et al. 2019; Narayanan et al. 2021), and the lab's replay of the schedules matches
  npulab's simulate_pipeline.
* A data-parallel step is never shorter than its compute, and overlapping the gradient
  all-reduce with the backward never exposes more than not overlapping it.
"""

from __future__ import annotations


import pytest
from labload import LABS, load_script

LAB = LABS / "05_scaling_out"


@pytest.mark.parametrize("nbytes", [8 << 20, 248_879_616, 1 << 30])
@pytest.mark.parametrize("p", [2, 5, 8])
def test_ring_allreduce_matches_alpha_beta(nbytes, p):
    from hw.system.collectives import collective
    from hw.system.system import load_system
    system = load_system(str(LAB / "ideal8.toml"))
    alpha = 2 * 500e-9              # chip -> switch -> chip, no software overhead
    bw = 25e9
    gamma = 1 / (system.reduce_gbps * 1e9)   # 1e9 GB/s: the reduction is (almost) free
    expected = 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes / bw + (p - 1) / p * nbytes * gamma
    assert expected == pytest.approx(2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes / bw,
                                     rel=2e-8)
    for mode in ("sim", "analytic"):
        r = collective(system, "allreduce", nbytes, algorithm="ring", chunks=1, mode=mode,
                       groups=[tuple(range(p))])
        assert r.time_s == pytest.approx(expected, rel=1e-10), (mode, p, nbytes)
    assert r.busbw_gbps == pytest.approx(2 * (p - 1) / p * nbytes / expected / 1e9, rel=1e-9)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p, m", [(2, 1), (4, 8), (4, 32), (3, 5), (6, 4)])
def test_pipeline_bubble_formula(schedule, p, m):
    from compiler.parallel.pipeline import simulate_pipeline
    pipe = load_script(LAB, "pipeline")
    tf, tb = 1.0, 2.0
    res = pipe.summarize(p, m, schedule, tf, tb)
    assert res["makespan"] == pytest.approx((m + p - 1) * (tf + tb))
    assert res["bubble"] == pytest.approx((p - 1) / (m + p - 1))
    assert res["makespan"] == pytest.approx(simulate_pipeline(tf, tb, m, p=p,
                                                              schedule=schedule).makespan_s)
    # GPipe stores every micro-batch's activations; 1F1B at most p - s on stage s
    expect = [m] * p if schedule == "gpipe" else [min(p - s, m) for s in range(p)]
    assert res["peak"] == expect == res["npulab_peak"]


@pytest.mark.parametrize("p, m", [(2, 8), (4, 16), (6, 6)])
def test_planner_gpipe_bubble_with_equal_stages(p, m):
    """plan_step on GPT-2 small with the embedding and output layer made free (so the stages
    are equal) and free communication: bubble / pipeline time = (p-1)/(m+p-1)."""
    from compiler.ir import Gemm
    from compiler.parallel import get_model, plan_step
    edge = ("embedding", "final_ln", "logits", "cross_entropy")

    def op_time(op):
        if op.name.split(".")[0] in edge or op.name.startswith("optimizer"):
            return 0.0
        g = op.gemm_shape() if isinstance(op, Gemm) else None
        return 2 * g.macs / 100e12 if g else op.elements / 1e12

    model = get_model("gpt2-small", global_batch=m)
    r = plan_step(model, f"pp={p},schedule=gpipe", p, None, op_time,
                  lambda op, nbytes, groups: 0.0)
    assert r.microbatches == m
    assert r.exposed_comm_s == 0.0
    assert r.bubble_s / r.pipeline_s == pytest.approx((p - 1) / (m + p - 1), rel=1e-9)
    assert r.step_s == pytest.approx(r.compute_s + r.bubble_s, rel=1e-12)


@pytest.mark.parametrize("system, link", [("dgx-a100", None), ("switch:8", 25.0)])
def test_dp_step_at_least_compute(system, link):
    strat = load_script(LAB, "strategies")
    _, _, rows = strat.plan_all(system, "gpt2-small", ["dp=8", "dp=8,overlap_dp=false",
                                                       "dp=4", "dp=2,pp=4"],
                                global_batch=32, seq_len=None, link_gbps=link)
    by = {r["strategy"]: r for r in rows}
    for r in rows:
        assert r["error"] is None
        parts = sum(r[k] for k in ("compute", "tp", "pp", "dp", "bubble", "optimizer"))
        assert r["step"] == pytest.approx(parts, rel=1e-9)
        assert r["step"] >= r["compute"] + r["optimizer"]
        assert r["dp"] >= 0.0
    assert by["dp=8"]["dp"] <= by["dp=8,overlap_dp=false"]["dp"]
    # DP: every replica computes 1/dp of the batch, so compute halves from dp=4 to dp=8
    assert by["dp=8"]["compute"] == pytest.approx(by["dp=4"]["compute"] / 2, rel=1e-9)
    # one chip runs the same global batch
    assert by["dp=8"]["baseline"] == pytest.approx(by["dp=4"]["baseline"], rel=1e-12)


def test_input_pipeline_claims_of_step_6():
    """Step 6: the load is storage + CPU + host copy; with prefetch the step is max(load,
    compute), without it load + compute; two workers make the step compute-bound again."""
    from compiler.parallel import get_model
    from compiler.parallel.training import InputPipeline
    from hw.system.system import load_system
    from npulab.system_run import input_pipeline_for, plan
    system = load_system("dgx-a100")
    model = get_model("gpt2-small", global_batch=32)
    text = "sample_bytes=150000,workers={w},worker_samples_per_s=100,prefetch={p}"
    plain = plan(system, model, "dp=8").report.step_s
    for w, p in ((1, 2), (1, 0), (2, 2)):
        ip = input_pipeline_for(system, text.format(w=w, p=p))
        assert isinstance(ip, InputPipeline) and ip.host_link_gbps == pytest.approx(25.2)
        load = 100e-6 + 4 * 150000 / 3.5e9 + 4 / (w * 100) + 4 * 150000 / 25.2e9
        r = plan(system, model, "dp=8", input_pipeline=ip).report
        assert r.input_load_s == pytest.approx(load, rel=1e-12)
        want = plain + load if p == 0 else max(load, plain)
        assert r.step_s == pytest.approx(want, rel=1e-12)
    assert 4 / (2 * 100) + 0.3e-3 < plain < 4 / 100       # 2 workers suffice, 1 does not


def test_search_beats_every_hand_strategy_of_step_1():
    """Step 5: the plan found is at least as fast as every strategy of step 1, and its
    optimizer step is the one ZeRO shrinks."""
    from compiler.parallel import get_model
    from compiler.parallel.search import SearchSpace
    from hw.system.system import load_system
    from npulab.plan_run import search
    from npulab.system_run import plan
    system = load_system("dgx-a100")
    model = get_model("gpt2-small", global_batch=32)
    ps = search(system, model, comm_mode="sim", verify=0,
                space=SearchSpace(micro_batch=(1, 4), recompute=("none",)))
    best = ps.best.report
    for text in ("dp=8", "dp=2,tp=4", "dp=2,pp=4", "tp=4,pp=2"):
        assert best.step_s <= plan(system, model, text).report.step_s * (1 + 1e-12)
    assert ps.best.strategy.zero == 3
    assert best.optimizer_s < plan(system, model, "dp=8").report.optimizer_s / 7
