"""The kubelet Summary API view of a snapshot (``GET /stats/summary``).

Keys follow k8s.io/kubelet/pkg/apis/stats/v1alpha1: camelCase, times as UTC RFC 3339 with
second precision, every unknown value left out (never 0). Accelerators carry the kubelet's six
keys plus gpustats' extension keys; tenants that are no container (services, sessions, Slurm job
steps, processes) are listed in the extension ``tenants[]``. ``strict`` leaves out every key the
kubelet's types do not declare (node and pod ``accelerators``, top-level ``containers`` and
``tenants``, extension keys), so a decoder that rejects unknown fields reads the body. Every
name from the host or a source is shown by the one rule of ``export.text``, field by field (a
walk over the whole body would cost as much as encoding it).
"""

from __future__ import annotations

import json
from datetime import datetime, UTC
from typing import Any

from gpustats.export.accelerators import container_view
from gpustats.export.tenants import entry_identity, is_container
from gpustats.export.text import shown, shown_or_none
from gpustats.model.health import DeviceHealth, Saturation
from gpustats.model.host import CpuStats, MemoryStats
from gpustats.model.snapshot import (
    ContainerAccelerator, ContainerStats, DeviceStats, MigInstanceStats, PodStats, Snapshot,
)
from gpustats.model.containers import ContainerUsage
from gpustats.model.device_values import DEVICE_VALUES, KUBELET_KEYS
from gpustats.model.dra import ClaimDevice

# The device values of ``node.accelerators[]`` by key: the kubelet's, in its order, then the
# rest.
_KUBELET_VALUES = tuple((key, next(v for v in DEVICE_VALUES if v.key == key))
                        for key in KUBELET_KEYS)
_EXTENSION_VALUES = tuple((v.key, v) for v in DEVICE_VALUES
                          if v.key is not None and v.key not in KUBELET_KEYS)


def rfc3339(epoch_seconds: float) -> str:
    return datetime.fromtimestamp(int(epoch_seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        out[key] = value


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def cpu_dict(cpu: CpuStats) -> dict[str, Any]:
    out: dict[str, Any] = {"time": rfc3339(cpu.time)}
    _put(out, "usageNanoCores", cpu.usage_nano_cores)
    _put(out, "usageCoreNanoSeconds", cpu.usage_core_nano_seconds)
    return out


def memory_dict(memory: MemoryStats) -> dict[str, Any]:
    out: dict[str, Any] = {"time": rfc3339(memory.time)}
    _put(out, "availableBytes", memory.available_bytes)
    _put(out, "usageBytes", memory.usage_bytes)
    _put(out, "workingSetBytes", memory.working_set_bytes)
    _put(out, "rssBytes", memory.rss_bytes)
    _put(out, "pageFaults", memory.page_faults)
    _put(out, "majorPageFaults", memory.major_page_faults)
    return out


def _usage(out: dict[str, Any], usage: ContainerUsage) -> None:
    if usage.cpu is not None:
        out["cpu"] = cpu_dict(usage.cpu)
    if usage.memory is not None:
        out["memory"] = memory_dict(usage.memory)


def _make(device: DeviceStats | None) -> dict[str, Any]:
    """The kubelet's ``make``: the GPU's vendor, left out when unknown."""
    vendor = device.identity.vendor if device is not None else None
    return {"make": shown(vendor)} if vendor else {}


def _kubelet_keys(device: DeviceStats) -> dict[str, Any]:
    """make, model, id, memoryTotal, memoryUsed, dutyCycle (each left out when unknown)."""
    ident = device.identity
    out = _make(device)
    _put(out, "model", shown_or_none(ident.name))
    out["id"] = shown(ident.uuid)
    for key, value in _KUBELET_VALUES:
        _put(out, key, value.rounded(device))
    return out


def health_dict(health: DeviceHealth) -> dict[str, Any]:
    out: dict[str, Any] = {
        "healthy": health.healthy,
        "conditions": [
            {"type": c.type, "status": c.status, "reason": shown_or_none(c.reason),
             "message": shown_or_none(c.message),
             "lastTransitionTime": rfc3339(c.last_transition_time), "source": c.source}
            for c in health.conditions
        ],
    }
    if health.recommended_action:
        out["recommendedAction"] = health.recommended_action
    return out


def saturation_dict(saturation: Saturation) -> dict[str, Any]:
    out: dict[str, Any] = {"windowSeconds": saturation.window_seconds}
    if saturation.throttle_violation_ratios is not None:
        out["throttleViolationRatios"] = dict(saturation.throttle_violation_ratios)
    if saturation.throttle_reason_ratios is not None:
        out["throttleReasonRatios"] = dict(saturation.throttle_reason_ratios)
    for key, value in (
        ("memoryUsedRatioAvg", saturation.memory_used_ratio_avg),
        ("memoryUsedRatioMax", saturation.memory_used_ratio_max),
        ("memoryPressureRatio", saturation.memory_pressure_ratio),
        ("xidErrorCount", saturation.xid_error_count),
        ("smActiveAvg", saturation.sm_active_avg),
        ("smOccupancyAvg", saturation.sm_occupancy_avg),
        ("dramActiveAvg", saturation.dram_active_avg),
        ("dramActiveMax", saturation.dram_active_max),
        ("pcieTxBytesAvg", saturation.pcie_tx_bytes_avg),
        ("pcieRxBytesAvg", saturation.pcie_rx_bytes_avg),
        ("nvlinkTxBytesAvg", saturation.nvlink_tx_bytes_avg),
        ("nvlinkRxBytesAvg", saturation.nvlink_rx_bytes_avg),
    ):
        _put(out, key, value)
    return out


def _mig_dict(instance: MigInstanceStats) -> dict[str, Any]:
    out: dict[str, Any] = {"gpuInstanceId": instance.gpu_instance_id}
    _put(out, "id", shown_or_none(instance.uuid))
    _put(out, "profile", shown_or_none(instance.profile))
    _put(out, "memoryTotal", instance.memory_total_bytes)
    _put(out, "memoryUsed", instance.memory_used_bytes)
    _put(out, "activityRatio", _round(instance.activity_ratio, 4))
    _put(out, "attributedPowerWatts", _round(instance.attributed_power_watts))
    _put(out, "attributedEnergyJoules", _round(instance.attributed_energy_joules))
    return out


def device_dict(device: DeviceStats) -> dict[str, Any]:
    """A ``node.accelerators[]`` entry."""
    ident = device.identity
    out = _kubelet_keys(device)
    out["index"] = ident.index
    _put(out, "minorNumber", ident.minor_number)
    _put(out, "pciBusId", shown_or_none(ident.pci_bus_id))
    if device.lost:
        out["lost"] = True
    for key, value in _EXTENSION_VALUES:
        _put(out, key, value.rounded(device))
    _put(out, "sharingMode", device.sharing_mode)
    if device.mig_instances:
        out["migInstances"] = [_mig_dict(m) for m in device.mig_instances]
    if device.health is not None:
        out["health"] = health_dict(device.health)
    if device.saturation is not None:
        out["saturation"] = saturation_dict(device.saturation)
    return out


def container_accelerator_dict(acc: ContainerAccelerator, device: DeviceStats | None,
                               *, strict: bool = False) -> dict[str, Any]:
    """A container's view of a GPU: the kubelet keys of the device, or of its MIG instance
    (with the GPU's UUID as ``parentId``), plus what its processes account for; ``strict``:
    the kubelet's six keys only."""
    out = _make(device)
    if device is None:
        out["id"] = shown(acc.device_uuid)
    else:
        view = container_view(acc, device)
        _put(out, "model", shown_or_none(view.model))
        out["id"] = shown(view.id)
        _put(out, "memoryTotal", view.memory_total_bytes)
        _put(out, "memoryUsed", view.memory_used_bytes)
        _put(out, "dutyCycle", view.duty_cycle_percent)
        if not strict:
            _put(out, "parentId", shown_or_none(view.parent_id))
    if strict:
        return out
    _put(out, "processMemoryUsed", acc.process_memory_used_bytes)
    _put(out, "computeUtilization", _round(acc.compute_utilization_percent, 2))
    _put(out, "attributedPowerWatts", _round(acc.attributed_power_watts))
    _put(out, "attributedEnergyJoules", _round(acc.attributed_energy_joules))
    _put(out, "idleSharePowerWatts", _round(acc.idle_share_power_watts))
    _put(out, "idleShareEnergyJoules", _round(acc.idle_share_energy_joules))
    _put(out, "gpuInstanceId", acc.gpu_instance_id)
    _put(out, "migProfile", shown_or_none(acc.mig_profile))
    if acc.claim is not None:
        claim_keys(out, acc.claim)
    return out


def _claim_ref(claim: ClaimDevice) -> dict[str, Any]:
    return {"name": shown_or_none(claim.claim_name),
            "namespace": shown_or_none(claim.claim_namespace)}


def claim_keys(out: dict[str, Any], claim: ClaimDevice) -> dict[str, Any]:
    """The DRA claim that allocated a device: ``claim{name, namespace}``, driver, pool, device."""
    out["claim"] = _claim_ref(claim)
    _put(out, "driver", shown_or_none(claim.driver_name))
    _put(out, "pool", shown_or_none(claim.pool_name))
    _put(out, "device", shown_or_none(claim.device_name))
    _put(out, "shareId", shown_or_none(claim.share_id))
    return out


def _container_dict(container: ContainerStats, devices: dict[str, DeviceStats],
                    fallback_start: float, *, with_accelerators: bool,
                    top_level: bool, pod_uid: str | None = None,
                    strict: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if top_level:
        out["id"] = shown(container.container_id)
        _put(out, "name", shown_or_none(container.name))
        _put(out, "podUid", shown_or_none(pod_uid))
        _put(out, "runtime", shown_or_none(container.runtime))
        _put(out, "cgroup", shown_or_none(container.cgroup_path))
    else:
        out["name"] = shown(container.name or container.container_id)
    start = container.usage.start_time
    out["startTime"] = rfc3339(start if start is not None else fallback_start)
    _usage(out, container.usage)
    if with_accelerators and container.accelerators:
        out["accelerators"] = [
            container_accelerator_dict(a, devices.get(a.device_uuid), strict=strict)
            for a in container.accelerators]
    if with_accelerators and not strict and container.unresolved_claims:
        out["unresolvedClaims"] = [claim_keys({"reason": u.reason}, u.claim)
                                   for u in container.unresolved_claims]
    return out


def _tenant_dict(entry: ContainerStats, devices: dict[str, DeviceStats], *,
                 with_accelerators: bool) -> dict[str, Any]:
    """A ``tenants[]`` entry: kind, key, name and the identity its kind has, its cgroup, usage
    and accelerators as a container's."""
    ident = entry_identity(entry)
    out: dict[str, Any] = {"kind": ident.kind, "id": shown(entry.container_id),
                           "name": shown(ident.name)}
    _put(out, "unit", shown_or_none(ident.unit))
    _put(out, "uid", ident.uid)
    _put(out, "user", shown_or_none(ident.user))
    _put(out, "jobId", shown_or_none(ident.job_id))
    _put(out, "step", shown_or_none(ident.step))
    _put(out, "command", shown_or_none(ident.command))
    cgroup = entry.cgroup_path
    if cgroup is None and entry.tenant is not None:
        cgroup = entry.tenant.cgroup_path
    _put(out, "cgroup", shown_or_none(cgroup))
    start = entry.usage.start_time
    if start is not None:
        out["startTime"] = rfc3339(start)
    _usage(out, entry.usage)
    if with_accelerators:
        out["accelerators"] = [container_accelerator_dict(a, devices.get(a.device_uuid))
                               for a in entry.accelerators]
    return out


def _pod_dict(pod: PodStats, devices: dict[str, DeviceStats], fallback_start: float,
              *, with_accelerators: bool, strict: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "podRef": {"name": shown_or_none(pod.name), "namespace": shown_or_none(pod.namespace),
                   "uid": shown(pod.uid)},
    }
    start = pod.usage.start_time
    out["startTime"] = rfc3339(start if start is not None else fallback_start)
    _usage(out, pod.usage)
    out["containers"] = [
        _container_dict(c, devices, fallback_start, with_accelerators=with_accelerators,
                        top_level=False, strict=strict)
        for c in pod.containers
    ]
    if with_accelerators and not strict and pod.accelerators:
        accs = []
        for acc in pod.accelerators:
            entry: dict[str, Any] = {"id": shown(acc.device_uuid)}
            _put(entry, "attributedPowerWatts", _round(acc.attributed_power_watts))
            _put(entry, "attributedEnergyJoules", _round(acc.attributed_energy_joules))
            _put(entry, "idleSharePowerWatts", _round(acc.idle_share_power_watts))
            _put(entry, "idleShareEnergyJoules", _round(acc.idle_share_energy_joules))
            if acc.claim is not None:
                entry["claim"] = _claim_ref(acc.claim)
            accs.append(entry)
        out["accelerators"] = accs
    return out


def _named(pod: PodStats) -> bool:
    return bool(pod.name and pod.namespace)


def summary_dict(snapshot: Snapshot, *, only_cpu_and_memory: bool = False,
                 strict: bool = False) -> dict[str, Any]:
    """The summary; ``strict``: only the keys of the kubelet's v1alpha1 types."""
    node = snapshot.node
    node_out: dict[str, Any] = {"nodeName": shown(node.node_name),
                                "startTime": rfc3339(node.start_time)}
    if node.cpu is not None:
        node_out["cpu"] = cpu_dict(node.cpu)
    if node.memory is not None:
        node_out["memory"] = memory_dict(node.memory)
    full = not only_cpu_and_memory
    if full and not strict and snapshot.devices:
        node_out["accelerators"] = [device_dict(d) for d in snapshot.devices]
    devices = {d.identity.uuid: d for d in snapshot.devices}
    # A pod no source names stays out of pods[]: consumers key pods by namespace/name, so two
    # nameless pods would overwrite each other. Its containers are listed at the top level
    # with the pod's UID until a name source names the pod. For the same reason one pod is
    # listed per namespace/name (``listed_pods``): a pod re-created under its name gives way
    # to the new one, as in the kubelet's own Summary.
    # Tenants that are no container are listed apart (``tenants[]``), while they hold a GPU;
    # what ended (kept for its counters) is listed in neither.
    named = [p for p in snapshot.listed_pods() if _named(p)]
    loose = [(c, p.uid if p is not None else c.pod_uid)
             for p, c in snapshot.containers_with_pods()
             if (p is None or not (_named(p) or p.ended)) and not c.ended and is_container(c)]
    out: dict[str, Any] = {
        "node": node_out,
        "pods": [_pod_dict(p, devices, node.start_time, with_accelerators=full, strict=strict)
                 for p in named],
    }
    if strict:
        return out
    if loose:
        out["containers"] = [
            _container_dict(c, devices, node.start_time, with_accelerators=full, top_level=True,
                            pod_uid=uid)
            for c, uid in loose
        ]
    tenants = [c for c in snapshot.containers
               if not (c.ended or is_container(c)) and c.accelerators]
    if tenants:
        out["tenants"] = [_tenant_dict(c, devices, with_accelerators=full) for c in tenants]
    return out


def summary_json(snapshot: Snapshot, *, only_cpu_and_memory: bool = False,
                 strict: bool = False) -> bytes:
    return json.dumps(summary_dict(snapshot, only_cpu_and_memory=only_cpu_and_memory,
                                   strict=strict), separators=(",", ":")).encode()
