"""The core's command words, its geometry on a chip, and a lowered program's form.

:mod:`compiler.backends.core` lowers a compiled :class:`~hw.program.Program` into a
:class:`CoreProgram` (its docstring has the whole story: per-engine queues, wait counts,
scratchpad halves); :mod:`hw.core.rtl` runs it, :mod:`hw.core.timing` states its cycles.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hw.chip import ChipConfig
from hw.program import Engine, Program
from hw.systolic.config import Precision

__all__ = ["CoreError", "CoreGeometry", "CoreProgram", "FIELDS", "SIGNED", "SPADS",
           "Op", "VOP", "core_chip", "geometry", "empty_program", "check_word", "DEFAULT_QUANT",
           "MAX_POOL_WINDOW"]


class CoreError(ValueError):
    """A program or chip the core cannot run (one line: what, where, what is allowed)."""


#: Scratchpads, in the order of the command field ``spad``.
SPADS = ("ifmap", "filter", "ofmap")


class Op:
    """Command opcodes (the ``op`` field)."""
    LOAD = 0
    STORE = 1
    COMPUTE = 2
    VECTOR = 3


#: Vector operations (the ``vop`` field), numbered as :class:`hw.vector.rtl.lane.VecOp`.
VOP = {"requant": 0, "relu": 1, "add": 2, "maxpool": 3, "avgpool": 4}

#: The command word: field -> bits, in order (all unsigned but :data:`SIGNED`).
FIELDS = {
    "op": 2, "wait0": 16, "wait1": 16, "wait2": 16, "wait3": 16,
    # transfers: the DRAM box and the scratchpad side
    "dram_addr": 32, "n2": 16, "stride2": 32, "n1": 16, "stride1": 32, "chunk": 16,
    "spad": 2, "half": 1,
    # vector: operation, halves, elements (element-wise) or the pooling window walk
    "vop": 3, "src_half": 1, "b_half": 1, "dst_half": 1, "elems": 20,
    "in_h": 12, "in_w": 12, "top": 12, "r0": 12, "rows": 12, "out_w": 12,
    "kh": 5, "kw": 5, "sh": 5, "sw": 5, "pad_t": 5, "pad_l": 5, "blocks": 8,
    "multiplier": 31, "shift": 6, "zero_point": 8, "relu": 1, "src": 2,
    # compute: a tile of m x k times k x n into the accumulators (acc: add to partial sums)
    "m": 16, "n": 16, "k": 16, "a_half": 1, "c_half": 1, "acc": 1,
}
SIGNED = frozenset({"shift", "zero_point"})
_ENGINES = len(Engine)


@dataclass(frozen=True)
class CoreGeometry:
    """The core's sizes on a chip: scratchpad row bytes (one access per cycle) and rows per
    half, vector lanes, DMA setup cycles."""

    row_bytes: tuple[int, int, int]
    half_rows: tuple[int, int, int]
    lanes: int
    setup: int
    array: object = None          # the chip's ArrayConfig


@dataclass
class CoreProgram:
    """The command queues of one program: ``queues[engine]`` lists command words (dicts of
    :data:`FIELDS`), ``index[engine]`` the program index of each; ``program`` is the program
    with the dependencies the physical buffers add (``added``: ``(command, dependency)``)."""

    program: Program | None
    geometry: CoreGeometry
    queues: list[list[dict]]
    index: list[list[int]]
    added: list[tuple[int, int]] = field(default_factory=list)

    def words(self, engine: int) -> list[dict]:
        return self.queues[engine]


def core_chip(lanes: int = 8, kib: float = 1.0, setup: int = 4,
              overrides=()) -> ChipConfig:
    """A chip the core can be: an ``lanes x lanes`` WS int8 array, ``lanes`` vector lanes,
    ifmap and filter rows of ``lanes`` bytes (one bank), ofmap rows of ``4 x lanes`` bytes
    (four banks: a row of int32 accumulators), ``kib`` KiB per scratchpad, ideal DRAM with
    the model's input and output in it, ``setup`` DMA descriptor cycles; then ``overrides``
    (``--set`` style)."""
    from hw.configfile import load_chip_config

    return load_chip_config(None, [
        f"array.rows={lanes}", f"array.cols={lanes}", f"vector.lanes={lanes}",
        "dram.preset=ideal", "chip.model_input=dram", "chip.model_output=dram",
        f"dma.descriptor_setup_cycles={setup}", "chip.name=npulab-core",
        *(f"sram.{s}.capacity_kib={kib}" for s in SPADS), "sram.banks=1",
        f"sram.bank_width_bytes={lanes}", "sram.ofmap.banks=4", *overrides])


def _fail(msg: str):
    raise CoreError(msg)


def geometry(chip: ChipConfig) -> CoreGeometry:
    """The core's sizes on ``chip``; a :class:`CoreError` for a chip the core cannot be."""
    name = chip.name
    checks = [
        (not chip.multicore, "chip.cores", chip.cores, "1 and no [l2]"),
        (chip.dram.is_ideal, "dram.ideal", chip.dram.is_ideal, "true (dram.preset = 'ideal')"),
        (chip.model_input == "dram", "chip.model_input", chip.model_input, "'dram'"),
        (chip.model_output == "dram", "chip.model_output", chip.model_output, "'dram'"),
        (chip.array.precision is Precision.INT8, "array.precision", chip.array.precision.value,
         "'int8'"),
        (chip.array.acc_bits == 32, "array.acc_bits", chip.array.acc_bits, "32"),
        (not chip.vector.ideal, "vector.ideal", chip.vector.ideal, "false"),
        (chip.dma.descriptor_setup_cycles >= 2, "dma.descriptor_setup_cycles",
         chip.dma.descriptor_setup_cycles, ">= 2"),
    ]
    for name_ in SPADS:
        s = chip.sram(name_)
        checks.append((s.double_buffer, f"sram.{name_}.double_buffer", s.double_buffer, "true"))
        checks.append((s.ports == 1, f"sram.{name_}.ports", s.ports, "1"))
    for ok, key, value, allowed in checks:
        if not ok:
            _fail(f"chip {name!r}: {key} = {value!r}: the RTL core needs {allowed}")
    rows = tuple(chip.sram(n).bytes_per_cycle for n in SPADS)
    lanes = chip.vector.lanes
    if rows[0] != lanes or rows[1] != lanes:
        _fail(f"chip {name!r}: vector.lanes = {lanes}: the RTL core needs one int8 per lane per "
              f"ifmap and filter row ({rows[0]} and {rows[1]} bytes)")
    if rows[2] < lanes:
        _fail(f"chip {name!r}: sram.ofmap rows of {rows[2]} bytes: the RTL core needs at least "
              f"vector.lanes = {lanes}")
    halves = tuple(chip.sram(n).tile_capacity_bytes // r for n, r in zip(SPADS, rows))
    return CoreGeometry(rows, halves, lanes, chip.dma.descriptor_setup_cycles, chip.array)


def check_word(word: dict, where: str) -> None:
    """A :class:`CoreError` when a field of ``word`` does not fit its bits."""
    for key, bits in FIELDS.items():
        value = word[key]
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if key in SIGNED else (0, (1 << bits) - 1)
        if not lo <= value <= hi:
            _fail(f"{where}: field {key} = {value}: must fit {bits} bits ({lo}..{hi})")


#: Most elements one pooling window may have: the vector lanes' reciprocal table and window
#: counter (:data:`hw.vector.rtl.lane.MAX_WINDOW`; a test holds the two equal).
MAX_POOL_WINDOW = 256

#: The default requantization of an epilogue: a scale of 1/2 (``multiplier = 2**30``).
DEFAULT_QUANT = (1 << 30, 0, 0)


def empty_program(chip: ChipConfig) -> CoreProgram:
    """A :class:`CoreProgram` with no commands: what a core generated to be loaded through its
    CSRs is built from (only the geometry matters to the hardware)."""
    return CoreProgram(None, geometry(chip), [[] for _ in range(_ENGINES)],
                       [[] for _ in range(_ENGINES)])
