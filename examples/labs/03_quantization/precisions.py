#!/usr/bin/env python3
"""Lab 3: one convolution layer in int8, int16 and fp16 on NVDLA: accuracy and cycles.

The layer is ResNet-50's ``layer2.x.conv2`` shape by default: a 3x3 convolution, 28x28x128 ->
128 channels, padding 1, with batch-norm folded in and a ReLU, seeded random data:

* input: post-ReLU activations, ``max(N(0, 1), 0)`` (what the previous layer's ReLU leaves);
* weights: He-normal, ``N(0, 2 / (R*S*C))``; bias ``N(0, 0.1)``;
* batch-norm: gamma log-uniform in 0.02..2 (so the folded per-channel weight ranges spread
  100x), beta ``N(0, 0.2)``, running mean ``N(0, 0.3)``, running variance uniform in 0.5..2.

Each precision runs through npulab's bit-exact NVDLA datapath (``hw.nvdla``):

* **int8**: the per-channel quantization pass ``hw.nvdla.quant.quantize_conv`` (NVIDIA's
  compiler convention: CACC truncate 0, int16 bias with one left shift and int16 per-channel
  scale with one right shift in SDP X1, identity output converter), then
  ``run_int8_conv`` (``conv_cacc`` -> ``conv_to_sdp`` -> ``sdp_apply``). Also once with one
  per-tensor weight scale.
* **int16**: the same contract at 16 bits (:func:`quantize_int16`, written here): 16-bit
  symmetric input and per-channel weights, the 48-bit CACC, a CACC truncate that brings the
  worst-case sum into int32, the same SDP X1 bias/scale/shift, int16 output.
* **fp16**: ``hw.nvdla.fp16``: ``conv_fp16`` (NVDLA's block-floating-point MAC cells and
  48-bit CACC), ``sdp_fp16`` (fp32 bias add, ReLU), ``to_fp16_out``.

Each output is dequantized and compared with the float64 reference: max |error|, RMS error
and SQNR = 10 log10(sum ref^2 / sum err^2). The cycles come from the nv_full cycle model
(``hw.nvdla.cycles.conv_cycles``). Writes ``sqnr_per_channel.png`` into the output folder.

Example (from the repository root)::

    python examples/labs/03_quantization/precisions.py
    python examples/labs/03_quantization/precisions.py --size 14 --channels 256 -o lab03_out/
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hw.nvdla.config import load_nvdla_config
from hw.nvdla.conv import conv_cacc, conv_to_sdp
from hw.nvdla.conv_layer import ConvLayer
from hw.nvdla.cycles import conv_cycles
from hw.nvdla.fp16 import conv_fp16, sdp_fp16, to_fp16_out
from hw.nvdla.quant import (
    FloatConv, calibrate_scale, quantization_report, quantize_activations, quantize_conv,
    run_int8_conv,
)
from hw.nvdla.sdp import SdpParams, SdpXParams, sdp_apply

PRECISIONS = ("int8", "int16", "fp16")
INT16_MAX = 32767
PAD = (1, 1, 1, 1)


def round_half_away(v):
    """Round half away from zero (NVDLA's rule) on float arrays."""
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


# ---- the layer ---------------------------------------------------------------------------------

def make_layer(size: int = 28, channels: int = 128, kernels: int = 128, seed: int = 2026):
    """(FloatConv, input x (1, size, size, channels)): the seeded layer described above."""
    rng = np.random.default_rng(seed)
    fan_in = 9 * channels
    layer = FloatConv(
        weight=rng.normal(0.0, math.sqrt(2.0 / fan_in), (kernels, 3, 3, channels)),
        bias=rng.normal(0.0, 0.1, kernels),
        bn_gamma=np.exp(rng.uniform(math.log(0.02), math.log(2.0), kernels)),
        bn_beta=rng.normal(0.0, 0.2, kernels), bn_mean=rng.normal(0.0, 0.3, kernels),
        bn_var=rng.uniform(0.5, 2.0, kernels), relu=True, padding=PAD)
    x = np.maximum(rng.normal(0.0, 1.0, (1, size, size, channels)), 0.0)
    return layer, x


# ---- int16: the int8 pass's contract at 16 bits ------------------------------------------------

@dataclass(frozen=True)
class Int16Conv:
    """Registers and operands of the int16 layer (see :func:`quantize_int16`)."""

    input_scale: float
    output_scale: float
    weight_q: np.ndarray        # int16 (K, R, S, C)
    weight_scale: np.ndarray    # (K,)
    clip_truncate: int          # CACC D_CLIP_CFG.CLIP_TRUNCATE
    multiplier: np.ndarray      # M[k] = s_x s_w[k] 2**T / s_y
    scale_operand: np.ndarray   # s[k], int16
    mul_shift_value: int        # BS_MUL_SHIFT_VALUE
    bias_operand: np.ndarray    # B[k], int16
    alu_shift_value: int        # BS_ALU_SHIFT_VALUE
    sdp: SdpParams


def quantize_int16(layer: FloatConv, input_scale: float, output_scale: float) -> Int16Conv:
    """int16 symmetric quantization with per-channel weight scales ``max|W[k]| / 32767``.

    An int16 x int16 product has 31 bits, and a 3x3x128 sum of them needs up to 42; the CACC
    holds 48 bits but delivers int32 to the SDP. ``CLIP_TRUNCATE`` is the smallest right shift
    that brings the worst case, ``32767 * max_k sum|W_q[k]|``, into int32. The SDP then
    rescales exactly as in the int8 pass: ``M[k] = s_x s_w[k] 2**T / s_y ~ s[k] / 2**sh`` with
    the largest ``sh`` <= 48 keeping every ``s[k]`` in int16, and bias
    ``b[k] / (s_x s_w[k] 2**T) ~ B[k] 2**ls`` with the smallest ``ls`` keeping ``B[k]`` in
    int16."""
    w, b = layer.folded()
    k = w.shape[0]
    s_w = np.abs(w).reshape(k, -1).max(axis=1) / INT16_MAX
    if np.any(s_w == 0):
        raise ValueError("layer.weight: a kernel is all zeros; it has no int16 weight scale")
    w_q = np.clip(round_half_away(w / s_w[:, None, None, None]), -INT16_MAX, INT16_MAX)
    bound = INT16_MAX * np.abs(w_q).reshape(k, -1).sum(axis=1).max()
    truncate = 0
    while bound / 2.0 ** truncate > 2**31 - 1:
        truncate += 1
    mult = input_scale * s_w * 2.0 ** truncate / output_scale
    mul_shift = 48
    while mul_shift > 0 and round_half_away(mult.max() * 2.0 ** mul_shift) > INT16_MAX:
        mul_shift -= 1
    s_op = round_half_away(mult * 2.0 ** mul_shift)
    if s_op.min() < 1 or s_op.max() > INT16_MAX:
        raise ValueError(f"output_scale = {output_scale!r}: the per-channel multipliers "
                         f"{mult.min():.3g}..{mult.max():.3g} do not fit one int16 scale and "
                         f"one shift")
    bias_acc = b / (input_scale * s_w * 2.0 ** truncate)
    alu_shift = 0
    while np.abs(round_half_away(bias_acc / 2.0 ** alu_shift)).max() > INT16_MAX:
        alu_shift += 1
    if alu_shift > 16:
        raise ValueError("layer.bias: too large for an int16 operand shifted left by <= 16")
    b_op = round_half_away(bias_acc / 2.0 ** alu_shift)
    sdp = SdpParams(
        bs=SdpXParams(bypass=False, alu_bypass=False, alu_algo="SUM", alu_src="MEM",
                      alu_shift_value=alu_shift, mul_bypass=False, mul_src="MEM",
                      mul_shift_value=mul_shift, relu_bypass=not layer.relu,
                      data_mode="PER_KERNEL", data_size="TWO_BYTE",
                      alu_data=b_op.astype(np.int64), mul_data=s_op.astype(np.int64)),
        proc_precision="INT16", out_precision="INT16")
    return Int16Conv(input_scale, output_scale, w_q.astype(np.int16), s_w, truncate, mult,
                     s_op.astype(np.int64), mul_shift, b_op.astype(np.int64), alu_shift, sdp)


def quantize_input16(x, scale: float) -> np.ndarray:
    """``clip(round_half_away(x / scale), -32767, 32767)`` as int16."""
    return np.clip(round_half_away(np.asarray(x) / scale), -INT16_MAX, INT16_MAX).astype(np.int16)


def int16_to_sdp(x_q16, q: Int16Conv) -> np.ndarray:
    """What the 48-bit CACC delivers to the SDP: ``sat32(round(A / 2**CLIP_TRUNCATE))``."""
    acc = conv_cacc(x_q16, q.weight_q, padding=PAD, atomic_c=64, acc_bits=48, precision="int16")
    return conv_to_sdp(acc, q.clip_truncate, 48)


def run_int16_conv(x_q16, q: Int16Conv) -> np.ndarray:
    """Bit-exact int16 layer: ``conv_cacc`` (48-bit CACC) -> ``conv_to_sdp`` (truncate) ->
    ``sdp_apply``. Returns int16 (N, P, Q, K)."""
    return sdp_apply(int16_to_sdp(x_q16, q), q.sdp)


def int16_exact_bias(to_sdp, q: Int16Conv, layer: FloatConv) -> np.ndarray:
    """The int16 output (int64 values) the same datapath would give if the bias were exact:
    ``clamp(relu(round((t + b[k] / (s_x s_w[k] 2**T)) * s[k] / 2**sh)))``, float64."""
    _, b = layer.folded()
    bias = b / (q.input_scale * q.weight_scale * 2.0 ** q.clip_truncate)
    v = round_half_away((to_sdp + bias) * q.scale_operand / 2.0 ** q.mul_shift_value)
    v = np.maximum(v, 0.0) if layer.relu else v
    return np.clip(v, -INT16_MAX - 1, INT16_MAX)


# ---- the three precisions ----------------------------------------------------------------------

def errors(out, ref) -> dict:
    """Max |error|, RMS error, SQNR (dB) of ``out`` against ``ref``, and per-channel SQNR."""
    err = np.asarray(out, np.float64) - ref
    noise = float(np.sum(err ** 2))
    signal = float(np.sum(ref ** 2))
    per_ch = []
    for j in range(ref.shape[3]):
        s, n = float(np.sum(ref[..., j] ** 2)), float(np.sum(err[..., j] ** 2))
        per_ch.append(10 * math.log10(s / n) if s > 0 and n > 0 else math.nan)
    return {"max_abs": float(np.abs(err).max()), "rms": float(np.sqrt(np.mean(err ** 2))),
            "sqnr_db": 10 * math.log10(signal / noise) if noise > 0 else math.inf,
            "channel_sqnr_db": per_ch}


def run_precisions(layer: FloatConv, x) -> dict:
    """Run the layer in every precision. Returns ``reference`` (float64 output), and per row
    (``int8``, ``int8 per-tensor``, ``int16``, ``fp16``) the dequantized output, its errors and
    what configured it (``q``)."""
    ref = layer.forward(x)
    s_x, s_y = calibrate_scale(x), calibrate_scale(ref)
    rows = {}
    for name, per_channel in (("int8", True), ("int8 per-tensor", False)):
        q = quantize_conv(layer, s_x, s_y, per_channel=per_channel)
        out = run_int8_conv(quantize_activations(x, s_x), q).astype(np.float64) * s_y
        rows[name] = {"q": q, "out": out, **errors(out, ref)}
    s_x16 = float(np.abs(x).max()) / INT16_MAX
    s_y16 = float(np.abs(ref).max()) / INT16_MAX
    q16 = quantize_int16(layer, s_x16, s_y16)
    to_sdp = int16_to_sdp(quantize_input16(x, s_x16), q16)
    out16 = sdp_apply(to_sdp, q16.sdp).astype(np.float64) * s_y16
    rows["int16"] = {"q": q16, "out": out16, **errors(out16, ref),
                     "exact_bias_sqnr_db": errors(int16_exact_bias(to_sdp, q16, layer) * s_y16,
                                                  ref)["sqnr_db"]}
    w, b = layer.folded()
    acc = conv_fp16(x.astype(np.float16), w.astype(np.float16), padding=PAD,
                    config=load_nvdla_config("nv_full"))
    y16 = to_fp16_out(sdp_fp16(acc, alu_algo="sum", alu_op=b.astype(np.float16), relu=True))
    out_fp = y16.astype(np.float64)
    rows["fp16"] = {"q": None, "out": out_fp, **errors(out_fp, ref)}
    # The floor of each format: the exact result rounded once to the output format.
    for name, (scale, top) in (("int8", (s_y, 127)), ("int8 per-tensor", (s_y, 127)),
                               ("int16", (s_y16, INT16_MAX))):
        ideal = np.clip(round_half_away(ref / scale), -top - 1, top) * scale
        rows[name]["rounding_only_sqnr_db"] = errors(ideal, ref)["sqnr_db"]
    rows["fp16"]["rounding_only_sqnr_db"] = errors(ref.astype(np.float16).astype(np.float64),
                                                   ref)["sqnr_db"]
    return {"reference": ref, "rows": rows}


def layer_cycles(size: int, channels: int, kernels: int, preset: str = "nv_full") -> dict:
    """The cycle model's estimate for the layer in each precision (bias, BN, ReLU fused)."""
    cfg = load_nvdla_config(preset)
    out = {}
    for p in PRECISIONS:
        c = conv_cycles(cfg, ConvLayer.conv(channels, size, size, kernels, 3, pad=1, precision=p,
                                            bias=True, bn=True, relu=True))
        out[p] = {"macs_per_cycle": cfg.macs(p), "mac_cycles": c.mac_cycles, "total": c.total,
                  "bound": c.bound, "startup": c.startup_cycles, "drain": c.drain_cycles,
                  "clock_mhz": cfg.clock_mhz}
    return out


# ---- output ------------------------------------------------------------------------------------

DATAPATH = {
    "int8": "int8 x int8, CACC 34 bit, truncate 0, SDP int16 scale, int8 out",
    "int8 per-tensor": "as int8, one weight scale for all kernels",
    "int16": "int16 x int16, CACC 48 bit, truncate {T}, SDP int16 scale, int16 out",
    "fp16": "fp16 MAC cells, fp48 CACC, fp32 SDP, fp16 out",
}


def accuracy_lines(res: dict) -> list[str]:
    rows = res["rows"]
    lines = [f"{'precision':<16} {'datapath':<68} {'max |err|':>10} {'RMS err':>10} "
             f"{'SQNR dB':>8} {'rounding only':>13}"]
    for name, r in rows.items():
        desc = DATAPATH[name].format(T=r["q"].clip_truncate if name == "int16" else 0)
        lines.append(f"{name:<16} {desc:<68} {r['max_abs']:>10.3g} {r['rms']:>10.3g} "
                     f"{r['sqnr_db']:>8.2f} {r['rounding_only_sqnr_db']:>13.2f}")
    return lines


def plot(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = res["reference"]
    rms = np.sqrt(np.mean(ref ** 2, axis=(0, 1, 2)))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, marker in (("int8", "o"), ("int8 per-tensor", "x"), ("int16", "s"), ("fp16", "^")):
        ax.scatter(rms, res["rows"][name]["channel_sqnr_db"], marker=marker, s=14, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("channel output RMS (float reference)")
    ax.set_ylabel("channel SQNR (dB)")
    ax.set_title("Per-channel SQNR against channel size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def add_layer_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=int, default=28,
                        help="input height = width (default 28, ResNet-50 layer2)")
    parser.add_argument("--channels", type=int, default=128,
                        help="input channels C (default 128)")
    parser.add_argument("--kernels", type=int, default=128,
                        help="output channels K (default 128)")
    parser.add_argument("--seed", type=int, default=2026, help="random seed (default 2026)")


def check_layer_args(prog: str, args) -> str | None:
    """An error message for out-of-range layer options, else None."""
    for key, lo, hi in (("size", 3, 224), ("channels", 1, 1024), ("kernels", 1, 1024),
                        ("seed", 0, 2**32 - 1)):
        value = getattr(args, key)
        if not lo <= value <= hi:
            return f"{prog}: error: --{key} = {value}: must be an integer in {lo}..{hi}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Lab 3: a 3x3 conv layer in int8, int16 and fp16 through NVDLA's bit-exact "
                    "datapath: error against float64, and cycles on nv_full.")
    add_layer_args(parser)
    parser.add_argument("-o", "--out", default="lab03_out",
                        help="output folder for the plot (default lab03_out/)")
    parser.add_argument("--no-plot", action="store_true", help="do not write the PNG")
    args = parser.parse_args(argv)
    message = check_layer_args("precisions.py", args)
    if message:
        print(message, file=sys.stderr)
        return 2
    layer, x = make_layer(args.size, args.channels, args.kernels, args.seed)
    macs = args.size * args.size * args.kernels * 9 * args.channels
    print(f"layer: 3x3 conv, {args.size}x{args.size}x{args.channels} -> {args.kernels}, pad 1, "
          f"batch-norm folded, ReLU; seed {args.seed}; {macs:,} MACs")
    res = run_precisions(layer, x)
    ref = res["reference"]
    print(f"float64 reference: max {ref.max():.4g}, RMS {np.sqrt(np.mean(ref ** 2)):.4g}, "
          f"{100 * np.mean(ref == 0):.1f} % zeros (ReLU)")
    print()
    print("accuracy against the float64 reference (outputs dequantized; 'rounding only': the "
          "exact result rounded once to the output format)")
    print("\n".join(accuracy_lines(res)))
    q8 = res["rows"]["int8"]["q"]
    report = quantization_report(layer, q8, x)
    print()
    print("int8 error budget (RMS of each step; they add up to the total error):")
    for name, term in report.budget.items():
        print(f"  {name:<17} {term['rms']:.3g}")
    q16 = res["rows"]["int16"]["q"]
    print()
    print(f"int16 registers: CLIP_TRUNCATE {q16.clip_truncate}, BS_ALU_SHIFT_VALUE "
          f"{q16.alu_shift_value}, BS_MUL_SHIFT_VALUE {q16.mul_shift_value}, s[k] "
          f"{q16.scale_operand.min()}..{q16.scale_operand.max()}, |B[k]| <= "
          f"{np.abs(q16.bias_operand).max()}")
    print(f"  the bias is held to steps of 2^{q16.alu_shift_value} accumulator units; with an "
          f"exact bias the same int16 datapath gives "
          f"{res['rows']['int16']['exact_bias_sqnr_db']:.2f} dB")
    print()
    cyc = layer_cycles(args.size, args.channels, args.kernels)
    print(f"cycles on nv_full (cycle model, {cyc['int8']['clock_mhz']:.0f} MHz; MAC cycles = "
          f"MACs / MACs per cycle)")
    print(f"{'precision':<10} {'MACs/cycle':>10} {'MAC cycles':>11} {'total cycles':>13} "
          f"{'bound':>6} {'x int8':>7}")
    for p, c in cyc.items():
        print(f"{p:<10} {c['macs_per_cycle']:>10,} {c['mac_cycles']:>11,} {c['total']:>13,} "
              f"{c['bound']:>6} {c['total'] / cyc['int8']['total']:>7.3f}")
    if not args.no_plot:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        plot(res, out / "sqnr_per_channel.png")
        print()
        print(f"wrote {out / 'sqnr_per_channel.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
