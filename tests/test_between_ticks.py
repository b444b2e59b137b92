"""A process that is never listed at a tick is billed for its work; a bystander is not.

A tenant that drops its CUDA context just before each tick and makes it again after is never
in NVML's process list at a tick, while its work lands in the GPU's energy counter and its
utilization samples. A time-sliced neighbour holding an idle context was then the only
listed process and was billed all of it, though every one of its samples read 0 %.
"""

from __future__ import annotations

import pytest

from tests.support.fakehost import build, container_id, containers_by_id
from tests.support.gpus import GPU_A as GPU, device
from tests.support.simulated import start_simulated

ARGS = ("--housekeeping-interval", "0.2", "--pod-resources-socket", "", "--runtime-socket", "",
        "--idle-power-watts", "100")


def energy(summary: dict, n: int) -> float:
    found = containers_by_id(summary).get(container_id(n))
    return found["accelerators"][0].get("attributedEnergyJoules", 0.0) if found else 0.0


def test_work_between_ticks_is_billed_to_its_tenant_not_to_an_idle_neighbour(start_daemon,
                                                                            tmp_path):
    scenario = {"devices": [device(power_watts=600)], "processes": [
        {"pid": 101, "device": GPU, "sm_util_percent": 60, "between_ticks": True},
        {"pid": 102, "device": GPU, "sm_util_percent": 0}]}
    daemon, _ = start_simulated(start_daemon, tmp_path, scenario,
                                build(tmp_path / "host", {101: (1, 1), 102: (2, 2)}), *ARGS)
    summary = daemon.wait_for(lambda s: energy(s, 1) > 1000, timeout=30)
    tenant, neighbour = energy(summary, 1), energy(summary, 2)
    assert neighbour == pytest.approx(0.0, abs=1.0), (tenant, neighbour)
    # All of the active energy went to the tenant: nothing left unattributed.
    node = summary["node"]["accelerators"][0]
    assert node["unattributedEnergyJoules"] < 0.02 * tenant, node


def test_a_neighbour_with_work_shares_with_the_tenant_by_sm_samples(start_daemon, tmp_path):
    scenario = {"devices": [device(power_watts=500)], "processes": [
        {"pid": 101, "device": GPU, "sm_util_percent": 60, "between_ticks": True},
        {"pid": 102, "device": GPU, "sm_util_percent": 20}]}
    daemon, _ = start_simulated(start_daemon, tmp_path, scenario,
                                build(tmp_path / "host", {101: (1, 1), 102: (2, 2)}), *ARGS)
    summary = daemon.wait_for(lambda s: energy(s, 1) + energy(s, 2) > 1000, timeout=30)
    tenant, neighbour = energy(summary, 1), energy(summary, 2)
    assert tenant / (tenant + neighbour) == pytest.approx(0.75, abs=0.02)
