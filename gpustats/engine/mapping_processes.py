"""Mapping source: each GPU process (NVML's list, or the DRM clients in fdinfo) through
``/proc/<pid>/cgroup`` to its container or other tenant. What makes cgroup v2 and privileged
containers work. A tenant outside containers (a service, a session, a job, a process) is
entered among the tick's containers under its key, so the ledger bills it as one.
"""

from __future__ import annotations

from typing import Protocol

from gpustats.engine.gpu_mapping import ProcessUser, TenantOwner, TickMapping
from gpustats.model.containers import REASON_NVML_PROCESS, ContainerIdentity
from gpustats.sources.procs import ProcessOwner

# Every this many ticks, every process's owner and user are looked up afresh (its command,
# and its user's name, may change); its cgroup is read every tick.
RECHECK_TICKS = 12


class ProcSource(Protocol):
    def cgroup_bytes(self, pid: int) -> bytes | None: ...        # None: gone

    def owner_of(self, pid: int) -> ProcessOwner | None: ...      # None: gone


class UserSource(Protocol):
    def name(self, uid: int) -> str | None: ...


Found = tuple[ProcessOwner, ProcessUser]


class ProcessMapping:
    """Each GPU process's owner, from its ``/proc/<pid>/cgroup`` read every tick (one read
    each: a process moved to another cgroup is billed to its new tenant from the next tick).
    Memo: (PID, start time) -> the cgroup file last read and the owner and user it gave, so
    a process whose cgroup is unchanged is not looked up again, and one that ended since
    last tick (its ``/proc`` entry gone, its start time with it) is billed to the owner it
    had."""

    def __init__(self, procs: ProcSource, users: UserSource | None = None):
        self._procs = procs
        self._users = users
        self._pid_owner: dict[tuple[int, int | None], tuple[bytes, Found]] = {}
        self._last_by_pid: dict[int, tuple[bytes, Found]] = {}      # the same, by PID
        self._ticks = 0

    def map(self, tick: TickMapping) -> None:
        self._ticks += 1
        if self._ticks % RECHECK_TICKS == 0:
            self._pid_owner = {}
        owner_of_pid: dict[tuple[int, int | None], tuple[bytes, Found] | None] = {}
        previous = self._pid_owner
        owners: dict[str, set[TenantOwner]] = {}
        for reading in tick.readings:
            uuid = reading.identity.uuid
            for p in reading.processes:
                # A process is its PID and start time: a reused PID is looked up afresh.
                process = (p.pid, tick.starts.get((uuid, p.pid)))
                if process not in owner_of_pid:
                    last = previous.get(process)
                    if last is None and process[1] is None:    # its stat gone with it
                        last = self._last_by_pid.get(p.pid)
                    owner_of_pid[process] = self._current(p.pid, last)
                found = owner_of_pid[process]
                if found is None:
                    continue      # gone: its energy stays unattributed
                owner, user = found[1]
                tick.process_users[(uuid, p.pid)] = user
                cid = _enter_owner(owner, tick.containers)
                found_owner = _owner_of(owner, user)
                if found_owner is not None:
                    owners.setdefault(cid, set()).add(found_owner)
                tick.hold(cid, (uuid, p.gpu_instance_id), REASON_NVML_PROCESS)
                tick.pid_to_container[(uuid, p.pid)] = cid
        self._pid_owner = {k: v for k, v in owner_of_pid.items() if v is not None}
        self._last_by_pid = {pid: v for (pid, _), v in self._pid_owner.items()}
        for cid, found_owners in owners.items():
            if len({o.uid for o in found_owners}) == 1:   # several users: no one owner
                tick.tenant_users[cid] = max(found_owners, key=lambda o: o.user is not None)

    def _current(self, pid: int, last: tuple[bytes, Found] | None) -> tuple[bytes, Found] | None:
        """The process's cgroup file and owner now: the cgroup read each tick, the owner looked
        up only where it differs from last tick's. A process that ended since (listed once
        more for its last work: NVML's samples or accounting records) keeps the owner it had
        last tick; None: gone, and never seen."""
        data = self._procs.cgroup_bytes(pid)
        if data is None:
            return last
        if last is not None and last[0] == data:
            return last
        found = self._owner(pid)
        return (data, found) if found is not None else None

    def _owner(self, pid: int) -> tuple[ProcessOwner, ProcessUser] | None:
        """A process's owner and user as its /proc entry says now (None: gone)."""
        owner = self._procs.owner_of(pid)
        if owner is None:
            return None
        comm, uid = owner.identity.comm, owner.identity.uid
        user = self._users.name(uid) if self._users is not None and uid is not None else None
        return owner, ProcessUser(comm, uid, user)


def _owner_of(owner: ProcessOwner, user: ProcessUser) -> TenantOwner | None:
    """Whose the tenant is, as this process says: the UID the tenant's cgroup names (a
    session's, a job's), else the process's real UID (a service's, a container's); the user's
    name where passwd has that UID. None for a container of a pod (billed by its namespace),
    or where neither is known."""
    if owner.container is not None and owner.container.info.pod_uid is not None:
        return None
    tenant_uid = owner.tenant.uid if owner.tenant is not None else None
    if tenant_uid is not None:
        return TenantOwner(tenant_uid, user.user if user.uid == tenant_uid else None)
    if user.uid is None:
        return None
    return TenantOwner(user.uid, user.user)


def _enter_owner(owner: ProcessOwner, containers: dict[str, ContainerIdentity]) -> str:
    """The owner's container ID (a tenant's key), entered among this tick's containers where
    discovery did not find it."""
    if owner.container is not None:
        info = owner.container.info
        cid = info.container_id
        assert cid is not None               # a process's container is named by its ID
        if cid not in containers:
            containers[cid] = ContainerIdentity(
                container_id=cid, runtime=info.runtime, pod_uid=info.pod_uid,
                qos_class=info.qos_class, cgroup=owner.container.cgroup)
        return cid
    assert owner.tenant is not None          # no container: the tenant it is billed to
    cid = owner.tenant.key
    if cid not in containers:
        containers[cid] = ContainerIdentity(container_id=cid, cgroup=owner.cgroup,
                                            tenant=owner.tenant)
    return cid
