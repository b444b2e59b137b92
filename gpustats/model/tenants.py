"""Tenants: who a GPU process is billed to, as its cgroup (or, failing that, the process) says.

Every GPU process has exactly one tenant, of one kind:

- ``pod``: a container of a Kubernetes pod;
- ``container``: a container outside Kubernetes (Docker, Podman, containerd, CRI-O where their
  runtime puts them; a user's rootless container, keyed with the user; an LXC container);
- ``machine``: a VM or container registered with systemd-machined (``machine.slice``);
- ``service``: a systemd service or scope (its unit);
- ``session``: a user's login sessions and user manager (their UID);
- ``job``: a Slurm job step (job ID and step; the UID where known);
- ``cgroup``: a cgroup of no layout above, named by its path: two cgroups are never one tenant;
- ``process``: none of these (the root cgroup): command and UID.

A tenant's ``key`` is its identity as a counter owner: a string, stable across ticks and
restarts, that no tenant of another kind can have. Node containers (in a pod or not) keep their
64-hex container ID as key, so their counters continue; the other tenants are prefixed
(``container:<uid>:<id>`` for a user's container, ``lxc:<name>``, ``machine:<name>``,
``cgroup:<path>``, or their kind).
"""

from __future__ import annotations

from dataclasses import replace

from gpustats.model.record import record

KIND_POD = "pod"
KIND_CONTAINER = "container"
KIND_SERVICE = "service"
KIND_SESSION = "session"
KIND_JOB = "job"
KIND_PROCESS = "process"
KIND_MACHINE = "machine"
KIND_CGROUP = "cgroup"
TENANT_KINDS = (KIND_POD, KIND_CONTAINER, KIND_SERVICE, KIND_SESSION, KIND_JOB, KIND_PROCESS,
                KIND_MACHINE, KIND_CGROUP)


@record
class TenantRef:
    """One tenant: its kind, its key, and the identity fields its kind has (others ``None``)."""

    kind: str                         # one of TENANT_KINDS
    key: str                          # the counter owner (see the module docstring)
    container_id: str | None = None   # pod, container: the 64-hex runtime ID
    pod_uid: str | None = None        # pod
    unit: str | None = None           # service: the unit name, systemd's escapes kept
    uid: int | None = None            # session; job and process where known
    job_id: str | None = None         # job: digits, or a Slurm 26.05 SLUID (``s`` + 13)
    step: str | None = None           # job: ``0``, ``batch``, ``extern``, ``0+1``, ...
    comm: str | None = None           # process: its command (``/proc/<pid>/comm``)
    name: str | None = None           # an LXC container's or machine's name; a cgroup's path
    # The tenant's own cgroup (the container's, the unit's, the session scope's or user
    # manager's, the step's), relative to the hierarchy root; None for a process.
    cgroup_path: str | None = None


def pod_tenant(container_id: str, pod_uid: str | None,
               cgroup_path: str | None = None) -> TenantRef:
    return TenantRef(KIND_POD, container_id, container_id=container_id, pod_uid=pod_uid,
                     cgroup_path=cgroup_path)


def container_tenant(container_id: str, cgroup_path: str | None = None) -> TenantRef:
    return TenantRef(KIND_CONTAINER, container_id, container_id=container_id,
                     cgroup_path=cgroup_path)


def user_container_tenant(uid: int, container_id: str,
                          cgroup_path: str | None = None) -> TenantRef:
    """A container in a user's delegated subtree (rootless Docker or Podman, or any cgroup
    named like one): the user's, keyed with the UID, never a node container's key. The ID is
    a name the user chose (its ``name``), never taken as a node container's
    (``container_id`` None: no runtime's name or label is looked up by it)."""
    return TenantRef(KIND_CONTAINER, f"container:{uid}:{container_id}", name=container_id,
                     uid=uid, cgroup_path=cgroup_path)


def lxc_tenant(name: str, cgroup_path: str | None = None) -> TenantRef:
    """An LXC (or LXD) container, by its name (``lxc.payload.<name>``)."""
    return TenantRef(KIND_CONTAINER, f"lxc:{name}", name=name, cgroup_path=cgroup_path)


def machine_tenant(name: str, cgroup_path: str | None = None) -> TenantRef:
    """A machine registered with systemd-machined (``machine.slice/machine-<name>.scope``)."""
    return TenantRef(KIND_MACHINE, f"machine:{name}", name=name, cgroup_path=cgroup_path)


def cgroup_tenant(path: str) -> TenantRef:
    """A cgroup of no known layout, named by its path (relative to the hierarchy's root)."""
    return TenantRef(KIND_CGROUP, f"cgroup:{path}", name=path, cgroup_path=path)


def service_tenant(unit: str, cgroup_path: str | None = None) -> TenantRef:
    return TenantRef(KIND_SERVICE, f"service:{unit}", unit=unit, cgroup_path=cgroup_path)


def session_tenant(uid: int, cgroup_path: str | None = None) -> TenantRef:
    return TenantRef(KIND_SESSION, f"session:{uid}", uid=uid, cgroup_path=cgroup_path)


def job_tenant(job_id: str, step: str | None, uid: int | None = None,
               cgroup_path: str | None = None) -> TenantRef:
    """A Slurm job step; ``step`` None where the path stops at the job (key ``job:<id>``)."""
    key = f"job:{job_id}" if step is None else f"job:{job_id}:{step}"
    return TenantRef(KIND_JOB, key, uid=uid, job_id=job_id, step=step,
                     cgroup_path=cgroup_path)


def process_tenant(uid: int | None, comm: str | None) -> TenantRef:
    """A process in no other tenant; processes of one user with one command share it.
    An unknown UID or command is empty in the key (``process::python3``)."""
    key = f"process:{'' if uid is None else uid}:{'' if comm is None else comm}"
    return TenantRef(KIND_PROCESS, key, uid=uid, comm=comm)


def with_uid(tenant: TenantRef, uid: int | None) -> TenantRef:
    """``tenant`` with the process's UID where its path gave none (a Slurm v2 step); the key
    is unchanged."""
    if tenant.uid is not None or uid is None or tenant.kind != KIND_JOB:
        return tenant
    return replace(tenant, uid=uid)


def display_name(tenant: TenantRef, user_name: str | None = None,
                 container_name: str | None = None) -> str | None:
    """How a tenant is shown: the container's name (else its ID), the unit, the user's name
    (else the UID), ``job <id>``, the command. ``None`` when nothing names it (a process whose
    command could not be read)."""
    kind = tenant.kind
    if kind in (KIND_POD, KIND_CONTAINER):
        if tenant.uid is not None and tenant.name is not None:     # a user's container
            return f"{tenant.name} ({user_name or tenant.uid})"
        return container_name or tenant.name or tenant.container_id
    if kind == KIND_SERVICE:
        return tenant.unit
    if kind == KIND_SESSION:
        return user_name or (str(tenant.uid) if tenant.uid is not None else None)
    if kind == KIND_JOB:
        return f"job {tenant.job_id}" if tenant.job_id is not None else None
    if kind in (KIND_MACHINE, KIND_CGROUP):
        return tenant.name
    return tenant.comm


def tenant_from_key(key: str) -> TenantRef | None:
    """The tenant a counter owner's key names, for a tenant not seen since a restart: a
    service, session, job or process (a container's key, its ID alone, names no kind)."""
    kind, sep, rest = key.partition(":")
    if not sep:
        return None
    if kind == KIND_SERVICE and rest:
        return service_tenant(rest)
    if kind == KIND_SESSION and rest.isdigit():
        return session_tenant(int(rest))
    if kind == KIND_JOB and rest:
        job_id, _, step = rest.partition(":")
        return job_tenant(job_id, step or None)
    if kind == KIND_PROCESS:
        uid, sep, comm = rest.partition(":")
        if sep:
            return process_tenant(int(uid) if uid.isdigit() else None, comm or None)
    return _other_tenant_from_key(kind, rest)


def _other_tenant_from_key(prefix: str, rest: str) -> TenantRef | None:
    """``tenant_from_key`` for the keys prefixed other than by their kind."""
    if prefix == KIND_CONTAINER:
        uid, sep, container_id = rest.partition(":")
        if sep and uid.isdigit() and container_id:
            return user_container_tenant(int(uid), container_id)
    elif prefix == "lxc" and rest:
        return lxc_tenant(rest)
    elif prefix == KIND_MACHINE and rest:
        return machine_tenant(rest)
    elif prefix == KIND_CGROUP and rest:
        return cgroup_tenant(rest)
    return None
