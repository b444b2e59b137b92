"""When each container's and pod's CPU and memory are read: at first sight, then once every
``every_ticks`` ticks, each cgroup on its own phase so that every tick reads an even share
(each figure carries its own time, as cAdvisor's housekeeping does)."""

from __future__ import annotations

import zlib
from typing import Iterator, Mapping, Protocol, Sequence

from gpustats.model.containers import (
    CgroupRef, ContainerIdentity, ContainerNames, ContainerUsage,
)

# (container ID, identity, names, pod UID) of each container the tick shows.
Shown = Sequence[tuple[str, ContainerIdentity, ContainerNames | None, str | None]]
# (key, cgroup) of each cgroup read: a container ID, or ("pod", uid).
Read = tuple[object, CgroupRef]


class UsageSource(Protocol):
    def usages(self, wanted: Sequence[tuple[object, CgroupRef]]) -> list[ContainerUsage]: ...


class UsageSchedule:
    """Usage of the shown containers and their pods, read when due and kept between reads."""

    def __init__(self, source: UsageSource, every_ticks: int = 1):
        self._source = source
        self._usage_every = max(1, every_ticks)
        self._usage: dict[object, tuple[int, ContainerUsage]] = {}     # key -> (phase, usage)
        self._round: _Round | None = None

    def read(self, shown: Shown, pods: Mapping[str, CgroupRef],
             tick: int) -> dict[object, ContainerUsage]:
        """CPU and memory of the shown containers and their pods, keyed by container ID and
        ``("pod", uid)``: those due this tick read together, before any entry is built."""
        last = self._round
        if last is not None and last.shown == shown and last.pods == pods:
            return self._read_due(last, tick)
        usage = self._read_all(shown, pods, tick)
        self._round = _Round(list(shown), dict(pods), usage, self._phases(shown, pods))
        return usage

    def _read_due(self, last: _Round, tick: int) -> dict[object, ContainerUsage]:
        """The same cgroups as last tick: those due read, the others' usage kept."""
        due = last.by_phase[-tick % self._usage_every]
        usage, kept = dict(last.usage), self._usage
        for (key, _), found in zip(due, self._source.usages(due)):
            kept[key] = (kept[key][0], found)
            usage[key] = found
        last.usage = usage
        return usage

    def _phases(self, shown: Shown, pods: Mapping[str, CgroupRef]) -> list[list[Read]]:
        """(key, cgroup) of each cgroup read, grouped by phase, in the order they are read."""
        by_phase: list[list[Read]] = [[] for _ in range(self._usage_every)]
        for key, ref in _cgroups_shown(shown, pods):
            if ref is not None:
                by_phase[self._usage[key][0]].append((key, ref))
        return by_phase

    def _read_all(self, shown: Shown, pods: Mapping[str, CgroupRef],
                  tick: int) -> dict[object, ContainerUsage]:
        """Each shown cgroup's usage: read at first sight and when due, else kept."""
        usage: dict[object, ContainerUsage] = {}
        due: list[tuple[object, CgroupRef]] = []
        kept, every = self._usage, self._usage_every
        for key, ref in _cgroups_shown(shown, pods):
            if ref is None:
                usage[key] = ContainerUsage()
                kept.pop(key, None)
                continue
            cached = kept.get(key)
            if cached is not None and (tick + cached[0]) % every:
                usage[key] = cached[1]
            else:
                due.append((key, ref))
        for (key, _), found in zip(due, self._source.usages(due)):
            cached = kept.get(key)
            phase = cached[0] if cached is not None \
                else zlib.crc32(repr(key).encode()) % every
            kept[key] = (phase, found)
            usage[key] = found
        for gone in kept.keys() - usage.keys():
            del kept[gone]
        return usage


class _Round:
    """The cgroups shown last tick, their usage and phases: what a tick showing the same
    cgroups reads (those due) and keeps (the others), without going over every cgroup."""

    __slots__ = ("shown", "pods", "usage", "by_phase")

    def __init__(self, shown: list[tuple[str, ContainerIdentity, ContainerNames | None,
                                         str | None]],
                 pods: dict[str, CgroupRef], usage: dict[object, ContainerUsage],
                 by_phase: list[list[Read]]):
        self.shown, self.pods, self.usage, self.by_phase = shown, pods, usage, by_phase


def _cgroups_shown(shown: Shown, pods: Mapping[str, CgroupRef]
                   ) -> Iterator[tuple[object, CgroupRef | None]]:
    """(key, cgroup) of each shown container and, once, of its pod."""
    seen_pods = set()
    for cid, identity, _, pod_uid in shown:
        yield cid, identity.cgroup
        if pod_uid is not None and pod_uid not in seen_pods:
            seen_pods.add(pod_uid)
            yield ("pod", pod_uid), pods.get(pod_uid)
    if len(pods) > len(seen_pods):          # pods none of whose containers is shown
        for uid, ref in pods.items():
            if uid not in seen_pods:
                yield ("pod", uid), ref
