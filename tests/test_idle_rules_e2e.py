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


def mig_scenario(power_watts: float) -> dict:
    """A GPU of 80 GB in MIG mode: 3g (40 GB), 2g (20 GB) and 1g (10 GB) instances, each held
    by one pod's process, every instance at 0 % GPM activity."""
    sizes = ((1, "3g.40gb", 40), (2, "2g.20gb", 20), (3, "1g.10gb", 10))
    return {"devices": [device(GPU_A, power_watts=power_watts, memory_total_bytes=80 << 30,
                               mig_instances=[
                                   {"gpu_instance_id": gi, "profile": profile,
                                    "uuid": f"MIG-aaaa-{gi}", "memory_total_bytes": gb << 30,
                                    "gpm": {"graphics_active_percent": 0}}
                                   for gi, profile, gb in sizes])],
            "processes": [{"pid": 100 + gi, "device": GPU_A, "gpu_instance_id": gi,
                           "sm_util_percent": 0} for gi, _, _ in sizes]}


def test_a_mig_gpu_always_held_learns_its_idle_and_shares_it_by_size(start_daemon, tmp_path):
    """Three pods on 3g/2g/1g instances at 0 % GPM: the GPU's 120 W is idle, learned without
    any tick free of processes, and billed by instance size (60, 30, 15 W) (not 1/3 each, the
    ``mig-equal-split`` of an all-active GPU)."""
    host = build(tmp_path / "host", {101: (1, 1), 102: (2, 2), 103: (3, 3)})
    daemon, _ = start_simulated(start_daemon, tmp_path, mig_scenario(120), host, *ARGS)

    def shares(text):
        return [pod_idle(text, n) for n in (1, 2, 3)]
    text = daemon.wait_for(lambda t: None not in shares(t) and sum(shares(t)) > 100,
                           timeout=30, path="/metrics")
    got = shares(text)
    # 40, 20 and 10 GB of the GPU's 80: the 10 GB no instance holds is unallocated.
    assert got == pytest.approx([60.0, 30.0, 15.0], rel=0.02)
    unallocated = metric_value(text, "gpustats_node_gpu_unallocated_idle_watts", gpu_uuid=GPU_A)
    assert unallocated == pytest.approx(15.0, rel=0.02)
    assert metric_value(text, "gpustats_node_gpu_idle_watts", gpu_uuid=GPU_A) == \
        pytest.approx(120.0, rel=0.01)
