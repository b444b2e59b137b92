"""dcgm-exporter compatible series for one snapshot (``--dcgm-compat``), as exposition text.

Labels follow dcgm-exporter: ``gpu, UUID, pci_bus_id, device="nvidia<minor>", modelName``,
``GPU_I_PROFILE, GPU_I_ID`` on MIG instance series, ``Hostname`` (the node name; ``hostname``
where dcgm-exporter's main branch is followed), ``DCGM_FI_DRIVER_VERSION``, then the Kubernetes
labels ``container, namespace, pod, pod_uid`` of a named pod container that holds the GPU (or
the MIG instance), with the ``dra_*`` labels of the DRA claim it holds it by and ``vgpu`` for
the device plugin's replica (``<uuid>::N``). A GPU that several pod containers share
(time-slicing, MPS) gives each of them (each replica) a copy of its series, as dcgm-exporter's
Kubernetes mapping does with ``--kubernetes-virtual-gpus``, so ``sum by (pod)`` keeps shared
GPUs; there ``DCGM_FI_DEV_GPU_UTIL`` and ``DCGM_FI_DEV_FB_USED`` (``dcgm_table.PER_HOLDER``)
give each holder its own processes' SM utilization and memory, beside the device's series
without pod labels, as dcgm-exporter's per-process metrics do. A label whose value is unknown is
left out, never empty. Rendered here rather than through prometheus-client because
dcgm-exporter's counters carry no ``_total`` suffix, which prometheus-client's text format adds;
in OpenMetrics those families are typed ``unknown``, the one type whose sample keeps the
family's bare name, so the body parses and the names are dcgm-exporter's.
"""

from __future__ import annotations

import math
from typing import Iterator

from gpustats.export.dcgm_table import (
    COUNTER, DEVICE_FIELDS, INSTANCE_MEMORY_FIELDS, PER_HOLDER, PROF_FIELDS, XID, XID_COUNT,
    DcgmField,
)
from gpustats.export.text import shown
from gpustats.model.device import MigInstanceReading
from gpustats.model.health import XID_DESCRIPTIONS, XID_WINDOW_SECONDS, DeviceHealth
from gpustats.model.snapshot import (
    ContainerAccelerator, ContainerStats, DeviceStats, PodStats, Snapshot,
)

Labels = tuple[tuple[str, str], ...]
Sample = tuple[str, float | int]              # (rendered label set, value)
# A holder's label set and its own figures on the GPU: SM utilization (%) and memory (bytes).
Holder = tuple[Labels, float | None, int | None]
Holders = dict[tuple[str, int | None], tuple[Holder, ...]]

NO_XID_MESSAGE = "No Error"
# dcgm-exporter's node label: ``Hostname`` up to its latest release, ``hostname`` on its main
# branch (renamed there to stop clashing with Slurm's ``hostname``).
HOSTNAME_LABELS = ("Hostname", "hostname")
_FB_FREE, _FB_USED = (next(f for f in DEVICE_FIELDS if f.name == name)
                      for name in INSTANCE_MEMORY_FIELDS)
_UTIL = next(f for f in DEVICE_FIELDS if f.name == "DCGM_FI_DEV_GPU_UTIL")
_WINDOW = (("window_size_in_ms", str(int(XID_WINDOW_SECONDS * 1000))),)
_NO_POD: tuple[Holder, ...] = (((), None, None),)


def _get(obj: object, path: str) -> object:
    for name in path.split("."):
        if obj is None:
            return None
        obj = getattr(obj, name)
    return obj


def _labels(*pairs: tuple[str, object]) -> Labels:
    """The present labels, values shown by the one rule (export.text)."""
    return tuple((k, shown(str(v))) for k, v in pairs if v is not None and str(v) != "")


def _kubernetes_labels(pod: PodStats, container: ContainerStats, acc: ContainerAccelerator,
                       mig_uuids: dict[tuple[str, int], str]) -> tuple[Labels, ...]:
    """dcgm-exporter's pod attributes (sorted, as its template prints map keys), with the DRA
    claim's where the device came from one: one label set per device-plugin replica held
    (``vgpu``), else one; none for a pod the kubelet has not named (known by its cgroup only)."""
    if not pod.name or not pod.namespace:
        return ()
    labels = _labels(("container", container.name), ("namespace", pod.namespace),
                     ("pod", pod.name), ("pod_uid", pod.uid))
    claim = acc.claim
    if claim is not None:
        gi = acc.gpu_instance_id
        labels += _labels(
            ("dra_claim_name", claim.claim_name), ("dra_claim_namespace", claim.claim_namespace),
            ("dra_driver_name", claim.driver_name), ("dra_pool_name", claim.pool_name),
            ("dra_device_name", claim.device_name),
            ("dra_mig_profile", acc.mig_profile if gi is not None else None),
            ("dra_mig_device_uuid", mig_uuids.get((acc.device_uuid, gi)) if gi is not None
             else None))
    if not acc.replicas:
        return (tuple(sorted(labels)),)
    return tuple(tuple(sorted(labels + (("vgpu", str(r)),))) for r in acc.replicas)


def holders(snapshot: Snapshot) -> Holders:
    """(GPU UUID, GPU instance id) → the Kubernetes labels of each named pod container that
    holds it, one label set per holder and replica (a shared GPU has several), with the
    holder's own figures there. Containers outside pods and unnamed pods hold GPUs too,
    without labels: a GPU only they hold has one unlabelled series."""
    seen: dict[tuple[str, int | None], dict[Labels, Holder]] = {}
    mig_uuids = {(d.identity.uuid, m.gpu_instance_id): m.uuid for d in snapshot.devices
                 for m in (d.mig_instances or (d.reading.mig_instances if d.reading else ()))
                 if m.uuid}
    for pod, c in snapshot.containers_with_pods():
        if pod is None:
            continue
        for a in c.accelerators:
            owners = seen.setdefault((a.device_uuid, a.gpu_instance_id), {})
            # No process of its own seen on the GPU (memory read: 0): 0 %, as dcgm-exporter
            # gives a holder without processes.
            util = a.compute_utilization_percent
            if util is None and a.process_memory_used_bytes == 0:
                util = 0.0
            for labels in _kubernetes_labels(pod, c, a, mig_uuids):
                owners[labels] = (labels, util, a.process_memory_used_bytes)
    return {key: tuple(owners[k] for k in sorted(owners)) for key, owners in seen.items()
            if owners}


def _shared(owners: tuple[Holder, ...]) -> bool:
    """Several holders, or a device plugin replica: each gets its own PER_HOLDER figures."""
    return len(owners) > 1 or any(k == "vgpu" for labels, _, _ in owners for k, _ in labels)


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _render_labels(labels: Labels) -> str:
    """``{k="v",...}``, rendered once per label set and shared by its samples."""
    return "{" + ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels) + "}"


class _Families:
    """Samples per family name, in table order."""

    def __init__(self) -> None:
        self.samples: dict[str, list[Sample]] = {}

    def add(self, field: DcgmField, labels: str, raw: object) -> None:
        if raw is None:
            return
        value = field.convert(raw)
        if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
            return
        self.samples.setdefault(field.name, []).append((labels, value))


def _device_samples(out: _Families, d: DeviceStats, tail: Labels, kubernetes: Holders,
                    now: float) -> None:
    ident = d.identity
    base = _labels(("gpu", ident.index), ("UUID", ident.uuid), ("pci_bus_id", ident.pci_bus_id),
                   ("device", f"nvidia{ident.minor_number}"
                    if ident.minor_number is not None else None),
                   ("modelName", ident.name))
    owners = kubernetes.get((ident.uuid, None)) or _NO_POD
    reading = d.reading
    if reading is not None and not reading.lost:
        shared = _shared(owners)
        if shared:              # the device's own figures, without pod labels
            device = _render_labels(base + tail)
            out.add(_UTIL, device, reading.utilization_percent)
            out.add(_FB_USED, device, reading.memory_used_bytes)
        for k8s, util, memory in owners:
            labels = _render_labels(base + tail + k8s)
            for field in DEVICE_FIELDS:
                if not shared or field.name not in PER_HOLDER:
                    out.add(field, labels, _get(reading, field.path))
            if shared:
                out.add(_UTIL, labels, util)
                out.add(_FB_USED, labels, memory)
            for field in PROF_FIELDS:
                out.add(field, labels, _get(reading.gpm, field.path))
        for inst in reading.mig_instances:
            _instance_samples(out, inst, base, tail,
                              kubernetes.get((ident.uuid, inst.gpu_instance_id)) or _NO_POD)
    if d.health is not None:
        _xid_samples(out, d.health, base + tail, owners, now)


def _xid_samples(out: _Families, health: DeviceHealth, base: Labels,
                 owners: tuple[Holder, ...], now: float) -> None:
    """The last XID (``err_code``, ``err_msg``), and the count of each XID over the window."""
    code = health.last_xid
    message = NO_XID_MESSAGE if code is None else XID_DESCRIPTIONS.get(code, "Unknown XID error")
    extra = (("err_code", str(code or 0)), ("err_msg", message))
    counts: dict[int, int] = {}
    for xid, when in health.recent_xids:
        if when >= now - XID_WINDOW_SECONDS:
            counts[xid] = counts.get(xid, 0) + 1
    for k8s, _, _ in owners:
        out.add(XID, _render_labels(base + tuple(sorted(k8s + extra))), code or 0)
        for xid, count in counts.items():
            out.add(XID_COUNT, _render_labels(base + k8s + (("xid", str(xid)),) + _WINDOW),
                    count)


def _instance_samples(out: _Families, inst: MigInstanceReading, base: Labels, tail: Labels,
                      owners: tuple[Holder, ...]) -> None:
    used, total = inst.memory_used_bytes, inst.memory_total_bytes
    shared = _shared(owners)
    instance = base + _labels(("GPU_I_PROFILE", inst.profile),
                              ("GPU_I_ID", inst.gpu_instance_id)) + tail
    if shared:
        out.add(_FB_USED, _render_labels(instance), used)
    for k8s, _, memory in owners:
        labels = _render_labels(instance + k8s)
        for field in PROF_FIELDS:
            out.add(field, labels, _get(inst.gpm, field.path))
        out.add(_FB_USED, labels, memory if shared else used)
        if used is not None and total is not None and total >= used:
            out.add(_FB_FREE, labels, total - used)


def _format(value: float | int) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


def _lines(families: _Families, openmetrics: bool) -> Iterator[str]:
    for field in (*DEVICE_FIELDS, *PROF_FIELDS, XID, XID_COUNT):
        samples = families.samples.get(field.name)
        if not samples:
            continue
        kind = "unknown" if openmetrics and field.kind == COUNTER else field.kind
        yield f"# HELP {field.name} {field.help}\n# TYPE {field.name} {kind}\n"
        for labels, value in samples:
            yield f"{field.name}{labels} {_format(value)}\n"


def render_dcgm(snapshot: Snapshot, node_name: str | None = None,
                hostname_label: str = HOSTNAME_LABELS[0], openmetrics: bool = False) -> bytes:
    """Every dcgm-exporter family NVML gave this tick, as Prometheus text, or as the families
    of an OpenMetrics body (counters typed ``unknown``); ``hostname_label`` names the node
    label (one of ``HOSTNAME_LABELS``)."""
    if hostname_label not in HOSTNAME_LABELS:
        raise ValueError(f"hostname label must be one of {HOSTNAME_LABELS}")
    tail = _labels((hostname_label, node_name or snapshot.node.node_name),
                   ("DCGM_FI_DRIVER_VERSION", snapshot.status.driver_version))
    kubernetes = holders(snapshot)
    out = _Families()
    for d in snapshot.devices:
        _device_samples(out, d, tail, kubernetes, snapshot.taken_at)
    return "".join(_lines(out, openmetrics)).encode()
