"""The NVDLA lookup table (LUT) of SDP Y and CDP, bit for bit, for int8/int16.

One LUT design serves two units: SDP Y (activation functions after the element-wise stage) and
CDP (the LRN normalization factor). Each has two tables of int16 entries:

* **LE** ("raw" in the CDP C model): 65 entries, indexed linearly or exponentially
  (``le_function``);
* **LO** ("density"): 257 entries, indexed linearly.

Sources (facts, not code): NVIDIA's C model ``cmod/hls/sdp/sdp_y_idx.cpp`` (index, fraction,
hit/miss and the priority mux), ``cmod/hls/sdp/sdp_y_inp.cpp`` (interpolation and the
under/overflow slopes), ``cmod/hls_wrapper/sdp_hls_wrapper.cpp`` (table read, slope/offset
selection, the SDP counters), ``cmod/cdp/NV_NVDLA_cdp.cpp`` (``lookup_lut_int8`` /
``lookup_lut``: the CDP's own LUT arithmetic and counters), ``cmod/hls/include/nvdla_int.h``
(``IntShiftRight``: round half away from zero, then saturate), and the register fields in
``shared/nvdla/rdl/NVDLA_SDP.rdl`` / ``NVDLA_CDP.rdl`` (``S_LUT_*``).

Index of one table for an input ``x`` (``d = x - start``):

* ``d <= 0`` is an **underflow** (index 0).
* Linear: ``index = floor(d / 2**select)`` (``select`` is signed: a negative select multiplies);
  the fraction is the ``select`` low bits of ``d``. Exponent (LE only):
  ``e = floor(log2 d)``, ``index = e - le_index_offset``; ``index < 0`` is an underflow; the
  fraction is ``d - 2**e`` over ``2**e``.
* ``index >= depth - 1`` (64 or 256) is an **overflow** (index ``depth - 1``).

Which table answers (``sdp_y_idx.cpp``; the CDP model selects the same way): both underflow ->
``uflow_priority``; both overflow -> ``oflow_priority``; both hit, or one under- and the other
overflows -> ``hybrid_priority``; otherwise the table that hits. Priorities: 0 = LE, 1 = LO.

Value of the selected table, where SDP and CDP differ (``rnd``: round half away from zero):

* hit, SDP (35-bit fraction ``f``, 32-bit result):
  ``sat32(rnd((y0 * (2**35 - f) + y1 * f) / 2**35))``;
* hit, CDP (16-bit fraction ``f``, truncated from the exact one; 16-bit result):
  ``sat16(y0 + rnd((y1 - y0) * f / 2**16))``;
* under/overflow, SDP: ``sat32(y + sat32(rnd((x - base) * scale / 2**shift)))``, where the SDP's
  5-bit shift field is **signed**: 16..31 read as -16..-1, a left shift of ``(x - base) * scale``
  saturated to 32 bits (C model ``sdp.h``: ``yLutSlopeShiftType`` is ``ACINTT(5)`` and
  ``sdp_y_inp.cpp`` calls ``IntSignedShiftRight``; RTL
  ``vmod/nvdla/sdp/NV_NVDLA_SDP_HLS_Y_int_inp.v`` shifts through ``NV_NVDLA_HLS_shiftrightss``,
  signed data and signed shift);
* under/overflow, CDP: ``sat16(y + sat56(rnd((x - base) * scale / 2**shift)))``, the shift
  unsigned 0..31.

``y`` is entry 0 (underflow) or the last entry (overflow); ``base`` is the table's start
(underflow) or end register (overflow); ``scale``/``shift`` are that table's
``*_slope_uflow_*`` / ``*_slope_oflow_*`` registers. For an underflowing exponent LE table the
base is ``le_start + 2**le_index_offset`` (the input of entry 0); the SDP adds that only for
``le_index_offset > 0``, the CDP for ``le_index_offset >= 0``. The two interpolation formulas
differ at ties: with ``y0 = 1``, ``y1 = 0``, ``f = 1/2`` the SDP gives ``rnd(0.5) = 1`` and the
CDP ``1 + rnd(-0.5) = 0``.

Per-element **flags** (``uint8``) keep what the status counters need: bits 0-1 the LE state,
bits 2-3 the LO state (:data:`HIT`, :data:`UFLOW`, :data:`OFLOW`), bit 4 the selected table.
:func:`lut_counters` turns them into the ``D_PERF_LUT_*`` counters, which the two units count
differently (see there).

Where this model departs from the C model on purpose: the CDP C model rounds its slope products
through a ``double`` and takes ``log2`` in floating point; this model is exact integer
arithmetic, equal to the C model while the products stay below 2**53 (every LRN configuration
of the traces). Shift amounts the C model leaves undefined (negative ``select`` masks,
``1 << 32`` and beyond) give a zero fraction here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Callable, Mapping, Sequence

import numpy as np
from hw._jitcache import njit

from hw.numerics import saturate
from hw.nvdla.numerics import shift_right_sat

__all__ = [
    "LE_EXPONENT", "LE_LINEAR", "PRIORITY_LE", "PRIORITY_LO", "HIT", "UFLOW", "OFLOW",
    "LE_ENTRIES", "LO_ENTRIES", "UNITS", "LutParams", "lut_lookup", "sdp_y_lut", "lut_counters",
    "lut_tables_for",
]

#: ``LUT_LE_FUNCTION`` register values.
LE_EXPONENT = 0
LE_LINEAR = 1
#: ``LUT_*_PRIORITY`` register values.
PRIORITY_LE = 0
PRIORITY_LO = 1
#: Table states in the flags.
HIT = 0
UFLOW = 1
OFLOW = 2
LE_ENTRIES = 65
LO_ENTRIES = 257
#: Units sharing the LUT design.
UNITS = ("sdp", "cdp")

_UNIT_CODE = {"sdp": 0, "cdp": 1}
#: Fraction bits of the interpolation: SDP ``yLutFracSize`` = 35, CDP 16 ("RTL keeps 16 bits").
_FRAC_BITS = (35, 16)
#: LUT input/start/end widths: SDP 32 bits, CDP 38 bits (LOW 32 + HIGH 6).
_IN_BITS = {"sdp": 32, "cdp": 38}

# Layout of the int64 parameter vector the kernels take.
_P_UNIT, _P_LE_FUNC, _P_LE_START, _P_LE_END, _P_LO_START, _P_LO_END = 0, 1, 2, 3, 4, 5
_P_LE_OFFSET, _P_LE_SEL, _P_LO_SEL = 6, 7, 8
_P_LE_UF_SCALE, _P_LE_UF_SHIFT, _P_LE_OF_SCALE, _P_LE_OF_SHIFT = 9, 10, 11, 12
_P_LO_UF_SCALE, _P_LO_UF_SHIFT, _P_LO_OF_SCALE, _P_LO_OF_SHIFT = 13, 14, 15, 16
_P_UF_PRI, _P_OF_PRI, _P_HY_PRI = 17, 18, 19
_N_P = 20


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _check_int(name: str, v, lo: int, hi: int, what: str = "") -> int:
    if not _is_int(v) or not lo <= int(v) <= hi:
        raise ValueError(f"{name} = {v!r}: must be an integer in {lo}..{hi}{what}")
    return int(v)


def _signed(raw: int, bits: int) -> int:
    raw &= (1 << bits) - 1
    return raw - (1 << bits) if raw >> (bits - 1) else raw


@dataclass(frozen=True)
class LutParams:
    """The LUT registers (``S_LUT_*`` of NVDLA_SDP or NVDLA_CDP) as signed values, plus the two
    tables. Validated on construction; :meth:`from_registers` decodes raw register words.

    ``le_function``: :data:`LE_EXPONENT` (0) or :data:`LE_LINEAR` (1), or ``"exponent"`` /
    ``"linear"``. Priorities: :data:`PRIORITY_LE` (0) / :data:`PRIORITY_LO` (1), or ``"le"`` /
    ``"lo"``. Starts/ends: signed, up to 38 bits (the SDP takes 32, checked when used).
    ``le_index_offset``, ``le_index_select``, ``lo_index_select``: signed 8-bit fields.
    Slope scales: int16; slope shifts: -16..31, the amount of the right shift (a negative
    shift is a left shift by ``-shift``, saturated); :meth:`from_registers` decodes the SDP's
    5-bit fields as signed (-16..15) and the CDP's as unsigned (0..31).
    Tables: 65 and 257 int16 entries.
    """

    le_table: tuple
    lo_table: tuple
    le_function: int = LE_LINEAR
    le_start: int = 0
    le_end: int = 0
    lo_start: int = 0
    lo_end: int = 0
    le_index_offset: int = 0
    le_index_select: int = 0
    lo_index_select: int = 0
    le_slope_uflow_scale: int = 0
    le_slope_uflow_shift: int = 0
    le_slope_oflow_scale: int = 0
    le_slope_oflow_shift: int = 0
    lo_slope_uflow_scale: int = 0
    lo_slope_uflow_shift: int = 0
    lo_slope_oflow_scale: int = 0
    lo_slope_oflow_shift: int = 0
    uflow_priority: int = PRIORITY_LE
    oflow_priority: int = PRIORITY_LE
    hybrid_priority: int = PRIORITY_LE

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        for name, n in (("le_table", LE_ENTRIES), ("lo_table", LO_ENTRIES)):
            raw = getattr(self, name)
            try:
                vals = list(raw)
            except TypeError:
                raise ValueError(f"{name} = {raw!r}: must be a sequence of {n} int16 "
                                 f"entries") from None
            if len(vals) != n:
                raise ValueError(f"{name} has {len(vals)} entries: the "
                                 f"{name[:2].upper()} table has exactly {n}")
            for i, v in enumerate(vals):
                _check_int(f"{name}[{i}]", v, -32768, 32767, " (int16 table entry)")
            put(name, tuple(int(v) for v in vals))
        fn = self.le_function
        if isinstance(fn, str) and fn.lower() in ("exponent", "linear"):
            fn = LE_EXPONENT if fn.lower() == "exponent" else LE_LINEAR
        put("le_function", _check_int("le_function", fn, 0, 1,
                                      " (0/'exponent' or 1/'linear')"))
        for name in ("uflow_priority", "oflow_priority", "hybrid_priority"):
            v = getattr(self, name)
            if isinstance(v, str) and v.lower() in ("le", "lo"):
                v = PRIORITY_LE if v.lower() == "le" else PRIORITY_LO
            put(name, _check_int(name, v, 0, 1, " (0/'le' or 1/'lo')"))
        for name in ("le_start", "le_end", "lo_start", "lo_end"):
            put(name, _check_int(name, getattr(self, name), -(1 << 37), (1 << 37) - 1,
                                 " (38-bit signed LUT register)"))
        for name in ("le_index_offset", "le_index_select", "lo_index_select"):
            put(name, _check_int(name, getattr(self, name), -128, 127, " (signed 8-bit field)"))
        for t in ("le", "lo"):
            for f in ("uflow", "oflow"):
                put(f"{t}_slope_{f}_scale", _check_int(
                    f"{t}_slope_{f}_scale", getattr(self, f"{t}_slope_{f}_scale"),
                    -32768, 32767, " (int16 slope scale)"))
                put(f"{t}_slope_{f}_shift", _check_int(
                    f"{t}_slope_{f}_shift", getattr(self, f"{t}_slope_{f}_shift"), -16, 31,
                    " (5-bit slope shift: 0..31, or -16..-1 for the SDP's left shifts)"))

    # ------------------------------------------------------------------ registers
    @classmethod
    def from_registers(cls, regs: Mapping[str, int], le_table_words: Sequence[int],
                       lo_table_words: Sequence[int], unit: str = "sdp",
                       precision: str = "int8") -> "LutParams":
        """Decode raw register words, as a trace programs them, into :class:`LutParams`.

        ``regs`` maps register names without unit prefix and ``_0`` suffix (``"S_LUT_CFG"``,
        ``"S_LUT_INFO"``, ``"S_LUT_LE_START"`` for the SDP or ``"S_LUT_LE_START_LOW"`` /
        ``"S_LUT_LE_START_HIGH"`` for the CDP, ``"S_LUT_LE_SLOPE_SCALE"``, ...) to 32-bit words;
        a register not in ``regs`` holds its reset value 0. Table words are the 16-bit
        ``LUT_DATA`` values (read as int16).

        Decoding follows the C models: the CDP's 38-bit start/end is ``HIGH[5:0]:LOW[31:0]``
        sign-extended; the CDP sign-extends the index selects from bit 5 (int8) or bit 6 (int16)
        as ``cmod/cdp/NV_NVDLA_cdp.cpp`` does (the RDL: "6bits for int8, 7bits for int16"), the
        SDP reads them as int8 (``sdp_hls_wrapper.h``). The slope shifts are signed 5-bit fields
        for the SDP (``yLutSlopeShiftType``, ``cmod/hls/sdp/sdp.h``), unsigned for the CDP.
        """
        unit = _check_unit(unit)
        precision = _check_precision(precision)
        known = {"S_LUT_CFG", "S_LUT_INFO", "S_LUT_LE_SLOPE_SCALE", "S_LUT_LE_SLOPE_SHIFT",
                 "S_LUT_LO_SLOPE_SCALE", "S_LUT_LO_SLOPE_SHIFT"}
        ends = ("S_LUT_LE_START", "S_LUT_LE_END", "S_LUT_LO_START", "S_LUT_LO_END")
        if unit == "sdp":
            known.update(ends)
        else:
            known.update(f"{e}_{half}" for e in ends for half in ("LOW", "HIGH"))
        for name, word in regs.items():
            if name not in known:
                raise ValueError(f"register {name!r}: not a {unit.upper()} LUT register; "
                                 f"expected one of {sorted(known)}")
            _check_int(f"register {name}", word, 0, 0xFFFFFFFF, " (32-bit register word)")

        def reg(name):
            return int(regs.get(name, 0))

        cfg, info = reg("S_LUT_CFG"), reg("S_LUT_INFO")
        sel_bits = 8 if unit == "sdp" else (6 if precision == "int8" else 7)

        def select(raw, field):
            raw &= 0xFF
            if unit == "sdp":
                return _signed(raw, 8)
            if raw >> (sel_bits - 1) & 1:  # the C model's sign extension: raw | ~mask
                return _signed(raw | (0xFF & ~((1 << sel_bits) - 1)), 8)
            lim = (1 << (sel_bits - 1)) - 1
            if raw > lim:
                raise ValueError(f"S_LUT_INFO.{field} = {raw:#x}: the CDP uses a "
                                 f"{sel_bits}-bit signed select for {precision} "
                                 f"({-lim - 1}..{lim}); bits above it must be clear")
            return raw

        if unit == "sdp":
            se = {n: _signed(reg(n), 32) for n in ends}
        else:
            se = {n: _signed((reg(f"{n}_HIGH") & 0x3F) << 32 | reg(f"{n}_LOW"), 38)
                  for n in ends}

        def slopes(t):
            sc, sh = reg(f"S_LUT_{t}_SLOPE_SCALE"), reg(f"S_LUT_{t}_SLOPE_SHIFT")
            if unit == "sdp":
                return (_signed(sc & 0xFFFF, 16), _signed(sh & 0x1F, 5), _signed(sc >> 16, 16),
                        _signed((sh >> 5) & 0x1F, 5))
            return (_signed(sc & 0xFFFF, 16), sh & 0x1F, _signed(sc >> 16, 16), (sh >> 5) & 0x1F)

        le_s, lo_s = slopes("LE"), slopes("LO")

        def words(name, ws, n):
            vals = list(ws)
            if len(vals) != n:
                raise ValueError(f"{name} has {len(vals)} words: the table has exactly {n}")
            return tuple(_signed(_check_int(f"{name}[{i}]", w, 0, 0xFFFF,
                                            " (16-bit LUT_DATA word)"), 16)
                         for i, w in enumerate(vals))

        return cls(
            le_table=words("le_table_words", le_table_words, LE_ENTRIES),
            lo_table=words("lo_table_words", lo_table_words, LO_ENTRIES),
            le_function=cfg & 1, uflow_priority=(cfg >> 4) & 1,
            oflow_priority=(cfg >> 5) & 1, hybrid_priority=(cfg >> 6) & 1,
            le_start=se["S_LUT_LE_START"], le_end=se["S_LUT_LE_END"],
            lo_start=se["S_LUT_LO_START"], lo_end=se["S_LUT_LO_END"],
            le_index_offset=_signed(info & 0xFF, 8),
            le_index_select=select(info >> 8, "LUT_LE_INDEX_SELECT"),
            lo_index_select=select(info >> 16, "LUT_LO_INDEX_SELECT"),
            le_slope_uflow_scale=le_s[0], le_slope_uflow_shift=le_s[1],
            le_slope_oflow_scale=le_s[2], le_slope_oflow_shift=le_s[3],
            lo_slope_uflow_scale=lo_s[0], lo_slope_uflow_shift=lo_s[1],
            lo_slope_oflow_scale=lo_s[2], lo_slope_oflow_shift=lo_s[3],
        )

    # ------------------------------------------------------------------ checks, kernel form
    def check_for(self, unit: str, precision: str = "int8") -> None:
        """Raise ValueError if these registers do not fit ``unit`` at ``precision``: the SDP's
        start/end registers are 32-bit; the CDP's index selects are 6-bit (int8) or 7-bit
        (int16) signed and its slope shifts unsigned (no left shifts); an exponent LE table
        needs ``le_index_offset`` <= 31 (SDP) or <= 38 (CDP; a larger offset makes every input
        underflow, and the C model's ``1 << offset`` is undefined)."""
        unit = _check_unit(unit)
        precision = _check_precision(precision)
        if unit == "sdp":
            for name in ("le_start", "le_end", "lo_start", "lo_end"):
                _check_int(name, getattr(self, name), -(1 << 31), (1 << 31) - 1,
                           " (the SDP's LUT registers are 32-bit signed)")
        else:
            b = 6 if precision == "int8" else 7
            for name in ("le_index_select", "lo_index_select"):
                _check_int(name, getattr(self, name), -(1 << (b - 1)), (1 << (b - 1)) - 1,
                           f" (the CDP's select is {b}-bit signed for {precision})")
            for t in ("le", "lo"):
                for f in ("uflow", "oflow"):
                    name = f"{t}_slope_{f}_shift"
                    _check_int(name, getattr(self, name), 0, 31,
                               " (the CDP's slope shift is unsigned: no left shifts)")
        if self.le_function == LE_EXPONENT:
            _check_int("le_index_offset", self.le_index_offset, -128,
                       31 if unit == "sdp" else 38,
                       f" (exponent LE table on the {unit.upper()})")

    def vector(self, unit: str) -> np.ndarray:
        """The int64 parameter vector the Numba kernels take (layout ``_P_*``)."""
        p = np.zeros(_N_P, np.int64)
        p[_P_UNIT] = _UNIT_CODE[_check_unit(unit)]
        p[_P_LE_FUNC] = self.le_function
        p[_P_LE_START], p[_P_LE_END] = self.le_start, self.le_end
        p[_P_LO_START], p[_P_LO_END] = self.lo_start, self.lo_end
        p[_P_LE_OFFSET] = self.le_index_offset
        p[_P_LE_SEL], p[_P_LO_SEL] = self.le_index_select, self.lo_index_select
        p[_P_LE_UF_SCALE], p[_P_LE_UF_SHIFT] = self.le_slope_uflow_scale, self.le_slope_uflow_shift
        p[_P_LE_OF_SCALE], p[_P_LE_OF_SHIFT] = self.le_slope_oflow_scale, self.le_slope_oflow_shift
        p[_P_LO_UF_SCALE], p[_P_LO_UF_SHIFT] = self.lo_slope_uflow_scale, self.lo_slope_uflow_shift
        p[_P_LO_OF_SCALE], p[_P_LO_OF_SHIFT] = self.lo_slope_oflow_scale, self.lo_slope_oflow_shift
        p[_P_UF_PRI], p[_P_OF_PRI] = self.uflow_priority, self.oflow_priority
        p[_P_HY_PRI] = self.hybrid_priority
        return p

    def tables(self) -> tuple[np.ndarray, np.ndarray]:
        """(LE, LO) tables as int64 arrays."""
        return np.array(self.le_table, np.int64), np.array(self.lo_table, np.int64)

    def registers(self) -> dict:
        """The field values as a plain dict (JSON-serializable), tables included."""
        return {f.name: (list(getattr(self, f.name)) if f.name.endswith("table")
                         else getattr(self, f.name)) for f in fields(self)}


def _check_unit(unit) -> str:
    if unit not in UNITS:
        raise ValueError(f"unit = {unit!r}: must be one of {UNITS}")
    return unit


def _check_precision(precision) -> str:
    if precision not in ("int8", "int16"):
        raise ValueError(f"precision = {precision!r}: the LUT model covers 'int8' and "
                         f"'int16' (fp16 is not modelled)")
    return precision


# ---------------------------------------------------------------------- Numba kernels
@njit(cache=True)
def _table_index(x, start, exponent, offset, select, depth, frac_bits):
    """(state, index, fraction) of one table; see the module docstring."""
    d = np.int64(x) - np.int64(start)
    if d <= 0:
        return UFLOW, np.int64(0), np.int64(0)
    last = np.int64(depth - 1)
    if exponent:
        e = np.int64(0)
        while (d >> (e + 1)) > 0:
            e += 1
        idx = e - offset
        if idx < 0:
            return UFLOW, np.int64(0), np.int64(0)
        if idx >= last:
            return OFLOW, last, np.int64(0)
        r = d - (np.int64(1) << e)
        f = r >> (e - frac_bits) if e > frac_bits else r << (frac_bits - e)
        return HIT, idx, f
    if select >= 0:
        idx = d >> select if select < 63 else np.int64(0)
    elif -select >= 20:  # d >= 1 shifted left by 20 or more is past any table
        idx = last
    else:
        idx = d << (-select)
    if idx >= last:
        return OFLOW, last, np.int64(0)
    f = np.int64(0)
    if select > 0:
        r = d & ((np.int64(1) << select) - 1) if select < 62 else d
        if select > frac_bits:
            f = r >> (select - frac_bits) if select - frac_bits < 63 else np.int64(0)
        else:
            f = r << (frac_bits - select)
    return HIT, idx, f


@njit(cache=True)
def _lut_one(x, p, le_tab, lo_tab):
    """One LUT lookup: (value, flags)."""
    cdp = p[_P_UNIT] == 1
    fb = 16 if cdp else 35
    exponent = p[_P_LE_FUNC] == LE_EXPONENT
    le_s, le_i, le_f = _table_index(x, p[_P_LE_START], exponent, p[_P_LE_OFFSET], p[_P_LE_SEL],
                                    LE_ENTRIES, fb)
    lo_s, lo_i, lo_f = _table_index(x, p[_P_LO_START], False, 0, p[_P_LO_SEL], LO_ENTRIES, fb)
    if le_s == UFLOW and lo_s == UFLOW:
        sel = p[_P_UF_PRI]
    elif le_s == OFLOW and lo_s == OFLOW:
        sel = p[_P_OF_PRI]
    elif (le_s == HIT) == (lo_s == HIT):  # both hit, or one under- and one overflow
        sel = p[_P_HY_PRI]
    elif le_s == HIT:
        sel = 0
    else:
        sel = 1
    flags = np.uint8(le_s | (lo_s << 2) | (sel << 4))
    if sel == 0:
        state, idx, f, tab = le_s, le_i, le_f, le_tab
    else:
        state, idx, f, tab = lo_s, lo_i, lo_f, lo_tab
    if state == HIT:
        y0 = tab[idx]
        y1 = tab[idx + 1]
        if cdp:
            return saturate(y0 + shift_right_sat((y1 - y0) * f, 16, 64, 56), 16), flags
        acc = y0 * ((np.int64(1) << 35) - f) + y1 * f
        return shift_right_sat(acc, 35, 69, 32), flags
    o = 0 if sel == 0 else 4  # slope register block of the selected table
    if state == UFLOW:
        y = tab[0]
        base = p[_P_LE_START] if sel == 0 else p[_P_LO_START]
        scale, shift = p[_P_LE_UF_SCALE + o], p[_P_LE_UF_SHIFT + o]
        if sel == 0 and exponent:
            off = p[_P_LE_OFFSET]
            if off > 0 or (cdp and off == 0):
                base += np.int64(1) << off
    else:
        y = tab[tab.shape[0] - 1]
        base = p[_P_LE_END] if sel == 0 else p[_P_LO_END]
        scale, shift = p[_P_LE_OF_SCALE + o], p[_P_LE_OF_SHIFT + o]
    prod = (np.int64(x) - base) * scale
    if cdp:
        return saturate(y + shift_right_sat(prod, shift, 64, 56), 16), flags
    if shift < 0:  # the SDP's signed shift: a left shift, saturated to 32 bits
        s = -shift
        lim = np.int64(1) << np.int64(31)
        if prod > (lim - 1) >> s:
            slope = lim - 1
        elif prod < -(lim >> s):
            slope = -lim
        else:
            slope = prod << s
        return saturate(y + slope, 32), flags
    return saturate(y + shift_right_sat(prod, shift, 50, 32), 32), flags


@njit(cache=True)
def _lut_array(x, p, le_tab, lo_tab):
    out = np.empty(x.shape[0], np.int64)
    flags = np.empty(x.shape[0], np.uint8)
    for i in range(x.shape[0]):
        out[i], flags[i] = _lut_one(x[i], p, le_tab, lo_tab)
    return out, flags


# ---------------------------------------------------------------------- Python API
def _as_int_array(name: str, x, lo: int, hi: int) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise ValueError(f"{name}: dtype {a.dtype} is not an integer type")
    if a.size and (int(a.min()) < lo or int(a.max()) > hi):
        bad = int(a.min()) if int(a.min()) < lo else int(a.max())
        raise ValueError(f"{name} holds {bad}: LUT inputs must lie in {lo}..{hi}")
    return a


def lut_lookup(x, params: LutParams, unit: str = "sdp",
               precision: str = "int8") -> tuple[np.ndarray, np.ndarray]:
    """Look every element of ``x`` up in the LUT of ``unit`` ("sdp" or "cdp").

    ``x`` is any integer array: the SDP Y LUT takes 32-bit values (the Y core's output), the
    CDP LUT 38-bit values (the square sum). Returns ``(out, flags)`` with the shape of ``x``:
    ``out`` int64 (int32 range for the SDP, int16 for the CDP) and ``flags`` uint8 (module
    docstring; count them with :func:`lut_counters`)."""
    unit = _check_unit(unit)
    if not isinstance(params, LutParams):
        raise ValueError(f"params = {type(params).__name__}: must be a LutParams")
    params.check_for(unit, precision)
    bits = _IN_BITS[unit]
    a = _as_int_array("x", x, -(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    le, lo = params.tables()
    out, flags = _lut_array(a.astype(np.int64).ravel(), params.vector(unit), le, lo)
    return out.reshape(a.shape), flags.reshape(a.shape)


def sdp_y_lut(x, params: LutParams, precision: str = "int8") -> tuple[np.ndarray, np.ndarray]:
    """The SDP Y LUT stage on a whole tensor (any shape, e.g. NHWC) of 32-bit values, as the Y
    core (:func:`hw.nvdla.numerics.sdp_y`) delivers them; the result goes on to the output
    converter (:func:`hw.nvdla.numerics.cvt_out`). ``precision`` is the SDP's processing
    precision (it changes nothing in the integer LUT, but is checked). Returns
    ``(out, flags)`` as :func:`lut_lookup`."""
    return lut_lookup(x, params, "sdp", precision)


def lut_counters(flags, unit: str) -> dict:
    """The LUT status counters of one layer from the per-element flags, counted as each unit's
    C model counts them (keys name the ``D_PERF_LUT_*`` registers of either unit).

    * CDP (``NV_NVDLA_cdp.cpp``): ``uflow`` = both tables underflow; ``oflow`` = both overflow;
      ``le_hit`` / ``lo_hit`` = only that table hits; ``hybrid`` = everything else (both hit,
      or one under- and one overflows). The five add up to the element count.
    * SDP (``sdp_hls_wrapper.cpp``): ``uflow`` / ``oflow`` = the *selected* table under- /
      overflows; ``le_hit`` / ``lo_hit`` = that table hits (whatever the other does);
      ``hybrid`` = the selected table hits.
    """
    unit = _check_unit(unit)
    f = np.asarray(flags)
    if f.dtype != np.uint8:
        raise ValueError(f"flags: dtype {f.dtype}; pass the uint8 flags lut_lookup returns")
    le, lo, sel = f & 3, (f >> 2) & 3, (f >> 4) & 1
    if unit == "cdp":
        uf = (le == UFLOW) & (lo == UFLOW)
        of = (le == OFLOW) & (lo == OFLOW)
        le_only = (le == HIT) & (lo != HIT)
        lo_only = (lo == HIT) & (le != HIT)
        return {"uflow": int(uf.sum()), "oflow": int(of.sum()),
                "hybrid": int(f.size - uf.sum() - of.sum() - le_only.sum() - lo_only.sum()),
                "le_hit": int(le_only.sum()), "lo_hit": int(lo_only.sum())}
    s = np.where(sel == 1, lo, le)
    return {"uflow": int((s == UFLOW).sum()), "oflow": int((s == OFLOW).sum()),
            "hybrid": int((s == HIT).sum()), "le_hit": int((le == HIT).sum()),
            "lo_hit": int((lo == HIT).sum())}


# ---------------------------------------------------------------------- table builder
def _slope_regs(deriv: float, name: str, unit: str = "sdp") -> tuple[int, int]:
    """(scale, shift) with scale * 2**-shift closest to ``deriv``, the largest shift that keeps
    the scale in int16 (most precise). The register field is 5 bits: the SDP reads it signed
    (-16..15), the CDP unsigned (0..31); the builder uses right shifts only (0..15 for the SDP,
    0..31 for the CDP)."""
    if not math.isfinite(deriv):
        raise ValueError(f"{name}: the function's slope there is {deriv!r}, not finite")
    for shift in range(15 if unit == "sdp" else 31, -1, -1):
        scale = round(deriv * (1 << shift))
        if -32768 <= scale <= 32767:
            return int(scale), shift
    raise ValueError(f"{name}: slope {deriv!r} per input step exceeds the int16 scale "
                     f"range even with shift 0 (|slope| <= 32767)")


def lut_tables_for(func: Callable[[np.ndarray], np.ndarray], *, out_scale: float,
                   le_start: int, le_function="linear", le_index_select: int = 0,
                   le_index_offset: int = 0, lo_start: int, lo_index_select: int = 0,
                   uflow_priority="le", oflow_priority="le", hybrid_priority="lo",
                   unit: str = "sdp", precision: str = "int8") -> LutParams:
    """The registers and tables a compiler would program to evaluate ``func`` on the LUT.

    ``func`` maps LUT inputs (the integer the LUT sees: the Y core output for SDP, the square
    sum for CDP, as float64) to real outputs; each entry is ``round(func(x_i) * out_scale)``
    saturated to int16, at the entry's input ``x_i``: ``start + i * 2**select`` for a linear
    table, ``le_start + 2**(le_index_offset + i)`` for an exponent LE table. The end
    registers are the inputs of the last entries (clamped to the register range). The
    under/overflow slopes are ``out_scale * func'`` at the table ends (finite difference over
    one entry), as a scale and the largest shift that keeps the scale int16.

    Examples: SDP sigmoid over [-8, 8) in Q8 inputs on a linear LO table with select 3; CDP LRN
    ``(k + alpha/n * s)**-beta`` of the square sum ``s`` on an exponent LE table (wide dynamic
    range) plus a linear LO table for small sums.
    """
    unit = _check_unit(unit)
    precision = _check_precision(precision)
    if not callable(func):
        raise ValueError(f"func = {func!r}: must be callable on a float64 array")
    if isinstance(out_scale, bool) or not isinstance(out_scale, (int, float)) \
            or not math.isfinite(out_scale) or out_scale <= 0:
        raise ValueError(f"out_scale = {out_scale!r}: must be a positive finite number")
    probe = LutParams(le_table=(0,) * LE_ENTRIES, lo_table=(0,) * LO_ENTRIES,
                      le_function=le_function, le_start=le_start, lo_start=lo_start,
                      le_index_offset=le_index_offset, le_index_select=le_index_select,
                      lo_index_select=lo_index_select, uflow_priority=uflow_priority,
                      oflow_priority=oflow_priority, hybrid_priority=hybrid_priority)
    probe.check_for(unit, precision)
    bits = _IN_BITS[unit]
    rmax, rmin = (1 << (bits - 1)) - 1, -(1 << (bits - 1))

    def inputs(start, sel, n, exponent=False, offset=0):
        i = np.arange(n, dtype=np.float64)
        if exponent:
            return start + np.exp2(offset + i)
        return start + i * (2.0 ** sel)

    def entries(name, xs):
        with np.errstate(all="ignore"):
            ys = np.asarray(func(xs), dtype=np.float64)
        if ys.shape != xs.shape:
            raise ValueError(f"func returned shape {ys.shape} for {xs.shape} inputs: it must "
                             f"work elementwise on a float64 array")
        bad = np.flatnonzero(~np.isfinite(ys))
        if bad.size:
            raise ValueError(f"func({xs[bad[0]]!r}) = {ys[bad[0]]!r} at {name} entry "
                             f"{int(bad[0])}: not finite")
        return tuple(int(v) for v in np.clip(np.round(ys * out_scale), -32768, 32767)), ys

    le_exp = probe.le_function == LE_EXPONENT
    le_x = inputs(le_start, le_index_select, LE_ENTRIES, le_exp, le_index_offset)
    lo_x = inputs(lo_start, lo_index_select, LO_ENTRIES)
    le_tab, le_y = entries("LE", le_x)
    lo_tab, lo_y = entries("LO", lo_x)

    def slope(xs, ys, at_end):
        a, b = (-2, -1) if at_end else (0, 1)
        return (ys[b] - ys[a]) / (xs[b] - xs[a]) * out_scale

    le_uf = _slope_regs(slope(le_x, le_y, False), "LE underflow", unit)
    le_of = _slope_regs(slope(le_x, le_y, True), "LE overflow", unit)
    lo_uf = _slope_regs(slope(lo_x, lo_y, False), "LO underflow", unit)
    lo_of = _slope_regs(slope(lo_x, lo_y, True), "LO overflow", unit)
    clamp = lambda v: int(min(max(v, rmin), rmax))  # noqa: E731
    return LutParams(
        le_table=le_tab, lo_table=lo_tab, le_function=probe.le_function,
        le_start=le_start, le_end=clamp(le_x[-1]), lo_start=lo_start, lo_end=clamp(lo_x[-1]),
        le_index_offset=le_index_offset, le_index_select=le_index_select,
        lo_index_select=lo_index_select,
        le_slope_uflow_scale=le_uf[0], le_slope_uflow_shift=le_uf[1],
        le_slope_oflow_scale=le_of[0], le_slope_oflow_shift=le_of[1],
        lo_slope_uflow_scale=lo_uf[0], lo_slope_uflow_shift=lo_uf[1],
        lo_slope_oflow_scale=lo_of[0], lo_slope_oflow_shift=lo_of[1],
        uflow_priority=probe.uflow_priority, oflow_priority=probe.oflow_priority,
        hybrid_priority=probe.hybrid_priority,
    )
