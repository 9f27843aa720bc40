"""The lab tests import their scripts through labload (pytest runs with --import-mode=importlib,
which puts no test folder on sys.path)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
