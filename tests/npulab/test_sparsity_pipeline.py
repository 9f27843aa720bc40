"""N:M sparse weights through the chip pipeline (issue 27): the compiler stores them
compressed (values plus indices), the executor runs their tiles on the sparse PEs' timing, and
the metrics charge the MACs the PEs performed. Checked against the timing engine and the
compression closed form (hw.sparsity)."""

from __future__ import annotations

import numpy as np
import pytest

import npulab
from compiler.ir import Conv2d, Gemm, Graph
from compiler.options import CompileOptions
from hw.configfile import load_chip_config
from hw.energy import DEFAULT_TECHNOLOGY, load_technology
from hw.sparsity import array_nm, detect_nm, parse_nm, prune_n_m
from hw.systolic.timing import gemm_timing

M, N, K = 64, 128, 256


def _run(sparse_m, sparsity=None, graph=None):
    chip = load_chip_config(overrides=[f"array.sparse_m={sparse_m}"])
    graph = graph or Graph("g", (Gemm(name="g", m=M, n=N, k=K),))
    return npulab.simulate(graph, chip, options=CompileOptions(sparsity=sparsity)), chip


def test_two_four_gemm_halves_macs_and_filter_bytes():
    dense, _ = _run(0)
    sparse, chip = _run(4, "2:4")
    d, s = dense.totals, sparse.totals
    assert d["macs"] == s["macs"] == M * N * K                  # the network's MACs
    assert s["pe_busy_cycles"] * 2 == d["pe_busy_cycles"] == M * N * K   # the PEs' MACs
    # the weights arrive compressed: half the values with 2-bit indices, 5/8 of the dense
    # int8 bytes; activations and outputs move as before
    assert "sparse 2:4" in sparse.layers[0].tiling and "sparse" not in dense.layers[0].tiling
    assert d["dram_read_bytes"] == M * K + K * N
    assert s["dram_read_bytes"] == M * K + K * N * (8 + 2) // 2 // 8
    assert s["dram_write_bytes"] == d["dram_write_bytes"] == M * N
    # compute: the executor's cycles of the one tile are the timing engine's on K' = K/2
    timing = gemm_timing(chip.array, M, N, K, nm=(2, 4))
    assert s["filter_sram_reads"] == timing.filter_reads == d["filter_sram_reads"] // 2
    # the layer reports the folds the array ran (on K' = K/2) and the GEMM's own K
    layer = sparse.layers[0]
    assert layer.folds == timing.folds < dense.layers[0].folds and layer.gemm_k == K
    assert s["compute_cycles"] < d["compute_cycles"]
    # PE utilization counts performed MACs: at most 100 %, effective TOPS may pass the peak
    assert 0 < s["utilization_pct"] <= 100.0
    assert s["effective_tops"] > d["effective_tops"]
    # MAC energy: the MACs performed x the per-MAC figure
    tech = load_technology(DEFAULT_TECHNOLOGY)
    mac_j = sparse.metrics().network["energy_breakdown_j"]["mac"]
    assert mac_j == pytest.approx(M * N * K / 2 * tech.mac_pj("int8") * 1e-12, rel=1e-9)


def test_sparse_conv_runs_compressed_and_every_view_agrees():
    conv = Conv2d(name="c", in_h=14, in_w=14, in_channels=64, out_channels=64, kernel_h=3,
                  kernel_w=3, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1,
                  weight_nm=(2, 4))
    g = Graph("g", (conv,))
    sparse, _ = _run(4, None, g)         # the op's own weight_nm
    forced, _ = _run(4, "dense", g)      # --sparsity dense ignores it
    assert sparse.totals["pe_busy_cycles"] * 2 == forced.totals["pe_busy_cycles"] == conv.macs
    assert sparse.totals["cycles"] < forced.totals["cycles"]
    net = sparse.metrics().network
    assert net["compute_utilization"] * 100 == pytest.approx(sparse.totals["utilization_pct"])
    assert net["compute_utilization"] <= 1.0


def test_array_nm_maps_a_layer_onto_the_pes():
    assert array_nm((2, 4), 4) == (2, 4) and array_nm((1, 2), 4) == (2, 4)
    assert array_nm((2, 8), 4) == (2, 4) and array_nm((4, 8), 4) is None   # 4:4 is dense
    assert array_nm((2, 4), 8) == (4, 8) and array_nm((2, 4), 0) is None
    assert array_nm((2, 3), 4) is None
    assert parse_nm("2:4") == (2, 4) and parse_nm("dense") is None
    with pytest.raises(ValueError, match="must be 'N:M'"):
        CompileOptions(sparsity="half")
    with pytest.raises(ValueError, match="1 <= N <= M"):
        CompileOptions(sparsity="5:4")


def test_detect_nm_finds_the_sparsest_structure():
    rng = np.random.default_rng(0)
    w, _ = prune_n_m(rng.normal(size=(64, 16)), 1, 8, axis=0)
    assert detect_nm(w, axis=0) == (1, 8)
    w, _ = prune_n_m(rng.normal(size=(64, 16)), 2, 4, axis=0)
    assert detect_nm(w, axis=0) == (2, 4)
    assert detect_nm(rng.normal(size=(64, 16)), axis=0) is None


@pytest.mark.parametrize("sets, sparsity, message", [
    ([], "2:4", "array has dense PEs; set array.sparse_m = 4 for N:M sparse PEs"),
    (["array.sparse_m=2"], "4:8", "2-element sparse groups, which cannot skip any of 4:8; set "
                                  "array.sparse_m = 8"),
    (["array.sparse_m=4"], "4:4", "4:4 keeps every weight: it is dense (--sparsity dense)"),
    ([], "2:32", "group at most 16 weights: array.sparse_m = 16 runs it as 2:16"),
    ([], "20:32", "no sparse PE group of 2..16 weights skips any of 20:32"),
])
def test_sparsity_the_array_cannot_skip_is_a_one_line_error(capsys, sets, sparsity, message):
    from npulab.cli import main
    argv = ["run", "--gemm", "8,8,32", "--sparsity", sparsity, "-q"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--sparsity {sparsity}: " in err and message in err, err


def test_a_k_that_ends_inside_a_group_stores_the_whole_group():
    """K = 202 at 2:4: the last group of 4 holds 2 weights and 2 of padding, and runs whole on
    the array; its compressed weights are stored whole too: 102 kept values per column (of
    8 bits and a 2-bit index each), not 101."""
    g = Graph("g", (Gemm(name="g", m=M, n=N, k=202),))
    run, _ = _run(4, "2:4", g)
    assert run.totals["dram_read_bytes"] == M * 202 + N * 102 * (8 + 2) // 8


# ---- row-wise N:M: each output channel its own N ----------------------------------------------

def _program(graph, chip, options=None):
    from compiler.backends.systolic import compile_graph
    from hw.program import Kind
    prog = compile_graph(graph, chip, options or CompileOptions())
    c = prog.columns
    comp = np.flatnonzero(c["kind"] == Kind.COMPUTE)
    return prog, [(int(c["m"][i]), int(c["n"][i]), int(c["k"][i]), int(c["nm_n"][i]))
                  for i in comp]


def test_row_wise_layer_runs_each_n_on_its_own_timing_and_bytes():
    """Half the output channels 2:4, half 1:4 (row-wise): the compiler sorts them by N and
    cuts its N tile into a compute per N at column folds; each compute costs the timing
    engine's counters at its own N, and each segment's weights are stored at its own N."""
    chip = load_chip_config(overrides=["array.sparse_m=4"])
    rows = ((2, 64), (1, 64))
    g = Graph("g", (Gemm(name="g", m=M, n=N, k=K, weight_nm=(2, 4), weight_nm_rows=rows),))
    prog, computes = _program(g, chip)
    assert prog.layers[0].tiling.nm == (2, 4) and prog.layers[0].tiling.nm_rows == rows
    assert {c[3] for c in computes} == {1, 2}
    run = npulab.simulate(g, chip)
    busy = sum(gemm_timing(chip.array, m, n, k, nm=(nn, 4)).pe_busy_cycles
               for m, n, k, nn in computes)
    assert run.totals["pe_busy_cycles"] == busy == M * K * (64 * 2 + 64 * 1) // 4
    # weights: 64 channels of K/2 values and 64 of K/4, 8 bits plus a 2-bit index each
    assert run.totals["dram_read_bytes"] == M * K + (64 * K // 2 + 64 * K // 4) * 10 // 8
    assert "sparse rows 1-2:4" in run.layers[0].tiling
    # between every channel at 2:4 and every channel at 1:4
    two, _ = _run(4, "2:4")
    one, _ = _run(4, "1:4")
    assert (one.totals["cycles"] < run.totals["cycles"] < two.totals["cycles"])
    # --sparsity 1-2:4 deals the same mix over each layer's channels
    opt, _ = _run(4, "1-2:4")
    assert opt.totals == run.totals
    # one N for every channel is layer-wise N:M
    same = Gemm(name="g", m=M, n=N, k=K, weight_nm=(2, 4), weight_nm_rows=((2, 128),))
    assert same.weight_nm_rows is None


def test_row_wise_boundaries_inside_a_fold_run_that_fold_at_the_larger_n():
    """Channels 0..49 2:4 and 50..127 1:4 on a 32-column WS array: the fold holding channels
    32..63 runs at 2:4, so the cut is at 64; dense channels (4:4) run dense (nm_n = M)."""
    chip = load_chip_config(overrides=["array.sparse_m=4"])
    g = Graph("g", (Gemm(name="g", m=M, n=N, k=K, weight_nm=(2, 4),
                         weight_nm_rows=((2, 50), (1, 78))),))
    _, computes = _program(g, chip)
    assert [(n, nn) for _, n, _, nn in computes] == [(64, 2), (64, 1)]
    g = Graph("g", (Gemm(name="g", m=M, n=N, k=K, weight_nm=(4, 4),
                         weight_nm_rows=((4, 32), (1, 96))),))
    prog, computes = _program(g, chip)
    assert [(n, nn) for _, n, _, nn in computes] == [(32, 4), (96, 1)]
    assert prog.layers[0].tiling.nm == (1, 4)      # the sparse PEs' mode
    run = npulab.simulate(g, chip)
    assert run.totals["pe_busy_cycles"] == (
        gemm_timing(chip.array, M, 32, K).pe_busy_cycles
        + gemm_timing(chip.array, M, 96, K, nm=(1, 4)).pe_busy_cycles)
    # the dense segment is stored dense, the 1:4 one compressed
    assert run.totals["dram_read_bytes"] == M * K + 32 * K + 96 * K // 4 * 10 // 8


@pytest.mark.parametrize("dataflow", ["ws", "os", "is"])
def test_the_compiler_runs_the_register_models_row_wise_cuts(dataflow):
    """One N tile of every channel: the program's computes are hw.sparsity.row_tiles' runs
    (what run_gemm_rows runs on the register model), N for N."""
    from hw.sparsity import row_tiles
    chip = load_chip_config(overrides=["array.sparse_m=4", f"array.dataflow={dataflow}"])
    ns = [2] * 50 + [1] * 70 + [4] * 8
    mix = ((4, 8), (2, 50), (1, 70))
    g = Graph("g", (Gemm(name="g", m=M, n=N, k=K, weight_nm=(4, 4), weight_nm_rows=mix),))
    prog, computes = _program(g, chip)
    assert prog.layers[0].tiling.n_tile == N
    fold = 1 if dataflow == "is" else chip.array.cols
    _, tiles = row_tiles(ns, 4, fold)
    runs = [(size, 4 if nm is None else nm[0]) for _, size, nm in tiles]
    assert sorted({(n, nn) for _, n, _, nn in computes}) == sorted(set(runs))


def test_input_stationary_cuts_row_wise_tiles_exactly():
    """IS streams the output channels in time: the computes cut at the exact channel where N
    changes, and still equal the timing engine per compute."""
    chip = load_chip_config(overrides=["array.sparse_m=4", "array.dataflow=is"])
    g = Graph("g", (Gemm(name="g", m=M, n=N, k=K, weight_nm=(2, 4),
                         weight_nm_rows=((2, 50), (1, 78))),))
    _, computes = _program(g, chip)
    assert sorted({(n, nn) for _, n, _, nn in computes}) == [(50, 2), (78, 1)]
    run = npulab.simulate(g, chip)
    assert run.totals["pe_busy_cycles"] == sum(
        gemm_timing(chip.array, m, n, k, nm=(nn, 4)).pe_busy_cycles for m, n, k, nn in computes)


def test_row_wise_on_a_multicore_chip_deals_the_mix_to_every_core():
    """Four cores split the 1,024 output channels: each core's 256 get the layer's mix, half
    2:4 and half 1:4, so the PEs perform the mean of the two layer-wise runs' MACs."""
    chip = load_chip_config(overrides=["chip.cores=4", "array.sparse_m=4"])
    g = Graph("g", (Gemm(name="g", m=256, n=1024, k=1024),))
    runs = {sp: npulab.simulate(g, chip, options=CompileOptions(sparsity=sp))
            for sp in ("1:4", "1-2:4", "2:4")}
    busy = {sp: r.totals["pe_busy_cycles"] for sp, r in runs.items()}
    assert busy["1-2:4"] * 2 == busy["1:4"] + busy["2:4"]
    cycles = {sp: r.totals["cycles"] for sp, r in runs.items()}
    assert cycles["1:4"] < cycles["1-2:4"] < cycles["2:4"]


def test_row_wise_mistakes_are_one_line_errors(capsys):
    from compiler.ir import IRError
    from npulab.cli import main
    with pytest.raises(IRError, match="needs weight_nm"):
        Gemm(name="g", m=4, n=8, k=8, weight_nm_rows=((2, 4), (1, 4)))
    with pytest.raises(IRError, match="largest N is 3"):
        Gemm(name="g", m=4, n=8, k=8, weight_nm=(2, 4), weight_nm_rows=((3, 4), (1, 4)))
    with pytest.raises(IRError, match="each N in 1..4"):
        Gemm(name="g", m=4, n=8, k=8, weight_nm=(2, 4), weight_nm_rows=((2, 4), (0, 4)))
    with pytest.raises(IRError, match="counts 1001 output channels; the op has 8"):
        Gemm(name="g", m=4, n=8, k=8, weight_nm=(2, 4), weight_nm_rows=((2, 1000), (1, 1)))
    with pytest.raises(IRError, match="counts 17 output channels; the op has 16"):
        Conv2d(name="c", in_h=4, in_w=4, in_channels=8, out_channels=16, kernel_h=1,
               kernel_w=1, weight_nm=(2, 4), weight_nm_rows=((2, 8), (1, 9)))
    # a share of the op (a core's, a rank's) keeps the mix
    op = Gemm(name="g", m=4, n=8, k=8, weight_nm=(2, 4), weight_nm_rows=((2, 6), (1, 2)))
    assert op.rows_for(4) == {"weight_nm": (2, 4), "weight_nm_rows": ((2, 3), (1, 1))}
    assert main(["run", "--gemm", "8,8,32", "--sparsity", "2-1:4", "--set", "array.sparse_m=4",
                 "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--sparsity = '2-1:4'" in err and "LO < HI" in err, err
    assert main(["map", "--gemm", "8,8,32", "--sparsity", "1-2:4", "--set",
                 "array.sparse_m=4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "row-wise N:M" in err, err
    assert main(["run", "--gemm", "64,128,256", "--sparsity", "1-2:4", "--set",
                 "array.sparse_m=4", "-q", "--format", "json"]) == 0


def test_compute_timing_runs_the_layers_own_n_m_on_sparse_pes():
    """--timing compute (the array alone) times an op's own weight_nm on the chip's sparse
    PEs, as the timing engine does; SCALE-Sim's formulas stay dense."""
    chip = load_chip_config(overrides=["array.sparse_m=4"])
    g = Graph("g", (Gemm(name="g", m=M, n=N, k=K, weight_nm=(2, 4)),))
    run = npulab.simulate(g, chip, timing="compute")
    gold = gemm_timing(chip.array, M, N, K, nm=(2, 4))
    assert run.totals["cycles"] == gold.cycles and run.totals["pe_busy_cycles"] == M * N * K // 2
    assert run.layers[0].tiling == "sparse 2:4" and run.layers[0].utilization_pct <= 100
    dense = npulab.simulate(g, load_chip_config(), timing="compute")
    assert dense.totals["pe_busy_cycles"] == M * N * K
