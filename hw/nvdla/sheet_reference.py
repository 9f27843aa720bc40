"""NVIDIA's reference CSVs of the NVDLA performance spreadsheet, read back with their values.

The CSVs in ``shared/reference/nvdla_spreadsheet/`` hold every cell of the ``ResNet50`` and
``GoogLeNet`` sheets (inputs, formula results, totals, GoogLeNet's inception-block rows).
:func:`read_sheet_csv` turns one into the :mod:`hw.nvdla.spreadsheet` inputs plus the reference
values to compare with; the per-row CV-SRAM placement, which NVIDIA typed in by hand, is
recovered from the reference traffic cells (:func:`infer_placement`).
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

from hw.nvdla.spreadsheet import SHARED_KEYS, SheetConfig, SheetLayer, SramPlacement, _shared

__all__ = ["ExpectedRow", "read_sheet_csv", "infer_placement"]

_INPUT_COLS = {  # sheet column -> SheetLayer field (identical in both sheets)
    "B": "net", "C": "name", "D": "attribute", "E": "C", "F": "H", "G": "W", "H": "K",
    "I": "R", "J": "S", "K": "Z", "L": "stride_h", "M": "stride_w", "N": "P", "O": "Q",
    "P": "pooling", "Q": "pool_h", "R": "pool_w", "S": "pool_stride_h", "T": "pool_stride_w",
    "U": "A", "V": "B",
}
_TITLE_KEYS = {
    "calculation": "calculation",
    "input data size": "input_data_size",
    "min input data size": "min_input_data_size",
    "min input data": "min_input_data_size",
    "output data size": "output_data_size",
    "min weight data size": "min_weight_data_size",
    "min weight data": "min_weight_data_size",
    "weight data size": "weight_data_size",
    "cvsram batching size": "cvsram_batching_size",
    "dram traffic": "dram_traffic",
    "dram cycles": "dram_cycles",
    "cvsram read traffic": "cvsram_read_traffic",
    "cvsram read cycles": "cvsram_read_cycles",
    "cvsram write traffic": "cvsram_write_traffic",
    "cvsram write cycles": "cvsram_write_cycles",
    "mac cycles": "mac_cycles",
    "max cycles": "max_cycles",
    "max cycle": "max_cycles",
    "long pole": "long_pole",
    "winograd": "winograd",
    "winograd?": "winograd",
    "smaller sized": "smaller_sized",
    "smaller size": "smaller_sized",
    "factor": "factor",
}
_FIRST_DRAM_ONLY_COL = "AN"


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _col_index(letters: str) -> int:
    n = 0
    for ch in letters:
        n = n * 26 + (ord(ch) - 64)
    return n


@dataclass
class ExpectedRow:
    """Reference values of one ``layer`` row: ``cells[(model, key)] = value`` with model in
    {"shared", "sram", "dram"}; ``line`` is the CSV line number; blank cells are ``None``."""

    line: int
    name: str
    cells: dict


def _num(path, lineno, col, text, *, allow_blank=True):
    text = text.strip()
    if text == "":
        if allow_blank:
            return None
        raise ValueError(f"{path}:{lineno}: column {col}: value missing")
    try:
        v = float(text)
    except ValueError:
        return text
    return v


def read_sheet_csv(path: str | Path):
    """Load a reference CSV -> ``(SheetConfig, [SheetLayer], expected)``.

    ``expected = {"rows": [ExpectedRow per layer], "totals": {"sram": {...}, "dram": {...}},
    "columns": {letter: (model, key)}, "blocks": [GoogLeNet inception-block DRAM rows: line,
    layer index range start/stop and their reference cells]}``.  The per-row CV-SRAM placement (a hand-entered choice in
    NVIDIA's sheet, see :mod:`hw.nvdla.spreadsheet`) is recovered with :func:`infer_placement`; all
    other columns of ``expected`` are left for the caller to compare with
    :func:`hw.nvdla.spreadsheet.sheet_layer`.
    """
    path = Path(path)
    cfg = SheetConfig.from_csv(path)
    cols: list[str] | None = None
    names: list[str] | None = None
    raw_rows: list[tuple[int, list[str]]] = []
    total_rows: list[tuple[int, list[str]]] = []
    block_marks: list[tuple[int, int, list[str]]] = []  # (line, #layer rows before, cells)
    with path.open(newline="") as fh:
        for lineno, row in enumerate(csv.reader(fh), 1):
            if not row or row[0] == "#":
                continue
            tag = row[0]
            if tag == "col":
                cols = [c.strip() for c in row[1:]]
                if not cols or any(not re.fullmatch(r"[A-Z]{1,2}", c) for c in cols):
                    raise ValueError(f"{path}:{lineno}: 'col' row must list column letters")
            elif tag == "name":
                names = row[1:]
            elif tag == "layer":
                raw_rows.append((lineno, row[1:]))
            elif tag == "#row":
                total_rows.append((lineno, row[1:]))
                block_marks.append((lineno, len(raw_rows), row[1:]))
            else:
                raise ValueError(f"{path}:{lineno}: column A: unknown row tag {tag!r}")
    if cols is None or names is None:
        raise ValueError(f"{path}: missing the 'col' and/or 'name' header rows")
    if len(names) != len(cols):
        raise ValueError(f"{path}: 'name' row has {len(names)} cells, 'col' row {len(cols)}")

    colmap: dict[str, tuple[str, str]] = {}
    first_dram = _col_index(_FIRST_DRAM_ONLY_COL)
    seen_dram_traffic = False
    for c, title in zip(cols, names):
        if c in _INPUT_COLS or c in ("A",):
            continue
        key = _TITLE_KEYS.get(re.sub(r"\s+", " ", title.strip().lower()))
        if key is None:
            raise ValueError(f"{path}: column {c}: unknown title {title!r}")
        if key in SHARED_KEYS:
            model = "shared"
        elif _col_index(c) >= first_dram:
            model = "dram"
            if key == "dram_traffic":
                if seen_dram_traffic:
                    key = "dram_traffic_batched"
                seen_dram_traffic = True
        else:
            model = "sram"
        colmap[c] = (model, key)

    layers: list[SheetLayer] = []
    expected_rows: list[ExpectedRow] = []
    for lineno, row in raw_rows:
        if len(row) != len(cols):
            raise ValueError(f"{path}:{lineno}: {len(row)} cells, expected {len(cols)}")
        cell = dict(zip(cols, row))
        kw: dict = {}
        for c, fld in _INPUT_COLS.items():
            text = cell.get(c, "").strip()
            if fld in ("net", "name", "attribute"):
                kw[fld] = text
                continue
            if text == "":
                if fld in ("C", "H", "W", "K", "R", "S", "stride_h", "stride_w"):
                    raise ValueError(f"{path}:{lineno}: column {c} ({fld}): value missing")
                kw[fld] = None if fld != "Z" and fld != "pooling" else 0
                continue
            try:
                v = float(text)
            except ValueError:
                raise ValueError(f"{path}:{lineno}: column {c} ({fld}): {text!r} is not a number") from None
            if v != int(v):
                raise ValueError(f"{path}:{lineno}: column {c} ({fld}): {text!r} is not an integer")
            kw[fld] = int(v)
        kw["pooling"] = bool(kw["pooling"])
        cells = {}
        for c, mk in colmap.items():
            cells[mk] = _num(path, lineno, c, cell[c])
        if cells.get(("sram", "mac_cycles")) is None and cells.get(("dram", "mac_cycles")) is None:
            kw["role"] = "part"
        elif cells.get(("shared", "calculation")) is None:
            kw["role"] = "combined"
        kw["sram_batch"] = cells.get(("sram", "cvsram_batching_size"))
        ly = SheetLayer(**kw)
        # Winograd-transformed weights or plain 9 taps (GoogLeNet mixes both for 3x3 layers)
        if ly.R == 3 and ly.S == 3 and cells.get(("shared", "weight_data_size")) is not None:
            plain = _shared(cfg, replace(ly, winograd_weights=False))["weight_data_size"]
            ly.winograd_weights = not math.isclose(plain, cells[("shared", "weight_data_size")])
        ly.placement = infer_placement(cfg, ly, cells, where=f"{path}:{lineno}")
        layers.append(ly)
        expected_rows.append(ExpectedRow(lineno, ly.name, cells))

    totals = {"sram": {}, "dram": {}}
    label_keys = {"total cycle": "total_cycles", "total time": "total_time_ms", "fps": "fps",
                  "hw mac effi": "hw_mac_effi", "network mac effi": "network_mac_effi"}
    unit_keys = {"cycles": "total_cycles", "cycle": "total_cycles", "ms": "total_time_ms",
                 "fps": "fps"}
    for lineno, row in total_rows:
        for i, text in enumerate(row):
            t = text.strip().lower()
            model = "dram" if _col_index(cols[i]) >= first_dram else "sram"
            if t in label_keys and i + 1 < len(row) and _is_float(row[i + 1]):
                # ResNet layout: "<label>,<value>"
                m2 = "dram" if _col_index(cols[i + 1]) >= first_dram else "sram"
                totals[m2][label_keys[t]] = float(row[i + 1])
            elif t in unit_keys and i > 0 and row[i - 1].strip():  # GoogLeNet: "<value>,<unit>"
                try:
                    totals[model if _col_index(cols[i - 1]) < first_dram else "dram"][unit_keys[t]] = float(row[i - 1])
                except ValueError:
                    pass
    # GoogLeNet's per-inception-block DRAM rows: a "#row" with a CV-SRAM DRAM traffic value
    blocks = []
    inv = {mk: c for c, mk in colmap.items()}
    c_traffic, c_cycles = inv.get(("sram", "dram_traffic")), inv.get(("sram", "dram_cycles"))
    c_max, c_pole = inv.get(("sram", "max_cycles")), inv.get(("sram", "long_pole"))
    for lineno, n_before, row in block_marks:
        if c_traffic is None or len(row) != len(cols):
            continue
        cell = dict(zip(cols, row))
        if not _is_float(cell[c_traffic]):
            continue
        # the block: the layer rows since the previous block row (or since the first
        # "inception" row), i.e. the rows sharing the name prefix of the last one
        last = layers[n_before - 1].name.lower().split()[:2]
        start = n_before
        while start > 0 and layers[start - 1].name.lower().split()[:2] == last:
            start -= 1
        blocks.append({
            "line": lineno, "start": start, "stop": n_before,
            "dram_traffic": float(cell[c_traffic]),
            "dram_cycles": float(cell[c_cycles]) if _is_float(cell[c_cycles]) else None,
            "max_cycles": float(cell[c_max]) if _is_float(cell[c_max]) else None,
            "long_pole": cell[c_pole].strip() or None,
        })
    return cfg, layers, {"rows": expected_rows, "totals": totals, "columns": colmap,
                         "blocks": blocks}


def infer_placement(cfg: SheetConfig, layer: SheetLayer, cells: dict, where: str = "") -> SramPlacement:
    """Recover the hand-entered CV-SRAM placement of one row from its reference traffic cells.

    DRAM traffic = a*input + b*output + weight/d, CV-SRAM read = c*input + weight/e,
    CV-SRAM write = f*output with a, b, c, f in {0, 1} and d, e in {none, 1, the row's batching
    size, the FC batch, any other batching size of the sheet (GoogLeNet uses 11 = 3b's)}.
    Raises ValueError when no combination reproduces the reference.
    """
    sh = _shared(cfg, layer)
    X, Zo, Wt = sh["input_data_size"], sh["output_data_size"], sh["weight_data_size"]
    dram = cells.get(("sram", "dram_traffic"))
    read = cells.get(("sram", "cvsram_read_traffic"))
    write = cells.get(("sram", "cvsram_write_traffic"))
    if dram is None or read is None or write is None:
        raise ValueError(f"{where}: CV-SRAM traffic cells missing")

    def close(a, b):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)

    def solve(target, tensor):
        for coef in (1.0, 0.0):
            rest = target - coef * tensor
            if close(rest, 0.0):
                return coef, 0.0
            if rest > 0 and Wt > 0:
                div = Wt / rest
                if close(div, round(div)) and round(div) >= 1:
                    return coef, float(round(div))
        return None

    best = None
    for a in (1.0, 0.0):
        for b in (0.0, 1.0):
            rest = dram - a * X - b * Zo
            if close(rest, 0.0):
                best = (a, b, 0.0)
                break
            if rest > 0 and Wt > 0:
                div = Wt / rest
                if close(div, round(div)) and round(div) >= 1:
                    best = (a, b, float(round(div)))
                    break
        if best:
            break
    r = solve(read, X)
    if best is None or r is None:
        raise ValueError(f"{where}: no DRAM/SRAM placement reproduces traffic "
                         f"(dram={dram}, read={read}) from input={X}, output={Zo}, weight={Wt}")
    if close(write, Zo):
        f = 1.0
    elif close(write, 0.0):
        f = 0.0
    else:
        raise ValueError(f"{where}: CV-SRAM write traffic {write} is neither 0 nor output {Zo}")
    return SramPlacement(dram_input=best[0], dram_output=best[1], dram_weight_div=best[2],
                         read_input=r[0], read_weight_div=r[1], write_output=f)
