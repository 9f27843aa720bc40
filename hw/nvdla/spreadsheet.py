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
:class:`SramPlacement`; :func:`hw.nvdla.sheet_reference.read_sheet_csv` recovers it from the
reference values (:func:`~hw.nvdla.sheet_reference.infer_placement`), everything else is computed
from the layer shape.

Known gaps of the sheet itself (not fixed here, this module reproduces the sheet): channels and
kernels rounded to 16 instead of the real atomic sizes (atomic-C 64 / atomic-K 32 for nv_full
int8), no CBUF fill time, no weight-load bubbles, no CACC / SDP delivery limits, Winograd applied to
every 3x3 layer even on configs without it; a user measured AlexNet in RTL at 2.3x the sheet's
cycles (nvdla/hw issue 202).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "SheetConfig",
    "SheetLayer",
    "SramPlacement",
    "sheet_layer",
    "sheet_network",
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


def _layout_quirks(cols: list[str], names: list[str]) -> dict:
    """The two sheets' formulas differ slightly; recognise which one a CSV is from its layout
    (GoogLeNet has a "Factor" column at AO, ResNet a second "DRAM Traffic")."""
    if "AO" in cols and names[cols.index("AO")].strip().lower() == "factor":
        return dict(min_input_extra_row="always", dram_only_k_round=16,
                    dram_only_batched_column=False, smaller_rule="min_weight")
    return dict(min_input_extra_row="strided", dram_only_k_round=128,
                dram_only_batched_column=True, smaller_rule="weight")


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
