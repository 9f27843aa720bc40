"""The stateful DRAM model the executor uses (:class:`DramModel`) and the kernel arrays behind it.

:func:`_kernel_params` turns a :class:`~hw.memory.dram.DramConfig` into the ``params`` vector of
:mod:`hw.memory._dram_kernel` (command-to-command distances, address fields, state offsets);
the model keeps the kernel's ``state`` and ``stats`` across transfers. The timing contract is
stated in :mod:`hw.memory.dram`.
"""

from __future__ import annotations

import math

from hw._lazy import lazy_module
from hw.memory.dram.config import DramConfig

np = lazy_module("numpy")                     # loaded when a model first runs,
K = lazy_module("hw.memory._dram_kernel")   # so reading presets stays light
R = lazy_module("hw.memory._dram_requests")

__all__ = ["DramModel"]


def _kernel_params(cfg: DramConfig) -> np.ndarray:
    """The int64 ``params`` vector of :mod:`hw.memory._dram_kernel` (layout in its docstring)."""
    p = np.zeros(K.N_PARAMS, np.int64)
    widths, pos = cfg.field_widths(), cfg.field_positions()
    burst, rl, wl = cfg.burst_cycles, cfg.cl, cfg.cwl
    one_group = cfg.bankgroups == 1  # DRAMsim3: without bank groups the _L timings are the _S ones
    ccd_l = cfg.tccd_s if one_group else cfg.tccd_l
    wtr_l = cfg.twtr_s if one_group else cfg.twtr_l
    values = {
        K.P_CHANNELS: cfg.channels, K.P_RANKS: cfg.ranks, K.P_BANKGROUPS: cfg.bankgroups,
        K.P_BPG: cfg.banks_per_group, K.P_BANKS: cfg.banks, K.P_REQ_BYTES: cfg.request_bytes,
        K.P_SHIFT: int(math.log2(cfg.request_bytes)),
        K.P_BURST: burst, K.P_RL: rl, K.P_WL: wl,
        # command-to-command distances, DRAMsim3 timing.cc's table (AL folded into cl/cwl)
        K.P_RTRL: max(burst, ccd_l), K.P_RTRS: max(burst, cfg.tccd_s), K.P_RTRO: burst + cfg.trtrs,
        K.P_RTW: rl + burst - wl + cfg.trtrs, K.P_RTWO: rl + burst + cfg.trtrs - wl,
        K.P_RTP: cfg.trtp, K.P_RDA_ACT: burst + cfg.trtp + cfg.trp, K.P_RDA_REF: cfg.trtp + cfg.trp,
        K.P_WTRL: wl + burst + wtr_l, K.P_WTRS: wl + burst + cfg.twtr_s,
        K.P_WTRO: wl + burst + cfg.trtrs - rl, K.P_WTWL: max(burst, ccd_l),
        K.P_WTWS: max(burst, cfg.tccd_s), K.P_WTWO: burst, K.P_WTP: wl + burst + cfg.twr,
        K.P_WRA_ACT: wl + burst + cfg.twr + cfg.trp,
        K.P_RP: cfg.trp, K.P_RC: cfg.tras + cfg.trp, K.P_RAS: cfg.tras, K.P_RCDRD: cfg.trcd,
        K.P_RCDWR: cfg.trcdwr or cfg.trcd, K.P_RRDL: cfg.trrd_s if one_group else cfg.trrd_l,
        K.P_RRDS: cfg.trrd_s, K.P_FAW: cfg.tfaw, K.P_RFC: cfg.trfc,
        K.P_REF_INTERVAL: cfg.trefi // cfg.ranks, K.P_PPD: cfg.tppd,
        K.P_CLOSED: cfg.page_policy == "closed", K.P_PER_RANK: cfg.queue_structure == "per_rank",
        K.P_NQ: cfg.ranks if cfg.queue_structure == "per_rank" else cfg.ranks * cfg.banks,
        K.P_MASKED: (cfg.ranks if cfg.queue_structure == "per_rank" else cfg.ranks * cfg.banks) <= 64,
        K.P_QDEPTH: cfg.queue_depth, K.P_TQDEPTH: cfg.transaction_queue_depth,
        K.P_DUAL: cfg.dual_command_issue, K.P_REFRESH: cfg.refresh, K.P_IDEAL: cfg.ideal,
        K.P_LG_BANKS: cfg.banks.bit_length() - 1, K.P_LG_BPG: cfg.banks_per_group.bit_length() - 1,
        K.P_CH_BITS: widths["ch"],
        K.P_CH_HASH: (sum(widths.values()) - pos["ch"] - widths["ch"]
                      if cfg.channel_hash and widths["ch"] else 0),
    }
    for name, (ip, im) in {"ch": (K.P_CH_POS, K.P_CH_MASK), "ra": (K.P_RA_POS, K.P_RA_MASK),
                           "bg": (K.P_BG_POS, K.P_BG_MASK), "ba": (K.P_BA_POS, K.P_BA_MASK),
                           "ro": (K.P_RO_POS, K.P_RO_MASK)}.items():
        values[ip], values[im] = pos[name], (1 << widths[name]) - 1
    for index, value in values.items():
        p[index] = int(value)
    C, R, B, G = cfg.channels, cfg.ranks, cfg.banks, cfg.bankgroups
    nq, D, T = int(p[K.P_NQ]), cfg.queue_depth, cfg.transaction_queue_depth
    regions = [
        *[(o, C) for o in (K.P_O_TIME, K.P_O_RR, K.P_O_REF_NEXT, K.P_O_REF_RANK, K.P_O_REF_HEAD,
                           K.P_O_REF_LEN, K.P_O_QCOUNT, K.P_O_QMASK, K.P_O_SEQ, K.P_O_TQHEAD,
                           K.P_O_TQLEN, K.P_O_FM_VALID, K.P_O_FM, K.P_O_SEL_VALID, K.P_O_SEL_T,
                           K.P_O_SEL_Q, K.P_O_SEL_B, K.P_O_SEL_I, K.P_O_SEL_K)],
        (K.P_O_REF_FIFO, C * K.REF_FIFO), (K.P_O_MAXFIN, 1),
        *[(o, C * R * B) for o in (K.P_O_OPEN, K.P_O_HITS, K.P_O_NACT, K.P_O_NPRE, K.P_O_NRD,
                                   K.P_O_NWR, K.P_O_NREF, K.P_O_BHEAD, K.P_O_BLEN, K.P_O_BNWR, K.P_O_QC_VALID,
                                   K.P_O_QC_A, K.P_O_QC_RD, K.P_O_QC_WR, K.P_O_QT_A, K.P_O_QT_RD,
                                   K.P_O_QT_WR, K.P_O_QT_ROW_EPOCH, K.P_O_QT_COL_EPOCH)],
        *[(o, C * R * G) for o in (K.P_O_BG_NACT, K.P_O_BG_NRD, K.P_O_BG_NWR)],
        *[(o, C * R) for o in (K.P_O_RK_NACT, K.P_O_RK_NRD, K.P_O_RK_NWR, K.P_O_RK_NPRE,
                               K.P_O_RK_NREF, K.P_O_OTH_NRD, K.P_O_OTH_NWR, K.P_O_FAW_IDX,
                               K.P_O_RK_ROW_EPOCH, K.P_O_RK_COL_EPOCH, K.P_O_RBMASK)],
        (K.P_O_FAW, C * R * 4), (K.P_O_QLEN, C * nq),
        *[(o, C * R * B * D) for o in (K.P_O_BE_ROW, K.P_O_BE_WR, K.P_O_BE_REQ, K.P_O_BE_FLAG,
                                       K.P_O_BE_SEQ)],
        *[(o, C * T) for o in (K.P_O_TQ_BANK, K.P_O_TQ_ROW, K.P_O_TQ_WR, K.P_O_TQ_REQ,
                               K.P_O_TQ_Q, K.P_O_TQ_ARR)],
    ]
    offset = 0
    for index, size in regions:
        p[index] = offset
        offset += size
    p[K.P_O_SCRATCH] = offset                   # idle skipping: snapshot + change per round
    offset += 2 * (offset + K.N_STATS)
    p[K.P_STATE_SIZE] = offset
    return p


def _initial_state(p: np.ndarray) -> np.ndarray:
    s = np.zeros(int(p[K.P_STATE_SIZE]), np.int64)
    C, R, B = int(p[K.P_CHANNELS]), int(p[K.P_RANKS]), int(p[K.P_BANKS])
    s[p[K.P_O_TIME]:p[K.P_O_TIME] + C] = -1
    s[p[K.P_O_REF_NEXT]:p[K.P_O_REF_NEXT] + C] = p[K.P_REF_INTERVAL]
    s[p[K.P_O_OPEN]:p[K.P_O_OPEN] + C * R * B] = -1
    s[p[K.P_O_FAW]:p[K.P_O_FAW] + C * R * 4] = -(1 << 40)
    return s


_COUNTERS = ("reads", "writes", "row_hits", "row_misses", "row_conflicts", "activates",
             "precharges", "refreshes", "data_cycles", "refresh_cycles")   # K.ST_<NAME>


class DramModel:
    """Stateful DRAM: open rows, timing constraints, pending refreshes and counters persist
    across :meth:`transfer` calls (the executor issues many transfers).

    ``params``, ``state`` and ``stats`` are the int64 arrays behind it; Numba code may pass them
    to :func:`hw.memory._dram_requests.dram_transfer` directly.
    """

    def __init__(self, cfg: DramConfig):
        if not isinstance(cfg, DramConfig):
            raise TypeError(f"DramModel: cfg must be a DramConfig, not {type(cfg).__name__}")
        self.cfg = cfg
        self.params = _kernel_params(cfg)
        self.state = _initial_state(self.params)
        self.stats = np.zeros(K.N_STATS, np.int64)

    def transfer(self, address: int, nbytes: int, is_write: bool, start_cycle: int,
                 max_outstanding: int) -> int:
        """A DMA burst: the column requests covering ``[address, address + nbytes)`` (that is
        ``ceil(nbytes / request_bytes)`` of them for an aligned address), offered in address
        order no earlier than ``start_cycle``, with request k waiting for request
        k - ``max_outstanding`` to complete. Returns the DRAM cycle the last one completes
        (``start_cycle`` for ``nbytes == 0`` and on the ideal model).

        The burst is simulated to completion before returning. Calls with non-decreasing
        ``start_cycle`` are the normal case; a channel already simulated past ``start_cycle``
        by an earlier call takes the new requests after that point (bursts overlapping in time
        are served one after another, not interleaved)."""
        if address < 0 or nbytes < 0 or start_cycle < 0 or max_outstanding < 1:
            raise ValueError(f"DramModel.transfer: need address, nbytes, start_cycle >= 0 and "
                             f"max_outstanding >= 1 (got {address}, {nbytes}, {start_cycle}, "
                             f"{max_outstanding})")
        return int(R.dram_transfer(self.params, self.state, self.stats, int(address), int(nbytes),
                                   bool(is_write), int(start_cycle), int(max_outstanding)))

    def counters(self) -> dict[str, int]:
        """Totals since construction: reads, writes, row_hits/misses/conflicts (per request:
        hit = its column command needed no ACT; miss = bank closed, ACT only; conflict = another
        row open, PRE + ACT), activates, precharges, refreshes, data_cycles (data-bus busy cycles,
        summed over channels) and refresh_cycles (tRFC per refresh)."""
        return {name: int(self.stats[getattr(K, "ST_" + name.upper())]) for name in _COUNTERS}
