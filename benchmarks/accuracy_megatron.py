"""Training-step accuracy: ``compiler.parallel.plan_step`` against Megatron-LM on Selene.

Measured step times: Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models"), Table 5, as tabulated by Calculon's validation
(``/work/shared/reference/multichip.md``). Configurations: the paper's Table 3 as in Calculon's
``validation/seqsel/tab5/*.json``: TP 8 in every row; 22B: 8 GPUs, PP 1, one micro-batch of 4;
175B: 64 GPUs, PP 8, interleave 3, batch 64; 530B: 280 GPUs, PP 35, interleave 3, batch 280;
1T: 512 GPUs, PP 64, batch 512; micro-batch 1; two columns: full recomputation with all-reduce
TP, and sequence parallelism + selective recomputation.

Device (``op_time``): an A100-SXM4-80GB roofline. GEMMs take ``max(2*MACs / (312e12 * eff),
bytes / 2039e9)`` with bytes = fp16 A, B and C; vector ops are memory-bound (``(operands + 1) *
elements * 2`` bytes at 2039 GB/s), moves read + write. 312 TFLOP/s dense fp16 and 2039 GB/s:
NVIDIA A100 datasheet (80 GB SXM).

Network (``comm_time``, one function so hw.system collectives can replace it): alpha-beta
ring collectives (Thakur et al. 2005; Patarasuk & Yuan 2009). A group inside one DGX A100 uses
NVLink3 through NVSwitch: 12 links x 25 GB/s x 0.8 = 240 GB/s per direction per GPU (about 20 of
25 GB/s per link are usable with 128-byte payloads; nccl-tests issue 149 reports ~230 GB/s
all-reduce bus bandwidth on 8 GPUs). A group spanning nodes uses one HDR InfiniBand NIC per GPU,
25 GB/s per direction. alpha = 2 us per step: the 8-byte 4-GPU all-reduce measured at 12.52 us
(LLMCompass artifact, reference file) over the ring's 2(p-1) = 6 steps.

Matrix efficiency ``eff``: CALIBRATED ON ONE ROW, Megatron 22B with full recomputation (one node:
no pipeline, no InfiniBand, so only ``eff`` is unknown), by bisection to its measured 1.42 s.
The other seven cells are validation. Compared with Calculon: 3.65 % mean, 8.87 % max error.

Run from the repo root::

    python benchmarks/accuracy_megatron.py

Writes ``benchmarks/results/accuracy_megatron.json``.
"""

from __future__ import annotations

import time

from benchutil import machine, table, write_results

from compiler.ir import Conv2d, Eltwise, Gemm, Move
from compiler.parallel import get_model, plan_step

PEAK_FLOPS = 312e12        # A100 dense fp16 tensor core
HBM_BYTES_PER_S = 2039e9   # A100 80 GB SXM
NVLINK_BYTES_PER_S = 12 * 25e9 * 0.8
IB_BYTES_PER_S = 25e9
ALPHA_S = 12.52e-6 / 6
GPUS_PER_NODE = 8

# (model, TP, PP, interleave, GPUs, measured full-recompute s, measured seq+selective s)
ROWS = [
    ("megatron-22b", 8, 1, 1, 8, 1.42, 1.10),
    ("gpt3-175b", 8, 8, 3, 64, 18.13, 13.75),
    ("turing-530b", 8, 35, 3, 280, 49.05, 37.83),
    ("megatron-1t", 8, 64, 1, 512, 94.42, 71.49),
]
CALIBRATION_ROW = ("megatron-22b", "full")
CALCULON = {"mean": 3.65, "max": 8.87}


def a100_op_time(eff: float):
    """Roofline seconds of one IR op on an A100 with matrix efficiency ``eff``."""
    def op_time(op) -> float:
        if isinstance(op, (Gemm, Conv2d)):
            g = op.gemm_shape()
            nbytes = 2.0 * g.count * (g.m * g.k + g.k * g.n + g.m * g.n)
            return max(2.0 * g.macs / (PEAK_FLOPS * eff), nbytes / HBM_BYTES_PER_S)
        if isinstance(op, Eltwise):
            return 2.0 * op.elements * (op.operands + 1) / HBM_BYTES_PER_S
        if isinstance(op, Move):
            return 4.0 * op.elements / HBM_BYTES_PER_S
        return 0.0
    return op_time


def selene_comm_time(op: str, nbytes: float, groups: list) -> float:
    """Alpha-beta ring collective on Selene (module docstring). The lead can swap this for
    ``hw.system.collectives.collective(system, op, nbytes, groups=groups).time_s``."""
    group = groups[0]
    p = len(group)
    same_node = len({r // GPUS_PER_NODE for r in group}) == 1
    bw = NVLINK_BYTES_PER_S if same_node else IB_BYTES_PER_S
    if op == "allreduce":
        return 2 * (p - 1) * ALPHA_S + 2 * (p - 1) / p * nbytes / bw
    if op in ("allgather", "reducescatter"):
        return (p - 1) * ALPHA_S + (p - 1) / p * nbytes / bw
    if op == "broadcast" and p == 2:
        return ALPHA_S + nbytes / bw
    raise ValueError(f"selene_comm_time: {op} over {p} ranks is not modelled")


def predict(model: str, tp: int, pp: int, v: int, gpus: int, column: str, eff: float):
    if column == "full":
        strategy = f"tp={tp},pp={pp},v={v},recompute=full"
    else:
        strategy = f"tp={tp},pp={pp},v={v},recompute=selective,sp=true"
    return plan_step(get_model(model), strategy, gpus, None, a100_op_time(eff),
                     selene_comm_time, device_mem_bytes=80e9, peak_flops=PEAK_FLOPS)


def calibrate() -> float:
    model, column = CALIBRATION_ROW
    row = next(r for r in ROWS if r[0] == model)
    target = row[5] if column == "full" else row[6]
    lo, hi = 0.2, 1.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if predict(*row[:5], column, mid).step_s > target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def main() -> None:
    t0 = time.perf_counter()
    eff = calibrate()
    rows, out, errors = [], [], []
    for model, tp, pp, v, gpus, full_s, seqsel_s in ROWS:
        for column, measured in (("full", full_s), ("seq+sel", seqsel_s)):
            r = predict(model, tp, pp, v, gpus, column, eff)
            err = 100.0 * (r.step_s - measured) / measured
            calib = (model, column) == CALIBRATION_ROW
            if not calib:
                errors.append(abs(err))
            rows.append([model, column, f"{measured:.2f}", f"{r.step_s:.2f}",
                         f"{err:+.1f}" + (" (calibration)" if calib else ""),
                         f"{r.compute_s:.2f}", f"{r.exposed_tp_s:.2f}", f"{r.bubble_s:.2f}",
                         f"{r.exposed_pp_s:.3f}", f"{100 * r.mfu:.1f}",
                         f"{r.memory['total'] / 1e9:.1f}"])
            out.append({"model": model, "column": column, "measured_s": measured,
                        "predicted_s": r.step_s, "error_pct": err, "calibration": calib,
                        "report": r.to_dict()})
    wall = time.perf_counter() - t0
    print(f"matrix efficiency calibrated on {CALIBRATION_ROW[0]} ({CALIBRATION_ROW[1]}): "
          f"{eff:.4f} of {PEAK_FLOPS / 1e12:.0f} TFLOP/s")
    print(table(["model", "column", "measured s", "npulab s", "error %", "compute s", "tp s",
                 "bubble s", "pp s", "MFU %", "mem GB"], rows))
    mean, worst = sum(errors) / len(errors), max(errors)
    print(f"validation cells (7): mean |error| {mean:.2f} %, max {worst:.2f} %   "
          f"(Calculon: mean {CALCULON['mean']} %, max {CALCULON['max']} %)")
    print(f"wall time {wall:.1f} s (including calibration)")
    path = write_results("accuracy_megatron", {
        "matrix_efficiency": eff, "calibration_row": CALIBRATION_ROW, "rows": out,
        "mean_abs_error_pct": mean, "max_abs_error_pct": worst, "calculon": CALCULON,
        "wall_s": wall, "machine": machine()})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
