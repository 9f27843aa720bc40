"""The model zoo: well-known networks as IR graphs with their exact layer shapes.

``get(name, **params)`` builds one by name; ``names()`` lists them. Each CNN follows its
torchvision definition (the one whose published GFLOPS and parameter counts the tests check):
padding, stride, groups, pool ceil modes, residual adds and the final ``nn.Linear`` layers as
``Gemm(m=batch)``. What is deliberately left out, and why, is in ``_cnn_blocks``'s docstring
(BatchNorm and ReLU folded into convs, no concat ops) and in each builder's docstring. CNNs take
``batch`` and ``image_size`` (square input, 224 by default); the transformer layers take
``batch`` and ``seq_len``.

Op names are torchvision module paths (``layer1.0.conv1``) for the CNNs and
``<block>.attn.q_proj``-style names (see :mod:`compiler.attention`) for the transformers.
"""

from __future__ import annotations

import inspect
from typing import Callable

from compiler.attention import transformer_block_ops
from compiler.frontends._cnn_blocks import (
    FeatureMap,
    adaptive_avg_pool,
    basic_block,
    bottleneck,
    conv,
    inception,
    inverted_residual,
    linear,
    max_pool,
)
from compiler.ir import Graph, Op

__all__ = [
    "names",
    "get",
    "alexnet",
    "vgg16",
    "resnet18",
    "resnet50",
    "mobilenetv2",
    "googlenet",
    "bert_base_layer",
    "gpt2_block",
    "transformer_block",
]

#: Longest ``seq_len`` of :func:`transformer_block`: the long contexts of current models
#: (16K tokens); one block at 16K has 12 x 16384^2 = 3.2 G attention scores.
TRANSFORMER_BLOCK_MAX_SEQ = 16384

_IMAGENET_CLASSES = 1000


def _check_int(model: str, param: str, value: object, minimum: int,
               maximum: int | None = None) -> None:
    bad = isinstance(value, bool) or not isinstance(value, int) or value < minimum
    if not bad and maximum is not None and value > maximum:
        bad = True
    if bad:
        allowed = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise ValueError(f"zoo model {model!r}: {param} = {value!r}: must be an integer {allowed}")


def _check_cnn(model: str, batch: object, image_size: object, min_size: int) -> None:
    _check_int(model, "batch", batch, 1)
    _check_int(model, "image_size", image_size, min_size)


def alexnet(*, batch: int = 1, image_size: int = 224) -> Graph:
    """AlexNet as torchvision builds it: the single-tower "One weird trick" variant
    (Krizhevsky 2014, arXiv:1404.5997), 64/192/384/256/256 channels, not the two-GPU 2012 net.

    ``image_size >= 63``: torchvision AlexNet_Weights.IMAGENET1K_V1 meta, min_size (63, 63).
    """
    _check_cnn("alexnet", batch, image_size, 63)
    ops: list[Op] = []
    x = FeatureMap((), 3, image_size, batch)
    x = conv(ops, "features.0", x, 64, 11, 4, 2)
    x = max_pool(ops, "features.2", x, 3, 2)
    x = conv(ops, "features.3", x, 192, 5, 1, 2)
    x = max_pool(ops, "features.5", x, 3, 2)
    x = conv(ops, "features.6", x, 384, 3, 1, 1)
    x = conv(ops, "features.8", x, 256, 3, 1, 1)
    x = conv(ops, "features.10", x, 256, 3, 1, 1)
    x = max_pool(ops, "features.12", x, 3, 2)
    x = adaptive_avg_pool(ops, "avgpool", x, 6)
    x = linear(ops, "classifier.1", x, 4096)
    x = linear(ops, "classifier.4", x, 4096)
    linear(ops, "classifier.6", x, _IMAGENET_CLASSES)
    return Graph("alexnet", tuple(ops), batch=batch)


# Configuration "D" of Simonyan & Zisserman 2014 (Table 1); "M" is a 2x2 stride-2 max pool.
# Same list as torchvision vgg.cfgs["D"].
_VGG16_CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
              512, 512, 512, "M")


def vgg16(*, batch: int = 1, image_size: int = 224) -> Graph:
    """VGG-16 without batch norm (torchvision ``vgg16``): 13 3x3 convs, 3 FC layers.

    ``image_size >= 32``: torchvision VGG16_Weights.IMAGENET1K_V1 meta, min_size (32, 32).
    """
    _check_cnn("vgg16", batch, image_size, 32)
    ops: list[Op] = []
    x = FeatureMap((), 3, image_size, batch)
    index = 0  # torchvision's features index: conv, ReLU (+1), or pool
    for item in _VGG16_CFG:
        if item == "M":
            x = max_pool(ops, f"features.{index}", x, 2, 2)
            index += 1
        else:
            x = conv(ops, f"features.{index}", x, item, 3, 1, 1)
            index += 2
    x = adaptive_avg_pool(ops, "avgpool", x, 7)
    x = linear(ops, "classifier.0", x, 4096)
    x = linear(ops, "classifier.3", x, 4096)
    linear(ops, "classifier.6", x, _IMAGENET_CLASSES)
    return Graph("vgg16", tuple(ops), batch=batch)


def _resnet(model: str, block: Callable[..., FeatureMap], layers: tuple[int, ...], batch: int,
            image_size: int) -> Graph:
    # torchvision ResNet accepts any input size: ResNet*_Weights meta, min_size (1, 1).
    _check_cnn(model, batch, image_size, 1)
    ops: list[Op] = []
    x = FeatureMap((), 3, image_size, batch)
    x = conv(ops, "conv1", x, 64, 7, 2, 3)
    x = max_pool(ops, "maxpool", x, 3, 2, 1)
    for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers), start=1):
        for i in range(blocks):
            stride = 2 if stage > 1 and i == 0 else 1
            x = block(ops, f"layer{stage}.{i}", x, planes, stride)
    x = adaptive_avg_pool(ops, "avgpool", x, 1)
    linear(ops, "fc", x, _IMAGENET_CLASSES)
    return Graph(model, tuple(ops), batch=batch)


def resnet18(*, batch: int = 1, image_size: int = 224) -> Graph:
    """ResNet-18 (torchvision ``resnet18``): BasicBlocks [2, 2, 2, 2], 1x1 projection shortcuts."""
    return _resnet("resnet18", basic_block, (2, 2, 2, 2), batch, image_size)


def resnet50(*, batch: int = 1, image_size: int = 224) -> Graph:
    """ResNet-50 v1.5 (torchvision ``resnet50``): Bottlenecks [3, 4, 6, 3], stride on the 3x3."""
    return _resnet("resnet50", bottleneck, (3, 4, 6, 3), batch, image_size)


# (expansion t, output channels c, repeats n, first stride s): Sandler et al. 2018, Table 2;
# the same table as torchvision MobileNetV2's inverted_residual_setting. At width 1.0
# torchvision's _make_divisible(c, 8) leaves every channel count unchanged.
_MOBILENETV2_SETTING = (
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def mobilenetv2(*, batch: int = 1, image_size: int = 224) -> Graph:
    """MobileNetV2, width 1.0 (torchvision ``mobilenet_v2``); depthwise convs have groups ==
    channels.

    ``image_size >= 1``: torchvision MobileNet_V2_Weights meta, min_size (1, 1).
    """
    _check_cnn("mobilenetv2", batch, image_size, 1)
    ops: list[Op] = []
    x = FeatureMap((), 3, image_size, batch)
    x = conv(ops, "features.0.0", x, 32, 3, 2, 1)
    index = 1
    for expand_ratio, channels, repeats, first_stride in _MOBILENETV2_SETTING:
        for i in range(repeats):
            stride = first_stride if i == 0 else 1
            x = inverted_residual(ops, f"features.{index}", x, channels, stride, expand_ratio)
            index += 1
    x = conv(ops, f"features.{index}.0", x, 1280, 1)
    x = adaptive_avg_pool(ops, "avgpool", x, 1)
    linear(ops, "classifier.1", x, _IMAGENET_CLASSES)
    return Graph("mobilenetv2", tuple(ops), batch=batch)


# Inception module channels (ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj):
# Szegedy et al. 2014, Table 1, identical to torchvision GoogLeNet.__init__.
_INCEPTION_3 = (("inception3a", (64, 96, 128, 16, 32, 32)),
                ("inception3b", (128, 128, 192, 32, 96, 64)))
_INCEPTION_4 = (("inception4a", (192, 96, 208, 16, 48, 64)),
                ("inception4b", (160, 112, 224, 24, 64, 64)),
                ("inception4c", (128, 128, 256, 24, 64, 64)),
                ("inception4d", (112, 144, 288, 32, 64, 64)),
                ("inception4e", (256, 160, 320, 32, 128, 128)))
_INCEPTION_5 = (("inception5a", (256, 160, 320, 32, 128, 128)),
                ("inception5b", (384, 192, 384, 48, 128, 128)))


def googlenet(*, batch: int = 1, image_size: int = 224) -> Graph:
    """GoogLeNet (Inception v1) as torchvision builds it, in inference mode.

    Follows torchvision, not the paper, where they differ: the "5x5" branch is a 3x3 conv
    (pytorch/vision#906), the stem has a 1x1 ``conv2`` before the 3x3 ``conv3``, there is no
    local response norm, and max pools use ceil mode. The two auxiliary classifiers are left
    out: torchvision drops them from the pretrained model and never runs them in eval mode, and
    its published GFLOPS and parameter count exclude them. ``transform_input`` (a per-channel
    affine on the image) is left out too.

    ``image_size >= 15``: torchvision GoogLeNet_Weights.IMAGENET1K_V1 meta, min_size (15, 15).
    """
    _check_cnn("googlenet", batch, image_size, 15)
    ops: list[Op] = []
    x = FeatureMap((), 3, image_size, batch)
    x = conv(ops, "conv1.conv", x, 64, 7, 2, 3)
    x = max_pool(ops, "maxpool1", x, 3, 2, ceil_mode=True)
    x = conv(ops, "conv2.conv", x, 64, 1)
    x = conv(ops, "conv3.conv", x, 192, 3, 1, 1)
    x = max_pool(ops, "maxpool2", x, 3, 2, ceil_mode=True)
    for name, channels in _INCEPTION_3:
        x = inception(ops, name, x, *channels)
    x = max_pool(ops, "maxpool3", x, 3, 2, ceil_mode=True)
    for name, channels in _INCEPTION_4:
        x = inception(ops, name, x, *channels)
    x = max_pool(ops, "maxpool4", x, 2, 2, ceil_mode=True)
    for name, channels in _INCEPTION_5:
        x = inception(ops, name, x, *channels)
    x = adaptive_avg_pool(ops, "avgpool", x, 1)
    linear(ops, "fc", x, _IMAGENET_CLASSES)
    return Graph("googlenet", tuple(ops), batch=batch)


def bert_base_layer(*, seq_len: int = 128, batch: int = 1) -> Graph:
    """One BERT-base encoder layer (Devlin et al. 2018: d_model 768, 12 heads, FFN 3072), post-norm.

    ``seq_len <= 512``: bert-base max_position_embeddings. Embeddings and pooler are not part of
    a layer.
    """
    _check_int("bert_base_layer", "seq_len", seq_len, 1, 512)
    _check_int("bert_base_layer", "batch", batch, 1)
    ops = transformer_block_ops("layer.0", seq_len=seq_len, d_model=768, heads=12, ffn_dim=3072,
                                batch=batch, pre_norm=False)
    return Graph("bert_base_layer", tuple(ops), batch=batch, tokens=seq_len)


def gpt2_block(*, seq_len: int = 1024, batch: int = 1) -> Graph:
    """One GPT-2 small block (Radford et al. 2019: d_model 768, 12 heads, FFN 3072), pre-norm.

    The whole ``seq_len`` prompt is processed at once (prefill); the causal mask is folded into
    the softmax. ``seq_len <= 1024``: GPT-2's n_positions (context length).
    """
    _check_int("gpt2_block", "seq_len", seq_len, 1, 1024)
    _check_int("gpt2_block", "batch", batch, 1)
    ops = transformer_block_ops("h.0", seq_len=seq_len, d_model=768, heads=12, ffn_dim=3072,
                                batch=batch, pre_norm=True)
    return Graph("gpt2_block", tuple(ops), batch=batch, tokens=seq_len)


def transformer_block(*, seq_len: int = 1024, batch: int = 1) -> Graph:
    """A GPT-2 small shaped block (d_model 768, 12 heads, FFN 3072, pre-norm; the same ops as
    :func:`gpt2_block`) at contexts up to ``TRANSFORMER_BLOCK_MAX_SEQ`` (16384) tokens.

    A block's ops do not depend on a learned position table (GPT-2's 1024 and BERT's 512
    positions limit the models, not the block; rotary or ALiBi models have none), and long
    context is where attention's ``s^2`` terms take over, which is what lab 7 studies.
    """
    _check_int("transformer_block", "seq_len", seq_len, 1, TRANSFORMER_BLOCK_MAX_SEQ)
    _check_int("transformer_block", "batch", batch, 1)
    ops = transformer_block_ops("h.0", seq_len=seq_len, d_model=768, heads=12, ffn_dim=3072,
                                batch=batch, pre_norm=True)
    return Graph("transformer_block", tuple(ops), batch=batch, tokens=seq_len)


def _builders() -> dict[str, Callable[..., Graph]]:
    # Built per call, so the zoo holds no module-level mutable state.
    return {
        "alexnet": alexnet,
        "vgg16": vgg16,
        "resnet18": resnet18,
        "resnet50": resnet50,
        "mobilenetv2": mobilenetv2,
        "googlenet": googlenet,
        "bert_base_layer": bert_base_layer,
        "gpt2_block": gpt2_block,
        "transformer_block": transformer_block,
    }


def names() -> tuple[str, ...]:
    """The model names :func:`get` accepts."""
    return tuple(_builders())


def get(name: str, **params: int) -> Graph:
    """Build zoo model ``name`` with keyword ``params`` (see each builder for what it takes).

    Raises
    ------
    ValueError
        ``name`` is not a zoo model, a parameter is not one the model takes, or a value is out of
        range; the one-line message names the culprit and lists what is allowed.
    """
    builders = _builders()
    if not isinstance(name, str) or name not in builders:
        raise ValueError(f"unknown zoo model {name!r}; known models: {', '.join(builders)}")
    builder = builders[name]
    allowed = tuple(inspect.signature(builder).parameters)
    for key in params:
        if key not in allowed:
            raise ValueError(
                f"zoo model {name!r}: unknown parameter {key!r}; allowed parameters: "
                f"{', '.join(allowed)}"
            )
    return builder(**params)
