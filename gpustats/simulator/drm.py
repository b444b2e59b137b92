"""The scenario's AMD and Intel GPUs as the kernel shows them: a sysfs tree and the /proc fd and
fdinfo entries of their processes, under one root, rewritten by ``render()`` as time passes.

``SimulatedDrm(scenario, root)`` writes ``<root>/sys`` (``sysfs_root``) and ``<root>/proc``
(``proc_root``), so a reader given those roots reads them as it would the host's; given
``proc_root``, the processes' entries go into that fake host's ``/proc`` instead, beside the
files that place them in their cgroups, so their tenants are billed. Per device
(``<BDF>`` in sysfs form, N its card number, M = 128 + N, K its place among these devices):

- ``sys/devices/pci<domain>:<bus>/<BDF>/``: ``vendor``, ``device``, ``class``, ``driver`` (a link
  to ``sys/bus/pci/drivers/<amdgpu|i915|xe>``), ``drm/cardN/dev`` and ``drm/renderDM/dev``
  (``226:<minor>``, each with a ``device`` link back), ``hwmon/hwmonK/``, and the files of
  ``drm_files.py``: amdgpu's busy, memory, ``unique_id`` and ``product_name`` files and hwmon
  power (µW) and temperatures (m°C); i915's and xe's hwmon energy (µJ) and power limit.
- Intel's GT idle residency (ms): i915 ``drm/cardN/gt/gt0/rc6_residency_ms``, xe
  ``tile0/gt0/gtidle/idle_residency_ms``: the GT idles while the device is in an idle phase, and
  in a busy phase for the part of the time its clients leave (``sm_util_percent`` summed).
- ``sys/bus/pci/devices/<BDF>`` and ``sys/bus/pci/drivers/<driver>/<BDF>`` link to it,
  ``sys/class/drm/cardN`` and ``renderDM`` to its ``drm/`` entries.
- Each process with a client on it: ``proc/<pid>/fd/0..2`` → ``/dev/null``, then one fd per
  ``fds`` → ``/dev/dri/renderDM`` (the link's text: nothing is at that path), each with its
  ``proc/<pid>/fdinfo/<fd>``. Only ``fd`` and ``fdinfo`` are written below ``proc/<pid>``: a
  fake host's files beside them are left alone.

Counters (Intel's energy, from ``energy_counter_base_millijoules``; each client's engine time,
from ``sm_util_percent`` × the class's engines; xe's GPU timestamp) integrate the scenario's
rates over the real time since construction, busy only in the busy phases of ``idle_cycle``.
Each file is replaced whole (a temporary file renamed over it), and only when its text changed.
Where the scenario names a ``trace_file`` (``trace.py``), each ``render()`` (but the one made at
construction, before any reader) appends an ``energy`` line per device, stamped ``mono`` with
the render's time: Intel's counter (mJ), and for AMD, which gives power and no counter, the
trapezoid of the powers rendered since the first traced render (what a reader integrating each
render's ``power1_average`` gets).
A client (pid, device) gets its ``drm-client-id`` when it first appears, counting up; one that
leaves the scenario and comes back is a new client, from 0. Given a path, the scenario is re-read
when the file changes, at the next ``render()``; a grown ``driver_reloads`` restarts the energy
counters. Not simulated: NVIDIA GPUs (``SimulatedNvml``'s), owners and modes, other PCI
functions, counters kept across restarts (``driver_state``).
"""

from __future__ import annotations

import itertools
import logging
import os
import tempfile
import threading
import time
from dataclasses import replace
from typing import Any, Callable

from gpustats.simulator.drm_files import (
    Client, amd_files, drm_fdinfo, intel_files, null_fdinfo, render_minor,
)
from gpustats.simulator.drm_vendors import (
    DRM_MAJOR, ENGINES, PCI_VENDOR_IDS, default_engine,
)
from gpustats.simulator.idle_cycle import IdleCycle, energy_joules, is_idle, power_at
from gpustats.simulator.scenario import Scenario, SimDevice, SimProcess, load_scenario
from gpustats.simulator.trace import write_trace

log = logging.getLogger(__name__)

FIRST_DRM_FD = 3
_FILE, _LINK = "file", "link"


class SimulatedDrm:
    """Renders a scenario's AMD and Intel GPUs under ``root``; ``render()`` brings the files
    up to now (the daemon calls it before each sweep)."""

    def __init__(self, scenario: Scenario | str, root: str, *,
                 monotonic: Callable[[], float] = time.monotonic, proc_root: str | None = None):
        self.root = os.path.abspath(root)
        self.sysfs_root = os.path.join(self.root, "sys")
        self.proc_root = os.path.abspath(proc_root) if proc_root is not None \
            else os.path.join(self.root, "proc")
        self._staging = os.path.join(self.root, ".simulated-drm")    # temporary files
        # A fake host's /proc may be on another file system: its own staging directory there,
        # so that each file is still renamed into place.
        self._proc_staging = self._staging if proc_root is None \
            else os.path.join(self.proc_root, ".simulated-drm")
        self._path: str | None = None
        if isinstance(scenario, str):
            self._path, scenario = scenario, load_scenario(scenario)
        self._scenario: Scenario = scenario
        self._stamp = self._file_stamp()
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._started = self._advanced_at = monotonic()
        self._energy_uj: dict[str, float] = {}
        self._idle_ms: dict[str, float] = {}                      # Intel GT idle residency
        self._rendered: dict[str, tuple[float, float, float]] = {}  # AMD: (t, W, trapezoid mJ)
        self._busy_seconds: dict[tuple[int, str], float] = {}     # (pid, uuid) -> engine time
        self._client_ids: dict[tuple[int, str], int] = {}
        self._next_client_id = 1
        self._written: dict[str, tuple[str, str]] = {}            # path under root -> entry
        self._link_names = itertools.count()
        for directory in (self.sysfs_root, self.proc_root, self._staging, self._proc_staging):
            os.makedirs(directory, exist_ok=True)
        self.render(trace=False)       # no reader has read anything yet

    @property
    def scenario(self) -> Scenario:
        return self._scenario

    @property
    def vendors(self) -> frozenset[str]:
        """The DRM vendors the scenario has now (``amd``, ``intel``)."""
        return frozenset(d.vendor for d in self._scenario.drm_devices)

    def render(self, trace: bool = True) -> None:
        """Rewrite what moved, as of now (a reader reads it next: traced, where the scenario
        names a trace file)."""
        with self._lock:
            self._reload_if_changed()
            now = self._monotonic()
            self._advance(now)
            self._forget_gone_clients()
            self._apply(self._tree(now - self._started))
            if trace:
                self._trace_energy(now)

    def _trace_energy(self, now: float) -> None:
        scenario = self._scenario
        for device in scenario.drm_devices:
            if device.vendor == "amd":
                watts = power_at(device.power_watts, device.idle_cycle, now - self._started)
                t, before, mj = self._rendered.get(device.uuid, (now, watts, 0.0))
                mj += (before + watts) / 2.0 * (now - t) * 1000.0
                self._rendered[device.uuid] = (now, watts, mj)
            else:
                mj = self._energy_uj.get(device.uuid, 0.0) / 1000.0
            if scenario.trace_file is not None:
                write_trace(scenario.trace_file, time.time(), "energy", scenario.trace_tag,
                            uuid=device.uuid, mj=int(mj), mono=now)

    # ------------------------------------------------------------ scenario and counters

    def _file_stamp(self) -> tuple[float, int] | None:
        if self._path is None:
            return None
        try:
            st = os.stat(self._path)
        except OSError:
            return None
        return (st.st_mtime, st.st_size)

    def _reload_if_changed(self) -> None:
        stamp = self._file_stamp()
        if self._path is None or stamp is None or stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            scenario = load_scenario(self._path)
        except ValueError as exc:
            log.warning("simulator: keeping the previous scenario: %s", exc)
            return
        self._advance(self._monotonic())          # the old rates up to the change
        if scenario.driver_reloads > self._scenario.driver_reloads:
            self._energy_uj.clear()
        self._scenario = scenario

    def _advance(self, now: float) -> None:
        t0, t1 = self._advanced_at - self._started, now - self._started
        if t1 <= t0:
            return
        self._advanced_at = now
        for device in self._scenario.drm_devices:
            self._energy_uj[device.uuid] = self._energy_uj.get(
                device.uuid, device.energy_counter_base_millijoules * 1000.0) + energy_joules(
                device.power_watts, device.idle_cycle, t0, t1) * 1e6
            busy = _busy_seconds(device.idle_cycle, t0, t1)
            working = min(1.0, sum(p.sm_util_percent or 0 for p in
                                   self._scenario.processes_by_device.get(device.uuid, ()))
                          / 100.0)
            self._idle_ms[device.uuid] = self._idle_ms.get(device.uuid, 0.0) + (
                t1 - t0 - busy * working) * 1000.0
            for p in self._scenario.processes_by_device.get(device.uuid, ()):
                if p.sm_util_percent and p.shares_client_of is None:
                    key = (p.pid, p.device)
                    self._busy_seconds[key] = self._busy_seconds.get(key, 0.0) + (
                        p.sm_util_percent / 100.0 * _capacity(device, p) * busy)

    def _forget_gone_clients(self) -> None:
        live = {(p.pid if p.shares_client_of is None else p.shares_client_of, p.device)
                for p in self._drm_processes()}
        for key in [k for k in self._client_ids if k not in live]:
            del self._client_ids[key]
            self._busy_seconds.pop(key, None)

    def _drm_processes(self) -> list[SimProcess]:
        drm = {d.uuid for d in self._scenario.drm_devices}
        return [p for p in self._scenario.processes if p.device in drm]

    def _client_id(self, p: SimProcess) -> int:
        key = (p.pid, p.device)
        if key not in self._client_ids:
            self._client_ids[key] = self._next_client_id
            self._next_client_id += 1
        return self._client_ids[key]

    # ------------------------------------------------------------ the tree

    def _tree(self, seconds: float) -> dict[str, tuple[str, str]]:
        """Every file and link, by path under the root, as of ``seconds`` after the start."""
        tree: dict[str, tuple[str, str]] = {}
        devices = {}
        for k, device in enumerate(self._scenario.drm_devices):
            devices[device.uuid] = device
            self._device_tree(tree, device, k, seconds)
        next_fd: dict[int, int] = {}
        for p in self._drm_processes():
            device = devices[p.device]
            base = f"proc/{p.pid}"
            if p.pid not in next_fd:
                next_fd[p.pid] = FIRST_DRM_FD
                for fd in range(FIRST_DRM_FD):
                    tree[f"{base}/fdinfo/{fd}"] = (_FILE, null_fdinfo())
                    tree[f"{base}/fd/{fd}"] = (_LINK, "/dev/null")
            owner = p.pid if p.shares_client_of is None else p.shares_client_of
            client = Client(self._client_id(replace(p, pid=owner)),
                            p.engine or default_engine(_driver(device)),
                            self._busy_seconds.get((owner, p.device), 0.0),
                            p.memory_used_bytes or 0)
            text = drm_fdinfo(device, client, seconds)
            for fd in range(next_fd[p.pid], next_fd[p.pid] + p.fds):
                tree[f"{base}/fdinfo/{fd}"] = (_FILE, text)
                tree[f"{base}/fd/{fd}"] = (_LINK, f"/dev/dri/renderD{render_minor(device)}")
            next_fd[p.pid] += p.fds
        return tree

    def _device_tree(self, tree: dict[str, Any], device: SimDevice, k: int, seconds: float) -> None:
        bdf = device.pci_bus_id
        domain, bus = bdf.split(":")[:2]
        dev = f"sys/devices/pci{domain}:{bus}/{bdf}"
        files = {"vendor": f"0x{PCI_VENDOR_IDS[device.vendor]:04x}\n",
                 "device": f"0x{device.pci_device_id:04x}\n",
                 "class": f"0x{device.pci_class:06x}\n"}
        if device.vendor == "amd":
            busy = device.idle_cycle is None or not is_idle(device.idle_cycle, seconds)
            files.update(amd_files(device, busy=busy,
                                   watts=power_at(device.power_watts, device.idle_cycle, seconds)))
        else:
            files.update(intel_files(device, energy_microjoules=self._energy_uj.get(
                device.uuid, device.energy_counter_base_millijoules * 1000.0),
                idle_ms=self._idle_ms.get(device.uuid, 0.0)))
        for name, text in files.items():
            tree[f"{dev}/{name.replace('hwmon/', f'hwmon/hwmon{k}/')}"] = (_FILE, text)
        nodes = (f"card{device.minor}", device.minor), (f"renderD{render_minor(device)}",
                                                       render_minor(device))
        for node, minor in nodes:
            tree[f"{dev}/drm/{node}/dev"] = (_FILE, f"{DRM_MAJOR}:{minor}\n")
            _link(tree, f"{dev}/drm/{node}/device", dev)
            _link(tree, f"sys/class/drm/{node}", f"{dev}/drm/{node}")
        driver = f"sys/bus/pci/drivers/{device.driver}"
        _link(tree, f"{dev}/driver", driver)
        _link(tree, f"{driver}/{bdf}", dev)
        _link(tree, f"sys/bus/pci/devices/{bdf}", dev)      # last: the device is complete

    # ------------------------------------------------------------ writing

    def _apply(self, tree: dict[str, tuple[str, str]]) -> None:
        for rel, entry in tree.items():
            if self._written.get(rel) == entry:
                continue
            path = self._target(rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if entry[0] == _FILE:
                self._replace_file(path, entry[1])
            else:
                self._replace_link(path, entry[1])
            self._written[rel] = entry
        gone = [r for r in self._written if r not in tree]
        # Links first: a reader that follows one never finds its device half removed.
        for rel in sorted(gone, key=lambda r: self._written[r][0] != _LINK):
            del self._written[rel]
            self._remove(self._target(rel))

    def _target(self, rel: str) -> str:
        """Where an entry of the tree (``sys/...``, ``proc/...``) is written."""
        if rel.startswith("proc/"):
            return os.path.join(self.proc_root, rel[len("proc/"):])
        return os.path.join(self.root, rel)

    def _staging_for(self, path: str) -> str:
        return self._proc_staging if path.startswith(self.proc_root + os.sep) else self._staging

    def _replace_file(self, path: str, text: str) -> None:
        fd, temporary = tempfile.mkstemp(dir=self._staging_for(path))
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(temporary, 0o644)
            os.replace(temporary, path)
        except BaseException:
            _unlink(temporary)
            raise

    def _replace_link(self, path: str, target: str) -> None:
        temporary = os.path.join(self._staging_for(path),
                                 f"link-{os.getpid()}-{next(self._link_names)}")
        _unlink(temporary)                 # one a killed run left behind
        os.symlink(target, temporary)
        try:
            os.replace(temporary, path)
        except BaseException:
            _unlink(temporary)
            raise

    def _remove(self, path: str) -> None:
        """The file or link, then its directories that are left empty (not the roots)."""
        _unlink(path)
        directory = os.path.dirname(path)
        while directory not in (self.root, self.sysfs_root, self.proc_root):
            try:
                os.rmdir(directory)
            except OSError:            # not empty: another entry, or a fake host's file
                return
            directory = os.path.dirname(directory)


def fake_host_proc(proc_root: str) -> str | None:
    """``proc_root`` where it is a fake host's tree the simulated processes belong in; ``None``
    where it is a procfs (its ``self`` link), which the simulator never writes to."""
    if os.path.islink(os.path.join(proc_root, "self")) or not os.path.isdir(proc_root):
        return None
    return proc_root


def _link(tree: dict[str, Any], link: str, target: str) -> None:
    """A relative link, as sysfs has them (the tree may be moved or mounted elsewhere)."""
    tree[link] = (_LINK, os.path.relpath(target, os.path.dirname(link)))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _driver(device: SimDevice) -> str:
    """An AMD or Intel device's driver, which the scenario always sets for them."""
    assert device.driver is not None
    return device.driver


def _capacity(device: SimDevice, p: SimProcess) -> int:
    driver = _driver(device)
    return ENGINES[driver][p.engine or default_engine(driver)]


def _busy_seconds(cycle: IdleCycle | None, t0: float, t1: float) -> float:
    """The time between t0 and t1 outside the idle phases of ``cycle``."""
    if cycle is None:
        return t1 - t0
    return energy_joules(1.0, replace(cycle, watts=0.0), t0, t1)
