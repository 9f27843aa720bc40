"""Snapshots of the register-level model for co-simulation with the RTL: which register sits
where in a snapshot row (:func:`snapshot_layout`), and the Numba functions the dataflow
kernels of :mod:`hw.systolic.regmodel` call to record one cycle.
"""

from __future__ import annotations

import numpy as np

from hw._jitcache import njit
from hw.numerics import observe
from hw.systolic.config import ArrayConfig, Dataflow

__all__ = ["snapshot_layout"]


# Snapshots (co-simulation against the RTL): with a non-empty ``snap`` array, row t holds every
# register of the array as loaded at the end of cycle t, the output port during cycle t and the
# feeder/weight-port stimulus of cycle t, in the layout of :func:`snapshot_layout`. The kernels
# get each field's offset (-1: absent, e.g. the index banks of dense PEs) in an int64 array
# indexed by these codes.
(O_A, O_A_FLAGS, O_B, O_B_IDX, O_B_VALID, O_ACC, O_RES, O_DRAIN_LEFT, O_OUT, O_OUT_VALID,
 O_A_IN, O_A_FLAGS_IN, O_B_IN, O_B_IDX_IN, O_B_VALID_IN) = range(15)
(S_X, S_X_IDX, S_X_FLAGS, S_SHADOW, S_SHADOW_IDX, S_SHADOW_VALID, S_ACTIVE, S_ACTIVE_IDX,
 S_ACTIVE_VALID, S_PSUM, S_PSUM_VALID, S_OUT, S_OUT_VALID, S_X_IN, S_X_IDX_IN, S_X_FLAGS_IN,
 S_W_ROW, S_W_IN, S_W_IDX_IN, S_W_VALID_IN) = range(20)
_OS_FIELDS = ("a", "a_flags", "b", "b_idx", "b_valid", "acc", "res", "drain_left", "out",
              "out_valid", "a_in", "a_flags_in", "b_in", "b_idx_in", "b_valid_in")
_STATIONARY_FIELDS = ("x", "x_idx", "x_flags", "shadow", "shadow_idx", "shadow_valid", "active",
                      "active_idx", "active_valid", "psum", "psum_valid", "out", "out_valid",
                      "x_in", "x_idx_in", "x_flags_in", "w_row", "w_in", "w_idx_in",
                      "w_valid_in")


@njit(cache=True, inline="always")
def _put(row, off, field, values):
    """Copy ``values`` into snapshot field ``field`` (no-op for an absent field)."""
    base = off[field]
    if base >= 0:
        for q in range(values.shape[0]):
            row[base + q] = np.int64(values[q])


@njit(cache=True)
def _os_snapshot(row, off, sa, sb, rows, cols, acc_bits, ring_a, ring_flags, ring_b, ring_b_idx,
                 ring_b_valid, a_reg, a_flags, b_reg, b_idx, b_valid, nxt, acc, res,
                 drain_left):
    n = rows * cols
    _put(row, off, O_A, a_reg[nxt])
    _put(row, off, O_A_FLAGS, a_flags[nxt])
    _put(row, off, O_B, b_reg[nxt])
    _put(row, off, O_B_IDX, b_idx[nxt])
    _put(row, off, O_B_VALID, b_valid[nxt])
    for p in range(n):
        row[off[O_ACC] + p] = np.int64(observe(acc[p], acc_bits))
        row[off[O_RES] + p] = np.int64(observe(res[p], acc_bits))
    _put(row, off, O_DRAIN_LEFT, drain_left)
    # the output port (value, valid) is written by the drain step
    _put(row, off, O_A_IN, ring_a[sa])
    _put(row, off, O_A_FLAGS_IN, ring_flags[sa])
    _put(row, off, O_B_IN, ring_b[sb])
    _put(row, off, O_B_IDX_IN, ring_b_idx[sb])
    _put(row, off, O_B_VALID_IN, ring_b_valid[sb])


@njit(cache=True)
def _stationary_snapshot(row, off, sx, rows, cols, acc_bits, ring_x, ring_xi, ring_flags, x_reg,
                         x_idx, x_flags, nxt, cur, shadow, shadow_idx, shadow_valid, active,
                         active_idx, active_valid, psum, psum_valid, w_row, gs):
    n = rows * cols
    _put(row, off, S_X, x_reg[nxt])
    _put(row, off, S_X_IDX, x_idx[nxt])
    _put(row, off, S_X_FLAGS, x_flags[nxt])
    _put(row, off, S_SHADOW, shadow)
    _put(row, off, S_SHADOW_IDX, shadow_idx)
    _put(row, off, S_SHADOW_VALID, shadow_valid)
    _put(row, off, S_ACTIVE, active)
    _put(row, off, S_ACTIVE_IDX, active_idx)
    _put(row, off, S_ACTIVE_VALID, active_valid)
    for p in range(n):
        row[off[S_PSUM] + p] = np.int64(observe(psum[nxt, p + cols], acc_bits))
        row[off[S_PSUM_VALID] + p] = psum_valid[nxt, p + cols]
    for j in range(cols):
        row[off[S_OUT] + j] = np.int64(observe(psum[cur, n + j], acc_bits))
        row[off[S_OUT_VALID] + j] = psum_valid[cur, n + j]
    _put(row, off, S_X_IN, ring_x[sx])
    _put(row, off, S_X_IDX_IN, ring_xi[sx])
    _put(row, off, S_X_FLAGS_IN, ring_flags[sx])
    row[off[S_W_ROW]] = w_row
    for j in range(cols):
        w = w_row * cols + j
        for e in range(gs):
            row[off[S_W_IN] + j * gs + e] = np.int64(shadow[w * gs + e]) if w_row >= 0 else 0
        if off[S_W_IDX_IN] >= 0:
            row[off[S_W_IDX_IN] + j] = shadow_idx[w] if w_row >= 0 else 0
        row[off[S_W_VALID_IN] + j] = shadow_valid[w] if w_row >= 0 else 0


def snapshot_layout(cfg: ArrayConfig) -> dict[str, tuple[int, int]]:
    """Where each register bank sits in a snapshot row: ``name -> (offset, length)``.

    Per-PE banks have ``rows * cols`` entries, PE (i, j) at ``i * cols + j``; flags are packed
    as ``valid | first << 1 | last << 2``. Integer values are as the ``acc_bits``-wide (or
    operand-wide) registers show them (two's complement, sign-extended).

    * OS: ``a``, ``a_flags``, ``b``, ``b_valid``, ``acc``, ``res`` (per PE); ``drain_left``
      (per column: drain shifts still to do); ``out``, ``out_valid`` (bottom port during the
      cycle); stimulus ``a_in``, ``a_flags_in`` (per row), ``b_in``, ``b_valid_in`` (per column).
    * WS/IS: ``x``, ``x_flags``, ``shadow``, ``shadow_valid``, ``active``, ``active_valid``,
      ``psum``, ``psum_valid`` (per PE); ``out``, ``out_valid``; stimulus ``x_in``,
      ``x_flags_in`` (per row), ``w_row`` (the weight-port row written, -1 for none), ``w_in``,
      ``w_valid_in`` (per column).

    N:M sparse PEs (``cfg.sparse_m = M``): the bank holding activations holds a group of M
    per PE (``M`` entries per PE or edge lane, PE p's at ``p * M .. p * M + M - 1``): ``a`` and
    ``a_in`` (OS), ``x`` and ``x_in`` (WS), ``shadow``, ``active`` and ``w_in`` (IS). The weight
    side gains its index bank: ``b_idx`` and ``b_idx_in`` (OS); ``shadow_idx``,
    ``active_idx`` and ``w_idx_in`` (WS); ``x_idx`` and ``x_idx_in`` (IS).
    """
    return dict(_snapshot_fields(cfg)[0])


def _snapshot_fields(cfg: ArrayConfig):
    """``([(name, (offset, length))] in order, int64 offsets by kernel code, width)``."""
    r, c, g = cfg.rows, cfg.cols, cfg.sparse_m or cfg.macs_per_pe
    n = r * c
    sp = cfg.sparse_m > 0
    gw = cfg.macs_per_pe        # weight-side operands per PE (dual-MAC: 2)
    if cfg.dataflow is Dataflow.OS:
        lengths = {"a": n * g, "a_flags": n, "b": n * gw, "b_idx": n if sp else 0,
                   "b_valid": n, "acc": n, "res": n, "drain_left": c, "out": c, "out_valid": c,
                   "a_in": r * g, "a_flags_in": r, "b_in": c * gw, "b_idx_in": c if sp else 0,
                   "b_valid_in": c}
        names = _OS_FIELDS
    else:
        gx, gs = (g, gw) if cfg.dataflow is Dataflow.WS else (gw, g)
        lengths = {"x": n * gx, "x_idx": n if sp and gs > 1 else 0, "x_flags": n,
                   "shadow": n * gs, "shadow_idx": n if sp and gx > 1 else 0,
                   "shadow_valid": n, "active": n * gs,
                   "active_idx": n if sp and gx > 1 else 0, "active_valid": n, "psum": n,
                   "psum_valid": n, "out": c, "out_valid": c, "x_in": r * gx,
                   "x_idx_in": r if sp and gs > 1 else 0, "x_flags_in": r, "w_row": 1,
                   "w_in": c * gs, "w_idx_in": c if sp and gx > 1 else 0, "w_valid_in": c}
        names = _STATIONARY_FIELDS
    fields, offsets, offset = [], np.full(len(names), -1, np.int64), 0
    for code, name in enumerate(names):
        if lengths[name]:
            fields.append((name, (offset, lengths[name])))
            offsets[code] = offset
            offset += lengths[name]
    return fields, offsets, offset
