"""Workload front ends: the model zoo and the SCALE-Sim topology reader."""
