"""Kepler's GPU vocabulary (``--kepler-compat``) against the label table read from Kepler's
collector (kept with its origin in ``tests/peers``): names, types and label sets exactly, a
workload's series summed over its GPUs and served only while above zero, a per-pod panel that
draws one line per pod; ``state`` running, then terminated while a counter is kept; and end to
end through the real daemon, an owner's series going from running to terminated."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import \
    text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from gpustats import fakehost
from gpustats.config import ConfigError, build_arg_parser, resolve
from gpustats.export import kepler_table, metric_table, prometheus
from gpustats.export.prometheus import render
from gpustats.model.device import DeviceIdentity
from gpustats.model.snapshot import (
    ContainerAccelerator, ContainerStats, DeviceStats, PodAccelerator, PodStats, ProcessStats,
)
from gpustats.model.tenants import service_tenant
from tests.support.fakehost import write_scenario
from tests.support.gpus import GPU_A as GPU, device
from tests.support.simulated import start_simulated
from tests.support.snapshots import A, B, C3, M, sample_snapshot

# Kepler's collector's GPU families (power_collector.go, gpuinfo.go), as test data naming
# where they were read: exposed name -> (TYPE, labels besides node_name, only while > 0).
TABLE = json.loads((Path(__file__).parent / "peers" / "kepler_gpu_families.json").read_text())
KEPLER = {name: (kind, set(labels), positive)
          for name, (kind, labels, positive) in TABLE["families"].items()}

GONE = "4" * 64                      # a Docker container that ended, its counter kept


def kepler_snapshot():
    """The sample snapshot (a time-sliced GPU A, lost GPU B, MIG GPU M; pod u1's trainer and
    MIG sidecar; a Docker container C3) plus: process 5000 and the sidecar on both MIG
    instances 7 and 8 of M, a systemd service's process on instance 8, a Docker container
    that ended (``GONE``) and a pod that ended (``u2``), their counters kept."""
    s = sample_snapshot()
    service = service_tenant("ollama.service", "/system.slice/ollama.service")
    ollama = ContainerStats(service.key, tenant=service, accelerators=(ContainerAccelerator(
        M, gpu_instance_id=8, attributed_power_watts=5.0, attributed_energy_joules=7.0),))
    gone = ContainerStats(GONE, "old-web", None, ended=True, accelerators=(ContainerAccelerator(
        A, attributed_power_watts=None, attributed_energy_joules=90.0),))
    ended_pod = PodStats("u2", "done-0", "ml", ended=True,
                         accelerators=(PodAccelerator(A, 0.0, 40.0),))
    pod = s.pods[0]
    trainer, sidecar = pod.containers
    sidecar = dataclasses.replace(sidecar, accelerators=sidecar.accelerators + (
        ContainerAccelerator(M, gpu_instance_id=8, attributed_power_watts=20.0,
                             attributed_energy_joules=10.0),))
    pod = dataclasses.replace(pod, containers=(trainer, sidecar))
    processes = (dataclasses.replace(s.processes[0], comm="train.py", uid=1000, user="alice"),
                 *s.processes[1:],
                 ProcessStats(5000, M, 8, s.processes[2].container_id, None, 30.0,
                              "mig-activity", 20.0, 10.0),
                 ProcessStats(6000, M, 8, service.key, None, None, "mig-activity", 5.0, 7.0,
                              comm="ollama", uid=998))
    return dataclasses.replace(s, pods=(pod, ended_pod), containers=s.containers + (ollama, gone),
                               processes=processes)


def text_of(snapshot, **kwargs) -> str:
    return render(snapshot, None, kepler_compat=True, **kwargs)[0].decode()


def kepler_samples(text: str) -> dict[str, list]:
    """Every kepler_* sample by its name."""
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("kepler_"):
                out.setdefault(s.name, []).append(s)
    return out


def one(samples: list, **labels: str):
    found = [s for s in samples if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (labels, found)
    return found[0]


# ------------------------------------------------------------------------ the vocabulary

def test_the_label_table_names_its_origin():
    origin = TABLE["origin"]
    assert origin["repository"] == "sustainable-computing-io/kepler" and origin["commit"]
    assert any(p.endswith("power_collector.go") for p in origin["paths"])


def test_every_family_has_keplers_name_type_and_labels():
    text = text_of(kepler_snapshot())
    samples = kepler_samples(text)
    assert set(samples) == set(KEPLER)
    for name, (kind, labels, _) in KEPLER.items():
        assert f"# TYPE {name} {kind}\n" in text, name
        for s in samples[name]:
            assert set(s.labels) == labels | {"node_name"}, (name, s.labels)
            assert s.labels["node_name"] == "node-1"


def test_the_table_declares_exactly_those_families():
    exposed = {f.name + ("_total" if f.kind == metric_table.COUNTER else "")
               for f in kepler_table.FAMILIES}
    assert exposed == set(KEPLER)
    for f in kepler_table.FAMILIES:
        assert f.group == metric_table.KEPLER and f.scope in prometheus.ROWS, f.name
        assert f.name not in metric_table.BY_NAME, f.name
    assert metric_table.KEPLER in metric_table.GROUPS


def test_node_series():
    samples = kepler_samples(text_of(kepler_snapshot()))
    info = one(samples["kepler_node_gpu_info"], gpu="2")
    assert info.value == 1 and info.labels == {
        "node_name": "node-1", "gpu": "2", "gpu_uuid": M, "gpu_name": "NVIDIA H100 80GB HBM3",
        "vendor": "nvidia"}
    assert len(samples["kepler_node_gpu_info"]) == 3      # the lost GPU too
    assert one(samples["kepler_node_gpu_watts"], gpu_uuid=A).value == 310.0
    assert one(samples["kepler_node_gpu_idle_watts"], gpu_uuid=A).value == 70.0
    assert one(samples["kepler_node_gpu_active_watts"], gpu_uuid=A).value == 240.0
    assert one(samples["kepler_node_gpu_joules_total"], gpu_uuid=A).value == 1000.0
    assert one(samples["kepler_node_gpu_active_joules_total"], gpu_uuid=A).value == 800.0
    assert one(samples["kepler_node_gpu_idle_joules_total"], gpu_uuid=A).value == 200.0
    # Absent is no sample, never 0: M has no idle or active figure, the lost B none at all.
    for name in ("kepler_node_gpu_idle_watts", "kepler_node_gpu_active_joules_total",
                 "kepler_node_gpu_idle_joules_total"):
        assert [s.labels["gpu_uuid"] for s in samples[name]] == [A], name
    assert B not in {s.labels["gpu_uuid"] for s in samples["kepler_node_gpu_watts"]}


def test_idle_joules_are_the_devices_idle_energy():
    s = sample_snapshot()
    a = dataclasses.replace(s.devices[0], idle_energy_joules=0.2)
    text = text_of(dataclasses.replace(s, devices=(a,)))
    assert one(kepler_samples(text)["kepler_node_gpu_idle_joules_total"]).value == 0.2


def test_process_series():
    samples = kepler_samples(text_of(kepler_snapshot()))
    joules = samples["kepler_process_gpu_joules_total"]
    trainer = one(joules, pid="4242")
    assert trainer.value == 600.0
    assert trainer.labels == {
        "node_name": "node-1", "pid": "4242", "comm": "train.py", "exe": "", "type": "container",
        "state": "running", "container_id": "1" * 64, "vm_id": ""}
    # A service's process is in no container: Kepler's "regular", no container_id.
    ollama = one(joules, pid="6000")
    assert (ollama.labels["type"], ollama.labels["container_id"], ollama.value) == \
        ("regular", "", 7.0)
    # One process on two MIG instances of one GPU: one series, their sum.
    assert one(joules, pid="5000").value == 60.0
    assert one(samples["kepler_process_gpu_watts"], pid="5000").value == 120.0


def test_container_series_and_their_state():
    samples = kepler_samples(text_of(kepler_snapshot()))
    joules, watts = samples["kepler_container_gpu_joules_total"], samples[
        "kepler_container_gpu_watts"]
    trainer = one(joules, container_id="1" * 64)
    assert trainer.labels == {
        "node_name": "node-1", "container_id": "1" * 64, "container_name": "trainer",
        "runtime": "containerd", "state": "running", "pod_id": "u1"}
    assert one(joules, container_id=C3).labels["pod_id"] == ""
    # The sidecar on two instances of M: one series, their sum.
    assert one(joules, container_id="2" * 64).value == 60.0
    assert one(watts, container_id="2" * 64).value == 120.0
    # Ended, its counter kept: terminated, joules and no watts; runtime Kepler's "unknown".
    gone = one(joules, container_id=GONE)
    assert (gone.labels["state"], gone.labels["runtime"], gone.value) == \
        ("terminated", "unknown", 90.0)
    assert not [s for s in watts if s.labels["container_id"] == GONE]
    # Tenants that are no container (the service) are no Kepler container.
    assert all(not s.labels["container_id"].startswith("service:") for s in joules)


def test_pod_series_and_their_state():
    samples = kepler_samples(text_of(kepler_snapshot()))
    joules, watts = samples["kepler_pod_gpu_joules_total"], samples["kepler_pod_gpu_watts"]
    live = one(joules, pod_id="u1")
    assert live.labels == {"node_name": "node-1", "pod_id": "u1", "pod_name": "trainer-0",
                           "pod_namespace": "ml", "state": "running"}
    # Its GPUs summed: the trainer's 600 J on A and the sidecar's on M's instances.
    pod = kepler_snapshot().pods[0]
    assert live.value == sum(a.attributed_energy_joules for a in pod.accelerators)
    ended = one(joules, pod_id="u2")
    assert (ended.labels["state"], ended.value) == ("terminated", 40.0)
    assert not [s for s in watts if s.labels["pod_id"] == "u2"]


def test_a_workload_series_exists_only_while_above_zero():
    s = kepler_snapshot()
    idle = ProcessStats(7000, A, attributed_power_watts=0.0, attributed_energy_joules=0.0)
    warm = ProcessStats(7001, A, attributed_power_watts=0.0, attributed_energy_joules=3.0)
    samples = kepler_samples(text_of(dataclasses.replace(
        s, processes=s.processes + (idle, warm))))
    assert not [x for name in ("kepler_process_gpu_joules_total", "kepler_process_gpu_watts")
                for x in samples[name] if x.labels["pid"] == "7000"]
    assert one(samples["kepler_process_gpu_joules_total"], pid="7001").value == 3.0
    assert not [x for x in samples["kepler_process_gpu_watts"] if x.labels["pid"] == "7001"]
    for name, (_, _, positive) in KEPLER.items():
        if positive:
            assert all(x.value > 0 for x in samples[name]), name


def test_a_process_on_gpus_of_two_vendors_is_one_series():
    s = sample_snapshot()
    amd = DeviceStats(DeviceIdentity(0, "amd-0000:03:00.0", "AMD Instinct MI300X",
                                     vendor="amd"), power_watts=200.0)
    on_a = dataclasses.replace(s.processes[0], attributed_power_watts=1.0,
                               attributed_energy_joules=2.0)
    on_amd = dataclasses.replace(on_a, device_uuid="amd-0000:03:00.0",
                                 attributed_power_watts=3.0, attributed_energy_joules=4.0)
    samples = kepler_samples(text_of(dataclasses.replace(
        s, devices=s.devices + (amd,), processes=(on_a, on_amd))))
    assert one(samples["kepler_node_gpu_watts"], gpu="0", vendor="amd").value == 200.0
    assert one(samples["kepler_process_gpu_joules_total"], pid=str(on_a.pid)).value == 6.0
    assert one(samples["kepler_process_gpu_watts"], pid=str(on_a.pid)).value == 4.0


def test_a_per_pod_panel_draws_one_line_per_pod():
    """Kepler's per-pod GPU panel plots ``kepler_pod_gpu_watts`` (and the rate of its joules)
    without aggregating, legend ``{{pod_namespace}}/{{pod_name}}``: one series per pod, a pod
    on several GPUs and MIG instances included."""
    s = kepler_snapshot()
    samples = kepler_samples(text_of(s))
    for name in ("kepler_pod_gpu_watts", "kepler_pod_gpu_joules_total"):
        legends = [f'{x.labels["pod_namespace"]}/{x.labels["pod_name"]}' for x in samples[name]
                   if x.labels["state"] == "running"]
        assert sorted(legends) == sorted(set(legends)), name
        assert "ml/trainer-0" in legends, name


# ------------------------------------------------------------------------ switching it

def test_off_by_default_and_ours_unchanged_with_it_on():
    s = kepler_snapshot()
    off = render(s, None)[0].decode()
    assert "kepler_" not in off
    on = text_of(s)
    kept = "".join(line for line in on.splitlines(keepends=True) if "kepler_" not in line)
    assert kept == off


def test_disable_metrics_kepler_leaves_them_out():
    s = kepler_snapshot()
    assert text_of(s, disabled_groups=("kepler",)) == render(s, None)[0].decode()
    # Kepler's process series are its group's, not the process group's.
    assert "kepler_process_gpu_joules_total{" in text_of(s, disabled_groups=("process",))


def test_the_kepler_scopes_are_not_walked_when_off(monkeypatch):
    walked = []
    real = prometheus.ROWS[kepler_table.KEPLER_PROCESS]
    monkeypatch.setitem(prometheus.ROWS, kepler_table.KEPLER_PROCESS,
                        lambda *args: walked.append(1) or real(*args))
    render(kepler_snapshot(), None)
    text_of(kepler_snapshot(), disabled_groups=("kepler",))
    assert walked == []
    text_of(kepler_snapshot())
    assert walked == [1]


def test_with_dcgm_compat_and_openmetrics():
    s = kepler_snapshot()
    body, content_type = render(s, "application/openmetrics-text; version=1.0.0",
                                dcgm_compat=True, kepler_compat=True)
    text = body.decode()
    assert content_type.startswith("application/openmetrics-text")
    assert text.endswith("# EOF\n") and text.count("# EOF") == 1
    assert text.index("kepler_pod_gpu_watts") < text.index("DCGM_FI_DEV_XID_ERRORS")
    names = {f.name for f in openmetrics_families(text)}
    assert {"kepler_node_gpu_joules", "kepler_pod_gpu_watts"} <= names


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_check_metrics_is_clean():
    result = subprocess.run(["promtool", "check", "metrics"],
                            input=text_of(kepler_snapshot()).encode(), capture_output=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def _resolve(argv=(), env=None):
    return resolve(build_arg_parser().parse_args(list(argv)), env or {})


def test_the_option(tmp_path):
    assert _resolve().kepler_compat is False
    assert _resolve(["--kepler-compat"]).kepler_compat is True
    assert _resolve(["--kepler-compat=false"], {"GPUSTATS_KEPLER_COMPAT": "true"}) \
        .kepler_compat is False
    assert _resolve([], {"GPUSTATS_KEPLER_COMPAT": "on"}).kepler_compat is True
    cfg = tmp_path / "c.yaml"
    cfg.write_text("kepler_compat: true\ndisable_metrics: [kepler]\n")
    config = _resolve(["--config", str(cfg)])
    assert config.kepler_compat is True and config.disable_metrics == ("kepler",)
    cfg.write_text("kepler_compat: [1]\n")
    with pytest.raises(ConfigError, match="kepler_compat in"):
        _resolve(["--config", str(cfg)])


# ------------------------------------------------------------------------ end to end

WEB = fakehost.container_id(0xD0C)
TRAINER = fakehost.container_id(1)
POD_UID = fakehost.pod_uid(1)
ARGS = ("--housekeeping-interval", "0.2", "--pod-resources-socket", "", "--runtime-socket", "",
        "--idle-power-watts", "100", "--counter-retention", "600", "--kepler-compat")


def _host(root):
    """A pod's containerd container running PID 101 (``python3``), named by the kubelet's log
    layout, and a Docker container ``web`` running PID 102 (``gunicorn``)."""
    cgroup, proc, host, logs = root / "cgroup", root / "proc", root / "host", root / "logs"
    fakehost.start_cgroup_tree(cgroup)
    fakehost.copy_node_files(proc)
    placement = {101: (fakehost.container_cgroup(POD_UID, TRAINER), "python3"),
                 102: (fakehost.docker_cgroup(WEB), "gunicorn")}
    for pid, (rel, comm) in placement.items():
        fakehost.add_container(cgroup, rel)
        fakehost.add_process_files(proc, pid, fakehost.v2_cgroup_lines(rel), comm, 1000)
    fakehost.add_docker_container(host, WEB, "web")
    fakehost.add_log_names(logs, "ml", "trainer-0", POD_UID, "main", TRAINER)
    return cgroup, proc, host, logs


def _scenario(pids):
    return {"devices": [device(power_watts=400)],
            "processes": [{"pid": pid, "device": GPU, "sm_util_percent": 40} for pid in pids]}


def _series(text: str, name: str, **labels: str) -> list:
    return [s for s in kepler_samples(text).get(name, ())
            if all(s.labels.get(k) == v for k, v in labels.items())]


def _promtool_clean(text: str) -> None:
    if shutil.which("promtool") is None:
        return
    result = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_state_goes_from_running_to_terminated_through_the_daemon(start_daemon, tmp_path):
    cgroup, proc, host, logs = _host(tmp_path / "node")
    daemon, path = start_simulated(start_daemon, tmp_path, _scenario((101, 102)),
                                   (cgroup, proc), "--host-root", str(host), "--log-root",
                                   str(logs), *ARGS)

    def running(text: str):
        pod = _series(text, "kepler_pod_gpu_joules_total", pod_id=POD_UID, state="running")
        web = _series(text, "kepler_container_gpu_joules_total", container_id=WEB,
                      state="running")
        return text if pod and web and pod[0].value > 50 and web[0].value > 50 else None

    text = daemon.wait_for(running, path="/metrics", timeout=40)
    _promtool_clean(text)
    pod = _series(text, "kepler_pod_gpu_joules_total", pod_id=POD_UID)[0]
    assert (pod.labels["pod_name"], pod.labels["pod_namespace"]) == ("trainer-0", "ml")
    assert "gpu" not in pod.labels and "vendor" not in pod.labels
    web = _series(text, "kepler_container_gpu_joules_total", container_id=WEB)[0]
    assert (web.labels["container_name"], web.labels["runtime"], web.labels["pod_id"]) == \
        ("web", "docker", "")
    trainer = _series(text, "kepler_container_gpu_joules_total", container_id=TRAINER)[0]
    assert (trainer.labels["container_name"], trainer.labels["runtime"],
            trainer.labels["pod_id"]) == ("main", "containerd", POD_UID)
    process = _series(text, "kepler_process_gpu_joules_total", pid="102")[0]
    assert (process.labels["comm"], process.labels["type"], process.labels["container_id"],
            process.labels["state"]) == ("gunicorn", "container", WEB, "running")
    assert _series(text, "kepler_pod_gpu_watts", pod_id=POD_UID, state="running")
    assert _series(text, "kepler_node_gpu_info", gpu_uuid=GPU)
    # Each node figure: whole = active + idle (to the millijoule).
    whole = _series(text, "kepler_node_gpu_joules_total")[0].value
    active = _series(text, "kepler_node_gpu_active_joules_total")[0].value
    idle = _series(text, "kepler_node_gpu_idle_joules_total")[0].value
    assert whole == pytest.approx(active + idle, abs=0.002)

    # Both processes end: gone from the scenario, /proc and their cgroups (the pod's too).
    write_scenario(path, _scenario(()))
    shutil.rmtree(proc / "101")
    shutil.rmtree(proc / "102")
    shutil.rmtree(cgroup / fakehost.docker_cgroup(WEB))
    shutil.rmtree((cgroup / fakehost.container_cgroup(POD_UID, TRAINER)).parent)

    def terminated(text: str):
        return text if _series(text, "kepler_pod_gpu_joules_total", pod_id=POD_UID,
                               state="terminated") and \
            _series(text, "kepler_container_gpu_joules_total", container_id=WEB,
                    state="terminated") else None

    after = daemon.wait_for(terminated, path="/metrics", timeout=30)
    _promtool_clean(after)
    # One series each, the counter kept (never lower), and no power sample once terminated.
    for name, labels, before in (
            ("kepler_pod_gpu", {"pod_id": POD_UID}, pod.value),
            ("kepler_container_gpu", {"container_id": WEB}, web.value)):
        joules = _series(after, name + "_joules_total", **labels)
        assert len(joules) == 1 and joules[0].value >= before, joules
        assert not _series(after, name + "_watts", **labels), name
    # An ended process too: terminated, its energy kept, no power sample.
    for pid in ("101", "102"):
        joules = _series(after, "kepler_process_gpu_joules_total", pid=pid)
        assert [s.labels["state"] for s in joules] == ["terminated"], joules
        assert joules[0].value > 0
        assert not _series(after, "kepler_process_gpu_watts", pid=pid)
