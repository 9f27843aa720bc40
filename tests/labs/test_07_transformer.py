"""Lab 7 (examples/labs/07_transformer): the sheet's trends against closed forms, on its quick path
(sequence lengths 128..1024).

* The score and context GEMMs hold ``2 s^2 d`` of the block's ``4 s d^2 + 2 s^2 d + 2 s d f`` MACs
  (compiler/attention.py), with ``f = 4d`` a share of ``s / (6d + s)``: it grows with ``s``, and
  so does attention's share of the cycles.
* Unfused, the score matrix goes through DRAM: ``scores`` writes ``heads x s^2`` elements,
  ``softmax`` reads and writes them, ``context`` reads them (with V).
* Fused (FlashAttention), no score byte reaches DRAM: the attention group writes the ``s x d``
  context once and reads Q once and K and V once per query tile (Dao et al. 2022).
* Fusion moves fewer DRAM bytes and uses less energy at every length; its saving grows with ``s``.
* A run's layer windows partition its cycles, so the shares add up to 100 %.
"""

from __future__ import annotations

import math
import re

import pytest
from labload import LABS, load_script

LAB = LABS / "07_transformer"
D_MODEL, HEADS = 768, 12


lab = load_script(LAB, "where_time_goes")


@pytest.fixture(scope="module")
def rows():
    return lab.sweep(lab.QUICK)


def _attention_share(run) -> float:
    return (run["by_kind"]["attention"] + run["by_kind"]["softmax"]) / run["cycles"]


def test_the_quick_path_is_128_to_1024(rows):
    assert [r["seq_len"] for r in rows] == [128, 256, 512, 1024]
    assert all(r["element_bytes"] == 1 for r in rows)          # the default chip is int8


def test_attention_mac_share_closed_form(rows):
    for r in rows:
        s = r["seq_len"]
        assert r["attn_mac_share"] == pytest.approx(s / (6 * D_MODEL + s), rel=1e-12)


def test_shares_partition_the_cycles(rows):
    for r in rows:
        for mode in ("fused", "unfused"):
            run = r[mode]
            assert sum(run["by_kind"].values()) == run["cycles"], (r["seq_len"], mode)
    # fused members have no window of their own: softmax and GELU are in their anchors' kinds
    assert all(r["fused"]["by_kind"]["softmax"] == r["fused"]["by_kind"]["gelu"] == 0
               for r in rows)
    assert all(r["fused"]["layers_fused"] == 5 and r["unfused"]["layers_fused"] == 0
               for r in rows)


@pytest.mark.parametrize("mode", ["fused", "unfused"])
def test_attention_share_grows_with_the_sequence(rows, mode):
    shares = [_attention_share(r[mode]) for r in rows]
    assert shares == sorted(shares) and shares[-1] > 3 * shares[0]
    gemms = [(r[mode]["by_kind"]["proj"] + r[mode]["by_kind"]["ffn"]) / r[mode]["cycles"]
             for r in rows]
    assert gemms == sorted(gemms, reverse=True)


def test_unfused_score_matrix_goes_through_dram(rows):
    for r in rows:
        s, b = r["seq_len"], r["element_bytes"]
        scores = HEADS * s * s * b
        layers = r["unfused"]["layers"]
        assert r["unfused"]["scores_write_bytes"] == scores
        assert layers["h.0.attn.scores"].dram_write_bytes == scores
        softmax = layers["h.0.attn.softmax"]
        assert softmax.dram_read_bytes == softmax.dram_write_bytes == scores
        assert layers["h.0.attn.context"].dram_read_bytes >= scores + s * D_MODEL * b


def test_fused_attention_dram_closed_form(rows):
    for r in rows:
        s, b = r["seq_len"], r["element_bytes"]
        group = r["fused"]["layers"]["h.0.attn.scores"]
        assert group.fused == "attention:h.0.attn.scores"
        query_tile = int(re.search(r"\bm(\d+)\b", group.tiling).group(1))
        passes = math.ceil(s / query_tile)
        tensor = s * D_MODEL * b                                 # Q, K, V or the context
        assert group.dram_write_bytes == tensor                 # no score byte written
        assert group.dram_read_bytes == tensor + passes * 2 * tensor


def test_fusion_saves_dram_and_energy_more_with_longer_sequences(rows):
    saved = []
    for r in rows:
        f, u = r["fused"], r["unfused"]
        assert f["dram_bytes"] < u["dram_bytes"] and f["energy_j"] < u["energy_j"]
        saved.append(u["dram_bytes"] / f["dram_bytes"])
    assert saved == sorted(saved)


def test_main_prints_the_tables_and_writes_the_csv(tmp_path, capsys):
    assert lab.main(["--seq", "32", "-o", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "transformer_block (d_model 768, 12 heads, FFN 3072) on npulab-default" in text
    assert "   32  fused" in text and "   32  unfused" in text
    lines = (tmp_path / "where_time_goes.csv").read_text().splitlines()
    assert len(lines) == 1 + 2 * len(lab.KINDS)


def test_cli_errors(capsys):
    assert lab.main(["--seq", "16385"]) == 2
    assert "seq_len = 16385: must be an integer in 1..16384" in capsys.readouterr().err
    assert lab.main(["--set", "vector.lanes=0", "--seq", "32"]) == 2
    assert "vector.lanes" in capsys.readouterr().err
