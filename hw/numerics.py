"""Arithmetic shared by every datapath: saturation, wrapping, rounding shifts, MACs, fp16.

Every function here is Numba-callable (``@njit`` or a Numba ``overload``) and also callable
from plain Python, where it runs the same semantics on Python ints/floats.

Integer conventions
-------------------
* Values are two's-complement integers held in int64. ``bits`` is the width of the register
  being modelled, 2..64.
* :func:`saturate` clamps to ``[-2**(bits-1), 2**(bits-1) - 1]``.
* :func:`wrap` keeps the low ``bits`` bits and sign-extends (what an adder of that width does
  when it overflows).
* :func:`round_shift` is an arithmetic right shift that rounds to nearest, ties away from zero
  (``round_shift(5, 1) == 3``, ``round_shift(-5, 1) == -3``). It never overflows int64.
* :func:`mac` is ``acc + a * b`` into a ``acc_bits``-wide accumulator, either wrapping (the
  default in the systolic array, like the TPU's and Gemmini's accumulators) or saturating at
  every addition (``saturating=True``). Saturation is not associative: the order of additions
  is part of a datapath's contract, and each datapath states it.

Floating point conventions (fp16 operands, fp32 accumulation)
-------------------------------------------------------------
* fp16 values enter the kernels as float32 (the conversion is exact).
* The product of two fp16 values is computed in fp32 and is **exact**: 11-bit significands
  give at most a 22-bit product, and the exponent range of fp32 covers 2**-48..2**32. So a
  fused and an unfused multiply-add give the same bits.
* The accumulation ``acc + product`` is one IEEE-754 binary32 addition with
  round-to-nearest-even; subnormals are kept (no flush-to-zero); inf/NaN propagate.
* :func:`fp32_to_fp16_bits` rounds to nearest-even, overflows to inf, keeps fp16 subnormals,
  and keeps a NaN's sign and top payload bits; it matches ``numpy.float32.astype(numpy.float16)``
  bit for bit for every input. :func:`fp16_bits_to_fp32` is exact, NaN sign and payload included (read the result inside
  Numba or from a float32 array: returning a float32 to Python widens it to a float64, which
  quiets a signalling NaN).

Low-bit floating point (bf16, OCP fp8 E4M3 and E5M2)
----------------------------------------------------
* Formats (:data:`FLOAT_FORMATS`): bfloat16 (8 exponent bits, 7 fraction bits, the range of
  fp32), OCP 8-bit floats E4M3 (4/3, bias 7, max 448, no infinity: the all-ones pattern is NaN)
  and E5M2 (5/2, bias 15, max 57344, IEEE-like inf and NaN) (OCP "8-bit Floating Point
  Specification (OFP8)" 1.0, 2023).
* Conversions are ``ml_dtypes``'s (the library JAX and TensorFlow use): round to nearest even,
  subnormals kept; out of range, E4M3 becomes NaN (it has no infinity) and bf16 / E5M2 become
  inf. :func:`to_float_format` rounds, :func:`float_representable` tests exactness.
* A MAC multiplies in fp32 (rounded once) and adds in fp32 (:func:`float_mac`). For fp16 and
  both fp8 formats the product is exact (at most 11-bit significands, exponents well inside
  fp32's), so the rule equals a fused multiply-add into fp32; for bf16 the product is exact
  too unless it overflows or underflows fp32 (8-bit significands, fp32's exponent range).

Binary operands (+1 / -1, XNOR-popcount)
----------------------------------------
* A binary operand is one bit, 1 standing for +1 and 0 for -1 (:func:`binary_bits`), as in
  XNOR-Net (Rastegari et al., ECCV 2016) and FINN (Umuroglu et al., FPGA 2017).
* The product of two is their XNOR (1: +1, both equal; 0: -1), so the sum of ``n`` products is
  ``2 * popcount(XNOR) - n`` (:func:`xnor_popcount`): what a binary PE computes over the ``n``
  operands a port word carries. A lane that holds no operand (K padded to whole words) is
  masked out of both terms, as a zero would be.
* Sums accumulate as integers, wrapping (or saturating) at the accumulator width like int8's.
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import overload

from hw._jitcache import njit

__all__ = [
    "int_min",
    "int_max",
    "saturate",
    "wrap",
    "round_shift",
    "saturating_add",
    "accumulate",
    "observe",
    "mac",
    "fp16_mac",
    "fp32_to_fp16_bits",
    "fp16_bits_to_fp32",
    "MAX_ROUND_SHIFT",
    "FLOAT_FORMATS",
    "FloatFormat",
    "to_float_format",
    "float_representable",
    "round_to_format",
    "float_mac",
    "binary_bits",
    "xnor_popcount",
]

#: Largest shift :func:`round_shift` accepts; larger shifts round every int64 to 0 or +-1.
MAX_ROUND_SHIFT = 62


@njit(cache=True)
def int_min(bits):
    """Smallest value of a ``bits``-wide two's-complement register (2 <= bits <= 64)."""
    return -(np.int64(1) << np.int64(bits - 1))


@njit(cache=True)
def int_max(bits):
    """Largest value of a ``bits``-wide two's-complement register (2 <= bits <= 64)."""
    return (np.int64(1) << np.int64(bits - 1)) - np.int64(1) if bits < 64 else np.int64(0x7FFFFFFFFFFFFFFF)


@njit(cache=True)
def saturate(x, bits):
    """Clamp ``x`` to the range of a signed ``bits``-wide register."""
    lo = int_min(bits)
    hi = int_max(bits)
    if x < lo:
        return lo
    if x > hi:
        return hi
    return np.int64(x)


@njit(cache=True, inline="always")
def wrap(x, bits):
    """Keep the low ``bits`` bits of ``x`` and sign-extend: two's-complement overflow."""
    shift = np.int64(64 - bits)  # 0 for 64-bit registers: the shifts are then no-ops
    return (np.int64(x) << shift) >> shift


@njit(cache=True)
def round_shift(x, shift):
    """Arithmetic right shift by ``shift`` (0..62) rounding to nearest, ties away from zero.

    Computed as floor division plus a correction from the remainder, so it cannot overflow:
    ``floor = x >> s``, ``rem = x - floor * 2**s`` (in ``[0, 2**s)``), and the result is
    ``floor + 1`` when ``rem > half``, or when ``rem == half`` and ``x >= 0``.
    """
    x = np.int64(x)
    if shift == 0:
        return x
    s = np.int64(shift)
    floor = x >> s
    rem = x & ((np.int64(1) << s) - np.int64(1))
    half = np.int64(1) << (s - np.int64(1))
    if rem > half or (rem == half and x >= 0):
        return floor + np.int64(1)
    return floor


@njit(cache=True)
def saturating_add(x, y, bits):
    """``saturate(x + y, bits)`` without int64 overflow, for x, y already in int64."""
    x = np.int64(x)
    y = np.int64(y)
    total = x + y  # wraps mod 2**64 on overflow, which the sign test below detects
    overflow = ((x ^ total) & (y ^ total)) < 0
    limit = np.int64(0x7FFFFFFFFFFFFFFF) if x >= 0 else np.int64(-0x7FFFFFFFFFFFFFFF - 1)
    return saturate(limit if overflow else total, bits)


def accumulate(acc, value, acc_bits, saturating):
    """``acc + value`` in the accumulator's arithmetic.

    Integers: wrap (or saturate) to ``acc_bits``. Floats: one binary32 addition (RNE).
    Inside Numba the integer or float version is chosen from the argument types at compile time.
    """
    if isinstance(acc, (float, np.floating)):
        return np.float32(np.float32(acc) + np.float32(value))
    if saturating:
        lo, hi = -(1 << (acc_bits - 1)), (1 << (acc_bits - 1)) - 1
        return min(max(int(acc) + int(value), lo), hi)
    total = (int(acc) + int(value)) & ((1 << acc_bits) - 1)
    return total - (1 << acc_bits) if total >> (acc_bits - 1) else total


@overload(accumulate, jit_options={"cache": True}, inline="always")
def _accumulate_jit(acc, value, acc_bits, saturating):
    if isinstance(acc, types.Float):
        def impl(acc, value, acc_bits, saturating):
            return np.float32(acc) + np.float32(value)
        return impl
    if isinstance(acc, types.Integer):
        def impl(acc, value, acc_bits, saturating):
            # `saturating` is loop-invariant in every kernel: LLVM unswitches this branch.
            if saturating:
                return saturating_add(acc, value, acc_bits)
            return wrap(np.int64(acc) + np.int64(value), acc_bits)
        return impl
    return None


def observe(x, acc_bits):
    """The value an ``acc_bits``-wide accumulator register shows for a running sum ``x``.

    Two's-complement wrapping commutes with addition, so a wrapping accumulator may keep its
    running sum in int64 and wrap only where the register is observed; the observed values are
    identical at every cycle. Integers wrap to ``acc_bits``; floats are returned unchanged.
    """
    if isinstance(x, (float, np.floating)):
        return x
    total = int(x) & ((1 << acc_bits) - 1)
    return total - (1 << acc_bits) if total >> (acc_bits - 1) else total


@overload(observe, jit_options={"cache": True}, inline="always")
def _observe_jit(x, acc_bits):
    if isinstance(x, types.Float):
        return lambda x, acc_bits: x
    if isinstance(x, types.Integer):
        return lambda x, acc_bits: wrap(x, acc_bits)
    return None


@njit(cache=True)
def mac(acc, a, b, acc_bits, saturating):
    """Integer multiply-accumulate: ``acc + a * b`` into an ``acc_bits``-wide accumulator.

    ``a`` and ``b`` are int8 or int16 operands (their product fits in 31 bits); the addition
    wraps, or saturates when ``saturating`` is true.
    """
    return accumulate(np.int64(acc), np.int64(a) * np.int64(b), acc_bits, saturating)


@njit(cache=True)
def fp16_mac(acc, a, b):
    """fp16 x fp16 product (exact in fp32) added to an fp32 accumulator with one RNE rounding."""
    return np.float32(acc) + np.float32(a) * np.float32(b)


@njit(cache=True)
def fp32_to_fp16_bits(x):
    """IEEE binary32 -> binary16 bit pattern (uint16), round to nearest even."""
    bits = np.uint32(np.array([np.float32(x)]).view(np.uint32)[0])
    sign = np.uint16((bits >> np.uint32(16)) & np.uint32(0x8000))
    exp = np.int64((bits >> np.uint32(23)) & np.uint32(0xFF))
    mant = np.int64(bits & np.uint32(0x7FFFFF))
    if exp == 0xFF:  # inf or NaN: NaN keeps its top payload bits, and stays a NaN (as numpy)
        if mant != 0:
            payload = mant >> 13
            if payload == 0:
                payload = 1
            return np.uint16(sign | np.uint16(0x7C00) | np.uint16(payload))
        return np.uint16(sign | np.uint16(0x7C00))
    e = exp - 127 + 15
    if e >= 0x1F:
        return np.uint16(sign | np.uint16(0x7C00))
    if e <= 0:
        # Subnormal (or zero) in fp16: shift the full 24-bit significand right with RNE.
        if e < -10:
            return np.uint16(sign)
        full = mant | np.int64(0x800000)
        shift = np.int64(14 - e)
        half = np.int64(1) << (shift - 1)
        q = full >> shift
        rem = full & ((np.int64(1) << shift) - 1)
        if rem > half or (rem == half and (q & 1) == 1):
            q += 1
        return np.uint16(sign | np.uint16(q))
    q = (e << 10) | (mant >> 13)
    rem = mant & 0x1FFF
    if rem > 0x1000 or (rem == 0x1000 and (q & 1) == 1):
        q += 1  # a carry into the exponent is still correct, up to inf
    return np.uint16(sign | np.uint16(q))


@njit(cache=True)
def fp16_bits_to_fp32(h):
    """IEEE binary16 bit pattern -> float32 (exact)."""
    h = np.int64(h) & 0xFFFF
    sign = -1.0 if (h >> 15) else 1.0
    exp = (h >> 10) & 0x1F
    mant = h & 0x3FF
    if exp == 0:
        return np.float32(sign * mant * 2.0 ** -24)
    if exp == 0x1F:
        if mant != 0:  # NaN: sign and payload move to the top of the fp32 significand (as numpy)
            bits = np.uint32(((h >> 15) << 31) | 0x7F800000 | (mant << 13))
            return np.array([bits], np.uint32).view(np.float32)[0]
        return np.float32(sign * np.inf)
    return np.float32(sign * (1024 + mant) * 2.0 ** (exp - 25))


# ---------------------------------------------------------------------- low-bit floating point

class FloatFormat:
    """A floating-point operand format: ``name``, exponent and fraction bits, largest finite
    value, whether it has an infinity, and its ``ml_dtypes`` / numpy dtype name."""

    __slots__ = ("name", "exponent_bits", "fraction_bits", "max", "has_inf", "dtype_name")

    def __init__(self, name, exponent_bits, fraction_bits, max_value, has_inf, dtype_name):
        self.name, self.exponent_bits, self.fraction_bits = name, exponent_bits, fraction_bits
        self.max, self.has_inf, self.dtype_name = max_value, has_inf, dtype_name

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.fraction_bits

    @property
    def dtype(self):
        """The numpy dtype holding values of this format (``ml_dtypes`` for bf16 and fp8)."""
        if self.dtype_name == "float16":
            return np.dtype(np.float16)
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, self.dtype_name))

    def __repr__(self) -> str:
        return (f"FloatFormat({self.name}: 1 sign, {self.exponent_bits} exponent, "
                f"{self.fraction_bits} fraction bits, max {self.max:g})")


#: The floating-point operand formats, by precision name.
FLOAT_FORMATS = {
    "fp16": FloatFormat("fp16", 5, 10, 65504.0, True, "float16"),
    "bf16": FloatFormat("bf16", 8, 7, float.fromhex("0x1.fep127"), True, "bfloat16"),
    "fp8_e4m3": FloatFormat("fp8_e4m3", 4, 3, 448.0, False, "float8_e4m3fn"),
    "fp8_e5m2": FloatFormat("fp8_e5m2", 5, 2, 57344.0, True, "float8_e5m2"),
}


def _format(name) -> FloatFormat:
    fmt = FLOAT_FORMATS.get(getattr(name, "value", name))
    if fmt is None:
        raise ValueError(f"float format = {name!r}: must be one of {', '.join(FLOAT_FORMATS)}")
    return fmt


def to_float_format(x, name) -> np.ndarray:
    """``x`` rounded to format ``name`` (module docstring), as float32 (exact)."""
    fmt = _format(name)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x, dtype=np.float32).astype(fmt.dtype).astype(np.float32)


def round_to_format(x, name) -> tuple[np.ndarray, np.ndarray]:
    """``x`` (a float array) rounded to format ``name`` once: (its values as float32, which
    elements the format holds exactly; NaN counts as exact)."""
    arr = np.asarray(x)
    with np.errstate(over="ignore", invalid="ignore"):
        held = arr.astype(_format(name).dtype)
        exact = (held.astype(arr.dtype) == arr) | np.isnan(arr)
    return held.astype(np.float32), exact


def float_representable(x, name) -> np.ndarray:
    """Which elements of ``x`` the format holds exactly (NaN counts as representable)."""
    return round_to_format(x, name)[1]


@njit(cache=True)
def float_mac(acc, a, b):
    """``acc + a * b`` with the product and the sum each rounded to fp32 (the MAC of every
    floating-point precision; module docstring). ``a``, ``b``: values of the operand format."""
    p = np.float32(np.float32(a) * np.float32(b))
    return np.float32(np.float32(acc) + p)


def binary_bits(x) -> np.ndarray:
    """+1/-1 operands as their bits (1 for +1, 0 for -1), uint8. Raises ``ValueError`` for any
    other value."""
    x = np.asarray(x)
    bad = (x != 1) & (x != -1)
    if bad.any():
        raise ValueError(f"binary operand {x[bad].flat[0].item()!r}: must be +1 or -1")
    return (x > 0).astype(np.uint8)


def xnor_popcount(a_word: int, b_word: int, n: int, mask: int | None = None) -> int:
    """The sum of the ``n`` products of two words of binary operands (bit ``e`` of each word is
    operand ``e``; 1 stands for +1): ``2 * popcount(~(a ^ b) & mask) - popcount(mask)``.
    ``mask`` selects the lanes that hold operands (default all ``n``)."""
    mask = (1 << n) - 1 if mask is None else mask
    return 2 * bin(~(a_word ^ b_word) & mask).count("1") - bin(mask).count("1")
