"""Hardware configs shipped with npulab (installed as ``hw.sim_configs``; found by
:func:`hw.presets.presets_dir`)."""
