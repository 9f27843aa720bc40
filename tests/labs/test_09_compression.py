"""Lab 9 (examples/labs/09_compression): the sheet's tables against gold models.

* Accuracy: the script's SQNR equals a numpy computation of the same quantized GEMM (int8 and
  int4 integer arithmetic is exact), and 2:4 pruning of Gaussian weights costs what keeping the
  2 largest of 4 values predicts: 10 log10(1 / 0.132) = 8.8 dB.
* Chip: W4A8 moves exactly half the conv's weight bytes fewer; fp8 changes only the MAC
  energy, by MACs x (fp8 MAC - int8 MAC) of the energy table; 2:4 and dual-MAC int4 halve the
  array's compute (the timing engine on K / 2).
"""

from __future__ import annotations


import numpy as np
import pytest

from dataclasses import replace

from hw.energy import load_technology
from hw.systolic.timing import gemm_timing
from npulab import load_chip_config, simulate
from labload import LABS, load_script

LAB = LABS / "09_compression"


lab = load_script(LAB, "fewer_bits")
SHAPE = (576, 64)          # a smaller GEMM than the sheet's, the same code path


def _gold(shape, w_qmax, a_qmax, prune=False, seed=0):
    rng = np.random.default_rng(seed)
    k, n = shape
    w0 = rng.standard_normal((k, n)) / np.sqrt(k)
    x = rng.standard_normal((lab.TOKENS, k))
    w = w0.copy()
    if prune:                      # keep the 2 largest magnitudes of every 4 along K
        g = w.reshape(k // 4, 4, n)
        order = np.argsort(-np.abs(g), axis=1, kind="stable")
        mask = np.zeros_like(g, bool)
        np.put_along_axis(mask, order[:, :2], True, axis=1)
        w = (g * mask).reshape(k, n)
    sw = np.abs(w).max(axis=0) / w_qmax
    qw = np.clip(np.round(w / sw), -w_qmax, w_qmax).astype(np.int64)
    sa = np.abs(x).max() / a_qmax
    qa = np.clip(np.round(x / sa), -a_qmax, a_qmax).astype(np.int64)
    out = (qa @ qw) * sa * sw
    ref = x @ w0
    return 10 * np.log10((ref ** 2).sum() / ((ref - out) ** 2).sum())


@pytest.mark.parametrize("scheme, w_qmax, a_qmax, prune", [
    ("int8", 127, 127, False), ("w4a8", 7, 127, False), ("w4a4", 7, 7, False),
    ("2:4", 127, 127, True), ("2:4+w4", 7, 127, True)])
def test_accuracy_equals_numpy_on_the_same_quantized_gemm(scheme, w_qmax, a_qmax, prune):
    assert lab.accuracy(scheme, SHAPE) == pytest.approx(_gold(SHAPE, w_qmax, a_qmax, prune),
                                                        abs=1e-9)


def test_two_four_pruning_costs_what_dropping_half_of_each_group_predicts():
    rng = np.random.default_rng(1)
    s = np.sort(rng.standard_normal((200_000, 4)) ** 2, axis=1)
    predicted = 10 * np.log10(s.sum() / s[:, :2].sum())      # 8.8 dB
    assert predicted == pytest.approx(8.79, abs=0.05)
    assert abs(lab.accuracy("2:4", SHAPE) - predicted) < 1.0
    assert lab.accuracy("int8", SHAPE) > lab.accuracy("fp8", SHAPE) > lab.accuracy("w4a8", SHAPE)


def test_chip_runs_follow_each_scheme():
    chip = load_chip_config()
    (label, graph, _), = [lay for lay in lab.layers() if lay[0] == "conv"]
    conv = graph.ops[0]
    runs = {s: lab.chip_run(graph, chip, s) for s in ("int8", "fp8", "w4a8", "2:4", "w4a4")}
    # W4A8: half the weight bytes
    assert runs["int8"]["dram_bytes"] - runs["w4a8"]["dram_bytes"] == conv.weight_elements // 2
    # W4A4: every operand packed two per byte (256 channels: whole bytes), and faster
    assert runs["w4a4"]["dram_bytes"] * 2 == runs["int8"]["dram_bytes"]
    assert runs["w4a4"]["cycles"] < runs["int8"]["cycles"]
    # fp8: the same schedule; the energy differs by the MACs' energy alone
    assert runs["fp8"]["cycles"] == runs["int8"]["cycles"]
    assert runs["fp8"]["dram_bytes"] == runs["int8"]["dram_bytes"]
    tech = load_technology(lab.TECH)
    parts = {}
    for precision in ("int8", "fp8_e4m3"):
        fp = replace(chip, array=replace(chip.array, precision=precision, acc_bits=None))
        parts[precision] = simulate(graph, fp).metrics(lab.TECH).network["energy_breakdown_j"]
    for name, joules in parts["int8"].items():
        if name not in ("mac", "static"):      # fp8's MAC units are larger: more leakage
            assert parts["fp8_e4m3"][name] == joules, name
    extra = conv.macs * (tech.mac_pj("fp8_e4m3") - tech.mac_pj("int8")) * 1e-12
    assert parts["fp8_e4m3"]["mac"] - parts["int8"]["mac"] == pytest.approx(extra, rel=1e-9)
    assert runs["fp8"]["energy_j"] == pytest.approx(sum(parts["fp8_e4m3"].values()), rel=1e-12)
    # 2:4: faster, never below half the time
    assert runs["int8"]["cycles"] / 2 < runs["2:4"]["cycles"] < runs["int8"]["cycles"]
    # the array alone: 2:4 and dual-MAC int4 both run K / 2
    a = lab.array_only(graph, chip)
    s = conv.gemm_shape()
    assert a["int8"] == gemm_timing(chip.array, s.m, s.n, s.k, s.count).cycles
    assert a["2:4"] == a["w4a4"] == gemm_timing(chip.array, s.m, s.n, s.k // 2, s.count).cycles
    assert a["mac_j_int4"] / a["mac_j_int8"] == pytest.approx(
        tech.mac_pj("int4") / tech.mac_pj("int8"))
