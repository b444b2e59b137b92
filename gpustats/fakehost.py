"""Fake host trees for the demo and the tests: a cgroup v2 tree with kubelet pod and container
cgroups, a /proc whose processes live in them, and the kubelet's log layout that names them.

Everything is written below the roots it is given; nothing of the real host is changed. The
node-wide /proc files (CPU, memory, boot id) are copied from the real host where it has them,
so the node's figures stay plausible.
"""

from __future__ import annotations

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
    target.write_text(text)


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
