"""Vector engine: SIMD lanes beside the matrix engine for softmax, norms, activations,
element-wise ops, reductions, pooling and requantization (config, work, timing, functional
model)."""
