"""``GET /api/v1/gpus``: each GPU's identity, health and saturation, from one snapshot."""

from __future__ import annotations

from typing import Any

from gpustats.export.summary import health_dict, saturation_dict
from gpustats.export.text import json_bytes
from gpustats.model.snapshot import DeviceStats, Snapshot


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


def gpus_json(snapshot: Snapshot) -> bytes:
    body = {
        "nodeName": snapshot.node.node_name,
        "nvmlLoaded": snapshot.status.nvml_loaded,
        "gpus": [gpu_dict(d) for d in snapshot.devices],
    }
    return json_bytes(body)
