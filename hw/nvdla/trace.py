"""Replay NVIDIA's NVDLA trace tests: a register program, input surfaces, CRC checks.

A trace is a folder ``<name>/`` with ``<name>.cfg`` (the program) and ``.dat`` input surfaces
(NVIDIA nvdla/hw ``verif/tests/trace_tests``; format in ``shared/reference/nvdla.md``). The
``.cfg`` language, one command per line, ``//`` comments:

=================================================  ================================================
``mem_init(MEM, ADDR, SIZE, PATTERN);``            fill memory (``ALL_ZERO``, ``ALL_ONE``, ``RANDOM``)
``mem_load(MEM, ADDR, "file.dat");``               load a ``.dat`` file's packets at ``ADDR``
``reg_write(NVDLA_UNIT.REG_0, VALUE);``            CSB write (:class:`~hw.nvdla.regfile.RegisterFile`)
``reg_read_check(NVDLA_UNIT.REG_0, VALUE);``       CSB read that must return ``VALUE``
``poll_reg_equal(NVDLA_UNIT.REG_0, VALUE);``       wait until the register reads ``VALUE``
``intr_notify(UNIT_GROUP, SYNC_ID);``              wait for the unit's done interrupt, then fire
                                                   ``SYNC_ID`` (``SDP_0``: SDP, group 0)
``check_crc(SYNC_ID, MEM, ADDR, SIZE, CRC);``      after ``SYNC_ID``: CRC-32 of the memory range
``check_nothing(SYNC_ID);``                        after ``SYNC_ID``: no data check
=================================================  ================================================

``MEM`` is ``pri_mem`` (or ``1`` in ``check_crc``), the primary memory; ``cv_sram`` (``2``) is
accepted for programs that use the CV-SRAM, which nv_small does not have.
Every statement ends with ``;``. Addresses and sizes are checked when the trace is read
(:func:`hw.nvdla.memimage.region_problem`: 64-bit addresses, at most ``MAX_REGION`` bytes per
``mem_init`` or ``check_crc``).

The player (:func:`play`) executes commands in order. Writing ``D_OP_ENABLE = 1`` may complete
a *hardware layer*; a layer starts when every unit it needs has its consumer register group
enabled, exactly as the hardware waits for them:

* convolution: CDMA, CSC, CMAC_A, CMAC_B, CACC and SDP (``FLYING_MODE = ON``), plus SDP_RDMA when
  an SDP operand DMA is on, plus PDP when the SDP's ``OUTPUT_DST = PDP``
  (:func:`hw.nvdla.conv_unit.run_conv`);
* SDP from memory: SDP (``FLYING_MODE = OFF``) and SDP_RDMA (+ PDP on the fly)
  (:func:`hw.nvdla.sdp_unit.run_sdp`);
* PDP from memory: PDP (``OFF_FLYING``) and PDP_RDMA (:func:`hw.nvdla.pdp_unit.run_pdp`);
* CDP: CDP and CDP_RDMA (:func:`hw.nvdla.cdp_unit.run_cdp`).

The layer runs to completion at once (functional model): its units' groups complete, their
done interrupts are raised in ``GLB.S_INTR_STATUS``, and the cycle model
(:mod:`hw.nvdla.cycles`) estimates how long it took on the configuration (``nv_small``).
``intr_notify`` then finds the interrupt set (and clears it, as NVIDIA's test bench does);
a program that waits for an interrupt that never comes, polls a register that never changes,
or leaves an enabled layer unable to start fails with a message saying what it waited for.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hw.files import read_text
from hw.nvdla.memimage import INIT_PATTERNS, MemoryImageError, SparseMemory, region_problem
from hw.nvdla.regfile import INTERRUPT_UNITS, RegisterError, RegisterFile, register_map

__all__ = ["TraceError", "Command", "Trace", "load_trace", "find_traces", "default_trace_dir",
           "CheckResult", "TraceResult", "play", "COMMANDS"]

#: commands of the .cfg language and their argument counts
COMMANDS = {"mem_init": 4, "mem_load": 3, "reg_write": 2, "reg_read_check": 2,
            "poll_reg_equal": 2, "intr_notify": 2, "check_crc": 5, "check_nothing": 1}
_MEMS = {"pri_mem": "pri_mem", "1": "pri_mem", "cv_sram": "cv_sram", "2": "cv_sram"}
_STMT = re.compile(r"^(\w+)\s*\((.*)\)\s*(;?)\s*$")
_REG = re.compile(r"^NVDLA_(\w+?)\.(\w+)_0$")


class TraceError(ValueError):
    """A trace that cannot be read or played; the message names the file, line and command."""


@dataclass(frozen=True)
class Command:
    op: str
    args: tuple
    line: int
    text: str


@dataclass
class Trace:
    name: str
    folder: Path
    cfg: Path
    commands: list


def default_trace_dir(checkout: Path | None = None) -> Path:
    """``$NPULAB_NVDLA_TRACES`` if set, else ``shared/nvdla/traces`` next to ``checkout`` (the
    team's shared data beside a checkout; default: the working directory, i.e.
    ``../shared/nvdla/traces``)."""
    env = os.environ.get("NPULAB_NVDLA_TRACES")
    if env:
        return Path(env)
    return (Path(checkout).parent if checkout else Path("..")) / "shared" / "nvdla" / "traces"


def _split_args(text: str) -> list[str]:
    args, cur, quoted = [], "", False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip() or args:
        args.append(cur.strip())
    return args


def _int(cfg, line, text, what) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise TraceError(f"{cfg}:{line}: {what} {text!r} is not an integer (decimal or 0x hex)") \
            from None


def _reg(cfg, line, text) -> str:
    m = _REG.match(text)
    if not m:
        raise TraceError(f"{cfg}:{line}: register {text!r}: write it as NVDLA_<UNIT>.<REG>_0, "
                         f"e.g. NVDLA_SDP.D_OP_ENABLE_0")
    return f"{m[1]}.{m[2]}"


def _mem(cfg, line, text) -> str:
    if text not in _MEMS:
        raise TraceError(f"{cfg}:{line}: memory {text!r}: must be pri_mem (or 1) or cv_sram "
                         f"(or 2)")
    return _MEMS[text]


def _region(cfg, line, op, addr, size=None) -> None:
    """A command's memory range must fit the memory model (:func:`memimage.region_problem`)."""
    why = region_problem(addr, size)
    if why:
        raise TraceError(f"{cfg}:{line}: {op} {why}")


def _parse(cfg: Path, line: int, stmt: str) -> Command:
    m = _STMT.match(stmt)
    if not m:
        raise TraceError(f"{cfg}:{line}: {stmt!r}: expected 'command(arguments);'")
    if not m[3]:
        raise TraceError(f"{cfg}:{line}: {stmt!r}: missing ';' at the end of the statement "
                         f"(expected 'command(arguments);')")
    op, args = m[1], _split_args(m[2])
    if op not in COMMANDS:
        raise TraceError(f"{cfg}:{line}: unknown command {op!r}; the trace language has "
                         f"{', '.join(COMMANDS)}")
    if len(args) != COMMANDS[op]:
        raise TraceError(f"{cfg}:{line}: {op} takes {COMMANDS[op]} arguments, {len(args)} given")
    if op == "mem_init":
        if args[3] not in INIT_PATTERNS:
            raise TraceError(f"{cfg}:{line}: mem_init pattern {args[3]!r}: must be one of "
                             f"{', '.join(INIT_PATTERNS)}")
        a = (_mem(cfg, line, args[0]), _int(cfg, line, args[1], "address"),
             _int(cfg, line, args[2], "size"), args[3])
        _region(cfg, line, op, a[1], a[2])
    elif op == "mem_load":
        if not (len(args[2]) >= 2 and args[2][0] == args[2][-1] == '"'):
            raise TraceError(f"{cfg}:{line}: mem_load file {args[2]!r}: must be a quoted name")
        a = (_mem(cfg, line, args[0]), _int(cfg, line, args[1], "address"), args[2][1:-1])
        _region(cfg, line, op, a[1])
    elif op in ("reg_write", "reg_read_check", "poll_reg_equal"):
        key = _reg(cfg, line, args[0])
        try:
            register_map()[key]
        except RegisterError as e:
            raise TraceError(f"{cfg}:{line}: {e}") from None
        a = (key, _int(cfg, line, args[1], "value"))
    elif op == "intr_notify":
        m2 = re.fullmatch(r"(\w+)_([01])", args[0])
        if not m2 or m2[1] not in INTERRUPT_UNITS:
            raise TraceError(f"{cfg}:{line}: interrupt {args[0]!r}: must be <UNIT>_<GROUP> with "
                             f"UNIT one of {', '.join(INTERRUPT_UNITS)} and GROUP 0 or 1")
        a = ((m2[1], int(m2[2])), args[1])
    elif op == "check_crc":
        a = (args[0], _mem(cfg, line, args[1]), _int(cfg, line, args[2], "address"),
             _int(cfg, line, args[3], "size"), _int(cfg, line, args[4], "crc"))
        _region(cfg, line, op, a[2], a[3])
    else:
        a = (args[0],)
    return Command(op, a, line, stmt)


def load_trace(path) -> Trace:
    """Parse a trace folder (``<name>/<name>.cfg``) or a ``.cfg`` file."""
    path = Path(path)
    if path.is_dir():
        cfgs = sorted(path.glob("*.cfg"))
        want = path / f"{path.name}.cfg"
        cfg = want if want.is_file() else (cfgs[0] if len(cfgs) == 1 else None)
        if cfg is None:
            raise TraceError(f"{path}: a trace folder holds <name>.cfg; found "
                             f"{len(cfgs)} .cfg files")
    elif path.suffix == ".cfg" and path.is_file():
        cfg = path
    else:
        raise TraceError(f"{path}: not a trace folder or .cfg file")
    commands = []
    for i, raw in enumerate(read_text(cfg, "trace .cfg", error=TraceError).splitlines(), 1):
        stmt = raw.split("//")[0].strip()
        if stmt:
            commands.append(_parse(cfg, i, stmt))
    if not commands:
        raise TraceError(f"{cfg}: no commands")
    return Trace(cfg.stem, cfg.parent, cfg, commands)


def find_traces(paths) -> list[Path]:
    """Trace folders under ``paths``: a path that is a trace (holds ``<name>.cfg``) or a
    ``.cfg`` file is itself; otherwise every trace folder below it, sorted by name."""
    found = []
    for p in map(Path, paths):
        if not p.exists():
            raise TraceError(f"{p}: no such file or folder")
        if p.is_file() or (p / f"{p.name}.cfg").is_file():
            found.append(p)
            continue
        sub = sorted({c.parent for c in p.rglob("*.cfg") if c.stem == c.parent.name})
        if not sub:
            raise TraceError(f"{p}: no trace folders (<name>/<name>.cfg) below it")
        found += sub
    return found


# ------------------------------------------------------------------------------------ results
@dataclass
class CheckResult:
    op: str                  # "check_crc" or "check_nothing"
    sync: str
    line: int
    passed: bool
    expected: int | None = None
    got: int | None = None
    message: str = ""
    addr: int | None = None          # check_crc: the checked memory range
    size: int | None = None


@dataclass
class TraceResult:
    name: str
    folder: Path
    checks: list = field(default_factory=list)
    layers: list = field(default_factory=list)
    error: str | None = None
    memory: SparseMemory | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.checks) and all(c.passed for c in self.checks)

    def line(self) -> str:
        """``PASS name`` or ``FAIL name: reason`` (the CLI's line)."""
        if self.passed:
            return f"PASS {self.name}"
        if self.error:
            return f"FAIL {self.name}: {self.error}"
        if not self.checks:
            return f"FAIL {self.name}: the trace has no check_crc or check_nothing"
        bad = next(c for c in self.checks if not c.passed)
        if bad.op == "check_crc" and bad.got is not None:
            return f"FAIL {self.name}: expected crc {bad.expected:#010x} got {bad.got:#010x}"
        return f"FAIL {self.name}: {bad.message}"


# ------------------------------------------------------------------------------------ player
class _Player:
    def __init__(self, trace: Trace, cfg):
        self.trace = trace
        self.cfg = cfg
        self.rf = RegisterFile()
        self.mems = {"pri_mem": SparseMemory("pri_mem"), "cv_sram": SparseMemory("cv_sram")}
        self.syncs: dict[str, str | None] = {}       # sync id -> None (fired) or why not
        self.result = TraceResult(trace.name, trace.folder, memory=self.mems["pri_mem"])

    def where(self, c: Command) -> str:
        return f"{self.trace.cfg.name}:{c.line}"

    def run(self) -> TraceResult:
        try:
            for c in self.trace.commands:
                getattr(self, f"_{c.op}")(c)
            self._check_idle()
        except (TraceError, RegisterError, MemoryImageError) as e:
            self.result.error = str(e)
        except ValueError as e:          # a unit rejected its registers (named in the message)
            self.result.error = f"{e}"
        return self.result

    # --------------------------------------------------------------- commands
    def _mem_init(self, c):
        mem, addr, size, pattern = c.args
        self.mems[mem].fill(addr, size, pattern)

    def _mem_load(self, c):
        mem, addr, name = c.args
        path = self.trace.folder / name
        if not path.is_file():
            raise TraceError(f"{self.where(c)}: mem_load file {name!r} is not in "
                             f"{self.trace.folder}")
        self.mems[mem].load_dat(addr, path)

    def _reg_write(self, c):
        key, value = c.args
        reg = self.rf.write(key, value)
        if reg.name == "D_OP_ENABLE" and value & 1:
            self._launch()

    def _reg_read_check(self, c):
        key, want = c.args
        got = self.rf.read(key)
        if got != want:
            raise TraceError(f"{self.where(c)}: reg_read_check {key} read {got:#x}, the trace "
                             f"expects {want:#x}")

    def _poll_reg_equal(self, c):
        key, want = c.args
        got = self.rf.read(key)
        if got != want:
            raise TraceError(f"{self.where(c)}: poll_reg_equal({key}, {want:#x}) waits forever: "
                             f"the register reads {got:#x} and no running layer will change it")

    def _intr_notify(self, c):
        (prefix, group), sync = c.args
        if self.rf.interrupt_set(prefix, group):
            lsb = self.rf.map["GLB.S_INTR_STATUS"].field(f"{prefix}_DONE_STATUS{group}").lsb
            self.rf.write("GLB.S_INTR_STATUS", 1 << lsb)          # the handler clears it
            self.syncs[sync] = None
        else:
            self.syncs[sync] = (f"{sync} never fired: {self.where(c)} waits for the "
                                f"{prefix}_{group} done interrupt, but no {prefix} layer of "
                                f"register group {group} completed")

    def _check_crc(self, c):
        sync, mem, addr, size, want = c.args
        why = self._sync(c, sync)
        if why:
            self.result.checks.append(CheckResult(c.op, sync, c.line, False, want, None, why,
                                                  addr, size))
            return
        got = self.mems[mem].crc32(addr, size)
        self.result.checks.append(CheckResult(c.op, sync, c.line, got == want, want, got,
                                              "" if got == want else
                                              f"expected crc {want:#010x} got {got:#010x}",
                                              addr, size))

    def _check_nothing(self, c):
        (sync,) = c.args
        why = self._sync(c, sync)
        self.result.checks.append(CheckResult(c.op, sync, c.line, not why, message=why or ""))

    def _sync(self, c, sync) -> str:
        if sync not in self.syncs:
            return f"{self.where(c)}: {sync} was never set up by an intr_notify"
        return self.syncs[sync] or ""

    # --------------------------------------------------------------- layers
    def _launch(self):
        while True:
            v = self.rf.view()
            layer = self._ready_layer(v)
            if layer is None:
                return
            kind, units, interrupts, to_pdp = layer
            self._run(kind, v, to_pdp)
            for unit in units:
                self.rf.complete(unit, interrupts.get(unit, ()))

    def _ready_layer(self, v):
        rf = self.rf
        sdp_rdma_used = any(v.enum(f"SDP_RDMA.D_{d}RDMA_CFG", f"{d}RDMA_DISABLE") == "NO"
                            for d in "BNE")
        to_pdp = v.enum("SDP.D_FEATURE_MODE_CFG", "OUTPUT_DST") == "PDP"
        sdp_flying = v.enum("SDP.D_FEATURE_MODE_CFG", "FLYING_MODE") == "ON"
        pdp_ready = rf.ready("PDP") and \
            v.enum("PDP.D_OPERATION_MODE_CFG", "FLYING_MODE") == "ON_FLYING"
        conv_units = ("CDMA", "CSC", "CMAC_A", "CMAC_B", "CACC")
        if rf.ready("CDMA") and rf.ready("SDP") and sdp_flying:
            need = list(conv_units) + ["SDP"] + (["SDP_RDMA"] if sdp_rdma_used else []) + \
                (["PDP"] if to_pdp else [])
            if all(rf.ready(u) for u in need) and (not to_pdp or pdp_ready):
                intr = {"CDMA": ("CDMA_DAT", "CDMA_WT"), "CACC": ("CACC",), "SDP": ("SDP",),
                        "PDP": ("PDP",)}
                return "conv", need, intr, to_pdp
        if rf.ready("SDP") and not sdp_flying and rf.ready("SDP_RDMA") and \
                (not to_pdp or pdp_ready):
            need = ["SDP", "SDP_RDMA"] + (["PDP"] if to_pdp else [])
            return "sdp", need, {"SDP": ("SDP",), "PDP": ("PDP",)}, to_pdp
        if rf.ready("PDP") and rf.ready("PDP_RDMA") and \
                v.enum("PDP.D_OPERATION_MODE_CFG", "FLYING_MODE") == "OFF_FLYING":
            return "pdp", ["PDP", "PDP_RDMA"], {"PDP": ("PDP",)}, False
        if rf.ready("CDP") and rf.ready("CDP_RDMA"):
            return "cdp", ["CDP", "CDP_RDMA"], {"CDP": ("CDP",)}, False
        return None

    def _run(self, kind, v, to_pdp) -> None:
        mem = self.mems["pri_mem"]
        if kind == "conv":
            from hw.nvdla.conv_unit import run_conv
            runs = [run_conv(v, mem)]
        elif kind == "sdp":
            from hw.nvdla.sdp_unit import run_sdp
            runs = [run_sdp(v, mem)]
        elif kind == "pdp":
            from hw.nvdla.pdp_unit import run_pdp
            runs = [run_pdp(v, mem)]
        else:
            from hw.nvdla.cdp_unit import run_cdp
            runs = [run_cdp(v, mem)]
        if to_pdp:
            from hw.nvdla.pdp_unit import run_pdp
            runs.append(run_pdp(v, mem, flying=runs[0].out))
        for r in runs:
            r.regs = v
            r.cycles = _estimate_cycles(self.cfg, r, v)
            self.result.layers.append(r)

    def _check_idle(self):
        stuck = [u for u in sorted(self.rf.consumer) if self.rf.ready(u)]
        if stuck:
            raise TraceError(f"{self.trace.cfg.name}: the program ends with {', '.join(stuck)} "
                             f"enabled but its layer never started (a unit it needs was not "
                             f"enabled)")


def _estimate_cycles(cfg, run, v) -> int | None:
    """The cycle model's estimate of one layer (hw.nvdla.cycles)."""
    from hw.nvdla.cycles import engine_cycles
    out = run.out
    n_out = int(out.size)
    nb = out.dtype.itemsize
    if run.unit == "conv":
        if run.cycle_layer is None:
            return None
        from hw.nvdla.cycles import conv_cycles
        return conv_cycles(cfg, run.cycle_layer).total
    if run.unit == "pdp":
        h, w, c = (v.field(f"PDP.D_DATA_CUBE_IN_{d}", f"CUBE_IN_{d}") + 1
                   for d in ("HEIGHT", "WIDTH", "CHANNEL"))
        from_mem = v.enum("PDP.D_OPERATION_MODE_CFG", "FLYING_MODE") == "OFF_FLYING"
        return engine_cycles(cfg, "pdp", h * w * c, n_out, h * w * c * nb if from_mem else 0,
                             n_out * nb).total
    if run.unit == "cdp":
        return engine_cycles(cfg, "cdp", n_out, n_out, n_out * nb, n_out * nb).total
    if run.unit == "sdp":
        kind = "sdp_ew" if run.detail.get("ew") else "sdp"
        read = int(run.detail.get("read_bytes", n_out * nb))
        return engine_cycles(cfg, kind, n_out, n_out, read, n_out * nb).total
    return None


def play(trace, cfg=None) -> TraceResult:
    """Play a trace (a :class:`Trace` or a path) on ``cfg`` (default the ``nv_small`` preset)
    and return its :class:`TraceResult`. Parse errors raise :class:`TraceError`; problems while
    playing (a register a unit rejects, a wait that never ends) are the result's ``error``."""
    if not isinstance(trace, Trace):
        trace = load_trace(trace)
    if cfg is None:
        from hw.nvdla.config import load_nvdla_config
        cfg = load_nvdla_config("nv_small")
    return _Player(trace, cfg).run()


def dump(result: TraceResult, folder) -> list[Path]:
    """Write what a user needs to see which elements differ: per layer ``layerN_<unit>_out.npy``
    (the produced output cube, H x W x C) and ``layerN_<unit>_ref.npy`` (the numpy reference),
    ``layerN_<unit>_diff.txt`` (the differing positions), and per ``check_crc`` the checked
    memory range as ``crc_<line>.bin``. Returns the files written."""
    folder = Path(folder) / result.name
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for i, run in enumerate(result.layers):
        stem = folder / f"layer{i}_{run.unit}"
        np.save(f"{stem}_out.npy", run.out)
        np.save(f"{stem}_ref.npy", run.reference)
        lines = [f"{run.unit} layer {i}: output {run.out.shape} written at {run.out_base:#x}",
                 f"detail: {', '.join(f'{k}={v}' for k, v in run.detail.items())}",
                 f"cycles (model): {run.cycles}",
                 f"elements differing from the numpy reference: {run.mismatches}"]
        if run.out.shape == run.reference.shape and run.mismatches:
            diff = np.argwhere(run.out.astype(np.int64) != run.reference.astype(np.int64))
            lines.append("first differences (h, w, c): out vs reference")
            for pos in diff[:50]:
                t = tuple(int(p) for p in pos)
                lines.append(f"  {t}: {int(run.out[t])} vs {int(run.reference[t])}")
        Path(f"{stem}_diff.txt").write_text("\n".join(lines) + "\n")
        written += [Path(f"{stem}_out.npy"), Path(f"{stem}_ref.npy"), Path(f"{stem}_diff.txt")]
    for c in result.checks:
        if c.op == "check_crc" and result.memory is not None:
            p = folder / f"crc_{c.line}_{c.addr:#x}.bin"
            p.write_bytes(result.memory.read(c.addr, c.size).tobytes())
            written.append(p)
    return written
