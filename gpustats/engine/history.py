"""The recent history: a time-bounded ring of each snapshot's figures, filled by housekeeping.

Memory is bounded by the duration: every series keeps the rows of the last ``duration``
seconds in one flat ``array('d')`` (8 bytes a value, NaN for absent), and a series with no row
left in the window is dropped. Requests only copy out a window (``window()``); recording never
happens on the request path.
"""

from __future__ import annotations

import math
import threading
from array import array
from bisect import bisect_left
from typing import Any, Generic, TypeVar

from gpustats.model.history import (
    CONTAINER_FIELDS, GPU_FIELDS, GPU_VALUES, MIG_FIELDS, ContainerSeries, GpuSeries,
    HistoryWindow, MigSeries,
)
from gpustats.model.snapshot import ContainerStats, Snapshot
from gpustats.model.tenants import display_name

NAN = math.nan
GPU_WIDTH = 1 + len(GPU_FIELDS)
MIG_WIDTH = 1 + len(MIG_FIELDS)
CONTAINER_WIDTH = 1 + len(CONTAINER_FIELDS)


def _value(value: float | int | bool | None) -> float:
    return NAN if value is None else float(value)


def _milli(value: float | None) -> float:
    """Watts and joules are kept to a thousandth (mW, mJ), as the summary shows them."""
    return NAN if value is None else round(value, 3)


K = TypeVar("K")
M = TypeVar("M", bound=tuple[Any, ...])

# Each table's keys and series identities: a GPU's (index, name, memory, power limit) by
# UUID, a MIG instance's (UUID, profile, memory) by (GPU UUID, GPU instance), a container's
# (name, pod name, namespace, pod UID) by (container ID, GPU UUID, GPU instance).
GpuMeta = tuple[int, str | None, int | None, float | None]
MigKey = tuple[str, int]
MigMeta = tuple[str | None, str | None, int | None]
ContainerKey = tuple[str, str, int | None]
ContainerMeta = tuple[str | None, str | None, str | None, str | None]
Row = tuple[float, ...]


class _Series(Generic[M]):
    """Identity of one series (a tuple, replaced when it changes) and its flat rows."""

    __slots__ = ("meta", "rows")

    def __init__(self, meta: M) -> None:
        self.meta = meta
        self.rows = array("d")


def _first_row_at_or_after(rows: array[float], width: int, cutoff: float) -> int:
    """Index of the first row whose time is >= ``cutoff`` (rows are in time order)."""
    count = len(rows) // width
    return bisect_left(range(count), cutoff, key=lambda i: rows[i * width])


def _tenant_name(container: ContainerStats) -> str | None:
    """A container's name; a tenant of another kind's (a unit, a user, a job, a command)."""
    if container.tenant is None:
        return container.name
    return display_name(container.tenant, container.user, container.name)


class History:
    """The last ``duration_seconds`` of GPU, MIG instance and per-container GPU figures."""

    def __init__(self, duration_seconds: float) -> None:
        if not duration_seconds > 0:
            raise ValueError(f"history duration must be positive, got {duration_seconds!r}")
        self.duration_seconds = float(duration_seconds)
        self._lock = threading.Lock()
        self._gpus: dict[str, _Series[GpuMeta]] = {}
        self._migs: dict[MigKey, _Series[MigMeta]] = {}
        self._containers: dict[ContainerKey, _Series[ContainerMeta]] = {}
        self._sequence: int | None = None
        self._monotonic: float | None = None
        self._wall_minus_monotonic = 0.0

    @property
    def sequence(self) -> int | None:
        """The sequence of the last snapshot recorded (None before the first)."""
        return self._sequence

    def record(self, snapshot: Snapshot) -> None:
        """Append one snapshot's figures and drop what fell out of the window."""
        if self._monotonic is not None and snapshot.monotonic <= self._monotonic:
            return          # the same snapshot twice, or one older than the last
        t = snapshot.monotonic
        gpus: list[tuple[str, GpuMeta, Row]] = []
        migs: list[tuple[MigKey, MigMeta, Row]] = []
        for device in snapshot.devices:
            ident = device.identity
            healthy = device.health.healthy if device.health is not None else None
            gpus.append((ident.uuid, (ident.index, ident.name, ident.memory_total_bytes,
                                      device.power_limit_watts),
                         (t, *(_value(v.rounded(device)) for v in GPU_VALUES),
                          _value(healthy))))
            for mig in device.mig_instances:
                migs.append(((ident.uuid, mig.gpu_instance_id),
                             (mig.uuid, mig.profile, mig.memory_total_bytes),
                             (t, _value(mig.memory_used_bytes),
                              NAN if mig.activity_ratio is None else round(mig.activity_ratio, 4),
                              _milli(mig.attributed_power_watts))))
        containers: list[tuple[ContainerKey, ContainerMeta, Row]] = []
        for pod, container in snapshot.containers_with_pods():
            if pod is None:
                self._container_rows(containers, t, container, None, None, container.pod_uid)
            else:
                self._container_rows(containers, t, container, pod.name, pod.namespace, pod.uid)
        cutoff = t - self.duration_seconds
        with self._lock:
            self._add(self._gpus, gpus)
            self._add(self._migs, migs)
            self._add(self._containers, containers)
            self._trim(self._gpus, GPU_WIDTH, cutoff)
            self._trim(self._migs, MIG_WIDTH, cutoff)
            self._trim(self._containers, CONTAINER_WIDTH, cutoff)
            self._sequence = snapshot.sequence
            self._monotonic = t
            self._wall_minus_monotonic = snapshot.taken_at - t

    @staticmethod
    def _add(table: dict[K, _Series[M]], fresh: list[tuple[K, M, Row]]) -> None:
        for key, meta, row in fresh:
            series = table.get(key)
            if series is None:
                series = table[key] = _Series(meta)
            elif series.meta != meta:
                series.meta = meta
            series.rows.extend(row)

    @staticmethod
    def _container_rows(out: list[tuple[ContainerKey, ContainerMeta, Row]],
                        t: float, container: ContainerStats, pod_name: str | None,
                        pod_namespace: str | None, pod_uid: str | None) -> None:
        for acc in container.accelerators:
            out.append(((container.container_id, acc.device_uuid, acc.gpu_instance_id),
                        (_tenant_name(container), pod_name, pod_namespace, pod_uid),
                        (t, _milli(acc.attributed_power_watts),
                         _milli(acc.attributed_energy_joules),
                         _milli(acc.idle_share_power_watts),
                         _value(acc.process_memory_used_bytes),
                         NAN if acc.compute_utilization_percent is None
                         else round(acc.compute_utilization_percent, 2))))

    @staticmethod
    def _trim(table: dict[K, _Series[M]], width: int, cutoff: float) -> None:
        gone = []
        for key, series in table.items():
            rows = series.rows
            if not rows or rows[0] >= cutoff:
                continue
            if rows[-width] < cutoff:
                gone.append(key)
                continue
            del rows[:_first_row_at_or_after(rows, width, cutoff) * width]
        for key in gone:
            del table[key]

    def window(self, seconds: float | None = None) -> HistoryWindow | None:
        """Copies of the rows of the last ``seconds`` (default: the whole duration)."""
        span = self.duration_seconds if seconds is None else min(seconds, self.duration_seconds)
        with self._lock:
            if self._sequence is None or self._monotonic is None:
                return None
            cutoff = self._monotonic - span
            gpus = tuple(
                GpuSeries(uuid, *s.meta, rows=rows)
                for uuid, s in self._gpus.items()
                if (rows := self._tail(s.rows, GPU_WIDTH, cutoff)))
            migs = tuple(
                MigSeries(key[0], key[1], *s.meta, rows=rows)
                for key, s in self._migs.items()
                if (rows := self._tail(s.rows, MIG_WIDTH, cutoff)))
            containers = tuple(
                ContainerSeries(key[0], key[1], key[2], *s.meta, rows=rows)
                for key, s in self._containers.items()
                if (rows := self._tail(s.rows, CONTAINER_WIDTH, cutoff)))
            return HistoryWindow(sequence=self._sequence, seconds=span,
                                 wall_minus_monotonic=self._wall_minus_monotonic,
                                 gpus=tuple(sorted(gpus, key=lambda g: (g.index, g.uuid))),
                                 mig_instances=migs, containers=containers)

    @staticmethod
    def _tail(rows: array[float], width: int, cutoff: float) -> array[float]:
        if not rows or rows[-width] < cutoff:
            return array("d")
        if rows[0] >= cutoff:
            return rows[:]
        return rows[_first_row_at_or_after(rows, width, cutoff) * width:]
