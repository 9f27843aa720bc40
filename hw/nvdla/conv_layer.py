"""One NVDLA convolution hardware layer as the cycle model takes it: :class:`ConvLayer`.

A direct convolution (shape, stride, padding, dilation, groups, batch, precision) with the SDP
and PDP work fused into it, checked against NVDLA's limits when built. The compiler's NVDLA
backend (:mod:`compiler.backends.nvdla`) and the register front end build them; the cycle model
(:mod:`hw.nvdla.cycles`) times them. :func:`layers_from_spreadsheet_rows` builds them from the
rows of NVIDIA's performance spreadsheet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from hw.nvdla.config import PRECISIONS

__all__ = ["ConvLayer", "layers_from_spreadsheet_rows"]


@dataclass(frozen=True)
class ConvLayer:
    """One NVDLA hardware layer: a direct convolution with optional fused SDP/PDP work.

    ``C, H, W``: input channels/height/width; ``K`` output channels; ``R x S`` kernel;
    ``stride_y/stride_x``; ``pad_*`` zero padding; ``dilation`` (both axes); ``groups``
    (grouped/depthwise convolution, run as ``groups`` independent hardware layers);
    ``batch`` images (processed one after another). ``precision``: int8, int16 or fp16.
    Fused SDP ops: ``bias`` (X1), ``bn`` (X2), ``eltwise`` (per-element operand read from memory
    by the SDP RDMA), ``relu``. Fused PDP pooling: ``pool_kernel``/``pool_stride`` as
    (height, width), Caffe ceil-mode output size. ``image_input``: the first layer's pixel mode,
    where CDMA's channel post-extension folds the S taps of a row into the channels
    (``doc/hw/format.rst``), so an atomic op covers ``C*S`` channels and blocks have R stripes.
    """

    C: int
    H: int
    W: int
    K: int
    R: int = 1
    S: int = 1
    stride_y: int = 1
    stride_x: int = 1
    pad_top: int = 0
    pad_left: int = 0
    pad_bottom: int = 0
    pad_right: int = 0
    dilation: int = 1
    groups: int = 1
    batch: int = 1
    precision: str = "int8"
    bias: bool = False
    bn: bool = False
    eltwise: bool = False
    relu: bool = False
    pool_kernel: tuple[int, int] | None = None
    pool_stride: tuple[int, int] | None = None
    image_input: bool = False
    name: str = ""

    def __post_init__(self) -> None:
        for key in ("pool_kernel", "pool_stride"):
            v = getattr(self, key)
            if isinstance(v, int) and not isinstance(v, bool):
                object.__setattr__(self, key, (v, v))
        self.validate()

    # constructors -----------------------------------------------------------------
    @classmethod
    def conv(cls, C: int, H: int, W: int, K: int, R: int, S: int | None = None, stride: int = 1,
             pad: int = 0, **kw) -> "ConvLayer":
        """Square-ish convenience constructor: same stride and padding on both axes."""
        return cls(C, H, W, K, R, R if S is None else S, stride, stride, pad, pad, pad, pad, **kw)

    @classmethod
    def fc(cls, C: int, K: int, H: int = 1, W: int = 1, **kw) -> "ConvLayer":
        """A fully connected layer as a convolution whose kernel covers the whole H x W input."""
        return cls(C, H, W, K, H, W, **kw)

    # validation -------------------------------------------------------------------
    def validate(self) -> None:
        where = f"ConvLayer {self.name!r}" if self.name else "ConvLayer"
        for key in ("C", "H", "W", "K", "R", "S", "stride_y", "stride_x", "dilation", "groups",
                    "batch"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{where}: {key} = {v!r}: must be an integer >= 1")
        for key in ("pad_top", "pad_left", "pad_bottom", "pad_right"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{where}: {key} = {v!r}: must be an integer >= 0")
        if self.C % self.groups or self.K % self.groups:
            raise ValueError(f"{where}: groups = {self.groups}: C = {self.C} and K = {self.K} "
                             f"must both be divisible by groups")
        if self.precision not in PRECISIONS:
            raise ValueError(f"{where}: precision = {self.precision!r}: must be one of "
                             f"{', '.join(PRECISIONS)}")
        if self.eff_R > self.H + self.pad_top + self.pad_bottom or \
                self.eff_S > self.W + self.pad_left + self.pad_right:
            raise ValueError(f"{where}: kernel {self.eff_R}x{self.eff_S} (with dilation) is "
                             f"larger than the padded input "
                             f"{self.H + self.pad_top + self.pad_bottom}x"
                             f"{self.W + self.pad_left + self.pad_right}")
        if (self.pool_kernel is None) != (self.pool_stride is None):
            raise ValueError(f"{where}: pool_kernel and pool_stride must be given together")
        if self.pool_kernel is not None:
            # PDP limits: kernel 1..8, stride 1..16 (hwarch.rst, PDP).
            for key, lo, hi in (("pool_kernel", 1, 8), ("pool_stride", 1, 16)):
                v = getattr(self, key)
                if (not isinstance(v, tuple) or len(v) != 2
                        or not all(isinstance(x, int) and not isinstance(x, bool) and lo <= x <= hi
                                   for x in v)):
                    raise ValueError(f"{where}: {key} = {v!r}: must be (h, w) integers in "
                                     f"{lo}..{hi} (PDP limits)")
            if self.pool_kernel[0] > self.P or self.pool_kernel[1] > self.Q:
                raise ValueError(f"{where}: pool_kernel {self.pool_kernel} is larger than the "
                                 f"convolution output {self.P}x{self.Q}")

    # shapes -----------------------------------------------------------------------
    @property
    def eff_R(self) -> int:
        return (self.R - 1) * self.dilation + 1

    @property
    def eff_S(self) -> int:
        return (self.S - 1) * self.dilation + 1

    @property
    def P(self) -> int:
        """Output height."""
        return (self.H + self.pad_top + self.pad_bottom - self.eff_R) // self.stride_y + 1

    @property
    def Q(self) -> int:
        """Output width."""
        return (self.W + self.pad_left + self.pad_right - self.eff_S) // self.stride_x + 1

    @property
    def pooled_shape(self) -> tuple[int, int]:
        """Output height/width after fused pooling (Caffe ceil mode), or (P, Q)."""
        if self.pool_kernel is None:
            return self.P, self.Q
        (kh, kw), (sh, sw) = self.pool_kernel, self.pool_stride
        return -(-(self.P - kh) // sh) + 1, -(-(self.Q - kw) // sw) + 1

    @property
    def macs(self) -> int:
        """Useful multiply-accumulates (no padding of channels)."""
        return self.batch * self.K * self.P * self.Q * self.R * self.S * (self.C // self.groups)


def layers_from_spreadsheet_rows(rows: Sequence[dict], precision: str = "int8",
                                 image_first: bool = True) -> list[ConvLayer]:
    """ConvLayers from NVIDIA performance-spreadsheet rows (dicts with the column titles of
    ``shared/reference/nvdla_spreadsheet/*.csv``): Z = 1 means pad = R // 2; fused pooling when
    "Pooling after Conv" is 1; fused SDP ops from the layer name."""
    out = []
    for i, row in enumerate(rows):
        g = lambda key: int(float(row[key]))  # noqa: E731
        C, H, W, K = g("#input feature maps C"), g("Input Height H"), g("Input Width W"), \
            g("#output feature maps K")
        R, S = g("Filter Height R"), g("Filter Width S")
        z = g("Zero Padding Z")
        sy, sx = g("Vertical  Conv Srtide H"), g("Horizontal Conv  Stride V")
        pool = str(row.get("Pooling after Conv", "0")).strip() == "1"
        name = row.get("Layer", f"layer{i}")
        low = name.lower()
        kw = {}
        if pool:
            kw = dict(pool_kernel=(g("Pooling Height D"), g("Pooling Width E")),
                      pool_stride=(g("Vertical pooling  stride F"),
                                   g("Horizontal pooling stride G")))
        pr, ps = (R // 2, S // 2) if z == 1 else (0, 0)
        out.append(ConvLayer(C, H, W, K, R, S, sy, sx, pr, ps, pr, ps, precision=precision,
                             bias=True, bn="bn" in low or "scale" in low,
                             eltwise="elwise" in low or "eltwise" in low, relu="relu" in low,
                             image_input=image_first and i == 0 and C <= 4, name=name, **kw))
    return out
