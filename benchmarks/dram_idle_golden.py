"""Golden outputs of the DRAM model (issue 21 item 7: idle skipping must not change results).

``dram_idle_golden.json`` was written by this script BEFORE the kernel learned to skip idle
refresh rounds (commit before "dram: skip idle time"); the traces include long idle gaps (up to
millions of cycles) that the skip now jumps over. Every preset, six replays of 300-3000 random
requests (at once, every 10 cycles, sparse, bursts with idle gaps, sequential, very long gaps)
and 200 DMA transfers with idle gaps: finish cycles (hashed) and every counter.

Run from the repo root (a few minutes on a shared machine)::

    python benchmarks/dram_idle_golden.py            # compare with the recorded outputs
    python benchmarks/dram_idle_golden.py --write    # record them again
"""
import hashlib, json, sys
from pathlib import Path
import numpy as np
from hw.memory.dram import DRAM_PRESETS, replay, DramModel

out = {}
rng = np.random.default_rng(7)
for name, cfg in DRAM_PRESETS.items():
    for case in range(6):
        n = 3000
        a = rng.integers(0, 1 << 30, n) & ~63
        if case == 0:
            t = np.zeros(n, np.int64)
        elif case == 1:
            t = np.arange(n) * 10
        elif case == 2:    # sparse: gaps up to 20 refresh intervals
            t = np.cumsum(rng.integers(0, 20 * 8000, n))
        elif case == 3:    # bursts separated by long idle gaps
            t = np.repeat(np.arange(30) * 500_000, n // 30) + np.tile(np.arange(n // 30), 30)
        elif case == 4:
            t = np.cumsum(rng.integers(0, 300, n)); a = (np.arange(n) * 64) % (1 << 24)
        else:              # very long gaps
            t = np.cumsum(rng.integers(0, 3_000_000, n // 10)); a = a[: n // 10]
        w = rng.random(len(t)) < 0.3
        r = replay(cfg, a, w, t)
        out[f"{name}/replay{case}"] = [hashlib.sha256(r.finish_cycles.tobytes()).hexdigest(),
                                      r.total_cycles, r.row_hits, r.row_misses, r.row_conflicts,
                                      r.activates, r.precharges, r.refreshes]
    m = DramModel(cfg)
    ends = []
    t = 0
    for k in range(200):
        t = m.transfer(int(rng.integers(0, 1 << 28)) & ~63, int(rng.integers(1, 1 << 16)),
                       k % 3 == 0, t + int(rng.integers(0, 200_000)), 64)
        ends.append(t)
    out[f"{name}/transfer"] = [ends[-1], hashlib.sha256(np.array(ends).tobytes()).hexdigest(),
                               m.counters()]
path = Path(__file__).with_name("dram_idle_golden.json")
if "--write" in sys.argv:
    path.write_text(json.dumps(out, indent=1, sort_keys=True))
    print(f"wrote {len(out)} cases to {path}")
else:
    gold = json.loads(path.read_text())
    bad = [k for k in gold if json.loads(json.dumps(out[k])) != gold[k]]
    print(f"{len(gold) - len(bad)} of {len(gold)} cases identical" + (f"; differ: {bad}" if bad else ""))
    sys.exit(1 if bad else 0)
