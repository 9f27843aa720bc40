#!/usr/bin/env python3
"""Write ``docs/reference/config.md``: every config field with its type, unit, default and meaning,
generated from the config dataclasses so the reference never drifts from the code.

Types and defaults come from the dataclasses themselves (``dataclasses.fields`` and a default
instance: ``ChipConfig()``, the DRAM preset, the NVDLA presets, the system devices); meanings
come from each class's ``Attributes`` docstring section; units follow the field name (``_mhz``,
``_kib``, ``_ns``, ...) or, where the name does not say, the table :data:`FIELD_UNITS` below.
A field without a meaning or a unit is an error, so a new field cannot land undocumented
(``tests/docs/test_config_reference.py`` runs this with ``--check``).

Use: ``python scripts/gen_config_reference.py`` (writes the page) or ``--check`` (exit 1 when the
committed page differs from what the code gives).
"""

from __future__ import annotations

import argparse
import enum
import inspect
import re
import sys
from dataclasses import MISSING, fields
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from compiler.options import CompileOptions  # noqa: E402
from hw.chip import SRAM_NAMES, ChipConfig  # noqa: E402
from hw.memory.dma import DmaConfig  # noqa: E402
from hw.memory.dram import DRAM_PRESETS, DramConfig  # noqa: E402
from hw.memory.l2 import L2Config  # noqa: E402
from hw.memory.link import HostLinkConfig, HostMemory  # noqa: E402
from hw.memory.noc import NocConfig  # noqa: E402
from hw.memory.sram import SramConfig  # noqa: E402
from hw.nvdla.config import NvdlaConfig, load_nvdla_config, nvdla_preset_names  # noqa: E402
from hw.system.system import DEVICES, Protocol, RooflineDevice  # noqa: E402
from hw.systolic.config import ArrayConfig, Dataflow, Overflow, Precision  # noqa: E402
from hw.vector.config import VectorConfig  # noqa: E402

OUT = ROOT / "docs" / "reference" / "config.md"

_DRAM_TIMING = ("cl", "cwl", "trcd", "trp", "tras", "trrd_s", "trrd_l", "tccd_s", "tccd_l",
                "twtr_s", "twtr_l", "tfaw", "twr", "trtp", "trfc", "trefi", "trcdwr", "trtrs",
                "tppd")

#: Units the field name does not spell out; "-" for counts, names and switches.
FIELD_UNITS: dict[tuple[str, str], str] = {
    **{("DramConfig", k): "tCK (DRAM clock cycles)" for k in _DRAM_TIMING},
    ("DramConfig", "burst_length"): "beats",
    ("DramConfig", "transfers_per_clock"): "beats per tCK",
    ("DramConfig", "columns"): "columns per row",
    ("DramConfig", "queue_depth"): "entries",
    ("DramConfig", "transaction_queue_depth"): "requests",
    ("SramConfig", "buffer_split"): "fraction of capacity",
    ("SramConfig", "ports"): "ports per bank",
    ("DmaConfig", "max_outstanding"): "requests",
    ("ArrayConfig", "rows"): "PEs", ("ArrayConfig", "cols"): "PEs",
    ("ArrayConfig", "sparse_m"): "elements per N:M group",
    ("ArrayConfig", "macs_per_pe"): "MACs per PE per cycle",
    ("NvdlaConfig", "atomic_c"): "channels", ("NvdlaConfig", "atomic_k"): "kernels",
    ("NvdlaConfig", "cbuf_banks"): "banks", ("NvdlaConfig", "cbuf_bank_depth"): "entries per bank",
    ("NvdlaConfig", "dram_max_burst"): "memory atoms", ("NvdlaConfig", "max_batch"): "images",
    ("RooflineDevice", "matrix_efficiency"): "fraction of peak",
    ("RooflineDevice", "mem_efficiency"): "fraction of peak",
    ("RooflineDevice", "matrix_efficiency_curve"): "(GFLOP, fraction) pairs",
    ("RooflineDevice", "vector_efficiency_curve"): "(GFLOP, fraction) pairs",
    ("RooflineDevice", "mem_efficiency_curve"): "(MB, fraction) pairs",
    ("RooflineDevice", "mem_bytes"): "bytes",
    ("Protocol", "bandwidth_factor"): "fraction of link bandwidth",
    ("ChipConfig", "launch_overhead_us"): "µs per op",
    ("ChipConfig", "launch_overhead_by_op"): "µs per op, by op kind",
    ("ChipConfig", "cores"): "cores",
    ("CompileOptions", "stages"): "pipeline stages",
    ("CompileOptions", "fusion"): "true, false, or fusion patterns",
    ("CompileOptions", "act_zeros"): "fraction of activations (0..1), or PATTERN=RATIO,...",
    ("CompileOptions", "weight_format"): "FORMAT or FORMAT:DENSITY (fraction nonzero)",
    ("DramConfig", "model"): "-",
    ("DramConfig", "channel_hash"): "-",
    ("L2Config", "banks"): "banks",
    ("L2Config", "keep_outputs"): "-",
    ("NocConfig", "topology"): "-",
    ("NocConfig", "link_bytes_per_cycle"): "bytes per core cycle per direction",
    ("VectorConfig", "lanes"): "32-bit lanes", ("VectorConfig", "dtype"): "-",
    ("VectorConfig", "pipeline_depth"): "core cycles",
    ("VectorConfig", "reduction_stage_cycles"): "core cycles per tree level",
    ("VectorConfig", "read_bytes_per_cycle"): "bytes per core cycle",
    ("VectorConfig", "write_bytes_per_cycle"): "bytes per core cycle",
    ("VectorConfig", "cost"): "cycles per element per lane, by operation",
    ("VectorConfig", "packing"): "elements per lane, by datatype",
    ("VectorConfig", "ideal"): "-",
}

_SUFFIX_UNITS = (("_mhz", "MHz"), ("_kib", "KiB (1024 B)"), ("_bytes", "bytes"), ("_bits", "bits"),
                 ("_ns", "ns"), ("_cycles", "core cycles"), ("_gbps", "GB/s (1e9 B/s)"),
                 ("_tflops", "TFLOP/s (1e12 FLOP/s)"), ("_throughput", "elements per cycle"))

_ENUMS = {"Dataflow": Dataflow, "Precision": Precision, "Overflow": Overflow,
          "HostMemory": HostMemory}


class ReferenceError(RuntimeError):
    """A config field the reference cannot document (no meaning or no unit)."""


def attribute_docs(cls) -> dict[str, str]:
    """Field meanings from the ``Attributes`` section of ``cls``'s docstring. Entries are
    ``name: text`` or ``a, b: text`` at the section's indent, continued by indented lines."""
    doc = inspect.getdoc(cls) or ""
    m = re.search(r"^Attributes\n-+\n(.*)", doc, re.M | re.S)
    if not m:
        return {}
    out: dict[str, str] = {}
    current: list[str] = []
    text: list[str] = []

    def flush():
        for name in current:
            out[name] = " ".join(" ".join(text).split())

    for line in m.group(1).splitlines():
        head = re.match(r"^([a-z_][\w]*(?:,\s*[a-z_][\w]*)*):\s*(.*)$", line)
        if head:
            flush()
            current = [n.strip() for n in head.group(1).split(",")]
            text = [head.group(2)]
        elif line.startswith(" ") and current:
            text.append(line.strip())
        elif not line.strip():
            continue
        else:
            break
    flush()
    return out


def _type_text(f) -> str:
    t = str(f.type)
    for name, en in _ENUMS.items():
        if name in t:
            return "string: " + " \\| ".join(f"`{m.value}`" for m in en)
    t = t.replace("tuple[str, ...]", "list of strings").replace(" | None", " or unset")
    return t.replace("|", "\\|")


def unit_of(cls, f) -> str:
    key = (cls.__name__, f.name)
    if key in FIELD_UNITS:
        return FIELD_UNITS[key]
    for suffix, unit in _SUFFIX_UNITS:
        if f.name.endswith(suffix):
            return unit
    t = str(f.type)
    if t in ("bool", "str", "str | None") or "tuple[str" in t or any(n in t for n in _ENUMS):
        return "-"
    if t.startswith("int"):
        return "count" if f.name in ("channels", "ranks", "bankgroups", "banks_per_group",
                                     "rows", "banks", "lanes", "generation", "acc_bits") else ""
    return ""


def _value_text(v) -> str:
    if isinstance(v, enum.Enum):
        v = v.value
    if isinstance(v, bool):
        return f"`{'true' if v else 'false'}`"
    if isinstance(v, str):
        return f'`"{v}"`'
    if isinstance(v, tuple) and v and all(isinstance(x, tuple) and len(x) == 2 for x in v):
        return "`{" + ", ".join(f"{k} = {x:g}" for k, x in v) + "}`"   # a TOML inline table
    if isinstance(v, tuple):
        return "`[" + ", ".join(f'"{x}"' for x in v) + "]`"
    if v is None:
        return "unset"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return f"`{v:.1f}`"
    return f"`{v}`"


def _markdown(text: str) -> str:
    """Docstring markup (reStructuredText roles, double backticks) as Markdown."""
    text = re.sub(r":(?:class|func|data|mod|attr|meth):`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def field_rows(cls, defaults=None, skip=()) -> list[str]:
    """Markdown table rows: key, type, unit, default, meaning."""
    docs = attribute_docs(cls)
    rows = ["| key | type | unit | default | meaning |", "|---|---|---|---|---|"]
    for f in fields(cls):
        if f.name in skip or not f.init:
            continue
        meaning = docs.get(f.name)
        if not meaning:
            raise ReferenceError(f"{cls.__module__}.{cls.__name__}.{f.name}: no entry in the "
                                 f"class docstring's Attributes section")
        unit = unit_of(cls, f)
        if not unit:
            raise ReferenceError(f"{cls.__module__}.{cls.__name__}.{f.name}: no unit: add it to "
                                 f"FIELD_UNITS in scripts/gen_config_reference.py")
        if defaults is not None:
            default = _value_text(getattr(defaults, f.name))
        elif f.default is not MISSING:
            default = _value_text(f.default)
        elif f.default_factory is not MISSING:
            default = _value_text(f.default_factory())
        else:
            default = "required"
        meaning = _markdown(meaning).replace("|", "\\|")
        rows.append(f"| `{f.name}` | {_type_text(f)} | {unit} | {default} | {meaning} |")
    return rows


def _preset_table(cls, presets: dict, keys) -> list[str]:
    names = list(presets)
    rows = ["| key | " + " | ".join(f"`{n}`" for n in names) + " |",
            "|---|" + "---|" * len(names)]
    for k in keys:
        rows.append(f"| `{k}` | " + " | ".join(_value_text(getattr(presets[n], k)) for n in names)
                    + " |")
    return rows


def render() -> str:
    chip = ChipConfig()
    out: list[str] = [
        "# Config reference",
        "",
        "<!-- Generated by scripts/gen_config_reference.py from the config dataclasses; do not "
        "edit by hand. -->",
        "",
        "Every field of every config file, with its type, unit and default. This page is "
        "generated from the config dataclasses (`python scripts/gen_config_reference.py`), and a "
        "test fails when it is out of date, so it always matches the code. How to write and "
        "override configs is in [Chip configs](../configs.md); what the fields model is on the "
        "pages each section links to.",
        "",
        "Units: KiB = 1024 bytes, GB/s = 1e9 bytes/s, core cycles = cycles of `chip.clock_mhz`, "
        "tCK = cycles of the DRAM command clock (`dram.tck_ns`). `-` marks names and switches.",
        "",
        "## Chip config files (`npulab run --config FILE`)",
        "",
        "A chip config is a TOML file with the sections below; every key is optional. Any key can "
        "also be set on the command line with `--set SECTION.KEY=VALUE` "
        "([overrides](../configs.md#overrides)).",
        "",
        "### `[chip]`",
        "",
        "Python: `hw.chip.ChipConfig`. The clock and where the network's input and output live.",
        "",
        *field_rows(ChipConfig, chip, skip=("array", "ifmap_sram", "filter_sram", "ofmap_sram",
                                            "dram", "host_link", "dma", "vector", "l2", "noc")),
        "",
        "### `[array]`",
        "",
        "Python: `hw.systolic.config.ArrayConfig`. The systolic array "
        "([systolic array](../systolic.md)).",
        "",
        *field_rows(ArrayConfig, chip.array),
        "",
        "### `[vector]`, `[vector.cost]`, `[vector.packing]`",
        "",
        "Python: `hw.vector.config.VectorConfig`. The vector engine beside the array "
        "([vector engine and fusion](../vector.md), which lists every default's source). "
        "`[vector.cost]` sets some operations' cycles per element per lane and keeps the "
        "defaults for the rest; `[vector.packing]` the elements a 32-bit lane packs per ALU "
        "operation by datatype.",
        "",
        *field_rows(VectorConfig, chip.vector),
        "",
        "### `[sram]`, `[sram.ifmap]`, `[sram.filter]`, `[sram.ofmap]`",
        "",
        "Python: `hw.memory.sram.SramConfig`. Keys in `[sram]` apply to all three scratchpads; "
        "`[sram.NAME]` overrides one ([memory system](../memory.md)). Defaults are the same for "
        "the three except the capacity: "
        + ", ".join(f"{n} {chip.sram(n).capacity_kib:g} KiB" for n in SRAM_NAMES) + ".",
        "",
        *field_rows(SramConfig, chip.ifmap_sram),
        "",
        "### `[dram]`",
        "",
        "Python: `hw.memory.dram.DramConfig`. `preset` picks a device; every other key overrides "
        "one field of it ([DRAM model](../dram.md)). The defaults below are the default chip's "
        f"preset, `{chip.dram.preset}`.",
        "",
        *field_rows(DramConfig, chip.dram),
        "",
        "The shipped presets:",
        "",
        *_preset_table(DramConfig, DRAM_PRESETS,
                       ("channels", "bus_width_bits", "burst_length", "transfers_per_clock",
                        "tck_ns", "cl", "trcd", "trp", "bankgroups", "banks_per_group", "ideal")),
        "",
        "### `[host_link]`",
        "",
        "Python: `hw.memory.link.HostLinkConfig`. The PCIe link to the host "
        "([memory system](../memory.md)).",
        "",
        *field_rows(HostLinkConfig, chip.host_link),
        "",
        "### `[dma]`",
        "",
        "Python: `hw.memory.dma.DmaConfig`. The DMA engine between DRAM/host and the scratchpads.",
        "",
        *field_rows(DmaConfig, chip.dma),
        "",
        "### `[l2]`",
        "",
        "Python: `hw.memory.l2.L2Config`. The L2 the cores share, between their scratchpads and "
        "DRAM; `capacity_kib = 0` (the default) is a chip without one "
        "([many cores](../multicore.md)).",
        "",
        *field_rows(L2Config, chip.l2),
        "",
        "### `[noc]`",
        "",
        "Python: `hw.memory.noc.NocConfig`. The on-chip network between the cores and the L2, "
        "modelled when the chip has more than one core or an L2 ([many cores](../multicore.md)).",
        "",
        *field_rows(NocConfig, chip.noc),
        "",
        "## NVDLA config files (`npulab run --config nv_small`)",
        "",
        "Python: `hw.nvdla.config.NvdlaConfig`, one `[nvdla]` table "
        "([NVDLA](../nvdla.md)). Sizes are in elements of int8 unless the name says bytes. "
        "Fields without a default must be given; the presets' values:",
        "",
        *field_rows(NvdlaConfig),
        "",
    ]
    presets = {n: load_nvdla_config(n) for n in nvdla_preset_names()}
    out += _preset_table(NvdlaConfig, presets, [f.name for f in fields(NvdlaConfig)
                                                if f.name != "name"])
    out += [
        "",
        "## System files (`npulab system --system FILE`)",
        "",
        "A system file has `[system]`, `[topology]` (with `[topology.host]`), `[device]` and "
        "`[[protocol]]` tables; the topology keys and the file format are in "
        "[many chips](../multichip.md). The tables backed by dataclasses:",
        "",
        "### `[device]` (a roofline device)",
        "",
        "Python: `hw.system.system.RooflineDevice`. `kind = \"roofline\"` takes the keys below; "
        "`kind = \"" + "\"`, `\"".join(DEVICES) + "\"` starts from a named device (any key "
        "overrides it); `kind = \"chip\"` with `config = PRESET_OR_PATH` puts an npulab chip on "
        "every rank.",
        "",
        *field_rows(RooflineDevice),
        "",
        "The named devices:",
        "",
        *_preset_table(RooflineDevice, DEVICES, [f.name for f in fields(RooflineDevice)
                                                 if f.name != "name"]),
        "",
        "### `[[protocol]]`",
        "",
        "Python: `hw.system.system.Protocol`. Optional; each protocol replaces the system's "
        "per-message overhead and scales link bandwidth, and a collective takes the fastest.",
        "",
        *field_rows(Protocol),
        "",
        "## Compile options (`npulab run` flags, sweep `[run]` tables)",
        "",
        "Python: `compiler.options.CompileOptions`. How layers are tiled and scheduled "
        "([compiler](../compiler.md), [mapper](../mapper.md)). On the command line they are "
        "`npulab run --conv-lowering`, `--loop-order`, `--no-keep-on-chip`, `--sram-layout`, "
        "`--map` and `--tech` (`objective` is Python and sweep only); in a sweep spec, keys of "
        "`[run]`.",
        "",
        *field_rows(CompileOptions),
        "",
    ]
    return "\n".join(out)


def write_or_check(tool: str, out: Path, render_page, argv=None, doc: str = "") -> int:
    """The command line of a page generator: write ``out`` from ``render_page()``, or with
    ``--check`` exit 1 when the committed page differs (shared by the reference generators)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when the committed page differs from the generated one")
    args = ap.parse_args(argv)
    try:
        text = render_page()
    except ReferenceError as e:
        print(f"{tool}: error: {e}", file=sys.stderr)
        return 2
    if args.check:
        current = out.read_text(encoding="utf-8") if out.exists() else ""
        if current != text:
            print(f"{tool}: {out.relative_to(ROOT)} is out of date: run python scripts/{tool}.py",
                  file=sys.stderr)
            return 1
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


def main(argv=None) -> int:
    return write_or_check("gen_config_reference", OUT, render, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
