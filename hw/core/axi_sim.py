"""An AXI4 slave memory for Amaranth testbenches, with a protocol checker.

:class:`AxiMemory` answers an AXI4 master (the signature of :func:`hw.core.rtl.axi.axi4_signature`)
from a numpy byte array, one :meth:`AxiMemory.step` per cycle, with a fixed latency from an
accepted address to its first data beat or response, and ``ready`` / ``valid`` held low at
random (seeded) so every handshake is tried both ways. ``latency`` counts from the address
handshake: the first read beat can come ``latency + 1`` cycles after it (and a write
response ``latency + 1`` cycles after the burst's last data beat). It checks what the
specification (ARM IHI 0022H) asks of the master and raises :class:`AxiProtocolError` with
the cycle and the rule: a ``valid`` does not depend on its ``ready`` and is held, with its
whole payload unchanged, until its ``ready`` (A3.2.1); a burst is INCR, of the full bus
width, and does not cross 4 KB (A3.4.1); ``wlast`` marks exactly each burst's final beat,
checked as each beat arrives (A3.4.1); at the end (:meth:`AxiMemory.check_idle`) nothing is
left half done. With ``wait_for_both`` the slave takes a write address only with its data
and data only with an address, as the specification allows (A3.3.1): a master that waits
for ``awready`` before ``wvalid`` then never finishes. A read beat that starts past the memory's end, and
a write burst that strobes a byte past it, answer ``SLVERR`` (``resp = 2``) and change
nothing; a read beat's bytes past the end read as zero.
"""

from __future__ import annotations

from collections import deque

import numpy as np

__all__ = ["AxiMemory", "AxiProtocolError"]

OKAY, SLVERR = 0, 2


class AxiProtocolError(AssertionError):
    """The master broke an AXI4 rule."""


class AxiMemory:
    """A slave on ``port`` (an AXI4 master's interface) over ``memory`` (uint8, changed in
    place). ``latency``: cycles from an accepted address (or a burst's last write beat) to its
    first read beat (or write response); ``stall``: the chance that a ready or a valid the
    slave could give is held low in a cycle; ``seed``: of those choices."""

    def __init__(self, port, memory: np.ndarray, data_bytes: int, *, latency: int = 2,
                 stall: float = 0.0, seed: int = 0, wait_for_both: bool = False):
        if not 0.0 <= stall < 1.0:
            raise ValueError(f"AxiMemory: stall = {stall!r}: allowed is 0 <= stall < 1")
        if latency < 0:
            raise ValueError(f"AxiMemory: latency = {latency!r}: allowed is >= 0")
        self.port, self.mem, self.w = port, memory, data_bytes
        self.latency, self.stall, self.wait_for_both = latency, stall, wait_for_both
        self.rng = np.random.default_rng(seed)
        self.t = 0
        self.reads: deque = deque()      # [due, addr, beats left] of accepted read bursts
        self.writes: deque = deque()     # [addr, beats] of accepted write addresses
        self.beats: deque = deque()      # (data, strb, last) of accepted write beats
        self.resps: deque = deque()      # [due, resp] of write responses
        self.r_on = self.b_on = False    # a valid given last cycle and not taken
        self.prev: dict = {}
        self.log: list[tuple[str, int, int]] = []   # (kind, address, beats) of every burst
        self.errors = 0

    @property
    def bursts(self) -> dict[str, int]:
        """How many read and write bursts the slave has taken."""
        return {kind: sum(x[0] == kind for x in self.log) for kind in ("read", "write")}

    def _go(self) -> bool:
        return self.stall == 0.0 or self.rng.random() >= self.stall

    def _fail(self, rule: str):
        raise AxiProtocolError(f"AXI4 master, cycle {self.t}: {rule}")

    def _payload(self, ctx, ch, names) -> tuple:
        return tuple(ctx.get(getattr(ch, n)) for n in names)

    def _check_burst(self, kind: str, addr: int, length: int, size: int, burst: int):
        if burst != 1:
            self._fail(f"{kind} burst type {burst}: this slave takes INCR (1)")
        if 1 << size != self.w:
            self._fail(f"{kind} size {size} (2**size bytes) on a {self.w}-byte bus")
        last = addr - addr % self.w + (length + 1) * self.w - 1
        if addr // 4096 != last // 4096:
            self._fail(f"{kind} burst at {addr:#x} of {length + 1} beats crosses a 4 KB boundary")

    def _beat_range(self, addr: int) -> tuple[int, bool]:
        """A read beat's first byte, and whether it starts inside the memory (bytes past
        the end read as zero)."""
        base = addr - addr % self.w
        return base, 0 <= base < len(self.mem)

    def step(self, ctx) -> None:
        """Drive the slave's side for this cycle and take what the master gives; call once per
        cycle before ``await ctx.tick()``."""
        p, w = self.port, self.w
        # the master's held valids: the same payload until taken
        now = self._sample(ctx)
        for ch, (valid, payload) in now.items():
            held = self.prev.get(ch)
            if held is not None and (not valid or payload != held):
                self._fail(f"{ch}valid dropped or its payload changed before {ch}ready")
        ready = {ch: self._go() for ch in ("ar", "aw", "w")}
        if self.wait_for_both:
            queued = sum(n for _, n in self.writes)
            ready["aw"] &= bool(now["w"][0]) or len(self.beats) > queued
            ready["w"] &= bool(now["aw"][0]) or queued > len(self.beats)
        for ch in ready:
            ctx.set(getattr(p, ch).ready, ready[ch])
        if self._sample(ctx) != now:
            self._fail("a valid or its payload changed with ready: a valid must not "
                       "depend on its ready")
        # read data: the burst at the head, from its due cycle
        r_valid = False
        if self.reads and self.reads[0][0] <= self.t and (self.r_on or self._go()):
            _, addr, left = self.reads[0]
            base, inside = self._beat_range(addr)
            word = self.mem[base:base + w].tobytes().ljust(w, b"\0") if inside else bytes(w)
            ctx.set(p.r.data, int.from_bytes(word, "little"))
            ctx.set(p.r.resp, OKAY if inside else SLVERR)
            ctx.set(p.r.last, left == 1)
            r_valid = True
        ctx.set(p.r.valid, r_valid)
        b_valid = bool(self.resps) and self.resps[0][0] <= self.t and (self.b_on or self._go())
        ctx.set(p.b.valid, b_valid)
        if b_valid:
            ctx.set(p.b.resp, self.resps[0][1])
        # handshakes
        if r_valid and ctx.get(p.r.ready):
            burst = self.reads[0]
            self.errors += not self._beat_range(burst[1])[1]
            burst[1] = burst[1] - burst[1] % w + w
            burst[2] -= 1
            if burst[2] == 0:
                self.reads.popleft()
            self.r_on = False
        else:
            self.r_on = r_valid
        if b_valid and ctx.get(p.b.ready):
            self.resps.popleft()
            self.b_on = False
        else:
            self.b_on = b_valid
        self.prev = {}
        for ch, (valid, payload) in now.items():
            if valid and ready[ch]:
                if ch == "ar":
                    addr, length, size, burst = payload[:4]
                    self._check_burst("read", addr, length, size, burst)
                    self.reads.append([self.t + 1 + self.latency, addr, length + 1])
                    self.log.append(("read", addr, length + 1))
                elif ch == "aw":
                    addr, length, size, burst = payload[:4]
                    self._check_burst("write", addr, length, size, burst)
                    self.writes.append([addr, length + 1])
                    self.log.append(("write", addr, length + 1))
                else:
                    self.beats.append(payload)
            elif valid:
                self.prev[ch] = payload
        self._retire_writes()
        self.t += 1

    def _sample(self, ctx) -> dict:
        p = self.port
        names = ("addr", "len", "size", "burst", "id", "lock", "cache", "prot", "qos")
        return {"ar": (ctx.get(p.ar.valid), self._payload(ctx, p.ar, names)),
                "aw": (ctx.get(p.aw.valid), self._payload(ctx, p.aw, names)),
                "w": (ctx.get(p.w.valid), self._payload(ctx, p.w, ("data", "strb", "last")))}

    def check_idle(self) -> None:
        """At the end of a run: every burst answered and taken, no data beat without its
        address, no valid left waiting."""
        left = {"read bursts not finished": len(self.reads),
                "write addresses without all their data": len(self.writes),
                "write data beats without an address": len(self.beats),
                "write responses not taken": len(self.resps),
                "valids still waiting for ready": len(self.prev)}
        if any(left.values()):
            self._fail("the run ended with " + ", ".join(
                f"{n} {what}" for what, n in left.items() if n))

    def _retire_writes(self) -> None:
        """Check the head write burst's beats so far; apply every write burst whose address
        and beats have all arrived."""
        w = self.w
        if self.writes:
            n = self.writes[0][1]
            for i, (_, _, last) in enumerate(list(self.beats)[:n]):
                if bool(last) != (i == n - 1):
                    self._fail(f"wlast {'set' if last else 'clear'} on beat {i + 1} of a "
                               f"{n}-beat write burst")
        while self.writes and len(self.beats) >= self.writes[0][1]:
            addr, n = self.writes.popleft()
            beats = [self.beats.popleft() for _ in range(n)]
            base = addr - addr % w
            lanes = [np.array([(strb >> b) & 1 for b in range(w)], bool) for _, strb, _ in beats]
            where = [base + i * w + np.flatnonzero(on) for i, on in enumerate(lanes)]
            inside = base >= 0 and all(at.size == 0 or at[-1] < len(self.mem) for at in where)
            if inside:
                for (data, _, _), on, at in zip(beats, lanes, where):
                    word = np.frombuffer(int(data).to_bytes(w, "little"), np.uint8)
                    self.mem[at] = word[on]
            else:
                self.errors += 1
            self.resps.append([self.t + 1 + self.latency, OKAY if inside else SLVERR])
