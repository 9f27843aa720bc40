"""Unstructured-sparse weight storage through the chip pipeline (issue 27: "Unstructured
sparsity as storage formats (bitmask, CSR, CSC, blocked ELLPACK) that change bytes and
energy"): the weights are kept compressed in DRAM and the filter scratchpad, decompressed at
its port; the array multiplies every weight. Checked against hw.sparsity's closed forms, which
tests/hw/test_sparsity.py holds to real encodings."""

from __future__ import annotations

import numpy as np
import pytest

import npulab
from compiler.ir import Conv2d, Gemm, Graph, IRError
from compiler.options import CompileOptions, parse_weight_format
from hw.configfile import load_chip_config
from hw.sparsity import encode, encoded_bytes, ellpack_tiles_expected, stored_weight_bytes

M, N, K = 64, 128, 256


def _run(fmt, density=None, op=None):
    op = op or Gemm(name="g", m=M, n=N, k=K, weight_density=density)
    return npulab.simulate(Graph("g", (op,)), load_chip_config(),
                           options=CompileOptions(weight_format=fmt))


@pytest.mark.parametrize("fmt", ["bitmask", "csr", "csc", "ellpack"])
def test_formats_change_weight_bytes_not_macs(fmt):
    dense = _run(None)
    sparse = _run(f"{fmt}:0.25")
    d, s = dense.totals, sparse.totals
    stored = stored_weight_bytes(fmt, K, N, 0.25, 8)
    # the weights move as stored, once (one tile); activations and outputs as before
    assert d["dram_read_bytes"] == M * K + K * N
    assert s["dram_read_bytes"] == M * K + stored
    assert s["dram_write_bytes"] == d["dram_write_bytes"]
    # the array multiplies every weight: same MACs, PE-cycles and compute cycles
    for key in ("macs", "pe_busy_cycles", "compute_cycles", "filter_sram_reads"):
        assert s[key] == d[key], key
    # the filter port reads the stored bits of every element it delivers
    layer = sparse.layers[0]
    assert layer.actions.sram["filter"].read_bits == -(-layer.filter_sram_reads * 8 * stored
                                                       // (K * N))
    assert layer.tiling.endswith(f"weights {fmt}")
    assert layer.actions.sram["filter"].write_bits == 8 * stored      # filled as stored


def test_closed_forms_equal_real_encodings_of_the_transposed_weight():
    """stored_weight_bytes keeps a K x N weight as N x K (out x in) in the format: equal to
    encoding a matrix of exactly that many nonzeros."""
    rng = np.random.default_rng(1)
    k, n = 96, 40
    w = np.zeros(k * n, np.int8)
    nnz = round(0.3 * k * n)
    w[rng.choice(k * n, nnz, replace=False)] = rng.integers(1, 100, nnz)
    w = w.reshape(k, n)
    for fmt in ("bitmask", "csr", "csc", "dense"):
        assert stored_weight_bytes(fmt, k, n, 0.3, 8) == encoded_bytes(encode(w.T, fmt)), fmt


def test_ellpack_tiles_expected_is_the_mean_of_random_sparsity():
    rng = np.random.default_rng(2)
    rows, cols, d = 512, 512, 0.05
    w = rng.random((rows, cols)) < d
    tiles = w.reshape(rows // 4, 4, cols // 4, 4).any(axis=(1, 3)).sum(axis=1)
    want = ellpack_tiles_expected(cols, d)
    assert want == np.ceil(128 * (1 - 0.95 ** 16))
    assert abs(tiles.mean() - want) < 1.5 and tiles.max() >= want
    assert ellpack_tiles_expected(cols, 1.0) == 128 and ellpack_tiles_expected(cols, 0.0) == 0


def test_the_models_own_density_and_the_option_density():
    conv = Conv2d(name="c", in_h=14, in_w=14, in_channels=64, out_channels=64, kernel_h=3,
                  kernel_w=3, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1,
                  weight_density=0.1)
    own = _run("bitmask", op=conv)            # the op's own density
    given = _run("bitmask:0.5", op=conv)       # the option's wins
    dense = _run("dense", op=conv)
    k, n = 64 * 9, 64
    w_own = stored_weight_bytes("bitmask", k, n, 0.1, 8)
    w_given = stored_weight_bytes("bitmask", k, n, 0.5, 8)
    rd = [r.totals["dram_read_bytes"] for r in (own, given, dense)]
    assert rd[2] - rd[0] == k * n - w_own and rd[2] - rd[1] == k * n - w_given
    opts = CompileOptions(weight_format="csr")
    assert opts.weight_storage(Gemm(name="g", m=1, n=1, k=1)) == ("csr", 1.0)
    assert CompileOptions(weight_format="dense").weight_storage(conv) is None


def test_n_m_layers_keep_their_format_and_activation_operands_are_not_weights():
    chip = load_chip_config(overrides=["array.sparse_m=4"])
    g = Graph("g", (Gemm(name="g", m=M, n=N, k=K, weight_nm=(2, 4), weight_density=0.5),
                    Gemm(name="a", m=M, n=M, k=N, inputs=("g", "g"))))
    run = npulab.simulate(g, chip, options=CompileOptions(weight_format="csr"))
    assert run.layers[0].tiling.endswith("sparse 2:4")       # N:M compressed, not CSR
    assert "weights" not in run.layers[1].tiling             # a product of two activations


def test_bad_formats_are_one_line_errors():
    for spec, msg in [("coo", "format 'coo' must be one of dense, bitmask"),
                      ("nm", r"N:M structured sparsity is --sparsity"),
                      ("csr:1.5", "density '1.5' must be a fraction"),
                      ("csr:x", "density 'x' must be a fraction")]:
        with pytest.raises(ValueError, match=msg):
            CompileOptions(weight_format=spec)
    assert parse_weight_format("ellpack:0.125") == ("ellpack", 0.125)
    with pytest.raises(IRError, match="weight_density = -0.1: must be a ratio in 0..1"):
        Gemm(name="g", m=1, n=1, k=1, weight_density=-0.1)
    with pytest.raises(IRError, match="describes stored weights"):
        Gemm(name="g", m=1, n=1, k=1, inputs=("a", "b"), weight_density=0.5)


def test_weight_bits_store_weights_narrower_for_every_weight_layer():
    """--weight-bits 4 on an int8 array (W4A8): every conv's and linear layer's weights take
    half the bytes, in any lowering and beside a sparse format; MACs do not change."""
    conv = Conv2d(name="c", in_h=14, in_w=14, in_channels=64, out_channels=64, kernel_h=3,
                  kernel_w=3, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1)
    fc = Gemm(name="g", m=M, n=N, k=K)
    chip = load_chip_config()
    for op in (conv, fc):
        for lowering in ("direct", "im2col"):
            runs = [npulab.simulate(Graph("g", (op,)), chip, options=CompileOptions(
                weight_bits=bits, conv_lowering=lowering, keep_on_chip=False))
                for bits in (None, 4, 8)]
            rd = [r.totals["dram_read_bytes"] for r in runs]
            w = op.weight_elements
            assert rd[0] - rd[1] == w // 2 and rd[2] == rd[0], (op.name, lowering)
            assert runs[1].totals["macs"] == runs[0].totals["macs"]
    # with a sparse format the values take 4 bits: bitmask = nnz x 4 bits + 1 bit each
    both = npulab.simulate(Graph("g", (fc,)), chip, options=CompileOptions(
        weight_bits=4, weight_format="bitmask:0.5"))
    assert both.totals["dram_read_bytes"] == M * K + stored_weight_bytes("bitmask", K, N, 0.5, 4)
    assert stored_weight_bytes("bitmask", K, N, 0.5, 4) == K * N // 4 + K * N // 8
    # the IR's own w_bits on a conv, and the option on a product of activations (ignored)
    assert Conv2d(name="c", in_h=4, in_w=4, in_channels=8, out_channels=8, kernel_h=1,
                  kernel_w=1, w_bits=4).weight_bytes(1) == 32
    opts = CompileOptions(weight_bits=4)
    assert opts.w_bits_of(Gemm(name="a", m=4, n=4, k=4, inputs=("x", "y"))) is None
    with pytest.raises(ValueError, match="weight_bits = 3: must be 4, 8 or 16"):
        CompileOptions(weight_bits=3)
    with pytest.raises(IRError, match="w_bits = 5: must be one of 4, 8, 16"):
        Conv2d(name="c", in_h=4, in_w=4, in_channels=8, out_channels=8, kernel_h=1,
               kernel_w=1, w_bits=5)


def test_weight_bits_no_narrower_than_the_array_is_a_one_line_error(capsys):
    from npulab.cli import main
    assert main(["run", "--gemm", "8,8,8", "--weight-bits", "8", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--weight-bits 8: npulab-default's array takes 8-bit int8 " \
        "operands; weight-only storage must be narrower" in err
    assert main(["run", "--gemm", "8,8,8", "--weight-bits", "8", "--set",
                 "array.precision=fp16", "-q"]) == 0          # W8A16
