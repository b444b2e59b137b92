"""The rows of Kepler's GPU families (``--kepler-compat``, ``export.kepler_table``) in one
snapshot: one per GPU, and one per label set of a process, container or pod on a GPU.

Kepler's workload labels name a GPU by its index and vendor only, so what gpustats keeps per
GPU instance (a process or container on several MIG instances of one GPU) is summed into the
one series of that GPU; a GPU the snapshot does not list has no index to label it by, and its
workload rows are left out (the ``gpustats_*`` families carry it by UUID). Label values are
raw here; ``export.prometheus`` shows them by the one rule and adds ``node_name``.
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
    """A workload's figures on one GPU: active energy (cumulative) and power attributed, and
    (processes) the compute utilization as a ratio 0..1; ``None`` where unknown."""

    joules: float | None = None
    watts: float | None = None
    utilization: float | None = None


class _Sums:
    """Figures summed per label set, in first-seen order."""

    def __init__(self) -> None:
        self._parts: dict[Labels, list[tuple[float | None, float | None, float | None]]] = {}

    def add(self, labels: Labels, joules: float | None, watts: float | None,
            utilization: float | None = None) -> None:
        self._parts.setdefault(labels, []).append((joules, watts, utilization))

    def rows(self) -> list[RawRow]:
        out: list[RawRow] = []
        for labels, parts in self._parts.items():
            utilization = present_sum(p[2] for p in parts)
            out.append((Usage(present_sum(p[0] for p in parts), present_sum(p[1] for p in parts),
                              min(1.0, utilization) if utilization is not None else None),
                        labels))
        return out


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
    """Every GPU process, per GPU. Its ``container_id`` is its container's where it runs in
    one (``type`` container), else empty (``type`` regular: a service, session, job or loose
    process); ``terminated`` once it ended, while its counter is kept."""
    sums = _Sums()
    for p in snapshot.processes:
        gpu = gpus.get(p.device_uuid)
        if gpu is None:
            continue
        # A container's key is its ID; another tenant's names its kind (``service:…``).
        cid = p.container_id if p.container_id and tenant_from_key(p.container_id) is None \
            else None
        percent = p.compute_utilization_percent
        sums.add((p.pid, p.comm, None, CONTAINER_PROCESS if cid else REGULAR, gpu[0], gpu[2],
                  _state(p.ended), cid, None),
                 p.attributed_energy_joules, p.attributed_power_watts,
                 percent / 100.0 if percent is not None else None)
    return sums.rows()


def container_rows(snapshot: Snapshot, gpus: GpuLabels) -> list[RawRow]:
    """Every container (of a pod or not; not the other tenants) per GPU it holds or held:
    ``terminated`` once it, or its pod, ended while its counters are kept."""
    sums = _Sums()
    for pod, c in snapshot.containers_with_pods():
        if not is_container(c):
            continue
        ended = c.ended or (pod is not None and pod.ended)
        pod_id = pod.uid if pod is not None else c.pod_uid
        for a in c.accelerators:
            gpu = gpus.get(a.device_uuid)
            if gpu is None:
                continue
            sums.add((c.container_id, c.name, c.runtime or UNKNOWN_RUNTIME, gpu[0], gpu[2],
                      _state(ended), pod_id),
                     a.attributed_energy_joules, _live(a.attributed_power_watts, ended))
    return sums.rows()


def pod_rows(snapshot: Snapshot, gpus: GpuLabels) -> list[RawRow]:
    """Every pod whose counters are served (ended and re-created ones included) per GPU:
    ``terminated`` once it ended."""
    sums = _Sums()
    for pod in snapshot.pods:
        for a in pod.accelerators:
            gpu = gpus.get(a.device_uuid)
            if gpu is None:
                continue
            sums.add((pod.uid, pod.name, pod.namespace, gpu[0], gpu[2], _state(pod.ended)),
                     a.attributed_energy_joules, _live(a.attributed_power_watts, pod.ended))
    return sums.rows()


# Each Kepler scope's rows (export.prometheus walks them as its own scopes').
ROWS: dict[str, Callable[[Snapshot, GpuLabels], Iterable[RawRow]]] = {
    KEPLER_GPU: gpu_rows,
    KEPLER_PROCESS: process_rows,
    KEPLER_CONTAINER: container_rows,
    KEPLER_POD: pod_rows,
}
