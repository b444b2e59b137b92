"""``/proc/<pid>/cgroup`` and ``/proc/<pid>/stat``: which container a (GPU) process lives in,
and when it started (a PID and its start time name one process; PIDs are reused)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from gpustats.hostfs import HostRoots, Reporter, read_text
from gpustats.kept_files import KeptFiles
from gpustats.model.containers import CgroupRef
from gpustats.sources.cgroup_paths import CgroupPathInfo, parse_cgroup_path


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """Controller → path. v1 lines ``N:cpu,cpuacct:/path``; the v2 line ``0::/path`` gives ``""``.

    Named hierarchies (``name=systemd``) are kept under their full name; malformed lines skipped.
    """
    paths: dict[str, str] = {}
    for line in text.splitlines():
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


def container_from_paths(paths: dict[str, str]) -> ProcessContainer | None:
    """The container these cgroup paths name (the v2 path first, then devices, cpuacct, memory)."""
    for controller in ("", "devices", "cpuacct", "memory", "cpu", "pids", "name=systemd"):
        path = paths.get(controller)
        if path is None:
            continue
        info = parse_cgroup_path(path)
        if info is not None and info.container_id is not None:
            ref = []
            for name in ("", "devices", "cpuacct", "memory"):
                other = paths.get(name)
                if other is None:
                    continue
                other_info = parse_cgroup_path(other)
                if other_info is not None and other_info.container_id == info.container_id:
                    ref.append((name, other_info.container_path))
            return ProcessContainer(info, CgroupRef(tuple(sorted(ref))))
    return None


def _start_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return parse_start_time(text)
    except ValueError:
        return None


class ProcReader:
    """``kept_files``: how many ``stat`` files of the processes asked for tick after tick may
    stay open between reads (``start_times``)."""

    def __init__(self, roots: HostRoots, report: Reporter | None = None, *,
                 kept_files: int = 0):
        self._roots = roots
        self._report = report          # a refused file (FIFO, huge) in a fake or hostile tree
        self._stats = KeptFiles(kept_files)
        self._stat_paths: dict[int, tuple[str, str]] = {}   # last tick's PIDs: name, stat path

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
        return out

    def close(self) -> None:
        self._stats.close()

    def container_of(self, pid: int) -> ProcessContainer | None:
        """``None`` when the process is gone or not in a container."""
        text = read_text(self._roots.proc_path(str(pid), "cgroup"), self._report,
                         max_bytes=65536)
        if text is None:
            return None
        return container_from_paths(parse_proc_cgroup(text))
