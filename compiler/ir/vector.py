"""Ops without a matrix view: pooling, element-wise and row-wise vector ops, data movement."""

from __future__ import annotations

from dataclasses import dataclass

from compiler.ir.base import (
    IRError, _check_count, _check_inputs, _check_name, _check_non_negative, _check_positive,
    _OpSizes,
)

__all__ = ["Pool", "Eltwise", "Move"]


@dataclass(frozen=True, kw_only=True)
class Pool(_OpSizes):
    """Max or average pooling; global pooling is a kernel the size of the input."""

    name: str
    kind: str
    in_h: int
    in_w: int
    channels: int
    kernel_h: int
    kernel_w: int
    stride_h: int = 1
    stride_w: int = 1
    pad_top: int = 0
    pad_bottom: int = 0
    pad_left: int = 0
    pad_right: int = 0
    batch: int = 1
    inputs: tuple[str, ...] = ()

    KINDS = ("max", "avg")

    def __post_init__(self) -> None:
        _check_name(self.name, "Pool")
        if self.kind not in self.KINDS:
            raise IRError(f"Pool {self.name!r}: kind = {self.kind!r}: must be one of {self.KINDS}")
        _check_positive(
            self.name, "Pool", in_h=self.in_h, in_w=self.in_w, channels=self.channels,
            kernel_h=self.kernel_h, kernel_w=self.kernel_w, stride_h=self.stride_h,
            stride_w=self.stride_w, batch=self.batch,
        )
        _check_non_negative(
            self.name, "Pool", pad_top=self.pad_top, pad_bottom=self.pad_bottom,
            pad_left=self.pad_left, pad_right=self.pad_right,
        )
        _check_inputs(self.name, "Pool", self.inputs)
        if self.out_h < 1 or self.out_w < 1:
            raise IRError(
                f"Pool {self.name!r}: the {self.kernel_h}x{self.kernel_w} window does not fit the "
                f"padded {self.in_h}x{self.in_w} input"
            )

    @property
    def out_h(self) -> int:
        return (self.in_h + self.pad_top + self.pad_bottom - self.kernel_h) // self.stride_h + 1

    @property
    def out_w(self) -> int:
        return (self.in_w + self.pad_left + self.pad_right - self.kernel_w) // self.stride_w + 1

    @property
    def input_elements(self) -> int:
        return self.batch * self.channels * self.in_h * self.in_w

    @property
    def output_elements(self) -> int:
        return self.batch * self.channels * self.out_h * self.out_w


@dataclass(frozen=True, kw_only=True)
class Eltwise(_OpSizes):
    """An element-wise or row-wise vector op over ``elements`` output elements.

    ``op`` names the function (``add``, ``mul``, ``relu``, ``gelu``, ``softmax``, ``layernorm``,
    ...); ``operands`` is how many input tensors it reads (2 for a residual add).
    """

    name: str
    op: str
    elements: int
    operands: int = 1
    inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_name(self.name, "Eltwise")
        if not isinstance(self.op, str) or not self.op:
            raise IRError(f"Eltwise {self.name!r}: op = {self.op!r}: must be a non-empty string")
        _check_count(self.name, "Eltwise", "elements", self.elements)
        _check_positive(self.name, "Eltwise", operands=self.operands)
        _check_inputs(self.name, "Eltwise", self.inputs)

    @property
    def input_elements(self) -> int:
        """One operand (each of the ``operands`` inputs has ``elements``)."""
        return self.elements

    @property
    def read_elements(self) -> int:
        return self.elements * self.operands

    @property
    def output_elements(self) -> int:
        return self.elements


@dataclass(frozen=True, kw_only=True)
class Move(_OpSizes):
    """Data movement without arithmetic, writing ``elements`` output elements.

    ``kind`` names it (``concat``, ``transpose``, ``split``, ``slice``, ``pad``, ``gather``,
    ...): a layout change that copies bytes. Pure views (a reshape of a contiguous tensor) need
    no op at all.
    """

    name: str
    kind: str
    elements: int
    inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_name(self.name, "Move")
        if not isinstance(self.kind, str) or not self.kind:
            raise IRError(f"Move {self.name!r}: kind = {self.kind!r}: must be a non-empty string")
        _check_count(self.name, "Move", "elements", self.elements)
        _check_inputs(self.name, "Move", self.inputs)

    @property
    def input_elements(self) -> int:
        return self.elements

    @property
    def output_elements(self) -> int:
        return self.elements
