"""The training step beyond forward/backward: input pipeline, gradient compression, goodput.

Gold: the closed forms of :mod:`compiler.parallel.training` written out here by hand (a
batch's trip through the loader; max(load, compute) with prefetch and load + compute without;
bytes of each compression scheme, DGC's values + int32 indices, PowerSGD's r(m + n) factors;
Pollux's statistical efficiency).
"""

from __future__ import annotations

import math

import pytest

from compiler.parallel import TransformerModel, plan_step
from compiler.parallel.training import (GradCompression, InputPipeline, goodput,
                                        parse_options, statistical_efficiency)

from compiler.ir import Gemm

TINY = TransformerModel("tiny", layers=6, hidden=256, heads=8, seq_len=128, vocab=1000,
                        global_batch=16)


def roofline(op):
    """GEMMs at 100 TFLOP/s, everything else streams its output x 3 at 1 TB/s."""
    if isinstance(op, Gemm):
        return 2.0 * op.macs / 100e12
    return 6.0 * op.output_elements / 1e12


def alpha_beta(op, nbytes, groups):
    """A ring at 10 GB/s with 5 us per step."""
    p = len(groups[0])
    f = 2 * (p - 1) / p if op == "allreduce" else 1.0 if op == "broadcast" else (p - 1) / p
    return 5e-6 * (p - 1) + f * nbytes / 10e9


def test_loader_stages_are_their_closed_forms():
    ip = InputPipeline(sample_bytes=1000, device_bytes=500, storage_gbps=2.0,
                       storage_latency_us=50, workers=4, worker_samples_per_s=1000,
                       host_link_gbps=20.0, memcpy_gbps=5.0, pinned=False, prefetch=0)
    st = ip.stages(64)
    assert st["storage"] == pytest.approx(50e-6 + 64 * 1000 / 2e9)
    assert st["cpu"] == pytest.approx(64 / (4 * 1000))
    # pageable: staged through a pinned buffer, host memcpy then the link
    assert st["h2d"] == pytest.approx(64 * 500 / 20e9 + 64 * 500 / 5e9)
    assert ip.load_s(64) == pytest.approx(sum(st.values()))


@pytest.mark.parametrize("sample_bytes", [1e3, 1e5, 1e8])
def test_step_is_max_of_load_and_compute_with_prefetch(sample_bytes):
    """With prefetch the step is max(load, compute); without, load + compute; an input-bound
    step shows its wait as ``input``."""
    base = plan_step(TINY, "dp=4,tp=2", 8, None, roofline, alpha_beta)
    for prefetch in (0, 1, 4):
        ip = InputPipeline(sample_bytes=sample_bytes, prefetch=prefetch)
        r = plan_step(TINY, "dp=4,tp=2", 8, None, roofline, alpha_beta, input_pipeline=ip)
        load = ip.load_s(TINY.global_batch / 4)        # one loader per replica
        assert r.input_load_s == pytest.approx(load, rel=1e-12)
        want = base.step_s + load if prefetch == 0 else max(load, base.step_s)
        assert r.step_s == pytest.approx(want, rel=1e-12)
        assert r.breakdown()["input"] == pytest.approx(r.step_s - base.step_s, abs=1e-15)
        assert r.to_dict()["input_pipeline"]["prefetch"] == prefetch


def _params(model, dp):
    r = plan_step(model, f"dp={dp}", dp, None, roofline, alpha_beta)
    return r.memory["params"] / 2          # fp16 weights: 2 bytes each


@pytest.mark.parametrize("kind", ["none", "fp16", "int8", "topk", "powersgd"])
def test_compression_changes_bytes_by_its_closed_form(kind):
    """One bucket holds the whole gradient (bucket_mb large): the data-parallel bytes are the
    scheme's closed form; fp32 gradients (dtype 4) so fp16 halves them."""
    dp = 8
    P = _params(TINY, dp)
    comp = GradCompression(kind, density=0.01, rank=4)
    r = plan_step(TINY, f"dp={dp},bucket_mb=1000", dp, None, roofline, alpha_beta,
                  compression=comp, dtype_bytes=4)
    h, f, v, s = TINY.hidden, TINY.ffn, TINY.vocab, TINY.seq_len
    if kind == "none":
        want = 4 * P
    elif kind == "fp16":
        want = 2 * P
    elif kind == "int8":
        want = P + 4                                  # one fp32 scale for the one bucket
    elif kind == "topk":
        want = dp * math.ceil(0.01 * P) * (2 + 4)     # every rank's values + int32 indices
    else:
        mats = [(h, 3 * h), (h, h), (h, f), (f, h)] * TINY.layers + [(v, h)]
        mat = sum(a * b for a, b in mats)
        want = 4 * sum(4 * (a + b) for a, b in mats) + (P - mat) * 4
    assert r.comm_bytes["dp"] == pytest.approx(want, rel=1e-12)
    assert (r.compress_s > 0) == (kind != "none")
    assert (r.comm_calls[-1]["op"] if kind != "none" else "allreduce") == (
        "allgather" if kind == "topk" else "allreduce")


def test_compression_trades_bytes_for_compute_on_a_slow_network():
    """On a slow network int8 and PowerSGD shorten the step; their compute is in the DP part."""
    slow = lambda op, n, g: alpha_beta(op, n, g) * 100           # noqa: E731
    t = {k: plan_step(TINY, "dp=8", 8, None, roofline, slow, dtype_bytes=4,
                      compression=GradCompression(k)).step_s for k in ("none", "int8",
                                                                      "powersgd")}
    assert t["powersgd"] < t["int8"] < t["none"]


def test_compression_needs_allreduced_gradients():
    with pytest.raises(ValueError, match="zero = 1: gradient compression"):
        plan_step(TINY, "dp=8,zero=1", 8, None, roofline, alpha_beta,
                  compression=GradCompression("int8"))


def test_goodput_is_throughput_times_efficiency():
    """Pollux: efficiency (B_noise + M0)/(B_noise + M); goodput = throughput x efficiency, so a
    larger batch that runs faster can still make less progress per second."""
    assert statistical_efficiency(64, 1000, 64) == 1.0
    assert statistical_efficiency(1024, 1000, 64) == pytest.approx(1064 / 2024)
    small = plan_step(TransformerModel(**{**TINY.to_dict(), "global_batch": 16}), "dp=8", 8,
                      None, roofline, alpha_beta)
    big = plan_step(TransformerModel(**{**TINY.to_dict(), "global_batch": 512}), "dp=8", 8,
                    None, roofline, alpha_beta)
    assert big.samples_per_s > small.samples_per_s
    g_small = goodput(small.samples_per_s, 16, 32, 16)
    g_big = goodput(big.samples_per_s, 512, 32, 16)
    assert g_big == pytest.approx(big.samples_per_s * 48 / 544)
    assert g_big < g_small          # faster, but converges slower per sample
    with pytest.raises(ValueError, match="noise_scale"):
        statistical_efficiency(64, 0, 64)


def test_options_parse_with_one_line_errors():
    ip = parse_options(InputPipeline, "workers=4,pinned=false,sample_bytes=1e5", "--input")
    assert (ip.workers, ip.pinned, ip.sample_bytes) == (4, False, 1e5)
    c = parse_options(GradCompression, "powersgd,rank=8", "--compression")
    assert (c.kind, c.rank) == ("powersgd", 8)
    for text, msg in (("workers=0", "workers = 0: must be an integer in 1..4096"),
                      ("speed=3", "unknown key 'speed'"), ("pinned=maybe", "true or false"),
                      ("storage_gbps=-1", "storage_gbps = -1.0: must be a number in (0, ")):
        with pytest.raises(ValueError, match="--input") as exc:
            parse_options(InputPipeline, text, "--input")
        assert msg in str(exc.value)
    with pytest.raises(ValueError, match="kind = 'zip'"):
        parse_options(GradCompression, "kind=zip", "--compression")


@pytest.mark.parametrize("text", ["dp=2,tp=2,pp=2", "tp=2,pp=4,m=8,v=2",
                                  "pp=2,schedule=gpipe,dp=4"])
def test_timeline_tiles_the_step(text):
    """The timeline: each stage's tasks add up to its busy time, each task's layer regions tile
    it exactly, sends follow their tasks, and the last event ends at the step time."""
    from compiler.parallel import parse_strategy
    st = parse_strategy(text)
    r = plan_step(TINY if st.interleave == 1 else TransformerModel(
        **{**TINY.to_dict(), "layers": 8}), st, st.n_ranks, None, roofline, alpha_beta,
        timeline=True)
    tl = r.timeline
    assert len(tl["stages"]) == st.pp and tl["step_s"] == r.step_s
    ends = [e["start"] + e["dur"] for g in tl["stages"] for e in g["events"]]
    assert max(ends) == pytest.approx(r.step_s, rel=1e-12)
    for g in tl["stages"]:
        comp = [e for e in g["events"] if e["track"] == "compute"]
        tasks = [e for e in comp if e["name"].startswith(("forward", "backward"))]
        assert len(tasks) == 2 * r.microbatches * st.interleave
        inner = [e for e in comp if e not in tasks]
        for t in tasks:
            parts = [e for e in inner if t["start"] - 1e-15 <= e["start"]
                     and e["start"] + e["dur"] <= t["start"] + t["dur"] + 1e-12]
            assert sum(e["dur"] for e in parts) == pytest.approx(t["dur"], rel=1e-9)
        if st.pp > 1:
            assert any(e["track"] == "pp sends" for e in g["events"])
        if st.dp > 1:
            assert any(e["track"] == "dp collectives" for e in g["events"])
    assert r.to_dict().get("timeline") is None          # its own view, not in the summary


def test_timeline_waits_for_input_without_prefetch():
    ip = InputPipeline(sample_bytes=1e6, prefetch=0)
    r = plan_step(TINY, "dp=8", 8, None, roofline, alpha_beta, input_pipeline=ip, timeline=True)
    evs = r.timeline["stages"][0]["events"]
    load = [e for e in evs if e["track"] == "input"][0]
    first = min(e["start"] for e in evs if e["track"] == "compute")
    assert load["start"] == 0.0 and load["dur"] == pytest.approx(r.input_load_s)
    assert first == pytest.approx(r.input_load_s)


def _kernels(model):
    """Kernels of one forward and one backward pass of the whole model on one rank."""
    from compiler.ir import Graph
    from compiler.parallel.backward import backward_ops
    fwd = model.layer_ops(1)
    per_layer = len(fwd) + len(backward_ops(Graph("l", tuple(fwd))).ops)
    emb, head = model.embedding_ops(1), model.head_ops(1)
    edges = len(emb) + len(head) + len(backward_ops(Graph("e", tuple(emb))).ops) + len(
        backward_ops(Graph("h", tuple(head))).ops)
    return model.layers * per_layer + edges


def test_kernel_launch_modes():
    """sync adds one launch per kernel; graph one per forward and backward pass; eager makes
    every kernel at least a launch long (no change when kernels are long)."""
    from compiler.parallel.training import KernelLaunch
    base = plan_step(TINY, "pp=1", 1, None, roofline, alpha_beta)
    n_opt = 1                                        # the optimizer's one kernel
    sync = plan_step(TINY, "pp=1", 1, None, roofline, alpha_beta,
                     launch=KernelLaunch("sync", 10.0))
    m = base.microbatches
    assert sync.step_s == pytest.approx(base.step_s + 10e-6 * (m * _kernels(TINY) + n_opt),
                                        rel=1e-9)
    graph = plan_step(TINY, "pp=1", 1, None, roofline, alpha_beta,
                      launch=KernelLaunch("graph", 10.0), timeline=True)
    assert graph.step_s == pytest.approx(base.step_s + 10e-6 * 2 * m, rel=1e-9)
    eager_short = plan_step(TINY, "pp=1", 1, None, roofline, alpha_beta,
                            launch=KernelLaunch("eager", 0.001))
    assert eager_short.step_s == base.step_s         # every kernel is longer than 1 ns
    eager_long = plan_step(TINY, "pp=1", 1, None, roofline, alpha_beta,
                           launch=KernelLaunch("eager", 1e3))
    assert eager_long.step_s == pytest.approx(1e-3 * (m * _kernels(TINY) + n_opt), rel=1e-9)
    with pytest.raises(ValueError, match="mode = 'jit'"):
        KernelLaunch("jit")


def test_offload_moves_optimizer_state_to_the_host():
    """ZeRO-Offload: the 12 bytes of optimizer state per parameter leave the device; the update
    is the gradient shard down the host link, CPU Adam at host memory speed, the fp16
    parameters back: 4P / link + 28P / memory."""
    from compiler.parallel.formulas import zero_memory_bytes
    from compiler.parallel.training import HostOffload
    assert zero_memory_bytes(1000, 4, 1, offload=True) == {
        "params": 2000.0, "grads": 2000.0, "optimizer": 0.0, "total": 4000.0}
    host = HostOffload(link_gbps=20.0, memory_gbps=50.0)
    on = plan_step(TINY, "dp=4,zero=1,offload=true", 4, None, roofline, alpha_beta, host=host)
    off = plan_step(TINY, "dp=4,zero=1", 4, None, roofline, alpha_beta)
    P = on.memory["params"] / 2                       # fp16 weights: 2 bytes each
    shard = math.ceil(P / 4)
    assert on.optimizer_s == pytest.approx(4 * shard / 20e9 + 28 * shard / 50e9, rel=1e-12)
    assert off.memory["total"] - on.memory["total"] == pytest.approx(12 * P / 4, rel=1e-9)
    assert on.step_s - on.optimizer_s == pytest.approx(off.step_s - off.optimizer_s, rel=1e-12)


def test_search_offloads_only_what_does_not_fit_otherwise():
    """A memory limit under the smallest plan without offload: every plan found offloads; with
    room, none does (offload is never faster)."""
    from compiler.parallel.search import SearchSpace, search_plans
    from compiler.parallel.training import HostOffload
    space = SearchSpace(micro_batch=(1,), recompute=("full",), schedules=("1f1b",))
    roomy = search_plans(TINY, 8, roofline, alpha_beta, device_mem_bytes=1e9, space=space,
                         pareto=False)
    assert not any(c.strategy.offload for c in roomy.evaluated)
    least = min(c.memory_bytes for c in search_plans(
        TINY, 8, roofline, alpha_beta, space=SearchSpace(micro_batch=(1,), recompute=("full",),
                                                        schedules=("1f1b",), offload=False),
        exhaustive=True, pareto=False).evaluated)
    tight = search_plans(TINY, 8, roofline, alpha_beta, device_mem_bytes=least * 0.9,
                         space=space, pareto=False, host=HostOffload())
    assert tight.evaluated and all(c.strategy.offload for c in tight.evaluated)
    assert all(c.report.fits for c in tight.evaluated)
    assert "offload=true" in tight.best.text


@pytest.mark.parametrize("rc, rerun", [("none", 0), ("selective", 2), ("full", 8)])
def test_unfused_kernels_add_their_element_wise_work(rc, rerun):
    """kernels='unfused' runs Megatron-LM's fused work as separate kernels: per layer per
    micro-batch 8 forward kernels (4 bias adds, 2 hidden dropouts, the attention scale and
    mask), 8 backward kernels, and the recomputed ones (selective: the scale and mask, part of
    the attention core; full: all 8). Timing those kernels 1 ms each and nothing else 0 gives
    the compute difference in closed form; the fused step is the layer_ops() step."""
    extra = {op.name for op in TINY.unfused_ops(1)}
    assert len(extra) == 8

    def timer(op):
        return 1e-3 if op.name.removesuffix(".grad") in extra else 0.0
    st = f"dp=1,tp=1,pp=1,recompute={rc}"
    fused = plan_step(TINY, st, 1, None, timer, alpha_beta)
    unfused = plan_step(TINY, st, 1, None, timer, alpha_beta, kernels="unfused")
    assert fused.compute_s == 0.0 and unfused.kernels == "unfused"
    per_layer = (8 + 8 + rerun) * 1e-3
    assert unfused.compute_s == pytest.approx(fused.microbatches * TINY.layers * per_layer)
    assert unfused.recompute_s == pytest.approx(fused.microbatches * TINY.layers * rerun * 1e-3)
    sizes = {op.name.rsplit(".", 1)[-1]: op.elements for op in TINY.unfused_ops(2)}
    tokens = TINY.micro_batch * TINY.seq_len
    assert sizes["scale"] == TINY.micro_batch * TINY.heads // 2 * TINY.seq_len ** 2
    assert sizes["fc1_bias"] == tokens * TINY.ffn // 2 and sizes["out_bias"] == tokens * 256
    with pytest.raises(ValueError, match="kernels = 'fast': must be one of fused, unfused"):
        plan_step(TINY, st, 1, None, timer, alpha_beta, kernels="fast")
