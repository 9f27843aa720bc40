"""Building blocks the model zoo uses to write CNNs as IR ops, layer by layer.

Each helper appends the ops of one PyTorch module (or one torchvision block) to a caller-owned
list and returns the :class:`FeatureMap` it produces, so a network reads like its torchvision
``forward``. Feature maps are square (the zoo takes one ``image_size``).

Conventions shared by every helper:

* Op names are the torchvision module path (``layer1.0.conv1``, ``features.2.conv.1.0``), so they
  match ``state_dict`` keys minus ``.weight``; residual adds, which torchvision writes as ``+``,
  are named ``<block>.add`` and list the block's last op first, then the shortcut.
* Inference-time BatchNorm and the activation after a conv (ReLU, ReLU6) are folded into the
  conv, as accelerator compilers do (NVDLA runs them in the SDP on the conv's output), so they
  add no op. Dropout and flatten are identities at inference and add none either.
* A concatenation is not an op: the consumer's ``inputs`` name every producer, in channel order.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.ir import Binary, Eltwise, Gemm, Op, Pool, conv2d

__all__ = [
    "FeatureMap",
    "conv",
    "max_pool",
    "adaptive_avg_pool",
    "residual_add",
    "linear",
    "basic_block",
    "bottleneck",
    "inverted_residual",
    "inception",
]


@dataclass(frozen=True)
class FeatureMap:
    """An NCHW activation: who produced it, and its shape.

    ``sources`` names the ops whose outputs make it up (several for a concatenation; empty for the
    graph input), which is exactly what a consumer puts in its ``inputs``.
    """

    sources: tuple[str, ...]
    channels: int
    size: int
    batch: int

    @property
    def elements(self) -> int:
        return self.batch * self.channels * self.size * self.size


def conv(
    ops: list[Op], name: str, x: FeatureMap, out_channels: int, kernel: int, stride: int = 1,
    padding: int = 0, groups: int = 1,
) -> FeatureMap:
    """``nn.Conv2d(x.channels, out_channels, kernel, stride, padding, groups=groups)``."""
    op = conv2d(
        name, x.size, x.channels, out_channels, kernel, stride=stride, padding=padding,
        groups=groups, batch=x.batch, inputs=x.sources,
    )
    ops.append(op)
    return FeatureMap((name,), out_channels, op.out_h, x.batch)


def _pool_out_size(size: int, kernel: int, stride: int, padding: int, ceil_mode: bool) -> int:
    # PyTorch's pooling_output_shape (aten/src/ATen/native/Pool.h): in ceil mode a last window
    # that would start inside the right padding is dropped.
    out = (size + 2 * padding - kernel + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def max_pool(
    ops: list[Op], name: str, x: FeatureMap, kernel: int, stride: int, padding: int = 0,
    ceil_mode: bool = False,
) -> FeatureMap:
    """``nn.MaxPool2d(kernel, stride, padding, ceil_mode=ceil_mode)``.

    The IR's :class:`Pool` rounds its output size down; ``ceil_mode`` is expressed as extra
    bottom/right padding just large enough to admit the last (partial) window, which gives
    PyTorch's output size and reads the same input elements.
    """
    out = _pool_out_size(x.size, kernel, stride, padding, ceil_mode)
    extra = max(0, (out - 1) * stride + kernel - (x.size + 2 * padding))
    ops.append(Pool(
        name=name, kind="max", in_h=x.size, in_w=x.size, channels=x.channels, kernel_h=kernel,
        kernel_w=kernel, stride_h=stride, stride_w=stride, pad_top=padding,
        pad_bottom=padding + extra, pad_left=padding, pad_right=padding + extra, batch=x.batch,
        inputs=x.sources,
    ))
    return FeatureMap((name,), x.channels, out, x.batch)


def adaptive_avg_pool(ops: list[Op], name: str, x: FeatureMap, output_size: int) -> FeatureMap:
    """``nn.AdaptiveAvgPool2d(output_size)``.

    When ``x.size`` is a multiple of ``output_size`` (always, for global pooling and at the zoo's
    default 224x224) this is an exact :class:`Pool` with ``stride = size // output_size``. Otherwise
    PyTorch's windows differ in size by one; we use the uniform window of the same stride that
    yields ``output_size`` outputs (vector work only, no MACs). A feature map smaller than
    ``output_size`` is replicated, not pooled: an :class:`Eltwise` ``adaptive_avg_pool`` op.
    """
    if x.size >= output_size:
        stride = x.size // output_size
        kernel = x.size - (output_size - 1) * stride
        ops.append(Pool(
            name=name, kind="avg", in_h=x.size, in_w=x.size, channels=x.channels,
            kernel_h=kernel, kernel_w=kernel, stride_h=stride, stride_w=stride, batch=x.batch,
            inputs=x.sources,
        ))
    else:
        ops.append(Eltwise(
            name=name, op="adaptive_avg_pool",
            elements=x.batch * x.channels * output_size * output_size, inputs=x.sources,
        ))
    return FeatureMap((name,), x.channels, output_size, x.batch)


def residual_add(ops: list[Op], name: str, branch: FeatureMap, shortcut: FeatureMap) -> FeatureMap:
    """``branch + shortcut``: a :class:`Binary` ``add`` reading both producers."""
    if (branch.channels, branch.size) != (shortcut.channels, shortcut.size):
        raise ValueError(
            f"{name}: cannot add a {branch.channels}x{branch.size}x{branch.size} branch to a "
            f"{shortcut.channels}x{shortcut.size}x{shortcut.size} shortcut"
        )
    ops.append(Binary(
        name=name, fn="add", elements=branch.elements, inputs=branch.sources + shortcut.sources,
    ))
    return FeatureMap((name,), branch.channels, branch.size, branch.batch)


def linear(ops: list[Op], name: str, x: FeatureMap, out_features: int) -> FeatureMap:
    """``nn.Linear`` on the flattened ``x``: ``Gemm(m=batch, n=out_features, k=C*H*W)``."""
    in_features = x.channels * x.size * x.size
    ops.append(Gemm(name=name, m=x.batch, n=out_features, k=in_features, inputs=x.sources))
    return FeatureMap((name,), out_features, 1, x.batch)


def basic_block(ops: list[Op], prefix: str, x: FeatureMap, planes: int, stride: int) -> FeatureMap:
    """torchvision ``resnet.BasicBlock`` (ResNet-18/34): two 3x3 convs and a shortcut."""
    y = conv(ops, f"{prefix}.conv1", x, planes, 3, stride, 1)
    y = conv(ops, f"{prefix}.conv2", y, planes, 3, 1, 1)
    shortcut = x
    if stride != 1 or x.channels != planes:
        shortcut = conv(ops, f"{prefix}.downsample.0", x, planes, 1, stride)
    return residual_add(ops, f"{prefix}.add", y, shortcut)


def bottleneck(ops: list[Op], prefix: str, x: FeatureMap, width: int, stride: int) -> FeatureMap:
    """torchvision ``resnet.Bottleneck`` (ResNet v1.5): 1x1, 3x3 (carries the stride), 1x1 x4.

    The stride sits on the 3x3 conv, not the first 1x1 as in He et al. 2015; torchvision's
    resnet50 docs call this ResNet V1.5.
    """
    out_channels = width * 4  # Bottleneck.expansion
    y = conv(ops, f"{prefix}.conv1", x, width, 1)
    y = conv(ops, f"{prefix}.conv2", y, width, 3, stride, 1)
    y = conv(ops, f"{prefix}.conv3", y, out_channels, 1)
    shortcut = x
    if stride != 1 or x.channels != out_channels:
        shortcut = conv(ops, f"{prefix}.downsample.0", x, out_channels, 1, stride)
    return residual_add(ops, f"{prefix}.add", y, shortcut)


def inverted_residual(
    ops: list[Op], prefix: str, x: FeatureMap, out_channels: int, stride: int, expand_ratio: int,
) -> FeatureMap:
    """torchvision ``mobilenetv2.InvertedResidual``: 1x1 expand, 3x3 depthwise, 1x1 project.

    The expand conv is absent when ``expand_ratio == 1``, which shifts torchvision's module
    indices (``conv.0.0`` is then the depthwise conv). The depthwise conv has ``groups ==
    channels``. The residual add exists only when the block keeps both stride and width.
    """
    hidden = x.channels * expand_ratio
    y, index = x, 0
    if expand_ratio != 1:
        y = conv(ops, f"{prefix}.conv.0.0", x, hidden, 1)
        index = 1
    y = conv(ops, f"{prefix}.conv.{index}.0", y, hidden, 3, stride, 1, groups=hidden)
    y = conv(ops, f"{prefix}.conv.{index + 1}", y, out_channels, 1)
    if stride == 1 and x.channels == out_channels:
        y = residual_add(ops, f"{prefix}.add", y, x)
    return y


def inception(
    ops: list[Op], prefix: str, x: FeatureMap, ch1x1: int, ch3x3red: int, ch3x3: int,
    ch5x5red: int, ch5x5: int, pool_proj: int,
) -> FeatureMap:
    """torchvision ``googlenet.Inception``: four branches, concatenated along channels.

    Follows torchvision, not Szegedy et al. 2014: the "5x5" branch is a 3x3 conv (a known quirk
    of the ported weights, pytorch/vision#906), and the pool branch's max pool uses ceil mode.
    """
    b1 = conv(ops, f"{prefix}.branch1.conv", x, ch1x1, 1)
    b2 = conv(ops, f"{prefix}.branch2.0.conv", x, ch3x3red, 1)
    b2 = conv(ops, f"{prefix}.branch2.1.conv", b2, ch3x3, 3, 1, 1)
    b3 = conv(ops, f"{prefix}.branch3.0.conv", x, ch5x5red, 1)
    b3 = conv(ops, f"{prefix}.branch3.1.conv", b3, ch5x5, 3, 1, 1)
    b4 = max_pool(ops, f"{prefix}.branch4.0", x, 3, 1, 1, ceil_mode=True)
    b4 = conv(ops, f"{prefix}.branch4.1.conv", b4, pool_proj, 1)
    return FeatureMap(
        b1.sources + b2.sources + b3.sources + b4.sources, ch1x1 + ch3x3 + ch5x5 + pool_proj,
        x.size, x.batch,
    )
