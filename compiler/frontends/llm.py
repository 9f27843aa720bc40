"""Decoder-only language models described by their hyper-parameters (issue 25, first step).

A :class:`DecoderConfig` holds what sets an LLM's shapes: ``layers``, ``d_model``, ``heads``,
``kv_heads`` (MHA when equal to ``heads``, GQA when fewer, MQA at 1), ``head_dim``, the FFN kind
(``gelu`` or ``relu`` MLP, or ``swiglu``) and width, the norm (``layernorm`` or ``rmsnorm``),
positions (``learned`` or ``rotary``), the vocabulary, tied embeddings, biases and a mixture of
experts (``experts``, ``top_k``). Its closed forms, with ``d`` = d_model, ``h`` = heads, ``g`` =
kv_heads, ``dh`` = head_dim, ``f`` = ffn, ``V`` = vocab, ``L`` = layers:

* attention weights ``d*h*dh + 2*d*g*dh + h*dh*d`` (``4d^2`` for MHA), biases ``h*dh + 2*g*dh
  + d``;
* FFN weights ``2*d*f`` (MLP) or ``3*d*f`` (SwiGLU: gate, up, down), biases ``f + d`` (MLP);
  a MoE layer has ``experts`` FFNs and a router ``d*experts``; ``top_k`` of them are active;
* norms: ``2d`` (LayerNorm: gain and bias) or ``d`` (RMSNorm), two per layer and a final one;
* embeddings ``V*d``, plus an LM head ``V*d`` unless tied, plus ``positions*d`` learned rows.

:attr:`DecoderConfig.params` reproduces the published counts (tests hold each preset to its
paper or model card): Llama-2-7B 6,738,415,616; Mixtral 8x7B 46.7B total and 12.9B active.
:meth:`DecoderConfig.kv_bytes_per_token` is ``2 x kv_heads x head_dim x bytes`` per layer, and
:meth:`DecoderConfig.decode_flops` a decode token's FLOPs at KV length ``T``: ``2 x`` the
active matmul weights (the LM head included, the input embedding, norms and biases not) plus
``4 x L x T x h x dh`` for the two attention products.

Presets (:data:`LLM_PRESETS`; sources on each): GPT-3 175B (Brown et al. 2020, Table 2.1),
Llama-2 7B/13B/70B (Touvron et al. 2023, Table 1 and the released configurations), Llama-3
8B/70B and Llama-3.1 8B/70B (Meta's model cards; 3.1 has the same shapes and a 128k context), Mixtral 8x7B (Jiang et al. 2024, Table 1), OPT-30B (Zhang et al.
2022, Table 1; its learned positions hold 2 extra rows). :func:`load_llm_config` reads any other
from TOML (``[llm]`` table, the same keys), with one-line errors.
"""

from __future__ import annotations

import tomllib
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path

__all__ = ["DecoderConfig", "LLM_PRESETS", "llm_names", "get_llm", "load_llm_config",
           "llm_config_from_dict", "FFN_KINDS", "NORM_KINDS", "POSITION_KINDS"]

FFN_KINDS = ("gelu", "relu", "swiglu")
NORM_KINDS = ("layernorm", "rmsnorm")
POSITION_KINDS = ("learned", "rotary")
#: Bounds that catch unit mistakes (a width in bytes, a count in thousands) when a file is read.
_MAX = {"layers": 1024, "d_model": 1 << 18, "heads": 4096, "kv_heads": 4096, "head_dim": 4096,
        "ffn": 1 << 20, "vocab": 1 << 24, "max_seq_len": 1 << 24, "experts": 4096, "top_k": 4096,
        "extra_positions": 4096}


class LlmConfigError(ValueError):
    """A bad LLM description: the message names the source, the key, the value and what is
    allowed."""


@dataclass(frozen=True)
class DecoderConfig:
    """A decoder-only transformer (module docstring). ``head_dim`` defaults to ``d_model //
    heads``; ``kv_heads`` to ``heads``; ``experts = 1`` is a dense model."""

    name: str
    layers: int
    d_model: int
    heads: int
    ffn: int
    vocab: int
    max_seq_len: int
    kv_heads: int | None = None
    head_dim: int | None = None
    ffn_kind: str = "gelu"
    norm: str = "layernorm"
    positions: str = "learned"
    tied_embeddings: bool = True
    biases: bool = True
    experts: int = 1
    top_k: int = 1
    extra_positions: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        self.validate(f"LLM {self.name!r}")

    def validate(self, where: str) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen dataclass)
        if not isinstance(self.name, str) or not self.name:
            raise LlmConfigError(f"{where}: name = {self.name!r}: must be a non-empty string")
        if self.kv_heads is None:
            set_("kv_heads", self.heads)
        if self.head_dim is None and isinstance(self.heads, int) and self.heads > 0:
            set_("head_dim", self.d_model // self.heads if isinstance(self.d_model, int) else None)
        for key, hi in _MAX.items():
            value, lo = getattr(self, key), 0 if key == "extra_positions" else 1
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise LlmConfigError(f"{where}: {key} = {value!r}: must be an integer in "
                                     f"{lo}..{hi}")
        for key, allowed in (("ffn_kind", FFN_KINDS), ("norm", NORM_KINDS),
                             ("positions", POSITION_KINDS)):
            if getattr(self, key) not in allowed:
                raise LlmConfigError(f"{where}: {key} = {getattr(self, key)!r}: must be one of "
                                     f"{', '.join(allowed)}")
        for key in ("tied_embeddings", "biases"):
            if not isinstance(getattr(self, key), bool):
                raise LlmConfigError(f"{where}: {key} = {getattr(self, key)!r}: must be true "
                                     f"or false")
        if self.heads % self.kv_heads:
            raise LlmConfigError(f"{where}: kv_heads = {self.kv_heads}: must divide heads = "
                                 f"{self.heads} (each KV head serves a group of query heads)")
        if self.top_k > self.experts:
            raise LlmConfigError(f"{where}: top_k = {self.top_k}: must be at most experts = "
                                 f"{self.experts}")
        if self.positions == "rotary" and self.extra_positions:
            raise LlmConfigError(f"{where}: extra_positions = {self.extra_positions}: only "
                                 f"learned positions have a table")

    # ---- closed forms ----------------------------------------------------------------------
    @property
    def attention_weights(self) -> int:
        """Q, K, V and output projection weights of one layer (no biases)."""
        d, h, g, dh = self.d_model, self.heads, self.kv_heads, self.head_dim
        return d * h * dh + 2 * d * g * dh + h * dh * d

    @property
    def ffn_weights(self) -> int:
        """One FFN's (one expert's) weights, no biases: ``2 d f``, SwiGLU ``3 d f``."""
        return (3 if self.ffn_kind == "swiglu" else 2) * self.d_model * self.ffn

    @property
    def attention_params(self) -> int:
        """Q, K, V and output projections of one layer, with their biases."""
        h, g, dh = self.heads, self.kv_heads, self.head_dim
        return self.attention_weights + ((h * dh + 2 * g * dh + self.d_model)
                                         if self.biases else 0)

    @property
    def expert_params(self) -> int:
        """One FFN (one expert of a MoE layer), with its biases."""
        d, f = self.d_model, self.ffn
        biases = (2 * f + d) if self.ffn_kind == "swiglu" else (f + d)
        return self.ffn_weights + (biases if self.biases else 0)

    @property
    def norm_params(self) -> int:
        """One norm: gain and bias (LayerNorm) or gain (RMSNorm)."""
        return (2 if self.norm == "layernorm" else 1) * self.d_model

    def layer_params(self, active: bool = False) -> int:
        """One layer: attention, ``experts`` FFNs (``top_k`` of them when ``active``), the
        router of a MoE layer and the two norms."""
        ffns = self.top_k if active else self.experts
        router = self.d_model * self.experts if self.experts > 1 else 0
        return self.attention_params + ffns * self.expert_params + router + 2 * self.norm_params

    @property
    def embedding_params(self) -> int:
        """Token embeddings, the LM head unless tied, learned positions (with any extra rows)."""
        d = self.d_model
        pos = (self.max_seq_len + self.extra_positions) * d if self.positions == "learned" else 0
        return self.vocab * d * (1 if self.tied_embeddings else 2) + pos

    @property
    def params(self) -> int:
        """Every parameter (all experts)."""
        return self.layers * self.layer_params() + self.embedding_params + self.norm_params

    @property
    def active_params(self) -> int:
        """Parameters a token uses: ``top_k`` experts per layer (= :attr:`params` when dense)."""
        return self.layers * self.layer_params(True) + self.embedding_params + self.norm_params

    def matmul_weights(self) -> int:
        """Weights a token multiplies: every layer's projections, active experts and router,
        and the LM head (not the input embedding, norms or biases)."""
        d = self.d_model
        router = d * self.experts if self.experts > 1 else 0
        return (self.layers * (self.attention_weights + self.top_k * self.ffn_weights + router)
                + self.vocab * d)

    def kv_bytes_per_token(self, bytes_per_element: float = 2) -> float:
        """KV-cache bytes one token adds to one layer: ``2 x kv_heads x head_dim x bytes``."""
        return 2 * self.kv_heads * self.head_dim * bytes_per_element

    def decode_flops(self, kv_len: int) -> int:
        """FLOPs of one decode token at KV length ``kv_len`` (module docstring)."""
        return 2 * self.matmul_weights() + 4 * self.layers * kv_len * self.heads * self.head_dim

    def to_dict(self) -> dict:
        return asdict(self)


_LLAMA = dict(ffn_kind="swiglu", norm="rmsnorm", positions="rotary", tied_embeddings=False,
              biases=False)

LLM_PRESETS: dict[str, DecoderConfig] = {c.name: c for c in (
    DecoderConfig(name="gpt3-175b", layers=96, d_model=12288, heads=96, ffn=49152, vocab=50257,
            max_seq_len=2048, source="Brown et al. 2020, Table 2.1 (175.0B): 96 layers, "
            "d_model 12288, 96 heads of 128, d_ff = 4 d_model, context 2048; GPT-2's 50257 tokens"),
    DecoderConfig(name="llama2-7b", layers=32, d_model=4096, heads=32, ffn=11008, vocab=32000,
            max_seq_len=4096, **_LLAMA,
            source="Touvron et al. 2023 (Llama 2), Table 1 and the released config: 6.74B"),
    DecoderConfig(name="llama2-13b", layers=40, d_model=5120, heads=40, ffn=13824, vocab=32000,
            max_seq_len=4096, **_LLAMA,
            source="Touvron et al. 2023 (Llama 2), Table 1 and the released config: 13.0B"),
    DecoderConfig(name="llama2-70b", layers=80, d_model=8192, heads=64, kv_heads=8, ffn=28672,
            vocab=32000, max_seq_len=4096, **_LLAMA,
            source="Touvron et al. 2023 (Llama 2), Table 1 (GQA) and the released config: 69.0B"),
    DecoderConfig(name="llama3-8b", layers=32, d_model=4096, heads=32, kv_heads=8, ffn=14336,
            vocab=128256, max_seq_len=8192, **_LLAMA,
            source="Meta Llama 3 model card and released config: 8.03B"),
    DecoderConfig(name="llama3-70b", layers=80, d_model=8192, heads=64, kv_heads=8, ffn=28672,
            vocab=128256, max_seq_len=8192, **_LLAMA,
            source="Meta Llama 3 model card and released config: 70.6B"),
    DecoderConfig(name="llama3.1-8b", layers=32, d_model=4096, heads=32, kv_heads=8, ffn=14336,
            vocab=128256, max_seq_len=131072, **_LLAMA,
            source="Meta Llama 3.1 model card and released config: 8.03B, 128k context"),
    DecoderConfig(name="llama3.1-70b", layers=80, d_model=8192, heads=64, kv_heads=8,
            ffn=28672, vocab=128256, max_seq_len=131072, **_LLAMA,
            source="Meta Llama 3.1 model card and released config: 70.6B, 128k context"),
    DecoderConfig(name="mixtral-8x7b", layers=32, d_model=4096, heads=32, kv_heads=8, ffn=14336,
            vocab=32000, max_seq_len=32768, experts=8, top_k=2, **_LLAMA,
            source="Jiang et al. 2024 (Mixtral of Experts), Table 1; 46.7B total, 12.9B active"),
    DecoderConfig(name="opt-30b", layers=48, d_model=7168, heads=56, ffn=28672, vocab=50272,
            max_seq_len=2048, ffn_kind="relu", extra_positions=2,
            source="Zhang et al. 2022 (OPT), Table 1: 48 layers, 56 heads, d 7168; ReLU FFN, "
            "learned positions with 2 offset rows, vocabulary 50272"),
)}


def llm_names() -> tuple[str, ...]:
    return tuple(LLM_PRESETS)


def get_llm(name: str) -> DecoderConfig:
    """A preset by name (:data:`LLM_PRESETS`)."""
    if name not in LLM_PRESETS:
        raise LlmConfigError(f"llm = {name!r}: unknown; presets: {', '.join(LLM_PRESETS)} "
                             f"(or a TOML file with an [llm] table)")
    return LLM_PRESETS[name]


def llm_config_from_dict(data: dict, where: str) -> DecoderConfig:
    """A :class:`DecoderConfig` from an ``[llm]`` table; unknown or missing keys are one-line
    errors naming ``where``."""
    if not isinstance(data, dict):
        raise LlmConfigError(f"{where}: [llm] must be a table")
    known = [f.name for f in fields(DecoderConfig)]
    for key in data:
        if key not in known:
            raise LlmConfigError(f"{where}: llm.{key}: unknown key; allowed: {', '.join(known)}")
    required = [f.name for f in fields(DecoderConfig) if f.default is MISSING and f.name != "name"]
    missing = [k for k in required if k not in data]
    if missing:
        raise LlmConfigError(f"{where}: [llm] lacks {', '.join(missing)}")
    data = {"name": Path(where).stem, **data}
    try:
        return DecoderConfig(**data)
    except LlmConfigError as exc:          # name the file, not the model
        message = str(exc).removeprefix(f"LLM {data['name']!r}: ")
        raise LlmConfigError(f"{where}: {message}") from None


def load_llm_config(path: str | Path) -> DecoderConfig:
    """A TOML file's ``[llm]`` table as a :class:`DecoderConfig` (``--llm-config``)."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise LlmConfigError(f"{p}: no such file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise LlmConfigError(f"{p}: not valid TOML ({exc})") from None
    extra = sorted(set(data) - {"llm"})
    if extra or "llm" not in data:
        raise LlmConfigError(f"{p}: needs one [llm] table" + (f", not [{extra[0]}]" if extra
                                                               else ""))
    return llm_config_from_dict(data["llm"], str(p))
