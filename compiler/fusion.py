"""Operator fusion: which ops of a graph run together, so that their intermediate tensors never go
to DRAM (the groups; the backends lower each group as one schedule).

Four patterns, found in graph order (an op belongs to at most one group):

* ``attention`` -- ``Gemm`` scores (``Q @ K^T``, two activation inputs) -> ``Softmax`` over its
  rows [-> ``Eltwise("dropout")``] -> ``Gemm`` context (``P @ V``) with the same heads and
  queries: FlashAttention's loop (Dao et al., NeurIPS 2022; FlashAttention-2, arXiv 2307.08691):
  per query tile, the key/value tiles stream by, the array computes the score tile and its
  product with V, the vector engine keeps a running row max and sum (online softmax, Milakov &
  Gimelshein, arXiv 1805.02867), so neither the scores nor the probabilities reach DRAM.
* ``add_norm`` -- a residual ``Binary("add")`` of two full tensors whose output a ``Norm`` over
  whole rows reads: one pass adds and gathers the row statistics (FasterTransformer's and
  TensorRT's add-bias-residual-layernorm kernel); the sum is stored too when another op reads it.
* ``epilogue`` -- a ``Gemm``/``Conv2d`` followed by ``Activation``, ``Cast`` and ``Binary`` ops that
  each read the previous one (and, for a residual add, a tensor already in DRAM; for a bias or a
  per-channel scale, constants): applied to each output tile on chip before it is stored
  (NVDLA's SDP after CACC, Gemmini's scaler and activation on the accumulator read-out).
* ``conv_pool`` -- a ``Conv2d`` (with its epilogue) whose only reader is a ``Pool``: the pool runs
  on the conv's output rows as they leave the array (NVDLA's SDP -> PDP on the fly, Gemmini's
  max-pooling in its store path), so the conv output is never stored.

An op is fused into its predecessor only when the predecessor's output has no other reader
(except the sum of an ``add_norm``), so no tensor another op needs is lost.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.ir import (
    Activation, Binary, Cast, Conv2d, Eltwise, Gemm, Graph, Norm, Pool, Softmax,
)

__all__ = ["FusedGroup", "find_groups", "PATTERNS"]

#: The fusion patterns, in the order they are looked for.
PATTERNS = ("attention", "add_norm", "epilogue", "conv_pool")


@dataclass(frozen=True)
class FusedGroup:
    """Ops that run as one schedule: ``kind`` (one of :data:`PATTERNS`), the ``anchor`` op whose
    layer carries the group's commands, and every ``member`` (anchor first, in graph order)."""

    kind: str
    anchor: str
    members: tuple[str, ...]

    @property
    def fused(self) -> tuple[str, ...]:
        """The members other than the anchor (their layers get no commands of their own)."""
        return self.members[1:]


def _epilogue_op(op, tail: str, out_elements: int, index: dict, anchor_index: int) -> bool:
    """Can ``op`` (reading ``tail``) run on ``tail``'s output tile?"""
    if isinstance(op, (Activation, Cast)):
        return op.inputs == (tail,) and op.elements == out_elements
    if isinstance(op, Binary) and op.elements == out_elements and tail in op.inputs:
        others = [s for s in op.inputs if s != tail]
        if op.other_elements != op.elements:            # a broadcast bias / scale: constants
            return not others
        # a residual: the other operand must already be in DRAM when the anchor runs
        return len(others) == 1 and index[others[0]] < anchor_index
    return False


def find_groups(graph: Graph, patterns=PATTERNS) -> dict[str, FusedGroup]:
    """Every op of a fused group, by name -> its group (module docstring). ``patterns``
    restricts the search (``()``: no fusion)."""
    for p in patterns:
        if p not in PATTERNS:
            raise ValueError(f"fusion pattern {p!r}: must be one of {', '.join(PATTERNS)}")
    ops = list(graph.ops)
    index = {op.name: i for i, op in enumerate(ops)}
    by_name = {op.name: op for op in ops}
    readers = graph.readers()
    taken: dict[str, FusedGroup] = {}

    def only_reader(name: str):
        r = readers[name]
        return by_name[r[0]] if len(r) == 1 else None

    def claim(kind: str, members: list[str]) -> None:
        group = FusedGroup(kind, members[0], tuple(members))
        for m in members:
            taken[m] = group

    if "attention" in patterns:
        for op in ops:
            if op.name in taken or not isinstance(op, Gemm) or len(op.inputs) != 2:
                continue
            soft = only_reader(op.name)
            if not (isinstance(soft, Softmax) and soft.inputs[:1] == (op.name,)
                    and soft.rows == op.batch * op.m and soft.cols == op.n):
                continue
            members = [op.name, soft.name]
            nxt = only_reader(soft.name)
            if isinstance(nxt, Eltwise) and nxt.op == "dropout" and nxt.inputs == (soft.name,):
                members.append(nxt.name)
                nxt = only_reader(nxt.name)
            if (isinstance(nxt, Gemm) and nxt.inputs[:1] == (members[-1],)
                    and len(nxt.inputs) == 2 and (nxt.batch, nxt.m, nxt.k) == (op.batch, op.m, op.n)
                    and not any(m in taken for m in members + [nxt.name])):
                claim("attention", members + [nxt.name])

    if "add_norm" in patterns:
        for op in ops:
            if (op.name in taken or not isinstance(op, Binary) or op.fn != "add"
                    or op.other_elements != op.elements):
                continue
            norms = [by_name[r] for r in readers[op.name]
                     if isinstance(by_name[r], Norm) and by_name[r].inputs == (op.name,)
                     and by_name[r].elements == op.elements and r not in taken]
            if norms:
                claim("add_norm", [op.name, norms[0].name])

    if "epilogue" in patterns or "conv_pool" in patterns:
        for op in ops:
            if op.name in taken or not isinstance(op, (Gemm, Conv2d)):
                continue
            if isinstance(op, Gemm) and len(op.inputs) >= 2:
                continue        # a product of two activations (attention outside a pattern)
            members, tail = [op.name], op.name
            kind = None
            if "epilogue" in patterns:
                while True:
                    nxt = only_reader(tail)
                    if (nxt is None or nxt.name in taken
                            or not _epilogue_op(nxt, tail, op.output_elements, index,
                                                index[op.name])):
                        break
                    members.append(nxt.name)
                    tail = nxt.name
                kind = "epilogue" if len(members) > 1 else None
            if "conv_pool" in patterns and isinstance(op, Conv2d):
                pool = only_reader(tail)
                if (isinstance(pool, Pool) and pool.name not in taken
                        and pool.inputs == (tail,) and pool.channels == op.out_channels
                        and (pool.in_h, pool.in_w) == (op.out_h, op.out_w)
                        and pool.batch == op.batch):
                    members.append(pool.name)
                    kind = "conv_pool"
            if kind is not None:
                claim(kind, members)
    return taken
