"""Which container holds which GPU this tick, from four sources, and what each is called.

A container's GPUs come from, and are recorded with, these reasons: v1 ``devices.list``
explicit ``c 195:<minor>`` (NVIDIA) and ``c 226:<minor>`` (DRM) entries; the GPU's process
list (NVML's, or the DRM clients found in fdinfo) mapped through ``/proc/<pid>/cgroup``
(what makes cgroup v2 and privileged containers work); kubelet pod-resources allocations
(device-plugin devices: NVML UUIDs, ROCm's PCI addresses, Intel's cards; and DRA claim
devices resolved through CDI), joined to a container by the runtime's name labels or, without
a runtime, by a GPU that one container alone uses and one allocation alone holds. Names come from the runtime's labels or that join; a container nothing
names is known by its cgroup ID only (never a guessed name).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple, Protocol, Sequence

from gpustats.engine.ledger import Holdings
from gpustats.model.containers import (
    REASON_DEVICES_LIST, REASON_DRA, REASON_NVML_PROCESS, REASON_POD_RESOURCES, CgroupRef,
    ContainerIdentity, ContainerNames, ContainerUsage, PodDeviceAllocation,
)
from gpustats.model.device import DeviceReading
from gpustats.sources.cgroup_stats import DRM_MAJOR, NVIDIA_MAJOR
from gpustats.sources.driver_procfs import normalize_bus_id
from gpustats.model.dra import ClaimDevice, UnresolvedClaim
from gpustats.model.energy_keys import ContainerKey

GpuKey = tuple[str, int | None]          # (physical GPU UUID, GPU instance id or None)


class CgroupSource(Protocol):
    def discover(self): ...

    def device_rules(self, ref: CgroupRef): ...

    def usages(self, wanted: Sequence[tuple[object, CgroupRef]]) -> list[ContainerUsage]: ...

    def end_tick(self) -> None: ...


class ProcSource(Protocol):
    def owner_of(self, pid: int): ...       # a ``sources.procs.ProcessOwner``, None: gone


class UserSource(Protocol):
    def name(self, uid: int) -> str | None: ...


class ProcessUser(NamedTuple):
    """A GPU process's command and user, as its ``/proc`` entry and the host's passwd say."""

    comm: str | None
    uid: int | None
    user: str | None


class AllocationSource(Protocol):
    generation: int            # changes whenever ``allocations`` lists anew

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

    def hold(self, cid: str, key: "GpuKey", claim: ClaimDevice | None,
             replica: int | None) -> None:
        """The container holds the GPU key by an allocation (of a claim, or a replica)."""
        self.keys.setdefault(cid, []).append(
            (key, REASON_POD_RESOURCES if claim is None else REASON_DRA))
        if replica is not None:
            self.replicas.setdefault(cid, {}).setdefault(key, set()).add(replica)
        if claim is not None:
            held = self.claims.setdefault(cid, {})
            # One claim per container and GPU key is shown: the first by claim name.
            if key not in held or (held[key] is not claim
                                   and claim_order(claim) < claim_order(held[key])):
                held[key] = claim


class _Resolved(NamedTuple):
    """The pod-resources allocations resolved to GPU keys (see ``_resolve_allocations``)."""

    holders: dict[str, set[tuple[str, str, str]]]          # GPU UUID -> its allocations' owners
    # (owner, key, claim, device-plugin replica)
    resolved: list[tuple[tuple[str, str, str], GpuKey, ClaimDevice | None, int | None]]
    unresolved: list[tuple[tuple[str, str, str], ClaimDevice, str]]


class _ResolutionMemo(NamedTuple):
    """The last listing's resolution, and what it holds for."""

    listing: int                       # the allocation source's generation it was listed in
    has_claims: bool                   # a DRA claim is among the allocations
    valid_for: tuple                   # GPUs' signature, CDI devices' generation (or None)
    answer: _Resolved


class MappedTick(NamedTuple):
    """One tick's containers and pods and what each holds, between ``map`` and ``build``."""

    containers: dict[str, ContainerIdentity]
    pods: dict[str, CgroupRef]
    names: dict[str, ContainerNames]
    mappings: dict[str, dict[GpuKey, set[str]]]
    devices: "GpuIndex"
    pid_to_container: dict[tuple[str, int], str]
    claims: _Claims
    shown: list          # (container ID, identity, names, pod UID), sandboxes left out
    holdings: Holdings
    process_users: dict[tuple[str, int], ProcessUser]    # (GPU UUID, PID) -> its user
    tenant_users: dict[str, str]          # a non-container tenant's key -> its user's name


@dataclass
class GpuIndex:
    """Lookups over this tick's GPUs: by device node (NVIDIA's major 195 or DRM's 226, and
    minor), UUID, MIG instance UUID, PCI address and DRM card."""

    by_minor: dict[int, str]          # NVIDIA's, of /dev/nvidia<N> (what CDI and MIG caps name)
    by_uuid: dict[str, DeviceReading]
    mig_by_uuid: dict[str, GpuKey]
    profiles: dict[GpuKey, str | None]
    by_node: dict[tuple[int, int], str] = field(default_factory=dict)
    by_pci: dict[str, str] = field(default_factory=dict)
    by_card: dict[str, str] = field(default_factory=dict)

    def signature(self) -> tuple:
        """What resolving a device ID or a claim depends on: UUIDs, nodes, MIG instances."""
        return (tuple(sorted(self.by_node.items())), tuple(sorted(self.by_uuid)),
                tuple(sorted(self.mig_by_uuid.items())),
                tuple(sorted(u for u, r in self.by_uuid.items() if r.mig_instances)))

    @classmethod
    def of(cls, readings: tuple[DeviceReading, ...]) -> "GpuIndex":
        by_minor, by_node, by_uuid, mig, profiles, by_pci, by_card = {}, {}, {}, {}, {}, {}, {}
        for r in readings:
            ident = r.identity
            by_uuid[ident.uuid] = r
            if ident.minor_number is not None:
                by_minor[ident.minor_number] = ident.uuid
                by_node[(NVIDIA_MAJOR, ident.minor_number)] = ident.uuid
            for minor in ident.drm_minors:
                by_node[(DRM_MAJOR, minor)] = ident.uuid
            if ident.pci_bus_id:
                by_pci[normalize_bus_id(ident.pci_bus_id)] = ident.uuid
            if ident.drm_card:
                by_card[ident.drm_card] = ident.uuid
            for inst in r.mig_instances:
                key = (ident.uuid, inst.gpu_instance_id)
                profiles[key] = inst.profile
                if inst.uuid:
                    mig[inst.uuid] = key
        return cls(by_minor, by_uuid, mig, profiles, by_node, by_pci, by_card)

    def resolve(self, allocation: PodDeviceAllocation) -> GpuKey | None:
        ref = allocation.device
        if ref is None:
            return None
        if ref.parent_uuid is not None:
            return (ref.parent_uuid, ref.gpu_instance_id) if ref.parent_uuid in self.by_uuid \
                else None
        if ref.kind == "mig":
            return self.mig_by_uuid.get(ref.uuid)
        uuid = {"pci": self.by_pci, "card": self.by_card}.get(ref.kind, {}).get(ref.uuid) \
            if ref.kind in ("pci", "card") else ref.uuid
        return (uuid, None) if uuid in self.by_uuid else None


class GpuMapper:
    """Maps this tick's containers to GPUs and names them (see the module's docstring)."""

    def __init__(self, cgroups: CgroupSource, procs: ProcSource, *,
                 pod_resources: AllocationSource | None = None,
                 runtime: NamesSource | None = None, claims: ClaimSource | None = None,
                 names: Sequence[NamesSource] = (), users: UserSource | None = None):
        self._cgroups = cgroups
        self._procs = procs
        self._users = users
        self._pod_resources = pod_resources
        self._claim_source = claims
        self._resolved: _ResolutionMemo | None = None     # the last listing's resolution
        self._joined: _Joined | None = None       # the last join, while it holds
        # Name sources in order of trust (after pod-resources): ``names`` (the kubelet's log
        # layout), then the runtime's CRI labels.
        self._name_sources = (*names, *((runtime,) if runtime is not None else ()))
        # (pid, start time) -> its owner and user (or None: gone), for processes seen last
        # tick: a GPU process does not change cgroup.
        self._pid_owner: dict[tuple[int, int | None], tuple[object, ProcessUser] | None] = {}
        self._ticks = 0
        # The last tick's owners of counters, and the containers, pods and names they came from.
        self._owners: tuple[dict, dict, dict, tuple[tuple[str, str], ...]] | None = None

    def map(self, readings: tuple[DeviceReading, ...],
            starts: Mapping[tuple[str, int], int | None]) -> "MappedTick":
        """Who holds which GPU this tick (what the energy ledger bills by)."""
        self._ticks += 1
        if self._ticks % 12 == 0:
            # Re-check processes placed in no container (a start-up race would stick: a
            # process is placed before its runtime moves it) and users' names.
            self._pid_owner = {k: v for k, v in self._pid_owner.items()
                               if v is not None and v[0].container is not None}
        discovery = self._cgroups.discover()
        containers: dict[str, ContainerIdentity] = dict(discovery.containers)
        pods: dict[str, CgroupRef] = dict(discovery.pods)
        devices = GpuIndex.of(readings)
        mappings: dict[str, dict[GpuKey, set[str]]] = {}
        pid_to_container, process_users, tenant_users = self._map_processes(
            readings, containers, mappings, starts)
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
        holdings = Holdings(pid_to_container, held, self._owners_of(containers, pods, names))
        return MappedTick(containers, pods, names, mappings, devices, pid_to_container,
                          claims, shown, holdings, process_users, tenant_users)

    def _owners_of(self, containers: dict[str, ContainerIdentity], pods: dict[str, CgroupRef],
                   names: dict[str, ContainerNames]) -> tuple[tuple[str, str], ...]:
        """``_owners``, the same as last tick's while the containers, pods and names are."""
        last = self._owners
        if last is None or last[0] != containers or last[1] != pods or last[2] != names:
            last = self._owners = (dict(containers), dict(pods), dict(names),
                                   tuple(_owners(containers, pods, names)))
        return last[3]

    def _names(self, containers: Mapping[str, ContainerIdentity]) -> dict[str, ContainerNames]:
        """Each name source in trust order names what those before it left without a name."""
        names: dict[str, ContainerNames] = {}
        for source in self._name_sources:
            wanted = {cid: identity for cid, identity in containers.items()
                      if identity.tenant is None
                      and (cid not in names or names[cid].container_name is None)}
            if not wanted:
                break
            for cid, found in source.names(wanted).items():
                if cid in wanted and (cid not in names or found.container_name is not None):
                    names[cid] = found
        return names

    # ------------------------------------------------------------ mapping sources

    def _map_processes(self, readings, containers, mappings, starts):
        """Each listed process's container (or other tenant, entered among ``containers`` by
        its key), user and command: (GPU UUID, PID) -> container ID, -> its ``ProcessUser``,
        and each non-container tenant's user name."""
        pid_to_container: dict[tuple[str, int], str] = {}
        process_users: dict[tuple[str, int], ProcessUser] = {}
        tenant_users: dict[str, str] = {}
        owner_of_pid: dict[tuple[int, int | None], tuple[object, ProcessUser] | None] = {}
        previous = self._pid_owner
        for reading in readings:
            uuid = reading.identity.uuid
            for p in reading.processes:
                # A process is its PID and start time: a reused PID is looked up afresh.
                process = (p.pid, starts.get((uuid, p.pid)))
                if process not in owner_of_pid:
                    owner_of_pid[process] = previous[process] if process in previous \
                        else self._owner(p.pid)
                found = owner_of_pid[process]
                if found is None:
                    continue      # gone: its energy stays unattributed
                owner, user = found
                process_users[(uuid, p.pid)] = user
                cid = self._enter_owner(owner, containers)
                if owner.tenant is not None and owner.tenant.uid is not None \
                        and owner.tenant.uid == user.uid and user.user is not None:
                    tenant_users[cid] = user.user
                key = (uuid, p.gpu_instance_id)
                mappings.setdefault(cid, {}).setdefault(key, set()).add(REASON_NVML_PROCESS)
                pid_to_container[(uuid, p.pid)] = cid
        self._pid_owner = owner_of_pid
        return pid_to_container, process_users, tenant_users

    def _owner(self, pid: int) -> tuple[object, ProcessUser] | None:
        """A process's owner and user, looked up once per process (None: gone)."""
        owner = self._procs.owner_of(pid)
        if owner is None:
            return None
        comm, uid = owner.identity.comm, owner.identity.uid
        user = self._users.name(uid) if self._users is not None and uid is not None else None
        return owner, ProcessUser(comm, uid, user)

    @staticmethod
    def _enter_owner(owner, containers: dict[str, ContainerIdentity]) -> str:
        """The owner's container ID (a tenant's key), entered among this tick's containers
        where discovery did not find it."""
        if owner.container is not None:
            info = owner.container.info
            cid = info.container_id
            if cid not in containers:
                containers[cid] = ContainerIdentity(
                    container_id=cid, runtime=info.runtime, pod_uid=info.pod_uid,
                    qos_class=info.qos_class, cgroup=owner.container.cgroup)
            return cid
        cid = owner.tenant.key
        if cid not in containers:
            containers[cid] = ContainerIdentity(container_id=cid, cgroup=owner.cgroup,
                                                tenant=owner.tenant)
        return cid

    def _map_devices_lists(self, containers, devices: GpuIndex, mappings) -> None:
        if not devices.by_node:
            return
        for cid, identity in containers.items():
            if identity.cgroup is None or identity.cgroup.path("devices") is None:
                continue
            rules = self._cgroups.device_rules(identity.cgroup)
            if rules is None or rules.all_devices:
                continue
            for node in rules.gpu_nodes:
                uuid = devices.by_node.get(node)
                if uuid is not None:
                    mappings.setdefault(cid, {}).setdefault((uuid, None), set()).add(
                        REASON_DEVICES_LIST)

    def _map_pod_resources(self, devices: GpuIndex, containers, names, mappings,
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
                    users = _gpu_users(mappings)
                joined.through_users = True
                cid = _sole_user(owner, key, holders, users, containers, names)
            if cid is not None and cid in containers:
                joined.hold(cid, key, claim, replica)
        return joined

    def _resolve_allocations(self, allocations: tuple[PodDeviceAllocation, ...],
                             devices: GpuIndex) -> "_Resolved":
        """Each allocation's GPU key, and the claims left unresolved.

        The answer stands while the kubelet's listing (its source's generation), this node's
        GPUs and the CDI devices stay the same and every claim was resolved; a tick with an
        unresolved claim works them out again (its spec may appear any tick).
        """
        memo = self._resolved
        listing = self._pod_resources.generation
        if memo is not None and memo.listing == listing:
            has_claims = memo.has_claims
        else:
            has_claims = self._claim_source is not None and \
                any(a.claim is not None for a in allocations)
        if has_claims:
            self._claim_source.begin_tick()      # CDI specs looked at again, every tick
        valid_for = (devices.signature(),
                     self._claim_source.generation if has_claims else None)
        if memo is not None and memo.listing == listing and memo.valid_for == valid_for:
            return memo.answer
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
        self._resolved = _ResolutionMemo(listing, has_claims, valid_for, answer) \
            if not unresolved else None
        return answer

    # ------------------------------------------------------------ snapshot parts


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



def _gpu_users(mappings: Mapping[str, Mapping[GpuKey, set[str]]]) -> dict[str, set[str]]:
    """GPU UUID -> the containers mapped to it so far this tick."""
    users: dict[str, set[str]] = {}
    for user, keys in mappings.items():
        for uuid, _ in keys:
            users.setdefault(uuid, set()).add(user)
    return users


def _sole_user(owner: tuple[str, str, str], key: GpuKey,
               holders: Mapping[str, set[tuple[str, str, str]]], users: Mapping[str, set[str]],
               containers: Mapping[str, ContainerIdentity],
               names: dict[str, ContainerNames]) -> str | None:
    """The container an allocation joins without runtime names: the GPU's one user, when the
    allocation's owner is its one holder; a container so joined is named by the allocation."""
    candidates = users.get(key[0], set())
    if len(holders.get(key[0], ())) != 1 or len(candidates) != 1:
        return None
    cid = next(iter(candidates))
    identity = containers.get(cid)
    if cid not in names and identity is not None:
        names[cid] = ContainerNames(pod_name=owner[1], pod_namespace=owner[0],
                                    pod_uid=identity.pod_uid, container_name=owner[2])
    return cid


def claim_order(claim: ClaimDevice) -> tuple[str, str, str]:
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
