"""The chaos run's world: GPUs, tenants (pods and bare-metal ones), their processes, written
out as a simulator scenario and as fake host trees (cgroup v2 or v1, /proc, the kubelet's log
layout, the kernel's DRM clients lists).

GPUs: NVIDIA H100s (the second in MIG mode) and, where the run asks (``drm``), an AMD MI300X
and an Intel Flex (xe or i915) beside them, whose clients the simulator writes as DRM fdinfo.
Tenants (``Pod``, with its ``kind``): pods in the kubelet's tree, and bare-metal ones, each in
the cgroup its kind's layout names: a systemd service, a user's session, a Slurm job step, a
process in the root cgroup, an LXC container, and a cgroup no rule names (kind ``cgroup``).
A tenant's "containers" are its processes; a process on a DRM GPU may exist before it opens its
client (``Container.client``), and may move to another tenant's cgroup (``move``).

The model is the truth: ``state()`` freezes what the simulator is told, so the oracle knows
who held which GPU, with which share, while a scenario version was in effect. Host entries
for a new process are written before the scenario lists it, and removed only after the
scenario stopped listing it (``sync_host(create=True)`` / ``sync_host(create=False)``).

Each process has a start time in ``/proc/<pid>/stat`` that follows from its PID, and the node
a boot id; ``reboot`` gives it a new boot id and leaves every PID and start time as it was,
as a node whose processes come back in the same order after a reboot has them.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gpustats.simulator.drm_files import unique_id

IDLE_WATTS = 100.0
LIMIT_WATTS = 700.0
NAMESPACE = "chaos"
NVIDIA, AMD, INTEL = "nvidia", "amd", "intel"
# A DRM GPU's clients use at most this much of their engine class together (the simulator
# would write any sum; an engine cannot give more than its time, and the daemon bounds it).
DRM_BUSY_PERCENT = 90
# Tenant kinds the world places: pods, and bare-metal tenants by their cgroup layouts.
POD, SERVICE, SESSION, JOB, PROCESS, LXC, CGROUP = (
    "pod", "service", "session", "job", "process", "lxc", "cgroup")
BARE_METAL = (SERVICE, SESSION, JOB, PROCESS, LXC, CGROUP)


def pod_uid(n: int) -> str:
    return f"{n:08x}-cccc-4ddd-8eee-{n:012x}"


def container_id(n: int) -> str:
    return f"{n:064x}"


def gpu_uuid(index: int) -> str:
    return f"GPU-{index:08x}-c0de-4c0d-8c0d-{index:012x}"


def drm_bus_id(vendor: str) -> str:
    return "0000:c1:00.0" if vendor == AMD else "0000:c2:00.0"


def start_ticks(pid: int) -> int:
    """A process's start time in clock ticks since boot (field 22 of ``/proc/<pid>/stat``):
    the same for the same PID in every boot."""
    return 500 + 3 * pid


@dataclass
class Container:
    number: int
    name: str
    pid: int | None               # None: the container is gone (a restart's gap)
    sm_percent: int
    # Drops its CUDA context before each read of the process list: never listed, its work
    # seen in the utilization samples only.
    between_ticks: bool = False
    # Holds its GPU (a DRM process may exist before it opens its client: False until then).
    client: bool = True
    # DRM: the PID whose client it holds too (an inherited or passed fd), no work of its own.
    shares_client_of: int | None = None


@dataclass
class Pod:
    """A tenant: a pod (``kind`` pod), or a bare-metal one (``BARE_METAL``) whose
    "containers" are processes in its one cgroup."""
    number: int
    gpu: int
    gpu_instance: int | None       # MIG: the instance its processes run on
    containers: list[Container] = field(default_factory=list)
    kind: str = POD

    @property
    def uid(self) -> str:
        return pod_uid(self.number)

    @property
    def name(self) -> str:
        return f"job-{self.number}"

    @property
    def user(self) -> int:
        """The UID its processes run as (root for a process in the root cgroup)."""
        return 0 if self.kind == PROCESS else 2000 + self.number

    @property
    def comm(self) -> str:
        return f"solver{self.number}" if self.kind == PROCESS else "worker"

    @property
    def key(self) -> str:
        """The tenant as the oracle keys it: a pod's UID, else ``<kind>:<name>`` as
        ``tenant_key`` makes it of what the daemon serves (``tenant_key``)."""
        if self.kind == POD:
            return self.uid
        return tenant_key(*{
            SERVICE: ("service", f"chaos-{self.number}.service"),
            SESSION: ("session", str(self.user)),
            JOB: ("job", f"job {self.number}"),
            PROCESS: ("process", self.comm),
            LXC: ("container", f"box-{self.number}"),
            CGROUP: ("cgroup", f"/batch/queue-{self.number}"),
        }[self.kind])

    def cgroup_rel(self, v2: bool) -> str:
        """Its processes' cgroup (relative; "" for the root), for a bare-metal tenant."""
        return {
            SERVICE: f"system.slice/chaos-{self.number}.service",
            SESSION: f"user.slice/user-{self.user}.slice/session-{self.number}.scope",
            JOB: f"system.slice/slurmstepd.scope/job_{self.number}/step_0/user/task_0" if v2
            else f"slurm/uid_{self.user}/job_{self.number}/step_0/task_0",
            PROCESS: "",
            LXC: f"lxc.payload.box-{self.number}",
            CGROUP: f"batch/queue-{self.number}",
        }[self.kind]


def tenant_key(kind: str, name: str) -> str:
    """A bare-metal tenant's key: its kind and the name the daemon serves it by."""
    return f"{kind}:{name}"


@dataclass
class Gpu:
    index: int
    power_watts: float
    vendor: str = NVIDIA
    driver: str | None = None                 # intel: xe or i915
    lost: bool = False
    unsupported: set[str] = field(default_factory=set)
    mig: dict[int, float] | None = None       # MIG instances: GPU instance id -> activity %
    # No idle configured: the daemon learns it from idle ticks (0 % duty, no process), so
    # the GPU reports a duty cycle, its running processes' SM percents (0 with none).
    learns_idle: bool = False

    @property
    def uuid(self) -> str:
        """The scenario's UUID (the trace's)."""
        return gpu_uuid(self.index)

    @property
    def drm(self) -> bool:
        return self.vendor != NVIDIA

    @property
    def served_id(self) -> str:
        """The ID the daemon serves it by: amdgpu's ``unique_id``, Intel's PCI address."""
        if self.vendor == AMD:
            return "amd-" + unique_id(self.uuid)
        if self.vendor == INTEL:
            return "intel-" + drm_bus_id(INTEL)
        return self.uuid


@dataclass(frozen=True)
class Holder:
    """One process holding a GPU in a world state."""
    pid: int
    pod_uid: str                   # its tenant's key (``Pod.key``): a pod's UID, else kind:name
    container_id: str
    gpu_instance: int | None
    sm_percent: int
    between_ticks: bool = False
    shares: int | None = None      # DRM: the PID whose client it holds too (and does no work)


@dataclass(frozen=True)
class GpuState:
    uuid: str
    power_watts: float
    lost: bool
    unsupported: frozenset[str]
    mig: tuple[tuple[int, float], ...] | None
    holders: tuple[Holder, ...]
    duty_percent: int | None = None     # reported only where the idle is learnt


@dataclass(frozen=True)
class WorldState:
    """What the simulator is told in one scenario version (the oracle's truth)."""
    gpus: tuple[GpuState, ...]

    def gpu(self, uuid: str) -> GpuState | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)


class World:
    """The model plus its two renderings (scenario, host trees) under ``root``."""

    def __init__(self, root: Path, gpus: int, cgroup_version: int, mig_gpu: bool,
                 drm: tuple[str, ...] = (), clients_lists: Path | None = None):
        """``drm``: the vendors of the AMD and Intel GPUs beside the NVIDIA ones (an Intel GPU
        as ``intel-xe`` or ``intel-i915``); ``clients_lists``: where the kernel's DRM clients
        lists are written (the simulated sysfs's ``kernel/debug/dri``), None for none."""
        self.root = root
        self.cgroup_version = cgroup_version
        self.cgroup = root / "cgroup"
        self.proc = root / "proc"
        self.logs = root / "log"
        self.scenario_path = root / "scenario.yaml"
        self.trace_path = root / "trace.jsonl"
        self.gpus = [Gpu(i, 300.0) for i in range(gpus)]
        if mig_gpu and gpus > 1:
            self.gpus[-1].mig = {1: 60.0, 2: 20.0}
        for spec in drm:
            vendor, _, driver = spec.partition("-")
            self.gpus.append(Gpu(len(self.gpus), 300.0, vendor=vendor,
                                 driver=driver or ("amdgpu" if vendor == AMD else "xe")))
        self.clients_lists = clients_lists
        self._listed: dict[int, set[int]] = {}       # DRM card minor -> PIDs written listed
        self.pods: dict[int, Pod] = {}
        self._next = {"pod": 1, "container": 1, "pid": 1000}
        self._written: set[tuple[str, int]] = set()      # ("pod"|"container", number) on disk
        self._pids: dict[int, tuple[Pod, Container]] = {}
        self._tenants: dict[int, Pod] = {}        # tenants written, by number (their layout)
        self._prepare()

    # ------------------------------------------------------------ model edits

    def fresh(self, kind: str) -> int:
        self._next[kind] += 1
        return self._next[kind] - 1

    def new_container(self, pod: Pod, sm_percent: int) -> Container:
        number = self.fresh("container")
        container = Container(number, f"main-{number}", self.fresh("pid"), sm_percent)
        pod.containers.append(container)
        return container

    def new_pod(self, gpu: int, gpu_instance: int | None, sm_percent: int,
                kind: str = POD) -> Pod:
        pod = Pod(self.fresh("pod"), gpu, gpu_instance, kind=kind)
        self.pods[pod.number] = pod
        self.new_container(pod, sm_percent)
        return pod

    def holders(self, gpu: Gpu, every_file: bool = False) -> tuple[Holder, ...]:
        """The processes holding ``gpu`` as the daemon can see them; ``every_file``: also a
        process sharing a client where the kernel lists the client under its owner only (the
        simulator writes its fdinfo all the same)."""
        out = []
        owners = {c.pid for pod in self.pods.values() if pod.gpu == gpu.index
                  for c in pod.containers if c.client and c.shares_client_of is None}
        for pod in self.pods.values():
            if pod.gpu != gpu.index:
                continue
            if gpu.mig is not None and pod.gpu_instance not in gpu.mig:
                continue
            for c in pod.containers:
                # Work between ticks shows only in utilization samples: with none to read
                # (MIG, or the samples not supported) such a process holds nothing visible.
                hidden = c.between_ticks and (gpu.mig is not None
                                              or "process_utilization" in gpu.unsupported)
                if c.shares_client_of is not None and (c.shares_client_of not in owners or (
                        self.clients_lists is not None and not every_file)):
                    # Its owner gone, it holds nothing here; where the kernel lists clients,
                    # it lists the file once, under the process using it: the owner.
                    continue
                if c.pid is not None and not hidden and c.client:
                    out.append(Holder(c.pid, pod.key, container_id(c.number),
                                      pod.gpu_instance if gpu.mig is not None else None,
                                      0 if c.shares_client_of else c.sm_percent,
                                      c.between_ticks, c.shares_client_of))
        total = sum(h.sm_percent for h in out)
        if gpu.drm and total > DRM_BUSY_PERCENT:
            # One engine class's clients together use at most its engines' time: scaled down
            # alike, as a time-sliced engine shares itself among them.
            out = [h if h.shares else dataclasses.replace(h, sm_percent=max(
                1, h.sm_percent * DRM_BUSY_PERCENT // total)) for h in out]
        return tuple(out)

    def duty_percent(self, gpu: Gpu) -> int | None:
        """The duty cycle a GPU that learns its idle reports: its running processes' SM
        percents, listed or not (work between ticks keeps the GPU busy), at most 100."""
        if not gpu.learns_idle:
            return None
        return min(100, sum(c.sm_percent for pod in self.pods.values() if pod.gpu == gpu.index
                            for c in pod.containers if c.pid is not None and c.client))

    def state(self) -> WorldState:
        return WorldState(tuple(
            GpuState(g.uuid, g.power_watts, g.lost, frozenset(g.unsupported),
                     tuple(sorted(g.mig.items())) if g.mig is not None else None,
                     self.holders(g), self.duty_percent(g))
            for g in self.gpus))

    # ------------------------------------------------------------ scenario

    def scenario(self, tag: str) -> dict:
        devices, processes = [], []
        for g in self.gpus:
            if g.drm:
                devices.append(self._drm_device(g))
                processes += [{"pid": h.pid, "device": g.uuid, "memory_used_bytes": 1 << 30,
                               **({"shares_client_of": h.shares} if h.shares else
                                  {"sm_util_percent": h.sm_percent})}
                              for h in self.holders(g, every_file=True)]
                continue
            d = {"uuid": g.uuid, "name": "NVIDIA H100 80GB HBM3", "index": g.index,
                 "minor": g.index, "power_watts": g.power_watts,
                 "power_limit_watts": LIMIT_WATTS, "lost": g.lost,
                 "unsupported": sorted(g.unsupported)}
            if self.duty_percent(g) is not None:
                d["utilization_percent"] = self.duty_percent(g)
            if g.mig is not None:
                d["mig_instances"] = [
                    {"gpu_instance_id": gi, "profile": "3g.40gb",
                     "uuid": f"MIG-{g.index:04x}-{gi:04x}-c0de", "memory_total_bytes": 40 << 30,
                     "gpm": {"graphics_active_percent": activity}}
                    for gi, activity in sorted(g.mig.items())]
            devices.append(d)
            for h in self.holders(g):
                p = {"pid": h.pid, "device": g.uuid, "memory_used_bytes": 1 << 30}
                if h.gpu_instance is not None:
                    p["gpu_instance_id"] = h.gpu_instance
                else:
                    p["sm_util_percent"] = h.sm_percent
                if h.between_ticks:
                    p["between_ticks"] = True
                processes.append(p)
        return {"devices": devices, "processes": processes,
                "trace_file": str(self.trace_path), "trace_tag": tag}

    def _drm_device(self, g: Gpu) -> dict:
        """An AMD or Intel GPU: its busy measure is its clients' engine time (AMD's
        ``gpu_busy_percent``; the simulator derives Intel's GT idle residency from it)."""
        d = {"uuid": g.uuid, "vendor": g.vendor, "minor": self.drm_minor(g),
             "pci_bus_id": drm_bus_id(g.vendor), "power_watts": g.power_watts,
             "power_limit_watts": LIMIT_WATTS, "temperature_celsius": 40,
             "memory_temperature_celsius": 40, "unsupported": sorted(g.unsupported)}
        if g.vendor == AMD:
            d.update(pci_class=0x120000, utilization_percent=min(100, sum(
                h.sm_percent for h in self.holders(g))))
        else:
            d["driver"] = g.driver
        return d

    def drm_minor(self, g: Gpu) -> int:
        """The card number of a DRM GPU (its place among them)."""
        return [x.index for x in self.gpus if x.drm].index(g.index)

    def write_scenario(self, tag: str) -> None:
        tmp = self.scenario_path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(self.scenario(tag)))
        tmp.replace(self.scenario_path)

    # ------------------------------------------------------------ host trees

    def _prepare(self) -> None:
        self.cgroup.mkdir(parents=True, exist_ok=True)
        self.proc.mkdir(parents=True, exist_ok=True)
        (self.logs / "pods").mkdir(parents=True, exist_ok=True)
        (self.logs / "containers").mkdir(parents=True, exist_ok=True)
        if self.cgroup_version == 2:
            (self.cgroup / "cgroup.controllers").write_text("cpu memory\n")
        else:
            for controller in ("devices", "cpuacct", "memory"):
                (self.cgroup / controller).mkdir(exist_ok=True)
        for name in ("stat", "meminfo", "vmstat"):
            (self.proc / name).write_text(Path(f"/proc/{name}").read_text())
        self._write_boot_id(Path("/proc/sys/kernel/random/boot_id").read_text().strip())

    def _write_boot_id(self, boot_id: str) -> None:
        path = self.proc / "sys" / "kernel" / "random" / "boot_id"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(boot_id + "\n")

    def reboot(self, rng: random.Random) -> str:
        """A new boot id (one draw from ``rng``); PIDs and start times stay. Returns it."""
        boot_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        self._write_boot_id(boot_id)
        return boot_id

    def _pod_rel(self, pod: Pod) -> str:
        if pod.kind != POD:
            return pod.cgroup_rel(self.cgroup_version == 2)
        if self.cgroup_version == 2:
            return f"kubepods.slice/kubepods-pod{pod.uid.replace('-', '_')}.slice"
        return f"kubepods/besteffort/pod{pod.uid}"

    def _container_rel(self, pod: Pod, c: Container) -> str:
        if pod.kind != POD:
            return self._pod_rel(pod)          # a bare-metal tenant's processes: its cgroup
        if self.cgroup_version == 2:
            return f"{self._pod_rel(pod)}/cri-containerd-{container_id(c.number)}.scope"
        return f"{self._pod_rel(pod)}/{container_id(c.number)}"

    def _pod_dirs(self, pod: Pod) -> list[Path]:
        if pod.kind != POD and not self._pod_rel(pod):
            return []                          # the root cgroup
        if self.cgroup_version == 2:
            return [self.cgroup / self._pod_rel(pod)]
        return [self.cgroup / k / self._pod_rel(pod) for k in ("devices", "cpuacct", "memory")]

    def _write_pod(self, pod: Pod) -> None:
        self._tenants[pod.number] = pod
        for d in self._pod_dirs(pod):
            d.mkdir(parents=True, exist_ok=True)
        if pod.kind != POD:
            return
        (self.logs / "pods" / f"{NAMESPACE}_{pod.name}_{pod.uid}").mkdir(exist_ok=True)

    def _write_container(self, pod: Pod, c: Container) -> None:
        rel = self._container_rel(pod, c)
        if self.cgroup_version == 2:
            if rel:
                d = self.cgroup / rel
                d.mkdir(parents=True, exist_ok=True)
                (d / "cpu.stat").write_text("usage_usec 5000\n")
                (d / "memory.current").write_text("1048576\n")
                (d / "memory.stat").write_text("anon 1048576\ninactive_file 0\n")
            proc_cgroup = f"0::/{rel}\n"
        else:
            if rel:
                devices = self.cgroup / "devices" / rel
                devices.mkdir(parents=True, exist_ok=True)
                if pod.kind == POD and not self.gpus[pod.gpu].drm:
                    (devices / "devices.list").write_text(
                        f"c 195:{pod.gpu} rw\nc 195:255 rw\n")
                cpuacct = self.cgroup / "cpuacct" / rel
                cpuacct.mkdir(parents=True, exist_ok=True)
                (cpuacct / "cpuacct.usage").write_text("1000000\n")
                (self.cgroup / "memory" / rel).mkdir(parents=True, exist_ok=True)
            proc_cgroup = f"4:devices:/{rel}\n3:cpu,cpuacct:/{rel}\n" + (
                "" if pod.kind == POD else f"2:memory:/{rel}\n1:name=systemd:/{rel}\n")
        if c.pid is not None:
            self._write_process(pod, c, proc_cgroup)
        if pod.kind != POD:
            return
        pod_log = self.logs / "pods" / f"{NAMESPACE}_{pod.name}_{pod.uid}" / c.name
        pod_log.mkdir(parents=True, exist_ok=True)
        (pod_log / "0.log").write_text("")
        link = self.logs / "containers" / \
            f"{pod.name}_{NAMESPACE}_{c.name}-{container_id(c.number)}.log"
        if not link.is_symlink():
            os.symlink(f"/var/log/pods/{NAMESPACE}_{pod.name}_{pod.uid}/{c.name}/0.log", link)

    def _write_process(self, pod: Pod, c: Container, proc_cgroup: str) -> None:
        """``/proc/<pid>``: cgroup, stat (its start time), comm and status (its UID)."""
        assert c.pid is not None
        p = self.proc / str(c.pid)
        p.mkdir(parents=True, exist_ok=True)
        stat = ["S"] + ["0"] * 18 + [str(start_ticks(c.pid))] + ["0"] * 30
        (p / "stat").write_text(f"{c.pid} ({pod.comm}) {' '.join(stat)}\n")
        (p / "comm").write_text(pod.comm + "\n")
        (p / "status").write_text(f"Name:\t{pod.comm}\nPid:\t{c.pid}\n"
                                  f"Uid:\t{pod.user}\t{pod.user}\t{pod.user}\t{pod.user}\n")
        (p / "cgroup").write_text(proc_cgroup)       # last: the owner, once the rest is there
        self._pids[c.pid] = (pod, c)

    def move(self, c: Container, to: Pod) -> Pod:
        """A process moves to ``to``'s cgroup (its /proc entry rewritten, the tenant's
        cgroup made where needed); returns the tenant it left."""
        old = next(p for p in self.pods.values() if c in p.containers)
        old.containers.remove(c)
        to.containers.append(c)
        if to.kind == POD:
            # In a pod, the cgroup it moves to is a container of that pod's (its runtime's
            # ID), never the container it left: a fresh one here.
            c.number = self.fresh("container")
            c.name = f"main-{c.number}"
        if ("pod", to.number) not in self._written:
            self._write_pod(to)
            self._written.add(("pod", to.number))
        self._write_container(to, c)
        self._written.add(("container", c.number))
        return old

    def _remove_container(self, pod: Pod, number: int) -> None:
        if pod.kind != POD:
            return                  # a bare-metal tenant's cgroup goes with the tenant
        rel = self._container_rel(pod, Container(number, "", None, 0))
        roots = [self.cgroup] if self.cgroup_version == 2 else \
            [self.cgroup / k for k in ("devices", "cpuacct", "memory")]
        for r in roots:
            shutil.rmtree(r / rel, ignore_errors=True)
        for link in (self.logs / "containers").glob(f"*-{container_id(number)}.log"):
            link.unlink(missing_ok=True)

    def _remove_pod(self, pod: Pod) -> None:
        for d in self._pod_dirs(pod):
            shutil.rmtree(d, ignore_errors=True)
        if pod.kind != POD:
            return
        shutil.rmtree(self.logs / "pods" / f"{NAMESPACE}_{pod.name}_{pod.uid}",
                      ignore_errors=True)

    def sync_host(self, *, create: bool) -> bool:
        """Create what the model has and the trees lack (``create``), or remove what the
        trees have and the model lost (pods, containers, /proc entries of ended processes).
        True when anything was created."""
        live_pids = {c.pid for p in self.pods.values() for c in p.containers if c.pid}
        created = False
        if create:
            for pod in self.pods.values():
                if ("pod", pod.number) not in self._written:
                    self._write_pod(pod)
                    self._written.add(("pod", pod.number))
                    created = True
                for c in pod.containers:
                    if c.pid is not None and c.pid not in self._pids:
                        self._write_container(pod, c)
                        self._written.add(("container", c.number))
                        created = True
            created |= self.write_clients_lists(keep=True)
            return created
        self.write_clients_lists(keep=False)
        live_containers = {c.number for p in self.pods.values() for c in p.containers}
        for pid in [p for p in self._pids if p not in live_pids]:
            pod, c = self._pids.pop(pid)
            shutil.rmtree(self.proc / str(pid), ignore_errors=True)
            if c.number not in live_containers and ("container", c.number) in self._written:
                self._remove_container(pod, c.number)
                self._written.discard(("container", c.number))
        for kind, number in sorted(self._written):
            if kind == "pod" and number not in self.pods:
                self._remove_pod(self._tenants.pop(number))
                self._written.discard(("pod", number))
        return False

    def write_clients_lists(self, *, keep: bool) -> bool:
        """The kernel's clients list of each DRM GPU (debugfs ``dri/<minor>/clients``, the
        format before 6.14: no client ID), where the run has them: the processes with a client
        on it, and with ``keep`` those listed before as well (a client closes after the
        scenario stopped listing it). True when a list gained a process."""
        if self.clients_lists is None:
            return False
        grew = False
        for g in (g for g in self.gpus if g.drm):
            minor = self.drm_minor(g)
            pids = {h.pid for h in self.holders(g)}
            if keep:
                pids |= self._listed.get(minor, set())
            grew |= bool(pids - self._listed.get(minor, set()))
            self._listed[minor] = pids
            lines = [f"{'command':>20} {'tgid':>5} {'dev':>3} master a {'uid':>5} {'magic':>10}"]
            for pid in sorted(pids):
                pod = self._pids[pid][0] if pid in self._pids else None
                comm, uid = (pod.comm, pod.user) if pod is not None else ("worker", 0)
                lines.append(f"{comm:>20} {pid:5d} {128 + minor:3d}   n    n {uid:5d} {0:10d}")
            path = self.clients_lists / str(minor) / "clients"
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text("\n".join(lines) + "\n")
            tmp.replace(path)
        return grew

    def live_pod_uids(self) -> set[str]:
        """Pods whose cgroup exists now (written and not yet removed)."""
        return {pod_uid(n) for kind, n in self._written
                if kind == "pod" and self._tenants[n].kind == POD}
