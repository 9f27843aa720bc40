"""The Perfetto / Chrome timeline (``trace.json``) of every kind of run, and its validator.

Gold values: the executor's own per-command cycles and per-layer windows (hw/executor.py), the
host link model (hw.memory.link.link_transfer_cycles), the NVDLA cycle model
(hw.nvdla.cycles.conv_cycles / engine_cycles) and hand-worked layouts in the comments.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from compiler.backends.nvdla import lower_graph
from compiler.ir import Eltwise, Gemm, Graph, Pool, conv2d
from hw.chip import ChipConfig
from hw.memory.link import link_transfer_cycles
from hw.memory.sram import SramConfig
from hw.nvdla.config import load_nvdla_config
from hw.nvdla.cycles import conv_cycles, engine_cycles
from hw.program import Kind
from hw.systolic.config import ArrayConfig
from npulab.nvdla_run import simulate_nvdla
from npulab.simulate import LayerResult, simulate
from npulab.timeline import chrome_trace, validate_trace, write_trace

CLOCK = 1000.0   # MHz: 1 cycle = 1e-3 us


def _graph() -> Graph:
    return Graph("tiny", (
        conv2d("conv1", 16, 8, 16, 3, padding=1),
        Pool(name="pool1", kind="max", in_h=16, in_w=16, channels=16, kernel_h=2, kernel_w=2,
             stride_h=2, stride_w=2),
        conv2d("conv2", 8, 16, 32, 3, padding=1),
        Gemm(name="fc", m=1, n=10, k=8 * 8 * 32)))


def _chip() -> ChipConfig:
    small = SramConfig(capacity_kib=4)
    return ChipConfig(array=ArrayConfig(rows=8, cols=8, dataflow="ws"), ifmap_sram=small,
                      filter_sram=small, ofmap_sram=small, clock_mhz=CLOCK)


@pytest.fixture(scope="module")
def native():
    result = simulate(_graph(), _chip(), "native")
    return result, chrome_trace(result)


def _tracks(doc) -> dict[str, int]:
    return {e["args"]["name"]: e["tid"] for e in doc["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


def _on(doc, track: str) -> list[dict]:
    tid = _tracks(doc)[track]
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == tid]


def _regions(doc) -> dict[str, tuple[float, float]]:
    begins = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "b"}
    return {begins[e["id"]]["name"]: (begins[e["id"]]["ts"], e["ts"])
            for e in doc["traceEvents"] if e["ph"] == "e"}


# ------------------------------------------------------------------------------ native runs
def test_native_trace_is_valid_and_describes_the_run(native):
    result, doc = native
    validate_trace(doc)
    assert doc["displayTimeUnit"] == "ns"
    assert doc["otherData"] == {"model": "tiny", "chip": result.chip, "timing": "native",
                                "scope": result.scope, "clock_mhz": CLOCK,
                                "cycles": result.totals["cycles"]}
    assert set(_tracks(doc)) == {"layers", "host link in", "load DMA", "array", "store DMA",
                                 "host link out", "vector engine"}
    sort = {e["tid"]: e["args"]["sort_index"] for e in doc["traceEvents"]
            if e["name"] == "thread_sort_index"}
    order = sorted(_tracks(doc), key=lambda name: sort[_tracks(doc)[name]])
    assert order == ["layers", "host link in", "load DMA", "array", "vector engine", "store DMA",
                     "host link out"]


def test_every_vector_command_is_on_the_vector_track_once_with_its_cycles(native):
    result, doc = native
    tr = result.execution.trace
    events = _on(doc, "vector engine")
    vectors = np.flatnonzero(tr.kind == Kind.VECTOR)
    assert len(vectors) and sorted(e["args"]["command"] for e in events) == vectors.tolist()
    for e in events:
        i = e["args"]["command"]
        assert e["args"]["layer"] == "pool1" and e["args"]["op"] == "maxpool"
        assert e["name"] == f"pool1 maxpool t{tr.tile_m[i]}"
        assert e["args"]["cycles"] == tr.finish[i] - tr.start[i] > 0


def test_every_compute_command_is_on_the_array_track_once_with_its_cycles(native):
    result, doc = native
    tr = result.execution.trace
    events = _on(doc, "array")
    computes = np.flatnonzero(tr.kind == Kind.COMPUTE)
    assert sorted(e["args"]["command"] for e in events) == computes.tolist()
    for e in events:
        i = e["args"]["command"]
        layer = tr.layer_names[tr.layer[i]]
        assert e["name"] == (f"{layer} compute g{tr.tile_g[i]} m{tr.tile_m[i]} "
                             f"n{tr.tile_n[i]} k{tr.tile_k[i]}")
        assert (e["args"]["start_cycle"], e["args"]["finish_cycle"]) == (tr.start[i], tr.finish[i])
        assert e["ts"] == pytest.approx(tr.start[i] / CLOCK, abs=1e-9)
        assert e["dur"] == pytest.approx((tr.finish[i] - tr.start[i]) / CLOCK, abs=1e-9)
        assert e["args"]["layer"] == layer and e["args"]["kind"] == "compute"


def test_transfers_are_named_by_layer_operand_and_tile(native):
    result, doc = native
    names = {e["name"] for e in doc["traceEvents"] if e["ph"] == "X"}
    for name in ("conv1 compute g0 m2 n0 k0", "conv1 load filter n0 k0",
                 "conv1 load ifmap m2 k0", "conv1 store ofmap m2 n0",
                 "conv1 host in ifmap m0 k0", "conv1 link in ifmap m0 k0"):
        assert name in names, name
    tr = result.execution.trace
    loads = _on(doc, "load DMA")
    stores = _on(doc, "store DMA")
    transfers = np.flatnonzero((tr.kind != Kind.COMPUTE) & (tr.kind != Kind.VECTOR))
    assert sorted(e["args"]["command"] for e in loads + stores) == transfers.tolist()
    for e in loads + stores:
        i = e["args"]["command"]
        assert e["args"]["bytes"] == tr.nbytes[i] > 0
        # the DMA track holds the DRAM side of the command
        assert (e["args"]["start_cycle"], e["args"]["finish_cycle"]) == (tr.start[i],
                                                                         tr.dram_finish[i])
        assert e["args"]["command_finish_cycle"] == tr.finish[i] >= tr.dram_finish[i]


def test_trace_columns_are_the_programs(native):
    from compiler.backends.systolic import compile_graph
    result, _ = native
    program = compile_graph(_graph(), _chip())
    tr = result.execution.trace
    for name in ("operand", "tile_g", "tile_m", "tile_n", "tile_k"):
        assert (getattr(tr, name) == program.columns[name]).all(), name
    assert [int(b) for b in tr.nbytes] == [
        0 if program.kind[i] == Kind.COMPUTE else program.transfer_bytes(i)
        for i in range(len(program))]
    events = tr.events()
    assert events[0]["operand"] == "ifmap" and events[0]["bytes"] == tr.nbytes[0]


def test_link_track_shows_the_link_side_of_host_copies(native):
    result, doc = native
    chip = _chip()
    tr = result.execution.trace
    setup = chip.dma.descriptor_setup_cycles
    link = _on(doc, "host link in") + _on(doc, "host link out")
    hosts = np.flatnonzero((tr.kind == Kind.HOST_IN) | (tr.kind == Kind.HOST_OUT))
    assert sorted(e["args"]["command"] for e in link) == hosts.tolist() and len(hosts) >= 2
    for e in link:
        i = e["args"]["command"]
        busy = link_transfer_cycles(chip.host_link, int(tr.nbytes[i]), chip.clock_mhz)
        assert e["args"]["start_cycle"] == tr.start[i] + setup
        assert e["args"]["finish_cycle"] == tr.start[i] + setup + busy
        # the command lasts as long as the slower of its two sides
        assert tr.finish[i] == max(tr.dram_finish[i], e["args"]["finish_cycle"])


def test_layer_windows_add_up_and_regions_span_each_layers_commands(native):
    result, doc = native
    run, tr = result.execution, result.execution.trace
    windows = _on(doc, "layers")
    # every layer with commands has a window (pool1's, on the vector engine beside the array,
    # may be empty and sort among the others)
    assert sorted(w["name"] for w in windows) == ["conv1", "conv2", "fc", "pool1"]
    assert sum(w["dur"] for w in windows) == pytest.approx(run.cycles / CLOCK, abs=1e-9)
    for w in windows:
        li = tr.layer_names.index(w["name"])
        c = run.layers[li]
        assert w["args"]["cycles"] == c["cycles"] == (
            w["args"]["finish_cycle"] - w["args"]["start_cycle"])
        assert c["cycles"] == sum(w["args"][k] for k in (
            "compute_cycles", "stall_dram_cycles", "stall_link_cycles", "stall_sram_cycles",
            "stall_vector_cycles"))
    ordered = sorted(windows, key=lambda w: (w["args"]["start_cycle"], w["args"]["finish_cycle"]))
    for a, b in zip(ordered, ordered[1:]):      # windows tile the run: never overlap
        assert a["args"]["finish_cycle"] == b["args"]["start_cycle"]
    regions = _regions(doc)
    for name, (lo, hi) in regions.items():
        sel = tr.layer == tr.layer_names.index(name)
        assert lo == pytest.approx(tr.start[sel].min() / CLOCK, abs=1e-9)
        assert hi == pytest.approx(tr.finish[sel].max() / CLOCK, abs=1e-9)
    # conv2's weights are fetched while conv1 still runs: regions overlap, hence async events
    assert regions["conv2"][0] < regions["conv1"][1]


def test_dram_counter_is_each_windows_bytes_over_its_time(native):
    result, doc = native
    run = result.execution
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert [c["name"] for c in counters] == ["DRAM useful GB/s"] * 4
    first = run.layers[0]
    rd = (first["dram_ifmap_read_bytes"] + first["dram_filter_read_bytes"]
          + first["dram_psum_read_bytes"])
    # bytes / cycles = bytes per ns at 1 GHz = GB/s
    assert counters[0]["args"]["read"] == pytest.approx(rd / first["cycles"])
    assert counters[-1]["args"] == {"read": 0.0, "write": 0.0}
    assert counters[-1]["ts"] == pytest.approx(run.cycles / CLOCK)


def test_write_trace_writes_compact_valid_json(native, tmp_path):
    result, doc = native
    path = write_trace(result, tmp_path / "trace.json")
    text = path.read_text()
    assert json.loads(text) == doc
    assert text == json.dumps(doc, separators=(",", ":"))       # compact: no indentation


# ------------------------------------------------------------------------- compute / scalesim
@pytest.mark.parametrize("timing", ["compute", "scalesim"])
def test_compute_modes_put_layers_back_to_back(timing):
    result = simulate(_graph(), _chip(), timing)
    doc = chrome_trace(result)
    validate_trace(doc)
    array = _on(doc, "array")
    run = [layer for layer in result.layers if layer.cycles is not None]
    assert [e["args"]["layer"] for e in array] == [layer.name for layer in run]
    t = 0
    for e, layer in zip(array, run):
        assert (e["args"]["start_cycle"], e["args"]["finish_cycle"]) == (t, t + layer.cycles)
        t += layer.cycles
    assert t == result.totals["cycles"]
    assert sum(e["dur"] for e in _on(doc, "layers")) == pytest.approx(t / CLOCK, abs=1e-9)
    assert set(_regions(doc)) == {layer.name for layer in run}


# ------------------------------------------------------------------------------ NVDLA runs
def _nvdla_graph() -> Graph:
    return Graph("tiny", (
        conv2d("conv1", 16, 8, 16, 3, padding=1),
        Pool(name="pool1", kind="max", in_h=16, in_w=16, channels=16, kernel_h=2, kernel_w=2,
             stride_h=2, stride_w=2),
        conv2d("conv2", 8, 16, 32, 3, padding=1, inputs=("pool1",)),
        Eltwise(name="add", op="add", elements=8 * 8 * 32, operands=2,
                inputs=("conv2", "conv2")),
        Gemm(name="fc", m=1, n=10, k=8 * 8 * 32, inputs=("add",))))


HAS_UNITS = "units" in LayerResult.__dataclass_fields__


def _with_units(layer, units):
    if HAS_UNITS:
        return dataclasses.replace(layer, units=units)
    object.__setattr__(layer, "units", units)   # before the field exists: same attribute
    return layer


@pytest.mark.skipif(not HAS_UNITS, reason="LayerResult.units not added yet")
def test_nvdla_units_come_from_the_cycle_model():
    cfg = load_nvdla_config("nv_small")
    graph = _nvdla_graph()
    result = simulate_nvdla(graph, cfg)
    doc = chrome_trace(result)
    validate_trace(doc)
    hw_layers = lower_graph(graph, cfg, "int8").layers
    assert [hl.kind for hl in hw_layers] == ["conv", "pdp", "conv", "sdp", "conv"]
    events = [e for e in doc["traceEvents"] if e["ph"] == "X" and "unit" in e["args"]]
    by = {(e["args"]["layer"], e["args"]["unit"]): e for e in events}
    t = 0
    for hl, layer in zip(hw_layers, result.layers):
        if hl.conv is not None:
            c = conv_cycles(cfg, hl.conv)
            gold = {"CSC/CMAC": c.compute_cycles,
                    "CDMA": math.ceil(c.cdma_data_cycles + c.cdma_weight_cycles),
                    "SDP": math.ceil(c.sdp_cycles), "WDMA": math.ceil(c.write_cycles)}
        else:
            n = hl.batch * hl.in_c * hl.in_h * hl.in_w
            if hl.kind == "pdp":
                (p,) = hl.passes
                n = hl.batch * hl.in_c * p.in_h * p.in_w
            m = hl.batch * hl.out_c * hl.out_h * hl.out_w
            e = engine_cycles(cfg, hl.kind, n, m, n * hl.operands, m)
            gold = {hl.kind.upper(): math.ceil(e.engine_cycles),
                    "RDMA": math.ceil(e.memory_cycles * n * hl.operands / (n * hl.operands + m)),
                    "WDMA": math.ceil(e.memory_cycles * m / (n * hl.operands + m))}
        units = {unit for (name, unit) in by if name == layer.name}
        assert units == set(gold), layer.name
        for unit, cycles in gold.items():
            ev = by[(layer.name, unit)]
            assert ev["args"]["cycles"] == cycles, (layer.name, unit)
            # inside the layer's window [t, t + cycles]
            assert t <= ev["args"]["start_cycle"] <= ev["args"]["finish_cycle"] <= t + layer.cycles
        t += layer.cycles
    assert t == result.totals["cycles"]
    assert sum(e["dur"] for e in _on(doc, "layers")) == pytest.approx(t / 1000.0, abs=1e-9)
    assert set(_tracks(doc)) == {"layers", "CDMA", "RDMA", "CSC/CMAC", "SDP", "PDP", "WDMA"}


def test_nvdla_units_are_placed_inside_the_layer_window():
    cfg = load_nvdla_config("nv_small")
    result = simulate_nvdla(_nvdla_graph(), cfg)
    conv1 = dataclasses.replace(result.layers[0], cycles=1000)
    # 1000-cycle layer, startup 100: CDMA fetches from 0; CMAC 800 cycles runs 100..900; a
    # 950-cycle SDP cannot start at 100 and still end by 1000, so it runs 50..1000; a WDMA term
    # beyond the window (1200) is drawn over the whole window and keeps its 1200 in args.
    conv1 = _with_units(conv1, {"startup": 100, "cdma": 300, "cmac": 800, "sdp": 950,
                                "wdma": 1200})
    doc = chrome_trace(dataclasses.replace(result, layers=(conv1,)))
    validate_trace(doc)
    got = {e["args"]["unit"]: (e["args"]["start_cycle"], e["args"]["finish_cycle"],
                               e["args"]["cycles"])
           for e in doc["traceEvents"] if e["ph"] == "X" and "unit" in e["args"]}
    assert got == {"CDMA": (0, 300, 300), "CSC/CMAC": (100, 900, 800),
                   "SDP": (50, 1000, 950), "WDMA": (0, 1000, 1200)}


def test_nvdla_without_units_shows_the_main_unit():
    result = simulate_nvdla(_nvdla_graph(), load_nvdla_config("nv_small"))
    layers = tuple(_with_units(layer, None) for layer in result.layers)
    doc = chrome_trace(dataclasses.replace(result, layers=layers))
    validate_trace(doc)
    got = [(e["args"]["layer"], e["args"]["unit"], e["args"]["cycles"])
           for e in doc["traceEvents"] if e["ph"] == "X" and "unit" in e["args"]]
    assert got == [(layer.name, {"conv": "CSC/CMAC", "pdp": "PDP", "sdp": "SDP"}[layer.engine],
                    layer.compute_cycles) for layer in result.layers]


# ------------------------------------------------------------------------------ bad inputs
def test_results_that_cannot_be_drawn_are_named(native):
    result, _ = native
    with pytest.raises(ValueError, match="result.execution = None"):
        chrome_trace(dataclasses.replace(result, execution=None))
    with pytest.raises(ValueError, match="result = dict: must be a RunResult"):
        chrome_trace({})


def _doc(*events, clock=1000.0) -> dict:
    return {"traceEvents": list(events), "displayTimeUnit": "ns",
            "otherData": {"clock_mhz": clock}}


def _x(name, ts, dur, tid=1, **args) -> dict:
    return {"name": name, "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}


def _region(name, lo, hi, id_=0) -> list[dict]:
    return [{"name": name, "cat": "layer", "ph": ph, "ts": t, "pid": 1, "tid": 1, "id": id_}
            for ph, t in (("b", lo), ("e", hi))]


def test_validator_accepts_a_hand_made_trace():
    b, e = _region("conv1", 0.0, 1.0)
    validate_trace(_doc({"name": "thread_name", "ph": "M", "pid": 1, "tid": 1,
                         "args": {"name": "array"}},
                        b, _x("outer", 0.0, 1.0, layer="conv1"),
                        _x("inner", 0.2, 0.3, layer="conv1"), _x("next", 1.0, 0.0), e,
                        _x("half a cycle late", 0.5, 0.5005, tid=2, layer="conv1")))


@pytest.mark.parametrize("events, message", [
    ([{"name": "a", "ph": "X", "ts": 0, "pid": 1, "tid": 1}],
     r"missing key\(s\) dur \(a 'X' event needs name, ph, ts, dur, pid, tid\)"),
    ([_x("a", 2.0, 1.0), _x("b", 1.0, 0.5)], "ts = 1.0 goes back in time on its track"),
    ([_x("a", 0.0, 2.0), _x("b", 1.0, 2.0)], r"\[1.0, 3.0\] partly overlaps traceEvents\[0\] 'a'"),
    ([*_region("conv1", 0.0, 1.0), _x("late", 0.5, 1.0, tid=2, layer="conv1")],
     r"lies outside the region of layer 'conv1' \[0.0, 1.0\]"),
    ([_x("orphan", 0.0, 1.0, layer="conv9")], "args.layer = 'conv9' has no region"),
    ([_region("conv1", 0.0, 1.0)[0]], r"async begin 'conv1' \(cat 'layer', id 0\) never ends"),
    ([_region("conv1", 0.0, 1.0)[1]], "async end without a matching begin"),
    ([{"name": "r", "ph": "b", "cat": "layer", "ts": 0, "pid": 1}], r"missing key\(s\) id"),
    ([_x("a", -1.0, 1.0)], "ts = -1.0: must be a finite number >= 0"),
    ([_x("a", 0.0, float("nan"))], "dur = nan: must be a finite number >= 0"),
    ([{"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {}}],
     "a thread_name metadata event needs args.name"),
    ([{"name": "a", "ph": "Q", "ts": 0, "pid": 1, "tid": 1}], "ph = 'Q': must be one of"),
])
def test_validator_rejects_bad_traces(events, message):
    with pytest.raises(ValueError, match=message):
        validate_trace(_doc(*events))


def test_validator_lists_every_problem():
    doc = _doc(_x("a", 2.0, 1.0), _x("b", 1.0, 0.5), _x("c", -1, 1))
    doc["displayTimeUnit"] = "s"
    with pytest.raises(ValueError) as info:
        validate_trace(doc)
    text = str(info.value)
    assert text.startswith("invalid trace: 3 problem(s):")
    assert "displayTimeUnit = 's'" in text and "goes back in time" in text and "ts = -1" in text


def test_region_tolerance_is_one_cycle_of_the_clock():
    # at 100 MHz a cycle is 0.01 us: 0.005 us late is rounding, 0.02 us is an error
    region = _region("conv1", 0.0, 1.0)
    validate_trace(_doc(*region, _x("ok", 0.5, 0.505, tid=2, layer="conv1"), clock=100.0))
    with pytest.raises(ValueError, match="tolerance 0.01 us"):
        validate_trace(_doc(*region, _x("late", 0.5, 0.52, tid=2, layer="conv1"), clock=100.0))
