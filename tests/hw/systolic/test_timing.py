"""Timing engine (hw/systolic/timing.py) against the register-level model, counter by counter.

The register model simulates every PE register; the timing engine only applies start-time
recurrences. They are independent implementations of the regmodel docstring's contract.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hw.systolic.config import ArrayConfig
from hw.systolic.mapping import (
    K_BUSY, K_CYCLES, K_FOLDS, K_HAZARDS, K_LEFT_READS, K_PSUM_READS, K_TOP_READS, K_WRITES,
    N_KERNEL_COUNTERS, ArrayCounters,
)
from hw.systolic.regmodel import run_gemm
from hw.systolic.timing import gemm_timing, timing_counters

FIELDS = [f.name for f in dataclasses.fields(ArrayCounters)]


def kernel_vector(dataflow: str, c: ArrayCounters) -> np.ndarray:
    """The register model's counters in the kernel layout of hw.systolic.mapping: LEFT is the
    operand entering at the left edge (a in OS/WS, b in IS), TOP the other one."""
    left, top = c.ifmap_reads, c.filter_reads
    if dataflow == "is":
        left, top = top, left
    vec = np.zeros(N_KERNEL_COUNTERS, np.int64)
    vec[K_CYCLES], vec[K_BUSY], vec[K_FOLDS] = c.cycles, c.pe_busy_cycles, c.folds
    vec[K_LEFT_READS], vec[K_TOP_READS] = left, top
    vec[K_WRITES], vec[K_PSUM_READS], vec[K_HAZARDS] = c.ofmap_writes, c.ofmap_reads, 0
    return vec


def check_case(dataflow, rows, cols, m, k, n, batch, seed, precision="int8"):
    rng = np.random.default_rng(seed)
    cfg = ArrayConfig(rows=rows, cols=cols, dataflow=dataflow, precision=precision)
    a = rng.integers(-4, 5, (batch, m, k))
    b = rng.integers(-4, 5, (batch, k, n))
    if cfg.precision.is_float:      # small integers: exact in every format, sums exact in fp32
        a, b = a.astype(np.float32), b.astype(np.float32)
    reg = run_gemm(cfg, a, b)
    np.testing.assert_array_equal(reg.output, np.matmul(a, b))  # the run itself is sane
    tim = gemm_timing(cfg, m, n, k, batch)
    case = (dataflow, rows, cols, m, k, n, batch)
    for name in FIELDS:
        assert getattr(tim, name) == getattr(reg.counters, name), (name, case)
    assert tim == reg.counters
    vec = timing_counters(cfg, m, n, k, batch)
    assert vec.dtype == np.int64 and vec.shape == (N_KERNEL_COUNTERS,)
    np.testing.assert_array_equal(vec, kernel_vector(dataflow, reg.counters), err_msg=str(case))


@settings(deadline=None, max_examples=150)
@given(
    dataflow=st.sampled_from(["os", "ws", "is"]),
    rows=st.integers(1, 8), cols=st.integers(1, 8),
    m=st.integers(1, 20), k=st.integers(1, 20), n=st.integers(1, 20),
    batch=st.integers(1, 3), seed=st.integers(0, 2**32 - 1),
)
def test_timing_equals_register_model_property(dataflow, rows, cols, m, k, n, batch, seed):
    check_case(dataflow, rows, cols, m, k, n, batch, seed)


@settings(deadline=None, max_examples=60)
@given(
    precision=st.sampled_from(["int4", "int16", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]),
    dataflow=st.sampled_from(["os", "ws", "is"]),
    rows=st.integers(1, 6), cols=st.integers(1, 6),
    m=st.integers(1, 12), k=st.integers(1, 12), n=st.integers(1, 12),
    batch=st.integers(1, 2), seed=st.integers(0, 2**32 - 1),
)
def test_timing_equals_register_model_in_every_precision(precision, dataflow, rows, cols, m, k,
                                                        n, batch, seed):
    """The timing engine's counters do not depend on the operand type: equal to the register
    model's for every precision (the floating-point formats included)."""
    check_case(dataflow, rows, cols, m, k, n, batch, seed, precision)


def test_timing_equals_register_model_seeded_sweep():
    rng = np.random.default_rng(20240601)
    for i in range(300):
        dataflow = ("os", "ws", "is")[i % 3]
        rows, cols = (int(v) for v in rng.integers(1, 9, 2))
        m, k, n = (int(v) for v in rng.integers(1, 21, 3))
        batch = int(rng.integers(1, 4))
        check_case(dataflow, rows, cols, m, k, n, batch, i)


@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
@pytest.mark.parametrize("rows, cols, m, k, n", [
    (1, 1, 1, 1, 1), (1, 8, 20, 1, 20), (8, 1, 1, 20, 1), (8, 8, 1, 1, 1), (3, 5, 16, 16, 16),
    (7, 2, 14, 15, 13), (2, 7, 1, 20, 20), (8, 8, 20, 20, 20), (4, 6, 3, 17, 2),
])
def test_timing_equals_register_model_corners(dataflow, rows, cols, m, k, n):
    for batch in (1, 3):
        check_case(dataflow, rows, cols, m, k, n, batch, 1)


@pytest.mark.parametrize("key, value", [
    ("m", 0), ("m", -1), ("n", 0), ("k", 0), ("count", 0), ("m", 1.5), ("n", 2.0),
    ("k", True), ("count", False), ("m", "3"), ("n", None), ("k", np.float64(3.0)),
])
def test_gemm_timing_rejects_bad_dimensions(key, value):
    cfg = ArrayConfig(rows=4, cols=4, dataflow="ws")
    args = {"m": 2, "n": 3, "k": 4, "count": 1, key: value}
    with pytest.raises(ValueError, match=rf"gemm_timing: {key} = {value!r}: must be an integer >= 1"
                       .replace("(", r"\(").replace(")", r"\)")):
        gemm_timing(cfg, **args)


def test_gemm_timing_accepts_numpy_integers():
    cfg = ArrayConfig(rows=4, cols=4, dataflow="os")
    # OS one fold: K + 2R + cols_used - 2 = 5 + 8 + 3 - 2 = 14 (hand-derived, regmodel docstring)
    got = gemm_timing(cfg, np.int64(3), np.int32(3), np.int16(5), np.int8(1))
    assert got.cycles == 14 and got.folds == 1 and got.pe_busy_cycles == 45
    assert isinstance(got.cycles, int) and isinstance(got.pe_busy_cycles, int)
