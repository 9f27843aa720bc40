"""Shared test fixtures: where the team's shared reference data lives."""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def find_shared() -> Path | None:
    """``shared/`` sits next to the checkout (``../shared``) on developer machines and in CI."""
    for base in (REPO, *REPO.parents):
        candidate = base / "shared" if base != REPO else REPO.parent / "shared"
        if (candidate / "reference" / "scalesim_reference.csv").is_file():
            return candidate
    return None


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    found = find_shared()
    if found is None:
        pytest.skip("../shared (the team's reference data) is not next to this checkout")
    return found


def nv_small_trace_dir() -> Path:
    """NVIDIA's nv_small trace tests: ``$NPULAB_NVDLA_TRACES/nv_small``, default
    ``../shared/nvdla/traces/nv_small`` next to the checkout."""
    from hw.nvdla.trace import default_trace_dir
    return default_trace_dir(REPO) / "nv_small"


@pytest.fixture(scope="session")
def nv_small_traces() -> Path:
    """The nv_small trace folder; missing: skip locally, fail when ``CI`` is set."""
    d = nv_small_trace_dir()
    if not d.is_dir():
        msg = f"NVIDIA's trace folder {d} is missing (set NPULAB_NVDLA_TRACES)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return d
