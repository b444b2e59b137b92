"""DRM clients found in ``/proc``, and the engine time each used since the last scan.

A DRM file is an fd whose ``<proc>/<pid>/fd/<fd>`` link names ``/dev/dri/card<N>`` or
``/dev/dri/renderD<N>``; its ``fdinfo/<fd>`` holds the client's counters (``fdinfo.py``).

Counting each client once: the spec (drm-usage-stats.rst) makes ``drm-client-id`` unique to
one open file (globally, or per device: so it is keyed with ``drm-pdev``); a dup'ed,
inherited or passed fd shows the same client, in the same or another PID. It is counted once;
whose it is where several processes hold it is ``owners.py``'s rule (a client without an owner
is still counted: its engine time is the device's, unattributed). A driver that prints no
client ID gets one client per (PID, fd).

Which processes are read: where the kernel lists every device's clients (``debugfs.py``), the
processes it names, each time (a client is seen at the first scan after it opens). Else the
bounded scan: PIDs known to hold a DRM fd every scan, a PID not seen before once when it
appears, and every PID again every ``rescan_every`` scans (the fd tables of those not known to
hold one walked again: a process may open the GPU later), or at once when ``force``d (a device
did work its clients seen do not account for: every fd table walked). Each process's files
are found by ``fd_walk.py`` (fd links walked only when its fd table may have changed), within
a budget per scan (``budget.py``): the processes it leaves are read first at the next scan and
reported as ``deferred``. Reading another user's fds needs CAP_DAC_READ_SEARCH and
CAP_SYS_PTRACE (``proc_access``): a refused PID is counted, logged once per kind of read
(naming the capability the daemon lacks), retried at the next full rescan, and while any is
refused for want of a capability the scan is not ``complete``. A PID refused although the
daemon holds both (a security module, another user namespace) is ``unreadable``: it alone
stays unknown, and the scan of the others is complete. A process's open files are looked at
up to ``fd_walk.MAX_FDS_PER_PID``.

Engine time per client and tick (deltas of cumulative counters):
- A counter may dip briefly (spec): the larger previous value is kept until it catches up.
- A client found by the daemon's first scan is a baseline (0 this tick); one found by a later
  scan opened since the previous one (or was only now found by a rescan), so its whole
  cumulative value counts in this tick, up to the bound below.
- i915 and amdgpu: Δ``drm-engine-<class>`` ns / 1e9. xe: Δ``drm-cycles-<class>`` /
  Δ``drm-total-cycles-<class>`` × the time since the client's previous read (for a client new
  since the last scan: its cycles over the GPU clock's rate seen from that device's other
  clients, else 0).
- A client last read before the previous scan (its holder refused, or left by the budget)
  counts the tick's part of what grew since, spread evenly (``within_tick``).
- These are *engine* seconds: a class with N engines (``drm-engine-capacity``) can give up to
  N seconds per second, and no client counts more than that over the tick. Two clients whose
  ``drm-engine-gfx`` grow 3:1 get busy seconds 3:1 whatever the class; a utilization divides
  by capacity (``engine_bounds.py``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Callable, Container, Iterable, Mapping

from gpustats.model.record import record
from gpustats.sources.drm.budget import ReadBudget, RoundRobin
from gpustats.sources.drm.fd_walk import (
    REFUSED_FD, REFUSED_FDINFO, Deferred, FdWalker, Listed, Refused, client_key,
)
from gpustats.sources.drm.fdinfo import DrmFdinfo
from gpustats.sources.drm.owners import Held as _Held
from gpustats.sources.drm.owners import owners_of
from gpustats.sources.drm.reads import FsReads
from gpustats.sources.proc_access import missing, read_effective, refusal_words

log = logging.getLogger(__name__)

LOCAL_REGIONS = ("vram", "local")        # amdgpu vram, xe vram<N>, i915 local<N>
CGROUP_BYTES = 65536


@record
class ClientTick:
    """One DRM client in one scan."""

    pid: int | None                           # its owner (owners.py); None: none decided
    driver: str
    pdev: str | None                          # PCI address, from drm-pdev
    node_minor: int | None                    # from the /dev/dri node name in the fd's link
    engine_seconds: dict[str, float]          # engine class -> busy engine seconds this tick
    capacity: dict[str, int]
    local_memory_bytes: int | None            # resident in device memory; None: not told

    @property
    def busy_seconds(self) -> float:
        return sum(self.engine_seconds.values())


@record
class ClientScan:
    clients: tuple[ClientTick, ...]
    interval_seconds: float | None            # since the previous scan; None on the first
    complete: bool                            # no process's files were refused for want
                                              # of a capability
    deferred: tuple[int, ...] = ()            # PIDs the budget left for the next scan
    unreadable: tuple[int, ...] = ()          # PIDs refused although the daemon holds them


@dataclass
class _Kept:
    """A client's counters as of its last scan (the larger value where one dipped)."""

    engine_ns: dict[str, int] = field(default_factory=dict)
    cycles: dict[str, int] = field(default_factory=dict)
    total_cycles: dict[str, int] = field(default_factory=dict)
    seen_at: float | None = None              # monotonic time of the scan that last found it
    unseen_scans: int = 0


def local_memory(info: DrmFdinfo) -> int | None:
    """Resident bytes in the device's own memory regions; ``None`` where it names none."""
    sizes = [info.resident_bytes(r) for r in info.regions() if r.startswith(LOCAL_REGIONS)]
    known = [s for s in sizes if s is not None]
    return sum(known) if known else None


class ClientScanner:
    """Scans ``<proc>`` for the DRM clients of some drivers, scan after scan."""

    def __init__(self, proc_root: str, fs: FsReads, drivers: Iterable[str], *,
                 rescan_every: int = 12, monotonic: Callable[[], float],
                 budget: ReadBudget | None = None,
                 capabilities: Callable[[], int | None] = read_effective):
        self._proc = proc_root
        self._fs = fs
        self._drivers = frozenset(drivers)
        self._rescan_every = max(1, rescan_every)
        self._monotonic = monotonic
        self._scans = 0
        self._last_at: float | None = None
        self._seen: set[int] = set()              # PIDs listed at least once
        self._holders: set[int] = set()           # PIDs that held a DRM fd when last read
        self._refused: set[int] = set()           # for want of a capability
        self._unreadable: set[int] = set()        # whatever the daemon's capabilities
        self._capabilities = capabilities()       # the daemon's effective set, once
        self._logged: set[str] = set()            # kinds of refusal logged
        self._walker = FdWalker(proc_root, fs)
        self._budget = budget or ReadBudget(lambda: fs.calls, monotonic)
        self._turns = RoundRobin()
        self._kept: dict[tuple, _Kept] = {}
        self._gpu_hz: dict[str | None, float] = {}   # xe: the GPU clock's rate per device
        self.refusals: dict[str, int] = {REFUSED_FD: 0, REFUSED_FDINFO: 0}

    def scan(self, listed: Mapping[int, Listed] | None = None, force: bool = False
             ) -> ClientScan:
        """One scan. ``listed``: what the kernel lists per tgid for every device (None: no
        list: the bounded scan of every process); ``force``: a full rescan now, every fd
        table walked (the devices did work their clients seen do not account for)."""
        now = self._monotonic()
        interval = now - self._last_at if self._last_at is not None else None
        self._budget.start()
        periodic = listed is None and self._scans % self._rescan_every == 0
        remembered = self._walker.remembered
        pids = self._pids_to_read(listed, force or periodic, () if force else remembered)
        holders, deferred = self._find_clients(
            pids, listed, lambda pid: force or (periodic and pid not in remembered))
        first = self._scans == 0
        owners = owners_of(holders, listed, self._cgroup)
        clients = tuple(self._tick(key, owners.get(key), files[0][1], files[0][2], now, first,
                                   interval)
                        for key, files in holders.items())
        self._age_unseen(holders, deferred)
        self._scans += 1
        self._last_at = now
        return ClientScan(clients, interval, not self._refused, deferred,
                          tuple(sorted(self._unreadable)))

    def _pids_to_read(self, listed: Mapping[int, Listed] | None, every: bool,
                      cheap: Container[int]) -> list[int]:
        if listed is not None:
            alive = set(listed)
            pids = list(alive)
        else:
            pids = [int(n) for n in self._fs.names(self._proc) if n.isascii() and n.isdigit()]
            alive = set(pids)
        self._seen &= alive
        self._holders &= alive
        self._refused &= alive
        self._unreadable &= alive
        self._walker.forget_except(alive)
        if listed is None and not every:
            pids = [p for p in pids if p in self._holders or p not in self._seen]
        return self._turns.order(pids, cheap)

    def _find_clients(self, pids: list[int], listed: Mapping[int, Listed] | None,
                      walk: Callable[[int], bool]
                      ) -> tuple[dict[tuple, list[_Held]], tuple[int, ...]]:
        """Every holder of each client, by key; the PIDs the budget left for the next scan."""
        found: dict[tuple, list[_Held]] = {}
        for n, pid in enumerate(pids):
            if not self._budget.left():
                self._turns.carry(pids[n:])
                return found, tuple(pids[n:])
            try:
                files = self._walker.files(pid, listed.get(pid) if listed is not None else None,
                                           walk(pid), self._budget.left)
            except Deferred:                 # not seen yet: read again at the next scan
                self._turns.carry(pids[n:])
                return found, tuple(pids[n:])
            except Refused as refused:
                self._seen.add(pid)
                self._refuse(refused.kind, pid)       # placed as refused or unreadable
                continue
            self._seen.add(pid)
            self._refused.discard(pid)
            self._unreadable.discard(pid)
            if files:
                self._holders.add(pid)
            else:
                self._holders.discard(pid)
            for f in files:
                if f.info.driver in self._drivers:
                    found.setdefault(client_key(f.info, pid, f.fd), []).append(
                        (pid, f.minor, f.info))
        self._turns.carry([])
        return found, ()

    def _cgroup(self, pid: int) -> str | None:
        return self._fs.text(os.path.join(self._proc, str(pid), "cgroup"), CGROUP_BYTES)

    def _refuse(self, kind: str, pid: int) -> None:
        """A refused PID: for want of a capability (every GPU's processes unknown), or
        unreadable whatever the capabilities (that PID alone unknown)."""
        self.refusals[kind] += 1
        lacking = missing(kind, self._capabilities)
        if not lacking:
            if not self._unreadable:
                log.warning("PID %d: %s; its GPU use, if any, stays unattributed. Other such "
                            "PIDs are named in the source's reason, not logged", pid,
                            refusal_words(kind, lacking))
            self._unreadable.add(pid)
            self._refused.discard(pid)
            return
        self._refused.add(pid)
        self._unreadable.discard(pid)
        if kind not in self._logged:
            self._logged.add(kind)
            log.warning("%s; GPU processes are not fully known. Refusals are counted, not "
                        "logged again", refusal_words(kind, lacking))

    def _tick(self, key: tuple, pid: int | None, minor: int | None, info: DrmFdinfo,
              now: float, first: bool, tick: float | None) -> ClientTick:
        kept = self._kept.get(key)
        if kept is None:
            kept = self._kept[key] = _Kept()
            if first:                      # a baseline: what it did before the daemon came
                kept.engine_ns = dict(info.engine_ns)
                kept.cycles = dict(info.cycles)
                kept.total_cycles = dict(info.total_cycles)
        interval = now - kept.seen_at if kept.seen_at is not None else None
        kept.seen_at, kept.unseen_scans = now, 0
        seconds = {e: ns / 1e9 for e, ns in _grow(kept.engine_ns, info.engine_ns).items()}
        for engine, busy in self._cycle_seconds(kept, info, interval).items():
            seconds.setdefault(engine, busy)       # a class timed in ns too is not counted twice
        return ClientTick(pid=pid, driver=info.driver, pdev=info.pdev, node_minor=minor,
                          engine_seconds=within_tick(seconds, info.capacity, tick, interval),
                          capacity=dict(info.capacity), local_memory_bytes=local_memory(info))

    def _cycle_seconds(self, kept: _Kept, info: DrmFdinfo,
                       interval: float | None) -> dict[str, float]:
        """xe's busy cycles as engine seconds over ``interval``, the time since this client was
        last found. ``drm-total-cycles`` is a GPU timestamp: where it goes back (the GPU was
        reset) the client's clock is taken afresh."""
        new = not kept.total_cycles
        busy = _grow(kept.cycles, info.cycles)
        out = {}
        for engine, cycles in busy.items():
            total = info.total_cycles.get(engine)
            before = kept.total_cycles.get(engine)
            if total is None:
                continue                       # drm-maxfreq-<class> instead: not read
            if before is not None and interval and total > before:
                out[engine] = cycles / (total - before) * interval
                self._gpu_hz[info.pdev] = (total - before) / interval
            elif before is None and new and self._gpu_hz.get(info.pdev):
                out[engine] = cycles / self._gpu_hz[info.pdev]
            else:
                out[engine] = 0.0
            kept.total_cycles[engine] = total
        return out

    def _age_unseen(self, found: Mapping[tuple, list[_Held]], deferred: tuple[int, ...]
                    ) -> None:
        """A client not found for ``rescan_every`` scans is forgotten (closed; IDs are not
        reused). Kept that long, one whose holder could not be read for a while (refused,
        or left for a later scan by the budget) is not counted from zero again when it is."""
        for key in [k for k in self._kept if k not in found]:
            kept = self._kept[key]
            kept.unseen_scans += 1
            if kept.unseen_scans > self._rescan_every * (2 if deferred else 1):
                del self._kept[key]


def within_tick(seconds: dict[str, float], capacity: Mapping[str, int], tick: float | None,
                since: float | None) -> dict[str, float]:
    """A client's engine seconds as this tick's: what grew since its previous read spread
    evenly over the time since (``since``: longer than the tick where its holder was not read
    at the previous scan; the earlier ticks' part was theirs, left unattributed there), then
    at most the tick's length × the class's engines (``drm-engine-capacity``, 1 when absent):
    no client may claim more engine time than the tick held."""
    if tick is None or not tick > 0:
        return seconds
    part = min(1.0, tick / since) if since is not None and since > 0 else 1.0
    return {e: min(busy * part, tick * max(1, capacity.get(e, 1))) for e, busy in seconds.items()}


def _grow(kept: dict[str, int], now: dict[str, int]) -> dict[str, int]:
    """Each counter's growth since ``kept`` (a missing one: from 0), and ``kept`` advanced;
    a counter below its kept value grew by 0 and keeps the kept value (spec: brief dips)."""
    grown = {}
    for name, value in now.items():
        before = kept.get(name, 0)
        grown[name] = max(0, value - before)
        kept[name] = max(before, value)
    return grown
