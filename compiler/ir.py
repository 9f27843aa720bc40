"""The workload graph: a small typed IR of the ops a deep-learning accelerator runs.

Every op is a frozen dataclass validated when built. Ops that run on a matrix engine
(:class:`Gemm`, :class:`Conv2d`) expose :meth:`gemm_shape`, the matrix view the hardware
models consume; the others (:class:`Pool`, :class:`Eltwise`, :class:`Move`) return ``None`` there
and are left to vector units and DMA.

Tensor sizes have one home, here: every op has ``input_elements`` (its main input),
``weight_elements`` (a matrix op's second operand ``w``: the weights, or the second activation of
an attention product), ``output_elements``, ``read_elements`` (every operand read once) and
``macs``, and the same in bytes at a given element width (``op.output_bytes(2)``).
:attr:`Graph.batch` is the workload's sample count.

Matrix view conventions (shared with SCALE-Sim, see ``../shared/reference/scalesim.md``):
a convolution is lowered by im2col to ``out (M x N) = ifmap (M x K) @ filter (K x N)`` with
``M = batch * out_h * out_w``, ``N = out_channels / groups``, ``K = kernel_h * kernel_w *
in_channels / groups``, repeated once per group. Depthwise convolution is ``groups ==
in_channels``: one small GEMM per channel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

__all__ = [
    "IRError",
    "GemmShape",
    "Gemm",
    "Conv2d",
    "Pool",
    "Eltwise",
    "Move",
    "Op",
    "Graph",
    "conv2d",
    "MAX_DIM",
    "MAX_OP_MACS",
    "MAX_ELEMENTS",
    "MAX_GRAPH_MACS",
]


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
        """Bytes of the main input at ``elem_bytes`` bytes per element."""
        return self.input_elements * elem_bytes

    def weight_bytes(self, elem_bytes: int) -> int:
        return self.weight_elements * elem_bytes

    def output_bytes(self, elem_bytes: int) -> int:
        return self.output_elements * elem_bytes

    def traffic_bytes(self, elem_bytes: int) -> int:
        """Bytes a roofline charges: every operand read once, the output written once."""
        return (self.read_elements + self.output_elements) * elem_bytes


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


@dataclass(frozen=True, kw_only=True)
class Gemm(_OpSizes):
    """Batched matrix multiply: ``out[b] (m x n) = a[b] (m x k) @ w[b] (k x n)`` for ``b < batch``.

    A fully connected layer is ``Gemm(m=batch_size, n=out_features, k=in_features)``; attention
    score and context products are ``Gemm`` with ``batch = batch_size * heads``.
    """

    name: str
    m: int
    n: int
    k: int
    batch: int = 1
    inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_name(self.name, "Gemm")
        _check_positive(self.name, "Gemm", m=self.m, n=self.n, k=self.k, batch=self.batch)
        _check_inputs(self.name, "Gemm", self.inputs)
        _check_size(self.name, "Gemm", "MACs", self.macs, MAX_OP_MACS, "per op")

    def gemm_shape(self) -> GemmShape:
        return GemmShape(self.batch, self.m, self.n, self.k)

    @property
    def macs(self) -> int:
        return self.gemm_shape().macs

    @property
    def input_elements(self) -> int:
        return self.batch * self.m * self.k

    @property
    def weight_elements(self) -> int:
        return self.batch * self.k * self.n

    @property
    def output_elements(self) -> int:
        return self.batch * self.m * self.n


@dataclass(frozen=True, kw_only=True)
class Conv2d(_OpSizes):
    """2-D convolution, NCHW semantics, with padding, stride, dilation, groups and batch.

    ``out_h = (in_h + pad_top + pad_bottom - dilation_h * (kernel_h - 1) - 1) // stride_h + 1``
    (the PyTorch/ONNX definition); likewise ``out_w``.
    """

    name: str
    in_h: int
    in_w: int
    in_channels: int
    out_channels: int
    kernel_h: int
    kernel_w: int
    stride_h: int = 1
    stride_w: int = 1
    pad_top: int = 0
    pad_bottom: int = 0
    pad_left: int = 0
    pad_right: int = 0
    dilation_h: int = 1
    dilation_w: int = 1
    groups: int = 1
    batch: int = 1
    inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_name(self.name, "Conv2d")
        _check_positive(
            self.name, "Conv2d", in_h=self.in_h, in_w=self.in_w, in_channels=self.in_channels,
            out_channels=self.out_channels, kernel_h=self.kernel_h, kernel_w=self.kernel_w,
            stride_h=self.stride_h, stride_w=self.stride_w, dilation_h=self.dilation_h,
            dilation_w=self.dilation_w, groups=self.groups, batch=self.batch,
        )
        _check_non_negative(
            self.name, "Conv2d", pad_top=self.pad_top, pad_bottom=self.pad_bottom,
            pad_left=self.pad_left, pad_right=self.pad_right,
        )
        _check_inputs(self.name, "Conv2d", self.inputs)
        for key in ("in_channels", "out_channels"):
            if getattr(self, key) % self.groups:
                raise IRError(
                    f"Conv2d {self.name!r}: {key} = {getattr(self, key)} is not divisible by "
                    f"groups = {self.groups}"
                )
        if self.out_h < 1 or self.out_w < 1:
            raise IRError(
                f"Conv2d {self.name!r}: the {self.kernel_h}x{self.kernel_w} kernel (dilation "
                f"{self.dilation_h}x{self.dilation_w}) does not fit the padded "
                f"{self.in_h}x{self.in_w} input: output would be {self.out_h}x{self.out_w}"
            )
        _check_size(self.name, "Conv2d", "input elements", self.input_elements, MAX_ELEMENTS,
                    "per tensor")
        _check_size(self.name, "Conv2d", "MACs", self.macs, MAX_OP_MACS, "per op")

    @property
    def out_h(self) -> int:
        span = self.dilation_h * (self.kernel_h - 1) + 1
        return (self.in_h + self.pad_top + self.pad_bottom - span) // self.stride_h + 1

    @property
    def out_w(self) -> int:
        span = self.dilation_w * (self.kernel_w - 1) + 1
        return (self.in_w + self.pad_left + self.pad_right - span) // self.stride_w + 1

    @property
    def is_depthwise(self) -> bool:
        return self.groups > 1 and self.groups == self.in_channels

    def gemm_shape(self) -> GemmShape:
        return GemmShape(
            count=self.groups,
            m=self.batch * self.out_h * self.out_w,
            n=self.out_channels // self.groups,
            k=self.kernel_h * self.kernel_w * (self.in_channels // self.groups),
        )

    @property
    def macs(self) -> int:
        return self.gemm_shape().macs

    @property
    def input_elements(self) -> int:
        """The NCHW input (not the im2col matrix)."""
        return self.batch * self.in_channels * self.in_h * self.in_w

    @property
    def weight_elements(self) -> int:
        return self.out_channels * (self.in_channels // self.groups) * self.kernel_h * self.kernel_w

    @property
    def output_elements(self) -> int:
        return self.batch * self.out_channels * self.out_h * self.out_w


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


Op = Union[Gemm, Conv2d, Pool, Eltwise, Move]
_OP_TYPES = (Gemm, Conv2d, Pool, Eltwise, Move)


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

    def op(self, name: str) -> Op:
        for op in self.ops:
            if op.name == name:
                return op
        raise KeyError(name)


def conv2d(
    name: str,
    in_hw: int | tuple[int, int],
    in_channels: int,
    out_channels: int,
    kernel: int | tuple[int, int],
    stride: int = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int = 1,
    groups: int = 1,
    batch: int = 1,
    inputs: tuple[str, ...] = (),
) -> Conv2d:
    """Shorthand for the common symmetric case (PyTorch ``nn.Conv2d`` arguments)."""
    in_h, in_w = (in_hw, in_hw) if isinstance(in_hw, int) else in_hw
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    return Conv2d(
        name=name, in_h=in_h, in_w=in_w, in_channels=in_channels, out_channels=out_channels,
        kernel_h=kh, kernel_w=kw, stride_h=stride, stride_w=stride, pad_top=ph, pad_bottom=ph,
        pad_left=pw, pad_right=pw, dilation_h=dilation, dilation_w=dilation, groups=groups,
        batch=batch, inputs=inputs,
    )
