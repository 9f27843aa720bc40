"""Run SCALE-Sim 3.0.0 in USER interface-bandwidth mode and print its reports as JSON.

This script runs *inside* SCALE-Sim's own venv (``benchmarks/.venv-scalesim``, created by
``scalesim_peer.ensure_venv``); it imports nothing from npulab. ``bench_memory.py`` calls it as::

    .venv-scalesim/bin/python scalesim_user_peer.py REQUEST.json RESULT.json

REQUEST holds ``workdir``, ``run_name``, ``topology`` (a SCALE-Sim conv topology CSV, pre-padded,
trailing commas), ``array_rows``, ``array_cols``, ``dataflow``, ``ifmap_kb``, ``filter_kb``,
``ofmap_kb`` and ``bandwidth`` (words per cycle). RESULT gets one dict per layer with every
column of SCALE-Sim's COMPUTE_REPORT.csv, BANDWIDTH_REPORT.csv and DETAILED_ACCESS_REPORT.csv
plus ``wall_s``: seconds of that layer's ``single_layer_sim.run`` (operand matrices, demand
matrices and the memory simulation; start-up, parsing and report writing excluded).

USER mode in 3.0.0 (``single_layer_sim.run``) sizes the three DRAM interfaces from *different*
keys: the ofmap write buffer drains ``[architecture_presets] Bandwidth`` words per cycle, but the
ifmap and filter read buffers fetch ``[layout] IfmapSRAMBankBandwidth`` and
``FilterSRAMBankBandwidth`` words per cycle (``Bandwidth`` is ignored for reads). So all three
are set to the requested ``bandwidth`` here, with one bank per scratchpad (``read_buffer``
asserts the bandwidth divides evenly over the banks; the bank model is only used with custom
layouts, which stay off). Each of the three interfaces then moves ``bandwidth`` words per cycle
on its own: SCALE-Sim has no shared DRAM.
"""

from __future__ import annotations

import csv
import json
import sys
import time
from pathlib import Path

CFG_TEMPLATE = """[general]
run_name = {run_name}

[architecture_presets]
ArrayHeight = {array_rows}
ArrayWidth = {array_cols}
IfmapSramSzkB = {ifmap_kb}
FilterSramSzkB = {filter_kb}
OfmapSramSzkB = {ofmap_kb}
IfmapOffset = 0
FilterOffset = 10000000
OfmapOffset = 20000000
Bandwidth = {bandwidth}
Dataflow = {dataflow}
ReadRequestBuffer = 60
WriteRequestBuffer = 60

[layout]
IfmapCustomLayout = False
IfmapSRAMBankBandwidth = {bandwidth}
IfmapSRAMBankNum = 1
IfmapSRAMBankPort = 2
FilterCustomLayout = False
FilterSRAMBankBandwidth = {bandwidth}
FilterSRAMBankNum = 1
FilterSRAMBankPort = 2

[sparsity]
SparsitySupport = false

[run_presets]
InterfaceBandwidth = USER
UseRamulatorTrace = False
"""

REPORTS = ("COMPUTE_REPORT.csv", "BANDWIDTH_REPORT.csv", "DETAILED_ACCESS_REPORT.csv")


def _number(text: str):
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() else value


def _read_report(path: Path) -> list[dict]:
    # SCALE-Sim writes ", "-separated rows with a trailing comma (simulator.generate_reports).
    with open(path, newline="") as f:
        rows = [[cell.strip() for cell in row] for row in csv.reader(f) if row]
    header = [h for h in rows[0] if h]
    return [{k: _number(v) for k, v in zip(header, row)} for row in rows[1:]]


def run(request: dict) -> list[dict]:
    from scalesim.scale_sim import scalesim
    from scalesim.single_layer_sim import single_layer_sim

    work = Path(request["workdir"]).resolve()
    work.mkdir(parents=True, exist_ok=True)
    cfg = work / "scalesim_user.cfg"
    cfg.write_text(CFG_TEMPLATE.format(**request), encoding="utf-8")
    layout = work / "layout.csv"
    layout.write_text("Layer name,\n", encoding="utf-8")  # no custom layout rows

    times: dict[int, float] = {}
    original = single_layer_sim.run

    def timed(self):
        t0 = time.perf_counter()
        original(self)
        times[self.layer_id] = time.perf_counter() - t0

    single_layer_sim.run = timed
    try:
        sim = scalesim(save_disk_space=True, verbose=False, config=str(cfg),
                       topology=str(request["topology"]), layout=str(layout),
                       input_type_gemm=False)
        sim.run_scale(top_path=str(work / "out"))
    finally:
        single_layer_sim.run = original
    names = sim.topo.get_layer_names()
    report_dir = work / "out" / request["run_name"]
    tables = [_read_report(report_dir / name) for name in REPORTS]
    layers = []
    for i, (c, b, d) in enumerate(zip(*tables)):
        row = {"name": names[int(c["LayerID"])], "wall_s": times[int(c["LayerID"])]}
        for part in (c, b, d):
            row.update({k: v for k, v in part.items() if k != "LayerID"})
        layers.append(row)
    return layers


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n")[0] + "\nusage: scalesim_user_peer.py REQUEST.json RESULT.json",
              file=sys.stderr)
        return 2
    request = json.loads(Path(argv[0]).read_text())
    t0 = time.perf_counter()
    layers = run(request)
    Path(argv[1]).write_text(json.dumps({"layers": layers,
                                         "process_s": time.perf_counter() - t0}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
