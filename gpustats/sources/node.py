"""Node CPU and memory in the kubelet's terms, from ``<proc>/stat``, ``meminfo`` and ``vmstat``.

CPU times and the boot time come through psutil (which reads ``<proc>/stat``; see
``psutil_root`` for how it is pointed at ``--proc-root``). Memory is parsed here: the kubelet's
working set needs ``Inactive(file)`` and its RSS ``AnonPages``, and the page fault counters come
from ``vmstat``; ``psutil.virtual_memory()`` has none of the three (its ``inactive`` is
``Inactive``, file and anonymous pages together).
"""

from __future__ import annotations

import math
import os
import time
from typing import Callable, Iterable, Iterator

import psutil

from gpustats.hostfs import HostRoots, UnsafeFile, read_text, require_regular
from gpustats.model.host import CpuStats, MemoryStats
from gpustats.sources.cgroup_stats import CpuRateTracker
from gpustats.sources.errors import CollectionErrors
from gpustats.sources.psutil_root import require_proc_root

CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# psutil's system-wide CPU times (seconds, from the ``cpu`` line of <proc>/stat) that are
# busy: idle and iowait are not, and guest time is already inside user and nice.
BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")


def busy_ticks(times: object, ticks_per_second: int = CLOCK_TICKS_PER_SECOND) -> int:
    """Busy CPU clock ticks across all CPUs, from ``psutil.cpu_times()``.

    psutil divides the kernel's tick counts by the tick rate; multiplying back and rounding
    gives the kernel's integers exactly (a float holds a tick count to well under half a
    tick), so rates are as exact as reading the ticks by hand. Fields an older kernel does
    not have (psutil leaves them out) count as none. ``ValueError`` on a value that is not a
    finite number (psutil's ``float()`` takes ``nan`` and ``inf`` from a hostile file).
    """
    seconds = [getattr(times, name) for name in BUSY_FIELDS if hasattr(times, name)]
    if not all(math.isfinite(s) for s in seconds):
        raise ValueError("CPU times that are not finite numbers")
    return sum(round(s * ticks_per_second) for s in seconds)


def _lines_starting(text: str, prefix: str) -> Iterator[str]:
    """The rest of each line of ``text`` that starts with ``prefix``, first line first."""
    at = text.find(prefix)
    while at >= 0:
        if at == 0 or text[at - 1] == "\n":           # not the middle of a longer line
            end = text.find("\n", at)
            yield text[at + len(prefix):end if end >= 0 else None]
        at = text.find(prefix, at + 1)


def parse_key_values(text: str, keys: Iterable[str] | None = None) -> dict[str, int]:
    """``Key: 123 kB`` (meminfo, bytes) and ``key 123`` (vmstat) lines into a dict.

    With ``keys``, only those are looked up, each from its first line that parses (meminfo
    and vmstat have dozens and hundreds of lines: finding six keys beats splitting them all).
    """
    values = {}
    if keys is not None:
        for key in keys:
            for rest in _lines_starting(text, key):
                number = _number(rest[1:].split()) if rest[:1] in (":", " ") else None
                if number is not None:
                    values[key] = number
                    break
        return values
    for line in text.splitlines():
        parts = line.replace(":", " ").split()
        if len(parts) >= 2:
            number = _number(parts[1:])
            if number is not None:
                values[parts[0]] = number
    return values


def _number(parts: list[str]) -> int | None:
    """``["123", "kB"]`` → bytes; ``["123"]`` → 123; anything else → None."""
    if not parts:
        return None
    try:
        number = int(parts[0])
    except ValueError:
        return None
    return number * 1024 if len(parts) > 1 and parts[1] == "kB" else number


MEMINFO_KEYS = ("MemTotal", "MemFree", "Inactive(file)", "AnonPages")
VMSTAT_KEYS = ("pgfault", "pgmajfault")


def memory_from_meminfo(meminfo: dict[str, int], vmstat: dict[str, int], now: float) -> MemoryStats:
    """Working set = used − inactive file, as the kubelet computes it for the root cgroup."""
    total = meminfo.get("MemTotal")
    free = meminfo.get("MemFree")
    usage = total - free if total is not None and free is not None else None
    inactive = meminfo.get("Inactive(file)")
    working_set = max(0, usage - inactive) if usage is not None and inactive is not None else None
    return MemoryStats(
        time=now,
        available_bytes=(total - working_set) if total is not None and working_set is not None
        else None,
        usage_bytes=usage,
        working_set_bytes=working_set,
        rss_bytes=meminfo.get("AnonPages"),
        page_faults=vmstat.get("pgfault"),
        major_page_faults=vmstat.get("pgmajfault"),
    )


BOOT_TIME_RECHECK_SECONDS = 60.0


class NodeReader:
    """Reads node CPU/memory; ``usageNanoCores`` comes from this reading and the previous one.

    ``ValueError`` when psutil does not read ``roots.proc`` (see ``psutil_root``)."""

    def __init__(self, roots: HostRoots, *, errors: CollectionErrors | None = None,
                 wall: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic,
                 boot_recheck_seconds: float = BOOT_TIME_RECHECK_SECONDS):
        """``boot_recheck_seconds``: once the boot time is read, how long it stands before
        ``<proc>/stat`` is read for it again (it changes only with a reboot or a changed
        ``btime`` in a fake tree; each read costs a second parse of the file). Until it is
        read, every tick tries."""
        require_proc_root(roots.proc)
        self._roots = roots
        self._errors = errors
        self._unsafe: list[UnsafeFile] = []
        self._wall = wall
        self._monotonic = monotonic
        self._cpu = CpuRateTracker()          # one key, the node: never forgotten
        self.boot_time: float | None = None
        self._boot_recheck = boot_recheck_seconds
        self._boot_read_at: float | None = None     # monotonic time of the last good read

    def read(self) -> tuple[CpuStats | None, MemoryStats | None]:
        cpu, memory = self._read()
        unsafe, self._unsafe = self._unsafe, []
        if self._errors is not None:
            if unsafe:
                self._errors.failed("node", unsafe[0].reason, str(unsafe[0]))
            elif cpu is None or memory is None:
                self._errors.failed("node", "unreadable", f"{self._roots.proc_path('stat')} or "
                                    f"{self._roots.proc_path('meminfo')} cannot be read")
            else:
                self._errors.succeeded("node")
        return cpu, memory

    def _read(self) -> tuple[CpuStats | None, MemoryStats | None]:
        now = self._wall()
        cpu = None
        report = self._unsafe.append
        at = self._monotonic()
        due = self._boot_read_at is None or at - self._boot_read_at >= self._boot_recheck
        busy, boot = self._cpu_and_boot(report, due)
        if boot is not None:
            self.boot_time, self._boot_read_at = boot, at
        if busy is not None:
            cpu = self._cpu.stats("node", now, at,
                                  busy * 1_000_000_000 // CLOCK_TICKS_PER_SECOND)
        meminfo = read_text(self._roots.proc_path("meminfo"), report)
        memory = None
        if meminfo is not None:
            vmstat = read_text(self._roots.proc_path("vmstat"), report) or ""
            memory = memory_from_meminfo(parse_key_values(meminfo, MEMINFO_KEYS),
                                         parse_key_values(vmstat, VMSTAT_KEYS), now)
        return cpu, memory

    def _cpu_and_boot(self, report: Callable[[UnsafeFile], None],
                      boot_due: bool) -> tuple[int | None, float | None]:
        """Busy ticks and, when ``boot_due``, boot time (epoch seconds) from <proc>/stat;
        ``None`` for each that cannot be (or is not) read. psutil opens the file with a
        blocking ``open``, so it is looked at
        first: a FIFO or a huge file in a fake or hostile tree is reported, not read."""
        try:
            require_regular(self._roots.proc_path("stat"))
        except UnsafeFile as exc:
            report(exc)
            return None, None
        except OSError:
            return None, None
        busy = boot = None
        try:
            busy = busy_ticks(psutil.cpu_times())
        except (OSError, ValueError, TypeError):
            pass       # gone, or a cpu line psutil cannot split into this kernel's columns
        if not boot_due:
            return busy, None
        try:
            boot = psutil.boot_time()
        except (OSError, ValueError, IndexError, RuntimeError):
            pass       # no (or a malformed) btime line: psutil raises RuntimeError for none
        if boot is not None and not math.isfinite(boot):
            boot = None
        return busy, boot
