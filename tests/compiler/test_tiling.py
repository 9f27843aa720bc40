"""The tiler: footprints fit, its traffic formula equals what the emitted program moves, more
SRAM never means more traffic, traffic never below compulsory."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.backends.systolic import compile_graph
from compiler.backends.systolic_tiling import TilingError, choose_tiling
from compiler.ir import Conv2d, Gemm, Graph
from compiler.options import ORDERS, CompileOptions
from hw.chip import ChipConfig
from hw.executor import execute
from hw.memory.dma import DmaConfig
from hw.memory.dram import dram_preset
from hw.memory.link import HostLinkConfig
from hw.memory.sram import SramConfig
from hw.program import Kind, Operand
from hw.systolic.config import ArrayConfig

IDEAL = dict(dram=dram_preset("ideal"), host_link=HostLinkConfig(ideal=True),
             dma=DmaConfig(descriptor_setup_cycles=0), model_input="dram", model_output="dram")


def _chip(kib_a: float, kib_b: float, kib_c: float, dataflow="ws", rows=8, cols=8, **kw) -> ChipConfig:
    return ChipConfig(array=ArrayConfig(rows=rows, cols=cols, dataflow=dataflow),
                      ifmap_sram=SramConfig(capacity_kib=kib_a),
                      filter_sram=SramConfig(capacity_kib=kib_b),
                      ofmap_sram=SramConfig(capacity_kib=kib_c), **{**IDEAL, **kw})


def _layer_bytes(program, result, index=0) -> int:
    c = result.layers[index]
    return sum(c[k] for k in ("dram_ifmap_read_bytes", "dram_filter_read_bytes",
                              "dram_psum_read_bytes", "dram_ofmap_write_bytes",
                              "dram_psum_write_bytes"))


gemms = st.builds(lambda m, n, k, b: Gemm(name="g", m=m, n=n, k=k, batch=b),
                  st.integers(1, 300), st.integers(1, 300), st.integers(1, 300), st.integers(1, 3))
convs = st.builds(
    lambda hw, cin, cout, kern, stride, pad, groups, batch: Conv2d(
        name="c", in_h=hw, in_w=hw, in_channels=cin * groups, out_channels=cout * groups,
        kernel_h=kern, kernel_w=kern, stride_h=stride, stride_w=stride, pad_top=pad,
        pad_bottom=pad, pad_left=pad, pad_right=pad, groups=groups, batch=batch),
    st.integers(7, 30), st.integers(1, 40), st.integers(1, 40), st.sampled_from([1, 3]),
    st.integers(1, 2), st.integers(0, 1), st.sampled_from([1, 1, 2]), st.integers(1, 2))
ops = st.one_of(gemms, convs)
kibs = st.sampled_from([2, 4, 8, 16, 64])


def _run_and_check_bytes(op, chip, lowering: str, order):
    """Compile and run ``op`` alone on ``chip``; the tiler's reuse formula is what the loop nest
    really moves. ``(program, execution, tile problem)``, or None when no tiling fits (a
    one-line error naming the op)."""
    from compiler.backends.systolic import tile_problem
    options = CompileOptions(conv_lowering=lowering, loop_order=order, keep_on_chip=False)
    try:
        program = compile_graph(Graph("t", (op,)), chip, options)
    except TilingError as exc:
        assert "no tiling fits" in str(exc) and op.name in str(exc)
        return None
    result = execute(program, chip)
    p = tile_problem(op, chip, options)
    assert _layer_bytes(program, result) == choose_tiling(p, chip, order=order).dram_bytes
    return program, result, p


@settings(max_examples=60, deadline=None)
@given(op=ops, a=kibs, b=kibs, c=kibs, dataflow=st.sampled_from(["os", "ws", "is"]),
       lowering=st.sampled_from(["direct", "im2col"]), order=st.sampled_from([None, *ORDERS]))
def test_emitted_program_moves_exactly_the_tilers_bytes_and_fits(op, a, b, c, dataflow, lowering, order):
    chip = _chip(a, b, c, dataflow)
    ran = _run_and_check_bytes(op, chip, lowering, order)
    if ran is None:
        return
    program, result, _ = ran
    layer = program.layers[0]
    tiling = layer.tiling
    # Every tile fits one buffer of its scratchpad.
    eb, ab = 1, 4
    for i in range(layer.first, layer.last):
        if program.kind[i] == Kind.LOAD and program.operand[i] == Operand.IFMAP:
            assert program.transfer_bytes(i) <= chip.ifmap_sram.tile_capacity_bytes
        if program.kind[i] == Kind.LOAD and program.operand[i] == Operand.FILTER:
            assert program.transfer_bytes(i) <= chip.filter_sram.tile_capacity_bytes
        if program.kind[i] == Kind.COMPUTE:
            c_bytes = program.count[i] * program.m[i] * program.n[i] * ab
            assert c_bytes <= chip.ofmap_sram.tile_capacity_bytes
            assert program.k[i] * program.n[i] * program.count[i] * eb <= chip.filter_sram.tile_capacity_bytes
    # Never below compulsory traffic: weights, input and output once each.
    shape = op.gemm_shape()
    weights = shape.count * shape.k * shape.n * eb
    out = shape.count * shape.m * shape.n * eb
    assert result.layers[0]["dram_filter_read_bytes"] >= weights
    assert result.layers[0]["dram_ofmap_write_bytes"] == out
    if isinstance(op, Conv2d) and lowering == "direct":
        # Every input row some output reads, once at least (strided kernels may skip rows).
        touched = {r * op.stride_h - op.pad_top + i * op.dilation_h
                   for r in range(op.out_h) for i in range(op.kernel_h)}
        rows = len([y for y in touched if 0 <= y < op.in_h])
        needed = op.batch * rows * op.in_w * op.in_channels * eb
        assert result.layers[0]["dram_ifmap_read_bytes"] >= needed
    else:
        assert result.layers[0]["dram_ifmap_read_bytes"] >= shape.count * shape.m * shape.k * eb
    assert tiling.tiles == result.layers[0]["computes"]


@settings(max_examples=40, deadline=None)
@given(op=ops, sizes=st.lists(kibs, min_size=3, max_size=3), grow=st.sampled_from([0, 1, 2]),
       order=st.sampled_from(ORDERS), dataflow=st.sampled_from(["os", "ws", "is"]))
def test_more_sram_never_more_traffic_for_a_fixed_order(op, sizes, grow, order, dataflow):
    chip = _chip(*sizes, dataflow)
    bigger = list(sizes)
    bigger[grow] *= 4
    chip2 = _chip(*bigger, dataflow)
    options = CompileOptions(loop_order=order, keep_on_chip=False, objective="traffic")
    from compiler.backends.systolic import tile_problem
    try:
        small = choose_tiling(tile_problem(op, chip, options), chip, order=order, objective="traffic")
    except TilingError:
        return
    large = choose_tiling(tile_problem(op, chip2, options), chip2, order=order, objective="traffic")
    assert large.dram_bytes <= small.dram_bytes


def test_unlimited_sram_moves_each_operand_once():
    op = Gemm(name="fc", m=64, n=300, k=500)
    chip = _chip(4096, 4096, 4096)
    program = compile_graph(Graph("t", (op,)), chip, CompileOptions(keep_on_chip=False))
    result = execute(program, chip)
    assert _layer_bytes(program, result) == 64 * 500 + 500 * 300 + 64 * 300
    assert program.layers[0].tiling.tiles == 1


def test_k_outer_order_spills_partial_sums_at_accumulator_width():
    op = Gemm(name="fc", m=64, n=64, k=512)
    chip = _chip(8, 8, 8)
    program = compile_graph(Graph("t", (op,)), chip,
                            CompileOptions(loop_order="kmn", keep_on_chip=False))
    t = program.layers[0].tiling
    result = execute(program, chip).layers[0]
    k_trips = -(-512 // t.k_tile)
    tiles_mn = -(-64 // t.m_tile) * -(-64 // t.n_tile)
    if k_trips > 1 and tiles_mn > 1:
        assert result["dram_psum_write_bytes"] == (k_trips - 1) * 64 * 64 * 4
        assert result["dram_psum_read_bytes"] == (k_trips - 1) * 64 * 64 * 4
    else:
        pytest.fail(f"test shape did not force K tiling: {t}")
    kinner = execute(compile_graph(Graph("t", (op,)), chip,
                                   CompileOptions(loop_order="mnk", keep_on_chip=False)), chip)
    assert kinner.layers[0]["dram_psum_write_bytes"] == 0


def test_a_tiny_buffer_split_is_named_in_the_error():
    """buffer_split = 1e-9 leaves a 0-byte ping buffer: the error names the key and value."""
    op = Gemm(name="g", m=64, n=64, k=64)
    chip = replace(_chip(64, 64, 64), ifmap_sram=SramConfig(capacity_kib=64, buffer_split=1e-9))
    with pytest.raises(TilingError) as exc:
        compile_graph(Graph("t", (op,)), chip)
    msg = str(exc.value)
    assert msg.startswith("g: no tiling fits the scratchpads (one buffer: ifmap 0 B, filter "
                          "32768 B, ofmap 32768 B); ifmap scratchpad needs at least ")
    assert ("one buffer holds min(sram.ifmap.buffer_split = 1e-09, 1 - 1e-09) of "
            "sram.ifmap.capacity_kib = 64; enlarge sram.*.capacity_kib or bring "
            "sram.*.buffer_split nearer 0.5") in msg
    big = Conv2d(name="conv_big", in_h=512, in_w=512, in_channels=64, out_channels=64,
                 kernel_h=3, kernel_w=3)
    single = replace(_chip(64, 64, 64), ifmap_sram=SramConfig(capacity_kib=0.25,
                                                              double_buffer=False))
    with pytest.raises(TilingError, match=r"needs at least 1536 bytes per tile, one buffer is "
                                          r"sram\.ifmap\.capacity_kib = 0\.25 \(double_buffer = "
                                          r"false\); enlarge sram\.\*\.capacity_kib$"):
        compile_graph(Graph("t", (big,)), single)


def test_too_small_sram_is_a_clear_error():
    op = Conv2d(name="conv_big", in_h=512, in_w=512, in_channels=64, out_channels=64,
                kernel_h=3, kernel_w=3)
    chip = replace(_chip(64, 64, 64), ifmap_sram=SramConfig(capacity_kib=0.25))
    with pytest.raises(TilingError, match=r"conv_big: no tiling fits.*ifmap scratchpad needs "
                                          r"at least 1536 bytes.*capacity_kib"):
        compile_graph(Graph("t", (op,)), chip)


def test_tiling_is_deterministic():
    op = Conv2d(name="c", in_h=56, in_w=56, in_channels=64, out_channels=128, kernel_h=3,
                kernel_w=3, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1)
    chip = _chip(32, 32, 32)
    a = compile_graph(Graph("t", (op,)), chip)
    b = compile_graph(Graph("t", (op,)), chip)
    assert a.layers[0].tiling == b.layers[0].tiling
    assert all((a.columns[k] == b.columns[k]).all() for k in a.columns)


@settings(max_examples=40, deadline=None)
@given(op=ops, a=kibs, b=kibs, c=kibs, dataflow=st.sampled_from(["os", "ws", "is"]),
       lowering=st.sampled_from(["direct", "im2col"]), order=st.sampled_from([None, *ORDERS]),
       precision=st.sampled_from(["int4", "binary"]))
def test_packed_operands_move_exactly_the_tilers_bytes(op, a, b, c, dataflow, lowering, order,
                                                      precision):
    """int4 and binary operands packed two and eight per byte (hw.packing): the tiler's bytes
    are what the program moves, every tile cuts a packed row at a whole byte, and the output
    is written once: its rows (pixels) of packed operands padded to whole bytes."""
    from hw.packing import granule, nbytes
    chip = _chip(a, b, c, dataflow)
    chip = replace(chip, array=replace(chip.array, precision=precision, acc_bits=None))
    bits = chip.array.precision.bits
    ran = _run_and_check_bytes(op, chip, lowering, order)
    if ran is None:
        return
    program, result, p = ran
    t = program.layers[0].tiling
    g = granule(bits)
    k_units = t.k_tile // p.k_unit
    assert k_units % g == 0 or k_units >= p.k_units
    assert t.n_tile % g == 0 or t.n_tile >= p.n
    shape = op.gemm_shape()
    if p.lowering == "direct":
        out = shape.m * nbytes(shape.count * shape.n, bits)
    else:
        out = shape.count * shape.m * nbytes(shape.n, bits)
    assert result.layers[0]["dram_ofmap_write_bytes"] == out
    assert result.layers[0]["dram_filter_read_bytes"] >= nbytes(shape.count * shape.k
                                                                * shape.n, bits)
    for i in range(program.layers[0].first, program.layers[0].last):
        if program.kind[i] == Kind.LOAD and program.operand[i] == Operand.IFMAP:
            assert program.transfer_bytes(i) <= chip.ifmap_sram.tile_capacity_bytes
        if program.kind[i] == Kind.LOAD and program.operand[i] == Operand.FILTER:
            assert program.transfer_bytes(i) <= chip.filter_sram.tile_capacity_bytes
