"""Fake mapping sources for the container tracker (cgroup walk, /proc, pod-resources, runtime
names) and the identities and readings its tests build on."""

from dataclasses import dataclass

from gpustats.model.containers import CgroupRef, ContainerIdentity, ContainerUsage
from gpustats.model.device import DeviceIdentity, DeviceReading
from gpustats.sources.cgroups import Discovery
from gpustats.sources.procs import ProcessIdentity, owner_from

GPU0, GPU1 = "GPU-0", "GPU-1"
UID = "2fc932ce-fdcc-454b-97bd-aadfdeb4c340"
A, B, S, D = "a" * 64, "b" * 64, "5" * 64, "d" * 64


class FakeCgroups:
    def __init__(self, containers, rules=None, pods=None):
        self.containers = containers
        self.rules = rules or {}
        self.pods = pods or {}
        self.ended = 0

    def discover(self):
        return Discovery(containers=dict(self.containers), pods=dict(self.pods))

    def device_rules(self, ref):
        return self.rules.get(ref.path("devices"))

    def usages(self, wanted):
        return [ContainerUsage(start_time=1.0) for _ in wanted]

    def end_tick(self):
        self.ended += 1


class FakeProcs:
    def __init__(self, by_pid):
        self.by_pid = by_pid

    def cgroup_bytes(self, pid):
        path = self.by_pid.get(pid)
        return None if path is None else f"0::{path}\n".encode()

    def owner_of(self, pid):
        path = self.by_pid.get(pid)
        if path is None:
            return None
        return owner_from({"": path}, ProcessIdentity("python3", 1000))


class FakeAllocations:
    """A kubelet listing; setting ``result`` lists anew (a new generation)."""

    def __init__(self, result: tuple):
        self.generation = 0
        self.result = result

    @property
    def result(self) -> tuple:
        return self._result

    @result.setter
    def result(self, value: tuple) -> None:
        self._result = value
        self.generation += 1

    def allocations(self):
        return self._result


@dataclass
class FakeNames:
    table: dict

    def names(self, ids):
        return {i: self.table[i] for i in ids if i in self.table}


def ident(cid, devices_path=None):
    return ContainerIdentity(container_id=cid, pod_uid=UID, qos_class="burstable",
                             cgroup=CgroupRef((("devices", devices_path or f"/k/pod{UID}/{cid}"),)))


def reading(uuid, minor, processes=(), mig=()):
    return DeviceReading(identity=DeviceIdentity(index=minor, uuid=uuid, minor_number=minor),
                         monotonic_seconds=0.0, processes=tuple(processes), mig_instances=mig)
