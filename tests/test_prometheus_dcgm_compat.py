"""A real Prometheus scrapes the daemon with ``--dcgm-compat`` on a node with a GPM GPU held by
one pod container, a MIG GPU whose instance a second pod holds, and an XID. dcgm-exporter's own
Grafana dashboard, OpenCost's GPU usage queries and every panel of our dashboard return series,
values equal the scenario's in dcgm-exporter's units, and ``promtool check metrics`` finds
nothing but what dcgm-exporter's vocabulary itself implies."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.parse
import urllib.request

import pytest

from tests.support.daemon import DaemonProcess
from tests.support.fakehost import build, container_id, pod_uid, write_scenario
from tests.support.gpus import (
    DCGM_MIG_GPU as GPU1, DCGM_MIG_INSTANCE_7 as MIG7, DCGM_WHOLE_GPU as GPU0,
)
from tests.support.grpc_servers import serve_unix
from tests.support.paths import REPO_ROOT
from tests.support.prometheus import PrometheusServer

grpc = pytest.importorskip("grpc")
from gpustats.sources.podresources import podresources_api_pb2 as api  # noqa: E402
from gpustats.sources.podresources import podresources_api_pb2_grpc as api_grpc  # noqa: E402
from gpustats.sources.runtime import cri_api_pb2 as cri  # noqa: E402
from gpustats.sources.runtime import cri_api_pb2_grpc as cri_grpc  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None,
                                reason="prometheus not installed")

NODE = "gpu-node-7"
DRIVER = "580.65.06"
MIB = 1 << 20
GIB = 1 << 30
H100 = "NVIDIA H100 80GB HBM3"

SCENARIO = {
    "driver_version": DRIVER,
    "devices": [
        {"uuid": GPU0, "name": H100, "minor": 0, "pci_bus_id": "00000000:1A:00.0",
         "memory_total_bytes": 80 * GIB, "memory_used_bytes": 20 * GIB,
         "memory_reserved_bytes": 512 * MIB, "utilization_percent": 87,
         "memory_utilization_percent": 41, "encoder_utilization_percent": 3,
         "decoder_utilization_percent": 9, "power_watts": 612.5, "temperature_celsius": 64,
         "memory_temperature_celsius": 71, "sm_clock_mhz": 1755, "memory_clock_mhz": 2619,
         "pcie_replay_count": 4,
         "remapped_rows": {"correctable": 2, "uncorrectable": 1, "pending": False,
                           "failure": False},
         "clocks_event_reasons": ["sw_power_cap", "sw_thermal"],
         "violations": {"power_percent": 20, "thermal_percent": 10},
         "gpm": {"graphics_active_percent": 91.5, "sm_active_percent": 80,
                 "sm_occupancy_percent": 40, "tensor_active_percent": 55,
                 "dram_active_percent": 35, "pcie_tx_bytes_per_second": 1.5e9,
                 "pcie_rx_bytes_per_second": 2.5e9, "nvlink_tx_bytes_per_second": 3.0e10,
                 "nvlink_rx_bytes_per_second": 2.0e10}},
        {"uuid": GPU1, "name": H100, "minor": 1, "pci_bus_id": "00000000:2B:00.0",
         "power_watts": 300, "temperature_celsius": 45,
         "gpm": {"graphics_active_percent": 25},
         "mig_instances": [
             {"gpu_instance_id": 7, "profile": "1g.10gb", "memory_total_bytes": 10 * GIB,
              "uuid": MIG7, "gpm": {"graphics_active_percent": 30, "sm_active_percent": 20}},
             {"gpu_instance_id": 8, "profile": "1g.10gb", "memory_total_bytes": 10 * GIB,
              "gpm": {"graphics_active_percent": 0}},
         ]},
    ],
    "processes": [
        {"pid": 101, "device": GPU0, "sm_util_percent": 60, "memory_used_bytes": 4 * GIB},
        {"pid": 102, "device": GPU1, "gpu_instance_id": 7, "memory_used_bytes": 3 * GIB},
        # A container of a pod the kubelet does not list: it holds GI 8 without pod labels.
        {"pid": 103, "device": GPU1, "gpu_instance_id": 8, "memory_used_bytes": GIB},
    ],
    "xid_events": [{"device": GPU0, "xid": 48, "after_seconds": 0}],
}


class _Kubelet(api_grpc.PodResourcesListerServicer):
    def List(self, request, context):
        return api.ListPodResourcesResponse(pod_resources=[
            api.PodResources(name="train-0", namespace="ml", containers=[
                api.ContainerResources(name="trainer", devices=[
                    api.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=[GPU0])])]),
            api.PodResources(name="embed-0", namespace="serving", containers=[
                api.ContainerResources(name="server", devices=[
                    api.ContainerDevices(resource_name="nvidia.com/mig-1g.10gb",
                                         device_ids=[MIG7])])]),
        ])


class _Runtime(cri_grpc.RuntimeServiceServicer):
    """containerd's CRI: names by container ID (the third container carries no labels)."""

    def ListContainers(self, request, context):
        def named(n, pod, namespace, container):
            return cri.Container(id=container_id(n), labels={
                "io.kubernetes.pod.name": pod, "io.kubernetes.pod.namespace": namespace,
                "io.kubernetes.pod.uid": pod_uid(n), "io.kubernetes.container.name": container})
        return cri.ListContainersResponse(containers=[
            named(1, "train-0", "ml", "trainer"), named(2, "embed-0", "serving", "server"),
            cri.Container(id=container_id(3), labels={})])


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("dcgm")
    socket_path = workdir / "kubelet.sock"
    kubelet = serve_unix(socket_path,
                         lambda s: api_grpc.add_PodResourcesListerServicer_to_server(_Kubelet(), s))
    runtime_socket = workdir / "containerd.sock"
    runtime = serve_unix(runtime_socket,
                         lambda s: cri_grpc.add_RuntimeServiceServicer_to_server(_Runtime(), s))
    cgroup, proc = build(workdir / "host", {101: (1, 1), 102: (2, 2), 103: (3, 3)})
    scenario = workdir / "scenario.yaml"
    write_scenario(scenario, SCENARIO)
    daemon = DaemonProcess(["--simulate", str(scenario), "--housekeeping-interval", "0.5",
                            "--cgroup-root", str(cgroup), "--proc-root", str(proc),
                            "--pod-resources-socket", str(socket_path),
                            "--runtime-socket", str(runtime_socket),
                            "--node-name", NODE, "--saturation-window", "5",
                            # Its GPUs never idle: the idle panel needs a configured idle.
                            "--idle-power-watts", "60", "--dcgm-compat"], workdir)
    prometheus = None
    try:
        daemon.wait_ready()
        prometheus = PrometheusServer(workdir, [daemon.port])
        # Two scrapes of everything the expressions read (range functions need two samples).
        prometheus.wait_for('count_over_time(DCGM_FI_DEV_XID_ERRORS{err_code="48"}[1m]) >= 2')
        prometheus.wait_for('count_over_time(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0"}[1m])'
                            ' >= 5')
        prometheus.wait_for('count_over_time(gpustats_pod_gpu_joules_total{pod="embed-0"}[1m])'
                            ' >= 2')
        prometheus.wait_for('count_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod="embed-0"}[1m])'
                            ' >= 2')
        yield daemon, prometheus
    finally:
        if prometheus is not None:
            prometheus.stop()
        daemon.stop()
        kubelet.stop(0)
        runtime.stop(0)


def _one(result: list[dict], **labels) -> dict:
    matches = [s for s in result if all(s["metric"].get(k) == v for k, v in labels.items())]
    assert len(matches) == 1, (labels, result)
    return matches[0]


def _value(series: dict) -> float:
    return float(series["value"][1])


def _samples(prometheus: PrometheusServer, selector: str) -> list[tuple[float, float]]:
    """The raw samples of one series over the last minute."""
    (series,) = prometheus.query(selector + "[1m]")
    return [(float(t), float(v)) for t, v in series["values"]]


def _slope(samples: list[tuple[float, float]]) -> float:
    (t0, v0), (t1, v1) = samples[0], samples[-1]
    assert t1 - t0 >= 3, samples
    return (v1 - v0) / (t1 - t0)


# dcgm-exporter's grafana/dcgm-exporter-dashboard.json: the client's queries under test.
DCGM_DASHBOARD_VARIABLES = (
    ("Hostname", 'label_values(DCGM_FI_DEV_FB_FREE, Hostname)'),
    ("gpu", 'label_values(DCGM_FI_DEV_FB_FREE{Hostname=~"$Hostname"}, gpu)'),
)
DCGM_DASHBOARD_EXPRESSIONS = (
    'max(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$Hostname", gpu=~"$gpu"}) by (Hostname, gpu, uuid)',
    'avg(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$Hostname", gpu=~"$gpu"})',
    'max(DCGM_FI_DEV_POWER_USAGE{Hostname=~"$Hostname", gpu=~"$gpu"}) by (Hostname, gpu, uuid)',
    'sum(max(DCGM_FI_DEV_POWER_USAGE{Hostname=~"$Hostname", gpu=~"$gpu"}) by (gpu))',
    'max(DCGM_FI_DEV_SM_CLOCK{Hostname=~"$Hostname", gpu=~"$gpu"} * 1000000) '
    'by (Hostname, UUID, gpu)',
    'max(DCGM_FI_PROF_GR_ENGINE_ACTIVE{Hostname=~"$Hostname", gpu=~"$gpu"}) '
    'by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)',
    'max(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{Hostname=~"$Hostname", gpu=~"$gpu"}) '
    'by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)',
    'max(DCGM_FI_DEV_FB_USED{Hostname=~"$Hostname", gpu=~"$gpu"}) '
    'by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)',
)
# OpenCost's GPU usage queries (cluster label "cluster_id", its default).
OPENCOST_EXPRESSIONS = (
    'avg(avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{container!=""}[1m])) '
    'by (container, pod, namespace, cluster_id)',
    'max(max_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{container!=""}[1m])) '
    'by (container, pod, namespace, cluster_id)',
)


def _all(prometheus: PrometheusServer, metric_selector: str, label: str) -> str:
    """Grafana's "All" for a multi-value variable: a regex alternation of every value, regex
    characters escaped as Grafana escapes them inside a PromQL string."""
    values = prometheus.api(f"label/{label}/values", **{"match[]": metric_selector})
    assert values, (metric_selector, label)
    return "(" + "|".join(re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", v)
                          for v in values) + ")"


def test_dcgm_exporter_dashboard_returns_series(node):
    _, prometheus = node
    hostname = _all(prometheus, "DCGM_FI_DEV_FB_FREE", "Hostname")
    assert hostname == f"({NODE})"
    gpu = _all(prometheus, f'DCGM_FI_DEV_FB_FREE{{Hostname=~"{hostname}"}}', "gpu")
    assert gpu == "(0|1)"
    for expr in DCGM_DASHBOARD_EXPRESSIONS:
        resolved = expr.replace("$Hostname", hostname).replace("$gpu", gpu)
        assert prometheus.query(resolved), resolved
    by_instance = prometheus.query(DCGM_DASHBOARD_EXPRESSIONS[5].replace(
        "$Hostname", hostname).replace("$gpu", gpu))
    assert _value(_one(by_instance, gpu="0")) == pytest.approx(0.915)
    assert _value(_one(by_instance, gpu="1", GPU_I_ID="7", GPU_I_PROFILE="1g.10gb")) == \
        pytest.approx(0.30)
    assert _value(_one(by_instance, gpu="1", GPU_I_ID="8")) == 0.0


def test_opencost_gpu_usage_per_container(node):
    _, prometheus = node
    for expr in OPENCOST_EXPRESSIONS:
        result = prometheus.query(expr)
        assert _value(_one(result, namespace="ml", pod="train-0", container="trainer")) == \
            pytest.approx(0.915)
        assert _value(_one(result, namespace="serving", pod="embed-0", container="server")) == \
            pytest.approx(0.30)
        assert len(result) == 2, result


def test_values_equal_the_scenario_in_dcgm_units(node):
    _, prometheus = node
    g0 = {"gpu": "0"}
    expected = {
        "DCGM_FI_DEV_SM_CLOCK": 1755, "DCGM_FI_DEV_MEM_CLOCK": 2619,
        "DCGM_FI_DEV_GPU_TEMP": 64, "DCGM_FI_DEV_MEMORY_TEMP": 71,
        "DCGM_FI_DEV_POWER_USAGE": 612.5, "DCGM_FI_DEV_GPU_UTIL": 87,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 41, "DCGM_FI_DEV_ENC_UTIL": 3, "DCGM_FI_DEV_DEC_UTIL": 9,
        "DCGM_FI_DEV_FB_USED": 20 * 1024, "DCGM_FI_DEV_FB_RESERVED": 512,
        "DCGM_FI_DEV_FB_FREE": 80 * 1024 - 20 * 1024 - 512,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 4,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 2, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1,
        "DCGM_FI_DEV_ROW_REMAP_PENDING": 0, "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0x4 | 0x20,
        "DCGM_FI_DEV_XID_ERRORS": 48,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.915, "DCGM_FI_PROF_SM_ACTIVE": 0.80,
        "DCGM_FI_PROF_SM_OCCUPANCY": 0.40, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.55,
        "DCGM_FI_PROF_DRAM_ACTIVE": 0.35, "DCGM_FI_PROF_PCIE_TX_BYTES": 1.5e9,
        "DCGM_FI_PROF_PCIE_RX_BYTES": 2.5e9, "DCGM_FI_PROF_NVLINK_TX_BYTES": 3.0e10,
        "DCGM_FI_PROF_NVLINK_RX_BYTES": 2.0e10,
    }
    for name, value in expected.items():
        assert _value(_one(prometheus.query(name), **g0)) == pytest.approx(value), name
    xid = _one(prometheus.query("DCGM_FI_DEV_XID_ERRORS"), **g0)["metric"]
    assert xid["err_code"] == "48" and "ECC" in xid["err_msg"]
    # Counters: the energy counter moves with gpustats' own joules (read in the same tick) and
    # both grow at the power draw; violation time grows at its share of real time (ns/s, as
    # DCGM's field reference gives the violation counters).
    energy = _samples(prometheus, 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0"}')
    joules = dict(_samples(prometheus, 'gpustats_node_gpu_joules_total{gpu="0"}'))
    offsets = {round(mj - 1000 * joules[t]) for t, mj in energy if t in joules}
    assert len(offsets) == 1, offsets
    assert 0.6 * 612.5e3 < _slope(energy) < 1.4 * 612.5e3
    violation = _slope(_samples(prometheus, 'DCGM_FI_DEV_POWER_VIOLATION{gpu="0"}'))
    assert 0.6 * 0.2e9 < violation < 1.4 * 0.2e9
    # dcgm-exporter's count per XID over its window, and gpustats' own counter by XID.
    counted = _one(prometheus.query("DCGM_EXP_XID_ERRORS_COUNT"), **g0)
    assert counted["metric"]["xid"] == "48" and _value(counted) == 1
    assert counted["metric"]["window_size_in_ms"] == "300000"
    assert _value(_one(prometheus.query("gpustats_node_gpu_xid_errors_total"), xid="48",
                       **g0)) == 1
    # A MIG instance: its framebuffer share and the pod that holds it.
    used = _one(prometheus.query("DCGM_FI_DEV_FB_USED"), gpu="1", GPU_I_ID="7")
    assert _value(used) == 3 * 1024
    assert _value(_one(prometheus.query("DCGM_FI_DEV_FB_FREE"), gpu="1", GPU_I_ID="7")) == \
        7 * 1024
    assert used["metric"]["pod"] == "embed-0" and used["metric"]["namespace"] == "serving"
    # GPM on the MIG GPU gives no tensor activity: absent, not 0.
    assert not prometheus.query('DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="1"}')


def test_labels_as_dcgm_exporter_prints_them(node):
    _, prometheus = node
    full = _one(prometheus.query("DCGM_FI_DEV_GPU_TEMP"), gpu="0")["metric"]
    assert {k: v for k, v in full.items() if k not in ("__name__", "instance", "job")} == {
        "gpu": "0", "UUID": GPU0, "pci_bus_id": "00000000:1A:00.0", "device": "nvidia0",
        "modelName": H100, "Hostname": NODE, "DCGM_FI_DRIVER_VERSION": DRIVER,
        "pod": "train-0", "namespace": "ml", "container": "trainer", "pod_uid": pod_uid(1)}
    mig_device = _one(prometheus.query("DCGM_FI_DEV_GPU_TEMP"), gpu="1")["metric"]
    assert "pod" not in mig_device and "GPU_I_ID" not in mig_device
    free_instance = _one(prometheus.query("DCGM_FI_PROF_GR_ENGINE_ACTIVE"), gpu="1",
                         GPU_I_ID="8")["metric"]
    assert "pod" not in free_instance and free_instance["GPU_I_PROFILE"] == "1g.10gb"
    everything = prometheus.query('{__name__=~"DCGM_.+"}')
    assert everything and all(v != "" for s in everything for v in s["metric"].values())


def test_promtool_check_metrics(node):
    daemon, _ = node
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    with urllib.request.urlopen(daemon.base + "/metrics", timeout=5) as r:
        body = r.read()
    assert b"DCGM_FI_DEV_POWER_USAGE{" in body and b"gpustats_node_gpu_watts{" in body
    result = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True,
                            timeout=60)
    problems = result.stdout.decode().splitlines() + result.stderr.decode().splitlines()
    # dcgm-exporter's own names and labels are what clients query (its DCGM_FI_ fields and its
    # own DCGM_EXP_ families): its counters carry no "_total" (and one is named ..._COUNTER)
    # and its "modelName" label is camelCase. promtool reports exactly those, nothing about
    # gpustats' families and no parse error.
    inherent = ("label names should be written in 'snake_case' not 'camelCase'",
                'counter metrics should have "_total" suffix',
                "metric name should not include type 'counter'")
    unexpected = [p for p in problems
                  if not (p.startswith(("DCGM_FI_", "DCGM_EXP_"))
                          and p.split(" ", 1)[1] in inherent)]
    assert unexpected == [], unexpected
    gpustats_only = b"".join(line for line in body.splitlines(keepends=True)
                             if b"DCGM_" not in line)
    clean = subprocess.run([promtool, "check", "metrics"], input=gpustats_only,
                           capture_output=True, timeout=60)
    assert clean.returncode == 0, clean.stdout + clean.stderr


def test_every_panel_of_our_dashboard_returns_data(node):
    _, prometheus = node
    dashboard = json.loads((REPO_ROOT / "manifests" / "grafana-dashboard.json").read_text())
    node_all = _all(prometheus, "gpustats_node_gpu_info", "node_name")
    empty = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            expr = target["expr"].replace("$node", node_all)
            if not prometheus.query(expr):
                empty.append((panel["title"], expr))
    assert empty == []
    titles = {p["title"] for p in dashboard["panels"]}
    assert {"Pods", "Containers", "MIG instances", "Health"} <= titles
    conditions = prometheus.query('gpustats_node_gpu_condition{status="False"}')
    assert _one(conditions, gpu="0", type="NVMLReady")["metric"]["reason"] == "XidError"
    assert _one(conditions, gpu="0", type="Ready")["metric"]["reason"] == "XidError"
