"""How operands narrower than a byte sit in a chip's memories (issue 27).

int4 operands are packed two per byte and binary (+1/-1) ones eight per byte, along each
tensor's innermost dimension; a byte-wide operand or wider takes whole bytes. A tensor of
``elements`` operands of ``bits`` each takes ``ceil(elements * bits / 8)`` bytes
(:func:`nbytes`), in DRAM and in the scratchpads alike.

In the chip's layout each row of a tensor (a pixel's channels for NHWC) starts on a byte: a
row whose operands do not fill whole bytes (three int4 channels, say) ends with a padded one.
The DMA moves whole bytes, so the compiler cuts a row at multiples of :func:`granule` operands
(2 for int4, 8 for binary, 1 for 8 bits and wider) or takes it whole.

For 8-bit operands and wider every function here is plain ``elements * bytes``, so nothing
changes for them.
"""

from __future__ import annotations

import math

__all__ = ["nbytes", "granule", "Packed", "elem_size", "size_bytes", "bits_of"]


def nbytes(elements: int, bits: int) -> int:
    """Bytes ``elements`` packed operands of ``bits`` each take: ``ceil(elements * bits / 8)``."""
    return -(-elements * bits // 8)


def granule(bits: int) -> int:
    """Operands per byte when narrower than a byte (2 for int4, 8 for binary), else 1: the
    multiple a tile's cut along the innermost dimension must be to start on a byte."""
    return 8 // math.gcd(8, bits)


class Packed:
    """The size of an operand narrower than a byte (``bits`` of 1 or 4), where code passes
    "bytes per element". Multiplying it is an error, so no byte count is silently truncated:
    sizes go through :func:`size_bytes` (and the IR's ``*_bytes`` methods) instead."""

    __slots__ = ("bits",)

    def __init__(self, bits: int):
        self.bits = bits

    def _refuse(self, *_):
        raise TypeError(f"a {self.bits}-bit packed operand has no whole bytes per element: "
                        f"count its bytes with hw.packing.size_bytes")

    __mul__ = __rmul__ = __floordiv__ = __rfloordiv__ = __truediv__ = __rtruediv__ = _refuse
    __add__ = __radd__ = __int__ = __index__ = _refuse

    def __eq__(self, other) -> bool:
        return isinstance(other, Packed) and other.bits == self.bits

    def __hash__(self) -> int:
        return hash(("packed", self.bits))

    def __repr__(self) -> str:
        return f"Packed({self.bits})"


def elem_size(bits: int):
    """Bytes per element of ``bits``-bit operands: an int for 8 bits and wider, a
    :class:`Packed` for narrower ones."""
    return bits // 8 if bits % 8 == 0 else Packed(bits)


def size_bytes(elements: int, size) -> int:
    """Bytes of ``elements`` operands of ``size`` (:func:`elem_size`: bytes per element, or
    :class:`Packed`)."""
    if isinstance(size, Packed):
        return nbytes(elements, size.bits)
    return elements * size


def bits_of(size) -> int:
    """Bits per element of ``size`` (:func:`elem_size`: bytes per element, or :class:`Packed`)."""
    return size.bits if isinstance(size, Packed) else 8 * size
