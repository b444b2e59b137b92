"""Numbers users bill by, through the real daemon (simulator below pynvml, fake v1/v2 host trees).

Each test reproduces one way a bill went wrong and checks the invariants on every scrape:
Σ process = Σ container = Σ pod (= Σ MIG instance) = active joules per GPU, and no counter
ever decreases, within a run or across a restart.
"""

from __future__ import annotations

import shutil
import signal
import time

import pytest

from tests.support.billing import scrape, start, v1_host, value
from tests.support.fakehost import build, pod_uid, write_scenario
from tests.support.gpus import GPU_A as GPU, GPU_B as LOST, device
from tests.support.prometheus import PrometheusServer
from tests.support.invariants import assert_conservation, assert_never_decreased, counters
from tests.support.waiting import poll


def watch(daemon, seconds: float, *, mig: bool = False, previous=None):
    """Scrape each snapshot for ``seconds``: conservation on every scrape, no counter down."""
    deadline = time.monotonic() + seconds
    last = previous or {}
    text = ""
    while time.monotonic() < deadline:
        text = scrape(daemon)
        assert_conservation(text, mig=mig)
        values = counters(text)
        assert_never_decreased(last, values)
        last = values
        daemon.wait_ticks(1)    # a scrape of every snapshot over the watched span
    return text, last


def _query(prometheus, expr: str, at: float | None = None) -> list:
    """Prometheus's answer to ``expr``, or none while it cannot answer."""
    try:
        return prometheus.query(expr, at)
    except OSError:
        return []


def metric_sum(values, name, **labels):
    return sum(v for (n, ls), v in values.items()
               if n == name and all(dict(ls).get(k) == str(w) for k, w in labels.items()))


# ------------------------------------------------------------------ 1. crash between saves


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed")
def test_sigkill_between_saves_never_steps_a_counter_down(start_daemon, tmp_path):
    """Persist interval 30 s, 0.5 s ticks: killed between two saves, restarted. Every counter
    of the last scrape before the kill is ≤ its first value after the restart, and a real
    Prometheus (scraping every 0.5 s) sees no reset: increase() is power × time."""
    cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
    scenario = {"devices": [device()], "processes": [{"pid": 101, "device": GPU}]}
    args = ("--housekeeping-interval", "0.5", "--persist-interval", "30")
    daemon = start(start_daemon, tmp_path, scenario, cgroup, proc, *args)
    port = daemon.port                              # the restart binds it again
    prometheus = PrometheusServer(tmp_path, [port], scrape_interval="500ms")
    try:
        series = "gpustats_node_gpu_joules_total"
        poll(lambda: _query(prometheus, f"count_over_time({series}[1m]) >= 3"),
             timeout=30, interval=0.5)              # Prometheus has the series before the kill
        _, before = watch(daemon, 3.0)
        last_before_kill = counters(scrape(daemon))
        daemon.stop(signal.SIGKILL)
        time.sleep(1.0)                             # measures: a second of downtime
        daemon = start(start_daemon, tmp_path, None, cgroup, proc, *args, port=port)
        first_after = counters(scrape(daemon))
        assert_never_decreased(last_before_kill, first_after)
        watch(daemon, 4.0, previous=first_after)
        watched = time.time()                       # the last scrapes are in
        poll(lambda: any(float(t) > watched for t, _ in
                         (_query(prometheus, f"{series}[2m]") or [{"values": []}])[0]["values"]),
             timeout=10, interval=0.2)
        at = time.time()
        samples = prometheus.query(f"{series}[2m]", at)[0]["values"]
        (t0, v0), (t1, v1) = samples[0], samples[-1]
        span = float(t1) - float(t0)
        assert span > 8, samples
        # The hardware counter ran on while the daemon was down: the device counter includes
        # the gap, so the node series rises at 300 W over the whole span, kill included.
        assert (float(v1) - float(v0)) / span == pytest.approx(300.0, rel=0.05)
        window = int(span)
        for name in (series, "gpustats_node_gpu_active_joules_total",
                     "gpustats_container_gpu_joules_total", "gpustats_pod_gpu_joules_total",
                     "gpustats_process_gpu_joules_total"):
            resets = prometheus.query(f"resets({name}[{window}s])", at)
            assert resets and all(float(r["value"][1]) == 0 for r in resets), (name, resets)
        increase = float(prometheus.query(f"increase({series}[{window}s])",
                                          float(t1))[0]["value"][1])
        assert increase == pytest.approx(300.0 * window, rel=0.05), (increase, window)
        # Attributed counters do not invent the gap: at most 200 W over the span.
        attributed = float(prometheus.query("increase(gpustats_container_gpu_joules_total"
                                            f"[{window}s])", float(t1))[0]["value"][1])
        assert 0 < attributed <= 200.0 * window * 1.05
    finally:
        prometheus.stop()


def test_the_gap_is_counted_on_the_device_only(start_daemon, tmp_path):
    cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
    scenario = {"devices": [device()], "processes": [{"pid": 101, "device": GPU}]}
    args = ("--housekeeping-interval", "0.3")
    daemon = start(start_daemon, tmp_path, scenario, cgroup, proc, *args)
    _, before = watch(daemon, 2.0)
    daemon.stop(signal.SIGKILL)
    time.sleep(2.0)                                 # measures: two seconds of downtime
    daemon = start(start_daemon, tmp_path, None, cgroup, proc, *args)
    after = counters(scrape(daemon))
    assert_never_decreased(before, after)
    gap_device = value(after, "gpustats_node_gpu_joules", gpu_uuid=GPU) \
        - value(before, "gpustats_node_gpu_joules", gpu_uuid=GPU)
    gap_active = value(after, "gpustats_node_gpu_active_joules", gpu_uuid=GPU) \
        - value(before, "gpustats_node_gpu_active_joules", gpu_uuid=GPU)
    assert gap_device >= 300.0 * 2.0 * 0.9          # ≥ 2 s at 300 W while down
    assert gap_active <= 200.0 * 1.0                # at most a tick's worth after restart
    assert "used while gpustats was not running" in daemon.log()


# ------------------------------------------------------------------ 2. MIG on cgroup v1


def mig_device(*instances):
    return device(mig_instances=[
        {"gpu_instance_id": gi, "profile": "3g.40gb", "uuid": f"MIG-aaaa-{gi}",
         "memory_total_bytes": 40 << 30, **({"gpm": gpm} if gpm is not None else {})}
        for gi, gpm in instances])


def test_mig_tenants_on_cgroup_v1_are_counted_once(start_daemon, tmp_path):
    """devices.list names the parent GPU and the MIG capability nodes: Σ pods = active."""
    parent_and_caps = "c 195:0 rw\nc 195:255 rw\nc 508:1 r\nc 508:12 r\n"
    cgroup, proc = v1_host(tmp_path / "host", {101: (1, 1, parent_and_caps),
                                               102: (2, 2, parent_and_caps)})
    scenario = {"devices": [mig_device((1, {"graphics_active_percent": 60}),
                                       (2, {"graphics_active_percent": 20}))],
                "processes": [{"pid": 101, "device": GPU, "gpu_instance_id": 1},
                              {"pid": 102, "device": GPU, "gpu_instance_id": 2}]}
    daemon = start(start_daemon, tmp_path, scenario, cgroup, proc,
                   "--housekeeping-interval", "0.3")
    text, values = watch(daemon, 4.0, mig=True)
    pods = {dict(ls)["pod_uid"]: v for (n, ls), v in values.items()
            if n == "gpustats_pod_gpu_joules"}
    active = value(values, "gpustats_node_gpu_active_joules", gpu_uuid=GPU)
    assert sum(pods.values()) == pytest.approx(active, rel=0.02)
    assert pods[pod_uid(1)] / sum(pods.values()) == pytest.approx(0.75, abs=0.02)
    summary = daemon.get("/stats/summary")[1]
    assert len(summary["containers"]) == 2
    for container in summary["containers"]:
        accs = container["accelerators"]
        assert len(accs) == 1, accs                      # one entry: its MIG instance
        assert accs[0]["gpuInstanceId"] in (1, 2) and accs[0]["id"].startswith("MIG-")


# ------------------------------------------------------------------ 3. a PID listed twice


def test_a_pid_listed_twice_is_counted_once(start_daemon, tmp_path):
    cgroup, proc = build(tmp_path / "host", {101: (1, 1), 102: (2, 2)})
    scenario = {"devices": [device()], "processes": [
        {"pid": 101, "device": GPU, "sm_util_percent": 50, "memory_used_bytes": 1 << 30},
        {"pid": 101, "device": GPU, "sm_util_percent": 50, "memory_used_bytes": 1 << 30},
        {"pid": 102, "device": GPU, "sm_util_percent": 50, "memory_used_bytes": 1 << 30}]}
    daemon = start(start_daemon, tmp_path, scenario, cgroup, proc,
                   "--housekeeping-interval", "0.3")
    _, values = watch(daemon, 3.0)
    processes = metric_sum(values, "gpustats_process_gpu_joules")
    active = value(values, "gpustats_node_gpu_active_joules", gpu_uuid=GPU)
    assert processes == pytest.approx(active, rel=0.02)
    assert len([1 for (n, _) in values if n == "gpustats_process_gpu_joules"]) == 2


# ------------------------------------------------------------------ 4. GPM per MIG instance


def test_an_instance_without_gpm_leaves_the_others_their_activity(start_daemon, tmp_path):
    cgroup, proc = build(tmp_path / "host", {101: (1, 1), 102: (2, 2), 103: (3, 3)})
    scenario = {"devices": [mig_device((1, {"graphics_active_percent": 60}),
                                       (2, {"graphics_active_percent": 20}),
                                       (3, None))],
                "processes": [{"pid": 101, "device": GPU, "gpu_instance_id": 1},
                              {"pid": 102, "device": GPU, "gpu_instance_id": 2},
                              {"pid": 103, "device": GPU, "gpu_instance_id": 3}]}
    daemon = start(start_daemon, tmp_path, scenario, cgroup, proc,
                   "--housekeeping-interval", "0.3")
    daemon.wait_for(lambda s: all("activityRatio" in m for m in
                                  s["node"]["accelerators"][0]["migInstances"][:2]))
    _, first = watch(daemon, 1.0, mig=True)
    _, last = watch(daemon, 2.0, mig=True, previous=first)
    watts = {gi: value(last, "gpustats_node_gpu_mig_joules", gpu_instance_id=gi)
             - value(first, "gpustats_node_gpu_mig_joules", gpu_instance_id=gi)
             for gi in (1, 2, 3)}
    assert watts[1] / watts[2] == pytest.approx(3.0, rel=0.05)     # 60/20 kept
    assert watts[3] / watts[2] == pytest.approx(2.0, rel=0.05)     # assumed at their mean
    status, metrics = daemon.get("/metrics")
    assert 'gpustats_node_gpu_mig_activity_ratio' in metrics


# ------------------------------------------------------------------ 8. owners alive keep totals


def test_a_live_pod_idle_past_the_retention_keeps_its_total(start_daemon, tmp_path):
    cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
    path = tmp_path / "s.yaml"
    busy = {"devices": [device()], "processes": [{"pid": 101, "device": GPU}]}
    idle = {"devices": [device(power_watts=100)], "processes": []}
    daemon = start(start_daemon, tmp_path, busy, cgroup, proc, "--housekeeping-interval", "0.2",
                   "--counter-retention", "1", "--persist-interval", "0.3")
    earned = poll(lambda: (joules := metric_sum(counters(scrape(daemon)),
                                                "gpustats_pod_gpu_joules")) > 50 and joules,
                  timeout=20, interval=0.2) or 0.0
    assert earned > 50
    write_scenario(path, idle)                        # the pod stays, its process is gone
    time.sleep(3.0)                          # measures: three retentions, many expiries
    text = scrape(daemon)
    values = counters(text)
    total = value(values, "gpustats_pod_gpu_joules", pod_uid=pod_uid(1))
    assert total >= earned - 0.01
    write_scenario(path, busy)                        # it resumes: the total goes on
    resumed = poll(lambda: (now := value(counters(scrape(daemon)), "gpustats_pod_gpu_joules",
                                         pod_uid=pod_uid(1))) > total and now,
                   timeout=10, interval=0.1)
    assert resumed and resumed > total
    # A pod that is gone for longer than the retention is dropped.
    shutil.rmtree(cgroup / "kubepods.slice")
    write_scenario(path, idle)

    def dropped() -> bool:
        return not [1 for (n, ls) in counters(scrape(daemon))
                    if n == "gpustats_pod_gpu_joules" and dict(ls)["pod_uid"] == pod_uid(1)]
    assert poll(dropped, timeout=15, interval=0.2)


# ------------------------------------------------------------------ 6, 7. unknown stays absent


def test_unknown_values_stay_absent(start_daemon, tmp_path):
    other = "GPU-bbbbbbbb-2222-4222-8222-bbbbbbbbbbbb"
    cgroup, proc = build(tmp_path / "host", {101: (1, 1), 201: (2, 2)})
    scenario = {"devices": [device(),
                            device(uuid=other, minor=1, unsupported=["processes"])],
                "processes": [{"pid": 101, "device": GPU}]}   # no memory figure for 101
    daemon = start(start_daemon, tmp_path, scenario, cgroup, proc,
                   "--housekeeping-interval", "0.3")
    summary = daemon.wait_for(lambda s: s.get("containers")
                              and s["containers"][0].get("accelerators"))
    acc = summary["containers"][0]["accelerators"][0]           # a pod no source names
    assert "processMemoryUsed" not in acc
    devices = {a["id"]: a for a in summary["node"]["accelerators"]}
    assert devices[GPU]["sharingMode"] == "exclusive"
    assert "sharingMode" not in devices[other]                 # its processes are unknown
    assert "gpustats_container_gpu_memory_used_bytes" not in scrape(daemon)


def test_container_compute_share_never_exceeds_one(start_daemon, tmp_path):
    cgroup, proc = build(tmp_path / "host", {101: (1, 1), 102: (1, 1)})
    scenario = {"devices": [device()], "processes": [
        {"pid": 101, "device": GPU, "sm_util_percent": 85, "mps": True},
        {"pid": 102, "device": GPU, "sm_util_percent": 75, "mps": True}]}
    daemon = start(start_daemon, tmp_path, scenario, cgroup, proc,
                   "--housekeeping-interval", "0.3")
    daemon.wait_for(lambda s: s.get("containers") and "computeUtilization" in
                    s["containers"][0]["accelerators"][0])
    values = {}
    for line in scrape(daemon).splitlines():
        if line.startswith("gpustats_container_gpu_compute_utilization_ratio{"):
            values["container"] = float(line.rsplit(" ", 1)[1])
        elif line.startswith("gpustats_process_gpu_compute_utilization_ratio{"):
            values.setdefault("processes", []).append(float(line.rsplit(" ", 1)[1]))
    assert values["container"] <= 1.0
    assert sorted(values["processes"]) == pytest.approx([0.75, 0.85])   # as NVML reports


# ------------------------------------------------------------------ issue 12: lost at start


def lost_scenario():
    return {"devices": [device(pci_bus_id="00000000:01:00.0"),
                        device(uuid=LOST, minor=1, pci_bus_id="00000000:02:00.0",
                               lost=True)]}


def driver_procfs(proc, bus="0000:02:00.0", uuid=LOST):
    d = proc / "driver" / "nvidia" / "gpus" / bus
    d.mkdir(parents=True, exist_ok=True)
    (d / "information").write_text(f"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ: \t\t 140\n"
                                   f"GPU UUID: \t {uuid}\nBus Location: \t {bus}\n"
                                   f"Device Minor: \t 1\n")


def lost_entry(daemon):
    summary = daemon.wait_for(lambda s: len(s["node"].get("accelerators", [])) == 2)
    return [a for a in summary["node"]["accelerators"] if a.get("lost")][0]


def assert_reported_lost(daemon, entry, expected_id):
    assert entry["id"] == expected_id and entry["index"] == 1
    assert entry["health"]["healthy"] is False
    ready = [c for c in entry["health"]["conditions"] if c["type"] == "NVMLReady"][0]
    assert (ready["status"], ready["reason"]) == ("False", "GpuLost")
    text = scrape(daemon)
    assert f'gpustats_node_gpu_lost{{gpu="1",gpu_uuid="{expected_id}"' in text
    line = [x for x in text.splitlines()
            if x.startswith("gpustats_node_gpu_lost{") and expected_id in x][0]
    assert line.endswith(" 1.0")


def test_a_gpu_lost_at_start_is_named_from_the_drivers_procfs(start_daemon, tmp_path):
    cgroup, proc = build(tmp_path / "host", {})
    driver_procfs(proc)
    daemon = start(start_daemon, tmp_path, lost_scenario(), cgroup, proc)
    entry = lost_entry(daemon)
    assert_reported_lost(daemon, entry, LOST)
    assert entry["model"] == "NVIDIA H100 80GB HBM3" and entry["minorNumber"] == 1


def test_a_gpu_lost_at_start_without_procfs_is_named_by_its_bus_id(start_daemon, tmp_path):
    cgroup, proc = build(tmp_path / "host", {})
    daemon = start(start_daemon, tmp_path, lost_scenario(), cgroup, proc)
    entry = lost_entry(daemon)
    assert_reported_lost(daemon, entry, "0000:02:00.0")
    assert entry["pciBusId"] == "0000:02:00.0"
    assert "GPU index 1 is lost" in daemon.log()


def test_a_gpu_lost_at_start_is_named_from_a_prior_run_with_its_counters(start_daemon,
                                                                        tmp_path):
    cgroup, proc = build(tmp_path / "host", {})
    healthy = lost_scenario()
    healthy["devices"][1]["lost"] = False
    daemon = start(start_daemon, tmp_path, healthy, cgroup, proc,
                   "--housekeeping-interval", "0.3")
    summary = daemon.wait_for(lambda s: any(a.get("energyJoules", 0) > 100
                                            for a in s["node"]["accelerators"]
                                            if a["id"] == LOST))
    energy = [a for a in summary["node"]["accelerators"] if a["id"] == LOST][0]["energyJoules"]
    daemon.stop()
    daemon = start(start_daemon, tmp_path, lost_scenario(), cgroup, proc)
    entry = lost_entry(daemon)
    assert_reported_lost(daemon, entry, LOST)
    assert entry["model"] == "NVIDIA H100 80GB HBM3"
    assert entry["energyJoules"] >= energy                      # its counters still served
    assert f'gpustats_node_gpu_joules_total{{gpu="1",gpu_uuid="{LOST}"' in scrape(daemon)
