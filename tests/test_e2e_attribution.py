"""Attribution end to end through the real daemon: exclusive, 75/25, equal split, MIG with a
fake dcgm-exporter, MIG turned on mid-run, and counters across a SIGKILL restart."""

import json
import signal
import time

import pytest

from tests.support.dcgm_exporter import Exporter
from tests.support.fakehost import (
    build, container_id, containers_by_id, metric_value, pod_uid, write_scenario,
)
from tests.support.gpus import GPU_A as GPU, device
from tests.support.invariants import assert_attributed_watts
from tests.support.simulated import start_simulated
from tests.support.waiting import wait_until

ARGS = ("--housekeeping-interval", "0.2", "--pod-resources-socket", "", "--runtime-socket", "",
        "--idle-power-watts", "100")


def start(start_daemon, tmp_path, scenario, placement, *extra):
    return start_simulated(start_daemon, tmp_path, scenario, build(tmp_path / "host", placement),
                           *ARGS, *extra)


def energy(summary, n):
    c = containers_by_id(summary).get(container_id(n))
    return c["accelerators"][0].get("attributedEnergyJoules", 0.0) if c else 0.0


def test_exclusive_process_gets_all_active_power(start_daemon, tmp_path):
    daemon, _ = start(start_daemon, tmp_path,
                      {"devices": [device()], "processes": [{"pid": 101, "device": GPU}]},
                      {101: (1, 1)})
    summary = daemon.wait_for(lambda s: energy(s, 1) > 50)
    acc = containers_by_id(summary)[container_id(1)]["accelerators"][0]
    assert acc["attributedPowerWatts"] > 0
    assert_attributed_watts(daemon, 200.0, GPU, container_id(1))    # 300 − 100 idle
    node = summary["node"]["accelerators"][0]
    # Active watts: the tick's active energy over its length, as the attributed watts are.
    assert node["idlePowerWatts"] == 100.0
    assert node["activePowerWatts"] == pytest.approx(200.0, rel=0.01)
    assert node["sharingMode"] == "exclusive"


def test_time_sliced_75_25(start_daemon, tmp_path):
    daemon, _ = start(start_daemon, tmp_path, {
        "devices": [device()],
        "processes": [{"pid": 101, "device": GPU, "sm_util_percent": 75},
                      {"pid": 102, "device": GPU, "sm_util_percent": 25}]},
        {101: (1, 1), 102: (2, 2)})
    summary = daemon.wait_for(lambda s: energy(s, 1) + energy(s, 2) > 1000, timeout=30)
    a, b = energy(summary, 1), energy(summary, 2)
    assert a / (a + b) == pytest.approx(0.75, abs=0.01)
    assert summary["node"]["accelerators"][0]["sharingMode"] == "time-slicing"
    assert containers_by_id(summary)[container_id(1)]["accelerators"][0]["computeUtilization"] \
        == 75


def test_processes_without_samples_split_equally(start_daemon, tmp_path):
    daemon, _ = start(start_daemon, tmp_path, {
        "devices": [device()],
        "processes": [{"pid": 101, "device": GPU}, {"pid": 102, "device": GPU},
                      {"pid": 103, "device": GPU}]},
        {101: (1, 1), 102: (2, 2), 103: (3, 3)})
    summary = daemon.wait_for(lambda s: min(energy(s, n) for n in (1, 2, 3)) > 100)
    values = [energy(summary, n) for n in (1, 2, 3)]
    assert max(values) / min(values) == pytest.approx(1.0, abs=0.01)
    acc = containers_by_id(summary)[container_id(1)]["accelerators"][0]
    assert "computeUtilization" not in acc or acc["computeUtilization"] == 0


def mig_scenario(**dev):
    return {"devices": [device(mig_instances=[
        {"gpu_instance_id": 7, "profile": "3g.40gb", "uuid": "MIG-aaaa-7"},
        {"gpu_instance_id": 8, "profile": "3g.40gb", "uuid": "MIG-aaaa-8"}], **dev)],
        "processes": [{"pid": 101, "device": GPU, "gpu_instance_id": 7},
                      {"pid": 102, "device": GPU, "gpu_instance_id": 8}]}


def exporter_text(a7, a8):
    return ("# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge\n"
            f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{UUID="{GPU}",GPU_I_ID="7"}} {a7}\n'
            f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{UUID="{GPU}",GPU_I_ID="8"}} {a8}\n').encode()


def test_mig_split_follows_exporter_activity_then_falls_back(start_daemon, tmp_path):
    exporter = Exporter()
    exporter.body = exporter_text(0.8, 0.2)
    try:
        daemon, _ = start(start_daemon, tmp_path, mig_scenario(), {101: (1, 1), 102: (2, 2)},
                          "--dcgm-exporter-url", exporter.url)
        summary = daemon.wait_for(lambda s: energy(s, 1) + energy(s, 2) > 1000, timeout=30)
        a, b = energy(summary, 1), energy(summary, 2)
        assert a / (a + b) == pytest.approx(0.8, abs=0.01)
        acc = containers_by_id(summary)[container_id(1)]["accelerators"][0]
        assert acc["gpuInstanceId"] == 7 and acc["migProfile"] == "3g.40gb"
        node = summary["node"]["accelerators"][0]
        assert node["sharingMode"] == "mig"
        assert {m["gpuInstanceId"]: m["activityRatio"] for m in node["migInstances"]} == \
            {7: 0.8, 8: 0.2}
        # The exporter turns to garbage: equal split from then on, one log line.
        exporter.body = b"\x00garbage{{{"
        time.sleep(2.5)          # measures: past the 2 s response cache
        summary = daemon.get("/stats/summary")[1]
        before = (energy(summary, 1), energy(summary, 2))
        time.sleep(3.0)          # measures: 3 s of the equal split
        summary = daemon.get("/stats/summary")[1]
        da, db = energy(summary, 1) - before[0], energy(summary, 2) - before[1]
        assert da / (da + db) == pytest.approx(0.5, abs=0.05)
        assert daemon.log().count("answered garbage") == 1
    finally:
        exporter.close()


def test_mig_exporter_down_means_equal_split(start_daemon, tmp_path):
    daemon, _ = start(start_daemon, tmp_path, mig_scenario(), {101: (1, 1), 102: (2, 2)},
                      "--dcgm-exporter-url", "http://127.0.0.1:9/metrics")
    summary = daemon.wait_for(lambda s: energy(s, 1) + energy(s, 2) > 500, timeout=30)
    a, b = energy(summary, 1), energy(summary, 2)
    assert a / (a + b) == pytest.approx(0.5, abs=0.01)
    assert daemon.log().count("unreachable") == 1


def test_mig_turned_on_mid_run(start_daemon, tmp_path):
    plain = {"devices": [device()], "processes": [{"pid": 101, "device": GPU},
                                                  {"pid": 102, "device": GPU}]}
    daemon, path = start(start_daemon, tmp_path, plain, {101: (1, 1), 102: (2, 2)})
    daemon.wait_for(lambda s: s["node"]["accelerators"][0].get("sharingMode") == "time-slicing")
    write_scenario(path, mig_scenario())
    summary = daemon.wait_for(lambda s: s["node"]["accelerators"][0].get("sharingMode") == "mig")
    assert [m["gpuInstanceId"] for m in summary["node"]["accelerators"][0]["migInstances"]] == \
        [7, 8]
    assert "MIG mode is now on" in daemon.log()
    assert daemon.proc.poll() is None


def _saved_device_joules(state) -> float:
    """The GPU's counter as last saved (0 before the first save)."""
    try:
        saved = json.loads((state / "counters.json").read_text())["counters"]
    except (OSError, ValueError):
        return 0.0
    return next((e["joules"] for e in saved if e["key"] == ["device", GPU]), 0.0)


def test_counters_survive_sigkill_restart(start_daemon, tmp_path):
    scenario = {"devices": [device()], "processes": [{"pid": 101, "device": GPU}]}
    placement = {101: (1, 1)}
    daemon, path = start(start_daemon, tmp_path, scenario, placement,
                         "--persist-interval", "0.5")
    daemon.wait_for(lambda s: energy(s, 1) > 300)
    assert wait_until(lambda: _saved_device_joules(tmp_path / "state") > 300, timeout=10)
    last_seen = daemon.get("/stats/summary")[1]
    daemon.stop(signal.SIGKILL)
    state = json.loads((tmp_path / "state" / "counters.json").read_text())
    persisted = {tuple(e["key"]): e["joules"] for e in state["counters"]}
    device_persisted = persisted[("device", GPU)]
    container_persisted = persisted[("container", container_id(1), GPU, None)]
    seen_device = last_seen["node"]["accelerators"][0]["energyJoules"]
    # The gap is at most one persist interval (plus a tick) of 300 W.
    assert seen_device - device_persisted <= 300 * (0.5 + 0.2) + 1
    cgroup, proc = tmp_path / "host" / "cgroup", tmp_path / "host" / "proc"
    again = start_daemon("--simulate", str(path), "--cgroup-root", str(cgroup),
                         "--proc-root", str(proc), *ARGS)
    again.wait_ready()
    summary = again.wait_for(lambda s: energy(s, 1) > 0)
    rounding = 0.001          # the summary shows joules to three decimals
    assert summary["node"]["accelerators"][0]["energyJoules"] >= device_persisted - rounding
    assert energy(summary, 1) >= container_persisted - rounding
    # No name source: the pod is nameless, so its total is read from /metrics.
    pod_joules = metric_value(again.get("/metrics")[1], "gpustats_pod_gpu_joules_total",
                              pod_uid=pod_uid(1), gpu_uuid=GPU)
    assert pod_joules >= container_persisted - rounding
