"""Pure parsing of cgroup paths into the tenants that are no node container: systemd
services, users (sessions, user managers and the containers in them), Slurm jobs, LXC
containers, machined's machines, and any other cgroup.

Pods and node containers are ``cgroup_paths``' (the caller tries it first), by where they sit.
A subtree belongs to whoever owns it, whatever the names in it: a user's delegated
``user@<uid>.service`` (and anything in ``user-<uid>.slice``) to that user, where a cgroup
named like a container (``docker-<id>.scope``, ``libpod-<id>.scope``, a kubelet's
``cri-containerd-<id>.scope``) is that user's container (``user_container_tenant``, keyed
with the UID); a service's own subtree to the service.

Layouts (cgroup v2 paths, or a v1 hierarchy's):

- **service**: slices, then the first ``*.service`` or ``*.scope`` unit:
  ``system.slice/sshd.service``, ``system.slice/a.slice/a-b.slice/x.service``,
  a unit in the root slice (``init.scope``, systemd itself).
  Cgroups a service delegates below its own belong to it. Names keep systemd's escapes
  (``foo\\x2dbar.service``); only systemd's unit-name characters are taken, 255 at most.
- **session**: ``user.slice/user-<uid>.slice/...``: a login's ``session-<n>.scope``, the user
  manager ``user@<uid>.service`` and all its units (user@.service(5)), by UID.
- **container** (LXC, LXD): ``lxc.payload.<name>`` (LXC 4+), ``lxc/<name>`` (older): by name.
- **machine**: ``machine.slice/<unit>`` (systemd-machined: nspawn, libvirt's
  ``machine-qemu\\x2d1\\x2dvm.scope``), by the machine's name.
- **cgroup** (``any_layout_tenant``): any other non-root cgroup, by its path.
- **job**: Slurm. v1: ``slurm[_<node>]/uid_<uid>/job_<id>/step_<step>/task_<n>`` (each
  controller's hierarchy; ``src/plugins/cgroup/v1/xcgroup.c``). v2: a slice, then
  ``[<node>_]slurmstepd.scope/<job>/step_<step>/{user/task_<n>,user/task_special,slurm}``
  (``src/plugins/cgroup/v2/cgroup_v2.c``), where ``<job>`` is ``job_<id>`` or, from Slurm
  26.05, the SLUID: ``s`` and 13 Crockford base32 digits (``src/common/sluid.h``). Steps are a
  number, ``batch``, ``extern``, ``interactive`` or ``TBD``, ``+<comp>`` for a heterogeneous
  component (``src/common/log.c``).

Paths are untrusted: longer than ``MAX_PATH_CHARS``, a component longer than a file name may
be, or ``..`` after the start, and nothing is claimed. Leading ``..`` components are skipped:
the kernel shows a cgroup outside the reader's cgroup namespace that way (cgroup_namespaces(7)).
"""

from __future__ import annotations

import re

from gpustats.model.tenants import (
    TenantRef, cgroup_tenant, job_tenant, lxc_tenant, machine_tenant, service_tenant,
    session_tenant, user_container_tenant,
)
from gpustats.sources.cgroup_paths import parse_cgroup_path

MAX_PATH_CHARS = 4096           # PATH_MAX
MAX_COMPONENT_CHARS = 255       # NAME_MAX; also systemd's longest unit name (UNIT_NAME_MAX - 1)
MAX_UID = 2**32 - 2             # (uid_t) -1 is no user

# systemd's unit-name characters (unit-name.c VALID_CHARS_WITH_AT): escapes are \xNN.
_UNIT = re.compile(r"[A-Za-z0-9:_.\\@-]+\.(?:service|scope)")
_SLICE = re.compile(r"[A-Za-z0-9:_.\\-]+\.slice")
# Any runtime's container component: 64 hex, bare or after a prefix (docker-, libpod-,
# libpod-payload-, libpod-conmon-, crio-conmon-, cri-containerd-, ...).
_CONTAINERISH = re.compile(r"(?:[a-z][a-z0-9_-]*-)?(?P<id>[0-9a-f]{64})(?:\.scope)?")
_LXC = re.compile(r"lxc\.payload\.(.+)")
_MACHINE_SCOPE = re.compile(r"machine-(.+)\.scope")
_USER_SLICE = re.compile(r"user-([0-9]+)\.slice")
_USER_MANAGER = re.compile(r"user@([0-9]{1,10})\.service")
_SESSION = re.compile(r"session-[A-Za-z0-9]{1,32}\.scope")
_V1_PREPEND = re.compile(r"slurm(?:_[^/]{1,250})?")
_V1_UID = re.compile(r"uid_([0-9]{1,10})")
_STEPD = re.compile(r"(?:[^/]{1,230}_)?slurmstepd\.scope")
_JOB = re.compile(r"job_([0-9]{1,10})|(s[0-9A-HJKMNP-TV-Z]{13})")
_STEP = re.compile(r"step_((?:[0-9]{1,10}|batch|extern|interactive|TBD)(?:\+[0-9]{1,10})?)")


def _uid(digits: str) -> int | None:
    return int(digits) if len(digits) <= 10 and int(digits) <= MAX_UID else None


def _components(path: str) -> list[str] | None:
    """The path's components without leading ``..``; None for a path no cgroup has."""
    if len(path) > MAX_PATH_CHARS:
        return None
    components = [c for c in path.split("/") if c]
    start = 0
    while start < len(components) and components[start] == "..":
        start += 1
    components = components[start:]
    for component in components:
        if len(component) > MAX_COMPONENT_CHARS or component in (".", ".."):
            return None
    return components


def _joined(components: list[str], end: int) -> str:
    return "/" + "/".join(components[:end])


def _job(components: list[str], start: int, uid: int | None) -> TenantRef | None:
    """The job at ``components[start]`` and its step, if any; None if it is not a job."""
    if start >= len(components):
        return None
    job = _JOB.fullmatch(components[start])
    if job is None:
        return None
    job_id = job.group(1) or job.group(2)
    step = _STEP.fullmatch(components[start + 1]) if start + 1 < len(components) else None
    if step is None:
        return job_tenant(job_id, None, uid, _joined(components, start + 1))
    return job_tenant(job_id, step.group(1), uid, _joined(components, start + 2))


def _slurm_v1(components: list[str]) -> TenantRef | None:
    if len(components) < 3 or not _V1_PREPEND.fullmatch(components[0]):
        return None
    uid = _V1_UID.fullmatch(components[1])
    if uid is None:
        return None
    return _job(components, 2, _uid(uid.group(1)))


def _session(components: list[str], user: re.Match[str]) -> TenantRef | None:
    """``user.slice/user-<uid>.slice/...`` (``user``: the second component's match)."""
    uid = _uid(user.group(1))
    if uid is None:
        return None
    if len(components) > 2:
        third = components[2]
        manager = _USER_MANAGER.fullmatch(third)
        if manager is not None and manager.group(1) != user.group(1):
            return None                      # a user manager in another user's slice
        for position in range(2, len(components)):
            container = _CONTAINERISH.fullmatch(components[position])
            if container is not None:        # rootless, or named like one: the user's
                return user_container_tenant(uid, container.group("id"),
                                             _joined(components, position + 1))
        if manager is not None or _SESSION.fullmatch(third):
            return session_tenant(uid, _joined(components, 3))
    return session_tenant(uid, _joined(components, 2))


def _unit(components: list[str]) -> TenantRef | None:
    """Slices, then a unit: a service (or a Slurm v2 job below ``slurmstepd.scope``)."""
    for position, component in enumerate(components):
        if _SLICE.fullmatch(component):
            continue
        if not _UNIT.fullmatch(component):
            return None
        if _STEPD.fullmatch(component):
            job = _job(components, position + 1, None)
            if job is not None:
                return job
        return service_tenant(component, _joined(components, position + 1))
    return None


def _lxc(components: list[str]) -> TenantRef | None:
    lxc = _LXC.fullmatch(components[0])
    if lxc is not None:
        return lxc_tenant(lxc.group(1), _joined(components, 1))
    if components[0] == "lxc" and len(components) > 1:
        return lxc_tenant(components[1], _joined(components, 2))
    return None


def _machine(components: list[str]) -> TenantRef | None:
    if components[0] != "machine.slice" or len(components) < 2 \
            or not _UNIT.fullmatch(components[1]):
        return None
    scope = _MACHINE_SCOPE.fullmatch(components[1])
    return machine_tenant(scope.group(1) if scope else components[1], _joined(components, 2))


def parse_tenant_path(path: str) -> TenantRef | None:
    """The service, user (session or container), job, LXC container or machine a cgroup path
    (relative to a hierarchy root) names.

    ``None``: the root cgroup, a node container's or pod's path, or a layout none of these
    has (``any_layout_tenant``).
    """
    components = _components(path)
    if not components or parse_cgroup_path(path) is not None:
        return None
    job = _slurm_v1(components)
    if job is not None:
        return job
    user = _USER_SLICE.fullmatch(components[1]) \
        if components[0] == "user.slice" and len(components) > 1 else None
    if user is not None:
        return _session(components, user)
    return _lxc(components) or _machine(components) or _unit(components)


def any_layout_tenant(path: str) -> TenantRef | None:
    """A non-root cgroup no layout names, as a tenant of its own (kind ``cgroup``, its path);
    ``None`` for the root cgroup, a node container's or pod's, or a path no cgroup has."""
    components = _components(path)
    if not components or parse_cgroup_path(path) is not None:
        return None
    return cgroup_tenant(_joined(components, len(components)))
