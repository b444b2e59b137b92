"""``/proc/<pid>/cgroup`` and ``/proc/<pid>/stat``: which container (or other tenant) a (GPU)
process lives in, and when it started (a PID and its start time name one process; PIDs are
reused); ``comm`` and ``status``: its command and user."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from gpustats.hostfs import HostRoots, Reporter, read_bytes, read_text
from gpustats.kept_files import KeptFiles
from gpustats.model.containers import CgroupRef
from gpustats.model.tenants import KIND_JOB, TenantRef, process_tenant, with_uid
from gpustats.sources.cgroup_paths import CgroupPathInfo, parse_cgroup_path
from gpustats.sources.tenant_paths import any_layout_tenant, parse_tenant_path

COMM_BYTES = 64          # TASK_COMM_LEN is 16; kernel threads' names may be longer (6.x)
_PROC_FILE_BYTES = 65536


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """Controller → path. v1 lines ``N:cpu,cpuacct:/path``; the v2 line ``0::/path`` gives ``""``.

    Named hierarchies (``name=systemd``) are kept under their full name; malformed lines skipped.
    Lines end at ``\n`` only: a path's names are its owner's to choose, and ``str.splitlines``
    would also end a line at U+2028, U+0085 or ``\r`` in one (a forged ``0::`` line after it).
    """
    paths: dict[str, str] = {}
    for line in text.split("\n"):
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].startswith("/"):
            continue
        _, controllers, path = parts
        if controllers == "":
            paths[""] = path
            continue
        for controller in controllers.split(","):
            if controller:
                paths[controller] = path
    return paths


def parse_start_time(stat_text: str) -> int:
    """Field 22 of ``/proc/<pid>/stat``: start time in clock ticks after boot (proc(5)).

    The command name (field 2) may hold spaces and parentheses, so fields are counted after
    its last ``)``. ``ValueError`` on anything else.

    Parsed here rather than taken from psutil: ``Process.create_time()`` is epoch seconds
    (ticks / HZ + the boot time, re-read from <proc>/stat on each call), and counters are
    keyed by the ticks; getting them back needs a second boot-time read, and the kernel's
    boot time follows the wall clock (steps, slewing across a second): each second it moves
    is HZ ticks off the key. Through psutil the 1,000-container tick also took 6.9 % longer
    (bench.paired, README "Host facts and HTTP through their libraries").
    """
    _, sep, rest = stat_text.rpartition(")")
    if not sep:
        raise ValueError("no command name")
    fields = rest.split(None, 20)    # up to field 22, the other ~30 left unsplit
    if len(fields) < 20:
        raise ValueError("too few fields")
    start = int(fields[19])          # fields[0] is field 3 (state), so field 22 is [19]
    if start < 0:
        raise ValueError("negative start time")
    return start


@dataclass(frozen=True)
class ProcessContainer:
    info: CgroupPathInfo
    cgroup: CgroupRef


def container_from_paths(paths: dict[str, str],
                         kubelet_parent: str = "") -> ProcessContainer | None:
    """The node container these cgroup paths name (the v2 path first, then devices, cpuacct,
    memory); ``kubelet_parent`` as ``parse_cgroup_path``'s."""
    for controller in ("", "devices", "cpuacct", "memory", "cpu", "pids", "name=systemd"):
        path = paths.get(controller)
        if path is None:
            continue
        info = parse_cgroup_path(path, kubelet_parent)
        if info is not None and info.container_id is not None:
            ref = []
            for name in ("", "devices", "cpuacct", "memory"):
                other = paths.get(name)
                if other is None:
                    continue
                other_info = parse_cgroup_path(other, kubelet_parent)
                if other_info is not None and other_info.container_id == info.container_id:
                    assert other_info.container_path is not None  # set with container_id
                    ref.append((name, other_info.container_path))
            return ProcessContainer(info, CgroupRef(tuple(sorted(ref))))
    return None


def parse_comm(data: bytes) -> str:
    """``/proc/<pid>/comm``: the command, its newline stripped, at most ``COMM_BYTES`` bytes
    (undecodable bytes replaced)."""
    return data.removesuffix(b"\n")[:COMM_BYTES].decode("utf-8", "replace")


def parse_real_uid(status_text: str) -> int:
    """The real UID: the first field of ``/proc/<pid>/status``'s ``Uid:`` line (proc(5)).
    ``ValueError`` when there is none. Lines end at ``\n`` only (the ``Name:`` line is the
    process's own ``comm``: U+2028 in it must not start a forged ``Uid:`` line)."""
    for line in status_text.split("\n"):
        if line.startswith("Uid:"):
            fields = line[4:].split()
            if fields and fields[0].isascii() and fields[0].isdigit() \
                    and int(fields[0]) < 2**32:
                return int(fields[0])
            break
    raise ValueError("no Uid: line with a UID")


@dataclass(frozen=True)
class ProcessIdentity:
    """A process's command and real UID; either ``None`` when its file could not be read."""

    comm: str | None
    uid: int | None


# Where a process's tenant is looked for, in order (``tenant_from_paths``). A Slurm step is
# looked for in every hierarchy before anything else: on v1 (and hybrid) hosts slurmstepd's
# tasks stay in ``slurmd.service`` in the systemd hierarchy (name=systemd, and the ``0::``
# line of a hybrid host), and only the controllers' hierarchies show the step.
_STEP_ORDER = ("", "freezer", "cpuacct", "memory", "devices", "cpuset", "cpu", "pids")
# Then units and sessions: the v2 path, then systemd's own hierarchy (v1), then the
# controllers (a v1 host without name=systemd).
_TENANT_ORDER = ("", "name=systemd", "cpuacct", "memory", "devices")


def tenant_from_paths(paths: dict[str, str]) -> TenantRef | None:
    """The tenant these cgroup paths (``parse_proc_cgroup``) name (try ``container_from_paths``
    first: node containers win): a Slurm job, else a service, user, LXC container or machine,
    else the first non-root cgroup itself (kind ``cgroup``); ``None`` in the root cgroup."""
    parsed: dict[str, TenantRef | None] = {}

    def tenant(controller: str) -> TenantRef | None:
        if controller not in parsed:
            parsed[controller] = parse_tenant_path(paths[controller])
        return parsed[controller]

    for controller in _STEP_ORDER:
        if controller in paths:
            found = tenant(controller)
            if found is not None and found.kind == KIND_JOB:
                return found
    for controller in _TENANT_ORDER:
        if controller in paths:
            found = tenant(controller)
            if found is not None:
                return found
    for controller in _TENANT_ORDER:
        if controller in paths:
            found = any_layout_tenant(paths[controller])
            if found is not None:
                return found
    return None


def _tenant_of(path: str) -> TenantRef | None:
    return parse_tenant_path(path) or any_layout_tenant(path)


def _start_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return parse_start_time(text)
    except ValueError:
        return None


def tenant_cgroup(paths: dict[str, str], tenant: TenantRef) -> CgroupRef | None:
    """The tenant's own cgroup in each hierarchy whose path names that tenant (the v2 path,
    devices, cpuacct, memory): what its CPU and memory are read from."""
    refs = []
    for controller in ("", "devices", "cpuacct", "memory"):
        path = paths.get(controller)
        found = _tenant_of(path) if path is not None else None
        if found is not None and found.key == tenant.key and found.cgroup_path:
            refs.append((controller, found.cgroup_path))
    return CgroupRef(tuple(refs)) if refs else None


@dataclass(frozen=True)
class ProcessOwner:
    """Who a GPU process is billed to: its node container (a pod's or not); else the tenant
    its cgroups name (``tenant_from_paths``); else itself, by command and user
    (``tenant``)."""

    container: ProcessContainer | None
    tenant: TenantRef | None                 # None with a container
    cgroup: CgroupRef | None                 # the container's or tenant's cgroups
    identity: ProcessIdentity


def owner_from(paths: dict[str, str], identity: ProcessIdentity,
               kubelet_parent: str = "") -> ProcessOwner:
    """A process's owner from its cgroup paths (``parse_proc_cgroup``): node containers
    first."""
    container = container_from_paths(paths, kubelet_parent)
    if container is not None:
        return ProcessOwner(container, None, container.cgroup, identity)
    tenant = tenant_from_paths(paths)
    if tenant is None:
        return ProcessOwner(None, process_tenant(identity.uid, identity.comm), None, identity)
    tenant = with_uid(tenant, identity.uid)
    return ProcessOwner(None, tenant, tenant_cgroup(paths, tenant), identity)


class ProcReader:
    """``kept_files``: how many ``stat`` files of the processes asked for tick after tick may
    stay open between reads (``start_times``)."""

    def __init__(self, roots: HostRoots, report: Reporter | None = None, *,
                 kept_files: int = 0, kubelet_parent: str = ""):
        self._roots = roots
        self._kubelet_parent = kubelet_parent
        self._report = report          # a refused file (FIFO, huge) in a fake or hostile tree
        self._stats = KeptFiles(kept_files)
        self._stat_paths: dict[int, tuple[str, str]] = {}   # last tick's PIDs: name, stat path
        self._cgroup_paths: dict[int, tuple[str, str]] = {}  # the same PIDs': name, cgroup path

    def start_times(self, pids: Iterable[int]) -> dict[int, int | None]:
        """Each PID's start time in clock ticks (``None`` when gone or unreadable), for one
        tick.

        Each ``stat`` file stays open while its PID is asked for tick after tick, and is
        re-read with ``pread``. A kept file names one process, not a PID: once that process
        has ended (and been reaped) it answers ESRCH, also after the PID was reused, and the
        PID's file is then opened afresh. Files of PIDs not asked for are closed.
        """
        out: dict[int, int | None] = {}
        paths, self._stat_paths = self._stat_paths, {}
        for pid in pids:
            if pid in out:
                continue
            named = paths.get(pid)
            if named is None:
                name = str(pid)
                named = (name, self._roots.proc_path(name, "stat"))
            self._stat_paths[pid] = named
            name, path = named
            was_kept = path in self._stats
            text = self._stats.read_text(path, name, self._report, max_bytes=65536)
            if text is None and was_kept:
                text = self._stats.read_text(path, name, self._report, max_bytes=65536)
            out[pid] = _start_or_none(text)
        self._stats.keep_only({name for name, _ in self._stat_paths.values()})
        cgroups = self._cgroup_paths
        self._cgroup_paths = {pid: cgroups[pid] for pid in self._stat_paths if pid in cgroups}
        return out

    def close(self) -> None:
        self._stats.close()

    def cgroup_bytes(self, pid: int) -> bytes | None:
        """``/proc/<pid>/cgroup`` as it reads now, undecoded (``None``: gone): one read each
        tick, to tell a move. Kept open beside the PID's ``stat`` (``start_times``: asked for
        the same PIDs, after it), and opened afresh once the kept file's process has ended,
        as that is."""
        named = self._cgroup_paths.get(pid)
        if named is None:
            name = str(pid)
            named = self._cgroup_paths[pid] = (name, self._roots.proc_path(name, "cgroup"))
        name, path = named
        was_kept = path in self._stats
        data = self._stats.read_bytes(path, name, self._report, max_bytes=_PROC_FILE_BYTES)
        if data is None and was_kept:
            data = self._stats.read_bytes(path, name, self._report, max_bytes=_PROC_FILE_BYTES)
        return data

    def owner_of(self, pid: int) -> ProcessOwner | None:
        """Who the process is billed to (``owner_from``); ``None`` when it is gone."""
        text = read_text(self._roots.proc_path(str(pid), "cgroup"), self._report,
                         max_bytes=_PROC_FILE_BYTES)
        if text is None:
            return None
        return owner_from(parse_proc_cgroup(text),
                          self.identity(pid) or ProcessIdentity(None, None), self._kubelet_parent)

    def identity(self, pid: int) -> ProcessIdentity | None:
        """The process's command (``comm``) and real UID (``status``); ``None`` when gone."""
        data = read_bytes(self._roots.proc_path(str(pid), "comm"), self._report,
                          max_bytes=4096)
        status = read_text(self._roots.proc_path(str(pid), "status"), self._report,
                           max_bytes=_PROC_FILE_BYTES)
        uid = None
        if status is not None:
            try:
                uid = parse_real_uid(status)
            except ValueError:
                pass
        if data is None and status is None:
            return None
        return ProcessIdentity(parse_comm(data) if data is not None else None, uid)
