"""Loading a lab's scripts (examples/labs/NN_name/*.py) as modules, for the lab tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

#: examples/labs/ in this checkout.
LABS = Path(__file__).resolve().parents[2] / "examples" / "labs"


def load_script(lab: Path, name: str):
    """The script ``name``.py of lab folder ``lab``, imported as module ``labNN_name`` (kept in
    ``sys.modules``, so dataclasses and pickling resolve it)."""
    alias = f"lab{lab.name[:2]}_{name}"
    spec = importlib.util.spec_from_file_location(alias, lab / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    spec.loader.exec_module(module)
    return module
