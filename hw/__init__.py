"""Hardware models: what the silicon does, cycle by cycle.

``hw`` never imports ``compiler`` or ``npulab``.
"""
