"""Systolic array: configuration, register-level model, timing engine, SCALE-Sim mode."""
