"""Decoder-LLM descriptions (compiler.frontends.llm): parameter counts against the published
figures, KV-cache bytes and decode FLOPs against their closed forms, the TOML reader's errors."""

from __future__ import annotations

import pytest

from compiler.frontends.llm import (
    LLM_PRESETS, DecoderConfig, LlmConfigError, get_llm, load_llm_config,
)

# Exact counts of the closed forms, and the published figure to its printed precision:
# GPT-3 (Brown et al. 2020, Table 2.1) prints 175.0B, which the paper rounds up from 174.6B.
PUBLISHED = {
    "gpt3-175b": (174_604_259_328, 175.0e9, 0.005),
    "llama2-7b": (6_738_415_616, 6.74e9, 0.001),
    "llama2-13b": (13_015_864_320, 13.0e9, 0.002),
    "llama2-70b": (68_976_648_192, 69.0e9, 0.001),
    "llama3-8b": (8_030_261_248, 8.03e9, 0.001),
    "llama3-70b": (70_553_706_496, 70.6e9, 0.001),
    "llama3.1-8b": (8_030_261_248, 8.03e9, 0.001),
    "llama3.1-70b": (70_553_706_496, 70.6e9, 0.001),
    "mixtral-8x7b": (46_702_792_704, 46.7e9, 0.001),
    "opt-30b": (29_974_540_288, 30.0e9, 0.002),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_equal_the_published_figures(name):
    exact, published, rel = PUBLISHED[name]
    model = get_llm(name)
    assert model.params == exact
    assert model.params == pytest.approx(published, rel=rel)
    assert model.source


def test_mixtral_active_parameters_and_llama2_7b_by_hand():
    mixtral = get_llm("mixtral-8x7b")
    assert mixtral.active_params == 12_879_925_248 == pytest.approx(12.9e9, rel=0.002)
    # Llama-2-7B: 32 x (4 d^2 attention + 3 d f SwiGLU + 2 RMSNorm gains) + untied embedding and
    # LM head + the final norm
    d, f, v = 4096, 11008, 32000
    assert get_llm("llama2-7b").params == 32 * (4 * d * d + 3 * d * f + 2 * d) + 2 * v * d + d


def test_kv_cache_bytes_per_token_and_layer():
    """2 x kv_heads x head_dim x bytes: MHA GPT-3 49,152 B in fp16; GQA (8 KV heads of 128)
    4,096 B; an fp8 cache half that."""
    assert get_llm("gpt3-175b").kv_bytes_per_token() == 49_152
    assert get_llm("llama2-70b").kv_bytes_per_token() == 4_096
    assert get_llm("llama3-8b").kv_bytes_per_token(1) == 2_048
    assert get_llm("opt-30b").kv_bytes_per_token() == 28_672


@pytest.mark.parametrize("name", sorted(LLM_PRESETS))
def test_decode_flops_are_twice_the_weights_a_token_multiplies_plus_attention(name):
    m = get_llm(name)
    d, h, g, dh, f, L = m.d_model, m.heads, m.kv_heads, m.head_dim, m.ffn, m.layers
    ffn = (3 if m.ffn_kind == "swiglu" else 2) * d * f
    router = d * m.experts if m.experts > 1 else 0
    weights = L * (2 * d * h * dh + 2 * d * g * dh + m.top_k * ffn + router) + m.vocab * d
    assert m.decode_flops(3072) == 2 * weights + 4 * L * 3072 * h * dh
    if m.experts == 1 and not m.biases and m.tied_embeddings is False:
        # a dense model without biases: 2 x (every parameter but the input embedding and norms)
        norms = (2 * L + 1) * m.norm_params
        assert 2 * weights == 2 * (m.params - m.vocab * d - norms)


def _write(tmp_path, text):
    p = tmp_path / "my_llm.toml"
    p.write_text(text)
    return p


GOOD = """[llm]
layers = 2
d_model = 256
heads = 4
kv_heads = 2
ffn = 688
vocab = 1000
max_seq_len = 512
ffn_kind = "swiglu"
norm = "rmsnorm"
positions = "rotary"
tied_embeddings = false
biases = false
"""


def test_a_toml_file_describes_any_other_model(tmp_path):
    m = load_llm_config(_write(tmp_path, GOOD))
    assert m.name == "my_llm" and m.head_dim == 64 and m.kv_heads == 2
    assert m == DecoderConfig(**{**m.to_dict()})
    assert m.params == 2 * (256 * 256 * 2 + 2 * 256 * 128 + 3 * 256 * 688 + 2 * 256) \
        + 2 * 1000 * 256 + 256


@pytest.mark.parametrize("edit, message", [
    (("kv_heads = 2", "kv_heads = 3"), "kv_heads = 3: must divide heads = 4"),
    (("layers = 2", "layers = 0"), "layers = 0: must be an integer in 1..1024"),
    (("layers = 2", "layers = 2.5"), "layers = 2.5: must be an integer"),
    (('ffn_kind = "swiglu"', 'ffn_kind = "geglu"'), "ffn_kind = 'geglu': must be one of gelu"),
    (("biases = false", "biases = 0"), "biases = 0: must be true or false"),
    (("vocab = 1000", "vocabulary = 1000"), "llm.vocabulary: unknown key; allowed: name"),
    (("vocab = 1000\n", ""), "[llm] lacks vocab"),
    (("[llm]", "[model]"), "needs one [llm] table, not [model]"),
    (("d_model = 256", "d_model = 256e9"), "d_model = 256000000000.0: must be an integer"),
])
def test_bad_toml_is_a_one_line_error_naming_file_key_and_value(tmp_path, edit, message):
    old, new = edit
    path = _write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(LlmConfigError) as err:
        load_llm_config(path)
    text = str(err.value)
    assert str(path) in text and message in text and "\n" not in text


def test_unknown_preset_and_missing_file():
    with pytest.raises(LlmConfigError, match="llm = 'gpt5': unknown; presets: gpt3-175b"):
        get_llm("gpt5")
    with pytest.raises(LlmConfigError, match="no such file"):
        load_llm_config("/nonexistent/llm.toml")
