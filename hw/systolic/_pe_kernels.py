"""What every PE of the register-level model does in one cycle (:mod:`hw.systolic.regmodel`):
its operand product, the register shifts between PEs, and the multiply-accumulate of the PEs
with more than one operand per register (N:M sparse with an index mux, dual-MAC int4), as
Numba functions the dataflow kernels call once per cycle on whole register banks. The dense
PEs' shifts and multiply-accumulates are written out in the kernels themselves: there a call
passing a dozen arrays (Numba counts references to each) cost more than the work.

Register banks are stored flat, PE (i, j) at index i * cols + j, and double-buffered:
bank[t & 1] holds what was loaded at the end of cycle t - 1, bank[(t & 1) ^ 1] receives the
loads of cycle t. A cycle is then a few long loops LLVM vectorizes, plus edge fix-ups.
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import overload

from hw._jitcache import njit
from hw.numerics import accumulate

# Control bits carried with the streamed operand (one uint8 per register).
VALID = np.uint8(1)
FIRST = np.uint8(2)
LAST = np.uint8(4)

def _product(x, w):
    """Operand product: exact in 32 bits for int8/int16 operands, fp32 for float operands."""
    return x * w


@overload(_product, jit_options={"cache": True}, inline="always")
def _product_jit(x, w):
    if isinstance(x, types.Integer):
        # int8/int16 products fit in int32; truncating the (widened) product lets LLVM use a
        # 32-bit vector multiply (AVX2 has no 64-bit one). The value is unchanged.
        return lambda x, w: np.int64(np.int32(x * w))
    return lambda x, w: x * w




@njit(cache=True, inline="always")
def _shift(bank, flags, cur, nxt, distance):
    """Every register loads its neighbour ``distance`` places earlier (1: from the left PE,
    cols: from the PE above). Edge registers are overwritten by the caller afterwards."""
    for p in range(distance, bank.shape[1]):
        bank[nxt, p] = bank[cur, p - distance]
        flags[nxt, p] = flags[cur, p - distance]


@njit(cache=True, inline="always")
def _shift_bank(bank, cur, nxt, distance):
    """:func:`_shift` for a bank without flags (a sparse PE's operand groups, its indices)."""
    for p in range(distance, bank.shape[1]):
        bank[nxt, p] = bank[cur, p - distance]


@njit(cache=True, inline="always")
def _dot(x, xi, w, wi, lanes):
    """Sum of ``lanes`` products ``x[xi + e] * w[wi + e]`` (a dual-MAC PE adds both)."""
    s = _product(x[xi], w[wi])
    for e in range(1, lanes):
        s += _product(x[xi + e], w[wi + e])
    return s


@njit(cache=True)  # not inlined: the dense kernels stay small for LLVM
def _os_macs_grouped(a, a_flags, b, b_idx, b_valid, nxt, group, lanes, acc, res, drain_loaded,
                     acc_bits, saturating):
    """The OS PEs' multiply-accumulate (the dense one is written out in
    ``_dataflow_kernels._os_kernel``; returns busy PEs and hazards) for PEs whose ``a``
    holds ``group`` operands: N:M sparse (``lanes``
    1: the weight's index picks the activation it multiplies, the index mux) or dual-MAC
    (``lanes`` = ``group``: ``b`` holds as many of the same k and the PE adds all products)."""
    busy = 0
    hazards = 0
    for p in range(acc.shape[0]):
        fl = a_flags[nxt, p]
        on = fl & b_valid[nxt, p] & VALID
        if lanes > 1:
            prod = _dot(a[nxt], p * lanes, b[nxt], p * lanes, lanes)
        else:
            prod = _product(a[nxt, p * group + b_idx[nxt, p]], b[nxt, p])
        if fl & FIRST:      # a pair's sum alone may pass a narrow saturating accumulator
            total = accumulate(prod - prod, prod, acc_bits, True) if saturating else prod
        elif saturating:
            total = accumulate(acc[p], prod, acc_bits, True)
        else:
            total = acc[p] + prod
        acc[p] = total if on else acc[p]
        done = on & (fl >> 2)
        res[p] = total if done else res[p]
        busy += on
        hazards += done & drain_loaded[p]
    return busy, hazards


@njit(cache=True)  # not inlined: the dense kernels stay small for LLVM
def _stationary_macs_sparse(x, x_idx, x_flags, nxt, cur, gx, shadow, shadow_idx, shadow_valid,
                            active, active_idx, active_valid, gs, psum, acc_bits, saturating):
    """The WS/IS PEs' cycle (``first`` copies shadow -> active; psum of row i+1 = psum of row
    i + x*w; the dense one is written out in ``_dataflow_kernels._stationary_kernel``) for N:M
    sparse PEs. One side holds a group of activations
    (``gx`` streamed per PE in WS, ``gs`` stationary in IS; the other width is 1) and the other
    side's weight index picks the one each PE multiplies (the index mux). With ``gx == gs > 1``
    the PEs do that many MACs per cycle on consecutive k (int4 dual-MAC) and add them."""
    n_pe = x_flags.shape[1]
    cols_offset = psum.shape[1] - n_pe
    for p in range(n_pe):
        if x_flags[nxt, p] & FIRST:
            for e in range(gs):
                active[p * gs + e] = shadow[p * gs + e]
            active_idx[p] = shadow_idx[p]
            active_valid[p] = shadow_valid[p]
    busy = 0
    if gx > 1 and gs > 1:       # dual-MAC PEs: both sides hold gx operands, the PE adds all
        for p in range(n_pe):
            on = x_flags[nxt, p] & active_valid[p] & VALID
            pin = psum[cur, p]
            prod = _dot(x[nxt], p * gx, active, p * gs, gx)
            total = accumulate(pin, prod, acc_bits, True) if saturating else pin + prod
            psum[nxt, p + cols_offset] = total if on else pin
            busy += on
        return busy
    for p in range(n_pe):
        on = x_flags[nxt, p] & active_valid[p] & VALID
        pin = psum[cur, p]
        prod = _product(x[nxt, p * gx + active_idx[p]], active[p * gs + x_idx[nxt, p]])
        total = accumulate(pin, prod, acc_bits, True) if saturating else pin + prod
        psum[nxt, p + cols_offset] = total if on else pin
        busy += on
    return busy
