"""The pipeline schedules of one training step (GPipe, 1F1B, interleaved 1F1B), simulated.

Each rank runs its tasks -- forward F or backward B of one micro-batch on one virtual stage --
in the fixed order its schedule prescribes; a task starts when the rank is free and its inputs
have arrived. Virtual stage k (0 <= k < p*v) lives on rank k % p (Megatron-LM interleaving:
rank r holds model chunks r, r+p, ...). Dependencies::

    F(k, j) after F(k-1, j) + send(k-1 -> k)                  (k > 0)
    B(k, j) after F(k, j) and B(k+1, j) + send(k+1 -> k)      (k < p*v - 1)

A send between virtual stages on the same rank is free. Orders per rank s:
  GPipe (Huang et al. 2019): all m forwards, then all backwards (last micro-batch first).
  1F1B (PipeDream-Flush, Narayanan et al. 2021 §2.2.1): min(p-s-1, m) warm-up forwards, then
    one forward / one backward alternately, then the remaining backwards.
  Interleaved 1F1B (Narayanan et al. 2021 §2.2.2, the order of Megatron-LM's interleaved
    schedule): micro-batches in groups of p, chunk (i // p) % v for the i-th forward (reversed
    for backwards), warm-up min(2(p-s-1) + (v-1)p, m v).
Tests check the makespan against (m + p - 1)(t_f + t_b) and (m + (p-1)/v)(t_f + t_b).
"""

from __future__ import annotations

from dataclasses import dataclass

from hw._lazy import lazy_module

np = lazy_module("numpy")   # loaded by the first schedule: the CLI's --help lists models without it

__all__ = ["PipelineResult", "schedule_order", "simulate_pipeline"]


@dataclass
class PipelineResult:
    makespan_s: float
    busy_s: np.ndarray            # [p] seconds each rank computes
    end_s: np.ndarray             # [p] when each rank finishes its last task
    last_backward_s: np.ndarray   # [p] backward seconds of the last micro-batch on each rank
    max_in_flight: np.ndarray     # [p] most (micro-batch, chunk) activations held at once
    tasks: list | None = None     # with record=True: (rank, is_backward, virtual stage,
                                  # micro-batch, start s, end s) in the order they ran


def schedule_order(p: int, m: int, schedule: str, v: int, s: int) -> list[tuple[int, int, int]]:
    """Task order of rank ``s``: a list of ``(is_backward, virtual_stage, micro_batch)``."""
    if schedule == "gpipe":
        return [(0, s, j) for j in range(m)] + [(1, s, j) for j in reversed(range(m))]
    if v == 1:
        w = min(p - s - 1, m)
        order = [(0, s, j) for j in range(w)]
        for i in range(m - w):
            order += [(0, s, w + i), (1, s, i)]
        return order + [(1, s, j) for j in range(m - w, m)]
    total = m * v

    def task(i: int, backward: bool) -> tuple[int, int, int]:
        chunk = (i // p) % v
        if backward:
            chunk = v - 1 - chunk
        micro = (i // (p * v)) * p + i % p
        return (int(backward), chunk * p + s, micro)

    w = min(2 * (p - s - 1) + (v - 1) * p, total)
    order = [task(i, False) for i in range(w)]
    for i in range(total - w):
        order += [task(w + i, False), task(i, True)]
    return order + [task(i, True) for i in range(total - w, total)]


_MEMO: dict = {}


def simulate_pipeline(t_f, t_b, m: int, *, p: int, schedule: str = "1f1b", v: int = 1,
                      send_s=0.0, record: bool = False) -> PipelineResult:
    """Run the schedule. ``t_f``/``t_b``: per-virtual-stage seconds per micro-batch, shape
    ``[p*v]`` (a scalar broadcasts); ``send_s``: seconds per activation / gradient transfer
    between virtual stages ``k`` and ``k+1``, shape ``[p*v - 1]`` or a scalar; ``record``:
    keep every task's start and end (:attr:`PipelineResult.tasks`)."""
    for key, val in (("p", p), ("m", m), ("v", v)):
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise ValueError(f"simulate_pipeline: {key} = {val!r}: must be an integer >= 1")
    if schedule not in ("1f1b", "gpipe"):
        raise ValueError(f"simulate_pipeline: schedule = {schedule!r}: must be 1f1b or gpipe")
    if schedule == "gpipe" and v != 1:
        raise ValueError("simulate_pipeline: v must be 1 with schedule = gpipe")
    if v > 1 and m % p:
        raise ValueError(f"simulate_pipeline: m = {m} must be a multiple of p = {p} when v > 1")
    nv = p * v
    tf = np.broadcast_to(np.asarray(t_f, dtype=np.float64), (nv,))
    tb = np.broadcast_to(np.asarray(t_b, dtype=np.float64), (nv,))
    send = np.broadcast_to(np.asarray(send_s, dtype=np.float64), (max(nv - 1, 0),))
    for key, arr in (("t_f", tf), ("t_b", tb), ("send_s", send)):
        if not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise ValueError(f"simulate_pipeline: {key} must be finite and >= 0")
    # A plan search runs the same schedule for candidates that differ only in what follows
    # the pipeline (ZeRO stage, optimizer): results are kept, read-only, for recent inputs.
    memo_key = (tf.tobytes(), tb.tobytes(), send.tobytes(), m, p, schedule, v, record)
    if memo_key in _MEMO:
        return _MEMO[memo_key]
    res = _simulate(tf, tb, send, m, p, schedule, v, record)
    for arr in (res.busy_s, res.end_s, res.last_backward_s, res.max_in_flight):
        arr.flags.writeable = False
    if len(_MEMO) >= 256:
        _MEMO.clear()
    _MEMO[memo_key] = res
    return res


def _simulate(tf, tb, send, m: int, p: int, schedule: str, v: int,
              record: bool) -> PipelineResult:
    nv = p * v
    f_end = np.full((nv, m), np.nan)
    b_end = np.full((nv, m), np.nan)
    orders = [schedule_order(p, m, schedule, v, s) for s in range(p)]
    ptr = [0] * p
    free = np.zeros(p)
    busy = np.zeros(p)
    last_b = np.zeros(p)
    live = np.zeros(p, dtype=np.int64)
    peak = np.zeros(p, dtype=np.int64)
    remaining = sum(len(o) for o in orders)
    tasks: list | None = [] if record else None
    while remaining:
        progress = False
        for s in range(p):
            order = orders[s]
            while ptr[s] < len(order):
                back, k, j = order[ptr[s]]
                if back:
                    ready = f_end[k, j]
                    if k < nv - 1:
                        up = b_end[k + 1, j]
                        if np.isnan(up):
                            break
                        hop = 0.0 if (k + 1) % p == s else send[k]
                        ready = max(ready, up + hop)
                    dur = tb[k]
                else:
                    ready = 0.0
                    if k > 0:
                        hop = 0.0 if (k - 1) % p == s else send[k - 1]
                        ready = f_end[k - 1, j] + hop
                    dur = tf[k]
                if np.isnan(ready):
                    break
                start = max(free[s], ready)
                free[s] = start + dur
                if tasks is not None:
                    tasks.append((s, back, k, j, float(start), float(free[s])))
                busy[s] += dur
                if back:
                    b_end[k, j] = free[s]
                    live[s] -= 1
                    if j == m - 1:
                        last_b[s] += dur
                else:
                    f_end[k, j] = free[s]
                    live[s] += 1
                    peak[s] = max(peak[s], live[s])
                ptr[s] += 1
                remaining -= 1
                progress = True
        if not progress:  # pragma: no cover - the orders above never deadlock
            raise RuntimeError(f"pipeline schedule {schedule} (p={p}, m={m}, v={v}) deadlocked")
    return PipelineResult(makespan_s=float(free.max()), busy_s=busy, end_s=free.copy(),
                          last_backward_s=last_b, max_in_flight=peak, tasks=tasks)
