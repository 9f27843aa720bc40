"""A complete core in Amaranth: the sequencer, scratchpads, DMA and vector engines that run a
compiled :class:`~hw.program.Program` on their own (docs/core.md).

* :mod:`.lower` -- a Program (plus its graph) as the core's per-engine command queues;
* :mod:`.timing` -- each command's cycles on the core (what the executor is given);
* :mod:`.rtl` -- the hardware; :mod:`.cosim` -- a run in Amaranth's simulator against the
  executor and the functional models.
"""
