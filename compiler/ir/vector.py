"""Ops without a matrix view: the vector engine's ops (pooling, activations, element-wise binary
ops, softmax, norms, reductions, casts, and :class:`Eltwise` for any other element-wise function)
and data movement (:class:`Move`).

Each vector op states its work in one place, :meth:`work`: a :class:`~hw.vector.work.VectorWork`
of operations per element of its ``rows x cols`` view (:attr:`rows`, :attr:`cols`) and per row,
in the operations of the vector engine's cost table (:data:`hw.vector.config.OPS`). The
decompositions are written out in :data:`ACTIVATIONS`, :data:`BINARY`, :data:`REDUCTIONS` and
the classes below; ``docs/vector.md`` lists them with their sources. Row-wise ops (softmax,
norms, reductions) reduce along a row of ``cols`` elements; pooling's rows are output rows; an
element-wise op is one row of all its elements (the lowering cuts it anywhere).
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.ir.base import (
    MAX_ELEMENTS, IRError, _check_count, _check_inputs, _check_name, _check_non_negative,
    _check_positive, _check_size, _OpSizes,
)
from hw.packing import size_bytes
from hw.vector.config import DTYPE_BITS, DTYPES
from hw.vector.work import VectorWork

__all__ = ["Pool", "Eltwise", "Move", "Activation", "Binary", "Softmax", "Norm", "Reduce",
           "Cast", "ELEMENTWISE_OPS", "ACTIVATIONS", "BINARY", "REDUCTIONS", "NORMS", "VIEW_MOVES", "VECTOR_OPS"]

#: Activations and unary functions: operations per element. GELU (erf form) =
#: 0.5x(1 + erf(x/sqrt 2)): x/sqrt2 and 0.5x (2 mul), erf, then 0.5x*e + 0.5x (fma). GELU (tanh
#: form, PyTorch ``approximate="tanh"``) = 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))): x^2, u*x,
#: 0.5x (3 mul), c2*x^2 + c1 and 0.5x*t + 0.5x (2 fma), tanh. Sigmoid = 1/(1 + exp(-x)); SiLU
#: = x * sigmoid(x); sqrt = x * rsqrt(x); hardswish = x * relu6(x + 3) / 6 (fma, 2 max, mul).
ACTIVATIONS = {
    "relu": {"max": 1},
    "relu6": {"max": 2},
    "leaky_relu": {"cmp": 1, "mul": 1, "select": 1},
    "hardswish": {"fma": 1, "max": 2, "mul": 1},
    "sigmoid": {"exp": 1, "add": 1, "rcp": 1},
    "tanh": {"tanh": 1},
    "gelu": {"mul": 2, "erf": 1, "fma": 1},
    "gelu_tanh": {"mul": 3, "fma": 2, "tanh": 1},
    "silu": {"exp": 1, "add": 1, "rcp": 1, "mul": 1},
    "erf": {"erf": 1},
    "exp": {"exp": 1},
    "log": {"log": 1},
    "sqrt": {"rsqrt": 1, "mul": 1},
    "rsqrt": {"rsqrt": 1},
    "reciprocal": {"rcp": 1},
    "square": {"mul": 1},
    "abs": {"max": 1},
    "neg": {"add": 1},
}
#: Element-wise functions of two tensors: operations per output element (div = rcp + mul;
#: pow(a, b) = exp(b * log a)).
BINARY = {
    "add": {"add": 1},
    "sub": {"add": 1},
    "mul": {"mul": 1},
    "div": {"rcp": 1, "mul": 1},
    "max": {"max": 1},
    "min": {"max": 1},
    "pow": {"log": 1, "mul": 1, "exp": 1},
}
#: Reductions along a row: operations per element read, and per row (mean: one multiply by 1/n).
REDUCTIONS = {
    "sum": ({"add": 1}, {}),
    "mean": ({"add": 1}, {"mul": 1}),
    "max": ({"max": 1}, {}),
    "min": ({"max": 1}, {}),
}
NORMS = ("layernorm", "rmsnorm")
#: Moves that change no byte (a view of a contiguous tensor): no DRAM traffic.
VIEW_MOVES = ("reshape", "flatten", "squeeze", "unsqueeze")
#: Other :class:`Eltwise` functions npulab's builders emit, with their operations per element
#: (the row-wise ones, for their backward ``<f>_grad`` ops, per element as :class:`Softmax` and
#: :class:`Norm` state it; a pooling gradient routes or spreads each output gradient): dropout (a random compare, a select and the 1/(1-p) scale), the transposed convolution's
#: col2im scatter-add, nearest (a copy) and linear resizing (two fma per output: lerp in two
#: axes), rotary embeddings and SwiGLU (below), and Adam (m and v updates: 2 mul + 2 fma; bias corrections: 2 mul; the update
#: lr * m / (sqrt(v) + eps): rsqrt, add, mul, fma).
_ELTWISE = {
    "softmax": {"max": 1, "add": 2, "exp": 1, "mul": 1},
    "layernorm": {"add": 3, "fma": 2, "mul": 1},
    "rmsnorm": {"fma": 1, "mul": 2},
    "maxpool": {"cmp": 1, "select": 1},
    "avgpool": {"mul": 1},
    "dropout": {"cmp": 1, "select": 1, "mul": 1},
    "col2im": {"add": 1},
    "resize_nearest": {},
    "resize_linear": {"fma": 2},
    "adaptive_avg_pool": {"add": 1},
    "adam": {"mul": 5, "fma": 3, "rsqrt": 1, "add": 1},
    # LLM decoders (compiler.llm): rotary position embedding x*cos + rotate_half(x)*sin (a mul
    # and an fma per element of Q and K, Su et al. 2021 eq. 34); SwiGLU silu(gate) * up (two
    # operands: silu's exp, add, rcp and mul, then the product; Shazeer 2020).
    "rotary": {"mul": 1, "fma": 1},
    "swiglu": {"exp": 1, "add": 1, "rcp": 1, "mul": 2},
    # ONNX activations and inference-time ops without a typed IR op (compiler.frontends):
    # batch norm y = x * scale + shift per channel; clip = max then min; hard sigmoid
    # max(0, min(1, a x + b)); prelu and thresholded relu a compare and a select; elu and
    # softplus through exp (and log).
    "batchnorm": {"fma": 1},
    "clip": {"max": 2},
    "prelu": {"cmp": 1, "mul": 1, "select": 1},
    "hard_sigmoid": {"fma": 1, "max": 2},
    "hard_swish": {"fma": 1, "max": 2, "mul": 1},
    "thresholded_relu": {"cmp": 1, "select": 1},
    "elu": {"exp": 1, "add": 1, "mul": 1, "cmp": 1, "select": 1},
    "softplus": {"exp": 1, "add": 1, "log": 1},
}


def _element_ops(kind: str, fn: str, table: dict, name: str) -> dict:
    if fn not in table:
        raise IRError(f"{kind} {name!r}: fn = {fn!r}: must be one of {', '.join(table)}")
    return table[fn]


class _Elements(_OpSizes):
    """Sizes of an op whose one input and output have ``elements`` elements each."""

    @property
    def input_elements(self) -> int:
        return self.elements

    @property
    def output_elements(self) -> int:
        return self.elements

    operands = property(lambda self: 1, doc="Input tensors read.")


class _Elementwise(_Elements):
    """An op over ``elements`` elements read and written once, seen as one row."""

    rows = property(lambda self: 1, doc="One row: an element-wise op is cut anywhere.")
    cols = property(lambda self: self.elements)


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

    @property
    def rows(self) -> int:
        """Output rows (one per image and output height)."""
        return self.batch * self.out_h

    @property
    def cols(self) -> int:
        return self.out_w * self.channels

    def work(self) -> VectorWork:
        """Per output element, a window of ``kernel_h x kernel_w`` inputs combined: max pooling
        ``window - 1`` max ops, average pooling ``window - 1`` adds and one multiply by
        ``1/window``."""
        window = self.kernel_h * self.kernel_w
        ops = {"max": window - 1} if self.kind == "max" else {"add": window - 1, "mul": 1}
        return VectorWork(f"{self.kind}pool", per_element=ops)


@dataclass(frozen=True, kw_only=True)
class Eltwise(_Elementwise):
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
    def read_elements(self) -> int:
        """Every operand (each of the ``operands`` inputs has ``elements``)."""
        return self.elements * self.operands

    def work(self) -> VectorWork:
        """The operations of ``op`` per element: an activation's (:data:`ACTIVATIONS`), a binary
        function's (:data:`BINARY`) or one of the other functions npulab's builders emit;
        ``<f>_grad`` (a backward op) is ``f``'s operations plus the chain rule's multiply. Any
        other name costs one add per operand beyond the first (at least one)."""
        grad = self.op.endswith("_grad")
        base = self.op[:-5] if grad else self.op
        for table in (ACTIVATIONS, BINARY, _ELTWISE):
            if base in table:
                ops = dict(table[base])
                break
        else:
            ops = {"add": max(1, self.operands - 1)}
        if grad:
            ops["mul"] = ops.get("mul", 0) + 1
        return VectorWork(self.op, per_element=ops)


@dataclass(frozen=True, kw_only=True)
class Move(_Elementwise):
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
    def is_view(self) -> bool:
        """A reshape-like move that changes no byte (:data:`VIEW_MOVES`)."""
        return self.kind in VIEW_MOVES

    def work(self) -> VectorWork:
        """A copy: no arithmetic, its time is the bytes over the ports that move them."""
        return VectorWork("copy")


@dataclass(frozen=True, kw_only=True)
class Activation(_Elementwise):
    """A unary function applied to every element: ``fn`` is one of :data:`ACTIVATIONS`
    (``gelu`` is the erf form, ``gelu_tanh`` the tanh approximation)."""

    name: str
    fn: str
    elements: int
    inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_name(self.name, "Activation")
        _element_ops("Activation", self.fn, ACTIVATIONS, self.name)
        _check_count(self.name, "Activation", "elements", self.elements)
        _check_inputs(self.name, "Activation", self.inputs)

    def work(self) -> VectorWork:
        return VectorWork(self.fn, per_element=ACTIVATIONS[self.fn])


@dataclass(frozen=True, kw_only=True)
class Binary(_Elementwise):
    """``out = fn(a, b)`` over ``elements`` outputs, ``fn`` one of :data:`BINARY`.

    ``a`` has ``elements`` elements; ``b`` has ``other_elements`` (default: as many), a divisor
    of ``elements`` when it is broadcast (a bias row, a per-channel scale). ``inputs`` name the
    producers of ``a`` and ``b`` (a constant ``b``, such as a bias, has none).
    """

    name: str
    fn: str
    elements: int
    other_elements: int | None = None
    inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_name(self.name, "Binary")
        _element_ops("Binary", self.fn, BINARY, self.name)
        _check_count(self.name, "Binary", "elements", self.elements)
        if self.other_elements is None:
            object.__setattr__(self, "other_elements", self.elements)
        _check_count(self.name, "Binary", "other_elements", self.other_elements)
        if self.elements % self.other_elements:
            raise IRError(f"Binary {self.name!r}: other_elements = {self.other_elements}: must "
                          f"divide elements = {self.elements} (the second operand is broadcast)")
        _check_inputs(self.name, "Binary", self.inputs)

    @property
    def read_elements(self) -> int:
        return self.elements + self.other_elements

    @property
    def operands(self) -> int:
        return 2

    def work(self) -> VectorWork:
        return VectorWork(self.fn, per_element=BINARY[self.fn])


class _Rows(_Elements):
    """Sizes of a row-wise op over ``rows x cols`` elements."""

    def _check_rows(self, kind: str) -> None:
        _check_name(self.name, kind)
        _check_count(self.name, kind, "rows", self.rows)
        _check_count(self.name, kind, "cols", self.cols)
        _check_size(self.name, kind, "rows x cols", self.rows * self.cols, MAX_ELEMENTS,
                    "elements")
        _check_inputs(self.name, kind, self.inputs)

    @property
    def elements(self) -> int:
        return self.rows * self.cols


@dataclass(frozen=True, kw_only=True)
class Softmax(_Rows):
    """Softmax along rows of ``cols`` elements (the axis; ``rows`` = every other dimension).

    Work: three passes over a row (the max; exp(x - max) and their sum; the multiply by the
    reciprocal of the sum), so per element one max, two adds, one exp and one multiply, per
    row one reciprocal and two reduction trees (max and sum)."""

    name: str
    rows: int
    cols: int
    inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self._check_rows("Softmax")

    def work(self) -> VectorWork:
        return VectorWork("softmax", per_element={"max": 1, "add": 2, "exp": 1, "mul": 1},
                          per_row={"rcp": 1}, reductions=2, passes=3)


@dataclass(frozen=True, kw_only=True)
class Norm(_Rows):
    """Layer norm or RMS norm along rows of ``cols`` elements, with learned scale (and, for
    layer norm, shift) when ``affine``.

    Layer norm, three passes: the mean (an add per element), the biased variance (x - mean, then
    an fma into the sum of squares), the output (x - mean, times 1/sqrt(var + eps), and the
    affine fma): per element 3 adds, 1 fma, 1 mul (+1 fma affine); per row 2 mul (1/n), 1 add
    (eps), 1 rsqrt; two reduction trees. RMS norm (Zhang & Sennrich 2019), two passes: the sum of
    squares (fma), the output (times 1/sqrt(mean + eps), times the scale): per element 1 fma,
    1 mul (+1 mul affine); per row 1 mul, 1 add, 1 rsqrt; one tree."""

    name: str
    kind: str
    rows: int
    cols: int
    affine: bool = True
    inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in NORMS:
            raise IRError(f"Norm {self.name!r}: kind = {self.kind!r}: must be one of "
                          f"{', '.join(NORMS)}")
        self._check_rows("Norm")
        if not isinstance(self.affine, bool):
            raise IRError(f"Norm {self.name!r}: affine = {self.affine!r}: must be True or False")

    @property
    def weight_elements(self) -> int:
        """The scale (and layer norm's shift) vectors."""
        if not self.affine:
            return 0
        return (2 if self.kind == "layernorm" else 1) * self.cols

    def work(self) -> VectorWork:
        if self.kind == "layernorm":
            return VectorWork("layernorm",
                              per_element={"add": 3, "fma": 1 + self.affine, "mul": 1},
                              per_row={"mul": 2, "add": 1, "rsqrt": 1}, reductions=2, passes=3)
        return VectorWork("rmsnorm", per_element={"fma": 1, "mul": 1 + self.affine},
                          per_row={"mul": 1, "add": 1, "rsqrt": 1}, reductions=1, passes=2)


@dataclass(frozen=True, kw_only=True)
class Reduce(_Rows):
    """``fn`` (one of :data:`REDUCTIONS`) of each row of ``cols`` elements: ``rows`` outputs."""

    name: str
    fn: str
    rows: int
    cols: int
    inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _element_ops("Reduce", self.fn, REDUCTIONS, self.name)
        self._check_rows("Reduce")

    @property
    def output_elements(self) -> int:
        return self.rows

    def work(self) -> VectorWork:
        per_element, per_row = REDUCTIONS[self.fn]
        return VectorWork(f"reduce_{self.fn}", per_element=per_element, per_row=per_row,
                          reductions=1)


@dataclass(frozen=True, kw_only=True)
class Cast(_Elementwise):
    """Convert ``elements`` elements to ``dst`` (one of :data:`hw.vector.config.DTYPES`), from
    ``src`` (default: the chip's precision). Integer to narrower integer is requantization:
    scale, round, saturate, one ``cast`` operation per element in the cost table (NVDLA's SDP
    output converter and Gemmini's accumulator scaler do it in one pipelined unit)."""

    name: str
    elements: int
    dst: str
    src: str | None = None
    inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_name(self.name, "Cast")
        _check_count(self.name, "Cast", "elements", self.elements)
        for key in ("dst", "src"):
            value = getattr(self, key)
            if not (value in DTYPES or (key == "src" and value is None)):
                raise IRError(f"Cast {self.name!r}: {key} = {value!r}: must be one of "
                              f"{', '.join(DTYPES)}")
        _check_inputs(self.name, "Cast", self.inputs)

    def input_bytes(self, elem_bytes: int) -> int:
        if self.src is None:
            return size_bytes(self.elements, elem_bytes)
        return self.elements * DTYPE_BITS[self.src] // 8

    def output_bytes(self, elem_bytes: int) -> int:
        return self.elements * DTYPE_BITS[self.dst] // 8

    def traffic_bytes(self, elem_bytes: int) -> int:
        return self.input_bytes(elem_bytes) + self.output_bytes(elem_bytes)

    def work(self) -> VectorWork:
        return VectorWork(f"cast_{self.dst}", per_element={"cast": 1})


#: Every op the vector engine runs.
VECTOR_OPS = (Pool, Eltwise, Activation, Binary, Softmax, Norm, Reduce, Cast)
#: The vector ops other than pooling (each has ``elements`` and ``operands``).
ELEMENTWISE_OPS = (Eltwise, Activation, Binary, Softmax, Norm, Reduce, Cast)
