"""The OpenAPI 3 description of the HTTP API, served at ``/openapi.json``."""

from __future__ import annotations

from typing import Any, Iterable

from gpustats import __version__
from gpustats.model.device import VENDOR_AMD, VENDOR_INTEL, VENDOR_NVIDIA
from gpustats.model.device_values import DEVICE_VALUES, KUBELET_KEYS, DeviceValue
from gpustats.model.health import CONDITION_TYPES
from gpustats.model.history import GPU_VALUES
from gpustats.web.openapi_usage import usage_path

_TIME = {"type": "string", "format": "date-time"}
_U64 = {"type": "integer", "minimum": 0}
_NUM = {"type": "number", "minimum": 0}

_ERROR = {
    "type": "object", "required": ["error", "message"],
    "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
}
_CPU = {
    "type": "object", "required": ["time"],
    "properties": {"time": _TIME, "usageNanoCores": _U64, "usageCoreNanoSeconds": _U64},
}
_MEMORY = {
    "type": "object", "required": ["time"],
    "properties": {"time": _TIME, "availableBytes": _U64, "usageBytes": _U64,
                   "workingSetBytes": _U64, "rssBytes": _U64, "pageFaults": _U64,
                   "majorPageFaults": _U64},
}
_CONDITION = {
    "type": "object",
    "required": ["type", "status", "reason", "message", "lastTransitionTime", "source"],
    "properties": {"type": {"type": "string", "enum": list(CONDITION_TYPES), "description":
                            "NVMLReady (XIDs, double-bit ECC, GPU lost), EccHealth (volatile "
                            "double-bit ECC), RowRemapHealth (row remapping pending or "
                            "failed; absent where the GPU gives none); AMD and Intel, from "
                            "the kernel's files: RasHealth (uncorrectable RAS errors), "
                            "RetiredPagesHealth (VRAM pages pending or failing retirement), "
                            "ResetHealth (a hang or reset captured), PciBusHealth (config "
                            "space reads all ones: off the bus); Ready (computed: True "
                            "when every other condition is True, False when any is False, "
                            "else Unknown)"},
                   "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                   "reason": {"type": "string"}, "message": {"type": "string"},
                   "lastTransitionTime": {**_TIME, "description": "when the status last "
                                          "changed"},
                   "source": {"type": "string", "description": "who set the condition: "
                              "nvml-events, nvml-sweep, nvml, gpustats (Ready) or device-api "
                              "(a provider, over the gRPC device API)"}},
}
_HEALTH = {
    "type": "object", "required": ["healthy", "conditions"],
    "properties": {"healthy": {"type": "boolean", "description": "every condition is True"},
                   "conditions": {"type": "array", "items": _CONDITION},
                   "recommendedAction": {"type": "string",
                                         "description": "a provider's suggestion"}},
}
_RATIOS = {"type": "object", "additionalProperties": {"type": "number", "minimum": 0}}
_SATURATION = {
    "type": "object", "required": ["windowSeconds"],
    "properties": {"windowSeconds": _NUM, "throttleViolationRatios": _RATIOS,
                   "throttleReasonRatios": _RATIOS, "memoryUsedRatioAvg": _NUM,
                   "memoryUsedRatioMax": _NUM, "memoryPressureRatio": _NUM,
                   "xidErrorCount": _U64, "smActiveAvg": _NUM, "smOccupancyAvg": _NUM,
                   "dramActiveAvg": _NUM, "dramActiveMax": _NUM, "pcieTxBytesAvg": _NUM,
                   "pcieRxBytesAvg": _NUM,
                   "nvlinkTxBytesAvg": _NUM, "nvlinkRxBytesAvg": _NUM},
}
_VENDOR = {"type": "string", "enum": [VENDOR_NVIDIA, VENDOR_AMD, VENDOR_INTEL]}


def _values(rows: Iterable[DeviceValue]) -> dict[str, dict[str, Any]]:
    """The properties of device values (``model.device_values``): key -> schema."""
    return {v.key: {**v.schema, "description": v.description} for v in rows
            if v.key is not None and v.schema is not None}


_BY_KEY = {v.key: v for v in DEVICE_VALUES if v.key is not None}
_KUBELET_ACCELERATOR = {
    "make": {"type": "string", "description": "The GPU's vendor (left out when unknown)."},
    "model": {"type": "string"}, "id": {"type": "string"},
    **_values(_BY_KEY[key] for key in KUBELET_KEYS),
}
_MIG_INSTANCE = {
    "type": "object", "required": ["gpuInstanceId"],
    "properties": {"gpuInstanceId": _U64, "id": {"type": "string"},
                   "profile": {"type": "string"}, "memoryTotal": _U64, "memoryUsed": _U64,
                   "activityRatio": _NUM, "attributedPowerWatts": _NUM,
                   "attributedEnergyJoules": _NUM},
}
_DEVICE = {
    "type": "object", "required": ["id", "index"],
    "properties": {
        **_KUBELET_ACCELERATOR,
        "index": _U64, "minorNumber": _U64, "pciBusId": {"type": "string"},
        "lost": {"type": "boolean"},
        **_values(v for v in DEVICE_VALUES if v.key not in KUBELET_KEYS),
        "sharingMode": {"type": "string", "enum": ["exclusive", "time-slicing", "mps", "mig"]},
        "migInstances": {"type": "array", "items": _MIG_INSTANCE},
        "health": _HEALTH, "saturation": _SATURATION,
    },
}
_CLAIM_REF = {
    "type": "object", "required": ["name", "namespace"],
    "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}},
}
_CLAIM_KEYS = {"claim": _CLAIM_REF, "driver": {"type": "string"}, "pool": {"type": "string"},
               "device": {"type": "string"}, "shareId": {"type": "string"}}
_UNRESOLVED_CLAIM = {
    "type": "object", "required": ["claim", "reason"],
    "properties": {**_CLAIM_KEYS, "reason": {"type": "string"}},
}
_CONTAINER_ACCELERATOR = {
    "type": "object", "required": ["id"],
    "properties": {**_KUBELET_ACCELERATOR, "processMemoryUsed": _U64,
                   "computeUtilization": _NUM, "attributedPowerWatts": _NUM,
                   "attributedEnergyJoules": _NUM, "idleSharePowerWatts": _NUM,
                   "idleShareEnergyJoules": _NUM, "gpuInstanceId": _U64,
                   "migProfile": {"type": "string"},
                   # A MIG tenant's entry is its MIG device (id MIG-…); this is the GPU's UUID.
                   "parentId": {"type": "string"}, **_CLAIM_KEYS},
}
_CONTAINER = {
    "type": "object", "required": ["name", "startTime"],
    "properties": {"name": {"type": "string"}, "startTime": _TIME, "cpu": _CPU,
                   "memory": _MEMORY,
                   "accelerators": {"type": "array", "items": _CONTAINER_ACCELERATOR},
                   "unresolvedClaims": {"type": "array", "items": _UNRESOLVED_CLAIM}},
}
_LOOSE_CONTAINER = {
    "type": "object", "required": ["id", "startTime"],
    "properties": {"id": {"type": "string"}, "name": {"type": "string"},
                   "podUid": {"type": "string"},     # in a pod no name source names (yet)
                   "runtime": {"type": "string"}, "cgroup": {"type": "string"},
                   "startTime": _TIME, "cpu": _CPU, "memory": _MEMORY,
                   "accelerators": {"type": "array", "items": _CONTAINER_ACCELERATOR},
                   "unresolvedClaims": {"type": "array", "items": _UNRESOLVED_CLAIM}},
}
# A tenant that is no container (gpustats extension): a systemd service, a user's sessions, a
# Slurm job step, or a process in none of these; the identity keys of its kind.
_TENANT = {
    "type": "object", "required": ["kind", "id", "name"],
    "properties": {"kind": {"type": "string", "enum": ["service", "session", "job", "process",
                                                       "container", "machine", "cgroup"]},
                   # Its key: service:<unit>, session:<uid>, job:<id>[:<step>],
                   # process:<uid>:<command>, container:<uid>:<id> (a user's container),
                   # lxc:<name>, machine:<name>, cgroup:<path>; its processes' container_id
                   # label.
                   "id": {"type": "string"},
                   "name": {"type": "string"},   # the unit, user, job <id>, command
                   "unit": {"type": "string"}, "uid": _U64, "user": {"type": "string"},
                   "jobId": {"type": "string"}, "step": {"type": "string"},
                   "command": {"type": "string"}, "cgroup": {"type": "string"},
                   "startTime": _TIME, "cpu": _CPU, "memory": _MEMORY,
                   "accelerators": {"type": "array", "items": _CONTAINER_ACCELERATOR}},
}
_POD: dict[str, Any] = {
    "type": "object", "required": ["podRef", "startTime", "containers"],
    "properties": {
        "podRef": {"type": "object", "required": ["name", "namespace", "uid"],
                   "properties": {"name": {"type": "string", "minLength": 1},
                                  "namespace": {"type": "string", "minLength": 1},
                                  "uid": {"type": "string"}}},
        "startTime": _TIME, "cpu": _CPU, "memory": _MEMORY,
        "containers": {"type": "array", "items": _CONTAINER},
        "accelerators": {"type": "array", "items": {
            "type": "object", "required": ["id"],
            "properties": {"id": {"type": "string"}, "attributedPowerWatts": _NUM,
                           "attributedEnergyJoules": _NUM, "idleSharePowerWatts": _NUM,
                           "idleShareEnergyJoules": _NUM, "claim": _CLAIM_REF}}},
    },
}
_SUMMARY = {
    "type": "object", "required": ["node", "pods"],
    "properties": {
        "node": {"type": "object", "required": ["nodeName", "startTime"],
                 "properties": {"nodeName": {"type": "string"}, "startTime": _TIME,
                                "cpu": _CPU, "memory": _MEMORY,
                                "accelerators": {"type": "array", "items": _DEVICE}}},
        "pods": {"type": "array", "items": _POD},
        "containers": {"type": "array", "items": _LOOSE_CONTAINER},
        "tenants": {"type": "array", "items": _TENANT},
    },
}


def _closed(schema: dict[str, Any]) -> dict[str, Any]:
    return dict(schema, additionalProperties=False)


# ?strict=true: only the keys of k8s.io/kubelet/pkg/apis/stats/v1alpha1, nothing else anywhere.
_STRICT_CONTAINER = _closed({
    "type": "object", "required": ["name", "startTime"],
    "properties": {"name": {"type": "string"}, "startTime": _TIME, "cpu": _closed(_CPU),
                   "memory": _closed(_MEMORY),
                   "accelerators": {"type": "array", "items": _closed({
                       "type": "object", "required": ["id"],
                       "properties": _KUBELET_ACCELERATOR})}},
})
_STRICT_SUMMARY = _closed({
    "type": "object", "required": ["node", "pods"],
    "properties": {
        "node": _closed({"type": "object", "required": ["nodeName", "startTime"],
                         "properties": {"nodeName": {"type": "string"}, "startTime": _TIME,
                                        "cpu": _closed(_CPU), "memory": _closed(_MEMORY)}}),
        "pods": {"type": "array", "items": _closed({
            "type": "object", "required": ["podRef", "startTime", "containers"],
            "properties": {"podRef": _closed(_POD["properties"]["podRef"]),
                           "startTime": _TIME, "cpu": _closed(_CPU), "memory": _closed(_MEMORY),
                           "containers": {"type": "array", "items": _STRICT_CONTAINER}}})},
    },
})
_RESOURCE_VERSION = {"type": "string", "pattern": "^[0-9]+$", "description":
                     "opaque to clients; changes when any key of the object but saturation "
                     "does (saturation moves every tick and is not versioned)"}
_GPU = {
    "type": "object", "required": ["index", "uuid", "lost"],
    "properties": {"index": _U64, "uuid": {"type": "string"},
                   "vendor": _VENDOR,
                   "name": {"type": "string"}, "minorNumber": _U64,
                   "pciBusId": {"type": "string"},
                   "architecture": {"type": "string"},
                   "memoryTotal": _U64, "lost": {"type": "boolean"},
                   "health": _HEALTH, "saturation": _SATURATION,
                   "metadata": {"type": "object", "required": ["name", "resourceVersion"],
                                "properties": {
                                    "name": {"type": "string", "description":
                                             "the UUID lowercased (NVSentinel's Gpu name)"},
                                    "resourceVersion": _RESOURCE_VERSION}}},
}
_GPUS = {
    "type": "object", "required": ["nodeName", "nvmlLoaded", "gpus"],
    "properties": {"nodeName": {"type": "string"}, "nvmlLoaded": {"type": "boolean"},
                   "resourceVersion": {**_RESOURCE_VERSION, "description":
                                       "the last watch event as of this list: watch from it"},
                   "gpus": {"type": "array", "items": _GPU}},
}
_WATCH_EVENT = {
    "type": "object", "required": ["type", "object"],
    "description": "one line of a watch (newline-delimited JSON)",
    "properties": {
        "type": {"type": "string",
                 "enum": ["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]},
        "object": {"description": "ADDED, MODIFIED: the GPU as the list has it (its "
                                  "saturation as of that snapshot); DELETED: its last object; "
                                  "BOOKMARK: metadata.resourceVersion only (nothing changed up "
                                  "to it); ERROR: code 410, the stream's next events are no "
                                  "longer kept (list again)",
                   "anyOf": [_GPU,
                             {"type": "object", "required": ["metadata"],
                              "properties": {"metadata": {
                                  "type": "object", "required": ["resourceVersion"],
                                  "properties": {"resourceVersion": _RESOURCE_VERSION}}}},
                             {"type": "object", "required": ["code", "error", "message"],
                              "properties": {"code": {"type": "integer"},
                                             "error": {"type": "string"},
                                             "message": {"type": "string"}}}]},
    },
}


_SOURCE = {
    "type": "object", "required": ["name", "state", "since"],
    "properties": {"name": {"type": "string"},
                   "state": {"type": "string", "enum": ["ok", "failing", "absent"]},
                   "since": _TIME, "lastSuccessTime": _TIME, "lastSuccessAgeSeconds": _NUM,
                   "lastErrorReason": {"type": "string"}, "lastError": {"type": "string"},
                   "lastErrorTime": _TIME},
}
_STATUS = {
    "type": "object",
    "required": ["nodeName", "snapshotSequence", "snapshotTime", "nvmlLoaded", "gpusOnPciBus",
                 "vendors", "sources", "collectionErrors"],
    "properties": {
        "nodeName": {"type": "string"}, "snapshotSequence": _U64, "snapshotTime": _TIME,
        "nvmlLoaded": {"type": "boolean"},
        "gpusOnPciBus": {**_U64, "description": "NVIDIA GPUs on the PCI bus (NVML's gate)"},
        "vendors": {"type": "array", "description": "Each vendor's GPUs on the PCI bus and "
                    "whether its interface is open", "items": {
                        "type": "object",
                        "required": ["vendor", "gpusOnPciBus", "interfaceOpen"],
                        "properties": {"vendor": {"type": "string",
                                                  "enum": ["nvidia", "amd", "intel"]},
                                       "gpusOnPciBus": _U64,
                                       "interfaceOpen": {"type": "boolean"}}}},
        "driverVersion": {"type": "string"}, "tickDurationSeconds": _NUM,
        "dcgmExporterUrl": {"type": "string", "description": "the dcgm-exporter read for MIG "
                            "activity: configured, or found on the node"},
        "sources": {"type": "array", "items": _SOURCE},
        "collectionErrors": {"type": "array", "items": {
            "type": "object", "required": ["source", "reason", "count"],
            "properties": {"source": {"type": "string"}, "reason": {"type": "string"},
                           "count": _U64}}},
    },
}
_HISTORY_TIME = {"type": "string", "format": "date-time"}
_GPU_POINT = {
    "type": "object", "required": ["time"],
    "properties": {"time": _HISTORY_TIME, **_values(GPU_VALUES),
                   "healthy": {"type": "boolean"}},
    "additionalProperties": False,
}
_MIG_POINT = {
    "type": "object", "required": ["time"],
    "properties": {"time": _HISTORY_TIME, "memoryUsed": _U64, "activityRatio": _NUM,
                   "attributedPowerWatts": _NUM},
    "additionalProperties": False,
}
_CONTAINER_POINT = {
    "type": "object", "required": ["time"],
    "properties": {"time": _HISTORY_TIME, "attributedPowerWatts": _NUM,
                   "attributedEnergyJoules": _NUM, "idleSharePowerWatts": _NUM,
                   "processMemoryUsed": _U64, "computeUtilization": _NUM},
    "additionalProperties": False,
}
_HISTORY = {
    "type": "object", "required": ["seconds", "gpus", "containers"],
    "properties": {
        "seconds": {"type": "number", "minimum": 1},
        "gpus": {"type": "array", "items": {
            "type": "object", "required": ["id", "index", "points"],
            "properties": {
                "id": {"type": "string"}, "index": _U64, "model": {"type": "string"},
                "memoryTotal": _U64, "powerLimitWatts": _NUM,
                "points": {"type": "array", "items": _GPU_POINT},
                "migInstances": {"type": "array", "items": {
                    "type": "object", "required": ["gpuInstanceId", "points"],
                    "properties": {"gpuInstanceId": _U64, "id": {"type": "string"},
                                   "profile": {"type": "string"}, "memoryTotal": _U64,
                                   "points": {"type": "array", "items": _MIG_POINT}}}}}}},
        "containers": {"type": "array", "items": {
            "type": "object", "required": ["id", "gpu", "points"],
            "properties": {
                "id": {"type": "string"}, "gpu": {"type": "string"},
                "gpuInstanceId": _U64, "name": {"type": "string"}, "pod": {"type": "string"},
                "namespace": {"type": "string"}, "podUid": {"type": "string"},
                "points": {"type": "array", "items": _CONTAINER_POINT}}}},
    },
}


def _history_path(history_seconds: int) -> dict[str, Any]:
    seconds = {"name": "seconds", "in": "query", "required": False,
               "schema": {"type": "integer", "minimum": 1, "maximum": history_seconds},
               "description": "how many seconds back (default: all the daemon keeps)"}
    return {"get": {"operationId": "getHistory", "parameters": [seconds], "responses": {
        "200": _json(_HISTORY, "per GPU, MIG instance and container, a point per tick"),
        "400": _json(_ERROR, "seconds is not one integer from 1 to the history duration"),
        "503": _NOT_READY}}}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_NOT_READY = _json(_ERROR, "no collection tick has completed yet")
_ONLY_CPU = {"name": "only_cpu_and_memory", "in": "query", "required": False,
             "schema": {"type": "string"},
             "description": "exactly `true`, given once: node and pod CPU/memory only (no "
                            "accelerators); any other value or a repetition is false, as the "
                            "kubelet reads it"}
_STRICT = {"name": "strict", "in": "query", "required": False, "schema": {"type": "string"},
           "example": "true",
           "description": "exactly `true`, given once (same rule): only the keys the kubelet's "
                          "v1alpha1 types declare, for decoders that reject unknown fields: no "
                          "node or pod accelerators, container accelerators with make, model, "
                          "id, memoryTotal, memoryUsed and dutyCycle only, no top-level "
                          "containers or tenants (schema: components.schemas.KubeletSummary)"}
# Snapshot bodies: gzip when accepted, an ETag per snapshot, 304 for a poller that has it.
_CONDITIONAL = [
    {"name": "Accept-Encoding", "in": "header", "required": False, "schema": {"type": "string"},
     "description": "gzip (or *) with q > 0: the body is gzip-compressed"},
    {"name": "If-None-Match", "in": "header", "required": False, "schema": {"type": "string"},
     "description": "the ETag of a body already held: 304 while the snapshot is the same"},
]
_NOT_MODIFIED = {"description": "the snapshot named by If-None-Match is still the latest"}
_WATCH_PARAMETERS = [
    {"name": "watch", "in": "query", "required": False,
     "schema": {"type": "string", "enum": ["true", "1", "false", "0"]},
     "description": "true (or 1): stream the changes of the GPUs' objects as newline-delimited "
                    "JSON events (application/x-ndjson, chunked, Connection: close) instead "
                    "of the list"},
    {"name": "resourceVersion", "in": "query", "required": False,
     "schema": {"type": "string", "pattern": "^[0-9]{1,20}$"},
     "description": "with watch: replay the events after this version (a list's, or an "
                    "event's), then go on; absent or 0: an ADDED event for every GPU first. "
                    "410 when its later events are no longer kept (the last 1,000, at most "
                    "2 MiB) or it is not of this run"},
    {"name": "timeoutSeconds", "in": "query", "required": False,
     "schema": {"type": "integer", "minimum": 1, "maximum": 600},
     "description": "with watch: end the stream after this many seconds (default: 300 to "
                    "600, jittered); a BOOKMARK comes after 15 s without an event"},
]


def _gpus_paths() -> dict[str, Any]:
    """The device API: the list (and its watch), and one GPU by UUID or name."""
    watch = {
        "description": "every watch event is one line of JSON",
        "content": {"application/x-ndjson": {"schema": _WATCH_EVENT}}}
    errors = {
        "400": _json(_ERROR, "watch, resourceVersion or timeoutSeconds malformed or repeated"),
        "410": _json(_ERROR, "watch: resourceVersion too old (its later events are no longer "
                             "kept) or not of this run: list again"),
        "429": _json(_ERROR, "watch: every watch slot (256) is taken; Retry-After says when "
                             "to try again")}
    listing = {
        "operationId": "listGpus", "parameters": _CONDITIONAL,
        "description": "The GPUs' objects (NVSentinel's ListGpus) and the list's "
                       "resourceVersion. With ?watch=true (x-watch: its parameters and "
                       "responses), a stream of their changes instead (WatchGpus, as "
                       "Kubernetes watches): ADDED, MODIFIED, DELETED, BOOKMARK and ERROR "
                       "events. The watch parameters are described in x-watch, not as "
                       "parameters, so that contract fuzzers do not open streams that last "
                       "minutes.",
        "x-watch": {"parameters": _WATCH_PARAMETERS, "responses": {"200": watch, **errors}},
        # The watch's 200 (x-ndjson) is in x-watch only: a fuzzer reading it here would want
        # a deserializer for it, and never gets it (it never asks for a watch).
        "responses": {"200": _json(_GPUS, "identity, health and saturation per GPU"),
                      "304": _NOT_MODIFIED, **errors, "503": _NOT_READY}}
    one = {
        "operationId": "getGpu",
        "description": "One GPU's object, as in the list (NVSentinel's GetGpu).",
        "parameters": [{"name": "id", "in": "path", "required": True,
                        "schema": {"type": "string", "minLength": 1},
                        "description": "the GPU's UUID, or its lowercased object name"},
                       *_CONDITIONAL],
        "responses": {"200": _json(_GPU, "the GPU"), "304": _NOT_MODIFIED,
                      "404": _json(_ERROR, "no GPU has this UUID or name"),
                      "503": _NOT_READY}}
    return {"/api/v1/gpus": {"get": listing}, "/api/v1/gpus/{id}": {"get": one}}


_SUMMARY_OP = {"parameters": [_ONLY_CPU, _STRICT, *_CONDITIONAL],
               "responses": {"200": _json(_SUMMARY, "kubelet Summary API shape (with strict=true,"
                                                    " the KubeletSummary subset)"),
                             "304": _NOT_MODIFIED, "503": _NOT_READY}}


def openapi_document(history_seconds: int = 0) -> dict[str, Any]:
    """The document; ``/api/v1/history`` is in it when the history is on (its duration > 0)."""
    document: dict[str, Any] = {
        "openapi": "3.0.3",
        "info": {"title": "gpustats", "version": __version__,
                 "description": "GPU container stats: kubelet Summary API and Prometheus."},
        "paths": {
            "/stats/summary": {"get": dict(_SUMMARY_OP, operationId="getSummary"),
                               "post": dict(_SUMMARY_OP, operationId="postSummary")},
            **_gpus_paths(),
            "/api/v1/usage": usage_path(_ERROR),
            "/api/v1/status": {"get": {"operationId": "status", "responses": {
                "200": _json(_STATUS, "each data source's state, last error and age"),
                "503": _NOT_READY}}},
            "/": {"get": {"operationId": "page", "responses": {
                "200": {"description": "the node at a glance, for people",
                        "content": {"text/html": {"schema": {"type": "string"}}}},
                "503": {"description": "no collection tick has completed yet",
                        "content": {"text/html": {"schema": {"type": "string"}}}}}}},
            "/healthz": {"get": {"operationId": "healthz", "responses": {
                "200": _json({"type": "object", "required": ["status"],
                              "properties": {"status": {"type": "string"}}}, "alive"),
                "503": _json(_ERROR, "no snapshot for the watchdog's number of intervals")}}},
            "/readyz": {"get": {"operationId": "readyz", "responses": {
                "200": _json({"type": "object", "required": ["status"],
                              "properties": {"status": {"type": "string"},
                                             "snapshotSequence": _U64,
                                             "snapshotAgeSeconds": _NUM}}, "ready"),
                "503": _json(_ERROR, "not ready or stale")}}},
            "/metrics": {"get": {"operationId": "metrics", "parameters": _CONDITIONAL,
                                 "responses": {
                "304": _NOT_MODIFIED,
                "200": {"description": "Prometheus text or OpenMetrics exposition",
                        "content": {"text/plain": {"schema": {"type": "string"}},
                                    "application/openmetrics-text": {
                                        "schema": {"type": "string"}}}},
                "404": _json(_ERROR, "metrics not enabled")}}},
            "/openapi.json": {"get": {"operationId": "openapi", "responses": {
                "200": _json({"type": "object"}, "this document")}}},
            "/assets/{name}": {"get": {"operationId": "pageAsset", "parameters": [
                {"name": "name", "in": "path", "required": True,
                 "schema": {"type": "string", "enum": ["gpustats.js", "gpustats.css"]}}],
                "responses": {
                    "200": {"description": "the page's script or style sheet",
                            "content": {"text/javascript": {"schema": {"type": "string"}},
                                        "text/css": {"schema": {"type": "string"}}}},
                    "404": _json(_ERROR, "no such asset")}}},
        },
        "components": {"schemas": {"Summary": _SUMMARY, "KubeletSummary": _STRICT_SUMMARY,
                                   "Gpu": _GPU, "GpuList": _GPUS,
                                   "GpuWatchEvent": _WATCH_EVENT}},
    }
    if history_seconds > 0:
        document["paths"]["/api/v1/history"] = _history_path(history_seconds)
    return document
