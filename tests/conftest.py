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


# ---- the two long end-to-end checks run in the background -------------------------------------
# The docs build (every example of the guide) and the new-user check (a fresh venv, the quick
# start and every lab) are whole programs that take minutes each but use one core, while the rest
# of the suite uses the other. When their tests are selected, they start right after collection,
# one after the other on a background thread, and the tests collect the results at the end.
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402

BACKGROUND_CHECKS = {
    "test_docs_build.py::test_site_builds_and_every_docs_example_runs":
        lambda out: [sys.executable, str(REPO / "scripts" / "build_docs.py"), "-j", "1",
                     "--site-dir", str(out / "site")],
    "test_new_user.py::test_new_user_check_passes":
        lambda out: [sys.executable, str(REPO / "scripts" / "new_user_check.py"), "-j", "1"],
}
_results: dict[str, tuple[int, str]] = {}
_done: dict[str, threading.Event] = {}
_procs: list[subprocess.Popen] = []
_outdirs: list[Path] = []


def _run_background(names: list[str], out: Path) -> None:
    for name in names:
        try:
            proc = subprocess.Popen(BACKGROUND_CHECKS[name](out), cwd=REPO, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            _procs.append(proc)
            output, _ = proc.communicate(timeout=3000)
            _results[name] = (proc.returncode, output)
        except BaseException as e:  # noqa: BLE001  (reported by the test, never lost)
            _results[name] = (-1, f"{type(e).__name__}: {e}")
        finally:
            _done[name].set()


def pytest_collection_modifyitems(session, config, items):
    """The tests that wait for a background check run last, so the rest of the suite runs on
    one core while the checks run on the other."""
    waiting = [item for item in items if any(item.nodeid.endswith(k) for k in BACKGROUND_CHECKS)]
    items[:] = [item for item in items if item not in waiting] + waiting


def pytest_collection_finish(session):
    names = [key for key in BACKGROUND_CHECKS
             if any(item.nodeid.endswith(key) for item in session.items)]
    if not names:
        return
    for name in names:
        _done[name] = threading.Event()
    out = Path(tempfile.mkdtemp(prefix="npulab-bg-"))
    _outdirs.append(out)
    threading.Thread(target=_run_background, args=(names, out), daemon=True).start()


def pytest_sessionfinish(session, exitstatus):
    import os
    import signal
    import shutil
    for proc in _procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for out in _outdirs:                         # the built site of the docs check
        shutil.rmtree(out, ignore_errors=True)


def background_check(name: str) -> tuple[int, str]:
    """Wait for the background check ``name`` (a key of BACKGROUND_CHECKS); (status, output)."""
    if name not in _done:
        pytest.fail(f"background check {name} was not started (collection hook not run)")
    _done[name].wait()
    return _results[name]


@pytest.fixture(scope="session")
def background():
    """``background(name)``: wait for a background check and return (exit status, output)."""
    return background_check
