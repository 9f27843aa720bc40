"""Shared test fixtures: where the team's shared reference data lives."""

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
