"""`npulab scalesim` end to end: SCALE-Sim files in, SCALE-Sim report files out, equal to the
reference rows SCALE-Sim 3.0.0 produced (../shared/reference/scalesim_reference.csv)."""

import csv
from collections import defaultdict

import pytest

from npulab.cli import main

CFG = """[general]
run_name = ref_{h}x{w}_{df}

[architecture_presets]
ArrayHeight: {h}
ArrayWidth: {w}
IfmapSramSzkB: 64
FilterSramSzkB: 64
OfmapSramSzkB: 64
IfmapOffset: 0
FilterOffset: 10000000
OfmapOffset: 20000000
Bandwidth: 10
Dataflow: {df}
"""


def _groups(shared_dir):
    with open(shared_dir / "reference" / "scalesim_reference.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "ok"]
    groups = defaultdict(list)
    for r in rows:
        groups[(int(r["array_h"]), int(r["array_w"]), r["dataflow"], r["layer_type"])].append(r)
    return groups


def _read(path):
    lines = path.read_text().splitlines()
    header = [c.strip() for c in lines[0].rstrip(",").split(",")]
    assert lines[0].endswith(",")
    return [dict(zip(header, (c.strip() for c in line.rstrip(",").split(",")))) for line in lines[1:]]


def _run_group(tmp_path, key, rows, extra=()):
    h, w, df, kind = key
    cfg = tmp_path / "ref.cfg"
    cfg.write_text(CFG.format(h=h, w=w, df=df))
    topo = tmp_path / "topo.csv"
    if kind == "gemm":
        lines = ["Layer, M, N, K,"] + [f"{r['layer']}, {r['gemm_M']}, {r['gemm_N']}, {r['gemm_K']},"
                                        for r in rows]
    else:
        lines = ["Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, "
                 "Num Filter, Strides,"]
        lines += [", ".join(r[k] for k in ("layer", "ifmap_h", "ifmap_w", "filter_h", "filter_w",
                                           "channels", "num_filters", "stride")) + ","
                  for r in rows]
    topo.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    argv = ["scalesim", "-c", str(cfg), "-t", str(topo), "-o", str(out), *extra]
    if kind == "gemm":
        argv += ["--topology-format", "gemm"]
    assert main(argv) == 0
    return _read(out / "COMPUTE_REPORT.csv"), _read(out / "DETAILED_ACCESS_REPORT.csv")


def test_reference_rows_through_the_report_files(shared_dir, tmp_path, capsys):
    checked = 0
    for key, rows in _groups(shared_dir).items():
        compute, access = _run_group(tmp_path, key, rows)
        issue166 = _run_group(tmp_path, key, rows, ["--scalesim-issue-166"])[1]
        assert len(compute) == len(access) == len(rows)
        r_h, r_w, df, _ = key
        for i, (ref, c, a, a166) in enumerate(zip(rows, compute, access, issue166)):
            assert c["LayerID"] == a["LayerID"] == str(i)
            assert int(c["Total Cycles"]) == int(ref["total_cycles"]), ref["layer"]
            assert int(c["Stall Cycles"]) == 0
            for col, ref_col in (("Overall Util %", "overall_util_pct"),
                                 ("Mapping Efficiency %", "mapping_eff_pct"),
                                 ("Compute Util %", "compute_util_pct")):
                assert float(c[col]) == pytest.approx(float(ref[ref_col]), rel=1e-9)
            assert int(a["SRAM IFMAP Reads"]) == int(ref["sram_ifmap_reads"])
            assert int(a["SRAM Filter Reads"]) == int(ref["sram_filter_reads"])
            assert int(a166["SRAM OFMAP Writes"]) == int(ref["sram_ofmap_writes"])
            m, n = int(ref["gemm_M"]), int(ref["gemm_N"])
            if df == "os":  # SCALE-Sim issue 166 corrected: each output written once
                assert int(a["SRAM OFMAP Writes"]) == m * n
            else:
                assert a["SRAM OFMAP Writes"] == a166["SRAM OFMAP Writes"]
            checked += 1
    assert checked == 70


def test_depthwise_expands_per_channel_like_scalesim(tmp_path, capsys):
    cfg = tmp_path / "c.cfg"
    cfg.write_text(CFG.format(h=8, w=8, df="ws"))
    topo = tmp_path / "dw.csv"
    topo.write_text("Layer name, H, W, R, S, C, K, s,\nconv_DP, 10, 10, 3, 3, 3, 2, 1,\n")
    assert main(["scalesim", "-c", str(cfg), "-t", str(topo), "-o", str(tmp_path / "o")]) == 0
    compute = _read(tmp_path / "o" / "COMPUTE_REPORT.csv")
    # 3 single-channel layers; each: M = 8*8, N = 2, K = 9 -> WS on 8x8: 2 row folds x 1 col fold,
    # SCALE-Sim cycles = 2 * (2*8 + 8 + 64 - 2) - 1 = 171
    assert [c["Total Cycles"] for c in compute] == ["171"] * 3
    assert "3 layers" in capsys.readouterr().out


def test_user_bandwidth_mode_warns(tmp_path, capsys):
    cfg = tmp_path / "u.cfg"
    cfg.write_text(CFG.format(h=4, w=4, df="os") + "\n[run_presets]\nInterfaceBandwidth: USER\n")
    topo = tmp_path / "g.csv"
    topo.write_text("Layer, M, N, K,\ng, 4, 4, 4,\n")
    assert main(["scalesim", "-c", str(cfg), "-t", str(topo), "-o", str(tmp_path / "o"),
                 "--topology-format", "gemm"]) == 0
    assert "only CALC" in capsys.readouterr().err


def test_bad_cfg_is_one_line_error(tmp_path, capsys):
    cfg = tmp_path / "bad.cfg"
    cfg.write_text(CFG.format(h=4, w=4, df="rs"))
    topo = tmp_path / "g.csv"
    topo.write_text("Layer, M, N, K,\ng, 4, 4, 4,\n")
    assert main(["scalesim", "-c", str(cfg), "-t", str(topo), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.cfg" in err and "'rs'" in err
