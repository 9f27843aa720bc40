"""Binary (+1/-1, XNOR-popcount) operands (issue 27): the XNOR-popcount rule against the
+1/-1 dot product it stands for, exhaustively over byte words; the register model against
numpy with 1, 2, 4 and 8 MACs per PE; the timing engine against the register model; binary
quantization; and the one-line errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.quantize import QuantSpec, dequantize, ptq_report, quantize, sqnr_db
from hw.chip import ChipConfig
from hw.energy.tech import load_technology
from hw.numerics import binary_bits, xnor_popcount
from hw.systolic.config import ArrayConfig, ConfigError
from hw.systolic.regmodel import run_gemm
from hw.systolic.rtl.array import check_rtl_config
from hw.systolic.timing import gemm_timing

DATAFLOWS = ["os", "ws", "is"]
# every byte word, decoded: WORDS[w, e] = +1 where bit e of w is set, else -1
WORDS = np.where((np.arange(256)[:, None] >> np.arange(8)) & 1, 1, -1)


def test_xnor_popcount_is_the_signed_dot_product_for_every_pair_of_words():
    dots = WORDS @ WORDS.T
    for a in range(256):
        for b in range(256):
            assert xnor_popcount(a, b, 8) == dots[a, b]
    # masked lanes (K padded to whole words) count as zeros
    for mask in (0b1, 0b111, 0b1010_1010, 0b0111_1111):
        sel = (mask >> np.arange(8)) & 1
        d = (WORDS * sel) @ WORDS.T
        assert all(xnor_popcount(a, b, 8, mask) == d[a, b] for a in range(0, 256, 5)
                   for b in range(256))


def test_binary_bits_encode_plus_one_as_one():
    np.testing.assert_array_equal(binary_bits([1, -1, -1, 1]), [1, 0, 0, 1])
    with pytest.raises(ValueError, match="binary operand 0: must be"):
        binary_bits([1, 0])


@pytest.mark.parametrize("dataflow", DATAFLOWS)
@pytest.mark.parametrize("lanes", [1, 8])
def test_array_of_xnor_pes_computes_every_word_pair(dataflow, lanes):
    """A 256 x 8 by 8 x 256 GEMM of all byte words: with 8 MACs per PE each output is one
    XNOR-popcount of two words, the whole table of them."""
    cfg = ArrayConfig(rows=4, cols=4, dataflow=dataflow, precision="binary", macs_per_pe=lanes)
    got = run_gemm(cfg, WORDS, WORDS.T).output
    want = np.array([[xnor_popcount(a, b, 8) for b in range(256)] for a in range(256)])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dataflow", DATAFLOWS)
@pytest.mark.parametrize("lanes", [1, 2, 4, 8])
def test_binary_gemm_equals_numpy_and_wraps_at_eight_bits(dataflow, lanes):
    rng = np.random.default_rng(lanes)
    k = 301                               # not a multiple of any lane count
    a = rng.choice([-1, 1], (2, 6, k))
    b = rng.choice([-1, 1], (2, k, 5))
    a[0, 0] = b[0, :, 0]                  # output (0, 0, 0) = 301: leaves an 8-bit accumulator
    exact = a @ b
    cfg = ArrayConfig(rows=3, cols=4, dataflow=dataflow, precision="binary", acc_bits=8,
                      macs_per_pe=lanes)
    res = run_gemm(cfg, a, b)
    np.testing.assert_array_equal(res.output, (exact + 128) % 256 - 128)
    assert res.output[0, 0, 0] == 301 - 256
    kp = -(-k // lanes)
    assert res.counters.pe_busy_cycles == 2 * 6 * 5 * kp      # PE-cycles of `lanes` MACs
    assert res.counters.cycles == gemm_timing(ArrayConfig(rows=3, cols=4, dataflow=dataflow),
                                              6, 5, kp, 2).cycles


@settings(deadline=None, max_examples=60)
@given(dataflow=st.sampled_from(DATAFLOWS), rows=st.integers(1, 5), cols=st.integers(1, 5),
       batch=st.integers(1, 2), m=st.integers(1, 9), n=st.integers(1, 9), k=st.integers(1, 40),
       lanes=st.sampled_from([1, 2, 4, 8]), sat=st.booleans(), seed=st.integers(0, 2**16))
def test_timing_engine_equals_register_model_binary(dataflow, rows, cols, batch, m, n, k, lanes,
                                                    sat, seed):
    cfg = ArrayConfig(rows=rows, cols=cols, dataflow=dataflow, precision="binary", acc_bits=8,
                      overflow="saturate" if sat else "wrap", macs_per_pe=lanes)
    rng = np.random.default_rng(seed)
    a = rng.choice([-1, 1], (batch, m, k))
    b = rng.choice([-1, 1], (batch, k, n))
    res = run_gemm(cfg, a, b)
    assert res.counters == gemm_timing(cfg, m, n, k, batch)
    if not sat:
        np.testing.assert_array_equal(res.output, (a @ b + 128) % 256 - 128)


def test_binary_quantization_is_sign_times_mean_magnitude():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 12))
    q = quantize(x, QuantSpec("binary", "channel"), axis=-1)
    np.testing.assert_array_equal(q.values, np.where(x >= 0, 1, -1))
    np.testing.assert_allclose(q.scale.ravel(), np.abs(x).mean(axis=0))
    # mean|x| is the least-squares scale for the signs: any other scale does worse
    best = sqnr_db(x, dequantize(q))
    for f in (0.9, 1.1):
        assert sqnr_db(x, np.sign(x) * q.scale * f) < best
    # a Gaussian's 1-bit SQNR: 10 log10(1 / (1 - 2/pi)) = 4.40 dB
    big = rng.standard_normal(200_000)
    assert sqnr_db(big, dequantize(quantize(big, QuantSpec("binary")))) == pytest.approx(
        4.40, abs=0.05)


def test_binary_ptq_report_runs_on_the_register_model():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((24, 8))
    (row,) = ptq_report([("fc", w)], QuantSpec("binary", "channel"), tokens=8, rows=4, cols=4)
    x = np.random.default_rng(0).standard_normal((8, 24))
    want = (np.where(x >= 0, 1, -1) @ np.where(w >= 0, 1, -1)) * np.abs(x).mean() \
        * np.abs(w).mean(axis=0)
    assert row["sqnr_db"] == pytest.approx(sqnr_db(x @ w, want), rel=1e-9)
    with pytest.raises(ValueError, match="prune or binarize, not both"):
        ptq_report([("fc", w)], QuantSpec("binary"), prune=(2, 4))


def test_binary_mac_energy_is_below_int4_below_int8():
    tech = load_technology("45nm")
    assert tech.mac_pj("binary") < tech.mac_pj("int4") < tech.mac_pj("int8")
    # the multiply table (8 and 32 bits) extrapolated below 8 bits by its power law
    p = np.log(3.1 / 0.2) / np.log(32 / 8)
    assert tech.mult_pj("int", 4) == pytest.approx(0.2 * 0.5 ** p)
    assert tech.mac_pj("binary") == pytest.approx(0.2 * (1 / 8) ** p + tech.add_pj("int", 32))


def test_binary_errors_are_one_line():
    cases = [
        (dict(precision="binary", sparse_m=4), "sparse_m = 4: binary weights are"),
        (dict(precision="binary", macs_per_pe=16), "macs_per_pe = 16: must be 1, 2 with int4"),
        (dict(precision="binary", acc_bits=4), r"acc_bits = 4: must be an integer in 8\.\.64"),
        (dict(precision="fp8_e4m3", macs_per_pe=4), "several MACs per PE"),
    ]
    for kw, msg in cases:
        with pytest.raises(ConfigError, match=msg):
            ArrayConfig(**kw)
    cfg = ArrayConfig(rows=2, cols=2, precision="binary")
    with pytest.raises(ValueError, match="value 0 is not a binary operand: must be"):
        run_gemm(cfg, np.array([[1, 0]]), np.array([[1], [1]]))
    with pytest.raises(ConfigError, match="the RTL supports 'binary', 'int4'"):
        check_rtl_config(ArrayConfig(rows=2, cols=2, precision="fp8_e4m3"))
    check_rtl_config(cfg)           # binary PEs have RTL (co-simulated below)
    # a chip packs binary operands eight per byte (hw.packing)
    assert ChipConfig(array=cfg).elem_size.bits == 1


@pytest.mark.parametrize("dataflow", DATAFLOWS)
@pytest.mark.parametrize("lanes", [1, 2, 8])
def test_rtl_xnor_pes_cosimulate_every_register_every_cycle(dataflow, lanes):
    from hw.systolic.rtl.cosim import verify
    cfg = ArrayConfig(rows=3, cols=2, dataflow=dataflow, precision="binary", acc_bits=8,
                      macs_per_pe=lanes, overflow="saturate" if lanes == 2 else "wrap")
    report = verify(cfg, cases=3, seed=lanes)
    assert report.ok, report.summary()
    # an XOR where the XNOR should be flips every product: caught
    broken = verify(cfg, cases=1, seed=lanes, mutation="xor-product")
    assert not broken.ok and "differ" in broken.summary()


def test_rtl_binary_mutation_and_lane_errors():
    from hw.systolic.rtl.cosim import wave_operands
    from hw.systolic.rtl.mutations import pe_class_for
    with pytest.raises(ConfigError, match="xor-product' breaks a binary PE's XNOR"):
        pe_class_for(ArrayConfig(rows=2, cols=2), "xor-product")
    cfg = ArrayConfig(rows=2, cols=2, precision="binary", macs_per_pe=4)
    with pytest.raises(ConfigError, match="k = 6: binary PEs with 4 MACs each need K a "
                                          "multiple of 4"):
        wave_operands(cfg, 2, 6, 2)
    a, b = wave_operands(cfg, 3, 8, 2)
    assert set(np.unique(a)) | set(np.unique(b)) == {-1, 1}
