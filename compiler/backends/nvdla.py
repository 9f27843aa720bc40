"""Lower an IR graph (``compiler.ir.Graph``) to NVDLA hardware layers, fused as NVIDIA's compiler
fuses them.

NVIDIA's compiler (``nvdla/sw``, ``umd/core/src/compiler/engine-ast/``) turns a network into
*hardware layers*: one programming of a pipeline of units that reads memory, computes and writes
memory. A convolution layer runs CDMA -> CSC -> CMAC -> CACC -> SDP and may hand its SDP output
on the fly to PDP; an SDP, PDP or CDP can also run alone, memory to memory. This backend applies
the same fusion rules to npulab's IR and returns an :class:`~hw.nvdla.program.NvdlaProgram`
(the program types live in ``hw``, which never imports ``compiler``) whose convolution layers
are :class:`~hw.nvdla.conv_layer.ConvLayer` values for the cycle model.

Rules, in graph order (every op lands in exactly one hardware layer, or in ``skipped``):

* **Conv2d** -> a ``conv`` layer. ``groups`` is kept (NVDLA runs each group as its own hardware
  layer; ``ConvLayer`` models that). The IR does not record bias, batch-norm and activation: with
  ``assume_bn_relu=True`` (the zoo convention, ``compiler/frontends/_cnn_blocks.py``) every conv
  carries bias and batch-norm in SDP X1 (int8 compiler convention, ``shared/reference/nvdla.md``:
  bias in X1's ALU, the per-channel BN scale in X1's multiplier) and a ReLU, except a conv whose
  output goes into a residual add: there the ReLU follows the add (ResNet's order), set on the
  layer the add fuses into when that layer is a conv. MobileNetV2's adds have no ReLU; the flag
  there is harmless for timing (ReLU is the last step of the same SDP pass). Fully connected
  layers carry a bias (Gemms with one input; attention's products of two activations none). The
  first conv reading the graph input with at most 4 channels is a pixel (image) input layer
  (``image_input``).
* **Eltwise** add/mul/max/min of two tensors -> fused into the conv layer producing the
  *later-produced* input when that op is the layer's output and has no other consumer: SDP X2 runs
  in per-element mode, its operand (the other input) read from memory by the SDP RDMA
  (``engine-ast/SDPEltWiseOp.cpp`` configures an X sub-unit in ``SDP_MODE_PER_ELEMENT``). Only the
  later-produced input can host it: the other operand must already be in memory. Otherwise a
  standalone ``sdp`` layer reading both operands.
* **Activations**: ``relu``/``prelu``/``leaky_relu`` use the X unit; ``sigmoid``, ``tanh``,
  ``gelu``, ``silu``, ``swish``, ``elu`` need the SDP LUT (feature ``sdp_lut``). They fuse into
  their producer conv layer under the same single-consumer rule, else run as an ``sdp`` layer.
  ``lrn`` is a ``cdp`` layer.
* **Pool** -> fused into its producer conv layer (SDP -> PDP on the fly) when, as in
  ``engine-ast/PDPNode.cpp`` ``fuseOnTheFlyNodes``: the pool has one input, which is the output op
  of a conv layer with no other consumer; the conv is not grouped; the pooled output width fits
  PDP's on-the-fly line buffer (:func:`~hw.nvdla.program.pdp_max_flying_width`); kernel 1..8,
  stride 1..16 and padding 0..7 (``NVDLA_PDP.rdl`` ``D_POOLING_PADDING_CFG``, 3-bit fields); and
  the output size equals ``ConvLayer``'s Caffe ceil-mode size. Otherwise a standalone ``pdp``
  layer. A 1x1 stride-1 unpadded pool is the identity and is elided (attached to the layer
  producing its input). A window larger than 8 (global average pooling over 14x14, ...) is split
  into a sequence of PDP passes inside one ``pdp`` layer (:func:`.nvdla_pool.split_pool_window`
  gives the rules). Overlapping windows larger than 8 are an error.
* **Gemm** -> a ``conv`` layer. When it reads one op with a known ``C x H x W`` per-image output
  and ``m`` equals that op's image count and ``k = C*H*W``, it is a fully connected layer over
  images: ``ConvLayer.fc(C, n, H, W, batch=m)`` with ``fc_batch`` images sharing one weight
  fetch (the ``batch`` feature, nv_full: up to ``max_batch`` = 32). Otherwise its ``m`` rows are
  points of one surface: a 1x1 convolution over ``H x W = m x 1`` (``batch`` = the Gemm's batch);
  for attention's activation x activation products this takes the second operand to be laid out
  as weights (the layout conversion is not modelled).
* **Move** ``concat``/``split``/``slice``/``reshape``/``flatten``/``view``: free (producers
  write adjacent memory, consumers read a view), attached to the layer producing their last
  input. ``copy``/``pad`` are a ``bdma`` copy layer (feature ``bdma``). Other moves are
  unsupported.
* **Unsupported** (``softmax``, ``layernorm``, LUT activations without ``sdp_lut``, ...) raise
  :class:`NvdlaLoweringError` naming the op, its kind and why, unless ``skip_unsupported=True``
  (then they are listed in ``NvdlaProgram.skipped``, with their MACs). NVIDIA's compiler
  itself runs softmax on the CPU (``engine-ast/SoftMaxOp.cpp``, ``CPUSoftMaxOpNode``).

Ops are told apart by their IR type (:class:`~compiler.ir.Conv2d`, :class:`~compiler.ir.Gemm`,
:class:`~compiler.ir.Pool`, :class:`~compiler.ir.Eltwise`, :class:`~compiler.ir.Move`) and read
through the IR's shape and size properties.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from compiler.backends.nvdla_pool import split_pool_window
from compiler.ir import ELEMENTWISE_OPS, Conv2d, Gemm, Graph, Move, Pool
from hw.nvdla.config import NvdlaConfig
from hw.nvdla.conv_layer import ConvLayer
from hw.nvdla.cycles import BYTES
from hw.nvdla.program import (PDP_MAX_KERNEL, PDP_MAX_PAD, PDP_MAX_STRIDE, HwLayer, NvdlaProgram,
                              PdpPass, SkippedOp, pdp_max_flying_width)

__all__ = ["NvdlaLoweringError", "lower_graph"]

_TWO_OPERAND = ("add", "mul", "max", "min")
_X_ACTIVATIONS = ("relu", "prelu", "leaky_relu")
_LUT_ACTIVATIONS = ("sigmoid", "tanh", "gelu", "silu", "swish", "elu")
_PER_CHANNEL = ("scale", "bias", "batchnorm")
_FREE_MOVES = ("concat", "split", "slice", "reshape", "flatten", "view")
_BDMA_MOVES = ("copy", "pad")
_WHY_NOT = {
    "softmax": "a row-wise exponent/normalise has no NVDLA unit (NVIDIA's compiler runs it on the "
               "CPU: engine-ast/SoftMaxOp.cpp)",
    "layernorm": "a per-row mean/variance normalisation has no NVDLA unit (SDP scales per channel "
                 "with constants, it cannot reduce over a row)",
    "adaptive_avg_pool": "replicating a feature map smaller than the output has no NVDLA unit",
}


class NvdlaLoweringError(ValueError):
    """An op of the graph cannot run on this NVDLA build (or the lowering was asked wrongly)."""


@dataclass
class _Building:
    """A hardware layer under construction (frozen into :class:`HwLayer` at the end)."""

    kind: str
    ops: list[str]
    conv: ConvLayer | None
    shape_in: tuple[int, int, int, int]        # (batch, C, H, W)
    shape_out: tuple[int, int, int, int]
    operands: int = 1
    passes: tuple[PdpPass, ...] = ()
    lut: bool = False
    fc_batch: int = 1
    output_op: str = ""                        # the op whose result the layer writes


def _check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise NvdlaLoweringError(f"lower_graph: {name} = {value!r}: must be True or False")


def lower_graph(graph: Graph, cfg: NvdlaConfig, precision: str = "int8", *,
                fc_batch: int | None = None, assume_bn_relu: bool = True,
                skip_unsupported: bool = False) -> NvdlaProgram:
    """Map ``graph``'s ops to NVDLA hardware layers on ``cfg`` (rules: module docstring).

    Parameters
    ----------
    graph: a ``compiler.ir.Graph``.
    cfg: the NVDLA build; ``precision`` must be one it supports.
    fc_batch: images per weight fetch of fully connected layers; ``None``: ``cfg.max_batch``
        (1 without the ``batch`` feature), at most the images the layer has. Values > 1 need the
        ``batch`` feature and must be <= ``cfg.max_batch``.
    assume_bn_relu: convs carry bias + batch-norm + ReLU, FC layers a bias (the zoo convention).
    skip_unsupported: list ops NVDLA cannot run in ``skipped`` instead of raising.

    Raises
    ------
    NvdlaLoweringError: an op NVDLA cannot run (without ``skip_unsupported``) or a bad argument.
    ConfigError: ``precision`` or ``fc_batch`` that the build does not support.
    """
    if not isinstance(cfg, NvdlaConfig):
        raise NvdlaLoweringError(f"lower_graph: cfg = {cfg!r}: must be an NvdlaConfig "
                                 f"(hw.nvdla.config.load_nvdla_config)")
    if not isinstance(graph, Graph):
        raise NvdlaLoweringError(f"lower_graph: graph = {graph!r}: must be a compiler.ir.Graph")
    ops, gname = graph.ops, graph.name
    cfg.require_precision(precision, where="lower_graph")
    _check_bool("assume_bn_relu", assume_bn_relu)
    _check_bool("skip_unsupported", skip_unsupported)
    if fc_batch is not None:
        if isinstance(fc_batch, bool) or not isinstance(fc_batch, int) or fc_batch < 1:
            raise NvdlaLoweringError(f"lower_graph: fc_batch = {fc_batch!r}: must be None or an "
                                     f"integer >= 1")
        if fc_batch > 1:
            cfg.require_feature("batch", where=f"lower_graph: fc_batch = {fc_batch}")
            if fc_batch > cfg.max_batch:
                raise NvdlaLoweringError(f"lower_graph: fc_batch = {fc_batch}: {cfg.name} batches "
                                         f"at most max_batch = {cfg.max_batch} images")
    default_fc_batch = fc_batch if fc_batch is not None else cfg.max_batch

    ops_index = {op.name: i for i, op in enumerate(ops)}
    op_by_name = {op.name: op for op in ops}
    consumers = graph.readers()
    feeds_add = {src for op in ops if isinstance(op, ELEMENTWISE_OPS) and op.work().name == "add"
                 for src in op.inputs}

    layers: list[_Building] = []
    where: dict[str, int] = {}                      # op -> index of the layer holding it
    shape: dict[str, tuple[int, int, int, int]] = {}  # op -> output (batch, C, H, W), if known
    skipped: list[SkippedOp] = []
    pending_free: list[str] = []                    # free ops that read only the graph input
    nbytes = BYTES[precision]
    first_image_conv_done = False

    def unsupported(op, kind: str, why: str) -> None:
        if not skip_unsupported:
            raise NvdlaLoweringError(
                f"{gname}: {type(op).__name__} {op.name!r} ({kind}) cannot run on {cfg.name}: "
                f"{why}; pass skip_unsupported=True to list it in NvdlaProgram.skipped instead")
        skipped.append(SkippedOp(op.name, kind, why, op.macs))

    def new_layer(op, b: _Building) -> None:
        nonlocal pending_free
        taken = [p for p in pending_free if p in op.inputs]  # free views of the graph input
        pending_free = [p for p in pending_free if p not in taken]
        b.ops = taken + b.ops
        b.output_op = op.name
        layers.append(b)
        for name in b.ops:
            where[name] = len(layers) - 1

    def attach(op, index: int, output: bool = True) -> None:
        nonlocal pending_free
        taken = [p for p in pending_free if p in op.inputs]
        pending_free = [p for p in pending_free if p not in taken]
        for name in taken + [op.name]:
            layers[index].ops.append(name)
            where[name] = index
        if output:
            layers[index].output_op = op.name

    def fusable_producer(op) -> int | None:
        """Layer index of ``op``'s single producer when it is a conv layer's output op that
        ``op`` alone consumes."""
        if len(op.inputs) != 1:
            return None
        src = op.inputs[0]
        idx = where.get(src)
        if idx is None or layers[idx].kind != "conv" or layers[idx].output_op != src:
            return None
        return idx if consumers[src] == [op.name] else None

    def in_shape(inputs: tuple[str, ...], elements: int) -> tuple[int, int, int, int]:
        """Shape of an op reading ``inputs`` and writing ``elements``: a producer's shape with
        that many elements (the last such input), their channel concatenation, or a flat
        ``elements x 1 x 1`` when unknown."""
        srcs = [shape.get(s) for s in inputs]
        for s in reversed(srcs):
            if s is not None and math.prod(s) == elements:
                return s
        if srcs and all(s is not None for s in srcs) and \
                len({(s[0], s[2], s[3]) for s in srcs}) == 1:
            cat = (srcs[0][0], sum(s[1] for s in srcs), srcs[0][2], srcs[0][3])
            if math.prod(cat) == elements:
                return cat
        return (1, elements, 1, 1)

    for op in ops:
        if isinstance(op, Conv2d):
            if op.dilation_h != op.dilation_w:
                unsupported(op, "conv", f"dilation {op.dilation_h}x{op.dilation_w}: the cycle "
                            f"model's ConvLayer takes one dilation for both axes")
                continue
            image = (not op.inputs and op.in_channels <= 4 and op.groups == 1
                     and op.dilation_h == 1 and not first_image_conv_done)
            first_image_conv_done |= image
            conv = ConvLayer(
                C=op.in_channels, H=op.in_h, W=op.in_w, K=op.out_channels, R=op.kernel_h,
                S=op.kernel_w, stride_y=op.stride_h, stride_x=op.stride_w, pad_top=op.pad_top,
                pad_left=op.pad_left, pad_bottom=op.pad_bottom, pad_right=op.pad_right,
                dilation=op.dilation_h, groups=op.groups, batch=op.batch, precision=precision,
                bias=assume_bn_relu, bn=assume_bn_relu,
                relu=assume_bn_relu and op.name not in feeds_add, image_input=image,
                name=op.name)
            shape[op.name] = (op.batch, op.out_channels, op.out_h, op.out_w)
            new_layer(op, _Building("conv", [op.name], conv,
                                    (op.batch, op.in_channels, op.in_h, op.in_w), shape[op.name]))

        elif isinstance(op, Gemm):
            src = shape.get(op.inputs[0]) if len(op.inputs) == 1 else None
            if op.batch == 1 and src is not None and src[0] == op.m and \
                    src[1] * src[2] * src[3] == op.k:
                fcb = max(1, min(default_fc_batch, op.m))
                conv = ConvLayer.fc(src[1], op.n, src[2], src[3], batch=op.m, precision=precision,
                                    bias=assume_bn_relu, name=op.name)
                shape[op.name] = (op.m, op.n, 1, 1)
                b = _Building("conv", [op.name], conv, src, shape[op.name], fc_batch=fcb)
            else:
                conv = ConvLayer(C=op.k, H=op.m, W=1, K=op.n, batch=op.batch, precision=precision,
                                 bias=assume_bn_relu and len(op.inputs) <= 1, name=op.name)
                shape[op.name] = (op.batch, op.n, op.m, 1)
                b = _Building("conv", [op.name], conv, (op.batch, op.k, op.m, 1), shape[op.name])
            new_layer(op, b)

        elif isinstance(op, Pool):
            pads = (op.pad_top, op.pad_bottom, op.pad_left, op.pad_right)
            out = (op.batch, op.channels, op.out_h, op.out_w)
            shape[op.name] = out
            identity = (op.kernel_h, op.kernel_w, op.stride_h, op.stride_w) == (1, 1, 1, 1)
            if identity and not any(pads):
                # identity: elided, lives where its input lives
                idx = where.get(op.inputs[-1]) if op.inputs else None
                if idx is None:
                    pending_free.append(op.name)
                else:
                    attach(op, idx, output=False)
                continue
            passes = split_pool_window(op.in_h, op.in_w, op.kernel_h, op.kernel_w, op.stride_h,
                                       op.stride_w, pads)
            if passes is None or any(max(p.pad_top, p.pad_bottom, p.pad_left, p.pad_right)
                                     > PDP_MAX_PAD for p in passes):
                unsupported(op, f"{op.kind} pool", f"{op.kernel_h}x{op.kernel_w} window, stride "
                            f"{op.stride_h}x{op.stride_w}, padding {pads}: beyond PDP (kernel "
                            f"1..{PDP_MAX_KERNEL}, stride 1..{PDP_MAX_STRIDE}, padding "
                            f"0..{PDP_MAX_PAD}) and not splittable into PDP passes (windows "
                            f"overlap or have a prime factor > 7)")
                continue
            idx = fusable_producer(op)
            if idx is not None and len(passes) == 1:
                b = layers[idx]
                conv = b.conv
                fused = dataclasses.replace(conv, pool_kernel=(op.kernel_h, op.kernel_w),
                                            pool_stride=(op.stride_h, op.stride_w)) \
                    if conv.pool_kernel is None and conv.groups == 1 and b.fc_batch == 1 \
                    and op.kernel_h <= conv.P and op.kernel_w <= conv.Q else None
                if (fused is not None and fused.pooled_shape == (op.out_h, op.out_w)
                        and op.out_w <= pdp_max_flying_width(cfg, precision, op.kernel_h,
                                                             op.stride_h)):
                    b.conv, b.passes, b.shape_out = fused, passes, out
                    attach(op, idx)
                    continue
            new_layer(op, _Building("pdp", [op.name], None,
                                    (op.batch, op.channels, op.in_h, op.in_w), out,
                                    passes=passes))

        elif isinstance(op, ELEMENTWISE_OPS):
            kind = op.work().name
            s_in = in_shape(op.inputs, op.elements)
            shape[op.name] = s_in
            if kind in _TWO_OPERAND and op.operands == 2:
                fused_into = None
                if len(op.inputs) in (1, 2):
                    later = max(op.inputs, key=lambda s: ops_index[s])
                    idx = where.get(later)
                    if (idx is not None and layers[idx].kind == "conv"
                            and layers[idx].output_op == later and consumers[later] == [op.name]
                            and layers[idx].conv.pool_kernel is None
                            and not layers[idx].conv.eltwise and not layers[idx].lut):
                        fused_into = idx
                if fused_into is not None:
                    b = layers[fused_into]
                    # ResNet's ReLU follows the residual add (convention for conv hosts only)
                    after = assume_bn_relu and isinstance(op_by_name[b.ops[0]], Conv2d)
                    b.conv = dataclasses.replace(b.conv, eltwise=True, relu=b.conv.relu or after)
                    b.operands = 2
                    attach(op, fused_into)
                else:
                    new_layer(op, _Building("sdp", [op.name], None, s_in, s_in, operands=2))
            elif kind in _X_ACTIVATIONS or kind in _LUT_ACTIVATIONS or kind in _PER_CHANNEL:
                lut = kind in _LUT_ACTIVATIONS
                if lut and "sdp_lut" not in cfg.features:
                    unsupported(op, kind, f"needs the SDP lookup table (feature 'sdp_lut'), "
                                f"which {cfg.name} lacks")
                    continue
                idx = fusable_producer(op)
                if idx is not None and layers[idx].conv.pool_kernel is None:
                    b = layers[idx]
                    if kind == "relu":
                        b.conv = dataclasses.replace(b.conv, relu=True)
                    b.lut |= lut
                    attach(op, idx)
                else:
                    new_layer(op, _Building("sdp", [op.name], None, s_in, s_in, lut=lut))
            elif kind == "lrn":
                new_layer(op, _Building("cdp", [op.name], None, s_in, s_in))
            else:
                unsupported(op, kind, _WHY_NOT.get(
                    kind, f"no NVDLA unit computes {kind!r} (SDP: per-element add/mul/max/min, "
                          f"ReLU/PReLU, per-channel scale/bias, LUT activations; CDP: LRN)"))

        elif isinstance(op, Move):
            s_in = in_shape(op.inputs, op.elements)
            shape[op.name] = s_in
            if op.kind in _FREE_MOVES:
                idxs = [where[s] for s in op.inputs if s in where]
                if idxs:
                    attach(op, max(idxs), output=False)
                else:
                    pending_free.append(op.name)
            elif op.kind in _BDMA_MOVES and "bdma" in cfg.features:
                new_layer(op, _Building("bdma", [op.name], None, s_in, s_in))
            else:
                why = (f"a {op.kind!r} copy needs the BDMA (feature 'bdma'), which {cfg.name} "
                       f"lacks" if op.kind in _BDMA_MOVES else
                       f"no NVDLA unit reorders elements ({op.kind!r}); free moves: "
                       f"{', '.join(_FREE_MOVES)}; BDMA copies: {', '.join(_BDMA_MOVES)}")
                unsupported(op, op.kind, why)
        else:
            raise NvdlaLoweringError(f"{gname}: op {op.name!r} of type {type(op).__name__}: "
                                     f"the NVDLA backend lowers Conv2d, Gemm, Pool, the "
                                     f"element-wise vector ops and Move")

    for name in pending_free:  # views of the graph input nobody computes from
        skipped.append(SkippedOp(name, "view", "a view of the graph input: no hardware work"))

    out_layers = []
    for b in layers:
        (n, ci, hi, wi), (_, co, ho, wo) = b.shape_in, b.shape_out
        out_layers.append(HwLayer(
            name=b.ops[0], kind=b.kind, ops=tuple(b.ops), precision=precision, conv=b.conv,
            batch=n, in_c=ci, in_h=hi, in_w=wi, out_c=co, out_h=ho, out_w=wo,
            operands=b.operands, bytes_per_element=nbytes, passes=b.passes, lut=b.lut,
            fc_batch=b.fc_batch))
    return NvdlaProgram(gname, cfg.name, precision, tuple(out_layers), tuple(skipped),
                        sum(hl.macs for hl in out_layers))
