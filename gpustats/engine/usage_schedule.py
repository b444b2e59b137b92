"""When each container's and pod's CPU and memory are read: at first sight, then once every
``every_ticks`` ticks, each cgroup on its own phase so that every tick reads an even share
(each figure carries its own time, as cAdvisor's housekeeping does)."""

from __future__ import annotations

import zlib
from typing import Mapping, Protocol, Sequence

from gpustats.model.containers import CgroupRef, ContainerUsage


class UsageSource(Protocol):
    def usages(self, wanted: Sequence[tuple[object, CgroupRef]]) -> list[ContainerUsage]: ...


class UsageSchedule:
    """Usage of the shown containers and their pods, read when due and kept between reads."""

    def __init__(self, source: UsageSource, every_ticks: int = 1):
        self._source = source
        self._usage_every = max(1, every_ticks)
        self._usage: dict[object, tuple[int, ContainerUsage]] = {}     # key -> (phase, usage)

    def read(self, shown, pods: Mapping[str, CgroupRef],
             tick: int) -> dict[object, ContainerUsage]:
        """CPU and memory of the shown containers and their pods, keyed by container ID and
        ``("pod", uid)``: those due this tick read together, before any entry is built."""
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


def _cgroups_shown(shown, pods: Mapping[str, CgroupRef]):
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
