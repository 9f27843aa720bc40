"""The vector lanes' RTL (hw.vector.rtl) in Amaranth's simulator against the functional model
(hw.vector.functional): every operation bit for bit, with bubbles and back-pressure, the
pipeline's latency, and each deliberate mutation caught."""

import numpy as np
import pytest

from hw.vector import functional as F
from hw.vector.rtl import cosim
from hw.vector.rtl.lane import LATENCY, MAX_WINDOW, MUTATIONS, VecOp, reciprocals

_INT32 = (-(1 << 31), (1 << 31) - 1)


def _accumulators(seed, beats, lanes):
    """Random int32 accumulators with the edge values and values near rounding ties."""
    rng = np.random.default_rng(seed)
    a = rng.integers(*_INT32, size=(beats, lanes), endpoint=True)
    a[:, 0] = rng.integers(-4096, 4096, size=beats)          # small: ties and zero points
    a[0, :] = [_INT32[0], _INT32[1], 0, -1][:lanes] + [0] * max(0, lanes - 4)
    return a


@pytest.mark.parametrize("shift,relu,zp,bits", [(-7, False, 0, 8), (-1, True, -5, 8),
                                                (0, False, 3, 8), (4, True, 10, 16),
                                                (-31, False, 0, 8)])
def test_requant_equals_the_fixed_point_model(shift, relu, zp, bits):
    a = _accumulators(shift & 0xFF, 48, 4)
    multiplier, _ = F.quantize_multiplier(0.7071)
    args = dict(multiplier=multiplier, shift=shift, zero_point=zp, relu=relu, out_bits=bits)
    got = cosim.run(VecOp.REQUANT, a, **args)
    want = cosim.expected(VecOp.REQUANT, a, **args)
    assert np.array_equal(got.out, want)
    assert (want != 0).any() and (np.abs(want) < (1 << (bits - 1)) - 1).any()


def test_requant_ties_round_as_gemmlowp():
    # multiplier 2**30 (0.5) with right shift 1: x / 4 exactly; ties at x = 2 mod 4
    a = np.array([[2, 6, -2, -6], [1, 3, -1, -3], [5, 7, -5, -7]])
    got = cosim.run(VecOp.REQUANT, a, multiplier=1 << 30, shift=-1).out
    assert np.array_equal(got, cosim.expected(VecOp.REQUANT, a, multiplier=1 << 30, shift=-1))
    # hand-worked: high half of x * 0.5 rounds ties up (1 -> 1, -1 -> 0, 3 -> 2, -3 -> -1),
    # then /2 rounds half away from zero
    assert got[1].tolist() == [1, 1, 0, -1]


@pytest.mark.parametrize("op", [VecOp.RELU, VecOp.ADD])
def test_relu_and_add_saturate_like_the_model(op):
    rng = np.random.default_rng(op.value)
    a = rng.integers(-300, 300, size=(32, 8))
    b = rng.integers(-128, 128, size=(32, 8))
    got = cosim.run(op, a, b)
    assert np.array_equal(got.out, cosim.expected(op, a, b))
    assert (np.abs(got.out) == 127).any() or op is VecOp.RELU


@pytest.mark.parametrize("kind,op", [("max", VecOp.MAX_POOL), ("avg", VecOp.AVG_POOL)])
@pytest.mark.parametrize("kernel,stride,pads", [(3, 2, (1, 1, 1, 1)), (2, 2, (0, 0, 0, 0)),
                                                ((2, 3), 1, (0, 1, 1, 0))])
def test_pooling_an_image_equals_pool2d(kind, op, kernel, stride, pads):
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, size=(1, 5, 6, 6))
    a, last = cosim.pool_beats(x, kernel, stride, pads, lanes=4)
    got = cosim.run(op, a, last=last)
    ref = F.to_dtype(F.pool2d(x, kind, kernel, stride, pads), "int8")
    image = cosim.unblock(got.out, ref.shape[1], ref.shape[2], ref.shape[3])
    assert np.array_equal(image, ref)


def test_average_ties_go_to_even():
    # windows of 2 with odd sums and of 4 with sums = 2 mod 4: every quotient is a tie
    a = np.array([[1, 3, -1, -3], [2, 2, -2, -2], [1, 0, 5, -7], [0, 1, 0, 0],
                  [0, 0, 0, 0], [0, 0, 0, 0]])
    last = np.array([False, True, False, False, False, True])
    got = cosim.run(VecOp.AVG_POOL, a, last=last).out
    assert got.tolist() == [[2, 2, -2, -2], [0, 0, 1, -2]]
    assert np.array_equal(got, cosim.expected(VecOp.AVG_POOL, a, last=last))


def test_reciprocal_table_divides_exactly():
    """The average's divider-free quotient equals integer division for every numerator a
    window of int8 values can give and every count up to MAX_WINDOW."""
    k, table = reciprocals(8, MAX_WINDOW)
    top = 2 * 128 * MAX_WINDOW + MAX_WINDOW
    numer = np.arange(top + 1, dtype=np.uint64)
    for count in range(1, MAX_WINDOW + 1):
        d = 2 * count
        quotient = (numer * np.uint64(table[count])) >> np.uint64(k)
        assert np.array_equal(quotient, numer // np.uint64(d)), count
    assert k < 64 - (top.bit_length())  # the products fit the 64-bit check above


def test_latency_and_back_pressure():
    a = _accumulators(3, 24, 2)
    args = dict(multiplier=(1 << 31) - 1, shift=-20, zero_point=1)
    plain = cosim.run(VecOp.REQUANT, a, **args)
    assert plain.cycles.tolist() == [t + LATENCY for t in range(24)]
    rng = np.random.default_rng(1)
    bubbles, stalls = rng.random(40) < 0.3, rng.random(60) < 0.4
    busy = cosim.run(VecOp.REQUANT, a, bubbles=bubbles, stalls=stalls, **args)
    assert np.array_equal(busy.out, plain.out)
    assert busy.total_cycles > plain.total_cycles
    x = np.random.default_rng(2).integers(-128, 128, size=(1, 4, 4, 3))
    beats, last = cosim.pool_beats(x, 2, 2, (0, 0, 0, 0), lanes=3)
    pooled = cosim.run(VecOp.AVG_POOL, beats, last=last, stalls=stalls, bubbles=bubbles)
    assert np.array_equal(pooled.out, cosim.expected(VecOp.AVG_POOL, beats, last=last))


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_every_mutation_is_caught(mutation):
    rng = np.random.default_rng(5)
    acc = _accumulators(5, 16, 4)
    act = rng.integers(-128, 128, size=(16, 4))
    x = rng.integers(-128, 128, size=(1, 4, 4, 4))
    pool, last = cosim.pool_beats(x, 2, 1, (0, 0, 0, 0), lanes=4)
    cases = [(VecOp.REQUANT, acc, dict(multiplier=1 << 30, shift=-3, zero_point=-9, relu=True)),
             (VecOp.ADD, act, {}), (VecOp.AVG_POOL, pool, {})]
    caught = []
    for op, a, args in cases:
        extra = dict(b=act if op is VecOp.ADD else None,
                     last=last if op is VecOp.AVG_POOL else None)
        want = cosim.expected(op, a, **extra, **args)
        assert np.array_equal(cosim.run(op, a, **extra, **args).out, want)
        got = cosim.run(op, a, **extra, **args, mutation=mutation).out
        caught.append(not np.array_equal(got, want))
    assert any(caught), mutation


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match="mutation = 'nope'"):
        cosim.run(VecOp.RELU, np.zeros((1, 2)), mutation="nope")
    with pytest.raises(ValueError, match="b: shape"):
        cosim.run(VecOp.ADD, np.zeros((3, 2)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="out_bits = 4"):
        cosim.run(VecOp.RELU, np.zeros((1, 2)), out_bits=4)
