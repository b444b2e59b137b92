"""Processes that end between ticks, billed from NVML's accounting records, through the daemon.

A tenant whose processes start and end between two ticks is never in NVML's process list;
on a GPU without per-process utilization samples nothing else shows its work. With the GPU's
accounting mode on, each run leaves a record (its start, how long it ran, its utilization),
and the tick's active energy is billed to the tenant's container; with accounting off, it
stays unattributed as before. The simulated tenant runs all the time in runs cut at each
read of the records, so the truth is all of the GPU's active energy: here 500 W of its
600 W (idle 100 W), 5/6 of its energy counter's gain.
"""

from __future__ import annotations

import pytest

from tests.support.fakehost import build, container_id, containers_by_id
from tests.support.gpus import GPU_A as GPU, device
from tests.support.simulated import start_simulated

ARGS = ("--housekeeping-interval", "0.2", "--pod-resources-socket", "", "--runtime-socket", "",
        "--idle-power-watts", "100")
NO_SAMPLES = ["process_utilization"]       # a GPU without per-process utilization


def energy(summary: dict, n: int) -> float:
    found = containers_by_id(summary).get(container_id(n), {}).get("accelerators")
    return found[0].get("attributedEnergyJoules", 0.0) if found else 0.0


def node(summary: dict) -> dict:
    return summary["node"]["accelerators"][0]


def start(start_daemon, tmp_path, scenario: dict):
    cgroup, proc = build(tmp_path / "host", {101: (1, 1), 102: (2, 2)})
    for pid in (101, 102):
        (proc / str(pid) / "comm").write_text("train\n")     # as a live process has it
    return start_simulated(start_daemon, tmp_path, scenario, (cgroup, proc), *ARGS)[0]


def test_a_tenant_that_runs_only_between_ticks_is_billed_from_accounting(start_daemon,
                                                                          tmp_path):
    scenario = {"devices": [device(power_watts=600, accounting=True, unsupported=NO_SAMPLES)],
                "processes": [{"pid": 101, "device": GPU, "sm_util_percent": 60,
                               "between_ticks": True}]}
    daemon = start(start_daemon, tmp_path, scenario)
    summary = daemon.wait_for(lambda s: energy(s, 1) > 1500, timeout=30)
    tenant, gpu = energy(summary, 1), node(summary)
    truth = gpu["energyJoules"] * 500 / 600
    assert tenant == pytest.approx(truth, rel=0.01), (tenant, gpu)
    # Billed once: with what is left unattributed it is the active energy, never more.
    assert tenant + gpu["unattributedEnergyJoules"] == pytest.approx(truth, rel=0.01)
    assert gpu["unattributedEnergyJoules"] < 0.01 * truth
    assert "accounting mode is on" in daemon.log()


def test_with_accounting_off_the_tenant_is_not_seen(start_daemon, tmp_path):
    scenario = {"devices": [device(power_watts=600, unsupported=NO_SAMPLES)],
                "processes": [{"pid": 101, "device": GPU, "sm_util_percent": 60,
                               "between_ticks": True}]}
    daemon = start(start_daemon, tmp_path, scenario)
    summary = daemon.wait_for(lambda s: node(s).get("unattributedEnergyJoules", 0) > 1000,
                              timeout=30)
    assert energy(summary, 1) == 0.0
    gpu = node(summary)
    assert gpu["unattributedEnergyJoules"] == pytest.approx(gpu["energyJoules"] * 5 / 6,
                                                            rel=0.01)
    assert daemon.log().count("accounting mode is off") == 1


def test_work_samples_show_is_not_read_from_accounting_again(start_daemon, tmp_path):
    """Samples show the tenant: it is billed from them, once, and its idle neighbour not."""
    scenario = {"devices": [device(power_watts=600, accounting=True)], "processes": [
        {"pid": 101, "device": GPU, "sm_util_percent": 60, "between_ticks": True},
        {"pid": 102, "device": GPU, "sm_util_percent": 0}]}
    daemon = start(start_daemon, tmp_path, scenario)
    summary = daemon.wait_for(lambda s: energy(s, 1) > 1500, timeout=30)
    tenant, neighbour, gpu = energy(summary, 1), energy(summary, 2), node(summary)
    assert neighbour == pytest.approx(0.0, abs=1.0)
    assert tenant + gpu["unattributedEnergyJoules"] == pytest.approx(
        gpu["energyJoules"] * 5 / 6, rel=0.01)
    assert gpu["unattributedEnergyJoules"] < 0.02 * tenant
