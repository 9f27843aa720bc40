"""Identical layers are timed (and tiled) once: per-layer cost follows the work, not the count.

Issue 21 item 8: a 100k-layer SCALE-Sim topology took 99 s with ``--timing compute`` and over
5 minutes natively, because every layer was timed and tiled afresh. The memoised results must
equal the unshared path exactly.
"""

import importlib

from compiler.backends import systolic
from compiler.ir import Conv2d, Gemm, Graph
from hw.configfile import load_chip_config

sim = importlib.import_module("npulab.simulate")   # the module (npulab exports the function)


def _repeated_graph(copies: int) -> Graph:
    ops = []
    for i in range(copies):
        ops.append(Gemm(name=f"fc{i}", m=33, n=70, k=90))
        ops.append(Conv2d(name=f"conv{i}", in_h=9, in_w=9, in_channels=8, out_channels=16,
                          kernel_h=3, kernel_w=3))
    return Graph("repeated", tuple(ops))


def test_compute_timing_times_each_shape_once_and_equals_unshared():
    chip = load_chip_config(None, ["array.rows=8", "array.cols=8"])
    sim._array_timing.cache_clear()
    run = sim.simulate(_repeated_graph(50), chip, "compute")
    info = sim._array_timing.cache_info()
    assert info.misses == 2 and info.hits == 98   # two shapes, 100 layers
    for layer, op in zip(run.layers, _repeated_graph(50).ops):
        s = op.gemm_shape()
        assert layer.cycles == sim._array_timing.__wrapped__(chip.array, "compute", s.count,
                                                             s.m, s.n, s.k)[0]
    from dataclasses import asdict
    # the dict leaves out a one-core chip's cores, an unpipelined run's stage (None), the
    # network bits of a chip without a network (0) and a ratio of zero activations of 0, as
    # it always did
    expect = {k: v for k, v in asdict(run.layers[3]).items() if k not in ("cores", "stage")}
    assert expect["actions"].pop("noc_bit_hops") == 0
    assert expect["actions"].pop("act_zeros") == 0.0
    assert run.to_dict()["layers"][3] == expect


def test_native_tiles_each_shape_once_and_equals_unshared(monkeypatch):
    chip = load_chip_config(None, ["array.rows=8", "array.cols=8"])
    systolic._tiled_shape.cache_clear()
    shared = sim.simulate(_repeated_graph(4), chip)
    info = systolic._tiled_shape.cache_info()
    assert info.misses <= 6 and info.hits >= 6   # a few (shape, residency) cases, 8 layers
    monkeypatch.setattr(systolic, "_tiled_shape", systolic._tiled_shape.__wrapped__)
    unshared = sim.simulate(_repeated_graph(4), chip)
    assert shared.to_dict() == unshared.to_dict()
