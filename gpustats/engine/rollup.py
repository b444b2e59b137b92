"""The snapshot's containers and pods of one tick: what the mapping found, with the usage read
and the energy the ledger settled; containers and pods kept while their counters are."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Collection, Iterable, Mapping, cast

from gpustats.engine.counters import EnergyCounters
from gpustats.engine.gpu_mapping import GpuIndex, GpuKey, MappedTick, TenantOwner, claim_order
from gpustats.engine.ledger import Settled
from gpustats.model.containers import ContainerIdentity, ContainerNames, ContainerUsage
from gpustats.model.dra import ClaimDevice, UnresolvedClaim
from gpustats.model.energy_keys import ContainerIdleKey, ContainerKey, PodIdleKey, PodKey
from gpustats.model.tenants import tenant_from_key
from gpustats.model.snapshot import (
    ContainerAccelerator, ContainerStats, PodAccelerator, PodStats, ProcessStats,
)


@dataclass
class ContainerView:
    """One tick's pods, containers in no pod, and which container each GPU process is in."""

    pods: tuple[PodStats, ...] = ()
    containers: tuple[ContainerStats, ...] = ()
    pid_to_container: dict[tuple[str, int], str] = field(default_factory=dict)
    process_users: dict = field(default_factory=dict)    # (GPU UUID, PID) -> ProcessUser


@dataclass
class _TickParts:
    """What building one tick's containers and pods reads, and what it gathers per pod."""

    mapped: MappedTick
    settled: Settled
    memory_known: dict[str, bool]
    by_container: dict[str, list[ProcessStats]]
    pod_gpus: dict[str, set[str]] = field(default_factory=dict)
    pod_claims: dict[str, dict[str, ClaimDevice]] = field(default_factory=dict)

    def note_pod_gpu(self, uid: str, uuid: str, claim: ClaimDevice | None) -> None:
        """A container of the pod holds the GPU (by the claim): one claim per pod and GPU is
        shown, the first by claim name."""
        self.pod_gpus.setdefault(uid, set()).add(uuid)
        if claim is not None:
            first = self.pod_claims.setdefault(uid, {}).get(uuid)
            if first is None or (first is not claim and claim_order(claim) < claim_order(first)):
                self.pod_claims[uid][uuid] = claim


class Rollup:
    """Builds each tick's containers and pods; remembers what outlives a tick (entries that
    may hold a counter, the pod each was shown under, pods' last names)."""

    def __init__(self, counters: EnergyCounters):
        self._counters = counters
        # Each served pod's last known (name, namespace): kept while none of its containers
        # is named (all of them restarting).
        self._pod_names: dict[str, tuple[str | None, str | None]] = {}
        # Each container's GPU entries that may hold a counter (None until first read from the
        # counters), and the pod each was shown under: a live container keeps listing an entry
        # while its counter exists, and a pod is served while a container of it is retained.
        self._entries: dict[str, set[GpuKey]] | None = None
        self._pod_of: dict[str, str] = {}
        # Last tick's entries of containers that hold no GPU and no claim, with what they were
        # built from (identity, names, usage): kept while those are the same objects.
        self._plain: dict[str, tuple] = {}
        # Each served pod's tick of first sight (ticks counted here): of pods sharing a
        # namespace/name, the one seen last is the newest (see ``_listed_instead``).
        self._ticks = 0
        self._first_seen: dict[str, int] = {}
        # Each tenant outside pods last shown (identity, names, user name): what it is shown
        # as once it ended, while its counters are retained.
        self._loose: dict[str, tuple[ContainerIdentity, ContainerNames | None,
                                     TenantOwner | None]] = {}

    def build(self, mapped: MappedTick, processes: tuple[ProcessStats, ...], settled: Settled,
              usage: Mapping[object, ContainerUsage]) -> ContainerView:
        """Containers and pods with the usage read and the figures the ledger settled."""
        self._ticks += 1
        parts = _TickParts(mapped, settled, _process_memory_known(mapped.devices),
                           _processes_by_container(processes, mapped.pid_to_container))
        entries = self._remember_entries(mapped.holdings.held)
        stats_by_pod: dict[str, list[ContainerStats]] = {}
        loose: list[ContainerStats] = []
        mappings, unresolved = mapped.mappings, mapped.claims.unresolved
        plain, self._plain = self._plain, {}
        tenant_users = mapped.tenant_users
        for cid, identity, n, pod_uid in mapped.shown:
            before = entries.get(cid)
            if before is None and cid not in mappings and cid not in unresolved:
                stats = self._plain_stats(plain.get(cid), cid, identity, n, usage[cid])
            else:
                stats = _container_stats(
                    cid, identity, n, usage[cid],
                    self._container_accelerators(parts, cid, pod_uid, before),   # holds a GPU
                    tuple(unresolved.get(cid, ())), tenant_users.get(cid))
            if pod_uid is not None:
                stats_by_pod.setdefault(pod_uid, []).append(stats)
            else:
                loose.append(stats)
                if before is not None or cid in mappings:
                    self._loose[cid] = (identity, n, tenant_users.get(cid))
        live = self._keep_pods(mapped, entries, stats_by_pod)
        loose.extend(self._ended_loose(parts, entries))
        return ContainerView(self._pods(parts, stats_by_pod, live, usage), tuple(loose),
                             mapped.pid_to_container, mapped.process_users)

    def _ended_loose(self, parts: _TickParts, entries: dict[str, set[GpuKey]]
                     ) -> list[ContainerStats]:
        """Tenants outside pods that ended while their counters are retained (``entries``
        holds only live and retained ones by now): shown as last seen, or, after a restart,
        as their key names them (a container's 64-hex key names no pod: not shown, as a gone
        pod's containers are not)."""
        live, pod_of = parts.mapped.containers, self._pod_of
        ended = []
        for cid in sorted(entries.keys() - live.keys()):
            if cid in pod_of:
                continue
            last = self._loose.get(cid)
            if last is None:
                tenant = tenant_from_key(cid)
                if tenant is None:
                    continue
                last = (ContainerIdentity(container_id=cid, tenant=tenant), None, None)
            identity, n, owner = last
            accelerators = self._container_accelerators(parts, cid, None, entries[cid])
            if accelerators:
                ended.append(replace(_container_stats(cid, identity, n, _NO_USAGE, accelerators,
                                                      (), owner), ended=True))
        for gone in self._loose.keys() - entries.keys():
            del self._loose[gone]
        return ended

    def _plain_stats(self, last: tuple | None, cid: str, identity: ContainerIdentity,
                     n: ContainerNames | None, usage: ContainerUsage) -> ContainerStats:
        """A container holding no GPU and no claim: last tick's entry while it was built from
        the same identity, names and usage (usage is read every few ticks), else a new one."""
        if last is None or last[0] is not identity or last[1] is not n or last[2] is not usage:
            last = (identity, n, usage, _container_stats(cid, identity, n, usage, (), ()))
        self._plain[cid] = last
        return last[3]

    def _container_accelerators(self, parts: _TickParts, cid: str, pod_uid: str | None,
                                before: set[GpuKey] | None) -> tuple[ContainerAccelerator, ...]:
        """A container's GPU entries (noted for its pod): those mapped this tick, and those it
        held before while their counters exist."""
        mapped = parts.mapped
        held = mapped.claims.by_key.get(cid, {})
        replicas = mapped.claims.replicas.get(cid, {})
        keys: Mapping[GpuKey, Collection[str]] | None = mapped.mappings.get(cid)
        if before is not None and (keys is None or not before.issubset(keys)):
            # Entries not mapped this tick (the GPU lost, its processes unknown): listed
            # with their totals while their counters exist.
            keys = {**{k: () for k in before}, **(keys or {})}
        accelerators = []
        for key, reasons in (_by_gpu_key(keys) if keys else ()):
            # A claim on the parent GPU also covers instances it was folded into.
            claim = held.get(key) or held.get((key[0], None))
            acc = self._accelerator(cid, key, reasons, mapped.devices, parts.memory_known,
                                    parts.by_container.get(cid, ()), parts.settled, claim,
                                    replicas.get(key) or replicas.get((key[0], None)))
            if not reasons and acc.attributed_energy_joules is None \
                    and acc.idle_share_energy_joules is None:
                continue              # held before, but no counter of it is kept
            accelerators.append(acc)
            if pod_uid is not None:
                parts.note_pod_gpu(pod_uid, key[0], claim)
        return tuple(accelerators)

    def _keep_pods(self, mapped: MappedTick, entries: dict[str, set[GpuKey]],
                   stats_by_pod: dict[str, list[ContainerStats]]) -> set[str]:
        """Pods served though none of their containers is shown; gone containers forgotten
        once their counters are. Returns the live pods: those with a cgroup or a container
        (and so any that holds a GPU now)."""
        # A pod is served while it exists: also while none of its containers does (its only
        # app container restarting, the sandbox alive), by its cgroup.
        for uid in mapped.pods:
            if uid not in stats_by_pod:
                stats_by_pod[uid] = []
        live_pods = set(stats_by_pod)
        # ... and while a container of it is retained (its counters kept), the pod's cgroup
        # gone or never found. Containers gone and no longer retained are forgotten.
        retained, pod_of, live = self._counters.retained, self._pod_of, mapped.containers
        for cid in [c for c in entries if c not in live]:
            if retained(("container", cid)):
                pod_uid = pod_of.get(cid)
                if pod_uid is not None and pod_uid not in stats_by_pod:
                    stats_by_pod[pod_uid] = []
            else:
                del entries[cid]
                pod_of.pop(cid, None)
        return live_pods

    def _pods(self, parts: _TickParts, stats_by_pod: dict[str, list[ContainerStats]],
              live: set[str], usage: Mapping[object, ContainerUsage]) -> tuple[PodStats, ...]:
        """Each served pod, named by a container of it (else by its last known names)."""
        pod_history: dict[str, dict[str, float]] = {}
        for key, total in self._counters.items("pod"):
            pod = cast("tuple[str, str, str]", key)        # ("pod", pod UID, GPU UUID)
            pod_history.setdefault(pod[1], {})[pod[2]] = total
        served = sorted(stats_by_pod.items())
        named = {uid: self._pod_name(uid, members, parts.mapped.names)
                 for uid, members in served}
        instead = self._listed_instead(named, live, usage)
        pod_stats = []
        for uid, members in served:
            name, namespace = named[uid]
            gpus, history = parts.pod_gpus.get(uid), pod_history.get(uid)
            pod_stats.append(PodStats(
                uid=uid, name=name, namespace=namespace,
                usage=usage.get(("pod", uid), _NO_USAGE), containers=tuple(members),
                accelerators=self._pod_accelerators(uid, gpus or (), parts.settled,
                                                    history or {}, parts.pod_claims.get(uid, {}))
                if gpus or history else (),         # no GPU now or before: none to list
                superseded_by=instead.get(uid), ended=uid not in live))
        for known in (self._pod_names, self._first_seen):
            for gone in known.keys() - stats_by_pod.keys():
                del known[gone]
        return tuple(pod_stats)

    def _pod_name(self, uid: str, members: list[ContainerStats],
                  names: Mapping[str, ContainerNames]) -> tuple[str | None, str | None]:
        """(name, namespace) of a pod: a container of it names it, else its last known names."""
        pod_names = next((names[c.container_id] for c in members
                          if c.container_id in names), None) if names else None
        if pod_names is not None and pod_names.pod_name is not None:
            self._pod_names[uid] = (pod_names.pod_name, pod_names.pod_namespace)
        return self._pod_names.get(uid, (None, None))

    def _listed_instead(self, named: Mapping[str, tuple[str | None, str | None]],
                        live: set[str], usage: Mapping[object, ContainerUsage]
                        ) -> dict[str, str]:
        """Pod UID -> the UID listed under its namespace/name instead, for pods sharing one
        (a pod re-created under its name). As the kubelet does, a pod that ended (kept while
        its counters are retained) gives way to a live one; of those left, the newest is
        listed: the one first seen last, then the one whose pod cgroup was created last."""
        first_seen, tick = self._first_seen, self._ticks
        by_name: dict[tuple[str, str], list[str]] = {}
        for uid, (name, namespace) in named.items():
            first_seen.setdefault(uid, tick)
            if name and namespace:
                by_name.setdefault((namespace, name), []).append(uid)
        instead: dict[str, str] = {}
        for uids in by_name.values():
            if len(uids) > 1:
                listed = max(uids, key=lambda uid: (
                    uid in live, first_seen[uid], _created(usage.get(("pod", uid))), uid))
                instead.update((uid, listed) for uid in uids if uid != listed)
        return instead

    def _remember_entries(self, held: Mapping[ContainerKey, str | None]) -> dict[str, set[GpuKey]]:
        """Each container's GPU entries that may hold a counter: those it held this tick or
        before (read from the counters at the first tick, so a restart keeps them)."""
        entries = self._entries
        if entries is None:
            entries = self._entries = {}
            for key, _ in self._counters.items("container"):
                # ("container", container ID, GPU UUID, GPU instance)
                entry = cast("tuple[str, str, str, int | None]", key)
                entries.setdefault(entry[1], set()).add((entry[2], entry[3]))
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

    def _accelerator(self, cid, key: GpuKey, reasons, devices: GpuIndex,
                     memory_known: Mapping[str, bool], procs, settled: Settled,
                     claim: ClaimDevice | None = None,
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
        if not memory_known.get(uuid, False):
            memory = None
        # The container's share of SM time: MPS clients' percentages can add up past 100.
        utilization = min(100.0, utilization) if mine and utilization is not None else None
        watts, total = settled.figures(ContainerKey(cid, uuid, gi), uuid)
        idle_watts, idle_total = settled.figures(ContainerIdleKey(cid, uuid, gi), uuid)
        return ContainerAccelerator(
            device_uuid=uuid, reasons=tuple(sorted(reasons)) if len(reasons) > 1 else
            tuple(reasons), gpu_instance_id=gi,
            mig_profile=devices.profiles.get(key) if gi is not None else None,
            process_memory_used_bytes=memory, compute_utilization_percent=utilization,
            attributed_power_watts=watts, attributed_energy_joules=total, claim=claim,
            idle_share_power_watts=idle_watts, idle_share_energy_joules=idle_total,
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
            idle_watts, idle_total = settled.figures(PodIdleKey(uid, uuid), uuid)
            if total is not None or idle_total is not None:   # None: never counted
                out[uuid] = PodAccelerator(uuid, watts, total, claims.get(uuid),
                                           idle_share_power_watts=idle_watts,
                                           idle_share_energy_joules=idle_total)
        for uuid, total in history.items():
            if uuid not in out:
                out[uuid] = PodAccelerator(uuid, None, total, idle_share_energy_joules=(
                    settled.total(PodIdleKey(uid, uuid))))
        return tuple(out[k] for k in sorted(out))


_NO_USAGE = ContainerUsage()


def _created(usage: ContainerUsage | None) -> float:
    """A pod cgroup's creation time, for ordering; -inf when unknown."""
    start = usage.start_time if usage is not None else None
    return start if start is not None else float("-inf")


def _container_stats(cid: str, identity: ContainerIdentity, n: ContainerNames | None,
                     usage: ContainerUsage, accelerators: tuple[ContainerAccelerator, ...],
                     unresolved: tuple[UnresolvedClaim, ...], owner: TenantOwner | None = None
                     ) -> ContainerStats:
    return ContainerStats(
        container_id=cid, name=n.container_name if n else None, runtime=identity.runtime,
        cgroup_path=identity.cgroup.main_path if identity.cgroup else None,
        pod_uid=identity.pod_uid, usage=usage, accelerators=accelerators,
        unresolved_claims=unresolved, tenant=identity.tenant,
        user=owner.user if owner is not None else None,
        uid=owner.uid if owner is not None else None)


def _by_gpu_key(keys: Mapping[GpuKey, Collection[str]]
                ) -> list[tuple[GpuKey, Collection[str]]]:
    """A container's GPU keys in GPU order, whole GPUs before their instances."""
    if len(keys) == 1:
        return list(keys.items())
    return sorted(keys.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1))


def _process_memory_known(devices: GpuIndex) -> dict[str, bool]:
    """Per GPU: NVML listed its processes (and so their memory) this tick."""
    return {uuid: not r.lost and "processes" not in r.unsupported_fields
            for uuid, r in devices.by_uuid.items()}


def _processes_by_container(processes: Iterable[ProcessStats],
                            pid_to_container: Mapping[tuple[str, int], str]
                            ) -> dict[str, list[ProcessStats]]:
    by_container: dict[str, list[ProcessStats]] = {}
    for p in processes:
        cid = pid_to_container.get((p.device_uuid, p.pid))
        if cid is not None:
            by_container.setdefault(cid, []).append(p)
    return by_container
