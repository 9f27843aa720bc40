"""Co-simulation of the vector lanes (:mod:`.lane`) against :mod:`hw.vector.functional`.

:func:`run` streams beats through :class:`~.lane.VectorLanes` in Amaranth's simulator (with
optional input bubbles and output back-pressure) and returns every result beat with the cycle it
left in. :func:`expected` is what the functional model gives for the same operation, rounded to
the output type: the two must be equal bit for bit. :func:`pool_beats` turns an NHWC tensor and
a pooling window into the beats a sequencer feeds (channels across the lanes, each window's
real elements in row-major kernel order, padding skipped).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hw.vector import functional as F

__all__ = ["LaneRun", "run", "expected", "pool_beats", "unblock", "CLOCK_PERIOD"]

CLOCK_PERIOD = 1e-8
_DTYPE = {8: "int8", 16: "int16"}


@dataclass(frozen=True)
class LaneRun:
    """What the lanes produced: ``out[beat, lane]``, the cycle each result beat left
    (``cycles[beat]``, counted from the first cycle the testbench drove) and the cycle the
    last one left."""

    out: np.ndarray
    cycles: np.ndarray
    total_cycles: int


def _params(op, lanes: int, out_bits: int) -> None:
    from hw.vector.rtl.lane import VecOp

    if not isinstance(op, VecOp):
        raise ValueError(f"vector lanes: op = {op!r}: must be one of "
                         f"{', '.join(o.name for o in VecOp)}")
    if out_bits not in _DTYPE:
        raise ValueError(f"vector lanes: out_bits = {out_bits!r}: must be 8 or 16")
    if not 1 <= lanes <= 64:
        raise ValueError(f"vector lanes: lanes = {lanes!r}: must be in 1..64")


def run(op, a, b=None, last=None, *, multiplier: int = 0, shift: int = 0, zero_point: int = 0,
        relu: bool = False, out_bits: int = 8, mutation: str | None = None,
        bubbles: np.ndarray | None = None, stalls: np.ndarray | None = None) -> LaneRun:
    """Stream ``a`` (int[beats, lanes]; ``b`` likewise for ``ADD``; ``last`` bool[beats] for
    pooling) through the lanes running ``op``. ``bubbles[t]``: the testbench offers nothing in
    its t-th cycle; ``stalls[t]``: it holds the output's ``ready`` low in cycle t."""
    from amaranth.sim import Simulator

    from hw.vector.rtl.lane import VecOp, VectorLanes

    a = np.asarray(a, dtype=np.int64)
    beats, lanes = a.shape
    _params(op, lanes, out_bits)
    b = np.zeros_like(a) if b is None else np.asarray(b, dtype=np.int64)
    last = np.ones(beats, bool) if last is None else np.asarray(last, bool)
    for name, arr, shape in (("b", b, a.shape), ("last", last, (beats,))):
        if arr.shape != shape:
            raise ValueError(f"vector lanes: {name}: shape {arr.shape}: must be {shape}, as a's")
    pool = op in (VecOp.MAX_POOL, VecOp.AVG_POOL)
    n_out = int(last.sum()) if pool else beats
    bubbles = np.zeros(0, bool) if bubbles is None else np.asarray(bubbles, bool)
    stalls = np.zeros(0, bool) if stalls is None else np.asarray(stalls, bool)
    dut = VectorLanes(lanes, out_bits, mutation=mutation)
    out = np.zeros((n_out, lanes), np.int64)
    cycles = np.zeros(n_out, np.int64)
    done = {"total": 0}
    limit = beats + len(bubbles) + len(stalls) + 16

    async def bench(ctx):
        ctx.set(dut.cfg, {"op": op, "multiplier": multiplier, "shift": shift,
                          "zero_point": zero_point, "relu": int(relu)})
        sent = got = 0
        for t in range(limit):
            offer = sent < beats and not (t < len(bubbles) and bubbles[t])
            ctx.set(dut.inp.valid, int(offer))
            if offer:
                ctx.set(dut.inp.payload, {"a": [int(v) for v in a[sent]],
                                          "b": [int(v) for v in b[sent]],
                                          "last": int(last[sent])})
            ready = not (t < len(stalls) and stalls[t])
            ctx.set(dut.out.ready, int(ready))
            accepted = offer and ctx.get(dut.inp.ready)
            if ctx.get(dut.out.valid) and ready:
                out[got] = [int(v) for v in ctx.get(dut.out.payload)]
                cycles[got] = t
                got += 1
            await ctx.tick()
            sent += int(bool(accepted))
            if got == n_out:
                done["total"] = t + 1
                return

    sim = Simulator(dut)
    sim.add_clock(CLOCK_PERIOD)
    sim.add_testbench(bench)
    sim.run()
    return LaneRun(out, cycles, done["total"])


def expected(op, a, b=None, last=None, *, multiplier: int = 0, shift: int = 0,
             zero_point: int = 0, relu: bool = False, out_bits: int = 8) -> np.ndarray:
    """What :mod:`hw.vector.functional` computes for the beats :func:`run` takes, rounded to
    the output type: int[results, lanes]. A pooling window is its beats up to ``last``."""
    from hw.vector.rtl.lane import VecOp

    dtype = _DTYPE[out_bits]
    a = np.asarray(a, dtype=np.int64)
    if op is VecOp.REQUANT:
        return F.requantize_fixed(a, multiplier, shift, zero_point, dtype, relu).astype(np.int64)
    if op is VecOp.RELU:
        return F.to_dtype(F.relu(a), dtype).astype(np.int64)
    if op is VecOp.ADD:
        return F.to_dtype(F.binary("add", a, np.asarray(b)), dtype).astype(np.int64)
    last = np.asarray(last, bool)
    ends = np.flatnonzero(last) + 1
    rows = []
    for start, end in zip(np.r_[0, ends[:-1]], ends):
        window = a[start:end][:, None, :]      # (beats, 1, lanes): a 1-high NHWC image
        kind = "max" if op is VecOp.MAX_POOL else "avg"
        pooled = F.pool2d(window[None].transpose(0, 2, 1, 3), kind, (1, end - start))
        rows.append(F.to_dtype(pooled, dtype).reshape(-1))
    return np.array(rows, dtype=np.int64)


def pool_beats(x: np.ndarray, kernel, stride, pads, lanes: int):
    """The beats that pool NHWC ``x`` (one image) with ``kernel``/``stride``/``pads`` (as
    :func:`~hw.vector.functional.pool2d` takes them) on ``lanes`` lanes: ``(a, last)`` with
    ``a`` int[beats, lanes]. Channel blocks outermost, then output pixels row-major, then the
    window's real elements in row-major kernel order; a block narrower than ``lanes`` is padded
    with zeros (lanes whose results are dropped). Results come out as (block, pixel)."""
    x = np.asarray(x, dtype=np.int64)
    _, h, w, c = x.shape
    kh, kw = (kernel, kernel) if np.isscalar(kernel) else kernel
    sh, sw = (stride, stride) if np.isscalar(stride) else stride
    pt, pl, pb, pr = pads
    oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
    a, last = [], []
    for c0 in range(0, c, lanes):
        for oy in range(oh):
            for ox in range(ow):
                taps = [(y, xx) for i in range(kh) for j in range(kw)
                        for y, xx in [(oy * sh - pt + i, ox * sw - pl + j)]
                        if 0 <= y < h and 0 <= xx < w]
                for n, (y, xx) in enumerate(taps):
                    beat = np.zeros(lanes, np.int64)
                    vals = x[0, y, xx, c0:c0 + lanes]
                    beat[:len(vals)] = vals
                    a.append(beat)
                    last.append(n == len(taps) - 1)
    return np.array(a, np.int64).reshape(-1, lanes), np.array(last, bool)


def unblock(out: np.ndarray, oh: int, ow: int, channels: int) -> np.ndarray:
    """The results of :func:`pool_beats`'s beats as an NHWC image (1, oh, ow, channels)."""
    lanes = out.shape[1]
    blocks = out.reshape(-1, oh * ow, lanes)
    return np.concatenate(list(blocks), axis=1)[:, :channels].reshape(1, oh, ow, channels)
