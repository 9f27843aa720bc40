"""Hardware models: what the silicon does, cycle by cycle.

``hw`` never imports ``compiler`` or ``npulab``. Kernel modules take ``njit`` from
:mod:`hw._jitcache`, which keeps every compiled kernel in one cache per installed version.
"""
