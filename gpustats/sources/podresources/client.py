"""kubelet pod-resources ``List``: which container holds which GPU (and MIG instance).

The NVIDIA device plugin reports ``GPU-<uuid>`` for a full GPU, ``MIG-<uuid>`` for a MIG
device (``MIG-GPU-<uuid>/<gi>/<ci>`` on drivers before R470), and ``<id>::<n>`` for
time-slicing and MPS replicas. GKE's plugin reports ``nvidia0``-style names, which carry no
UUID: those are not mapped (the NVML process path still is).

Devices allocated through ResourceClaims (DRA) come in ``dynamic_resources`` instead, from
every driver: which of them are GPUs is decided later, from their CDI devices. Kubelets before
1.35 send no ``share_id`` and before 1.31 no driver, pool or device name; those stay ``None``.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Callable

from gpustats.model.containers import DeviceRef, PodDeviceAllocation
from gpustats.model.dra import ClaimDevice
from gpustats.sources.errors import CollectionErrors
from gpustats.sources.grpc_channel import UnixChannel

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
_LEGACY_MIG = re.compile(r"^MIG-(GPU-[0-9A-Za-z-]+)/(\d+)/(\d+)$")
_UUID_BODY = re.compile(r"^[0-9A-Za-z][0-9A-Za-z-]*$")


def parse_device_id(device_id: str) -> DeviceRef | None:
    """A device-plugin ID → DeviceRef; ``None`` for IDs that name no NVML UUID."""
    text = device_id.strip()
    replica = None
    base, sep, suffix = text.rpartition("::")
    if sep:
        if not suffix.isdigit():
            return None
        text, replica = base, int(suffix)
    legacy = _LEGACY_MIG.match(text)
    if legacy:
        return DeviceRef(kind="mig", uuid=text, replica=replica, parent_uuid=legacy.group(1),
                         gpu_instance_id=int(legacy.group(2)))
    for prefix, kind in (("GPU-", "gpu"), ("MIG-", "mig")):
        if text.startswith(prefix) and _UUID_BODY.match(text[len(prefix):] or "-x"):
            if len(text) > len(prefix):
                return DeviceRef(kind=kind, uuid=text, replica=replica)
    return None


def claim_devices(dynamic_resource) -> list[ClaimDevice]:
    """One pod-resources ``DynamicResource`` → a ClaimDevice per claimed device."""
    out = []
    for resource in dynamic_resource.claim_resources:
        out.append(ClaimDevice(
            claim_name=dynamic_resource.claim_name,
            claim_namespace=dynamic_resource.claim_namespace,
            driver_name=resource.driver_name or None, pool_name=resource.pool_name or None,
            device_name=resource.device_name or None,
            share_id=resource.share_id if resource.HasField("share_id") else None,
            cdi_devices=tuple(d.name for d in resource.cdi_devices if d.name)))
    return out


def allocations_from_response(response) -> tuple[PodDeviceAllocation, ...]:
    """Flatten a ListPodResourcesResponse to NVIDIA device-plugin and DRA claim allocations.

    A claim device shared by several containers is one object (each container lists it), so
    every later look-up of it is by the same object."""
    out = []
    shared: dict[ClaimDevice, ClaimDevice] = {}
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if not devices.resource_name.startswith("nvidia.com/"):
                    continue
                for device_id in devices.device_ids:
                    out.append(PodDeviceAllocation(
                        pod_name=pod.name, pod_namespace=pod.namespace,
                        container_name=container.name, resource_name=devices.resource_name,
                        device_id=device_id, device=parse_device_id(device_id)))
            for dynamic in container.dynamic_resources:
                for claim in claim_devices(dynamic):
                    claim = shared.setdefault(claim, claim)
                    out.append(PodDeviceAllocation(
                        pod_name=pod.name, pod_namespace=pod.namespace,
                        container_name=container.name, resource_name=claim.driver_name or "",
                        device_id=f"{claim.pool_name or ''}/{claim.device_name or ''}",
                        device=None, claim=claim))
    return tuple(out)


def _stub(channel):
    # Imported on first use: the generated modules pull in grpc and protobuf.
    from gpustats.sources.podresources import podresources_api_pb2_grpc as api_grpc
    return api_grpc.PodResourcesListerStub(channel)


def _list(stub, timeout: float):
    from gpustats.sources.podresources import podresources_api_pb2 as api
    return stub.List(api.ListPodResourcesRequest(), timeout=timeout)


class PodResourcesClient:
    """Cached ``List`` over the kubelet socket; ``None`` when the source is off or failing."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, *, timeout_seconds: float = 1.0,
                 cache_seconds: float = 15.0, stale_after_seconds: float = 300.0,
                 errors: CollectionErrors | None = None,
                 monotonic: Callable[[], float] = time.monotonic):
        self._channel = UnixChannel(socket_path, "pod-resources", log,
                                    timeout_seconds=timeout_seconds,
                                    source="pod_resources", errors=errors)
        self._cache_seconds = cache_seconds
        self._stale_after = stale_after_seconds
        self._monotonic = monotonic
        self._cached: tuple[PodDeviceAllocation, ...] | None = None
        self._cached_at: float | None = None
        self._last_attempt: float | None = None
        self.calls = 0
        self.generation = 0      # counts the listings received: the same while one is kept

    def allocations(self) -> tuple[PodDeviceAllocation, ...] | None:
        now = self._monotonic()
        if self._last_attempt is not None and now - self._last_attempt < self._cache_seconds:
            return self._fresh(now)
        self._last_attempt = now
        self.calls += 1
        response = self._channel.call(_stub, _list)
        if response is not None:
            self._cached = allocations_from_response(response)
            self.generation += 1
            self._cached_at = now
        return self._fresh(now)

    def _fresh(self, now: float) -> tuple[PodDeviceAllocation, ...] | None:
        if self._cached_at is None or now - self._cached_at > self._stale_after:
            return None
        return self._cached

    def close(self) -> None:
        self._channel.close()
