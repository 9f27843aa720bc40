"""Deliberately broken PEs: co-simulation must catch each of them.

They exist so users (and our tests, and lab 6) can see a real bug found: pass
``mutation=NAME`` to :func:`hw.systolic.rtl.cosim.verify` or ``--mutate NAME`` to
``npulab rtl verify``. Each is a one-line change a designer could plausibly make.

Importing this module does not import Amaranth: the command line lists :data:`MUTATIONS` in
its help on every start, so the hardware classes load only in :func:`pe_class_for`.
"""

from __future__ import annotations

from hw.systolic.config import ArrayConfig, ConfigError, Dataflow

__all__ = ["MUTATIONS", "pe_class_for"]


def _unsigned_product(self, a, b):
    # Operands read as unsigned: wrong whenever either is negative.
    return a.as_unsigned() * b.as_unsigned()


def _narrow_product(self, a, b):
    # Product truncated to the operand width (a too-narrow multiplier output).
    return (a * b)[: self.bits].as_signed()


def _drop_negative(self, a, b):
    # Ignores the operands' sign bit: -128 * x computed as 0 * x.
    from amaranth import Mux

    return Mux(a[-1], 0, a) * b


def _index_low_bit_stuck(self, group, index):
    # The sparse PE's index mux with its lowest select line tied to 0: position 1 reads 0.
    from amaranth import C, Cat

    return group[Cat(C(0, 1), index[1:])]


def _xor_product(self, a, b):
    # A binary PE's XNOR built as an XOR: every product's sign flipped.
    from amaranth import Mux

    return Mux(a == b, -1, 1)


#: Mutations of binary PEs only (``precision = "binary"``).
_BINARY = {"xor-product": (_xor_product, "binary PE's XNOR built as an XOR (every product's "
                                         "sign flipped)")}

_PRODUCTS = {
    "unsigned-multiply": (_unsigned_product, "operands multiplied as unsigned numbers"),
    "narrow-product": (_narrow_product, "product truncated to the operand width"),
    "drop-negative-a": (_drop_negative, "negative row operands multiplied as zero"),
}

#: Mutations of the N:M sparse PE's index mux (arrays with ``sparse_m > 0``).
_PICKS = {
    "index-mux-stuck": (_index_low_bit_stuck, "sparse PE's index mux with its low select bit "
                                              "stuck at 0"),
}

#: name -> one-line description of each mutation.
MUTATIONS = {name: desc for name, (_, desc) in (*_PRODUCTS.items(), *_PICKS.items(),
                                                 *_BINARY.items())}


def pe_class_for(cfg: ArrayConfig, mutation: str | None):
    """The PE class for ``cfg``'s dataflow, broken as ``mutation`` says (None: the real PE)."""
    from hw.systolic.rtl.pe import OutputStationaryPE, StationaryPE

    base = OutputStationaryPE if cfg.dataflow is Dataflow.OS else StationaryPE
    if mutation is None:
        return base
    if mutation in _PICKS:
        if not cfg.sparse_m:
            raise ConfigError(f"mutation = {mutation!r} breaks the sparse PE's index mux: the "
                              f"array needs sparse_m > 0 (it has dense PEs)")
        override = {"pick": _PICKS[mutation][0]}
    elif mutation in _PRODUCTS:
        override = {"product": _PRODUCTS[mutation][0]}
    elif mutation in _BINARY:
        if cfg.precision.bits != 1:
            raise ConfigError(f"mutation = {mutation!r} breaks a binary PE's XNOR: the array "
                              f"needs precision = 'binary' (it has {cfg.precision.value!r})")
        override = {"product": _BINARY[mutation][0]}
    else:
        raise ConfigError(f"mutation = {mutation!r}: must be one of {', '.join(MUTATIONS)}")
    return type(f"{base.__name__}_{mutation.replace('-', '_')}", (base,), override)
