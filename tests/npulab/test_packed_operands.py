"""int4 and binary operands in a chip's memories, two and eight per byte (issue 27,
hw.packing): the bytes every transfer moves against the packing's closed form, the compute
against the timing engine, the ports' bits, the peak, and the one-line errors where a path
counts whole bytes. (The tiler's and the mapper's formulas against the emitted program and the
executor: tests/compiler/test_tiling.py and test_mapper.py, with packed precisions.)"""

from __future__ import annotations

import pytest

import npulab
from compiler.ir import Conv2d, Gemm, Graph
from hw.configfile import load_chip_config
from hw.packing import Packed, elem_size, fills_bytes, granule, nbytes, size_bytes, span
from hw.spec import chip_spec
from hw.systolic.timing import gemm_timing


def test_packing_counts_whole_bytes():
    assert [nbytes(201, b) for b in (1, 4, 8, 16)] == [26, 101, 201, 402]
    assert span(3, 4, 4) == (1, 3)          # operands 3..6 cover bytes 1..3
    assert span(2, 4, 4) == (1, 2)
    assert [granule(b) for b in (1, 4, 8, 16)] == [8, 2, 1, 1]
    assert fills_bytes(6, 4) and not fills_bytes(3, 4) and fills_bytes(16, 1)
    assert elem_size(8) == 1 and elem_size(16) == 2 and elem_size(4) == Packed(4)
    assert size_bytes(201, elem_size(4)) == 101 and size_bytes(201, 2) == 402
    # a packed size refuses arithmetic, so no byte count is silently truncated
    with pytest.raises(TypeError, match="hw.packing.size_bytes"):
        3 * Packed(4)
    with pytest.raises(TypeError):
        int(Packed(1))


@pytest.mark.parametrize("precision, bits", [("int4", 4), ("binary", 1)])
def test_a_gemm_moves_its_packed_bytes(precision, bits):
    """One tile: the input's rows of K = 201 and the output's of N = 100 each padded to whole
    bytes; the weights, pre-tiled, packed whole."""
    chip = load_chip_config(overrides=[f"array.precision={precision}"])
    m, n, k = 64, 100, 201
    run = npulab.simulate(Graph("g", (Gemm(name="g", m=m, n=n, k=k),)), chip)
    t = run.totals
    assert t["dram_read_bytes"] == m * nbytes(k, bits) + nbytes(k * n, bits)
    assert t["dram_write_bytes"] == m * nbytes(n, bits)
    # the layer's own bytes per element: its output and input, as the graph counts them
    assert run.layers[0].gemm_k == k


def test_dual_mac_int4_runs_the_timing_engine_and_doubles_the_peak():
    int8 = load_chip_config()
    w4a4 = load_chip_config(overrides=["array.precision=int4", "array.macs_per_pe=2"])
    g = Graph("g", (Gemm(name="g", m=64, n=64, k=512),))
    a, b = npulab.simulate(g, int8), npulab.simulate(g, w4a4)
    # one tile: the executor's compute is the timing engine's on the dual-MAC array
    gold = gemm_timing(w4a4.array, 64, 64, 512)
    assert b.totals["pe_busy_cycles"] == gold.pe_busy_cycles == 64 * 64 * 512 // 2
    assert b.totals["compute_cycles"] < a.totals["compute_cycles"]
    assert b.totals["peak_tops"] == 2 * a.totals["peak_tops"]
    assert b.totals["macs"] == a.totals["macs"] == 64 * 64 * 512
    # utilization counts MAC slots: every PE cycle busy does two MACs
    assert b.totals["utilization_pct"] == pytest.approx(
        100 * gold.pe_busy_cycles * 2 / (w4a4.peak_macs_per_cycle * b.totals["cycles"]))
    assert 0 < b.totals["utilization_pct"] <= 100
    # the scratchpad ports read 4 bits per operand
    layer = b.layers[0]
    assert layer.actions.level("filter").read_bits == layer.filter_sram_reads * 4
    assert layer.actions.level("ifmap").read_bits == layer.ifmap_sram_reads * 4
    # the report does not read dual-MAC busy cycles as skipped MACs
    from npulab.report import to_table
    text = to_table(b, b.metrics())
    assert "skipped" not in text and "4.096 TOPS peak" in text


def test_a_depthwise_conv_whose_channels_share_bytes_runs_im2col():
    """Depthwise at int4: each group has one channel, so two groups share a byte of every NHWC
    pixel; the conv runs im2col (each group's patches its own rows). At 8 bits it stays
    direct."""
    from compiler.backends.systolic import compile_graph
    from compiler.options import CompileOptions
    conv = Conv2d(name="dw", in_h=16, in_w=16, in_channels=32, out_channels=32, kernel_h=3,
                  kernel_w=3, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1, groups=32)
    g = Graph("g", (conv,))
    options = CompileOptions(conv_lowering="direct")
    for precision, lowering in (("int8", "direct"), ("int4", "im2col")):
        chip = load_chip_config(overrides=[f"array.precision={precision}"])
        assert compile_graph(g, chip, options).layers[0].tiling.lowering == lowering
    # a grouped conv whose groups fill whole bytes stays direct
    grouped = Conv2d(name="g4", in_h=16, in_w=16, in_channels=32, out_channels=32, kernel_h=3,
                     kernel_w=3, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1, groups=4)
    chip = load_chip_config(overrides=["array.precision=binary"])
    assert compile_graph(Graph("g", (grouped,)), chip, options).layers[0].tiling.lowering \
        == "direct"


def test_packed_chips_from_the_command_line(capsys):
    from npulab.cli import main
    assert main(["run", "--gemm", "64,64,256", "--precision", "int4", "-q"]) == 0
    assert main(["run", "--model", "resnet18", "--image-size", "32", "--precision", "binary",
                 "--set", "array.precision=binary", "--set", "array.macs_per_pe=8",
                 "-q"]) == 0
    capsys.readouterr()
    assert main(["run", "--gemm", "64,64,256", "--config", "nv_small", "--precision", "int4",
                 "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NVDLA build runs int8, int16, fp16" in err, err


def test_llm_runs_refuse_a_packed_array_in_one_line():
    from npulab.devices import SimulatedChip
    spec = chip_spec(load_chip_config(overrides=["array.precision=int4"]))
    with pytest.raises(ValueError, match="packs operands below a byte; LLM runs count whole "
                                         "bytes") as err:
        SimulatedChip(spec).element_bytes
    assert "\n" not in str(err.value)
