"""``npulab run --op KIND:DIMS``: one op of any engine as the workload, and the per-kernel launch
overhead in ``latency_s`` (issue 23)."""

from __future__ import annotations

import json

import pytest

from compiler.frontends import zoo
from compiler.frontends.opspec import OP_KINDS, OpSpecError, parse_op
from compiler.ir import Graph, Norm, Pool, Softmax
from hw.configfile import load_chip_config
from npulab.cli import main
from npulab.simulate import simulate


def _json(capsys, *argv) -> dict:
    code = main(["run", *argv, "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_op_runs_one_vector_op_as_the_api_does(capsys):
    doc = _json(capsys, "--op", "softmax:96,128")
    [layer] = doc["layers"]
    assert layer["engine"] == "vector" and layer["op"] == "Softmax"
    op = Softmax(name="softmax 96,128", rows=96, cols=128)
    expected = simulate(Graph("softmax_96,128", (op,)), load_chip_config())
    assert layer["cycles"] == expected.layers[0].cycles == doc["totals"]["cycles"]
    assert doc["totals"]["layers_not_simulated"] == 0
    assert layer["actions"]["vector_by_op"]["exp"] == 96 * 128


def test_op_gemm_equals_the_gemm_option(capsys):
    a = _json(capsys, "--op", "gemm:64,48,32")
    b = _json(capsys, "--gemm", "64,48,32")
    assert a["totals"]["cycles"] == b["totals"]["cycles"]


@pytest.mark.parametrize("spec, op", [
    ("layernorm:128,768", Norm(name="layernorm 128,768", kind="layernorm", rows=128, cols=768)),
    ("maxpool:112x112x64-k3s2p1",
     Pool(name="maxpool 112x112x64-k3s2p1", kind="max", in_h=112, in_w=112, channels=64,
          kernel_h=3, kernel_w=3, stride_h=2, stride_w=2, pad_top=1, pad_bottom=1, pad_left=1,
          pad_right=1)),
])
def test_op_specs_build_the_ir_op(spec, op):
    assert parse_op(spec) == op


def test_every_op_kind_parses():
    dims = {"M,N,K": "8,8,8", "CONV (as --conv)": "8x8x4-4k3p1", "ROWS,COLS": "4,16",
            "ELEMENTS": "100", "HxWxC-kK[sS][pP]": "8x8x4-k2"}
    for kind, what in OP_KINDS.items():
        op = parse_op(f"{kind}:{dims[what]}")
        assert op.name.startswith(kind)


@pytest.mark.parametrize("argv, message", [
    (["--op", "softmax:12"], "--op softmax:12: expected softmax:ROWS,COLS, 2 integer(s) >= 1"),
    (["--op", "fft:1024"], "--op fft:1024: expected KIND:DIMS"),
    (["--op", "gelu:100", "--batch", "2"], "--batch/--image-size/--seq-len apply to zoo models, "
                                           "not --op"),
])
def test_bad_op_is_one_line(capsys, argv, message):
    code = main(["run", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_op_spec_error_is_an_ir_error():
    with pytest.raises(OpSpecError, match=r"--op gelu:0: expected gelu:ELEMENTS"):
        parse_op("gelu:0")


def test_launch_overhead_is_added_once_per_kernel(capsys):
    """``chip.launch_overhead_us``: a GPU-like device pays it per op (LLMCompass measured 12-45 µs
    per PyTorch op on an A100); the device's cycles do not change."""
    base = _json(capsys, "--model", "bert_base_layer", "--seq-len", "16")
    slow = _json(capsys, "--model", "bert_base_layer", "--seq-len", "16",
                 "--set", "chip.launch_overhead_us=45")
    t, s = base["totals"], slow["totals"]
    # one kernel per op, a fused group being one: 14 ops, 5 of them fused into 4 groups
    kernels = len(zoo.get("bert_base_layer", seq_len=16).ops) - t["layers_fused"]
    assert t["layers_fused"] == 5 and kernels == 9
    assert s["kernels"] == kernels == t["kernels"] and t["launch_overhead_s"] == 0
    assert s["cycles"] == t["cycles"]
    assert s["latency_s"] == pytest.approx(t["latency_s"] + kernels * 45e-6, rel=1e-12)
    assert s["launch_overhead_s"] == pytest.approx(kernels * 45e-6, rel=1e-12)
