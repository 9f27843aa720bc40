"""SCALE-Sim topology CSV reader/writer (compiler/frontends/scalesim_topology.py)."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.frontends.scalesim_topology import (
    CONV_HEADER, GEMM_HEADER, TopologyError, read_topology, scalesim_out_dim, scalesim_overhang,
    write_topology,
)
from compiler.ir import Conv2d, Eltwise, Gemm, Graph, Pool, conv2d

SIM_CONFIGS = Path(__file__).resolve().parents[2] / "sim_configs"


def write(tmp_path: Path, text: str, name: str = "topo.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def scalesim_layers(row: str) -> list[tuple[str, int, int, int, int, int, int, int]]:
    """What SCALE-Sim's load_arrays_conv makes of one conv row (DP expansion included)."""
    name, h, w, r, s, c, k, stride = [f.strip() for f in row.split(",")][:8]
    h, w, r, s, c, k, stride = (int(x) for x in (h, w, r, s, c, k, stride))
    if "DP" in name:
        return [(f"{name}Channel_{i}", h, w, r, s, 1, k, stride) for i in range(c)]
    return [(name, h, w, r, s, c, k, stride)]


def scalesim_mnk(layer) -> tuple[int, int, int]:
    """SCALE-Sim's (M, N, K) for one expanded layer, from its own ceil output formula."""
    _, h, w, r, s, c, k, stride = layer
    e = math.ceil(Fraction(h - r + stride, stride))
    f = math.ceil(Fraction(w - s + stride, stride))
    return e * f, k, r * s * c


CONV_ROWS = f"""{CONV_HEADER}
Conv1     ,224         ,224        ,11           ,11          ,3       ,96        ,4      ,

  Conv2, 27, 27, 5, 5, 96, 256, 1,
"""


def test_conv_rows_with_trailing_comma(tmp_path):
    g = read_topology(write(tmp_path, CONV_ROWS))
    assert g.name == "topo"
    assert [op.name for op in g] == ["Conv1", "Conv2"]
    c1, c2 = g.ops
    assert isinstance(c1, Conv2d) and c1.inputs == ()
    assert (c1.in_h, c1.in_w, c1.kernel_h, c1.in_channels, c1.out_channels) == (224, 224, 11, 3, 96)
    assert (c1.stride_h, c1.stride_w, c1.groups, c1.batch) == (4, 4, 1, 1)
    assert (c1.out_h, c1.out_w) == (55, 55)  # reference CSV AlexNet_conv1_11x11s4: gemm_M 3025
    assert c1.gemm_shape().m == 3025 and c1.gemm_shape().k == 363
    assert (c2.out_h, c2.pad_bottom, c2.pad_right) == (23, 0, 0)


def test_trailing_comma_is_optional(tmp_path):
    without = CONV_ROWS.replace(",\n", "\n")
    assert without.count(",\n") == 0
    assert read_topology(write(tmp_path, without, "b.csv")).ops == \
        read_topology(write(tmp_path, CONV_ROWS, "a.csv")).ops


def test_header_is_always_line_one(tmp_path):
    # SCALE-Sim skips line 1 whatever it holds, even a blank line.
    g = read_topology(write(tmp_path, "anything at all\nx, 8, 8, 3, 3, 1, 1, 1,\n"))
    assert [op.name for op in g] == ["x"]
    with pytest.raises(TopologyError, match=r"topo\.csv:2: field count: 1:"):
        read_topology(write(tmp_path, "\nLayer name\nx, 8, 8, 3, 3, 1, 1, 1,\n"))


def test_headerless_file_is_rejected_not_silently_shortened(tmp_path):
    path = write(tmp_path, "a, 8, 8, 3, 3, 1, 1, 1,\nb, 8, 8, 3, 3, 1, 1, 1,\n")
    with pytest.raises(TopologyError) as exc:
        read_topology(path)
    assert f"{path}:1: header: 'a, 8, 8, 3, 3, 1, 1, 1,'" in str(exc.value)


def test_gemm_rows_map_to_m_n_k(tmp_path):
    path = write(tmp_path, f"{GEMM_HEADER}\nG1, 1000, 10, 300,\nG2, 64, 32, 16\n")
    for gemm in (None, True):
        g = read_topology(path, gemm=gemm)
        assert g.ops == (Gemm(name="G1", m=1000, n=10, k=300), Gemm(name="G2", m=64, n=32, k=16))
    # scalesim.md / load_arrays_gemm: ifmap M x K, filter K x N, i.e. the conv row
    # (M, K, 1, K, 1, N, 1) SCALE-Sim lowers it to has the same matrix view.
    lowered = read_topology(write(tmp_path, f"{CONV_HEADER}\nG1, 1000, 300, 1, 300, 1, 10, 1,\n",
                                  "lowered.csv"))
    assert lowered.ops[0].gemm_shape() == g.ops[0].gemm_shape()


def test_forced_layout_checks_field_count(tmp_path):
    gemm_file = write(tmp_path, f"{GEMM_HEADER}\nG1, 4, 4, 4,\n", "g.csv")
    with pytest.raises(TopologyError, match=r"g\.csv:2: field count: 4: gemm=False forces"):
        read_topology(gemm_file, gemm=False)
    conv_file = write(tmp_path, CONV_ROWS, "c.csv")
    with pytest.raises(TopologyError, match=r"c\.csv:2: field count: 8: gemm=True forces the GEMM"):
        read_topology(conv_file, gemm=True)


def test_mixed_layouts_name_the_first_row(tmp_path):
    path = write(tmp_path, f"{GEMM_HEADER}\nG1, 4, 4, 4,\nc, 8, 8, 3, 3, 1, 1, 1,\n")
    with pytest.raises(TopologyError, match=r"topo\.csv:3: field count: 8: the first layer row "
                                            r"\(line 2\) is the GEMM layout"):
        read_topology(path)


def test_dense_sparsity_field_accepted_sparse_rejected(tmp_path):
    g = read_topology(write(tmp_path, f"{CONV_HEADER}\nc, 8, 8, 3, 3, 2, 4, 1, 1:1,\n"))
    assert g.ops[0].out_channels == 4
    g = read_topology(write(tmp_path, f"{GEMM_HEADER}\nG, 4, 4, 4, 4:4\n", "g.csv"))
    assert g.ops[0] == Gemm(name="G", m=4, n=4, k=4)
    path = write(tmp_path, f"{GEMM_HEADER}\nG, 4, 4, 4, 2:4,\n", "s.csv")
    with pytest.raises(TopologyError, match=r"s\.csv:2: sparsity: '2:4': npulab models dense"):
        read_topology(path)


def test_depthwise_dp_is_channel_multiplier(tmp_path):
    row = "CDP1, 16, 16, 3, 3, 4, 2, 2,"
    op = read_topology(write(tmp_path, f"{CONV_HEADER}\n{row}\n")).ops[0]
    assert (op.in_channels, op.out_channels, op.groups, op.is_depthwise) == (4, 8, 4, True)
    # SCALE-Sim runs 4 layers CDP1Channel_0..3, each 1 channel with its own 2 filters.
    layers = scalesim_layers(row)
    assert [layer[0] for layer in layers] == [f"CDP1Channel_{i}" for i in range(4)]
    shape = op.gemm_shape()
    assert shape.count == len(layers)
    assert {(shape.m, shape.n, shape.k)} == {scalesim_mnk(layer) for layer in layers}
    assert op.macs == sum(math.prod(scalesim_mnk(layer)) for layer in layers)


@pytest.mark.parametrize("name, groups", [
    ("MobileDPconv", 4),  # substring anywhere
    ("DP", 4),
    ("conv_dp", 1),  # case-sensitive, as in SCALE-Sim
    ("Dp1", 1),
])
def test_dp_marker_is_a_case_sensitive_substring(tmp_path, name, groups):
    op = read_topology(write(tmp_path, f"{CONV_HEADER}\n{name}, 8, 8, 3, 3, 4, 1, 1,\n")).ops[0]
    assert op.groups == groups


def test_dp_with_one_channel_is_a_plain_conv(tmp_path):
    op = read_topology(write(tmp_path, f"{CONV_HEADER}\nxDP, 8, 8, 3, 3, 1, 5, 1,\n")).ops[0]
    assert (op.groups, op.in_channels, op.out_channels) == (1, 1, 5)


def test_scalesim_out_size_is_not_the_floor_formula():
    # The brief expected ceil((H-R+s)/s) == (H-R)//s + 1 for all H >= R; it is false whenever s
    # does not divide H - R. ResNet-18 conv1 as SCALE-Sim writes it (224, 7x7, s2) gives 110
    # (reference CSV R18_conv1_7x7s2: gemm_M = 12100 = 110**2), the floor formula 109.
    assert scalesim_out_dim(224, 7, 2) == 110 and (224 - 7) // 2 + 1 == 109
    assert scalesim_overhang(224, 7, 2) == 1


@settings(max_examples=400, deadline=None)
@given(h=st.integers(1, 600), r=st.integers(1, 64), s=st.integers(1, 16))
def test_out_size_equivalence(h, r, s):
    if r > h:
        return
    ceil_e = math.ceil(Fraction(h - r + s, s))
    assert scalesim_out_dim(h, r, s) == ceil_e
    # Exactly when s divides H - R does SCALE-Sim agree with the unpadded floor formula ...
    assert (ceil_e == (h - r) // s + 1) == ((h - r) % s == 0)
    # ... and the overhang padding the reader adds makes the IR's floor formula agree always.
    pad = scalesim_overhang(h, r, s)
    assert 0 <= pad < s
    assert (h + pad - r) // s + 1 == ceil_e
    op = Conv2d(name="c", in_h=h, in_w=h, in_channels=1, out_channels=1, kernel_h=r,
                kernel_w=r, stride_h=s, stride_w=s, pad_bottom=pad, pad_right=pad)
    assert op.out_h == op.out_w == ceil_e


@settings(max_examples=60, deadline=None)
@given(h=st.integers(1, 300), w=st.integers(1, 300), r=st.integers(1, 11), s=st.integers(1, 11),
       c=st.integers(1, 8), k=st.integers(1, 8), stride=st.integers(1, 5), dp=st.booleans())
def test_reader_matches_scalesim_shapes(tmp_path_factory, h, w, r, s, c, k, stride, dp):
    if r > h or s > w:
        return
    row = f"{'xDP' if dp else 'x'}, {h}, {w}, {r}, {s}, {c}, {k}, {stride},"
    path = tmp_path_factory.mktemp("t") / "t.csv"
    path.write_text(f"{CONV_HEADER}\n{row}\n")
    op = read_topology(path).ops[0]
    layers = scalesim_layers(row)
    shape = op.gemm_shape()
    assert shape.count == len(layers)
    assert {(shape.m, shape.n, shape.k)} == {scalesim_mnk(layer) for layer in layers}
    assert op.macs == sum(math.prod(scalesim_mnk(layer)) for layer in layers)
    write_topology(Graph(name="t", ops=(op,)), path)
    assert path.read_text().splitlines()[1] == row  # canonical rows write back unchanged
    assert read_topology(path).ops == (op,)


@pytest.mark.parametrize("row, line, what, value", [
    ("c, 8, abc, 3, 3, 1, 1, 1,", 3, "ifmap_w", "abc"),
    ("c, 8, 8, 3, 3, 0, 1, 1,", 3, "channels", "0"),
    ("c, 8, 8, 3, 3, 1, -2, 1,", 3, "num_filters", "-2"),
    ("c, 8, 8, 3, 3, 1, 1, 1.5,", 3, "stride", "1.5"),
    ("c, 8, 8, 3, 3, 1, 1, ,", 3, "stride", ""),
    ("c, 8, 8, 3, 3, 1,", 3, "field count", 6),
    ("c, 16, 16, 3, 3", 3, "field count", 5),  # truncated conv row: not a GEMM + sparsity row
    ("c, 8, 8, 3, 3, 1, 1, 1, 5,", 3, "field count", 9),  # a 9th field must be N:M
    ("c, 4, 8, 5, 3, 1, 1, 1,", 3, "filter_h", "5"),
    ("c, 8, 2, 3, 3, 1, 1, 1,", 3, "filter_w", "3"),
    ("a, 8, 8, 3, 3, 1, 1, 1,", 3, "name", "a"),
    (", 8, 8, 3, 3, 1, 1, 1,", 3, "name", ""),
])
def test_errors_name_path_line_and_value(tmp_path, row, line, what, value):
    path = write(tmp_path, f"{CONV_HEADER}\na, 8, 8, 3, 3, 1, 1, 1,\n{row}\n")
    with pytest.raises(TopologyError) as exc:
        read_topology(path)
    message = str(exc.value)
    assert message.startswith(f"{path}:{line}: {what}: {value!r}: ")
    assert "\n" not in message


def test_truncated_first_row_says_fields_found_and_required(tmp_path):
    path = write(tmp_path, f"{CONV_HEADER}\nconv1, 16, 16, 3, 3\n")
    with pytest.raises(TopologyError) as exc:
        read_topology(path)
    assert str(exc.value) == (
        f"{path}:2: field count: 5: a conv row has 8 fields (name, ifmap_h, ifmap_w, filter_h, "
        "filter_w, channels, num_filters, stride) and a GEMM row 4 (name, M, N, K), each "
        "optionally followed by an N:M sparsity field and a trailing comma")
    with pytest.raises(TopologyError, match=r":2: sparsity: '2:4'"):  # a real ratio still is one
        read_topology(write(tmp_path, f"{GEMM_HEADER}\ng, 4, 4, 4, 2:4,\n", "g.csv"))


def test_duplicate_name_cites_first_line(tmp_path):
    path = write(tmp_path, f"{CONV_HEADER}\na, 8, 8, 3, 3, 1, 1, 1,\n\na, 9, 9, 3, 3, 1, 1, 1,\n")
    with pytest.raises(TopologyError, match=r"topo\.csv:4: name: 'a': already used on line 2"):
        read_topology(path)


@pytest.mark.parametrize("text, line", [
    ("", 1), (f"{CONV_HEADER}\n", 1), (f"{CONV_HEADER}\n\n\n", 3),
])
def test_empty_topologies(tmp_path, text, line):
    path = write(tmp_path, text)
    with pytest.raises(TopologyError, match=rf"topo\.csv:{line}: layer rows: 0: a topology needs"):
        read_topology(path)


def test_write_uses_scalesim_header_and_trailing_commas(tmp_path):
    g = read_topology(write(tmp_path, CONV_ROWS.replace(",\n", "\n")))
    out = tmp_path / "out.csv"
    write_topology(g, out)
    lines = out.read_text().splitlines()
    assert lines[0] == CONV_HEADER
    assert lines[1:] == ["Conv1, 224, 224, 11, 11, 3, 96, 4,", "Conv2, 27, 27, 5, 5, 96, 256, 1,"]
    gemm = Graph(name="g", ops=(Gemm(name="G", m=3, n=4, k=5),))
    write_topology(gemm, out)
    assert out.read_text() == f"{GEMM_HEADER}\nG, 3, 4, 5,\n"
    assert read_topology(out).ops == gemm.ops


def test_mixed_graph_lowers_gemm_to_scalesim_conv_row(tmp_path):
    ops = (conv2d("c", 8, 2, 4, 3), Gemm(name="fcDP", m=7, n=10, k=12))
    out = tmp_path / "mixed.csv"
    write_topology(Graph(name="m", ops=ops), out)
    assert out.read_text().splitlines()[2] == "fcDP, 7, 12, 1, 12, 1, 10, 1,"
    back = read_topology(out)
    assert [op.gemm_shape() for op in back] == [op.gemm_shape() for op in ops]


def test_write_crops_rows_no_window_reads(tmp_path):
    # PyTorch-style unpadded 10x10, 3x3, stride 2 -> 4x4; SCALE-Sim given 10 rows would make 5.
    op = conv2d("c", 10, 1, 1, 3, stride=2)
    assert op.out_h == 4 and scalesim_out_dim(10, 3, 2) == 5
    out = tmp_path / "c.csv"
    write_topology(Graph(name="c", ops=(op,)), out)
    assert out.read_text().splitlines()[1] == "c, 9, 9, 3, 3, 1, 1, 2,"
    assert read_topology(out).ops[0].gemm_shape() == op.gemm_shape()


def test_prepad_folds_padding_into_the_ifmap(tmp_path):
    op = conv2d("c", 56, 64, 128, 3, stride=2, padding=1)  # 28x28 out
    out = tmp_path / "c.csv"
    with pytest.raises(TopologyError, match=r"c\.csv: Conv2d 'c': pad_top: 1: SCALE-Sim has no"):
        write_topology(Graph(name="c", ops=(op,)), out)
    assert not out.exists()
    write_topology(Graph(name="c", ops=(op,)), out, prepad=True)
    back = read_topology(out).ops[0]
    assert (back.in_h, back.out_h, back.gemm_shape()) == (57, 28, op.gemm_shape())


@pytest.mark.parametrize("op, what", [
    (Pool(name="p", kind="max", in_h=4, in_w=4, channels=1, kernel_h=2, kernel_w=2), "op"),
    (Eltwise(name="e", op="add", elements=4), "op"),
    (conv2d("c", 8, 1, 1, 3, batch=2), "batch"),
    (conv2d("c", 8, 1, 1, 3, dilation=2), "dilation"),
    (Conv2d(name="c", in_h=8, in_w=8, in_channels=1, out_channels=1, kernel_h=3, kernel_w=3,
            stride_h=1, stride_w=2), "stride"),
    (conv2d("c", 8, 4, 8, 3, groups=2), "groups"),
    (conv2d("c", 8, 4, 8, 3, groups=4), "name"),  # depthwise without 'DP'
    (conv2d("cDP", 8, 4, 8, 3), "name"),  # 'DP' but not depthwise
    (conv2d("c,1", 8, 1, 1, 3), "name"),
    (conv2d("c", 8, 1, 1, 3, padding=2), "pad_top"),
    (Gemm(name="G", m=2, n=2, k=2, batch=3), "batch"),
])
def test_write_rejects_what_scalesim_cannot_express(tmp_path, op, what):
    out = tmp_path / "x.csv"
    with pytest.raises(TopologyError) as exc:
        write_topology(Graph(name="g", ops=(op,)), out)
    assert str(exc.value).startswith(f"{out}: {type(op).__name__} {op.name!r}: {what}: ")
    assert not out.exists()


def test_write_rejects_conv_in_gemm_layout_and_empty_graph(tmp_path):
    with pytest.raises(TopologyError, match="layout: 'gemm'"):
        write_topology(Graph(name="g", ops=(conv2d("c", 8, 1, 1, 3),)), tmp_path / "x.csv",
                       gemm=True)
    with pytest.raises(TopologyError, match="needs >= 1 layer"):
        write_topology(Graph(name="g"), tmp_path / "x.csv")


def test_sample_resnet18_is_prepadded_torchvision_resnet18():
    path = SIM_CONFIGS / "scalesim_resnet18.csv"
    g = read_topology(path)
    assert len(g) == 20 and all(isinstance(op, Conv2d) for op in g)
    assert g.macs == 1_813_561_344  # torchvision ResNet-18's conv MACs at 224x224
    assert all(op.pad_bottom == op.pad_right == 0 for op in g)  # pre-padded, no overhang
    assert [g.op(n).out_h for n in ("conv1", "layer2_0_conv1", "layer4_1_conv2")] == [112, 28, 7]
    # The file is exactly what write_topology(prepad=True) makes of the PyTorch shapes.
    ops, hw, cin = [conv2d("conv1", 224, 3, 64, 7, stride=2, padding=3)], 56, 64
    for stage, cout in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            out = (hw - 1) // stride + 1
            ops.append(conv2d(f"layer{stage}_{block}_conv1", hw, cin, cout, 3, stride, 1))
            ops.append(conv2d(f"layer{stage}_{block}_conv2", out, cout, cout, 3, 1, 1))
            if stride == 2:
                ops.append(conv2d(f"layer{stage}_{block}_downsample", hw, cin, cout, 1, 2))
            hw, cin = out, cout
    torch_graph = Graph(name="resnet18", ops=tuple(ops))
    assert [op.gemm_shape() for op in g] == [op.gemm_shape() for op in torch_graph]
    assert torch_graph.macs == g.macs


def test_sample_resnet18_regenerates_byte_for_byte(tmp_path):
    path = SIM_CONFIGS / "scalesim_resnet18.csv"
    out = tmp_path / "r.csv"
    write_topology(read_topology(path), out)
    assert out.read_text() == path.read_text()


def test_sample_gemm_example():
    g = read_topology(SIM_CONFIGS / "scalesim_gemm_example.csv")
    assert all(isinstance(op, Gemm) for op in g) and len(g) >= 3
    assert g.op("G_1000x10x300") == Gemm(name="G_1000x10x300", m=1000, n=10, k=300)
