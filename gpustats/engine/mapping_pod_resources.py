"""Mapping source: the kubelet's pod-resources ``List``: the devices each container was
allocated (device-plugin devices: NVML UUIDs, ROCm's PCI addresses, Intel's cards; DRA claim
devices resolved through CDI), joined to this tick's containers by their names or, without
names, by a GPU that one container alone uses and one allocation alone holds.

Memo: the last listing's resolution to GPU keys (while the listing, the GPUs and the CDI
devices stay the same) and the last join (while the resolution and every name do).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, NamedTuple, Protocol

from gpustats.engine.gpu_mapping import GpuIndex, GpuKey, TickMapping, claim_order
from gpustats.model.containers import (
    REASON_DRA, REASON_POD_RESOURCES, ContainerIdentity, ContainerNames, PodDeviceAllocation,
)
from gpustats.model.dra import ClaimDevice, UnresolvedClaim


class AllocationSource(Protocol):
    generation: int            # changes whenever ``allocations`` lists anew

    def allocations(self) -> tuple[PodDeviceAllocation, ...] | None: ...


class ClaimSource(Protocol):
    @property
    def generation(self) -> int: ...     # changes whenever the CDI devices do (after begin_tick)

    def begin_tick(self) -> None: ...

    def resolve(self, claim: ClaimDevice, devices) -> tuple[tuple[GpuKey, ...], str | None]: ...


@dataclass
class _Joined:
    """The pod-resources allocations joined to this tick's containers: what each one holds."""

    answer: _Resolved                    # the resolution it was joined from
    names: dict                            # the names it was joined by
    keys: dict[str, list[tuple[GpuKey, str]]] = field(default_factory=dict)   # (key, reason)
    claims: dict[str, dict[GpuKey, ClaimDevice]] = field(default_factory=dict)
    unresolved: dict[str, list[UnresolvedClaim]] = field(default_factory=dict)
    replicas: dict[str, dict[GpuKey, set[int]]] = field(default_factory=dict)
    through_users: bool = False            # a join made through this tick's GPU users

    def hold(self, cid: str, key: GpuKey, claim: ClaimDevice | None,
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


class PodResourcesMapping:
    def __init__(self, pod_resources: AllocationSource, claims: ClaimSource | None = None):
        self._pod_resources = pod_resources
        self._claim_source = claims
        self._resolved: _ResolutionMemo | None = None     # the last listing's resolution
        self._joined: _Joined | None = None       # the last join, while it holds

    def map(self, tick: TickMapping) -> None:
        allocations = self._pod_resources.allocations()
        if not allocations:
            self._joined = None
            return
        answer = self._resolve_allocations(allocations, tick.devices)
        names = tick.names
        joined = self._joined
        if joined is None or joined.answer is not answer or joined.names != names:
            joined = self._join(answer, tick.containers, names, tick.mappings)
            # Kept while the resolution and every name stay the same; a join made through
            # this tick's GPU users (no runtime names) is worked out again every tick.
            self._joined = joined if not joined.through_users else None
        for cid, keys in joined.keys.items():
            for key, reason in keys:
                tick.hold(cid, key, reason)
        tick.claims.by_key = joined.claims
        tick.claims.unresolved = joined.unresolved
        tick.claims.replicas = joined.replicas

    def _join(self, answer: _Resolved, containers, names, mappings) -> _Joined:
        """The resolved allocations joined to containers by the runtime's names (and, without
        them, by a GPU that one container alone uses and one allocation alone holds)."""
        holders, resolved, unresolved = answer
        by_name = {(n.pod_namespace, n.pod_name, n.container_name): cid
                   for cid, n in names.items() if not n.is_sandbox and n.container_name}
        joined = _Joined(answer, dict(names))
        for owner, pending, reason in unresolved:
            if by_name.get(owner) in containers:
                joined.unresolved.setdefault(by_name[owner], []).append(
                    UnresolvedClaim(pending, reason))
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
                             devices: GpuIndex) -> _Resolved:
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
        source = self._claim_source if has_claims else None
        if source is not None:
            source.begin_tick()                  # CDI specs looked at again, every tick
        valid_for = (devices.signature(), source.generation if source is not None else None)
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
            found = devices.resolve(allocation)          # None also without a device
            if found is None or allocation.device is None:
                continue
            holders.setdefault(found[0], set()).add(owner)
            resolved.append((owner, found, None, allocation.device.replica))
        answer = _Resolved(holders, resolved, unresolved)
        self._resolved = _ResolutionMemo(listing, has_claims, valid_for, answer) \
            if not unresolved else None
        return answer


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
