"""DRAM timing model (hw/memory/dram/, hw/memory/_dram_kernel.py, hw/memory/_dram_requests.py).

Three kinds of checks:

* closed forms derived by hand from the JEDEC-style timing table (single accesses, row hits and
  conflicts, bank-group spacing, tRC/tRRD/tFAW limits, write-to-read turnaround, refresh);
* an independent per-cycle reference controller (``RefController`` below: DRAMsim3-style
  per-bank timing tables, ticking every cycle) that the event-driven kernel must equal exactly
  on random small configurations and traces, and a command-log auditor for the presets;
* configs, presets, DRAMsim3 .ini files, traces, errors and the CLI module.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hw.memory.dram import (DRAM_PRESETS, DramConfig, DramModel, ReplayResult, TraceError,
                            decode_address, dram_config_from_dict, dram_config_from_dramsim3_ini,
                            dram_config_to_dict, dram_preset, read_trace, replay,
                            replay_summary)
from hw.systolic.config import ConfigError
from npulab.cli.dram import add_parser, config_from_args, main

ACT, PRE, RD, WR, RDA, WRA, REF = range(7)
DDR4 = dram_preset("ddr4-3200")
QUIET = dataclasses.replace(DDR4, refresh=False)  # closed forms without refresh
SLOW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reads(cfg, addresses, issues=0):
    addresses = np.asarray(addresses, np.int64)
    t = np.broadcast_to(np.asarray(issues, np.int64), addresses.shape)
    return replay(cfg, addresses, np.zeros(len(addresses), bool), t, command_log=True)


def addr(cfg, *, channel=0, rank=0, bankgroup=0, bank=0, row=0, column=0) -> int:
    """Byte address of a burst, composed with the config's mapping (inverse of decode)."""
    pos, shift = cfg.field_positions(), cfg.request_bytes.bit_length() - 1
    fields = {"ch": channel, "ra": rank, "bg": bankgroup, "ba": bank, "ro": row, "co": column}
    return sum(v << (pos[f] + shift) for f, v in fields.items())


# ---- closed forms --------------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n in DRAM_PRESETS if n != "ideal"])
def test_lone_read_to_closed_bank(name):
    """Offered at a: moved into its command queue at a, ACT at a + 1, RD at a + 1 + tRCD, last
    data beat at RD + CL + tBurst."""
    cfg = DRAM_PRESETS[name]
    r = reads(cfg, [0], 100)
    assert r.latency_cycles[0] == 1 + cfg.trcd + cfg.cl + cfg.burst_cycles
    assert r.finish_cycles[0] == 100 + r.latency_cycles[0]
    assert (r.row_misses, r.row_hits, r.row_conflicts, r.activates) == (1, 0, 0, 1)
    cmds = r.commands
    assert cmds[:, 6].tolist() == [ACT, RD] and cmds[:, 0].tolist() == [101, 101 + cfg.trcd]


def test_lone_write_completes_when_written():
    r = replay(QUIET, [0], [True], [0])
    assert r.finish_cycles[0] == 1 + QUIET.trcd + QUIET.cwl + QUIET.burst_cycles
    assert (r.writes, r.reads) == (1, 0)


def test_row_hit_and_conflict_latencies():
    cfg = QUIET
    hit, other_row = addr(cfg, column=5), addr(cfg, row=7)
    # long after the first access every constraint but the row state has expired
    r = reads(cfg, [0, hit, other_row], [0, 1000, 2000])
    lat = r.latency_cycles
    assert lat[1] == 1 + cfg.cl + cfg.burst_cycles  # row hit
    assert lat[2] == 1 + cfg.trp + cfg.trcd + cfg.cl + cfg.burst_cycles  # row conflict
    assert (r.row_misses, r.row_hits, r.row_conflicts) == (1, 1, 1)
    assert (r.activates, r.precharges) == (2, 1)


def test_back_to_back_hits_are_spaced_by_tccd():
    """Same bank (so same bank group): RD-to-RD spacing max(tBurst, tCCD_L)."""
    r = reads(QUIET, [addr(QUIET, column=c) for c in range(6)])
    assert np.diff(r.finish_cycles).tolist() == [max(QUIET.burst_cycles, QUIET.tccd_l)] * 5


def test_conflict_queued_behind_a_read_waits_tras_then_trp():
    """Both offered at 0: ACT@1, RD@1+tRCD, PRE@ACT+tRAS (tRTP expired earlier), ACT@PRE+tRP."""
    cfg = QUIET
    r = reads(cfg, [0, addr(cfg, row=1)])
    act2 = 1 + cfg.tras + cfg.trp
    assert r.finish_cycles.tolist() == [1 + cfg.trcd + cfg.cl + cfg.burst_cycles,
                                        act2 + cfg.trcd + cfg.cl + cfg.burst_cycles]
    assert act2 - 1 == cfg.tras + cfg.trp  # tRC between the ACTs


@pytest.mark.parametrize("mapping, spacing", [("rochrabacobg", 4), ("rochrababgco", 8)])
def test_bank_group_interleaving_sets_the_stream_rate(mapping, spacing):
    """Consecutive bursts in different bank groups issue every tCCD_S = tBurst = 4 cycles (the
    peak rate); kept in one bank group (DRAMsim3's DDR4 mapping) every tCCD_L = 8 cycles."""
    cfg = dataclasses.replace(QUIET, address_mapping=mapping)
    n = 128 * (4 if mapping.endswith("bg") else 1)  # one row in each of the banks touched
    r = reads(cfg, np.arange(n) * 64)
    first = 1 + cfg.trcd + cfg.cl + cfg.burst_cycles
    assert r.finish_cycles.tolist() == (first + spacing * np.arange(n)).tolist()
    assert r.bandwidth_gbps == pytest.approx(n * 64 / (r.total_cycles * cfg.tck_ns))
    # one burst per tBurst cycles is the peak; the stream gets tBurst / spacing of it, less the
    # latency of the first access
    peak_share = r.bandwidth_gbps / cfg.peak_gbps
    assert peak_share == pytest.approx(n * cfg.burst_cycles / (first + spacing * (n - 1)), rel=1e-9)


def test_long_stream_loses_one_refresh_gap_per_trefi():
    """A stream cycling over four open rows (one per bank group), one rank: every tREFI the
    refresh costs tRTP (last RD to PRE) + tRP + tRFC + tRCD - tCCD_S data-bus cycles, so the
    stream runs at (tREFI - loss) / tREFI of peak."""
    cfg = dataclasses.replace(DDR4, ranks=1, address_mapping="rochrabacobg")
    n = 40_000
    r = reads(cfg, (np.arange(n) % 512) * 64)
    loss = cfg.trtp + cfg.trp + cfg.trfc + cfg.trcd - cfg.tccd_s
    assert loss == 612
    first = 1 + cfg.trcd + cfg.cl + cfg.burst_cycles
    assert r.refreshes == (r.total_cycles - first) // cfg.trefi >= 12
    assert r.finish_cycles[-1] == first + cfg.tccd_s * (n - 1) + loss * r.refreshes
    gaps = np.diff(r.finish_cycles)
    assert sorted(set(gaps.tolist())) == [cfg.tccd_s, cfg.tccd_s + loss]
    efficiency = (cfg.trefi - loss) / cfg.trefi  # 95.1 %
    assert r.bandwidth_gbps / cfg.peak_gbps == pytest.approx(efficiency, abs=0.01)


def test_refresh_blocks_the_rank_for_trfc():
    cfg = dataclasses.replace(DDR4, ranks=1)
    R = cfg.trefi  # the first refresh request (all banks closed: REF issues at once)
    r = reads(cfg, [0, 0], [R - 200, R])
    assert r.latency_cycles[0] == 1 + cfg.trcd + cfg.cl + cfg.burst_cycles
    ref = r.commands[r.commands[:, 6] == REF][:, 0]
    assert ref.tolist()[0] >= R
    # the second read is a row hit, but the refresh closed the row: PRE, REF, then ACT
    # no earlier than REF + tRFC
    acts = r.commands[r.commands[:, 6] == ACT][:, 0]
    assert acts[-1] >= ref[0] + cfg.trfc
    assert r.finish_cycles[1] == acts[-1] + cfg.trcd + cfg.cl + cfg.burst_cycles


def test_refresh_count_over_idle_time():
    cfg = dataclasses.replace(DDR4, ranks=1)
    m = DramModel(cfg)
    m.transfer(0, 64, False, 10 * cfg.trefi + 5000, 1)
    assert m.counters()["refreshes"] == 10
    assert m.counters()["refresh_cycles"] == 10 * cfg.trfc


def test_write_to_read_turnaround():
    """WR then RD, offered together: the RD waits CWL + tBurst + tWTR after the WR: tWTR_L in
    the same bank group, tWTR_S in another."""
    cfg = QUIET
    wr_at = 1 + cfg.trcd
    for other_group, twtr in ((False, cfg.twtr_l), (True, cfg.twtr_s)):
        a = [0, addr(cfg, bankgroup=1 if other_group else 0, column=1)]
        r = replay(cfg, a, [True, False], [0, 0])
        rd_at = wr_at + cfg.cwl + cfg.burst_cycles + twtr
        assert r.finish_cycles.tolist() == [wr_at + cfg.cwl + cfg.burst_cycles,
                                            rd_at + cfg.cl + cfg.burst_cycles]


def test_one_bank_random_rows_are_trc_bound():
    cfg = QUIET
    r = reads(cfg, [addr(cfg, row=k) for k in range(10)])
    assert np.diff(r.finish_cycles).tolist() == [cfg.tras + cfg.trp] * 9
    assert (r.row_misses, r.row_conflicts) == (1, 9)


def test_activates_across_banks_obey_trrd_and_tfaw():
    """16 banks of one rank, a new row each, bank groups alternating: ACTs every tRRD_S, but
    never more than four in a tFAW window."""
    cfg = QUIET
    a = [addr(cfg, bankgroup=k % 4, bank=k // 4, row=k) for k in range(16)]
    r = reads(cfg, a)
    acts = r.commands[r.commands[:, 6] == ACT][:, 0]
    assert len(acts) == 16
    assert np.all(acts[4:] - acts[:-4] >= cfg.tfaw)
    assert np.all(np.diff(acts) >= cfg.trrd_s)
    expected = [1 + k % 4 * cfg.trrd_s + k // 4 * cfg.tfaw for k in range(16)]
    assert acts.tolist() == expected


def audit(cfg: DramConfig, cmds: np.ndarray) -> None:
    """Check a command log against the timing rules, pair by pair, independently of the model
    (within each rank; rank-to-rank switching is left to the per-cycle reference)."""
    one_group = cfg.bankgroups == 1
    b = cfg.burst_cycles
    never = -10**9
    ranks: dict[tuple, list] = {}
    for c in cmds.tolist():
        ranks.setdefault((c[1], c[2]), []).append(c)
    for seq in ranks.values():
        acts = [c[0] for c in seq if c[6] == ACT]
        assert all(acts[i + 4] - acts[i] >= cfg.tfaw for i in range(len(acts) - 4))
        last: dict[tuple, dict] = {}  # (bankgroup, bank) -> {command: last cycle}
        last_ref = never
        for t, _ch, _r, g, bank, _row, kind in seq:
            same = last.get((g, bank), {})
            if kind == REF:
                assert all(t - prev.get(PRE, never) >= cfg.trp for prev in last.values())
                last_ref = t
                continue
            if kind == ACT:
                assert t - same.get(PRE, never) >= cfg.trp
                assert t - same.get(ACT, never) >= cfg.tras + cfg.trp
                assert t - last_ref >= cfg.trfc
                for (g2, b2), prev in last.items():
                    if (g2, b2) != (g, bank) and ACT in prev:
                        assert t - prev[ACT] >= (cfg.trrd_l if g2 == g and not one_group else cfg.trrd_s)
            elif kind == PRE:
                assert t - same.get(ACT, never) >= cfg.tras
                assert t - same.get(RD, never) >= cfg.trtp
                assert t - same.get(WR, never) >= cfg.cwl + b + cfg.twr
            else:
                assert t - same.get(ACT, never) >= cfg.trcd
                for (g2, _b2), prev in last.items():
                    same_group = g2 == g and not one_group
                    if kind in (RD, RDA):
                        assert t - prev.get(RD, never) >= max(b, cfg.tccd_l if same_group else cfg.tccd_s)
                        twtr = cfg.twtr_l if same_group else cfg.twtr_s
                        assert t - prev.get(WR, never) >= cfg.cwl + b + twtr
                    else:
                        assert t - prev.get(WR, never) >= max(b, cfg.tccd_l if same_group else cfg.tccd_s)
            last.setdefault((g, bank), {})[RD if kind == RDA else WR if kind == WRA else kind] = t


@pytest.mark.parametrize("name", ["ddr4-3200", "hbm2", "lpddr4-3200", "lpddr5-6400", "hbm3"])
def test_presets_obey_timing_rules_on_random_traffic(name):
    cfg = dataclasses.replace(DRAM_PRESETS[name], channels=1)
    rng = np.random.default_rng(1)
    n = 1500
    a = rng.integers(0, cfg.capacity_bytes // 64, n) * 64
    w = rng.random(n) < 0.3
    r = replay(cfg, a, w, np.sort(rng.integers(0, n * 20, n)), command_log=True)
    audit(cfg, r.commands)
    assert r.reads + r.writes == n == r.row_hits + r.row_misses + r.row_conflicts


# ---- the per-cycle reference ----------------------------------------------------------------
class RefController:
    """A plain per-cycle controller with DRAMsim3-style per-bank timing tables, written
    independently of the kernel (same semantics as the kernel's docstring, none of its data
    structures): ticks every cycle, updates every bank's earliest-cycle table on each command."""

    def __init__(self, cfg: DramConfig):
        self.cfg = c = cfg
        burst, rl, wl = c.burst_cycles, c.cl, c.cwl
        one = c.bankgroups == 1
        ccdl, wtrl, rrdl = (c.tccd_s, c.twtr_s, c.trrd_s) if one else (c.tccd_l, c.twtr_l, c.trrd_l)
        self.d = dict(rtrl=max(burst, ccdl), rtrs=max(burst, c.tccd_s), rtro=burst + c.trtrs,
                      rtw=rl + burst - wl + c.trtrs, rtwo=rl + burst + c.trtrs - wl, rtp=c.trtp,
                      rda_act=burst + c.trtp + c.trp, rda_ref=c.trtp + c.trp,
                      wtrl=wl + burst + wtrl, wtrs=wl + burst + c.twtr_s, wtro=wl + burst + c.trtrs - rl,
                      wtwl=max(burst, ccdl), wtws=max(burst, c.tccd_s), wtwo=burst,
                      wtp=wl + burst + c.twr, wra_act=wl + burst + c.twr + c.trp,
                      rc=c.tras + c.trp, rrdl=rrdl, rrds=c.trrd_s)
        self.B, self.BPG = c.banks, c.banks_per_group
        keys = [(ch, r, b) for ch in range(c.channels) for r in range(c.ranks) for b in range(self.B)]
        self.open = dict.fromkeys(keys, -1)
        self.hits = dict.fromkeys(keys, 0)
        self.tm = {k: [0] * 5 for k in keys}  # earliest ACT, PRE, RD, WR, REF
        self.acts = {(ch, r): [] for ch in range(c.channels) for r in range(c.ranks)}
        self.per_rank = c.queue_structure == "per_rank"
        self.nq = c.ranks if self.per_rank else c.ranks * self.B
        self.queues = [[[] for _ in range(self.nq)] for _ in range(c.channels)]
        self.tq = [[] for _ in range(c.channels)]
        self.rr = [0] * c.channels
        self.ref_rank = [0] * c.channels
        self.pending = [[] for _ in range(c.channels)]

    def _update(self, ch, r, b, kind, t):
        d, c, g = self.d, self.cfg, b // self.BPG
        for r2 in range(c.ranks):
            for b2 in range(self.B):
                tm = self.tm[ch, r2, b2]
                same_bank, same_group = (r2, b2) == (r, b), r2 == r and b2 // self.BPG == g
                rules = []
                if kind in (RD, RDA, WR, WRA):
                    w = kind in (WR, WRA)
                    if same_bank and kind == RD:
                        rules = [(2, d["rtrl"]), (3, d["rtw"]), (1, d["rtp"])]
                    elif same_bank and kind == WR:
                        rules = [(2, d["wtrl"]), (3, d["wtwl"]), (1, d["wtp"])]
                    elif same_bank:
                        rules = [(0, d["wra_act" if w else "rda_act"]),
                                 (4, d["wra_act" if w else "rda_ref"])]
                    elif same_group:
                        rules = [(2, d["wtrl" if w else "rtrl"]), (3, d["wtwl" if w else "rtw"])]
                    elif r2 == r:
                        rules = [(2, d["wtrs" if w else "rtrs"]), (3, d["wtws" if w else "rtw"])]
                    else:
                        rules = [(2, d["wtro" if w else "rtro"]), (3, d["wtwo" if w else "rtwo"])]
                elif kind == ACT:
                    if same_bank:
                        rules = [(0, d["rc"]), (2, c.trcd), (3, c.trcdwr or c.trcd), (1, c.tras)]
                    elif same_group:
                        rules = [(0, d["rrdl"])]
                    elif r2 == r:
                        rules = [(0, d["rrds"])]
                elif kind == PRE:
                    rules = [(0, c.trp), (4, c.trp)] if same_bank else [(1, c.tppd)] if r2 == r else []
                elif kind == REF and r2 == r:
                    rules = [(0, c.trfc), (4, c.trfc)]
                for idx, dt in rules:
                    tm[idx] = max(tm[idx], t + dt)

    def _ready(self, ch, r, b, kind, t):
        tm = self.tm[ch, r, b]
        if kind == ACT:
            acts = self.acts[ch, r]
            return t >= tm[0] and (len(acts) < 4 or acts[-4] + self.cfg.tfaw <= t)
        return t >= tm[{PRE: 1, RD: 2, RDA: 2, WR: 3, WRA: 3}[kind]]

    def _queue_cmd(self, ch, t):
        blocked = self.pending[ch][0] if self.pending[ch] else -1
        for j in range(1, self.nq + 1):
            q = (self.rr[ch] + j) % self.nq
            if (q if self.per_rank else q // self.B) == blocked:
                continue
            queue = self.queues[ch][q]
            for i, e in enumerate(queue):
                r, b = e["r"], e["b"]
                orow = self.open[ch, r, b]
                if orow < 0:
                    kind = ACT
                elif orow == e["row"]:
                    kind = (WR if e["wr"] else RD) + (2 if self.cfg.page_policy == "closed" else 0)
                else:
                    kind = PRE
                if not self._ready(ch, r, b, kind, t):
                    continue
                if kind == PRE:
                    if any((x["r"], x["b"]) == (r, b) for x in queue[:i]):
                        continue
                    if self.hits[ch, r, b] < 4 and any(
                            (x["r"], x["b"], x["row"]) == (r, b, orow) for x in queue[i:]):
                        continue
                return q, i, kind
        return None

    def _refresh_cmd(self, ch, t):
        r = self.pending[ch][0]
        opened = [b for b in range(self.B) if self.open[ch, r, b] >= 0]
        for b in opened:
            if self._ready(ch, r, b, PRE, t):
                return -1, b, PRE
        if not opened and all(t >= self.tm[ch, r, b][4] for b in range(self.B)):
            return -1, -1, REF
        return None

    def _issue(self, ch, t, q, i, kind, finish):
        if q >= 0:
            e = self.queues[ch][q][i]
            r, b, row = e["r"], e["b"], e["row"]
        else:
            r, b, row = self.pending[ch][0], max(i, 0), -1
        self._update(ch, r, b, kind, t)
        if kind == ACT:
            self.open[ch, r, b], self.hits[ch, r, b] = row, 0
            self.acts[ch, r].append(t)
        elif kind == PRE:
            self.open[ch, r, b], self.hits[ch, r, b] = -1, 0
        elif kind == REF:
            self.pending[ch].pop(0)
        else:
            w = kind in (WR, WRA)
            finish[e["req"]] = t + (self.cfg.cwl if w else self.cfg.cl) + self.cfg.burst_cycles
            if kind in (RDA, WRA):
                self.open[ch, r, b], self.hits[ch, r, b] = -1, 0
            else:
                self.hits[ch, r, b] += 1
            del self.queues[ch][q][i]

    def run(self, addresses, writes, issues, window=None):
        c = self.cfg
        n = len(addresses)
        window = window or n
        finish = [-1] * n
        dec = [decode_address(c, a) for a in addresses]
        k, t = 0, 0
        interval = c.trefi // c.ranks
        while k < n or any(f < 0 for f in finish):
            while k < n and issues[k] <= t and (k < window or 0 <= finish[k - window] <= t):
                d = dec[k]
                if len(self.tq[d["channel"]]) >= c.transaction_queue_depth:
                    break
                b = d["bankgroup"] * self.BPG + d["bank"]
                self.tq[d["channel"]].append(dict(r=d["rank"], b=b, row=d["row"], wr=bool(writes[k]), req=k,
                                                  q=d["rank"] if self.per_rank else d["rank"] * self.B + b))
                k += 1
            for ch in range(c.channels):
                if c.refresh and t > 0 and t % interval == 0:
                    self.pending[ch].append(self.ref_rank[ch])
                    self.ref_rank[ch] = (self.ref_rank[ch] + 1) % c.ranks
                cmd = self._refresh_cmd(ch, t) if self.pending[ch] else None
                if cmd is None:
                    cmd = self._queue_cmd(ch, t)
                    if cmd is not None:
                        self.rr[ch] = cmd[0]
                if cmd is not None:
                    column = cmd[2] >= RD and cmd[2] != REF
                    self._issue(ch, t, *cmd, finish)
                    if c.dual_command_issue:
                        second = self._queue_cmd(ch, t)
                        if second is not None:
                            self.rr[ch] = second[0]
                            if (RD <= second[2] <= WRA) != column:
                                self._issue(ch, t, *second, finish)
                for j, e in enumerate(self.tq[ch]):
                    if len(self.queues[ch][e["q"]]) < c.queue_depth:
                        self.queues[ch][e["q"]].append(self.tq[ch].pop(j))
                        break
            t += 1
        return np.array(finish, np.int64)


@st.composite
def small_case(draw):
    """A small random configuration and trace (every policy and a short refresh interval)."""
    i = lambda lo, hi: draw(st.integers(lo, hi))  # noqa: E731
    pow2 = lambda *opts: draw(st.sampled_from(opts))  # noqa: E731
    trrd_s, tccd_s, twtr_s = i(1, 3), i(1, 4), i(0, 3)
    ranks = pow2(1, 2)
    trfc = i(5, 25)
    cfg = DramConfig(
        channels=pow2(1, 2), ranks=ranks, bankgroups=pow2(1, 2), banks_per_group=pow2(1, 2),
        rows=16, columns=64, cl=i(3, 8), cwl=i(2, 7), trcd=i(2, 8), trp=i(2, 8), tras=i(4, 14),
        trrd_s=trrd_s, trrd_l=trrd_s + i(0, 3), tccd_s=tccd_s, tccd_l=tccd_s + i(0, 3),
        twtr_s=twtr_s, twtr_l=twtr_s + i(0, 3), tfaw=i(0, 25), twr=i(1, 8), trtp=i(1, 6),
        trfc=trfc, trefi=ranks * i(trfc + 60, 400), trtrs=i(0, 2), tppd=pow2(0, 2), trcdwr=pow2(0, 3),
        address_mapping=draw(st.sampled_from(["rochrababgco", "rorabgbachco", "chrorababgco",
                                              "rochcorababg"])),
        page_policy=draw(st.sampled_from(["open", "closed"])),
        queue_structure=draw(st.sampled_from(["per_bank", "per_rank"])),
        queue_depth=i(1, 5), transaction_queue_depth=i(1, 5),
        dual_command_issue=draw(st.booleans()), refresh=draw(st.booleans()))
    n = i(1, 40)
    pool = draw(st.lists(st.integers(0, cfg.capacity_bytes // 64 - 1), min_size=1, max_size=8))
    addresses = [64 * draw(st.sampled_from(pool)) for _ in range(n)]
    writes = [draw(st.booleans()) for _ in range(n)]
    spread = draw(st.sampled_from([0, 40, 400]))
    issues = sorted(draw(st.lists(st.integers(0, spread), min_size=n, max_size=n)))
    return cfg, addresses, writes, issues


@SLOW
@given(small_case())
def test_event_driven_kernel_equals_per_cycle_controller(case):
    cfg, addresses, writes, issues = case
    expected = RefController(cfg).run(addresses, writes, issues)
    assert replay(cfg, addresses, writes, issues).finish_cycles.tolist() == expected.tolist()


@SLOW
@given(small_case(), st.integers(1, 6), st.integers(0, 50))
def test_windowed_transfer_equals_per_cycle_controller(case, window, start):
    cfg = case[0]
    n = len(case[1])
    base = case[1][0]
    addresses = [base + 64 * k for k in range(n)]
    expected = RefController(cfg).run(addresses, [case[2][0]] * n, [start] * n, window)
    assert DramModel(cfg).transfer(base, 64 * n, case[2][0], start, window) == expected.max()


# ---- properties ---------------------------------------------------------------------------
trace = st.integers(1, 200).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, (1 << 26) - 1), min_size=n, max_size=n),
    st.lists(st.booleans(), min_size=n, max_size=n),
    st.lists(st.integers(0, 3000), min_size=n, max_size=n)))


@SLOW
@given(st.sampled_from(["ddr4-3200", "hbm2", "lpddr5-6400"]), trace, st.integers(1, 100_000))
def test_delaying_every_issue_delays_every_completion_equally(name, tr, delay):
    """Without refresh the model is time-invariant: issue later by d, finish later by d."""
    cfg = dataclasses.replace(DRAM_PRESETS[name], refresh=False)
    a, w, t = np.array(tr[0]) * 64, tr[1], np.sort(tr[2])
    early, late = replay(cfg, a, w, t), replay(cfg, a, w, t + delay)
    assert (late.finish_cycles - early.finish_cycles == delay).all()
    floor = np.where(w, cfg.cwl, cfg.cl) + cfg.burst_cycles + 1
    assert (early.latency_cycles >= floor).all()


@SLOW
@given(st.sampled_from(["ddr4-3200", "hbm2"]), st.integers(1, 3000), st.integers(1, 64), st.booleans())
def test_more_channels_never_slow_a_stream(name, n, window, write):
    """With the channel bits above the column bits (DRAMsim3's mappings). Where the channel is
    the lowest field, a latency-bound stream (window 1) can get slower with more channels: each
    request opens a row in a new channel instead of hitting the row it opened before."""
    cfg = dataclasses.replace(DRAM_PRESETS[name], refresh=False)
    ends = [DramModel(dataclasses.replace(cfg, channels=c)).transfer(0, n * cfg.request_bytes,
                                                                     write, 0, window)
            for c in (cfg.channels, 2 * cfg.channels)]
    assert ends[1] <= ends[0]


# ---- transfer, ideal, state -----------------------------------------------------------------
@pytest.mark.parametrize("name", list(DRAM_PRESETS))
def test_transfer_on_a_fresh_model_equals_replay(name):
    cfg = DRAM_PRESETS[name]
    n = 700
    base = 3 * cfg.row_bytes + 5 * cfg.request_bytes
    got = DramModel(cfg).transfer(base, n * cfg.request_bytes, True, 1234, 10**6)
    r = replay(cfg, base + np.arange(n) * cfg.request_bytes, np.ones(n, bool), np.full(n, 1234))
    assert got == r.finish_cycles.max()


def test_ideal_finishes_at_start():
    ideal = dram_preset("ideal")
    assert ideal.is_ideal and ideal.peak_gbps == float("inf")
    m = DramModel(ideal)
    assert m.transfer(0, 1 << 20, False, 777, 4) == 777
    assert m.counters()["reads"] == (1 << 20) // ideal.request_bytes
    r = replay(ideal, [0, 64, 128], [False, True, False], [5, 9, 9])
    assert r.finish_cycles.tolist() == [5, 9, 9] and r.latency_cycles.tolist() == [0, 0, 0]


def test_transfer_counts_bursts_touched_and_keeps_state():
    m = DramModel(QUIET)
    assert m.transfer(100, 0, False, 50, 4) == 50
    end = m.transfer(32, 64, False, 0, 4)  # straddles two bursts of one open row
    assert m.counters()["reads"] == 2 and m.counters()["activates"] == 1
    end2 = m.transfer(128, 64, False, end, 4)  # same row, still open: a hit
    assert end2 == end + 1 + QUIET.cl + QUIET.burst_cycles
    assert m.counters()["row_hits"] == 2 and m.counters()["activates"] == 1
    assert all(isinstance(v, int) for v in m.counters().values())
    with pytest.raises(ValueError):
        m.transfer(0, 64, False, 0, 0)


def test_window_limits_requests_in_flight():
    """With one request in flight, each read waits for the previous one's data."""
    m = DramModel(QUIET)
    end = m.transfer(0, 4 * 64, False, 0, 1)
    first = 1 + QUIET.trcd + QUIET.cl + QUIET.burst_cycles
    assert end == first + 3 * (1 + QUIET.cl + QUIET.burst_cycles)


def test_njit_entry_point_is_callable_from_numba():
    from numba import njit

    from hw.memory._dram_requests import dram_transfer

    @njit
    def two_bursts(params, state, stats):
        t = dram_transfer(params, state, stats, 0, 4096, False, 0, 16)
        return dram_transfer(params, state, stats, 4096, 4096, True, t, 16)

    m, ref = DramModel(DDR4), DramModel(DDR4)
    expected = ref.transfer(4096, 4096, True, ref.transfer(0, 4096, False, 0, 16), 16)
    assert two_bursts(m.params, m.state, m.stats) == expected


def test_replay_result_is_plain_data():
    r = replay(QUIET, [0, 64], [False, True], [0, 3])
    d = json.loads(json.dumps(r.to_dict()))
    assert d["finish_cycles"] == r.finish_cycles.tolist() and "commands" not in d
    assert isinstance(r, ReplayResult) and isinstance(r.total_cycles, int)
    assert r.total_cycles == r.finish_cycles.max() - 0
    assert r.mean_latency_cycles == pytest.approx(r.latency_cycles.mean())
    empty = replay(QUIET, [], [], [])
    assert empty.total_cycles == 0 and empty.bandwidth_gbps == 0.0


# ---- address mapping ------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(DRAM_PRESETS))
def test_address_mapping_decodes_each_field(name):
    cfg = DRAM_PRESETS[name]
    widths = cfg.field_widths()
    rng = np.random.default_rng(7)
    names = {"ch": "channel", "ra": "rank", "bg": "bankgroup", "ba": "bank", "ro": "row", "co": "column"}
    for _ in range(50):
        fields = {names[f]: int(rng.integers(0, 1 << widths[f])) for f in names}
        a = addr(cfg, **fields) + int(rng.integers(0, cfg.request_bytes))  # offset bits ignored
        assert decode_address(cfg, a) == fields
    # the string is most significant first: the last field sits right above the burst offset
    low = cfg.address_mapping[-2:]
    assert cfg.field_positions()[low] == 0
    assert sum(widths.values()) + cfg.request_bytes.bit_length() - 1 == cfg.address_bits


def test_ddr4_mapping_matches_dramsim3_layout():
    # rochrababgco, 64 B bursts: 7 column bits, then bank group, bank, rank, row
    assert decode_address(DDR4, 0x40)["column"] == 1
    assert decode_address(DDR4, 1 << 13) == dict(channel=0, rank=0, bankgroup=1, bank=0, row=0, column=0)
    assert decode_address(DDR4, 1 << 15)["bank"] == 1
    assert decode_address(DDR4, 1 << 17)["rank"] == 1
    assert decode_address(DDR4, 1 << 18)["row"] == 1


# ---- configs ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(DRAM_PRESETS))
def test_presets_round_trip(name):
    cfg = dram_preset(name)
    assert cfg.preset == name
    assert dram_config_from_dict(dram_config_to_dict(cfg), "x") == cfg
    assert dram_config_from_dict({"preset": name}, "x") == cfg


def test_preset_figures():
    hbm2 = dram_preset("hbm2")
    assert (hbm2.channels, hbm2.bus_width_bits, hbm2.request_bytes, hbm2.peak_gbps) == (8, 128, 64, 256.0)
    assert dram_preset("hbm3").peak_gbps == pytest.approx(819.2)
    assert DDR4.peak_gbps == pytest.approx(25.4, abs=0.05)
    assert DDR4.clock_mhz == pytest.approx(1587.3, abs=0.1)
    assert (DDR4.request_bytes, DDR4.burst_cycles, DDR4.ranks) == (64, 4, 2)
    assert dram_preset("lpddr5-6400").burst_cycles == 2


def test_overrides_and_custom_label():
    cfg = dram_config_from_dict({"preset": "hbm2", "channels": 16, "tck_ns": 1}, "sim.toml")
    assert (cfg.preset, cfg.channels, cfg.tck_ns) == ("hbm2", 16, 1.0)
    assert dram_config_from_dict({}, "x") == DDR4
    assert DramConfig().preset == "custom"
    full = dram_config_to_dict(QUIET) | {"preset": "my-board"}
    assert dram_config_from_dict(full, "x").preset == "my-board"


BAD = [
    ("channels", 3, "power of two"), ("channels", 0, "power of two"), ("ranks", "2", "power of two"),
    ("rows", 1.5, "power of two"), ("tck_ns", 0, "nanoseconds"), ("tck_ns", "fast", "nanoseconds"),
    ("cl", -1, "integer in 1.."), ("trcd", 2.0, "integer"), ("twr", True, "integer"),
    ("tccd_l", 2, "at least tccd_s"), ("trrd_l", 1, "at least trrd_s"), ("twtr_l", 1, "at least twtr_s"),
    ("trefi", 500, "ranks * trfc"), ("address_mapping", "rochrababgcx", "12 letters"),
    ("address_mapping", "rochra", "12 letters"), ("address_mapping", "rorochbabgco", "12 letters"),
    ("page_policy", "lazy", "'open', 'closed'"),
    ("queue_structure", "per_channel", "'per_bank', 'per_rank'"),
    ("queue_depth", 0, "integer in 1.."), ("transaction_queue_depth", 99999, "integer in 1.."),
    ("refresh", "yes", "true or false"), ("transfers_per_clock", 16, "divisor of burst_length"),
    ("columns", 4, "at least burst_length"), ("bus_width_bits", 4, "whole bytes"),
    ("banks_per_group", 32, "<= 64"),
]


@pytest.mark.parametrize("key, value, must", BAD)
def test_config_errors_name_where_key_value_and_rule(key, value, must):
    with pytest.raises(ConfigError) as exc:
        dram_config_from_dict({key: value}, "chip.toml")
    msg = str(exc.value)
    assert msg.startswith(f"chip.toml: dram.{key} = {value!r}: must be ") and must in msg
    with pytest.raises(ConfigError, match=f"^DramConfig: dram.{key} = "):
        DramConfig(**{key: value})


def test_unknown_keys_and_presets():
    unknown = r"^t\.toml: dram\.chanels: unknown key; allowed keys: preset, channels"
    with pytest.raises(ConfigError, match=unknown):
        dram_config_from_dict({"chanels": 2}, "t.toml")
    with pytest.raises(ConfigError, match=r"dram\.preset = 'ddr5': must be one of 'ddr4-3200', 'hbm2'"):
        dram_config_from_dict({"preset": "ddr5"}, "t.toml")
    with pytest.raises(ConfigError, match=r"preset = 'ddr5': must be one of .*'hbm3'"):
        dram_preset("ddr5")
    with pytest.raises(ConfigError, match="must be a table"):
        dram_config_from_dict([1], "t.toml")
    with pytest.raises(ConfigError, match=r"^DramConfig: dram\.preset = '': must be a non-empty string"):
        DramConfig(preset="")


# ---- DRAMsim3 .ini -----------------------------------------------------------------------
DDR4_INI = """; DDR4-3200 8Gb x8 in DRAMsim3's format (figures from shared/reference/memory.md)
[dram_structure]
protocol = DDR4
bankgroups = 4
banks_per_group = 4
rows = 65536
columns = 1024
device_width = 8
BL = 8

[timing]
tCK = 0.63
CL = 22
CWL = 16
tRCD = 22
tRP = 22
tRAS = 52
tRFC = 560
tREFI = 12480
tRRD_S = 4
tRRD_L = 8
tWTR_S = 4
tWTR_L = 12
tFAW = 34
tWR = 24
tRTP = 12
tCCD_S = 4
tCCD_L = 8
tRTRS = 1

[system]
channel_size = 16384
channels = 1
bus_width = 64
address_mapping = rochrababgco
queue_structure = PER_BANK
refresh_policy = RANK_LEVEL_STAGGERED
row_buf_policy = OPEN_PAGE
cmd_queue_size = 8
trans_queue_size = 16
"""

HBM2_INI = """[dram_structure]
protocol = HBM2
bankgroups = 4
banks_per_group = 4
rows = 32768
columns = 64
device_width = 128
BL = 4
[timing]
tCK = 1
CL = 14
CWL = 4
tRCDRD = 14
tRCDWR = 14
tRP = 14
tRAS = 34
tRFC = 260
tREFI = 3900
tRRD_S = 4
tRRD_L = 6
tWTR_S = 6
tWTR_L = 8
tFAW = 30
tWR = 16
tCCD_S = 1
tCCD_L = 2
[system]
channel_size = 1024
channels = 8
bus_width = 128
address_mapping = rorabgbachco
queue_structure = PER_RANK
cmd_queue_size = 32
trans_queue_size = 16
"""


@pytest.mark.parametrize("text, preset", [(DDR4_INI, "ddr4-3200"), (HBM2_INI, "hbm2")])
def test_dramsim3_ini_gives_the_matching_preset(tmp_path, text, preset):
    path = tmp_path / f"{preset}.ini"
    path.write_text(text)
    cfg = dram_config_from_dramsim3_ini(path)
    assert cfg.preset == f"dramsim3:{preset}.ini"
    assert dataclasses.replace(cfg, preset=preset) == dram_preset(preset)


@pytest.mark.parametrize("edit, match", [
    (("protocol = DDR4", "protocol = HMC"), r"\[dram_structure\] protocol = 'HMC': must be one of"),
    (("CL = 22", "CL = fast"), r"\[timing\] CL = 'fast': must be an integer"),
    (("refresh_policy = RANK_LEVEL_STAGGERED", "refresh_policy = BANK_LEVEL_STAGGERED"),
     r"refresh_policy = 'BANK_LEVEL_STAGGERED': must be 'RANK_LEVEL_STAGGERED'"),
    (("address_mapping = rochrababgco", "address_mapping = rochrababg"), r"address_mapping = 'rochrababg'"),
    (("[timing]", "[timing"), r":11: '\[timing': not a DRAMsim3 .ini file: expected 'key = value'"),
    # issue 21: ZeroDivisionError, InterpolationSyntaxError and a three-line message before
    (("device_width = 8", "device_width = 0"),
     r"\[dram_structure\] device_width = '0': must be an integer >= 1$"),
    (("bus_width = 64", "bus_width = -64"),
     r"\[system\] bus_width = '-64': must be an integer >= 1$"),
    (("CL = 22", "CL = 22%"), r"\[timing\] CL = '22%': must be an integer >= 0$"),
    (("tCK = 0.63", "tCK = nan"), r"\[timing\] tCK = 'nan': must be a number > 0$"),
    (("; DDR4-3200 8Gb x8", "protocol = DDR4\n;"),
     r":1: 'protocol = DDR4': not a DRAMsim3 .ini file: the file must start with a \[section\] "
     r"header such as \[dram_structure\]$"),
    (("[system]", "[timing]"), r":\d+: '\[timing\]': not a DRAMsim3 .ini file: section \[timing\] "
                               r"appears twice$"),
])
def test_dramsim3_ini_errors(tmp_path, edit, match):
    path = tmp_path / "bad.ini"
    assert edit[0] in DDR4_INI
    path.write_text(DDR4_INI.replace(*edit))
    with pytest.raises(ConfigError, match=match) as exc:
        dram_config_from_dramsim3_ini(path)
    assert str(exc.value).startswith(str(path)) and "\n" not in str(exc.value)
    with pytest.raises(ConfigError, match="no such file"):
        dram_config_from_dramsim3_ini(tmp_path / "missing.ini")


# ---- traces -----------------------------------------------------------------------------
def test_read_trace(tmp_path):
    path = tmp_path / "t.trace"
    path.write_text("# a comment\n0x12345680 READ 10\n\n0x40 WRITE 12  # trailing\n1f40 read 12\n")
    a, w, t = read_trace(path)
    assert a.tolist() == [0x12345680, 0x40, 0x1F40]
    assert w.tolist() == [False, True, False] and t.tolist() == [10, 12, 12]


@pytest.mark.parametrize("line, match", [
    ("0xZZ READ 1", "address '0xZZ': must be hexadecimal"),
    ("0x40 FETCH 1", "operation 'FETCH': must be READ or WRITE"),
    ("0x40 READ soon", r"cycle 'soon': must be a decimal integer in 0\.\.1152921504606846976"),
    ("0x40 READ -3", r"cycle '-3': must be a decimal integer in 0\.\."),
    # issue 21: an OverflowError before; 2**62 never finished (one idle refresh at a time)
    ("0x40 READ 99999999999999999999", r"cycle '99999999999999999999': must be a decimal "
                                       r"integer in 0\.\.1152921504606846976 \(2\*\*60\)"),
    ("0x40 READ 4611686018427387904", r"cycle '4611686018427387904': must be"),
    ("0x4000000000000000 READ 1", r"address '0x4000000000000000': must be in 0x0\.\."),
    ("0x40 READ", "expected '<hex address> READ|WRITE <cycle>'"),
])
def test_trace_errors_name_file_and_line(tmp_path, line, match):
    path = tmp_path / "bad.trace"
    path.write_text(f"0x0 READ 0\n{line}\n")
    with pytest.raises(TraceError, match=match) as exc:
        read_trace(path)
    assert str(exc.value).startswith(f"{path}:2: ")
    assert isinstance(exc.value, ConfigError)
    with pytest.raises(TraceError, match="no such trace file"):
        read_trace(tmp_path / "missing.trace")


# ---- CLI module -------------------------------------------------------------------------
def cli(argv):
    parser = argparse.ArgumentParser(prog="npulab")
    add_parser(parser.add_subparsers(dest="command"))
    return main(parser.parse_args(["dram", *argv]))


def test_cli_replay_and_presets(tmp_path, capsys):
    path = tmp_path / "t.trace"
    path.write_text("".join(f"0x{64 * i:x} {'WRITE' if i % 4 == 0 else 'READ'} {3 * i}\n"
                            for i in range(200)))
    assert cli(["replay", str(path), "--preset", "hbm2", "--set", "dram.channels=4"]) == 0
    out = capsys.readouterr().out
    assert "requests     200 (150 reads, 50 writes, 64 B each)" in out and "4 ch x 1 rank" in out
    csv_path = tmp_path / "per.csv"
    assert cli(["replay", str(path), "--json", "--per-request", str(csv_path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    expected = replay(DDR4, *read_trace(path))
    assert summary["total_cycles"] == expected.total_cycles and summary["dram"] == "ddr4-3200"
    assert summary == {**replay_summary(DDR4, expected, str(path)),
                       "config": dram_config_to_dict(DDR4)}     # the command prints the library's
    rows = csv_path.read_text().splitlines()
    assert rows[0] == "index,address,op,issue_cycle,finish_cycle,latency_cycles" and len(rows) == 201
    assert cli(["presets"]) == 0
    assert "hbm3" in capsys.readouterr().out
    assert cli([]) == 2


def test_cli_errors_are_config_errors(tmp_path):
    path = tmp_path / "t.trace"
    path.write_text("0x0 READ 0\n")
    bad_set = r"with --set dram\.channels=3: dram\.channels = 3: must be a power of two"
    with pytest.raises(ConfigError, match=bad_set):
        cli(["replay", str(path), "--set", "dram.channels=3"])
    with pytest.raises(ConfigError, match=r"--set channels=3: 'channels': expected dram\.KEY"):
        cli(["replay", str(path), "--set", "channels=3"])
    with pytest.raises(ConfigError, match="no such trace file"):
        cli(["replay", str(tmp_path / "nope.trace")])
    ini = tmp_path / "d.ini"
    ini.write_text(DDR4_INI)
    cfg = config_from_args(None, str(ini), ["dram.page_policy=closed"])
    assert cfg.page_policy == "closed" and cfg.preset == "dramsim3:d.ini"


# ---- idle skipping (issue 21) ------------------------------------------------------------
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(preset=st.sampled_from(sorted(DRAM_PRESETS)), seed=st.integers(0, 1000),
       gap_rounds=st.integers(5, 60))
def test_idle_skip_is_exact(preset, seed, gap_rounds):
    """Bursts separated by idle gaps of many refresh rounds: the skipping replay equals the
    stepping one (a command log disables the skip), finish cycles and every counter."""
    cfg = DRAM_PRESETS[preset]
    rng = np.random.default_rng(seed)
    period = cfg.trefi
    n = 60
    a = rng.integers(0, 1 << 28, n) & ~63
    t = np.repeat(np.arange(3) * gap_rounds * period, n // 3) + np.tile(np.arange(n // 3) * 7, 3)
    w = rng.random(n) < 0.4
    fast = replay(cfg, a, w, t)
    slow = replay(cfg, a, w, t, command_log=True)
    assert fast.finish_cycles.tolist() == slow.finish_cycles.tolist()
    for key in ("row_hits", "row_misses", "row_conflicts", "activates", "precharges",
                "refreshes", "reads", "writes"):
        assert getattr(fast, key) == getattr(slow, key), key


def test_huge_idle_gap_is_skipped_not_stepped():
    """A request 2**50 cycles after the previous one: before the skip this stepped through
    ~10**11 refresh events (hours); now it costs a few rounds. Its refresh count is the closed
    form: one REF per rank per tREFI, floor(2**50 / (tREFI / ranks)) requests in all (give or
    take the last round)."""
    cfg = DRAM_PRESETS["ddr4-3200"]
    r = replay(cfg, [0x40, 0x80], [False, False], [0, 1 << 50])
    interval = cfg.trefi // cfg.ranks
    assert abs(r.refreshes - (1 << 50) // interval) <= 2 * cfg.ranks
    assert r.finish_cycles[1] > 1 << 50
