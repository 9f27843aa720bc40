"""The memory system: ResNet-50 with full memory timing, and SCALE-Sim 3.0.0 USER mode side by side.

Part A -- ResNet-50 (``compiler.frontends.zoo``) with ``timing="native"`` (tiling, double-buffered
scratchpads, cycle-level DRAM, host link, DMA) on a 32x32 and a 128x128 weight-stationary int8
array, every other setting npulab's default chip (512/512/256 KiB scratchpads, DDR4-3200 x1,
PCIe Gen4 x16, 1 GHz). Wall time per run after the JIT caches are warm (one untimed run, then
the best of ``--repeat``) against the 10 s target; total cycles, stall cycles by cause, DRAM
bytes.

Part B -- eight ResNet-50 layers on SCALE-Sim 3.0.0 in USER interface-bandwidth mode (its own
venv, ``benchmarks/.venv-scalesim``; driver ``scalesim_user_peer.py``) and on npulab native with
the equivalent chip, each at two scratchpad sizes (``SRAM_BASE`` and 4x that):

* both: 32x32 weight-stationary array, int8 (SCALE-Sim's word is one byte), the same three
  scratchpad sizes in KiB, 1 GHz;
* SCALE-Sim: ``Bandwidth`` = 32 words/cycle (and ``IfmapSRAMBankBandwidth`` /
  ``FilterSRAMBankBandwidth`` = 32, which is what 3.0.0 uses for the ifmap and filter DRAM
  interfaces in USER mode -- see ``scalesim_user_peer.py``); each of its three interfaces gets
  that bandwidth on its own;
* npulab: one shared DRAM of exactly 32 GB/s = 32 bytes per core cycle: the ``hbm2`` preset with
  one channel (128 bits at 2 transfers per 1 ns tCK); ``model_input = model_output = "dram"``
  (no host link); convolutions lowered ``im2col`` (DRAM holds the expanded M x K ifmap, which is
  SCALE-Sim's view) and, as a second column, npulab's default ``direct`` lowering.

Per layer: SCALE-Sim's total cycles (with and without its initial prefetch and final drain),
stall cycles and DRAM words per operand (DETAILED_ACCESS_REPORT.csv) next to npulab's cycles,
stalls and DRAM bytes, and the ratios; then the same for the 4x scratchpads, to show whose DRAM
traffic responds to scratchpad size (SCALE-Sim issue 27). The explanation of the differences is
in ``docs/memory_vs_scalesim.md``.

SCALE-Sim is slow in USER mode (about 2,000 simulated cycles per second here: its memory model
is a per-cycle Python loop), so the default set costs about 6-7 minutes of SCALE-Sim on two
cores (the two scratchpad sizes run as two parallel processes). Its results are cached in
``benchmarks/results/bench_memory_scalesim_cache.json`` keyed by layer and config; ``--fresh``
ignores the cache.

Run from the repo root::

    python benchmarks/bench_memory.py            # both parts (~8 min the first time)
    python benchmarks/bench_memory.py --quick    # part B on 3 small layers, 1 timed repeat
    python benchmarks/bench_memory.py --no-scalesim   # npulab only (cached SCALE-Sim if any)

Writes ``benchmarks/results/bench_memory.json`` (``bench_memory_quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchutil import RESULTS, geomean, machine, table, write_results
from scalesim_peer import SCALESIM_VERSION, ensure_venv

from compiler.frontends import zoo
from compiler.frontends.scalesim_topology import read_topology, write_topology
from compiler.ir import Graph
from compiler.options import CompileOptions
from hw.configfile import chip_config_from_dict
from npulab.simulate import simulate

HERE = Path(__file__).resolve().parent
PEER_SCRIPT = HERE / "scalesim_user_peer.py"
CACHE = RESULTS / "bench_memory_scalesim_cache.json"

TARGET_S = 10.0                      # part A: seconds per ResNet-50 run
ARRAYS = (32, 128)                   # part A array sides
SIDE, DATAFLOW = 32, "ws"            # part B array
BANDWIDTH = 32                       # part B: words (bytes) per cycle, SCALE-Sim and npulab
SRAM_BASE = (64, 64, 64)             # part B: ifmap, filter, ofmap KiB (SCALE-Sim's scale.cfg)
SRAM_SCALE = 4
# Part B layers: early large activations (ifmap never fits), middle, and late large weights
# (filter never fits, ifmap small). "fits" below is SCALE-Sim's criterion: the operand matrix
# it prefetches is no larger than the active half of that scratchpad.
LAYERS = ("conv1", "layer1.0.conv1", "layer1.0.conv2", "layer2.0.conv3", "layer3.0.conv3",
          "layer3.1.conv1", "layer4.0.conv3", "fc")
QUICK_LAYERS = ("layer1.0.conv1", "layer2.0.conv3", "layer3.0.conv3")
STALLS = ("stall_dram_cycles", "stall_link_cycles", "stall_sram_cycles")


# ---------------------------------------------------------------------------------------------
# Part A: ResNet-50, full memory timing
# ---------------------------------------------------------------------------------------------
def part_a(repeat: int) -> list[dict]:
    graph = zoo.get("resnet50")
    rows = []
    for side in ARRAYS:
        chip = chip_config_from_dict({"chip": {"name": f"default-{side}x{side}"},
                                      "array": {"rows": side, "cols": side}}, "bench_memory")
        t0 = time.perf_counter()
        result = simulate(graph, chip, timing="native")  # warm-up: JIT compile / cache load
        first_s = time.perf_counter() - t0
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            result = simulate(graph, chip, timing="native")
            times.append(time.perf_counter() - t0)
        t = result.totals
        rows.append({
            "array": f"{side}x{side}", "dataflow": chip.array.dataflow.value,
            "dram": f"{chip.dram.preset} x{chip.dram.channels} ({chip.dram.peak_gbps:.1f} GB/s)",
            "sram_kib": [chip.ifmap_sram.capacity_kib, chip.filter_sram.capacity_kib,
                         chip.ofmap_sram.capacity_kib],
            "first_run_s": first_s, "wall_s": min(times), "wall_s_all": times,
            "target_met": min(times) < TARGET_S,
            "cycles": t["cycles"], "compute_cycles": t["compute_cycles"],
            **{k: t[k] for k in STALLS},
            "dram_read_bytes": t["dram_read_bytes"], "dram_write_bytes": t["dram_write_bytes"],
            "link_bytes": t["link_bytes"], "utilization_pct": t["utilization_pct"],
            "memory_bound_layers": t["memory_bound_layers"],
            "layers_simulated": t["layers_simulated"],
            "commands": _commands(result),
        })
    return rows


def _commands(result) -> int | None:
    ex = result.execution
    return None if ex is None else int(len(ex.trace.start))


# ---------------------------------------------------------------------------------------------
# Part B: SCALE-Sim USER mode side by side
# ---------------------------------------------------------------------------------------------
def layer_ops(names) -> list:
    """The named ResNet-50 ops, detached from their producers (each runs as a graph of one op
    whose input is already in DRAM, as in SCALE-Sim)."""
    by_name = {op.name: op for op in zoo.get("resnet50").ops}
    return [dataclasses.replace(by_name[n], inputs=()) for n in names]


def peer_rows(ops, work: Path) -> dict[str, str]:
    """SCALE-Sim topology row of each op (pre-padded ifmap, trailing comma), and a check that
    it reads back as the same GEMM shape."""
    rows = {}
    for op in ops:
        path = work / f"row_{op.name}.csv"
        write_topology(Graph(name=op.name, ops=(op,)), path, gemm=False, prepad=True)
        back = read_topology(path, gemm=False).ops[0]
        assert back.gemm_shape() == op.gemm_shape(), (op.name, back.gemm_shape(), op.gemm_shape())
        rows[op.name] = path.read_text().splitlines()[1].strip()
    return rows


def _key(row: str, sram: tuple[int, int, int]) -> str:
    text = json.dumps([SCALESIM_VERSION, row, SIDE, DATAFLOW, list(sram), BANDWIDTH])
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _load_cache() -> dict:
    try:
        return json.loads(CACHE.read_text())
    except (OSError, ValueError):
        return {}


def run_scalesim(rows: dict[str, str], srams: list[tuple[int, int, int]], fresh: bool,
                 allow_run: bool, work: Path, timeout: float) -> dict[tuple[str, tuple], dict]:
    """SCALE-Sim's report row for every (layer, scratchpad sizes). Missing ones are run one
    SCALE-Sim process per layer and size, two processes at a time (one per core), each
    stopped after ``timeout`` seconds (recorded, and cached, as ``{"timeout_s": ...}``; a cached
    time-out is retried only with a larger ``timeout``)."""
    cache = {} if fresh else _load_cache()
    out, todo = {}, []
    for sram in srams:
        for name, row in rows.items():
            hit = cache.get(_key(row, sram))
            if hit is not None and (hit.get("timeout_s") is None or hit["timeout_s"] >= timeout
                                    or not allow_run):
                out[(name, sram)] = {**hit, "cached": True}  # a result, or a known time-out
            elif allow_run:
                todo.append((name, sram))
    if not todo:
        return out
    python = ensure_venv()
    # Longest first (SCALE-Sim's time grows with the layer's cycles), so the two workers finish
    # together.
    todo.sort(key=lambda job: -_peer_cost(rows[job[0]]))
    running: list = []

    def start(name, sram):
        tag = f"{name}_{'x'.join(str(v) for v in sram)}"
        d = work / f"scalesim_{tag}"
        d.mkdir(parents=True, exist_ok=True)
        topo = d / "topology.csv"
        topo.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                        f"Channels, Num Filter, Strides,\n{rows[name]}\n", encoding="utf-8")
        request = {"workdir": str(d), "run_name": "bench_memory", "topology": str(topo),
                   "array_rows": SIDE, "array_cols": SIDE, "dataflow": DATAFLOW,
                   "ifmap_kb": sram[0], "filter_kb": sram[1], "ofmap_kb": sram[2],
                   "bandwidth": BANDWIDTH}
        (d / "request.json").write_text(json.dumps(request))
        log = open(d / "scalesim.log", "w")
        print(f"  SCALE-Sim {SCALESIM_VERSION} USER: {name}, SRAM {sram[0]}/{sram[1]}/{sram[2]} "
              f"KiB ...", flush=True)
        proc = subprocess.Popen([str(python), str(PEER_SCRIPT), str(d / "request.json"),
                                 str(d / "result.json")], cwd=d, stdout=log,
                                stderr=subprocess.STDOUT)
        running.append((name, sram, d, log, proc, time.perf_counter()))

    def finish(job, timed_out: bool):
        name, sram, d, log, proc, t0 = job
        log.close()
        if timed_out:
            print(f"  SCALE-Sim {name} {sram}: stopped after {timeout:.0f} s", flush=True)
            out[(name, sram)] = {"timeout_s": timeout, "cached": False}
            # Remembered, so a re-run does not wait again unless --scalesim-timeout is larger.
            cache[_key(rows[name], sram)] = {"name": name, "timeout_s": timeout}
            CACHE.write_text(json.dumps(cache, indent=1) + "\n")
            return
        if proc.returncode:
            tail = (d / "scalesim.log").read_text(errors="replace").strip().splitlines()[-8:]
            raise RuntimeError(f"SCALE-Sim exited {proc.returncode} on {name}:\n" + "\n".join(tail))
        layer = json.loads((d / "result.json").read_text())["layers"][0]
        assert layer["name"] == name, (layer["name"], name)
        out[(name, sram)] = {**layer, "cached": False}
        cache[_key(rows[name], sram)] = layer
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        CACHE.write_text(json.dumps(cache, indent=1) + "\n")  # after every layer: resumable
        print(f"  SCALE-Sim {name} {sram}: {layer['wall_s']:.0f} s", flush=True)

    while todo or running:
        while todo and len(running) < 2:
            start(*todo.pop(0))
        time.sleep(0.5)
        for job in list(running):
            proc, t0 = job[4], job[5]
            if proc.poll() is not None:
                running.remove(job)
                finish(job, False)
            elif time.perf_counter() - t0 > timeout:
                proc.kill()
                proc.wait()
                running.remove(job)
                finish(job, True)
    return out


def _peer_cost(row: str) -> float:
    """Rough SCALE-Sim cost of a conv topology row: its WS cycle count on the array."""
    _, h, w, r, s, c, k, stride = [x.strip() for x in row.rstrip(",").split(",")]
    h, w, r, s, c, k, stride = (int(v) for v in (h, w, r, s, c, k, stride))
    m = -(-(h - r + stride) // stride) * -(-(w - s + stride) // stride)
    return -(-r * s * c // SIDE) * -(-k // SIDE) * (m + 3 * SIDE)


def part_b_chip(sram: tuple[int, int, int]):
    chip = chip_config_from_dict({
        "chip": {"name": "scalesim-equivalent", "clock_mhz": 1000.0,
                 "model_input": "dram", "model_output": "dram"},
        "array": {"rows": SIDE, "cols": SIDE, "dataflow": DATAFLOW, "precision": "int8"},
        "sram": {"ifmap": {"capacity_kib": sram[0]}, "filter": {"capacity_kib": sram[1]},
                 "ofmap": {"capacity_kib": sram[2]}},
        "dram": {"preset": "hbm2", "channels": 1},
    }, "bench_memory")
    assert abs(chip.dram_bytes_per_cycle - BANDWIDTH) < 1e-9, chip.dram_bytes_per_cycle
    return chip


def run_npulab(op, chip, lowering: str) -> dict:
    t0 = time.perf_counter()
    r = simulate(Graph(name=op.name, ops=(op,)), chip, timing="native",
                 options=CompileOptions(conv_lowering=lowering))
    wall = time.perf_counter() - t0
    layer = r.layers[0]
    c = r.execution.layers[0]
    return {
        "cycles": layer.cycles, "compute_cycles": layer.compute_cycles,
        "stall_cycles": sum(getattr(layer, k) for k in STALLS),
        **{k: getattr(layer, k) for k in STALLS},
        "dram_read_bytes": layer.dram_read_bytes, "dram_write_bytes": layer.dram_write_bytes,
        "dram_ifmap_read_bytes": c["dram_ifmap_read_bytes"],
        "dram_filter_read_bytes": c["dram_filter_read_bytes"],
        "dram_psum_read_bytes": c["dram_psum_read_bytes"],
        "dram_ofmap_write_bytes": c["dram_ofmap_write_bytes"],
        "dram_psum_write_bytes": c["dram_psum_write_bytes"],
        "dram_row_hits": c["dram_row_hits"], "dram_row_misses": c["dram_row_misses"],
        "dram_row_conflicts": c["dram_row_conflicts"],
        "bound": layer.bound, "tiling": layer.tiling, "wall_s": wall,
    }


def scalesim_view(s: dict) -> dict:
    """The SCALE-Sim report columns the comparison uses."""
    rd = s["DRAM IFMAP Reads"] + s["DRAM Filter Reads"]
    return {
        "cycles": s["Total Cycles"], "cycles_incl_prefetch": s["Total Cycles (incl. prefetch)"],
        "stall_cycles": s["Stall Cycles"], "compute_cycles": s["Total Cycles"] - s["Stall Cycles"],
        "dram_ifmap_reads": s["DRAM IFMAP Reads"], "dram_filter_reads": s["DRAM Filter Reads"],
        "dram_ofmap_writes": s["DRAM OFMAP Writes"], "dram_read_words": rd,
        "dram_write_words": s["DRAM OFMAP Writes"], "sram_ofmap_writes": s["SRAM OFMAP Writes"],
        "wall_s": s["wall_s"], "cached": s.get("cached", False),
    }


def fits(op, sram: tuple[int, int, int]) -> dict[str, bool]:
    """SCALE-Sim's 'fits': the operand it prefetches fits the active half of its scratchpad."""
    g = op.gemm_shape()
    half = [kib * 1024 // 2 for kib in sram]
    return {"ifmap": g.count * g.m * g.k <= half[0], "filter": g.count * g.k * g.n <= half[1]}


def part_b(names, fresh: bool, allow_scalesim: bool, work: Path,
           timeout: float) -> list[dict]:
    ops = layer_ops(names)
    rows = peer_rows(ops, work)
    srams = [SRAM_BASE, tuple(SRAM_SCALE * s for s in SRAM_BASE)]
    peer = run_scalesim(rows, srams, fresh, allow_scalesim, work, timeout)
    out = []
    for sram in srams:
        chip = part_b_chip(sram)
        for op in ops:
            g = op.gemm_shape()
            s = peer.get((op.name, sram))
            timed_out = s.get("timeout_s") if s else None
            s = None if timed_out else s
            rec = {"layer": op.name, "sram_kib": list(sram), "gemm_mnk": [g.m, g.n, g.k],
                   "macs": op.macs, "scalesim_topology_row": rows[op.name],
                   "scalesim_fits": fits(op, sram),
                   "scalesim": scalesim_view(s) if s else None,
                   "scalesim_timeout_s": timed_out,
                   "npulab_compute_only_cycles": simulate(
                       Graph(name=op.name, ops=(op,)), chip, timing="compute").layers[0].cycles,
                   "npulab_im2col": run_npulab(op, chip, "im2col"),
                   "npulab_direct": run_npulab(op, chip, "direct")}
            for col in ("npulab_im2col", "npulab_direct"):
                rec[col]["memory_slowdown"] = rec[col]["cycles"] / rec["npulab_compute_only_cycles"]
            if s:
                sv = rec["scalesim"]
                sv["memory_slowdown"] = sv["cycles_incl_prefetch"] / sv["compute_cycles"]
                for col in ("npulab_im2col", "npulab_direct"):
                    n = rec[col]
                    n["cycles_ratio"] = n["cycles"] / sv["cycles_incl_prefetch"]
                    n["dram_bytes_ratio"] = ((n["dram_read_bytes"] + n["dram_write_bytes"])
                                             / (sv["dram_read_words"] + sv["dram_write_words"]))
            out.append(rec)
    return out


# ---------------------------------------------------------------------------------------------
# Printing
# ---------------------------------------------------------------------------------------------
def _k(x) -> str:
    return "-" if x is None else f"{x / 1e3:,.0f}k" if x >= 1e4 else f"{x:,}"


def _m(x) -> str:
    return "-" if x is None else f"{x / 1e6:.2f}M"


def print_a(rows: list[dict], repeat: int) -> None:
    print(f"\nA. ResNet-50, timing=native, default chip (SRAM 512/512/256 KiB, DDR4-3200 x1, "
          f"host link); wall time = best of {repeat} after a warm-up run")
    print(table(
        ["array", "first run s", "wall s", f"< {TARGET_S:.0f} s", "cycles", "compute", "stall dram",
         "stall link", "stall sram", "DRAM rd MB", "DRAM wr MB", "util %", "commands"],
        [[r["array"], f"{r['first_run_s']:.2f}", f"{r['wall_s']:.2f}",
          "yes" if r["target_met"] else "NO", f"{r['cycles']:,}", f"{r['compute_cycles']:,}",
          f"{r['stall_dram_cycles']:,}", f"{r['stall_link_cycles']:,}",
          f"{r['stall_sram_cycles']:,}", f"{r['dram_read_bytes'] / 1e6:.1f}",
          f"{r['dram_write_bytes'] / 1e6:.1f}", f"{r['utilization_pct']:.1f}",
          _k(r["commands"])] for r in rows]))


def print_b(recs: list[dict]) -> None:
    for sram in sorted({tuple(r["sram_kib"]) for r in recs}):
        sub = [r for r in recs if tuple(r["sram_kib"]) == sram]
        print(f"\nB. {SIDE}x{SIDE} {DATAFLOW}, SRAM {sram[0]}/{sram[1]}/{sram[2]} KiB, "
              f"{BANDWIDTH} words/cycle: SCALE-Sim {SCALESIM_VERSION} USER vs npulab native "
              f"(hbm2 x1 = {BANDWIDTH} GB/s at 1 GHz). cycles in thousands; DRAM in "
              f"millions of words (SCALE-Sim) / bytes (npulab)")
        body, notes = [], []
        for r in sub:
            s, a, d = r["scalesim"], r["npulab_im2col"], r["npulab_direct"]
            f = r["scalesim_fits"]
            fit = ("I" if f["ifmap"] else "-") + ("F" if f["filter"] else "-")
            if r.get("scalesim_timeout_s"):
                fit += "*"
                notes.append(f"  * {r['layer']}: SCALE-Sim did not finish within "
                             f"{r['scalesim_timeout_s']:.0f} s and was stopped")
            body.append([
                r["layer"], fit,
                _k(s and s["compute_cycles"]), _k(s and s["cycles_incl_prefetch"]),
                _k(s and s["stall_cycles"]), _m(s and s["dram_read_words"]),
                _m(s and s["dram_write_words"]), f"{s['memory_slowdown']:.2f}" if s else "-",
                _k(r["npulab_compute_only_cycles"]),
                _k(a["cycles"]), _k(a["stall_cycles"]), _m(a["dram_read_bytes"]),
                _m(a["dram_write_bytes"]), f"{a['memory_slowdown']:.2f}",
                _k(d["cycles"]), _m(d["dram_read_bytes"] + d["dram_write_bytes"]),
                f"{d['memory_slowdown']:.2f}",
                f"{a['cycles_ratio']:.2f}" if s else "-",
                f"{a['dram_bytes_ratio']:.2f}" if s else "-",
            ])
        print(table(["layer", "fits", "SS comp", "SS total", "SS stall", "SS rd", "SS wr",
                     "SS x", "npu comp", "im2col", "stall", "rd", "wr", "x", "direct", "rd+wr",
                     "x", "cyc i/SS", "DRAM i/SS"], body))
        for note in notes:
            print(note)
    print("  fits: I/F = the ifmap (im2col) / filter operand fits the active half of SCALE-Sim's "
          "scratchpad. SS comp = SCALE-Sim's compute cycles (Total - Stall = its CALC cycles); "
          "SS total = its Total Cycles incl. prefetch (first DRAM prefetch to last ofmap DRAM "
          "write), which is the window npulab's layer cycles cover. npu comp = npulab "
          "compute-only cycles (timing='compute'). x = total / compute-only: the slowdown each "
          "tool charges to memory. cyc i/SS, DRAM i/SS = npulab im2col / SCALE-Sim.")


def print_sram(recs: list[dict]) -> list[dict]:
    srams = sorted({tuple(r["sram_kib"]) for r in recs})
    small, big = srams[0], srams[-1]
    by = {(r["layer"], tuple(r["sram_kib"])): r for r in recs}
    rows, out = [], []
    for name in dict.fromkeys(r["layer"] for r in recs):
        a, b = by[(name, small)], by[(name, big)]
        row = {"layer": name}
        cells = [name]
        for col, total in (("scalesim", lambda x: x["dram_read_words"] + x["dram_write_words"]),
                           ("npulab_im2col", lambda x: x["dram_read_bytes"] + x["dram_write_bytes"]),
                           ("npulab_direct", lambda x: x["dram_read_bytes"] + x["dram_write_bytes"])):
            if a[col] is None or b[col] is None:
                cells += ["-", "-", "-"]
                continue
            t0, t1 = total(a[col]), total(b[col])
            row[col] = {"dram_small": t0, "dram_big": t1, "change": t1 / t0 - 1,
                        "cycles_small": a[col]["cycles"], "cycles_big": b[col]["cycles"]}
            cells += [_m(t0), _m(t1), f"{100 * (t1 / t0 - 1):+.0f}%"]
        rows.append(cells)
        out.append(row)
    print(f"\nB2. DRAM traffic (reads + writes) with SRAM {small[0]}/{small[1]}/{small[2]} KiB vs "
          f"{SRAM_SCALE}x ({big[0]}/{big[1]}/{big[2]} KiB)")
    print(table(["layer", "SCALE-Sim", f"x{SRAM_SCALE}", "change", "npulab im2col",
                 f"x{SRAM_SCALE}", "change", "npulab direct", f"x{SRAM_SCALE}", "change"], rows))
    return out


def summarize(recs: list[dict]) -> dict:
    summary = {}
    for sram in sorted({tuple(r["sram_kib"]) for r in recs}):
        sub = [r for r in recs if tuple(r["sram_kib"]) == sram and r["scalesim"]]
        if not sub:
            continue
        tag = "x".join(map(str, sram))
        for col in ("npulab_im2col", "npulab_direct"):
            cyc = [r[col]["cycles_ratio"] for r in sub]
            dram = [r[col]["dram_bytes_ratio"] for r in sub]
            summary[f"{tag}_{col}"] = {
                "cycles_ratio_geomean": geomean(cyc), "cycles_ratio_min": min(cyc),
                "cycles_ratio_max": max(cyc), "dram_ratio_geomean": geomean(dram),
                "dram_ratio_min": min(dram), "dram_ratio_max": max(dram)}
        summary[f"{tag}_memory_slowdown_geomean"] = {
            "scalesim": geomean([r["scalesim"]["memory_slowdown"] for r in sub]),
            "npulab_im2col": geomean([r["npulab_im2col"]["memory_slowdown"] for r in sub]),
            "npulab_direct": geomean([r["npulab_direct"]["memory_slowdown"] for r in sub])}
        summary[f"{tag}_scalesim_stall_layers"] = sum(r["scalesim"]["stall_cycles"] > 0 for r in sub)
        summary[f"{tag}_scalesim_seconds"] = sum(r["scalesim"]["wall_s"] for r in sub)
        summary[f"{tag}_npulab_seconds"] = sum(r["npulab_im2col"]["wall_s"]
                                               + r["npulab_direct"]["wall_s"] for r in sub)
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="part B on 3 small layers; 1 repeat")
    ap.add_argument("--repeat", type=int, default=3, help="part A timed runs (best of)")
    ap.add_argument("--no-scalesim", action="store_true",
                    help="do not run SCALE-Sim (use cached results where present)")
    ap.add_argument("--fresh", action="store_true",
                    help="ignore cached SCALE-Sim results (and cached time-outs)")
    ap.add_argument("--scalesim-timeout", type=float, default=1500.0,
                    help="seconds before one SCALE-Sim layer run is stopped (default 1500)")
    ap.add_argument("--skip-a", action="store_true", help="skip part A (ResNet-50 timing)")
    args = ap.parse_args(argv)
    repeat = 1 if args.quick else args.repeat
    t_start = time.perf_counter()
    a_rows = []
    if not args.skip_a:
        print("A. ResNet-50 native timing ...", flush=True)
        a_rows = part_a(repeat)
        print_a(a_rows, repeat)
    names = QUICK_LAYERS if args.quick else LAYERS
    print(f"\nB. {len(names)} ResNet-50 layers, SCALE-Sim USER mode vs npulab ...", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_memory_") as tmp:
        recs = part_b(names, args.fresh, not args.no_scalesim, Path(tmp),
                      args.scalesim_timeout)
    print_b(recs)
    sram_rows = print_sram(recs)
    summary = summarize(recs)
    for key, val in summary.items():
        if key.endswith("_memory_slowdown_geomean"):
            print(f"  {key}: " + ", ".join(f"{k} {v:.2f}" for k, v in val.items()))
        elif isinstance(val, dict):
            print(f"  {key}: cycles npulab/SCALE-Sim geomean {val['cycles_ratio_geomean']:.2f} "
                  f"({val['cycles_ratio_min']:.2f}..{val['cycles_ratio_max']:.2f}), DRAM bytes "
                  f"geomean {val['dram_ratio_geomean']:.2f} ({val['dram_ratio_min']:.2f}.."
                  f"{val['dram_ratio_max']:.2f})")
    for r in a_rows:
        print(f"Headline: ResNet-50 native on {r['array']}: {r['wall_s']:.2f} s per run "
              f"(target < {TARGET_S:.0f} s: {'met' if r['target_met'] else 'NOT met'}), "
              f"{r['cycles']:,} cycles, {sum(r[k] for k in STALLS):,} stall cycles")
    total_s = time.perf_counter() - t_start
    path = write_results("bench_memory_quick" if args.quick else "bench_memory", {
        "machine": machine(), "bench_wall_s": total_s,
        "part_a": {"target_s": TARGET_S, "repeat": repeat, "runs": a_rows},
        "part_b": {"array": f"{SIDE}x{SIDE}", "dataflow": DATAFLOW, "bandwidth_words_per_cycle":
                   BANDWIDTH, "npulab_dram": "hbm2 x1 (32 GB/s at 1 GHz)",
                   "sram_kib": [list(SRAM_BASE), [SRAM_SCALE * s for s in SRAM_BASE]],
                   "scalesim_version": SCALESIM_VERSION, "layers": recs,
                   "sram_experiment": sram_rows, "summary": summary},
    })
    print(f"benchmark took {total_s:.0f} s; wrote {path}")
    return 0 if all(r["target_met"] for r in a_rows) else 1


if __name__ == "__main__":
    sys.exit(main())
