"""Analytical-but-structural cycle model of one NVDLA hardware layer (direct convolution).

The layer is a :class:`hw.nvdla.conv_layer.ConvLayer`; :func:`engine_cycles` (at the end) times
the standalone SDP, PDP, CDP and BDMA layers.

The model follows the convolution pipeline of NVIDIA's hardware documentation
(``doc/hw/v1/hwarch.rst``, ``doc/hw/v1/ias/unit_description.rst``; summarized in
``shared/reference/nvdla.md``) instead of a roofline over MACs and bytes:

* **Atomic operation** (CSC -> CMAC, one per cycle): a 1x1 x atomic-C input vector is broadcast
  to all MAC cells; every cell holds atomic-C weights of one kernel. Channels are padded to
  ``atomic_c``; int8 computes ``atomic_k`` kernels in parallel, int16/fp16 ``atomic_k // 2``
  (each 16-bit multiplier is a fused pair of 8-bit ones, :meth:`NvdlaConfig.macs`).
* **Stripe**: a run of atomic operations over consecutive output points that reuse the same
  weights (one kernel tap, one channel group, one kernel group). On nv_full a stripe is 16..32
  atomic ops: the lower bound hides the loading of the next stripe's weights from CBUF into the
  MAC cells, the upper bound is the accumulator (CACC) capacity; the ``master`` (int8-only)
  configs use about ``2 x atomic_k``. The model balances a pass's stripes within these bounds;
  a stripe shorter than the weight-load time (a pass with fewer output points than the lower
  bound, e.g. FC layers or tiny outputs) stalls the MAC array: the *weight-load bubble*.
* **Block** = R x S stripes (the kernel taps), **channel operation** = ceil(C / atomic-C)
  blocks, **group** = all stripes of one kernel group.
* **CBUF**: ``cbuf_banks`` banks, each holding either feature data or weights (CDMA
  ``D_BANK.DATA_BANK/WEIGHT_BANK``). Either the whole input and all weights fit
  (``full_input_full_weight``), or the whole input fits and weights stream through the
  remaining banks kernel group by kernel group (``full_input_partial_weight``), or the input is
  split into H slices, each a separate hardware layer re-fetching the overlap rows
  (``split_h``; weights kept resident across slices with the CDMA weight-reuse flag when they
  fit, otherwise re-streamed per slice). Among the legal plans (bank splits, slice heights)
  the model takes the fastest, as a compiler would, so a larger CBUF never makes a layer
  slower (splitting only adds latency and halo rows; it wins when weights stay resident).
* **CDMA**: bytes / (bus bytes per cycle, or the DRAM limit when lower) plus one DRAM latency
  per fetch phase (each H slice is a new hardware layer; the CDMA's latency buffer, sized by
  ``PRIMARY_MEMIF_LATENCY``, sustains the bandwidth within a phase).
* **CACC -> SDP**: output elements / SDP throughput (nv_full: 16 per cycle); SDP's write DMA
  stores the output (or PDP's pooled output when pooling is fused).
* **CMAC pipeline**: 7 cycles, paid once per hardware layer (drain).

Per hardware layer (each H slice; each group/batch image is processed as its own layer)::

    time = startup + max(mac, cdma, sdp, pdp, write) + drain
    startup = dram_latency + first-fill bytes / read_rate + weight_load   (first kernel group's
              weights and the first R input rows must be in CBUF before the first stripe)
    mac     = sum over stripes of max(stripe_len, weight_load)            (= atomic ops + bubbles)
    cdma    = (data + weights + SDP operand bytes - first fill) / read_rate
              (+ mac, serialized, when only one kernel group of weights fits in CBUF)
    sdp     = outputs / sdp_rate;  pdp = outputs / pdp_throughput;  write = out bytes / bus
    drain   = CMAC pipeline (7) + last stripe's outputs / sdp_rate

Not modelled: Winograd, weight compression, the batch feature's stripes across images,
W splitting, CSB register programming, SDP/PDP in standalone (memory-to-memory) mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

from hw.nvdla.config import NvdlaConfig
from hw.nvdla.conv_layer import ConvLayer
from hw.nvdla.memory import memory_path

__all__ = ["CbufCapacityError", "ConvCycles", "NetworkCycles", "conv_cycles", "network_cycles",
           "CMAC_PIPELINE_CYCLES", "stripe_limits", "weight_load_cycles", "BYTES", "EngineCycles",
           "engine_cycles"]

class CbufCapacityError(ValueError):
    """A convolution layer cannot be planned on a build: one kernel height of its input rows plus
    one kernel group of weights exceed the build's CBUF (W splitting is not modelled). The layer
    and the build are each valid; the user's choice of the two does not fit (the systolic
    analogue is ``compiler.backends.systolic_tiling.TilingError``)."""


#: CMAC pipeline depth in cycles (doc/hw/v1/ias/unit_description.rst, CMAC section).
CMAC_PIPELINE_CYCLES = 7

#: Bytes per element of each precision.
BYTES = {"int8": 1, "int16": 2, "fp16": 2}

#: nv_full (v1) stripe length bounds in atomic operations (unit_description.rst, CSC).
V1_STRIPE_MIN, V1_STRIPE_MAX = 16, 32


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _ceil(a, b) * b


# --------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class ConvCycles:
    """Cycle estimate of one layer, with its breakdown (all counts cover groups and batch).

    mac_cycles: ideal MAC-array cycles = atomic ops = groups*batch * ceil(C'/atomic_c)
        * ceil(K'/k_par) * P*Q * taps (C' = C/groups, or C*S and taps = R in image mode).
    stripes, stripe_length: stripe operations and their maximum length (atomic ops).
    weight_load_cycles: cycles to load one kernel group's weights for a stripe (CBUF -> MAC).
    bubble_cycles: MAC stalls from stripes shorter than the weight load.
    compute_cycles: mac_cycles + bubble_cycles.
    channel_ops: channel operations (one per kernel group, stripe pass and channel group).
    cbuf_mode, h_slices, data_banks, weight_banks: the CBUF plan chosen.
    data_bytes, weight_bytes, sdp_read_bytes, write_bytes: DRAM traffic.
    cdma_data_cycles, cdma_weight_cycles: fetch bytes / read rate + latency per fetch phase.
    sdp_cycles: CACC -> SDP delivery (outputs / SDP elements per cycle).
    pdp_cycles: fused pooling (PDP input elements / PDP throughput), 0 without pooling.
    write_cycles: output bytes / bus bytes per cycle.
    startup_cycles, drain_cycles: not overlapped (first fill; CMAC pipeline + last delivery).
    total: the estimate; bound: the term that limits it ("mac", "cdma", "sdp", "pdp").
    """

    name: str
    precision: str
    mac_cycles: int
    atomic_ops: int
    stripes: int
    stripe_length: int
    weight_load_cycles: int
    bubble_cycles: int
    compute_cycles: int
    channel_ops: int
    cbuf_mode: str
    h_slices: int
    data_banks: int
    weight_banks: int
    data_bytes: int
    weight_bytes: int
    sdp_read_bytes: int
    write_bytes: int
    cdma_data_cycles: float
    cdma_weight_cycles: float
    sdp_cycles: float
    pdp_cycles: float
    write_cycles: float
    startup_cycles: float
    drain_cycles: float
    total: int
    bound: str
    body: dict = field(default_factory=dict, compare=False)

    @property
    def mac_utilization(self) -> float:
        """Ideal MAC cycles / total (padding of channels counts as used)."""
        return self.mac_cycles / self.total if self.total else 0.0


@dataclass(frozen=True)
class NetworkCycles:
    layers: tuple[ConvCycles, ...]
    total: int
    clock_mhz: float

    @property
    def seconds(self) -> float:
        return self.total / (self.clock_mhz * 1e6)

    @property
    def fps(self) -> float:
        return 1.0 / self.seconds if self.total else math.inf

    def bounds(self) -> dict[str, int]:
        """Cycles of the layers grouped by what bounds them."""
        out: dict[str, int] = {}
        for c in self.layers:
            out[c.bound] = out.get(c.bound, 0) + c.total
        return out


# --------------------------------------------------------------------------------- helpers
def _k_par(cfg: NvdlaConfig, precision: str) -> int:
    """Kernels computed in parallel: atomic_k (int8), atomic_k // 2 (16-bit)."""
    return cfg.atomic_k if precision == "int8" else cfg.atomic_k // 2


def _cbuf_read_bytes(cfg: NvdlaConfig) -> int:
    """CSC's CBUF read port: one atomic-C vector of the widest supported element per cycle
    (nv_full: 64 x 16 bit = 1024 bit, the width of the CBUF read data bus in the RTL)."""
    widest = max(BYTES[p] for p in cfg.precisions)
    return cfg.atomic_c * widest


def weight_load_cycles(cfg: NvdlaConfig, precision: str, kernels: int | None = None) -> int:
    """Cycles to load ``kernels`` (default a full kernel group) x atomic-C weights from CBUF into
    the MAC cells: bytes / CBUF read bytes per cycle. nv_full: 16 (int8 32x64x1 B or int16
    16x64x2 B over 128 B/cycle) = the documented lower stripe bound; master configs: atomic_k."""
    k = _k_par(cfg, precision) if kernels is None else kernels
    return _ceil(k * cfg.atomic_c * BYTES[precision], _cbuf_read_bytes(cfg))


def stripe_limits(cfg: NvdlaConfig, precision: str = "int8") -> tuple[int, int]:
    """(minimum, maximum) stripe length in atomic ops. nv_full (the v1 configs with 16-bit
    precisions): 16..32 (unit_description.rst); master configs: atomic_k..2 x atomic_k
    (the weight load time, and about twice atomic-K for the accumulator)."""
    if len(cfg.precisions) > 1:
        return V1_STRIPE_MIN, V1_STRIPE_MAX
    return weight_load_cycles(cfg, precision), 2 * cfg.atomic_k


def _pass_cycles(points: int, length: int, wl: int) -> tuple[int, int]:
    """(cycles, stripes) to sweep ``points`` output points with stripes of at most ``length``
    atomic ops, balanced (n = ceil(points / length) stripes of floor/ceil(points / n)), each
    lasting max(its length, weight load ``wl``). With length = 2 x lower bound, balancing keeps
    every stripe within the documented 16..32 (nv_full) range whenever points >= 16, so a
    bubble appears only for passes with fewer output points than the weight-load time."""
    n = _ceil(points, length)
    base, extra = divmod(points, n)          # `extra` stripes of base+1, the rest of base
    cycles = extra * max(base + 1, wl) + (n - extra) * max(base, wl)
    return cycles, n


@dataclass
class _Geom:
    """Per hardware layer (one group of one image) quantities."""

    cg: int          # channels per atomic-op sweep (C/groups, or C*S in image mode)
    kg: int          # kernels
    taps: int        # stripes per block (R*S, or R in image mode)
    n_cg: int        # channel groups
    kp: int          # kernels per kernel group
    n_kg_full: int
    k_rem: int
    wl_full: int
    wl_rem: int
    L: int           # stripe max length
    bpe: int
    row_dram: int    # bytes of one input row in DRAM (channels padded to the memory atom)
    row_cbuf: int    # bytes of one input row in CBUF (channels padded to the bank width)
    wt_bytes: int    # all weights (DRAM and CBUF), padded to 128 B
    kgw_bytes: int   # one kernel group's weights
    out_elems_row: int  # conv output elements of one output row (kg * Q)
    out_bytes: int   # output surface bytes written (pooled if PDP)
    elt_bytes_row: int  # eltwise operand bytes per conv output row
    param_bytes: int    # bias / bn per-channel operands
    sdp_rate: int
    pdp_rate: int


def _geometry(cfg: NvdlaConfig, layer: ConvLayer) -> _Geom:
    prec = layer.precision
    bpe = BYTES[prec]
    c_grp, kg = layer.C // layer.groups, layer.K // layer.groups
    if layer.image_input:
        cg, taps = c_grp * layer.S, layer.R
    else:
        cg, taps = c_grp, layer.R * layer.S
    kp = _k_par(cfg, prec)
    atom, entry = cfg.memory_atom_bytes, cfg.cbuf_bank_width_bytes
    if layer.image_input:  # pixel lines are packed, not padded per pixel
        row_dram = _round_up(layer.W * c_grp * bpe, atom)
        row_cbuf = _round_up(layer.W * c_grp * bpe, entry)
    else:
        row_dram = layer.W * _round_up(c_grp * bpe, atom)
        row_cbuf = layer.W * _round_up(c_grp * bpe, entry)
    # Weights: per kernel group, channel group, R, S, kernel, channel; total padded to 128 B
    # (doc/hw/format.rst).
    wt_bytes = _round_up(kg * layer.R * layer.S * c_grp * bpe, 128)
    kgw_bytes = _round_up(min(kp, kg) * layer.R * layer.S * c_grp * bpe, 128)
    po, qo = layer.pooled_shape
    out_bytes = po * qo * _round_up(kg * bpe, atom)
    elt_row = layer.Q * _round_up(kg * bpe, atom) if layer.eltwise else 0
    param = kg * (2 if layer.bias else 0) + kg * (4 if layer.bn else 0)
    # CACC delivers to SDP at the X1 (BS) rate (nv_full 16/cycle); X2 (BN) when used; an
    # element-wise operand is applied by an X unit in per-element mode, so the Y unit's lower
    # rate (EW throughput) is not on the path.
    sdp_rate = cfg.sdp_bs_throughput
    if layer.bn or layer.eltwise:
        sdp_rate = min(sdp_rate, cfg.sdp_bn_throughput)
    lo, hi = stripe_limits(cfg, prec)
    return _Geom(cg=cg, kg=kg, taps=taps, n_cg=_ceil(cg, cfg.atomic_c), kp=kp,
                 n_kg_full=kg // kp, k_rem=kg % kp, wl_full=weight_load_cycles(cfg, prec),
                 wl_rem=weight_load_cycles(cfg, prec, kg % kp) if kg % kp else 0, L=hi, bpe=bpe,
                 row_dram=row_dram, row_cbuf=row_cbuf, wt_bytes=wt_bytes, kgw_bytes=kgw_bytes,
                 out_elems_row=kg * layer.Q, out_bytes=out_bytes, elt_bytes_row=elt_row,
                 param_bytes=param, sdp_rate=sdp_rate, pdp_rate=cfg.pdp_throughput)


@dataclass
class _SliceCost:
    atomic_ops: int
    compute: int
    stripes: int
    channel_ops: int
    data_bytes: int
    wt_bytes: int
    sdp_read: int
    write_bytes: int
    startup: float
    drain: float
    terms: dict
    time: float


def _slice_cost(cfg: NvdlaConfig, layer: ConvLayer, g: _Geom, p0: int, p1: int,
                fetch_weights: bool, serial_weights: bool, bus: float, dram: float | None) -> _SliceCost:
    """Cost of one hardware layer computing output rows [p0, p1)."""
    rows_out = p1 - p0
    pts = rows_out * layer.Q
    # MAC side: stripes per (kernel group, tap, channel group).
    c_full, s_full = _pass_cycles(pts, g.L, g.wl_full)
    compute = g.n_kg_full * c_full
    stripes_per = g.n_kg_full * s_full
    n_kgroups = g.n_kg_full
    if g.k_rem:
        c_rem, s_rem = _pass_cycles(pts, g.L, g.wl_rem)
        compute += c_rem
        stripes_per += s_rem
        n_kgroups += 1
    compute *= g.n_cg * g.taps
    stripes = stripes_per * g.n_cg * g.taps
    atomic_ops = g.n_cg * _ceil(g.kg, g.kp) * pts * g.taps
    channel_ops = n_kgroups * _ceil(pts, g.L) * g.n_cg
    # Input rows this slice needs (overlap rows re-fetched), clipped to the real input.
    top = p0 * layer.stride_y - layer.pad_top
    bot = (p1 - 1) * layer.stride_y - layer.pad_top + layer.eff_R
    rows_in = max(0, min(bot, layer.H) - max(top, 0))
    data_bytes = rows_in * g.row_dram
    wt_bytes = g.wt_bytes if fetch_weights else 0
    sdp_read = g.elt_bytes_row * rows_out + (g.param_bytes if fetch_weights else 0)
    write_bytes = _ceil(g.out_bytes * rows_out, layer.P)
    read_rate = bus if dram is None else min(bus, dram)
    # Startup: DRAM latency, first kernel group's weights and the first kernel-height of input
    # rows, then the first stripe's weight load into the MAC cells.
    first_rows = min(rows_in, layer.eff_R)
    first_fill = first_rows * g.row_dram + (g.kgw_bytes if fetch_weights else 0)
    startup = cfg.dram_latency_cycles + first_fill / read_rate + g.wl_full
    last_stripe = min(pts, g.L)
    drain = CMAC_PIPELINE_CYCLES + last_stripe * min(g.kp, g.kg) / g.sdp_rate
    reads = data_bytes + wt_bytes + sdp_read
    stream = (reads - first_fill) / read_rate
    outputs = pts * g.kg
    terms = {"mac": float(compute), "cdma": stream,
             "sdp": outputs / g.sdp_rate}
    if layer.pool_kernel is not None:
        terms["pdp"] = outputs / g.pdp_rate
    out_unit = "pdp" if layer.pool_kernel is not None else "sdp"
    terms[out_unit] = max(terms[out_unit], write_bytes / bus)
    if dram is not None:  # reads and writes share the DRAM
        terms["cdma"] = max(terms["cdma"], (reads + write_bytes - first_fill) / dram)
    if serial_weights and wt_bytes:
        # Only one kernel group of weights fits: the next group's fetch cannot overlap compute.
        terms["cdma"] = max(terms["cdma"], compute + (wt_bytes - g.kgw_bytes) / read_rate)
    time = startup + max(terms.values()) + drain
    return _SliceCost(atomic_ops, compute, stripes, channel_ops, data_bytes, wt_bytes, sdp_read,
                      write_bytes, startup, drain, terms, time)


def _plan_costs(cfg, layer, g, rows_per_slice, fetch_all_slices, serial, bus, dram):
    """Slices of ``rows_per_slice`` output rows; returns a list of (_SliceCost, count)."""
    P = layer.P
    n_full, rem = divmod(P, rows_per_slice)
    out = []
    # First slice always fetches weights; later ones only when weights are re-streamed.
    if n_full:
        out.append((_slice_cost(cfg, layer, g, 0, rows_per_slice, True, serial, bus, dram), 1))
        if n_full > 1:
            # Interior slices are representative of all full slices but the first.
            mid = 1 * rows_per_slice
            out.append((_slice_cost(cfg, layer, g, mid, mid + rows_per_slice, fetch_all_slices,
                                    serial, bus, dram), n_full - 1))
    if rem:
        p0 = n_full * rows_per_slice
        out.append((_slice_cost(cfg, layer, g, p0, P, fetch_all_slices or not n_full, serial,
                                bus, dram), 1))
    return out


def _rows_fit(layer: ConvLayer, g: _Geom, data_capacity: int) -> int:
    """Largest number of output rows whose input rows fit in ``data_capacity`` CBUF bytes."""
    rows_in = data_capacity // g.row_cbuf
    if rows_in < layer.eff_R:
        return 0
    return min(layer.P, (rows_in - layer.eff_R) // layer.stride_y + 1)


def _dram_rate(cfg: NvdlaConfig, dram_bytes_per_cycle: float | None) -> float | None:
    """The shared DRAM limit in bytes per core cycle: the caller's, else the config's memory
    path (:func:`hw.nvdla.memory.memory_path`); None when only the bus limits."""
    if dram_bytes_per_cycle is not None:
        if isinstance(dram_bytes_per_cycle, bool) or not dram_bytes_per_cycle > 0:
            raise ValueError(f"dram_bytes_per_cycle = {dram_bytes_per_cycle!r}: must be > 0")
        return float(dram_bytes_per_cycle)
    path = memory_path(cfg)
    return path.bytes_per_cycle if path.bytes_per_cycle < path.bus_bytes_per_cycle else None


def conv_cycles(cfg: NvdlaConfig, layer: ConvLayer, dram_bytes_per_cycle: float | None = None,
                bank_split: tuple[int, int] | None = None) -> ConvCycles:
    """Estimate the cycles of ``layer`` on ``cfg``.

    ``dram_bytes_per_cycle`` caps the shared DRAM bandwidth (reads + writes) below the bus width
    (e.g. 20 for 20 GB/s at 1 GHz); by default the config's memory path gives it
    (``dram_gbps``, ``dram``: :func:`hw.nvdla.memory.memory_path`). ``bank_split = (data, weight)``
    forces the CBUF bank split a register program chose (CDMA ``D_BANK``) instead of the best
    legal one.

    Raises ConfigError (a ValueError) when ``cfg`` lacks the layer's precision,
    :class:`CbufCapacityError` when one kernel height of input rows plus one kernel group of
    weights do not fit in CBUF, ValueError when the forced bank split does not hold what the
    layer needs."""
    cfg.require_precision(layer.precision, where=f"layer {layer.name!r}" if layer.name else None)
    dram = _dram_rate(cfg, dram_bytes_per_cycle)
    if bank_split is not None:
        if (not isinstance(bank_split, tuple) or len(bank_split) != 2
                or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 1
                           for b in bank_split)
                or sum(bank_split) > cfg.cbuf_banks):
            raise ValueError(f"bank_split = {bank_split!r}: must be (data banks, weight banks), each >= 1, "
                             f"together at most {cfg.cbuf_banks} ({cfg.name}'s CBUF banks)")
    g = _geometry(cfg, layer)
    bus = float(cfg.dram_bytes_per_cycle)
    banks, bank_bytes = cfg.cbuf_banks, cfg.cbuf_bank_width_bytes * cfg.cbuf_bank_depth
    P = layer.P
    in_cbuf = layer.H * g.row_cbuf
    data_need = _ceil(in_cbuf, bank_bytes)
    wt_need = _ceil(g.wt_bytes, bank_bytes)
    kg1 = _ceil(g.kgw_bytes, bank_bytes)
    kg2 = _ceil(2 * g.kgw_bytes, bank_bytes)

    # Candidate plans: (mode, data banks, weight banks, rows per slice, refetch weights, serial).
    plans = []
    if data_need + wt_need <= banks:
        plans.append(("full_input_full_weight", data_need, wt_need, P, False, False))
    elif data_need + kg1 <= banks:
        wb = banks - data_need
        plans.append(("full_input_partial_weight", data_need, wb, P, False,
                      wb * bank_bytes < 2 * g.kgw_bytes))
    # H splits: weights resident (fetched once, CDMA weight reuse), or streamed per slice.
    for wb, resident, serial in ((wt_need, True, False), (kg2, False, False),
                                 (kg1, False, True)):
        db = banks - wb
        if db < 1:
            continue
        max_rows = _rows_fit(layer, g, db * bank_bytes)
        for rows in range(1, max_rows + 1):
            if rows < P:
                plans.append(("split_h", db, wb, rows, not resident, serial))
            elif not resident:  # whole input, weights streamed once
                plans.append(("full_input_partial_weight", db, wb, P, False, serial))
    if bank_split is not None:
        plans = [p for p in plans if (p[1], p[2]) == bank_split]
        if not plans:
            db, wb = bank_split
            max_rows = _rows_fit(layer, g, db * bank_bytes)
            if max_rows and wb * bank_bytes >= g.kgw_bytes:
                resident = wb >= wt_need
                serial = not resident and wb * bank_bytes < 2 * g.kgw_bytes
                rows = min(max_rows, P)
                mode = ("full_input_full_weight" if resident else "full_input_partial_weight") \
                    if rows == P else "split_h"
                plans = [(mode, db, wb, rows, not resident and rows < P, serial)]
            else:
                raise ValueError(f"layer {layer.name or layer}: bank_split = {bank_split}: "
                                 f"{db} data banks hold {max_rows} output rows' input and "
                                 f"{wb} weight banks {wb * bank_bytes} B (one kernel group needs "
                                 f"{g.kgw_bytes} B); the layer cannot run with this split")
    if not plans:
        raise CbufCapacityError(
            f"layer {layer.name or layer}: not even {layer.eff_R} input rows "
            f"({layer.eff_R * g.row_cbuf} B) plus one kernel group of weights ({g.kgw_bytes} B) "
            f"fit in {cfg.name}'s CBUF ({cfg.cbuf_bytes} B); W splitting is not modelled")

    best = None
    for mode, db, wb, rows, refetch, serial in plans:
        costs = _plan_costs(cfg, layer, g, rows, refetch, serial, bus, dram)
        t = sum(c.time * n for c, n in costs)
        if best is None or t < best[0] - 1e-9:
            best = (t, mode, db, wb, rows, refetch, costs)
    t, mode, db, wb, rows, refetch, costs = best

    reps = layer.groups * layer.batch
    agg = lambda attr: reps * sum(getattr(c, attr) * n for c, n in costs)  # noqa: E731
    terms: dict[str, float] = {}
    for c, n in costs:
        for k, v in c.terms.items():
            terms[k] = terms.get(k, 0.0) + reps * n * v
    # The bound: the term that is largest summed over the hardware layers.
    bound = max(terms, key=terms.get)
    n_slices = sum(n for _, n in costs)
    read_rate = bus if dram is None else min(bus, dram)
    data_bytes, wt_bytes = int(agg("data_bytes")), int(agg("wt_bytes"))
    weight_phases = n_slices if refetch else 1
    atomic_ops = int(agg("atomic_ops"))
    mac_ideal = reps * g.n_cg * _ceil(g.kg, g.kp) * P * layer.Q * g.taps
    assert atomic_ops == mac_ideal
    compute = int(agg("compute"))
    outputs = reps * g.kg * P * layer.Q
    return ConvCycles(
        name=layer.name, precision=layer.precision, mac_cycles=mac_ideal, atomic_ops=atomic_ops,
        stripes=int(agg("stripes")), stripe_length=min(g.L, rows * layer.Q),
        weight_load_cycles=g.wl_full, bubble_cycles=compute - atomic_ops,
        compute_cycles=compute, channel_ops=int(agg("channel_ops")), cbuf_mode=mode,
        h_slices=n_slices, data_banks=db, weight_banks=wb, data_bytes=data_bytes,
        weight_bytes=wt_bytes, sdp_read_bytes=int(agg("sdp_read")),
        write_bytes=int(agg("write_bytes")),
        cdma_data_cycles=data_bytes / read_rate + reps * n_slices * cfg.dram_latency_cycles,
        cdma_weight_cycles=wt_bytes / read_rate + reps * weight_phases * cfg.dram_latency_cycles,
        sdp_cycles=outputs / g.sdp_rate,
        pdp_cycles=outputs / g.pdp_rate if layer.pool_kernel is not None else 0.0,
        write_cycles=agg("write_bytes") / bus,
        startup_cycles=agg("startup"), drain_cycles=agg("drain"),
        total=int(math.ceil(reps * t - 1e-9)), bound=bound, body=terms)


def network_cycles(cfg: NvdlaConfig, layers: Iterable[ConvLayer],
                   dram_bytes_per_cycle: float | None = None) -> NetworkCycles:
    """Sum of the layers' estimates (layers run back to back); fps at ``cfg.clock_mhz``."""
    results = tuple(conv_cycles(cfg, layer, dram_bytes_per_cycle) for layer in layers)
    return NetworkCycles(results, sum(r.total for r in results), cfg.clock_mhz)


# --------------------------------------------------------------------- standalone SDP/PDP/CDP
#: Throughput field of the config for each standalone engine (elements per cycle).
_ENGINE_RATE = {"sdp": "sdp_bs_throughput", "sdp_ew": "sdp_ew_throughput",
                "pdp": "pdp_throughput", "cdp": "cdp_throughput", "bdma": None}


@dataclass(frozen=True)
class EngineCycles:
    """Cycle estimate of a standalone (memory-to-memory) SDP, PDP or CDP hardware layer.

    ``engine_cycles`` = input elements / the engine's elements per cycle; ``memory_cycles`` =
    (read + write bytes) / the DRAM rate; ``total`` = DRAM latency + max of the two (the
    engines are pipelined, their few cycles of drain are below this model's resolution);
    ``bound`` is "engine" or "dram".
    """

    name: str
    kind: str
    elements_in: int
    elements_out: int
    read_bytes: int
    write_bytes: int
    engine_cycles: float
    memory_cycles: float
    latency_cycles: int
    total: int
    bound: str


def engine_cycles(cfg: NvdlaConfig, kind: str, elements_in: int, elements_out: int,
                  read_bytes: int, write_bytes: int, name: str = "",
                  dram_bytes_per_cycle: float | None = None) -> EngineCycles:
    """Estimate a standalone SDP (``"sdp"``: X units at the BS rate; ``"sdp_ew"``: the Y unit's
    element-wise rate), PDP or CDP layer, or a BDMA copy (``"bdma"``: memory only): its RDMA streams ``read_bytes`` in, the engine
    processes ``elements_in`` at its throughput (``cfg.*_throughput``, e.g. PDP 8/cycle on
    nv_full), its WDMA writes ``write_bytes``; reads and writes share the DRAM rate
    (:func:`hw.nvdla.memory.memory_path` unless ``dram_bytes_per_cycle`` is given)."""
    if kind not in _ENGINE_RATE:
        raise ValueError(f"engine kind = {kind!r}: must be one of {', '.join(_ENGINE_RATE)}")
    for key, v in (("elements_in", elements_in), ("elements_out", elements_out),
                   ("read_bytes", read_bytes), ("write_bytes", write_bytes)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{key} = {v!r}: must be an integer >= 0")
    rate = getattr(cfg, _ENGINE_RATE[kind]) if _ENGINE_RATE[kind] else math.inf
    if rate == 0:
        cfg.require_feature("sdp_ew", where=f"{name or kind} (element-wise SDP layer)")
    dram = _dram_rate(cfg, dram_bytes_per_cycle)
    bus = float(cfg.dram_bytes_per_cycle)
    mem_rate = bus if dram is None else min(bus, dram)
    eng = elements_in / rate
    mem = (read_bytes + write_bytes) / mem_rate
    total = cfg.dram_latency_cycles + max(eng, mem)
    return EngineCycles(name=name, kind=kind, elements_in=elements_in, elements_out=elements_out,
                        read_bytes=read_bytes, write_bytes=write_bytes, engine_cycles=eng,
                        memory_cycles=mem, latency_cycles=cfg.dram_latency_cycles,
                        total=int(math.ceil(total)), bound="engine" if eng >= mem else "dram")
