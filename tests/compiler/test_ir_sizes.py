"""Tensor sizes, MACs and the sample count as properties of the IR (issue 22): one home for what
the lowering, the step planner, the roofline and the reports read.

Expected numbers are written out by hand from each op's definition (NCHW convolution, ``a @ w``
GEMMs), never taken from the code under test.
"""

from __future__ import annotations

import pytest

from compiler.attention import transformer_block_ops
from compiler.frontends import zoo
from compiler.ir import Eltwise, Gemm, Graph, IRError, Move, Pool, conv2d
from compiler.parallel import get_model, plan_step


def test_gemm_sizes():
    op = Gemm(name="g", m=4, n=5, k=6, batch=3)
    assert (op.input_elements, op.weight_elements, op.output_elements) == (72, 90, 60)
    assert op.read_elements == 72 + 90
    assert op.macs == 3 * 4 * 5 * 6
    assert (op.input_bytes(2), op.weight_bytes(2), op.output_bytes(2)) == (144, 180, 120)
    assert op.traffic_bytes(2) == 2 * (72 + 90 + 60)


def test_grouped_conv_sizes():
    # 2 images of 8 channels, 10x10, 3x3 kernel, stride 2, pad 1, 4 groups -> 12 x 5x5 outputs
    op = conv2d("c", 10, 8, 12, 3, stride=2, padding=1, groups=4, batch=2)
    assert op.input_elements == 2 * 8 * 10 * 10
    assert op.weight_elements == 12 * (8 // 4) * 3 * 3
    assert op.output_elements == 2 * 12 * 5 * 5
    assert op.macs == 2 * 12 * 5 * 5 * (8 // 4) * 3 * 3
    assert op.input_bytes(1) == op.input_elements


def test_vector_op_sizes():
    pool = Pool(name="p", kind="max", in_h=8, in_w=8, channels=3, kernel_h=2, kernel_w=2,
                stride_h=2, stride_w=2, batch=2)
    assert (pool.input_elements, pool.weight_elements, pool.output_elements) == (384, 0, 96)
    assert (pool.macs, pool.read_elements) == (0, 384)
    add = Eltwise(name="a", op="add", elements=10, operands=2)
    assert (add.input_elements, add.read_elements, add.output_elements) == (10, 20, 10)
    assert add.traffic_bytes(4) == 4 * 30
    move = Move(name="m", kind="transpose", elements=7)
    assert (move.input_elements, move.output_elements, move.traffic_bytes(2)) == (7, 7, 28)


@pytest.mark.parametrize("name", ["alexnet", "resnet18", "mobilenetv2", "googlenet"])
def test_cnn_batch_is_images(name):
    size = 63 if name == "alexnet" else 32
    assert zoo.get(name, batch=3, image_size=size).batch == 3
    assert zoo.get(name, image_size=size).batch == 1


@pytest.mark.parametrize("name", ["bert_base_layer", "gpt2_block"])
def test_transformer_batch_is_sequences(name):
    # Not the batch * heads of the attention GEMMs, not the batch * seq_len tokens.
    graph = zoo.get(name, batch=2, seq_len=16)
    assert graph.batch == 2
    assert max(op.batch for op in graph if isinstance(op, Gemm)) == 2 * 12
    assert get_model("gpt2-small", micro_batch=4).block_graph().batch == 4


def test_batch_derived_from_the_ops_reading_the_input():
    # One-op workloads (--gemm / --conv with --batch): independent GEMMs, images.
    assert Graph("g", (Gemm(name="g", m=512, n=256, k=384, batch=2),)).batch == 2
    assert Graph("g", (Gemm(name="g", m=512, n=256, k=384),)).batch == 1
    assert Graph("c", (conv2d("c", 28, 64, 64, 3, batch=5),)).batch == 5
    # A hand-built block: its ops do not say how many sequences; 1 unless given.
    ops = tuple(transformer_block_ops("L", seq_len=4, d_model=8, heads=2, batch=3))
    assert Graph("t", ops).batch == 1
    assert Graph("t", ops, batch=3).batch == 3
    assert Graph("empty").batch == 1
    assert Graph("e", (Eltwise(name="e", op="relu", elements=4),)).batch == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_graph_rejects_a_bad_batch(bad):
    with pytest.raises(IRError, match=f"Graph 'g': batch = {bad!r}: must be an integer"):
        Graph("g", (Gemm(name="g", m=1, n=1, k=1),), batch=bad)


def test_step_planner_counts_the_graph_batch():
    # 2 replicas x 1 micro-batch x 2 sequences; the old rule counted 2 x 16 tokens per sample.
    report = plan_step(zoo.gpt2_block(batch=2, seq_len=16), "dp=2", 2, None,
                       lambda op: 1e-6, lambda *args: 0.0)
    assert report.samples_per_step == 2 * 2
    override = plan_step(zoo.resnet18(batch=2, image_size=32), "dp=2", 2, None,
                         lambda op: 1e-6, lambda *args: 0.0, graph_batch=5)
    assert override.samples_per_step == 2 * 5


def test_a_training_step_counts_a_transformer_blocks_tokens():
    # Graph.tokens: sequence positions per sample. The planner's tokens of a graph workload are
    # its samples times this (before it, gpt2_block trained at seq_len 64 reported as many
    # tokens as sequences).
    from compiler.frontends import zoo
    from compiler.parallel.step import plan_step
    from compiler.parallel.strategy import Strategy
    g = zoo.get("gpt2_block", seq_len=64, batch=2)
    assert (g.batch, g.tokens) == (2, 64)
    assert zoo.get("resnet18", image_size=16).tokens == 1
    r = plan_step(g, Strategy(dp=1, tp=1, pp=1, microbatches=1), 1, None, lambda op: 1e-6,
                  lambda kind, nbytes, groups: 0.0)
    assert r.samples_per_step == 2 and r.tokens_per_step == 128


def test_gemm_weights_stored_narrower_count_their_own_bytes():
    """Gemm.w_bits: a weight (or KV-cache) operand stored in 8 or 4 bits occupies and moves
    ceil(elements x bits / 8) bytes at any element width of the engine; A and the output keep
    the engine's width; w_bits at or above it changes nothing."""
    from compiler.ir import IRError
    g = Gemm(name="w", m=3, n=5, k=7, batch=2, w_bits=4)
    assert g.weight_bytes(2) == -(-2 * 7 * 5 * 4 // 8) == 35
    assert g.traffic_bytes(2) == 2 * 3 * 7 * 2 + 35 + 2 * 3 * 5 * 2
    assert Gemm(name="w", m=3, n=5, k=7, w_bits=16).weight_bytes(2) == 70
    assert Gemm(name="w", m=3, n=5, k=7, w_bits=8).weight_bytes(1) == 35
    for bad in (3, 2, True, 32):
        with pytest.raises(IRError, match=r"w_bits = .*: must be one of 4, 8, 16 or None"):
            Gemm(name="w", m=1, n=1, k=1, w_bits=bad)
    with pytest.raises(IRError, match=r"narrows stored weights or a KV cache"):
        Gemm(name="w", m=1, n=1, k=1, w_bits=8, inputs=("a", "b"))
    # the LLM fields show in the repr only when set
    assert repr(Gemm(name="w", m=1, n=2, k=3)) == ("Gemm(name='w', m=1, n=2, k=3, batch=1, "
                                                  "inputs=())")
    assert repr(Gemm(name="w", m=1, n=2, k=3, kv_cache=True, w_bits=8, w_in_l2=True)).endswith(
        "inputs=(), kv_cache=True, w_bits=8, w_in_l2=True)")
