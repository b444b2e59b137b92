"""What the web page shows of one snapshot, as plain rows of display text (no HTML here).

The page is for people: figures are rounded and carry their units; a value that is absent is
shown as "–", never as 0; a pod or container nothing names is shown by its ID. Every name is
shown by the one rule of ``export.text`` (the template isolates each in ``<bdi>`` too).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from gpustats.export.text import shown
from gpustats.model.snapshot import ContainerStats, DeviceStats, Snapshot
from gpustats.model.health import STATUS_TRUE

ABSENT = "–"


def format_bytes(value: int | None) -> str:
    if value is None:
        return ABSENT
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"


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


def format_time(epoch_seconds: float) -> str:
    return datetime.fromtimestamp(epoch_seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class Health:
    state: str          # "healthy", "unhealthy", "lost" or "unknown"
    text: str


@dataclass(frozen=True)
class ContainerRow:
    pod_key: str        # the key the page's charts colour this pod by
    pod: str
    pod_is_id: bool
    namespace: str
    container: str
    container_is_id: bool
    instance: str       # MIG instance, or "" for a whole GPU
    power: str
    compute: str
    memory: str
    energy: str


@dataclass(frozen=True)
class GpuCard:
    uuid: str
    index: int
    model: str
    bus_id: str
    health: Health
    figures: tuple[tuple[str, str], ...]       # (label, value)
    containers: tuple[ContainerRow, ...]
    mig: tuple[tuple[str, str, str, str], ...]   # (instance, memory, activity, power)


@dataclass(frozen=True)
class PodRow:
    pod_key: str
    pod: str
    pod_is_id: bool
    namespace: str
    gpus: str
    power: str
    energy: str


@dataclass(frozen=True)
class Page:
    node_name: str
    taken_at: str
    sequence: int
    driver_version: str | None
    nvml_note: str | None
    totals: tuple[tuple[str, str], ...]
    gpus: tuple[GpuCard, ...]
    pods: tuple[PodRow, ...]


def _health(device: DeviceStats) -> Health:
    if device.lost:
        return Health("lost", "GPU lost")
    if device.health is None:
        return Health("unknown", "health unknown")
    if device.health.healthy:
        return Health("healthy", "healthy")
    bad = [c for c in device.health.conditions if c.status != STATUS_TRUE]
    reason = "; ".join(f"{c.type}: {c.reason}" for c in bad)
    return Health("unhealthy", f"unhealthy ({reason})" if reason else "unhealthy")


def _figures(device: DeviceStats) -> tuple[tuple[str, str], ...]:
    memory = format_bytes(device.memory_used_bytes)
    total = device.identity.memory_total_bytes
    if total is not None and device.memory_used_bytes is not None:
        used, unit = memory.split(" ")
        if format_bytes(total).endswith(unit):
            memory = f"{used} / {format_bytes(total)}"
        else:
            memory += f" / {format_bytes(total)}"
    power = format_watts(device.power_watts)
    if device.power_limit_watts is not None and device.power_watts is not None:
        power += f" / {format_watts(device.power_limit_watts)}"
    return (
        ("duty cycle", format_percent(device.duty_cycle_percent)),
        ("memory", memory),
        ("power", power),
        ("idle / active", f"{format_watts(device.idle_power_watts)} / "
                          f"{format_watts(device.active_power_watts)}"),
        ("temperature", ABSENT if device.temperature_celsius is None
         else f"{device.temperature_celsius} °C"),
        ("energy", format_joules(device.energy_joules)),
        ("sharing", device.sharing_mode or ABSENT),
    )


def _shown(value: str | None) -> str | None:
    return None if value is None else shown(value)


def pod_key(name: str | None, namespace: str | None, uid: str | None,
            container_id: str) -> str:
    """How the page tells pods apart: namespace/name, else the pod UID, else the container."""
    if name:
        return f"{namespace or ''}/{name}"
    return uid or f"container:{container_id}"


def _short_id(container_id: str) -> str:
    return container_id[:12]


def _rows_for(device: DeviceStats, owners: list[tuple[str | None, str | None, str | None,
                                                        ContainerStats]]) -> list[ContainerRow]:
    rows = []
    profiles = {m.gpu_instance_id: m.profile for m in device.mig_instances}
    for pod_name, namespace, pod_uid, container in owners:
        pod_name, namespace, pod_uid = _shown(pod_name), _shown(namespace), _shown(pod_uid)
        for acc in container.accelerators:
            if acc.device_uuid != device.identity.uuid:
                continue
            instance = ""
            if acc.gpu_instance_id is not None:
                profile = acc.mig_profile or profiles.get(acc.gpu_instance_id)
                instance = f"GI {acc.gpu_instance_id}" + (f" · {profile}" if profile else "")
            rows.append(ContainerRow(
                pod_key=pod_key(pod_name, namespace, pod_uid, container.container_id),
                pod=pod_name or pod_uid or ABSENT, pod_is_id=pod_name is None and bool(pod_uid),
                namespace=namespace or ABSENT,
                container=_shown(container.name) or _short_id(container.container_id),
                container_is_id=container.name is None, instance=instance,
                power=format_watts(acc.attributed_power_watts),
                compute=format_percent(acc.compute_utilization_percent),
                memory=format_bytes(acc.process_memory_used_bytes),
                energy=format_joules(acc.attributed_energy_joules)))
    return rows


def _ratio(value: float | None) -> str:
    return ABSENT if value is None else f"{value * 100:.0f} %"


def page_view(snapshot: Snapshot) -> Page:
    """The page's content for one snapshot."""
    owners: list[tuple[str | None, str | None, str | None, ContainerStats]] = []
    for pod in snapshot.pods:
        owners.extend((pod.name, pod.namespace, pod.uid, c) for c in pod.containers)
    owners.extend((None, None, c.pod_uid, c) for c in snapshot.containers)
    index_of = {d.identity.uuid: d.identity.index for d in snapshot.devices}
    cards = tuple(
        GpuCard(uuid=d.identity.uuid, index=d.identity.index,
                model=_shown(d.identity.name) or "unknown model",
                bus_id=_shown(d.identity.pci_bus_id) or "",
                health=_health(d), figures=_figures(d),
                containers=tuple(sorted(_rows_for(d, owners),
                                        key=lambda r: (r.namespace, r.pod, r.container))),
                mig=tuple((f"GI {m.gpu_instance_id}" + (f" · {m.profile}" if m.profile else ""),
                           format_bytes(m.memory_used_bytes), _ratio(m.activity_ratio),
                           format_watts(m.attributed_power_watts))
                          for m in d.mig_instances))
        for d in snapshot.devices)
    pods = []
    for pod in snapshot.pods:
        if not pod.accelerators:
            continue
        power = [a.attributed_power_watts for a in pod.accelerators
                 if a.attributed_power_watts is not None]
        energy = [a.attributed_energy_joules for a in pod.accelerators
                  if a.attributed_energy_joules is not None]
        gpus = sorted(index_of[a.device_uuid] for a in pod.accelerators
                      if a.device_uuid in index_of)
        name, namespace, uid = _shown(pod.name), _shown(pod.namespace), shown(pod.uid)
        pods.append((sum(power) if power else -1.0, PodRow(
            pod_key=pod_key(name, namespace, uid, ""),
            pod=name or uid, pod_is_id=name is None,
            namespace=namespace or ABSENT, gpus=", ".join(map(str, gpus)) or ABSENT,
            power=format_watts(sum(power)) if power else ABSENT,
            energy=format_joules(sum(energy)) if energy else ABSENT)))
    pods.sort(key=lambda p: (-p[0], p[1].namespace, p[1].pod))
    total_power = [d.power_watts for d in snapshot.devices if d.power_watts is not None]
    healthy = sum(1 for d in snapshot.devices if _health(d).state == "healthy")
    attributed = [a.attributed_power_watts for p in snapshot.pods for a in p.accelerators
                  if a.attributed_power_watts is not None]
    attributed += [a.attributed_power_watts for c in snapshot.containers for a in c.accelerators
                   if a.attributed_power_watts is not None]
    totals = (
        ("GPUs", f"{len(snapshot.devices)} ({healthy} healthy)"),
        ("power", format_watts(sum(total_power)) if total_power else ABSENT),
        ("attributed to pods", format_watts(sum(attributed)) if attributed else ABSENT),
        ("pods on GPUs", str(len(pods))),
    )
    status = snapshot.status
    note = None
    if not status.nvml_loaded:
        note = ("NVML is not loaded" + (f": {status.nvml_error}" if status.nvml_error else "")
                if status.gpus_on_pci_bus else "No NVIDIA GPU on this node's PCI bus")
    return Page(node_name=shown(snapshot.node.node_name), taken_at=format_time(snapshot.taken_at),
                sequence=snapshot.sequence, driver_version=status.driver_version,
                nvml_note=note, totals=totals, gpus=cards, pods=tuple(p[1] for p in pods))
