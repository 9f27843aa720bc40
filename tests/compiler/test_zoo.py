"""The model zoo against published figures and hand-derived layer shapes.

Every expected number here is independent of the zoo's code: a published figure (with its
source) or arithmetic written out by hand from the architecture papers / torchvision source.
"""

from __future__ import annotations

import pytest

from compiler.frontends import _cnn_blocks, zoo
from compiler.ir import Binary, Conv2d, Eltwise, Gemm, Graph, Norm, Pool, Softmax

CNNS = ("alexnet", "vgg16", "resnet18", "resnet50", "mobilenetv2", "googlenet")
TRANSFORMERS = ("bert_base_layer", "gpt2_block", "transformer_block")


def weight_count(graph: Graph) -> int:
    """Conv and FC weights: ``k * n * count`` of every matrix-engine op (no biases, no BN)."""
    total = 0
    for op in graph:
        shape = op.gemm_shape()
        if shape is not None:
            total += shape.k * shape.n * shape.count
    return total


def test_names_lists_every_model():
    assert set(zoo.names()) == set(CNNS + TRANSFORMERS)
    assert len(zoo.names()) == len(CNNS + TRANSFORMERS)


# torchvision publishes "GFLOPS" per weight set that are in fact multiply-accumulates at 224x224,
# and "num_params". The docs pages (e.g. ResNet50_Weights.IMAGENET1K_V1: 4.09 GFLOPS,
# 25557032 params) print the weights' meta rounded to 2 decimals; the meta in the torchvision
# source has 3, which we use (file: weights enum, "_ops", "num_params"):
#   alexnet.py     AlexNet_Weights.IMAGENET1K_V1        0.714 (docs 0.71)   61100840
#   vgg.py         VGG16_Weights.IMAGENET1K_V1         15.47  (docs 15.47) 138357544
#   resnet.py      ResNet18_Weights.IMAGENET1K_V1       1.814 (docs 1.81)   11689512
#   resnet.py      ResNet50_Weights.IMAGENET1K_V1       4.089 (docs 4.09)   25557032
#   mobilenetv2.py MobileNet_V2_Weights.IMAGENET1K_V1   0.301 (docs 0.30)    3504872
#   googlenet.py   GoogLeNet_Weights.IMAGENET1K_V1      1.498 (docs 1.50)    6624904
# Tolerance: half a unit of the last published digit (the figure is rounded, not truncated).
PUBLISHED = {
    "alexnet": ("0.714", 61_100_840),
    "vgg16": ("15.47", 138_357_544),
    "resnet18": ("1.814", 11_689_512),
    "resnet50": ("4.089", 25_557_032),
    "mobilenetv2": ("0.301", 3_504_872),
    "googlenet": ("1.498", 6_624_904),
}


@pytest.mark.parametrize("name", CNNS)
def test_cnn_macs_match_torchvision_published_gflops(name):
    published, _ = PUBLISHED[name]
    decimals = len(published.split(".")[1])
    exact = int(published.replace(".", "")) * 10 ** (9 - decimals)
    half_unit = 10 ** (9 - decimals) // 2
    macs = zoo.get(name).macs
    assert abs(macs - exact) <= half_unit, f"{name}: {macs} MACs vs published {published} G"


# torchvision num_params (same meta as above) counts conv/FC weights, their biases and the
# BatchNorm affine weight+bias (2 per channel; running stats are buffers, not parameters).
# Biases and BN channels below are added up by hand from the torchvision definitions.
_ALEXNET_BIASES = (64 + 192 + 384 + 256 + 256) + (4096 + 4096 + 1000)
_VGG16_BIASES = (2 * 64 + 2 * 128 + 3 * 256 + 3 * 512 + 3 * 512) + (4096 + 4096 + 1000)
# ResNet convs have no bias; one BN per conv (incl. downsample); fc has a bias.
_RESNET18_BN = 64 + 2 * (64 + 64) + (2 * (128 + 128) + 128) + (2 * (256 + 256) + 256) + (
    2 * (512 + 512) + 512)
# Bottleneck width w has BNs of w, w, 4w; each stage's first block adds a 4w downsample BN.
_RESNET50_BN = 64 + (3 * 6 * 64 + 256) + (4 * 6 * 128 + 512) + (6 * 6 * 256 + 1024) + (
    3 * 6 * 512 + 2048)
# MobileNetV2: stem 32; t=1 block: dw 32 + project 16; t=6 blocks: 2 * hidden + out each
# (hidden = 6 * in); last conv 1280. Convs have no bias; the classifier has one.
_MOBILENETV2_BN = (
    32 + (32 + 16)
    + (2 * 96 + 24) + (2 * 144 + 24)
    + (2 * 144 + 32) + 2 * (2 * 192 + 32)
    + (2 * 192 + 64) + 3 * (2 * 384 + 64)
    + (2 * 384 + 96) + 2 * (2 * 576 + 96)
    + (2 * 576 + 160) + 2 * (2 * 960 + 160)
    + (2 * 960 + 320)
    + 1280
)
# GoogLeNet: every BasicConv2d is bias-free conv + BN; per inception the BN channels are
# ch1x1 + ch3x3red + ch3x3 + ch5x5red + ch5x5 + pool_proj (Szegedy et al. Table 1).
_GOOGLENET_BN = (64 + 64 + 192) + sum((
    64 + 96 + 128 + 16 + 32 + 32, 128 + 128 + 192 + 32 + 96 + 64,
    192 + 96 + 208 + 16 + 48 + 64, 160 + 112 + 224 + 24 + 64 + 64,
    128 + 128 + 256 + 24 + 64 + 64, 112 + 144 + 288 + 32 + 64 + 64,
    256 + 160 + 320 + 32 + 128 + 128, 256 + 160 + 320 + 32 + 128 + 128,
    384 + 192 + 384 + 48 + 128 + 128,
))
NON_WEIGHT_PARAMS = {
    "alexnet": _ALEXNET_BIASES,
    "vgg16": _VGG16_BIASES,
    "resnet18": 2 * _RESNET18_BN + 1000,
    "resnet50": 2 * _RESNET50_BN + 1000,
    "mobilenetv2": 2 * _MOBILENETV2_BN + 1000,
    "googlenet": 2 * _GOOGLENET_BN + 1000,
}


@pytest.mark.parametrize("name", CNNS)
def test_cnn_weights_match_torchvision_num_params_exactly(name):
    _, num_params = PUBLISHED[name]
    assert weight_count(zoo.get(name)) == num_params - NON_WEIGHT_PARAMS[name]


def test_resnet50_weight_count_is_the_familiar_figure():
    # Cross-check of the hand arithmetic above: 25,557,032 - 2 * 26,560 BN - 1,000 fc bias.
    assert _RESNET50_BN == 26_560
    assert weight_count(zoo.get("resnet50")) == 25_502_912


def test_resnet50_layer_shapes():
    g = zoo.get("resnet50")
    conv1 = g.op("conv1")
    assert (conv1.out_h, conv1.out_w) == (112, 112)
    assert conv1.macs == 112 * 112 * 64 * (7 * 7 * 3) == 118_013_952
    # v1.5: the stride of a downsampling bottleneck is on the 3x3 conv, not the first 1x1.
    assert g.op("layer2.0.conv1").stride_h == 1
    assert g.op("layer2.0.conv2").stride_h == 2
    assert g.op("layer2.0.downsample.0").stride_h == 2
    for i in range(3):
        conv2 = g.op(f"layer4.{i}.conv2")
        assert (conv2.out_h, conv2.out_w) == (7, 7)
    # layer4.0.conv2 by hand: 7*7 outputs, 512 filters of 3*3*512.
    assert g.op("layer4.0.conv2").macs == 49 * 512 * 4608 == 115_605_504
    fc = g.op("fc")
    assert isinstance(fc, Gemm) and (fc.m, fc.n, fc.k) == (1, 1000, 2048)
    assert fc.inputs == ("avgpool",)


def test_resnet_residual_adds_read_both_producers():
    g = zoo.get("resnet50")
    assert g.op("layer1.0.add").inputs == ("layer1.0.conv3", "layer1.0.downsample.0")
    assert g.op("layer1.1.add").inputs == ("layer1.1.conv3", "layer1.0.add")
    assert g.op("layer2.0.conv1").inputs == ("layer1.2.add",)
    add = g.op("layer4.2.add")
    assert isinstance(add, Binary) and (add.fn, add.operands) == ("add", 2)
    assert add.other_elements == add.elements   # two full tensors, no broadcast
    assert add.elements == 2048 * 7 * 7
    r18 = zoo.get("resnet18")
    # layer1.0 keeps 64 channels and stride 1: identity shortcut from the stem's max pool.
    assert r18.op("layer1.0.add").inputs == ("layer1.0.conv2", "maxpool")
    assert r18.op("layer2.0.add").inputs == ("layer2.0.conv2", "layer2.0.downsample.0")


@pytest.mark.parametrize("name, adds", [
    ("resnet18", 2 + 2 + 2 + 2),
    ("resnet50", 3 + 4 + 6 + 3),
    # MobileNetV2 blocks with stride 1 and in == out: 24x1, 32x2, 64x3, 96x2, 160x2.
    ("mobilenetv2", 1 + 2 + 3 + 2 + 2),
])
def test_residual_add_count(name, adds):
    found = [op for op in zoo.get(name) if isinstance(op, Binary) and op.fn == "add"]
    assert len(found) == adds
    assert all(op.operands == 2 and len(op.inputs) == 2 for op in found)


@pytest.mark.parametrize("name, stem", [(name, ()) for name in CNNS] + [
    ("bert_base_layer", ("layer.0.attn.q_proj", "layer.0.attn.k_proj", "layer.0.attn.v_proj")),
    ("gpt2_block", ("h.0.ln1",)),
    ("transformer_block", ("h.0.ln1",)),
])
def test_graph_is_connected_from_the_input_to_one_output(name, stem):
    g = zoo.get(name)
    # Only the stem (a CNN's first conv) reads the graph input, and every op but the last feeds
    # another: a forgotten edge shows up as a second reader or a dead end.
    readers = tuple(op.name for op in g if not op.inputs)
    assert readers == (stem or (g.ops[0].name,))
    consumed = {src for op in g for src in op.inputs}
    dead_ends = [op.name for op in g.ops[:-1] if op.name not in consumed]
    assert dead_ends == []


def test_alexnet_layer_shapes():
    g = zoo.get("alexnet")
    c1 = g.op("features.0")
    # (224 + 2*2 - 11) // 4 + 1 = 55; 64 filters of 11*11*3.
    assert c1.out_h == 55 and c1.macs == 55 * 55 * 64 * 363 == 70_276_800
    assert g.op("features.12").out_h == 6
    assert g.op("classifier.1").k == 256 * 6 * 6
    assert [op.name for op in g if isinstance(op, Gemm)] == [
        "classifier.1", "classifier.4", "classifier.6"]


def test_vgg16_layer_shapes():
    g = zoo.get("vgg16")
    convs = [op for op in g if isinstance(op, Conv2d)]
    assert len(convs) == 13
    assert all((c.kernel_h, c.pad_top, c.stride_h) == (3, 1, 1) for c in convs)
    # Last conv: 14x14 outputs, 512 filters of 3*3*512.
    assert g.op("features.28").macs == 14 * 14 * 512 * 4608 == 462_422_016
    assert g.op("classifier.0").k == 512 * 7 * 7


def test_mobilenetv2_depthwise_convs():
    g = zoo.get("mobilenetv2")
    dw = g.op("features.2.conv.1.0")  # first t=6 block: 16 -> 96 hidden, stride 2
    assert dw.groups == dw.in_channels == dw.out_channels == 96 and dw.is_depthwise
    assert (dw.stride_h, dw.in_h, dw.out_h) == (2, 112, 56)
    assert dw.macs == 56 * 56 * 96 * 9 == 2_709_504
    # The t=1 block has no expand conv, so its depthwise conv is conv.0.0.
    assert g.op("features.1.conv.0.0").groups == 32
    depthwise = [op for op in g if isinstance(op, Conv2d) and op.is_depthwise]
    assert len(depthwise) == 17  # one per inverted residual block
    last = g.op("features.18.0")
    assert (last.in_channels, last.out_channels, last.out_h) == (320, 1280, 7)


def test_googlenet_follows_torchvision():
    g = zoo.get("googlenet")
    # ceil-mode max pools: 112 -> 56 (floor mode would give 55), 56 -> 28, 28 -> 14, 14 -> 7.
    assert [g.op(f"maxpool{i}").out_h for i in range(1, 5)] == [56, 28, 14, 7]
    # torchvision's "5x5" branch is a 3x3 conv (pytorch/vision#906).
    b3 = g.op("inception3a.branch3.1.conv")
    assert (b3.kernel_h, b3.in_channels, b3.out_channels) == (3, 16, 32)
    # Concatenation is wired, not an op: inception3b reads all four inception3a branches.
    assert g.op("inception3b.branch1.conv").inputs == (
        "inception3a.branch1.conv", "inception3a.branch2.1.conv",
        "inception3a.branch3.1.conv", "inception3a.branch4.1.conv")
    assert g.op("inception3b.branch1.conv").in_channels == 64 + 128 + 32 + 32
    # The pool branch: a 3x3 stride-1 max pool (size kept) feeding the 1x1 pool_proj conv.
    pool = g.op("inception3a.branch4.0")
    assert isinstance(pool, Pool) and (pool.kernel_h, pool.stride_h, pool.out_h) == (3, 1, 28)
    assert pool.inputs == ("maxpool2",)
    assert g.op("inception3a.branch4.1.conv").inputs == ("inception3a.branch4.0",)
    assert g.op("fc").k == 1024
    assert not any("aux" in op.name for op in g)


@pytest.mark.parametrize("size, kernel, stride, padding, expected", [
    (112, 3, 2, 0, 56),  # GoogLeNet maxpool1: ceil(109 / 2) + 1
    (14, 2, 2, 0, 7),
    # PyTorch drops a last window that would start in the right padding
    # (aten/src/ATen/native/Pool.h, pooling_output_shape): ceil(1 / 2) + 1 = 2, minus that one.
    (1, 2, 2, 1, 1),
])
def test_ceil_mode_max_pool_output_size(size, kernel, stride, padding, expected):
    ops = []
    x = _cnn_blocks.FeatureMap((), 8, size, 1)
    y = _cnn_blocks.max_pool(ops, "p", x, kernel, stride, padding, ceil_mode=True)
    assert y.size == ops[0].out_h == ops[0].out_w == expected


def test_image_size_changes_spatial_shapes():
    g = zoo.get("resnet50", image_size=256)
    assert g.op("conv1").out_h == 128
    assert g.op("layer4.2.conv2").out_h == 8
    assert g.op("fc").k == 2048


@pytest.mark.parametrize("name, min_size", [
    # torchvision Weights meta min_size: AlexNet (63, 63), VGG (32, 32), GoogLeNet (15, 15),
    # ResNet and MobileNetV2 (1, 1).
    ("alexnet", 63), ("vgg16", 32), ("googlenet", 15), ("resnet18", 1), ("resnet50", 1),
    ("mobilenetv2", 1),
])
def test_smallest_image_size_builds_and_one_less_is_rejected(name, min_size):
    g = zoo.get(name, image_size=min_size)
    assert g.ops[-1].n == 1000
    if min_size > 1:
        with pytest.raises(ValueError, match=rf"image_size = {min_size - 1}: .*>= {min_size}"):
            zoo.get(name, image_size=min_size - 1)


def test_alexnet_at_its_minimum_size_replicates_into_the_classifier():
    g = zoo.get("alexnet", image_size=63)
    # 63 -> conv1 15 -> pool 7 -> conv2 7 -> pool 3 -> convs 3 -> pool 1: the adaptive pool
    # replicates 1x1 up to 6x6, so the classifier keeps its 9216 inputs.
    assert g.op("features.12").out_h == 1
    assert isinstance(g.op("avgpool"), Eltwise)
    assert g.op("classifier.1").k == 9216
    assert isinstance(zoo.get("alexnet").op("avgpool"), Pool)


@pytest.mark.parametrize("name", CNNS + TRANSFORMERS)
def test_macs_scale_linearly_with_batch(name):
    one = zoo.get(name).macs
    assert zoo.get(name, batch=3).macs == 3 * one


def test_cnn_batch_reaches_every_layer():
    g = zoo.get("resnet18", batch=4)
    assert g.op("conv1").batch == 4
    assert g.op("fc").m == 4
    assert g.op("layer1.0.add").elements == 4 * 64 * 56 * 56


# Transformer layers, closed form. Per layer with s tokens, width d, FFN width f:
#   Q, K, V, output projections 4*s*d*d;  Q@K^T and P@V 2*s*s*d (summed over heads);
#   FFN 2*s*d*f.
def transformer_macs(s: int, d: int, f: int) -> int:
    return 4 * s * d * d + 2 * s * s * d + 2 * s * d * f


def test_bert_base_layer_macs_closed_form():
    # BERT-base (Devlin et al. 2018): d 768, 12 heads, FFN 3072; seq 128.
    assert transformer_macs(128, 768, 3072) == 931_135_488
    assert zoo.get("bert_base_layer").macs == 931_135_488
    assert zoo.get("bert_base_layer", seq_len=512).macs == transformer_macs(512, 768, 3072)


def test_gpt2_block_macs_closed_form():
    # GPT-2 small (Radford et al. 2019): d 768, 12 heads, FFN 3072; seq 1024.
    assert transformer_macs(1024, 768, 3072) == 8_858_370_048
    assert zoo.get("gpt2_block").macs == 8_858_370_048


@pytest.mark.parametrize("seq_len", [1, 128, 1024])
def test_transformer_block_is_gpt2_block_without_its_context_limit(seq_len):
    # Within GPT-2's 1024 positions the long-context block has exactly GPT-2 small's ops.
    block, gpt2 = zoo.get("transformer_block", seq_len=seq_len), zoo.get("gpt2_block",
                                                                          seq_len=seq_len)
    assert block.ops == gpt2.ops and block.name == "transformer_block"


def test_transformer_block_at_16k_tokens():
    g = zoo.get("transformer_block", seq_len=16384)
    assert g.macs == transformer_macs(16384, 768, 3072)
    scores = g.op("h.0.attn.scores")   # 12 heads x 16384^2 scores: 3.2 G
    assert (scores.batch, scores.m, scores.n, scores.k) == (12, 16384, 16384, 64)
    assert g.op("h.0.attn.softmax").elements == 12 * 16384 ** 2 == 3_221_225_472


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_transformer_weights_match_published_per_layer_params(name):
    # HF bert-base-uncased BertModel has 109,482,240 parameters: embeddings
    # (30522 + 512 + 2) * 768 + LN 2*768, pooler 768*768 + 768, and 12 identical layers.
    bert_layer = (109_482_240 - ((30522 + 512 + 2) * 768 + 2 * 768) - (768 * 768 + 768)) // 12
    # HF gpt2 has 124,439,808: wte 50257*768, wpe 1024*768, ln_f 2*768, and 12 blocks.
    gpt2_block = (124_439_808 - 50257 * 768 - 1024 * 768 - 2 * 768) // 12
    assert bert_layer == gpt2_block == 7_087_872
    # Per layer: biases 4*768 (projections) + 3072 + 768 (FFN), two layer norms 2 * 2*768.
    weights = 7_087_872 - (4 * 768 + 3072 + 768) - 2 * 2 * 768
    g = zoo.get(name)
    # The score and context products multiply activations; they hold no weights.
    weight_ops = [op for op in g if isinstance(op, Gemm)
                  and not op.name.endswith((".scores", ".context"))]
    assert sum(op.k * op.n for op in weight_ops) == weights


def test_bert_is_post_norm_and_gpt2_pre_norm():
    bert = zoo.get("bert_base_layer")
    assert bert.ops[0].name.endswith("attn.q_proj")
    assert isinstance(bert.ops[-1], Norm) and bert.ops[-1].kind == "layernorm"
    assert (bert.ops[-1].rows, bert.ops[-1].cols) == (128, 768)   # tokens x d_model
    gpt2 = zoo.get("gpt2_block")
    assert isinstance(gpt2.ops[0], Norm) and gpt2.ops[0].kind == "layernorm"
    assert isinstance(gpt2.ops[-1], Binary) and gpt2.ops[-1].fn == "add"
    softmax = gpt2.op("h.0.attn.softmax")   # one row per head and query, along the keys
    assert isinstance(softmax, Softmax) and (softmax.rows, softmax.cols) == (12 * 1024, 1024)
    scores = gpt2.op("h.0.attn.scores")
    assert (scores.batch, scores.m, scores.n, scores.k) == (12, 1024, 1024, 64)


# Bad names and parameters.
def _message(excinfo) -> str:
    text = str(excinfo.value)
    assert "\n" not in text
    return text


def test_unknown_model_lists_known_ones():
    with pytest.raises(ValueError) as excinfo:
        zoo.get("resnet")
    text = _message(excinfo)
    assert "'resnet'" in text
    for name in CNNS + TRANSFORMERS:
        assert name in text


def test_non_string_model_name_raises_value_error():
    with pytest.raises(ValueError, match="known models"):
        zoo.get(None)


def test_unknown_parameter_lists_allowed_ones():
    with pytest.raises(ValueError) as excinfo:
        zoo.get("resnet50", batchsize=2)
    text = _message(excinfo)
    assert "'batchsize'" in text and "'resnet50'" in text and "batch, image_size" in text
    with pytest.raises(ValueError) as excinfo:
        zoo.get("bert_base_layer", image_size=224)
    text = _message(excinfo)
    assert "'image_size'" in text and "seq_len, batch" in text


@pytest.mark.parametrize("name, params, expected", [
    ("resnet50", {"batch": 0}, "batch = 0: must be an integer >= 1"),
    ("resnet50", {"batch": True}, "batch = True"),
    ("vgg16", {"batch": 2.0}, "batch = 2.0"),
    ("mobilenetv2", {"image_size": "224"}, "image_size = '224'"),
    ("gpt2_block", {"seq_len": 1025}, "seq_len = 1025: must be an integer in 1..1024"),
    ("bert_base_layer", {"seq_len": 513}, "seq_len = 513: must be an integer in 1..512"),
    ("transformer_block", {"seq_len": 16385},
     "seq_len = 16385: must be an integer in 1..16384"),
    ("transformer_block", {"seq_len": 1.5}, "seq_len = 1.5"),
    ("transformer_block", {"batch": 0}, "batch = 0: must be an integer >= 1"),
    ("bert_base_layer", {"seq_len": 0}, "seq_len = 0"),
])
def test_invalid_parameter_value_is_named(name, params, expected):
    with pytest.raises(ValueError) as excinfo:
        zoo.get(name, **params)
    text = _message(excinfo)
    assert expected in text and repr(name) in text
