"""Hardware models: what the silicon does, cycle by cycle.

``hw`` never imports ``compiler`` or ``npulab``.
"""

from hw._jitcache import guard as _guard_numba_cache

_guard_numba_cache()
