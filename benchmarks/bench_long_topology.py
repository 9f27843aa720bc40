"""Long SCALE-Sim topologies: wall time and peak memory of ``npulab run`` vs the layer count.

Issue 21 item 8: a 100k-layer topology (ResNet-18's 20 conv rows repeated) took 99 s and 3.5 GB
with ``--timing compute`` and over 5 minutes natively, because every layer was timed and tiled
afresh. Identical layers are now timed and tiled once (:func:`npulab.simulate._array_timing`,
:func:`compiler.backends.systolic._tiled_shape`), so the cost per layer is the output's and the
DRAM model's, not the tiler's. This runs the whole CLI as a subprocess (Python start-up included) on
generated topologies and reports seconds and peak RSS (``ru_maxrss`` of the child)::

    python benchmarks/bench_long_topology.py                    # 1k, 10k (compute), 1k native
    python benchmarks/bench_long_topology.py --layers 100000    # one size, both timings

Writes ``benchmarks/results/bench_long_topology.json``.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchutil import machine, table, write_results

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "sim_configs" / "scalesim_resnet18.csv"


def topology(path: Path, layers: int) -> None:
    """``layers`` rows cycling through ResNet-18's conv rows, each with its own name."""
    lines = SOURCE.read_text().splitlines()
    head, body = lines[0], [line for line in lines[1:] if line.strip()]
    out = [head]
    for i in range(layers):
        cells = body[i % len(body)].split(",")
        cells[0] = f"L{i}_{cells[0].strip()}"
        out.append(",".join(cells))
    path.write_text("\n".join(out) + "\n")


def run(csv: Path, timing: str) -> tuple[float, float]:
    """Seconds and peak RSS (MB) of one ``npulab run`` process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "npulab", "run", "--topology", str(csv), "--timing",
                    timing, "-q"], check=True, stdout=subprocess.DEVNULL, env=env, cwd=ROOT)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return seconds, max(peak, before) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, action="append",
                        help="layer count (repeatable); default: 1,000 and 10,000")
    args = parser.parse_args()
    cases = ([(n, t) for n in args.layers for t in ("compute", "native")] if args.layers else
             [(1000, "compute"), (10000, "compute"), (1000, "native")])
    rows, results = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for layers, timing in cases:
            csv = Path(tmp) / f"topo{layers}.csv"
            if not csv.exists():
                topology(csv, layers)
            seconds, mb = run(csv, timing)
            results.append({"layers": layers, "timing": timing, "seconds": seconds,
                            "peak_rss_mb": mb})
            rows.append([f"{layers:,}", timing, f"{seconds:.1f}", f"{mb:.0f}"])
    print(table(["layers", "timing", "seconds", "peak RSS MB (max so far)"], rows))
    write_results("bench_long_topology", {"machine": machine(), "results": results})


if __name__ == "__main__":
    main()
