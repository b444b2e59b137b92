"""``--dcgm-compat`` on shared GPUs, through a real Prometheus scraping the daemon the way the
shipped ServiceMonitor does and the way it does with the ``dcgm-exporter-scrape-labels``
component (``honorLabels: false``, as dcgm-exporter's chart scrapes).

The node: GPU 0 time-sliced by two pods (the device plugin's ``<uuid>::0`` and ``::1``
replicas, which become dcgm-exporter's ``vgpu`` label), a MIG GPU whose instance 7 a third pod holds
and whose instance 9 is idle and held by nobody. The node label is asked for by its main-branch name
(``hostname``) through the environment. Per-pod DCGM series must exist for both pods of the shared
GPU (``sum by (pod)`` keeps it), under ``exported_pod`` with the component (gpustats' own series
keep ``pod``), and the idle instance's memory must be there, observed as 0.
"""

from __future__ import annotations

import shutil

import pytest
import yaml

from tests.support.daemon import DaemonProcess
from tests.support.fakehost import build, container_id, pod_uid, write_scenario
from tests.support.gpus import (
    DCGM_MIG_GPU as GPU1, DCGM_MIG_INSTANCE_7 as MIG7, DCGM_WHOLE_GPU as GPU0,
)
from tests.support.grpc_servers import serve_unix
from tests.support.kubelet_logs import layout
from tests.support.paths import REPO_ROOT
from tests.support.prometheus import PrometheusServer
from tests.support.servicemonitor import TARGET_LABELS, operator_job

grpc = pytest.importorskip("grpc")
from gpustats.sources.podresources import podresources_api_pb2 as api  # noqa: E402
from gpustats.sources.podresources import podresources_api_pb2_grpc as api_grpc  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None,
                                reason="prometheus not installed")

NODE = "gpu-node-7"
GIB = 1 << 30
COMPONENT = REPO_ROOT / "manifests" / "components" / "dcgm-exporter-scrape-labels"

SCENARIO = {
    "devices": [
        {"uuid": GPU0, "minor": 0, "memory_total_bytes": 80 * GIB,
         "memory_used_bytes": 20 * GIB, "utilization_percent": 87, "power_watts": 400},
        {"uuid": GPU1, "minor": 1, "power_watts": 300,
         "mig_instances": [
             {"gpu_instance_id": 7, "profile": "1g.10gb", "memory_total_bytes": 10 * GIB,
              "uuid": MIG7},
             {"gpu_instance_id": 9, "profile": "1g.10gb", "memory_total_bytes": 10 * GIB},
         ]},
    ],
    "processes": [
        {"pid": 101, "device": GPU0, "sm_util_percent": 50, "memory_used_bytes": 4 * GIB},
        {"pid": 102, "device": GPU0, "sm_util_percent": 30, "memory_used_bytes": 2 * GIB},
        {"pid": 103, "device": GPU1, "gpu_instance_id": 7, "memory_used_bytes": 3 * GIB},
    ],
}
PODS = {("ml", "infer-a", 1, "a"): [f"{GPU0}::0"], ("web", "infer-b", 2, "b"): [f"{GPU0}::1"],
        ("serving", "embed-0", 3, "server"): [MIG7]}


class _Kubelet(api_grpc.PodResourcesListerServicer):
    def List(self, request, context):
        def pod(namespace, name, container, ids):
            resource = "nvidia.com/mig-1g.10gb" if ids[0].startswith("MIG-") \
                else "nvidia.com/gpu"
            return api.PodResources(name=name, namespace=namespace, containers=[
                api.ContainerResources(name=container, devices=[
                    api.ContainerDevices(resource_name=resource, device_ids=ids)])])
        return api.ListPodResourcesResponse(pod_resources=[
            pod(ns, name, container, ids) for (ns, name, _, container), ids in PODS.items()])


def _component_endpoint(endpoint: dict) -> dict:
    """The ServiceMonitor endpoint with the component's JSON patch applied (the operations
    it uses: replace, remove and add, on paths below the first endpoint)."""
    component = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    (patch,) = component["patches"]
    assert patch["target"]["kind"] == "ServiceMonitor" and patch["target"]["name"] == "gpustats"
    patched = dict(endpoint)
    for op in yaml.safe_load(patch["patch"]):
        prefix = "/spec/endpoints/0/"
        assert op["path"].startswith(prefix), op
        key = op["path"][len(prefix):]
        if op["op"] == "replace":
            assert key in patched, op
            patched[key] = op["value"]
        elif op["op"] == "remove":
            del patched[key]
        elif op["op"] == "add":
            assert key not in patched, op
            patched[key] = op["value"]
        else:
            raise AssertionError(f"unexpected patch operation {op}")
    return patched


def _job(endpoint: dict, target: str, name: str) -> dict:
    job = operator_job(endpoint, target, name)
    job["static_configs"][0]["labels"] = {**TARGET_LABELS, "job": name}
    return job


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("dcgm-shared")
    socket_path = workdir / "kubelet.sock"
    kubelet = serve_unix(socket_path,
                         lambda s: api_grpc.add_PodResourcesListerServicer_to_server(_Kubelet(), s))
    cgroup, proc = build(workdir / "host", {101: (1, 1), 102: (2, 2), 103: (3, 3)})
    logs = workdir / "host" / "log"
    layout(logs, {(ns, name, pod_uid(n)): {container: container_id(n)}
                  for (ns, name, n, container) in PODS})
    scenario = workdir / "scenario.yaml"
    write_scenario(scenario, SCENARIO)
    daemon = DaemonProcess(["--simulate", str(scenario), "--housekeeping-interval", "0.5",
                            "--cgroup-root", str(cgroup), "--proc-root", str(proc),
                            "--pod-resources-socket", str(socket_path),
                            "--log-root", str(logs), "--node-name", NODE, "--dcgm-compat"],
                           workdir, env={"GPUSTATS_DCGM_HOSTNAME_LABEL": "hostname"})
    prometheus = None
    try:
        daemon.wait_ready()
        monitor = yaml.safe_load((REPO_ROOT / "manifests" / "servicemonitor.yaml").read_text())
        endpoint = monitor["spec"]["endpoints"][0]
        target = f"127.0.0.1:{daemon.port}"
        prometheus = PrometheusServer(workdir, [], scrape_configs=[
            _job(endpoint, target, "shipped"),
            _job(_component_endpoint(endpoint), target, "dcgm-labels")])
        # A scrape by each job of a tick that named the pods on both replicas. gpustats' own
        # series keep ``pod`` under both (the component relabels them back); dcgm-exporter's
        # names carry ``exported_pod`` with the component, as under its chart.
        for job, pod in (("shipped", "pod"), ("dcgm-labels", "exported_pod")):
            prometheus.wait_for(f'gpustats_container_gpu_joules_total{{job="{job}",'
                                'pod="infer-b"}')
            prometheus.wait_for(f'DCGM_FI_DEV_FB_USED{{job="{job}",GPU_I_ID="7",'
                                f'{pod}="embed-0"}}')
        yield daemon, prometheus
    finally:
        if prometheus is not None:
            prometheus.stop()
        daemon.stop()
        kubelet.stop(0)


def _metrics(prometheus: PrometheusServer, expr: str) -> list[dict]:
    return [s["metric"] for s in prometheus.query(expr)]


def test_shared_gpu_series_per_pod(node):
    _, prometheus = node
    for name, device, a, b in (("DCGM_FI_DEV_GPU_UTIL", 87.0, 50.0, 30.0),
                               ("DCGM_FI_DEV_FB_USED", 20 * 1024.0, 4 * 1024.0, 2 * 1024.0),
                               ("DCGM_FI_DEV_POWER_USAGE", None, 400.0, 400.0)):
        series = prometheus.query(f'{name}{{job="shipped",gpu="0"}}')
        found = {(s["metric"].get("namespace"), s["metric"].get("pod"),
                  s["metric"].get("container"), s["metric"].get("vgpu")): float(s["value"][1])
                 for s in series}
        # Each pod on the time-sliced GPU has its series, with the replica it was given as
        # vgpu: its own processes' SM utilization and memory (dcgm-exporter's per-process
        # metrics) beside the device's series without pod labels; the device's power copied.
        expected = {("ml", "infer-a", "a", "0"): a, ("web", "infer-b", "b", "1"): b}
        if device is not None:
            expected[(None, None, None, None)] = device
        assert found == expected, name
    by_pod = prometheus.query(
        'sum by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{job="shipped",pod!=""})')
    assert {(s["metric"]["namespace"], s["metric"]["pod"]) for s in by_pod} == {
        ("ml", "infer-a"), ("web", "infer-b")}
    uids = {m["pod"]: m["pod_uid"] for m in _metrics(
        prometheus, 'DCGM_FI_DEV_GPU_UTIL{job="shipped",gpu="0",pod!=""}')}
    assert uids == {"infer-a": pod_uid(1), "infer-b": pod_uid(2)}
    # A per-GPU figure is still one value with max by (gpu).
    (power,) = prometheus.query('max by (gpu) (DCGM_FI_DEV_POWER_USAGE{job="shipped",gpu="0"})')
    assert float(power["value"][1]) == 400.0


def test_node_label_named_as_asked(node):
    _, prometheus = node
    labels = _metrics(prometheus, '{__name__=~"DCGM_.+",job="shipped"}')
    assert labels and all(m["hostname"] == NODE and "Hostname" not in m for m in labels)


def test_idle_mig_instance_memory(node):
    _, prometheus = node
    (used,) = prometheus.query('DCGM_FI_DEV_FB_USED{job="shipped",gpu="1",GPU_I_ID="9"}')
    (free,) = prometheus.query('DCGM_FI_DEV_FB_FREE{job="shipped",gpu="1",GPU_I_ID="9"}')
    assert float(used["value"][1]) == 0 and float(free["value"][1]) == 10 * 1024
    assert "pod" not in used["metric"] and used["metric"]["GPU_I_PROFILE"] == "1g.10gb"
    held = _metrics(prometheus, 'DCGM_FI_DEV_FB_USED{job="shipped",GPU_I_ID="7"}')
    assert [m["pod"] for m in held] == ["embed-0"] and "vgpu" not in held[0]


def test_component_gives_dcgm_exporter_chart_label_names(node):
    _, prometheus = node
    series = _metrics(prometheus,
                      'DCGM_FI_DEV_GPU_UTIL{job="dcgm-labels",gpu="0",exported_pod!=""}')
    assert {(m["exported_namespace"], m["exported_pod"], m["exported_container"])
            for m in series} == {("ml", "infer-a", "a"), ("web", "infer-b", "b")}
    # The target's own labels win: the scraping pod's, as under dcgm-exporter's chart.
    assert {(m["pod"], m["namespace"], m["container"]) for m in series} == {
        (TARGET_LABELS["pod"], TARGET_LABELS["namespace"], TARGET_LABELS["container"])}
    # A query written for dcgm-exporter, per pod across every GPU and MIG instance: on the
    # shared GPU each holder's own memory, as dcgm-exporter gives it per pod.
    by_pod = prometheus.query('sum by (exported_namespace, exported_pod) '
                              '(DCGM_FI_DEV_FB_USED{job="dcgm-labels",exported_pod!=""})')
    assert {(s["metric"]["exported_namespace"], s["metric"]["exported_pod"]): float(
        s["value"][1]) for s in by_pod} == {("ml", "infer-a"): 4 * 1024.0,
                                           ("web", "infer-b"): 2 * 1024.0,
                                           ("serving", "embed-0"): 3 * 1024.0}
    # The shipped job keeps the names gpustats gives.
    assert not prometheus.query('{job="shipped",exported_pod!=""}')
