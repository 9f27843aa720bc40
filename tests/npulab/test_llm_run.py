"""LLM inference on simulated chips (npulab.llm_run, ``npulab llm``): a decode step is bound by
streaming its weights and KV cache at the chip's DRAM rate; the cache is read once; a layer's
time is the sum of its kernels, its all-reduces the network's; prefill + decode add up; the
CLI's views agree and bad input is a one-line error."""

from __future__ import annotations

import json

import pytest

from compiler.frontends.llm import DecoderConfig, get_llm
from compiler.frontends.llm_step import StepShape, kv_cache_bytes, layer_ops
from compiler.ir import Gemm
from compiler.mapper.search import stream_bytes_per_cycle
from hw.configfile import load_chip_config
from hw.system.collectives import collective
from hw.system.system import load_system
from npulab.cli import main
from npulab.devices import RooflineModel
from npulab.llm_run import llm_generate, llm_layer, resolve_system

# A small Llama-style model: its kernels simulate in milliseconds.
SMALL = DecoderConfig(name="small", layers=4, d_model=512, heads=8, kv_heads=2, ffn=1408,
                      vocab=2048, max_seq_len=1024, ffn_kind="swiglu", norm="rmsnorm",
                      positions="rotary", tied_embeddings=False, biases=False)
SMALL_TOML = """[llm]
layers = 4
d_model = 512
heads = 8
kv_heads = 2
ffn = 1408
vocab = 2048
max_seq_len = 1024
ffn_kind = "swiglu"
norm = "rmsnorm"
positions = "rotary"
tied_embeddings = false
biases = false
"""
# A mid-size one whose decode GEMMs stream megabytes: the fixed cost of a kernel (the first
# request's latency, the last tile's compute and store, ~8 us) is under 2 % of each.
MID = DecoderConfig(name="mid", layers=2, d_model=2048, heads=16, kv_heads=4, ffn=5632,
                    vocab=4096, max_seq_len=4096, ffn_kind="swiglu", norm="rmsnorm",
                    positions="rotary", tied_embeddings=False, biases=False)
LLMCOMPASS_NAMES = ["qkv_proj", "q_mul_k", "a_mul_v", "out_proj", "ffn1", "ffn2", "softmax",
                    "layernorm_attn", "layernorm_ffn", "gelu", "allreduce_attn",
                    "allreduce_ffn"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_decode_is_bound_by_streaming_weights_and_cache_at_the_dram_rate():
    """On the default chip (int8, one DDR4-3200 channel), a decode step's GEMMs each take their
    DRAM bytes at the chip's sustained stream rate (the DRAM model streaming with the DMA's
    32 outstanding requests: 14.4 GB/s, 57 % of the 25.4 GB/s peak) plus a kernel's fixed
    cost (the first request's latency, the last tile's compute and store: under 25 us), the
    layer within 5 % of its weights and KV cache at that rate, and read the KV cache exactly
    once: q_mul_k reads K (4 KV heads x 3000 keys x 128) and Q, nothing
    more."""
    chip = load_chip_config("default")
    rate = stream_bytes_per_cycle(chip.dram, chip.dma.max_outstanding, chip.clock_mhz) \
        * chip.clock_mhz * 1e6
    r = llm_layer(MID, "default", phase="decode", batch=2, kv_len=2999, launch=False, jobs=1)
    rows = {o["name"]: o for o in r.ops}
    ops = {o.name: o.op for o in layer_ops(MID, StepShape(2, 1, 2999))}
    for name in ("qkv_proj", "out_proj", "ffn1", "ffn2", "q_mul_k", "a_mul_v"):
        fixed = rows[name]["device_s"] - rows[name]["dram_bytes"] / rate
        assert 0 <= fixed <= 25e-6, name
    k_bytes = 2 * 4 * 3000 * 128                         # batch x KV heads x keys x head_dim
    q_bytes = ops["q_mul_k"].input_elements
    p_bytes = ops["a_mul_v"].input_elements
    assert rows["q_mul_k"]["dram_bytes"] == k_bytes + q_bytes + ops["q_mul_k"].output_elements
    assert rows["a_mul_v"]["dram_bytes"] == k_bytes + p_bytes + ops["a_mul_v"].output_elements
    assert 2 * k_bytes == kv_cache_bytes(MID, 2 * 3000, dtype_bytes=1, layers=1)
    # the whole layer: weights + KV cache (+ small activations) at the stream rate
    weights = sum(o.weight_elements for n, o in ops.items()
                  if isinstance(o, Gemm) and not o.kv_cache)
    device = sum(o["device_s"] for o in r.ops)
    assert weights + 2 * k_bytes <= sum(o["dram_bytes"] for o in r.ops)
    assert device == pytest.approx((weights + 2 * k_bytes) / rate, rel=0.05)


def test_layer_is_the_sum_of_its_kernels_and_allreduces_are_the_networks():
    """GPT-3 prefill on hgx-a100-4 (roofline A100s): each kernel is the device's roofline, each
    all-reduce the network's collective over the 4 ranks; the layer is their sum."""
    system = load_system("hgx-a100-4")
    r = llm_layer("gpt3-175b", system, phase="prefill", batch=8, prompt=2048, tp=4)
    assert r.total_s == pytest.approx(sum(o["latency_s"] for o in r.ops))
    names = [o["name"] for o in r.ops]
    assert [n for n in LLMCOMPASS_NAMES if n not in names] == []
    rows = {o["name"]: o for o in r.ops}
    ar = collective(system, "allreduce", 16384 * 12288 * 2, groups=[(0, 1, 2, 3)]).time_s
    assert rows["allreduce_attn"]["latency_s"] == pytest.approx(ar)
    model = RooflineModel(system.device)
    ops = {o.name: o.op for o in layer_ops(get_llm("gpt3-175b"), StepShape(8, 2048), tp=4)}
    assert rows["ffn1"]["latency_s"] == pytest.approx(model.op_seconds(ops["ffn1"]))


def test_generate_is_prefill_then_decode_steps_block_by_block():
    """One batch: the prefill gives the first token, then output - 1 decode steps; steps whose
    KV lengths fall in one 16-token block time alike (paged attention reads whole blocks), a
    later block is not faster; the same call gives the same numbers."""
    kw = dict(batch=2, prompt=20, output=14, launch=False, jobs=1)
    r = llm_generate(SMALL, "default", **kw)
    assert len(r.decode_s) == 13
    # contexts 20..32: keys 21..33; blocks of 16: 32 (keys 21..32) then 48 (keys 33)
    assert len(set(r.decode_s[:12])) == 1 and r.decode_s[12] > r.decode_s[0]
    assert r.total_s == pytest.approx(r.ttft_s + sum(r.decode_s))
    assert r.tokens_per_s == pytest.approx(2 * 14 / r.total_s)
    prefill = sum(o["latency_s"] for o in r.phases["prefill"])
    assert prefill == pytest.approx(r.ttft_s)
    assert sum(o["latency_s"] for o in r.phases["decode"]) == pytest.approx(sum(r.decode_s))
    layer = llm_layer(SMALL, "default", phase="prefill", batch=2, prompt=20, launch=False)
    per_layer = {o["name"]: o["latency_s"] for o in layer.ops}
    rows = {o["name"]: o["latency_s"] for o in r.phases["prefill"]}
    assert rows["ffn1"] == pytest.approx(SMALL.layers * per_layer["ffn1"])
    assert r.kv_cache_bytes_per_chip == kv_cache_bytes(SMALL, 2 * 34, dtype_bytes=1)
    again, first = llm_generate(SMALL, "default", **kw).to_dict(), r.to_dict()
    for doc in (again, first):
        del doc["simulation"]                    # wall time of the simulation
    assert again == first


def test_pipeline_stages_add_the_activation_hand_offs():
    system = load_system("hgx-a100-4")
    one = llm_generate("llama2-7b", system, batch=4, prompt=128, output=3)
    two = llm_generate("llama2-7b", system, batch=4, prompt=128, output=3, pp=2)
    sends = {o["name"]: o for o in two.phases["prefill"]}["pipeline_send"]
    assert sends["comm_bytes"] == 4 * 128 * 4096 * 2
    assert two.ttft_s == pytest.approx(one.ttft_s + sends["latency_s"])
    assert two.weight_bytes_per_chip < one.weight_bytes_per_chip


def test_one_chip_preset_is_a_system_of_one():
    system = resolve_system("a100_like")
    assert system.topology.n_ranks == 1 and system.device.config == "a100_like"
    assert resolve_system("a100x4").device.memory_gib == 80


def test_cli_layer_json_names_llmcompass_ops_and_sums_them(capsys, tmp_path):
    code, out, err = run(capsys, "llm", "layer", "--model", "gpt3-175b", "--system",
                         "hgx-a100-4", "--tp", "4", "--batch", "8", "--phase", "decode",
                         "--kv-len", "3072", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert [n for n in LLMCOMPASS_NAMES if n not in [o["name"] for o in doc["ops"]]] == []
    assert doc["total_s"] == pytest.approx(sum(o["latency_s"] for o in doc["ops"]))
    assert "beyond gpt3-175b's max_seq_len" in err          # GPT-3's context is 2,048
    # the table and CSV show the same numbers
    code, table, _ = run(capsys, "llm", "layer", "--model", "gpt3-175b", "--system",
                         "hgx-a100-4", "--tp", "4", "--batch", "8", "--phase", "decode",
                         "--kv-len", "3072")
    assert f"{doc['total_s'] * 1e6:,.1f}" in table
    code, text, _ = run(capsys, "llm", "layer", "--model", "gpt3-175b", "--system",
                        "hgx-a100-4", "--tp", "4", "--batch", "8", "--phase", "decode",
                        "--kv-len", "3072", "--format", "csv")
    lines = text.strip().splitlines()
    assert len(lines) == 1 + len(doc["ops"]) and lines[0].startswith("phase,name,kind")


def test_cli_run_on_simulated_a100s_with_a_toml_model(capsys, tmp_path):
    path = tmp_path / "small.toml"
    path.write_text(SMALL_TOML)
    code, out, err = run(capsys, "llm", "run", "--llm-config", str(path), "--system", "a100x4",
                         "--tp", "2", "--batch", "4", "--prompt", "64", "--output-tokens", "4",
                         "--format", "json", "--jobs", "1")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["model"] == "small" and doc["device"] == "a100-like" and doc["fits"] is True
    assert len(doc["decode_s"]) == 3
    assert doc["total_s"] == pytest.approx(doc["ttft_s"] + sum(doc["decode_s"]))
    names = [o["name"] for o in doc["phases"]["decode"]]
    assert "allreduce_attn" in names and "head.lm_head" in names


@pytest.mark.parametrize("argv,message", [
    (["layer", "--tp", "5", "--system", "hgx-a100-4"],
     "tp = 5: must divide the 96 query heads of gpt3-175b"),
    (["layer", "--tp", "8", "--system", "hgx-a100-4"],
     "tp x pp = 8 x 1 = 8: the system 'hgx-a100-4' has 4 chips"),
    (["layer", "--model", "nope"], "llm = 'nope': unknown; presets: gpt3-175b"),
    (["layer", "--llm-config", "missing.toml"], "missing.toml: no such file"),
    (["layer", "--batch", "0", "--system", "hgx-a100-4"],
     "batch = 0: must be an integer in 1..1,048,576"),
    (["run", "--output-tokens", "0", "--system", "hgx-a100-4"],
     "output = 0: must be an integer in 1..1,048,576"),
    (["layer", "--system", "nosuch"], "system 'nosuch': unknown"),
    (["layer", "--jobs", "0", "--system", "hgx-a100-4"], "jobs = 0: must be an integer in 1..1,024"),
])
def test_cli_bad_input_is_one_line(capsys, argv, message):
    code, out, err = run(capsys, "llm", *argv)
    assert code == 2
    assert err.startswith("npulab: error: ") and message in err and err.count("\n") == 1


def test_weight_only_quantization_and_an_fp8_cache_shrink_the_bytes_they_store(tmp_path):
    """On the default chip made fp16, weights stored in 4 bits and the KV cache in 8
    (Gemm.w_bits): the projections read a quarter of their weight bytes and the attention GEMMs
    half their cache bytes, exactly; the arithmetic is unchanged (same FLOPs); the weights and
    cache per chip shrink alike (what a server then fits)."""
    from hw.presets import presets_dir
    chip = tmp_path / "fp16.toml"
    chip.write_text((presets_dir() / "default.toml").read_text().replace(
        'precision = "int8"', 'precision = "fp16"'))
    kw = dict(phase="decode", batch=2, kv_len=511, launch=False, jobs=1)
    full = {o["name"]: o for o in llm_layer(SMALL, str(chip), **kw).ops}
    narrow = {o["name"]: o for o in llm_layer(SMALL, str(chip), weight_bits=4, kv_bits=8,
                                              **kw).ops}
    ops = {o.name: o.op for o in layer_ops(SMALL, StepShape(2, 1, 511))}
    for name in ("qkv_proj", "out_proj", "ffn1", "ffn2"):
        w = ops[name].weight_elements
        assert full[name]["dram_bytes"] - narrow[name]["dram_bytes"] == 2 * w - w // 2, name
        assert full[name]["flops"] == narrow[name]["flops"]
    for name in ("q_mul_k", "a_mul_v"):
        kv = ops[name].weight_elements                   # 2 sequences x 2 KV heads x 512 x 64
        assert kv == 2 * 2 * 512 * 64
        assert full[name]["dram_bytes"] - narrow[name]["dram_bytes"] == 2 * kv - kv, name
    from compiler.frontends.llm_step import weight_bytes
    g16 = llm_generate(SMALL, "hgx-a100-4", batch=2, prompt=16, output=2)
    g4 = llm_generate(SMALL, "hgx-a100-4", batch=2, prompt=16, output=2, weight_bits=4,
                      kv_bits=8)
    assert g4.kv_cache_bytes_per_chip == g16.kv_cache_bytes_per_chip / 2
    assert g4.weight_bytes_per_chip == weight_bytes(SMALL, 1, 2, 4)
    # layers' projections and FFN at 4 bits, everything else (embeddings, norms) at 16
    d, f = 512, 1408
    proj = d * 8 * 64 + 2 * d * 2 * 64 + 8 * 64 * d + 3 * d * f
    assert g16.weight_bytes_per_chip - g4.weight_bytes_per_chip == SMALL.layers * proj * 1.5


def test_a_cache_that_fits_the_l2_is_read_from_it():
    """kv_placement auto: the whole cache of a chip (every layer) in at most half of the L2
    (a100_like: 20 of 40 MiB) stays there, and the attention GEMMs read no cache byte from
    DRAM (Gemm.w_in_l2); forced to DRAM they read it all; a cache too large stays in DRAM."""
    kw = dict(phase="decode", batch=2, kv_len=255, launch=False, jobs=1)
    auto = llm_layer(SMALL, "a100_like", **kw)
    dram = llm_layer(SMALL, "a100_like", kv_placement="dram", **kw)
    assert (auto.kv_placement, dram.kv_placement) == ("l2", "dram")
    a = {o["name"]: o for o in auto.ops}
    d = {o["name"]: o for o in dram.ops}
    cache = 2 * 2 * 256 * 64 * 2                     # sequences x KV heads x keys x dh x fp16
    for name in ("q_mul_k", "a_mul_v"):
        assert d[name]["dram_bytes"] - a[name]["dram_bytes"] >= cache
        assert a[name]["dram_bytes"] < cache / 10
    big = llm_layer("llama2-7b", "hgx-a100-4", phase="decode", batch=64, kv_len=4000)
    assert big.kv_placement == "dram"                 # a roofline device has no L2
    with pytest.raises(ValueError, match=r"kv_placement = 'hbm': must be one of auto, dram, "
                                         r"l2"):
        llm_layer(SMALL, "a100_like", kv_placement="hbm", **kw)


def test_expert_parallel_chips_hold_their_experts_and_their_sequences():
    """Mixtral with ep = 4 and data-parallel attention on 4 chips: a chip holds every weight
    but the experts, 2 of the 8 experts, and the cache of its 2 of the 8 sequences; the step
    adds the two all-to-alls, timed on the network over the 4 ranks."""
    from compiler.frontends.llm_step import weight_bytes
    cfg = get_llm("mixtral-8x7b")
    r = llm_generate(cfg, "hgx-a100-4", batch=8, prompt=16, output=3, ep=4)
    experts = 32 * 8 * 3 * 4096 * 14336 * 2
    assert r.weight_bytes_per_chip == weight_bytes(cfg) - experts * 3 / 4
    assert r.kv_cache_bytes_per_chip == kv_cache_bytes(cfg, 2 * 19)
    rows = {o["name"]: o for o in r.phases["decode"]}
    a2a = collective(load_system("hgx-a100-4"), "alltoall", 2 * 2 * 4096 * 2,
                     groups=[(0, 1, 2, 3)]).time_s
    assert rows["alltoall_dispatch"]["latency_s"] == pytest.approx(a2a * 32 * 2)
