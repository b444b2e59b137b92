"""Mapping source: cgroup v1 ``devices.list`` entries that name one GPU node each
(``c 195:<minor>`` NVIDIA, ``c 226:<minor>`` a DRM card or render node). A cgroup allowed
every device, or every node of a kind, is not an assignment."""

from __future__ import annotations

from typing import Protocol

from gpustats.engine.gpu_mapping import TickMapping
from gpustats.model.containers import REASON_DEVICES_LIST, CgroupRef


class DeviceRulesSource(Protocol):
    def device_rules(self, ref: CgroupRef): ...     # a ``sources.cgroup_stats.DeviceRules``


class DevicesListMapping:
    def __init__(self, cgroups: DeviceRulesSource):
        self._cgroups = cgroups

    def map(self, tick: TickMapping) -> None:
        by_node = tick.devices.by_node
        if not by_node:
            return
        for cid, identity in list(tick.containers.items()):
            if identity.cgroup is None or identity.cgroup.path("devices") is None:
                continue
            rules = self._cgroups.device_rules(identity.cgroup)
            if rules is None or rules.all_devices:
                continue
            for node in rules.gpu_nodes:
                uuid = by_node.get(node)
                if uuid is not None:
                    tick.hold(cid, (uuid, None), REASON_DEVICES_LIST)
