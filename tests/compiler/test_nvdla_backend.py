"""Tests of the IR -> NVDLA hardware-layer lowering (compiler/backends/nvdla.py, nvdla_pool.py).

Expected fusions are worked out by hand from the zoo definitions (compiler/frontends/zoo.py,
_cnn_blocks.py) and the fusion rules of NVIDIA's compiler (nvdla/sw
umd/core/src/compiler/engine-ast/PDPNode.cpp fuseOnTheFlyNodes, SDPEltWiseOp.cpp).
"""

from __future__ import annotations

import pytest

from compiler.backends.nvdla import NvdlaLoweringError, lower_graph
from compiler.backends.nvdla_pool import split_pool_window
from compiler.frontends import zoo
from compiler.ir import Binary, Conv2d, Eltwise, Gemm, Graph, Move, Pool, conv2d
from hw.nvdla.config import load_nvdla_config
from hw.nvdla.conv_layer import ConvLayer
from hw.nvdla.cycles import network_cycles
from hw.nvdla.program import PdpPass, pdp_max_flying_width
from hw.systolic.config import ConfigError

CNNS = ["alexnet", "vgg16", "resnet18", "resnet50", "mobilenetv2", "googlenet"]
TRANSFORMERS = {"bert_base_layer": dict(seq_len=64), "gpt2_block": dict(seq_len=64)}


@pytest.fixture(scope="module")
def full():
    return load_nvdla_config("nv_full")


@pytest.fixture(scope="module")
def small():
    return load_nvdla_config("nv_small")


@pytest.fixture(scope="module")
def r50(full):
    return lower_graph(zoo.resnet50(), full)


def by_op(program):
    """IR op name -> the hardware layer holding it."""
    return {name: layer for layer in program.layers for name in layer.ops}


def assert_partition(graph, program):
    """Every IR op is in exactly one hardware layer or in skipped."""
    placed = [n for layer in program.layers for n in layer.ops] + [s.name for s in program.skipped]
    assert sorted(placed) == sorted(op.name for op in graph.ops)


# ------------------------------------------------------------------ whole zoo
@pytest.mark.parametrize("model", CNNS)
@pytest.mark.parametrize("preset", ["nv_full", "nv_small"])
def test_zoo_cnn_partition_and_macs(model, preset):
    graph = zoo.get(model, batch=2)
    program = lower_graph(graph, load_nvdla_config(preset))
    assert_partition(graph, program)
    assert program.skipped == ()
    assert program.macs == graph.macs
    assert sum(layer.macs for layer in program.layers) == graph.macs
    # one conv layer per Conv2d/Gemm: fusion never merges two MAC ops
    matrix_ops = [op for op in graph.ops if isinstance(op, (Conv2d, Gemm))]
    assert len(program.conv_layers()) == len(matrix_ops)


@pytest.mark.parametrize("model", sorted(TRANSFORMERS))
def test_transformers_skip_softmax_and_layernorm(full, model):
    graph = zoo.get(model, **TRANSFORMERS[model])
    program = lower_graph(graph, full, skip_unsupported=True)
    assert_partition(graph, program)
    assert sorted(s.kind for s in program.skipped) == ["layernorm", "layernorm", "softmax"]
    assert program.macs + program.skipped_macs == graph.macs == program.macs
    names = by_op(program)
    prefix = graph.ops[-1].name.split(".")[0] + ".0"
    # GELU goes to the LUT of fc1's SDP; both residual adds fuse into the Gemm before them
    assert names[f"{prefix}.ffn.gelu"].ops == (f"{prefix}.ffn.fc1", f"{prefix}.ffn.gelu")
    assert names[f"{prefix}.ffn.gelu"].lut
    assert names[f"{prefix}.add2"].ops == (f"{prefix}.ffn.fc2", f"{prefix}.add2")
    assert names[f"{prefix}.add2"].conv.eltwise and not names[f"{prefix}.add2"].conv.relu
    # q_proj: Gemm(m=64 tokens, n=768, k=768) as a 1x1 conv over 64 x 1 points
    q = names[f"{prefix}.attn.q_proj"].conv
    assert (q.C, q.H, q.W, q.K, q.R, q.S, q.batch) == (768, 64, 1, 768, 1, 1, 1)
    # scores: batch = 12 heads, m = 64, n = 64, k = 64
    s = names[f"{prefix}.attn.scores"].conv
    assert (s.C, s.H, s.W, s.K, s.batch, s.bias) == (64, 64, 1, 64, 12, False)


def test_transformer_without_lut_skips_gelu(small):
    graph = zoo.bert_base_layer(seq_len=16)
    program = lower_graph(graph, small, skip_unsupported=True)
    assert_partition(graph, program)
    assert "gelu" in {s.kind for s in program.skipped}
    assert "sdp_lut" in {s.kind: s.reason for s in program.skipped}["gelu"]


# ------------------------------------------------------------------ ResNet-50 exactly
def test_resnet50_layer_count(r50):
    # 53 Conv2d (1 stem + 16 blocks x 3 + 4 downsample) + fc, nothing standalone:
    # the 16 adds, the max pool and the global average pool all fuse.
    assert r50.counts() == {"conv": 54}
    assert len(zoo.resnet50().ops) == 72  # 53 conv + 16 add + 2 pools + fc


def test_resnet50_maxpool_fused_into_conv1(r50):
    first = r50.layers[0]
    assert first.ops == ("conv1", "maxpool")
    c = first.conv
    assert (c.C, c.H, c.K, c.R, c.stride_y, c.pad_top) == (3, 224, 64, 7, 2, 3)
    assert c.image_input and c.bias and c.bn and c.relu
    assert c.pool_kernel == (3, 3) and c.pool_stride == (2, 2)
    # 112x112 conv output, 3x3/2 pool with padding 1 -> 56x56 (fits: 56 <= 64 flying width)
    assert c.pooled_shape == (56, 56) and (first.out_h, first.out_w) == (56, 56)
    assert first.passes == (PdpPass(112, 112, 56, 56, 3, 3, 2, 2, 1, 1, 1, 1),)


def test_resnet50_adds_fuse_into_later_producer(r50):
    layers = by_op(r50)
    blocks = [f"layer{s}.{i}" for s, n in zip((1, 2, 3, 4), (3, 4, 6, 3)) for i in range(n)]
    for block in blocks:
        add = layers[f"{block}.add"]
        # first block of a stage: downsample.0 is produced after conv3, so the add fuses there
        host = f"{block}.downsample.0" if block.endswith(".0") else f"{block}.conv3"
        assert add.ops[:2] == (host, f"{block}.add")
        assert add.conv.eltwise and add.conv.relu and add.operands == 2
        if block.endswith(".0"):
            conv3 = layers[f"{block}.conv3"]
            assert conv3.ops == (f"{block}.conv3",)  # written to memory, read by the SDP RDMA
            assert not conv3.conv.relu and not conv3.conv.eltwise
    assert sum(layer.conv.eltwise for layer in r50.layers) == 16


def test_resnet50_avgpool_fused_and_fc(r50):
    last_conv, fc = r50.layers[-2], r50.layers[-1]
    assert last_conv.ops == ("layer4.2.conv3", "layer4.2.add", "avgpool")
    assert last_conv.conv.pool_kernel == (7, 7) and last_conv.conv.pooled_shape == (1, 1)
    assert fc.ops == ("fc",)
    c = fc.conv
    assert (c.C, c.H, c.W, c.K, c.R, c.S, c.batch) == (2048, 1, 1, 1000, 1, 1, 1)
    assert fc.fc_batch == 1


def test_resnet50_fc_batch_on_nv_full(full, small):
    graph = zoo.resnet50(batch=16)
    fc = lower_graph(graph, full).layers[-1]
    assert fc.conv.batch == 16 and fc.fc_batch == 16  # default: max_batch 32, capped at 16
    assert lower_graph(graph, full, fc_batch=8).layers[-1].fc_batch == 8
    assert lower_graph(graph, small).layers[-1].fc_batch == 1  # nv_small has no batch feature
    # convs run image after image: no batching of weight fetches
    assert all(layer.fc_batch == 1 for layer in lower_graph(graph, full).layers[:-1])


def test_resnet50_448_splits_global_pool_and_unfuses_maxpool(full, small):
    graph = zoo.resnet50(image_size=448)
    program = lower_graph(graph, full)
    assert program.counts() == {"conv": 54, "pdp": 2}
    maxpool, avgpool = [layer for layer in program.layers if layer.kind == "pdp"]
    # 224 -> 112 wide output exceeds nv_full's 64-wide on-the-fly line buffer
    assert maxpool.ops == ("maxpool",) and maxpool.out_w == 112
    # 14x14 global average: 14 = 7 * 2 -> a 7x7/7 pass (14 -> 2) then a 2x2/2 pass (2 -> 1)
    assert avgpool.passes == (PdpPass(14, 14, 2, 2, 7, 7, 7, 7), PdpPass(2, 2, 1, 1, 2, 2, 2, 2))
    # nv_small's atomic-K is 8: 256-wide line buffer, the max pool fuses again
    assert lower_graph(graph, small).layers[0].ops == ("conv1", "maxpool")


def test_resnet50_int16_and_cycle_model_accepts_layers(full):
    program = lower_graph(zoo.resnet50(), full, "int16")
    assert {layer.precision for layer in program.layers} == {"int16"}
    assert {layer.bytes_per_element for layer in program.layers} == {2}
    net = network_cycles(full, program.conv_layers())
    assert len(net.layers) == 54 and net.total > 0


# ------------------------------------------------------------------ GoogLeNet, MobileNetV2
def test_googlenet_inception_pools_standalone(full):
    program = lower_graph(zoo.googlenet(), full)
    layers = by_op(program)
    # stem pools follow single-consumer convs: fused
    assert layers["maxpool1"].ops == ("conv1.conv", "maxpool1")
    assert layers["maxpool2"].ops == ("conv3.conv", "maxpool2")
    pdp = [layer for layer in program.layers if layer.kind == "pdp"]
    # 9 inception pool branches + maxpool3/4 + avgpool read concatenations: standalone
    assert len(pdp) == 12 and program.counts() == {"conv": 58, "pdp": 12}
    b = layers["inception3a.branch4.0"]
    assert b.kind == "pdp" and (b.in_c, b.in_h, b.out_c, b.out_h) == (192, 28, 192, 28)
    assert b.passes == (PdpPass(28, 28, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1),)
    # avgpool reads inception5b's concat: 384+384+128+128 = 1024 channels of 7x7
    a = layers["avgpool"]
    assert (a.in_c, a.in_h, a.out_h) == (1024, 7, 1) and a.passes[0].kernel_h == 7


def test_mobilenetv2_depthwise_and_adds(full):
    graph = zoo.mobilenetv2()
    program = lower_graph(graph, full)
    layers = by_op(program)
    dw = [layer.conv for layer in program.layers if layer.conv.groups > 1]
    assert len(dw) == 17 and all(c.groups == c.C == c.K and c.R == 3 for c in dw)
    first_dw = layers["features.1.conv.0.0"].conv
    assert (first_dw.C, first_dw.groups, first_dw.H, first_dw.stride_y) == (32, 32, 112, 1)
    # 10 residual adds (blocks that keep stride 1 and width), each fused into its project conv
    adds = [op.name for op in graph.ops if isinstance(op, Binary)]
    assert len(adds) == 10
    for add in adds:
        block = add.rsplit(".", 1)[0]
        assert layers[add].ops == (f"{block}.conv.2", add)
    assert layers["avgpool"].ops == ("features.18.0", "avgpool")
    assert program.counts() == {"conv": 53}


def test_vgg_and_alexnet_identity_avgpool_elided(full):
    # at 224 torchvision's adaptive average pools are 1x1/1 over 7x7 (VGG) and 6x6 (AlexNet)
    vgg = by_op(lower_graph(zoo.vgg16(), full))
    assert vgg["avgpool"].ops == ("features.28", "features.30", "avgpool")
    fc = vgg["classifier.0"].conv  # FC over the 512 x 7 x 7 map: a 7x7 kernel
    assert (fc.C, fc.H, fc.W, fc.R, fc.S, fc.K) == (512, 7, 7, 7, 7, 4096)
    alex = lower_graph(zoo.alexnet(), full)
    assert alex.counts() == {"conv": 8}
    assert by_op(alex)["classifier.1"].conv.R == 6


# ------------------------------------------------------------------ PDP rules
def test_pdp_max_flying_width_hand_values(full, small):
    # 7 KiB = 57344 bits / (RTL lines x kernels per group x bits per element)
    assert pdp_max_flying_width(full, "int8", 3, 2) == 57344 // (2 * 32 * 14) == 64
    assert pdp_max_flying_width(full, "int8", 3, 1) == 57344 // (4 * 32 * 14) == 32
    assert pdp_max_flying_width(full, "int8", 2, 2) == 57344 // (1 * 32 * 14) == 128
    assert pdp_max_flying_width(full, "int16", 3, 2) == 57344 // (2 * 16 * 28) == 64
    assert pdp_max_flying_width(small, "int8", 3, 2) == 57344 // (2 * 8 * 14) == 256
    assert pdp_max_flying_width(full, "int8", 8, 1) == 57344 // (8 * 32 * 14) == 16


def test_split_pool_window_cases():
    # within limits: one pass, unchanged
    assert split_pool_window(7, 7, 7, 7, 7, 7) == (PdpPass(7, 7, 1, 1, 7, 7, 7, 7),)
    # 13x13 global: padded to 14 = 7 * 2, 1 padding row/column on the first pass
    assert split_pool_window(13, 13, 13, 13, 13, 13) == (
        PdpPass(13, 13, 2, 2, 7, 7, 7, 7, 0, 1, 0, 1), PdpPass(2, 2, 1, 1, 2, 2, 2, 2))
    # tiled 16x16/16 windows over 32x32: 8 then 2 (32 -> 4 -> 2)
    assert split_pool_window(32, 32, 16, 16, 16, 16) == (
        PdpPass(32, 32, 4, 4, 8, 8, 8, 8), PdpPass(4, 4, 2, 2, 2, 2, 2, 2))
    # 56 x 12 global: height 56 = 8*7, width 12 -> 6*2 (greedy from 8: 12 % 8 != 0, 12 = 6*2)
    assert split_pool_window(56, 12, 56, 12, 56, 12) == (
        PdpPass(56, 12, 7, 2, 8, 6, 8, 6), PdpPass(7, 2, 1, 1, 7, 2, 7, 2))
    assert split_pool_window(20, 20, 9, 9, 1, 1) is None        # overlapping windows
    assert split_pool_window(22, 22, 11, 11, 11, 11) is None    # tiled, prime 11
    assert split_pool_window(20, 20, 10, 10, 10, 10, (1, 1, 1, 1)) is None  # padded big window


def _graph(*ops):
    return Graph("t", tuple(ops))


def test_pool_not_fused_when_too_wide_or_conv_has_two_consumers(full):
    c = conv2d("c", 112, 16, 16, 3, padding=1)
    p = Pool(name="p", kind="max", in_h=112, in_w=112, channels=16, kernel_h=3, kernel_w=3,
             stride_h=1, stride_w=1, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1,
             inputs=("c",))
    # 3x3/1 -> 112 wide output > 32 (4 line-buffer lines): standalone
    assert lower_graph(_graph(c, p), full).counts() == {"conv": 1, "pdp": 1}
    p2 = Pool(name="p", kind="max", in_h=112, in_w=112, channels=16, kernel_h=2, kernel_w=2,
              stride_h=2, stride_w=2, inputs=("c",))
    assert lower_graph(_graph(c, p2), full).layers[0].ops == ("c", "p")
    other = conv2d("d", 112, 16, 8, 1, inputs=("c",))
    p3 = Pool(name="p", kind="max", in_h=112, in_w=112, channels=16, kernel_h=2, kernel_w=2,
              stride_h=2, stride_w=2, inputs=("c",))
    assert lower_graph(_graph(c, other, p3), full).counts() == {"conv": 2, "pdp": 1}
    # grouped conv: NVIDIA's compiler does not fuse PDP behind numGroups > 1
    g = conv2d("c", 32, 16, 16, 3, padding=1, groups=4)
    pg = Pool(name="p", kind="max", in_h=32, in_w=32, channels=16, kernel_h=2, kernel_w=2,
              stride_h=2, stride_w=2, inputs=("c",))
    assert lower_graph(_graph(g, pg), full).counts() == {"conv": 1, "pdp": 1}


def test_standalone_add_and_free_concat(full):
    a = conv2d("a", 8, 4, 8, 3, padding=1)
    b = conv2d("b", 8, 4, 8, 3, padding=1)
    uses_b = conv2d("x", 8, 8, 8, 1, inputs=("b",))
    add = Eltwise(name="add", op="add", elements=8 * 8 * 8, operands=2, inputs=("a", "b"))
    cat = Move(name="cat", kind="concat", elements=2 * 8 * 8 * 8, inputs=("add", "x"))
    program = lower_graph(_graph(a, b, uses_b, add, cat), full)
    # b (the later producer) has two consumers: the add runs alone on the SDP, 2 operands
    sdp = by_op(program)["add"]
    # the concat is free, attached to the layer of its last-produced input (the add)
    assert sdp.kind == "sdp" and sdp.ops == ("add", "cat") and sdp.operands == 2
    assert (sdp.in_c, sdp.in_h, sdp.in_w) == (8, 8, 8)
    assert program.layers[0].conv.image_input and not program.layers[1].conv.image_input


def test_assume_bn_relu_off(full):
    program = lower_graph(zoo.resnet18(), full, assume_bn_relu=False)
    assert not any(c.bias or c.bn or c.relu for c in program.conv_layers())
    assert sum(c.eltwise for c in program.conv_layers()) == 8


# ------------------------------------------------------------------ errors
def test_unsupported_op_error_names_op_kind_and_reason(full):
    with pytest.raises(NvdlaLoweringError, match=r"'layer\.0\.attn\.softmax' \(softmax\).*CPU"):
        lower_graph(zoo.bert_base_layer(seq_len=8), full)


def test_lut_activation_needs_sdp_lut(small):
    g = _graph(Gemm(name="fc", m=4, n=8, k=8),
               Eltwise(name="act", op="sigmoid", elements=32, inputs=("fc",)))
    with pytest.raises(NvdlaLoweringError, match=r"'act' \(sigmoid\).*'sdp_lut'.*nv_small"):
        lower_graph(g, small)


def test_bad_arguments(full, small):
    graph = zoo.resnet18()
    with pytest.raises(ConfigError, match=r"precision = 'fp16'.*nv_small supports int8"):
        lower_graph(graph, small, "fp16")
    with pytest.raises(ConfigError, match=r"fc_batch = 4.*'batch'"):
        lower_graph(graph, small, fc_batch=4)
    with pytest.raises(NvdlaLoweringError, match=r"fc_batch = 64.*max_batch = 32"):
        lower_graph(graph, full, fc_batch=64)
    with pytest.raises(NvdlaLoweringError, match=r"fc_batch = 0"):
        lower_graph(graph, full, fc_batch=0)
    with pytest.raises(NvdlaLoweringError, match=r"graph = .*compiler.ir.Graph"):
        lower_graph([conv2d("c", 8, 3, 8, 3)], full)
    with pytest.raises(NvdlaLoweringError, match=r"cfg = .*NvdlaConfig"):
        lower_graph(graph, "nv_full")
    with pytest.raises(NvdlaLoweringError, match=r"skip_unsupported = 1"):
        lower_graph(graph, full, skip_unsupported=1)


def test_unsplittable_pool_and_moves(full, small):
    big = Pool(name="p", kind="avg", in_h=20, in_w=20, channels=4, kernel_h=9, kernel_w=9)
    with pytest.raises(NvdlaLoweringError, match=r"'p' \(avg pool\).*9x9"):
        lower_graph(_graph(big), full)
    t = Move(name="t", kind="transpose", elements=64)
    with pytest.raises(NvdlaLoweringError, match=r"'t' \(transpose\)"):
        lower_graph(_graph(t), full)
    cp = Move(name="cp", kind="copy", elements=64)
    assert lower_graph(_graph(cp), full).layers[0].kind == "bdma"
    with pytest.raises(NvdlaLoweringError, match=r"'cp' \(copy\).*'bdma'"):
        lower_graph(_graph(cp), small)
    dil = Conv2d(name="d", in_h=16, in_w=16, in_channels=4, out_channels=4, kernel_h=3,
                 kernel_w=3, dilation_h=2, dilation_w=1)
    program = lower_graph(_graph(dil), full, skip_unsupported=True)
    assert program.layers == () and program.skipped[0].macs == dil.macs
    assert program.macs + program.skipped_macs == dil.macs


def test_convlayer_fields_match_ir(full):
    op = Conv2d(name="c", in_h=15, in_w=9, in_channels=6, out_channels=12, kernel_h=3, kernel_w=2,
                stride_h=2, stride_w=1, pad_top=1, pad_bottom=0, pad_left=0, pad_right=1,
                dilation_h=2, dilation_w=2, groups=3, batch=2, inputs=())
    c = lower_graph(_graph(op), full).layers[0].conv
    assert c == ConvLayer(6, 15, 9, 12, 3, 2, 2, 1, 1, 0, 0, 1, dilation=2, groups=3, batch=2,
                          bias=True, bn=True, relu=True, image_input=False, name="c")
    assert (c.P, c.Q) == (op.out_h, op.out_w) and c.macs == op.macs
