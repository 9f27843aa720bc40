"""The parallel-plan search: its speed on GPT-3 175B / 1,024 GPUs, and the plans it finds next to
published ones. Run by hand: ``python benchmarks/bench_plan.py [--quick]``.

1. **Speed** (issue 26's goal: GPT-3 175B on 1,024 devices in under 60 s on 2 cores; Calculon's
   search of Turing-530B on 5,128 A100s takes "~1 min", calculon-ai/calculon README): the
   search of ``npulab plan --system selene-3072 --model gpt3-175b --global-batch 1536 --chips
   1024``, with its space and how much of it was simulated.
2. **Megatron-LM's plan** for that run (Narayanan et al. 2021, SC21, §5.1 and
   NVIDIA/Megatron-LM ``examples/pretrain_gpt3_175B.sh``: 128 nodes x 8 = 1,024 GPUs, TP 8,
   PP 16, hence DP 8, micro-batch 1, global batch 1,536, activation checkpointing), timed by the
   same step model, against the plan found.
3. **Megatron-LM SC21 Table 1** (weak scaling; sequence 2,048, vocabulary 51,200): for each
   row up to ``--rows``, the published mesh (TP, PP and so DP) with full recomputation (as
   Megatron-LM's example scripts), its micro-batch size and schedule chosen by the search
   (the paper does not give them per row), next to the unrestricted search, on the same device
   and network; predicted TFLOP/s per GPU next to the measured one.
4. **Alpa's GPT benchmark** on one 8 x V100 node (Zheng et al. OSDI'22 §8; p3.16xlarge: 16 GB
   V100s on the DGX-1 NVLink hybrid cube mesh, so the ``dgx1-v100`` preset with 16 GiB per
   GPU): sequence 1,024, vocabulary 51,200, global batch 1,024 (``alpa-projects/alpa``
   ``benchmark/alpa/suite_manual_gpt.py``); measured TFLOP/s per GPU of Alpa and of
   grid-searched Megatron-LM from the artifact's ``osdi22_artifact/results_e2e_ref.tsv``, the
   best Megatron plan per size from ``osdi22_artifact/megatron/benchmark_gpt.py``, timed with
   full activation recomputation (``--checkpoint-activations``; without it these plans do not
   fit in 16 GB in our memory model). The 1-GPU case has global batch 128 (the artifact's).

Device: the system preset's (``a100``, the A100 datasheet, efficiency 1: an upper bound on
speed), so absolute TFLOP/s are above measured; the comparison that matters is found vs
published under one model. Collectives: closed form during the search (``--comm analytic``).
"""

from __future__ import annotations

import argparse
import resource
import time

from compiler.parallel import TransformerModel, get_model, plan_step
from compiler.parallel.search import SearchSpace
from hw.system.system import load_system
from npulab.devices import device_model
from npulab.plan_run import search
from npulab.system_run import comm_time_for

#: Narayanan et al. 2021 (SC21) Table 1: params (B), heads, hidden, layers, TP, PP, GPUs,
#: batch, measured TFLOP/s per GPU.
TABLE1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]


def hw_tflops(model: TransformerModel, step_s: float, n: int) -> float:
    """Megatron's reported metric: eq. 3 of the paper, 96 B s l h^2 (1 + s/6h + V/16lh), which
    counts the recomputed forward (full activation recomputation), per GPU."""
    b, s, l, h, v = model.global_batch, model.seq_len, model.layers, model.hidden, model.vocab
    return 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h)) / step_s / n / 1e12


def published(system, model, text, n):
    dev = device_model(system.device, 2)
    comm = comm_time_for(system, mode="analytic")
    return plan_step(model, text, n, None, dev.op_seconds, comm,
                     device_mem_bytes=dev.memory_bytes, peak_flops=dev.peak_flops)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=6, help="Table 1 rows to search (default 6)")
    ap.add_argument("--quick", action="store_true", help="only the GPT-3 / 1,024 search")
    args = ap.parse_args()
    system = load_system("selene-3072")

    # 1-2. GPT-3 175B on 1,024 GPUs
    model = get_model("gpt3-175b", global_batch=1536)
    t0 = time.perf_counter()
    ps = search(system, model, n_devices=1024, verify=1,
                compare=("dp=8,tp=8,pp=16,recompute=full@1",))
    wall = time.perf_counter() - t0
    res, best = ps.result, ps.best
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"GPT-3 175B, 1,024 GPUs of selene-3072, global batch 1,536: search {res.search_s:.1f} s "
          f"(with the simulated-network check and the comparison {wall:.1f} s; goal < 60 s), "
          f"peak RSS {rss:.0f} MiB")
    print(f"  space {res.space:,} strategies; {len(res.evaluated)} simulated, "
          f"{res.pruned_memory:,} over memory, {res.pruned_bound:,} ruled out by their bound; "
          f"{res.ilps} ILPs over up to {res.sharding_space:,} shardings per layer")
    print(f"  found:     {best.label}: {best.step_s:.3f} s, {best.report.tokens_per_s:,.0f} "
          f"tokens/s, {hw_tflops(model, best.step_s, 1024):.0f} TFLOP/s per GPU (eq. 3), "
          f"{best.memory_bytes / 1e9:.1f} GB")
    c = ps.compared[0]
    print(f"  Megatron:  {c['strategy']} (micro-batch 1): {c['step_s']:.3f} s, "
          f"{c['tokens_per_s']:,.0f} tokens/s, {hw_tflops(model, c['step_s'], 1024):.0f} "
          f"TFLOP/s per GPU, {c['memory_bytes'] / 1e9:.1f} GB; measured 140 TFLOP/s per GPU")
    print(f"  found / Megatron throughput: {c['best_speedup']:.3f}x")
    cb, bb = c["breakdown"], best.report.breakdown()
    print("  where the time goes (s): " + ", ".join(
        f"{k} {cb[k]:.2f} -> {bb[k]:.2f}" for k in cb))
    v = ps.verified[0]
    print(f"  the found plan on the simulated network: {v['sim_step_s']:.3f} s "
          f"({v['sim_step_s'] / v['step_s'] - 1:+.2%} vs closed-form collectives)")
    if args.quick:
        return
    alpa()

    # 3. Table 1
    print()
    print("Megatron-LM SC21 Table 1 (weak scaling): the published mesh (TP, PP, DP) with full "
          "recomputation, its micro-batch and schedule searched, vs the unrestricted search")
    print("TFLOP/s per GPU: 'eq.3' counts the recomputed forward as the paper's measured figure "
          "does; 'model' does not (MFU x peak)")
    print(f"{'params':>7} {'GPUs':>5} {'batch':>5} | {'published mesh, best of it':<44} "
          f"{'eq.3':>5} {'model':>6} | {'found':<58} {'model':>6} {'ratio':>6} "
          f"{'search s':>8} | measured eq.3")
    for row in TABLE1[:args.rows]:
        params, heads, hidden, layers, tp, pp, n, batch, measured = row
        model = TransformerModel(f"gpt-{params}b", layers=layers, hidden=hidden, heads=heads,
                                 seq_len=2048, vocab=51200, global_batch=batch)
        pub = search(system, model, n_devices=n, verify=0, space=SearchSpace(
            tp=(tp,), pp=(pp,), recompute=("full",), zero=(0,))).best
        ps = search(system, model, n_devices=n, verify=0)
        b = ps.best
        mtf = lambda c: c.report.model_flops / c.step_s / n / 1e12       # noqa: E731
        print(f"{params:>7} {n:>5} {batch:>5} | {pub.label:<44} "
              f"{hw_tflops(model, pub.step_s, n):>5.0f} {mtf(pub):>6.0f} | {b.label:<58} "
              f"{mtf(b):>6.0f} {pub.step_s / b.step_s:>6.3f} {ps.result.search_s:>8.1f} | "
              f"{measured}")


#: Alpa OSDI'22 GPT cases on one node: name, hidden, layers, heads, GPUs, Megatron's best
#: (dp, tp, pp, micro-batches), measured TFLOP/s per GPU (Megatron, Alpa).
ALPA = [
    ("350M", 1024, 24, 16, 1, (1, 1, 1, 8), 47.53, 45.07),
    ("1.3B", 2048, 24, 32, 4, (2, 1, 2, 128), 55.89, 58.21),
    ("2.6B", 2560, 32, 32, 8, (1, 1, 8, 128), 50.44, 61.61),
]


def alpa() -> None:
    from dataclasses import replace
    base = load_system("dgx1-v100")
    system = replace(base, device=replace(base.device, mem_bytes=16 << 30))
    print()
    print("Alpa OSDI'22 GPT on 8 x V100 16 GB (dgx1-v100): Megatron's best plan in the artifact "
          "vs the search, predicted model TFLOP/s per GPU (no recomputation counted)")
    print(f"{'model':>6} {'GPUs':>4} | {'Megatron (artifact)':<36} {'TF/GPU':>6} | "
          f"{'found':<50} {'TF/GPU':>6} {'ratio':>6} | measured Megatron / Alpa")
    for name, hidden, layers, heads, n, (dp, tp, pp, m), meg, alp in ALPA:
        model = TransformerModel(f"gpt-{name}", layers=layers, hidden=hidden, heads=heads,
                                 seq_len=1024, vocab=51200, global_batch=1024 if n > 1 else 128)
        b = model.global_batch // (dp * m)
        text = f"dp={dp},tp={tp},pp={pp},m={m},recompute=full"
        mdl = replace(model, micro_batch=b)
        dev = device_model(system.device, 2)
        r = plan_step(mdl, text, n, None, dev.op_seconds, comm_time_for(system, mode="analytic"),
                      device_mem_bytes=dev.memory_bytes, peak_flops=dev.peak_flops)
        ps = search(system, model, n_devices=n, verify=0)
        c = ps.best
        tf = lambda rep: rep.model_flops / rep.step_s / n / 1e12       # noqa: E731
        fits = "" if r.fits else " (over memory)"
        print(f"{name:>6} {n:>4} | {text + f' mb {b}' + fits:<36} {tf(r):>6.1f} | {c.label:<50} "
              f"{tf(c.report):>6.1f} {r.step_s / c.step_s:>6.3f} | {meg} / {alp}")


if __name__ == "__main__":
    main()
