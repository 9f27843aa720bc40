"""From workloads to schedules. May import ``hw`` configs, never ``npulab``."""
