"""Hardware configs shipped with npulab (installed as ``npulab.sim_configs``)."""
