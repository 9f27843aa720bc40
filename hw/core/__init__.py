"""A complete core in Amaranth: the sequencer, scratchpads, DMA, array and vector engines that
run a compiled :class:`~hw.program.Program` on their own (docs/core.md).

* :mod:`.isa` -- the command words, the core's geometry on a chip, a lowered program's form
  (:func:`compiler.backends.core.lower` makes one from a Program);
* :mod:`.timing` -- each command's cycles on the core (what the executor is given);
* :mod:`.rtl` -- the hardware; :mod:`.cosim` -- a run in Amaranth's simulator;
  :mod:`.cocotb_run` and :mod:`.cocotb_core` -- the same run on the Verilog in Verilator;
* :mod:`.synth` -- Verilog, Yosys reports, ECP5 place and route.

:mod:`npulab.core_verify` checks a run against the executor and the models.
"""
