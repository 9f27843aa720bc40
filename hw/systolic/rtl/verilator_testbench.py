"""The C++ testbench and Verilator configuration that compare one array with the register model.

:func:`_testbench` fills the template ``verilator_testbench.cpp`` (package data beside this
module; ``${name}`` placeholders, :class:`string.Template` syntax) for one configuration: it
drives the top-level ports from the model's stimulus and reads every register the Amaranth
co-simulation probes (:func:`probe_names`), by the C++ member names Verilator gives them
(:func:`_encode`). :func:`_public_config` makes exactly those signals readable. The input file
the testbench reads starts with :data:`_MAGIC`; its layout is in the template's first lines.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from string import Template

from amaranth import Shape

from hw.systolic.config import ArrayConfig, Dataflow
from hw.systolic.regmodel import snapshot_layout
from hw.systolic.rtl.cosim import register_name, register_table
from hw.systolic.rtl.pe import psum_bits, stream_layout, top_layout, weight_layout
from hw.systolic.rtl.verilator_build import VerilatorError

__all__ = ["probe_names"]

_MAGIC = 0x3156_4C55_504E  # "NPULV1" (little-endian bytes), first int64 of the input file
_TEMPLATE_FILE = "verilator_testbench.cpp"  # package data of hw.systolic.rtl


@functools.cache
def _template() -> Template:
    """The testbench template, read once, when the first testbench is generated."""
    return Template(resources.files("hw.systolic.rtl").joinpath(_TEMPLATE_FILE).read_text())


# --------------------------------------------------------------------------------------------
# Verilog: ports, Verilator's member names
# --------------------------------------------------------------------------------------------

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

def _stim_offset(cfg: ArrayConfig) -> int:
    lay = snapshot_layout(cfg)
    return lay["a_in" if cfg.dataflow is Dataflow.OS else "x_in"][0]


def _testbench(cfg: ArrayConfig, deskew: bool, verilog: str) -> str:
    """The C++ testbench for this configuration (probes compiled in with -DNPULAB_PROBES=1)."""
    return _template().substitute(_testbench_fields(cfg, deskew, verilog))


def _testbench_fields(cfg: ArrayConfig, deskew: bool, verilog: str) -> dict:
    """The value of every placeholder of the template for this configuration."""
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
    return dict(
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
