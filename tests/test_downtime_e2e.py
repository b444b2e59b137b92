"""The energy a GPU drew while the daemon was down is in the books, through the real daemon.

The hardware counter runs on while the daemon is stopped (SIGTERM) or killed (SIGKILL): the
GPU's energy includes the gap, and so does a bucket of its own, the GPU's unobserved energy,
billed to no one. Per GPU, after every restart: energy = Σ pods' (attributed + idle share) +
unallocated idle + unattributed + unobserved, for a held GPU and for an unheld one alike.
"""

from __future__ import annotations

import signal
import time

import pytest

from oracles.identity import UNOBSERVED, books, unbalanced
from tests.support.billing import scrape, start, value
from tests.support.fakehost import build
from tests.support.gpus import GPU_A, GPU_B, device
from tests.support.invariants import assert_never_decreased, counters

ARGS = ("--housekeeping-interval", "0.3")
SCENARIO = {"devices": [device(GPU_A, power_watts=300), device(GPU_B, minor=1, power_watts=100)],
            "processes": [{"pid": 101, "device": GPU_A, "sm_util_percent": 60}]}


def settled(daemon, ticks: int = 4) -> dict:
    """The counters after a few ticks of this run, the books closed at each scrape."""
    seen = 0
    values = counters(scrape(daemon))
    while seen < ticks:
        daemon.wait_ticks(1)
        values = counters(scrape(daemon))
        assert unbalanced(values) == []
        seen += 1
    return values


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_the_downtime_is_unobserved_and_the_books_close(start_daemon, tmp_path, sig):
    cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
    daemon = start(start_daemon, tmp_path, SCENARIO, cgroup, proc, *ARGS)
    before = settled(daemon)
    daemon.stop(sig)
    time.sleep(2.0)                          # measures: two seconds of downtime
    daemon = start(start_daemon, tmp_path, None, cgroup, proc, *ARGS)
    first = counters(scrape(daemon))
    assert_never_decreased(before, first)
    assert unbalanced(first) == [], books(first)
    assert value(before, UNOBSERVED, gpu_uuid=GPU_A) == 0.0       # observed: none unobserved
    for gpu, watts in ((GPU_A, 300.0), (GPU_B, 100.0)):       # held, and unheld at idle
        unobserved = value(first, UNOBSERVED, gpu_uuid=gpu)
        assert unobserved >= watts * 2.0 * 0.9, (gpu, unobserved)
        gap = value(first, "gpustats_node_gpu_joules", gpu_uuid=gpu) \
            - value(before, "gpustats_node_gpu_joules", gpu_uuid=gpu)
        assert unobserved <= gap + 1e-3
    after = settled(daemon)
    # The gap is no one's idle and no one's activity: the pod was billed at most its ticks.
    pod = "gpustats_pod_gpu_joules"
    assert value(after, pod, gpu_uuid=GPU_A) - value(before, pod, gpu_uuid=GPU_A) \
        < 200.0 * (2.0 + 2.5)
    status, summary = daemon.get("/stats/summary")
    gpus = {a["id"]: a for a in summary["node"]["accelerators"]}
    assert gpus[GPU_B]["unobservedEnergyJoules"] == pytest.approx(
        value(after, UNOBSERVED, gpu_uuid=GPU_B), abs=1e-3)
