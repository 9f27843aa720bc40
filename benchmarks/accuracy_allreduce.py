"""All-reduce accuracy: the ``hgx-a100-4`` preset against measured NCCL on 4 x A100 (NVLink).

Measured latencies: LLMCompass's artifact (``ae/figure5/h/test_allreduce.py``), fp16, as
tabulated in ``/work/shared/reference/multichip.md``. Goal from the issue: within 15 % at sizes
>= 1 MiB, within 2x below. LLMCompass's own model: 46 % mean error over all sizes, 15 % >= 1 MiB.

What is and is not fitted (see ``sim_configs/systems/hgx-a100-4.toml``): link bandwidth
(4 NVLink3 per pair, 25 GB/s, 0.8 efficiency) is from NVIDIA and the reference file; the LL
protocol's 1.4 us per-message overhead is derived from the measured 8-byte point (the one value
taken from this table); LL128/Simple overheads and payload factors are NCCL's tuning constants.
Nothing else is fitted. Each size is simulated with every algorithm and protocol; ``auto`` is
npulab's choice, ``best`` the fastest algorithm.

Run from the repo root::

    python benchmarks/accuracy_allreduce.py

Writes ``benchmarks/results/accuracy_allreduce.json``.
"""

from __future__ import annotations

import time

from benchutil import machine, table, write_results

from hw.system.collectives import collective, compare_algorithms
from hw.system.system import load_system

MEASURED_US = [(8, 12.52), (65_536, 22.93), (1_048_576, 60.75), (16_777_216, 195.7),
               (67_108_864, 532.3), (268_435_456, 1883.7), (1_073_741_824, 7219.2),
               (4_294_967_296, 27944.0), (17_179_869_184, 110277.0)]
MIB = 1 << 20


def main() -> None:
    t0 = time.perf_counter()
    system = load_system("hgx-a100-4")
    rows, out = [], []
    big, small = [], []
    for nbytes, measured in MEASURED_US:
        auto = collective(system, "allreduce", nbytes)
        algs = compare_algorithms(system, "allreduce", nbytes)
        best_alg = min(algs, key=lambda a: algs[a].time_s)
        analytic = collective(system, "allreduce", nbytes, mode="analytic")
        ring = algs["ring"]
        err = 100.0 * (auto.time_s * 1e6 - measured) / measured
        ratio = auto.time_s * 1e6 / measured
        if nbytes >= MIB:
            big.append(abs(err))
        else:
            small.append(max(ratio, 1 / ratio))
        rows.append([f"{nbytes:,}", f"{measured:,.2f}", f"{auto.time_s * 1e6:,.2f}",
                     f"{auto.algorithm}/{auto.protocol}", f"{err:+.1f}",
                     f"{ring.time_s * 1e6:,.2f}", f"{best_alg}",
                     f"{analytic.time_s * 1e6:,.2f}", f"{auto.busbw_gbps:.1f}"])
        out.append({"nbytes": nbytes, "measured_us": measured, "auto_us": auto.time_s * 1e6,
                    "auto_algorithm": auto.algorithm, "auto_protocol": auto.protocol,
                    "error_pct": err, "ring_us": ring.time_s * 1e6,
                    "analytic_us": analytic.time_s * 1e6,
                    "algorithms_us": {a: r.time_s * 1e6 for a, r in algs.items()},
                    "busbw_gbps": auto.busbw_gbps})
    wall = time.perf_counter() - t0
    print("all-reduce on hgx-a100-4 vs measured NCCL on 4 x A100 (LLMCompass artifact)")
    print(table(["bytes", "measured us", "npulab us", "alg/protocol", "error %", "ring us",
                 "fastest alg", "analytic us", "busbw GB/s"], rows))
    mean_big = sum(big) / len(big)
    within = sum(e <= 15.0 for e in big)
    print(f">= 1 MiB: mean |error| {mean_big:.1f} %, max {max(big):.1f} %, {within}/{len(big)} "
          f"within 15 % (LLMCompass: 15 % mean at >= 1 MiB)")
    print(f"<  1 MiB: worst ratio {max(small):.2f}x (goal <= 2x)")
    print(f"wall time {wall:.1f} s")
    path = write_results("accuracy_allreduce", {
        "rows": out, "mean_abs_error_ge_1mib_pct": mean_big, "max_abs_error_ge_1mib_pct":
        max(big), "within_15pct": within, "worst_ratio_below_1mib": max(small), "wall_s": wall,
        "machine": machine()})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
