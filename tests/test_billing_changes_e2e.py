"""Bills while the world changes under the daemon, through the real daemon (simulator below
pynvml, fake cgroup trees, the kubelet's log layout): a pod's only container restarting, a
GPU lost and back, a process list NVML does not give, power falling within a tick.
"""

from __future__ import annotations

import os
import shutil
import time

import pytest

from tests.support.fakehost import (
    build, container_id, containers_by_id, metric_value, pod_uid, write_scenario,
)
from tests.support.invariants import assert_billed_or_unattributed, assert_never_decreased, counters
from tests.support.billing import scrape, start, v1_host, value
from tests.support.gpus import GPU_A as GPU, device

NAMESPACE, POD = "ml", "trainer-0"


def log_layout(root, pod: int, containers: dict[int, str], pod_name: str = POD) -> str:
    """The kubelet's log layout naming ``containers`` (number -> name) in one pod."""
    pod_dir = f"{NAMESPACE}_{pod_name}_{pod_uid(pod)}"
    os.makedirs(root / "pods" / pod_dir, exist_ok=True)
    os.makedirs(root / "containers", exist_ok=True)
    for number, name in containers.items():
        link = root / "containers" / f"{pod_name}_{NAMESPACE}_{name}-{container_id(number)}.log"
        if not link.is_symlink():
            os.symlink(f"/var/log/pods/{pod_dir}/{name}/0.log", link)
    return str(root)


def container_dir(cgroup, pod: int, container: int):
    return (cgroup / "kubepods.slice" / f"kubepods-pod{pod_uid(pod).replace('-', '_')}.slice"
            / f"cri-containerd-{container_id(container)}.scope")


def pods_by_uid(summary: dict) -> dict[str, dict]:
    return {p["podRef"]["uid"]: p for p in summary.get("pods", ())}


def pod_joules(values, uid: str) -> float | None:
    found = [v for (n, ls), v in values.items()
             if n == "gpustats_pod_gpu_joules" and dict(ls)["pod_uid"] == uid]
    return found[0] if found else None


def billed_pod(start_daemon, tmp_path, *args: str):
    """A daemon (0.2 s ticks, the kubelet's log layout) billing pod 1, whose container runs
    PID 101 on the GPU: (cgroup root, proc root, daemon, the pod's UID, counters served once
    it has more than 50 J)."""
    cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
    logs = log_layout(tmp_path / "logs", 1, {1: "main"})
    busy = {"devices": [device()], "processes": [{"pid": 101, "device": GPU}]}
    daemon = start(start_daemon, tmp_path, busy, cgroup, proc, "--housekeeping-interval", "0.2",
                   "--log-root", logs, *args)
    uid = pod_uid(1)
    daemon.wait_for(lambda s: uid in pods_by_uid(s) and any(
        a.get("attributedEnergyJoules", 0) > 50
        for a in pods_by_uid(s)[uid].get("accelerators", ())))
    return cgroup, proc, daemon, uid, counters(scrape(daemon))


# ------------------------------------------------------------- a pod's only container restarts


def test_a_pod_whose_only_container_restarts_stays_served(start_daemon, tmp_path):
    """CrashLoopBackOff with the sandbox alive: the container's cgroup is gone for a while,
    the pod's is not. The pod stays in ``pods[]`` and in ``/metrics``, under its names, its
    total never lower, for the whole gap; the new container's energy goes on from there."""
    cgroup, proc, daemon, uid, last = billed_pod(start_daemon, tmp_path)
    path = tmp_path / "s.yaml"
    # The container exits: its process and its cgroup go; the pod's cgroup stays.
    write_scenario(path, {"devices": [device()], "processes": []})
    shutil.rmtree(container_dir(cgroup, 1, 1))
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        summary = daemon.get("/stats/summary")[1]
        pod = pods_by_uid(summary).get(uid)
        assert pod is not None, "the pod left pods[] while its container restarted"
        assert (pod["podRef"]["name"], pod["podRef"]["namespace"]) == (POD, NAMESPACE)
        text = scrape(daemon)
        assert_billed_or_unattributed(text, level="gpustats_pod_gpu_joules")
        values = counters(text)
        assert pod_joules(values, uid) is not None, "the pod left /metrics"
        assert_never_decreased(last, values)
        last = values
        daemon.wait_ticks(1)                 # a check on every snapshot, over the span
    gap_total = pod_joules(last, uid)
    # The restarted container: a new ID, a new process, in the same pod.
    d = container_dir(cgroup, 1, 2)
    d.mkdir(parents=True)
    for name, text in (("cpu.stat", "usage_usec 5000\n"), ("memory.current", "1048576\n"),
                       ("memory.stat", "anon 1048576\ninactive_file 0\n")):
        (d / name).write_text(text)
    (proc / "102").mkdir()
    (proc / "102" / "cgroup").write_text(
        f"0::/{d.relative_to(cgroup)}\n")
    log_layout(tmp_path / "logs", 1, {2: "main"})
    write_scenario(path, {"devices": [device()], "processes": [{"pid": 102, "device": GPU}]})
    daemon.wait_for(lambda s: any(a.get("attributedEnergyJoules", 0) > gap_total + 20
                                  for a in pods_by_uid(s).get(uid, {}).get("accelerators", ())))
    assert_never_decreased(last, counters(scrape(daemon)))


def test_an_ended_pod_leaves_pods_but_stays_in_metrics_while_its_container_is_retained(
        start_daemon, tmp_path):
    """The pod is deleted: its process, its container's cgroup and its own go at once. It
    leaves ``pods[]`` (the Summary lists live pods, as the kubelet does) but its counters stay
    in ``/metrics`` under its names, never lower, while its container's counter is retained;
    once the retention passes they go too."""
    cgroup, proc, daemon, uid, last = billed_pod(
        start_daemon, tmp_path, "--counter-retention", "6", "--persist-interval", "0.5")
    path = tmp_path / "s.yaml"
    write_scenario(path, {"devices": [device()], "processes": []})
    shutil.rmtree(container_dir(cgroup, 1, 1).parent)
    shutil.rmtree(proc / "101")
    gone = time.monotonic()
    daemon.wait_for(lambda s: uid not in pods_by_uid(s) and not s.get("containers"))
    checked = 0
    while time.monotonic() < gone + 2.5 or not checked:
        checked += 1
        summary = daemon.get("/stats/summary")[1]
        assert uid not in pods_by_uid(summary), "an ended pod is listed in pods[]"
        text = scrape(daemon)
        values = counters(text)
        assert pod_joules(values, uid) is not None, "the pod left /metrics while retained"
        assert f'pod="{POD}"' in text and f'namespace="{NAMESPACE}"' in text
        assert_never_decreased(last, values)
        last = values
        daemon.wait_ticks(1)                 # a check on every snapshot, over the span
    # The retention over, the container's counters are dropped, and the pod's with them.
    daemon.wait_for(lambda s: pod_joules(counters(scrape(daemon)), uid) is None, timeout=20)


# ------------------------------------------------------------- a GPU lost for a while and back


def test_a_gpu_lost_and_back_bills_nobody_for_the_lost_time(start_daemon, tmp_path):
    """While the GPU answers GPU_IS_LOST for 3 s, a pod starts on it. When it is back, the pod
    is billed what it used since then (200 W above idle), not the lost interval; the lost
    energy is on the GPU's own counter (bounded by plausible power), not on its active one."""
    cgroup, proc = build(tmp_path / "host", {101: (1, 1), 102: (2, 2)})
    path = tmp_path / "s.yaml"
    scenario = {"devices": [device()], "processes": [{"pid": 101, "device": GPU}]}
    daemon = start(start_daemon, tmp_path, scenario, cgroup, proc,
                   "--housekeeping-interval", "0.2")
    daemon.wait_for(lambda s: s["node"]["accelerators"][0].get("energyJoules", 0) > 100)
    before = counters(scrape(daemon))
    write_scenario(path, {"devices": [device(lost=True)], "processes": []})
    daemon.wait_for(lambda s: s["node"]["accelerators"][0].get("lost"))
    time.sleep(3.0)                     # measures: three seconds lost
    write_scenario(path, {"devices": [device()], "processes": [{"pid": 102, "device": GPU}]})
    back = time.monotonic()
    daemon.wait_for(lambda s: not s["node"]["accelerators"][0].get("lost")
                    and any(c["id"] == container_id(2) and c.get("accelerators")
                            for c in s.get("containers", ())), timeout=10)
    daemon.wait_ticks(2)
    text = scrape(daemon)
    elapsed = time.monotonic() - back
    assert_billed_or_unattributed(text, level="gpustats_pod_gpu_joules")
    after = counters(text)
    assert_never_decreased(before, after)
    fair = 200.0 * (elapsed + 0.4)                  # 200 W since it is back, a tick's slack
    billed = pod_joules(after, pod_uid(2)) or 0.0
    assert billed <= fair, (billed, fair)
    active_gain = value(after, "gpustats_node_gpu_active_joules", gpu_uuid=GPU) \
        - value(before, "gpustats_node_gpu_active_joules", gpu_uuid=GPU)
    assert active_gain <= 200.0 * (elapsed + 1.0), active_gain
    device_gain = value(after, "gpustats_node_gpu_joules", gpu_uuid=GPU) \
        - value(before, "gpustats_node_gpu_joules", gpu_uuid=GPU)
    assert device_gain >= 300.0 * 3.0 * 0.9, device_gain      # the lost time, counted there


# ------------------------------------------------------------- process list not given


def test_an_unknown_process_list_leaves_container_and_pod_attribution_absent(start_daemon,
                                                                             tmp_path):
    """NVML gives no process list; a container holds the GPU through ``devices.list``. The
    GPU draws 200 W above idle: the container and its pod get no attributed figure (absent,
    not an observed 0), and the energy is the GPU's unattributed energy."""
    cgroup, proc = v1_host(tmp_path / "host", {101: (1, 1, "c 195:0 rw\n")})
    scenario = {"devices": [device(unsupported=["processes"])],
                "processes": [{"pid": 101, "device": GPU}]}
    daemon = start(start_daemon, tmp_path, scenario, cgroup, proc,
                   "--housekeeping-interval", "0.2")
    summary = daemon.wait_for(
        lambda s: s["node"]["accelerators"][0].get("energyJoules", 0) > 300
        and any(c.get("accelerators") for c in s.get("containers", ())))
    containers = [c for p in summary["pods"] for c in p["containers"]] + \
        summary.get("containers", [])
    held = [a for c in containers for a in c.get("accelerators", ())]
    assert held and all(a["id"] == GPU for a in held)
    for acc in held:
        assert "attributedPowerWatts" not in acc and "attributedEnergyJoules" not in acc, acc
    for pod in summary["pods"]:
        for acc in pod.get("accelerators", ()):
            assert "attributedPowerWatts" not in acc and "attributedEnergyJoules" not in acc
    gpu = summary["node"]["accelerators"][0]
    assert gpu["unattributedPowerWatts"] == pytest.approx(gpu["activePowerWatts"], abs=0.01)
    text = scrape(daemon)
    assert "gpustats_container_gpu_joules_total{" not in text
    assert "gpustats_container_gpu_watts{" not in text
    assert "gpustats_pod_gpu_joules_total{" not in text
    assert_billed_or_unattributed(text)
    values = counters(text)
    assert value(values, "gpustats_node_gpu_unattributed_joules", gpu_uuid=GPU) > 100


@pytest.mark.parametrize("change", ["lost", "processes unknown"])
def test_a_live_container_keeps_its_gpu_entry_while_its_processes_are_not_known(
        start_daemon, tmp_path, change):
    """On cgroup v2 the container holds the GPU through NVML's process list. While the GPU is
    lost, or NVML stops giving its processes, the container (still there) keeps its GPU entry
    with its total (no watts) in the summary and in ``/metrics``, never lower."""
    cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
    path = tmp_path / "s.yaml"
    running = {"pid": 101, "device": GPU}
    daemon = start(start_daemon, tmp_path, {"devices": [device()], "processes": [running]},
                   cgroup, proc, "--housekeeping-interval", "0.2")
    cid = container_id(1)

    def entry(summary):
        found = [a for a in containers_by_id(summary).get(cid, {}).get("accelerators", ())
                 if a["id"] == GPU]
        return found[0] if found else None

    daemon.wait_for(lambda s: (entry(s) or {}).get("attributedEnergyJoules", 0) > 50)
    last = counters(scrape(daemon))
    if change == "lost":
        write_scenario(path, {"devices": [device(lost=True)], "processes": []})
        daemon.wait_for(lambda s: s["node"]["accelerators"][0].get("lost"))
    else:
        write_scenario(path, {"devices": [device(unsupported=["processes"])],
                              "processes": [running]})
        daemon.wait_for(lambda s: not s["node"]["accelerators"][0].get("lost") and all(
            not p.get("accelerators") for p in s.get("processes", ())) and
            "unattributedPowerWatts" in s["node"]["accelerators"][0] and
            s["node"]["accelerators"][0]["unattributedPowerWatts"]
            == s["node"]["accelerators"][0].get("activePowerWatts"))
    deadline = time.monotonic() + 1.5
    checked = 0
    while time.monotonic() < deadline or not checked:
        checked += 1
        acc = entry(daemon.get("/stats/summary")[1])
        assert acc is not None, "the container's GPU entry vanished"
        assert "attributedPowerWatts" not in acc and acc["attributedEnergyJoules"] > 50, acc
        text = scrape(daemon)
        assert metric_value(text, "gpustats_container_gpu_joules_total",
                            container_id=cid, gpu_uuid=GPU) is not None, "left /metrics"
        values = counters(text)
        assert_never_decreased(last, values)
        last = values
        daemon.wait_ticks(1)                 # a check on every snapshot, over the span


# ------------------------------------------------------------- power falling within a tick


def test_attributed_watts_never_exceed_active_watts_when_power_falls(start_daemon, tmp_path):
    """Power steps between 500 W and the 100 W idle, out of step with the 0.4 s ticks: in every
    snapshot, the watts attributed to the GPU's containers and pods add up to at most its
    active watts (both are the tick's energy over its length)."""
    cgroup, proc = build(tmp_path / "host", {101: (1, 1), 102: (2, 2)})
    log_layout(tmp_path / "logs", 1, {1: "main"}, "a")
    logs = log_layout(tmp_path / "logs", 2, {2: "main"}, "b")
    path = tmp_path / "s.yaml"

    def scenario(watts):
        return {"devices": [device(power_watts=watts)],
                "processes": [{"pid": 101, "device": GPU, "sm_util_percent": 60},
                              {"pid": 102, "device": GPU, "sm_util_percent": 30}]}

    daemon = start(start_daemon, tmp_path, scenario(500), cgroup, proc,
                   "--housekeeping-interval", "0.4", "--log-root", logs)
    daemon.wait_for(lambda s: len(s.get("pods", ())) == 2
                    and "activePowerWatts" in s["node"]["accelerators"][0])
    checked = 0
    watts, flip = 500, time.monotonic() + 0.55
    deadline = time.monotonic() + 6.0
    while time.monotonic() < deadline:
        if time.monotonic() >= flip:
            watts = 100 if watts == 500 else 500
            write_scenario(path, scenario(watts))
            flip = time.monotonic() + 0.55
        summary = daemon.get("/stats/summary")[1]
        gpu = summary["node"]["accelerators"][0]
        assert "powerWatts" in gpu                          # the instantaneous reading
        active = gpu.get("activePowerWatts")
        pods = [a["attributedPowerWatts"] for p in summary["pods"]
                for a in p.get("accelerators", ()) if "attributedPowerWatts" in a]
        if active is not None and pods:
            checked += 1
            assert sum(pods) <= active + 0.01, (sum(pods), active, gpu["powerWatts"])
            containers = [a["attributedPowerWatts"] for p in summary["pods"]
                          for c in p["containers"] for a in c.get("accelerators", ())
                          if "attributedPowerWatts" in a]
            assert sum(containers) <= active + 0.01, (sum(containers), active)
        time.sleep(0.05)                     # measures: a check on every scrape, over the span
    assert checked > 20
