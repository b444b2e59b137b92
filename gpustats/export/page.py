"""What the web page shows of one snapshot, as plain rows of display text (no HTML here).

The page is for people: figures are rounded and carry their units; a value that is absent is
shown as "–", never as 0; a pod or container nothing names is shown by its ID. Tenants of
every kind are shown (pods, containers outside pods, services, sessions, Slurm jobs, processes);
one that ended, kept for its counters, is not. Every name is shown by the one rule of
``export.text`` (the template isolates each in ``<bdi>`` too).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, UTC
from typing import Callable, Sequence

from gpustats.export.page_header import gpu_count, gpu_names, page_notes, power_totals
from gpustats.export.page_identity import detail_text, owner_text
from gpustats.export.tenants import entry_identity, present_sum
from gpustats.export.text import shown
from gpustats.model.device_values import DEVICE_VALUES, DeviceValue
from gpustats.model.snapshot import (
    ContainerAccelerator, ContainerStats, DeviceStats, PodAccelerator, PodStats,
    Snapshot,
)
from gpustats.model.health import CONDITION_READY, STATUS_TRUE
from gpustats.model.tenants import KIND_POD

ABSENT = "–"

# The charts' colours (the script reads them from the page): one per tenant, the first free one
# to a tenant newly shown, so that up to len(TENANT_COLOURS) tenants shown at once never share
# one; each is at least 20 (CIE76 ΔE) from every other and from the greys of the power that is
# no tenant's (unallocated idle, unattributed) and of the tenants folded into one layer.
TENANT_COLOURS: tuple[str, ...] = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#5b2a86", "#e7298a", "#7a5c00", "#e41a1c", "#e5c494", "#a6d854", "#b15928",
    "#f781bf", "#003f5c", "#1b9e77", "#9467bd", "#fc8d62", "#b2df8a", "#fdbf6f", "#9b2226",
)
RESERVED_COLOURS: dict[str, str] = {
    "unallocated": "#9aa3ad", "unattributed": "#cdd3db", "others": "#7f7f7f",
}


def chart_colours_json() -> str:
    """The colours as the page hands them to its script (``data-colours``)."""
    return json.dumps({"tenants": list(TENANT_COLOURS), **RESERVED_COLOURS},
                      separators=(",", ":"))


def format_bytes(value: float | None) -> str:
    if value is None:
        return ABSENT
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def format_watts(value: float | None) -> str:
    if value is None:
        return ABSENT
    return f"{value:.0f} W" if abs(value) >= 100 else f"{value:.1f} W"


def format_joules(value: float | None) -> str:
    if value is None:
        return ABSENT
    for unit, size in (("GJ", 1e9), ("MJ", 1e6), ("kJ", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.1f} J"


def format_percent(value: float | None) -> str:
    if value is None:
        return ABSENT
    return f"{value:.0f} %" if value == int(value) or value >= 10 else f"{value:.1f} %"


def format_bytes_of(used: float, total: float) -> str:
    """Used of total bytes, the unit written once where both take it: "2.0 / 79.6 GiB"."""
    text, whole = format_bytes(used), format_bytes(total)
    number, unit = text.split(" ")
    return f"{number} / {whole}" if whole.endswith(" " + unit) else f"{text} / {whole}"


def format_time(epoch_seconds: float) -> str:
    return datetime.fromtimestamp(epoch_seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# How the page writes a device value of each unit whose row gives no template.
UNIT_FORMATS: dict[str, Callable[[float], str]] = {
    "bytes": format_bytes, "watts": format_watts, "joules": format_joules,
    "percent": format_percent,
}
# A part and its whole, by unit, where they share more than " / " (else "part / whole").
PART_OF_WHOLE_FORMATS: dict[str, Callable[[float, float], str]] = {"bytes": format_bytes_of}


@dataclass(frozen=True)
class Health:
    state: str          # "healthy", "unhealthy", "lost" or "unknown"
    text: str


@dataclass(frozen=True)
class ContainerRow:
    """A tenant's use of one GPU (or MIG instance): a pod's container, or a tenant outside
    pods (``container`` then "–", but for a container's)."""

    kind: str
    pod_key: str        # the key the page's charts colour this tenant by
    tenant: str         # the pod (name, else UID), else the tenant's name
    tenant_is_id: bool
    namespace: str      # a pod's namespace; another kind's user (export.page_identity)
    container: str      # a pod's container; another kind's own identity (a job's step, ...)
    container_is_id: bool
    instance: str       # MIG instance, or "" for a whole GPU
    power: str
    idle_share: str     # its share of the GPU's idle power, as one of its holders
    compute: str
    memory: str
    energy: str
    idle_energy: str    # its share of the GPU's idle energy, as one of its holders (total)


@dataclass(frozen=True)
class GpuCard:
    uuid: str
    index: int
    title: str          # "GPU 0"; "AMD GPU 0" on a node of several vendors
    model: str
    vendor: str         # "" when unknown
    bus_id: str
    health: Health
    figures: tuple[tuple[str, str], ...]       # (label, value)
    containers: tuple[ContainerRow, ...]
    mig: tuple[tuple[str, str, str, str], ...]   # (instance, memory, activity, power)


@dataclass(frozen=True)
class TenantRow:
    """A tenant holding GPUs: a pod, or a tenant outside pods (of any kind)."""

    kind: str
    pod_key: str
    tenant: str
    tenant_is_id: bool
    namespace: str
    gpus: str
    power: str
    idle_share: str
    energy: str         # attributed energy, total: what the table is sorted by
    idle_energy: str


@dataclass(frozen=True)
class Page:
    node_name: str
    taken_at: str
    sequence: int
    driver_version: str | None
    notes: tuple[str, ...]          # what keeps GPUs from being read; failing sources
    totals: tuple[tuple[str, str], ...]
    gpus: tuple[GpuCard, ...]
    tenants: tuple[TenantRow, ...]


def _health(device: DeviceStats) -> Health:
    if device.lost:
        return Health("lost", "GPU lost")
    if device.health is None:
        return Health("unknown", "health unknown")
    if device.health.healthy:
        return Health("healthy", "healthy")
    # Ready sums up the others: the page names the conditions it is made of.
    bad = [c for c in device.health.conditions
           if c.status != STATUS_TRUE and c.type != CONDITION_READY]
    reason = "; ".join(f"{c.type}: {c.reason}" for c in bad)
    return Health("unhealthy", f"unhealthy ({reason})" if reason else "unhealthy")


_BY_NAME = {v.name: v for v in DEVICE_VALUES}


def _value_text(row: DeviceValue, value: float | None) -> str:
    """A device value as the page writes it: by its figure's template, else by its unit."""
    if value is None:
        return ABSENT
    template = row.figure.template if row.figure is not None else None
    return template.format(value) if template is not None else UNIT_FORMATS[row.unit](value)


def _figure_text(row: DeviceValue, device: DeviceStats) -> str:
    """The figure of one row; a part with its whole known: "310 W / 700 W"."""
    part = row.value(device)
    whole_row = _BY_NAME[row.figure.of] if row.figure and row.figure.of else None
    whole = whole_row.value(device) if whole_row is not None else None
    if whole_row is None or whole is None:
        return _value_text(row, part)
    if part is None:                      # the whole known alone: "– / 16.0 GiB"
        return f"{ABSENT} / {_value_text(whole_row, whole)}"
    pair = PART_OF_WHOLE_FORMATS.get(row.unit)
    if pair is not None:
        return pair(part, whole)
    return f"{_value_text(row, part)} / {_value_text(whole_row, whole)}"


def _watts_and_joules(watts: float | None, joules: float | None) -> str:
    """"20.0 W · 345.0 J": power now and energy in total; "–" for either absent."""
    if watts is None and joules is None:
        return ABSENT
    return f"{format_watts(watts)} · {format_joules(joules)}"


def _figures(device: DeviceStats) -> tuple[tuple[str, str], ...]:
    """The card's figures: each device value that has one (``model.device_values``), in the
    table's order, then the idle no tenant holds the GPU for (now, and in total) and how the
    GPU is shared."""
    vendor = device.identity.vendor
    return (*((row.figure.label, _figure_text(row, device))
              for row in DEVICE_VALUES if row.figure is not None and (
                  row.figure.vendors is None or vendor is None or vendor in row.figure.vendors)),
            ("unallocated idle", _watts_and_joules(device.unallocated_idle_power_watts,
                                                   device.unallocated_idle_energy_joules)),
            ("sharing", device.sharing_mode or ABSENT))


def _shown(value: str | None) -> str | None:
    return None if value is None else shown(value)


def pod_key(name: str | None, namespace: str | None, uid: str | None,
            container_id: str) -> str:
    """How the page tells pods apart: namespace/name, else the pod UID, else the container."""
    if name:
        return f"{namespace or ''}/{name}"
    return uid or shown(f"container:{container_id}")


def _short_id(container_id: str) -> str:
    return container_id[:12]


def _instance_text(gpu_instance_id: int, profile: str | None) -> str:
    return f"GI {gpu_instance_id}" + (f" · {profile}" if profile else "")


def _entry_name(container: ContainerStats) -> tuple[str, bool]:
    """(how a tenant outside pods is shown, whether that is an ID): a container's name, else
    its short ID; another kind's name (model.tenants.display_name), else its key."""
    if container.tenant is None:
        if container.name is None:
            return _short_id(container.container_id), True
        return shown(container.name), False
    name = entry_identity(container).name
    return shown(name), name == container.container_id


def _container_row(pod: PodStats | None, container: ContainerStats, acc: ContainerAccelerator,
                   profiles: dict[int, str | None]) -> ContainerRow:
    pod_name = _shown(pod.name) if pod is not None else None
    namespace = _shown(pod.namespace) if pod is not None else None
    pod_uid = _shown(pod.uid if pod is not None else container.pod_uid)
    instance = ""
    if acc.gpu_instance_id is not None:
        instance = _instance_text(acc.gpu_instance_id,
                                  acc.mig_profile or profiles.get(acc.gpu_instance_id))
    kind = container.kind
    if kind == KIND_POD:
        tenant, tenant_is_id = pod_name or pod_uid or ABSENT, pod_name is None and bool(pod_uid)
        own, own_is_id = (_shown(container.name) or _short_id(container.container_id),
                          container.name is None)
        where = namespace
    else:
        tenant, tenant_is_id = _entry_name(container)
        where = _shown(owner_text(container))
        detail, own_is_id = detail_text(container)
        own = _shown(detail) or ABSENT
    return ContainerRow(
        kind=kind, pod_key=pod_key(pod_name, namespace, pod_uid, container.container_id),
        tenant=tenant, tenant_is_id=tenant_is_id, namespace=where or ABSENT,
        container=own, container_is_id=own_is_id, instance=instance,
        power=format_watts(acc.attributed_power_watts),
        idle_share=format_watts(acc.idle_share_power_watts),
        compute=format_percent(acc.compute_utilization_percent),
        memory=format_bytes(acc.process_memory_used_bytes),
        energy=format_joules(acc.attributed_energy_joules),
        idle_energy=format_joules(acc.idle_share_energy_joules))


def _rows_for(device: DeviceStats, owners: list[tuple[PodStats | None, ContainerStats]]
              ) -> list[ContainerRow]:
    profiles = {m.gpu_instance_id: m.profile for m in device.mig_instances}
    return [_container_row(pod, container, acc, profiles)
            for pod, container in owners for acc in container.accelerators
            if acc.device_uuid == device.identity.uuid]


def _live(pod: PodStats | None, container: ContainerStats) -> bool:
    """Not ended: a tenant kept only for its counters is not shown."""
    return not (container.ended or (pod is not None and pod.ended))


def _ratio(value: float | None) -> str:
    return ABSENT if value is None else f"{value * 100:.0f} %"


def _card(device: DeviceStats, owners: list[tuple[PodStats | None, ContainerStats]],
          title: str) -> GpuCard:
    ident = device.identity
    rows = sorted(_rows_for(device, owners), key=lambda r: (r.namespace, r.tenant, r.container))
    return GpuCard(
        uuid=ident.uuid, index=ident.index, title=title,
        model=_shown(ident.name) or "unknown model",
        vendor=_shown(ident.vendor) or "", bus_id=_shown(ident.pci_bus_id) or "",
        health=_health(device),
        figures=_figures(device), containers=tuple(rows),
        mig=tuple((_instance_text(m.gpu_instance_id, m.profile),
                   format_bytes(m.memory_used_bytes), _ratio(m.activity_ratio),
                   format_watts(m.attributed_power_watts))
                  for m in device.mig_instances))


def _tenant_row(kind: str, key: str, name: str, name_is_id: bool, namespace: str | None,
                accelerators: Sequence[PodAccelerator | ContainerAccelerator],
                index_of: dict[str, tuple[int, str]]) -> tuple[float, TenantRow]:
    """(the tenant's attributed energy in total, -1 when unknown, for ordering; its row)."""
    power = present_sum(a.attributed_power_watts for a in accelerators)
    idle = present_sum(a.idle_share_power_watts for a in accelerators)
    energy = present_sum(a.attributed_energy_joules for a in accelerators)
    idle_energy = present_sum(a.idle_share_energy_joules for a in accelerators)
    gpus = [name for _, name in sorted(
        {index_of[a.device_uuid] for a in accelerators if a.device_uuid in index_of})]
    return (energy if energy is not None else -1.0, TenantRow(
        kind=kind, pod_key=key, tenant=name, tenant_is_id=name_is_id,
        namespace=namespace or ABSENT, gpus=", ".join(gpus) or ABSENT,
        power=format_watts(power), idle_share=format_watts(idle),
        energy=format_joules(energy), idle_energy=format_joules(idle_energy)))


def _pod_row(pod: PodStats, index_of: dict[str, tuple[int, str]]) -> tuple[float, TenantRow]:
    name, namespace, uid = _shown(pod.name), _shown(pod.namespace), shown(pod.uid)
    return _tenant_row(KIND_POD, pod_key(name, namespace, uid, ""), name or uid, name is None,
                       namespace, list(pod.accelerators), index_of)


def _entry_row(container: ContainerStats, index_of: dict[str, tuple[int, str]]
               ) -> tuple[float, TenantRow]:
    name, name_is_id = _entry_name(container)
    return _tenant_row(container.kind, pod_key(None, None, None, container.container_id), name,
                       name_is_id, _shown(owner_text(container)), list(container.accelerators),
                       index_of)


def _tenant_rows(snapshot: Snapshot) -> tuple[TenantRow, ...]:
    """Tenants holding GPUs, the most energy first (attributed, in total: the table's "energy,
    total" column; unknown last): pods, one per namespace/name (a pod re-created under its
    name: the one the Summary API lists), and every live tenant outside pods, of any kind."""
    names = gpu_names(snapshot.devices)
    index_of = {d.identity.uuid: (k, names[d.identity.uuid][1])
                for k, d in enumerate(snapshot.devices)}
    rows = [_pod_row(pod, index_of) for pod in snapshot.listed_pods() if pod.accelerators]
    rows += [_entry_row(c, index_of) for c in snapshot.containers
             if c.pod_uid is None and not c.ended and c.accelerators]
    rows.sort(key=lambda r: (-r[0], r[1].namespace, r[1].tenant))
    return tuple(row for _, row in rows)


def _totals(snapshot: Snapshot, tenants_on_gpus: int) -> tuple[tuple[str, str], ...]:
    power, billed, nobody = power_totals(snapshot)
    return (
        ("GPUs", gpu_count([_health(d).state for d in snapshot.devices])),
        ("power", format_watts(power)),
        ("billed to tenants (active + idle share)", format_watts(billed)),
        ("billed to nobody (unattributed + unallocated idle)", format_watts(nobody)),
        ("tenants on GPUs", str(tenants_on_gpus)),
    )


def page_view(snapshot: Snapshot) -> Page:
    """The page's content for one snapshot."""
    owners = [(p, c) for p, c in snapshot.containers_with_pods() if _live(p, c)]
    tenants = _tenant_rows(snapshot)
    status = snapshot.status
    titles = gpu_names(snapshot.devices)
    return Page(node_name=shown(snapshot.node.node_name), taken_at=format_time(snapshot.taken_at),
                sequence=snapshot.sequence, driver_version=status.driver_version,
                notes=page_notes(status), totals=_totals(snapshot, len(tenants)),
                gpus=tuple(_card(d, owners, titles[d.identity.uuid][0])
                           for d in snapshot.devices), tenants=tenants)
