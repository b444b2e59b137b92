"""Which container holds which GPU this tick, and what each is called.

The mapping sources (``MappingSource``), in order, each record what they learn on the tick's
``TickMapping``, with a reason: ``mapping_processes`` (each GPU process through
``/proc/<pid>/cgroup``: what makes cgroup v2 and privileged containers work; it also enters
tenants outside containers), ``mapping_devices`` (cgroup v1 ``devices.list`` entries of one
GPU node each) and ``mapping_pod_resources`` (the kubelet's allocations, joined to containers
by name). Names come from the name sources in order of trust; a container nothing names is
known by its cgroup ID only (never a guessed name). A new source is a module with a ``map``
and one line in ``engine.containers``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple, Protocol, Sequence

from gpustats.engine.ledger import Holdings
from gpustats.model.containers import (
    REASON_NVML_PROCESS, CgroupRef, ContainerIdentity, ContainerNames, ContainerUsage,
    PodDeviceAllocation,
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


class ProcessUser(NamedTuple):
    """A GPU process's command and user, as its ``/proc`` entry and the host's passwd say."""

    comm: str | None
    uid: int | None
    user: str | None


class TenantOwner(NamedTuple):
    """Whose a tenant is: its UID and the UID's name in the host's passwd (``None``: not
    named there)."""

    uid: int
    user: str | None


class NamesSource(Protocol):
    def names(self, container_ids: Iterable[str]) -> dict[str, ContainerNames]: ...


@dataclass
class HeldClaims:
    """This tick's DRA claims per container: on which GPU key, and those left unresolved; and
    the device-plugin replicas (``<uuid>::N``) it holds of each GPU key."""

    by_key: dict[str, dict[GpuKey, ClaimDevice]] = field(default_factory=dict)
    unresolved: dict[str, list[UnresolvedClaim]] = field(default_factory=dict)
    replicas: dict[str, dict[GpuKey, set[int]]] = field(default_factory=dict)


class MappedTick(NamedTuple):
    """One tick's containers and pods and what each holds, between ``map`` and ``build``."""

    containers: dict[str, ContainerIdentity]
    pods: dict[str, CgroupRef]
    names: dict[str, ContainerNames]
    mappings: dict[str, dict[GpuKey, set[str]]]
    devices: GpuIndex
    pid_to_container: dict[tuple[str, int], str]
    claims: HeldClaims
    shown: list          # (container ID, identity, names, pod UID), sandboxes left out
    holdings: Holdings
    process_users: dict[tuple[str, int], ProcessUser]    # (GPU UUID, PID) -> its user
    tenant_users: dict[str, TenantOwner]  # a tenant's key (or container ID) -> its owner


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
    def of(cls, readings: tuple[DeviceReading, ...]) -> GpuIndex:
        by_minor, by_node, by_uuid, by_pci, by_card = {}, {}, {}, {}, {}
        mig: dict[str, GpuKey] = {}
        profiles: dict[GpuKey, str | None] = {}
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
        if ref.kind == "pci":
            uuid = self.by_pci.get(ref.uuid)
        elif ref.kind == "card":
            uuid = self.by_card.get(ref.uuid)
        else:
            uuid = ref.uuid
        return (uuid, None) if uuid in self.by_uuid else None


class MappingSource(Protocol):
    """One way of learning who holds which GPU: each tick it records, on the tick's mapping,
    the GPU keys each container (or other tenant) holds and why (``TickMapping.hold``). It
    keeps its own memo between ticks. Sources run in order; one that enters containers (the
    process source) runs before any that reads the tick's names."""

    def map(self, tick: TickMapping) -> None: ...


@dataclass
class TickMapping:
    """One tick's mapping as the sources build it: the GPUs, the containers (a source may
    enter a tenant it finds), what each holds and why, and what the sources learn beside."""

    readings: tuple[DeviceReading, ...]
    starts: Mapping[tuple[str, int], int | None]
    devices: GpuIndex
    containers: dict[str, ContainerIdentity]
    name_sources: Sequence[NamesSource] = ()
    mappings: dict[str, dict[GpuKey, set[str]]] = field(default_factory=dict)
    pid_to_container: dict[tuple[str, int], str] = field(default_factory=dict)
    process_users: dict[tuple[str, int], ProcessUser] = field(default_factory=dict)
    tenant_users: dict[str, TenantOwner] = field(default_factory=dict)
    claims: HeldClaims = field(default_factory=HeldClaims)
    _names: dict[str, ContainerNames] | None = None

    def hold(self, cid: str, key: GpuKey, reason: str) -> None:
        """Container (or tenant) ``cid`` holds GPU key ``key``, as ``reason`` says."""
        self.mappings.setdefault(cid, {}).setdefault(key, set()).add(reason)

    @property
    def names(self) -> dict[str, ContainerNames]:
        """The containers' names, asked of the name sources once, when first needed; each
        source in trust order names what those before it left without a name."""
        if self._names is None:
            self._names = _names(self.containers, self.name_sources)
        return self._names


class GpuMapper:
    """Maps this tick's containers to GPUs with its sources, in order, and names them."""

    def __init__(self, cgroups: CgroupSource, sources: Sequence[MappingSource], *,
                 names: Sequence[NamesSource] = ()):
        self._cgroups = cgroups
        self._sources = tuple(sources)
        # Name sources in order of trust: the kubelet's log layout, then the runtime's labels
        # (pod-resources names what it joins itself).
        self._name_sources = tuple(names)
        # The last tick's owners of counters, and the containers, pods and names they came from.
        self._owners: tuple[dict, dict, dict, tuple[tuple[str, str], ...]] | None = None

    def map(self, readings: tuple[DeviceReading, ...],
            starts: Mapping[tuple[str, int], int | None]) -> MappedTick:
        """Who holds which GPU this tick (what the energy ledger bills by)."""
        discovery = self._cgroups.discover()
        pods: dict[str, CgroupRef] = dict(discovery.pods)
        tick = TickMapping(readings, starts, GpuIndex.of(readings), dict(discovery.containers),
                           self._name_sources)
        for source in self._sources:
            source.map(tick)
        containers, names, mappings = tick.containers, tick.names, tick.mappings
        _fold_parents_into_instances(mappings)
        # (container ID, identity, names, pod UID), sandboxes left out: a container a source
        # calls its pod's sandbox, unless it holds a GPU (never dropped, whatever its names).
        shown = []
        held: dict[ContainerKey, str | None] = {}
        by_process_only: set[ContainerKey] = set()
        gpu_users = set(tick.pid_to_container.values())
        for cid, identity in sorted(containers.items()):
            n = names.get(cid)
            if n is None or not n.is_sandbox or mappings.get(cid) or cid in gpu_users:
                uid = _pod_uid(identity, n)
                shown.append((cid, identity, n, uid))
                for (uuid, gi), reasons in mappings.get(cid, {}).items():
                    key = ContainerKey(cid, uuid, gi)
                    held[key] = uid
                    if reasons == {REASON_NVML_PROCESS}:
                        by_process_only.add(key)
        holdings = Holdings(tick.pid_to_container, held,
                            self._owners_of(containers, pods, names), frozenset(by_process_only))
        return MappedTick(containers, pods, names, mappings, tick.devices,
                          tick.pid_to_container, tick.claims, shown, holdings,
                          tick.process_users, tick.tenant_users)

    def _owners_of(self, containers: dict[str, ContainerIdentity], pods: dict[str, CgroupRef],
                   names: dict[str, ContainerNames]) -> tuple[tuple[str, str], ...]:
        """``_owners``, the same as last tick's while the containers, pods and names are."""
        last = self._owners
        if last is None or last[0] != containers or last[1] != pods or last[2] != names:
            last = self._owners = (dict(containers), dict(pods), dict(names),
                                   tuple(_owners(containers, pods, names)))
        return last[3]


def _names(containers: Mapping[str, ContainerIdentity],
           sources: Sequence[NamesSource]) -> dict[str, ContainerNames]:
    names: dict[str, ContainerNames] = {}
    for source in sources:
        wanted = {cid: identity for cid, identity in containers.items()
                  if identity.tenant is None
                  and (cid not in names or names[cid].container_name is None)}
        if not wanted:
            break
        for cid, found in source.names(wanted).items():
            if cid in wanted and (cid not in names or found.container_name is not None):
                names[cid] = found
    return names


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
