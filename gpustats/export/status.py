"""``GET /api/v1/status``: the daemon's own state from one snapshot: each source and the tick."""

from __future__ import annotations

from typing import Any

from gpustats.export.summary import rfc3339
from gpustats.export.text import json_bytes
from gpustats.model.snapshot import Snapshot
from gpustats.model.sources import SourceState


def source_dict(state: SourceState, now: float) -> dict[str, Any]:
    """One source; ``lastSuccessAgeSeconds`` is counted to the snapshot's time."""
    out: dict[str, Any] = {"name": state.source, "state": state.state,
                           "since": rfc3339(state.since)}
    if state.last_success_time is not None:
        out["lastSuccessTime"] = rfc3339(state.last_success_time)
        out["lastSuccessAgeSeconds"] = round(max(0.0, now - state.last_success_time), 3)
    if state.last_error is not None:
        assert state.last_error_time is not None     # set with it (CollectionErrors.failed)
        out["lastErrorReason"] = state.last_error_reason
        out["lastError"] = state.last_error
        out["lastErrorTime"] = rfc3339(state.last_error_time)
    return out


def status_json(snapshot: Snapshot) -> bytes:
    status = snapshot.status
    body: dict[str, Any] = {
        "nodeName": snapshot.node.node_name,
        "snapshotSequence": snapshot.sequence,
        "snapshotTime": rfc3339(snapshot.taken_at),
        "nvmlLoaded": status.nvml_loaded,
        "gpusOnPciBus": status.gpus_on_pci_bus,
        "vendors": [{"vendor": v.vendor, "gpusOnPciBus": v.gpus_on_pci_bus,
                     "interfaceOpen": v.interface_open} for v in status.vendors],
        "sources": [source_dict(s, snapshot.taken_at) for s in status.sources],
        "collectionErrors": [{"source": s, "reason": r, "count": n}
                             for s, r, n in status.collection_errors],
    }
    if status.tick_duration_seconds is not None:
        body["tickDurationSeconds"] = round(status.tick_duration_seconds, 6)
    if status.driver_version is not None:
        body["driverVersion"] = status.driver_version
    if status.dcgm_exporter_url is not None:
        body["dcgmExporterUrl"] = status.dcgm_exporter_url
    return json_bytes(body)
