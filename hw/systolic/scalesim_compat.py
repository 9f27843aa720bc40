"""SCALE-Sim-compatible timing: SCALE-Sim v2/v3 compute cycles and SRAM access counts, exactly.

SCALE-Sim (Samajdar et al., "A Systematic Methodology for Characterizing Scalability of DNN
Accelerators using SCALE-Sim", ISPASS 2020; PyPI ``scalesim`` 3.0.0) does not simulate PEs: it
folds im2col operand matrices onto the array and every fold is filled and drained on its own.
Its compute timing is therefore closed-form (``../shared/reference/scalesim.md``):

* mapping as in :func:`hw.systolic.mapping.map_gemm` (OS: M x N spatial, K temporal; WS:
  K x N, M; IS: K x M, N); partial folds cost as much as full ones;
* fold length ``L = T + R + C - 2`` (OS) or ``2R + C + T - 2`` (WS, IS);
* ``Total Cycles = row_folds * col_folds * L - 1`` in CALC (unlimited DRAM bandwidth) mode,
  where the ``- 1`` is SCALE-Sim's last-row-index convention (its issue 125), stall cycles 0.

Differences from SCALE-Sim, on purpose:

* OS ofmap SRAM writes: SCALE-Sim reports ``M*N + folds*(R+C)`` (its issue 166: the drain of
  every fold is counted as writes). We report the correct ``M*N`` as ``ofmap_sram_writes``
  and SCALE-Sim's figure separately as ``ofmap_sram_writes_scalesim``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hw.systolic.config import ArrayConfig, Dataflow
from hw.systolic.mapping import map_gemm

__all__ = ["ScaleSimTiming", "scalesim_timing"]


@dataclass(frozen=True)
class ScaleSimTiming:
    """One layer as SCALE-Sim's COMPUTE_REPORT and DETAILED_ACCESS_REPORT describe it."""

    total_cycles: int
    stall_cycles: int
    overall_util_pct: float
    mapping_eff_pct: float
    compute_util_pct: float
    ifmap_sram_reads: int
    filter_sram_reads: int
    ofmap_sram_writes: int
    ofmap_sram_writes_scalesim: int
    macs: int
    folds: int

    def to_dict(self) -> dict:
        return asdict(self)


def scalesim_timing(cfg: ArrayConfig, m: int, n: int, k: int) -> ScaleSimTiming:
    """SCALE-Sim's numbers for one GEMM ``(m x k) @ (k x n)`` on ``cfg`` (one layer)."""
    r, c = cfg.rows, cfg.cols
    mp = map_gemm(cfg, m, n, k)
    folds = mp.row_folds * mp.col_folds
    t = mp.temporal
    if cfg.dataflow is Dataflow.OS:
        fold_len = t + r + c - 2
        util_fold_len = fold_len
    else:
        fold_len = 2 * r + c + t - 2
        # SCALE-Sim measures compute utilization on the weight/input fold padded by C - 1.
        util_fold_len = fold_len + c - 1
    total = folds * fold_len - 1
    macs = m * n * k
    used = mp.spatial_rows * mp.spatial_cols  # summed over folds: the folds tile the extent
    mapping_eff = 100.0 * used / (folds * r * c)
    compute_util = 100.0 * used * t / (folds * r * c * util_fold_len)
    overall = 100.0 * macs / (r * c * total)

    if cfg.dataflow is Dataflow.OS:
        ifmap = m * k * mp.col_folds
        filt = k * n * mp.row_folds
        ofmap = m * n
        ofmap_ss = ofmap + folds * (r + c)
    elif cfg.dataflow is Dataflow.WS:
        ifmap = m * k * mp.col_folds
        filt = k * n
        ofmap = ofmap_ss = m * n * mp.row_folds
    else:
        ifmap = m * k
        filt = k * n * mp.col_folds
        ofmap = ofmap_ss = m * n * mp.row_folds
    return ScaleSimTiming(
        total_cycles=total, stall_cycles=0, overall_util_pct=overall,
        mapping_eff_pct=mapping_eff, compute_util_pct=compute_util, ifmap_sram_reads=ifmap,
        filter_sram_reads=filt, ofmap_sram_writes=ofmap, ofmap_sram_writes_scalesim=ofmap_ss,
        macs=macs, folds=folds,
    )
