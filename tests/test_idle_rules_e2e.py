"""Who pays a GPU's idle, through the real daemon (simulator below pynvml, fake cgroup v2 trees).

Held through processes only, each tenant is one share of the idle, whatever its number of
containers or processes; named by an allocator, each allocation is one share (by instance size
on MIG). A MIG GPU whose instances all read 0 % GPM activity is idle, so it learns its idle and
shares it by instance size, even while processes hold every instance.
"""

from __future__ import annotations

import pytest

from tests.support.fakehost import build, metric_value, pod_uid
from tests.support.gpus import GPU_A, device
from tests.support.simulated import start_simulated

ARGS = ("--housekeeping-interval", "0.2", "--pod-resources-socket", "", "--runtime-socket", "")


def pod_idle(text: str, pod: int) -> float | None:
    return metric_value(text, "gpustats_pod_gpu_idle_share_watts", pod_uid=pod_uid(pod),
                        gpu_uuid=GPU_A)


def test_a_pod_with_two_containers_pays_one_tenants_idle(start_daemon, tmp_path):
    """Pod 1 has two containers on the GPU, pod 2 one, all at 0 %: each pod pays half of the
    100 W idle (pod 1's containers a quarter each), not 2/3 and 1/3."""
    scenario = {"devices": [device(GPU_A, power_watts=100)],
                "processes": [{"pid": pid, "device": GPU_A, "sm_util_percent": 0}
                              for pid in (101, 102, 103)]}
    host = build(tmp_path / "host", {101: (1, 1), 102: (1, 2), 103: (2, 3)})
    daemon, _ = start_simulated(start_daemon, tmp_path, scenario, host, *ARGS,
                                "--idle-power-watts", "100")
    text = daemon.wait_for(lambda t: None not in (pod_idle(t, 1), pod_idle(t, 2)),
                           timeout=30, path="/metrics")
    assert pod_idle(text, 1) == pytest.approx(50.0, rel=0.02)
    assert pod_idle(text, 2) == pytest.approx(50.0, rel=0.02)

