"""Co-simulation of the NVDLA units (:mod:`hw.nvdla.rtl.units`) against the Numba numerics.

Each helper builds a list of input vectors (random, plus the edge cases that matter for that
unit), drives one vector per cycle into the unit in Amaranth's simulator, and compares after
every clock edge:

* ``out_valid`` with the ``valid`` bit driven one cycle earlier (bubbles -- cycles with
  ``valid = 0`` -- are inserted at random, so the valid bit is checked both ways; right after
  reset ``out_valid`` must be 0);
* ``out`` with :mod:`hw.nvdla.numerics` on the previous cycle's inputs, whenever that cycle was
  valid.

The first difference stops the run and is returned as a :class:`Mismatch` (cycle, signal, RTL
value, model value, and the inputs that produced it). A unit class can be substituted (``unit``
argument) to check that a deliberately broken unit is caught.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product
from typing import Callable

import numpy as np
from amaranth.sim import Simulator

from hw.nvdla import numerics as nv
from hw.nvdla.rtl.units import CaccTruncate, MacCell, OutputConverter, SdpX
from hw.systolic.rtl.cosim import Mismatch as ArrayMismatch

__all__ = [
    "Mismatch", "CosimResult", "run_vectors",
    "mac_vectors", "cacc_vectors", "sdp_x_vectors", "cvt_out_vectors",
    "cosim_mac", "cosim_cacc", "cosim_sdp_x", "cosim_cvt_out",
    "SDP_X_FLAGS",
]

CLOCK_PERIOD = 1e-8
I16 = (-(1 << 15), (1 << 15) - 1)
I32 = (-(1 << 31), (1 << 31) - 1)


@dataclass(frozen=True)
class Mismatch(ArrayMismatch):
    """The first cycle and signal where the RTL and the numerics disagree, with the inputs of
    that vector (the systolic co-simulation's mismatch record plus ``inputs``)."""

    inputs: dict = field(default_factory=dict, compare=False)

    def __str__(self) -> str:
        return (f"cycle {self.cycle}: {self.signal}: RTL {self.rtl}, model {self.model} "
                f"(inputs {self.inputs})")


@dataclass(frozen=True)
class CosimResult:
    """One unit through the simulator: how many vectors and cycles, and the first mismatch."""

    unit: str
    vectors: int
    cycles: int
    mismatch: Mismatch | None

    @property
    def ok(self) -> bool:
        return self.mismatch is None

    def summary(self) -> str:
        if self.ok:
            return (f"PASS {self.unit}: {self.vectors} vectors, {self.cycles} cycles, "
                    "every output equal")
        return f"FAIL {self.unit}: {self.mismatch}"


def run_vectors(unit, vectors: list[dict], model: Callable[[dict], int], *, seed: int = 0,
                bubble_rate: float = 0.1, name: str | None = None) -> CosimResult:
    """Drive ``vectors`` (port name -> value, one dict per valid cycle) into ``unit`` and
    compare every cycle with ``model(vector)``. Bubbles (``valid = 0``, the inputs of a random
    vector) are inserted with probability ``bubble_rate``."""
    rng = np.random.default_rng(seed)
    schedule: list[tuple[dict, int]] = []
    for v in vectors:
        while bubble_rate and rng.random() < bubble_rate:
            schedule.append((vectors[int(rng.integers(len(vectors)))], 0))
        schedule.append((v, 1))
    ports = {k: getattr(unit, k) for k in (vectors[0] if vectors else {})}
    found: list[Mismatch] = []

    async def bench(ctx):
        got_valid = ctx.get(unit.out_valid)
        if got_valid != 0:
            found.append(Mismatch(0, "out_valid (after reset)", got_valid, 0))
            return
        for t, (v, valid) in enumerate(schedule):
            for k, port in ports.items():
                ctx.set(port, v[k])
            ctx.set(unit.valid, valid)
            await ctx.tick()
            got_valid = ctx.get(unit.out_valid)
            if got_valid != valid:
                found.append(Mismatch(t + 1, "out_valid", got_valid, valid, inputs=dict(v)))
                return
            if valid:
                got, want = int(ctx.get(unit.out)), int(model(v))
                if got != want:
                    found.append(Mismatch(t + 1, "out", got, want, inputs=dict(v)))
                    return

    sim = Simulator(unit)
    sim.add_clock(CLOCK_PERIOD)
    sim.add_testbench(bench)
    sim.run()
    return CosimResult(name or type(unit).__name__, len(vectors), len(schedule) + 1,
                       found[0] if found else None)


def _with_extremes(rng, lo: int, hi: int, n: int, p: float = 0.25) -> list[int]:
    """``n`` uniform values in ``[lo, hi]``; with probability ``p`` each one is an extreme
    (lo, lo + 1, -1, 0, 1, hi - 1, hi)."""
    vals = rng.integers(lo, hi + 1, n, dtype=np.int64)
    edges = np.array([lo, lo + 1, -1, 0, 1, hi - 1, hi], np.int64)
    pick = rng.random(n) < p
    vals[pick] = rng.choice(edges, int(pick.sum()))
    return [int(x) for x in vals]


# ---------------------------------------------------------------------------------- MAC cell
def mac_vectors(atomic_c: int = 8, bits: int = 8, n: int = 500, seed: int = 0) -> list[dict]:
    """Extreme vectors (every element -2**(b-1) or 2**(b-1)-1 in every sign combination of
    data and weights, alternating patterns, zeros) then ``n`` random ones (a quarter of the
    elements at extremes)."""
    rng = np.random.default_rng(seed)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    vecs = []
    for a, b in product([lo, hi, 0, -1], repeat=2):
        vecs.append({"data": [a] * atomic_c, "weight": [b] * atomic_c})
    alt = [lo if i % 2 else hi for i in range(atomic_c)]
    vecs += [{"data": alt, "weight": alt}, {"data": alt, "weight": [lo] * atomic_c},
             {"data": [lo] * atomic_c, "weight": alt}]
    for _ in range(n):
        vecs.append({"data": _with_extremes(rng, lo, hi, atomic_c),
                     "weight": _with_extremes(rng, lo, hi, atomic_c)})
    return vecs


def _mac_model(v: dict) -> int:
    return nv.mac_cell(np.asarray(v["data"], np.int64), np.asarray(v["weight"], np.int64))


def cosim_mac(atomic_c: int = 8, bits: int = 8, n: int = 500, seed: int = 0,
              unit=MacCell) -> CosimResult:
    """:class:`MacCell` against :func:`hw.nvdla.numerics.mac_cell`."""
    return run_vectors(unit(atomic_c, bits), mac_vectors(atomic_c, bits, n, seed), _mac_model,
                       seed=seed, name=f"MacCell(atomic_c={atomic_c}, bits={bits})")


# -------------------------------------------------------------------------------------- CACC
def cacc_edges(acc_bits: int, shift: int) -> list[int]:
    """Accumulator values that matter for one ``clip_truncate``: the range ends and their
    neighbours (±2**(acc_bits-1)), 0 and ±1, rounding ties ±2**(s-1), k*2**s ± 2**(s-1) and one
    either side of each, and the values around the 32-bit saturation boundary after the shift."""
    lo, hi = -(1 << (acc_bits - 1)), (1 << (acc_bits - 1)) - 1
    vals = {lo, lo + 1, lo + 2, hi, hi - 1, hi - 2, 0, 1, -1, 2, -2}
    if shift >= 1:
        half, one = 1 << (shift - 1), 1 << shift
        for base in (half, one + half, 3 * one + half, hi // one * one - half):
            for sgn in (1, -1):
                for d in (-1, 0, 1):
                    vals.add(sgn * base + d)
    for edge in ((1 << 31) - 1, 1 << 31):  # the shifted value's sat32 boundary
        for sgn in (1, -1):
            centre = sgn * edge << shift if shift < 62 else 0
            for d in (-(1 << shift) // 2 - 1 if shift else -1, -1, 0, 1,
                      (1 << shift) // 2 if shift else 1):
                vals.add(centre + d)
    return sorted(x for x in vals if lo <= x <= hi)


def cacc_vectors(acc_bits: int = 34, shift_bits: int = 6, n_random: int = 500,
                 seed: int = 0) -> list[dict]:
    """Every ``clip_truncate`` in ``0 .. 2**shift_bits - 1`` against every
    :func:`cacc_edges` value, then ``n_random`` random (accumulator, shift) pairs."""
    rng = np.random.default_rng(seed)
    vecs = [{"acc": a, "clip_truncate": s}
            for s in range(1 << shift_bits) for a in cacc_edges(acc_bits, s)]
    lo, hi = -(1 << (acc_bits - 1)), (1 << (acc_bits - 1)) - 1
    for a in _with_extremes(rng, lo, hi, n_random, p=0.1):
        vecs.append({"acc": a, "clip_truncate": int(rng.integers(0, 1 << shift_bits))})
    return vecs


def cosim_cacc(acc_bits: int = 34, shift_bits: int = 6, n_random: int = 500, seed: int = 0,
               unit=CaccTruncate) -> CosimResult:
    """:class:`CaccTruncate` against :func:`hw.nvdla.numerics.cacc_output`."""
    return run_vectors(unit(acc_bits, shift_bits),
                       cacc_vectors(acc_bits, shift_bits, n_random, seed),
                       lambda v: nv.cacc_output(v["acc"], v["clip_truncate"], acc_bits),
                       seed=seed, name=f"CaccTruncate(acc_bits={acc_bits})")


# ------------------------------------------------------------------------------------- SDP X
_FLAG_NAMES = ("bypass", "alu_bypass", "alu_algo", "mul_bypass", "prelu", "relu_bypass")
#: Every combination of the SDP X control bits and ALU algorithm (2*2*4*2*2*2 = 128).
SDP_X_FLAGS = [dict(zip(_FLAG_NAMES, c))
               for c in product((0, 1), (0, 1), range(4), (0, 1), (0, 1), (0, 1))]


def sdp_x_vectors(n: int = 2048, shift_bits: int = 6, seed: int = 0) -> list[dict]:
    """``n`` vectors cycling through :data:`SDP_X_FLAGS` (every combination n / 128 times),
    shifts uniform in ``0 .. 2**shift_bits - 1`` (a third of them 0, 31, 32 or 48/49, the
    boundaries of the 32-bit operand saturation and the 49-bit truncation), and ``d`` /
    operands with a quarter at their extremes."""
    rng = np.random.default_rng(seed)
    top = (1 << shift_bits) - 1
    edges = [s for s in (0, 1, 15, 16, 17, 31, 32, 33, 47, 48, 49) if s <= top]
    ds = _with_extremes(rng, *I32, n)
    aops = _with_extremes(rng, *I16, n)
    mops = _with_extremes(rng, *I16, n)
    vecs = []
    for i in range(n):
        v = dict(SDP_X_FLAGS[i % len(SDP_X_FLAGS)])
        for k in ("alu_shift", "mul_shift"):
            v[k] = int(rng.choice(edges)) if rng.random() < 0.33 else int(rng.integers(0, top + 1))
        v.update(d=ds[i], alu_op=aops[i], mul_op=mops[i])
        vecs.append(v)
    return vecs


def _sdp_x_model(v: dict) -> int:
    return nv.sdp_x(v["d"], v["bypass"], v["alu_bypass"], v["alu_algo"], v["alu_op"],
                    v["alu_shift"], v["mul_bypass"], v["mul_op"], v["mul_shift"], v["prelu"],
                    v["relu_bypass"])


def cosim_sdp_x(n: int = 2048, shift_bits: int = 6, seed: int = 0, unit=SdpX) -> CosimResult:
    """:class:`SdpX` against :func:`hw.nvdla.numerics.sdp_x`."""
    return run_vectors(unit(shift_bits), sdp_x_vectors(n, shift_bits, seed), _sdp_x_model,
                       seed=seed, name="SdpX")


# -------------------------------------------------------------------------- output converter
def cvt_out_vectors(out_bits: int = 8, n: int = 1000, shift_bits: int = 6,
                    seed: int = 0) -> list[dict]:
    """Edge vectors (extreme ``x``/``offset``/``scale`` combinations at shifts 0, 1, 16, 47,
    48, 49, 63; exact rounding ties at the output range ends) then ``n`` random ones (a quarter
    of the values at extremes; a third of them with small scales and offsets, the realistic
    quantization regime where the result lands inside the output range)."""
    rng = np.random.default_rng(seed)
    top = (1 << shift_bits) - 1
    vecs = []
    for x, off, sc in product(I32 + (0, -1), I32 + (0,), I16 + (1, -1)):
        for s in (0, 1, 16, 47, 48, 49, 63):
            if s <= top:
                vecs.append(dict(x=x, offset=off, scale=sc, shift=s))
    lo, hi = -(1 << (out_bits - 1)), (1 << (out_bits - 1)) - 1
    for s in range(1, min(top, 20) + 1):  # ties: (edge ± 0.5) * 2**s with scale 1
        for edge in (lo, hi, 0, lo - 1, hi + 1):
            for d in (-1, 0, 1):
                vecs.append(dict(x=(2 * edge + 1) << (s - 1) if s else edge, offset=d, scale=1,
                                 shift=s))
                vecs.append(dict(x=-((2 * edge + 1) << (s - 1)) + d, offset=0, scale=-1,
                                 shift=s))
    xs = _with_extremes(rng, *I32, n)
    offs = _with_extremes(rng, *I32, n)
    scs = _with_extremes(rng, *I16, n)
    for i in range(n):
        v = dict(x=xs[i], offset=offs[i], scale=scs[i], shift=int(rng.integers(0, top + 1)))
        if i % 3 == 0:
            v.update(x=int(rng.integers(-(1 << 20), 1 << 20)),
                     offset=int(rng.integers(-1000, 1000)),
                     scale=int(rng.integers(-(1 << 15), 1 << 15)),
                     shift=int(rng.integers(8, min(top, 30) + 1)))
        vecs.append(v)
    return [v for v in vecs if I32[0] <= v["x"] <= I32[1]]


def cosim_cvt_out(out_bits: int = 8, n: int = 1000, shift_bits: int = 6, seed: int = 0,
                  unit=OutputConverter) -> CosimResult:
    """:class:`OutputConverter` against :func:`hw.nvdla.numerics.cvt_out`."""
    return run_vectors(unit(out_bits, shift_bits), cvt_out_vectors(out_bits, n, shift_bits, seed),
                       lambda v: nv.cvt_out(v["x"], v["offset"], v["scale"], v["shift"], out_bits),
                       seed=seed, name=f"OutputConverter(out_bits={out_bits})")
