"""``GET /api/v1/gpus`` and ``/api/v1/gpus/<id>``: each GPU's identity, health and
saturation, from one snapshot, with the device API's resource versions (``gpu_events``).

A GPU's object is its list item: ``index``, ``uuid``, identity, ``lost``, ``health``,
``saturation`` and ``metadata`` (``name``: the lowercased UUID, as NVSentinel names a Gpu;
``resourceVersion``). The version covers every key but ``saturation`` (``UNVERSIONED_KEYS``):
saturation moves every tick, the rest only when the GPU changes.
"""

from __future__ import annotations

from typing import Any, Mapping

from gpustats.export.summary import health_dict, saturation_dict
from gpustats.export.text import json_bytes
from gpustats.model.record import record
from gpustats.model.snapshot import DeviceStats, Snapshot

# Keys of a GPU's object that move every tick: left out of its version and its watch events'
# diff (an event still carries their value at that snapshot).
UNVERSIONED_KEYS = frozenset({"saturation"})


@record
class GpuVersions:
    """The device API's resource versions as of one snapshot: the list's (the last event's),
    and each GPU object's (the event that last changed it)."""

    revision: int
    objects: Mapping[str, int]


def gpu_dict(device: DeviceStats) -> dict[str, Any]:
    ident = device.identity
    out: dict[str, Any] = {"index": ident.index, "uuid": ident.uuid}
    for key, value in (("vendor", ident.vendor), ("name", ident.name),
                       ("minorNumber", ident.minor_number),
                       ("pciBusId", ident.pci_bus_id), ("architecture", ident.architecture),
                       ("memoryTotal", ident.memory_total_bytes)):
        if value is not None:
            out[key] = value
    out["lost"] = device.lost
    if device.health is not None:
        out["health"] = health_dict(device.health)
    if device.saturation is not None:
        out["saturation"] = saturation_dict(device.saturation)
    return out


def gpu_name(uuid: str) -> str:
    """A GPU's object name: its UUID lowercased (NVSentinel's ``metadata.name``)."""
    return uuid.lower()


def versioned_part(item: Mapping[str, Any]) -> dict[str, Any]:
    """What a GPU's resource version covers: its object without ``UNVERSIONED_KEYS``."""
    return {key: value for key, value in item.items() if key not in UNVERSIONED_KEYS}


def with_metadata(item: dict[str, Any], resource_version: int) -> dict[str, Any]:
    """``item`` (a ``gpu_dict``) with its ``metadata``: name and resource version."""
    return {**item, "metadata": {"name": gpu_name(item["uuid"]),
                                 "resourceVersion": str(resource_version)}}


def gpu_object(device: DeviceStats, versions: GpuVersions) -> dict[str, Any]:
    """One GPU as the device API serves it (a list item, ``GET /api/v1/gpus/<id>``)."""
    uuid = device.identity.uuid
    return with_metadata(gpu_dict(device), versions.objects.get(uuid, versions.revision))


def gpu_json(device: DeviceStats, versions: GpuVersions) -> bytes:
    return json_bytes(gpu_object(device, versions))


def gpus_json(snapshot: Snapshot, versions: GpuVersions) -> bytes:
    body = {
        "nodeName": snapshot.node.node_name,
        "nvmlLoaded": snapshot.status.nvml_loaded,
        "resourceVersion": str(versions.revision),
        "gpus": [gpu_object(d, versions) for d in snapshot.devices],
    }
    return json_bytes(body)
