"""The executor: compute-only equivalence, stall accounting, double buffering, bandwidth."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from compiler.frontends import zoo
from compiler.ir import Gemm, Graph
from compiler.backends.systolic import compile_graph
from compiler.options import CompileOptions
from hw.chip import ChipConfig
from hw.executor import execute
from hw.memory.dma import DmaConfig
from hw.memory.dram import dram_config_from_dict, dram_preset
from hw.memory.link import HostLinkConfig, link_transfer_cycles
from hw.memory.sram import SramConfig
from hw.program import Kind
from hw.systolic.config import ArrayConfig
from npulab.simulate import simulate

# Unlimited for these workloads: every tile fits, and 2 MiB per cycle per port.
HUGE = SramConfig(capacity_kib=1 << 20, banks=1024, bank_width_bytes=1024, ports=2)


def _ideal_chip(dataflow: str) -> ChipConfig:
    return ChipConfig(array=ArrayConfig(rows=16, cols=16, dataflow=dataflow),
                      ifmap_sram=HUGE, filter_sram=HUGE, ofmap_sram=HUGE,
                      dram=dram_preset("ideal"), host_link=HostLinkConfig(ideal=True),
                      dma=DmaConfig(descriptor_setup_cycles=0))


@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
@pytest.mark.parametrize("model,params", [("resnet18", {"image_size": 64}),
                                          ("mobilenetv2", {"image_size": 64}),
                                          ("bert_base_layer", {"seq_len": 32})])
def test_unlimited_sram_and_bandwidth_equal_compute_only(model, params, dataflow):
    graph = zoo.get(model, **params)
    chip = _ideal_chip(dataflow)
    # op by op, as the compute timing runs them: unfused
    full = simulate(graph, chip, "native",
                    options=CompileOptions(keep_on_chip=False, fusion=False))
    compute = simulate(graph, chip, "compute")
    # Every transfer still books ceil(bytes / 2 MiB) >= 1 cycles on its scratchpad's port (a
    # write into SRAM takes a cycle): a layer's first loads and its last store (the next
    # layer's load waits for it) add at most the cycles its transfers booked, charged to SRAM.
    for a, b, c in zip(full.layers, compute.layers, full.execution.layers):
        if a.cycles:
            booked = (c["ifmap_write_port_cycles"] + c["filter_write_port_cycles"]
                      + c["ofmap_read_port_cycles"])
            assert 0 <= a.cycles - b.cycles <= booked, a.name
            assert a.stall_dram_cycles == a.stall_link_cycles == 0
            assert a.stall_sram_cycles == a.cycles - b.cycles
            # the array's layers compute, the vector engine's wait for it
            assert (a.compute_cycles if a.engine == "array" else a.stall_vector_cycles) == b.cycles


def _chip(**kw) -> ChipConfig:
    base = dict(array=ArrayConfig(rows=16, cols=16, dataflow="ws"),
                ifmap_sram=SramConfig(capacity_kib=32), filter_sram=SramConfig(capacity_kib=32),
                ofmap_sram=SramConfig(capacity_kib=32))
    return ChipConfig(**{**base, **kw})


def test_layer_windows_add_up_and_split_into_compute_and_stalls():
    graph = zoo.get("resnet18", image_size=64)
    result = simulate(graph, _chip(), "native")
    run = result.execution
    assert sum(c["cycles"] for c in run.layers) == run.cycles == result.totals["cycles"]
    for c in run.layers:
        assert c["cycles"] == (c["compute_cycles"] + c["stall_dram_cycles"]
                               + c["stall_link_cycles"] + c["stall_sram_cycles"]
                               + c["stall_vector_cycles"])
    # The network input came over the link, the output went back: both counted.
    assert result.totals["link_bytes"] == 64 * 64 * 3 + 1000
    assert result.totals["stall_link_cycles"] > 0
    assert run.cycles > simulate(graph, _chip(), "compute").totals["cycles"]


def test_host_input_costs_the_link_time():
    op = Gemm(name="fc", m=1, n=16, k=1 << 20)   # 1 MiB input, weights tiny per column
    chip = _chip(model_output="dram", dram=dram_preset("ideal"),
                 dma=DmaConfig(descriptor_setup_cycles=0))
    program = compile_graph(Graph("t", (op,)), chip)
    run = execute(program, chip)
    host_in = [i for i in range(len(program)) if program.kind[i] == Kind.HOST_IN]
    assert len(host_in) == 1
    i = host_in[0]
    assert run.trace.finish[i] - run.trace.start[i] == link_transfer_cycles(
        chip.host_link, 1 << 20, chip.clock_mhz)


def _gaps(program, run):
    """(gap before compute i, finish of its latest dependency - start of the array's idle)."""
    comps = [i for i in range(len(program)) if program.kind[i] == Kind.COMPUTE]
    out = []
    for a, b in zip(comps, comps[1:]):
        gap = int(run.trace.start[b] - run.trace.finish[a])
        loads = [int(d) for d in program.deps(b) if program.kind[d] == Kind.LOAD]
        out.append((gap, loads))
    return comps, out


def test_double_buffering_hides_loads_shorter_than_compute():
    # Compute-bound: each 128-wide row of A meets 64 weight folds (2 bytes per cycle needed).
    op = Gemm(name="g", m=4096, n=128, k=128)
    chip = _chip(model_input="dram", model_output="dram",
                 ifmap_sram=SramConfig(capacity_kib=64), ofmap_sram=SramConfig(capacity_kib=128))
    program = compile_graph(Graph("t", (op,)), chip, CompileOptions(keep_on_chip=False))
    run = execute(program, chip)
    comps, gaps = _gaps(program, run)
    assert len(comps) > 2
    for (gap, loads), c in zip(gaps, comps):
        longest = max((run.trace.finish[d] - run.trace.start[d] for d in loads), default=0)
        compute = run.trace.finish[c] - run.trace.start[c]
        assert longest <= compute
        assert gap == 0          # transfer <= compute per tile: fully hidden
    # ... and without double buffering every reload is exposed.
    single = SramConfig(capacity_kib=32, double_buffer=False)
    chip1 = replace(chip, ifmap_sram=single, filter_sram=single, ofmap_sram=single)
    program1 = compile_graph(Graph("t", (op,)), chip1, CompileOptions(keep_on_chip=False))
    run1 = execute(program1, chip1)
    comps1, gaps1 = _gaps(program1, run1)
    reloads = 0
    for prev, (gap, loads) in zip(comps1, gaps1):
        # A reload into the only buffer can start only once the previous tile is done with it.
        fresh = [d for d in loads if run1.trace.start[d] >= run1.trace.finish[prev]]
        for d in fresh:
            assert gap >= run1.trace.finish[d] - run1.trace.start[d] > 0
            reloads += 1
    assert reloads >= len(comps1) - 1
    assert run1.cycles > run.cycles


def test_double_buffering_cannot_hide_loads_longer_than_compute():
    # Memory-bound: one row of A per weight tile (an FC layer at batch 1).
    op = Gemm(name="fc", m=1, n=4096, k=4096)
    chip = _chip(model_input="dram", model_output="dram")
    program = compile_graph(Graph("t", (op,)), chip)
    run = execute(program, chip)
    layer = run.layers[0]
    assert layer["stall_dram_cycles"] > 0.2 * layer["compute_cycles"]
    assert layer["dram_transfer_cycles"] > layer["compute_cycles"]
    loads = [i for i in range(len(program)) if program.kind[i] == Kind.LOAD]
    busy = sum(int(run.trace.finish[i] - run.trace.start[i]) for i in loads)
    # The load engine is the bottleneck: the layer takes at least its busy time.
    assert run.cycles >= busy
    assert simulate(Graph("t", (op,)), chip).layers[0].bound == "dram"


@pytest.mark.parametrize("model", ["resnet18", "bert_base_layer"])
def test_more_dram_bandwidth_never_more_cycles(model):
    graph = zoo.get(model, **({"image_size": 64} if model == "resnet18" else {"seq_len": 64}))
    options = CompileOptions(loop_order="mnk", objective="traffic")
    cycles = []
    for channels in (1, 2, 4):
        dram = dram_config_from_dict({"preset": "ddr4-3200", "channels": channels}, "test")
        cycles.append(simulate(graph, _chip(dram=dram), options=options).totals["cycles"])
    ideal = simulate(graph, _chip(dram=dram_preset("ideal")), options=options).totals["cycles"]
    assert cycles[0] >= cycles[1] >= cycles[2] >= ideal
    assert cycles[0] > ideal


def test_keep_on_chip_saves_dram_traffic_and_moves_on_chip():
    graph = zoo.get("bert_base_layer", seq_len=32)
    chip = _chip(ifmap_sram=SramConfig(capacity_kib=256), ofmap_sram=SramConfig(capacity_kib=512))
    # unfused: a fused attention also moves its P tiles on chip
    kept = simulate(graph, chip, options=CompileOptions(fusion=False))
    spilled = simulate(graph, chip, options=CompileOptions(keep_on_chip=False, fusion=False))
    moved = kept.execution.totals["onchip_move_bytes"]
    assert moved > 0
    assert spilled.execution.totals["onchip_move_bytes"] == 0
    dram = lambda r: r.totals["dram_read_bytes"] + r.totals["dram_write_bytes"]  # noqa: E731
    assert dram(kept) < dram(spilled)
    program = compile_graph(graph, chip, CompileOptions(fusion=False))
    resident_in = 0
    for ls, c in zip(program.layers, kept.execution.layers):
        if ls.tiling is None:
            continue
        if ls.tiling.input_resident:   # read from the ofmap scratchpad, not DRAM
            assert c["dram_ifmap_read_bytes"] == 0 and c["onchip_move_bytes"] > 0
            resident_in += c["onchip_move_bytes"]
        if ls.tiling.output_resident:  # never written to DRAM
            assert c["dram_ofmap_write_bytes"] == 0
    assert resident_in == moved


def test_row_major_layout_conflicts_in_banks_on_output_stationary():
    # OS reads a column of the row-major A tile per cycle: stride k_t bytes; with k_t a
    # multiple of banks * width every lane hits one bank.
    op = Gemm(name="g", m=256, n=16, k=128)
    chip = _chip(array=ArrayConfig(rows=16, cols=16, dataflow="os"), model_input="dram",
                 model_output="dram")
    matched = execute(compile_graph(Graph("t", (op,)), chip), chip)
    rowmajor = execute(compile_graph(Graph("t", (op,)), chip,
                                     CompileOptions(sram_layout="row-major")), chip)
    assert matched.totals["sram_conflict_cycles"] == 0
    assert rowmajor.totals["sram_conflict_cycles"] > 0
    assert rowmajor.totals["stall_sram_cycles"] == rowmajor.totals["sram_conflict_cycles"]
    assert rowmajor.cycles == matched.cycles + rowmajor.totals["sram_conflict_cycles"] or \
        rowmajor.cycles > matched.cycles


def test_trace_events_are_consistent():
    graph = zoo.get("resnet18", image_size=32)
    result = simulate(graph, _chip())
    trace = result.execution.trace
    assert (trace.finish >= trace.start).all()
    # Engines never run two commands at once.
    for engine in range(3):
        sel = np.flatnonzero(trace.engine == engine)
        assert (trace.start[sel][1:] >= trace.finish[sel][:-1]).all()


def test_waiting_for_the_host_copy_is_charged_to_the_link():
    # The first layer's loads wait for the network input to arrive over a slow PCIe link: that
    # wait is link time, even though the array's last dependency was a DRAM load.
    op = zoo.get("resnet50").ops[0]
    slow = _chip(host_link=HostLinkConfig(generation=3, lanes=2))
    from_host = execute(compile_graph(Graph("t", (op,)), slow), slow)
    in_dram = execute(compile_graph(Graph("t", (op,)), _chip(model_input="dram")),
                      _chip(model_input="dram"))
    program = compile_graph(Graph("t", (op,)), slow)
    host_in = [i for i in range(len(program)) if program.kind[i] == Kind.HOST_IN][0]
    copy = int(from_host.trace.finish[host_in] - from_host.trace.start[host_in])
    assert from_host.layers[0]["stall_link_cycles"] >= copy > 0
    assert from_host.layers[0]["stall_dram_cycles"] <= in_dram.layers[0]["stall_dram_cycles"] + 1
    c = from_host.layers[0]
    assert c["cycles"] == c["compute_cycles"] + c["stall_dram_cycles"] + c["stall_link_cycles"] + c["stall_sram_cycles"]


def test_program_rows_are_the_columns_in_order():
    """ProgramBuilder appends positional rows: ``_row``'s parameters are the columns, in order."""
    import inspect

    from hw.program import _INT_COLUMNS, _row
    assert tuple(inspect.signature(_row).parameters) == _INT_COLUMNS
    assert _row(*range(len(_INT_COLUMNS))) == list(range(len(_INT_COLUMNS)))
