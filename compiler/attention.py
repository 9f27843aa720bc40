"""Multi-head attention, and the transformer block around it, written as IR ops.

A matrix engine sees attention as GEMMs. With ``b`` = batch, ``s`` = query length (``seq_len``),
``t`` = key/value length (``kv_len``, ``s`` unless given), ``d`` = ``d_model``, ``h`` = ``heads``
and ``dh = d // h``, :func:`attention_ops` emits, in this order::

    op                  IR                                          MACs
    <prefix>.q_proj     Gemm(m=b*s, n=d, k=d)                       b*s*d*d
    <prefix>.k_proj     Gemm(m=b*t, n=d, k=d)                       b*t*d*d
    <prefix>.v_proj     Gemm(m=b*t, n=d, k=d)                       b*t*d*d
    <prefix>.scores     Gemm(batch=b*h, m=s, n=t, k=dh)   Q @ K^T   b*s*t*d
    <prefix>.softmax    Softmax(rows=b*h*s, cols=t)                 0
    <prefix>.context    Gemm(batch=b*h, m=s, n=dh, k=t)   P @ V     b*s*t*d
    <prefix>.out_proj   Gemm(m=b*s, n=d, k=d)                       b*s*d*d

so self-attention costs ``4*b*s*d^2 + 2*b*s^2*d`` MACs. The ``1/sqrt(dh)`` scale and any causal or
padding mask are folded into the softmax; a causal mask does not shrink ``scores`` or ``context``
(GPT-2 and BERT implementations compute the full ``s x t`` product, then mask). Biases add no MACs
and are not modelled; splitting and merging heads is a layout change, not an op.

Edges: ``q_proj`` reads ``inputs``; ``k_proj``/``v_proj`` read ``kv_inputs`` (``inputs`` unless
given: cross-attention reads the encoder output there); ``scores`` reads ``(q_proj, k_proj)``;
``softmax`` reads ``scores``; ``context`` reads ``(softmax, v_proj)``; ``out_proj`` reads
``context``. Empty ``inputs`` means the graph input, as in :class:`compiler.ir.Graph`.

:func:`transformer_block_ops` adds the feed-forward network (two GEMMs around a GELU), the two
residual adds and the two layer norms, in post-norm (BERT) or pre-norm (GPT-2) order.

Both also build what one of ``tp`` tensor-parallel ranks runs (Shoeybi et al. 2019,
"Megatron-LM", §3): Q, K, V and ``fc1`` are column-parallel (``n / tp``), the heads are split
(``batch = b*h/tp``), ``out_proj`` and ``fc2`` are row-parallel (``k / tp``); with
``sequence_parallel`` the norms and adds hold ``1/tp`` of the tokens too (Korthikanti et al. 2022
§4). ``fused_qkv`` computes Q, K and V in one ``<prefix>.qkv`` GEMM (``n = 3d/tp``; ``scores``
reads ``qkv``, ``context`` reads ``(softmax, qkv)``) and ``dropout`` adds a
``<prefix>.dropout`` over the attention probabilities between ``softmax`` and ``context``, as
Megatron-LM's GPT layer does (:meth:`compiler.parallel.TransformerModel.layer_ops`).
"""

from __future__ import annotations

from compiler.ir import Activation, Binary, Eltwise, Gemm, IRError, Norm, Op, Softmax

__all__ = ["attention_ops", "transformer_block_ops"]


def _check_prefix(prefix: object) -> None:
    if not isinstance(prefix, str) or not prefix:
        raise IRError(f"attention: prefix = {prefix!r}: must be a non-empty string")


def _check_positive(where: str, **values: object) -> None:
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise IRError(f"{where}: {key} = {value!r}: must be an integer >= 1")


def _check_op_names(where: str, **values: object) -> None:
    for key, value in values.items():
        if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
            raise IRError(f"{where}: {key} = {value!r}: must be a tuple of op names")


def _check_heads(where: str, d_model: int, heads: int) -> None:
    if d_model % heads:
        raise IRError(
            f"{where}: d_model = {d_model} is not divisible by heads = {heads}; each head gets "
            f"d_model // heads features"
        )


def _check_tp(where: str, tp: int, **divisible: int) -> None:
    for key, value in divisible.items():
        if value % tp:
            raise IRError(f"{where}: tp = {tp} does not divide {key} = {value}; tensor "
                          f"parallelism splits heads and FFN columns evenly")


def _check_flags(where: str, **values: object) -> None:
    for key, value in values.items():
        if not isinstance(value, bool):
            raise IRError(f"{where}: {key} = {value!r}: must be True or False")


def attention_ops(
    prefix: str,
    *,
    seq_len: int,
    d_model: int,
    heads: int,
    batch: int = 1,
    kv_len: int | None = None,
    inputs: tuple[str, ...] = (),
    kv_inputs: tuple[str, ...] | None = None,
    tp: int = 1,
    fused_qkv: bool = False,
    dropout: bool = False,
) -> list[Op]:
    """The ops of one multi-head attention; see the module docstring for shapes and edges.

    Parameters
    ----------
    prefix:
        Prepended to every op name (``f"{prefix}.q_proj"``, ...).
    seq_len, kv_len:
        Query and key/value sequence lengths; ``kv_len`` defaults to ``seq_len`` (self-attention).
    d_model, heads:
        Model width and head count; ``d_model`` must be divisible by ``heads``.
    batch:
        Independent sequences.
    inputs, kv_inputs:
        Names of the ops producing the query input and the key/value input (``kv_inputs``
        defaults to ``inputs``).
    tp:
        Tensor-parallel ranks; the ops are one rank's (``heads`` must be divisible by ``tp``).
    fused_qkv, dropout:
        One ``qkv`` GEMM instead of three (self-attention only); a dropout after the softmax.

    Raises
    ------
    IRError
        An argument is not a positive integer, ``d_model % heads != 0``, ``heads % tp != 0``,
        ``fused_qkv`` with cross-attention, or a name is malformed; the message names the
        argument and its value.
    """
    _check_prefix(prefix)
    where = f"attention {prefix!r}"
    if kv_len is None:
        kv_len = seq_len
    if kv_inputs is None:
        kv_inputs = inputs
    _check_positive(where, seq_len=seq_len, d_model=d_model, heads=heads, batch=batch,
                    kv_len=kv_len, tp=tp)
    _check_heads(where, d_model, heads)
    _check_tp(where, tp, heads=heads)
    _check_op_names(where, inputs=inputs, kv_inputs=kv_inputs)
    _check_flags(where, fused_qkv=fused_qkv, dropout=dropout)
    if fused_qkv and (kv_len != seq_len or kv_inputs != inputs):
        raise IRError(f"{where}: fused_qkv = True needs self-attention (kv_len = {kv_len} and "
                      f"kv_inputs = {kv_inputs!r} must equal seq_len = {seq_len} and inputs = "
                      f"{inputs!r})")

    head_dim = d_model // heads
    rank_heads = batch * heads // tp
    scores, softmax, context = f"{prefix}.scores", f"{prefix}.softmax", f"{prefix}.context"
    if fused_qkv:
        q = k = v = f"{prefix}.qkv"
        ops: list[Op] = [Gemm(name=q, m=batch * seq_len, n=3 * d_model // tp, k=d_model,
                              inputs=inputs)]
    else:
        q, k, v = f"{prefix}.q_proj", f"{prefix}.k_proj", f"{prefix}.v_proj"
        ops = [
            Gemm(name=q, m=batch * seq_len, n=d_model // tp, k=d_model, inputs=inputs),
            Gemm(name=k, m=batch * kv_len, n=d_model // tp, k=d_model, inputs=kv_inputs),
            Gemm(name=v, m=batch * kv_len, n=d_model // tp, k=d_model, inputs=kv_inputs),
        ]
    probs = softmax
    ops += [
        Gemm(name=scores, batch=rank_heads, m=seq_len, n=kv_len, k=head_dim,
             inputs=(q,) if q == k else (q, k)),
        Softmax(name=softmax, rows=rank_heads * seq_len, cols=kv_len, inputs=(scores,)),
    ]
    if dropout:
        probs = f"{prefix}.dropout"
        ops.append(Eltwise(name=probs, op="dropout", elements=rank_heads * seq_len * kv_len,
                           inputs=(softmax,)))
    ops += [
        Gemm(name=context, batch=rank_heads, m=seq_len, n=head_dim, k=kv_len,
             inputs=(probs, v)),
        Gemm(name=f"{prefix}.out_proj", m=batch * seq_len, n=d_model, k=d_model // tp,
             inputs=(context,)),
    ]
    return ops


def transformer_block_ops(
    prefix: str,
    *,
    seq_len: int,
    d_model: int,
    heads: int,
    ffn_dim: int | None = None,
    batch: int = 1,
    pre_norm: bool = False,
    inputs: tuple[str, ...] = (),
    tp: int = 1,
    sequence_parallel: bool = False,
    fused_qkv: bool = False,
    attn_dropout: bool = False,
    activation: str = "gelu",
) -> list[Op]:
    """One self-attention transformer block; the last op in the list is the block's output.

    Post-norm (``pre_norm=False``, BERT; Vaswani et al. 2017 §3.1)::

        attn(x) -> add1(attn, x) -> ln1 -> fc1 -> gelu -> fc2 -> add2(fc2, ln1) -> ln2

    Pre-norm (``pre_norm=True``, GPT-2; Radford et al. 2019 §2.3 moves layer norm to the input of
    each sub-block)::

        ln1(x) -> attn -> add1(attn, x) -> ln2 -> fc1 -> gelu -> fc2 -> add2(fc2, add1)

    Ops are named ``<prefix>.attn.*`` (see :func:`attention_ops`), ``<prefix>.ffn.fc1``,
    ``<prefix>.ffn.gelu``, ``<prefix>.ffn.fc2``, ``<prefix>.add1``/``add2`` and
    ``<prefix>.ln1``/``ln2``. The FFN is ``Gemm(m=b*s, n=ffn_dim, k=d)`` then
    ``Gemm(m=b*s, n=d, k=ffn_dim)``; ``ffn_dim`` defaults to ``4 * d_model``. A residual add whose
    shortcut is the graph input (empty ``inputs``) lists only its other producer.

    ``tp``, ``sequence_parallel``, ``fused_qkv`` and ``attn_dropout`` (:func:`attention_ops`'s
    ``dropout``) build one tensor-parallel rank's ops (module docstring); ``fc1`` is
    ``n = ffn_dim / tp`` and ``fc2`` ``k = ffn_dim / tp``. ``activation`` is the FFN's
    (:data:`compiler.ir.ACTIVATIONS`): ``gelu`` (erf form, BERT) or ``gelu_tanh`` (GPT-2's
    ``gelu_new``), ...

    Raises
    ------
    IRError
        As :func:`attention_ops`, and for a non-positive ``ffn_dim``, ``ffn_dim % tp != 0`` or a
        non-bool flag.
    """
    _check_prefix(prefix)
    where = f"transformer block {prefix!r}"
    if ffn_dim is None and isinstance(d_model, int):
        ffn_dim = 4 * d_model
    _check_positive(where, seq_len=seq_len, d_model=d_model, heads=heads, batch=batch,
                    ffn_dim=ffn_dim, tp=tp)
    _check_heads(where, d_model, heads)
    _check_tp(where, tp, heads=heads, ffn_dim=ffn_dim)
    _check_op_names(where, inputs=inputs)
    _check_flags(where, pre_norm=pre_norm, sequence_parallel=sequence_parallel,
                 fused_qkv=fused_qkv, attn_dropout=attn_dropout)

    tokens = batch * seq_len
    width = tokens * d_model // tp if sequence_parallel else tokens * d_model

    # a rank's slice of the tokens is whole rows of d_model (one row if tp does not divide it)
    rows, cols = (width // d_model, d_model) if width % d_model == 0 else (1, width)

    def norm(name: str, source: str | tuple[str, ...]) -> Norm:
        sources = (source,) if isinstance(source, str) else source
        return Norm(name=f"{prefix}.{name}", kind="layernorm", rows=rows, cols=cols,
                    inputs=sources)

    def add(name: str, branch: str, shortcut: tuple[str, ...]) -> Binary:
        return Binary(name=f"{prefix}.{name}", fn="add", elements=width,
                      inputs=(branch,) + shortcut)

    ops: list[Op] = []
    attn_input = inputs
    if pre_norm:
        ops.append(norm("ln1", inputs))
        attn_input = (ops[-1].name,)
    ops += attention_ops(f"{prefix}.attn", seq_len=seq_len, d_model=d_model, heads=heads,
                         batch=batch, inputs=attn_input, tp=tp, fused_qkv=fused_qkv,
                         dropout=attn_dropout)
    ops.append(add("add1", ops[-1].name, inputs))
    if pre_norm:
        ffn_shortcut = ops[-1].name
        ops.append(norm("ln2", ffn_shortcut))
    else:
        ops.append(norm("ln1", ops[-1].name))
        ffn_shortcut = ops[-1].name
    fc1, gelu, fc2 = f"{prefix}.ffn.fc1", f"{prefix}.ffn.gelu", f"{prefix}.ffn.fc2"
    ops += [
        Gemm(name=fc1, m=tokens, n=ffn_dim // tp, k=d_model, inputs=(ops[-1].name,)),
        Activation(name=gelu, fn=activation, elements=tokens * ffn_dim // tp, inputs=(fc1,)),
        Gemm(name=fc2, m=tokens, n=d_model, k=ffn_dim // tp, inputs=(gelu,)),
    ]
    ops.append(add("add2", fc2, (ffn_shortcut,)))
    if not pre_norm:
        ops.append(norm("ln2", ops[-1].name))
    return ops
