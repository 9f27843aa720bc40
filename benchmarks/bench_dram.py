"""DRAM timing model speed: simulated requests per second of ``DramModel.transfer`` and ``replay``.

Cases, per preset (DDR4-3200, HBM2, HBM3, LPDDR5-6400):

* ``transfer``: DMA bursts as the executor issues them: 64 KiB transfers, one after another,
  reads and writes alternating, 64 requests in flight;
* ``replay seq``: one sequential stream offered at once (the controller's queues stay full);
* ``replay rand``: random 64-byte-aligned addresses offered every 10 cycles (a loaded but not
  saturated channel);
* ``replay rand sat``: random addresses offered at once (every queue full: the worst case).

Each case runs once to load the JIT cache, then the best of N timed runs (wall clock; the
machine is shared, so the best is the least disturbed). Target: 2e6 requests/s for DMA
streams. The model's simulated bandwidth is printed alongside, as a sanity check.

Run from the repo root (about 30 s; --quick: a few seconds)::

    python benchmarks/bench_dram.py [--quick] [--repeat N]

Writes ``benchmarks/results/bench_dram.json``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchutil import best_of, machine, table, write_results

from hw.memory.dram import DramModel, dram_preset, replay

TARGET = 2e6  # requests per second
PRESETS = ("ddr4-3200", "hbm2", "hbm3", "lpddr5-6400")


def transfer_case(name: str, requests: int):
    cfg = dram_preset(name)
    chunk = 64 * 1024
    calls = max(1, requests * cfg.request_bytes // chunk)
    state = {}

    def run():
        model = DramModel(cfg)
        cycle = 0
        for i in range(calls):
            cycle = model.transfer(i * chunk, chunk, i % 2 == 1, cycle, 64)
        state["cycles"] = cycle
    n = calls * chunk // cfg.request_bytes
    return run, n, lambda: n * cfg.request_bytes / (state["cycles"] * cfg.tck_ns)


def replay_case(name: str, requests: int, kind: str):
    cfg = dram_preset(name)
    rng = np.random.default_rng(0)
    if kind == "seq":
        a = np.arange(requests, dtype=np.int64) * cfg.request_bytes
        t = np.zeros(requests, np.int64)
    else:
        a = rng.integers(0, cfg.capacity_bytes // cfg.request_bytes, requests) * cfg.request_bytes
        t = np.zeros(requests, np.int64) if kind == "rand sat" else np.arange(requests, dtype=np.int64) * 10
    w = rng.random(requests) < 0.25
    state = {}

    def run():
        state["r"] = replay(cfg, a, w, t)
    return run, requests, lambda: state["r"].bandwidth_gbps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests, best of 2")
    ap.add_argument("--repeat", type=int, help="timed runs, best of (default 3; --quick 2)")
    args = ap.parse_args(argv)
    repeat = args.repeat or (2 if args.quick else 3)
    big, small = (200_000, 50_000) if args.quick else (1_000_000, 200_000)
    t0 = time.perf_counter()
    from hw.memory import _dram_requests  # noqa: F401  (import time is not JIT time)
    jit_start = time.perf_counter()
    DramModel(dram_preset("ddr4-3200")).transfer(0, 4096, False, 0, 16)
    replay(dram_preset("ddr4-3200"), [0], [False], [0])
    first_call = time.perf_counter() - jit_start
    rows, results = [], []
    for name in PRESETS:
        cases = [("transfer", *transfer_case(name, big)),
                 ("replay seq", *replay_case(name, big, "seq")),
                 ("replay rand", *replay_case(name, small, "rand")),
                 ("replay rand sat", *replay_case(name, small, "rand sat"))]
        for label, fn, n, bandwidth in cases:
            seconds = best_of(fn, repeat=repeat, warmup=1)
            rate = n / seconds
            gbps = bandwidth()
            rows.append((name, label, f"{n:,}", f"{seconds:.3f}", f"{rate / 1e6:.2f}",
                         "yes" if rate >= TARGET else "no", f"{gbps:.1f}", f"{dram_preset(name).peak_gbps:.1f}"))
            results.append({"preset": name, "case": label, "requests": n, "seconds": seconds,
                            "requests_per_s": rate, "simulated_gbps": gbps})
    print(table(["preset", "case", "requests", "best s", "Mreq/s", ">= 2M", "sim GB/s", "peak GB/s"], rows))
    dma = [r["requests_per_s"] for r in results if r["case"] == "transfer"]
    print(f"\nfirst calls (JIT cache load or compile): {first_call:.1f} s")
    print(f"transfer (DMA streams): {min(dma) / 1e6:.2f}..{max(dma) / 1e6:.2f} M requests/s "
          f"(target {TARGET / 1e6:.0f} M)")
    path = write_results("bench_dram", {"machine": machine(), "target_requests_per_s": TARGET,
                                        "first_call_s": first_call, "cases": results,
                                        "wall_s": time.perf_counter() - t0})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
