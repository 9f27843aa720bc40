"""``npulab scalesim``: SCALE-Sim inputs in, SCALE-Sim's compute and SRAM reports out.

Reads a SCALE-Sim ``.cfg`` and topology CSV and writes, in SCALE-Sim's own format (``", "``
separated, trailing comma, integer ``LayerID``):

* ``COMPUTE_REPORT.csv``: ``LayerID, Total Cycles, Stall Cycles, Overall Util %,
  Mapping Efficiency %, Compute Util %,`` (SCALE-Sim v2's columns; 3.0.0's extra
  "Total Cycles (incl. prefetch)" needs its DRAM prefetch model and is left out).
* ``DETAILED_ACCESS_REPORT.csv``: ``LayerID, SRAM IFMAP Reads, SRAM Filter Reads,
  SRAM OFMAP Writes,`` (SCALE-Sim's names for these columns; its start/stop cycles and DRAM
  columns need the memory system and are left out).

Timing is SCALE-Sim's CALC mode (unlimited DRAM bandwidth, stall cycles 0). Depthwise layers
(``DP`` in the name) expand into one layer per channel named ``<name>Channel_<i>``, as SCALE-Sim
does. OS ofmap writes are the correct ``M*N``; ``issue_166=True`` reproduces SCALE-Sim's
over-count (``+ folds*(R+C)``, its issue 166) for byte-for-byte comparisons.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from compiler.frontends.scalesim_cfg import read_scalesim_cfg
from compiler.frontends.scalesim_topology import read_topology
from compiler.ir import Conv2d
from hw.chip import ChipConfig
from hw.configfile import chip_config_from_dict
from hw.systolic.scalesim_compat import ScaleSimTiming, scalesim_timing

__all__ = ["ScaleSimLayer", "run_scalesim", "COMPUTE_HEADER", "ACCESS_HEADER"]

COMPUTE_HEADER = ["LayerID", "Total Cycles", "Stall Cycles", "Overall Util %",
                  "Mapping Efficiency %", "Compute Util %"]
ACCESS_HEADER = ["LayerID", "SRAM IFMAP Reads", "SRAM Filter Reads", "SRAM OFMAP Writes"]


@dataclass(frozen=True)
class ScaleSimLayer:
    """One SCALE-Sim layer (a depthwise layer's channels are separate layers)."""

    layer_id: int
    name: str
    m: int
    n: int
    k: int
    timing: ScaleSimTiming


def chip_from_scalesim(cfg_path: str | Path, overrides: Iterable[str] = ()) -> tuple[ChipConfig, str]:
    """The chip a SCALE-Sim ``.cfg`` describes (array shape and dataflow; word = int8), with
    ``--set`` overrides applied. Returns the chip and the cfg's interface bandwidth mode."""
    ss = read_scalesim_cfg(cfg_path)
    data = {
        "chip": {"name": ss.run_name or Path(cfg_path).stem},
        "array": {"rows": ss.array_rows, "cols": ss.array_cols, "dataflow": ss.dataflow,
                  "precision": "int8"},
    }
    return chip_config_from_dict(data, str(cfg_path), overrides), ss.interface_bandwidth


def scalesim_layers(chip: ChipConfig, topology: str | Path, gemm: bool | None = None) -> list[ScaleSimLayer]:
    graph = read_topology(topology, gemm=gemm)
    layers: list[ScaleSimLayer] = []
    for op in graph.ops:
        shape = op.gemm_shape()
        names = [op.name]
        if isinstance(op, Conv2d) and op.groups > 1:
            names = [f"{op.name}Channel_{i}" for i in range(op.groups)]
        timing = scalesim_timing(chip.array, shape.m, shape.n, shape.k)
        for name in names:
            layers.append(ScaleSimLayer(len(layers), name, shape.m, shape.n, shape.k, timing))
    return layers


def _line(cells) -> str:
    return ", ".join(str(c) for c in cells) + ",\n"


def write_reports(layers: list[ScaleSimLayer], out_dir: str | Path, issue_166: bool = False) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    compute = out / "COMPUTE_REPORT.csv"
    access = out / "DETAILED_ACCESS_REPORT.csv"
    with compute.open("w", encoding="utf-8") as f:
        f.write(_line(COMPUTE_HEADER))
        for layer in layers:
            t = layer.timing
            f.write(_line([layer.layer_id, t.total_cycles, t.stall_cycles, t.overall_util_pct,
                           t.mapping_eff_pct, t.compute_util_pct]))
    with access.open("w", encoding="utf-8") as f:
        f.write(_line(ACCESS_HEADER))
        for layer in layers:
            t = layer.timing
            writes = t.ofmap_sram_writes_scalesim if issue_166 else t.ofmap_sram_writes
            f.write(_line([layer.layer_id, t.ifmap_sram_reads, t.filter_sram_reads, writes]))
    return [compute, access]


def run_scalesim(cfg_path, topology, out_dir, *, gemm: bool | None = None, overrides=(),
                 issue_166: bool = False, log=None) -> list[ScaleSimLayer]:
    """Simulate a SCALE-Sim run and write its reports into ``out_dir``; warnings go to
    ``log`` (default: standard error)."""
    chip, bw_mode = chip_from_scalesim(cfg_path, overrides)
    log = sys.stderr if log is None else log
    if bw_mode.upper() != "CALC":
        print(f"npulab: warning: {cfg_path}: run_presets.InterfaceBandwidth = {bw_mode}: only "
              f"CALC (unlimited DRAM bandwidth) is modelled; reporting CALC numbers", file=log)
    layers = scalesim_layers(chip, topology, gemm)
    write_reports(layers, out_dir, issue_166)
    return layers
