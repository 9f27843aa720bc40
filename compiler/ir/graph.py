"""The workload graph: ops in execution order, with the samples and tokens one run processes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from compiler.ir.base import MAX_GRAPH_MACS, IRError, _check_name, _check_positive, _check_size
from compiler.ir.matrix import Conv2d, Gemm
from compiler.ir.vector import (
    Activation, Binary, Cast, Eltwise, Move, Norm, Pool, Reduce, Softmax,
)

__all__ = ["Op", "Graph"]

Op = Union[Gemm, Conv2d, Pool, Eltwise, Activation, Binary, Softmax, Norm, Reduce, Cast, Move]
_OP_TYPES = (Gemm, Conv2d, Pool, Eltwise, Activation, Binary, Softmax, Norm, Reduce, Cast, Move)


@dataclass(frozen=True)
class Graph:
    """A workload: ops in a valid execution (topological) order.

    An op's ``inputs`` name earlier ops; an empty tuple means it reads the graph input.

    ``batch`` is the samples (images, sequences) one run of the graph processes: what
    inferences/s, energy per inference and a training step's samples count. A frontend that knows
    it says so (the zoo, the ONNX importer: a transformer's ops show tokens and heads, not
    sequences); left out, it is the largest ``batch`` of the ops that read the graph input (a
    CNN's first conv, a one-op GEMM workload's independent GEMMs), 1 when none has one.
    ``tokens`` is the sequence positions per sample (a transformer's sequence length; 1 for
    everything else): a training step's tokens are its samples times this.
    """

    name: str
    ops: tuple[Op, ...] = field(default_factory=tuple)
    batch: int | None = None
    tokens: int = 1

    def __post_init__(self) -> None:
        _check_name(self.name, "Graph")
        if not isinstance(self.ops, tuple):
            object.__setattr__(self, "ops", tuple(self.ops))
        seen: set[str] = set()
        for op in self.ops:
            if not isinstance(op, _OP_TYPES):
                raise IRError(f"Graph {self.name!r}: {op!r} is not an IR op")
            if op.name in seen:
                raise IRError(f"Graph {self.name!r}: op name {op.name!r} is used twice")
            for src in op.inputs:
                if src not in seen:
                    raise IRError(
                        f"Graph {self.name!r}: op {op.name!r} reads {src!r}, which is not an "
                        f"earlier op"
                    )
            seen.add(op.name)
        _check_size(self.name, "Graph", "MACs", self.macs, MAX_GRAPH_MACS, "in all")
        if self.batch is None:
            object.__setattr__(self, "batch", max(
                [op.batch for op in self.ops if not op.inputs
                 and isinstance(op, (Gemm, Conv2d, Pool))] + [1]))
        _check_positive(self.name, "Graph", batch=self.batch, tokens=self.tokens)

    def __iter__(self):
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    @property
    def macs(self) -> int:
        return sum(op.macs for op in self.ops)

    def readers(self) -> dict[str, list[str]]:
        """Each op's name -> the names of the ops that read its output, in graph order."""
        out: dict[str, list[str]] = {op.name: [] for op in self.ops}
        for op in self.ops:
            for src in op.inputs:
                out[src].append(op.name)
        return out

    def op(self, name: str) -> Op:
        for op in self.ops:
            if op.name == name:
                return op
        raise KeyError(name)
