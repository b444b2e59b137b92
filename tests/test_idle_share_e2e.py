"""A GPU's idle energy is charged to the tenants holding it, through the real daemon.

A pod holding a GPU at 0 % used to pay nothing while the GPU burned its idle for it; now each
holder pays an equal share of the idle, and idle no one holds is the GPU's unallocated idle.
Per GPU: energy = Σ holders' (attributed + idle share) + unallocated idle + unattributed.
"""

from __future__ import annotations

import pytest

from tests.support.fakehost import build, container_id, containers_by_id, metric_value
from tests.support.gpus import GPU_A, GPU_B, device
from tests.support.simulated import start_simulated

IDLE_WATTS = 100.0
ARGS = ("--housekeeping-interval", "0.2", "--pod-resources-socket", "", "--runtime-socket", "",
        "--idle-power-watts", str(IDLE_WATTS))


def accelerator(summary: dict, n: int) -> dict:
    return containers_by_id(summary)[container_id(n)]["accelerators"][0]


def start(start_daemon, tmp_path):
    """GPU A (400 W) time-sliced 75/25 by pods 1 and 2; pod 3 holds GPU B (100 W) at 0 %
    alongside nothing else; the GPUs' idle is 100 W."""
    scenario = {"devices": [device(GPU_A, power_watts=400),
                            device(GPU_B, minor=1, power_watts=100)],
                "processes": [{"pid": 101, "device": GPU_A, "sm_util_percent": 75},
                              {"pid": 102, "device": GPU_A, "sm_util_percent": 25},
                              {"pid": 103, "device": GPU_B, "sm_util_percent": 0}]}
    daemon, _ = start_simulated(start_daemon, tmp_path, scenario,
                                build(tmp_path / "host", {101: (1, 1), 102: (2, 2),
                                                          103: (3, 3)}), *ARGS)
    return daemon


def test_holders_share_the_idle_and_the_bill_adds_up(start_daemon, tmp_path):
    daemon = start(start_daemon, tmp_path)
    summary = daemon.wait_for(lambda s: accelerator(s, 1).get("idleShareEnergyJoules", 0) > 50,
                              timeout=30)
    # Two holders of GPU A: 50 W of its idle each, beside their 225/75 W of its activity.
    for n in (1, 2):
        assert accelerator(summary, n)["idleSharePowerWatts"] == pytest.approx(50.0, rel=0.02)
    assert accelerator(summary, 1)["attributedPowerWatts"] == pytest.approx(225.0, rel=0.02)
    # The notebook on GPU B at 0 %: no activity, but the GPU's idle is burned for it.
    notebook = accelerator(summary, 3)
    assert notebook["idleSharePowerWatts"] == pytest.approx(100.0, rel=0.02)
    assert notebook["idleShareEnergyJoules"] > 0
    gpus = {a["id"]: a for a in summary["node"]["accelerators"]}
    assert gpus[GPU_A]["unallocatedIdleEnergyJoules"] == pytest.approx(0.0, abs=1e-6)
    pods = {p["podRef"]["uid"]: p for p in summary["pods"]}
    assert all("idleShareEnergyJoules" in a for p in pods.values() for a in p["accelerators"])


def test_energy_is_the_sum_of_every_part_per_gpu(start_daemon, tmp_path):
    daemon = start(start_daemon, tmp_path)
    daemon.wait_for(lambda s: accelerator(s, 1).get("idleShareEnergyJoules", 0) > 100,
                    timeout=30)
    status, text = daemon.get("/metrics")
    assert status == 200
    for gpu in (GPU_A, GPU_B):
        labels = {"gpu_uuid": gpu}
        energy = metric_value(text, "gpustats_node_gpu_joules_total", **labels)
        parts = (metric_value(text, "gpustats_node_gpu_unattributed_joules_total", **labels)
                 + metric_value(text, "gpustats_node_gpu_unallocated_idle_joules_total",
                                **labels))
        for family in ("gpustats_pod_gpu_joules_total", "gpustats_pod_gpu_idle_share_joules_total"):
            parts += sum(s for s in pod_samples(text, family, gpu))
        assert parts == pytest.approx(energy, rel=0.01), (gpu, parts, energy)


def pod_samples(text: str, family: str, gpu: str) -> list[float]:
    from prometheus_client.parser import text_string_to_metric_families
    return [s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == family and s.labels.get("gpu_uuid") == gpu]


def test_idle_no_one_holds_is_unallocated(start_daemon, tmp_path):
    scenario = {"devices": [device(GPU_A, power_watts=100)], "processes": []}
    daemon, _ = start_simulated(start_daemon, tmp_path, scenario,
                                build(tmp_path / "host", {}), *ARGS)
    summary = daemon.wait_for(lambda s: s["node"]["accelerators"][0].get(
        "unallocatedIdleEnergyJoules", 0) > 20, timeout=30)
    gpu = summary["node"]["accelerators"][0]
    assert gpu["unallocatedIdlePowerWatts"] == pytest.approx(100.0, rel=0.02)
    assert gpu["unallocatedIdleEnergyJoules"] == pytest.approx(gpu["energyJoules"], rel=0.02)
