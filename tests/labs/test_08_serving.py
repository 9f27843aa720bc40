"""Lab 8 (examples/labs/08_serving): the sheet's tables against closed forms, on a quick path.

* A Llama-2-7B decode layer reads its weights, ``4 d^2 + 3 d f`` fp16 values, once per step,
  and each sequence's KV cache, ``keys x 2 x 32 x 128`` fp16 values, once: the simulated layer
  never beats those bytes at the HBM's peak, and stays within 25 % of it (memory-bound).
* FLOPs per byte stay below the A100's ridge point (312 TFLOP/s / 2,039 GB/s = 153) and follow
  ``b (2W + C) / (2W + b C)`` (W weights, C one sequence's cache bytes).
* Tokens per second grow with the batch; the KV table is ``2 x kv_heads x head_dim x 2 x layers``
  bytes per token; continuous batching's time to first token is below static batching's.
"""

from __future__ import annotations


import pytest
from labload import LABS, load_script

LAB = LABS / "08_serving"


lab = load_script(LAB, "serving")
D, F, KV = 4096, 11008, 1024


@pytest.fixture(scope="module")
def timer():
    return lab.KernelTimer(lab.resolve_system(lab.CHIP), launch=False)


def test_decode_layer_is_bound_by_its_bytes(timer, monkeypatch):
    monkeypatch.setattr(lab, "BATCHES", (1, 16))
    rows = lab.decode_rows(timer)
    weights = 2 * (4 * D * D + 3 * D * F)
    for r in rows:
        b = r["batch"]
        cache = b * (KV + 1) * 2 * 32 * 128 * 2
        assert r["weights_MB"] == pytest.approx(weights / 1e6)
        assert r["kv_MB"] == pytest.approx(cache / 1e6)
        assert r["bound_us"] <= r["layer_us"] <= 1.25 * r["bound_us"]
        assert r["flop_per_byte"] < 312e12 / 2039e9
        assert r["flop_per_byte"] == pytest.approx(b * (weights + cache / b) / (weights + cache),
                                                   rel=0.02)
    assert rows[1]["tokens_per_s"] > 5 * rows[0]["tokens_per_s"]     # 16x the work, < 2x time


def test_kv_table_is_the_closed_form():
    rows = {r["model"]: r for r in lab.kv_rows()}
    assert rows["llama2-7b"]["kv_KiB_per_token"] == 2 * 32 * 128 * 2 * 32 / 1024
    assert rows["llama3-8b"]["kv_KiB_per_token"] == 2 * 8 * 128 * 2 * 32 / 1024
    assert rows["llama2-70b"]["kv_KiB_per_token"] == 2 * 8 * 128 * 2 * 80 / 1024
    assert rows["llama2-70b"]["tokens_in_80GB"] == 0            # 138 GB of weights
    free = 0.9 * 80e9 - rows["llama2-7b"]["weights_GB"] * 1e9
    assert rows["llama2-7b"]["tokens_in_80GB"] == pytest.approx(free / (512 * 1024), abs=1)


def test_continuous_batching_answers_sooner_than_static(timer):
    rows = {r["policy"]: r for r in lab.serve_rows(timer, 6, (8.0,))}
    assert rows["continuous"]["ttft_p99_ms"] < rows["static"]["ttft_p99_ms"]
    assert rows["chunked"]["ttft_p50_ms"] < rows["static"]["ttft_p50_ms"]
