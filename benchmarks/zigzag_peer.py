"""ZigZag, run side by side as the peer of npulab's mapper (issue 9): ResNet-18 conv2_1 on a
TPU-like 32x32 weight-stationary int8 array, searched by ZigZag's LOMA temporal-mapping engine.

ZigZag (Mei et al., "ZigZag: Enlarging Joint Architecture-Mapping Design Space Exploration for
DNN Accelerators", IEEE Trans. Computers 70(8), 2021) is an analytical cost model plus mapping
search. Its LOMA engine (Symons et al., "LOMA: Fast Auto-Scheduling on DNN Accelerators through
Loop-Order-based Memory Allocation", AICAS 2021) splits every temporal loop into its prime factors
("LPFs"), merges the smallest factors of the loop with the most of them until at most
``lpf_limit`` remain, enumerates every distinct order of those factors (a multiset permutation,
so the count grows factorially with ``lpf_limit``), allocates each order bottom-up to the memory
levels and evaluates it with the cost model.

This script runs INSIDE ZigZag's own venv (nothing of npulab is imported there)::

    python3 -m venv benchmarks/.venv-zigzag
    benchmarks/.venv-zigzag/bin/pip install zigzag-dse==3.9.1 six==1.17.0
    benchmarks/.venv-zigzag/bin/python benchmarks/zigzag_peer.py --lpf-limit 6 --json
    benchmarks/.venv-zigzag/bin/python benchmarks/zigzag_peer.py --sweep 6,7,8,9 --json

zigzag-dse 3.9.1 imports ``six`` (``zigzag/parser/upgraded_validator.py``) without declaring
it, hence the second package. From npulab's venv, ``python benchmarks/zigzag_peer.py
--check-energy`` recomputes the energies below from ``hw/energy/data/45nm.toml`` through
:mod:`hw.energy.tech` and exits 1 if they drifted.

It writes ZigZag's three inputs as YAML into a temporary directory (accelerator, workload,
mapping), calls ``zigzag.api.get_hardware_performance_zigzag`` (the public API, as a user
would) once per objective (latency, energy, EDP) and once more for latency to check
determinism, and prints what ZigZag found. The count of evaluated mappings is taken by
wrapping, in this process only, ZigZag's ``CostModelStage.run`` (one call = one
``CostModelEvaluation``), ``LomaEngine.run`` (the number of loop orders LOMA enumerates, its own
``nb_permutations``) and ``TemporalMappingGeneratorStage.run`` (the wall time of the search:
loop-order generation, memory allocation, cost model and the min-reduction). The installed
package is not modified.

The hardware (the npulab default chip, ``sim_configs/default.toml``, as ZigZag memories):

========== ======== ===================== ============================= =========================
level      operand  size                  ports (bits/cycle)            energy per access (pJ)
========== ======== ===================== ============================= =========================
w_reg      W        16 b per PE           1R 8, 1W 8                    read 0, write 0.05
i_reg      I        8 b per PE            1R 8, 1W 8                    read 0, write 0.025
o_reg      O        32 b per PE           2R 32, 2W 32                  read 0, write 0.1
ifmap      I        512 KiB (8 x 64 KiB)  1R 1024, 1W 1024 (min 128)    423.774 per 1024 b
filter     W        512 KiB (8 x 64 KiB)  1R 1024, 1W 1024 (min 128)    423.774 per 1024 b
ofmap      O        256 KiB (8 x 32 KiB)  1R 1024, 1W 1024 (min 128)    308.832 per 1024 b
dram       I, W, O  10 GB                 1RW 205 (min 8)               4161.5 per 205 b
========== ======== ===================== ============================= =========================

* Operational array: 32 x 32 int8 multipliers, D1 = K (output channels, 32), D2 = C (input
  channels, 32, reduced down the columns), both marked systolic (ZigZag adds one drain cycle per
  unit along a systolic dimension); one MAC = int8 multiply 0.2 pJ + 32-bit add 0.1 pJ = 0.3 pJ
  (npulab ``Technology.mac_pj("int8", 32)``, Horowitz ISSCC 2014).
* PE registers: npulab charges ``register.pj_per_bit`` = 0.003125 pJ per bit *written* (reading
  a flip-flop is free in its model), so write = width x 0.003125 pJ and read = 0. The weight
  register holds two weights (active + shadow: TPU v1 double-buffers the weights in the array,
  Jouppi et al., ISCA 2017).
* SRAM: npulab charges ``E64(C) / 64`` pJ per bit with ``E64(C) = a + b sqrt(C)`` fitted through
  Horowitz's 8/32/1024 KiB points (a = 1.95862, b = 3.06591 pJ per sqrt(KiB)), C = one bank
  (8 banks per scratchpad): 64 KiB -> 0.413842 pJ/bit, 32 KiB -> 0.301594 pJ/bit; writes cost
  the same as reads (``write_to_read`` = 1.0). A ZigZag access is a full port width (8 banks x
  16 B = 1024 bits); with ``bandwidth_min`` = 128 bits (one bank word) ZigZag charges a narrower
  transfer ``ceil(bits / 128) * 128 / 1024`` of an access, i.e. per bit at bank granularity.
  npulab's scratchpads have one port, counted per direction (its reports treat the
  accumulator scratchpad as a 1R1W macro), hence one read and one write port here.
* DRAM: DDR4-3200, one 64-bit channel, 25.6 GB/s = 204.8 bits/cycle at 1 GHz; ZigZag bandwidths
  are integers, so 205 (+0.1 %). 20.3 pJ per bit on the bus (npulab ``[dram] ddr4``, Jouppi et
  al. ISCA 2021), so 205 x 20.3 = 4161.5 pJ per access, ``bandwidth_min`` 8 bits.

The layer: ResNet-18 conv2_1, batch 1, 64 -> 64 channels, 56 x 56 output, 3 x 3, stride 1,
padding 1 (input 56 x 56), int8 weights and inputs, 32-bit partial sums, 8-bit final outputs:
115,605,504 MACs, so at least 112,896 cycles on 1,024 MACs. The spatial mapping is fixed by
the mapping file (K 32 on D1, C 32 on D2), so LOMA schedules the temporal loops K 2, C 2,
OY 56, OX 56, FY 3, FX 3: 12 prime factors (OX and OY are 2 x 2 x 2 x 7 each), at most
12! / (3! 3!) = 13,305,600 orders without an LPF limit; at the lowest limit, 6 (one factor per
loop), 6! = 720.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_VENV = HERE / ".venv-zigzag"
ZIGZAG_VERSION = "3.9.1"  # newest on PyPI; installs on Python 3.11 (it needs >= 3.11)
REQUIREMENTS = (f"zigzag-dse=={ZIGZAG_VERSION}", "six==1.17.0")  # six: undeclared dependency

# ---- hardware: npulab's default chip (sim_configs/default.toml) ---------------------------------
CLOCK_HZ = 1.0e9
ARRAY = 32
KIB_BITS = 1024 * 8
SRAM_BANKS = 8
SRAM_BANK_WIDTH_BITS = 16 * 8                       # bank_width_bytes = 16
SRAM_PORT_BITS = SRAM_BANKS * SRAM_BANK_WIDTH_BITS  # 1024 bits per port per cycle
SRAM_KIB = {"ifmap": 512, "filter": 512, "ofmap": 256}
DRAM_BYTES_PER_S = 25.6e9                           # DDR4-3200 x64: 3200 MT/s x 8 B
DRAM_BITS_PER_CYCLE = round(DRAM_BYTES_PER_S * 8 / CLOCK_HZ)  # 204.8 -> 205

# ---- energies from hw/energy/data/45nm.toml (checked by --check-energy) ----------------------
MAC_PJ = 0.3                        # int8 mult 0.2 + int32 add 0.1 (horowitz2014)
REGISTER_PJ_PER_BIT = 0.003125      # [register] pj_per_bit, charged per bit written
SRAM_PJ_PER_BIT = {                 # E64(bank) / 64, bank = capacity / 8
    "ifmap": 0.41384188380351555,   # 64 KiB bank
    "filter": 0.41384188380351555,  # 64 KiB bank
    "ofmap": 0.301593920941235,     # 32 KiB bank
}
DRAM_PJ_PER_BIT = 20.3              # [dram] ddr4
W_REG_BITS, I_REG_BITS, O_REG_BITS = 16, 8, 32

# ---- the layer ------------------------------------------------------------------------------
LAYER = {"name": "resnet18_conv2_1", "B": 1, "K": 64, "C": 64, "OY": 56, "OX": 56, "FY": 3,
         "FX": 3, "stride": 1, "pad": 1, "w_bits": 8, "i_bits": 8, "psum_bits": 32,
         "out_bits": 8}
MACS = 1 * 64 * 64 * 56 * 56 * 3 * 3  # 115,605,504


def _port(name: str, kind: str, bits: int, allocation: list[str], min_bits: int | None = None):
    return {"name": name, "type": kind, "bandwidth_min": min_bits or bits,
            "bandwidth_max": bits, "allocation": allocation}


def _register(operand: str, bits: int, two_way: bool = False) -> dict:
    """A PE register (one per PE: ``served_dimensions`` empty): free to read, charged per bit
    written. Outputs need both directions (partial sums in and out)."""
    if two_way:
        ports = [_port("r_port_1", "read", bits, [f"{operand}, tl"]),
                 _port("r_port_2", "read", bits, [f"{operand}, th"]),
                 _port("w_port_1", "write", bits, [f"{operand}, fh"]),
                 _port("w_port_2", "write", bits, [f"{operand}, fl"])]
    else:
        ports = [_port("r_port_1", "read", bits, [f"{operand}, tl"]),
                 _port("w_port_1", "write", bits, [f"{operand}, fh"])]
    return {"size": bits, "r_cost": 0.0, "w_cost": bits * REGISTER_PJ_PER_BIT, "area": 0.0,
            "latency": 1, "operands": [operand], "ports": ports, "served_dimensions": []}


def _sram(name: str, operand: str) -> dict:
    """One of npulab's scratchpads: 8 word-interleaved banks, one read and one write port of
    1024 bits per cycle, shared by the whole array; energy per access of the full port width."""
    access_pj = SRAM_PORT_BITS * SRAM_PJ_PER_BIT[name]
    if operand == "O":
        reads, writes = ["O, tl", "O, th"], ["O, fh", "O, fl"]
    else:
        reads, writes = [f"{operand}, tl"], [f"{operand}, fh"]
    return {"size": SRAM_KIB[name] * KIB_BITS, "r_cost": access_pj, "w_cost": access_pj,
            "area": 0.0, "latency": 1, "operands": [operand],
            "ports": [_port("r_port_1", "read", SRAM_PORT_BITS, reads, SRAM_BANK_WIDTH_BITS),
                      _port("w_port_1", "write", SRAM_PORT_BITS, writes, SRAM_BANK_WIDTH_BITS)],
            "served_dimensions": ["D1", "D2"]}


def accelerator_dict() -> dict:
    """ZigZag's accelerator YAML (3.x schema) for the TPU-like chip, innermost memory first."""
    dram_access_pj = DRAM_BITS_PER_CYCLE * DRAM_PJ_PER_BIT
    dram_alloc = ["I1, fh", "I1, tl", "I2, fh", "I2, tl", "O, fh", "O, tl", "O, fl", "O, th"]
    return {
        "name": "npulab_tpu_like_32x32_ws",
        "memories": {
            "w_reg": _register("I2", W_REG_BITS),
            "i_reg": _register("I1", I_REG_BITS),
            "o_reg": _register("O", O_REG_BITS, two_way=True),
            "ifmap_sram": _sram("ifmap", "I1"),
            "filter_sram": _sram("filter", "I2"),
            "ofmap_sram": _sram("ofmap", "O"),
            "dram": {"size": 10_000_000_000 * 8, "r_cost": dram_access_pj,
                     "w_cost": dram_access_pj, "area": 0.0, "latency": 1,
                     "operands": ["I1", "I2", "O"],
                     "ports": [_port("rw_port_1", "read_write", DRAM_BITS_PER_CYCLE, dram_alloc,
                                     8)],
                     "served_dimensions": ["D1", "D2"]},
        },
        "operational_array": {"unit_energy": MAC_PJ, "unit_area": 1.0,
                              "dimensions": ["D1", "D2"], "sizes": [ARRAY, ARRAY],
                              "systolic_dimensions": ["D1", "D2"]},
    }


def workload_list() -> list[dict]:
    """ZigZag's workload YAML: conv2_1 as one layer whose inputs and weights come from nowhere
    (``operand_source`` = its own id marks an operand constant)."""
    L = LAYER
    return [{
        "id": 0, "name": L["name"], "operator_type": "Conv",
        "equation": "O[b][k][oy][ox]+=W[k][c][fy][fx]*I[b][c][iy][ix]",
        "dimension_relations": [f"ix={L['stride']}*ox+1*fx", f"iy={L['stride']}*oy+1*fy"],
        "loop_dims": ["B", "K", "C", "OY", "OX", "FY", "FX"],
        "loop_sizes": [L["B"], L["K"], L["C"], L["OY"], L["OX"], L["FY"], L["FX"]],
        "operand_precision": {"W": L["w_bits"], "I": L["i_bits"], "O": L["psum_bits"],
                              "O_final": L["out_bits"]},
        "operand_source": {"I": 0, "W": 0},
        "pr_loop_dims": ["IX", "IY"],
        "padding": [[L["pad"], L["pad"]], [L["pad"], L["pad"]]],
    }]


def mapping_list() -> list[dict]:
    """ZigZag's mapping YAML: the TPU's weight-stationary unrolling, K on D1 and C on D2; no
    temporal ordering, so LOMA searches all of it."""
    entry = {"spatial_mapping": {"D1": [f"K, {ARRAY}"], "D2": [f"C, {ARRAY}"]},
             "memory_operand_links": {"O": "O", "W": "I2", "I": "I1"}}
    # ZigZag requires a "default" entry; the layer's own entry (same content) is the one used
    return [{"name": "default", **entry}, {"name": LAYER["name"], **entry}]


def write_inputs(workdir: Path) -> dict[str, str]:
    import yaml
    paths = {}
    for name, data in (("accelerator", accelerator_dict()), ("workload", workload_list()),
                       ("mapping", mapping_list())):
        p = workdir / f"{name}.yaml"
        with open(p, "w", encoding="utf-8") as f:
            yaml.safe_dump(data, f, sort_keys=False)
        paths[name] = str(p)
    return paths


# ---- counters wrapped around ZigZag's own stages (this process only) --------------------------

class Counters:
    """Evaluations and search time, read from ZigZag's own objects."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.evaluated = 0          # CostModelEvaluations built (CostModelStage.run calls)
        self.orders = 0             # LomaEngine.nb_permutations: loop orders LOMA enumerates
        self.lpfs: list[str] = []   # the loop prime factors LOMA permuted
        self.search_s = 0.0         # wall time inside TemporalMappingGeneratorStage.run
        self.t_start = time.perf_counter()

    _installed = False
    progress_every = 0              # >0: report to stderr every N evaluations (sweep children)

    def install(self):
        if Counters._installed:
            return
        from zigzag.opt.loma.engine import LomaEngine
        from zigzag.stages.evaluation.cost_model_evaluation import CostModelStage
        from zigzag.stages.mapping.temporal_mapping_generator_stage import (
            TemporalMappingGeneratorStage)
        counters = self
        cms_run, loma_run, tmg_run = (CostModelStage.run, LomaEngine.run,
                                      TemporalMappingGeneratorStage.run)

        def counted_cms_run(stage):
            counters.evaluated += 1
            n = counters.progress_every
            if n and counters.evaluated % n == 0:
                print(f"zigzag_peer: progress {counters.evaluated} evaluated in "
                      f"{time.perf_counter() - counters.t_start:.2f} s", file=sys.stderr,
                      flush=True)
            yield from cms_run(stage)

        def counted_loma_run(engine):
            gen = loma_run(engine)
            first = True
            for tm in gen:
                if first:  # nb_permutations and lpfs are set once run() has started
                    counters._engine_started(engine)
                    first = False
                yield tm
            if first:
                counters._engine_started(engine)

        def timed_tmg_run(stage):
            t0 = time.perf_counter()
            try:
                yield from tmg_run(stage)
            finally:
                counters.search_s += time.perf_counter() - t0

        CostModelStage.run = counted_cms_run
        LomaEngine.run = counted_loma_run
        TemporalMappingGeneratorStage.run = timed_tmg_run
        Counters._installed = True

    def _engine_started(self, engine):
        self.orders += int(engine.nb_permutations)
        self.lpfs = [f"{dim.name}{pf}" for dim, pf in engine.lpfs]
        print(f"zigzag_peer: LOMA enumerates {engine.nb_permutations:,} loop orders of "
              f"{len(engine.lpfs)} LPFs {self.lpfs}", file=sys.stderr, flush=True)


COUNTERS = Counters()


# ---- one search --------------------------------------------------------------------------------

def _mapping_text(cme) -> str:
    from zigzag.visualization.results.print_mapping import print_mapping
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_mapping(cme)
    return buf.getvalue().rstrip()


def _energy_breakdown(cme) -> dict:
    """pJ per memory level and operand, plus the MACs, named after the YAML memories."""
    out = {"mac": float(cme.mac_energy)}
    hierarchy = cme.accelerator.memory_hierarchy
    links = cme.layer.memory_operand_links
    for layer_op, per_level in cme.mem_energy_breakdown.items():
        levels = hierarchy.get_memory_levels(links.layer_to_mem_op(layer_op))
        for level, pj in zip(levels, per_level):
            out[f"{layer_op.name}@{level.name}"] = float(pj)
    return out


def run_search(paths: dict[str, str], opt: str, lpf_limit: int, dump: Path) -> dict:
    """Run ZigZag's API once; returns the best mapping for ``opt`` and what the search cost."""
    from zigzag.api import get_hardware_performance_zigzag
    COUNTERS.install()
    COUNTERS.reset()
    t0 = time.perf_counter()
    energy, latency, cmes = get_hardware_performance_zigzag(
        workload=paths["workload"], accelerator=paths["accelerator"], mapping=paths["mapping"],
        opt=opt, dump_folder=str(dump), lpf_limit=lpf_limit, loma_show_progress_bar=False)
    wall = time.perf_counter() - t0
    cme = cmes[0][1][0][0]  # SumStage -> per-layer list -> (best cme, extra)
    if int(cme.layer.total_mac_count) != MACS:  # the YAML was read as the layer we meant
        raise RuntimeError(f"ZigZag counts {cme.layer.total_mac_count} MACs, expected {MACS}")
    ev = COUNTERS.evaluated
    return {
        "opt": opt,
        "lpf_limit": lpf_limit,
        "api_wall_s": wall,
        "search_s": COUNTERS.search_s,
        "loop_orders": COUNTERS.orders,
        "lpfs": COUNTERS.lpfs,
        "mappings_evaluated": ev,
        "mappings_per_s": ev / COUNTERS.search_s if COUNTERS.search_s > 0 else None,
        "mappings_per_s_api": ev / wall if wall > 0 else None,
        "latency_cycles": float(latency),
        "latency": {"total": float(cme.latency_total2), "ideal": float(cme.ideal_cycle),
                    "ideal_temporal": float(cme.ideal_temporal_cycle),
                    "stall_slack": float(cme.stall_slack_comb),
                    "onloading": float(cme.data_onloading_cycle),
                    "offloading": float(cme.data_offloading_cycle),
                    "systolic_drain": float(cme.systolic_drain_cycle),
                    "mac_utilization": float(cme.mac_utilization2)},
        "energy_pj": float(energy),
        "energy_breakdown_pj": _energy_breakdown(cme),
        "edp_pj_cycles": float(energy) * float(latency),
        "spatial_mapping": str(cme.layer.spatial_mapping),
        "temporal_mapping": str(cme.temporal_mapping),
        "mapping_text": _mapping_text(cme),
    }


def _key(r: dict) -> tuple:
    return (r["latency_cycles"], r["energy_pj"], r["temporal_mapping"], r["mappings_evaluated"])


def full_run(lpf_limit: int, objectives: list[str]) -> dict:
    import zigzag  # noqa: F401
    from importlib.metadata import version
    logging.basicConfig(level=logging.WARNING)  # before ZigZag's API sets INFO
    with tempfile.TemporaryDirectory(prefix="zigzag_peer_") as tmp:
        tmp = Path(tmp)
        paths = write_inputs(tmp)
        runs = {opt: run_search(paths, opt, lpf_limit, tmp / f"out_{opt}") for opt in objectives}
        first = objectives[0]
        again = run_search(paths, first, lpf_limit, tmp / f"out_{first}_again")
    det_same = _key(again) == _key(runs[first])
    return {
        "tool": "zigzag-dse", "zigzag_version": version("zigzag-dse"),
        "python": sys.version.split()[0], "lpf_limit": lpf_limit,
        "layer": LAYER, "macs": MACS,
        "accelerator": accelerator_dict(),
        "energy_constants": {"mac_pj": MAC_PJ, "register_pj_per_bit": REGISTER_PJ_PER_BIT,
                             "sram_pj_per_bit": SRAM_PJ_PER_BIT,
                             "dram_pj_per_bit": DRAM_PJ_PER_BIT,
                             "dram_bits_per_cycle": DRAM_BITS_PER_CYCLE},
        "runs": runs,
        "determinism": {"objective": first, "same_result": det_same,
                        "first": {k: runs[first][k] for k in ("latency_cycles", "energy_pj",
                                                               "mappings_evaluated")},
                        "second": {k: again[k] for k in ("latency_cycles", "energy_pj",
                                                          "mappings_evaluated", "search_s")}},
    }


def sweep(limits: list[int], budget_s: float, opt: str) -> list[dict]:
    """One subprocess per ``lpf_limit`` (killed after ``budget_s``); stops after the first that
    runs out of time, since the next is larger."""
    rows = []
    for n in limits:
        cmd = [sys.executable, __file__, "--lpf-limit", str(n), "--objectives", opt,
               "--json", "--no-repeat", "--progress", "500"]
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=budget_s)
        except subprocess.TimeoutExpired as e:
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            planned = [ln for ln in err.splitlines() if "LOMA enumerates" in ln]
            progress = [ln.split() for ln in err.splitlines() if "progress" in ln]
            row = {"lpf_limit": n, "timeout_s": budget_s,
                   "planned": planned[-1] if planned else None}
            if progress:  # "zigzag_peer: progress N evaluated in T s"
                done, secs = int(progress[-1][2]), float(progress[-1][5])
                row.update(evaluated_before_stop=done, seconds=secs, mappings_per_s=done / secs)
            rows.append(row)
            break
        if p.returncode != 0:
            raise RuntimeError(f"lpf_limit {n} failed:\n{p.stderr[-3000:]}")
        r = json.loads(p.stdout)["runs"][opt]
        r["process_wall_s"] = time.perf_counter() - t0
        r.pop("mapping_text")
        rows.append(r)
    return rows


def check_energy() -> int:
    """Run in npulab's venv: recompute the constants from hw/energy/data/45nm.toml."""
    sys.path.insert(0, str(HERE.parent))
    from hw.energy.tech import load_technology
    t = load_technology("45nm")
    want = {"MAC_PJ": (MAC_PJ, t.mac_pj("int8", 32)),
            "REGISTER_PJ_PER_BIT": (REGISTER_PJ_PER_BIT, t.register_pj_per_bit),
            "DRAM_PJ_PER_BIT": (DRAM_PJ_PER_BIT, t.dram_energy_pj_per_bit("ddr4"))}
    for name, kib in SRAM_KIB.items():
        bank = kib * 1024 / SRAM_BANKS
        want[f"SRAM_PJ_PER_BIT[{name}]"] = (SRAM_PJ_PER_BIT[name], t.sram_pj_per_bit(bank))
        want[f"SRAM_PJ_PER_BIT[{name}] write"] = (SRAM_PJ_PER_BIT[name],
                                                  t.sram_pj_per_bit(bank, write=True))
    bad = 0
    for name, (have, ref) in want.items():
        ok = math.isclose(have, ref, rel_tol=1e-9)
        bad += not ok
        print(f"{name:32s} script {have:.9g}  npulab {ref:.9g}  {'ok' if ok else 'DIFFERENT'}")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lpf-limit", type=int, default=6,
                    help="LOMA loop-prime-factor limit (ZigZag's API default: 6)")
    ap.add_argument("--objectives", default="latency,energy,EDP",
                    help="comma list of ZigZag objectives: latency, energy, EDP")
    ap.add_argument("--no-repeat", action="store_true",
                    help="skip the second run of the first objective (determinism check)")
    ap.add_argument("--sweep", default=None,
                    help="comma list of lpf limits, e.g. 6,7,8,9: time each in a subprocess")
    ap.add_argument("--sweep-budget", type=float, default=180.0,
                    help="seconds per sweep point before it is stopped (default 180)")
    ap.add_argument("--json", action="store_true", help="print JSON only")
    ap.add_argument("--progress", type=int, default=0,
                    help="report progress to stderr every N evaluations")
    ap.add_argument("--check-energy", action="store_true",
                    help="(npulab venv) compare the energy constants with hw/energy")
    args = ap.parse_args(argv)
    if args.check_energy:
        return check_energy()
    Counters.progress_every = max(0, args.progress)
    try:
        import zigzag  # noqa: F401
    except ImportError:
        print(f"zigzag_peer: error: zigzag-dse is not installed in {sys.executable}; run this "
              f"script with {DEFAULT_VENV}/bin/python (see the module docstring)", file=sys.stderr)
        return 2
    objectives = [o.strip() for o in args.objectives.split(",") if o.strip()]
    for o in objectives:
        if o not in ("latency", "energy", "EDP"):
            print(f"zigzag_peer: error: --objectives: {o!r} is not one of latency, energy, EDP",
                  file=sys.stderr)
            return 2
    if args.sweep:
        limits = [int(x) for x in args.sweep.split(",")]
        rows = sweep(limits, args.sweep_budget, objectives[0])
        if args.json:
            print(json.dumps({"sweep": rows}, indent=1))
        else:
            for r in rows:
                if "timeout_s" in r:
                    print(f"lpf {r['lpf_limit']:2d}: stopped after {r['timeout_s']:.0f} s "
                          f"({r['planned']}; {r.get('evaluated_before_stop', 0):,} evaluated)")
                else:
                    print(f"lpf {r['lpf_limit']:2d}: {r['loop_orders']:>10,} orders "
                          f"{r['mappings_evaluated']:>10,} evaluated {r['search_s']:8.2f} s "
                          f"{r['mappings_per_s']:8.0f} /s  latency {r['latency_cycles']:.0f}"
                          f"  energy {r['energy_pj'] / 1e6:.2f} uJ")
        return 0
    if args.no_repeat:
        # a single objective, no determinism run (used by the sweep)
        logging.basicConfig(level=logging.WARNING)
        from importlib.metadata import version
        with tempfile.TemporaryDirectory(prefix="zigzag_peer_") as tmp:
            paths = write_inputs(Path(tmp))
            runs = {o: run_search(paths, o, args.lpf_limit, Path(tmp) / f"out_{o}")
                    for o in objectives}
        out = {"zigzag_version": version("zigzag-dse"), "lpf_limit": args.lpf_limit,
               "runs": runs}
    else:
        out = full_run(args.lpf_limit, objectives)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"zigzag-dse {out['zigzag_version']}, lpf_limit {args.lpf_limit}")
        for o, r in out["runs"].items():
            print(f"\n== best for {o}: latency {r['latency_cycles']:.0f} cycles, energy "
                  f"{r['energy_pj'] / 1e6:.3f} uJ; {r['mappings_evaluated']:,} mappings in "
                  f"{r['search_s']:.2f} s = {r['mappings_per_s']:.0f} /s "
                  f"(API call {r['api_wall_s']:.2f} s)")
            print(r["mapping_text"])
        if "determinism" in out:
            print(f"\ndeterministic: {out['determinism']['same_result']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
