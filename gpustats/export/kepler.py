"""The rows of Kepler's GPU families (``--kepler-compat``, ``export.kepler_table``) in one
snapshot: one per GPU, and one per label set of a process, container or pod.

Kepler's workload series name no GPU: what gpustats keeps per GPU and GPU instance (a process
or container on several GPUs or MIG instances) is summed into the workload's one series. Label
values are raw here; ``export.prometheus`` shows them by the one rule and adds ``node_name``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from gpustats.export.kepler_table import (
    CONTAINER_PROCESS, KEPLER_CONTAINER, KEPLER_GPU, KEPLER_POD, KEPLER_PROCESS, REGULAR,
    RUNNING, TERMINATED, UNKNOWN_RUNTIME,
)
from gpustats.export.tenants import is_container, present_sum
from gpustats.model.snapshot import Snapshot
from gpustats.model.tenants import tenant_from_key

GpuLabels = Mapping[str, tuple[object, str, object]]    # UUID -> (gpu, gpu_uuid, vendor)
Labels = tuple[object, ...]
RawRow = tuple[object, Labels]                          # (what the getters read, label values)


@dataclass(frozen=True)
class Usage:
    """A workload's figures over its GPUs: active energy (cumulative) and power attributed;
    ``None`` where unknown."""

    joules: float | None = None
    watts: float | None = None


class _Sums:
    """Figures summed per label set, in first-seen order."""

    def __init__(self) -> None:
        self._parts: dict[Labels, list[tuple[float | None, float | None]]] = {}

    def add(self, labels: Labels, joules: float | None, watts: float | None) -> None:
        self._parts.setdefault(labels, []).append((joules, watts))

    def rows(self) -> list[RawRow]:
        return [(Usage(present_sum(p[0] for p in parts), present_sum(p[1] for p in parts)),
                 labels) for labels, parts in self._parts.items()]


def _state(ended: bool) -> str:
    return TERMINATED if ended else RUNNING


def _live(watts: float | None, ended: bool) -> float | None:
    """A terminated owner's power is not sampled: only its counter is kept."""
    return None if ended else watts


def gpu_rows(snapshot: Snapshot, gpus: GpuLabels) -> list[RawRow]:
    """Every GPU: index, UUID, name and vendor."""
    return [(d, (d.identity.index, d.identity.uuid, d.identity.name, d.identity.vendor))
            for d in snapshot.devices]


def process_rows(snapshot: Snapshot, gpus: GpuLabels) -> list[RawRow]:
    """Every GPU process, its GPUs summed. Its ``container_id`` is its container's where it
    runs in one (``type`` container), else empty (``type`` regular: a service, session, job
    or loose process); ``terminated`` once it ended, while its counter is kept."""
    sums = _Sums()
    for p in snapshot.processes:
        # A container's key is its ID; another tenant's names its kind (``service:…``).
        cid = p.container_id if p.container_id and tenant_from_key(p.container_id) is None \
            else None
        sums.add((p.pid, p.comm, None, CONTAINER_PROCESS if cid else REGULAR, _state(p.ended),
                  cid, None),
                 p.attributed_energy_joules, p.attributed_power_watts)
    return sums.rows()


def container_rows(snapshot: Snapshot, gpus: GpuLabels) -> list[RawRow]:
    """Every container (of a pod or not; not the other tenants), the GPUs it holds or held
    summed:
    ``terminated`` once it, or its pod, ended while its counters are kept."""
    sums = _Sums()
    for pod, c in snapshot.containers_with_pods():
        if not is_container(c):
            continue
        ended = c.ended or (pod is not None and pod.ended)
        pod_id = pod.uid if pod is not None else c.pod_uid
        for a in c.accelerators:
            sums.add((c.container_id, c.name, c.runtime or UNKNOWN_RUNTIME, _state(ended),
                      pod_id),
                     a.attributed_energy_joules, _live(a.attributed_power_watts, ended))
    return sums.rows()


def pod_rows(snapshot: Snapshot, gpus: GpuLabels) -> list[RawRow]:
    """Every pod whose counters are served (ended and re-created ones included), its GPUs
    summed: ``terminated`` once it ended."""
    sums = _Sums()
    for pod in snapshot.pods:
        for a in pod.accelerators:
            sums.add((pod.uid, pod.name, pod.namespace, _state(pod.ended)),
                     a.attributed_energy_joules, _live(a.attributed_power_watts, pod.ended))
    return sums.rows()


# Each Kepler scope's rows (export.prometheus walks them as its own scopes').
ROWS: dict[str, Callable[[Snapshot, GpuLabels], Iterable[RawRow]]] = {
    KEPLER_GPU: gpu_rows,
    KEPLER_PROCESS: process_rows,
    KEPLER_CONTAINER: container_rows,
    KEPLER_POD: pod_rows,
}
