#!/usr/bin/env python3
"""Lab 8: serving an LLM. Why decode is memory-bound, what the KV cache costs, and how the
scheduler changes latency.

Three parts, each a table (``--part`` runs one):

* ``decode``: one Llama-2-7B decoder layer in a decode step on one simulated A100
  (``a100_like``: every kernel through the chip simulation, no launch overhead, as CUDA
  graphs) at batch 1 to 256 and KV length 1024: the layer's time, the bytes it must read
  (weights and KV cache) and the time those take at the HBM's peak, FLOPs per byte, and the
  model's tokens per second.
* ``kv``: the KV cache per token for three models (MHA, GQA), and how many tokens and 2k-token
  requests fit in an 80 GB A100's memory after the weights (``memory_utilization`` 0.9).
* ``serve``: a Poisson stream of requests (prompts 128 to 1024 tokens, outputs 32 to 256, at
  most 8 running) served on the simulated A100 with static batching, continuous batching and
  chunked prefill, at each of ``--rates``: time to first token, time per output token, end-to-end latency (p50
  and p99) and throughput.

Writes ``serving_<part>.csv`` into the output folder (default ``lab08_out/``).

Example (from the repository root)::

    python examples/labs/08_serving/serving.py --part decode
    python examples/labs/08_serving/serving.py --part serve --requests 60 --rates 4
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from compiler.frontends.llm import get_llm
from compiler.frontends.llm_step import StepShape, kv_cache_bytes, layer_ops
from npulab.llm_run import KernelTimer, llm_layer, resolve_system
from npulab.llm_serve import Scheduler, poisson_trace, serve

CHIP = "a100_like"
HBM_BYTES_PER_S = 2039e9          # a100_like's HBM2e peak (sim_configs/a100_like.toml)
BATCHES = (1, 4, 16, 64, 256)
KV_LEN = 1024
POLICIES = ("static", "continuous", "chunked")
RATES = (2.0, 8.0)
MAX_NUM_SEQS = 8


def decode_rows(timer: KernelTimer) -> list[dict]:
    """One Llama-2-7B layer, one decode step at KV length 1024, per batch size."""
    cfg = get_llm("llama2-7b")
    rows = []
    for b in BATCHES:
        r = llm_layer(cfg, resolve_system(CHIP), phase="decode", batch=b, kv_len=KV_LEN,
                      timer=timer)
        ops = layer_ops(cfg, StepShape(b, 1, KV_LEN))
        weights = 2 * sum(o.op.weight_elements for o in ops
                          if o.op is not None and o.op.gemm_shape() is not None
                          and not getattr(o.op, "kv_cache", False))
        kv = kv_cache_bytes(cfg, b * (KV_LEN + 1), layers=1)
        flops = sum(o.flops for o in ops)
        rows.append({"batch": b, "layer_us": r.total_s * 1e6, "weights_MB": weights / 1e6,
                     "kv_MB": kv / 1e6, "bound_us": (weights + kv) / HBM_BYTES_PER_S * 1e6,
                     "flop_per_byte": flops / (weights + kv),
                     "tokens_per_s": b / (cfg.layers * r.total_s)})
    return rows


def kv_rows() -> list[dict]:
    rows = []
    for name in ("llama2-7b", "llama3-8b", "llama2-70b"):
        cfg = get_llm(name)
        per_token = kv_cache_bytes(cfg, 1)
        free = 80e9 * 0.9 - 2 * cfg.params
        rows.append({"model": name, "kv_heads": cfg.kv_heads, "kv_KiB_per_token": per_token / 1024,
                     "weights_GB": 2 * cfg.params / 1e9,
                     "tokens_in_80GB": int(free // per_token) if free > 0 else 0,
                     "requests_2k": int(free // (2048 * per_token)) if free > 0 else 0})
    return rows


def serve_rows(timer: KernelTimer, requests: int, rates=RATES) -> list[dict]:
    rows = []
    for rate in rates:
        trace = poisson_trace(requests, rate, prompt=(128, 1024), output=(32, 256), seed=0)
        for policy in POLICIES:
            s = serve("llama2-7b", resolve_system(CHIP), trace,
                      scheduler=Scheduler(policy, max_num_seqs=MAX_NUM_SEQS),
                      timer=timer).summary
            rows.append({"rate": rate, "policy": policy,
                         "ttft_p50_ms": s["ttft_s"]["p50"] * 1e3,
                         "ttft_p99_ms": s["ttft_s"]["p99"] * 1e3,
                         "tpot_p50_ms": s["tpot_s"]["p50"] * 1e3,
                         "tpot_p99_ms": s["tpot_s"]["p99"] * 1e3,
                         "e2e_p99_s": s["e2e_s"]["p99"], "tokens_per_s": s["tokens_per_s"]})
    return rows


def _print(rows: list[dict], title: str) -> None:
    print(title)
    keys = list(rows[0])

    def text(v) -> str:
        return (f"{v:,.1f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int)
                else str(v))
    widths = [max([len(k)] + [len(text(r[k])) for r in rows]) for k in keys]
    print("  ".join(f"{k:>{w}}" for k, w in zip(keys, widths)))
    for r in rows:
        print("  ".join(f"{text(r[k]):>{w}}" for k, w in zip(keys, widths)))
    print()


def _write(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=("decode", "kv", "serve", "all"), default="all")
    ap.add_argument("--requests", type=int, default=40, help="requests per serve run")
    ap.add_argument("--rates", default="2,8", help="request rates of the serve part (per s)")
    ap.add_argument("--out", default="lab08_out", help="output folder")
    args = ap.parse_args(argv)
    if args.requests < 1:
        print(f"serving.py: error: --requests {args.requests}: must be >= 1", file=sys.stderr)
        return 2
    try:
        rates = tuple(float(r) for r in args.rates.split(","))
        assert rates and all(0 < r <= 1e4 for r in rates)
    except (ValueError, AssertionError):
        print(f"serving.py: error: --rates {args.rates!r}: expected rates like 2,8 (requests "
              f"per second, each in (0, 10000])", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timer = KernelTimer(resolve_system(CHIP), launch=False)
    if args.part in ("decode", "all"):
        rows = decode_rows(timer)
        _print(rows, f"Llama-2-7B, one layer, decode step at KV length {KV_LEN} on {CHIP} "
                     f"(bound = weights + KV cache at the HBM's 2,039 GB/s)")
        _write(rows, out / "serving_decode.csv")
    if args.part in ("kv", "all"):
        rows = kv_rows()
        _print(rows, "KV cache per token (fp16, all layers) and what fits in 0.9 x 80 GB after "
                     "the weights")
        _write(rows, out / "serving_kv.csv")
    if args.part in ("serve", "all"):
        rows = serve_rows(timer, args.requests, rates)
        _print(rows, f"Llama-2-7B on {CHIP}: {args.requests} Poisson requests, prompts "
                     f"128..1024, outputs 32..256 tokens, at most {MAX_NUM_SEQS} running")
        _write(rows, out / "serving_serve.csv")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
