"""The formulas docs/concepts.md teaches, checked against the models on random shapes.

The page's own examples check its worked numbers (one GEMM each, run by scripts/doccheck.py).
These tests check that the *general* formulas it states hold beyond those examples, each written
out here as an independent gold model:

* folds = ceil(rows_dim / R) x ceil(cols_dim / C), with the spatial dimensions of each dataflow
  (OS: M x N, WS: K x N, IS: K x M), and mapping efficiency = used PEs / (folds x R x C);
* output-stationary cycles: fold f starts at f x max(T, R) and ends at
  S_f + T + 2R + cols_used - 2; cycles = the latest end (folds run column tile, then row tile);
* weight/input-stationary: the W/S recurrence of docs/systolic.md;
* utilization = MACs / (PEs x cycles) (the compute-only report's column);
* SCALE-Sim: Total Cycles = folds x L - 1, L = T + R + C - 2 (OS) or 2R + C + T - 2 (WS/IS);
* the pipeline bubble (p-1)/(m+p-1) (GPipe, Huang et al. 2019) and (p-1)/(v m + p - 1) interleaved;
* the roofline ridge point of the default chip, peak MACs per cycle / DRAM bytes per cycle.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from compiler.parallel import bubble_fraction
from hw.configfile import load_chip_config
from hw.systolic.config import ArrayConfig
from hw.systolic.scalesim_compat import scalesim_timing
from hw.systolic.timing import gemm_timing

SPATIAL = {"os": lambda m, n, k: (m, n, k), "ws": lambda m, n, k: (k, n, m),
           "is": lambda m, n, k: (k, m, n)}     # (rows dim, cols dim, streamed T)


def _shapes(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        r, c = (int(x) for x in rng.integers(1, 33, 2))
        m, n, k = (int(x) for x in rng.integers(1, 200, 3))
        yield r, c, m, n, k


def _folds(rows_dim, cols_dim, r, c):
    """Fold geometry in the array's order: column tile outer, row tile inner."""
    out = []
    for c0 in range(0, cols_dim, c):
        for r0 in range(0, rows_dim, r):
            out.append((min(r, rows_dim - r0), min(c, cols_dim - c0)))
    return out


def _os_cycles(m, n, k, r, c):
    ends = [f * max(k, r) + k + 2 * r + cu - 2 for f, (_, cu) in enumerate(_folds(m, n, r, c))]
    return max(ends)


def _ws_cycles(rows_dim, cols_dim, t, r, c):
    end = 0
    for f, (_, cu) in enumerate(_folds(rows_dim, cols_dim, r, c)):
        if f == 0:
            w, s = 0, 1
        else:
            w = max(w + r, s + c - 1)
            s = max(s + t, w + 1)
        end = max(end, s + t + r + cu - 1)
    return end


@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
def test_folds_mapping_efficiency_and_cycles(dataflow):
    for r, c, m, n, k in _shapes(hash(dataflow) % 1000, 150):
        rows_dim, cols_dim, t = SPATIAL[dataflow](m, n, k)
        cfg = ArrayConfig(rows=r, cols=c, dataflow=dataflow)
        got = gemm_timing(cfg, m, n, k)
        folds = math.ceil(rows_dim / r) * math.ceil(cols_dim / c)
        assert got.folds == folds == len(_folds(rows_dim, cols_dim, r, c))
        gold = _os_cycles(m, n, k, r, c) if dataflow == "os" else _ws_cycles(rows_dim, cols_dim, t, r, c)
        assert got.cycles == gold, (dataflow, r, c, m, n, k)
        assert got.pe_busy_cycles == m * n * k
        ss = scalesim_timing(cfg, m, n, k)
        fold_len = t + r + c - 2 if dataflow == "os" else 2 * r + c + t - 2
        assert ss.total_cycles == folds * fold_len - 1
        assert ss.mapping_eff_pct == pytest.approx(100 * rows_dim * cols_dim / (folds * r * c), rel=1e-12)
        assert ss.overall_util_pct == pytest.approx(100 * m * n * k / (r * c * ss.total_cycles), rel=1e-12)


def test_the_worked_gemm_of_the_page():
    """64 x 48 x 40 on 16 x 16: the numbers the page's prose quotes."""
    os_ = gemm_timing(ArrayConfig(rows=16, cols=16, dataflow="os"), 64, 48, 40)
    ws = gemm_timing(ArrayConfig(rows=16, cols=16, dataflow="ws"), 64, 48, 40)
    assert (os_.folds, os_.cycles, ws.folds, ws.cycles) == (12, 526, 9, 608)
    assert round(100 * 64 * 48 * 40 / (256 * os_.cycles), 1) == 91.3
    assert (os_.filter_reads, ws.filter_reads, ws.ofmap_reads) == (4 * 40 * 48, 40 * 48, 6144)
    assert scalesim_timing(ArrayConfig(rows=16, cols=16, dataflow="os"), 64, 48, 40).total_cycles == 839


def test_bubble_formula():
    for p in range(1, 9):
        for m in range(1, 33):
            assert bubble_fraction(p, m) == pytest.approx((p - 1) / (m + p - 1), rel=1e-15)
            assert bubble_fraction(p, m, v=2) == pytest.approx((p - 1) / (2 * m + p - 1), rel=1e-15)
    assert round(100 * bubble_fraction(4, 4)) == 43 and round(100 * bubble_fraction(4, 16)) == 16


def test_ridge_point_of_the_default_chip():
    chip = load_chip_config(None)
    # DDR4-3200 x1: a 64-bit bus, 2 transfers per tCK (0.63 ns in the preset)
    bytes_per_cycle = 8 * 2 / chip.dram.tck_ns / (chip.clock_mhz / 1e3)
    assert bytes_per_cycle == pytest.approx(chip.dram.peak_gbps * 1e3 / chip.clock_mhz, rel=1e-12)
    assert round(chip.array.rows * chip.array.cols / bytes_per_cycle, 1) == 40.3
