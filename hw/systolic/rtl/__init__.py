"""Amaranth 0.5 RTL of the systolic array, its synthesis and its co-simulation with the
register-level model. See docs/rtl.md.

* :mod:`.pe` -- the PEs (OS; WS/IS), :mod:`.array` -- delay lines, meshes, top level;
* :mod:`.synth` -- Verilog, Yosys synthesis reports, Fmax on an iCE40 UP5K;
* :mod:`.cosim` -- every register every cycle against ``hw.systolic.regmodel``;
* :mod:`.mutations` -- deliberately broken PEs the co-simulation must catch;
* :mod:`.verilator` -- the same co-simulation on the Verilog through Verilator (optional).
"""
