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
from hw.packing import Packed, bits_of, elem_size, granule, nbytes, size_bytes
from hw.spec import chip_spec
from hw.systolic.timing import gemm_timing


def test_packing_counts_whole_bytes():
    assert [nbytes(201, b) for b in (1, 4, 8, 16)] == [26, 101, 201, 402]
    assert [granule(b) for b in (1, 4, 8, 16)] == [8, 2, 1, 1]
    assert [bits_of(elem_size(b)) for b in (1, 4, 8, 16)] == [1, 4, 8, 16]
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
    # utilization counts the MACs performed against every MAC slot, in the totals, the layer
    # and the metrics alike
    util = 100 * 64 * 64 * 512 / (w4a4.peak_macs_per_cycle * b.totals["cycles"])
    assert b.totals["utilization_pct"] == pytest.approx(util)
    assert b.layers[0].utilization_pct <= util + 1e-9
    assert 100 * b.metrics().network["compute_utilization"] == pytest.approx(util)
    assert 0 < b.totals["utilization_pct"] <= 100
    # the scratchpad ports read 4 bits per operand
    layer = b.layers[0]
    assert layer.actions.level("filter").read_bits == layer.filter_sram_reads * 4
    assert layer.actions.level("ifmap").read_bits == layer.ifmap_sram_reads * 4
    # the report does not read dual-MAC busy cycles as skipped MACs
    from npulab.report import to_table
    text = to_table(b, b.metrics())
    assert "skipped" not in text and "4.096 TOPS peak" in text


def test_a_depthwise_conv_whose_channels_share_bytes_moves_whole_pixels():
    """Depthwise at int4 and binary: each group has one channel, so groups share the bytes of
    every NHWC pixel. Every tile then takes all groups (whole pixels): the output is written
    at its packed size, the input read as packed pixels, each group's weights one pre-tiled
    block of whole bytes; on 4 cores each core's groups start on a byte."""
    conv = Conv2d(name="dw", in_h=16, in_w=16, in_channels=64, out_channels=64, kernel_h=3,
                  kernel_w=3, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1, groups=64)
    for precision, bits in (("int8", 8), ("int4", 4), ("binary", 1)):
        for cores in (1, 4):
            chip = load_chip_config(overrides=[f"array.precision={precision}",
                                               f"chip.cores={cores}"])
            run = npulab.simulate(Graph("g", (conv,)), chip)
            t = run.totals
            assert t["dram_write_bytes"] == 16 * 16 * nbytes(64, bits), (precision, cores)
            assert t["dram_read_bytes"] == 16 * 16 * nbytes(64, bits) + 64 * nbytes(9, bits)
            assert run.layers[0].tiling.startswith("direct")


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


def test_cores_split_packed_dimensions_at_whole_bytes():
    """On a multi-core chip each core's share of a packed innermost dimension (N, K) is whole
    bytes, so no two cores write one byte (compiler.backends.multicore)."""
    from compiler.backends.multicore import share_graph
    for precision, g in (("int4", 2), ("binary", 8)):
        chip = load_chip_config(overrides=["chip.cores=4", f"array.precision={precision}"])
        for m, n, k in ((16, 36, 2000), (64, 100, 64), (512, 1000, 30)):
            share, _ = share_graph(Graph("g", (Gemm(name="g", m=m, n=n, k=k),)), chip)
            op = share.ops[0]
            assert (op.n % g == 0 or op.n == n) and (op.k % g == 0 or op.k == k), (m, n, k)


def test_vector_ops_on_packed_rows_store_within_their_buffers():
    """A layer norm whose rows do not fit the buffers runs in chunks of whole bytes, each
    stored from the ofmap buffer it fits; a pool's channels are sized in bytes."""
    from compiler.backends.systolic import compile_graph
    from compiler.ir import Norm
    from hw.program import Kind
    for precision in ("int8", "int4", "binary"):
        chip = load_chip_config(overrides=[f"array.precision={precision}"] + [
            f"sram.{s}.capacity_kib=4" for s in ("ifmap", "filter", "ofmap")])
        norm = Norm(name="ln", rows=2, cols=40000, kind="layernorm", affine=False)
        prog = compile_graph(Graph("g", (norm,)), chip)
        c = prog.columns
        stores = [i for i in range(len(prog)) if c["kind"][i] == Kind.STORE]
        assert len(stores) > 2
        assert all(prog.transfer_bytes(i) <= chip.ofmap_sram.tile_capacity_bytes
                   for i in stores), precision
        # every element is stored once: the rows' packed bytes
        assert sum(prog.transfer_bytes(i) for i in stores) == 2 * nbytes(
            40000, chip.array.precision.bits)
    from npulab.cli import main
    assert main(["run", "--op", "maxpool:16x64x3-k3s1", "--set", "array.precision=int4",
                 "--set", "sram.ifmap.capacity_kib=0.625", "-q"]) == 0
