"""Read and write SCALE-Sim topology CSVs as npulab :class:`~compiler.ir.Graph` workloads.

SCALE-Sim (PyPI ``scalesim`` 3.0.0, ``scalesim/topology_utils.py``) takes one of two CSV layouts:

* conv: ``name, ifmap_h, ifmap_w, filter_h, filter_w, channels, num_filters, stride,``
* GEMM: ``name, M, N, K,`` (SCALE-Sim's ``-i gemm`` / ``input_type_gemm=True``)

Conventions reproduced here, and where SCALE-Sim defines them:

* **Header.** The first physical line is always the header and is skipped whatever it holds
  (``load_arrays_conv``/``load_arrays_gemm`` drop the first row unconditionally). Because that
  silently loses a layer when a file has no header, a first line that parses as a layer row is
  rejected here. Blank lines and whitespace around fields are ignored, as in SCALE-Sim.
* **Trailing comma.** SCALE-Sim drops the last comma-separated field of every row
  (``row.split(',')[:-1]``), so a row without a trailing comma loses its stride or K
  (scalesim-project/SCALE-Sim issues 38 and 106). Rows are accepted here with or without it;
  :func:`write_topology` always writes it.
* **Sparsity column.** v3 reads an optional 9th conv / 5th GEMM field as an ``N:M`` sparsity
  ratio. npulab models dense layers, so only a dense ratio (``N == M``, e.g. ``1:1``) is accepted.
* **GEMM rows.** ``name, M, N, K`` is ifmap ``M x K``, filter ``K x N``, ofmap ``M x N``
  (SCALE-Sim lowers it to a conv with an ``M x K`` ifmap, a ``1 x K`` filter, 1 channel and ``N``
  filters), so it becomes ``Gemm(name, m=M, n=N, k=K)``.
* **Output size.** SCALE-Sim has no padding (users pre-pad the ifmap) and computes
  ``E = ceil((H - R + s) / s)``. That equals the floor formula ``(H - R) // s + 1`` of the IR only
  when ``s`` divides ``H - R``; otherwise SCALE-Sim's last window overhangs the bottom (right) edge
  by ``(-(H - R)) % s`` rows (columns) and the out-of-range elements get address -1
  (``compute/operand_matrix.py``, ``calc_ifmap_elem_addr``): zero padding in effect. So a conv row
  becomes a :class:`Conv2d` with ``pad_top = pad_left = 0`` and ``pad_bottom``/``pad_right`` equal
  to that overhang, which makes ``out_h``/``out_w``, M, K and MACs equal SCALE-Sim's (e.g. a
  224x224 ifmap, 7x7 filter, stride 2 gives 110x110, as in SCALE-Sim's own Resnet50.csv).
  ``H < R`` or ``W < S`` is rejected, as SCALE-Sim asserts (its "ISSUE #9").
* **Depthwise ("DP").** A conv row whose name contains the case-sensitive substring ``DP``
  (anywhere) is expanded by SCALE-Sim into ``channels`` layers named ``f"{name}Channel_{i}"``,
  each with ``channels = 1`` and the row's unchanged ``num_filters`` (``load_arrays_conv``). Each
  channel therefore gets its own ``num_filters`` filters: ``num_filters`` is the *channel
  multiplier*, and the layer produces ``channels * num_filters`` output channels. Here it becomes
  one depthwise ``Conv2d(in_channels=C, out_channels=C * num_filters, groups=C)``, whose
  ``gemm_shape()`` (``count=C``, ``m=E*F``, ``n=num_filters``, ``k=R*S``) is exactly SCALE-Sim's
  C per-channel layers. GEMM files have no DP convention.

A topology carries no dataflow edges, so every op gets ``inputs=()``; ops keep file order, which
is SCALE-Sim's execution order. The graph is named after the file's stem.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Union

from compiler.ir import Conv2d, Gemm, Graph, IRError
from hw.files import read_text

__all__ = [
    "TopologyError",
    "CONV_HEADER",
    "GEMM_HEADER",
    "CONV_FIELDS",
    "GEMM_FIELDS",
    "scalesim_out_dim",
    "scalesim_overhang",
    "read_topology",
    "write_topology",
]

PathLike = Union[str, "os.PathLike[str]"]

# The header lines of SCALE-Sim's own files (topologies/conv_nets/alexnet.csv and
# topologies/GEMM_mnk/test_mnk_input.csv); SCALE-Sim never reads them.
CONV_HEADER = (
    "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, "
    "Strides,"
)
GEMM_HEADER = "Layer Name, M, N, K,"

CONV_FIELDS = (
    "name", "ifmap_h", "ifmap_w", "filter_h", "filter_w", "channels", "num_filters", "stride",
)
GEMM_FIELDS = ("name", "M", "N", "K")

_DEPTHWISE_MARK = "DP"  # topology_utils.load_arrays_conv: `if 'DP' in elems[0].strip()`
_DIGITS = re.compile(r"[0-9]+")
_SPARSITY = re.compile(r"([0-9]+)\s*:\s*([0-9]+)")


class TopologyError(ValueError):
    """A SCALE-Sim topology file (or a graph being written as one) is not valid."""


def scalesim_out_dim(size: int, kernel: int, stride: int) -> int:
    """SCALE-Sim's output size ``ceil((size - kernel + stride) / stride)``, in exact integers."""
    return -(-(size - kernel + stride) // stride)


def scalesim_overhang(size: int, kernel: int, stride: int) -> int:
    """How far SCALE-Sim's last window reads past the ifmap edge: ``(kernel - size) % stride``."""
    return (kernel - size) % stride


def _fields(row: str) -> list[str]:
    fields = [f.strip() for f in row.split(",")]
    # One empty last field is SCALE-Sim's required trailing comma; drop it (issues 38, 106).
    if len(fields) > 1 and fields[-1] == "":
        fields.pop()
    return fields


def _layout_of(fields: list[str]) -> bool | None:
    """True for a GEMM row, False for a conv row, None for neither, by field count; one field
    more than a layout has counts only when it is an ``N:M`` ratio (it holds a ``:``), so a
    truncated conv row such as ``conv1, 16, 16, 3, 3`` is a field-count error, not a GEMM row
    with a bad sparsity field."""
    count = len(fields)
    if count in (len(GEMM_FIELDS) + 1, len(CONV_FIELDS) + 1) and ":" not in fields[-1]:
        return None
    if count in (len(GEMM_FIELDS), len(GEMM_FIELDS) + 1):
        return True
    if count in (len(CONV_FIELDS), len(CONV_FIELDS) + 1):
        return False
    return None


def _looks_like_layer(fields: list[str]) -> bool:
    gemm = _layout_of(fields)
    if gemm is None:
        return False
    width = len(GEMM_FIELDS) if gemm else len(CONV_FIELDS)
    return all(_DIGITS.fullmatch(f) for f in fields[1:width])


def read_topology(path: PathLike, *, gemm: bool | None = None) -> Graph:
    """Parse a SCALE-Sim topology CSV into a :class:`Graph` of :class:`Conv2d` or :class:`Gemm`.

    ``gemm=None`` detects the layout from the first layer row's field count (4 GEMM, 8 conv,
    either plus an optional sparsity field); ``True``/``False`` force GEMM/conv as SCALE-Sim's
    ``input_type_gemm`` does. Raises :class:`TopologyError` naming ``path:line``.
    """
    path = Path(path)
    # UTF-8; read_text skips the BOM that spreadsheet exports start with
    lines = read_text(path, "topology CSV", error=TopologyError).splitlines()

    def fail(line: int, what: str, value: object, allowed: str) -> TopologyError:
        return TopologyError(f"{path}:{line}: {what}: {value!r}: {allowed}")

    ops: list[Conv2d | Gemm] = []
    seen: dict[str, int] = {}
    layout: bool | None = gemm
    layout_line = 0
    for number, raw in enumerate(lines, start=1):
        row = raw.strip()
        if number == 1:
            if row and _looks_like_layer(_fields(row)):
                raise fail(1, "header", row, "SCALE-Sim always skips line 1 as the header, so "
                           "this layer would be lost; add a header line")
            continue
        if not row:
            continue
        fields = _fields(row)
        row_layout = _layout_of(fields)
        if layout is None:
            if row_layout is None:
                raise fail(number, "field count", len(fields), "a conv row has 8 fields ("
                           f"{', '.join(CONV_FIELDS)}) and a GEMM row 4 ("
                           f"{', '.join(GEMM_FIELDS)}), each optionally followed by an N:M "
                           "sparsity field and a trailing comma")
            layout, layout_line = row_layout, number
        elif row_layout is not layout:
            names = GEMM_FIELDS if layout else CONV_FIELDS
            if layout_line:
                source = f"the first layer row (line {layout_line}) is"
            else:
                source = f"gemm={gemm} forces"
            raise fail(number, "field count", len(fields), f"{source} the "
                       f"{'GEMM' if layout else 'conv'} layout: {len(names)} fields "
                       f"({', '.join(names)}), optionally an N:M sparsity field, trailing comma")
        names = GEMM_FIELDS if layout else CONV_FIELDS
        if len(fields) > len(names):
            m = _SPARSITY.fullmatch(fields[-1])
            if not m or m.group(1) != m.group(2) or m.group(1).strip("0") == "":
                raise fail(number, "sparsity", fields[-1], "npulab models dense layers: only a "
                           "dense N:M ratio with N == M >= 1 (e.g. '1:1') or no sparsity field")
        name = fields[0]
        if not name:
            raise fail(number, "name", name, "must be a non-empty layer name")
        if name in seen:
            raise fail(number, "name", name, f"already used on line {seen[name]}; layer names "
                       "must be unique")
        values: dict[str, int] = {}
        for key, text in zip(names[1:], fields[1:len(names)]):
            if not _DIGITS.fullmatch(text) or int(text) < 1:
                raise fail(number, key, text, "must be a decimal integer >= 1")
            values[key] = int(text)
        try:
            if layout:
                op: Conv2d | Gemm = Gemm(name=name, m=values["M"], n=values["N"], k=values["K"])
            else:
                op = _conv_from_row(name, values, lambda k, v, a: fail(number, k, v, a))
        except IRError as exc:  # defensive: the checks above should make this unreachable
            raise fail(number, "layer", row, str(exc)) from exc
        seen[name] = number
        ops.append(op)
    if not ops:
        raise fail(max(len(lines), 1), "layer rows", 0, "a topology needs a header line and at "
                   "least one layer row")
    return Graph(name=path.stem or "scalesim", ops=tuple(ops))


def _conv_from_row(name: str, v: dict[str, int], fail) -> Conv2d:
    h, w, r, s, stride = v["ifmap_h"], v["ifmap_w"], v["filter_h"], v["filter_w"], v["stride"]
    for key, kernel, dim, size in (("filter_h", r, "ifmap_h", h), ("filter_w", s, "ifmap_w", w)):
        if kernel > size:
            raise fail(key, str(kernel), f"must be <= {dim} = {size}: SCALE-Sim does not pad "
                       "(pre-pad the ifmap; SCALE-Sim topology_utils.py asserts this, 'ISSUE #9')")
    channels, filters = v["channels"], v["num_filters"]
    # DP: C single-channel layers, each with its own `num_filters` filters (see module doc).
    groups = channels if _DEPTHWISE_MARK in name else 1
    return Conv2d(
        name=name, in_h=h, in_w=w, in_channels=channels,
        out_channels=filters * groups, kernel_h=r, kernel_w=s, stride_h=stride, stride_w=stride,
        pad_bottom=scalesim_overhang(h, r, stride), pad_right=scalesim_overhang(w, s, stride),
        groups=groups,
    )


def _conv_row(op: Conv2d, prepad: bool, fail) -> list[object]:
    if op.batch != 1:
        raise fail("batch", op.batch, "SCALE-Sim conv rows have batch 1 (write one row per image "
                   "or lower to a Gemm)")
    if (op.dilation_h, op.dilation_w) != (1, 1):
        raise fail("dilation", (op.dilation_h, op.dilation_w), "SCALE-Sim has no dilation")
    if op.stride_h != op.stride_w:
        raise fail("stride", (op.stride_h, op.stride_w), "SCALE-Sim conv rows have one stride "
                   "for both axes")
    stride = op.stride_h
    marked = _DEPTHWISE_MARK in op.name
    if op.groups == 1 and marked and op.in_channels > 1:
        raise fail("name", op.name, "contains 'DP', which SCALE-Sim reads as depthwise; rename "
                   "this groups=1 conv")
    if op.groups > 1 and op.groups != op.in_channels:
        raise fail("groups", op.groups, f"SCALE-Sim expresses groups 1 or depthwise (groups == "
                   f"in_channels = {op.in_channels}) only")
    if op.groups > 1 and not marked:
        raise fail("name", op.name, "a depthwise conv's name must contain 'DP', SCALE-Sim's "
                   "depthwise marker")
    dims = []
    for axis, size, before, after, kernel, out in (
        ("h", op.in_h, op.pad_top, op.pad_bottom, op.kernel_h, op.out_h),
        ("w", op.in_w, op.pad_left, op.pad_right, op.kernel_w, op.out_w),
    ):
        if prepad:
            size, before, after = size + before + after, 0, 0
        if before:
            raise fail(f"pad_{'top' if axis == 'h' else 'left'}", before, "SCALE-Sim has no "
                       "padding: pre-pad the ifmap yourself or pass prepad=True")
        span = (out - 1) * stride + kernel  # rows (cols) the windows actually touch
        if span <= size:
            dims.append(span)  # drop trailing rows no window reads: SCALE-Sim's E then matches
        elif span - size < stride:
            dims.append(size)  # SCALE-Sim's own overhang supplies exactly these zero rows
        else:
            raise fail(f"pad_{'bottom' if axis == 'h' else 'right'}", after, "SCALE-Sim has no "
                       "padding beyond its last-window overhang: pre-pad the ifmap yourself or "
                       "pass prepad=True")
    multiplier = op.out_channels // op.groups
    return [op.name, dims[0], dims[1], op.kernel_h, op.kernel_w, op.in_channels, multiplier, stride]


def write_topology(
    graph: Graph, path: PathLike, *, gemm: bool | None = None, prepad: bool = False
) -> None:
    """Write ``graph`` as a SCALE-Sim topology CSV (SCALE-Sim's header, trailing commas).

    ``gemm=None`` writes the GEMM layout when every op is a :class:`Gemm`, else the conv layout,
    where a Gemm becomes SCALE-Sim's own lowering (``M x K`` ifmap, ``1 x K`` filter, 1 channel,
    ``N`` filters, stride 1). A Conv2d is written unpadded; trailing rows/columns no window reads
    are dropped so SCALE-Sim's ceil output size equals the IR's. ``prepad=True`` folds explicit
    padding into the ifmap dims (SCALE-Sim's pre-padded convention) instead of rejecting it.
    Raises :class:`TopologyError` for what SCALE-Sim cannot express; nothing is written then.
    """
    path = Path(path)
    ops = tuple(graph)
    if not ops:
        raise TopologyError(f"{path}: graph {graph.name!r}: ops: (): SCALE-Sim needs >= 1 layer")
    if gemm is None:
        gemm = all(isinstance(op, Gemm) for op in ops)
    rows = [GEMM_HEADER if gemm else CONV_HEADER]
    for op in ops:
        def fail(what: str, value: object, allowed: str, op=op) -> TopologyError:
            kind = type(op).__name__
            return TopologyError(f"{path}: {kind} {op.name!r}: {what}: {value!r}: {allowed}")

        if not isinstance(op, (Gemm, Conv2d)):
            raise fail("op", type(op).__name__, "SCALE-Sim topologies hold Conv2d and Gemm only")
        if op.name != op.name.strip() or any(c in op.name for c in ",\r\n"):
            raise fail("name", op.name, "SCALE-Sim strips names and splits rows on commas: no "
                       "commas, line breaks or surrounding whitespace")
        if isinstance(op, Gemm):
            if op.batch != 1:
                raise fail("batch", op.batch, "SCALE-Sim GEMM rows have no batch")
            if gemm:
                fields: list[object] = [op.name, op.m, op.n, op.k]
            else:
                # topology_utils.load_arrays_gemm's own lowering; channels 1 makes a DP name safe.
                fields = [op.name, op.m, op.k, 1, op.k, 1, op.n, 1]
        else:
            if gemm:
                raise fail("layout", "gemm", "a Conv2d needs the conv layout (gemm=None or False)")
            fields = _conv_row(op, prepad, fail)
        rows.append(", ".join(str(f) for f in fields) + ",")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
