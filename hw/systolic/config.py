"""Configuration of one systolic array: shape, dataflow, precision, accumulator."""

from __future__ import annotations

import enum
import numbers
from dataclasses import dataclass

from hw.errors import ConfigError

__all__ = ["Dataflow", "Precision", "Overflow", "ArrayConfig", "ConfigError", "MAX_ARRAY_DIM"]

#: Largest N:M group a sparse PE's index mux selects from (a 16:1 mux, 4-bit indices).
MAX_SPARSE_M = 16

#: Largest array side accepted; bigger arrays are not physical and blow up the register model.
MAX_ARRAY_DIM = 4096


class Dataflow(str, enum.Enum):
    """Which operand stays in the PEs while the others stream through.

    * ``OS`` output-stationary: PE (i, j) accumulates output (m0+i, n0+j) over the whole K.
    * ``WS`` weight-stationary: PE (i, j) holds weight (k0+i, n0+j); inputs stream along rows,
      partial sums flow down the columns.
    * ``IS`` input-stationary: PE (i, j) holds input (m0+j, k0+i); weights stream along rows,
      partial sums flow down the columns.
    """

    OS = "os"
    WS = "ws"
    IS = "is"


class Precision(str, enum.Enum):
    """Operand precision. Integer operands are signed two's complement; floating-point ones are
    IEEE fp16, bfloat16 or OCP 8-bit floats (E4M3, E5M2), multiplied and accumulated in fp32
    (:mod:`hw.numerics`, "Floating point conventions"). ``binary`` operands are +1 or -1, one
    bit each (1 stands for +1): their product is an XNOR and a sum of them a popcount
    (:func:`hw.numerics.xnor_popcount`), accumulated as an integer."""

    INT8 = "int8"
    INT16 = "int16"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"
    INT4 = "int4"
    BINARY = "binary"

    @property
    def bits(self) -> int:
        if self is Precision.INT4:
            return 4
        if self is Precision.BINARY:
            return 1
        return 8 if self in (Precision.INT8, Precision.FP8_E4M3, Precision.FP8_E5M2) else 16

    @property
    def is_float(self) -> bool:
        return self not in (Precision.INT8, Precision.INT16, Precision.INT4, Precision.BINARY)

    @property
    def default_acc_bits(self) -> int:
        return 64 if self is Precision.INT16 else 32

    @property
    def operand_range(self) -> tuple[int, int]:
        """Smallest and largest integer operand (binary: -1 and +1, and nothing between)."""
        if self is Precision.BINARY:
            return -1, 1
        return -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1

    @property
    def min_acc_bits(self) -> int:
        """Narrowest integer accumulator: twice the operand width, at least 8 bits."""
        return max(2 * self.bits, 8)

    @property
    def max_macs_per_pe(self) -> int:
        """MACs a PE may do per cycle: as many operands as an 8-bit port lane carries (int4: 2,
        binary: 8, one XNOR per bit and a popcount), 1 for byte-wide and wider operands."""
        return max(1, 8 // self.bits)


class Overflow(str, enum.Enum):
    """What an integer accumulator does when a sum leaves its range."""

    WRAP = "wrap"
    SATURATE = "saturate"


def _enum_value(enum_type, value, key: str, where: str):
    if isinstance(value, enum_type):
        return value
    allowed = ", ".join(repr(m.value) for m in enum_type)
    if isinstance(value, str):
        try:
            return enum_type(value.lower())
        except ValueError:
            pass
    raise ConfigError(f"{where}: {key} = {value!r}: must be one of {allowed}")


def _int_in(value, key: str, where: str, lo: int, hi: int) -> int:
    # numbers.Integral covers numpy's integers; numpy's bool_ is not Integral.
    if (isinstance(value, bool) or not isinstance(value, numbers.Integral)
            or not lo <= value <= hi):
        raise ConfigError(f"{where}: {key} = {value!r}: must be an integer in {lo}..{hi}")
    return int(value)


@dataclass(frozen=True)
class ArrayConfig:
    """A ``rows`` x ``cols`` systolic array of multiply-accumulate PEs.

    Attributes
    ----------
    rows, cols:
        PE grid shape. Rows are the vertical dimension (partial sums flow down the columns in
        WS/IS; operands stream in from the left edge, one per row).
    dataflow:
        :class:`Dataflow`: what stays in the PEs while operands stream through: ``"os"``
        output-stationary (each PE accumulates one output), ``"ws"`` weight-stationary (each PE
        holds one weight), ``"is"`` input-stationary (each PE holds one input activation).
    precision:
        :class:`Precision` of both operands: ``"int8"``, ``"int16"``, ``"int4"``, ``"fp16"``,
        ``"bf16"``, ``"fp8_e4m3"``, ``"fp8_e5m2"`` or ``"binary"`` (+1/-1, XNOR-popcount).
        int4 and binary run in the array's three views (register model, timing engine, RTL);
        on a chip their operands are packed two and eight per byte in its memories
        (:mod:`hw.packing`).
    acc_bits:
        Accumulator width in bits for integer precisions: twice the operand width (at least 8)
        up to 64 (8..64 for binary and int4, 16..64 for int8, 32..64 for int16). For the floating-point precisions it must be 32:
        accumulation is IEEE binary32. Defaults to 32 for int8, 64 for int16.
    overflow:
        :class:`Overflow` behaviour of integer accumulators (default wrap); must be wrap for the
        floating-point precisions.
    reconfigurable:
        The array can switch its dataflow per layer, as in Eyeriss v2's flexible PEs or
        Flexagon (default False: the dataflow is fixed in silicon). It only changes what the
        mapper may choose (``npulab run --map``): each layer then runs OS, WS or IS, whichever
        its objective prefers; without ``--map`` every layer runs ``dataflow``. The extra
        multiplexers' area and energy are not modelled.
    sparse_m:
        Group size M of the PEs' N:M sparsity support (NVIDIA's sparse tensor core scheme):
        each PE holds a ``ceil(log2 M)``-bit index with its weight and a mux that picks the
        matching activation out of a group of M, so a GEMM whose weights are N:M sparse along K
        (N <= M) runs on ``K * N / M`` rows of compressed weights. 0 (the default): dense PEs
        only. 4 is the A100's 2:4 (it also runs 1:4 and dense). 2..16.
    macs_per_pe:
        MACs each PE performs per cycle, on consecutive k: 1 (default), 2 with int4 operands
        (the PE's int8 multiplier split into two 4-bit ones, its operands arriving two per
        byte), 2, 4 or 8 with binary ones (XNOR gates and a popcount over a byte of packed
        operands). The array then runs ``ceil(K / macs_per_pe)`` rows or steps of operand
        groups, each PE adding all products. Not combined with ``sparse_m``.
    """

    rows: int = 32
    cols: int = 32
    dataflow: Dataflow = Dataflow.WS
    precision: Precision = Precision.INT8
    acc_bits: int | None = None
    overflow: Overflow = Overflow.WRAP
    reconfigurable: bool = False
    sparse_m: int = 0
    macs_per_pe: int = 1

    def __post_init__(self) -> None:
        self.validate("ArrayConfig")

    def validate(self, where: str, prefix: str = "") -> None:
        """Check every field; ``where`` and ``prefix`` name the source in error messages."""
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen dataclass)
        set_("rows", _int_in(self.rows, prefix + "rows", where, 1, MAX_ARRAY_DIM))
        set_("cols", _int_in(self.cols, prefix + "cols", where, 1, MAX_ARRAY_DIM))
        set_("dataflow", _enum_value(Dataflow, self.dataflow, prefix + "dataflow", where))
        set_("precision", _enum_value(Precision, self.precision, prefix + "precision", where))
        set_("overflow", _enum_value(Overflow, self.overflow, prefix + "overflow", where))
        if not isinstance(self.reconfigurable, bool):
            raise ConfigError(f"{where}: {prefix}reconfigurable = {self.reconfigurable!r}: must be "
                              f"true or false")
        sm = self.sparse_m
        if (isinstance(sm, bool) or not isinstance(sm, numbers.Integral)
                or not (sm == 0 or 2 <= sm <= MAX_SPARSE_M)):
            raise ConfigError(f"{where}: {prefix}sparse_m = {sm!r}: must be 0 (dense PEs) or an "
                              f"integer in 2..{MAX_SPARSE_M} (the N:M group size)")
        set_("sparse_m", int(sm))
        lanes = self.macs_per_pe
        if (isinstance(lanes, bool) or not isinstance(lanes, numbers.Integral)
                or lanes not in (1, 2, 4, 8)):
            raise ConfigError(f"{where}: {prefix}macs_per_pe = {lanes!r}: must be 1, 2 with int4 "
                              f"operands, or 2, 4 or 8 with binary ones")
        if lanes > self.precision.max_macs_per_pe:
            raise ConfigError(f"{where}: {prefix}macs_per_pe = {lanes}: several MACs per PE "
                              f"are for operands narrower than a byte (int4: up to 2, binary: up "
                              f"to 8); precision is {self.precision.value!r}")
        if lanes > 1 and sm:
            raise ConfigError(f"{where}: {prefix}macs_per_pe = {lanes} with sparse_m = {sm}: a "
                              f"PE is either N:M sparse or multi-MAC, not both")
        if sm and self.precision is Precision.BINARY:
            raise ConfigError(f"{where}: {prefix}sparse_m = {sm}: binary weights are +1 or -1, "
                              f"never zero, so there is nothing to skip; use sparse_m = 0")
        set_("macs_per_pe", int(lanes))
        if self.acc_bits is None:
            set_("acc_bits", self.precision.default_acc_bits)
        if self.precision.is_float:
            if type(self.acc_bits) is not int or self.acc_bits != 32:
                raise ConfigError(
                    f"{where}: {prefix}acc_bits = {self.acc_bits!r}: {self.precision.value} "
                    f"accumulates in fp32, so acc_bits must be 32"
                )
            if self.overflow is not Overflow.WRAP:
                raise ConfigError(
                    f"{where}: {prefix}overflow = {self.overflow.value!r}: "
                    f"{self.precision.value} accumulates in IEEE fp32 (no integer overflow "
                    f"mode), so overflow must be 'wrap'"
                )
        else:
            lo = self.precision.min_acc_bits
            set_("acc_bits", _int_in(self.acc_bits, prefix + "acc_bits", where, lo, 64))

    @property
    def pes(self) -> int:
        return self.rows * self.cols

    @property
    def macs_per_cycle(self) -> int:
        """Peak MACs a cycle: every PE's ``macs_per_pe`` (two int4 MACs, up to eight binary)."""
        return self.rows * self.cols * self.macs_per_pe
