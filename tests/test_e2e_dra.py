"""DRA end to end through the real daemon: simulated GPUs, an in-process kubelet pod-resources
server speaking the current proto (and an older one), an in-process CRI runtime for names,
CDI spec files in a temporary directory and MIG capability minors in a fake procfs."""

import json
import signal
import time

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpustats.sources.podresources import podresources_api_pb2 as api
from gpustats.sources.podresources import podresources_api_pb2_grpc as api_grpc
from gpustats.sources.runtime import cri_api_pb2 as cri
from gpustats.sources.runtime import cri_api_pb2_grpc as cri_grpc
from tests.support.daemon import timed_get
from tests.support.documents import alias_bomb
from tests.support.fakehost import build, container_id, make_caps, pod_uid
from tests.support.grpc_servers import serve_unix
from tests.support.podresources import old_response
from tests.support.simulated import start_simulated

FULL, MIGGPU, SHARED, IDLE = (f"GPU-{c * 8}-1111-4111-8111-{c * 12}" for c in "abcd")
ARGS = ("--housekeeping-interval", "0.2", "--idle-power-watts", "100")
NV = "gpu.nvidia.com"

# (pod number, pod name, container number) for each pod; all in namespace "ml".
PODS = {"train-0": (1, 1), "infer-0": (2, 2), "shared-a": (3, 3), "shared-b": (4, 4),
        "idle-0": (5, 5), "vanish-0": (6, 6), "broken-0": (7, 7)}


class Kubelet(api_grpc.PodResourcesListerServicer):
    def __init__(self, response):
        self.response = response

    def List(self, request, context):
        return self.response


class Runtime(cri_grpc.RuntimeServiceServicer):
    def ListContainers(self, request, context):
        return cri.ListContainersResponse(containers=[
            cri.Container(id=container_id(c), labels={
                "io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": "ml",
                "io.kubernetes.pod.uid": pod_uid(p), "io.kubernetes.container.name": "main"})
            for name, (p, c) in PODS.items()])


@pytest.fixture
def node(tmp_path):
    """Start servers and return a function that starts the daemon on this fake node."""
    servers = []

    def serve(adder, name):
        servers.append(serve_unix(tmp_path / name, adder))
        return str(tmp_path / name)

    yield serve
    for server in servers:
        server.stop(0)


def claimed(pod, claim, cdi, device, share=None):
    return api.PodResources(name=pod, namespace="ml", containers=[api.ContainerResources(
        name="main", dynamic_resources=[api.DynamicResource(
            claim_name=claim, claim_namespace="ml", claim_resources=[api.ClaimResource(
                cdi_devices=[api.CDIDevice(name=cdi)], driver_name=NV, pool_name="node-1",
                device_name=device, share_id=share)])])])


def spec(claim_uid, *devices, fmt="yaml"):
    """A transient per-claim spec as NVIDIA's DRA driver writes it: common nodes at the spec
    level, the GPU's own nodes per device."""
    body = {"cdiVersion": "0.6.0", "kind": "k8s.gpu.nvidia.com/claim",
            "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"},
                                               {"path": "/dev/nvidia-uvm"}],
                               "env": ["NVIDIA_VISIBLE_DEVICES=void"]},
            "devices": [{"name": f"{claim_uid}-{name}", "containerEdits": {"deviceNodes": [
                {"path": p, "type": "c"} for p in paths]}} for name, paths in devices]}
    if fmt == "json":
        return json.dumps(body)
    import yaml
    return yaml.safe_dump(body)


def cdi_name(claim_uid, name):
    return f"k8s.gpu.nvidia.com/claim={claim_uid}-{name}"


def start(start_daemon, tmp_path, node, kubelet_adder, devices, placement, processes, *extra):
    cgroup, proc = build(tmp_path / "host", placement)
    make_caps(proc, {(1, 7, None): 66, (1, 7, 0): 67, (1, 8, None): 75, (1, 8, 0): 76})
    pod_resources = node(kubelet_adder, "kubelet.sock")
    runtime = node(lambda s: cri_grpc.add_RuntimeServiceServicer_to_server(Runtime(), s),
                   "containerd.sock")
    return start_simulated(start_daemon, tmp_path, {"devices": devices, "processes": processes},
                           (cgroup, proc), "--pod-resources-socket", pod_resources,
                           "--runtime-socket", runtime, "--cdi-spec-dirs",
                           f"{tmp_path / 'etc-cdi'},{tmp_path / 'run-cdi'}", *ARGS, *extra)[0]


def pods_by_name(summary):
    return {p["podRef"]["name"]: p for p in summary["pods"]}


def energy(summary, pod):
    p = pods_by_name(summary).get(pod)
    accs = p["containers"][0].get("accelerators", []) if p else []
    return accs[0].get("attributedEnergyJoules", 0.0) if accs else 0.0


def samples(text, name):
    return [s for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == name]


def test_full_mig_shared_and_idle_claims(start_daemon, tmp_path, node):
    run = tmp_path / "run-cdi"
    run.mkdir()
    (run / "k8s.gpu.nvidia.com-claim_u1.yaml").write_text(spec("u1", ("gpu-0", ["/dev/nvidia0"])))
    (run / "k8s.gpu.nvidia.com-claim_u2.json").write_text(spec(
        "u2", ("mig-1-7", ["/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap66",
                           "/dev/nvidia-caps/nvidia-cap67"]), fmt="json"))
    (run / "k8s.gpu.nvidia.com-claim_u3.yaml").write_text(spec("u3", ("gpu-2", ["/dev/nvidia2"])))
    (run / "k8s.gpu.nvidia.com-claim_u5.yaml").write_text(spec("u5", ("gpu-3", ["/dev/nvidia3"])))
    response = api.ListPodResourcesResponse(pod_resources=[
        claimed("train-0", "train-gpu", cdi_name("u1", "gpu-0"), "gpu-0", share="s-01"),
        claimed("infer-0", "infer-mig", cdi_name("u2", "mig-1-7"), "gpu-1-mig-7"),
        claimed("shared-a", "shared-gpu", cdi_name("u3", "gpu-2"), "gpu-2"),
        claimed("shared-b", "shared-gpu", cdi_name("u3", "gpu-2"), "gpu-2"),
        claimed("idle-0", "idle-gpu", cdi_name("u5", "gpu-3"), "gpu-3"),
    ])
    devices = [
        {"uuid": FULL, "minor": 0, "power_watts": 300},
        {"uuid": MIGGPU, "minor": 1, "power_watts": 300, "mig_instances": [
            {"gpu_instance_id": 7, "profile": "3g.40gb", "uuid": "MIG-bbbb-7"},
            {"gpu_instance_id": 8, "profile": "3g.40gb", "uuid": "MIG-bbbb-8"}]},
        {"uuid": SHARED, "minor": 2, "power_watts": 300},
        {"uuid": IDLE, "minor": 3, "power_watts": 150},
    ]
    processes = [{"pid": 101, "device": FULL}, {"pid": 102, "device": MIGGPU,
                                                 "gpu_instance_id": 7},
                 {"pid": 103, "device": SHARED, "sm_util_percent": 75},
                 {"pid": 104, "device": SHARED, "sm_util_percent": 25}]
    # PIDs 9005 exists only to place the idle pod's container in the fake cgroup tree.
    placement = {101: (1, 1), 102: (2, 2), 103: (3, 3), 104: (4, 4), 9005: (5, 5)}
    daemon = start(start_daemon, tmp_path, node,
                   lambda s: api_grpc.add_PodResourcesListerServicer_to_server(Kubelet(response),
                                                                               s),
                   devices, placement, processes)
    summary = daemon.wait_for(lambda s: energy(s, "shared-a") + energy(s, "shared-b") > 300
                              and energy(s, "train-0") > 100, timeout=30)
    pods = pods_by_name(summary)

    train = pods["train-0"]["containers"][0]["accelerators"][0]
    assert train["id"] == FULL and train["attributedPowerWatts"] == pytest.approx(200, rel=0.02)
    assert train["claim"] == {"name": "train-gpu", "namespace": "ml"}
    assert (train["driver"], train["pool"], train["device"], train["shareId"]) == \
        (NV, "node-1", "gpu-0", "s-01")

    infer = pods["infer-0"]["containers"][0]["accelerators"][0]
    assert (infer["gpuInstanceId"], infer["migProfile"]) == (7, "3g.40gb")
    assert infer["claim"]["name"] == "infer-mig" and "shareId" not in infer
    assert infer["attributedPowerWatts"] > 0

    a, b = energy(summary, "shared-a"), energy(summary, "shared-b")
    assert a / (a + b) == pytest.approx(0.75, abs=0.02)
    for pod in ("shared-a", "shared-b"):
        assert pods[pod]["containers"][0]["accelerators"][0]["claim"]["name"] == "shared-gpu"

    idle = pods["idle-0"]
    acc = idle["containers"][0]["accelerators"][0]
    assert acc["id"] == IDLE and acc["attributedPowerWatts"] == 0.0
    assert acc["attributedEnergyJoules"] == 0.0 and acc["claim"]["name"] == "idle-gpu"
    # Nothing runs on the claimed GPU, yet the claim holds it: its idle is this pod's.
    (held,) = idle["accelerators"]
    assert held["idleSharePowerWatts"] == pytest.approx(100.0, rel=0.02)
    assert held["idleShareEnergyJoules"] > 0
    del held["idleSharePowerWatts"], held["idleShareEnergyJoules"]
    assert held == {"id": IDLE, "attributedPowerWatts": 0.0, "attributedEnergyJoules": 0.0,
                    "claim": {"name": "idle-gpu", "namespace": "ml"}}

    status, text = daemon.get("/metrics")
    assert status == 200
    watts = {(s.labels["pod"], s.labels["claim"]): s.value
             for s in samples(text, "gpustats_container_gpu_watts")}
    assert watts[("idle-0", "idle-gpu")] == 0.0
    assert watts[("train-0", "train-gpu")] == pytest.approx(200, rel=0.02)
    pod_watts = {(s.labels["pod"], s.labels["claim"], s.labels["claim_namespace"]): s.value
                 for s in samples(text, "gpustats_pod_gpu_watts")}
    assert pod_watts[("idle-0", "idle-gpu", "ml")] == 0.0
    assert ("shared-b", "shared-gpu", "ml") in pod_watts
    assert samples(text, "gpustats_container_gpu_claim_unresolved") == []


def test_vanished_and_malformed_specs_stay_unresolved_then_recover(start_daemon, tmp_path, node):
    run = tmp_path / "run-cdi"
    run.mkdir()
    vanishing = run / "k8s.gpu.nvidia.com-claim_u6.yaml"
    vanishing.write_text(spec("u6", ("gpu-0", ["/dev/nvidia0"])))
    broken = run / "k8s.gpu.nvidia.com-claim_u7.yaml"
    broken.write_text("cdiVersion: 0.6.0\nkind: k8s.gpu.nvidia.com/claim\ndevices: [{name: u7-")
    response = api.ListPodResourcesResponse(pod_resources=[
        claimed("vanish-0", "vanish", cdi_name("u6", "gpu-0"), "gpu-0"),
        claimed("broken-0", "broken", cdi_name("u7", "gpu-1"), "gpu-1"),
    ])
    devices = [{"uuid": FULL, "minor": 0, "power_watts": 300},
               {"uuid": SHARED, "minor": 1, "power_watts": 300}]
    daemon = start(start_daemon, tmp_path, node,
                   lambda s: api_grpc.add_PodResourcesListerServicer_to_server(Kubelet(response),
                                                                               s),
                   devices, {9006: (6, 6), 9007: (7, 7)}, [])

    def unresolved(summary, pod):
        p = pods_by_name(summary).get(pod)
        return p["containers"][0].get("unresolvedClaims", []) if p else None

    summary = daemon.wait_for(lambda s: unresolved(s, "broken-0") and pods_by_name(s)[
        "vanish-0"]["containers"][0].get("accelerators"))
    assert unresolved(summary, "broken-0") == [{
        "reason": "cdi-spec-not-found", "claim": {"name": "broken", "namespace": "ml"},
        "driver": NV, "pool": "node-1", "device": "gpu-1"}]
    assert "accelerators" not in pods_by_name(summary)["broken-0"]["containers"][0]

    vanishing.unlink()          # the kubelet still lists the claim; its spec is gone
    summary = daemon.wait_for(lambda s: unresolved(s, "vanish-0"))
    assert unresolved(summary, "vanish-0")[0]["reason"] == "cdi-spec-not-found"
    status, text = daemon.get("/metrics")
    reasons = {s.labels["claim"]: s.labels["reason"]
               for s in samples(text, "gpustats_container_gpu_claim_unresolved")}
    assert reasons == {"vanish": "cdi-spec-not-found", "broken": "cdi-spec-not-found"}

    broken.write_text(spec("u7", ("gpu-1", ["/dev/nvidia1"])))
    summary = daemon.wait_for(lambda s: not unresolved(s, "broken-0"), timeout=20)
    acc = pods_by_name(summary)["broken-0"]["containers"][0]["accelerators"][0]
    assert acc["id"] == SHARED and acc["claim"]["name"] == "broken"

    log = daemon.log()
    assert log.count("is malformed") == 1 and "claim_u7.yaml" in log
    assert log.count("DRA claim ml/vanish") == 1
    assert log.count("DRA claim ml/broken") == 1
    assert "Traceback" not in log and daemon.proc.poll() is None


def test_older_kubelet_without_share_id_and_dcgm_labels(start_daemon, tmp_path, node):
    run = tmp_path / "run-cdi"
    run.mkdir()
    (run / "claim.yaml").write_text(spec("u", ("gpu-0", ["/dev/nvidia0"])))
    body = old_response(with_driver_fields=True).SerializeToString()
    handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
        "List": grpc.unary_unary_rpc_method_handler(
            lambda req, ctx: body, request_deserializer=None, response_serializer=None)})
    # The older kubelet's pod is "train-0" with a claim "gpu" on k8s.gpu.nvidia.com/claim=u-gpu-0.
    daemon = start(start_daemon, tmp_path, node,
                   lambda s: s.add_generic_rpc_handlers((handler,)),
                   [{"uuid": FULL, "minor": 0, "power_watts": 300}], {101: (1, 1)},
                   [{"pid": 101, "device": FULL}], "--dcgm-compat")
    summary = daemon.wait_for(lambda s: energy(s, "train-0") > 0)
    acc = pods_by_name(summary)["train-0"]["containers"][0]["accelerators"][0]
    assert acc["claim"] == {"name": "gpu", "namespace": "ml"} and acc["device"] == "gpu-0"
    assert "shareId" not in acc
    _, text = daemon.get("/metrics")
    assert {s.labels["claim"] for s in samples(text, "gpustats_container_gpu_joules_total")} == \
        {"gpu"}
    [power] = samples(text, "DCGM_FI_DEV_POWER_USAGE")
    assert {k: v for k, v in power.labels.items() if k.startswith("dra_") or k == "pod"} == {
        "pod": "train-0", "dra_claim_name": "gpu", "dra_claim_namespace": "ml",
        "dra_driver_name": NV, "dra_pool_name": "node-1", "dra_device_name": "gpu-0"}


def test_alias_bomb_spec_is_refused_once_and_probes_keep_answering(start_daemon, tmp_path,
                                                                    node):
    """A few hundred bytes of aliases in the spec dir: expanding them into the error message
    held the tick (and the interpreter) for seconds to minutes and gigabytes, so the probes
    timed out; the spec is now refused before it is expanded, and not read again."""
    run = tmp_path / "run-cdi"
    run.mkdir()
    (run / "k8s.gpu.nvidia.com-claim_u1.yaml").write_text(spec("u1", ("gpu-0", ["/dev/nvidia0"])))
    response = api.ListPodResourcesResponse(pod_resources=[
        claimed("train-0", "train-gpu", cdi_name("u1", "gpu-0"), "gpu-0"),
        claimed("infer-0", "infer-gpu", cdi_name("u2", "gpu-1"), "gpu-1"),
    ])
    daemon = start(start_daemon, tmp_path, node,
                   lambda s: api_grpc.add_PodResourcesListerServicer_to_server(Kubelet(response),
                                                                               s),
                   [{"uuid": FULL, "minor": 0, "power_watts": 300},
                    {"uuid": SHARED, "minor": 1, "power_watts": 300}],
                   {101: (1, 1), 102: (2, 2)}, [], "--log-level", "debug")
    daemon.wait_for(lambda s: pods_by_name(s)["train-0"]["containers"][0].get("accelerators"))

    bomb = run / "k8s.gpu.nvidia.com-claim_u9.yaml"
    staged = run / "u9.tmp"
    staged.write_text(f"cdiVersion: 0.6.0\nkind: {alias_bomb(levels=8)}\ndevices: []\n")
    staged.rename(bomb)
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:               # ticks every 0.2 s meanwhile
        for path in ("/healthz", "/readyz"):
            assert timed_get(daemon.port, path, timeout=1.0)[0] == 200
        time.sleep(0.05)                  # measures: probes every 50 ms over 3 s
    assert f"CDI spec {bomb} is malformed (its aliases would expand it" in daemon.log()

    # A spec added after it: the directory is rescanned, the bomb is not read again.
    (run / "k8s.gpu.nvidia.com-claim_u2.yaml").write_text(spec("u2", ("gpu-1", ["/dev/nvidia1"])))
    daemon.wait_for(lambda s: pods_by_name(s)["infer-0"]["containers"][0].get("accelerators"))
    log = daemon.log()
    assert log.count(f"CDI spec {bomb}: parsing") == 1
    assert log.count("is malformed") == 1
    began = time.monotonic()
    assert daemon.stop(signal.SIGTERM) == 0 and time.monotonic() - began < 5
    assert "Traceback" not in daemon.log_path.read_text()
