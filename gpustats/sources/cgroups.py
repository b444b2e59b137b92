"""Container and pod cgroups found by walking cgroupfs, and their CPU/memory/devices files.

Layouts: cgroup v2 (``<root>/cgroup.controllers``), v1 (one hierarchy per controller, possibly
co-mounted as ``cpu,cpuacct``), and hybrid (v1 plus v2 at ``<root>/unified``). A container
may sit at different depths in different v1 hierarchies, so its path is recorded per
controller. The key ``""`` stands for the v2 hierarchy.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from gpustats.dir_changes import DirectoryChanges
from gpustats.hostfs import HostRoots, UnsafeFile, read_text
from gpustats.kept_files import KeptFiles
from gpustats.model.containers import CgroupRef, ContainerIdentity, ContainerUsage
from gpustats.model.host import CpuStats, MemoryStats
from gpustats.sources.cgroup_tree import CgroupTree, ListDirs, list_subdirs
from gpustats.sources.cgroup_stats import (
    MEMORY_STAT_KEYS_V1, MEMORY_STAT_KEYS_V2, DeviceRules, cpu_rate, cpu_stat_usage_usec,
    memory_stats, parse_devices_list, parse_flat_keyed, parse_limit,
)
from gpustats.sources.errors import CollectionErrors, LogOnce

log = logging.getLogger(__name__)

V2 = ""
WALKED_CONTROLLERS = ("devices", "cpuacct", "memory")
LIMIT_REFRESH_SECONDS = 30.0     # memory limits change rarely (in-place resize); re-read then
# A hierarchy mounted after start (or a v1/v2 switch) is picked up within this many seconds;
# while none is found at all, at every tick. One scandir of the cgroup root each time; the
# trees are walked again in full only when the hierarchies changed.
LAYOUT_RECHECK_SECONDS = 30.0
SOURCE = "cgroups"
# A cgroup's memory usage, statistics and limit files, in v1's memory hierarchy and in v2.
V1_MEMORY_FILES = ("memory.usage_in_bytes", "memory.stat", "memory.limit_in_bytes")
V2_MEMORY_FILES = ("memory.current", "memory.stat", "memory.max")


@dataclass(frozen=True)
class Layout:
    """Absolute directory of each hierarchy we read: v1 controller name or ``""`` for v2."""

    hierarchies: tuple[tuple[str, str], ...]

    def root(self, controller: str) -> str | None:
        for name, path in self.hierarchies:
            if name == controller:
                return path
        return None


def detect_layout(cgroup_root: str) -> Layout:
    if os.path.exists(os.path.join(cgroup_root, "cgroup.controllers")):
        return Layout(((V2, cgroup_root),))
    found: dict[str, str] = {}
    try:
        entries = sorted(os.scandir(cgroup_root), key=lambda e: e.name)
    except OSError:
        entries = []
    for entry in entries:
        if not entry.is_dir():
            continue
        for controller in entry.name.split(","):
            if controller in WALKED_CONTROLLERS and controller not in found:
                found[controller] = os.path.realpath(entry.path)
    unified = os.path.join(cgroup_root, "unified")
    if os.path.exists(os.path.join(unified, "cgroup.controllers")):
        found[V2] = unified
    return Layout(tuple(sorted(found.items())))


@dataclass
class Discovery:
    """One walk's result: containers and pod cgroups with their per-controller paths."""

    containers: dict[str, ContainerIdentity] = field(default_factory=dict)
    pods: dict[str, CgroupRef] = field(default_factory=dict)
    pod_qos: dict[str, str] = field(default_factory=dict)

    def copy(self) -> Discovery:
        return Discovery(dict(self.containers), dict(self.pods), dict(self.pod_qos))


@dataclass(frozen=True)
class _UsageFiles:
    """Where one cgroup's CPU and memory figures come from: (path, group) of each file read
    every few ticks, worked out once per cgroup. CPU from v1 ``cpuacct.usage``, else v2
    ``cpu.stat``; memory from v1's memory hierarchy when there is one, else v2's."""

    cpuacct: tuple[str, str] | None
    cpu_stat: tuple[str, str] | None
    memory_usage: tuple[str, str] | None
    memory_stat: tuple[str, str] | None
    memory_limit: str | None
    v2_memory: bool

    @classmethod
    def of(cls, ref: CgroupRef, file: Callable[[str, str, str], str | None]) -> _UsageFiles:
        def kept(controller: str, rel: str | None, name: str) -> tuple[str, str] | None:
            if rel is None:
                return None
            path = file(controller, rel, name)
            return (path, rel) if path is not None else None

        v2, memory = ref.path(V2), ref.path("memory")
        rel: str | None
        if memory is not None:
            controller, rel, (usage, stat, limit) = "memory", memory, V1_MEMORY_FILES
        else:
            controller, rel, (usage, stat, limit) = V2, v2, V2_MEMORY_FILES
        return cls(kept("cpuacct", ref.path("cpuacct"), "cpuacct.usage"),
                   kept(V2, v2, "cpu.stat"), kept(controller, rel, usage),
                   kept(controller, rel, stat),
                   file(controller, rel, limit) if rel is not None else None,
                   v2_memory=memory is None)


class _CgroupState:
    """What is kept of one container's or pod's cgroup between its reads."""

    __slots__ = ("ref", "files", "last_tick", "start_time", "limit", "limit_read_at",
                 "cpu_read_at", "cpu_ns", "memory", "memory_inputs")

    def __init__(self, ref: CgroupRef, tick: int):
        self.ref = ref
        self.files: _UsageFiles | None = None        # worked out at the first read
        self.last_tick = tick
        self.start_time: float | None = None         # None: not known yet
        self.limit: int | None = None
        self.limit_read_at: float | None = None      # monotonic; None: never read
        self.cpu_read_at: float | None = None        # the last CPU sample (monotonic, ns)
        self.cpu_ns: int | None = None
        self.forget_memory()

    def forget_memory(self) -> None:
        """Drops what the last memory figures were worked out from (new files, new layout)."""
        self.memory: MemoryStats | None = None       # the figures last built ...
        self.memory_inputs: tuple | None = None      # ... from (usage, limit, memory.stat bytes)


def _restamped(memory: MemoryStats, now: float) -> MemoryStats:
    """The same figures, read at ``now``."""
    return MemoryStats(now, memory.available_bytes, memory.usage_bytes,
                       memory.working_set_bytes, memory.rss_bytes, memory.page_faults,
                       memory.major_page_faults)


class CgroupReader:
    """Walks the cgroup hierarchies and reads per-container figures."""

    def __init__(self, roots: HostRoots, *, errors: CollectionErrors | None = None,
                 wall: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic,
                 forget_after_ticks: int = 5, kept_files: int = 0,
                 list_dirs: ListDirs = list_subdirs, kubelet_parent: str = ""):
        """``forget_after_ticks``: what is kept of a cgroup (its last CPU sample, start time,
        limit) lasts this many ticks without a read; more than the ticks between its reads.
        ``kept_files``: how many of the files read every few ticks (CPU, memory, devices) may
        stay open between reads (``kept_files.KeptFiles``); the rest are opened for each read.
        ``list_dirs``: how a cgroup directory's subdirectories are listed.
        ``kubelet_parent``: where the kubelet's tree sits if not at the top (``cgroup_paths``)."""
        self._roots = roots
        self._files = KeptFiles(kept_files)
        self._errors = errors
        self._wall = wall
        self._monotonic = monotonic
        self._layout: Layout | None = None
        self._layout_checked = 0.0
        self._unsafe: list[UnsafeFile] = []      # files refused this tick
        self._forget_after = forget_after_ticks
        self._log_once = LogOnce(log, every_seconds=600.0)
        self._dirs: dict[tuple[str, str], str | None] = {}
        self._states: dict[object, _CgroupState] = {}     # per container or pod key
        self._identities: dict[str, ContainerIdentity] = {}
        self._tick = 0
        self._changes = DirectoryChanges()
        self._tree = CgroupTree(self._changes, list_dirs, kubelet_parent=kubelet_parent)
        self._tree_changed = False               # since the last end_tick
        self._discovered: Discovery | None = None
        self._said_unwatched = False

    @property
    def layout(self) -> Layout:
        if self._layout is None:
            self._detect()
        assert self._layout is not None      # _detect always sets one
        return self._layout

    def _detect(self) -> None:
        layout = detect_layout(self._roots.cgroup)
        self._layout_checked = self._monotonic()
        if layout != self._layout:
            log.info("cgroup hierarchies: %s", ", ".join(
                f"{name or 'v2'}={path}" for name, path in layout.hierarchies) or "none")
            self._layout = layout
            self._tree.reset(layout.hierarchies)
            self._dirs.clear()
            for state in self._states.values():
                state.files = None          # worked out from the old layout's roots

    def report_unsafe(self, exc: UnsafeFile) -> None:
        """A file in the tree that was refused (FIFO, huge, too slow): counted at tick end."""
        self._unsafe.append(exc)

    def discover(self) -> Discovery:
        """Containers and pods in the cgroup trees. Only the directories inotify says were
        made, removed or renamed are looked at again (``CgroupTree``); with nothing changed
        the last result stands."""
        if self._layout is None or not self._layout.hierarchies \
                or self._monotonic() - self._layout_checked >= LAYOUT_RECHECK_SECONDS:
            self._detect()
        changed = self._tree.update()
        if not changed and self._discovered is not None:
            return self._discovered.copy()
        if self._changes.unavailable is not None and not self._said_unwatched:
            self._said_unwatched = True
            log.info("cgroup trees are walked every tick (%s)", self._changes.unavailable)
        self._tree_changed = True
        found = self._discovered = self._collect()
        return found.copy()

    def _collect(self) -> Discovery:
        """The containers and pods the tree holds, each container's paths per controller."""
        found = Discovery()
        paths: dict[str, dict[str, str]] = {}
        meta: dict[str, tuple] = {}
        pod_paths: dict[str, list[tuple[str, str]]] = {}
        for controller, rel, info in self._tree.found():
            if info.container_id is not None:
                assert info.container_path is not None    # set with container_id
                paths.setdefault(info.container_id, {})[controller] = info.container_path
                meta.setdefault(info.container_id, (info.runtime, info.pod_uid, info.qos_class))
            else:
                assert info.pod_uid is not None           # no container ID: a pod cgroup
                pod_paths.setdefault(info.pod_uid, []).append((controller, rel))
                found.pod_qos[info.pod_uid] = info.qos_class or "guaranteed"
        # The same container or pod as last time keeps its objects (built once, not per tick).
        before = self._discovered.pods if self._discovered is not None else {}
        for pod_uid, pod_where in pod_paths.items():
            ref, where = before.get(pod_uid), tuple(pod_where)
            found.pods[pod_uid] = ref if ref is not None and ref.paths == where \
                else CgroupRef(where)
        previous, self._identities = self._identities, {}
        for container_id, by_controller in paths.items():
            runtime, pod_uid, qos = meta[container_id]
            where = tuple(sorted(by_controller.items()))
            identity = previous.get(container_id)
            if identity is None or identity.cgroup is None or identity.cgroup.paths != where \
                    or (identity.runtime, identity.pod_uid, identity.qos_class) != \
                    (runtime, pod_uid, qos):
                identity = ContainerIdentity(
                    container_id=container_id, runtime=runtime, pod_uid=pod_uid, qos_class=qos,
                    cgroup=CgroupRef(where))
            found.containers[container_id] = self._identities[container_id] = identity
        return found

    # ------------------------------------------------------------ per-cgroup files

    def _dir(self, controller: str, rel: str) -> str | None:
        key = (controller, rel)
        if key not in self._dirs:
            root = self.layout.root(controller)
            self._dirs[key] = os.path.join(root, rel.lstrip("/")) if root is not None else None
        return self._dirs[key]

    def _file(self, controller: str, rel: str, name: str) -> str | None:
        directory = self._dir(controller, rel)
        return f"{directory}/{name}" if directory is not None else None

    def device_rules(self, ref: CgroupRef) -> DeviceRules | None:
        """The v1 devices.list of this cgroup; ``None`` without a devices hierarchy or file."""
        rel = ref.path("devices")
        if rel is None:
            return None
        path = self._file("devices", rel, "devices.list")
        text = self._files.read_text(path, rel, self.report_unsafe)
        if text is None:
            return None
        rules = parse_devices_list(text)
        if rules.malformed_lines:
            self._log_once(("devices.list", rel), logging.WARNING,
                           "%s: skipped %d malformed line(s)", path, rules.malformed_lines)
        return rules

    def start_time(self, ref: CgroupRef) -> float | None:
        """The cgroup directory's change time (set at creation), earliest over hierarchies."""
        times = []
        for controller, rel in ref.paths:
            directory = self._dir(controller, rel)
            if directory is None:
                continue
            try:
                times.append(os.stat(directory).st_ctime)
            except OSError:
                continue
        return min(times) if times else None

    def usage(self, key: object, ref: CgroupRef) -> ContainerUsage:
        """CPU and memory of one cgroup, the way the kubelet reports them."""
        return self.usages(((key, ref),))[0]

    def usages(self, wanted: Iterable[tuple[object, CgroupRef]]) -> list[ContainerUsage]:
        """``usage`` of each (key, cgroup) in ``wanted``, in order; each cgroup's figures carry
        the time taken when its files were read."""
        states, tick = self._states, self._tick
        due = []
        for key, ref in wanted:
            state = states.get(key)
            if state is None or (state.ref is not ref and state.ref != ref):
                state = states[key] = _CgroupState(ref, tick)
            state.last_tick = tick
            files = state.files
            if files is None:
                files = state.files = _UsageFiles.of(ref, self._file)
                state.forget_memory()
            due.append((state, files))
        read_int, read_bytes, report = self._files.read_int, self._files.read_bytes, \
            self.report_unsafe
        wall, monotonic, memory_stats_of = self._wall, self._monotonic, self._memory
        out = []
        for state, files in due:
            cpu_ns = None
            if files.cpuacct is not None:
                cpu_ns = read_int(*files.cpuacct, report)
            if cpu_ns is None and files.cpu_stat is not None:
                data = read_bytes(*files.cpu_stat, report)
                usec = cpu_stat_usage_usec(data) if data is not None else None
                cpu_ns = usec * 1000 if usec is not None else None
            usage = stat = None
            if files.memory_usage is not None:
                usage = read_int(*files.memory_usage, report)
                # v1: either file gives figures; v2: memory.stat only beside memory.current.
                if usage is not None or not files.v2_memory:
                    assert files.memory_stat is not None    # same directory as memory_usage
                    stat = read_bytes(*files.memory_stat, report)
            now, mono = wall(), monotonic()
            cpu = None
            if cpu_ns is not None:
                rate = cpu_rate(state.cpu_read_at, state.cpu_ns, mono, cpu_ns)
                cpu = CpuStats(now, cpu_ns, rate)
                state.cpu_read_at, state.cpu_ns = mono, cpu_ns
            memory = None
            if usage is not None or stat is not None:
                memory = memory_stats_of(state, files, usage, stat, now, mono)
            if state.start_time is None:
                state.start_time = self.start_time(state.ref)
            out.append(ContainerUsage(state.start_time, cpu, memory))
        return out

    def _memory(self, state: _CgroupState, files: _UsageFiles, usage: int | None,
                stat: bytes | None, now: float, mono: float) -> MemoryStats:
        """The figures of ``memory_stats`` (from ``files``, the state's), worked out again only
        when an input changed: an idle cgroup's memory.stat reads the same from read to read,
        and is not parsed again (its last bytes are kept for that, up to ~1.5 KB per cgroup on
        a current kernel)."""
        if state.limit_read_at is None or mono - state.limit_read_at >= LIMIT_REFRESH_SECONDS:
            text = read_text(files.memory_limit, self.report_unsafe) \
                if files.memory_limit else None
            state.limit, state.limit_read_at = parse_limit(text, v2=files.v2_memory), mono
        inputs, last = (usage, state.limit, stat), state.memory
        if last is not None and inputs == state.memory_inputs:
            return _restamped(last, now)
        values = parse_flat_keyed(stat or b"",
                                  MEMORY_STAT_KEYS_V2 if files.v2_memory else MEMORY_STAT_KEYS_V1)
        state.memory = memory_stats(now, usage, values, state.limit, v2=files.v2_memory)
        state.memory_inputs = inputs
        return state.memory

    def end_tick(self) -> None:
        """Forget what belongs to cgroups not seen this tick; report this tick's state."""
        self._report_tick()
        horizon = self._tick - self._forget_after
        for key in [k for k, state in self._states.items() if state.last_tick < horizon]:
            del self._states[key]
        self._tick += 1
        if self._tree_changed:
            self._tree_changed = False
            groups = self._tree.groups()
            self._files.keep_only(groups)          # removed cgroups' files are closed
            if len(self._dirs) > 4 * max(1, len(groups)) + 1024:
                self._dirs.clear()

    def close(self) -> None:
        self._files.close()
        self._changes.close()

    def _report_tick(self) -> None:
        unsafe, self._unsafe = self._unsafe, []
        for exc in unsafe:
            self._log_once(("unsafe", exc.path), logging.WARNING,
                           "%s; left out (a cgroup file must be a small regular file)", exc)
        if self._errors is None:
            return
        if unsafe:
            first = unsafe[0]
            more = f" (and {len(unsafe) - 1} more)" if len(unsafe) > 1 else ""
            self._errors.failed(SOURCE, first.reason, f"{first}{more}")
        elif self._layout is not None and not self._layout.hierarchies:
            self._errors.failed(SOURCE, "no_hierarchy",
                                f"no cgroup hierarchy under {self._roots.cgroup}")
        elif self._tree.over_cap:
            self._errors.failed(SOURCE, "too_many_cgroups",
                                f"more than {self._tree.max_found} container and pod cgroups in a "
                                "hierarchy; the rest are left out")
        else:
            self._errors.succeeded(SOURCE)
