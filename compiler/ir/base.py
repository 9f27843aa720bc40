"""Shared parts of the IR: the error type, the size limits every op is checked against, the
argument checks and the size properties every op has (:class:`_OpSizes`)."""

from __future__ import annotations

from dataclasses import dataclass

from hw.packing import size_bytes

__all__ = ["IRError", "GemmShape", "MAX_DIM", "MAX_OP_MACS", "MAX_ELEMENTS", "MAX_GRAPH_MACS"]


class IRError(ValueError):
    """An op or graph was built with values that do not describe a valid workload."""


#: Ranges every frontend gets (checked when an op is built, so a CSV row, an ONNX input or a
#: ``--gemm`` option of absurd size is refused at once instead of simulating for hours): any
#: dimension (rows, columns, channels, heights, kernel sizes, strides, batch, padding) at most
#: 2**24 = 16,777,216; an op at most 2**46 (~7.0e13) MACs and 2**40 (~1.1e12) elements per
#: tensor; a graph at most 2**50 (~1.1e15) MACs in all. (GPT-3's largest GEMM with a 16-
#: sequence micro-batch of 2048 tokens is ~1e13 MACs; ResNet-50 at batch 256 is ~1e12 in all.)
MAX_DIM = 1 << 24
MAX_OP_MACS = 1 << 46
MAX_ELEMENTS = 1 << 40
MAX_GRAPH_MACS = 1 << 50


def _check_positive(op_name: str, kind: str, **values: int) -> None:
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DIM:
            raise IRError(f"{kind} {op_name!r}: {key} = {value!r}: must be an integer in "
                          f"1..{MAX_DIM:,}")


def _check_non_negative(op_name: str, kind: str, **values: int) -> None:
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DIM:
            raise IRError(f"{kind} {op_name!r}: {key} = {value!r}: must be an integer in "
                          f"0..{MAX_DIM:,}")


def _check_count(op_name: str, kind: str, key: str, value: int) -> None:
    """An element count: an integer in 1..MAX_ELEMENTS."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ELEMENTS:
        raise IRError(f"{kind} {op_name!r}: {key} = {value!r}: must be an integer in "
                      f"1..{MAX_ELEMENTS:,} (2**40)")


def _check_size(op_name: str, kind: str, key: str, value: int, limit: int, what: str) -> None:
    """A product of dimensions (MACs, elements) within ``limit``."""
    if value > limit:
        raise IRError(f"{kind} {op_name!r}: {key} = {value:,}: must be at most {limit:,} "
                      f"(2**{limit.bit_length() - 1}) {what}")


def _check_name(name: object, kind: str) -> None:
    if not isinstance(name, str) or not name:
        raise IRError(f"{kind}: name = {name!r}: must be a non-empty string")


def _check_inputs(name: str, kind: str, inputs: object) -> None:
    if not isinstance(inputs, tuple) or not all(isinstance(i, str) and i for i in inputs):
        raise IRError(f"{kind} {name!r}: inputs = {inputs!r}: must be a tuple of op names")


class _OpSizes:
    """Tensor sizes in bytes, from each op's element counts; defaults for ops without a matrix
    view (no weights, no MACs)."""

    @property
    def weight_elements(self) -> int:
        return 0

    @property
    def read_elements(self) -> int:
        """Elements of every operand, each read once: input and weights."""
        return self.input_elements + self.weight_elements

    @property
    def macs(self) -> int:
        return 0

    def gemm_shape(self) -> GemmShape | None:
        return None

    def input_bytes(self, elem_bytes: int) -> int:
        """Bytes of the main input at ``elem_bytes`` bytes per element (or packed operands
        narrower than a byte, :class:`hw.packing.Packed`: ``ceil(elements * bits / 8)``)."""
        return size_bytes(self.input_elements, elem_bytes)

    def weight_bytes(self, elem_bytes: int) -> int:
        return size_bytes(self.weight_elements, elem_bytes)

    def output_bytes(self, elem_bytes: int) -> int:
        return size_bytes(self.output_elements, elem_bytes)

    def traffic_bytes(self, elem_bytes: int) -> int:
        """Bytes a roofline charges: every operand read once, the output written once."""
        return size_bytes(self.read_elements + self.output_elements, elem_bytes)


@dataclass(frozen=True)
class GemmShape:
    """``count`` independent GEMMs, each ``out (m x n) = a (m x k) @ b (k x n)``."""

    count: int
    m: int
    n: int
    k: int

    def __post_init__(self) -> None:
        _check_positive("gemm", "GemmShape", count=self.count, m=self.m, n=self.n, k=self.k)

    @property
    def macs(self) -> int:
        return self.count * self.m * self.n * self.k
