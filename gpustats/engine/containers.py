"""Containers and pods of one tick: discovery, GPU mapping from three sources, names, usage.

A container's GPUs come from, and are recorded with, these reasons: v1 ``devices.list``
explicit ``c 195:<minor>`` entries; NVML's process list mapped through ``/proc/<pid>/cgroup``
(what makes cgroup v2 and privileged containers work); kubelet pod-resources allocations
(device-plugin devices, and DRA claim devices resolved through CDI), joined to a container by
the runtime's name labels or, without a runtime, by a GPU that one container alone uses and one
allocation alone holds. Names come from the runtime's labels or that join; a container nothing
names is known by its cgroup ID only (never a guessed name).
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple, Protocol, Sequence

from gpustats.engine.counters import EnergyCounters
from gpustats.engine.ledger import EnergyLedger, Holdings, Settled
from gpustats.model.attribution import DeviceAttribution
from gpustats.model.containers import (
    REASON_DEVICES_LIST, REASON_DRA, REASON_NVML_PROCESS, REASON_POD_RESOURCES, CgroupRef,
    ContainerIdentity, ContainerNames, ContainerUsage, PodDeviceAllocation,
)
from gpustats.model.energy_keys import ContainerKey, PodKey
from gpustats.model.device import DeviceReading
from gpustats.model.dra import ClaimDevice, UnresolvedClaim
from gpustats.model.snapshot import (
    ContainerAccelerator, ContainerStats, PodAccelerator, PodStats, ProcessStats,
)

log = logging.getLogger(__name__)

GpuKey = tuple[str, int | None]          # (physical GPU UUID, GPU instance id or None)


class CgroupSource(Protocol):
    def discover(self): ...

    def device_rules(self, ref: CgroupRef): ...

    def usages(self, wanted: Sequence[tuple[object, CgroupRef]]) -> list[ContainerUsage]: ...

    def end_tick(self) -> None: ...


class ProcSource(Protocol):
    def container_of(self, pid: int): ...


class AllocationSource(Protocol):
    def allocations(self) -> tuple[PodDeviceAllocation, ...] | None: ...


class NamesSource(Protocol):
    def names(self, container_ids: Iterable[str]) -> dict[str, ContainerNames]: ...


class ClaimSource(Protocol):
    generation: int            # changes whenever the CDI devices do (read after begin_tick)

    def begin_tick(self) -> None: ...

    def resolve(self, claim: ClaimDevice, devices) -> tuple[tuple["GpuKey", ...], str | None]: ...


@dataclass
class _Claims:
    """This tick's DRA claims per container: on which GPU key, and those left unresolved; and
    the device-plugin replicas (``<uuid>::N``) it holds of each GPU key."""

    by_key: dict[str, dict["GpuKey", ClaimDevice]] = field(default_factory=dict)
    unresolved: dict[str, list[UnresolvedClaim]] = field(default_factory=dict)
    replicas: dict[str, dict["GpuKey", set[int]]] = field(default_factory=dict)


@dataclass
class _Joined:
    """The pod-resources allocations joined to this tick's containers: what each one holds."""

    answer: "_Resolved"                    # the resolution it was joined from
    names: dict                            # the names it was joined by
    keys: dict[str, list[tuple["GpuKey", str]]] = field(default_factory=dict)   # (key, reason)
    claims: dict[str, dict["GpuKey", ClaimDevice]] = field(default_factory=dict)
    unresolved: dict[str, list[UnresolvedClaim]] = field(default_factory=dict)
    replicas: dict[str, dict["GpuKey", set[int]]] = field(default_factory=dict)
    through_users: bool = False            # a join made through this tick's GPU users


class _Resolved(NamedTuple):
    """The pod-resources allocations resolved to GPU keys (see ``_resolve_allocations``)."""

    holders: dict[str, set[tuple[str, str, str]]]          # GPU UUID -> its allocations' owners
    # (owner, key, claim, device-plugin replica)
    resolved: list[tuple[tuple[str, str, str], GpuKey, ClaimDevice | None, int | None]]
    unresolved: list[tuple[tuple[str, str, str], ClaimDevice, str]]


class _Mapped(NamedTuple):
    """One tick's containers and pods and what each holds, between ``map`` and ``build``."""

    containers: dict[str, ContainerIdentity]
    pods: dict[str, CgroupRef]
    names: dict[str, ContainerNames]
    mappings: dict[str, dict[GpuKey, set[str]]]
    devices: "_Devices"
    pid_to_container: dict[tuple[str, int], str]
    claims: _Claims
    shown: list          # (container ID, identity, names, pod UID), sandboxes left out
    holdings: Holdings


@dataclass
class ContainerView:
    pods: tuple[PodStats, ...] = ()
    containers: tuple[ContainerStats, ...] = ()
    pid_to_container: dict[tuple[str, int], str] = field(default_factory=dict)


@dataclass
class _Devices:
    """Lookups over this tick's GPUs."""

    by_minor: dict[int, str]
    by_uuid: dict[str, DeviceReading]
    mig_by_uuid: dict[str, GpuKey]
    profiles: dict[GpuKey, str | None]
    _memory_known: dict[str, bool] = field(default_factory=dict)

    def signature(self) -> tuple:
        """What resolving a device ID or a claim depends on: UUIDs, minors, MIG instances."""
        return (tuple(sorted(self.by_minor.items())), tuple(sorted(self.by_uuid)),
                tuple(sorted(self.mig_by_uuid.items())),
                tuple(sorted(u for u, r in self.by_uuid.items() if r.mig_instances)))

    def process_memory_known(self, uuid: str) -> bool:
        """NVML listed the GPU's processes (and so their memory) this tick."""
        found = self._memory_known.get(uuid)
        if found is None:
            reading = self.by_uuid.get(uuid)
            found = self._memory_known[uuid] = reading is not None and not reading.lost \
                and "processes" not in reading.unsupported_fields
        return found

    @classmethod
    def of(cls, readings: tuple[DeviceReading, ...]) -> "_Devices":
        by_minor, by_uuid, mig, profiles = {}, {}, {}, {}
        for r in readings:
            by_uuid[r.identity.uuid] = r
            if r.identity.minor_number is not None:
                by_minor[r.identity.minor_number] = r.identity.uuid
            for inst in r.mig_instances:
                key = (r.identity.uuid, inst.gpu_instance_id)
                profiles[key] = inst.profile
                if inst.uuid:
                    mig[inst.uuid] = key
        return cls(by_minor, by_uuid, mig, profiles)

    def resolve(self, allocation: PodDeviceAllocation) -> GpuKey | None:
        ref = allocation.device
        if ref is None:
            return None
        if ref.parent_uuid is not None:
            return (ref.parent_uuid, ref.gpu_instance_id) if ref.parent_uuid in self.by_uuid \
                else None
        if ref.kind == "mig":
            return self.mig_by_uuid.get(ref.uuid)
        return (ref.uuid, None) if ref.uuid in self.by_uuid else None


class ContainerTracker:
    def __init__(self, cgroups: CgroupSource, procs: ProcSource, counters: EnergyCounters, *,
                 pod_resources: AllocationSource | None = None,
                 runtime: NamesSource | None = None, claims: ClaimSource | None = None,
                 names: Sequence[NamesSource] = (), usage_every_ticks: int = 1):
        self._cgroups = cgroups
        self._procs = procs
        self._counters = counters
        self._pod_resources = pod_resources
        self._claim_source = claims
        # The last listing's resolution: (listing, has claims, valid for, answer).
        self._resolved: tuple | None = None
        self._joined: _Joined | None = None       # the last join, while it holds
        # Name sources in order of trust (after pod-resources): ``names`` (the kubelet's log
        # layout), then the runtime's CRI labels.
        self._name_sources = (*names, *((runtime,) if runtime is not None else ()))
        # (pid, start time) -> its container (or None: in no container), for processes seen
        # last tick: a GPU process does not change cgroup.
        self._pid_owner: dict[tuple[int, int | None], object] = {}
        self._ticks = 0
        # Each container's and pod's CPU/memory is read at first sight, then once every
        # ``usage_every_ticks`` ticks, each cgroup on its own phase so that every tick reads an
        # even share (each figure carries its own time, as cAdvisor's housekeeping does).
        self._usage_every = max(1, usage_every_ticks)
        self._usage: dict[object, tuple[int, ContainerUsage]] = {}     # key -> (phase, usage)
        # Each served pod's last known (name, namespace): kept while none of its containers
        # is named (all of them restarting).
        self._pod_names: dict[str, tuple[str | None, str | None]] = {}
        # Each container's GPU entries that may hold a counter (None until first read from the
        # counters), and the pod each was shown under: a live container keeps listing an entry
        # while its counter exists, and a pod is served while a container of it is retained.
        self._entries: dict[str, set[GpuKey]] | None = None
        self._pod_of: dict[str, str] = {}

    def tick(self, readings: tuple[DeviceReading, ...],
             attributions: Mapping[str, DeviceAttribution],
             processes: tuple[ProcessStats, ...]) -> ContainerView:
        """Map, settle the tick's energy in a ledger of this tracker's counters, build: for
        callers without a collector (the collector runs the ledger itself, between the two)."""
        starts = {(p.device_uuid, p.pid): p.start_time_ticks for p in processes}
        mapped = self.map(readings, starts)
        try:
            settled = EnergyLedger(self._counters).settle(readings, attributions, starts,
                                                          mapped.holdings)
        except BaseException:
            self._cgroups.end_tick()
            raise
        return self.build(mapped, processes, settled)

    def map(self, readings: tuple[DeviceReading, ...],
            starts: Mapping[tuple[str, int], int | None]) -> "_Mapped":
        """Who holds which GPU this tick (what the energy ledger bills by). ``build`` must
        follow (it ends the cgroup source's tick)."""
        self._ticks += 1
        if self._ticks % 12 == 0:
            # Re-check processes that were in no container (a start-up race would stick).
            self._pid_owner = {k: v for k, v in self._pid_owner.items() if v is not None}
        try:
            discovery = self._cgroups.discover()
            containers: dict[str, ContainerIdentity] = dict(discovery.containers)
            pods: dict[str, CgroupRef] = dict(discovery.pods)
            devices = _Devices.of(readings)
            mappings: dict[str, dict[GpuKey, set[str]]] = {}
            pid_to_container = self._map_processes(readings, containers, mappings, starts)
            self._map_devices_lists(containers, devices, mappings)
            names = self._names(containers)
            claims = _Claims()
            self._map_pod_resources(devices, containers, names, mappings, claims)
            _fold_parents_into_instances(mappings)
            # (container ID, identity, names, pod UID), sandboxes left out: a container a source
            # calls its pod's sandbox, unless it holds a GPU (never dropped, whatever its names).
            shown = []
            held: dict[ContainerKey, str | None] = {}
            gpu_users = set(pid_to_container.values())
            for cid, identity in sorted(containers.items()):
                n = names.get(cid)
                if n is None or not n.is_sandbox or mappings.get(cid) or cid in gpu_users:
                    uid = _pod_uid(identity, n)
                    shown.append((cid, identity, n, uid))
                    for uuid, gi in mappings.get(cid, ()):
                        held[ContainerKey(cid, uuid, gi)] = uid
            holdings = Holdings(pid_to_container, held,
                                tuple(_owners(containers, pods, names)))
            return _Mapped(containers, pods, names, mappings, devices, pid_to_container,
                           claims, shown, holdings)
        except BaseException:
            self._cgroups.end_tick()
            raise

    def build(self, mapped: "_Mapped", processes: tuple[ProcessStats, ...],
              settled: Settled) -> ContainerView:
        """Containers and pods with the figures the ledger settled."""
        try:
            return self._build(mapped, processes, settled)
        finally:
            self._cgroups.end_tick()

    def _names(self, containers: Mapping[str, ContainerIdentity]) -> dict[str, ContainerNames]:
        """Each name source in trust order names what those before it left without a name."""
        names: dict[str, ContainerNames] = {}
        for source in self._name_sources:
            wanted = {cid: identity for cid, identity in containers.items()
                      if cid not in names or names[cid].container_name is None}
            if not wanted:
                break
            for cid, found in source.names(wanted).items():
                if cid in wanted and (cid not in names or found.container_name is not None):
                    names[cid] = found
        return names

    # ------------------------------------------------------------ mapping sources

    def _map_processes(self, readings, containers, mappings, starts) -> dict[tuple[str, int], str]:
        pid_to_container = {}
        owner_of_pid: dict[tuple[int, int | None], object] = {}
        previous = self._pid_owner
        for reading in readings:
            for p in reading.processes:
                # A process is its PID and start time: a reused PID is looked up afresh.
                process = (p.pid, starts.get((reading.identity.uuid, p.pid)))
                if process not in owner_of_pid:
                    owner_of_pid[process] = previous[process] if process in previous \
                        else self._procs.container_of(p.pid)
                found = owner_of_pid[process]
                if found is None:
                    continue      # gone, or not in a container: stays at process level
                cid = found.info.container_id
                if cid not in containers:
                    containers[cid] = ContainerIdentity(
                        container_id=cid, runtime=found.info.runtime, pod_uid=found.info.pod_uid,
                        qos_class=found.info.qos_class, cgroup=found.cgroup)
                key = (reading.identity.uuid, p.gpu_instance_id)
                mappings.setdefault(cid, {}).setdefault(key, set()).add(REASON_NVML_PROCESS)
                pid_to_container[(reading.identity.uuid, p.pid)] = cid
        self._pid_owner = owner_of_pid
        return pid_to_container

    def _map_devices_lists(self, containers, devices: _Devices, mappings) -> None:
        if not devices.by_minor:
            return
        for cid, identity in containers.items():
            if identity.cgroup is None or identity.cgroup.path("devices") is None:
                continue
            rules = self._cgroups.device_rules(identity.cgroup)
            if rules is None or rules.all_devices or rules.all_nvidia:
                continue
            for minor in rules.gpu_minors:
                uuid = devices.by_minor.get(minor)
                if uuid is not None:
                    mappings.setdefault(cid, {}).setdefault((uuid, None), set()).add(
                        REASON_DEVICES_LIST)

    def _map_pod_resources(self, devices: _Devices, containers, names, mappings,
                           claims: _Claims) -> None:
        if self._pod_resources is None:
            return
        allocations = self._pod_resources.allocations()
        if not allocations:
            self._joined = None
            return
        answer = self._resolve_allocations(allocations, devices)
        joined = self._joined
        if joined is None or joined.answer is not answer or joined.names != names:
            joined = self._join(answer, containers, names, mappings)
            # Kept while the resolution and every name stay the same; a join made through
            # this tick's GPU users (no runtime names) is worked out again every tick.
            self._joined = joined if not joined.through_users else None
        for cid, keys in joined.keys.items():
            held = mappings.setdefault(cid, {})
            for key, reason in keys:
                held.setdefault(key, set()).add(reason)
        claims.by_key = joined.claims
        claims.unresolved = joined.unresolved
        claims.replicas = joined.replicas

    def _join(self, answer: "_Resolved", containers, names, mappings) -> "_Joined":
        """The resolved allocations joined to containers by the runtime's names (and, without
        them, by a GPU that one container alone uses and one allocation alone holds)."""
        holders, resolved, unresolved = answer
        by_name = {(n.pod_namespace, n.pod_name, n.container_name): cid
                   for cid, n in names.items() if not n.is_sandbox and n.container_name}
        joined = _Joined(answer, dict(names))
        for owner, claim, reason in unresolved:
            if by_name.get(owner) in containers:
                joined.unresolved.setdefault(by_name[owner], []).append(
                    UnresolvedClaim(claim, reason))
        users: dict[str, set[str]] | None = None
        for owner, key, claim, replica in resolved:
            cid = by_name.get(owner)
            if cid is None:
                # No runtime names: join only when this GPU has one holder and one user.
                if users is None:
                    users = {}
                    for user, keys in mappings.items():
                        for uuid, _ in keys:
                            users.setdefault(uuid, set()).add(user)
                joined.through_users = True
                candidates = users.get(key[0], set())
                if len(holders.get(key[0], ())) == 1 and len(candidates) == 1:
                    cid = next(iter(candidates))
                    identity = containers.get(cid)
                    if cid not in names and identity is not None:
                        names[cid] = ContainerNames(pod_name=owner[1], pod_namespace=owner[0],
                                                    pod_uid=identity.pod_uid,
                                                    container_name=owner[2])
            if cid is None or cid not in containers:
                continue
            joined.keys.setdefault(cid, []).append(
                (key, REASON_POD_RESOURCES if claim is None else REASON_DRA))
            if replica is not None:
                joined.replicas.setdefault(cid, {}).setdefault(key, set()).add(replica)
            if claim is not None:
                held = joined.claims.setdefault(cid, {})
                # One claim per container and GPU key is shown: the first by claim name.
                if key not in held or (held[key] is not claim
                                       and _claim_order(claim) < _claim_order(held[key])):
                    held[key] = claim
        return joined

    def _resolve_allocations(self, allocations: tuple[PodDeviceAllocation, ...],
                             devices: _Devices) -> "_Resolved":
        """Each allocation's GPU key, and the claims left unresolved.

        The answer stands while the kubelet's listing (kept between its calls), this node's
        GPUs and the CDI devices stay the same and every claim was resolved; a tick with an
        unresolved claim works them out again (its spec may appear any tick).
        """
        memo = self._resolved
        if memo is not None and memo[0] is allocations:
            has_claims = memo[1]
        else:
            has_claims = self._claim_source is not None and \
                any(a.claim is not None for a in allocations)
        if has_claims:
            self._claim_source.begin_tick()      # CDI specs looked at again, every tick
        valid_for = (devices.signature(),
                     self._claim_source.generation if has_claims else None)
        if memo is not None and memo[0] is allocations and memo[2] == valid_for:
            return memo[3]
        holders: dict[str, set[tuple[str, str, str]]] = {}
        resolved: list[tuple[tuple[str, str, str], GpuKey, ClaimDevice | None,
                             int | None]] = []
        unresolved: list[tuple[tuple[str, str, str], ClaimDevice, str]] = []
        for allocation in allocations:
            owner = (allocation.pod_namespace, allocation.pod_name, allocation.container_name)
            if allocation.claim is not None:
                if self._claim_source is None:
                    continue
                keys, reason = self._claim_source.resolve(allocation.claim, devices)
                if reason is not None:
                    unresolved.append((owner, allocation.claim, reason))
                for key in keys:
                    holders.setdefault(key[0], set()).add(owner)
                    resolved.append((owner, key, allocation.claim, None))
                continue
            key = devices.resolve(allocation)
            if key is None:
                continue
            holders.setdefault(key[0], set()).add(owner)
            resolved.append((owner, key, None, allocation.device.replica))
        answer = _Resolved(holders, resolved, unresolved)
        self._resolved = (allocations, has_claims, valid_for, answer) if not unresolved else None
        return answer

    # ------------------------------------------------------------ snapshot parts

    def _build(self, mapped: "_Mapped", processes, settled: Settled) -> ContainerView:
        names, claims = mapped.names, mapped.claims
        pid_to_container = mapped.pid_to_container
        by_container: dict[str, list[ProcessStats]] = {}
        for p in processes:
            cid = pid_to_container.get((p.device_uuid, p.pid))
            if cid is not None:
                by_container.setdefault(cid, []).append(p)
        shown = mapped.shown
        usage = self._read_usage(shown, mapped.pods)
        stats_by_pod: dict[str, list[ContainerStats]] = {}
        loose: list[ContainerStats] = []
        pod_gpus: dict[str, set[str]] = {}
        pod_claims: dict[str, dict[str, ClaimDevice]] = {}
        entries = self._remember_entries(mapped.holdings.held)
        for cid, identity, n, pod_uid in shown:
            accelerators = []
            held = claims.by_key.get(cid, {})
            replicas = claims.replicas.get(cid, {})
            keys = mapped.mappings.get(cid)
            before = entries.get(cid)
            if before is not None and (keys is None or not before.issubset(keys)):
                # Entries not mapped this tick (the GPU lost, its processes unknown): listed
                # with their totals while their counters exist.
                keys = {**{k: () for k in before}, **(keys or {})}
            for key, reasons in (_by_gpu_key(keys) if keys else ()):
                # A claim on the parent GPU also covers instances it was folded into.
                claim = held.get(key) or held.get((key[0], None))
                acc = self._accelerator(cid, key, reasons, mapped.devices,
                                        by_container.get(cid, ()), settled, claim,
                                        replicas.get(key) or replicas.get((key[0], None)))
                if not reasons and acc.attributed_energy_joules is None:
                    continue              # held before, but no counter of it is kept
                accelerators.append(acc)
                if pod_uid is not None:
                    pod_gpus.setdefault(pod_uid, set()).add(key[0])
                if pod_uid is not None and claim is not None:
                    first = pod_claims.setdefault(pod_uid, {}).get(key[0])
                    if first is None or (first is not claim
                                         and _claim_order(claim) < _claim_order(first)):
                        pod_claims[pod_uid][key[0]] = claim
            stats = ContainerStats(
                container_id=cid, name=n.container_name if n else None,
                runtime=identity.runtime,
                cgroup_path=identity.cgroup.main_path if identity.cgroup else None,
                pod_uid=identity.pod_uid, usage=usage[cid], accelerators=tuple(accelerators),
                unresolved_claims=tuple(claims.unresolved.get(cid, ())))
            if pod_uid is not None:
                stats_by_pod.setdefault(pod_uid, []).append(stats)
            else:
                loose.append(stats)
        # A pod is served while it exists: also while none of its containers does (its only
        # app container restarting, the sandbox alive), by its cgroup.
        for uid in mapped.pods:
            if uid not in stats_by_pod:
                stats_by_pod[uid] = []
        # ... and while a container of it is retained (its counters kept), the pod's cgroup
        # gone or never found. Containers gone and no longer retained are forgotten.
        retained, pod_of, live = self._counters.retained, self._pod_of, mapped.containers
        for cid in [c for c in entries if c not in live]:
            if retained(("container", cid)):
                uid = pod_of.get(cid)
                if uid is not None and uid not in stats_by_pod:
                    stats_by_pod[uid] = []
            else:
                del entries[cid]
                pod_of.pop(cid, None)
        pod_history: dict[str, dict[str, float]] = {}
        for key, total in self._counters.items("pod"):
            pod_history.setdefault(key[1], {})[key[2]] = total
        pod_stats = []
        known_names = self._pod_names
        for uid, members in sorted(stats_by_pod.items()):
            pod_names = next((names[c.container_id] for c in members
                              if c.container_id in names), None)
            if pod_names is not None and pod_names.pod_name is not None:
                known_names[uid] = (pod_names.pod_name, pod_names.pod_namespace)
            name, namespace = known_names.get(uid, (None, None))
            pod_stats.append(PodStats(
                uid=uid, name=name, namespace=namespace,
                usage=usage.get(("pod", uid), _NO_USAGE), containers=tuple(members),
                accelerators=self._pod_accelerators(uid, pod_gpus.get(uid, ()), settled,
                                                    pod_history.get(uid, {}),
                                                    pod_claims.get(uid, {}))))
        for gone in known_names.keys() - stats_by_pod.keys():
            del known_names[gone]
        return ContainerView(tuple(pod_stats), tuple(loose), pid_to_container)

    def _remember_entries(self, held: Mapping[ContainerKey, str | None]) -> dict[str, set[GpuKey]]:
        """Each container's GPU entries that may hold a counter: those it held this tick or
        before (read from the counters at the first tick, so a restart keeps them)."""
        entries = self._entries
        if entries is None:
            entries = self._entries = {}
            for key, _ in self._counters.items("container"):
                entries.setdefault(key[1], set()).add((key[2], key[3]))
        pod_of = self._pod_of
        for key, uid in held.items():
            cid = key[1]
            known = entries.get(cid)
            if known is None:
                known = entries[cid] = set()
            known.add((key[2], key[3]))
            if uid is not None:
                pod_of[cid] = uid
        return entries

    def _read_usage(self, shown, pods: Mapping[str, CgroupRef]) -> dict[object, ContainerUsage]:
        """CPU and memory of the shown containers and their pods, keyed by container ID and
        ``("pod", uid)``: those due this tick read together, before any entry is built."""
        usage: dict[object, ContainerUsage] = {}
        due: list[tuple[object, CgroupRef]] = []
        kept, every, tick = self._usage, self._usage_every, self._ticks
        for key, ref in self._cgroups_shown(shown, pods):
            if ref is None:
                usage[key] = ContainerUsage()
                kept.pop(key, None)
                continue
            cached = kept.get(key)
            if cached is not None and (tick + cached[0]) % every:
                usage[key] = cached[1]
            else:
                due.append((key, ref))
        for (key, _), found in zip(due, self._cgroups.usages(due)):
            cached = kept.get(key)
            phase = cached[0] if cached is not None \
                else zlib.crc32(repr(key).encode()) % every
            kept[key] = (phase, found)
            usage[key] = found
        for gone in kept.keys() - usage.keys():
            del kept[gone]
        return usage

    @staticmethod
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

    def _accelerator(self, cid, key: GpuKey, reasons, devices: _Devices, procs,
                     settled: Settled, claim: ClaimDevice | None = None,
                     replicas: set[int] | None = None) -> ContainerAccelerator:
        uuid, gi = key
        # One pass over this container's processes on this GPU (or GPU instance).
        # Sums start as sum() does (int 0), so figures keep their types.
        memory: int | None = 0          # 0: read, and none of theirs
        utilization: float | None = 0
        mine = 0
        for p in procs:
            if p.device_uuid != uuid or (gi is not None and p.gpu_instance_id != gi):
                continue
            mine += 1
            if memory is not None:
                memory = None if p.memory_used_bytes is None else memory + p.memory_used_bytes
            if utilization is not None:
                u = p.compute_utilization_percent
                utilization = None if u is None else utilization + u
        if not devices.process_memory_known(uuid):
            memory = None
        # The container's share of SM time: MPS clients' percentages can add up past 100.
        utilization = min(100.0, utilization) if mine and utilization is not None else None
        watts, total = settled.figures(ContainerKey(cid, uuid, gi), uuid)
        return ContainerAccelerator(
            device_uuid=uuid, reasons=tuple(sorted(reasons)) if len(reasons) > 1 else
            tuple(reasons), gpu_instance_id=gi,
            mig_profile=devices.profiles.get(key) if gi is not None else None,
            process_memory_used_bytes=memory, compute_utilization_percent=utilization,
            attributed_power_watts=watts, attributed_energy_joules=total, claim=claim,
            replicas=tuple(sorted(replicas)) if replicas else ())

    @staticmethod
    def _pod_accelerators(uid: str, gpus: Iterable[str], settled: Settled,
                          history: dict[str, float],
                          claims: dict[str, ClaimDevice]) -> tuple[PodAccelerator, ...]:
        """GPUs the pod's containers hold this tick, plus those whose energy it accumulated
        earlier."""
        out = {}
        for uuid in gpus:
            watts, total = settled.figures(PodKey(uid, uuid), uuid)
            if total is not None:          # None: never counted (its GPU's processes unknown)
                out[uuid] = PodAccelerator(uuid, watts, total, claims.get(uuid))
        for uuid, total in history.items():
            if uuid not in out:
                out[uuid] = PodAccelerator(uuid, None, total)
        return tuple(out[k] for k in sorted(out))


_NO_USAGE = ContainerUsage()


def _owners(containers: Mapping[str, ContainerIdentity], pods: Mapping[str, CgroupRef],
            names: Mapping[str, ContainerNames]) -> list[tuple[str, str]]:
    """Every container and pod of this tick, as owners of counters: each pod by its cgroup and
    by the UID its containers are shown under (their cgroup's, else their names')."""
    uids = set(pods)
    for cid, identity in containers.items():
        uid = _pod_uid(identity, names.get(cid))
        if uid:
            uids.add(uid)
    return [("container", cid) for cid in containers] + [("pod", uid) for uid in uids]


def _pod_uid(identity: ContainerIdentity, names: ContainerNames | None) -> str | None:
    """The pod a container is shown under: its cgroup's UID, else its names'."""
    return identity.pod_uid or (names.pod_uid if names else None)


def _by_gpu_key(keys: dict[GpuKey, set[str]]) -> list[tuple[GpuKey, set[str]]]:
    """A container's GPU keys in GPU order, whole GPUs before their instances."""
    if len(keys) == 1:
        return list(keys.items())
    return sorted(keys.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1))


def _claim_order(claim: ClaimDevice) -> tuple[str, str, str]:
    return claim.claim_namespace, claim.claim_name, claim.device_name or ""


def _fold_parents_into_instances(mappings: dict[str, dict[GpuKey, set[str]]]) -> None:
    """A container holding MIG instances of a GPU is attributed through them only.

    On cgroup v1 its ``devices.list`` names the parent GPU (``c 195:<minor>``) beside the MIG
    capability nodes; a separate parent entry would count its instances' energy twice. The
    parent's reasons move onto the instance entries.
    """
    for keys in mappings.values():
        if len(keys) < 2:
            continue                  # one key is a GPU or an instance, never both
        parents = {uuid for uuid, gi in keys if gi is None}
        for uuid in parents:
            instances = [k for k in keys if k[0] == uuid and k[1] is not None]
            if instances:
                reasons = keys.pop((uuid, None))
                for key in instances:
                    keys[key] |= reasons
