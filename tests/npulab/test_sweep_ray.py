"""The Ray executor of npulab sweeps (npulab/sweep/executors.py), on one local Ray cluster.

Gold: the same sweep run serially (in this process) must give the same metrics per point id.
Skipped when ``ray`` is not installed (it is in CI: the ``test`` extra).
"""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

from npulab import sweep  # noqa: E402
from npulab.sweep import SweepStore, run_sweep  # noqa: E402

SPEC = """
[sweep]
name = "ray"
[[workload]]
model = "resnet18"
image_size = 32
[[axis]]
key = "array.dataflow"
values = ["os", "ws"]
[[axis]]
key = "sram.ifmap.capacity_kib"
values = [512, 0.125]
"""


@pytest.fixture(scope="module")
def cluster():
    """One local cluster for the module (start-up takes seconds); the executor reuses it."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _rows(out):
    with SweepStore(out / sweep.STORE_NAME) as store:
        return {r["id"]: r for r in store.rows()}


def test_ray_equals_serial(cluster, tmp_path):
    spec = tmp_path / "ray.toml"
    spec.write_text(SPEC, encoding="utf-8")
    s = run_sweep(spec, tmp_path / "ray", executor="ray")
    assert (s.ran, s.done, s.failed) == (4, 2, 2)
    assert ray.is_initialized()             # an existing cluster is reused, not shut down
    gold = run_sweep(spec, tmp_path / "serial", executor="serial")
    assert gold.done == 2
    a, b = _rows(tmp_path / "ray"), _rows(tmp_path / "serial")
    assert set(a) == set(b)
    for pid in a:
        assert (a[pid]["status"], a[pid]["metrics"], a[pid]["error"]) == \
            (b[pid]["status"], b[pid]["metrics"], b[pid]["error"])
    failed = [r for r in a.values() if r["status"] == "failed"]
    assert all(r["error"].startswith("TilingError: conv1: no tiling fits") for r in failed)
    # resume through Ray: nothing left to run
    again = run_sweep(spec, tmp_path / "ray", executor="ray", resume=True)
    assert (again.ran, again.skipped) == (0, 4)
