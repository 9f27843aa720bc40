"""Co-simulation with Verilator: the flattened Verilog of the array against the register-level model.

:func:`verify_verilator` has exactly the semantics of :func:`hw.systolic.rtl.cosim.verify`
(the same random GEMMs from the same seed, the same comparison rules, the same
:class:`~hw.systolic.rtl.cosim.Mismatch` names), but simulates the Verilog that
:func:`hw.systolic.rtl.synth.verilog_text` writes (``flatten=True``) with Verilator instead of
Amaranth's Python simulator. It is the same hardware description one step further down the
flow (Amaranth -> RTLIL -> Yosys -> Verilog), and much faster on large arrays.

How it works
------------
1. The Verilog is generated (Yosys, about a second) and a C++ testbench is generated for the
   configuration (:mod:`~hw.systolic.rtl.verilator_testbench` fills the template
   ``verilator_testbench.cpp``): it drives the top-level ports from the model's stimulus and
   reads every register the Amaranth co-simulation probes, by the member names Verilator gives
   them. A generated Verilator configuration file marks exactly those signals
   ``public_flat_rd`` (the per-signal form of ``--public-flat-rw``, which would keep every
   intermediate wire of the netlist too; on 16x16 that is over twice the C++, five times the
   build time (3 minutes instead of 35 s on 2 cores) and half the simulation speed).
2. ``verilator --cc --exe --build -O3 -j 2`` (C++ at ``-O2``; Verilator and its cache:
   :mod:`~hw.systolic.rtl.verilator_build`) builds the simulator into a cache directory named
   by a hash of (Verilog, configuration, testbench, build flags, Verilator version):
   ``$NPULAB_CACHE/verilator/<hash>`` or ``~/.cache/npulab/verilator/<hash>``. Later calls with
   the same design reuse it (no build). Verilator's runtime library (``verilated*.o``) is
   compiled once into the cache too and linked into every design (most of a small design's
   build time). Builds happen in a private directory that is renamed into place, so
   concurrent processes never see half a build.
3. Per GEMM, the model runs with ``snapshots=True``; its stimulus, the expected register values
   (one int64 per probe per cycle, in probe order) and the expected output ports are written to
   a binary file (a 64-byte header of int64s, then the three raw int64 arrays). The simulator
   replays the stimulus one cycle at a time and stops at the first difference, printing
   ``MISMATCH REG|PORT <cycle> <index> <rtl> <model>``; Python maps the index back to the
   co-simulation's signal name. The binary also reports its own simulation time (the cycle
   loop only: no process start, file reading or model construction).
4. On a mismatch with ``vcd_dir``, a second simulator built with ``--trace`` replays the case
   and writes ``<dataflow>_<R>x<C>_<precision>_case<i>.vcd`` (the co-simulation's name); the
   clock period in the waveform is 10 ns, as in the Amaranth waveforms. No GTKWave save file
   is written (the Amaranth co-simulation writes one).

Comparison rules (identical to :func:`hw.systolic.rtl.cosim._simulate`)
-------------------------------------------------------------------------
Per cycle t: the stimulus of cycle t is applied and the combinational logic settles; then, for
each column j in order, the mesh output port ``mesh.out[j]`` (valid first; the value only while
valid in OS, always in WS/IS) and, with de-skew, the top-level ``out[j] (de-skewed)`` against
the model's port of cycle ``t - (C-1-j)`` (must be idle before that exists). Then the clock
edge, then every register in :func:`hw.systolic.rtl.cosim._probes` order; the first difference
ends the case. With de-skew the run continues ``C-1`` cycles past the model's last cycle (zero
stimulus) so the delayed ports can be checked. Values are compared as the model records them:
signed registers are sign-extended from their width (WS/IS ``psum`` registers of upper rows are
narrower than ``acc_bits``), flag bits are packed ``valid | first << 1 | last << 2``.

Every register the Amaranth co-simulation compares is compared here too, every cycle, read from
the Verilated model: OS ``a_out``, ``b_out``, ``acc``, ``res`` of every PE and the drain
counters ``mesh.drain_left_<j>``; WS/IS ``x_out``, ``shadow``, ``active``, ``psum`` and
``psum_valid`` of every PE. The top row's ``psum_valid`` is not a register in the RTL (it is
the ``valid`` bit of the PE's ``x_out`` register, see :class:`~hw.systolic.rtl.pe.StationaryPE`);
as in the Amaranth co-simulation, its signal (a wire, made public like the registers) is read
after the edge. Output ports are read as wires too (``mesh.out__<j>``) and as top-level ports.
Nothing the Amaranth co-simulation compares is left out.

Timing: :class:`VerilatorReport` carries ``build_seconds`` (Verilog generation, testbench
generation and any Verilator builds), ``sim_seconds`` (the simulators' cycle loops only),
``run_seconds`` (wall time of the simulator processes) and ``model_seconds`` (the register
model producing the snapshots); :meth:`VerilatorReport.timings` returns them as a dict.

For benchmarks, :func:`build_simulator` with ``probes=False`` builds a plain simulator (no
public signals, so Verilator optimizes freely) whose testbench only drives the inputs and
checks the top-level output ports every cycle; :func:`run_snapshots` runs either kind.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hw.systolic.config import ArrayConfig, ConfigError
from hw.systolic.regmodel import run_gemm, snapshot_layout
from hw.systolic.rtl.array import check_rtl_config
from hw.systolic.rtl.cosim import CaseResult, Mismatch, VerifyReport, random_gemm, vcd_name
from hw.systolic.rtl.verilator_build import (
    VerilatorError, _build_in_cache, _digest, _flags, _require_verilator, _runtime_objects, _tail,
    _verilator_version, cache_root, verilator_available, verilator_command,
)
from hw.systolic.rtl.verilator_testbench import (
    _MAGIC, _port_name, _public_config, _register_probes, _stim_offset, _testbench, _top_name,
    probe_names,
)

__all__ = [
    "VerilatorError", "VerilatorBuild", "VerilatorReport", "SimRun", "verilator_available",
    "verilator_command", "cache_root", "build_simulator", "run_snapshots", "probe_names",
    "verify_verilator",
]


# --------------------------------------------------------------------------------------------
# Building the array's simulator
# --------------------------------------------------------------------------------------------

_VERILOG_CACHE: dict[tuple, str] = {}


def _check_dense(cfg: ArrayConfig, where: str) -> None:
    """The Verilator testbench drives one integer operand per PE lane: dense, one-MAC PEs of
    int4, int8 or int16."""
    if cfg.sparse_m:
        raise ConfigError(f"{where}: sparse_m = {cfg.sparse_m}: the Verilator testbench drives "
                          f"dense PEs; co-simulate the N:M sparse PEs in Amaranth "
                          f"(npulab rtl verify --sim amaranth)")
    if cfg.macs_per_pe > 1:
        raise ConfigError(f"{where}: macs_per_pe = {cfg.macs_per_pe}: the Verilator testbench "
                          f"drives one operand per PE lane; co-simulate multi-MAC PEs in "
                          f"Amaranth (npulab rtl verify --sim amaranth)")
    if cfg.precision.bits == 1:
        raise ConfigError(f"{where}: precision = 'binary': the Verilator testbench drives "
                          f"two's-complement operands; co-simulate binary PEs in Amaranth "
                          f"(npulab rtl verify --sim amaranth)")


def _verilog(cfg: ArrayConfig, deskew: bool, pe_class) -> str:
    """Flattened Verilog of the array (memoized per process: Yosys takes about a second)."""
    from hw.systolic.rtl.synth import verilog_text

    key = (cfg, deskew, pe_class)
    if key not in _VERILOG_CACHE:
        _VERILOG_CACHE[key] = verilog_text(cfg, deskew=deskew, pe_class=pe_class, flatten=True)
    return _VERILOG_CACHE[key]


@dataclass(frozen=True)
class VerilatorBuild:
    """A built simulator for one design and testbench.

    ``binary`` is the executable; ``probes`` says whether it compares every register (those
    signals made public) or only the top-level output ports; ``trace`` whether it can write a
    VCD (built with ``--trace``). ``cached`` is True when an earlier build was reused, and
    ``build_seconds`` is the time this call spent in Verilator and the C++ compiler (0 when
    cached); ``verilog_seconds`` the time spent generating the Verilog (Yosys)."""

    cfg: ArrayConfig
    deskew: bool
    probes: bool
    trace: bool
    key: str
    directory: Path
    binary: Path
    cached: bool
    build_seconds: float
    verilog_seconds: float


def build_simulator(cfg: ArrayConfig, *, deskew: bool = False, pe_class=None, probes: bool = True,
                    trace: bool = False) -> VerilatorBuild:
    """Build (or reuse from :func:`cache_root`) the Verilator simulator of the array.

    ``probes=True``: the testbench compares every register and port (those signals public);
    ``probes=False``: only the top-level output ports (Verilator optimizes the whole design).
    ``trace=True`` adds ``--trace`` (VCD output). The design is built with ``verilator --cc
    --exe --build -O3 -j 2`` (C++ at ``-O2``), linked against Verilator's runtime objects from
    the cache (compiled once, see :func:`_runtime_objects`); should that fail, a complete
    standalone build is tried. Trace builds (only needed for waveforms of failing cases) are
    always standalone. Raises :class:`VerilatorError` when Verilator is missing or the
    build fails (with the tail of the build log).
    """
    check_rtl_config(cfg, "verilator")
    _check_dense(cfg, "verilator")
    exe = _require_verilator()
    t0 = time.perf_counter()
    verilog = _verilog(cfg, deskew, pe_class)
    tb = _testbench(cfg, deskew, verilog)
    verilog_seconds = time.perf_counter() - t0
    top = _top_name(verilog)
    flags = _flags(top, probes, trace)
    version = _verilator_version(exe)
    files = {"design.v": verilog, "tb.cpp": tb}
    if probes:
        files = {"public.vlt": _public_config(cfg, verilog), **files}
    common = dict(cfg=cfg, deskew=deskew, probes=probes, trace=trace)
    # A complete standalone build, if one exists, is as good as a linked one.
    key = _digest(*files.values(), "\0".join(flags), version)
    if (cache_root() / key / "obj" / "sim").is_file():
        d = cache_root() / key
        return VerilatorBuild(key=key, directory=d, binary=d / "obj" / "sim", cached=True,
                              build_seconds=0.0, verilog_seconds=verilog_seconds, **common)
    t1 = time.perf_counter()
    if trace:  # rare (waveforms of failing cases): a standalone build is quicker than two
        directory, built = _build_in_cache(exe, key, files, flags, "obj/sim", top)
        return VerilatorBuild(key=key, directory=directory, binary=directory / "obj" / "sim",
                              cached=not built,
                              build_seconds=time.perf_counter() - t1 if built else 0.0,
                              verilog_seconds=verilog_seconds, **common)
    try:
        runtime = _runtime_objects(exe)
        linked = flags + ["-MAKEFLAGS", "VK_GLOBAL_OBJS="]
        for obj in runtime:
            linked += ["-LDFLAGS", str(obj)]
        lkey = _digest(*files.values(), "\0".join(linked), version)
        directory, built = _build_in_cache(exe, lkey, files, linked, "obj/sim", top)
        key = lkey
    except VerilatorError as linked_error:
        # Linking the cached runtime is an optimization: fall back to a standalone build, and
        # report its failure (the plain `verilator --build` of the design) if it fails too.
        try:
            directory, built = _build_in_cache(exe, key, files, flags, "obj/sim", top)
        except VerilatorError as e:
            raise e from linked_error
    return VerilatorBuild(key=key, directory=directory, binary=directory / "obj" / "sim",
                          cached=not built,
                          build_seconds=time.perf_counter() - t1 if built else 0.0,
                          verilog_seconds=verilog_seconds, **common)


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SimRun:
    """One replay of a model run through a built simulator."""

    cycles: int  # clock edges simulated: the model's cycles (+ C-1 with de-skew) unless stopped
    mismatch: Mismatch | None
    sim_seconds: float  # the simulator's cycle loop only
    wall_seconds: float  # the whole process: start, file reading, model construction, loop


def _input_arrays(build: VerilatorBuild, snaps: np.ndarray):
    cfg = build.cfg
    lay = snapshot_layout(cfg)
    snaps = np.asarray(snaps, np.int64)
    if snaps.ndim != 2 or snaps.shape[1] != sum(n for _, n in lay.values()):
        raise ValueError(f"snapshots of shape {snaps.shape} do not match {cfg}")
    stim = np.ascontiguousarray(snaps[:, _stim_offset(cfg):])
    o_out = lay["out"][0]
    ports = np.ascontiguousarray(snaps[:, o_out:o_out + 2 * cfg.cols])
    if build.probes:
        columns = np.array([q.column for q in _register_probes(cfg)], np.int64)
        regs = np.ascontiguousarray(snaps[:, columns])
    else:
        regs = np.zeros((snaps.shape[0], 0), np.int64)
    return stim, ports, regs


def _write_input(path: Path, stim, ports, regs) -> None:
    header = np.array([_MAGIC, stim.shape[0], stim.shape[1], regs.shape[1], ports.shape[1],
                       0, 0, 0], np.int64)
    with open(path, "wb") as f:
        for arr in (header, stim, ports, regs):
            f.write(np.ascontiguousarray(arr, "<i8").tobytes())


def run_snapshots(build: VerilatorBuild, snaps: np.ndarray, *,
                  vcd_path: str | os.PathLike | None = None) -> SimRun:
    """Replay a model run (``run_gemm(..., snapshots=True).snapshots``) through ``build`` and
    return the first mismatch (None when every compared signal agrees every cycle) and the
    timings. ``vcd_path`` needs a ``trace=True`` build."""
    if vcd_path is not None and not build.trace:
        raise ValueError("run_snapshots: vcd_path needs a simulator built with trace=True")
    stim, ports, regs = _input_arrays(build, snaps)
    names = [q.name for q in _register_probes(build.cfg)] if build.probes else []
    with tempfile.TemporaryDirectory(prefix="npulab-vl-") as tmp:
        inp = Path(tmp) / "input.bin"
        _write_input(inp, stim, ports, regs)
        cmd = [str(build.binary), str(inp)]
        if vcd_path is not None:
            vcd_path = Path(vcd_path)
            vcd_path.parent.mkdir(parents=True, exist_ok=True)
            cmd.append(str(vcd_path))
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            raise VerilatorError(f"cannot run the Verilator simulator {build.binary}: {e} "
                                 f"(delete {build.directory} to rebuild it)") from None
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise VerilatorError(f"the Verilator simulator {build.binary} failed (exit "
                             f"{proc.returncode}):\n{_tail(proc.stdout + proc.stderr)}")
    cycles = sim_ns = None
    mismatch = None
    for line in proc.stdout.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "CYCLES":
            cycles = int(words[1])
        elif words[0] == "SIM_NS":
            sim_ns = int(words[1])
        elif words[0] == "MISMATCH":
            kind, t, k, rtl, model = words[1], int(words[2]), int(words[3]), int(words[4]), int(words[5])
            name = names[k] if kind == "REG" else _port_name(k // 4, k % 4, build.probes)
            mismatch = Mismatch(t, name, rtl, model)
    if cycles is None or sim_ns is None:
        raise VerilatorError(f"unexpected output from {build.binary}:\n{_tail(proc.stdout + proc.stderr)}")
    return SimRun(cycles, mismatch, sim_ns * 1e-9, wall)


# --------------------------------------------------------------------------------------------
# Verification
# --------------------------------------------------------------------------------------------

@dataclass
class VerilatorReport(VerifyReport):
    """A :class:`~hw.systolic.rtl.cosim.VerifyReport` with Verilator's timings (seconds):
    ``build_seconds`` (Verilog + testbench generation and Verilator builds, ~0.1-1 s when the
    simulator is cached), ``sim_seconds`` (the simulators' cycle loops only), ``run_seconds``
    (wall time of the simulator processes: start, file reading, loop), ``model_seconds`` (the
    register-level model producing the snapshots); ``cached`` is True when no build was needed."""

    build_seconds: float = 0.0
    sim_seconds: float = 0.0
    run_seconds: float = 0.0
    model_seconds: float = 0.0
    cached: bool = True

    def timings(self) -> dict[str, float]:
        """The timings as a dict (``build``, ``simulation``, ``run``, ``model`` seconds)."""
        return {"build": self.build_seconds, "simulation": self.sim_seconds,
                "run": self.run_seconds, "model": self.model_seconds}

    def summary(self) -> str:
        built = "cached simulator" if self.cached else f"build {self.build_seconds:.1f} s"
        return (super().summary() + f" [Verilator: {built}, simulation "
                f"{self.sim_seconds:.3f} s]")


def verify_verilator(cfg: ArrayConfig, *, cases: int = 10, seed: int = 0, deskew: bool = False,
                     mutation: str | None = None, vcd_dir: str | os.PathLike | None = None,
                     progress=None) -> VerilatorReport:
    """Co-simulate ``cases`` random GEMMs on the Verilated array against the register model.

    The same cases, rules and signal names as :func:`hw.systolic.rtl.cosim.verify` (see the
    module docstring); never raises on a mismatch, reports it. ``mutation`` names a broken PE
    (:data:`hw.systolic.rtl.mutations.MUTATIONS`); ``vcd_dir`` gets a VCD of each failing case
    (from a ``--trace`` build); ``progress(done, total)`` is called after each case. Raises
    :class:`VerilatorError` when Verilator is missing or a build fails.
    """
    from hw.systolic.rtl.mutations import pe_class_for

    check_rtl_config(cfg, "verify_verilator")
    _check_dense(cfg, "verify_verilator")
    pe_class = pe_class_for(cfg, mutation)
    _require_verilator()
    report = VerilatorReport(cfg, deskew, mutation)
    t0 = time.perf_counter()
    build = build_simulator(cfg, deskew=deskew, pe_class=pe_class, probes=True)
    report.build_seconds += time.perf_counter() - t0
    report.cached = build.cached
    trace_build = None
    rng = np.random.default_rng(seed)
    for index in range(cases):
        a, b = random_gemm(rng, cfg)
        t0 = time.perf_counter()
        model = run_gemm(cfg, a, b, snapshots=True)
        report.model_seconds += time.perf_counter() - t0
        snaps = model.snapshots  # for IS: of the transposed problem, which the hardware runs
        run = run_snapshots(build, snaps)
        report.sim_seconds += run.sim_seconds
        report.run_seconds += run.wall_seconds
        mismatch = run.mismatch
        if mismatch is not None and vcd_dir is not None:
            if trace_build is None:
                t0 = time.perf_counter()
                trace_build = build_simulator(cfg, deskew=deskew, pe_class=pe_class,
                                              probes=True, trace=True)
                report.build_seconds += time.perf_counter() - t0
                report.cached = report.cached and trace_build.cached
            vcd = Path(vcd_dir) / vcd_name(cfg, index)
            traced = run_snapshots(trace_build, snaps, vcd_path=vcd)
            if traced.mismatch != mismatch:
                raise VerilatorError(f"the traced re-run of case {index} disagrees with the "
                                     f"first run: {traced.mismatch} vs {mismatch}")
            mismatch = dataclasses.replace(mismatch, vcd=str(vcd))
        report.cases.append(CaseResult(index, (a.shape[0], a.shape[1], a.shape[2], b.shape[2]),
                                       int(model.counters.cycles), mismatch))
        if progress is not None:
            progress(index + 1, cases)
    return report
