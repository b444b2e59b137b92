import json
from dataclasses import replace

import pytest

from gpustats.export.summary import rfc3339, summary_dict, summary_json
from gpustats.model.containers import ContainerUsage
from gpustats.model.device import DeviceIdentity
from gpustats.model.dra import ClaimDevice, UnresolvedClaim
from gpustats.model.health import Condition, DeviceHealth, Saturation
from gpustats.model.host import CpuStats, MemoryStats, NodeStats
from gpustats.model.snapshot import (
    ContainerAccelerator, ContainerStats, DeviceStats, MigInstanceStats, PodAccelerator, PodStats,
    Snapshot,
)
from gpustats.web.openapi import openapi_document
from tests.support.kubelet_go import DecodeError

T = 1_700_000_000.0
KUBELET_KEYS = {"make", "model", "id", "memoryTotal", "memoryUsed", "dutyCycle"}


def _device(**overrides):
    values = dict(
        identity=DeviceIdentity(index=0, uuid="GPU-a", name="NVIDIA H100 80GB HBM3",
                                minor_number=0, pci_bus_id="00000000:3B:00.0",
                                memory_total_bytes=85520809984, vendor="nvidia"),
        memory_used_bytes=2147483648, duty_cycle_percent=40, power_watts=310.0,
        energy_joules=1234.5, power_limit_watts=700.0, temperature_celsius=51,
    )
    values.update(overrides)
    return DeviceStats(**values)


def _snapshot(**overrides):
    values = dict(
        sequence=1, taken_at=T, monotonic=1.0,
        node=NodeStats(node_name="n1", start_time=T - 3600,
                       cpu=CpuStats(time=T, usage_core_nano_seconds=5, usage_nano_cores=None),
                       memory=MemoryStats(time=T, usage_bytes=10, working_set_bytes=8)),
        devices=(_device(),),
    )
    values.update(overrides)
    return Snapshot(**values)


def test_rfc3339_is_utc_seconds():
    assert rfc3339(0) == "1970-01-01T00:00:00Z"
    assert rfc3339(T + 0.9) == "2023-11-14T22:13:20Z"


def test_node_accelerator_keys_and_values():
    out = summary_dict(_snapshot())
    acc = out["node"]["accelerators"][0]
    assert set(acc) >= KUBELET_KEYS
    assert acc == {
        "make": "nvidia", "model": "NVIDIA H100 80GB HBM3", "id": "GPU-a",
        "memoryTotal": 85520809984, "memoryUsed": 2147483648, "dutyCycle": 40,
        "index": 0, "minorNumber": 0, "pciBusId": "00000000:3B:00.0", "powerWatts": 310.0,
        "energyJoules": 1234.5, "powerLimitWatts": 700.0, "temperatureCelsius": 51,
    }
    assert out["pods"] == []
    assert "containers" not in out


def test_absent_values_are_left_out_not_zero():
    device = _device(energy_joules=None, power_watts=None, duty_cycle_percent=None,
                     temperature_celsius=None)
    acc = summary_dict(_snapshot(devices=(device,)))["node"]["accelerators"][0]
    for key in ("energyJoules", "powerWatts", "dutyCycle", "temperatureCelsius"):
        assert key not in acc
    assert acc["memoryUsed"] == 2147483648


def test_zero_is_kept_as_observed_zero():
    out = summary_dict(_snapshot(devices=(_device(duty_cycle_percent=0),)))
    acc = out["node"]["accelerators"][0]
    assert acc["dutyCycle"] == 0


def test_node_cpu_memory_keys():
    node = summary_dict(_snapshot())["node"]
    assert node["cpu"] == {"time": rfc3339(T), "usageCoreNanoSeconds": 5}
    assert node["memory"] == {"time": rfc3339(T), "usageBytes": 10, "workingSetBytes": 8}
    assert node["startTime"] == rfc3339(T - 3600)


def test_no_devices_means_no_accelerators_key():
    out = summary_dict(_snapshot(devices=()))
    assert "accelerators" not in out["node"]


def test_only_cpu_and_memory_drops_accelerators():
    out = summary_dict(_snapshot(), only_cpu_and_memory=True)
    assert "accelerators" not in out["node"] and "cpu" in out["node"]


def test_lost_device_keeps_identity_and_flags_loss():
    device = _device(lost=True, memory_used_bytes=None, duty_cycle_percent=None, power_watts=None)
    acc = summary_dict(_snapshot(devices=(device,)))["node"]["accelerators"][0]
    assert acc["lost"] is True and acc["id"] == "GPU-a" and "memoryUsed" not in acc


def test_health_and_saturation_shape():
    health = DeviceHealth(conditions=(Condition("NVMLReady", "False", "XidError", "XID 79",
                                                T, "nvml-events"),))
    saturation = Saturation(window_seconds=60, memory_used_ratio_avg=0.5,
                            throttle_reason_ratios=(("hw_slowdown", 0.25),))
    acc = summary_dict(_snapshot(devices=(_device(health=health, saturation=saturation),)))
    acc = acc["node"]["accelerators"][0]
    assert acc["health"] == {"healthy": False, "conditions": [{
        "type": "NVMLReady", "status": "False", "reason": "XidError", "message": "XID 79",
        "lastTransitionTime": rfc3339(T), "source": "nvml-events"}]}
    assert acc["saturation"] == {"windowSeconds": 60, "memoryUsedRatioAvg": 0.5,
                                 "throttleReasonRatios": {"hw_slowdown": 0.25}}


def test_pods_and_top_level_containers():
    usage = ContainerUsage(start_time=T - 60,
                           cpu=CpuStats(time=T, usage_core_nano_seconds=7, usage_nano_cores=3),
                           memory=MemoryStats(time=T, working_set_bytes=100))
    container = ContainerStats(
        container_id="c" * 64, name="trainer", usage=usage,
        accelerators=(ContainerAccelerator(device_uuid="GPU-a", process_memory_used_bytes=1024,
                                           compute_utilization_percent=75.0,
                                           attributed_power_watts=100.0,
                                           attributed_energy_joules=500.0),),
    )
    pod = PodStats(uid="u-1", name="p", namespace="ns", usage=usage, containers=(container,),
                   accelerators=(PodAccelerator("GPU-a", 100.0, 500.0),))
    loose = ContainerStats(container_id="d" * 64, runtime="docker",
                           cgroup_path="/docker/" + "d" * 64)
    out = summary_dict(_snapshot(pods=(pod,), containers=(loose,)))
    pod_out = out["pods"][0]
    assert pod_out["podRef"] == {"name": "p", "namespace": "ns", "uid": "u-1"}
    c = pod_out["containers"][0]
    assert c["name"] == "trainer" and c["startTime"] == rfc3339(T - 60)
    acc = c["accelerators"][0]
    assert set(acc) >= KUBELET_KEYS
    assert acc["processMemoryUsed"] == 1024 and acc["computeUtilization"] == 75.0
    assert acc["attributedPowerWatts"] == 100.0 and acc["attributedEnergyJoules"] == 500.0
    assert pod_out["accelerators"] == [{"id": "GPU-a", "attributedPowerWatts": 100.0,
                                        "attributedEnergyJoules": 500.0}]
    top = out["containers"][0]
    assert top["id"] == "d" * 64 and top["runtime"] == "docker" and "accelerators" not in top


def test_json_bytes_round_trip():
    assert json.loads(summary_json(_snapshot())) == summary_dict(_snapshot())


def _mig_device():
    return _device(memory_used_bytes=3 << 30, duty_cycle_percent=None, sharing_mode="mig",
                   mig_instances=(MigInstanceStats(7, "MIG-7", "3g.40gb", 40 << 30, 1 << 30, 0.426),
                                  MigInstanceStats(8, None, "3g.40gb", 40 << 30, 2 << 30, None)))


def _tenant(gi, n):
    return ContainerStats(container_id=str(n) * 64, name=f"t{n}",
                          accelerators=(ContainerAccelerator("GPU-a", gpu_instance_id=gi,
                                                             mig_profile="3g.40gb"),))


def test_mig_tenant_sees_its_instance_not_the_whole_gpu():
    pod = PodStats(uid="u", name="p", namespace="ns",
                   containers=(_tenant(7, 1), _tenant(8, 2), _tenant(9, 3)))
    out = summary_dict(_snapshot(devices=(_mig_device(),), pods=(pod,)))
    one, two, gone = (c["accelerators"][0] for c in out["pods"][0]["containers"])
    assert one == {"make": "nvidia", "model": "NVIDIA H100 80GB HBM3", "id": "MIG-7",
                   "memoryTotal": 40 << 30, "memoryUsed": 1 << 30, "dutyCycle": 43,
                   "parentId": "GPU-a", "gpuInstanceId": 7, "migProfile": "3g.40gb"}
    # No activity known: no dutyCycle (never 0); no MIG UUID from NVML: the parent's.
    assert two["memoryUsed"] == 2 << 30 and "dutyCycle" not in two
    assert two["id"] == "GPU-a" and two["parentId"] == "GPU-a"
    # An instance gone from the device's list: nothing of it is known, never the GPU's figures.
    assert gone["id"] == "GPU-a" and not {"memoryTotal", "memoryUsed", "dutyCycle"} & set(gone)


def test_nameless_pods_list_their_containers_at_the_top_level():
    usage = ContainerUsage(start_time=T - 60, cpu=CpuStats(time=T, usage_core_nano_seconds=7),
                           memory=MemoryStats(time=T, working_set_bytes=100))
    c1 = ContainerStats(container_id="a" * 64, pod_uid="u-1", usage=usage)
    c2 = ContainerStats(container_id="b" * 64, pod_uid="u-2", usage=usage)
    named = PodStats(uid="u-3", name="p", namespace="ns",
                     containers=(ContainerStats(container_id="c" * 64, name="main"),))
    pods = (PodStats(uid="u-1", containers=(c1,)), PodStats(uid="u-2", containers=(c2,)), named)
    out = summary_dict(_snapshot(pods=pods))
    assert [p["podRef"] for p in out["pods"]] == [{"name": "p", "namespace": "ns", "uid": "u-3"}]
    assert [(c["id"], c["podUid"]) for c in out["containers"]] == [("a" * 64, "u-1"),
                                                                   ("b" * 64, "u-2")]
    assert out["containers"][0]["cpu"] == {"time": rfc3339(T), "usageCoreNanoSeconds": 7}


@pytest.mark.parametrize("strict", [False, True])
def test_a_recreated_pod_is_listed_once_by_the_uid_listed(strict):
    """``ml/db-0`` re-created: the old pod (kept for its counters, or still running during
    the overlap) is superseded by the new one; ``pods[]`` has one ``ml/db-0``, the new, and
    the old one's containers are listed nowhere (consumers key them by pod name too)."""
    old = PodStats(uid="u-old", name="db-0", namespace="ml", superseded_by="u-new",
                   containers=(ContainerStats(container_id="a" * 64, name="db"),),
                   accelerators=(PodAccelerator("GPU-a", None, 1466.0),))
    new = PodStats(uid="u-new", name="db-0", namespace="ml",
                   containers=(ContainerStats(container_id="b" * 64, name="db"),),
                   accelerators=(PodAccelerator("GPU-a", 180.0, 906.0),))
    out = summary_dict(_snapshot(pods=(old, new)), strict=strict)
    assert [p["podRef"]["uid"] for p in out["pods"]] == ["u-new"]
    assert "containers" not in out
    if not strict:
        assert out["pods"][0]["accelerators"] == [
            {"id": "GPU-a", "attributedPowerWatts": 180.0, "attributedEnergyJoules": 906.0}]


def _everything():
    """A snapshot that sets every extension key the summary has: MIG, DRA claims (resolved
    and not), pod accelerators, a nameless pod's container, health and saturation."""
    usage = ContainerUsage(start_time=T - 60,
                           cpu=CpuStats(time=T, usage_core_nano_seconds=7, usage_nano_cores=3),
                           memory=MemoryStats(time=T, working_set_bytes=100, usage_bytes=120,
                                              rss_bytes=90, page_faults=4, major_page_faults=1))
    claim = ClaimDevice("gpu-claim", "ns", "gpu.nvidia.com", "node-a", "gpu-0", "s-1")
    trainer = ContainerStats(
        container_id="c" * 64, name="trainer", runtime="containerd", cgroup_path="/x",
        pod_uid="u-1", usage=usage,
        accelerators=(ContainerAccelerator("GPU-a", gpu_instance_id=7, mig_profile="3g.40gb",
                                           process_memory_used_bytes=1024,
                                           compute_utilization_percent=75.0,
                                           attributed_power_watts=100.0,
                                           attributed_energy_joules=500.0, claim=claim),
                      ContainerAccelerator("GPU-gone")),
        unresolved_claims=(UnresolvedClaim(claim, "no CDI spec"),))
    pod = PodStats(uid="u-1", name="p", namespace="ns", usage=usage, containers=(trainer,),
                   accelerators=(PodAccelerator("GPU-a", 100.0, 500.0, claim),))
    nameless = PodStats(uid="u-2", containers=(ContainerStats(container_id="d" * 64,
                                                              pod_uid="u-2", usage=usage),))
    health = DeviceHealth(conditions=(Condition("NVMLReady", "False", "XidError", "XID 79",
                                                T, "nvml-events"),))
    device = _device(memory_used_bytes=3 << 30, sharing_mode="mig", health=health,
                     saturation=Saturation(window_seconds=60, memory_used_ratio_avg=0.5),
                     idle_power_watts=60.0, active_power_watts=250.0, lost=True,
                     mig_instances=(MigInstanceStats(7, "MIG-7", "3g.40gb", 40 << 30, 1 << 30,
                                                     0.426, 100.0, 500.0),))
    loose = ContainerStats(container_id="e" * 64, runtime="docker", cgroup_path="/docker/e")
    return _snapshot(devices=(device,), pods=(pod, nameless), containers=(loose,))


# The keys of k8s.io/kubelet/pkg/apis/stats/v1alpha1 that the summary can carry, per object.
KUBELET_OBJECT_KEYS = {
    "summary": {"node", "pods"},
    "node": {"nodeName", "startTime", "cpu", "memory"},
    "pod": {"podRef", "startTime", "containers", "cpu", "memory"},
    "podRef": {"name", "namespace", "uid"},
    "container": {"name", "startTime", "cpu", "memory", "accelerators"},
    "cpu": {"time", "usageNanoCores", "usageCoreNanoSeconds"},
    "memory": {"time", "availableBytes", "usageBytes", "workingSetBytes", "rssBytes",
               "pageFaults", "majorPageFaults"},
    "accelerator": KUBELET_KEYS,
}


def _foreign_keys(out):
    """Every key of a summary outside the kubelet's types, as (object, key)."""
    found = []

    def check(kind, obj):
        found.extend((kind, k) for k in obj if k not in KUBELET_OBJECT_KEYS[kind])
        for k in ("cpu", "memory"):
            if k in obj and kind != "summary":
                check(k, obj[k])

    check("summary", out)
    check("node", out["node"])
    for pod in out["pods"]:
        check("pod", pod)
        check("podRef", pod["podRef"])
        for container in pod["containers"]:
            check("container", container)
            for acc in container.get("accelerators", ()):
                check("accelerator", acc)
    return found


def test_strict_keeps_only_the_kubelets_keys():
    snapshot = _everything()
    full = summary_dict(snapshot)
    assert {("summary", "containers"), ("node", "accelerators"), ("pod", "accelerators"),
            ("container", "unresolvedClaims"), ("accelerator", "parentId"),
            ("accelerator", "claim")} <= set(_foreign_keys(full))
    for only in (False, True):
        strict = summary_dict(snapshot, strict=True, only_cpu_and_memory=only)
        assert _foreign_keys(strict) == [], only
    strict = summary_dict(snapshot, strict=True)
    # What the kubelet's types hold is kept as the default body has it.
    assert strict["node"] == {k: v for k, v in full["node"].items() if k != "accelerators"}
    assert [p["podRef"] for p in strict["pods"]] == [p["podRef"] for p in full["pods"]]
    pod, full_pod = strict["pods"][0], full["pods"][0]
    assert pod["cpu"] == full_pod["cpu"] and pod["memory"] == full_pod["memory"]
    mig, gone = pod["containers"][0]["accelerators"]
    assert mig == {"make": "nvidia", "model": "NVIDIA H100 80GB HBM3", "id": "MIG-7",
                   "memoryTotal": 40 << 30, "memoryUsed": 1 << 30, "dutyCycle": 43}
    assert gone == {"id": "GPU-gone"}      # a GPU not listed: its make and figures unknown
    assert json.loads(summary_json(snapshot, strict=True)) == strict


def test_strict_body_decodes_into_the_kubelets_go_types(kubelet_decoder):
    snapshot = _everything()
    with pytest.raises(DecodeError, match="unknown field"):
        kubelet_decoder(summary_json(snapshot), strict=True)
    for only in (False, True):
        seen = kubelet_decoder(summary_json(snapshot, strict=True, only_cpu_and_memory=only),
                               strict=True)
        assert [p["podRef"]["name"] for p in seen["pods"]] == ["p"]



def test_documented_strict_schema_is_closed_over_the_kubelets_keys():
    """``components.schemas.KubeletSummary`` of /openapi.json allows exactly the keys above."""
    summary = openapi_document()["components"]["schemas"]["KubeletSummary"]
    node = summary["properties"]["node"]
    pod = summary["properties"]["pods"]["items"]
    container = pod["properties"]["containers"]["items"]
    accelerator = container["properties"]["accelerators"]["items"]
    for kind, schema in (("summary", summary), ("node", node), ("pod", pod),
                         ("podRef", pod["properties"]["podRef"]), ("container", container),
                         ("accelerator", accelerator), ("cpu", node["properties"]["cpu"]),
                         ("memory", container["properties"]["memory"])):
        assert set(schema["properties"]) == KUBELET_OBJECT_KEYS[kind], kind
        assert schema["additionalProperties"] is False, kind


# ------------------------------------------------------------------ tenants[]

def _tenants_snapshot():
    from tests.support.tenant_snapshot import tenant_snapshot
    return tenant_snapshot()


def test_tenants_that_are_no_container_are_listed_apart():
    """A service, a user's sessions, a Slurm job step and a process in ``tenants[]``, with
    the identity of their kind, cgroup, usage and accelerators as a container's; the top-level
    ``containers[]`` keeps the Docker container and the nameless pod's; what ended (a pod, a
    service) is in neither."""
    out = summary_dict(_tenants_snapshot())
    assert [p["podRef"]["name"] for p in out["pods"]] == ["trainer-0"]
    assert [(c["id"], c.get("name"), c.get("podUid")) for c in out["containers"]] == [
        ("2" * 64, None, "u2"), ("3" * 64, "jupyter", None)]
    identity = [{k: v for k, v in t.items()
                 if k not in ("startTime", "cpu", "memory", "accelerators")}
                for t in out["tenants"]]
    assert identity == [
        {"kind": "service", "id": "service:ollama.service", "name": "ollama.service",
         "unit": "ollama.service", "cgroup": "/system.slice/ollama.service"},
        {"kind": "session", "id": "session:1000", "name": "alice", "uid": 1000, "user": "alice",
         "cgroup": "/user.slice/user-1000.slice"},          # the tenant's own cgroup
        {"kind": "job", "id": "job:4242:0", "name": "job 4242", "uid": 1001, "user": "bob",
         "jobId": "4242", "step": "0",
         "cgroup": "/system.slice/slurmstepd.scope/job_4242/step_0"},
        {"kind": "process", "id": "process:1002:python3", "name": "python3", "uid": 1002,
         "command": "python3"}]
    service, session, _, process = out["tenants"]
    assert service["startTime"] == rfc3339(T - 60)
    assert service["cpu"] == {"time": rfc3339(T), "usageNanoCores": 100,
                              "usageCoreNanoSeconds": 5_000_000}
    assert service["memory"] == {"time": rfc3339(T), "workingSetBytes": 1 << 20}
    # Accelerators as a container's: each MIG instance its own entry, under its MIG device.
    assert [(a["id"], a["parentId"], a["gpuInstanceId"], a["attributedEnergyJoules"],
             a["idleShareEnergyJoules"]) for a in service["accelerators"]] == [
        ("MIG-m7", "GPU-mmmm", 7, 30.0, 5.0), ("MIG-m8", "GPU-mmmm", 8, 20.0, 5.0)]
    assert session["accelerators"] == [{
        "make": "nvidia", "model": "NVIDIA H100 80GB HBM3", "id": "GPU-aaaa",
        "memoryTotal": 85520809984, "attributedPowerWatts": 6.0,
        "attributedEnergyJoules": 60.0, "idleSharePowerWatts": 3.0,
        "idleShareEnergyJoules": 40.0}]
    assert not {"startTime", "cpu", "memory", "cgroup"} & set(process)   # unknown: absent
    body = json.dumps(out)
    assert "old.service" not in body and "old-0" not in body and "0" * 64 not in body


def test_strict_leaves_tenants_out_and_only_cpu_and_memory_their_accelerators(kubelet_decoder):
    snapshot = _tenants_snapshot()
    strict = summary_dict(snapshot, strict=True)
    assert set(strict) == {"node", "pods"} and _foreign_keys(strict) == []
    seen = kubelet_decoder(summary_json(snapshot, strict=True), strict=True)
    assert [p["podRef"]["name"] for p in seen["pods"]] == ["trainer-0"]
    with pytest.raises(DecodeError, match='unknown field "tenants"'):
        kubelet_decoder(json.dumps({"node": strict["node"], "pods": [],
                                    "tenants": []}).encode(), strict=True)
    assert "tenants" not in summary_dict(snapshot, strict=True, only_cpu_and_memory=True)
    light = summary_dict(snapshot, only_cpu_and_memory=True)
    assert [t["name"] for t in light["tenants"]] == ["ollama.service", "alice", "job 4242",
                                                     "python3"]
    assert all("accelerators" not in t for t in light["tenants"])


def test_no_live_tenant_no_tenants_key():
    snapshot = _tenants_snapshot()
    containers = tuple(c for c in snapshot.containers if c.tenant is None)
    assert "tenants" not in summary_dict(replace(snapshot, containers=containers))
    # Ended, or holding no GPU: not listed either.
    idle = tuple(replace(c, accelerators=()) if c.tenant is not None else c
                 for c in snapshot.containers)
    assert "tenants" not in summary_dict(replace(snapshot, containers=idle))


def test_the_document_describes_every_tenants_key():
    """``tenants[]`` in /openapi.json's Summary: each key the body has is declared, and the
    body validates against the schema."""
    jsonschema_rs = pytest.importorskip("jsonschema_rs")
    out = summary_dict(_tenants_snapshot())
    schema = openapi_document()["components"]["schemas"]["Summary"]
    tenant = schema["properties"]["tenants"]["items"]
    declared = set(tenant["properties"])
    accelerator = set(tenant["properties"]["accelerators"]["items"]["properties"])
    for entry in out["tenants"]:
        assert set(entry) <= declared and set(tenant["required"]) <= set(entry)
        assert entry["kind"] in tenant["properties"]["kind"]["enum"]
        for acc in entry["accelerators"]:
            assert set(acc) <= accelerator
    jsonschema_rs.validate(schema, out)
    bad = dict(out, tenants=[dict(out["tenants"][0], kind="pod")])
    with pytest.raises(jsonschema_rs.ValidationError):
        jsonschema_rs.validate(schema, bad)
