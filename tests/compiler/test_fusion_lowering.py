"""Fused groups on the systolic chip (compiler.backends.systolic_fused): DRAM traffic against
closed forms, vector work against the functional model's counts, and the unfused run as the
reference for what fusion saves."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.attention import transformer_block_ops
from compiler.backends.systolic import compile_graph
from compiler.backends.systolic_fused import attention_plan
from compiler.frontends import zoo
from compiler.ir import Activation, Binary, Gemm, Graph, Norm, Softmax
from compiler.options import CompileOptions
from hw.chip import ChipConfig
from hw.executor import execute
from hw.memory.sram import SramConfig
from hw.systolic.config import ArrayConfig
from hw.vector.fused import attention, flash_attention
from npulab.simulate import simulate

CHIP = ChipConfig(model_input="dram", model_output="dram")
UNFUSED = CompileOptions(fusion=False)


def _attention_graph(heads: int, sq: int, sk: int, d: int, dv: int) -> Graph:
    ops = (Gemm(name="q", m=heads * sq, n=d, k=16), Gemm(name="k", m=heads * sk, n=d, k=16),
           Gemm(name="v", m=heads * sk, n=dv, k=16),
           Gemm(name="scores", batch=heads, m=sq, n=sk, k=d, inputs=("q", "k")),
           Softmax(name="softmax", rows=heads * sq, cols=sk, inputs=("scores",)),
           Gemm(name="context", batch=heads, m=sq, n=dv, k=sk, inputs=("softmax", "v")))
    return Graph("attn", ops)


def _layer(program, run, name):
    i = next(i for i, ls in enumerate(program.layers) if ls.name == name)
    return program.layers[i], run.layers[i]


@settings(max_examples=12, deadline=None)
@given(heads=st.integers(1, 3), sq=st.integers(1, 200), sk=st.integers(1, 200),
       d=st.sampled_from([8, 16, 64]), dv=st.sampled_from([8, 32, 64]),
       kib=st.sampled_from([16, 64, 512]))
def test_fused_attention_moves_q_k_v_and_o_only_as_the_closed_form_says(heads, sq, sk, d, dv,
                                                                       kib):
    """FlashAttention's DRAM traffic: Q read once, K and V once per query tile, O written
    once; no score or probability matrix (and no partial sum) reaches DRAM."""
    sram = SramConfig(capacity_kib=kib)
    chip = replace(CHIP, ifmap_sram=sram, filter_sram=sram, ofmap_sram=sram)
    graph = _attention_graph(heads, sq, sk, d, dv)
    program = compile_graph(graph, chip)
    run = execute(program, chip)
    ls, c = _layer(program, run, "scores")
    assert ls.fused == "attention:scores"
    plan = attention_plan(graph.ops[3], graph.ops[5], chip)
    reads, writes = plan.dram_bytes(8)   # int8 operands
    assert c["dram_ifmap_read_bytes"] + c["dram_filter_read_bytes"] == reads
    assert c["dram_psum_read_bytes"] == c["dram_psum_write_bytes"] == 0
    assert c["dram_ofmap_write_bytes"] == writes == heads * sq * dv
    assert reads == heads * (sq * d + -(-sq // plan.br) * sk * (d + dv))
    # the two GEMMs' MACs, all on the array, in the anchor's layer
    assert ls.macs == heads * sq * sk * (d + dv)
    for name in ("softmax", "context"):
        member, cm = _layer(program, run, name)
        assert member.first == member.last and cm["cycles"] == 0


@settings(max_examples=10, deadline=None)
@given(sq=st.integers(1, 96), sk=st.integers(1, 96), d=st.sampled_from([4, 8, 16]),
       kib=st.sampled_from([2, 8, 64]), seed=st.integers(0, 2**16))
def test_the_lowered_loop_is_the_functional_models_flash_attention(sq, sk, d, kib, seed):
    """The tiles the lowering runs are those of hw.vector.fused.flash_attention with the plan's
    block sizes: its result equals the unfused attention (fp32 rounding), and its exp and
    rescale counts are the vector engine's."""
    sram = SramConfig(capacity_kib=kib)
    chip = replace(CHIP, ifmap_sram=sram, filter_sram=sram, ofmap_sram=sram,
                   array=ArrayConfig(rows=8, cols=8))
    graph = _attention_graph(1, sq, sk, d, d)
    plan = attention_plan(graph.ops[3], graph.ops[5], chip)
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((n, d)).astype(np.float32) for n in (sq, sk, sk))
    out, stats = flash_attention(q, k, v, plan.br, plan.bc, return_stats=True)
    np.testing.assert_allclose(out, attention(q, k, v), rtol=2e-5, atol=2e-6)
    program = compile_graph(graph, chip)
    _, c = _layer(program, execute(program, chip), "scores")
    assert c["vector_exp_ops"] == stats.exp_calls
    # O rescaled (dv per row per later step), then divided by l once (rcp per row, mul each)
    rescale_o = stats.rescale_multiplies - sum(s.rescale_multiplies // (d + 1)
                                               for s in stats.steps)
    assert c["vector_mul_ops"] == rescale_o + sq * d
    assert c["vector_rcp_ops"] == sq


def test_fused_attention_saves_the_score_matrix_round_trip():
    graph = zoo.get("bert_base_layer", seq_len=256)
    fused, unfused = simulate(graph, CHIP), simulate(graph, CHIP, options=UNFUSED)
    f = next(x for x in fused.layers if x.name.endswith("attn.scores"))
    u = {x.name: x for x in unfused.layers}
    heads, s = 12, 256
    scores_bytes = heads * s * s          # int8 scores and probabilities
    # unfused: the scores are written, read by the softmax, its output written, read back
    u_att = [u[f.name.replace("scores", n)] for n in ("scores", "softmax", "context")]
    assert u_att[0].dram_write_bytes == scores_bytes
    assert u_att[1].dram_write_bytes == scores_bytes
    assert f.dram_write_bytes == heads * s * 64
    assert f.dram_read_bytes < sum(x.dram_read_bytes for x in u_att)
    assert fused.totals["dram_write_bytes"] < unfused.totals["dram_write_bytes"]
    assert fused.totals["kernels"] == unfused.totals["kernels"] - fused.totals["layers_fused"]


def _epilogue_graph(m, n, k):
    return Graph("epi", (
        Gemm(name="x", m=m, n=n, k=8),
        Gemm(name="fc", m=m, n=n, k=k, inputs=("x",)),
        Binary(name="bias", fn="add", elements=m * n, other_elements=n, inputs=("fc",)),
        Activation(name="act", fn="gelu", elements=m * n, inputs=("bias",)),
        Binary(name="res", fn="add", elements=m * n, inputs=("act", "x"))))


@pytest.mark.parametrize("m, n, k", [(64, 96, 32), (200, 48, 300)])
def test_an_epilogue_reads_the_residual_once_and_stores_only_its_result(m, n, k):
    graph = _epilogue_graph(m, n, k)
    big = SramConfig(capacity_kib=4096)    # the same tiling fused and unfused
    chip = replace(CHIP, ifmap_sram=big, filter_sram=big, ofmap_sram=big)
    fused = simulate(graph, chip)
    unfused = simulate(graph, chip, options=UNFUSED)
    assert [x.fused for x in fused.layers][1:] == ["epilogue:fc"] * 4
    fc = fused.layers[1]
    c = fused.execution.layers[1]
    assert c["dram_residual_read_bytes"] == m * n
    assert c["dram_ofmap_write_bytes"] == m * n            # only the residual sum
    assert c["vector_erf_ops"] == m * n                    # GELU on every element
    assert fc.macs == m * n * k
    # unfused, fc's output, the biased and the activated tensors each go to DRAM and back
    saved = sum(x.dram_read_bytes + x.dram_write_bytes for x in unfused.layers[1:]) - (
        fc.dram_read_bytes + fc.dram_write_bytes)
    assert saved == 3 * 2 * m * n        # the bias row is read in both
    assert fused.totals["cycles"] < unfused.totals["cycles"]


def test_add_norm_reads_both_addends_once_and_stores_the_sum_only_when_read_again():
    rows, cols = 96, 256
    ops = [Gemm(name="a", m=rows, n=cols, k=8), Gemm(name="b", m=rows, n=cols, k=8),
           Binary(name="add", fn="add", elements=rows * cols, inputs=("a", "b")),
           Norm(name="ln", kind="layernorm", rows=rows, cols=cols, inputs=("add",))]
    for also_read in (False, True):
        extra = [Gemm(name="c", m=rows, n=cols, k=cols, inputs=("add",))] if also_read else []
        graph = Graph("an", tuple(ops + extra))
        run = simulate(graph, CHIP)
        layer = run.layers[2]
        assert layer.fused == "add_norm:add" and run.layers[3].engine == "fused"
        assert layer.dram_read_bytes == 2 * rows * cols + 2 * cols     # + scale and shift
        assert layer.dram_write_bytes == rows * cols * (2 if also_read else 1)
        unfused = simulate(graph, CHIP, options=UNFUSED)
        assert (unfused.layers[2].dram_write_bytes + unfused.layers[3].dram_read_bytes
                - 2 * cols == 2 * rows * cols)


def test_no_fusion_on_an_ideal_vector_engine_or_when_asked():
    graph = zoo.get("bert_base_layer", seq_len=32)
    ideal = replace(CHIP, vector=replace(CHIP.vector, ideal=True))
    assert not any(ls.fused for ls in compile_graph(graph, ideal).layers)
    assert not any(ls.fused for ls in compile_graph(graph, CHIP, UNFUSED).layers)
    assert {ls.fused.split(":")[0] for ls in compile_graph(graph, CHIP).layers
            if ls.fused} == {"attention", "add_norm", "epilogue"}
    # a tuple of patterns fuses only those
    only = CompileOptions(fusion=("epilogue",))
    assert {ls.fused.split(":")[0] for ls in compile_graph(graph, CHIP, only).layers
            if ls.fused} == {"epilogue"}
    with pytest.raises(ValueError, match="fusion = .'fast',.: must be true, false or a tuple"):
        CompileOptions(fusion=("fast",))


def test_a_dropout_on_the_probabilities_runs_in_the_softmax_pass():
    """GPT-2 training's attention dropout joins the fused attention: its compare, select and
    scale run on every probability, inside the online softmax's tiles."""
    seq, heads = 64, 4
    ops = transformer_block_ops("h", seq_len=seq, d_model=64, heads=heads, pre_norm=True,
                                attn_dropout=True)
    graph = Graph("gpt2", tuple(ops))
    program = compile_graph(graph, CHIP)
    run = execute(program, CHIP)
    ls, c = _layer(program, run, "h.attn.scores")
    assert ls.fused == "attention:h.attn.scores"
    assert _layer(program, run, "h.attn.dropout")[0].fused == ls.fused
    assert c["vector_select_ops"] == c["vector_cmp_ops"] == heads * seq * seq
    unfused = execute(compile_graph(graph, CHIP, UNFUSED), CHIP)
    drop = next(i for i, op in enumerate(graph.ops) if op.name == "h.attn.dropout")
    assert unfused.layers[drop]["vector_select_ops"] == heads * seq * seq


def test_a_residual_add_right_after_a_conv_preloads_the_accumulators():
    """ResNet's ``conv -> add``: the residual tile initialises the accumulators (C = A B + D, as
    Gemmini preloads D), so the conv keeps the tiling it has alone, the vector engine adds
    nothing, and the residual is read from DRAM once."""
    from compiler.ir import conv2d
    ops = (conv2d("x", 14, 32, 64, 1), conv2d("c", 14, 64, 64, 3, padding=1, inputs=("x",)),
           Binary(name="add", fn="add", elements=14 * 14 * 64, inputs=("c", "x")))
    graph = Graph("res", ops)
    program = compile_graph(graph, CHIP)
    run = execute(program, CHIP)
    alone = compile_graph(graph, CHIP, UNFUSED)
    assert program.layers[1].fused == "epilogue:c"
    assert program.layers[1].tiling == alone.layers[1].tiling
    c = run.layers[1]
    assert c["dram_residual_read_bytes"] == c["ofmap_sram_fill_bytes"] == 14 * 14 * 64
    assert c["vectors"] == 0 and c["vector_add_ops"] == 0
    assert c["dram_ofmap_write_bytes"] == 14 * 14 * 64
    unfused = execute(alone, CHIP)
    assert unfused.layers[2]["vector_add_ops"] == 14 * 14 * 64
    assert run.cycles < unfused.cycles
