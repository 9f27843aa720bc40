"""``npulab scalesim`` vs SCALE-Sim 3.0.0, side by side on the same cfg and topology files.

Measures, per layer, array (8x8, 32x32) and dataflow (os, ws, is):

* SCALE-Sim 3.0.0 (own venv, ``benchmarks/.venv-scalesim``, created by
  :func:`scalesim_peer.ensure_venv`): seconds of its ``single_layer_sim.run`` for the layer,
  measured inside its process (Python start-up, imports, parsing and reports excluded);
* npulab, like for like: seconds of the layer's simulation alone
  (``hw.systolic.scalesim_compat.scalesim_timing``), best of 5 after a warm-up -- the headline
  per-layer ratio, since SCALE-Sim's time also excludes parsing and reports;
* npulab with its fixed costs: seconds of ``npulab.scalesim.run_scalesim`` on a one-layer
  copy of the same topology (reads cfg + topology, computes, writes both reports; about 1 ms
  of file handling paid once per run, which dominates on tiny layers);
* the cycle difference (must be 0), every other report column, and the OS ofmap writes:
  npulab reports ``M*N`` = SCALE-Sim's figure minus ``folds*(R+C)`` (SCALE-Sim issue 166);
  ``issue_166=True`` / ``--scalesim-issue-166`` must reproduce SCALE-Sim's figure exactly.

Then, for honesty, the whole ``npulab scalesim`` CLI as a subprocess (Python start-up and
imports included) on each full topology, next to SCALE-Sim's whole run of that topology.
Layers come from ``/work/shared/reference/scalesim_reference.csv`` (whose SCALE-Sim wall times
are shown as "ref s"). Default set: about 4-5 minutes on 2 cores, almost all of it SCALE-Sim.

Run from the repo root::

    python benchmarks/bench_scalesim.py            # default layer set
    python benchmarks/bench_scalesim.py --quick    # 3 small layers per array (~1 min)
    python benchmarks/bench_scalesim.py --full     # + bigger layers (~10 min)

Writes ``benchmarks/results/bench_scalesim.json``.
"""

from __future__ import annotations

import argparse
import csv
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchutil import best_of, calibrated_inner, geomean, machine, table, write_results
from scalesim_peer import REFERENCE_CSV, ensure_venv, run_peer

from compiler.frontends.scalesim_cfg import ScaleSimConfig, write_scalesim_cfg
from compiler.frontends.scalesim_topology import CONV_HEADER, GEMM_HEADER
from hw.systolic.config import ArrayConfig
from hw.systolic.scalesim_compat import scalesim_timing
from npulab.scalesim import run_scalesim

DATAFLOWS = ("os", "ws", "is")
SMALL = ["G_64x64x64", "DWslice_112x112x1_3x3", "SmallC_56x56x8_3x3_16"]
SETS = {  # array side -> layer names, per mode
    "quick": {8: SMALL, 32: SMALL},
    "default": {8: SMALL[:1] + ["G_1000x10x300"] + SMALL[1:],
                32: SMALL[:1] + ["G_1000x10x300", "G_128x256x512"] + SMALL[1:] + ["R18_conv4_3x3"]},
}
SETS["full"] = {8: SETS["default"][8] + ["G_128x256x512"],
                32: SETS["default"][32] + ["R18_conv2_3x3", "R50_1x1_28x28x256_512"]}
COMPARED = ("total_cycles", "stall_cycles", "overall_util_pct", "mapping_eff_pct",
            "compute_util_pct", "sram_ifmap_reads", "sram_filter_reads")
NPU_COLUMNS = {"Total Cycles": "total_cycles", "Stall Cycles": "stall_cycles",
               "Overall Util %": "overall_util_pct", "Mapping Efficiency %": "mapping_eff_pct",
               "Compute Util %": "compute_util_pct", "SRAM IFMAP Reads": "sram_ifmap_reads",
               "SRAM Filter Reads": "sram_filter_reads", "SRAM OFMAP Writes": "sram_ofmap_writes"}


def load_reference() -> dict:
    with open(REFERENCE_CSV, newline="") as f:
        return {(int(r["array_h"]), r["dataflow"], r["layer"]): r for r in csv.DictReader(f)}


def topology_text(rows: list[dict], kind: str) -> str:
    if kind == "gemm":
        lines = [GEMM_HEADER] + [f"{r['layer']}, {r['gemm_M']}, {r['gemm_N']}, {r['gemm_K']}," for r in rows]
    else:
        keys = ("ifmap_h", "ifmap_w", "filter_h", "filter_w", "channels", "num_filters", "stride")
        lines = [CONV_HEADER] + [", ".join([r["layer"]] + [r[k] for k in keys]) + "," for r in rows]
    return "\n".join(lines) + "\n"


def read_npulab_reports(out_dir: Path) -> list[dict]:
    """npulab's COMPUTE_REPORT.csv + DETAILED_ACCESS_REPORT.csv, one dict per layer."""
    def rows(name):
        with open(out_dir / name, newline="") as f:
            data = [[c.strip() for c in row] for row in csv.reader(f) if row]
        return [dict(zip(data[0], row)) for row in data[1:]]
    merged = []
    for c, d in zip(rows("COMPUTE_REPORT.csv"), rows("DETAILED_ACCESS_REPORT.csv")):
        merged.append({key: float({**c, **d}[col]) for col, key in NPU_COLUMNS.items()})
    return merged


def npulab_cli(cfg: Path, topo: Path, out: Path, gemm: bool, issue_166: bool = False) -> float:
    exe = Path(sys.executable).with_name("npulab")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "import sys; from npulab.cli "
                                           "import main; sys.exit(main())"]
    cmd += ["scalesim", "-c", str(cfg), "-t", str(topo), "-o", str(out)]
    cmd += ["--gemm"] if gemm else []
    cmd += ["--scalesim-issue-166"] if issue_166 else []
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def same(a, b) -> bool:
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)


def run_config(python: Path, work: Path, ref: dict, side: int, df: str, names: list[str],
               repeat: int) -> tuple[list[dict], list[dict]]:
    cfg = work / f"{side}x{side}_{df}.cfg"
    write_scalesim_cfg(ScaleSimConfig(
        run_name=f"bench_{side}x{side}_{df}", array_rows=side, array_cols=side, ifmap_sram_kb=64,
        filter_sram_kb=64, ofmap_sram_kb=64, dataflow=df, bandwidth=(10,)), cfg)
    refs = [ref[(side, df, n)] for n in names]
    layers, runs = [], []
    for kind in ("gemm", "conv"):
        rows = [r for r in refs if r["layer_type"] == kind]
        if not rows:
            continue
        gemm = kind == "gemm"
        tag = f"{side}x{side}_{df}_{kind}"
        topo = work / f"{tag}.csv"
        topo.write_text(topology_text(rows, kind), encoding="utf-8")
        print(f"  SCALE-Sim {tag}: {', '.join(r['layer'] for r in rows)} ...", flush=True)
        t0 = time.perf_counter()
        peer = run_peer(python, cfg, topo, gemm, work / f"peer_{tag}")
        peer_proc_s = time.perf_counter() - t0
        cli_s = npulab_cli(cfg, topo, work / f"cli_{tag}", gemm)
        cli166_ok = None
        if df == "os":  # the CLI flag reproduces SCALE-Sim's over-counted OS ofmap writes
            npulab_cli(cfg, topo, work / f"cli166_{tag}", gemm, issue_166=True)
            got = read_npulab_reports(work / f"cli166_{tag}")
            cli166_ok = all(same(g["sram_ofmap_writes"], p["sram_ofmap_writes"]) for g, p in zip(got, peer))
        runs.append({"array": side, "dataflow": df, "kind": kind, "layers": len(rows),
                     "scalesim_process_s": peer_proc_s, "scalesim_run_s": peer[0]["run_wall_s"],
                     "npulab_cli_s": cli_s, "cli_issue_166_matches": cli166_ok})
        for r, p in zip(rows, peer):
            assert p["name"] == r["layer"], (p["name"], r["layer"])
            one = work / f"{tag}_{r['layer']}.csv"
            one.write_text(topology_text([r], kind), encoding="utf-8")
            out, out166 = work / f"npu_{tag}_{r['layer']}", work / f"npu166_{tag}_{r['layer']}"
            run_scalesim(cfg, one, out166, gemm=gemm, issue_166=True, log=None)
            fn = lambda: run_scalesim(cfg, one, out, gemm=gemm, log=None)  # noqa: E731
            npu_s = best_of(fn, repeat, warmup=1, inner=calibrated_inner(fn))
            got, got166 = read_npulab_reports(out)[0], read_npulab_reports(out166)[0]
            m, n, k = (int(r[x]) for x in ("gemm_M", "gemm_N", "gemm_K"))
            array = ArrayConfig(rows=side, cols=side, dataflow=df)
            sim = lambda: scalesim_timing(array, m, n, k)  # noqa: E731
            sim_s = best_of(sim, repeat, warmup=1, inner=calibrated_inner(sim))
            sr, sc = {"os": (m, n), "ws": (k, n), "is": (k, m)}[df]
            folds = math.ceil(sr / side) * math.ceil(sc / side)
            expect_w = p["sram_ofmap_writes"] - (folds * 2 * side if df == "os" else 0)
            layers.append({
                "layer": r["layer"], "array": side, "dataflow": df,
                "scalesim_cycles": p["total_cycles"], "npulab_cycles": int(got["total_cycles"]),
                "cycle_diff": int(got["total_cycles"]) - p["total_cycles"],
                "other_columns_match": all(same(got[c], p[c]) for c in COMPARED),
                "scalesim_ofmap_writes": p["sram_ofmap_writes"],
                "npulab_ofmap_writes": int(got["sram_ofmap_writes"]),
                "expected_npulab_ofmap_writes": expect_w, "folds": folds,
                "ofmap_writes_as_expected": same(got["sram_ofmap_writes"], expect_w),
                "issue_166_ofmap_writes": int(got166["sram_ofmap_writes"]),
                "issue_166_matches_scalesim": same(got166["sram_ofmap_writes"], p["sram_ofmap_writes"]),
                "scalesim_wall_s": p["wall_s"], "reference_wall_s": float(r["scalesim_wall_s"]),
                "npulab_wall_s": npu_s, "io_speed_ratio": p["wall_s"] / npu_s,
                "npulab_sim_s": sim_s, "speed_ratio": p["wall_s"] / sim_s,
                "scalesim_matches_reference": same(p["total_cycles"], r["total_cycles"]),
            })
    return layers, runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="3 small layers per array")
    mode.add_argument("--full", action="store_true", help="add bigger layers (~10 min)")
    ap.add_argument("--repeat", type=int, default=5, help="npulab timing repetitions (best of)")
    args = ap.parse_args(argv)
    mode_name = "quick" if args.quick else "full" if args.full else "default"
    python = ensure_venv()
    ref = load_reference()
    layers, runs = [], []
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_scalesim_") as tmp:
        for side, names in SETS[mode_name].items():
            for df in DATAFLOWS:
                got_layers, got_runs = run_config(python, Path(tmp), ref, side, df, names, args.repeat)
                layers += got_layers
                runs += got_runs
    total_s = time.perf_counter() - t_start

    print(f"\nPer layer ({mode_name} set): SCALE-Sim 3.0.0 vs npulab scalesim "
          f"(npulab: simulation alone, and run_scalesim incl. file I/O; best of {args.repeat})")
    print(table(
        ["layer", "array", "df", "SCALE-Sim cyc", "npulab cyc", "diff", "cols", "SCALE-Sim s",
         "ref s", "npulab sim us", "speed-up", "incl. I/O ms", "speed-up"],
        [[x["layer"], f"{x['array']}x{x['array']}", x["dataflow"], x["scalesim_cycles"],
          x["npulab_cycles"], x["cycle_diff"], "ok" if x["other_columns_match"] else "DIFF",
          f"{x['scalesim_wall_s']:.2f}", f"{x['reference_wall_s']:.2f}",
          f"{x['npulab_sim_s'] * 1e6:.1f}", f"{x['speed_ratio']:,.0f}x",
          f"{x['npulab_wall_s'] * 1e3:.3f}", f"{x['io_speed_ratio']:,.0f}x"] for x in layers]))
    print("\nOfmap SRAM writes (OS: npulab = SCALE-Sim - folds*(R+C), SCALE-Sim issue 166; "
          "issue_166=True must equal SCALE-Sim)")
    print(table(
        ["layer", "array", "df", "folds", "SCALE-Sim", "npulab", "expected", "ok", "issue_166", "= SCALE-Sim"],
        [[x["layer"], f"{x['array']}x{x['array']}", x["dataflow"], x["folds"],
          x["scalesim_ofmap_writes"], x["npulab_ofmap_writes"], x["expected_npulab_ofmap_writes"],
          "ok" if x["ofmap_writes_as_expected"] else "NO", x["issue_166_ofmap_writes"],
          "yes" if x["issue_166_matches_scalesim"] else "NO"] for x in layers]))
    print("\nWhole topology: SCALE-Sim process (Python start-up + import + run) vs the "
          "`npulab scalesim` CLI subprocess (start-up + import + run), one run each")
    print(table(
        ["array", "df", "kind", "layers", "SCALE-Sim proc s", "SCALE-Sim run s", "npulab CLI s",
         "ratio", "--scalesim-issue-166"],
        [[f"{r['array']}x{r['array']}", r["dataflow"], r["kind"], r["layers"],
          f"{r['scalesim_process_s']:.2f}", f"{r['scalesim_run_s']:.2f}", f"{r['npulab_cli_s']:.2f}",
          f"{r['scalesim_process_s'] / r['npulab_cli_s']:.1f}x",
          {None: "-", True: "= SCALE-Sim", False: "DIFFERS"}[r["cli_issue_166_matches"]]] for r in runs]))

    ratios = [x["speed_ratio"] for x in layers]
    worst = min(layers, key=lambda x: x["speed_ratio"])
    exact = all(x["cycle_diff"] == 0 and x["other_columns_match"] and x["ofmap_writes_as_expected"]
                and x["issue_166_matches_scalesim"] for x in layers)
    cli_ratio = sum(r["scalesim_process_s"] for r in runs) / sum(r["npulab_cli_s"] for r in runs)
    summary = {
        "mode": mode_name, "layer_runs": len(layers), "all_exact": exact,
        "cycle_diffs_nonzero": sum(x["cycle_diff"] != 0 for x in layers),
        "speed_ratio_geomean": geomean(ratios), "speed_ratio_min": worst["speed_ratio"],
        "speed_ratio_min_at": f"{worst['layer']} {worst['array']}x{worst['array']} {worst['dataflow']}",
        "speed_ratio_max": max(ratios),
        "io_speed_ratio_geomean": geomean([x["io_speed_ratio"] for x in layers]),
        "io_speed_ratio_min": min(x["io_speed_ratio"] for x in layers),
        "scalesim_layer_s_total": sum(x["scalesim_wall_s"] for x in layers),
        "npulab_layer_s_total": sum(x["npulab_wall_s"] for x in layers),
        "cli_process_ratio_total": cli_ratio, "bench_wall_s": total_s,
    }
    print(f"\nHeadline: {len(layers)} layer runs, every report column identical to SCALE-Sim "
          f"(OS ofmap writes as documented): {'YES' if exact else 'NO'}")
    print(f"  speed-up per layer vs SCALE-Sim: geometric mean {summary['speed_ratio_geomean']:,.0f}x, "
          f"min {summary['speed_ratio_min']:,.0f}x ({summary['speed_ratio_min_at']}), "
          f"max {summary['speed_ratio_max']:,.0f}x (simulation alone on both sides)")
    print(f"  with npulab's file handling: geometric mean {summary['io_speed_ratio_geomean']:,.0f}x, "
          f"min {summary['io_speed_ratio_min']:,.0f}x")
    print(f"  SCALE-Sim {summary['scalesim_layer_s_total']:.1f} s of layer simulation vs npulab "
          f"{summary['npulab_layer_s_total'] * 1e3:.1f} ms; whole processes (CLI incl. Python "
          f"start-up): {cli_ratio:.1f}x; benchmark took {total_s:.0f} s")
    path = write_results("bench_scalesim", {"machine": machine(), "summary": summary,
                                            "layers": layers, "topology_runs": runs})
    print(f"wrote {path}")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
