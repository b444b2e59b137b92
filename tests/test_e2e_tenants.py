"""Identities users bill by, end to end through the real daemon: MIG tenants see their own MIG
device, a share-method change keeps the process counter's series, nameless pods stay out of
``pods[]`` until a name source names them (and metrics-server 0.5 keeps every named pod), and
the summary decodes as the kubelet's Go types."""

import json
import urllib.request
from functools import partial

import pytest

from gpustats.sources.runtime import cri_api_pb2 as cri
from gpustats.sources.runtime import cri_api_pb2_grpc as cri_grpc
from tests.support.dcgm_exporter import Exporter
from tests.support.fakehost import (
    build, container_id, containers_by_id, metric_value, pod_uid, write_scenario,
)
from tests.support import gpus
from tests.support.gpus import GPU_B as GPU
from tests.support.grpc_servers import serve_unix
from tests.support.kubelet_go import DecodeError
from tests.support.simulated import start_simulated

MIG7, MIG8 = "MIG-bbbbbbbb-2222-4222-8222-000000000007", "MIG-bbbbbbbb-2222-4222-8222-000000000008"
GIB = 1 << 30
ARGS = ("--housekeeping-interval", "0.2", "--pod-resources-socket", "",
        "--idle-power-watts", "100")


device = partial(gpus.device, uuid=GPU, memory_total_bytes=80 * GIB)


def start(start_daemon, tmp_path, scenario, placement, *extra, runtime_socket=""):
    return start_simulated(start_daemon, tmp_path, scenario, build(tmp_path / "host", placement),
                           "--runtime-socket", runtime_socket, *ARGS, *extra)


# ------------------------------------------------------------------ MIG tenants

def mig_scenario(gpm: bool) -> dict:
    def instance(gi, profile, uuid, gib, gpm_percent):
        out = {"gpu_instance_id": gi, "profile": profile, "uuid": uuid,
               "memory_total_bytes": gib * GIB}
        if gpm:
            out["gpm"] = {"graphics_active_percent": gpm_percent}
        return out
    return {
        "devices": [device(mig_instances=[instance(7, "3g.40gb", MIG7, 40, 10),
                                          instance(8, "2g.20gb", MIG8, 20, 30)],
                           **({"gpm": {"sm_active_percent": 50}} if gpm else {}))],
        "processes": [
            {"pid": 101, "device": GPU, "gpu_instance_id": 7, "memory_used_bytes": GIB},
            {"pid": 102, "device": GPU, "gpu_instance_id": 8, "memory_used_bytes": GIB // 2}]}


def test_mig_tenants_see_their_own_mig_device(start_daemon, tmp_path):
    # Instance 7's activity comes from dcgm-exporter (0.8, ahead of its GPM 10 %), instance
    # 8's from GPM (30 %): the exporter has no series for it.
    exporter = Exporter()
    exporter.body = ("# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge\n"
                     f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{UUID="{GPU}",GPU_I_ID="7"}} 0.8\n').encode()
    try:
        daemon, path = start(start_daemon, tmp_path, mig_scenario(gpm=True),
                             {101: (1, 1), 102: (2, 2)}, "--dcgm-exporter-url", exporter.url)

        def tenants(s):
            found = containers_by_id(s)
            accs = [found[container_id(n)]["accelerators"][0]
                    for n in (1, 2) if "accelerators" in found.get(container_id(n), {})]
            return accs if len(accs) == 2 and all("dutyCycle" in a for a in accs) else None

        one, two = tenants(daemon.wait_for(tenants, timeout=20))
        assert {k: one[k] for k in ("id", "parentId", "memoryTotal", "memoryUsed",
                                    "dutyCycle", "gpuInstanceId", "migProfile")} == {
            "id": MIG7, "parentId": GPU, "memoryTotal": 40 * GIB, "memoryUsed": GIB,
            "dutyCycle": 80, "gpuInstanceId": 7, "migProfile": "3g.40gb"}
        assert {k: two[k] for k in ("id", "parentId", "memoryTotal", "memoryUsed",
                                    "dutyCycle", "gpuInstanceId")} == {
            "id": MIG8, "parentId": GPU, "memoryTotal": 20 * GIB, "memoryUsed": GIB // 2,
            "dutyCycle": 30, "gpuInstanceId": 8}
        assert one["make"] == "nvidia" and one["model"] == "NVIDIA H100 80GB HBM3"

        text = daemon.get("/metrics")[1]
        for cid, mig, duty, used, total in ((container_id(1), MIG7, 80, GIB, 40 * GIB),
                                            (container_id(2), MIG8, 30, GIB // 2, 20 * GIB)):
            labels = {"acc_id": mig, "name": cid, "make": "nvidia"}
            assert metric_value(text, "container_accelerator_duty_cycle", **labels) == duty
            assert metric_value(text, "container_accelerator_memory_used_bytes",
                                **labels) == used
            assert metric_value(text, "container_accelerator_memory_total_bytes",
                                **labels) == total
            assert metric_value(text, "container_accelerator_memory_total_bytes",
                                acc_id=GPU, name=cid) is None     # never the whole GPU

        # GPM goes away: instance 8 has no activity source left, so its duty cycle is absent
        # (never 0); instance 7 keeps the exporter's.
        write_scenario(path, mig_scenario(gpm=False))
        summary = daemon.wait_for(
            lambda s: "dutyCycle" not in containers_by_id(s)[container_id(2)]["accelerators"][0],
            timeout=20)
        acc = containers_by_id(summary)[container_id(2)]["accelerators"][0]
        assert acc["id"] == MIG8 and acc["memoryTotal"] == 20 * GIB
        assert containers_by_id(summary)[container_id(1)]["accelerators"][0]["dutyCycle"] == 80
        text = daemon.get("/metrics")[1]
        assert metric_value(text, "container_accelerator_duty_cycle", acc_id=MIG8) is None
        assert metric_value(text, "container_accelerator_memory_used_bytes",
                            acc_id=MIG8) == GIB // 2
    finally:
        exporter.close()


# ------------------------------------------------------------------ counter series

def test_share_method_change_keeps_the_counter_series(start_daemon, tmp_path):
    plain = {"devices": [device()], "processes": [{"pid": 101, "device": GPU},
                                                  {"pid": 102, "device": GPU}]}
    daemon, path = start(start_daemon, tmp_path, plain, {101: (1, 1), 102: (2, 2)})

    def joules(text):
        return metric_value(text, "gpustats_process_gpu_joules_total", pid="101")

    def method(text):
        """The share-method series of pid 101 (one line per method shown)."""
        return [s for s in text.splitlines()
                if s.startswith("gpustats_process_gpu_share_method{") and 'pid="101"' in s]

    text = daemon.wait_for(lambda t: (joules(t) or 0) > 50, path="/metrics")
    assert len(method(text)) == 1 and 'method="equal-split"' in method(text)[0]
    before = joules(text)

    write_scenario(path, {"devices": [device()], "processes": [
        {"pid": 101, "device": GPU, "sm_util_percent": 75},
        {"pid": 102, "device": GPU, "sm_util_percent": 25}]})
    text = daemon.wait_for(lambda t: any('method="sm-utilization"' in m for m in method(t)),
                           path="/metrics", timeout=20)
    assert len(method(text)) == 1                   # one method at a time, never two series
    after = joules(text)                            # the one series, never a new one
    assert after is not None and after >= before
    for name in ("gpustats_process_gpu_joules_total", "gpustats_process_gpu_watts"):
        series = [s for s in text.splitlines() if s.startswith(name + "{")]
        assert series and all("share_method" not in s and "method=" not in s for s in series)
    # It keeps growing on the same series after the change.
    later = daemon.wait_for(lambda t: (joules(t) or 0) > after + 20, path="/metrics")
    assert len([s for s in later.splitlines()
                if s.startswith('gpustats_process_gpu_joules_total{') and 'pid="101"' in s]) == 1


# ------------------------------------------------------------------ nameless pods

class _Runtime(cri_grpc.RuntimeServiceServicer):
    """A CRI runtime that knows pod 1's container only."""

    def ListContainers(self, request, context):
        return cri.ListContainersResponse(containers=[
            cri.Container(id=container_id(1), labels={
                "io.kubernetes.pod.name": "trainer-0", "io.kubernetes.pod.namespace": "ml",
                "io.kubernetes.pod.uid": pod_uid(1),
                "io.kubernetes.container.name": "trainer"})])


def metrics_server_05_pods(summary: dict) -> set[tuple[str, str]]:
    """The pods metrics-server 0.5's summary decoder keeps (its ``decode.go`` rules): a pod is
    dropped whole when one container lacks ``startTime`` or CPU time, or has a zero or missing
    cumulative CPU or working set."""
    kept = set()
    for pod in summary["pods"]:
        ok = True
        for c in pod["containers"]:
            cpu, memory = c.get("cpu") or {}, c.get("memory") or {}
            if not c.get("startTime") or not cpu.get("time") \
                    or not cpu.get("usageCoreNanoSeconds") or not memory.get("workingSetBytes"):
                ok = False
        if ok:
            kept.add((pod["podRef"]["namespace"], pod["podRef"]["name"]))
    return kept


def test_nameless_pods_stay_out_of_pods_until_named(start_daemon, tmp_path):
    socket_path = tmp_path / "containerd.sock"          # absent at first: no name source
    scenario = {"devices": [device()], "processes": [{"pid": 101, "device": GPU},
                                                     {"pid": 102, "device": GPU}]}
    daemon, _ = start(start_daemon, tmp_path, scenario, {101: (1, 1), 102: (2, 2)},
                      runtime_socket=str(socket_path))

    def loose(s):
        return {c.get("podUid"): c for c in s.get("containers", ())}

    summary = daemon.wait_for(lambda s: len(loose(s)) == 2 and all(
        "accelerators" in c for c in loose(s).values()))
    assert summary["pods"] == []           # never podRef {"name": "", "namespace": ""}
    for n in (1, 2):
        c = loose(summary)[pod_uid(n)]
        assert c["id"] == container_id(n) and "name" not in c
        assert c["accelerators"][0]["id"] == GPU and c["cpu"] and c["memory"]

    server = serve_unix(socket_path,
                        lambda s: cri_grpc.add_RuntimeServiceServicer_to_server(_Runtime(), s))
    try:
        # The runtime is asked again at most every 10 s; pod 1 moves into pods[] by name.
        summary = daemon.wait_for(lambda s: len(s["pods"]) == 1, timeout=25)
        pod = summary["pods"][0]
        assert pod["podRef"] == {"name": "trainer-0", "namespace": "ml", "uid": pod_uid(1)}
        assert [c["name"] for c in pod["containers"]] == ["trainer"]
        assert pod["accelerators"][0]["id"] == GPU
        assert list(loose(summary)) == [pod_uid(2)]       # still nameless
        # metrics-server 0.5 asks for CPU and memory only, and keeps every named pod.
        status, only = daemon.get("/stats/summary?only_cpu_and_memory=true")
        assert status == 200
        assert metrics_server_05_pods(only) == {("ml", "trainer-0")}
        assert len(only["pods"]) == 1
    finally:
        server.stop(0)


def test_metrics_server_rule_drops_a_pod_missing_figures():
    pod = {"podRef": {"name": "p", "namespace": "n", "uid": "u"},
           "containers": [{"name": "c", "startTime": "2026-01-01T00:00:00Z",
                           "cpu": {"time": "2026-01-01T00:00:00Z", "usageCoreNanoSeconds": 5},
                           "memory": {"time": "2026-01-01T00:00:00Z", "workingSetBytes": 0}}]}
    assert metrics_server_05_pods({"pods": [pod]}) == set()
    pod["containers"][0]["memory"]["workingSetBytes"] = 1
    assert metrics_server_05_pods({"pods": [pod]}) == {("n", "p")}



# ------------------------------------------------------------------ the kubelet's Go types

def test_summary_decodes_as_the_kubelets_go_types(start_daemon, tmp_path, kubelet_decoder):
    socket_path = tmp_path / "containerd.sock"
    server = serve_unix(socket_path,
                        lambda s: cri_grpc.add_RuntimeServiceServicer_to_server(_Runtime(), s))
    exporter = Exporter()
    exporter.body = ("# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge\n"
                     f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{UUID="{GPU}",GPU_I_ID="7"}} 0.8\n').encode()
    try:
        daemon, _ = start(start_daemon, tmp_path, mig_scenario(gpm=True),
                          {101: (1, 1), 102: (2, 2)}, "--dcgm-exporter-url", exporter.url,
                          runtime_socket=str(socket_path))
        daemon.wait_for(lambda s: len(s["pods"]) == 1 and "dutyCycle" in
                        s["pods"][0]["containers"][0].get("accelerators", [{}])[0])
        for query in ("", "?only_cpu_and_memory=true"):
            with urllib.request.urlopen(daemon.base + "/stats/summary" + query,
                                        timeout=5) as resp:
                seen = kubelet_decoder(resp.read())
            assert seen["node"]["nodeName"]
            assert [p["podRef"] for p in seen["pods"]] == [
                {"name": "trainer-0", "namespace": "ml", "uid": pod_uid(1)}]
            container = seen["pods"][0]["containers"][0]
            assert container["name"] == "trainer" and container["cpu"]["usageCoreNanoSeconds"]
            if query:
                assert "accelerators" not in container
            else:
                assert container["accelerators"] == [{
                    "make": "nvidia", "model": "NVIDIA H100 80GB HBM3", "id": MIG7,
                    "memoryTotal": 40 * GIB, "memoryUsed": GIB, "dutyCycle": 80}]
        # The default body carries extensions, so a strict client refuses it ...
        with (urllib.request.urlopen(daemon.base + "/stats/summary", timeout=5) as resp,
              pytest.raises(DecodeError, match='unknown field "accelerators"')):
            kubelet_decoder(resp.read(), strict=True)
        # ... and strict=true (query or POST form) is what it reads: a MIG tenant, a nameless
        # pod's container (top-level in the default body) and node GPUs all present.
        for query, form in (("?strict=true", None), ("", b"strict=true"),
                            ("?strict=true&only_cpu_and_memory=true", None)):
            request = urllib.request.Request(daemon.base + "/stats/summary" + query, data=form)
            with urllib.request.urlopen(request, timeout=5) as resp:
                raw = resp.read()
            seen = kubelet_decoder(raw, strict=True)
            body = json.loads(raw)
            assert set(body) == {"node", "pods"} and "accelerators" not in body["node"]
            assert [p["podRef"]["name"] for p in seen["pods"]] == ["trainer-0"]
            assert "accelerators" not in body["pods"][0]
            container = seen["pods"][0]["containers"][0]
            if "only_cpu_and_memory" in query:
                assert "accelerators" not in container
            else:
                assert body["pods"][0]["containers"][0]["accelerators"] == [{
                    "make": "nvidia", "model": "NVIDIA H100 80GB HBM3", "id": MIG7,
                    "memoryTotal": 40 * GIB, "memoryUsed": GIB, "dutyCycle": 80}]
    finally:
        exporter.close()
        server.stop(0)
