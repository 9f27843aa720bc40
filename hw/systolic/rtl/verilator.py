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
   configuration: it drives the top-level ports from the model's stimulus and reads every
   register the Amaranth co-simulation probes, by the member names Verilator gives them. A
   generated Verilator configuration file marks exactly those signals ``public_flat_rd`` (the
   per-signal form of ``--public-flat-rw``, which would keep every intermediate wire of the
   netlist too; on 16x16 that is over twice the C++, five times the build time (3 minutes
   instead of 35 s on 2 cores) and half the simulation speed).
2. ``verilator --cc --exe --build -O3 -j 2`` (C++ at ``-O2``) builds the simulator into a cache
   directory named by a hash of (Verilog, configuration, testbench, build flags, Verilator
   version):
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
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from string import Template

import numpy as np
from amaranth import Shape

from hw.systolic.config import ArrayConfig, Dataflow
from hw.systolic.regmodel import run_gemm, snapshot_layout
from hw.systolic.rtl.array import check_rtl_config
from hw.systolic.rtl.cosim import (
    CaseResult, Mismatch, VerifyReport, random_gemm, register_name, register_table, vcd_name,
)
from hw.systolic.rtl.pe import psum_bits, stream_layout, top_layout, weight_layout

__all__ = [
    "VerilatorError", "VerilatorBuild", "VerilatorReport", "SimRun", "verilator_available",
    "verilator_command", "cache_root", "build_simulator", "run_snapshots", "probe_names",
    "verify_verilator",
]

_MAGIC = 0x3156_4C55_504E  # "NPULV1" (little-endian bytes), first int64 of the input file
_INSTALL_HINT = ("install it with `apt-get install verilator` (Debian/Ubuntu; Verilator 5, "
                 "tested with 5.006) or set NPULAB_VERILATOR to the verilator executable")


class VerilatorError(RuntimeError):
    """Verilator is missing, a build failed or a simulator run failed; the message says which
    (with the tail of the log for failures) and how to fix it."""


# --------------------------------------------------------------------------------------------
# Finding Verilator, the cache
# --------------------------------------------------------------------------------------------

def verilator_command() -> str | None:
    """The verilator executable to use: ``$NPULAB_VERILATOR`` if set (a path or a name on
    PATH), else ``verilator`` on PATH; None when there is none."""
    custom = os.environ.get("NPULAB_VERILATOR")
    if custom:
        found = shutil.which(custom)
        if found:
            return found
        return custom if os.path.isfile(custom) and os.access(custom, os.X_OK) else None
    return shutil.which("verilator")


def verilator_available() -> bool:
    """True when Verilator can be run (see :func:`verilator_command`)."""
    return verilator_command() is not None


def _require_verilator() -> str:
    exe = verilator_command()
    if exe is None:
        custom = os.environ.get("NPULAB_VERILATOR")
        if custom:
            raise VerilatorError(f"NPULAB_VERILATOR = {custom!r} is not an executable: "
                                 f"{_INSTALL_HINT}")
        raise VerilatorError(f"Verilator is not installed (no `verilator` on PATH): {_INSTALL_HINT}")
    return exe


_VERSIONS: dict[str, str] = {}


def _verilator_version(exe: str) -> str:
    if exe not in _VERSIONS:
        try:
            proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
        except OSError as e:
            raise VerilatorError(f"cannot run {exe} --version: {e}: {_INSTALL_HINT}") from None
        if proc.returncode != 0:
            raise VerilatorError(f"{exe} --version failed (exit {proc.returncode}): "
                                 f"{(proc.stdout + proc.stderr).strip()[-500:]}")
        _VERSIONS[exe] = proc.stdout.strip()
    return _VERSIONS[exe]


def cache_root() -> Path:
    """Where built simulators are kept: ``verilator/`` in npulab's user cache
    (:func:`hw.userdirs.user_cache_dir`: ``$NPULAB_CACHE``, else ``$XDG_CACHE_HOME/npulab``,
    else ``~/.cache/npulab``). Each build is a ``<hash>`` directory in it; deleting any of them
    (or all) is safe."""
    from hw.userdirs import user_cache_dir
    return user_cache_dir() / "verilator"


# --------------------------------------------------------------------------------------------
# Verilog: text, ports, Verilator's member names
# --------------------------------------------------------------------------------------------

_VERILOG_CACHE: dict[tuple, str] = {}


def _verilog(cfg: ArrayConfig, deskew: bool, pe_class) -> str:
    """Flattened Verilog of the array (memoized per process: Yosys takes about a second)."""
    from hw.systolic.rtl.synth import verilog_text

    key = (cfg, deskew, pe_class)
    if key not in _VERILOG_CACHE:
        _VERILOG_CACHE[key] = verilog_text(cfg, deskew=deskew, pe_class=pe_class, flatten=True)
    return _VERILOG_CACHE[key]


def _top_name(verilog: str) -> str:
    m = re.search(r"^module\s+([A-Za-z_][A-Za-z0-9_$]*)\s*\(", verilog, re.M)
    if m is None:
        raise VerilatorError("no module declaration in the generated Verilog")
    return m.group(1)


def _ports(verilog: str) -> dict[str, tuple[str, int]]:
    """Top-level ports: name -> (direction, width)."""
    ports = {}
    for m in re.finditer(r"^\s*(input|output)\s+(?:signed\s+)?(?:\[(-?\d+):(-?\d+)\]\s*)?"
                         r"([A-Za-z_][A-Za-z0-9_]*)\s*;", verilog, re.M):
        hi, lo = m.group(2), m.group(3)
        width = abs(int(hi) - int(lo)) + 1 if hi is not None else 1
        ports[m.group(4)] = (m.group(1), width)
    return ports


def _encode(name: str) -> str:
    """Verilator's encoding of a Verilog identifier into a C++ member name (``AstNode::
    encodeName``): letters and digits stay (no leading digit), ``__`` becomes ``___05F``, any
    other character ``__0`` + two lower-case hex digits (``.`` -> ``__02e``, ``$`` -> ``__024``)."""
    out = []
    i = 0
    while i < len(name):
        ch = name[i]
        if (ch.isascii() and ch.isalpha()) or (i > 0 and ch.isascii() and ch.isdigit()):
            out.append(ch)
        elif ch == "_":
            if i + 1 < len(name) and name[i + 1] == "_":
                out.append("___05F")
                i += 1
            else:
                out.append("_")
        else:
            out.append(f"__0{ord(ch):02x}")
        i += 1
    return "".join(out)


def _internal(top: str, name: str) -> str:
    """C++ expression for a flattened internal signal such as ``mesh.pe_0_0.acc``."""
    return f"r->{_encode(top)}__DOT__{_encode(name)}"


# --------------------------------------------------------------------------------------------
# Probes: what is compared, by which name
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Probe:
    column: int  # snapshot column
    name: str  # co-simulation name
    signal: str  # Verilog identifier (flattened)
    lo: int  # first bit of the field
    width: int  # field width
    signed: bool


def _port_layouts(cfg: ArrayConfig) -> dict:
    """The lib.data layout of each PE port that carries several fields."""
    p = cfg.precision.bits
    return {"a_out": stream_layout(p, last=True), "b_out": top_layout(p),
            "x_out": stream_layout(p, last=False), "shadow": weight_layout(p),
            "active": weight_layout(p)}


def _register_probes(cfg: ArrayConfig) -> list[_Probe]:
    """Every register the Amaranth co-simulation compares (:func:`cosim.register_table`), in its
    order and with its names, as bit fields of the flattened Verilog."""
    lay = snapshot_layout(cfg)
    layouts = _port_layouts(cfg)
    probes: list[_Probe] = []
    for i in range(cfg.rows):
        for j in range(cfg.cols):
            for field_name, port, fields in register_table(cfg):
                if fields:  # consecutive fields of a packed port; only a value is signed
                    layout = layouts[port]
                    lo = layout[fields[0]].offset
                    width = sum(Shape.cast(layout[f].shape).width for f in fields)
                    signed = fields == ("value",)
                elif port == "psum_valid":
                    lo, width, signed = 0, 1, False
                else:  # acc, res (acc_bits) or psum (its row's width)
                    width = psum_bits(cfg.precision.bits, cfg.acc_bits, i) if port == "psum" \
                        else cfg.acc_bits
                    lo, signed = 0, True
                probes.append(_Probe(lay[field_name][0] + i * cfg.cols + j,
                                     register_name(i, j, port, fields),
                                     f"mesh.pe_{i}_{j}.{port}", lo, width, signed))
    if cfg.dataflow is Dataflow.OS:
        width = cfg.rows.bit_length()  # Signal(range(rows + 1))
        for j in range(cfg.cols):
            probes.append(_Probe(lay["drain_left"][0] + j, f"mesh.drain_left[{j}]",
                                 f"mesh.drain_left_{j}", 0, width, False))
    return probes


def probe_names(cfg: ArrayConfig) -> list[tuple[int, str]]:
    """(snapshot column, signal name) of every register compared, in comparison order; the
    same list as the Amaranth co-simulation's probes."""
    return [(q.column, q.name) for q in _register_probes(cfg)]


def _port_name(j: int, kind: int, probes: bool) -> str:
    """Name of port check ``kind`` of column j: 0/1 mesh.out valid/value, 2/3 top out."""
    if kind < 2:
        return f"mesh.out[{j}].{'valid' if kind == 0 else 'value'}"
    top = f"out[{j}] (de-skewed)" if probes else f"out[{j}]"
    return f"{top}.{'valid' if kind == 2 else 'value'}"


# --------------------------------------------------------------------------------------------
# The C++ testbench
# --------------------------------------------------------------------------------------------

_TB = Template(r"""// npulab: Verilator testbench for ${top} (generated by hw/systolic/rtl/verilator.py).
// Input file: int64 header [magic, cycles, stim_cols, reg_cols, port_cols, 0, 0, 0], then
// stim (cycles x stim_cols), ports (cycles x port_cols), regs (cycles x reg_cols).
// Output: "CYCLES n", "SIM_NS ns", and on the first difference
// "MISMATCH REG|PORT <cycle> <index> <rtl> <model>".
#include "Vtop.h"
#include "Vtop___024root.h"
#include "verilated.h"
#if VM_TRACE
#include "verilated_vcd_c.h"
#endif
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#ifndef NPULAB_PROBES
#define NPULAB_PROBES 0
#endif

static const int R = ${rows}, C = ${cols}, P = ${bits}, A = ${acc_bits};
static const int STIM_COLS = ${stim_cols};
static const int N_REGS = NPULAB_PROBES ? ${n_regs} : 0;
static const bool OS = ${os};
static const bool DESKEW = ${deskew};
static const bool CHECK_TOP = DESKEW || !NPULAB_PROBES;
static const int DELAY[C] = {${delays}};
static const int EXTRA = ${extra};

struct Probe { const void* p; int kind; int words; int lo; int width; int sgn; };

template <typename T>
static Probe mk(const T& v, int lo, int width, int sgn) {
    return Probe{&v, (int)sizeof(T), 0, lo, width, sgn};
}
template <std::size_t N>
static Probe mk(const VlWide<N>& v, int lo, int width, int sgn) {
    return Probe{v.data(), 0, (int)N, lo, width, sgn};
}

static inline int64_t rd(const Probe& q) {
    uint64_t x;
    switch (q.kind) {
    case 1: x = (uint64_t)(*(const uint8_t*)q.p) >> q.lo; break;
    case 2: x = (uint64_t)(*(const uint16_t*)q.p) >> q.lo; break;
    case 4: x = (uint64_t)(*(const uint32_t*)q.p) >> q.lo; break;
    case 8: x = (*(const uint64_t*)q.p) >> q.lo; break;
    default: {  // VlWide: 32-bit words, least significant first
        const uint32_t* w = (const uint32_t*)q.p;
        int k = q.lo >> 5, b = q.lo & 31;
        x = (uint64_t)w[k];
        if (k + 1 < q.words) x |= (uint64_t)w[k + 1] << 32;
        x >>= b;
        if (b && k + 2 < q.words) x |= (uint64_t)w[k + 2] << (64 - b);
    }
    }
    if (q.width >= 64) return (int64_t)x;
    uint64_t mask = (UINT64_C(1) << q.width) - 1;
    x &= mask;
    if (q.sgn) {
        uint64_t s = UINT64_C(1) << (q.width - 1);
        return (int64_t)((x ^ s) - s);
    }
    return (int64_t)x;
}

static inline uint64_t u(int64_t v, int bits) { return (uint64_t)v & ((UINT64_C(1) << bits) - 1); }

static inline void drive(Vtop* top, const int64_t* s) {
${drive}
}

static void make_probes(Vtop* top, std::vector<Probe>& regs, std::vector<Probe>& ports) {
    (void)top; (void)regs;
#if NPULAB_PROBES
    Vtop___024root* r = top->rootp;
${probes}
${mesh_ports}
#endif
${top_ports}
}

static void report(const char* what, int64_t t, int64_t k, int64_t rtl, int64_t model) {
    std::printf("MISMATCH %s %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n", what, t, k,
                rtl, model);
}

int main(int argc, char** argv) {
    if (argc < 2) { std::fprintf(stderr, "usage: %s INPUT [VCD]\n", argv[0]); return 2; }
    FILE* f = std::fopen(argv[1], "rb");
    if (!f) { std::fprintf(stderr, "cannot open %s\n", argv[1]); return 2; }
    int64_t hdr[8];
    if (std::fread(hdr, sizeof(int64_t), 8, f) != 8 || hdr[0] != INT64_C(${magic})) {
        std::fprintf(stderr, "%s: not an npulab stimulus file\n", argv[1]); return 2;
    }
    const int64_t n = hdr[1], stim_cols = hdr[2], reg_cols = hdr[3], port_cols = hdr[4];
    if (stim_cols != STIM_COLS || (reg_cols != 0 && reg_cols != N_REGS) || port_cols != 2 * C) {
        std::fprintf(stderr, "%s: layout (%" PRId64 ", %" PRId64 ", %" PRId64 ") does not match "
                     "this simulator (%d, %d, %d)\n", argv[1], stim_cols, reg_cols, port_cols,
                     STIM_COLS, N_REGS, 2 * C);
        return 2;
    }
    std::vector<int64_t> stim(n * stim_cols), exp_ports(n * port_cols), exp_regs(n * reg_cols);
    if (std::fread(stim.data(), sizeof(int64_t), stim.size(), f) != stim.size()
        || std::fread(exp_ports.data(), sizeof(int64_t), exp_ports.size(), f) != exp_ports.size()
        || std::fread(exp_regs.data(), sizeof(int64_t), exp_regs.size(), f) != exp_regs.size()) {
        std::fprintf(stderr, "%s: truncated\n", argv[1]); return 2;
    }
    std::fclose(f);
    const bool check_regs = reg_cols != 0;
    std::vector<int64_t> zero(STIM_COLS, 0);

    VerilatedContext* ctx = new VerilatedContext;
#if VM_TRACE
    ctx->traceEverOn(true);
#endif
    Vtop* top = new Vtop{ctx};
    std::vector<Probe> regs, ports;
    make_probes(top, regs, ports);
#if VM_TRACE
    VerilatedVcdC* tfp = nullptr;
    if (argc > 2) {
        tfp = new VerilatedVcdC;
        top->trace(tfp, 99);
        tfp->open(argv[2]);
    }
#define DUMP(time) do { if (tfp) tfp->dump((uint64_t)(time)); } while (0)
#else
#define DUMP(time) do { } while (0)
#endif
    top->rst = 0;
    top->clk = 0;
    int64_t t = 0;
    bool bad = false;
    const int64_t total = n + EXTRA;
    auto t0 = std::chrono::steady_clock::now();
    for (t = 0; t < total && !bad; ++t) {
        drive(top, t < n ? &stim[t * STIM_COLS] : zero.data());
        top->clk = 0;
        top->eval();
        DUMP(t * 10000);
        // Output ports during cycle t (they come from registers), column by column.
        for (int j = 0; j < C && !bad; ++j) {
            if (NPULAB_PROBES && t < n) {
                const int64_t* e = &exp_ports[t * 2 * C];
                int64_t valid = rd(ports[4 * j]), want = e[C + j];
                if (valid != want) { report("PORT", t, 4 * j, valid, want); bad = true; break; }
                if (want || !OS) {
                    int64_t value = rd(ports[4 * j + 1]);
                    if (value != e[j]) { report("PORT", t, 4 * j + 1, value, e[j]); bad = true; break; }
                }
            }
            if (CHECK_TOP) {
                int64_t src = t - DELAY[j];
                if (src >= n) continue;
                const int64_t* e = src >= 0 ? &exp_ports[src * 2 * C] : nullptr;
                int64_t valid = rd(ports[4 * j + 2]), want = e ? e[C + j] : 0;
                if (valid != want) { report("PORT", t, 4 * j + 2, valid, want); bad = true; break; }
                if (e && (want || !OS)) {
                    int64_t value = rd(ports[4 * j + 3]);
                    if (value != e[j]) { report("PORT", t, 4 * j + 3, value, e[j]); bad = true; break; }
                }
            }
        }
        if (bad) break;
        top->clk = 1;
        top->eval();
        DUMP(t * 10000 + 5000);
        if (check_regs && t < n) {
            const int64_t* e = &exp_regs[t * N_REGS];
            for (int k = 0; k < N_REGS; ++k) {
                int64_t got = rd(regs[k]);
                if (got != e[k]) { report("REG", t, k, got, e[k]); bad = true; break; }
            }
        }
    }
    auto t1 = std::chrono::steady_clock::now();
#if VM_TRACE
    if (tfp) { tfp->close(); delete tfp; }
#endif
    top->final();
    std::printf("CYCLES %" PRId64 "\n", t);
    std::printf("SIM_NS %" PRId64 "\n",
                (int64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    delete top;
    delete ctx;
    return 0;
}
""")


def _stim_offset(cfg: ArrayConfig) -> int:
    lay = snapshot_layout(cfg)
    return lay["a_in" if cfg.dataflow is Dataflow.OS else "x_in"][0]


def _testbench(cfg: ArrayConfig, deskew: bool, verilog: str) -> str:
    """The C++ testbench for this configuration (probes compiled in with -DNPULAB_PROBES=1)."""
    top = _top_name(verilog)
    ports = _ports(verilog)
    lay = snapshot_layout(cfg)
    r_, c_, p, a = cfg.rows, cfg.cols, cfg.precision.bits, cfg.acc_bits
    base = _stim_offset(cfg)
    rel = {name: off - base for name, (off, _) in lay.items() if off >= base}

    def port(name: str) -> str:
        if name not in ports:
            raise VerilatorError(f"port {name} is missing from the generated Verilog of {top}")
        return f"top->{_encode(name)}"

    drive = []
    if cfg.dataflow is Dataflow.OS:
        for i in range(r_):
            drive.append(f"    {port(f'a_in__{i}')} = u(s[{rel['a_in'] + i}], {p}) | "
                         f"(u(s[{rel['a_flags_in'] + i}], 3) << {p});")
        for j in range(c_):
            drive.append(f"    {port(f'b_in__{j}')} = u(s[{rel['b_in'] + j}], {p}) | "
                         f"(u(s[{rel['b_valid_in'] + j}], 1) << {p});")
    else:
        for i in range(r_):
            drive.append(f"    {port(f'x_in__{i}')} = u(s[{rel['x_in'] + i}], {p}) | "
                         f"(u(s[{rel['x_flags_in'] + i}], 2) << {p});")
        wr = rel["w_row"]
        drive.append(f"    {port('w_en')} = s[{wr}] >= 0;")
        if "w_row" in ports:  # absent (or zero-width) for a single row
            drive.append(f"    {port('w_row')} = s[{wr}] > 0 ? (uint64_t)s[{wr}] : 0;")
        for j in range(c_):
            drive.append(f"    {port(f'w_in__{j}')} = u(s[{rel['w_in'] + j}], {p}) | "
                         f"(u(s[{rel['w_valid_in'] + j}], 1) << {p});")

    probes = [f"    regs.push_back(mk({_internal(top, q.signal)}, {q.lo}, {q.width}, {int(q.signed)}));"
              for q in _register_probes(cfg)]
    delays = [c_ - 1 - j if deskew else 0 for j in range(c_)]
    return _TB.substitute(
        top=top, rows=r_, cols=c_, bits=p, acc_bits=a,
        stim_cols=sum(n for name, (off, n) in lay.items() if off >= base),
        n_regs=len(probes), os="true" if cfg.dataflow is Dataflow.OS else "false",
        deskew="true" if deskew else "false", delays=", ".join(map(str, delays)),
        extra=max(delays), magic=_MAGIC, drive="\n".join(drive),
        probes="\n".join(probes),
        mesh_ports=_port_lines_probes(top, c_, a),
        top_ports=_port_lines_plain(c_, a, port),
    )


def _port_lines_probes(top: str, cols: int, acc_bits: int) -> str:
    """Probe build: ports[4j..4j+3] = mesh.out[j] valid, value; top out[j] valid, value."""
    lines = []
    for j in range(cols):
        wire = _internal(top, f"mesh.out__{j}")
        out = f"top->{_encode(f'out__{j}')}"
        lines += [f"    ports.push_back(mk({wire}, {acc_bits}, 1, 0));",
                  f"    ports.push_back(mk({wire}, 0, {acc_bits}, 1));",
                  f"    ports.push_back(mk({out}, {acc_bits}, 1, 0));",
                  f"    ports.push_back(mk({out}, 0, {acc_bits}, 1));"]
    return "\n".join(lines)


def _port_lines_plain(cols: int, acc_bits: int, port) -> str:
    """Plain build (no internal access): the mesh entries are placeholders, never read."""
    lines = ["#if !NPULAB_PROBES"]
    for j in range(cols):
        out = port(f"out__{j}")
        lines += [f"    ports.push_back(mk({out}, {acc_bits}, 1, 0));  // placeholder",
                  f"    ports.push_back(mk({out}, 0, {acc_bits}, 1));  // placeholder",
                  f"    ports.push_back(mk({out}, {acc_bits}, 1, 0));",
                  f"    ports.push_back(mk({out}, 0, {acc_bits}, 1));"]
    lines.append("#endif")
    return "\n".join(lines)


def _public_config(cfg: ArrayConfig, verilog: str) -> str:
    """Verilator configuration making exactly the compared signals readable from C++
    (``public_flat_rd``): the probed registers, the top row's ``psum_valid`` wires and the mesh
    output wires. ``--public-flat-rw`` would do it for every signal, and keep the many
    intermediate wires of the flattened netlist apart: a far bigger model (16x16: 2.3x the C++,
    5x the build time, 2x slower simulation). Verilator matches ``-var`` against its encoded
    names (:func:`_encode`)."""
    top = _top_name(verilog)
    signals = dict.fromkeys([q.signal for q in _register_probes(cfg)]
                            + [f"mesh.out__{j}" for j in range(cfg.cols)])
    lines = ["`verilator_config",
             "// npulab: the signals the co-simulation testbench reads (generated)."]
    lines += [f'public_flat_rd -module "{top}" -var "{_encode(name)}"' for name in signals]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------

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


def _jobs() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def _flags(top: str, probes: bool, trace: bool) -> list[str]:
    flags = ["--cc", "--exe", "--build", "-O3", "-j", str(_jobs()), "--top-module", top,
             "--prefix", "Vtop", "-Wno-fatal", "-Wno-lint", "-Wno-style", "--Mdir", "obj",
             "-o", "sim", "-MAKEFLAGS", "OPT_FAST=-O2"]
    if probes:
        flags += ["-CFLAGS", "-DNPULAB_PROBES=1"]
    if trace:
        flags += ["--trace"]
    return flags


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0\1\0")
    return h.hexdigest()[:24]


def _build_in_cache(exe: str, key: str, files: dict[str, str], flags: list[str],
                    product: str, what: str) -> tuple[Path, bool]:
    """Run ``verilator <flags> <files>`` in a private directory of the cache and rename it to
    ``<cache>/<key>``; returns (directory, built now). Reuses the directory when ``product``
    (a path inside it) exists. A failed build leaves ``<key>.failed.log`` and raises."""
    root = cache_root()
    final = root / key
    if (final / product).is_file():
        return final, False
    try:
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f"{key}.tmp-", dir=root))
    except OSError as e:
        raise VerilatorError(f"cannot create the Verilator cache directory {root}: {e} "
                             f"(set NPULAB_CACHE to a writable directory)") from None
    try:
        for name, text in files.items():
            (work / name).write_text(text)
        cmd = [exe, *flags, *files]
        (work / "command.txt").write_text(" ".join(cmd) + "\n")
        try:
            proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
        except OSError as e:
            raise VerilatorError(f"cannot run {exe}: {e}: {_INSTALL_HINT}") from None
        log = proc.stdout + proc.stderr
        (work / "build.log").write_text(log)
        if proc.returncode != 0 or not (work / product).is_file():
            failed = root / f"{key}.failed.log"
            failed.write_text(" ".join(cmd) + "\n\n" + log)
            raise VerilatorError(f"Verilator build of {what} failed (exit {proc.returncode}); "
                                 f"full log: {failed}\n{_tail(log)}")
        try:
            os.rename(work, final)
        except OSError:  # another process finished the same build first: use theirs
            if not (final / product).is_file():
                raise VerilatorError(f"cannot move the Verilator build {work} to {final}") from None
        else:
            work = None
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    return final, True


_RT_VERILOG = """// npulab: a trivial design whose build leaves Verilator's runtime objects behind.
module npulab_rt(input clk, output reg q /*verilator public_flat_rd*/);
  initial q = 1'b0;
  always @(posedge clk) q <= ~q;
endmodule
"""

_RT_MAIN = """#include "Vtop.h"
#include "verilated.h"
int main() {
    VerilatedContext ctx;
    Vtop top{&ctx};
    top.clk = 0; top.eval(); top.clk = 1; top.eval(); top.final();
    return top.q == 1 ? 0 : 1;
}
"""


def _runtime_objects(exe: str) -> list[Path]:
    """Verilator's runtime library (``verilated*.o``), compiled once per Verilator version and
    C++ compiler and kept in the cache: about two thirds of a small design's build time. It is
    compiled by Verilator's own makefile (a trivial design built with the same options), so its
    compiler flags are exactly those of a normal ``--build``."""
    flags = _flags("npulab_rt", probes=False, trace=False)
    compiler = os.environ.get("CXX", "") + "\0" + str(shutil.which("g++"))
    key = "runtime-" + _digest(_RT_VERILOG, _RT_MAIN, "\0".join(flags),
                               _verilator_version(exe), compiler)
    directory, _ = _build_in_cache(exe, key, {"rt.v": _RT_VERILOG, "main.cpp": _RT_MAIN},
                                   flags, "obj/sim", "Verilator's runtime library")
    objects = sorted((directory / "obj").glob("verilated*.o"))
    if not objects:
        raise VerilatorError(f"no verilated*.o in {directory / 'obj'}: delete that directory")
    return objects


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
