"""``DrmSweeper``: one sweep per tick of one vendor's DRM GPUs (AMD: amdgpu; Intel: i915, xe)
into vendor-neutral ``DeviceReading``s, as the NVML sweep does for NVIDIA's.

Each sweep: the vendor's GPUs on the PCI bus (``devices.py``), the kernel's list of each one's
clients where debugfs shows it (``debugfs.py``), one scan of ``/proc`` for their DRM clients
(``clients.py``: of the processes that list names, else the bounded scan), each device's sysfs
and hwmon values (``amdgpu.py``, ``intel.py``), and its driver's health files
(``kernel_health.py``). A device's processes are the owners of its
clients (matched by ``drm-pdev``, or by the node's minor where a driver prints no
``drm-pdev``), each with its clients' resident device memory and engine busy seconds over the
tick, bounded by what the tick held (``engine_bounds.py``). What no process seen accounts for
(clients without an owner, work the device's own busy measure shows beyond its clients') is
the reading's ``unattributed_engine_seconds``; work beyond the clients' makes the next scan a
full one at once, and is left unattributed from the second tick in a row it shows (a single
tick short is within the two measures' noise, or a client the forced rescan then finds), or at
once where no client seen did any work. Where some process's files were refused for want of
a capability, ``"processes"`` is in the reading's ``unsupported_fields``: its process list is
not the whole. PIDs refused whatever the daemon's capabilities are the reading's
``unreadable_pids``: the list is whole but for them. Processes the read budget left for the
next scan are counted (``errors``: the vendor's source, reason ``read_budget``).
"""

from __future__ import annotations

import time
from typing import Callable

from gpustats.hostfs import HostRoots
from gpustats.model.device import VENDOR_AMD, DeviceIdentity, DeviceReading, ProcessReading
from gpustats.sources.drm.amdgpu import AmdgpuValues
from gpustats.sources.drm.clients import ClientScan, ClientScanner, ClientTick
from gpustats.sources.drm.devices import DeviceDiscovery, DeviceValues, DrmDevice
from gpustats.sources.drm.engine_bounds import clamp_device, unseen_seconds
from gpustats.sources.drm.intel import IntelValues
from gpustats.sources.drm.kernel_health import read_kernel_health
from gpustats.sources.drm.listing import ClientLists
from gpustats.sources.drm.reads import FsReads
from gpustats.sources.errors import CollectionErrors
from gpustats.sources.proc_access import read_effective
from gpustats.sources.vendors import AMD, INTEL

_VENDORS = {v.name: v for v in (AMD, INTEL)}
_UNKNOWN_PROCESSES = frozenset({"processes"})
READ_BUDGET = "read_budget"


class DrmSweeper:
    """The engine's ``Sweeper`` for one vendor's DRM GPUs. ``calls``: file-system reads so far
    (files read, directories listed, links read)."""

    def __init__(self, vendor: str, roots: HostRoots, *,
                 monotonic: Callable[[], float] = time.monotonic, rescan_every: int = 12,
                 before_sweep: Callable[[], None] | None = None, fs: FsReads | None = None,
                 errors: CollectionErrors | None = None,
                 capabilities: Callable[[], int | None] | None = None):
        if vendor not in _VENDORS:
            raise ValueError(f"not a DRM vendor: {vendor!r}")
        self._vendor = _VENDORS[vendor]
        self._fs = fs if fs is not None else FsReads()
        self._before_sweep = before_sweep
        self._discovery = DeviceDiscovery(roots, self._vendor, self._fs)
        self._clients = ClientScanner(roots.proc, self._fs, self._vendor.drivers,
                                      rescan_every=rescan_every, monotonic=monotonic,
                                      capabilities=capabilities or read_effective)
        self._values = (AmdgpuValues if vendor == VENDOR_AMD else IntelValues)(self._fs,
                                                                               monotonic)
        self._identities: dict[str, DeviceIdentity] = {}
        self._lists = ClientLists(roots, self._fs)
        self._errors = errors
        self._force = False
        self._rescan_every = max(1, rescan_every)
        self._since_forced = self._rescan_every   # sweeps since the last forced rescan
        self._short: set[str] = set()        # devices whose clients fell short at the last tick

    @property
    def calls(self) -> int:
        return self._fs.calls

    @property
    def refusals(self) -> dict[str, int]:
        """Processes whose open files (``fd``) or fdinfo were refused, counted."""
        return dict(self._clients.refusals)

    def unidentified(self) -> tuple[int, ...]:
        return ()

    def close(self) -> None:
        """Nothing is held open between sweeps."""

    def sweep(self) -> tuple[DeviceReading, ...]:
        if self._before_sweep is not None:
            self._before_sweep()
        devices = self._discovery.devices()
        gone = set(self._identities) - {d.address for d in devices}
        if gone:
            self._values.forget(gone)
            for address in gone:
                del self._identities[address]
        if not devices:
            return ()
        # At once; again while work stays unseen (a process that cannot be read), at the
        # periodic rescan's pace: a forced rescan walks every fd table.
        force = self._force and self._since_forced >= self._rescan_every
        self._since_forced = 0 if force else self._since_forced + 1
        scan = self._clients.scan(self._lists.read(devices), force=force)
        self._force = False
        if scan.deferred and self._errors is not None:
            self._errors.record(self._vendor.name, READ_BUDGET, len(scan.deferred))
        return tuple(self._reading(index, device, scan)
                     for index, device in enumerate(devices))

    def _reading(self, index: int, device: DrmDevice, scan: ClientScan) -> DeviceReading:
        values = self._values.read(device)
        clients = clamp_device([c for c in scan.clients if _on_device(c, device)],
                               scan.interval_seconds)
        utilization = values.utilization_percent
        unseen = unseen_seconds(clients, scan.interval_seconds, utilization)
        self._force = self._force or unseen > 0
        working = any(c.busy_seconds > 0 for c in clients)
        if unseen > 0 and working and device.address not in self._short:
            self._short.add(device.address)
            unseen = 0.0                 # one tick short: the counters' noise, or a new client
        elif unseen == 0:                # the rescan this forces finds at once
            self._short.discard(device.address)
        unowned = sum(c.busy_seconds for c in clients if c.pid is None)
        return DeviceReading(
            identity=self._identity(index, device, values),
            monotonic_seconds=values.monotonic_seconds,
            memory_used_bytes=values.memory_used_bytes,
            utilization_percent=utilization,
            power_watts=values.power_watts,
            energy_counter_millijoules=values.energy_counter_millijoules,
            power_limit_watts=values.power_limit_watts,
            temperature_celsius=values.temperature_celsius,
            processes=_processes(clients),
            process_samples=None,
            mig_enabled=None,
            kernel_health=read_kernel_health(self._fs, device),
            unsupported_fields=frozenset() if scan.complete else _UNKNOWN_PROCESSES,
            unattributed_engine_seconds=unseen + unowned
            if scan.interval_seconds is not None else None,
            unreadable_pids=scan.unreadable)

    def _identity(self, index: int, device: DrmDevice, values: DeviceValues) -> DeviceIdentity:
        """The same object tick after tick while nothing in it changes."""
        identity = DeviceIdentity(
            index=index, uuid=values.uuid, name=values.name, pci_bus_id=device.address,
            memory_total_bytes=values.memory_total_bytes, vendor=self._vendor.name,
            drm_card=device.card, drm_minors=device.minors)
        kept = self._identities.get(device.address)
        if kept == identity:
            return kept
        self._identities[device.address] = identity
        return identity


def _on_device(client: ClientTick, device: DrmDevice) -> bool:
    if client.pdev is not None:
        return client.pdev.lower() == device.address.lower()
    return client.node_minor is not None and client.node_minor in device.minors


def _processes(clients: list[ClientTick]) -> tuple[ProcessReading, ...]:
    """One reading per PID: its clients' resident device memory and busy seconds summed."""
    memory: dict[int, int | None] = {}
    busy: dict[int, float] = {}
    for client in clients:
        pid = client.pid
        if pid is None:
            continue                     # no owner: the device's, unattributed
        if client.local_memory_bytes is not None:
            memory[pid] = (memory.get(pid) or 0) + client.local_memory_bytes
        else:
            memory.setdefault(pid, None)
        busy[pid] = busy.get(pid, 0.0) + client.busy_seconds
    return tuple(ProcessReading(pid=pid, memory_used_bytes=memory[pid],
                                engine_busy_seconds=busy[pid]) for pid in sorted(busy))
