"""2:4 structured sparsity: what it buys on a whole network, and SCALE-Sim v3's count beside ours.

1. **Networks** (issue 27): ResNet-50 and a BERT-base encoder layer on the default chip with
   2:4 sparse PEs (``array.sparse_m = 4``), every conv and linear layer's weights taken as 2:4
   pruned (``--sparsity 2:4``), and row-wise 1-2:4 (``--sparsity 1-2:4``), against the same
   chip running them dense: cycles, compute cycles, DRAM bytes, energy and effective TOPS,
   and the ratios. Attention's score and context products (activation x activation) stay
   dense.
2. **Side by side with SCALE-Sim 3.0.0** (its layer-wise N:M sparsity, WS only, run in its own
   venv, ``scalesim_peer.ensure_venv``): GEMMs dense and 2:4 on a 32x32 WS array. Both tools
   count compute cycles (SCALE-Sim with ``InterfaceBandwidth: CALC``, i.e. no memory stalls,
   against npulab's timing engine) and filter SRAM reads; the comparable quantity is each
   tool's sparse / dense ratio (their dense cycle counts differ by their pipeline conventions,
   ``docs/scalesim.md``).
   SCALE-Sim's row-wise mode (``OptimizedMapping``: each filter column a random N in 1..M/2)
   beside npulab's row-wise 1-2:4 (``--sparsity 1-2:4``; half the channels 2:4, half 1:4).
3. **Register model**: PE-cycles per second of ``run_gemm`` with 2:4 sparse PEs against dense
   ones (one GEMM, WS and OS).

Run from the repo root (a few minutes; the first run installs SCALE-Sim's venv)::

    python benchmarks/bench_sparsity.py [--no-peer] [--quick]

Writes ``benchmarks/results/bench_sparsity.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchutil import best_of, machine, table, write_results

import npulab
from compiler.frontends import zoo
from compiler.options import CompileOptions
from hw.configfile import load_chip_config
from hw.sparsity import prune_n_m
from hw.systolic.config import ArrayConfig
from hw.systolic.regmodel import run_gemm
from hw.systolic.timing import gemm_timing

HERE = Path(__file__).resolve().parent
GEMMS = [(256, 256, 256), (512, 768, 768), (128, 3072, 768), (1024, 64, 576)]   # M, N, K


def networks(quick: bool) -> list[dict]:
    chip = load_chip_config(overrides=["array.sparse_m=4"])
    rows = []
    models = [("resnet50", {"image_size": 112 if quick else 224}),
              ("bert_base_layer", {"seq_len": 128 if quick else 384})]
    for model, params in models:
        graph = zoo.get(model, **params)
        out = {}
        for label, sparsity in (("dense", "dense"), ("2:4", "2:4"), ("1-2:4", "1-2:4")):
            t0 = time.perf_counter()
            result = npulab.simulate(graph, chip, options=CompileOptions(sparsity=sparsity))
            wall = time.perf_counter() - t0
            t, net = result.totals, result.metrics().network
            out[label] = {"cycles": t["cycles"], "compute_cycles": t["compute_cycles"],
                          "dram_bytes": t["dram_read_bytes"] + t["dram_write_bytes"],
                          "energy_j": net["energy_j"], "effective_tops": t["effective_tops"],
                          "pe_busy_cycles": t["pe_busy_cycles"], "macs": t["macs"],
                          "wall_s": wall}
        d, s, r = out["dense"], out["2:4"], out["1-2:4"]
        rows.append({"model": model, **{f"{k}_{lab}": v for lab, r in out.items()
                                        for k, v in r.items()},
                     "rows_speedup": d["cycles"] / r["cycles"],
                     "rows_compute_speedup": d["compute_cycles"] / r["compute_cycles"],
                     "rows_dram_ratio": r["dram_bytes"] / d["dram_bytes"],
                     "rows_energy_ratio": r["energy_j"] / d["energy_j"],
                     "speedup": d["cycles"] / s["cycles"],
                     "compute_speedup": d["compute_cycles"] / s["compute_cycles"],
                     "dram_ratio": s["dram_bytes"] / d["dram_bytes"],
                     "energy_ratio": s["energy_j"] / d["energy_j"],
                     "skipped_macs_pct": 100 * (1 - s["pe_busy_cycles"] / s["macs"])})
    return rows


_PEER_CFG = """[general]
run_name = sparse
[architecture_presets]
ArrayHeight: 32
ArrayWidth: 32
IfmapSramSzkB: 4096
FilterSramSzkB: 4096
OfmapSramSzkB: 4096
IfmapOffset: 0
FilterOffset: 10000000
OfmapOffset: 20000000
Bandwidth : 10
Dataflow : ws
ReadRequestBuffer: 512
WriteRequestBuffer: 512
[layout]
IfmapCustomLayout: False
IfmapSRAMBankBandwidth: 10
IfmapSRAMBankNum: 10
IfmapSRAMBankPort: 2
FilterCustomLayout: False
FilterSRAMBankBandwidth: 10
FilterSRAMBankNum: 10
FilterSRAMBankPort: 2
[sparsity]
SparsitySupport : {support}
SparseRep : ellpack_block
OptimizedMapping : {rowwise}
BlockSize : 4
RandomNumberGeneratorSeed : 40
[run_presets]
InterfaceBandwidth: CALC
UseRamulatorTrace: False
"""


def peer(python: Path, workdir: Path) -> list[dict]:
    """SCALE-Sim 3.0.0, layer-wise N:M (its topology's Sparsity column), vs npulab's timing."""
    import scalesim_peer as sp
    rows = []
    arr = ArrayConfig(rows=32, cols=32, dataflow="ws", sparse_m=4)
    results = {}
    for label, support, ratio, rowwise in (("dense", "false", "1:1", "false"),
                                           ("2:4", "true", "2:4", "false"),
                                           ("rows", "true", "2:4", "true")):
        run = workdir / label.replace(":", "_")
        run.mkdir(parents=True, exist_ok=True)
        (run / "scalesim.cfg").write_text(_PEER_CFG.format(support=support, rowwise=rowwise))
        topo = run / "topology.csv"
        topo.write_text("Layer, M, N, K, Sparsity,\n" + "".join(
            f"g{i}, {m}, {n}, {k}, {ratio},\n" for i, (m, n, k) in enumerate(GEMMS)))
        (run / "layout.csv").write_text("Layer name,\n")
        args = {"cfg": str(run / "scalesim.cfg"), "topo": str(topo),
                "layout": str(run / "layout.csv"), "gemm": True, "out": str(run / "out"),
                "result": str(run / "result.json")}
        with open(run / "scalesim.log", "w") as log:
            proc = subprocess.run([str(python), "-c", sp._DRIVER, json.dumps(args)], cwd=run,
                                  stdout=log, stderr=subprocess.STDOUT, timeout=1800)
        if proc.returncode:
            raise RuntimeError(f"SCALE-Sim failed; see {run / 'scalesim.log'}")
        info = json.loads((run / "result.json").read_text())
        results[label] = sp.parse_reports(run / "out" / "sparse", info["names"])
    for i, (m, n, k) in enumerate(GEMMS):
        ours_d = gemm_timing(ArrayConfig(rows=32, cols=32, dataflow="ws"), m, n, k)
        ours_s = gemm_timing(arr, m, n, k, nm=(2, 4))
        ours_r = _row_wise(arr, m, n, k)
        pd, ps, pr = results["dense"][i], results["2:4"][i], results["rows"][i]
        rows.append({
            "scalesim_cycles_rows": pr["total_cycles"], "npulab_cycles_rows": ours_r.cycles,
            "scalesim_rows_ratio": pr["total_cycles"] / pd["total_cycles"],
            "npulab_rows_ratio": ours_r.cycles / ours_d.cycles,
            "scalesim_rows_filter_reads_ratio": pr["sram_filter_reads"] / pd["sram_filter_reads"],
            "npulab_rows_filter_reads_ratio": ours_r.filter_reads / ours_d.filter_reads,
            "gemm": f"{m}x{n}x{k}",
            "scalesim_cycles_dense": pd["total_cycles"], "scalesim_cycles_2:4": ps["total_cycles"],
            "npulab_cycles_dense": ours_d.cycles, "npulab_cycles_2:4": ours_s.cycles,
            "scalesim_ratio": ps["total_cycles"] / pd["total_cycles"],
            "npulab_ratio": ours_s.cycles / ours_d.cycles,
            "scalesim_filter_reads_ratio": ps["sram_filter_reads"] / pd["sram_filter_reads"],
            "npulab_filter_reads_ratio": ours_s.filter_reads / ours_d.filter_reads,
            "scalesim_ifmap_reads_ratio": ps["sram_ifmap_reads"] / pd["sram_ifmap_reads"],
            "npulab_ifmap_reads_ratio": ours_s.ifmap_reads / ours_d.ifmap_reads,
        })
    return rows


def _row_wise(arr: ArrayConfig, m: int, n: int, k: int):
    """npulab's row-wise 1-2:4 on one GEMM (half the output channels 2:4, half 1:4): the
    channels sorted by N and cut at a column fold, each part on the timing engine at its N
    (what the compiler emits for one N tile, TileProblem.n_segments), counters summed."""
    from hw.sparsity import scale_mix
    (_, twos), *_ = scale_mix(((2, 1), (1, 1)), n)
    cut = min(n, -(-twos // arr.cols) * arr.cols)
    parts = [gemm_timing(arr, m, cut, k, nm=(2, 4))]
    if cut < n:
        parts.append(gemm_timing(arr, m, n - cut, k, nm=(1, 4)))
    return type(parts[0])(*(sum(getattr(p, f) for p in parts)
                            for f in parts[0].to_dict()))


def regmodel_speed(quick: bool) -> list[dict]:
    size = 128 if quick else 256
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (size, size))
    b, _ = prune_n_m(rng.integers(-128, 128, (size, size)), 2, 4, axis=0)
    rows = []
    for df in ("os", "ws", "is"):
        dense = ArrayConfig(rows=32, cols=32, dataflow=df)
        sparse = ArrayConfig(rows=32, cols=32, dataflow=df, sparse_m=4)
        td = best_of(lambda: run_gemm(dense, a, b), 3)
        ts = best_of(lambda: run_gemm(sparse, a, b, nm=(2, 4)), 3)
        cd = run_gemm(dense, a, b).counters.cycles
        cs = run_gemm(sparse, a, b, nm=(2, 4)).counters.cycles
        rows.append({"dataflow": df, "dense_pe_cycles_per_s": 1024 * cd / td,
                     "sparse_pe_cycles_per_s": 1024 * cs / ts,
                     "speed_ratio": (1024 * cs / ts) / (1024 * cd / td),
                     "dense_s": td, "sparse_s": ts})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-peer", action="store_true", help="skip SCALE-Sim")
    ap.add_argument("--quick", action="store_true", help="smaller inputs (CI-sized)")
    args = ap.parse_args(argv)
    out = {"machine": machine()}
    out["networks"] = nets = networks(args.quick)
    print("Networks: 2:4 sparse PEs, every conv/linear layer 2:4 vs the same chip dense")
    print(table(["model", "cycles dense", "cycles 2:4", "speed-up", "compute speed-up",
                 "DRAM 2:4/dense", "energy 2:4/dense", "MACs skipped"],
                [[r["model"], f"{r['cycles_dense']:,}", f"{r['cycles_2:4']:,}",
                  f"{r['speedup']:.2f}x", f"{r['compute_speedup']:.2f}x",
                  f"{r['dram_ratio']:.3f}", f"{r['energy_ratio']:.3f}",
                  f"{r['skipped_macs_pct']:.1f} %"] for r in nets]))
    print("\nRow-wise 1-2:4 (half of each layer's output channels 2:4, half 1:4) vs dense")
    print(table(["model", "cycles 1-2:4", "speed-up", "compute speed-up", "DRAM / dense",
                 "energy / dense"],
                [[r["model"], f"{r['cycles_1-2:4']:,}", f"{r['rows_speedup']:.2f}x",
                  f"{r['rows_compute_speedup']:.2f}x", f"{r['rows_dram_ratio']:.3f}",
                  f"{r['rows_energy_ratio']:.3f}"] for r in nets]))
    if not args.no_peer:
        import scalesim_peer as sp
        python = sp.ensure_venv()
        with tempfile.TemporaryDirectory() as tmp:
            out["scalesim"] = rows = peer(python, Path(tmp))
        print("\nSCALE-Sim 3.0.0 (layer-wise 2:4, WS, CALC bandwidth) vs npulab timing engine, "
              "32x32 WS")
        print(table(["GEMM MxNxK", "SCALE-Sim cycles 2:4/dense", "npulab 2:4/dense",
                     "filter reads S / n", "ifmap reads S / n"],
                    [[r["gemm"], f"{r['scalesim_cycles_2:4']:,}/{r['scalesim_cycles_dense']:,}"
                      f" = {r['scalesim_ratio']:.3f}",
                      f"{r['npulab_cycles_2:4']:,}/{r['npulab_cycles_dense']:,}"
                      f" = {r['npulab_ratio']:.3f}",
                      f"{r['scalesim_filter_reads_ratio']:.3f} / "
                      f"{r['npulab_filter_reads_ratio']:.3f}",
                      f"{r['scalesim_ifmap_reads_ratio']:.3f} / "
                      f"{r['npulab_ifmap_reads_ratio']:.3f}"] for r in rows]))
        print("\nRow-wise N:M: SCALE-Sim's (each filter column a random N in 1..2 of 4, "
              "OptimizedMapping) vs npulab's 1-2:4 (half the channels 2:4, half 1:4)")
        print(table(["GEMM MxNxK", "SCALE-Sim cycles rows/dense", "npulab rows/dense",
                     "filter reads S / n"],
                    [[r["gemm"], f"{r['scalesim_cycles_rows']:,}/{r['scalesim_cycles_dense']:,}"
                      f" = {r['scalesim_rows_ratio']:.3f}",
                      f"{r['npulab_cycles_rows']:,}/{r['npulab_cycles_dense']:,}"
                      f" = {r['npulab_rows_ratio']:.3f}",
                      f"{r['scalesim_rows_filter_reads_ratio']:.3f} / "
                      f"{r['npulab_rows_filter_reads_ratio']:.3f}"] for r in rows]))
    out["regmodel"] = speed = regmodel_speed(args.quick)
    print("\nRegister model, 32x32, 2:4 sparse PEs vs dense PEs (PE-cycles/s)")
    print(table(["dataflow", "dense", "2:4 sparse", "sparse / dense"],
                [[r["dataflow"], f"{r['dense_pe_cycles_per_s']:.3g}",
                  f"{r['sparse_pe_cycles_per_s']:.3g}", f"{r['speed_ratio']:.2f}"]
                 for r in speed]))
    path = write_results("bench_sparsity", out)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
