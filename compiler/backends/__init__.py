"""Compiler backends: one module per engine kind, each turning IR graphs
(:mod:`compiler.ir`) into the program that engine runs.

* :mod:`.nvdla` -- NVDLA builds: hardware layers fused as NVIDIA's compiler fuses them
  (:class:`hw.nvdla.program.NvdlaProgram`); :mod:`.nvdla_pool` splits pooling windows larger
  than PDP's into PDP passes.

* :mod:`.systolic` -- systolic arrays: every matrix op tiled (:mod:`.systolic_tiling`, or the
  mapper, :mod:`compiler.mapper`) and lowered to load / compute / store commands
  (:class:`hw.program.Program`).

A backend may import ``hw`` (the program types and the engine's limits live there);
``hw`` never imports a backend.
"""
