"""Tenants as the views show them: every pod, and every entry outside pods (a container, a
service, a user's sessions, a Slurm job step, a process), each with its kind, the name it is
shown by and the identity its kind has, and its figures on each physical GPU it holds.

The names here are raw (as the host gave them); each view shows them by the one rule of
``export.text``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from gpustats.model.snapshot import ContainerAccelerator, ContainerStats, PodStats, Snapshot
from gpustats.model.tenants import KIND_CONTAINER, KIND_POD, KIND_PROCESS, display_name


@dataclass(frozen=True)
class TenantIdentity:
    """Who is billed: the kind, the name it is shown by, and the identity fields of its kind
    (``None`` where its kind has none, or where it is unknown)."""

    kind: str                       # one of model.tenants.TENANT_KINDS
    name: str                       # namespace/pod (a pod's UID where unnamed), the container's
    #                                 name (else its ID), the unit, the user's name (else the
    #                                 UID), ``job <id>``, the command (else the tenant's key)
    namespace: str | None = None    # pod
    pod: str | None = None          # pod
    pod_uid: str | None = None      # pod
    container_id: str | None = None  # container
    unit: str | None = None         # service
    uid: int | None = None          # whose it is: session's, job's, process's; a container's
    #                                 or service's processes' (model.snapshot.ContainerStats)
    user: str | None = None         # the UID's name in the host's passwd
    job_id: str | None = None       # job
    step: str | None = None         # job
    command: str | None = None      # process


def pod_identity(pod: PodStats) -> TenantIdentity:
    """A pod as a tenant: ``namespace/name``, its UID while no source names it."""
    named = bool(pod.name and pod.namespace)
    return TenantIdentity(KIND_POD, f"{pod.namespace}/{pod.name}" if named else pod.uid,
                          namespace=pod.namespace, pod=pod.name, pod_uid=pod.uid)


def entry_identity(entry: ContainerStats) -> TenantIdentity:
    """An entry outside pods as a tenant (a container where it has no tenant of another kind)."""
    tenant = entry.tenant
    if tenant is None:
        return TenantIdentity(KIND_CONTAINER, entry.name or entry.container_id,
                              container_id=entry.container_id, uid=entry.uid, user=entry.user)
    name = display_name(tenant, entry.user, entry.name) or entry.container_id
    return TenantIdentity(
        tenant.kind, name, container_id=tenant.container_id, unit=tenant.unit,
        uid=tenant.uid if tenant.uid is not None else entry.uid,
        user=entry.user, job_id=tenant.job_id, step=tenant.step,
        command=tenant.comm if tenant.kind == KIND_PROCESS else None)


def is_container(entry: ContainerStats) -> bool:
    """A node container (of a pod or not, named by its runtime's ID), not a tenant of
    another kind nor a container that is one (a user's, an LXC container: ``tenants[]``)."""
    return entry.tenant is None


@dataclass(frozen=True)
class TenantGpu:
    """One tenant's figures on one physical GPU: the sum over what it holds of the GPU (the
    whole GPU, or its MIG instances); a figure none of those has is ``None``."""

    identity: TenantIdentity
    device_uuid: str
    attributed_power_watts: float | None
    attributed_energy_joules: float | None
    idle_share_power_watts: float | None
    idle_share_energy_joules: float | None


def present_sum(values: Iterable[float | None]) -> float | None:
    """The sum of the values that are present; ``None`` when none is."""
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _entry_gpus(entry: ContainerStats) -> Iterator[TenantGpu]:
    by_gpu: dict[str, list[ContainerAccelerator]] = {}
    for acc in entry.accelerators:
        by_gpu.setdefault(acc.device_uuid, []).append(acc)
    identity = entry_identity(entry)
    for uuid, held in by_gpu.items():
        yield TenantGpu(identity, uuid,
                        present_sum(a.attributed_power_watts for a in held),
                        present_sum(a.attributed_energy_joules for a in held),
                        present_sum(a.idle_share_power_watts for a in held),
                        present_sum(a.idle_share_energy_joules for a in held))


def tenant_gpus(snapshot: Snapshot) -> Iterator[TenantGpu]:
    """Every tenant whose counters are served, once per GPU: the pods (ended and superseded
    ones included) from their own accelerators, then the entries outside pods (ended ones
    included). Per GPU they add up to what the containers are billed: with the unattributed
    energy, to the active energy."""
    for pod in snapshot.pods:
        identity = pod_identity(pod)
        for acc in pod.accelerators:
            yield TenantGpu(identity, acc.device_uuid, acc.attributed_power_watts,
                            acc.attributed_energy_joules, acc.idle_share_power_watts,
                            acc.idle_share_energy_joules)
    for entry in snapshot.containers:
        if entry.pod_uid is None:
            yield from _entry_gpus(entry)
