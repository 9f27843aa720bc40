"""NVIDIA's performance-spreadsheet networks, shipped with npulab (``npulab nvdla spreadsheet``).

:mod:`hw.nvdla.spreadsheet` reproduces ``perf/NVDLA_OpenSource_Performance.xlsx`` (nvdla/hw) from
the reference CSVs in ``shared/reference/nvdla_spreadsheet/``, which are not part of an installed
npulab.  This module ships what those formulas need as small CSVs of our own format in
``hw/nvdla/sheet_data/`` (package data, found with :mod:`importlib.resources`):

* ``resnet50.csv``, ``googlenet.csv``: every layer row of the ``ResNet50`` / ``GoogLeNet`` sheets
  (shape, attribute, role, Winograd weights, CV-SRAM batching size), NVIDIA's hand-entered 4 MB
  CV-SRAM placements (recovered by :func:`hw.nvdla.sheet_reference.infer_placement`), the sheet
  header (int8, 2048 MACs, 512 KB CBUF, 1 GHz, DRAM 10 GB/s, CV-SRAM 25/25 GB/s, FC batch 16),
  the sheet's formula variant and its totals;
* ``alexnet.csv``: the sheet's third network, "Alexnet in Caffe".  Only its layer shapes
  (``shared/reference/nvdla.md``, "The spreadsheet's AlexNet") and its total, 0.895 ms, are
  published.  That total is the DRAM-only roofline with K rounded to 16 (as GoogLeNet) **and the
  FC weights amortised over the FC batch of 16** (ResNet's second "DRAM Traffic" column does the
  same, but ResNet and GoogLeNet time the unbatched traffic): 895,443.5625 cycles = 0.8954 ms.
  Without FC batching the same roofline gives 6.262 ms (57 MB of FC weights at 10 GB/s); with
  ResNet's K rounding to 128 it gives 0.912 ms.  Which input rows CBUF must hold and which operand
  is "smaller" (the two other formula differences of the sheets) cannot be recovered from one
  total and do not change it; ResNet's variant is used.  AlexNet's CV-SRAM model is not typed in
  per row: its sheet computes it with a batching rule, :func:`nvidia_batched_placement`, which
  gives NVIDIA's 4 MB total (591,475.5625 cycles, 0.5915 ms).

The tables are generated once from the reference files by ``python -m hw.nvdla.sheet_models
--regenerate [--shared DIR]`` (``--check`` compares instead of writing); a test keeps the shipped
files equal to what the reference gives.

CV-SRAM sizes other than NVIDIA's 4 MB: the sheet has no rule, its placements are typed in per
row.  :func:`npulab_placement` is npulab's own rule (documented there), *not* NVIDIA's.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import os
import re
import sys
from dataclasses import dataclass, fields, replace
from importlib import resources
from pathlib import Path

from hw.nvdla.sheet_reference import read_sheet_csv
from hw.nvdla.spreadsheet import SheetConfig, SheetLayer, SramPlacement, sheet_network

__all__ = [
    "SHEET_MODELS",
    "SheetModel",
    "load_sheet_model",
    "npulab_placement",
    "nvidia_batched_placement",
    "dram_only_fc_batched_placement",
    "evaluate",
    "regenerate",
    "data_dir",
]

SHEET_MODELS = ("resnet50", "googlenet", "alexnet")
NVIDIA_SRAM_MB = 4.0  # the sheet's "with 4 MB CV-SRAM" model
KB_PER_MB = 1024.0  # the sheet's KB are 1024 B; 1 MB of CV-SRAM = 1024 of them

_LAYER_FIELDS = [f.name for f in fields(SheetLayer) if f.name != "placement"]
_PLACEMENT_FIELDS = [f.name for f in fields(SramPlacement)]
_CONFIG_FIELDS = {f.name: f for f in fields(SheetConfig)}
_INT_LAYER_FIELDS = ("C", "H", "W", "K", "R", "S", "Z", "stride_h", "stride_w", "P", "Q",
                     "pool_h", "pool_w", "pool_stride_h", "pool_stride_w", "A", "B")
_META_KEYS = ("title", "source", "sheet_placement", "dram_only_fc_batched",
              "sheet_time_ms_dram", "sheet_time_ms_sram")


def data_dir() -> Path:
    """``hw/nvdla/sheet_data/`` of a checkout or of the installed package (no npulab import)."""
    return Path(str(resources.files("hw.nvdla") / "sheet_data"))


@dataclass(frozen=True)
class SheetModel:
    """One network of the spreadsheet: its inputs and NVIDIA's totals.

    ``sheet_placement``: the layers carry NVIDIA's hand-entered 4 MB CV-SRAM placements.
    ``dram_only_fc_batched``: the sheet's DRAM-only model divides FC weights by the FC batch
    (AlexNet).  ``sheet_time_ms``: the sheet's totals per model ("dram", "sram"), when published.
    """

    name: str
    title: str
    source: str
    cfg: SheetConfig
    layers: tuple[SheetLayer, ...]
    sheet_placement: bool
    dram_only_fc_batched: bool
    sheet_time_ms: dict


# --------------------------------------------------------------------------------------------
# writing and reading the shipped tables
# --------------------------------------------------------------------------------------------

def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def _table_text(name: str, header: list[str], meta: dict, cfg: SheetConfig,
                layers: list[SheetLayer]) -> str:
    buf = io.StringIO()
    for line in header:
        buf.write(f"# {line}\n")
    w = csv.writer(buf, lineterminator="\n")
    for key in _META_KEYS:
        w.writerow(["meta", key, _fmt(meta.get(key))])
    for key in _CONFIG_FIELDS:
        w.writerow(["config", key, _fmt(getattr(cfg, key))])
    w.writerow(["columns", *_LAYER_FIELDS, *_PLACEMENT_FIELDS])
    for ly in layers:
        w.writerow(["layer", *(_fmt(getattr(ly, k)) for k in _LAYER_FIELDS),
                    *(_fmt(getattr(ly.placement, k)) for k in _PLACEMENT_FIELDS)])
    return buf.getvalue()


def _parse_value(where: str, key: str, text: str, kind):
    try:
        if kind is bool:
            if text not in ("0", "1"):
                raise ValueError
            return text == "1"
        return kind(text)
    except ValueError:
        raise ValueError(f"{where}: {key} = {text!r}: expected {kind.__name__}") from None


def _read_table(path: Path, name: str) -> SheetModel:
    meta: dict = {}
    cfg_values: dict = {}
    columns: list[str] | None = None
    layers: list[SheetLayer] = []
    with path.open(newline="", encoding="utf-8") as fh:
        for lineno, row in enumerate(csv.reader(fh), 1):
            where = f"{path}:{lineno}"
            if not row or row[0].startswith("#"):
                continue
            tag = row[0]
            if tag in ("meta", "config"):
                if len(row) != 3:
                    raise ValueError(f"{where}: '{tag}' lines are '{tag},<key>,<value>'")
                key, text = row[1], row[2]
                if tag == "meta":
                    if key not in _META_KEYS:
                        raise ValueError(f"{where}: unknown meta key {key!r}")
                    meta[key] = text
                    continue
                fld = _CONFIG_FIELDS.get(key)
                if fld is None:
                    raise ValueError(f"{where}: unknown config key {key!r}; known: "
                                     f"{', '.join(_CONFIG_FIELDS)}")
                kind = type(getattr(SheetConfig(), key))
                cfg_values[key] = _parse_value(where, key, text, kind)
            elif tag == "columns":
                columns = row[1:]
                if columns != _LAYER_FIELDS + _PLACEMENT_FIELDS:
                    raise ValueError(f"{where}: columns {columns} are not this npulab's "
                                     f"{_LAYER_FIELDS + _PLACEMENT_FIELDS}")
            elif tag == "layer":
                if columns is None or len(row) != len(columns) + 1:
                    raise ValueError(f"{where}: a layer line needs the 'columns' line first and "
                                     f"{len(_LAYER_FIELDS) + len(_PLACEMENT_FIELDS)} cells")
                cell = dict(zip(columns, row[1:]))
                kw: dict = {}
                for key in _LAYER_FIELDS:
                    text = cell[key]
                    if key in ("net", "name", "attribute", "role"):
                        kw[key] = text
                    elif text == "":
                        kw[key] = None
                    elif key in _INT_LAYER_FIELDS:
                        kw[key] = _parse_value(where, key, text, int)
                    elif key in ("pooling", "winograd_weights"):
                        kw[key] = _parse_value(where, key, text, bool)
                    else:
                        kw[key] = _parse_value(where, key, text, float)
                kw["pooling"] = bool(kw["pooling"])
                kw["placement"] = SramPlacement(**{
                    k: _parse_value(where, k, cell[k], float) for k in _PLACEMENT_FIELDS})
                layers.append(SheetLayer(**kw))
            else:
                raise ValueError(f"{where}: unknown line tag {tag!r}")
    if not layers:
        raise ValueError(f"{path}: no layer lines")
    ms = {m: float(meta[k]) for m, k in (("dram", "sheet_time_ms_dram"),
                                          ("sram", "sheet_time_ms_sram")) if meta.get(k)}
    return SheetModel(name=name, title=meta.get("title", name), source=meta.get("source", ""),
                      cfg=SheetConfig(**cfg_values), layers=tuple(layers),
                      sheet_placement=meta.get("sheet_placement") == "1",
                      dram_only_fc_batched=meta.get("dram_only_fc_batched") == "1",
                      sheet_time_ms=ms)


def load_sheet_model(name: str, directory: str | Path | None = None) -> SheetModel:
    """The shipped table of ``name`` (one of :data:`SHEET_MODELS`)."""
    if name not in SHEET_MODELS:
        raise ValueError(f"model = {name!r}: unknown; the spreadsheet has {', '.join(SHEET_MODELS)}")
    base = Path(directory) if directory is not None else data_dir()
    return _read_table(base / f"{name}.csv", name)


# --------------------------------------------------------------------------------------------
# placements
# --------------------------------------------------------------------------------------------

def _executed(ly: SheetLayer) -> bool:
    return ly.role != "part"  # GoogLeNet's stand-alone 1x1 listings are not run (combined row is)


def npulab_placement(cfg: SheetConfig, layers, sram_mb: float) -> list[SheetLayer]:
    """npulab's CV-SRAM placement rule for an ``sram_mb`` MB CV-SRAM (NVIDIA's sheet has none).

    Sizes are the sheet's (:func:`hw.nvdla.spreadsheet.sheet_layer`: input, output and weight
    data size in KB of 1024 B), capacity ``sram_mb * 1024`` KB.  Each layer on its own:

    1. activations: input and output stay in CV-SRAM when both fit together; otherwise the
       smaller one stays if it fits and the other goes through DRAM; otherwise both go through
       DRAM.  The first layer's input (the image) is always read from DRAM, as in the sheet.
       Neighbouring layers are not reconciled (a tensor can be written to DRAM by its producer and
       counted as read from CV-SRAM by its consumer) -- NVIDIA's hand placements are not either.
    2. weights: when all executed layers' weights plus the largest input + output of a layer fit,
       the weights live in CV-SRAM (loaded once, read from CV-SRAM every image); otherwise they
       are streamed from DRAM every image.  FC weights are amortised over the FC batch either way
       (as the sheet's 4 MB model does).
    The element-wise operand of a "conv + elwise" layer is not counted, as in the sheet's
    CV-SRAM model.  Returns copies of ``layers`` with the placements replaced.
    """
    if not (isinstance(sram_mb, (int, float)) and math.isfinite(sram_mb) and sram_mb > 0):
        raise ValueError(f"sram_mb = {sram_mb!r}: npulab's placement rule needs a CV-SRAM size > 0 MB")
    cap = sram_mb * KB_PER_MB
    base = sheet_network(cfg, list(layers))["dram"]  # the shared size columns of every row
    sizes = [(r["input_data_size"], r["output_data_size"], r["weight_data_size"]) for r in base]
    run = [ly for ly in layers if _executed(ly)]
    all_weights = sum(w for ly, (_, _, w) in zip(layers, sizes) if _executed(ly))
    work = max((x + z for ly, (x, z, _) in zip(layers, sizes) if _executed(ly)), default=0.0)
    weights_resident = all_weights + work <= cap
    first = run[0] if run else None
    out = []
    for ly, (x, z, _) in zip(layers, sizes):
        if x + z <= cap:
            in_sram, out_sram = True, True
        elif min(x, z) <= cap:
            in_sram, out_sram = x <= z, z < x
        else:
            in_sram = out_sram = False
        if ly is first:
            in_sram = False
        wdiv = float(cfg.fc_batch) if ly.is_fc else 1.0
        pl = SramPlacement(
            dram_input=0.0 if in_sram else 1.0,
            dram_output=0.0 if out_sram else 1.0,
            dram_weight_div=0.0 if weights_resident else wdiv,
            read_input=1.0 if in_sram else 0.0,
            read_weight_div=wdiv if weights_resident else 0.0,
            write_output=1.0 if out_sram else 0.0,
        )
        out.append(replace(ly, placement=pl))
    return out


def nvidia_batched_placement(cfg: SheetConfig, layers, sram_mb: float) -> list[SheetLayer] | None:
    """The CV-SRAM rule of NVIDIA's "AlexNet" sheet (its formulas, parametric in the CV-SRAM
    size, cell ``AI9`` = 4096 KB), or None when the rule has no batch for ``sram_mb``.

    The convolutions run batched: ``B`` images at a time stay in CV-SRAM, so their weights
    are fetched from DRAM once per ``B`` images.  Each convolution row's batching size is
    ``floor((SRAM - weight) / (input + output))`` (column AD: its weights plus ``b`` images'
    input and output fit) and ``B`` is the smallest over the convolution rows
    (``MIN($AD$11:$AD$18)``).  Per row (columns AE, AG, AI):

    * DRAM traffic = weight / B (FC rows: weight / FC batch), plus the image for the first
      layer, plus the output of the last convolution (both rows of a grouped one: it hands
      over to the FC layers, batched by the FC batch instead), plus the input of every FC row;
    * CV-SRAM read = input (the first layer's image comes from DRAM: 0);
    * CV-SRAM write = output, every row.

    (The sheet's conv2 g1 row alone caps B at the FC batch, ``MIN($AD$11:$AD$18, $C$9)``; that
    row is MAC-bound either way, so the total does not depend on it; the rule above is the one
    of the other rows.)  The 4 MB AlexNet total is NVIDIA's 591,475.5625 cycles.
    Returns None when a convolution's weights plus one image do not fit (``B < 1``)."""
    cap = sram_mb * KB_PER_MB
    base = sheet_network(cfg, list(layers))["dram"]
    sizes = [(r["input_data_size"], r["output_data_size"], r["weight_data_size"]) for r in base]
    conv = [i for i, ly in enumerate(layers) if _executed(ly) and not ly.is_fc]
    if not conv:
        return None
    own = {i: math.floor((cap - sizes[i][2]) / (sizes[i][0] + sizes[i][1])) for i in conv}
    batch = min(own.values())
    if batch < 1:
        return None
    run = [i for i, ly in enumerate(layers) if _executed(ly)]
    # the convolution that feeds the first FC row; a grouped one is listed as rows "NAME g1",
    # "NAME g2" (the AlexNet table), which all hand over
    first_fc = next((j for j in run if layers[j].is_fc), None)
    feeding = [j for j in conv if first_fc is not None and j < first_fc]
    stem = layers[feeding[-1]].name.split()[0] if feeding else None
    out = []
    for i, ly in enumerate(layers):
        first = bool(run) and i == run[0]
        hands_over = i in feeding and ly.name.split()[0] == stem
        pl = SramPlacement(
            dram_input=1.0 if (first or ly.is_fc) else 0.0,
            dram_output=1.0 if hands_over else 0.0,
            dram_weight_div=float(cfg.fc_batch) if ly.is_fc else float(batch),
            read_input=0.0 if first else 1.0,
            read_weight_div=0.0,
            write_output=1.0,
        )
        out.append(replace(ly, placement=pl, sram_batch=float(own[i]) if i in own else None))
    return out


def dram_only_fc_batched_placement(cfg: SheetConfig, layers) -> list[SheetLayer]:
    """The DRAM-only roofline with FC weights amortised over the FC batch (the AlexNet sheet),
    written as a CV-SRAM-model placement so that :func:`sheet_network` evaluates it unchanged:
    nothing in CV-SRAM, the non-resident operand re-streamed ``factor`` times, the element-wise
    operand read back, FC weights divided by the FC batch.  Needs ``cfg.dram_only_k_round == 16``
    (the CV-SRAM model rounds K to 16)."""
    if cfg.dram_only_k_round != 16:
        raise ValueError(f"dram_only_k_round = {cfg.dram_only_k_round}: the FC-batched DRAM-only "
                         f"model is defined with K rounded to 16")
    base = sheet_network(cfg, list(layers))["dram"]
    out = []
    for ly, r in zip(layers, base):
        f = float(r["factor"])
        weight_resident = r["smaller_sized"] == "weight"
        wdiv = float(cfg.fc_batch) if ly.is_fc else 1.0
        pl = SramPlacement(dram_input=f if weight_resident else 1.0,
                           dram_output=2.0 if ly.is_elwise else 1.0,
                           dram_weight_div=wdiv if weight_resident else wdiv / f,
                           read_input=0.0, read_weight_div=0.0, write_output=0.0)
        out.append(replace(ly, placement=pl))
    return out


# --------------------------------------------------------------------------------------------
# evaluation
# --------------------------------------------------------------------------------------------

def _positive(name: str, value, *, integer: bool = False, multiple: int = 0) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and value > 0
    if ok and integer:
        ok = float(value).is_integer() and (not multiple or int(value) % multiple == 0)
    if not ok:
        what = (f"a positive multiple of {multiple} (the sheet's minimum resident weights are "
                f"MACs/64 kernels)" if multiple else "a positive integer" if integer
                else "a positive number")
        raise ValueError(f"{name} = {value!r}: must be {what}")


def evaluate(model: SheetModel, sram_mb: float = 0.0, *, freq_mhz: float | None = None,
             dram_gbs: float | None = None, macs: int | None = None,
             npulab_rule: bool = False) -> dict:
    """Run one spreadsheet model.

    ``sram_mb = 0``: the DRAM-only model; ``4`` with NVIDIA's placements (ResNet-50, GoogLeNet):
    the sheet's "with 4 MB CV-SRAM" model; any other size (or AlexNet at 4): the CV-SRAM model
    with :func:`npulab_placement` (``npulab_rule=True`` forces it at 4 MB too, to compare it with
    NVIDIA's placements).  ``freq_mhz``, ``dram_gbs``, ``macs`` override the sheet header.  Returns ``{"kind": "dram"|"sram", "placement": None|"nvidia"|"npulab", "cfg",
    "layers": [SheetLayer], "rows": [row dicts of sheet_layer], "totals": {...}}``.
    """
    if not (isinstance(sram_mb, (int, float)) and not isinstance(sram_mb, bool)
            and math.isfinite(sram_mb) and sram_mb >= 0):
        raise ValueError(f"sram_mb = {sram_mb!r}: must be a number >= 0 "
                         f"(0 = DRAM-only model, 4 = NVIDIA's 4 MB CV-SRAM model)")
    if npulab_rule and sram_mb == 0:
        raise ValueError("npulab_rule = True: needs a CV-SRAM, sram_mb > 0 (sram_mb = 0 is the "
                         "DRAM-only model)")
    over = {}
    if freq_mhz is not None:
        _positive("freq_mhz", freq_mhz)
        over["freq_mhz"] = float(freq_mhz)
    if dram_gbs is not None:
        _positive("dram_gbs", dram_gbs)
        over["dram_gbs"] = float(dram_gbs)
    if macs is not None:
        _positive("macs", macs, integer=True, multiple=64)
        over["n_mac"] = int(macs)
    cfg = replace(model.cfg, **over)
    layers = list(model.layers)
    if sram_mb == 0:
        kind, placement = "dram", None
        if model.dram_only_fc_batched:
            layers = dram_only_fc_batched_placement(cfg, layers)
            net = sheet_network(cfg, layers)
            return {"kind": kind, "placement": None, "cfg": cfg, "layers": layers,
                    "rows": net["sram"], "totals": net["totals"]["sram"]}
    elif sram_mb == NVIDIA_SRAM_MB and model.sheet_placement and not npulab_rule:
        kind, placement = "sram", "nvidia"
    elif model.dram_only_fc_batched and not npulab_rule and \
            nvidia_batched_placement(cfg, layers, float(sram_mb)) is not None:
        # AlexNet: the sheet's own rule (formulas, not hand-entered rows), any CV-SRAM size
        kind, placement = "sram", "nvidia-batched"
        layers = nvidia_batched_placement(cfg, layers, float(sram_mb))
    else:
        kind, placement = "sram", "npulab"
        layers = npulab_placement(cfg, layers, float(sram_mb))
    net = sheet_network(cfg, layers)
    return {"kind": kind, "placement": placement, "cfg": cfg, "layers": layers,
            "rows": net[kind], "totals": net["totals"][kind]}


# --------------------------------------------------------------------------------------------
# regeneration from the reference files
# --------------------------------------------------------------------------------------------

_SHEET_SOURCE = "nvdla/hw perf/NVDLA_OpenSource_Performance.xlsx"
_NVIDIA_LICENSE = "NVIDIA Open NVDLA License (nvdla/hw LICENSE)"


def _shared_default() -> Path:
    env = os.environ.get("NPULAB_SHARED")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "shared"


def _alexnet_layers(md_path: Path) -> list[SheetLayer]:
    """The AlexNet table of ``shared/reference/nvdla.md`` -> hardware layers ("(x2)" rows, the
    grouped convolutions, become two layers named ``<n> g1`` / ``<n> g2``)."""
    text = md_path.read_text(encoding="utf-8")
    start = text.find("## The spreadsheet's AlexNet")
    if start < 0:
        raise ValueError(f"{md_path}: no section \"The spreadsheet's AlexNet\"")
    layers = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 10 or not re.match(r"^(\d+|fc\d)", cells[0]):
            continue
        label, typ, C, H, W, K, rs, Z, stride, pool = cells
        m = re.fullmatch(r"(\d+)x(\d+)", rs)
        if m is None:
            raise ValueError(f"{md_path}: AlexNet row {label!r}: kernel {rs!r} is not RxS")
        kw = dict(net="AlexNet", attribute=typ, C=int(C), H=int(H), W=int(W), K=int(K),
                  R=int(m.group(1)), S=int(m.group(2)), Z=int(Z), stride_h=int(stride),
                  stride_w=int(stride), sram_batch=None)
        pm = re.fullmatch(r"(\d+)x(\d+)\s*/\s*(\d+)", pool)
        if pm:
            kw.update(pooling=True, pool_h=int(pm.group(1)), pool_w=int(pm.group(2)),
                      pool_stride_h=int(pm.group(3)), pool_stride_w=int(pm.group(3)))
        base = label.split()[0]
        base = base if base.startswith("fc") else f"conv{base}"
        if "(x2)" in label:
            names = [f"{base} g1", f"{base} g2"]
        else:
            names = [base]
        for n in names:
            ly = SheetLayer(name=n, **kw)
            ly.P, ly.Q = ly.out_hw()
            ly.A, ly.B = ly.pooled_hw()
            layers.append(ly)
    if not layers:
        raise ValueError(f"{md_path}: the AlexNet table has no layer rows")
    return layers


def regenerate(shared: str | Path) -> dict[str, str]:
    """The text of every shipped table, built from ``shared/reference`` -> ``{file name: text}``."""
    ref = Path(shared) / "reference"
    out = {}
    for name, sheet, title in (("resnet50", "resnet50.csv", "ResNet-50"),
                               ("googlenet", "googlenet.csv", "GoogLeNet")):
        path = ref / "nvdla_spreadsheet" / sheet
        cfg, layers, expected = read_sheet_csv(path)
        totals = expected["totals"]
        meta = {"title": title, "source": f"{_SHEET_SOURCE}, sheet {layers[0].net}",
                "sheet_placement": True, "dram_only_fc_batched": False,
                "sheet_time_ms_dram": totals["dram"].get("total_time_ms"),
                "sheet_time_ms_sram": totals["sram"].get("total_time_ms")}
        header = [f"NVIDIA's NVDLA performance spreadsheet, {layers[0].net} sheet, as npulab's "
                  f"layer table (hw.nvdla.sheet_models).",
                  f"Generated by `python -m hw.nvdla.sheet_models --regenerate` from "
                  f"shared/reference/nvdla_spreadsheet/{sheet}; do not edit.",
                  f"Source: {_SHEET_SOURCE}; {_NVIDIA_LICENSE}.",
                  "Placement columns: NVIDIA's hand-entered 4 MB CV-SRAM choices "
                  "(hw.nvdla.sheet_reference.infer_placement)."]
        out[f"{name}.csv"] = _table_text(name, header, meta, cfg, layers)
    cfg = SheetConfig(min_input_extra_row="strided", dram_only_k_round=16,
                      dram_only_batched_column=True, smaller_rule="weight")
    meta = {"title": "AlexNet", "source": f"{_SHEET_SOURCE}, sheet 'Alexnet in Caffe' (shapes "
                                          f"and totals)",
            "sheet_placement": False, "dram_only_fc_batched": True,
            # NVIDIA's totals: 0.895 ms (DRAM only, published) and, with 4 MB of CV-SRAM,
            # 591,475.5625 cycles = 0.5914755625 ms (the xlsx, sheet "AlexNet", cell AL23)
            "sheet_time_ms_dram": 0.895, "sheet_time_ms_sram": 0.5914755625}
    header = ["NVIDIA's NVDLA performance spreadsheet, 'Alexnet in Caffe' sheet: layer shapes "
              "and totals (0.895 ms DRAM only, 0.5914755625 ms with 4 MB CV-SRAM) only.",
              "Generated by `python -m hw.nvdla.sheet_models --regenerate` from "
              "shared/reference/nvdla.md (\"The spreadsheet's AlexNet\"); do not edit.",
              f"Source: {_SHEET_SOURCE}; {_NVIDIA_LICENSE}.",
              "The CV-SRAM placements follow the sheet's batching rule "
              "(nvidia_batched_placement); the placement columns are unused."]
    out["alexnet.csv"] = _table_text("alexnet", header, meta, cfg,
                                     _alexnet_layers(ref / "nvdla.md"))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hw.nvdla.sheet_models",
                                description="Regenerate hw/nvdla/sheet_data/*.csv from the "
                                            "reference spreadsheet CSVs.")
    p.add_argument("--regenerate", action="store_true", help="write the tables")
    p.add_argument("--check", action="store_true", help="only compare; exit 1 when they differ")
    p.add_argument("--shared", metavar="DIR", help="the shared/ directory (default: "
                                                   "$NPULAB_SHARED or ../shared)")
    p.add_argument("--out", metavar="DIR", help="where to write (default: the package's sheet_data/)")
    args = p.parse_args(argv)
    if not (args.regenerate or args.check):
        p.error("give --regenerate or --check")
    shared = Path(args.shared) if args.shared else _shared_default()
    if not (shared / "reference" / "nvdla_spreadsheet").is_dir():
        print(f"{p.prog}: error: --shared {shared}: no reference/nvdla_spreadsheet/ there",
              file=sys.stderr)
        return 2
    target = Path(args.out) if args.out else Path(__file__).resolve().parent / "sheet_data"
    differ = []
    for fname, text in regenerate(shared).items():
        path = target / fname
        old = path.read_text(encoding="utf-8") if path.is_file() else None
        if old != text:
            differ.append(fname)
            if not args.check:
                target.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
    verb = "differ" if args.check else "written"
    print(f"{verb}: {', '.join(differ) if differ else 'none (up to date)'}")
    return 1 if (args.check and differ) else 0


if __name__ == "__main__":
    sys.exit(main())
