"""Quantize a float 3x3 conv + batch-norm + ReLU layer to NVDLA int8 and measure the error.

Run: python examples/nvdla_quantize.py

The layer is seeded random: weights N(0, 1), batch-norm gammas log-uniform in 0.02..2 (so the
folded per-channel weight ranges spread 100x). Scales are calibrated by max-abs on the float
run. The int8 path is bit-exact: conv_cacc -> conv_to_sdp -> sdp_apply (hw/nvdla/quant.py).
"""

from __future__ import annotations

import numpy as np

from hw.nvdla.quant import (
    FloatConv, calibrate_scale, quantization_report, quantize_activations, quantize_conv,
    run_int8_conv,
)


def main() -> None:
    rng = np.random.default_rng(2026)
    k, c = 32, 16
    layer = FloatConv(
        weight=rng.normal(0, 1, (k, 3, 3, c)), bias=rng.normal(0, 0.5, k),
        bn_gamma=np.exp(rng.uniform(np.log(0.02), np.log(2.0), k)),
        bn_beta=rng.normal(0, 0.2, k), bn_mean=rng.normal(0, 0.3, k),
        bn_var=rng.uniform(0.5, 2.0, k), relu=True, padding=(1, 1, 1, 1))
    x = rng.normal(0, 1, (1, 16, 16, c))
    s_x = calibrate_scale(x)                    # max|x| / 127
    s_y = calibrate_scale(layer.forward(x))     # max|y| / 127 on the float reference
    print(f"input scale {s_x:.6g}, output scale {s_y:.6g}")

    for per_channel in (True, False):
        q = quantize_conv(layer, s_x, s_y, per_channel=per_channel)
        name = "per-channel" if per_channel else "per-tensor"
        print(f"\n{name}: BS_ALU_SHIFT_VALUE = {q.alu_shift_value}, "
              f"BS_MUL_SHIFT_VALUE = {q.mul_shift_value}")
        print("  k   weight scale   M[k] (float)   s[k]   s/2^sh rel.err   bias B[k]")
        for j in range(4):
            rel = q.multiplier_error[j] / q.multiplier[j]
            print(f"  {j}   {q.weight_scale[j]:.6f}      {q.multiplier[j]:.6e}   "
                  f"{q.scale_operand[j]:5d}   {rel:.2e}         {q.bias_operand[j]:6d}")
        y_q = run_int8_conv(quantize_activations(x, s_x), q)
        print(f"  int8 output {y_q.shape}, range {y_q.min()}..{y_q.max()}")
        print("  " + quantization_report(layer, q, x).as_text().replace("\n", "\n  "))


if __name__ == "__main__":
    main()
