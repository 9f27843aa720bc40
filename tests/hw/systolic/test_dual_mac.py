"""Dual-MAC int4 PEs (issue 27: "a PE that does two int4 MACs where it does one int8"): the
register model against numpy, the timing engine against the register model, and what the
pairs save. The RTL's dual-MAC PEs are co-simulated in test_rtl.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hw.systolic.config import ArrayConfig, ConfigError
from hw.systolic.regmodel import run_gemm
from hw.systolic.timing import gemm_timing

DATAFLOWS = ["os", "ws", "is"]


@pytest.mark.parametrize("dataflow", DATAFLOWS)
@pytest.mark.parametrize("k", [1, 7, 16])
def test_dual_mac_gemm_equals_numpy_and_halves_the_reduction(dataflow, k):
    rng = np.random.default_rng(k)
    a = rng.integers(-8, 8, (2, 9, k))
    b = rng.integers(-8, 8, (2, k, 7))
    two = ArrayConfig(rows=4, cols=3, dataflow=dataflow, precision="int4", macs_per_pe=2)
    one = ArrayConfig(rows=4, cols=3, dataflow=dataflow, precision="int4")
    r2, r1 = run_gemm(two, a, b), run_gemm(one, a, b)
    np.testing.assert_array_equal(r2.output, a @ b)
    np.testing.assert_array_equal(r1.output, a @ b)
    # K = 2K' (odd K: one zero pad): PE-cycles of two MACs, operands read in pairs
    kp = -(-k // 2)
    assert r2.counters.pe_busy_cycles == 2 * 9 * 7 * kp
    assert r2.counters.ifmap_reads == 2 * gemm_timing(one, 9, 7, kp, 2).ifmap_reads
    assert r2.counters.cycles == gemm_timing(one, 9, 7, kp, 2).cycles <= r1.counters.cycles


def test_narrow_accumulator_wraps_like_numpy():
    cfg = ArrayConfig(rows=3, cols=3, dataflow="ws", precision="int4", acc_bits=8, macs_per_pe=2)
    a = np.full((4, 10), -8)
    b = np.full((10, 3), -8)          # every product 64: sums wrap at 8 bits
    want = ((a @ b + 128) % 256) - 128
    np.testing.assert_array_equal(run_gemm(cfg, a, b).output, want)


@settings(deadline=None, max_examples=80)
@given(dataflow=st.sampled_from(DATAFLOWS), rows=st.integers(1, 5), cols=st.integers(1, 5),
       batch=st.integers(1, 2), m=st.integers(1, 10), n=st.integers(1, 10),
       k=st.integers(1, 13), acc=st.sampled_from([8, 12, 32]), sat=st.booleans(),
       seed=st.integers(0, 2**16))
def test_timing_engine_equals_register_model_dual_mac(dataflow, rows, cols, batch, m, n, k,
                                                      acc, sat, seed):
    cfg = ArrayConfig(rows=rows, cols=cols, dataflow=dataflow, precision="int4", acc_bits=acc,
                      overflow="saturate" if sat else "wrap", macs_per_pe=2)
    rng = np.random.default_rng(seed)
    a = rng.integers(-8, 8, (batch, m, k))
    b = rng.integers(-8, 8, (batch, k, n))
    res = run_gemm(cfg, a, b)
    assert res.counters == gemm_timing(cfg, m, n, k, batch)
    if not sat:
        wrap = 1 << acc
        np.testing.assert_array_equal(res.output, (a @ b + wrap // 2) % wrap - wrap // 2)


def test_dual_mac_config_errors_are_one_line():
    with pytest.raises(ConfigError, match="macs_per_pe = 2: several MACs per PE .* 'int8'"):
        ArrayConfig(macs_per_pe=2)
    with pytest.raises(ConfigError, match="macs_per_pe = 3: must be 1, 2 with int4"):
        ArrayConfig(precision="int4", macs_per_pe=3)
    with pytest.raises(ConfigError, match="macs_per_pe = 4: .*int4: up to 2"):
        ArrayConfig(precision="int4", macs_per_pe=4)
    with pytest.raises(ConfigError, match="either N:M sparse or multi-MAC"):
        ArrayConfig(precision="int4", macs_per_pe=2, sparse_m=4)


def _gold_pairs_saturating(a, b, acc_bits, dataflow, rows):
    """Saturating accumulation of operand pairs: each PE adds a pair's two products as one
    value, saturated at every addition; OS adds the pairs in k order, WS/IS down each column
    of R pairs (from 0) and then each column sum to the output, saturating again."""
    lo, hi = -(1 << (acc_bits - 1)), (1 << (acc_bits - 1)) - 1
    sat = lambda v: min(max(v, lo), hi)      # noqa: E731
    batch, m_dim, k = a.shape
    kp = -(-k // 2)
    a2 = np.concatenate([a, np.zeros((batch, m_dim, 2 * kp - k), a.dtype)], axis=2)
    b2 = np.concatenate([b, np.zeros((batch, 2 * kp - k, b.shape[2]), b.dtype)], axis=1)
    pairs = (a2.reshape(batch, m_dim, kp, 2)[..., None]
             * b2.reshape(batch, kp, 2, -1)[:, None]).sum(axis=3)       # (batch, m, kp, n)
    groups = [range(kp)] if dataflow == "os" else [range(r0, min(r0 + rows, kp))
                                                   for r0 in range(0, kp, rows)]
    out = np.zeros((batch, m_dim, b.shape[2]), np.int64)
    for i, mm, n in np.ndindex(out.shape):
        total = None
        for grp in groups:
            s = 0
            for r in grp:
                s = sat(s + int(pairs[i, mm, r, n]))
            total = s if total is None else sat(total + s)
        out[i, mm, n] = total
    return out


@pytest.mark.parametrize("dataflow", DATAFLOWS)
def test_saturating_dual_mac_outputs_equal_the_pairwise_gold(dataflow):
    """A pair's sum is one addition: (-8 x -8) + (-8 x -8) = 128 saturates an 8-bit
    accumulator as one value, where two int8-style additions would saturate after the first."""
    rng = np.random.default_rng(11)
    a = rng.integers(-8, 8, (2, 5, 13))
    b = rng.integers(-8, 8, (2, 13, 4))
    a[0, 0], b[0, :, 0] = -8, -8          # output (0, 0, 0): every pair adds 128
    cfg = ArrayConfig(rows=3, cols=2, dataflow=dataflow, precision="int4", acc_bits=8,
                      overflow="saturate", macs_per_pe=2)
    got = run_gemm(cfg, a, b).output
    gold = _gold_pairs_saturating(a, b, 8, dataflow, 3)
    np.testing.assert_array_equal(got, gold)
    assert got[0, 0, 0] == 127 and (got != np.clip(a @ b, -128, 127)).any()
