"""LLM serving: a trace of requests through a batching scheduler, every iteration timed on
simulated chips (issue 25).

**Requests** come from a CSV trace (:func:`read_trace`: ``arrival_s, prompt_tokens,
output_tokens``) or a seeded Poisson process (:func:`poisson_trace`), both in
:mod:`npulab.llm_trace`.

**Schedulers** (:data:`POLICIES`; :class:`Scheduler` holds their settings, named as vLLM's):

* ``static``: when the engine is free it takes the requests that have arrived (up to
  ``max_num_seqs``, with KV-cache blocks reserved for each one's prompt and whole output),
  prefills them together, and decodes the whole batch until its longest request ends; finished
  sequences keep their slots, as a padded batch (Hugging Face ``generate``) does.
* ``continuous``: iteration-level scheduling (Orca, OSDI'22; vLLM's scheduler without chunked
  prefill): each iteration either prefills the waiting requests that fit (at most
  ``max_num_batched_tokens`` prompt tokens and the free KV blocks) or, when none can start,
  decodes one token of every running request. KV blocks are taken as sequences grow; when a
  decode needs a block and none is free, the latest-admitted request is preempted and
  recomputed later (vLLM's recompute preemption).
* ``chunked``: Sarathi-Serve (OSDI'24) / vLLM V1: every iteration decodes every running
  request and fills the rest of its ``max_num_batched_tokens`` budget with prefill chunks,
  oldest first, so prefills never stall decodes.
* ``disaggregated``: Splitwise (ISCA'24) / DistServe (OSDI'24): prefill on one group of ``tp``
  chips, decode on another; a request's KV cache moves between them over the network after its
  prefill (each rank sends its share to its counterpart), then decodes continuously.

**Iteration time** is the sum of its kernels on one tensor-parallel rank, every layer
(:mod:`compiler.frontends.llm_step`): the dense kernels (projections, FFN, norms, all-reduces)
of the iteration's ``T`` tokens, plus attention for the decoding sequences (one kernel over all
of them, at their mean KV length: the same bytes and FLOPs as the ragged batch) and for each
prefill chunk, plus the LM head and sampling for the sequences that produce a token. Kernels
come from the chip simulation, cached per shape. To keep the shapes few, a kernel's time at a
token count, sequence count or KV length above 16 is interpolated linearly between the
simulated powers of two around it (a GEMM's time grows linearly with its rows once they fill
the array, a memory-bound stream's with its length; exact at the powers of two and to 16). The distinct kernels a trace needs are
found in a first pass timed by a roofline of the chip, simulated in parallel, and the trace is
then run with the simulated times (kernels the first pass missed are simulated when met).

**Metrics** (:class:`ServeResult`): per request its time to first token, time per output
token, inter-token latencies and end-to-end latency; p50/p90/p99 of each; output tokens/s,
requests/s; goodput (requests/s meeting both latency SLOs, DistServe's definition); KV-cache
occupancy over time; one record per iteration (the Perfetto timeline).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from compiler.frontends.llm import DecoderConfig
from compiler.frontends.llm_step import (
    ATTENTION, StepOp, StepShape, attention_ops, check_bits, check_context, check_int,
    check_layout, head_ops,
    kv_cache_bytes, layer_ops, weight_bytes,
)
from hw.system.system import SystemConfig
from npulab.llm_trace import Request, TraceError, checked_trace, poisson_trace, read_trace

__all__ = ["Request", "Scheduler", "POLICIES", "ServeResult", "read_trace", "poisson_trace",
           "serve", "TraceError", "IterationCost", "grid"]

POLICIES = ("static", "continuous", "chunked", "disaggregated")
#: A static batch's prompt tokens at most (its prefill is one iteration): 4 M.
STATIC_MAX_TOKENS = 1 << 22
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Scheduler:
    """A scheduler's settings (vLLM's names): ``max_num_seqs`` running at once,
    ``max_num_batched_tokens`` per iteration (chunked: the budget; continuous and
    disaggregated: prompt tokens per prefill iteration, a longer prompt running alone),
    ``block_size`` tokens per KV block, ``memory_utilization`` of each chip's memory for
    weights and KV cache."""

    policy: str = "chunked"
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    block_size: int = 16
    memory_utilization: float = 0.9

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy = {self.policy!r}: must be one of {', '.join(POLICIES)}")
        check_int("max_num_seqs", self.max_num_seqs, 1, 1 << 16)
        check_int("max_num_batched_tokens", self.max_num_batched_tokens, 1, 1 << 20)
        check_int("block_size", self.block_size, 1, 1 << 12)
        m = self.memory_utilization
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 < m <= 1:
            raise ValueError(f"memory_utilization = {m!r}: must be a fraction in (0, 1]")


# --------------------------------------------------------------------------------------------
# iteration cost
# --------------------------------------------------------------------------------------------

def grid(x: float, exact: int = 16) -> list[tuple[int, float]]:
    """The simulated points around ``x`` and their weights: ``x`` itself up to ``exact``, else
    the powers of two ``lo < x <= hi`` weighted for linear interpolation (one point at a power of
    two)."""
    if x <= exact:
        return [(max(1, math.ceil(x)), 1.0)]
    hi = 1 << (math.ceil(x) - 1).bit_length()
    lo = hi >> 1
    if x >= hi:
        return [(hi, 1.0)]
    w = (x - lo) / (hi - lo)
    return [(lo, 1.0 - w), (hi, w)]


class IterationCost:
    """Seconds of one iteration on one tensor-parallel rank (module docstring). ``lookup(op)``
    gives a compute kernel's ``(device_s, launch_s)``; ``comm(op, nbytes)`` a collective's
    seconds over the tensor-parallel group; ``launch``: add each kernel's launch overhead
    (``False``: captured in a CUDA graph)."""

    def __init__(self, cfg: DecoderConfig, tp: int, ep: int, dtype_bytes: int,
                 lookup: Callable, comm: Callable, launch: bool = True,
                 weight_bits: int | None = None, kv_bits: int | None = None):
        self.cfg, self.tp, self.ep, self.eb = cfg, tp, ep, dtype_bytes
        self.weight_bits, self.kv_bits = weight_bits, kv_bits
        self.lookup, self.comm, self.launch = lookup, comm, launch
        self._dense: dict[int, float] = {}
        self._head: dict[int, float] = {}
        self._attn: dict[tuple, float] = {}
        self._attn_launch: float | None = None

    def _time(self, ops: list[StepOp], launch: bool = True) -> float:
        t = 0.0
        for s in ops:
            if s.op is None:
                t += self.comm(s.collective, s.nbytes) * s.repeat
            else:
                dev, lau = self.lookup(s.op)
                t += (dev + (lau if launch and self.launch else 0.0)) * s.repeat
        return t

    def dense_ops(self, tokens: int) -> list[StepOp]:
        """One layer's kernels but attention, for ``tokens`` tokens."""
        return [s for s in layer_ops(self.cfg, StepShape(1, tokens), self.tp, self.ep,
                                     dtype_bytes=self.eb, weight_bits=self.weight_bits)
                if s.name not in ATTENTION]

    def _dense_at(self, tokens: int) -> float:
        if tokens not in self._dense:
            head = [s for s in head_ops(self.cfg, StepShape(1, tokens), self.tp,
                                        dtype_bytes=self.eb)
                    if s.name in ("embedding", "final_norm")]
            self._dense[tokens] = (self.cfg.layers * self._time(self.dense_ops(tokens))
                                   + self._time(head))
        return self._dense[tokens]

    def dense(self, tokens: int) -> float:
        """Every layer's kernels but attention, the embedding and the final norm, for
        ``tokens`` tokens (interpolated between simulated powers of two above 16)."""
        return sum(w * self._dense_at(t) for t, w in grid(tokens))

    def _head_at(self, seqs: int) -> float:
        if seqs not in self._head:
            self._head[seqs] = self._time([
                s for s in head_ops(self.cfg, StepShape(seqs, 1), self.tp, dtype_bytes=self.eb)
                if s.name not in ("embedding", "final_norm")])
        return self._head[seqs]

    def head(self, seqs: int) -> float:
        """LM head, logits gather and sampling for ``seqs`` sequences (interpolated)."""
        return sum(w * self._head_at(n) for n, w in grid(seqs))

    def _attn_at(self, n: int, q: int, k: int, cached: bool) -> float:
        key = (n, q, k, cached)
        if key not in self._attn:
            self._attn[key] = self._time(attention_ops(self.cfg, n, q, k, self.tp, cached,
                                                       self.kv_bits),
                                         launch=False)
        return self._attn[key]

    def attention(self, seqs: int, new: int, keys: float, cached: bool) -> float:
        """Device seconds of one layer's attention for ``seqs`` sequences of ``new`` queries
        each over ``keys`` keys (a decode batch: ``new = 1`` and their mean KV length; a
        prefill chunk: ``seqs = 1``): bilinear between simulated powers of two."""
        return sum(wn * wq * wk * self._attn_at(n, q, k, cached)
                   for n, wn in grid(seqs) for q, wq in grid(new) for k, wk in grid(keys))

    def attention_launch(self) -> float:
        """Launch overhead of one layer's attention kernels (each launched once per iteration,
        whatever the sequences)."""
        if not self.launch:
            return 0.0
        if self._attn_launch is None:
            self._attn_launch = sum(self.lookup(s.op)[1] for s in
                                    attention_ops(self.cfg, 1, 1, 16, self.tp, True))
        return self._attn_launch

    def iteration(self, decode_keys: list[int], chunks: list[tuple[int, int, int]],
                  logits: int) -> float:
        """Seconds of an iteration decoding one token for sequences with ``decode_keys`` keys
        each and running prefill ``chunks`` ``(new, context, keys)``, with ``logits``
        sequences sampled."""
        tokens = len(decode_keys) + sum(c[0] for c in chunks)
        t = self.dense(tokens) + (self.head(logits) if logits else 0.0)
        attn = 0.0
        if decode_keys:
            attn += self.attention(len(decode_keys), 1, sum(decode_keys) / len(decode_keys),
                                   True)
        for new, context, keys in chunks:
            attn += self.attention(1, new, keys, context > 0)
        return t + self.cfg.layers * (attn + self.attention_launch())


# --------------------------------------------------------------------------------------------
# the scheduler
# --------------------------------------------------------------------------------------------

@dataclass
class _Seq:
    req: Request
    order: int = 0                    # admission order (preemption takes the latest)
    prefilled: int = 0                # tokens of the current prompt computed
    generated: int = 0
    base: int = 0                     # tokens generated before the last preemption
    blocks: int = 0
    first_token_s: float | None = None
    token_times: list = field(default_factory=list)
    preemptions: int = 0
    ready_s: float = 0.0              # disaggregated: when its KV cache reaches the decoder
    finish_s: float | None = None

    @property
    def prompt(self) -> int:
        """Tokens to prefill: the prompt, and after a recompute preemption the tokens generated
        before it."""
        return self.req.prompt + self.base

    @property
    def prefill_done(self) -> bool:
        return self.prefilled >= self.prompt

    @property
    def context(self) -> int:
        """Tokens in the KV cache: the prefilled ones, then one more per decode step (the
        latest generated token enters the cache in the step that consumes it)."""
        if not self.prefill_done:
            return self.prefilled
        return self.prompt + self.generated - self.base - 1


class _Engine:
    """One group of ``tp`` chips running iterations (module docstring). ``mode``: a policy,
    or ``prefill`` / ``decode`` for the two halves of a disaggregated server."""

    def __init__(self, name: str, sched: Scheduler, cost: IterationCost, kv_blocks: int,
                 mode: str):
        self.name, self.s, self.cost, self.mode = name, sched, cost, mode
        self.capacity = kv_blocks
        self.free = kv_blocks
        self.clock = 0.0
        self.waiting: deque[_Seq] = deque()
        self.running: list[_Seq] = []
        self.static_batch: list[_Seq] = []
        self.admitted = 0
        self.iterations: list[dict] = []

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.s.block_size)

    def _grow(self, seq: _Seq, tokens: int) -> bool:
        """Give ``seq`` the blocks ``tokens`` tokens need; False (nothing taken) if too few
        are free."""
        need = self.blocks_for(tokens) - seq.blocks
        if need <= 0:
            return True
        if need > self.free:
            return False
        self.free -= need
        seq.blocks += need
        return True

    def _release(self, seq: _Seq) -> None:
        self.free += seq.blocks
        seq.blocks = 0

    def _admit(self, seq: _Seq) -> None:
        self.admitted += 1
        seq.order = self.admitted
        self.running.append(seq)

    def _preempt(self, v: _Seq) -> None:
        """Preempt ``v`` (recompute: its blocks are freed and it waits, first in line, to
        prefill again)."""
        self.running.remove(v)
        self._release(v)
        v.preemptions += 1
        v.base = v.generated
        v.prefilled = 0
        self.waiting.appendleft(v)

    def _decodable(self) -> list[_Seq]:
        """Running sequences past their prefill, each with a block for its next token, oldest
        first. When none is free the latest-admitted running sequence is preempted, the one
        asking included (vLLM's order: the oldest keep going)."""
        for seq in sorted(self.running, key=lambda r: r.order):
            if seq not in self.running or not seq.prefill_done:
                continue
            while not self._grow(seq, seq.context + 1):
                if len(self.running) == 1:
                    raise RuntimeError("serve: a lone sequence outgrew the KV cache")  # checked
                victim = max(self.running, key=lambda r: r.order)
                self._preempt(victim)
                if victim is seq:
                    break
        return sorted([r for r in self.running if r.prefill_done], key=lambda r: r.order)

    def plan(self) -> tuple[list[_Seq], list[tuple[_Seq, int]]]:
        """The sequences to decode and the prefill chunks ``(seq, tokens)`` of the next
        iteration (the engine has work)."""
        s = self.s
        if self.mode == "static":
            if not self.static_batch:
                tokens = 0
                while self.waiting and len(self.static_batch) < s.max_num_seqs:
                    seq = self.waiting[0]
                    if self.static_batch and tokens + seq.req.prompt > STATIC_MAX_TOKENS:
                        break
                    if not self._grow(seq, seq.req.prompt + seq.req.output):
                        break
                    tokens += seq.req.prompt
                    self._admit(self.waiting.popleft())
                    self.static_batch.append(seq)
                return [], [(seq, seq.req.prompt) for seq in self.static_batch]
            return [q for q in self.static_batch if q.finish_s is None], []
        if self.mode == "decode":
            # the decoder reserves each request's whole output when it takes it: no preemption
            while self.waiting and len(self.running) < s.max_num_seqs:
                seq = self.waiting[0]
                if not self._grow(seq, seq.req.prompt + seq.req.output):
                    break
                self._admit(self.waiting.popleft())
            return sorted(self.running, key=lambda r: r.order), []
        chunks: list[tuple[_Seq, int]] = []
        if self.mode in ("continuous", "prefill"):
            budget = s.max_num_batched_tokens
            while self.waiting and len(self.running) < s.max_num_seqs:
                seq = self.waiting[0]
                if chunks and seq.prompt > budget:
                    break
                if not self._grow(seq, seq.prompt):
                    break
                self._admit(self.waiting.popleft())
                chunks.append((seq, seq.prompt))
                budget -= seq.prompt
                if budget <= 0:
                    break
            if chunks or self.mode == "prefill":
                return [], chunks
            return self._decodable(), []
        # chunked: every decode, then prefill chunks in the rest of the budget
        decodes = self._decodable()
        budget = s.max_num_batched_tokens - len(decodes)
        for seq in sorted([r for r in self.running if not r.prefill_done],
                          key=lambda r: r.order):
            if budget <= 0:
                break
            take = min(seq.prompt - seq.prefilled, budget)
            if not self._grow(seq, seq.prefilled + take):
                break
            chunks.append((seq, take))
            budget -= take
        while self.waiting and budget > 0 and len(self.running) < s.max_num_seqs:
            seq = self.waiting[0]
            take = min(seq.prompt, budget)
            if not self._grow(seq, take):
                break
            self._admit(self.waiting.popleft())
            chunks.append((seq, take))
            budget -= take
        return decodes, chunks

    def run(self, decodes: list[_Seq], chunks: list[tuple[_Seq, int]]) -> list[_Seq]:
        """Time the iteration from :attr:`clock`; the sequences whose prefill it completed."""
        keys = [q.context + 1 for q in decodes]
        parts = [(take, q.prefilled, q.prefilled + take) for q, take in chunks]
        logits = len(decodes) + sum(1 for q, take in chunks if q.prefilled + take >= q.prompt)
        if self.mode == "static" and decodes:
            # a padded batch decodes every slot until its longest request ends
            pad = len(self.static_batch) - len(decodes)
            keys += [max(keys)] * pad
            logits += pad
        start = self.clock
        self.clock = end = start + self.cost.iteration(keys, parts, logits)
        in_use = self.capacity - self.free          # during the iteration, before releases
        done_prefill = []
        for q, take in chunks:
            q.prefilled += take
            if q.prefill_done:
                done_prefill.append(q)
        for q in decodes + done_prefill:
            q.generated += 1
            q.token_times.append(end)
            if q.first_token_s is None:
                q.first_token_s = end
            if q.generated >= q.req.output:
                q.finish_s = end
                if self.mode != "static":
                    self.running.remove(q)
                    self._release(q)
        if self.mode == "static" and all(q.finish_s is not None for q in self.static_batch):
            for q in self.static_batch:
                self.running.remove(q)
                self._release(q)
            self.static_batch = []
        self.iterations.append({
            "engine": self.name, "start_s": start, "end_s": end,
            "tokens": len(keys) + sum(p[0] for p in parts), "decodes": len(decodes),
            "prefill_tokens": sum(p[0] for p in parts), "prefills": len(parts),
            "kv_blocks": in_use, "running": len(self.running)})
        return done_prefill


# --------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------

def _pct(values) -> dict:
    if len(values) == 0:
        return {f"p{p}": None for p in PERCENTILES} | {"mean": None}
    a = np.asarray(values, dtype=float)
    return {f"p{p}": float(np.percentile(a, p)) for p in PERCENTILES} | {"mean": float(a.mean())}


@dataclass
class ServeResult:
    """A served trace: ``requests`` rows (id, arrival_s, prompt, output, first_token_s,
    finish_s, ttft_s, tpot_s, e2e_s, preemptions), ``iterations`` rows (engine, start_s, end_s,
    tokens, decodes, prefill_tokens, prefills, kv_blocks, running) and ``summary``."""

    model: str
    system: str
    policy: str
    tp: int
    scheduler: dict
    requests: list[dict]
    iterations: list[dict]
    kv_blocks: int
    itl_s: list[float]
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    simulation: dict = field(default_factory=dict)

    @property
    def summary(self) -> dict:
        reqs = self.requests
        first = min(r["arrival_s"] for r in reqs)
        last = max(r["finish_s"] for r in reqs)
        span = max(last - first, 1e-12)
        tokens = sum(r["output"] for r in reqs)
        good = [r for r in reqs if (self.slo_ttft_s is None or r["ttft_s"] <= self.slo_ttft_s)
                and (self.slo_tpot_s is None or r["tpot_s"] is None
                     or r["tpot_s"] <= self.slo_tpot_s)]
        busy = sum(i["end_s"] - i["start_s"] for i in self.iterations)
        kv = [i["kv_blocks"] for i in self.iterations]
        weighted = sum(i["kv_blocks"] * (i["end_s"] - i["start_s"]) for i in self.iterations)
        return {
            "requests": len(reqs), "output_tokens": tokens, "makespan_s": span,
            "tokens_per_s": tokens / span, "requests_per_s": len(reqs) / span,
            "ttft_s": _pct([r["ttft_s"] for r in reqs]),
            "tpot_s": _pct([r["tpot_s"] for r in reqs if r["tpot_s"] is not None]),
            "itl_s": _pct(self.itl_s), "e2e_s": _pct([r["e2e_s"] for r in reqs]),
            "goodput_requests_per_s": len(good) / span, "slo_attained": len(good) / len(reqs),
            "preemptions": sum(r["preemptions"] for r in reqs),
            "iterations": len(self.iterations),
            "kv_blocks": self.kv_blocks, "kv_peak_blocks": max(kv) if kv else 0,
            "kv_mean_occupancy": weighted / busy / self.kv_blocks if busy and self.kv_blocks
            else 0.0,
        }

    def to_dict(self) -> dict:
        return {"model": self.model, "system": self.system, "policy": self.policy,
                "tp": self.tp, "scheduler": self.scheduler, "slo_ttft_s": self.slo_ttft_s,
                "slo_tpot_s": self.slo_tpot_s, "summary": self.summary,
                "requests": self.requests, "iterations": self.iterations,
                "simulation": self.simulation}

    def to_pandas(self):
        import pandas as pd
        return pd.DataFrame(self.requests)

    def perfetto(self) -> dict:
        """A Chrome/Perfetto trace: one track per engine, a slice per iteration."""
        events, tids = [], {}
        for it in self.iterations:
            tid = tids.setdefault(it["engine"], len(tids) + 1)
            label = (f"{it['decodes']} decode + {it['prefill_tokens']} prefill tokens"
                     if it["prefill_tokens"] else f"{it['decodes']} decode")
            events.append({"name": label, "ph": "X", "pid": 1, "tid": tid,
                           "ts": it["start_s"] * 1e6, "dur": (it["end_s"] - it["start_s"]) * 1e6,
                           "args": {k: it[k] for k in ("tokens", "decodes", "prefill_tokens",
                                                        "kv_blocks", "running")}})
        for name, tid in tids.items():
            events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid,
                           "args": {"name": name}})
        return {"traceEvents": events, "displayTimeUnit": "ms"}


# --------------------------------------------------------------------------------------------
# serve
# --------------------------------------------------------------------------------------------

def _roofline_lookup(spec, eb: int) -> Callable:
    """A first-pass estimate of a kernel on a simulated chip: its roofline at the chip's peak
    MACs and DRAM bandwidth (only to find the kernels a trace needs)."""
    from npulab.devices import op_cost
    macs = spec.peak_macs_per_cycle * spec.clock_hz
    bw = getattr(getattr(spec.config, "dram", None), "peak_gbps", 1000.0) * 1e9
    bw = bw if math.isfinite(bw) else 1e15

    def lookup(op):
        flops, nbytes, _ = op_cost(op, eb)
        return max(flops / 2 / macs, nbytes / bw), 0.0
    return lookup


def _simulate(trace: list[Request], sched: Scheduler, make_cost: Callable,
              kv_blocks: int, kv_transfer: Callable) -> tuple[list[_Seq], list]:
    """Run ``trace`` through the scheduler with the costs ``make_cost()`` gives; the sequences
    and every engine's iterations. Each step runs the engine that can act earliest: one with
    work at its clock, or an idle one at its next arrival (requests for the first engine, KV
    caches handed off for a disaggregated decoder)."""
    seqs = [_Seq(r) for r in trace]
    if sched.policy == "disaggregated":
        engines = [_Engine("prefill", sched, make_cost(), kv_blocks, "prefill"),
                   _Engine("decode", sched, make_cost(), kv_blocks, "decode")]
    else:
        engines = [_Engine(sched.policy, sched, make_cost(), kv_blocks, sched.policy)]
    first = engines[0]
    arrivals = deque(seqs)
    handoff: deque[_Seq] = deque()      # prefilled, their caches on the way to the decoder

    def next_time(e: _Engine) -> float:
        if e.busy:
            return e.clock
        if e is first:
            return max(e.clock, arrivals[0].req.arrival_s) if arrivals else math.inf
        return max(e.clock, handoff[0].ready_s) if handoff else math.inf

    while True:
        e = min(engines, key=next_time)
        t = next_time(e)
        if t == math.inf:
            break
        e.clock = t
        if e is first:
            while arrivals and arrivals[0].req.arrival_s <= t:
                first.waiting.append(arrivals.popleft())
        else:
            while handoff and handoff[0].ready_s <= t:
                e.waiting.append(handoff.popleft())
        decodes, chunks = e.plan()
        if not decodes and not chunks:
            raise RuntimeError(f"serve: engine {e.name} has work it cannot schedule")  # a bug
        prefilled = e.run(decodes, chunks)
        if e.mode == "prefill":
            for q in prefilled:
                if q.finish_s is not None:          # a one-token request ends at its prefill
                    continue
                e.running.remove(q)
                e._release(q)
                q.ready_s = e.clock + kv_transfer(q.prompt)
                handoff.append(q)
            handoff = deque(sorted(handoff, key=lambda q: q.ready_s))
    return seqs, [it for e in engines for it in e.iterations]


def serve(model, system: SystemConfig | str, trace: list[Request], *, tp: int = 1,
          ep: int = 1, scheduler: Scheduler | None = None, launch: bool = False,
          slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
          jobs: int | None = None, progress: Callable | None = None,
          timer=None, weight_bits: int | None = None, kv_bits: int | None = None) -> ServeResult:
    """Serve ``trace`` with ``scheduler`` on ``tp`` chips of ``system`` (two groups of ``tp``
    when disaggregated); module docstring. ``launch``: add the chip's per-kernel launch
    overhead (default False: a serving engine captures its iterations in CUDA graphs, as vLLM
    does). ``timer``: a :class:`~npulab.llm_run.KernelTimer` on ``system`` to share its kernel
    cache across calls (a load sweep); its launch setting then applies. ``weight_bits`` /
    ``kv_bits``: weight-only quantization (8, 4) and an fp8 KV cache (8): fewer bytes to move
    and to hold, so more room for the cache."""
    import time as _time
    from npulab.llm_run import KernelTimer, _tp_groups, resolve_llm, resolve_system
    cfg = resolve_llm(model)
    system = resolve_system(system)
    sched = scheduler or Scheduler()
    check_layout(cfg, tp, ep)
    check_bits(weight_bits, kv_bits)
    if tp == 1 and ep > 1:
        raise ValueError(f"ep = {ep} with tp = 1 (data-parallel attention, all-to-all to the "
                         f"experts) is modelled by llm layer and llm run; the server takes "
                         f"experts within the tensor-parallel group: ep dividing tp")
    trace = checked_trace(trace)
    if sched.policy == "disaggregated" and 2 * tp > system.topology.n_ranks:
        raise ValueError(f"disaggregated serving takes two groups of tp = {tp} chips: "
                         f"{2 * tp}; the system {system.name!r} has "
                         f"{system.topology.n_ranks}")
    _tp_groups(system, tp)
    for key, v in (("slo_ttft_s", slo_ttft_s), ("slo_tpot_s", slo_tpot_s)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or not 0 < v <= 1e6):
            raise ValueError(f"{key} = {v!r}: must be a number of seconds in (0, 1e6]")
    t0 = _time.perf_counter()
    timer = timer or KernelTimer(system, launch=launch, jobs=jobs, progress=progress)
    launch = timer.launch
    eb = timer.dtype_bytes
    rank_groups = [tuple(range(tp))]

    def comm(op, nbytes):
        return timer._comm(op, float(nbytes), rank_groups)

    # memory: weights per chip, the rest (of memory_utilization) for the KV cache
    mem = timer.device.memory_bytes
    if mem is None:
        spec = getattr(timer.device, "spec", None)
        dram = getattr(getattr(spec, "config", None), "dram", None)
        mem = float(dram.capacity_bytes) if dram is not None else 80 * 2**30
    weights = weight_bytes(cfg, tp, eb, weight_bits)
    kv_eb = kv_bits / 8 if kv_bits else eb
    block_bytes = kv_cache_bytes(cfg, sched.block_size, tp, kv_eb)
    kv_blocks = int((mem * sched.memory_utilization - weights) // block_bytes)
    if kv_blocks < 1:
        raise ValueError(f"{cfg.name} on {tp} chip(s): the weights ({weights / 2**30:.1f} GiB "
                         f"per chip) leave no room for a KV cache in {sched.memory_utilization:g}"
                         f" x {mem / 2**30:.1f} GiB; use more chips (--tp)")
    r = max(trace, key=lambda r: r.prompt + r.output)
    check_context(cfg, r.prompt + r.output, f"request {r.id}'s prompt + output tokens")
    if -(-(r.prompt + r.output) // sched.block_size) > kv_blocks:
        raise ValueError(f"request {r.id} (prompt {r.prompt}, output {r.output}) needs "
                         f"{-(-(r.prompt + r.output) // sched.block_size):,} KV blocks of "
                         f"{sched.block_size} tokens; the cache holds {kv_blocks:,} per chip on "
                         f"{tp} chip(s): use more chips (--tp) or shorter requests")
    per_token = kv_cache_bytes(cfg, 1, tp, kv_eb)

    def kv_transfer(tokens: int) -> float:
        pairs = [(i, tp + i) for i in range(tp)]
        return timer._comm("broadcast", float(tokens * per_token), pairs)

    # pass 1: a roofline of the chip finds the kernels the trace needs
    before = timer.simulated
    spec = getattr(timer.device, "spec", None)
    needed: dict = {}
    if spec is not None:
        rough = _roofline_lookup(spec, eb)

        def record(op):
            needed.setdefault(_key(op), op)
            return rough(op)
        _simulate(trace, sched, lambda: IterationCost(cfg, tp, ep, eb, record, comm, launch,
                                                      weight_bits, kv_bits),
                  kv_blocks, kv_transfer)
        timer.prefetch([StepOp(op.name, op) for op in needed.values()])
    first_pass = timer.simulated - before

    def lookup(op):
        r = timer._record(op)
        return r["device_s"], r["launch_s"]
    seqs, iterations = _simulate(
        trace, sched, lambda: IterationCost(cfg, tp, ep, eb, lookup, comm, launch, weight_bits,
                                            kv_bits), kv_blocks,
        kv_transfer)
    rows, itl = [], []
    for q in sorted(seqs, key=lambda q: q.req.id):
        r = q.req
        tpot = ((q.finish_s - q.first_token_s) / (r.output - 1)) if r.output > 1 else None
        rows.append({"id": r.id, "arrival_s": r.arrival_s, "prompt": r.prompt,
                     "output": r.output, "first_token_s": q.first_token_s,
                     "finish_s": q.finish_s, "ttft_s": q.first_token_s - r.arrival_s,
                     "tpot_s": tpot, "e2e_s": q.finish_s - r.arrival_s,
                     "preemptions": q.preemptions})
        itl += [b - a for a, b in zip(q.token_times, q.token_times[1:])]
    return ServeResult(cfg.name, system.name, sched.policy, tp, asdict(sched), rows, iterations,
                       kv_blocks, itl, slo_ttft_s, slo_tpot_s,
                       {"kernels_simulated": timer.simulated - before,
                        "kernels_found_in_first_pass": first_pass,
                        "seconds": _time.perf_counter() - t0})


def _key(op):
    from npulab.devices import _shape_key
    return _shape_key(op)

