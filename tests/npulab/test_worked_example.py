"""The worked example of docs/compiler.md: the traffic derived by hand there, and which layer is
bound by what."""

from compiler.ir import Gemm, Graph, conv2d
from hw.configfile import load_chip_config
from npulab.simulate import simulate


def test_worked_example_numbers_match_the_hand_derivation():
    graph = Graph("worked_example", (conv2d("conv3x3", 56, 128, 128, 3, padding=1),
                                     Gemm(name="fc", m=1, n=1000, k=2048)))
    chip = load_chip_config(None, ["chip.model_input=dram", "chip.model_output=dram"])
    conv, fc = simulate(graph, chip).layers
    assert conv.tiling == "direct g1 m224 n128 k1152 mnk"
    # weights once + 14 row tiles of 6 input rows (5 at the two edges) x 56 x 128
    assert conv.dram_read_bytes == 128 * 128 * 9 + (12 * 6 + 2 * 5) * 56 * 128
    assert conv.dram_write_bytes == 56 * 56 * 128
    assert conv.bound == "compute" and conv.utilization_pct > 95
    assert fc.dram_read_bytes == 2048 * 1000 + 2048 and fc.dram_write_bytes == 1000
    assert fc.bound == "dram" and fc.stall_dram_cycles > 0.5 * fc.compute_cycles
    assert fc.macs / (fc.dram_read_bytes + fc.dram_write_bytes) < 1.01
