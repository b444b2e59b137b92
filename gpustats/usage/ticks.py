"""What one snapshot bills, as the usage rows count it (pure).

Each tenant on each GPU (its attributed energy and its idle share, summed over the MIG
instances it holds) and, per GPU, the energy no tenant is billed for: unattributed,
unallocated idle, and unobserved energy where the snapshot has it. Every figure is a cumulative
counter; ``Deltas`` turns two snapshots' counters into the energy of the ticks between them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from gpustats.model.snapshot import ContainerStats, DeviceStats, PodStats, Snapshot
from gpustats.model.tenants import KIND_CONTAINER, KIND_JOB, KIND_POD, KIND_SERVICE

# The buckets of a GPU's energy billed to no tenant, each counted as a tenant of its own kind.
KIND_UNATTRIBUTED = "unattributed"
KIND_UNALLOCATED = "unallocated"
KIND_UNOBSERVED = "unobserved"
BUCKET_KINDS = (KIND_UNATTRIBUTED, KIND_UNALLOCATED, KIND_UNOBSERVED)

# The identity fields a report groups by, in their column order.
IDENTITY_FIELDS = ("kind", "namespace", "pod", "container", "service", "user", "job", "node")


@dataclass(frozen=True)
class UsageTenant:
    """Who a usage row bills: the counter owner's key and the identity fields its kind has."""

    key: str
    kind: str
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    service: str | None = None
    user: str | None = None
    job: str | None = None
    node: str | None = None

    def fields(self) -> tuple[str | None, ...]:
        return (self.kind, self.namespace, self.pod, self.container, self.service, self.user,
                self.job, self.node)


# A tenant's names: container ID, name, user, node, pod name, pod namespace.
NameKey = tuple[str, str | None, str | None, str, str | None, str | None]
# (tenant key, GPU UUID) -> (attributed joules, idle joules), cumulative; None: not known
Totals = dict[tuple[str, str], tuple[float | None, float | None]]


def _user(entry: ContainerStats) -> str | None:
    if entry.user:
        return entry.user
    uid = entry.tenant.uid if entry.tenant is not None else None
    return str(uid) if uid is not None else None


def tenant_of(pod: PodStats | None, entry: ContainerStats, node: str) -> UsageTenant:
    """A container (of a pod or not) or another tenant, as the usage rows name it."""
    tenant = entry.tenant
    kind = entry.kind
    if tenant is None:
        return UsageTenant(entry.container_id, kind,
                           namespace=pod.namespace if pod is not None else None,
                           pod=pod.name if pod is not None else None,
                           container=entry.name or entry.container_id, user=_user(entry),
                           node=node)
    return UsageTenant(
        tenant.key, kind,
        namespace=pod.namespace if pod is not None else None,
        pod=pod.name if pod is not None else None,
        container=(entry.name or entry.container_id) if kind in (KIND_POD, KIND_CONTAINER)
        else None,
        service=tenant.unit if kind == KIND_SERVICE else None, user=_user(entry),
        job=tenant.job_id if kind == KIND_JOB else None, node=node)


def _add(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else a + b


def _buckets(device: DeviceStats) -> Iterator[tuple[str, float | None, float | None]]:
    yield KIND_UNATTRIBUTED, device.unattributed_energy_joules, None
    yield KIND_UNALLOCATED, None, device.unallocated_idle_energy_joules
    # Energy counted while no tick observed the GPU (its downtime), where the snapshot has it.
    unobserved = getattr(device, "unobserved_energy_joules", None)
    if unobserved is not None:
        yield KIND_UNOBSERVED, unobserved, None


class TenantNames:
    """The ``UsageTenant`` of each entry, made again only when what names it changed (the
    same object otherwise, so the writer tells an unchanged tenant by identity). Keeps the
    tenants of the last snapshot only."""

    def __init__(self) -> None:
        self._known: dict[NameKey, UsageTenant] = {}

    def totals(self, snapshot: Snapshot) -> tuple[Totals, dict[str, UsageTenant]]:
        """Every billed counter of the snapshot by (tenant key, GPU), and the tenants by
        key."""
        node = snapshot.node.node_name
        totals: Totals = {}
        tenants: dict[str, UsageTenant] = {}
        known, kept = self._known, {}
        for pod, entry in snapshot.containers_with_pods():
            accelerators = entry.accelerators
            if not accelerators:
                continue
            names = (entry.container_id, entry.name, entry.user, node,
                     None if pod is None else pod.name, None if pod is None else pod.namespace)
            tenant = known.get(names)
            if tenant is None:
                tenant = tenant_of(pod, entry, node)
            kept[names] = tenant
            key = tenant.key
            tenants[key] = tenant
            if len(accelerators) == 1:
                acc = accelerators[0]
                totals[(key, acc.device_uuid)] = (acc.attributed_energy_joules,
                                                  acc.idle_share_energy_joules)
                continue
            for acc in accelerators:             # MIG instances of one GPU: their sum
                pair = (key, acc.device_uuid)
                attributed, idle = totals.get(pair, (None, None))
                totals[pair] = (_add(attributed, acc.attributed_energy_joules),
                                _add(idle, acc.idle_share_energy_joules))
        self._known = kept
        for device in snapshot.devices:
            uuid = device.identity.uuid
            for kind, attributed, idle in _buckets(device):
                if attributed is None and idle is None:
                    continue
                tenants.setdefault(kind, UsageTenant(kind, kind, node=node))
                totals[(kind, uuid)] = (attributed, idle)
        return totals, tenants


def snapshot_totals(snapshot: Snapshot) -> tuple[Totals, dict[str, UsageTenant]]:
    """``TenantNames().totals``: one snapshot on its own."""
    return TenantNames().totals(snapshot)


def _gain(current: float | None, previous: float | None, known: bool) -> float:
    """What a counter gained: its growth; all of it where it started over (it is below what
    it was: expired and back, or the counters reset) or is new since a known baseline."""
    if current is None:
        return 0.0
    if previous is None:
        return current if known else 0.0
    return current - previous if current >= previous else current


Gains = list[tuple[str, str, float, float, float | None, float | None]]
# (tenant key, GPU) -> (attributed, idle, when last changed): what ``commit`` takes on.
Baseline = dict[tuple[str, str], tuple[float | None, float | None, float | None]]


class Deltas:
    """The energy each (tenant, GPU) gained since the last snapshot taken in.

    A counter seen for the first time counts whole, except before any baseline (a new
    database: what the counters held before it is not usage it saw). A counter missing from a
    snapshot (its tenant gone from one tick's view) keeps its last value for ``keep_seconds``,
    so when it is back only its growth counts.
    """

    def __init__(self, baseline: Totals | None, keep_seconds: float):
        self._last: Baseline = {}
        self._known = baseline is not None
        self._keep = keep_seconds
        self._next_prune = float("-inf")
        for key, (attributed, idle) in (baseline or {}).items():
            self._last[key] = (attributed, idle, None)     # kept from the first commit on

    def gains(self, totals: Totals, now: float) -> tuple[Gains, Baseline]:
        """(tenant key, GPU, attributed gain, idle gain, attributed now, idle now) of every
        counter that changed, and the state to ``commit`` once they are written."""
        gains: Gains = []
        append = gains.append
        last = self._last
        updated: Baseline = {}
        known = self._known
        for key, (attributed, idle) in totals.items():
            before = last.get(key)
            if before is None:
                gain_a = _gain(attributed, None, known)     # all of it, past a known baseline
                gain_i = _gain(idle, None, known)
                updated[key] = (attributed, idle, now)
                append((key[0], key[1], gain_a, gain_i, attributed, idle))
                continue
            prev_a, prev_i = before[0], before[1]
            if attributed == prev_a and idle == prev_i:
                updated[key] = (attributed, idle, now)
                continue
            if attributed is not None and prev_a is not None and attributed >= prev_a:
                if idle is None:                    # no idle share: the attributed growth
                    updated[key] = (attributed, prev_i, now)
                    if attributed != prev_a:
                        append((key[0], key[1], attributed - prev_a, 0.0, attributed, prev_i))
                    continue
                if prev_i is not None and idle >= prev_i:      # both known, both grew
                    updated[key] = (attributed, idle, now)
                    append((key[0], key[1], attributed - prev_a, idle - prev_i, attributed,
                            idle))
                    continue
            gain_a = _gain(attributed, prev_a, known)
            gain_i = _gain(idle, prev_i, known)
            now_a = prev_a if attributed is None else attributed
            now_i = prev_i if idle is None else idle
            updated[key] = (now_a, now_i, now)
            if gain_a or gain_i or now_a != prev_a or now_i != prev_i:
                append((key[0], key[1], gain_a, gain_i, now_a, now_i))
        return gains, updated

    def commit(self, updated: Baseline, now: float) -> None:
        """The gains handed out by ``gains`` are written: take its counters as the baseline."""
        last = self._last
        last.update(updated)
        self._known = True
        if now < self._next_prune:
            return
        self._next_prune = now + 60.0
        horizon = now - self._keep
        for key, (attributed, idle, seen) in list(last.items()):
            if seen is None:
                last[key] = (attributed, idle, now)
            elif seen < horizon:
                del last[key]
