"""Fake host trees for the demo and the tests: a cgroup v2 tree with kubelet pod and container
cgroups, a /proc whose processes live in them, and the kubelet's log layout that names them;
outside Kubernetes, the cgroups of systemd services, users' sessions, Slurm job steps (v1 and
v2) and Docker containers, processes with a command and a user, and a host root with the
``etc/passwd`` and Docker metadata (``config.v2.json``) that name them.

Everything is written below the roots it is given; nothing of the real host is changed. The
node-wide /proc files (CPU, memory, boot id) are copied from the real host where it has them,
so the node's figures stay plausible (the demo copies them again as it runs).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

NODE_PROC_FILES = ("stat", "meminfo", "vmstat")
BOOT_ID = ("sys", "kernel", "random", "boot_id")


def pod_uid(n: int) -> str:
    """A pod UID made from a number (the same number gives the same UID)."""
    return f"{n:08x}-aaaa-4bbb-8ccc-{n:012x}"


def container_id(n: int) -> str:
    """A 64-hex-digit container ID made from a number."""
    return f"{n:064x}"


def container_cgroup(pod: str, container: str) -> str:
    """The systemd-driver cgroup path (relative) of a guaranteed pod's containerd container."""
    return (f"kubepods.slice/kubepods-pod{pod.replace('-', '_')}.slice/"
            f"cri-containerd-{container}.scope")


def start_cgroup_tree(cgroup: Path) -> None:
    cgroup.mkdir(parents=True, exist_ok=True)
    (cgroup / "cgroup.controllers").write_text("cpu memory\n")


def add_container(cgroup: Path, rel: str, usage_usec: int = 5000,
                  memory_bytes: int = 1 << 20) -> None:
    """A container cgroup with its CPU and memory files."""
    d = cgroup / rel
    d.mkdir(parents=True, exist_ok=True)
    (d / "cpu.stat").write_text(f"usage_usec {usage_usec}\n")
    (d / "memory.current").write_text(f"{memory_bytes}\n")
    (d / "memory.stat").write_text(f"anon {memory_bytes}\ninactive_file 0\n")


def add_process(proc: Path, pid: int, rel: str) -> None:
    """``/proc/<pid>/cgroup`` placing the process in the cgroup ``rel``."""
    p = proc / str(pid)
    p.mkdir(parents=True, exist_ok=True)
    (p / "cgroup").write_text(f"0::/{rel}\n")


def service_cgroup(unit: str) -> str:
    """A systemd service's cgroup (relative), in the system slice."""
    return f"system.slice/{unit}"


def session_cgroup(uid: int, session: str) -> str:
    """A user's login session scope (relative), in the user's slice."""
    return f"user.slice/user-{uid}.slice/session-{session}.scope"


def slurm_v1_cgroup(uid: int, job: int, step: str = "0", task: int = 0) -> str:
    """A Slurm task's cgroup in a v1 controller's hierarchy (Slurm's ``cgroup/v1`` plugin)."""
    return f"slurm/uid_{uid}/job_{job}/step_{step}/task_{task}"


def slurm_v2_cgroup(job: int, step: str = "0", task: int = 0) -> str:
    """A Slurm task's cgroup on cgroup v2 (Slurm's ``cgroup/v2`` plugin, below slurmstepd)."""
    return f"system.slice/slurmstepd.scope/job_{job}/step_{step}/user/task_{task}"


def docker_cgroup(container: str, v1: bool = False) -> str:
    """A Docker container's cgroup outside Kubernetes: the systemd driver's scope (v2), or the
    cgroupfs driver's ``docker/<id>`` (v1)."""
    return f"docker/{container}" if v1 else f"system.slice/docker-{container}.scope"


def v2_cgroup_lines(rel: str) -> str:
    """``/proc/<pid>/cgroup`` of a process in ``rel`` on cgroup v2."""
    return f"0::/{rel}\n"


def v1_cgroup_lines(paths: dict[str, str]) -> str:
    """``/proc/<pid>/cgroup`` on cgroup v1: ``paths`` maps each hierarchy (``cpuacct``,
    ``memory``, ``name=systemd``, ...) to the process's relative path in it (``""``: the root)."""
    return "".join(f"{n}:{hierarchy}:/{rel}\n"
                   for n, (hierarchy, rel) in enumerate(reversed(list(paths.items())), 1))


def add_process_files(proc: Path, pid: int, cgroup_lines: str, comm: str, uid: int,
                      start_ticks: int = 1000) -> None:
    """A process's ``cgroup`` (the lines given), ``comm``, ``status`` (with its ``Uid:``
    line: real, effective, saved, filesystem) and ``stat`` (its start time, field 22)."""
    p = proc / str(pid)
    p.mkdir(parents=True, exist_ok=True)
    (p / "cgroup").write_text(cgroup_lines)
    (p / "comm").write_text(comm + "\n")
    (p / "status").write_text(f"Name:\t{comm}\nState:\tS (sleeping)\nPid:\t{pid}\n"
                              f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
                              f"Gid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    # Fields 3 to 21 (state, ppid, ... itrealvalue), then 22: the start time in clock ticks.
    (p / "stat").write_text(f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560"
                            + " 0" * 12 + f" {start_ticks} 0 0\n")


def add_passwd(host_root: Path, users: dict[int, str]) -> None:
    """The host's ``etc/passwd`` naming these UIDs (root's entry first)."""
    lines = ["root:x:0:0:root:/root:/bin/bash"]
    lines += [f"{name}:x:{uid}:{uid}:{name}:/home/{name}:/bin/bash"
              for uid, name in sorted(users.items()) if uid != 0]
    path = host_root / "etc" / "passwd"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def add_docker_container(host_root: Path, container: str, name: str) -> None:
    """Docker's metadata of one container: ``var/lib/docker/containers/<id>/config.v2.json``
    with its ID and ``/``-prefixed name (what ``gpustats.sources.runtime_store`` reads)."""
    d = host_root / "var" / "lib" / "docker" / "containers" / container
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.v2.json").write_text(json.dumps({
        "ID": container, "Name": f"/{name}", "Running": True,
        "Config": {"Hostname": container[:12]}}))


def copy_node_files(proc: Path, real_proc: Path = Path("/proc")) -> None:
    """The node's CPU, memory and boot id files, copied from ``real_proc`` where it has them
    (without them the node's figures are absent, as on a host that does not give them)."""
    proc.mkdir(parents=True, exist_ok=True)
    for parts in ((name,) for name in NODE_PROC_FILES):
        _copy(real_proc.joinpath(*parts), proc.joinpath(*parts))
    _copy(real_proc.joinpath(*BOOT_ID), proc.joinpath(*BOOT_ID))


def _copy(source: Path, target: Path) -> None:
    try:
        text = source.read_text()
    except OSError:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.tmp")     # a reader sees old or new, whole
    temporary.write_text(text)
    temporary.replace(target)


def add_log_names(log_root: Path, namespace: str, pod: str, uid: str, container: str,
                  cid: str) -> None:
    """The kubelet's log directory and link for one container (``gpustats.sources.kubelet_logs``
    reads the names from them)."""
    pod_dir = f"{namespace}_{pod}_{uid}"
    (log_root / "pods" / pod_dir / container).mkdir(parents=True, exist_ok=True)
    (log_root / "pods" / pod_dir / container / "0.log").touch()
    links = log_root / "containers"
    links.mkdir(parents=True, exist_ok=True)
    link = links / f"{pod}_{namespace}_{container}-{cid}.log"
    if not link.is_symlink():
        os.symlink(log_root / "pods" / pod_dir / container / "0.log", link)


def remove(root: Path) -> None:
    """The whole fake host; what is already gone is no error."""
    shutil.rmtree(root, ignore_errors=True)
