"""The demo's temporary node: a fake host in a temporary directory, a simulator scenario that a
thread rewrites as the load moves (and the node's CPU and memory files, copied again from the
real host's), and the options that point the daemon at them. Kinds: ``kubernetes`` (named pods,
``demo.load``), ``bare-metal`` (``demo.bare_metal``), and ``mixed``, ``amd`` and ``intel``
(bare metal on other vendors' GPUs too, ``demo.vendors``)."""

from __future__ import annotations

import dataclasses
import functools
import logging
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from gpustats import fakehost
from gpustats.config import Config, IdlePower
from gpustats.demo import bare_metal, load, vendors
from gpustats.demo.load import IDLE_WATTS, TENANTS

log = logging.getLogger(__name__)

# The load moves this often (the simulator re-reads its scenario when the file changes).
REWRITE_SECONDS = 1.0
DEMO_NODE_NAME = "demo-node"
DEMO_HOUSEKEEPING_SECONDS = 2.0


@dataclass(frozen=True)
class Tree:
    """Where a demo host's fake trees are: the daemon's roots."""

    cgroup: Path
    proc: Path
    host: Path                   # --host-root: etc/passwd, Docker's metadata
    log_root: Path | None        # the kubelet's log layout (Kubernetes only)


def build_host(root: Path) -> tuple[Path, Path, Path]:
    """The pods' cgroups, processes and log names below ``root``: (cgroup, proc, log root)."""
    cgroup, proc, logs = root / "cgroup", root / "proc", root / "log"
    fakehost.start_cgroup_tree(cgroup)
    fakehost.copy_node_files(proc)
    for tenant in TENANTS:
        uid, cid = fakehost.pod_uid(tenant.number), fakehost.container_id(tenant.number)
        rel = fakehost.container_cgroup(uid, cid)
        fakehost.add_container(cgroup, rel, usage_usec=tenant.number * 10_000_000,
                               memory_bytes=tenant.number * (256 << 20))
        fakehost.add_process(proc, tenant.pid, rel)
        fakehost.add_log_names(logs, tenant.namespace, tenant.pod, uid, tenant.container, cid)
    return cgroup, proc, logs


def _kubernetes_tree(root: Path) -> Tree:
    cgroup, proc, logs = build_host(root)
    (root / "host").mkdir()            # no passwd, no Docker: nothing of the real host's
    return Tree(cgroup, proc, root / "host", logs)


def _bare_metal_tree(root: Path) -> Tree:
    cgroup, proc, host = bare_metal.build_host(root)
    return Tree(cgroup, proc, host, None)


def _describe_pods() -> str:
    pods = ", ".join(f"{t.namespace}/{t.pod}" for t in TENANTS)
    return f"3 simulated H100s (GPU 2 in MIG mode), {len(TENANTS)} pods: {pods}"


def _vendor_tree(host: vendors.Host, root: Path) -> Tree:
    cgroup, proc, host_root = bare_metal.build_host(root, host.tenants)
    return Tree(cgroup, proc, host_root, None)


@dataclass(frozen=True)
class Kind:
    """A kind of demo node: its trees below a root, its load at a moment, its words, and the
    idle power of its GPUs."""

    build: Callable[[Path], Tree]
    scenario_at: Callable[[float], dict[str, Any]]
    describe: Callable[[], str]
    idle_power: IdlePower = IdlePower(default_watts=IDLE_WATTS)


def _vendor_kind(host: vendors.Host) -> Kind:
    return Kind(functools.partial(_vendor_tree, host), functools.partial(vendors.scenario_at, host),
                host.describe, IdlePower(default_watts=IDLE_WATTS, per_uuid=host.idle_watts()))


KINDS = {
    "kubernetes": Kind(_kubernetes_tree, load.scenario_at, _describe_pods),
    "bare-metal": Kind(_bare_metal_tree, bare_metal.scenario_at, bare_metal.describe),
    **{name: _vendor_kind(host) for name, host in vendors.HOSTS.items()},
}


def write_scenario(path: Path, scenario: dict[str, Any]) -> None:
    """Atomically: the simulator never reads half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(scenario))
    tmp.replace(path)


class DemoNode:
    """Owns the temporary directory from ``start`` to ``close``; ``close`` removes it."""

    def __init__(self, root: Path, clock: Callable[[], float] = time.monotonic,
                 kind: str = "kubernetes", real_proc: Path = Path("/proc")):
        self.root = root
        self._real_proc = real_proc
        self.kind = KINDS[kind]
        self.scenario = root / "scenario.yaml"
        self.tree = self.kind.build(root)
        (root / "sys").mkdir(exist_ok=True)      # --sysfs-root: no PCI device but the simulated
        self._clock = clock
        self._started = clock()
        write_scenario(self.scenario, self.kind.scenario_at(0.0))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-load", daemon=True)

    @classmethod
    def start(cls, kind: str = "kubernetes") -> DemoNode:
        """The node of that kind (``KINDS``), its load moving."""
        root = Path(tempfile.mkdtemp(prefix="gpustats-demo-"))
        try:
            node = cls(root, kind=kind)
        except OSError:
            fakehost.remove(root)
            raise
        node._thread.start()
        return node

    def _run(self) -> None:
        while not self._stop.wait(REWRITE_SECONDS):
            self.move()

    def move(self) -> None:
        """The load as of now, and the node's CPU and memory as the real host's are now (the
        node's figures live, not those of the demo's start)."""
        try:
            write_scenario(self.scenario, self.kind.scenario_at(self._clock() - self._started))
            fakehost.copy_node_files(self.tree.proc, self._real_proc)
        except OSError as exc:       # the directory was removed under the demo
            log.warning("demo: cannot move the load: %s", exc)

    def configure(self, config: Config) -> Config:
        """``config`` pointed at the demo's node; options the user gave keep their value where
        the demo does not need its own (listen, interval, idle power, state dir, node name)."""
        given, tree = config.explicit, self.tree
        return dataclasses.replace(
            config, simulate=str(self.scenario), cgroup_root=str(tree.cgroup),
            proc_root=str(tree.proc), sysfs_root=str(self.root / "sys"),
            host_root=str(tree.host),
            log_root=str(tree.log_root) if tree.log_root is not None else None,
            pod_resources_socket=None, runtime_socket=None,
            cdi_spec_dirs=(), dcgm_exporter_url=None,
            state_dir=config.state_dir if "state_dir" in given else str(self.root / "state"),
            node_name=config.node_name if "node_name" in given else DEMO_NODE_NAME,
            idle_power_watts=config.idle_power_watts if "idle_power_watts" in given
            else self.kind.idle_power,
            housekeeping_interval=config.housekeeping_interval
            if "housekeeping_interval" in given else DEMO_HOUSEKEEPING_SECONDS)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        fakehost.remove(self.root)

    def describe(self) -> str:
        return self.kind.describe()

