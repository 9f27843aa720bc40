"""The vector unit in Amaranth 0.5: an int8 lane array (:mod:`.lane`) and its co-simulation
against :mod:`hw.vector.functional` (:mod:`.cosim`)."""
