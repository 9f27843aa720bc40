"""NVIDIA's NVDLA performance spreadsheet, reproduced cell by cell ("spreadsheet mode").

Reproduces the ``ResNet50`` and ``GoogLeNet`` sheets of ``perf/NVDLA_OpenSource_Performance.xlsx``
(nvdla/hw), whose values are stored in ``shared/reference/nvdla_spreadsheet/*.csv``.  Every sheet
row is one hardware layer; two models are computed per row:

* "with 4 MB CV-SRAM" (sheet columns X..AM): roofline over DRAM, CV-SRAM read, CV-SRAM write
  and MAC cycles;
* "DRAM only" (columns AN..AT): roofline over DRAM and MAC cycles.

Units follow the sheet: sizes in KB (``bytes / 1024``), bandwidths in GB/s, frequency in MHz, and
``cycles = ceil(KB / BW[GB/s] * f[MHz])`` -- i.e. the sheet treats 1 KB at 1 GB/s as 1 us (a
1.024 KB/KB unit slip that we reproduce on purpose).

Formulas (``c16(x) = ceil(x/16)*16``; ``C' = c16(C*sy*sx)`` = channels after folding the stride
into channels, ``R' = ceil(R/sy)``, ``S' = ceil(S/sx)``):

* calculation           = C*K*R*S*P*Q (MACs of the layer)
* input_data_size       = C' * ceil(H/sy) * ceil(W/sx) * in_bytes / 1024
* min_input_data_size   = C' * ceil(W/sx) * rows * in_bytes / 1024 -- the input rows CBUF must
  hold to start the layer; ``rows = R`` (+1 when the sheet's ``min_input_extra_row`` says so:
  GoogLeNet always, ResNet only for strided layers with R > 1; never for FC layers)
* output_data_size      = c16(K) * A * B * in_bytes / 1024 (A x B = after the fused pooling)
* min_weight_data_size  = C' * R' * S' * atomic_k * w_bytes / 1024 with ``atomic_k = MACs / 64``
  (the kernels one MAC-array pass needs resident)
* weight_data_size      = C' * R' * S' * K * w_bytes / 1024 for R x S = 1x1 or any kernel size;
  3x3 layers with Winograd weights store the 4x4 transformed kernel: C' * 16 * K; FC layers
  use the unrounded C * R * S * K
* mac_cycles            = C' * P * Q * k_round(K) * R * S / (sy*sx) / MACs, divided by 2.25 for
  3x3 layers (Winograd F(2x2,3x3) - applied to every 3x3 layer, the sheet has no per-config
  switch); ``k_round`` = c16 (sheet-specific: the ResNet DRAM-only columns round K to 128);
  FC layers: C * R * S * K / MACs (weights amortised over the FC batch, no rounding).
* smaller_sized         = "weight" if weight_data_size < input_data_size else "feature" (ResNet;
  GoogLeNet compares min_weight_data_size with input_data_size instead): the "smaller" operand is
  kept resident in CBUF, the other one streamed;
* factor                = how often the *other* operand must be re-streamed because the resident
  one does not fit: weight resident -> ceil(weight / (CBUF - min_input)), input re-read factor
  times; feature resident -> ceil(input / (CBUF - min_weight)), weights re-read factor times;
* DRAM-only dram_traffic = input*f_in + output + weight*f_w (+ output again for "conv + elwise":
  the element-wise operand is read back);
  dram_traffic_batched (ResNet's second "DRAM Traffic" column) = input + output + weight / batch
  (FC only) + elwise, i.e. no re-streaming (informative, the cycles use ``dram_traffic``);
* cycles                = ceil(traffic / BW * freq) for DRAM, CV-SRAM read and CV-SRAM write;
* max_cycles            = max of the cycle columns; long_pole names the winner
  (DRAM, CVSRAM-R, CVSRAM-W, MAC; earlier ones win ties).

4 MB CV-SRAM model: which tensor lives in DRAM and which in CV-SRAM, and over how many images
(``CVSRAM Batching size``) the weights are amortised, is *hand-entered per row* in NVIDIA's sheet
(e.g. GoogLeNet divides all inception weights by 11 -- the 3b batching size -- through an
absolute reference, ResNet writes some outputs to DRAM and keeps others in SRAM with no rule
derivable from the layer shapes).  It is therefore an explicit per-layer input here,
:class:`SramPlacement`; :func:`read_sheet_csv` recovers it from the reference values
(:func:`infer_placement`), everything else is computed from the layer shape.

Known gaps of the sheet itself (not fixed here, this module reproduces the sheet): channels and
kernels rounded to 16 instead of the real atomic sizes (atomic-C 64 / atomic-K 32 for nv_full
int8), no CBUF fill time, no weight-load bubbles, no CACC / SDP delivery limits, Winograd applied to
every 3x3 layer even on configs without it; a user measured AlexNet in RTL at 2.3x the sheet's
cycles (nvdla/hw issue 202).
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

__all__ = [
    "SheetConfig",
    "SheetLayer",
    "SramPlacement",
    "sheet_layer",
    "sheet_network",
    "read_sheet_csv",
    "infer_placement",
    "sheet_block_dram",
    "SHARED_KEYS",
    "SRAM_KEYS",
    "DRAM_KEYS",
]


def _c16(x: float) -> int:
    return int(math.ceil(x / 16.0)) * 16


def _ceil_div(a: float, b: float) -> int:
    return int(math.ceil(a / b))


# --------------------------------------------------------------------------------------------
# configuration and layers
# --------------------------------------------------------------------------------------------

_HEADER_FIELDS = {
    "input data type (byte)": "input_bytes",
    "weight data type (byte)": "weight_bytes",
    "convolution input buffer (kb)": "cbuf_kb",
    "number of multiplier(16bit)": "n_mac",
    "frequency": "freq_mhz",
    "cvsram read bw limitation": "sram_read_gbs",
    "cvsram write bw limitation": "sram_write_gbs",
    "dram bw limitation": "dram_gbs",
    "fc batch size": "fc_batch",
}


@dataclass(frozen=True)
class SheetConfig:
    """The spreadsheet's inputs (defaults: the values in both reference CSV headers)."""

    input_bytes: float = 1.0  # Input Data type (Byte): int8
    weight_bytes: float = 1.0  # Weight Data Type (Byte)
    cbuf_kb: float = 512.0  # Convolution input buffer (KB)
    n_mac: int = 2048  # Number of Multiplier(16bit) == int8 MACs/cycle here
    freq_mhz: float = 1000.0  # Frequency
    sram_read_gbs: float = 25.0  # CVSRAM read BW limitation
    sram_write_gbs: float = 25.0  # CVSRAM write BW limitation
    dram_gbs: float = 10.0  # DRAM BW limitation
    fc_batch: int = 16  # FC batch size (weights of FC layers amortised over it)
    cvsram_kb: float = 4096.0  # CV-SRAM size of the "with 4 MB CV-SRAM" model (documentation)
    winograd: bool = True  # 3x3 layers run Winograd (MAC cycles / 2.25, 4x4 weights)
    winograd_factor: float = 2.25
    # sheet-specific quirks (the two sheets' formulas differ slightly):
    min_input_extra_row: str = "strided"  # "strided" (ResNet) | "always" (GoogLeNet) | "never"
    dram_only_k_round: int = 128  # ResNet's DRAM-only MAC column rounds K to 128
    dram_only_batched_column: bool = True  # ResNet has the 2nd "DRAM Traffic" (FC-batched) column
    # which operand is "smaller" (kept resident in CBUF): ResNet compares weight_data_size with
    # input_data_size ("weight"), GoogLeNet min_weight_data_size with input_data_size
    smaller_rule: str = "weight"

    @property
    def atomic_k(self) -> int:
        """Kernels per MAC-array pass used for the minimum resident weights (2048/64 = 32)."""
        return self.n_mac // 64

    @classmethod
    def from_csv(cls, path: str | Path, **overrides) -> "SheetConfig":
        """Read the ``#,<title>,<value>`` header lines of a reference CSV."""
        path = Path(path)
        values: dict = {}
        cols = names = None
        with path.open(newline="") as fh:
            for lineno, row in enumerate(csv.reader(fh), 1):
                if row and row[0] == "col":
                    cols = [c.strip() for c in row[1:]]
                if row and row[0] == "name":
                    names = row[1:]
                if not row or row[0] != "#":
                    continue
                if len(row) < 3:
                    raise ValueError(f"{path}:{lineno}: header line needs '#,<title>,<value>'")
                key = _HEADER_FIELDS.get(row[1].strip().lower())
                if key is None:
                    continue
                try:
                    num = float(row[2])
                except ValueError:
                    raise ValueError(
                        f"{path}:{lineno}: column 3 ({row[1]!r}): {row[2]!r} is not a number"
                    ) from None
                if key in ("n_mac", "fc_batch"):
                    num = int(num)
                values[key] = num
        if cols and names:
            values.update(_layout_quirks(cols, names))
        values.update(overrides)
        return cls(**values)


@dataclass(frozen=True)
class SramPlacement:
    """Where one layer's tensors live in the 4 MB CV-SRAM model (hand-entered in the sheet).

    Traffic = coefficient x tensor size; a weight divisor of 0 means "no weight traffic here",
    otherwise weights are amortised over that many images (1, the CV-SRAM batching size, the FC
    batch or -- GoogLeNet -- another row's batching size).
    """

    dram_input: float = 0.0
    dram_output: float = 0.0
    dram_weight_div: float = 1.0
    read_input: float = 1.0
    read_weight_div: float = 0.0
    write_output: float = 1.0


@dataclass
class SheetLayer:
    """Per-layer inputs of the sheet (columns B..V plus the per-row hand-entered choices)."""

    name: str
    attribute: str  # "conv", "conv + elwise", "fc"
    C: int
    H: int
    W: int
    K: int
    R: int
    S: int
    Z: int = 0  # zero-padding flag (P = H/sy when set; the sheet stores P, Q anyway)
    stride_h: int = 1
    stride_w: int = 1
    P: int | None = None  # height after conv (computed when None)
    Q: int | None = None
    pooling: bool = False
    pool_h: int | None = None
    pool_w: int | None = None
    pool_stride_h: int | None = None
    pool_stride_w: int | None = None
    A: int | None = None  # height after pooling (computed when None)
    B: int | None = None
    net: str = ""
    # GoogLeNet: the three 1x1 convolutions of an inception block are also listed separately
    # ("part": no MAC/max columns, not summed) and merged into one "combined" row (no MACs).
    role: str = "normal"  # "normal" | "part" | "combined"
    winograd_weights: bool | None = None  # None -> cfg.winograd (GoogLeNet stores 9 taps later)
    sram_batch: float | None = None  # CVSRAM Batching size (None: blank, e.g. ResNet fc)
    placement: SramPlacement = field(default_factory=SramPlacement)

    @property
    def is_fc(self) -> bool:
        return self.attribute.strip().lower() == "fc"

    @property
    def is_elwise(self) -> bool:
        return "elwise" in self.attribute.lower()

    def out_hw(self) -> tuple[int, int]:
        """Height/width after conv: padded -> ceil(H/s), valid -> (H-R)/s + 1."""
        if self.P is not None and self.Q is not None:
            return self.P, self.Q
        if self.Z:
            return _ceil_div(self.H, self.stride_h), _ceil_div(self.W, self.stride_w)
        return ((self.H - self.R) // self.stride_h + 1, (self.W - self.S) // self.stride_w + 1)

    def pooled_hw(self) -> tuple[int, int]:
        """Height/width after the fused pooling, (P - D)/F + 1 (ceil, as Caffe)."""
        if self.A is not None and self.B is not None:
            return self.A, self.B
        p, q = self.out_hw()
        if not self.pooling:
            return p, q
        return (_ceil_div(p - self.pool_h, self.pool_stride_h) + 1,
                _ceil_div(q - self.pool_w, self.pool_stride_w) + 1)


# --------------------------------------------------------------------------------------------
# per-layer formulas
# --------------------------------------------------------------------------------------------

SHARED_KEYS = (
    "calculation",
    "input_data_size",
    "min_input_data_size",
    "output_data_size",
    "min_weight_data_size",
    "weight_data_size",
    "winograd",
    "smaller_sized",
    "factor",
)
SRAM_KEYS = (
    "cvsram_batching_size",
    "dram_traffic",
    "dram_cycles",
    "cvsram_read_traffic",
    "cvsram_read_cycles",
    "cvsram_write_traffic",
    "cvsram_write_cycles",
    "mac_cycles",
    "max_cycles",
    "long_pole",
)
DRAM_KEYS = (
    "dram_traffic",
    "dram_traffic_batched",
    "dram_cycles",
    "mac_cycles",
    "max_cycles",
    "long_pole",
)


def _cycles(traffic_kb: float, gbs: float, cfg: SheetConfig) -> int:
    """Transfer cycles: KB / (GB/s) * MHz, rounded up (sheet: ROUNDUP(traffic/BW*freq, 0))."""
    return int(math.ceil(traffic_kb / gbs * cfg.freq_mhz - 1e-9))


def _shared(cfg: SheetConfig, ly: SheetLayer) -> dict:
    sy, sx = ly.stride_h, ly.stride_w
    P, Q = ly.out_hw()
    A, B = ly.pooled_hw()
    c_fold = _c16(ly.C * sy * sx)  # stride folded into channels, rounded to 16
    r_f, s_f = _ceil_div(ly.R, sy), _ceil_div(ly.S, sx)
    kb_in = cfg.input_bytes / 1024.0
    kb_w = cfg.weight_bytes / 1024.0
    three = ly.R == 3 and ly.S == 3
    wino = cfg.winograd and three
    wino_w = wino if ly.winograd_weights is None else (ly.winograd_weights and three)

    out: dict = {}
    out["calculation"] = None if ly.role == "combined" else ly.C * ly.K * ly.R * ly.S * P * Q
    out["input_data_size"] = c_fold * _ceil_div(ly.H, sy) * _ceil_div(ly.W, sx) * kb_in
    extra = {"always": 1, "never": 0,
             "strided": 1 if (sy > 1 and ly.R > 1) else 0}[cfg.min_input_extra_row]
    if ly.is_fc:
        extra = 0
    out["min_input_data_size"] = c_fold * _ceil_div(ly.W, sx) * (ly.R + extra) * kb_in
    out["output_data_size"] = _c16(ly.K) * A * B * kb_in
    out["min_weight_data_size"] = c_fold * r_f * s_f * cfg.atomic_k * kb_w
    if ly.is_fc:
        weight = ly.C * ly.R * ly.S * ly.K * kb_w
    elif wino_w:
        weight = c_fold * 16 * ly.K * kb_w  # 4x4 Winograd-transformed kernels
    else:
        weight = c_fold * r_f * s_f * ly.K * kb_w
    out["weight_data_size"] = weight
    out["winograd"] = 1 if wino else 0
    # the smaller operand stays resident in CBUF; the other is re-streamed `factor` times
    if cfg.smaller_rule == "weight":
        weight_resident = weight < out["input_data_size"]
    else:  # "min_weight": GoogLeNet compares the input with the *minimum* resident weights
        weight_resident = out["min_weight_data_size"] < out["input_data_size"]
    if weight_resident:
        out["smaller_sized"] = "weight"
        out["factor"] = _ceil_div(weight, cfg.cbuf_kb - out["min_input_data_size"])
    else:
        out["smaller_sized"] = "feature"
        out["factor"] = _ceil_div(out["input_data_size"], cfg.cbuf_kb - out["min_weight_data_size"])
    return out


def _mac_cycles(cfg: SheetConfig, ly: SheetLayer, k_round: int) -> float:
    """Ideal MAC-array cycles (channels padded to 16, K padded to ``k_round``)."""
    if ly.is_fc:
        return ly.C * ly.R * ly.S * ly.K / cfg.n_mac
    sy, sx = ly.stride_h, ly.stride_w
    P, Q = ly.out_hw()
    k = _ceil_div(ly.K, k_round) * k_round
    cyc = _c16(ly.C * sy * sx) * P * Q * k * ly.R * ly.S / (sy * sx) / cfg.n_mac
    if cfg.winograd and ly.R == 3 and ly.S == 3:
        cyc /= cfg.winograd_factor
    return cyc


def _pole(cands: list[tuple[str, float]]) -> tuple[float, str]:
    best = max(v for _, v in cands)
    for name, v in cands:
        if v == best:
            return best, name
    raise AssertionError


def sheet_layer(cfg: SheetConfig, layer: SheetLayer, sram: bool) -> dict:
    """All columns of one sheet row for one model (``sram=True``: with 4 MB CV-SRAM).

    Keys: :data:`SHARED_KEYS` plus :data:`SRAM_KEYS` or :data:`DRAM_KEYS`.  Columns the sheet
    leaves blank for a row (e.g. MAC/max of an inception "part" row) are ``None``.
    """
    sh = _shared(cfg, layer)
    res = dict(sh)
    X, Zo, Wt = sh["input_data_size"], sh["output_data_size"], sh["weight_data_size"]
    has_max = layer.role != "part"
    if sram:
        pl = layer.placement
        res["cvsram_batching_size"] = layer.sram_batch
        dram = pl.dram_input * X + pl.dram_output * Zo
        if pl.dram_weight_div:
            dram += Wt / pl.dram_weight_div
        read = pl.read_input * X + (Wt / pl.read_weight_div if pl.read_weight_div else 0.0)
        write = pl.write_output * Zo
        res["dram_traffic"] = dram
        res["dram_cycles"] = _cycles(dram, cfg.dram_gbs, cfg)
        res["cvsram_read_traffic"] = read
        res["cvsram_read_cycles"] = _cycles(read, cfg.sram_read_gbs, cfg)
        res["cvsram_write_traffic"] = write
        res["cvsram_write_cycles"] = _cycles(write, cfg.sram_write_gbs, cfg)
        if has_max:
            mac = _mac_cycles(cfg, layer, 16)
            res["mac_cycles"] = mac
            res["max_cycles"], res["long_pole"] = _pole([
                ("DRAM", res["dram_cycles"]), ("CVSRAM-R", res["cvsram_read_cycles"]),
                ("CVSRAM-W", res["cvsram_write_cycles"]), ("MAC", mac)])
        else:
            res["mac_cycles"] = res["max_cycles"] = res["long_pole"] = None
        return res
    # DRAM only: re-stream the non-resident operand `factor` times
    elw = Zo if layer.is_elwise else 0.0
    if sh["smaller_sized"] == "weight":
        traffic = X * sh["factor"] + Zo + Wt + elw
    else:
        traffic = X + Zo + Wt * sh["factor"] + elw
    res["dram_traffic"] = traffic
    res["dram_traffic_batched"] = (X + Zo + (Wt / cfg.fc_batch if layer.is_fc else Wt) + elw
                                   if cfg.dram_only_batched_column else None)
    res["dram_cycles"] = _cycles(traffic, cfg.dram_gbs, cfg)
    if has_max:
        mac = _mac_cycles(cfg, layer, cfg.dram_only_k_round)
        res["mac_cycles"] = mac
        res["max_cycles"], res["long_pole"] = _pole([("DRAM", res["dram_cycles"]), ("MAC", mac)])
    else:
        res["mac_cycles"] = res["max_cycles"] = res["long_pole"] = None
    return res


def sheet_network(cfg: SheetConfig, layers: list[SheetLayer]) -> dict:
    """Both models for every layer plus the totals rows.

    Returns ``{"sram": [row dicts], "dram": [row dicts], "totals": {"sram": {...}, "dram": {...}}}``
    with totals: total_cycles (sum of max_cycles), total_time_ms (= cycles / (f[MHz]*1000)),
    fps (= 1000 / ms), hw_mac_effi (= sum of MAC cycles / total cycles: how busy the array is)
    and network_mac_effi (= useful MACs C*K*R*S*P*Q / (total cycles * MACs)).
    """
    out = {"sram": [], "dram": [], "totals": {}}
    for model, sram in (("sram", True), ("dram", False)):
        rows = [sheet_layer(cfg, ly, sram) for ly in layers]
        out[model] = rows
        cycles = sum(r["max_cycles"] for r in rows if r["max_cycles"] is not None)
        macs = sum(r["mac_cycles"] for r in rows if r["mac_cycles"] is not None)
        useful = sum(r["calculation"] for r in rows if r["calculation"] is not None)
        ms = cycles / (cfg.freq_mhz * 1000.0)
        out["totals"][model] = {
            "total_cycles": cycles,
            "total_time_ms": ms,
            "fps": 1000.0 / ms,
            "hw_mac_effi": macs / cycles,
            "network_mac_effi": useful / (cycles * cfg.n_mac),
        }
    return out


# --------------------------------------------------------------------------------------------
# reference CSV loader
# --------------------------------------------------------------------------------------------

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


def _layout_quirks(cols: list[str], names: list[str]) -> dict:
    """The two sheets' formulas differ slightly; recognise which one a CSV is from its layout
    (GoogLeNet has a "Factor" column at AO, ResNet a second "DRAM Traffic")."""
    if "AO" in cols and names[cols.index("AO")].strip().lower() == "factor":
        return dict(min_input_extra_row="always", dram_only_k_round=16,
                    dram_only_batched_column=False, smaller_rule="min_weight")
    return dict(min_input_extra_row="strided", dram_only_k_round=128,
                dram_only_batched_column=True, smaller_rule="weight")


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
    NVIDIA's sheet, see the module docstring) is recovered with :func:`infer_placement`; all
    other columns of ``expected`` are left for the caller to compare with :func:`sheet_layer`.
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


def sheet_block_dram(cfg: SheetConfig, block: list[SheetLayer], weight_div: float) -> dict:
    """GoogLeNet's per-inception-block "DRAM" rows (3a..4e; informative, not in the totals).

    The DRAM traffic of a whole inception block when its intermediate tensors stay in CV-SRAM:
    the block input read once (input of its first row), the block outputs written once (outputs
    of the stand-alone 1x1 row and of every row that is not a "part"/"combined" 1x1 row: the
    3x3, 5x5 and pool-projection branches) and the weights of every executed row (combined 1x1,
    3x3, 5x5, pool proj) amortised over ``weight_div`` images -- the sheet uses an absolute
    reference to the 3b batching size (11) for every block.  Returns dram_traffic, dram_cycles
    and the constant max_cycles 0 / long_pole "NONE" the sheet shows for these rows.
    """
    if not block:
        raise ValueError("empty inception block")
    sizes = [_shared(cfg, ly) for ly in block]
    traffic = sizes[0]["input_data_size"]
    if block[0].role == "part":
        traffic += sizes[0]["output_data_size"]
    for ly, sh in zip(block, sizes):
        if ly.role == "normal":
            traffic += sh["output_data_size"]
        if ly.role != "part":
            traffic += sh["weight_data_size"] / weight_div
    return {"dram_traffic": traffic, "dram_cycles": _cycles(traffic, cfg.dram_gbs, cfg),
            "max_cycles": 0, "long_pole": "NONE"}
