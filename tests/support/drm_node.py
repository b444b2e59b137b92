"""A node of AMD/Intel GPUs for the real daemon: a ``DrmTree`` whose proc root also holds the
node's files, an empty cgroup v2 tree, the daemon started on them, and a thread that moves the
tree's counters as time passes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from gpustats import fakehost
from tests.support.drm_tree import DrmTree
from tests.support.fakehost import metric_value

ARGS = ("--pod-resources-socket", "", "--runtime-socket", "", "--log-root", "")


class Mover(threading.Thread):
    """Moves a tree's counters every few milliseconds, each as a function of the time since
    the mover started, until stopped."""

    def __init__(self, step):
        super().__init__(daemon=True)
        self._step = step
        self._halt = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while not self._halt.wait(0.004):
            self._step(time.monotonic() - started)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def node(root: Path) -> tuple[DrmTree, Path]:
    """A DRM tree whose proc root also holds the node's files, and an empty cgroup v2 tree."""
    tree = DrmTree(root / "tree")
    fakehost.copy_node_files(tree.proc)
    cgroup = root / "cgroup"
    fakehost.start_cgroup_tree(cgroup)
    return tree, cgroup


def start(start_daemon, tree: DrmTree, cgroup: Path, *args: str, interval: str = "0.25"):
    daemon = start_daemon("--sysfs-root", str(tree.sysfs), "--proc-root", str(tree.proc),
                          "--cgroup-root", str(cgroup), *ARGS, *args,
                          "--housekeeping-interval", interval)
    daemon.wait_ready()
    return daemon


def add_tenant_process(tree: DrmTree, cgroup: Path, pid: int, rel: str,
                       comm: str = "python3", uid: int = 1000) -> None:
    """A process in the cgroup ``rel`` (made in the cgroup tree), with its /proc files."""
    fakehost.add_container(cgroup, rel)
    fakehost.add_process_files(tree.proc, pid, fakehost.v2_cgroup_lines(rel), comm, uid)


def tenant_joules(text: str, uuid: str, idle: bool = False, **labels: str) -> float:
    """A tenant's attributed energy on the GPU, and its idle share where ``idle`` (0 where
    not listed)."""
    names = ("gpustats_tenant_gpu_joules_total",
             "gpustats_tenant_gpu_idle_share_joules_total")[:2 if idle else 1]
    return sum(metric_value(text, name, gpu_uuid=uuid, **labels) or 0.0 for name in names)
