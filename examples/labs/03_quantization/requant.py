#!/usr/bin/env python3
"""Lab 3: the int8 requantization contract, register by register.

Quantizes the lab's conv layer (``precisions.py``: 3x3, 28x28x128 -> 128, batch-norm folded,
ReLU, seeded) with ``hw.nvdla.quant.quantize_conv`` and prints the register values the pass
produces. Then it runs the layer through NVDLA's bit-exact CACC and SDP with those registers,
or with the ones you change on the command line, and checks the result against the contract
written out in numpy (:func:`contract`)::

    t   = sat32(round(A / 2**CLIP_TRUNCATE))                        CACC -> SDP
    a   = t + sat32(B[k] << BS_ALU_SHIFT_VALUE)                     X1 ALU (33 bit)
    v   = relu(sat32(round(a * s[k] / 2**BS_MUL_SHIFT_VALUE)))      X1 MUL, truncate, ReLU
    out = sat8(sat17(round((v - CVT_OFFSET) * CVT_SCALE / 2**CVT_SHIFT)))   output converter

where ``A`` is the CACC sum of the int8 input and weights and ``round`` rounds half away from
zero. The outputs are dequantized with the pass's output scale ``s_y`` (unchanged by your
edits, as the next layer would read them) and compared with the float64 reference.

Example (from the repository root)::

    python examples/labs/03_quantization/requant.py
    python examples/labs/03_quantization/requant.py --mul-shift 24
    python examples/labs/03_quantization/requant.py --scale 3=20000 --cvt-scale 3 --cvt-shift 1
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, replace

import numpy as np

from hw.nvdla.conv import conv_cacc, conv_to_sdp
from hw.nvdla.quant import calibrate_scale, quantize_activations, quantize_conv
from hw.nvdla.sdp import SdpCvtParams, SdpParams, sdp_apply

from precisions import PAD, add_layer_args, check_layer_args, make_layer


@dataclass(frozen=True)
class Registers:
    """The registers of the int8 layer that the contract reads."""

    clip_truncate: int
    alu_shift: int
    mul_shift: int
    scale: np.ndarray     # s[k], int16 values
    bias: np.ndarray      # B[k], int16 values
    cvt_offset: int = 0
    cvt_scale: int = 1
    cvt_shift: int = 0


def _rshift_round(x: np.ndarray, k: int) -> np.ndarray:
    """``round_half_away(x / 2**k)`` on int64 (|x| < 2**61, k <= 60)."""
    if k == 0:
        return x.copy()
    return np.sign(x) * ((np.abs(x) + (1 << (k - 1))) >> k)


def _sat(x: np.ndarray, bits: int) -> np.ndarray:
    return np.clip(x, -(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def contract(acc: np.ndarray, r: Registers, relu: bool = True) -> np.ndarray:
    """The int8 output the contract predicts for CACC sums ``acc`` (int64, channels last)."""
    t = _sat(_rshift_round(np.asarray(acc, np.int64), r.clip_truncate), 32)
    a = t + _sat(r.bias.astype(np.int64) << r.alu_shift, 32)
    v = _sat(_rshift_round(a * r.scale.astype(np.int64), r.mul_shift), 32)
    if relu:
        v = np.maximum(v, 0)
    c = _rshift_round((v - r.cvt_offset) * r.cvt_scale, r.cvt_shift)
    return _sat(_sat(c, 17), 8).astype(np.int8)


def hardware(acc: np.ndarray, base_sdp: SdpParams, r: Registers) -> np.ndarray:
    """The bit-exact CACC delivery and SDP (``conv_to_sdp``, ``sdp_apply``) with ``r``."""
    bs = replace(base_sdp.bs, alu_shift_value=r.alu_shift, mul_shift_value=r.mul_shift,
                 alu_data=r.bias, mul_data=r.scale)
    sdp = SdpParams(bs=bs, cvt=SdpCvtParams(cvt_offset=r.cvt_offset, cvt_scale=r.cvt_scale,
                                            cvt_shift=r.cvt_shift))
    return sdp_apply(conv_to_sdp(acc, r.clip_truncate, 34), sdp)


def setup(size=28, channels=128, kernels=128, seed=2026):
    """(layer, x, reference output, QuantizedConv, CACC sums, base Registers)."""
    layer, x = make_layer(size, channels, kernels, seed)
    ref = layer.forward(x)
    s_x, s_y = calibrate_scale(x), calibrate_scale(ref)
    q = quantize_conv(layer, s_x, s_y)
    acc = conv_cacc(quantize_activations(x, s_x), q.weight_q, padding=PAD, atomic_c=64,
                    acc_bits=34)
    base = Registers(0, q.alu_shift_value, q.mul_shift_value, q.scale_operand.copy(),
                     q.bias_operand.copy())
    return layer, x, ref, q, acc, base


def sqnr_db(out, ref) -> float:
    err = out - ref
    noise = float(np.sum(err ** 2))
    return 10 * math.log10(float(np.sum(ref ** 2)) / noise) if noise else math.inf


def register_lines(q, base: Registers) -> list[str]:
    k = len(base.scale)
    lines = [
        f"input scale s_x = {q.input_scale:.6g}, output scale s_y = {q.output_scale:.6g}, "
        f"per-channel weight scales s_w[k] = max|W[k]| / 127",
        f"CACC  D_CLIP_CFG.CLIP_TRUNCATE = {base.clip_truncate}",
        f"SDP   BS_ALU_SHIFT_VALUE = {base.alu_shift}, BS_MUL_SHIFT_VALUE = {base.mul_shift}, "
        f"ReLU on; X2, Y bypassed",
        f"SDP   D_CVT_OFFSET = {base.cvt_offset}, D_CVT_SCALE = {base.cvt_scale}, "
        f"D_CVT_SHIFT = {base.cvt_shift} (identity)",
        f"{'k':>4} {'s_w[k]':>10} {'M[k]':>12} {'s[k]':>6} {'s[k]/2^sh rel.err':>18} "
        f"{'b_acc[k]':>10} {'B[k]':>7}",
    ]
    picks = list(dict.fromkeys([0, 1, 2, 3, int(np.argmin(base.scale)),
                                int(np.argmax(base.scale))]))
    for j in picks:
        if j >= k:
            continue
        rel = abs(base.scale[j] / 2.0 ** base.mul_shift - q.multiplier[j]) / q.multiplier[j]
        lines.append(f"{j:>4} {q.weight_scale[j]:>10.4g} {q.multiplier[j]:>12.5e} "
                     f"{base.scale[j]:>6} {rel:>18.2e} {q.bias_acc[j]:>10.1f} "
                     f"{base.bias[j]:>7}")
    lines.append(f"s[k] spans {base.scale.min()}..{base.scale.max()} (channels "
                 f"{int(np.argmin(base.scale))} and {int(np.argmax(base.scale))}); "
                 f"|B[k]| <= {np.abs(base.bias).max()}")
    return lines


def _pairs(items: list[str], flag: str, k: int) -> dict[int, int]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        try:
            j, v = int(key), int(value)
        except ValueError:
            raise ValueError(f"{flag} {item!r}: must be K=VALUE with integers, e.g. {flag} 3=20000")
        if not sep or not 0 <= j < k:
            raise ValueError(f"{flag} {item!r}: channel {key} must be in 0..{k - 1}")
        if not -32768 <= v <= 32767:
            raise ValueError(f"{flag} {item!r}: value {v} is outside the int16 operand range "
                             f"-32768..32767")
        out[j] = v
    return out


LIMITS = (("clip_truncate", 0, 31, "CLIP_TRUNCATE"), ("alu_shift", 0, 16, "BS_ALU_SHIFT_VALUE"),
          ("mul_shift", 0, 48, "BS_MUL_SHIFT_VALUE"), ("cvt_offset", -2**31, 2**31 - 1,
                                                        "D_CVT_OFFSET (int32)"),
          ("cvt_scale", -32768, 32767, "D_CVT_SCALE (int16)"), ("cvt_shift", 0, 31, "D_CVT_SHIFT"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Lab 3: the int8 requantization registers of the lab's conv layer; change "
                    "them and check your prediction against the bit-exact datapath.")
    add_layer_args(parser)
    parser.add_argument("--clip-truncate", type=int, help="CACC CLIP_TRUNCATE (0..31)")
    parser.add_argument("--alu-shift", type=int, help="SDP BS_ALU_SHIFT_VALUE (0..16)")
    parser.add_argument("--mul-shift", type=int, help="SDP BS_MUL_SHIFT_VALUE (0..48)")
    parser.add_argument("--scale", action="append", default=[], metavar="K=VALUE",
                        help="set channel K's int16 scale operand s[K] (repeatable)")
    parser.add_argument("--bias", action="append", default=[], metavar="K=VALUE",
                        help="set channel K's int16 bias operand B[K] (repeatable)")
    parser.add_argument("--cvt-offset", type=int, help="output converter D_CVT_OFFSET")
    parser.add_argument("--cvt-scale", type=int, help="output converter D_CVT_SCALE")
    parser.add_argument("--cvt-shift", type=int, help="output converter D_CVT_SHIFT (0..31)")
    args = parser.parse_args(argv)
    message = check_layer_args("requant.py", args)
    if message:
        print(message, file=sys.stderr)
        return 2
    for key, lo, hi, reg in LIMITS:
        value = getattr(args, key)
        if value is not None and not lo <= value <= hi:
            print(f"requant.py: error: --{key.replace('_', '-')} = {value}: {reg} must be in "
                  f"{lo}..{hi}", file=sys.stderr)
            return 2
    try:
        scales = _pairs(args.scale, "--scale", args.kernels)
        biases = _pairs(args.bias, "--bias", args.kernels)
    except ValueError as exc:
        print(f"requant.py: error: {exc}", file=sys.stderr)
        return 2

    layer, x, ref, q, acc, base = setup(args.size, args.channels, args.kernels, args.seed)
    print(f"layer: 3x3 conv, {args.size}x{args.size}x{args.channels} -> {args.kernels}, "
          f"seed {args.seed}; int8 registers from hw.nvdla.quant.quantize_conv:")
    print("\n".join(register_lines(q, base)))
    base_out = hardware(acc, q.sdp, base)
    assert np.array_equal(base_out, contract(acc, base))
    base_sqnr = sqnr_db(base_out * q.output_scale, ref)

    scale, bias = base.scale.copy(), base.bias.copy()
    for j, v in scales.items():
        scale[j] = v
    for j, v in biases.items():
        bias[j] = v
    edits = {f: getattr(args, f) for f, _, _, _ in LIMITS if getattr(args, f) is not None}
    new = replace(base, scale=scale, bias=bias, **edits)
    changes = [f"{reg.split(' ')[0]} {getattr(base, f)} -> {getattr(new, f)}"
               for f, _, _, reg in LIMITS if getattr(new, f) != getattr(base, f)]
    changes += [f"s[{j}] {base.scale[j]} -> {v}" for j, v in scales.items()]
    changes += [f"B[{j}] {base.bias[j]} -> {v}" for j, v in biases.items()]
    print()
    if not changes:
        n = base_out.size
        print(f"bit-exact SDP output equals the contract on {n:,} of {n:,} outputs")
        print(f"SQNR against the float64 reference: {base_sqnr:.2f} dB; outputs at 127: "
              f"{int(np.sum(base_out == 127)):,}, at 0: {int(np.sum(base_out == 0)):,}")
        print("change registers with --clip-truncate, --alu-shift, --mul-shift, --scale K=V, "
              "--bias K=V, --cvt-offset, --cvt-scale, --cvt-shift")
        return 0
    print("changed: " + ", ".join(changes))
    hw = hardware(acc, q.sdp, new)
    predicted = contract(acc, new)
    same = int(np.sum(hw == predicted))
    print(f"bit-exact SDP output equals the contract on {same:,} of {hw.size:,} outputs")
    diff = hw.astype(np.int64) - base_out
    moved = diff != 0
    print(f"against the original registers: {int(moved.sum()):,} of {hw.size:,} outputs "
          f"changed (max |change| {int(np.abs(diff).max())} LSB); sum of outputs x "
          f"{hw.astype(np.int64).sum() / base_out.astype(np.int64).sum():.4f}; "
          f"outputs at 127: {int(np.sum(base_out == 127)):,} -> {int(np.sum(hw == 127)):,}")
    chans = sorted({int(c) for c in np.nonzero(moved)[3]})
    if chans and len(chans) <= 8:
        print(f"changed channels: {', '.join(map(str, chans))}")
    elif chans:
        print(f"changed channels: {len(chans)} of {args.kernels}")
    print(f"SQNR against the float64 reference (dequantized with s_y): {base_sqnr:.2f} dB -> "
          f"{sqnr_db(hw * q.output_scale, ref):.2f} dB")
    return 0 if same == hw.size else 1


if __name__ == "__main__":
    sys.exit(main())
