"""LLM serving (npulab.llm_serve, ``npulab llm serve``): every request completes exactly once
with its tokens, the KV cache never holds more blocks than it has, a lone request's times are
the prefill and decode steps of ``llm_generate``, the schedulers differ as their papers say
(continuous batching cuts the waiting that static batching imposes; chunked prefill keeps every
iteration within its token budget; disaggregation separates prefill from decode), and traces
are read and generated reproducibly."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from compiler.frontends.llm import DecoderConfig, get_llm
from hw.system.system import load_system
from npulab.cli import main
from npulab.llm_run import llm_generate
from npulab.llm_serve import (
    POLICIES, IterationCost, Scheduler, TraceError, grid, poisson_trace, read_trace, serve,
)

SYSTEM = load_system("hgx-a100-4")          # roofline A100s: no simulation, instant


def _trace(n=40, rate=30.0, seed=3):
    return poisson_trace(n, rate, prompt=(64, 512), output=(8, 96), seed=seed)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("policy", POLICIES)
def test_every_request_completes_once_with_its_tokens(policy):
    trace = _trace()
    r = serve("llama2-7b", SYSTEM, trace, tp=2 if policy != "disaggregated" else 1,
              scheduler=Scheduler(policy=policy, max_num_seqs=16, max_num_batched_tokens=512))
    assert sorted(q["id"] for q in r.requests) == list(range(len(trace)))
    for q, req in zip(r.requests, trace):
        assert (q["prompt"], q["output"]) == (req.prompt, req.output)
        assert q["arrival_s"] <= q["first_token_s"] <= q["finish_s"]
    assert sum(q["output"] for q in r.requests) == r.summary["output_tokens"]
    # every token has its inter-token gap: output - 1 per request
    assert len(r.itl_s) == sum(q["output"] - 1 for q in r.requests)
    assert all(i["kv_blocks"] <= r.kv_blocks for i in r.iterations)
    again = serve("llama2-7b", SYSTEM, trace, tp=2 if policy != "disaggregated" else 1,
                  scheduler=Scheduler(policy=policy, max_num_seqs=16,
                                      max_num_batched_tokens=512))
    assert again.requests == r.requests and again.iterations == r.iterations


def test_a_full_cache_preempts_and_still_serves_everything():
    """A cache of a few hundred blocks (memory_utilization just above the weights): decode
    steps preempt the latest-admitted request (recompute), never exceeding the blocks, and
    every request still ends with all its tokens."""
    cfg = get_llm("llama2-7b")
    weights = cfg.params * 2 / 80 / 2**30          # fraction of an 80 GB A100
    sched = Scheduler(policy="continuous", max_num_seqs=64, memory_utilization=weights + 0.02)
    trace = poisson_trace(30, 200.0, prompt=(200, 400), output=(200, 300), seed=1)
    r = serve("llama2-7b", SYSTEM, trace, scheduler=sched)
    assert r.summary["preemptions"] > 0
    assert max(i["kv_blocks"] for i in r.iterations) <= r.kv_blocks
    assert all(q["finish_s"] is not None for q in r.requests)
    assert len(r.itl_s) == sum(q["output"] - 1 for q in r.requests)


def test_a_lone_request_takes_the_prefill_and_decode_steps_of_llm_generate():
    """One request, prompt 8 and 8 output tokens: every shape is at most 16 tokens (simulated
    exactly), so its TTFT is llm_generate's prefill step and its token gaps its decode steps."""
    from npulab.llm_serve import Request
    for policy in ("continuous", "chunked"):
        r = serve("llama2-7b", SYSTEM, [Request(0, 0.0, 8, 8)], tp=2,
                  scheduler=Scheduler(policy=policy))
        g = llm_generate("llama2-7b", SYSTEM, batch=1, prompt=8, output=8, tp=2, launch=False,
                         kv_block=1)
        q = r.requests[0]
        assert q["ttft_s"] == pytest.approx(g.ttft_s, rel=1e-12)
        assert q["e2e_s"] == pytest.approx(g.total_s, rel=1e-12)


def test_costs_interpolate_between_simulated_powers_of_two():
    assert grid(7) == [(7, 1.0)] and grid(64) == [(64, 1.0)]
    assert grid(48) == [(32, 0.5), (64, 0.5)]
    calls = []

    def lookup(op):
        calls.append(op)
        return 1e-6 * op.macs / 1e6 + 1e-6, 0.0
    cost = IterationCost(get_llm("llama2-7b"), 1, 1, 2, lookup, lambda op, n: 0.0, False)
    lo, hi, mid = cost.dense(32), cost.dense(64), cost.dense(48)
    assert mid == pytest.approx((lo + hi) / 2)
    assert lo < mid < hi


def test_continuous_batching_cuts_the_wait_static_batching_imposes():
    """Orca's point: a static batch holds its slots until its longest request ends, so later
    arrivals wait; iteration-level scheduling admits them at once. Mean TTFT and p99 latency
    drop, throughput does not."""
    trace = poisson_trace(60, 40.0, prompt=(64, 256), output=(8, 256), seed=7)
    kw = dict(tp=2)
    static = serve("llama2-7b", SYSTEM, trace, scheduler=Scheduler("static", max_num_seqs=16),
                   **kw).summary
    cont = serve("llama2-7b", SYSTEM, trace,
                 scheduler=Scheduler("continuous", max_num_seqs=16), **kw).summary
    assert cont["ttft_s"]["mean"] < static["ttft_s"]["mean"]
    assert cont["e2e_s"]["p99"] < static["e2e_s"]["p99"]
    assert cont["tokens_per_s"] >= static["tokens_per_s"]


def test_chunked_prefill_keeps_every_iteration_within_its_budget():
    trace = poisson_trace(30, 50.0, prompt=(300, 1500), output=(16, 64), seed=2)
    r = serve("llama2-7b", SYSTEM, trace, tp=2,
              scheduler=Scheduler("chunked", max_num_batched_tokens=256))
    assert max(i["tokens"] for i in r.iterations) <= 256
    assert any(i["decodes"] and i["prefill_tokens"] for i in r.iterations)   # mixed batches


def test_disaggregation_separates_prefill_and_decode_and_moves_the_cache():
    trace = _trace(20)
    r = serve("llama2-7b", SYSTEM, trace, tp=2, scheduler=Scheduler("disaggregated"))
    by = {"prefill": [], "decode": []}
    for i in r.iterations:
        by[i["engine"]].append(i)
    assert all(i["decodes"] == 0 for i in by["prefill"])
    assert all(i["prefill_tokens"] == 0 for i in by["decode"])
    # the second token comes after the KV cache crossed the network (each rank to its peer)
    from hw.system.collectives import collective
    from compiler.frontends.llm_step import kv_cache_bytes
    cfg = get_llm("llama2-7b")
    q = r.requests[0]
    move = collective(SYSTEM, "broadcast", kv_cache_bytes(cfg, q["prompt"], 2),
                      groups=[(0, 2), (1, 3)]).time_s
    assert q["output"] == 1 or q["finish_s"] - q["first_token_s"] >= move


def test_poisson_trace_is_seeded_exponential_arrivals():
    t = poisson_trace(500, 4.0, prompt=(10, 20), output=7, seed=11)
    rng = np.random.default_rng(11)
    gaps = rng.exponential(0.25, 500)
    gaps[0] = 0
    assert [r.arrival_s for r in t] == pytest.approx(np.cumsum(gaps).tolist())
    assert all(10 <= r.prompt <= 20 and r.output == 7 for r in t)
    assert poisson_trace(500, 4.0, prompt=(10, 20), output=7, seed=11) == t
    with pytest.raises(TraceError, match=r"rate = 0: must be a number of requests/s"):
        poisson_trace(5, 0)
    with pytest.raises(TraceError, match=r"prompt = \(5, 2\): the range end must be >= its"):
        poisson_trace(5, 1.0, prompt=(5, 2))


def test_trace_csv_is_read_with_one_line_errors(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens,user\n0.5,100,20,a\n0.1,50,10,b\n")
    reqs = read_trace(p)
    assert [(r.arrival_s, r.prompt, r.output) for r in reqs] == [(0.1, 50, 10), (0.5, 100, 20)]
    p.write_text("arrival_s,prompt_tokens\n0,1\n")
    with pytest.raises(TraceError, match=r"t.csv: the header lacks output_tokens"):
        read_trace(p)
    p.write_text("arrival_s,prompt_tokens,output_tokens\n0,12x,3\n")
    with pytest.raises(TraceError, match=r"t.csv: row 2: prompt_tokens = '12x': must be a "
                                         r"whole number of tokens"):
        read_trace(p)
    p.write_text("arrival_s,prompt_tokens,output_tokens\n-1,12,3\n")
    with pytest.raises(TraceError, match=r"row 2: arrival_s = -1: must be in 0..1e9 s"):
        read_trace(p)


def test_cli_serve_writes_every_view_with_the_same_numbers(capsys, tmp_path):
    out = tmp_path / "srv"
    args = ["llm", "serve", "--model", "llama2-7b", "--system", "hgx-a100-4", "--tp", "2",
            "--rate", "20", "--requests", "30", "--prompt-len", "64:256", "--output-len",
            "8:64", "--slo-ttft-ms", "50", "--slo-tpot-ms", "10"]
    code, text, err = run(capsys, *args, "-o", str(out))
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())["summary"]
    assert f"{summary['ttft_s']['p99'] * 1e3:,.2f}" in text
    assert f"{summary['tokens_per_s']:,.1f} output tokens/s" in text
    with open(out / "requests.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 30 and summary["requests"] == 30
    assert np.percentile([float(r["ttft_s"]) for r in rows], 99) == pytest.approx(
        summary["ttft_s"]["p99"])
    page = (out / "report.html").read_text()
    assert f"{summary['ttft_s']['p99'] * 1e3:,.2f}" in page and page.count("<svg") == 2
    assert f"{summary['tokens_per_s']:,.1f} output tokens/s" in page
    trace = json.loads((out / "trace.json").read_text())
    assert sum(1 for e in trace["traceEvents"] if e["ph"] == "X") == summary["iterations"]
    code, js, _ = run(capsys, *args, "--format", "json")
    assert json.loads(js)["summary"] == summary
    code, curve, _ = run(capsys, *args[:-4], "--rates", "5,40", "--format", "json", "-o",
                         str(tmp_path / "curve"))
    rows = json.loads(curve)["curve"]
    assert json.loads((tmp_path / "curve" / "curve.json").read_text())["curve"] == rows
    page = (tmp_path / "curve" / "curve.html").read_text()
    assert page.count("<svg") == 1 and f"{rows[1]['ttft_s_p99'] * 1e3:,.2f}" in page
    again = json.loads((tmp_path / "curve" / "rate_40" / "summary.json").read_text())
    assert again["summary"]["ttft_s"]["p99"] == rows[1]["ttft_s_p99"]
    assert [r["rate"] for r in rows] == [5.0, 40.0]
    assert rows[1]["ttft_s_p99"] >= rows[0]["ttft_s_p99"]      # more load, longer waits


@pytest.mark.parametrize("argv,message", [
    (["missing.csv"], "missing.csv: no such file"),
    (["--prompt-len", "a:b"], "--prompt-len 'a:b': expected a token count N or a range LO:HI"),
    (["--rates", "x"], "--rates 'x': expected request rates like 1,2,4"),
    (["--policy", "disaggregated", "--tp", "4"],
     "disaggregated serving takes two groups of tp = 4 chips: 8; the system 'hgx-a100-4' has 4"),
    (["--rates", "1,1.0000001"], "two rates print alike (1, 1); give distinct rates"),
    (["--rates", "2,0"], "rate 0 must be in (0, 1e6] requests/s"),
    (["--max-num-seqs", "0"], "max_num_seqs = 0: must be an integer in 1..65,536"),
    (["--model", "mixtral-8x7b", "--ep", "2"], "ep = 2 with tp = 1 (data-parallel attention"),
    (["--model", "llama2-70b"], "llama2-70b on 1 chip(s): the weights (128.5 GiB per chip) "
                                "leave no room for a KV cache"),
])
def test_cli_serve_bad_input_is_one_line(capsys, argv, message):
    code, out, err = run(capsys, "llm", "serve", "--model", "llama2-7b", "--system",
                         "hgx-a100-4", "--requests", "3", *argv)
    assert code == 2, err
    assert err.startswith("npulab: error: ") and message in err and err.count("\n") == 1


def test_on_a_simulated_chip_the_first_pass_finds_the_kernels_the_trace_needs():
    """On a simulated chip the roofline first pass collects the distinct kernels, simulated in
    parallel; the served trace then meets no other (and completes)."""
    small = DecoderConfig(name="small", layers=4, d_model=512, heads=8, kv_heads=2, ffn=1408,
                          vocab=2048, max_seq_len=1024, ffn_kind="swiglu", norm="rmsnorm",
                          positions="rotary", tied_embeddings=False, biases=False)
    trace = poisson_trace(8, 400.0, prompt=(16, 48), output=(2, 12), seed=5)
    r = serve(small, "a100_like", trace, scheduler=Scheduler("chunked",
                                                             max_num_batched_tokens=64))
    sim = r.simulation
    assert sim["kernels_simulated"] == sim["kernels_found_in_first_pass"] > 0
    assert all(q["finish_s"] is not None for q in r.requests)
    assert any(i["decodes"] > 1 for i in r.iterations)        # requests were batched



def test_the_latest_admitted_request_is_the_one_preempted():
    """Two long requests in a cache that holds one: the second (admitted later) is preempted
    when it needs a block, even though it is the one asking; the first never is (vLLM's order:
    the oldest keep going)."""
    from npulab.llm_serve import Request
    trace = [Request(0, 0.0, 3000, 2000), Request(1, 0.001, 3000, 2000)]
    r = serve("llama2-7b", SYSTEM, trace, scheduler=Scheduler("continuous",
                                                             memory_utilization=0.2))
    first, second = r.requests
    assert first["preemptions"] == 0 and second["preemptions"] > 0
    assert first["finish_s"] < second["finish_s"]


def test_a_trace_given_in_python_is_checked_and_put_in_arrival_order(tmp_path):
    from npulab.llm_serve import Request
    shuffled = [Request(0, 5.0, 100, 2), Request(1, 0.0, 100, 2)]
    r = serve("llama2-7b", SYSTEM, shuffled)
    assert r.requests[1]["ttft_s"] < 0.1                 # not held behind request 0
    for bad, message in ((Request(0, -1.0, 10, 2), r"arrival_s = -1.0: must be in 0..1e9"),
                         (Request(0, 0.0, 0, 2), r"request 0: prompt = 0: must be an integer"),
                         (Request(0, 0.0, 10, 1.5), r"request 0: output = 1.5")):
        with pytest.raises(ValueError, match=message):
            serve("llama2-7b", SYSTEM, [bad])
    with pytest.raises(TraceError, match=r"request id 3 appears twice"):
        serve("llama2-7b", SYSTEM, [Request(3, 0.0, 10, 2), Request(3, 1.0, 10, 2)])
    # a CSV saved with a byte-order mark reads like any other
    p = tmp_path / "bom.csv"
    p.write_text("\ufeffarrival_s,prompt_tokens,output_tokens\n0,10,2\n", encoding="utf-8")
    assert read_trace(p)[0].prompt == 10


def test_kv_occupancy_counts_the_blocks_an_iteration_used():
    """One-token requests free their blocks at the end of their only iteration: the blocks it
    used are still what the iteration records."""
    trace = poisson_trace(5, 1.0, prompt=64, output=1, seed=0)
    r = serve("llama2-7b", SYSTEM, trace)
    assert r.summary["kv_peak_blocks"] == 4               # 64 tokens in blocks of 16
    assert all(i["kv_blocks"] == 4 for i in r.iterations)


def test_cli_output_directory_that_is_a_file_fails_before_the_run(capsys, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    code, out, err = run(capsys, "llm", "serve", "--model", "llama2-7b", "--system",
                         "hgx-a100-4", "-n", "3", "-o", str(f))
    assert code == 2 and err == (f"npulab: error: -o {f}: exists and is not a directory; "
                                 f"expected an output directory\n")
