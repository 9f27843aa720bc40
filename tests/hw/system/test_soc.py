"""The SoC: accelerators (and a CPU stream) sharing one cycle-level DRAM (hw/system/soc.py).

Gold models: :func:`hw.executor.execute` for one accelerator (the shared core must reproduce it
exactly), the DRAM's peak bandwidth (channels x bus bytes x transfers per clock / tCK) as a
physical bound, and hand-reasoned bounds on the slowdown stated at each test.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from compiler.frontends import zoo
from compiler.ir import Gemm, Graph
from compiler.backends.systolic import compile_graph
from hw.chip import ChipConfig
from hw.executor import execute, execute_shared
from hw.memory.dram import dram_preset
from hw.memory.sram import SramConfig
from hw.program import Kind
from hw.systolic.config import ArrayConfig, ConfigError
from hw.system.soc import (CpuStream, SocConfig, load_soc_config, program_dram_extent,
                           run_soc)

DDR4 = dram_preset("ddr4-3200")
# int8 operands already in DRAM, results stay there: only weights/activations stream.
CHIP = ChipConfig(model_input="dram", model_output="dram")


def _program(op, chip=CHIP):
    return compile_graph(Graph("t", (op,)), chip)


def _dram_bound():
    # GEMV: 512 KiB of weights read once, 2048 MACs per 2 KiB row: DRAM-bound (alone, a DRAM
    # transfer is in flight > 75 % of the time; checked below).
    return _program(Gemm(name="fc", m=1, n=256, k=2048))


def _compute_bound():
    # 512^3 GEMM on 32x32: 134 M MACs = 131 k array cycles at best vs 768 KiB of operands
    # (~31 k core cycles at DDR4-3200's 25.4 GB/s).
    return _program(Gemm(name="g", m=512, n=512, k=512))


def _same(a, b):
    assert a.cycles == b.cycles
    assert a.layers == b.layers and a.totals == b.totals and a.dram == b.dram
    for key in ("start", "finish", "dram_finish", "link_start", "link_finish", "nbytes"):
        np.testing.assert_array_equal(getattr(a.trace, key), getattr(b.trace, key))


def _transfers(program) -> int:
    return int(np.isin(program.columns["kind"], [Kind.LOAD, Kind.STORE, Kind.HOST_IN,
                                                  Kind.HOST_OUT]).sum())


def test_one_accelerator_shared_equals_execute_exactly():
    chip = ChipConfig(array=ArrayConfig(rows=16, cols=16, dataflow="os"),
                      ifmap_sram=SramConfig(capacity_kib=32), filter_sram=SramConfig(capacity_kib=32),
                      ofmap_sram=SramConfig(capacity_kib=32), dram=dram_preset("lpddr4-3200"))
    program = compile_graph(zoo.get("resnet18", image_size=32), chip)
    gold = execute(program, chip)
    r = run_soc(SocConfig(accelerators=(chip,), dram=chip.dram), [program])
    _same(r.shared[0], gold)          # shared core with one chip == the single-chip executor
    _same(r.alone[0], gold)
    assert r.accelerators[0].slowdown == 1.0
    assert r.dram_bus_bytes == gold.totals["dram_bus_read_bytes"] + gold.totals["dram_bus_write_bytes"]
    shared = execute_shared([program], [chip], chip.dram)
    _same(shared.results[0], gold)
    assert shared.dram == gold.dram


def test_two_dram_bound_programs_slow_down_and_never_beat_the_peak():
    p = _dram_bound()
    r = run_soc(SocConfig(accelerators=(CHIP, CHIP)), [p, p])
    a0, a1 = r.accelerators
    # Placed in its own region (rows differ only), accelerator 1 alone runs like accelerator 0.
    assert a0.cycles_alone == a1.cycles_alone
    assert r.dram_busy_alone_s / 2 > 0.75 * a0.seconds_alone          # DRAM-bound alone
    assert a0.slowdown > 1.0 and a1.slowdown > 1.0
    # Same requests: same bytes on the bus and same data-bus cycles as the two alone runs.
    assert r.dram_bus_bytes == a0.dram_bus_bytes + a1.dram_bus_bytes
    # (a shared run's ExecutionResult.dram holds the shared DRAM's totals, all masters)
    assert r.shared[0].dram["data_cycles"] == sum(x.dram["data_cycles"] for x in r.alone)
    assert r.shared[0].dram["reads"] == sum(x.dram["reads"] for x in r.alone)
    # One controller serves one transfer at a time: the time some transfer is in flight is at
    # least the two alone busy times, minus the pipeline overlap a queued transfer gets at each
    # hand-over (at most one closed-bank read + a precharge: 1 + tRCD + CL + tBurst + tRP).
    handover = (1 + DDR4.trcd + DDR4.cl + DDR4.burst_cycles + DDR4.trp) * DDR4.tck_ns * 1e-9
    assert r.dram_busy_s >= r.dram_busy_alone_s - 2 * _transfers(p) * handover
    # ... so the last one to finish needs at least that long, and the bus never beats its peak.
    assert max(a0.seconds_shared, a1.seconds_shared) == r.makespan_s >= r.dram_busy_s
    peak = DDR4.channels * DDR4.bus_width_bits / 8 * DDR4.transfers_per_clock / DDR4.tck_ns
    assert r.dram_peak_gbps == pytest.approx(peak) == pytest.approx(25.397, rel=1e-4)
    assert r.dram_bus_bytes / r.dram_busy_s <= peak * 1e9
    assert r.dram_achieved_gbps <= peak and r.dram_utilization == pytest.approx(
        r.dram_achieved_gbps / peak)
    assert max(a0.slowdown, a1.slowdown) >= r.dram_busy_s / a0.seconds_alone


def test_compute_bound_programs_slow_down_little():
    p = _compute_bound()
    r = run_soc(SocConfig(accelerators=(CHIP, CHIP)), [p, p])
    busy_one = r.dram_busy_alone_s / 2
    for a in r.accelerators:
        assert a.dram_bus_bytes >= 3 * 512 * 512        # a, b read, c written at least once
        # FCFS on one controller: each transfer of the other accelerator can hold this one's
        # transfers back at most once, for its own service time, so the slowdown is at most
        # 1 + (the other's DRAM busy time) / (alone time) -- here about 1.32 -- plus 1 %
        # for row-buffer state left behind by the other.
        assert 1.0 <= a.slowdown <= 1 + busy_one / a.seconds_alone + 0.01
        assert a.slowdown < 1.2


def test_runs_are_deterministic_and_chips_may_differ_in_clock():
    p = _dram_bound()
    slow = replace(CHIP, name="slow", clock_mhz=500.0)
    soc = SocConfig(name="mixed", accelerators=(CHIP, slow))
    r1 = run_soc(soc, [p, _program(Gemm(name="fc", m=1, n=256, k=2048), slow)])
    r2 = run_soc(soc, [p, _program(Gemm(name="fc", m=1, n=256, k=2048), slow)])
    assert r1.to_dict() == r2.to_dict()
    d = r1.to_dict()
    assert [a["name"] for a in d["accelerators"]] == ["npulab-default", "slow"]
    for a in r1.accelerators:
        assert a.slowdown > 1.0
        assert a.seconds_shared == pytest.approx(a.cycles_shared / (a.clock_mhz * 1e6))
    assert r1.dram_bus_bytes / r1.dram_busy_s <= r1.dram_peak_gbps * 1e9


def test_cpu_stream_rate_limited_time_and_contention():
    # Read 1 MiB capped at 1 GB/s: chunk k (4 KiB) may start at k * 4096 B / 1 GB/s, so the
    # last one starts at 255 * 4.096 us = 1044.48 us and ends one DRAM transfer later
    # (4 KiB at <= 25.4 GB/s: >= 161 ns, < 1 us).
    soc = SocConfig(accelerators=(CHIP,), cpu=CpuStream(nbytes=1 << 20, kind="read", gbps=1.0))
    r = run_soc(soc, [_dram_bound()])
    assert 1044.48e-6 + 4096 / 25.4e9 <= r.cpu["seconds_alone"] <= 1045.48e-6
    # Unthrottled memcpy next to a DRAM-bound accelerator: both lose time, bytes add up.
    soc = SocConfig(accelerators=(CHIP,), cpu=CpuStream(nbytes=1 << 20))
    p = _dram_bound()
    r = run_soc(soc, [p])
    assert r.cpu["dram_bytes"] == 2 << 20 and r.cpu["slowdown"] > 1.0
    assert r.accelerators[0].slowdown > 1.0
    assert r.dram_bus_bytes == r.accelerators[0].dram_bus_bytes + (2 << 20)
    assert r.cpu["gbps_alone"] <= r.dram_peak_gbps
    assert r.dram_bus_bytes / r.dram_busy_s <= r.dram_peak_gbps * 1e9


def test_bad_input_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="at least one accelerator"):
        SocConfig(accelerators=())
    with pytest.raises(ConfigError, match="cpu.kind = 'move'"):
        CpuStream(nbytes=10, kind="move")
    with pytest.raises(ValueError, match="1 given for 2 accelerator"):
        run_soc(SocConfig(accelerators=(CHIP, CHIP)), [_dram_bound()])
    with pytest.raises(ValueError, match="one chip per program"):
        execute_shared([], [], DDR4)
    with pytest.raises(ValueError, match="addr_offsets"):
        execute_shared([_dram_bound()], [CHIP], DDR4, addr_offsets=[-1])
    path = tmp_path / "soc.toml"
    path.write_text('[soc]\nname = "x"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"soc.toml: accelerator = None: must be one or more"):
        load_soc_config(path)
    path.write_text('[soc]\ncolor = "red"\n[[accelerator]]\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"soc.toml: soc.color: unknown key"):
        load_soc_config(path)
    path.write_text('[[accelerator]]\ncount = 0\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"soc.toml: accelerator\[0\]: count = 0"):
        load_soc_config(path)
    path.write_text('[[accelerator]]\nconfig = "nosuch.toml"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"accelerator\[0\]: config = 'nosuch.toml': no such"):
        load_soc_config(path)
    path.write_text('[[accelerator]]\n[accelerator.array]\nrows = 3.5\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"soc.toml: accelerator\[0\].*array.rows = 3.5"):
        load_soc_config(path)
    path.write_text('[[accelerator]]\n[cpu]\nkind = "read"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"soc.toml: cpu.nbytes: missing"):
        load_soc_config(path)


def test_toml_soc(tmp_path):
    (tmp_path / "small.toml").write_text("[array]\nrows = 16\ncols = 16\n[dram]\npreset = 'hbm2'\n",
                                         encoding="utf-8")
    path = tmp_path / "soc.toml"
    path.write_text('[soc]\nname = "pair"\n[dram]\npreset = "lpddr5-6400"\n'
                    '[[accelerator]]\nconfig = "small.toml"\ncount = 2\n'
                    '[accelerator.chip]\nclock_mhz = 800.0\n'
                    '[[accelerator]]\n'
                    '[cpu]\nnbytes = 65536\nkind = "write"\n', encoding="utf-8")
    soc = load_soc_config(path)
    assert soc.name == "pair" and len(soc.accelerators) == 3
    assert soc.dram.preset == "lpddr5-6400" and soc.cpu == CpuStream(nbytes=65536, kind="write")
    assert [a.array.rows for a in soc.accelerators] == [16, 16, 32]
    assert [a.clock_mhz for a in soc.accelerators] == [800.0, 800.0, 1000.0]
    assert soc.chip(0).dram == soc.dram          # the SoC's DRAM replaces the chip's own


def test_program_extent_and_regions():
    p = _dram_bound()
    extent = program_dram_extent(p)
    assert extent >= 256 * 2048                    # the weights alone
    r = run_soc(SocConfig(accelerators=(CHIP, CHIP)), [p, p], alone=False)
    assert r.region_bytes == 1 << math.ceil(math.log2(extent))
    assert r.accelerators[0].cycles_alone == r.accelerators[0].cycles_shared   # alone skipped


def test_accelerators_may_be_chip_specs_of_systolic_chips():
    # issue 22: the SoC takes the one chip description (hw.spec.ChipSpec) too
    from hw.configfile import load_chip, load_chip_config
    spec = load_chip("gemmini_like")
    expect = (load_chip_config("gemmini_like"),) * 2
    assert SocConfig(accelerators=(spec, spec)).accelerators == expect
    with pytest.raises(ConfigError, match="has a nvdla engine; the SoC runs systolic"):
        SocConfig(accelerators=(load_chip("nv_small"),))
