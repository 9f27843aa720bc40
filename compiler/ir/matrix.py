"""Matrix ops: :class:`Gemm` and :class:`Conv2d`, the ops a matrix engine runs (their
:meth:`gemm_shape` is the matrix view the hardware models consume)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hw.packing import bits_of, size_bytes

from compiler.ir.base import (
    MAX_ELEMENTS, MAX_OP_MACS, GemmShape, IRError, _check_inputs, _check_name, _check_non_negative,
    _check_positive, _check_size, _OpSizes,
)

__all__ = ["Gemm", "Conv2d", "conv2d", "W_BITS"]

#: Storage widths of a Gemm's ``w`` (``Gemm.w_bits``): int4, int8/fp8, 16-bit.
W_BITS = (4, 8, 16)


def _check_ratio(op, kind: str, key: str, what: str) -> None:
    """``op.<key>`` is None or a ratio in 0..1 (stored as a float)."""
    z = getattr(op, key)
    if z is None:
        return
    if (isinstance(z, bool) or not isinstance(z, (int, float)) or not math.isfinite(z)
            or not 0 <= z <= 1):
        raise IRError(f"{kind} {op.name!r}: {key} = {z!r}: must be a ratio in 0..1 ({what}) "
                      f"or None")
    object.__setattr__(op, key, float(z))


def _check_w_bits(op, kind: str) -> None:
    if op.w_bits is not None and (isinstance(op.w_bits, bool) or op.w_bits not in W_BITS):
        raise IRError(f"{kind} {op.name!r}: w_bits = {op.w_bits!r}: must be one of "
                      f"{', '.join(map(str, W_BITS))} or None")


def _check_act_zeros(op, kind: str) -> None:
    _check_ratio(op, kind, "act_zeros", "the fraction of its input activations that are zero")


def _check_weight_nm(op, kind: str) -> None:
    """``weight_nm`` is None or ``(N, M)`` with 1 <= N <= M <= 64 (stored as a tuple)."""
    nm = op.weight_nm
    if nm is not None:
        ok = (isinstance(nm, (tuple, list)) and len(nm) == 2
              and all(isinstance(v, int) and not isinstance(v, bool) for v in nm)
              and 1 <= nm[0] <= nm[1] <= 64)
        if not ok:
            raise IRError(f"{kind} {op.name!r}: weight_nm = {nm!r}: must be (N, M) with "
                          f"1 <= N <= M <= 64, or None (dense)")
        object.__setattr__(op, "weight_nm", (int(nm[0]), int(nm[1])))
    rows = op.weight_nm_rows
    if rows is None:
        return
    from hw.sparsity import check_mix       # numpy: not on the CLI's --help path
    if nm is None:
        raise IRError(f"{kind} {op.name!r}: weight_nm_rows = {rows!r} needs weight_nm = "
                      f"(largest N, M) for its group size M")
    try:
        mix = check_mix(rows, op.weight_nm[1])
    except ValueError as exc:
        raise IRError(f"{kind} {op.name!r}: {exc}") from None
    if mix[0][0] != op.weight_nm[0]:
        raise IRError(f"{kind} {op.name!r}: weight_nm_rows = {rows!r}: its largest N is "
                      f"{mix[0][0]}, but weight_nm = {op.weight_nm!r} says {op.weight_nm[0]}")
    channels = op.n if kind == "Gemm" else op.out_channels
    if sum(c for _, c in mix) != channels:
        raise IRError(f"{kind} {op.name!r}: weight_nm_rows = {rows!r} counts "
                      f"{sum(c for _, c in mix)} output channels; the op has {channels}")
    object.__setattr__(op, "weight_nm_rows", mix if len(mix) > 1 else None)


class _StoredWeights(_OpSizes):
    """Sizes of a matrix op whose weights may be stored narrower than its operands
    (``w_bits``: 4 is int4, two per byte)."""

    def rows_for(self, channels: int) -> dict:
        """The ``weight_nm`` and ``weight_nm_rows`` of a share of this op with ``channels``
        output channels (a core's or a rank's): the same mix, dealt over them
        (:func:`hw.sparsity.scale_mix`); empty when the op has no row-wise N:M."""
        if self.weight_nm_rows is None:
            return {}
        from hw.sparsity import scale_mix
        mix = scale_mix(self.weight_nm_rows, channels)
        return {"weight_nm": (mix[0][0], self.weight_nm[1]), "weight_nm_rows": mix}

    @property
    def stored_weights(self) -> bool:
        """Its second operand is weights stored in memory (a conv's, a linear layer's), not a
        KV cache nor a second producer's output: what N:M sparsity, a sparse storage format
        and a weight density describe."""
        return not (getattr(self, "kv_cache", False) or len(self.inputs) > 1)

    def weight_bytes(self, elem_bytes: int) -> int:
        """Bytes of the weights: at ``w_bits`` when stored narrower (rounded up to a byte)."""
        if self.w_bits is None or self.w_bits >= bits_of(elem_bytes):
            return size_bytes(self.weight_elements, elem_bytes)
        return -(-self.weight_elements * self.w_bits // 8)

    def traffic_bytes(self, elem_bytes: int) -> int:
        return (self.input_bytes(elem_bytes) + self.weight_bytes(elem_bytes)
                + self.output_bytes(elem_bytes))


@dataclass(frozen=True, kw_only=True)
class Gemm(_StoredWeights):
    """Batched matrix multiply: ``out[b] (m x n) = a[b] (m x k) @ w[b] (k x n)`` for ``b < batch``.

    A fully connected layer is ``Gemm(m=batch_size, n=out_features, k=in_features)``; attention
    score and context products are ``Gemm`` with ``batch = batch_size * heads``.

    ``kv_cache=True``: ``w`` is a slice of an LLM's key/value cache (``K^T`` for the scores, ``V``
    for the context), kept in memory by earlier steps and read once per step, as weights are; the
    op reads at most one producer (its ``a``). A Gemm with two producers reads ``w`` from the
    second; otherwise ``w`` is the op's weights.

    ``w_bits``: ``w`` is stored with this many bits per element (8: int8 or fp8; 4: int4, two per
    byte) and widened to the engine's precision as it is loaded: weight-only quantization, or an
    fp8 KV cache. It changes the bytes ``w`` occupies and moves, not the arithmetic. ``None``:
    the engine's precision.

    ``weight_nm``: ``(N, M)`` when the weights are N:M structured-sparse along K (every group of
    M consecutive k keeps at most N nonzeros, e.g. NVIDIA's 2:4); ``None``: dense. Stored
    weights only. On an array with N:M sparse PEs the op runs compressed
    (:func:`hw.sparsity.array_nm`); elsewhere it runs dense.

    ``weight_nm_rows``: row-wise N:M, each output channel with its own N (SCALE-Sim v3's
    row-wise sparsity): ``((N, channels), ...)`` pairs, or a dict N -> channels, counting every
    output channel once, of the group size M of ``weight_nm``, whose N must be the largest. The
    compiler sorts the channels by N and cuts each N tile into a compute per N. A core's or a
    rank's share of the op takes the same mix (:meth:`rows_for`). None: every channel has
    ``weight_nm``'s N.

    ``weight_density``: the fraction of the stored weights that are nonzero (None: unknown,
    taken as 1), which sizes them in a sparse storage format
    (:attr:`compiler.options.CompileOptions.weight_format`).

    ``act_zeros``: the fraction of ``a``'s elements that are zero (after a ReLU, about half),
    which gate MAC energy, not cycles (:attr:`compiler.options.CompileOptions.act_zeros`);
    ``None``: none known (0).

    ``w_in_l2=True``: ``w`` is held in the chip's shared L2 when the op starts (a KV cache small
    enough to stay there between steps), so its loads are L2 hits; on a chip without an L2, or
    when it does not fit the half of the L2 kept tensors may take, it is read from DRAM.
    """

    name: str
    m: int
    n: int
    k: int
    batch: int = 1
    inputs: tuple[str, ...] = ()
    kv_cache: bool = False
    w_bits: int | None = None
    w_in_l2: bool = False
    weight_nm: tuple[int, int] | None = None
    act_zeros: float | None = None
    weight_density: float | None = None
    weight_nm_rows: tuple[tuple[int, int], ...] | None = None

    def __post_init__(self) -> None:
        _check_name(self.name, "Gemm")
        _check_positive(self.name, "Gemm", m=self.m, n=self.n, k=self.k, batch=self.batch)
        _check_inputs(self.name, "Gemm", self.inputs)
        if not isinstance(self.w_in_l2, bool):
            raise IRError(f"Gemm {self.name!r}: w_in_l2 = {self.w_in_l2!r}: must be True or "
                          f"False")
        if self.w_in_l2 and len(self.inputs) > 1:
            raise IRError(f"Gemm {self.name!r}: w_in_l2 = True holds stored weights or a KV "
                          f"cache in the L2, not a second producer's output")
        if not isinstance(self.kv_cache, bool):
            raise IRError(f"Gemm {self.name!r}: kv_cache = {self.kv_cache!r}: must be True or "
                          f"False")
        _check_w_bits(self, "Gemm")
        if self.w_bits is not None and len(self.inputs) > 1 and not self.kv_cache:
            raise IRError(f"Gemm {self.name!r}: w_bits = {self.w_bits} narrows stored weights or a "
                          f"KV cache, not a second producer's output (inputs = {self.inputs!r})")
        if self.kv_cache and len(self.inputs) > 1:
            raise IRError(f"Gemm {self.name!r}: kv_cache = True reads its second operand from "
                          f"the cache, so it takes at most one producer, not inputs = "
                          f"{self.inputs!r}")
        _check_weight_nm(self, "Gemm")
        _check_act_zeros(self, "Gemm")
        _check_ratio(self, "Gemm", "weight_density", "the fraction of its weights that are "
                     "nonzero")
        if self.weight_density is not None and not self.stored_weights:
            raise IRError(f"Gemm {self.name!r}: weight_density = {self.weight_density!r} "
                          f"describes stored weights, not a KV cache or a second producer's "
                          f"output")
        if self.weight_nm is not None and not self.stored_weights:
            raise IRError(f"Gemm {self.name!r}: weight_nm = {self.weight_nm!r} describes stored "
                          f"weights, not a KV cache or a second producer's output")
        _check_size(self.name, "Gemm", "MACs", self.macs, MAX_OP_MACS, "per op")

    def __repr__(self) -> str:
        # the LLM fields only when set, so an ordinary GEMM reads as it always has
        extra = "".join(f", {key}={getattr(self, key)!r}" for key, default in
                        (("kv_cache", False), ("w_bits", None), ("w_in_l2", False),
                         ("weight_nm", None), ("act_zeros", None),
                         ("weight_density", None), ("weight_nm_rows", None))
                        if getattr(self, key) != default)
        return (f"Gemm(name={self.name!r}, m={self.m}, n={self.n}, k={self.k}, "
                f"batch={self.batch}, inputs={self.inputs!r}{extra})")

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
class Conv2d(_StoredWeights):
    """2-D convolution, NCHW semantics, with padding, stride, dilation, groups and batch.

    ``out_h = (in_h + pad_top + pad_bottom - dilation_h * (kernel_h - 1) - 1) // stride_h + 1``
    (the PyTorch/ONNX definition); likewise ``out_w``.

    ``weight_nm``: N:M structured sparsity of the weights along the GEMM's K (in channels x
    kernel window), and ``weight_nm_rows`` its row-wise form (output channels), as
    :class:`Gemm`'s. ``act_zeros``: the fraction of the input's elements that are zero, and
    ``weight_density`` the fraction of the weights that are nonzero, as :class:`Gemm`'s.
    ``w_bits``: the weights are stored with this many bits each (4: int4, two per byte) and
    widened to the engine's precision as they are loaded (weight-only quantization), as
    :class:`Gemm`'s.
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
    weight_nm: tuple[int, int] | None = field(default=None, repr=False)
    act_zeros: float | None = field(default=None, repr=False)
    weight_density: float | None = field(default=None, repr=False)
    w_bits: int | None = field(default=None, repr=False)
    weight_nm_rows: tuple[tuple[int, int], ...] | None = field(default=None, repr=False)

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
        _check_weight_nm(self, "Conv2d")
        _check_act_zeros(self, "Conv2d")
        _check_ratio(self, "Conv2d", "weight_density", "the fraction of its weights that are "
                     "nonzero")
        _check_w_bits(self, "Conv2d")

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
