"""GPT-style transformer language models, and their per-rank ops under Megatron tensor parallelism.

A :class:`TransformerModel` holds the hyper-parameters a training-step planner needs. Its
:meth:`~TransformerModel.layer_ops` returns the forward ops one tensor-parallel rank runs for one
transformer layer and one micro-batch (Shoeybi et al. 2019, "Megatron-LM", §3; Korthikanti et
al. 2022, "Reducing Activation Recomputation in Large Transformer Models", §4). With ``b`` =
micro-batch, ``s`` = sequence, ``h`` = hidden, ``a`` = heads, ``f`` = FFN width, ``t`` = TP
degree (pre-norm GPT layer, fused QKV as in Megatron-LM)::

    op               IR                                        split by t
    ln1              Eltwise layernorm, b*s*h                   /t with sequence parallelism
    attn.qkv         Gemm(m=b*s, n=3h/t, k=h)                   column-parallel
    attn.scores      Gemm(batch=b*a/t, m=s, n=s, k=h/a)         heads
    attn.softmax     Eltwise softmax, b*a/t*s*s                 heads
    attn.dropout     Eltwise dropout, b*a/t*s*s                 heads
    attn.context     Gemm(batch=b*a/t, m=s, n=h/a, k=s)         heads
    attn.out_proj    Gemm(m=b*s, n=h, k=h/t)                    row-parallel -> all-reduce
    add1             Eltwise add (+dropout), b*s*h              /t with sequence parallelism
    ln2              Eltwise layernorm, b*s*h                   /t with sequence parallelism
    ffn.fc1          Gemm(m=b*s, n=f/t, k=h)                    column-parallel
    ffn.gelu         Eltwise gelu, b*s*f/t
    ffn.fc2          Gemm(m=b*s, n=h, k=f/t)                    row-parallel -> all-reduce
    add2             Eltwise add (+dropout), b*s*h              /t with sequence parallelism

Forward MACs per layer (``t = 1``): ``b*s*(4h^2 + 2hf) + 2*b*s^2*h``, i.e. ``12bsh^2 + 2bs^2h``
for ``f = 4h``. The ops are :func:`compiler.attention.transformer_block_ops`'s (``fused_qkv``,
``attn_dropout``, ``tp``, ``sequence_parallel``); unfused, the same MACs. The two row-parallel
GEMMs end in an all-reduce of ``b*s*h`` elements each in the forward pass and their conjugates in
the backward pass: 4 all-reduces per layer per micro-batch (Megatron-LM §3, Fig. 4).

Head ops on the first / last pipeline stage: the embedding lookup (a gather of ``b*s*h``
elements) and the logits ``Gemm(m=b*s, n=v/t, k=h)`` (vocab-parallel, weights tied to the
embedding) with its softmax cross-entropy (``b*s*v/t`` elements) after the final layer norm.

Presets (Korthikanti et al. 2022, Table 3; Calculon's validation configurations
``calculon-ai/calculon`` ``validation/seqsel/tab5/*.json`` and ``models/*.json`` carry the same
numbers): sequence 2048, vocabulary 51200 (GPT-2's 50257 BPE tokens padded by Megatron-LM to a
multiple of 128 x TP = 1024), micro-batch 1 except the 22B model (one micro-batch of 4, as in
Calculon's configuration: global batch 4 on one 8-GPU node, no pipeline).
``gpt2-small`` (Radford et al. 2019: 12 layers, 768 wide, 12 heads, 1024 tokens, 50257 vocab,
batch 512) and ``bert-base`` (Devlin et al. 2019: 12 x 768, 12 heads, 512 tokens, 30522 vocab,
batch 256, post-norm) make zoo-style graphs via :meth:`TransformerModel.block_graph`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from compiler.attention import transformer_block_ops
from compiler.ir import Gemm, Graph, Move, Norm, Op, Softmax

__all__ = ["TransformerModel", "MODEL_PRESETS", "model_names", "get_model", "model_flops"]


def _check_int(name: str, key: str, value: object, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"TransformerModel {name!r}: {key} = {value!r}: must be an integer "
                         f">= {minimum}")


@dataclass(frozen=True)
class TransformerModel:
    """A decoder (GPT) or encoder (BERT) transformer: shapes, batch, and derived counts."""

    name: str
    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    ffn: int | None = None          # defaults to 4 * hidden
    global_batch: int = 1           # sequences per optimizer step
    micro_batch: int = 1            # sequences per micro-batch
    pre_norm: bool = True           # GPT-2/Megatron; False = BERT post-norm

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"TransformerModel: name = {self.name!r}: must be a non-empty string")
        if self.ffn is None and isinstance(self.hidden, int):
            object.__setattr__(self, "ffn", 4 * self.hidden)
        for key in ("layers", "hidden", "heads", "seq_len", "vocab", "ffn", "global_batch",
                    "micro_batch"):
            _check_int(self.name, key, getattr(self, key))
        if self.hidden % self.heads:
            raise ValueError(f"TransformerModel {self.name!r}: hidden = {self.hidden} is not "
                             f"divisible by heads = {self.heads}")
        if self.global_batch % self.micro_batch:
            raise ValueError(f"TransformerModel {self.name!r}: global_batch = {self.global_batch}"
                             f" is not a multiple of micro_batch = {self.micro_batch}")
        if not isinstance(self.pre_norm, bool):
            raise ValueError(f"TransformerModel {self.name!r}: pre_norm = {self.pre_norm!r}: "
                             f"must be True or False")

    # -- parameter counts (Narayanan et al. 2021, §5.1: P = 12lh^2 (1 + 13/(12h) + (V+s)/(12lh)))
    @property
    def layer_params(self) -> int:
        """Weights + biases of one layer: QKV/out (4h^2 + 4h), FFN (2hf + f + h), 2 layer norms."""
        h, f = self.hidden, self.ffn
        return 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h

    @property
    def embedding_params(self) -> int:
        """Token embedding (tied with the logits) ``v*h`` plus learned positions ``s*h``."""
        return (self.vocab + self.seq_len) * self.hidden

    def edge_params(self, tp: int, pp: int) -> tuple[float, float]:
        """Parameters per rank the first and the last pipeline stage hold beyond their layers:
        the vocab-parallel token embedding (vocabulary padded to ``tp``) and learned positions
        on the first; the final layer norm and, with ``pp > 1``, the tied embedding's copy
        for the logits on the last."""
        vocab_rank = -(-self.vocab // tp)
        return (vocab_rank * self.hidden + self.seq_len * self.hidden,
                2 * self.hidden + (vocab_rank * self.hidden if pp > 1 else 0))

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.embedding_params + 2 * self.hidden

    def to_dict(self) -> dict:
        return asdict(self)

    # -- ops -------------------------------------------------------------------------------
    def layer_ops(self, tp: int = 1, *, micro_batch: int | None = None,
                  sequence_parallel: bool = False, prefix: str = "layer") -> list[Op]:
        """Forward ops of one layer on one of ``tp`` tensor-parallel ranks (module docstring):
        :func:`compiler.attention.transformer_block_ops` with Megatron's fused QKV and attention
        dropout. The planner costs every model as the pre-norm layer (a post-norm layer has the
        same ops in another order)."""
        b = self.micro_batch if micro_batch is None else micro_batch
        _check_int(self.name, "micro_batch", b)
        self._check_tp(tp)
        return transformer_block_ops(prefix, seq_len=self.seq_len, d_model=self.hidden,
                                     heads=self.heads, ffn_dim=self.ffn, batch=b,
                                     pre_norm=True, tp=tp,
                                     sequence_parallel=sequence_parallel, fused_qkv=True,
                                     attn_dropout=True)

    def unfused_ops(self, tp: int = 1, *, micro_batch: int | None = None,
                    sequence_parallel: bool = False, prefix: str = "layer") -> list[Op]:
        """The element-wise work of one layer that :meth:`layer_ops` folds into Megatron-LM's
        fused kernels (Shoeybi et al. 2019's code: ``bias_gelu``, ``bias_dropout_add``,
        ``FusedScaleMaskSoftmax``; the QKV bias in the GEMM), as the separate kernels an
        unfused implementation runs: the four linear layers' bias adds, the two hidden
        dropouts before the residual adds, and the attention scores' 1/sqrt(d) scale and
        additive mask. Sizes on one of ``tp`` ranks (bias and dropout after a row-parallel layer
        on the full tensor, or its sequence shard with sequence parallelism)."""
        b = self.micro_batch if micro_batch is None else micro_batch
        _check_int(self.name, "micro_batch", b)
        self._check_tp(tp)
        from compiler.ir import Binary, Eltwise
        tokens, h, a, s = b * self.seq_len, self.hidden, self.heads, self.seq_len
        row = tokens * h // tp if sequence_parallel else tokens * h
        scores = b * (a // tp) * s * s
        return [
            Binary(name=f"{prefix}.attn.qkv_bias", fn="add", elements=tokens * 3 * h // tp,
                   other_elements=3 * h // tp),
            Binary(name=f"{prefix}.attn.scale", fn="mul", elements=scores, other_elements=1),
            Binary(name=f"{prefix}.attn.mask", fn="add", elements=scores,
                   other_elements=s * s),
            Binary(name=f"{prefix}.attn.out_bias", fn="add", elements=row, other_elements=h),
            Eltwise(name=f"{prefix}.attn.hidden_dropout", op="dropout", elements=row),
            Binary(name=f"{prefix}.ffn.fc1_bias", fn="add", elements=tokens * self.ffn // tp,
                   other_elements=self.ffn // tp),
            Binary(name=f"{prefix}.ffn.fc2_bias", fn="add", elements=row, other_elements=h),
            Eltwise(name=f"{prefix}.ffn.hidden_dropout", op="dropout", elements=row),
        ]

    def embedding_ops(self, tp: int = 1, *, micro_batch: int | None = None) -> list[Op]:
        """First pipeline stage: the token + position embedding lookup."""
        b = self.micro_batch if micro_batch is None else micro_batch
        self._check_tp(tp, layer=False)
        return [Move(name="embedding", kind="gather", elements=b * self.seq_len * self.hidden)]

    def head_ops(self, tp: int = 1, *, micro_batch: int | None = None) -> list[Op]:
        """Last pipeline stage: final layer norm, vocab-parallel logits and cross-entropy."""
        b = self.micro_batch if micro_batch is None else micro_batch
        self._check_tp(tp, layer=False)
        tokens = b * self.seq_len
        v = -(-self.vocab // tp)
        return [
            Norm(name="final_ln", kind="layernorm", rows=tokens, cols=self.hidden),
            Gemm(name="logits", m=tokens, n=v, k=self.hidden, inputs=("final_ln",)),
            Softmax(name="cross_entropy", rows=tokens, cols=v, inputs=("logits",)),
        ]

    def block_graph(self, *, micro_batch: int | None = None) -> Graph:
        """One layer from :func:`compiler.attention.transformer_block_ops` (zoo-style names)."""
        b = self.micro_batch if micro_batch is None else micro_batch
        ops = transformer_block_ops(f"{self.name}.block", seq_len=self.seq_len,
                                    d_model=self.hidden, heads=self.heads, ffn_dim=self.ffn,
                                    batch=b, pre_norm=self.pre_norm)
        return Graph(f"{self.name}.block", tuple(ops), batch=b, tokens=self.seq_len)

    def _check_tp(self, tp: object, layer: bool = True) -> None:
        """``tp`` must be an integer >= 1; for a layer's ops it must also split heads and FFN
        (the embedding and logits are vocab-parallel with the vocabulary padded)."""
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
            raise ValueError(f"model {self.name!r}: tp = {tp!r}: must be an integer >= 1")
        if layer and (self.heads % tp or self.ffn % tp):
            raise ValueError(f"model {self.name!r}: tp = {tp} must divide heads = {self.heads} "
                             f"and ffn = {self.ffn} (Megatron splits heads and FFN columns)")


def model_flops(model: TransformerModel, batch: int | None = None) -> float:
    """Model FLOPs of one training step without recomputation (fwd + 2x bwd = 3x fwd matmuls).

    Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using
    Megatron-LM", eq. 3), for ``f = 4h``: ``72 B s l h^2 (1 + s/(6h) + V/(12 l h))``. Computed
    here from the general ``f`` form ``6 B s (l (4h^2 + 2hf + 2sh) + V h)``.
    """
    b = model.global_batch if batch is None else batch
    h, s, f = model.hidden, model.seq_len, model.ffn
    return 6.0 * b * s * (model.layers * (4 * h * h + 2 * h * f + 2 * s * h) + model.vocab * h)


MODEL_PRESETS: dict[str, TransformerModel] = {
    m.name: m for m in (
        TransformerModel("megatron-22b", layers=48, hidden=6144, heads=64, seq_len=2048,
                         vocab=51200, global_batch=4, micro_batch=4),
        TransformerModel("gpt3-175b", layers=96, hidden=12288, heads=96, seq_len=2048,
                         vocab=51200, global_batch=64, micro_batch=1),
        TransformerModel("turing-530b", layers=105, hidden=20480, heads=128, seq_len=2048,
                         vocab=51200, global_batch=280, micro_batch=1),
        TransformerModel("megatron-1t", layers=128, hidden=25600, heads=160, seq_len=2048,
                         vocab=51200, global_batch=512, micro_batch=1),
        TransformerModel("gpt2-small", layers=12, hidden=768, heads=12, seq_len=1024,
                         vocab=50257, global_batch=512, micro_batch=1),
        TransformerModel("bert-base", layers=12, hidden=768, heads=12, seq_len=512,
                         vocab=30522, global_batch=256, micro_batch=1, pre_norm=False),
    )
}


def model_names() -> tuple[str, ...]:
    return tuple(MODEL_PRESETS)


def get_model(name: str, **overrides) -> TransformerModel:
    """A preset by name, with fields overridden (``get_model("gpt3-175b", global_batch=1536)``)."""
    if name not in MODEL_PRESETS:
        raise ValueError(f"model = {name!r}: unknown; allowed: {', '.join(MODEL_PRESETS)}")
    base = MODEL_PRESETS[name]
    if overrides:
        fields = base.to_dict()
        unknown = sorted(set(overrides) - set(fields))
        if unknown:
            raise ValueError(f"model {name!r}: unknown field(s) {unknown}; allowed: "
                             f"{', '.join(fields)}")
        fields.update(overrides)
        return TransformerModel(**fields)
    return base
