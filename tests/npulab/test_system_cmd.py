"""``npulab collective`` and ``npulab system``: the multi-chip CLI and its glue
(:mod:`npulab.cli.system`, :mod:`npulab.system_run`) against hand-derived gold values.

Closed forms are the alpha-beta-gamma model of Thakur, Rabenseifner & Gropp (2005) and
Patarasuk & Yuan (2009) as tabulated in the reference (docs/multichip.md): ring all-reduce
= 2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma. Bus bandwidth follows nccl-tests
(doc/PERFORMANCE.md): algbw x 2(p-1)/p for all-reduce. The TP traffic of a training step follows
Megatron-LM (Shoeybi et al. 2019, §3): 4 all-reduces of b*s*h elements per layer per micro-batch.
"""

import json
import math
from dataclasses import replace

import pytest

from compiler.ir import Gemm, Graph
from compiler.parallel.backward import backward_ops
from hw.system.collectives import collective
from hw.system.system import load_system
from npulab.cli import main
from npulab.cli.system import _size_list, parse_bytes
from npulab.system_run import op_cost, op_time_for, resolve_model

MIB = 1 << 20
# Inline systems (hw/system/system.py): the A100 roofline, overhead 1400 ns per message and a
# reduction rate of HBM / 3 = 2039 / 3 GB/s (a sum reads two operands and writes one).
INLINE_OVERHEAD_S = 1400e-9
INLINE_GAMMA_S_PER_B = 3 / 2039e9


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


# --------------------------------------------------------------------------- collective

def test_ring_allreduce_on_ring8_equals_the_alpha_beta_gamma_closed_form(capsys):
    n, p = 64 * MIB, 8
    doc = run_json(capsys, "collective", "--system", "ring:8", "--link-gbps", "50",
                   "--link-latency-ns", "1000", "--op", "allreduce", "--bytes", "64MiB",
                   "--algorithm", "ring")
    # How the inline system enters: overhead_ns = 1400 per message, gamma = 1 / (2039/3 GB/s),
    # and ring:8 embeds two rings (forward and reverse, half the data each) that use the two
    # directions of every link, so they never share a directed link.
    system = load_system("ring:8", link_gbps=50, link_latency_ns=1000)
    assert system.overhead_ns == 1400.0 and system.reduce_gbps == pytest.approx(2039 / 3)
    assert system.topology.rings() == [(tuple(range(8)), 0.5), ((0, 7, 6, 5, 4, 3, 2, 1), 0.5)]
    # Each ring is an independent ring all-reduce of n' = n/2 bytes (reference table) with
    # alpha = overhead + one hop's latency = 1.4 us + 1.0 us, beta = 1 / 50e9 s/B:
    #   2(p-1) alpha + 2(p-1)/p n' beta + (p-1)/p n' gamma
    #   = 14 * 2.4 us + 14/8 * 32 MiB / 50 GB/s + 7/8 * 32 MiB * 3 / 2039 GB/s
    #   = 33.6 us + 1174.405 us + 43.198 us = 1251.203 us
    n_ring = n / 2
    alpha, beta = INLINE_OVERHEAD_S + 1000e-9, 1 / 50e9
    expected = (2 * (p - 1) * alpha + 2 * (p - 1) / p * n_ring * beta
                + (p - 1) / p * n_ring * INLINE_GAMMA_S_PER_B)
    assert expected * 1e6 == pytest.approx(1251.203, abs=1e-3)
    assert doc["time_us"] == pytest.approx(expected * 1e6, rel=1e-9)
    algbw = n / (expected * 1e9)
    assert doc["algbw_gbps"] == pytest.approx(algbw, rel=1e-9)
    assert doc["busbw_gbps"] == pytest.approx(algbw * 2 * (p - 1) / p, rel=1e-9)
    (row,) = doc["results"]
    assert row["ranks"] == 8 and row["groups"] == 1 and row["algorithm"] == "ring"
    # 2 rings x 2(p-1) steps x p senders; every directed link carries 14 blocks of n/16
    assert row["messages"] == 2 * 14 * 8
    assert row["max_link_utilization"] == pytest.approx(14 * n / 16 / (50e9 * expected),
                                                        rel=1e-9)


def test_direct_alltoall_contention_and_the_congestion_unaware_mode(capsys):
    # ring:8, 8 MiB sent per rank, n/8 per peer, routes take the shorter way (distance-4 ties
    # go +). Without contention every flow gets a whole link: o + (n/8)/B + 4 hops * L.
    # With contention: a "+" link is crossed by the flows of distance 1..4 passing it,
    # 1+2+3+4 = 10 flows (a "-" link by 1+2+3 = 6); all "+" links are alike, so the "+" flows
    # share B/10 until they all end together at 10 (n/8) / B; the 4-hop one arrives last:
    # o + 1.25 n / B + 4 L.
    n, bw, lat = 8 * MIB, 50e9, 1000e-9
    argv = ("collective", "--system", "ring:8", "--link-gbps", "50", "--link-latency-ns",
            "1000", "--op", "alltoall", "--bytes", "8M")
    shared = run_json(capsys, *argv)
    alone = run_json(capsys, *argv, "--no-contention")
    assert shared["algorithm"] == alone["algorithm"] == "direct"        # auto for all-to-all
    assert shared["time_us"] == pytest.approx((INLINE_OVERHEAD_S + 1.25 * n / bw + 4 * lat)
                                              * 1e6, rel=1e-9)
    assert alone["time_us"] == pytest.approx((INLINE_OVERHEAD_S + n / 8 / bw + 4 * lat) * 1e6,
                                             rel=1e-9)


@pytest.mark.parametrize("system, op, algorithm", [
    ("torus2d:4x4", "allreduce", "ring"),
    ("torus2d:4x4", "allreduce", "hierarchical"),
    ("switch:8", "allgather", "rhd"),
    ("fattree:16x4", "broadcast", "tree"),
    ("fc:4", "reducescatter", "direct"),
])
def test_no_contention_is_never_slower(capsys, system, op, algorithm):
    argv = ("collective", "--system", system, "--op", op, "--bytes", "4M", "--algorithm",
            algorithm)
    shared = run_json(capsys, *argv)["time_us"]
    alone = run_json(capsys, *argv, "--no-contention")["time_us"]
    assert 0 < alone <= shared * (1 + 1e-12)


def test_json_rows_equal_a_direct_collective_call(capsys):
    doc = run_json(capsys, "collective", "--system", "torus2d:2x4", "--link-gbps", "40",
                   "--op", "allgather", "--bytes", "1M,3MB", "--algorithm", "rhd",
                   "--root", "0")
    system = load_system("torus2d:2x4", link_gbps=40)
    expected = [json.loads(json.dumps(collective(system, "allgather", n, algorithm="rhd")
                                      .to_dict())) for n in (MIB, 3_000_000)]
    assert doc["results"] == expected
    assert doc["system"] == "torus2d:2x4" and doc["op"] == "allgather" and doc["mode"] == "sim"
    assert "time_us" not in doc          # several rows: no top-level single result


def test_algorithm_all_lists_every_applicable_algorithm(capsys):
    # collectives.SUPPORTED: all-reduce has ring, tree, rhd, direct, hierarchical, ps;
    # hierarchical needs the whole system and more than one level (torus2d: rows, columns).
    doc = run_json(capsys, "collective", "--system", "torus2d:2x4", "--op", "allreduce",
                   "--bytes", "64K", "--algorithm", "all")
    assert [r["algorithm"] for r in doc["results"]] == ["ring", "tree", "rhd", "direct",
                                                        "hierarchical", "ps"]
    doc = run_json(capsys, "collective", "--system", "torus2d:2x4", "--op", "allreduce",
                   "--bytes", "64K", "--algorithm", "all", "--ranks", "4")
    assert [r["algorithm"] for r in doc["results"]] == ["ring", "tree", "rhd", "direct", "ps"]
    assert {r["ranks"] for r in doc["results"]} == {4}
    doc = run_json(capsys, "collective", "--system", "ring:8", "--op", "alltoall",
                   "--bytes", "64K", "--algorithm", "all")
    assert [r["algorithm"] for r in doc["results"]] == ["direct"]
    # the table prints one row per size and algorithm
    code, out, _ = run(capsys, "collective", "--system", "ring:4", "--op", "allgather",
                       "--bytes", "1K,2K", "--algorithm", "all")
    rows = [line.split() for line in out.splitlines()[2:]]
    assert code == 0 and [(r[0] + r[1], r[2]) for r in rows] == [
        ("1KiB", "ring"), ("1KiB", "rhd"), ("1KiB", "direct"),
        ("2KiB", "ring"), ("2KiB", "rhd"), ("2KiB", "direct")]


def test_table_output_shows_the_json_numbers(capsys):
    argv = ("collective", "--system", "ring:8", "--link-gbps", "50", "--link-latency-ns",
            "1000", "--op", "allreduce", "--bytes", "64MiB", "--algorithm", "ring")
    doc = run_json(capsys, *argv)
    code, out, _ = run(capsys, *argv)
    lines = out.splitlines()
    assert code == 0 and lines[0] == "npulab collective: allreduce on ring:8 (8 ranks, sim)"
    assert lines[2].split() == ["64", "MiB", "ring", f"{doc['time_us']:.2f}",
                                f"{doc['algbw_gbps']:.2f}", f"{doc['busbw_gbps']:.2f}", "224"]


def test_ranks_runs_on_the_first_n_ranks(capsys):
    doc = run_json(capsys, "collective", "--system", "ring:8", "--op", "allreduce",
                   "--bytes", "2M", "--algorithm", "ring", "--ranks", "4")
    system = load_system("ring:8")
    direct = collective(system, "allreduce", 2 * MIB, algorithm="ring", groups=[(0, 1, 2, 3)])
    assert doc["results"][0]["ranks"] == 4
    assert doc["time_us"] == direct.time_s * 1e6
    # a 4-rank all-reduce of the same buffer: busbw factor 2 * 3/4
    assert doc["busbw_gbps"] == pytest.approx(doc["algbw_gbps"] * 1.5, rel=1e-12)


def test_sizes_parse_as_lists_and_doubling_ranges(capsys):
    assert _size_list("8,1M") == [8, MIB]
    assert _size_list("8:1K") == [8, 16, 32, 64, 128, 256, 512, 1024]
    assert _size_list("3:16") == [3, 6, 12]            # doubling stops at the last size <= end
    assert _size_list("1K:1K") == [1024]
    doc = run_json(capsys, "collective", "--system", "ring:4", "--op", "allreduce",
                   "--bytes", "8:1K")
    assert [r["nbytes"] for r in doc["results"]] == [8.0 * 2 ** i for i in range(8)]


@pytest.mark.parametrize("text, value", [
    ("8", 8), ("1048576", 1048576), ("1K", 1024), ("1k", 1024), ("1KiB", 1024),
    ("1KB", 1000), ("64MiB", 64 * MIB), ("64M", 64 * MIB), ("64MB", 64_000_000),
    ("1G", 1 << 30), ("1GB", 10 ** 9), ("1.5GB", 1_500_000_000), ("1.5K", 1536),
    ("2T", 2 << 40), ("1TB", 10 ** 12), (" 8 b ", 8), ("1e3", 1000), ("0.5K", 512),
])
def test_parse_bytes_units(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["", "abc", "8XB", "-1", "0", "1.5", "0.3K", "1e400", "1 2",
                                  "MiB"])
def test_parse_bytes_rejects_bad_sizes(text):
    with pytest.raises(ValueError, match=r"^--bytes "):
        parse_bytes(text)


# --------------------------------------------------------------------------- system

def test_roofline_op_time_of_one_gemm_by_hand():
    timer = op_time_for(load_system("ring:8"))        # A100: 312 TFLOP/s, 2039 GB/s, eff. 1
    big = Gemm(name="g", m=4096, n=4096, k=4096)
    # flops 2 * 4096^3 = 137,438,953,472; bytes fp16 A+B+C = 2 * 3 * 4096^2 = 100,663,296
    assert op_cost(big) == (137_438_953_472.0, 100_663_296.0, True)
    # compute-bound: 137.44e9 / 312e12 = 440.5 us > 100.66e6 / 2039e9 = 49.4 us
    assert timer(big) == pytest.approx(137_438_953_472 / 312e12, rel=1e-12)
    gemv = Gemm(name="v", m=1, n=4096, k=4096)
    # flops 2 * 4096^2 = 33,554,432 (0.11 us); bytes 2 * (4096 + 4096^2 + 4096) = 33,570,816
    # -> memory-bound: 33,570,816 / 2039e9 = 16.46 us
    assert op_cost(gemv) == (33_554_432.0, 33_570_816.0, True)
    assert timer(gemv) == pytest.approx(33_570_816 / 2039e9, rel=1e-12)
    batched = Gemm(name="b", m=64, n=32, k=16, batch=3)
    assert op_cost(batched) == (2.0 * 3 * 64 * 32 * 16, 2.0 * 3 * (64 * 16 + 16 * 32 + 64 * 32),
                                True)


def test_resnet18_data_parallel_step_breakdown(capsys):
    doc = run_json(capsys, "system", "--system", "ring:8", "--model", "resnet18", "--strategy",
                   "dp=8", "--batch", "8")
    assert doc["n_ranks"] == 8 and doc["microbatches"] == 1 and doc["samples_per_step"] == 64
    # pp = tp = 1: step = compute + exposed comm (dp only) + bubble (0) + optimizer
    assert doc["exposed_tp_s"] == doc["exposed_pp_s"] == doc["bubble_s"] == 0.0
    assert doc["step_s"] == pytest.approx(doc["compute_s"] + doc["exposed_comm_s"]
                                          + doc["bubble_s"] + doc["optimizer_s"], rel=1e-12)
    # ResNet-18 has 11,689,512 parameters (torchvision); the IR counts conv and FC weights,
    # without the 9,600 batch-norm scales/shifts (2 x 4,800 channels) and the 1,000 FC biases.
    params = 11_689_512 - 9_600 - 1_000
    grad = 2 * params
    assert doc["comm_bytes"]["dp"] == grad
    assert doc["sent_bytes"]["dp"] == pytest.approx(2 * 7 / 8 * grad, rel=1e-12)
    # ZeRO-0 mixed-precision Adam: 2 + 2 + 12 bytes per parameter (Rajbhandari et al. 2020)
    assert (doc["memory"]["params"], doc["memory"]["grads"], doc["memory"]["optimizer"]) == (
        2 * params, 2 * params, 12 * params)
    # the 23.4 MB of fp16 gradients fit one 25 MiB (26.2 MB) bucket; with overlap_dp it starts
    # when the backward has produced all of it, i.e. when the backward ends: all exposed
    system = load_system("ring:8")
    ar = collective(system, "allreduce", grad, groups=[tuple(range(8))])
    assert ar.algorithm == "ring"
    assert doc["exposed_dp_s"] == pytest.approx(ar.time_s, rel=1e-12)
    # scaling efficiency = (samples/s per chip) / (one chip's samples/s); the one-chip baseline
    # runs dp x m = 8 micro-batches of 8 with no communication: 8 compute + optimizer
    assert doc["baseline_step_s"] == pytest.approx(8 * doc["compute_s"] + doc["optimizer_s"],
                                                   rel=1e-12)
    assert doc["scaling_efficiency"] == pytest.approx(
        (64 / doc["step_s"] / 8) / (64 / doc["baseline_step_s"]), rel=1e-12)
    assert doc["scaling_efficiency"] == pytest.approx(doc["baseline_step_s"]
                                                      / (8 * doc["step_s"]), rel=1e-12)
    # compute per chip = forward + backward roofline times of one micro-batch of 8
    graph = resolve_model("resnet18", batch=8)
    timer = op_time_for(system)
    ops = list(graph.ops) + list(backward_ops(graph, input_grad=False).ops)
    assert doc["compute_s"] == pytest.approx(sum(timer(op) for op in ops), rel=1e-9)


def test_one_chip_scales_perfectly_and_table_output(capsys):
    doc = run_json(capsys, "system", "--system", "ring:8", "--model", "resnet18", "--strategy",
                   "dp=1", "--batch", "8")
    assert doc["n_ranks"] == 1 and doc["exposed_comm_s"] == 0.0
    assert doc["scaling_efficiency"] == 1.0 and doc["baseline_step_s"] == doc["step_s"]
    code, out, _ = run(capsys, "system", "--system", "ring:8", "--model", "resnet18",
                       "--strategy", "dp=1", "--batch", "8")
    assert code == 0 and out.startswith("npulab system: resnet18 on ring:8 (1 of 8 chips: "
                                        "dp=1 tp=1 pp=1, 1 micro-batches")
    assert f"step time                {doc['step_s'] * 1e3:,.3f} ms" in out
    assert "scaling efficiency       100.0 % (speed-up 1.00x on 1 chips)" in out


def test_megatron_tensor_parallel_bytes_match_megatron(capsys):
    doc = run_json(capsys, "system", "--system", "dgx-a100", "--model", "megatron-22b",
                   "--strategy", "tp=8", "--global-batch", "4")
    # megatron-22b (Korthikanti et al. 2022 Table 3): 48 layers, h = 6144, s = 2048, b = 4
    layers, h, s, b, p = 48, 6144, 2048, 4, 8
    assert doc["microbatches"] == 1 and doc["n_ranks"] == 8
    buf = b * s * h * 2                                     # one all-reduce, fp16
    # 4 all-reduces per layer (2 forward, 2 backward; Megatron-LM §3), plus the vocab-parallel
    # embedding's forward all-reduce and the logits input's backward all-reduce (step.py)
    count = 4 * layers + 2
    assert doc["comm_bytes"]["tp"] == count * buf
    # a ring all-reduce sends 2(p-1)/p of the buffer per rank
    assert doc["sent_bytes"]["tp"] == pytest.approx(count * 2 * (p - 1) / p * buf, rel=1e-12)
    assert doc["comm_bytes"]["dp"] == doc["comm_bytes"]["pp"] == 0.0
    # TP all-reduces sit on the critical path: each costs one simulated collective
    ar = collective(load_system("dgx-a100"), "allreduce", buf, groups=[tuple(range(8))])
    assert [(c["op"], c["nbytes"], c["group_size"]) for c in doc["comm_calls"]] == [
        ("allreduce", buf, 8)]
    assert doc["comm_calls"][0]["seconds"] == ar.time_s
    assert doc["exposed_tp_s"] == pytest.approx(count * ar.time_s, rel=1e-12)
    assert doc["step_s"] == pytest.approx(doc["compute_s"] + doc["exposed_comm_s"]
                                          + doc["bubble_s"] + doc["optimizer_s"], rel=1e-12)


@pytest.mark.parametrize("argv", [
    ("--system", "ring:8", "--model", "resnet18", "--strategy", "dp=8", "--batch", "8"),
    ("--system", "dgx-a100", "--model", "megatron-22b", "--strategy", "tp=8",
     "--global-batch", "4"),
])
def test_analytic_comm_matches_sim_without_contention(capsys, argv):
    # A single ring all-reduce (resnet's DP gradients on ring:8; the TP group of one switch)
    # has no contention, and the analytic ring formula (hw/system/analytic.py ring_pipelined,
    # one chunk: steps x (S + L + o) plus p-1 reductions) is the engine's start rule in closed
    # form: the two modes agree to rounding.
    sim = run_json(capsys, "system", *argv)
    ana = run_json(capsys, "system", *argv, "--comm", "analytic")
    assert ana["comm_mode"] == "analytic" and sim["comm_mode"] == "sim"
    assert ana["exposed_comm_s"] > 0
    assert ana["exposed_comm_s"] == pytest.approx(sim["exposed_comm_s"], rel=1e-9)
    assert ana["compute_s"] == sim["compute_s"]


@pytest.mark.parametrize("argv, fragment", [
    (["system", "--system", "ring:8", "--model", "resnet18", "--strategy", "dp=16"],
     "needs 16 chips; system 'ring:8' has 8"),
    (["system", "--system", "dgx-a100", "--model", "megatron-22b", "--strategy", "tp=3"],
     "tp = 3: must be a divisor of the model's heads = 64"),
    (["system", "--system", "ring:8", "--model", "resnet99"], "--model 'resnet99': unknown model"),
    (["system", "--system", "ring:8", "--model", "resnet18", "--strategy", "tp=2"],
     "supports data parallelism only"),
    (["system", "--system", "nosuch", "--model", "resnet18"], "system 'nosuch': unknown"),
    (["collective", "--system", "nosuch", "--op", "allreduce", "--bytes", "8"],
     "system 'nosuch': unknown"),
    (["collective", "--system", "ring:8", "--op", "allreduce", "--bytes", "8XB"],
     "--bytes '8XB': expected a size"),
    (["collective", "--system", "ring:8", "--op", "allreduce", "--bytes", ","],
     "--bytes ',': no size given"),
    (["collective", "--system", "ring:8", "--op", "allreduce", "--bytes", "1e400"],
     "--bytes '1e400': must be a whole number"),
    (["collective", "--system", "ring:8", "--op", "allreduce", "--bytes", "1K:8"],
     "--bytes '1K:8': the range end must be >= its start"),
    (["collective", "--system", "ring:8", "--op", "allreduce", "--bytes", "8", "--ranks", "9"],
     "--ranks 9: must be in 2..8"),
    (["collective", "--system", "ring:8", "--op", "alltoall", "--bytes", "8", "--algorithm",
      "ring"], "algorithm = 'ring' does not implement alltoall"),
    (["collective", "--system", "ring:8", "--op", "allreduce", "--bytes", "8", "--chunks",
      "0"], "chunks = 0"),
])
def test_errors_are_one_line_naming_the_culprit(capsys, argv, fragment):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("npulab: error: ") and err.count("\n") == 1
    assert fragment in err


def test_chip_device_compute_is_the_sum_of_simulated_ops(capsys):
    # pcie4-x4: 4 npulab default chips (a ChipDevice): every op runs on the chip model and its
    # cycles turn into seconds at the chip clock. A 64x64 image keeps the run short.
    doc = run_json(capsys, "system", "--system", "pcie4-x4", "--model", "resnet18",
                   "--strategy", "dp=4", "--batch", "1", "--image-size", "64")
    assert doc["device"] == "default" and doc["n_ranks"] == 4 and doc["peak_flops"] is None
    assert doc["step_s"] == pytest.approx(doc["compute_s"] + doc["exposed_comm_s"]
                                          + doc["bubble_s"] + doc["optimizer_s"], rel=1e-12)
    from hw.configfile import load_chip_config
    from npulab.cli.common import resolve_config
    from npulab.simulate import simulate
    chip = load_chip_config(resolve_config("default"))
    graph = resolve_model("resnet18", batch=1, image_size=64)
    ops = list(graph.ops) + list(backward_ops(graph, input_grad=False).ops)
    cycles: dict = {}                 # one simulation per distinct shape (names do not matter)
    total = 0
    for op in ops:
        key = replace(op, name="op", inputs=())
        if key not in cycles:
            cycles[key] = simulate(Graph("one", (key,)), chip).totals["cycles"]
        total += cycles[key]
    assert doc["compute_s"] == pytest.approx(total / chip.clock_hz, rel=1e-9)
    assert doc["compute_s"] > 0 and math.isfinite(doc["step_s"])


def test_kernels_option_times_unfused_element_wise_work(capsys):
    """--kernels unfused adds the element-wise kernels Megatron-LM fuses (compute grows, the
    communication does not change) and says so in the header; a CNN has no fused kernels to
    split: one line."""
    base = ["system", "--system", "hgx-a100-4", "--model", "gpt2-small", "--strategy",
            "dp=2,tp=2", "--comm", "analytic", "--format", "json"]
    out = {}
    for k in ("fused", "unfused"):
        assert main(base + ["--kernels", k]) == 0
        out[k] = json.loads(capsys.readouterr().out)
    assert out["unfused"]["kernels"] == "unfused" and out["fused"]["kernels"] == "fused"
    assert out["unfused"]["compute_s"] > out["fused"]["compute_s"]
    assert out["unfused"]["exposed_tp_s"] == pytest.approx(out["fused"]["exposed_tp_s"])
    assert main(base[:-2] + ["--kernels", "unfused"]) == 0
    assert "unfused kernels" in capsys.readouterr().out.splitlines()[0]
    code = main(["system", "--system", "hgx-a100-4", "--model", "resnet50", "--strategy",
                 "dp=4", "--kernels", "unfused"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "kernels = 'unfused'" in err
