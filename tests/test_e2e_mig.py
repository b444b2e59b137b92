"""MIG through the real daemon: instances destroyed and created while MIG stays on (as the MIG
manager does), and idle instances' memory, in the summary and in dcgm-exporter's vocabulary."""

from __future__ import annotations


import pytest

from tests.support.fakehost import (
    build, container_id, containers_by_id, metric_value, write_scenario,
)
from tests.support.gpus import GPU_A as GPU
from tests.support.invariants import counters
from tests.support.simulated import start_simulated

GIB = 1024 ** 3
BASE = ("--pod-resources-socket", "", "--runtime-socket", "", "--idle-power-watts", "100",
        "--housekeeping-interval", "0.25")


def instance(gi, profile, activity):
    return {"gpu_instance_id": gi, "profile": profile, "uuid": f"MIG-aaaa-{gi}",
            "memory_total_bytes": int(profile.split(".")[1].removesuffix("gb")) * GIB,
            "gpm": {"graphics_active_percent": activity}}


def scenario(instances, processes):
    return {"devices": [{"uuid": GPU, "name": "NVIDIA H100 80GB HBM3", "minor": 0,
                         "power_watts": 300, "mig_instances": instances}],
            "processes": [{"pid": pid, "device": GPU, "gpu_instance_id": gi,
                           "memory_used_bytes": GIB} for pid, gi in processes]}


def start(start_daemon, tmp_path, data, placement, *extra):
    return start_simulated(start_daemon, tmp_path, data, build(tmp_path / "host", placement),
                           *BASE, *extra)


def mig_instances(summary):
    return {m["gpuInstanceId"]: m for m in summary["node"]["accelerators"][0]["migInstances"]}


def joules(text):
    """(Σ MIG-instance counters by instance, the GPU's active counter) of one scrape."""
    values = counters(text)
    mig = {dict(labels)["gpu_instance_id"]: v for (name, labels), v in values.items()
           if name == "gpustats_node_gpu_mig_joules"}
    active = [v for (name, labels), v in values.items()
              if name == "gpustats_node_gpu_active_joules" and dict(labels)["gpu_uuid"] == GPU]
    return mig, active[0]


def methods(text):
    """PID → how its share was computed, from one scrape."""
    from prometheus_client.parser import text_string_to_metric_families
    return {s.labels["pid"]: s.labels["method"] for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "gpustats_process_gpu_share_method"}


def test_instances_destroyed_and_created_while_mig_stays_on(start_daemon, tmp_path):
    placement = {101: (1, 1), 102: (2, 2), 103: (3, 3)}
    daemon, path = start(start_daemon, tmp_path,
                         scenario([instance(1, "3g.40gb", 60), instance(2, "3g.40gb", 20)],
                                  [(101, 1), (102, 2)]), placement)
    daemon.wait_for(lambda s: set(mig_instances(s)) == {1, 2}
                    and all("activityRatio" in m for m in mig_instances(s).values()))
    # The MIG manager destroys instance 2 and creates a 1g.10gb instance 5 for a new tenant.
    write_scenario(path, scenario([instance(1, "3g.40gb", 60), instance(5, "1g.10gb", 30)],
                                  [(101, 1), (103, 5)]))
    daemon.wait_for(lambda text: "103" in methods(text), path="/metrics")
    daemon.wait_ticks(4)                # past the first ticks of instance 5 (GPM needs two)
    _, first = daemon.get("/metrics")
    daemon.wait_ticks(12)
    _, last = daemon.get("/metrics")
    # Over the ticks after the change, the instances account for all of the GPU's active energy.
    (mig0, active0), (mig1, active1) = joules(first), joules(last)
    attributed = sum(v - mig0.get(gi, 0.0) for gi, v in mig1.items())
    assert active1 - active0 > 200.0 * 2.0          # 200 W above idle for 3 s
    assert abs(attributed - (active1 - active0)) <= 0.01 * (active1 - active0), \
        (mig0, mig1, active0, active1)
    # The new instance is listed with its profile, the destroyed one is gone.
    assert set(mig1) == {"1", "5"}
    summary = daemon.get("/stats/summary")[1]
    assert set(mig_instances(summary)) == {1, 5}
    created = mig_instances(summary)[5]
    assert (created["id"], created["profile"], created["memoryTotal"]) == \
        ("MIG-aaaa-5", "1g.10gb", 10 * GIB)
    # The new tenant's accelerator is its MIG device, its share measured, not assumed.
    (acc,) = containers_by_id(summary)[container_id(3)]["accelerators"]
    assert (acc["id"], acc["gpuInstanceId"], acc["migProfile"]) == ("MIG-aaaa-5", 5, "1g.10gb")
    assert methods(last) == {"101": "mig-activity", "103": "mig-activity"}
    # Activities 60 and 30: instance 1 has two thirds of what the instances drew.
    assert (mig1["1"] - mig0["1"]) / attributed == pytest.approx(2 / 3, rel=0.03)
    assert "MIG layout changed: destroyed 2:3g.40gb; created 5:1g.10gb" in daemon.log()


def test_idle_instances_memory_is_in_the_summary_and_dcgm_vocabulary(start_daemon, tmp_path):
    daemon, _ = start(start_daemon, tmp_path,
                      scenario([instance(1, "3g.40gb", 60), instance(2, "1g.10gb", 0)],
                               [(101, 1)]), {101: (1, 1)}, "--dcgm-compat")
    summary = daemon.wait_for(lambda s: set(mig_instances(s)) == {1, 2})
    idle = mig_instances(summary)[2]
    assert (idle["memoryUsed"], idle["memoryTotal"]) == (0, 10 * GIB)    # observed 0, not absent
    assert mig_instances(summary)[1]["memoryUsed"] == GIB
    _, text = daemon.get("/metrics")
    assert metric_value(text, "DCGM_FI_DEV_FB_USED", GPU_I_ID="2", GPU_I_PROFILE="1g.10gb") == 0
    assert metric_value(text, "DCGM_FI_DEV_FB_FREE", GPU_I_ID="2") == 10 * 1024
    assert metric_value(text, "DCGM_FI_DEV_FB_USED", GPU_I_ID="1") == 1024
    assert metric_value(text, "gpustats_node_gpu_mig_memory_used_bytes",
                        gpu_instance_id="2") == 0
