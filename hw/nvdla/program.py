"""The program an NVDLA build runs: hardware layers, as NVIDIA's compiler fuses them.

A *hardware layer* is one programming of a pipeline of units that reads memory, computes and
writes memory: a convolution layer runs CDMA -> CSC -> CMAC -> CACC -> SDP and may hand its SDP
output on the fly to PDP; an SDP, PDP, CDP or BDMA layer runs alone, memory to memory.
:class:`NvdlaProgram` holds a graph's hardware layers (:class:`HwLayer`, their PDP runs
:class:`PdpPass`) and the ops left out (:class:`SkippedOp`); the cycle model
(:mod:`hw.nvdla.cycles`) and ``npulab``'s NVDLA runner time them. The PDP limits a pass must
respect and the width PDP can pool on the fly are here too: the compiler's NVDLA backend
(:mod:`compiler.backends.nvdla`), which builds programs from IR graphs, reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

from hw.nvdla.config import NvdlaConfig
from hw.nvdla.conv_layer import ConvLayer

__all__ = ["PdpPass", "HwLayer", "SkippedOp", "NvdlaProgram", "pdp_max_flying_width",
           "PDP_MAX_KERNEL", "PDP_MAX_STRIDE", "PDP_MAX_PAD"]

#: PDP limits (``doc/hw/v1/hwarch.rst`` PDP; ``NVDLA_PDP.rdl`` D_POOLING_PADDING_CFG 3-bit pads).
PDP_MAX_KERNEL, PDP_MAX_STRIDE, PDP_MAX_PAD = 8, 16, 7

#: PDP on-the-fly line buffer: 7 KiB (``engine-ast/PDPNode.cpp`` calculateMaxWidth).
_PDP_BUF_BITS = 7 * 1024 * 8
#: Line-buffer lines the RTL reserves for ``ceil(kernel_h / stride_h)`` overlapping lines (0..8).
_PDP_RTL_LINES = (1, 1, 2, 4, 4, 8, 8, 8, 8)


@dataclass(frozen=True)
class PdpPass:
    """One PDP run: ``in_h x in_w`` -> ``out_h x out_w`` with one window/stride/padding."""

    in_h: int
    in_w: int
    out_h: int
    out_w: int
    kernel_h: int
    kernel_w: int
    stride_h: int
    stride_w: int
    pad_top: int = 0
    pad_bottom: int = 0
    pad_left: int = 0
    pad_right: int = 0


@dataclass(frozen=True)
class HwLayer:
    """One NVDLA hardware layer.

    kind: ``conv`` (conv core + SDP [+ PDP on the fly]), ``sdp``, ``pdp``, ``cdp`` or ``bdma``
        (memory to memory). ops: the IR ops it covers, in graph order. conv: the
        :class:`ConvLayer` for ``conv`` layers, else None. Shapes: input ``in_c x in_h x in_w``
        and output ``out_c x out_h x out_w`` per image, ``batch`` images. operands: tensors read
        from memory by the SDP (1 + the element-wise operand for a conv layer with a fused add;
        1 or 2 for an ``sdp`` layer). bytes_per_element: of ``precision``. passes: PDP runs (a
        fused pool's single pass, or a standalone pool's passes; more than one when a large
        window is split). lut: the SDP LUT is used. fc_batch: images sharing one weight fetch
        (FC layers on builds with the ``batch`` feature; 1 otherwise).
    """

    name: str
    kind: str
    ops: tuple[str, ...]
    precision: str
    conv: ConvLayer | None
    batch: int
    in_c: int
    in_h: int
    in_w: int
    out_c: int
    out_h: int
    out_w: int
    operands: int = 1
    bytes_per_element: int = 1
    passes: tuple[PdpPass, ...] = ()
    lut: bool = False
    fc_batch: int = 1

    @property
    def macs(self) -> int:
        return self.conv.macs if self.conv is not None else 0


@dataclass(frozen=True)
class SkippedOp:
    """An op NVDLA cannot run, left out of the program (``skip_unsupported=True``)."""

    name: str
    kind: str
    reason: str
    macs: int = 0


@dataclass(frozen=True)
class NvdlaProgram:
    """The hardware layers of a graph on one NVDLA build; ``macs`` is their MAC total."""

    graph: str
    config: str
    precision: str
    layers: tuple[HwLayer, ...]
    skipped: tuple[SkippedOp, ...]
    macs: int

    @property
    def skipped_macs(self) -> int:
        return sum(s.macs for s in self.skipped)

    def conv_layers(self) -> tuple[ConvLayer, ...]:
        """The convolution layers, in order (what :func:`hw.nvdla.cycles.network_cycles` takes)."""
        return tuple(layer.conv for layer in self.layers if layer.conv is not None)

    def counts(self) -> dict[str, int]:
        """Hardware layers per kind."""
        out: dict[str, int] = {}
        for layer in self.layers:
            out[layer.kind] = out.get(layer.kind, 0) + 1
        return out

    def table(self) -> str:
        """One line per hardware layer: index, kind, shapes, fused work, IR ops."""
        lines = []
        for i, hl in enumerate(self.layers):
            extra = []
            if hl.conv is not None:
                c = hl.conv
                extra.append(f"{c.R}x{c.S}/{c.stride_y}"
                             + (f" g{c.groups}" if c.groups > 1 else ""))
                extra += [f for f in ("bias", "bn", "eltwise", "relu", "image_input")
                          if getattr(c, f)]
                if c.pool_kernel is not None:
                    extra.append(f"pool{c.pool_kernel[0]}x{c.pool_kernel[1]}/{c.pool_stride[0]}")
            if hl.kind == "pdp":
                extra.append("+".join(f"{p.kernel_h}x{p.kernel_w}/{p.stride_h}" for p in hl.passes))
            if hl.kind == "sdp":
                extra.append(f"{hl.operands} operand" + ("s" if hl.operands > 1 else ""))
            if hl.lut:
                extra.append("lut")
            if hl.fc_batch > 1:
                extra.append(f"fc_batch {hl.fc_batch}")
            shape_in = f"{hl.in_c}x{hl.in_h}x{hl.in_w}"
            shape_out = f"{hl.out_c}x{hl.out_h}x{hl.out_w}"
            lines.append(f"{i:3d} {hl.kind:4s} {shape_in:>12s} -> {shape_out:<12s} "
                         f"{' '.join(extra):42s} {', '.join(hl.ops)}")
        return "\n".join(lines)


def pdp_max_flying_width(cfg: NvdlaConfig, precision: str, kernel_h: int, stride_h: int) -> int:
    """Widest pooled output PDP can produce on the fly from SDP (``engine-ast/PDPNode.cpp``
    ``calculateMaxWidth``): the 7 KiB line buffer holds the ``ceil(kernel_h/stride_h)`` lines
    shared by vertically adjacent windows (the RTL reserves 1, 2, 4 or 8 lines) for one kernel
    group (atomic-K kernels, half at 16 bit) of 14-bit (int8) or 28-bit partial results."""
    overlap = min(-(-kernel_h // stride_h), len(_PDP_RTL_LINES) - 1)
    kernels = cfg.atomic_k if precision == "int8" else cfg.atomic_k // 2
    bits = 14 if precision == "int8" else 28
    return _PDP_BUF_BITS // (_PDP_RTL_LINES[overlap] * kernels * bits)
