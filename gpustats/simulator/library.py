"""A ctypes-level fake of libnvidia-ml, installed as pynvml's library (``pynvml.nvmlLib``).

The fake is an object whose attributes are ``ctypes.CFUNCTYPE`` callbacks named like the C
symbols pynvml resolves, so pynvml's own wrappers — argument marshalling, two-call buffer
patterns, error mapping — run exactly as on a real host. A symbol the fake lacks surfaces as
``NVMLError_FunctionNotFound``; a callback returning 3 as ``NVMLError_NotSupported``.
Behaviour follows the driver's contract (refcounted init, INSUFFICIENT_SIZE on short buffers,
NOT_FOUND from process utilization when no sample is newer than the timestamp, events delivered
once then TIMEOUT). It serves the scenario's NVIDIA devices only (AMD and Intel ones are
``drm.py``'s). The scenario (see ``scenario.py``) is re-read when its file changes: checked
on a call at most every ``_RELOAD_CHECK_SECONDS`` of the simulator's clock, or at once by
``reload()``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter, deque
from ctypes import CFUNCTYPE, c_char_p, c_int, c_uint, c_ulonglong, c_void_p
from typing import Callable, Sequence

import pynvml

from gpustats.simulator.abi import (
    ARGUMENT_VERSION_MISMATCH, DRIVER_NOT_LOADED, GPU_IS_LOST, INSUFFICIENT_SIZE, INVALID_ARGUMENT,
    MIG_BASE, NO_INSTANCE, NOT_FOUND, NOT_SUPPORTED, PHYSICAL_BASE, SUCCESS, UNINITIALIZED,
    VIOLATION_POLICY_KEYS, plain, set_out, struct_at, write_string,
)
from gpustats.simulator.accounting import AccountingCalls
from gpustats.simulator.driver_state import DriverStateWriter, load_driver_state
from gpustats.simulator.events import EventCalls
from gpustats.simulator.fields import FieldCalls
from gpustats.simulator.gpm import GpmCalls
from gpustats.simulator.idle_cycle import energy_joules, is_idle, mean_watts, power_at
from gpustats.simulator.scenario import (
    Scenario, SimDevice, SimMigInstance, SimProcess, load_scenario,
)
from gpustats.simulator.trace import write_trace

log = logging.getLogger(__name__)

_RELOAD_CHECK_SECONDS = 0.2
_ProcessInfo = plain(pynvml.c_nvmlProcessInfo_v3_t)
_UtilizationSample = plain(pynvml.c_nvmlProcessUtilizationSample_t)


class _FakeLibrary:
    """Attributes are added per C symbol; ``getattr`` of a missing one raises AttributeError."""


class SimulatedNvml(EventCalls, GpmCalls, FieldCalls, AccountingCalls):
    """The simulator: ``install()`` makes pynvml talk to it; ``calls`` counts C-level calls."""

    def __init__(self, scenario_path: str, *, monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, driver_state: str | None = None,
                 boot_clock: Callable[[], float] = lambda: time.clock_gettime(
                     time.CLOCK_BOOTTIME)):
        self._path = scenario_path
        self._driver_state = driver_state      # energy counters kept across daemon restarts
        self._driver_writer = DriverStateWriter(driver_state) if driver_state else None
        self._driver_saved_at: float | None = None
        self._monotonic = monotonic
        self._wall = wall
        # The driver's counters run in hardware: what they gained while no daemon ran is told
        # from the boot clock, which wall-clock steps do not move.
        self._boot_clock = boot_clock
        self._lock = threading.Lock()
        # Event waits block on this (with the lock); a reload or a queued event wakes them.
        self._wake = threading.Condition(self._lock)
        self._scenario = load_scenario(scenario_path).nvidia_only()
        self._file_stamp = self._stamp()
        self._next_reload_check = monotonic() + _RELOAD_CHECK_SECONDS
        self._installed_at = monotonic()
        self._refcount = 0
        self._init_attempts = 0
        self.calls_by_function: Counter[str] = Counter()
        # Benchmarks set ``measure_cpu``: the CPU time spent inside the simulated driver, which
        # stands in for the real driver's and is not gpustats's own.
        self.measure_cpu = False
        self.cpu_seconds = 0.0
        # Per device UUID: accumulated energy (mJ) and violation time (ns), advanced lazily,
        # each device when it is read (up to the time in ``_advanced_at``).
        self._energy_mj: dict[str, float] = {}
        self._violation_ns: dict[str, dict[str, float]] = {}
        self._advance_start = monotonic()
        self._advanced_at: dict[str, float] = {}
        self._delivered: set[int] = set()
        self._lost_reported: set[tuple[int, str]] = set()      # (event set, GPU UUID)
        self._event_sets: dict[int, dict[str, int]] = {}       # set -> {GPU UUID: event mask}
        self._mig_changes: dict[int, list[str]] = {}           # set -> GPUs whose layout changed
        self._waits_interrupted = False                        # see interrupt_event_waits
        # MIG device handles name one instance (GPU UUID, instance UUID), as the driver's do: a
        # handle of a destroyed instance answers INVALID_ARGUMENT, never another instance.
        self._mig_handles: dict[int, tuple[str, str]] = {}
        self._mig_handle_ids: dict[tuple[str, str], int] = {}
        self._next_id = 1
        self._gpm_samples: dict[int, tuple[str, int | None, float] | None] = {}
        # Accounting records per GPU UUID, and when each GPU's PIDs were last read (wall µs).
        self._accounting_records: dict[str, deque] = {}
        self._accounting_cut: dict[str, int] = {}
        self._accounting_since_us = int(wall() * 1e6)
        self._previous_lib = None
        self._reset_counters(self._scenario)
        if driver_state is not None:
            self._resume_driver(driver_state)
        self.lib = self._build_library()
        self._trace("start")

    # ------------------------------------------------------------ public

    @property
    def calls(self) -> int:
        with self._lock:
            return sum(self.calls_by_function.values())

    def install(self) -> None:
        self._previous_lib = pynvml.nvmlLib
        with pynvml.libLoadLock:
            pynvml.nvmlLib = self.lib
            pynvml._nvmlGetFunctionPointer_cache.clear()

    def uninstall(self) -> None:
        if self._driver_writer is not None:
            self._driver_writer.close()
        with pynvml.libLoadLock:
            pynvml.nvmlLib = self._previous_lib
            pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlLib_refcount = 0

    @property
    def scenario(self) -> Scenario:
        return self._scenario

    # ------------------------------------------------------------ scenario and time

    def _stamp(self) -> tuple[float, int] | None:
        try:
            st = os.stat(self._path)
        except OSError:
            return None
        return (st.st_mtime, st.st_size)

    def reload(self) -> bool:
        """Look at the scenario file now, not at the next timed check; True if it was reloaded."""
        with self._lock:
            self._next_reload_check = self._monotonic() + _RELOAD_CHECK_SECONDS
            return self._reload_if_changed()

    def _maybe_reload(self) -> None:
        now = self._monotonic()
        if now < self._next_reload_check:
            return
        self._next_reload_check = now + _RELOAD_CHECK_SECONDS
        self._reload_if_changed()

    def _reload_if_changed(self) -> bool:
        """Called with the lock held."""
        stamp = self._stamp()
        if stamp == self._file_stamp or stamp is None:
            return False
        self._file_stamp = stamp
        try:
            scenario = load_scenario(self._path).nvidia_only()
        except ValueError as exc:
            log.warning("simulator: keeping the previous scenario: %s", exc)
            return False
        now = self._advance()
        before = {device.uuid for device in self._scenario.devices}
        for device in scenario.devices:
            if device.uuid not in before:
                self._advanced_at[device.uuid] = now      # a device (back) in it counts from now
        if scenario.driver_reloads > self._scenario.driver_reloads:
            self._reset_counters(scenario)
        for device in scenario.devices:
            self._energy_mj.setdefault(device.uuid, float(device.energy_counter_base_millijoules))
            self._violation_ns.setdefault(device.uuid, {})
        self._scenario_changed(scenario, stamp[0])     # MIG events, accounting records
        self._scenario = scenario
        log.info("simulator: scenario %s reloaded", self._path)
        self._trace("scenario", mono=now)
        self._wake.notify_all()              # a lost GPU or a queued MIG change for event waits
        return True

    def _trace(self, event: str, **fields) -> None:
        """One trace line, stamped on this simulator's monotonic clock (``mono``): when the
        line is written, or, for an energy read, when the counter was brought up to date (the
        caller may stop between the two)."""
        fields.setdefault("mono", self._monotonic())
        if self._scenario.trace_file is not None:
            write_trace(self._scenario.trace_file, self._wall(), event, self._scenario.trace_tag,
                        **fields)

    def _reset_counters(self, scenario: Scenario) -> None:
        self._energy_mj = {d.uuid: float(d.energy_counter_base_millijoules)
                           for d in scenario.devices}
        self._violation_ns = {d.uuid: {} for d in scenario.devices}
        self._driver_saved_at = None          # save at the next advance

    def _resume_driver(self, path: str) -> None:
        """Counters as an uninterrupted driver would have them now (same driver session)."""
        state = load_driver_state(path)
        if state is None or state[1] != self._scenario.driver_reloads:
            return
        saved_at, _, energy = state
        elapsed = max(0.0, self._boot_clock() - saved_at)
        for device in self._scenario.devices:
            if device.uuid in energy:
                # A device with an idle cycle gains its mean power: the phase it was in while
                # no daemon ran is not known to the new simulator.
                self._energy_mj[device.uuid] = energy[device.uuid] \
                    + mean_watts(device.power_watts, device.idle_cycle) * elapsed * 1000.0

    def _maybe_save_driver(self, now: float) -> None:
        if self._driver_writer is None:
            return
        if self._driver_saved_at is not None and now - self._driver_saved_at < 1.0:
            return
        self._driver_saved_at = now
        for device in self._scenario.devices:
            self._advance_device(device, now)     # every counter as of the saved time
        self._driver_writer.save(self._boot_clock(), self._scenario.driver_reloads,
                                 dict(self._energy_mj))

    def _advance(self, device: SimDevice | None = None) -> float:
        """Integrate power and violation shares of the current scenario up to now: of
        ``device`` (the one a call reads), else of every device. Returns now."""
        now = self._monotonic()
        for one in (device,) if device is not None else self._scenario.devices:
            self._advance_device(one, now)
        self._maybe_save_driver(now)
        return now

    def _advance_device(self, device: SimDevice, now: float) -> None:
        uuid = device.uuid
        advanced_at = self._advanced_at.get(uuid, self._advance_start)
        dt = now - advanced_at
        if dt <= 0:
            return
        since = advanced_at - self._installed_at
        self._advanced_at[uuid] = now
        self._energy_mj[uuid] = self._energy_mj.get(uuid, 0.0) + energy_joules(
            device.power_watts, device.idle_cycle, since, since + dt) * 1000.0
        if device.violations:
            acc = self._violation_ns.setdefault(uuid, {})
            for key, percent in device.violations:
                acc[key] = acc.get(key, 0.0) + percent / 100.0 * dt * 1e9

    # ------------------------------------------------------------ handles

    def _device_by_handle(
            self, handle: int | None) -> tuple[SimDevice, SimMigInstance | None] | None:
        if not handle:
            return None
        devices = self._scenario.devices
        if handle >= MIG_BASE:
            named = self._mig_handles.get(handle)
            if named is None:
                return None
            device = self._scenario.device(named[0])
            if device is None:
                return None
            for instance in device.mig_instances:
                if instance.uuid == named[1]:
                    return device, instance
            return None                        # destroyed since the handle was given
        position = handle - PHYSICAL_BASE
        if 0 <= position < len(devices):
            return devices[position], None
        return None

    def _handle_of(self, device: SimDevice, instance: SimMigInstance | None = None) -> int:
        if instance is None:
            return PHYSICAL_BASE + self._scenario.devices.index(device)
        key = (device.uuid, instance.uuid)
        handle = self._mig_handle_ids.get(key)
        if handle is None:
            handle = self._mig_handle_ids[key] = MIG_BASE + len(self._mig_handle_ids)
            self._mig_handles[handle] = key
        return handle

    # ------------------------------------------------------------ library construction

    def _build_library(self) -> _FakeLibrary:
        lib = _FakeLibrary()
        missing = self._scenario.missing_functions
        for name, (restype, argtypes, impl) in self._functions().items():
            if name in missing:
                continue
            setattr(lib, name, CFUNCTYPE(restype, *argtypes)(self._wrap(name, impl)))
        return lib

    def _wrap(self, name: str, impl):
        lock, counted, monotonic = self._lock, self.calls_by_function, self._monotonic

        def answer(*args):
            with lock:
                counted[name] += 1
                if monotonic() >= self._next_reload_check:
                    self._maybe_reload()
                try:
                    return impl(*args)
                except Exception:  # a fake must never crash the caller
                    log.exception("simulator: %s failed", getattr(impl, "__name__", impl))
                    return 999

        def call(*args):
            if self.measure_cpu or self._scenario.call_delay_seconds > 0:
                return slow(args)
            return answer(*args)

        def slow(args):
            delay = self._scenario.call_delay_seconds
            if delay > 0:
                time.sleep(delay)          # outside the lock: a slow driver, not a dead one
            started = time.thread_time() if self.measure_cpu else None
            try:
                return answer(*args)
            finally:
                if started is not None:
                    self.cpu_seconds += time.thread_time() - started
        return call

    def _functions(self) -> dict[str, tuple]:
        v, u, ull, s = c_void_p, c_uint, c_ulonglong, c_char_p
        d = self._with_device       # (handle, *args) -> checks init, lost, and passes the device
        return {
            "nvmlInitWithFlags": (c_int, [u], self._init),
            "nvmlInit_v2": (c_int, [], lambda: self._init(0)),
            "nvmlShutdown": (c_int, [], self._shutdown),
            "nvmlSystemGetDriverVersion": (c_int, [v, u], self._driver_version),
            "nvmlSystemGetNVMLVersion": (c_int, [v, u], self._nvml_version),
            "nvmlSystemGetCudaDriverVersion_v2": (c_int, [v], self._cuda_version),
            "nvmlDeviceGetCount_v2": (c_int, [v], self._count),
            "nvmlDeviceGetHandleByIndex_v2": (c_int, [u, v], self._handle_by_index),
            "nvmlDeviceGetHandleByUUID": (c_int, [s, v], self._handle_by_uuid),
            "nvmlDeviceGetIndex": (c_int, [v, v], d(self._index)),
            "nvmlDeviceGetName": (c_int, [v, v, u], d(self._name, mig=True)),
            "nvmlDeviceGetUUID": (c_int, [v, v, u], d(self._uuid, mig=True)),
            "nvmlDeviceGetMinorNumber": (c_int, [v, v], d(self._minor, field="minor_number")),
            "nvmlDeviceGetPciInfo_v3": (c_int, [v, v], d(self._pci, field="pci_info")),
            "nvmlDeviceGetArchitecture": (c_int, [v, v], d(self._architecture)),
            "nvmlDeviceGetMemoryInfo": (c_int, [v, v], d(self._memory, mig=True, field="memory")),
            "nvmlDeviceGetMemoryInfo_v2": (c_int, [v, v],
                                           d(self._memory_v2, mig=True, field="memory")),
            "nvmlDeviceGetUtilizationRates": (c_int, [v, v],
                                              d(self._utilization, field="utilization")),
            "nvmlDeviceGetPowerUsage": (c_int, [v, v], d(self._power, field="power")),
            "nvmlDeviceGetTotalEnergyConsumption": (c_int, [v, v], d(self._energy, field="energy")),
            "nvmlDeviceGetPowerManagementLimit": (c_int, [v, v],
                                                  d(self._power_limit, field="power_limit")),
            "nvmlDeviceGetEnforcedPowerLimit": (c_int, [v, v],
                                                d(self._power_limit, field="power_limit")),
            "nvmlDeviceGetTemperature": (c_int, [v, u, v],
                                         d(self._temperature, field="temperature")),
            "nvmlDeviceGetCurrentClocksEventReasons": (
                c_int, [v, v], d(self._clocks_reasons, field="clocks_event_reasons")),
            "nvmlDeviceGetCurrentClocksThrottleReasons": (
                c_int, [v, v], d(self._clocks_reasons, field="clocks_event_reasons")),
            "nvmlDeviceGetSupportedClocksEventReasons": (
                c_int, [v, v], d(self._supported_reasons, field="clocks_event_reasons")),
            "nvmlDeviceGetViolationStatus": (c_int, [v, u, v],
                                             d(self._violation, field="violations")),
            "nvmlDeviceGetPcieThroughput": (c_int, [v, u, v], d(self._pcie, field="pcie")),
            "nvmlDeviceGetFieldValues": (c_int, [v, c_int, v], d(self._field_values)),
            "nvmlDeviceGetClockInfo": (c_int, [v, u, v], d(self._clock_info)),
            "nvmlDeviceGetEncoderUtilization": (c_int, [v, v, v], d(self._encoder_utilization)),
            "nvmlDeviceGetDecoderUtilization": (c_int, [v, v, v], d(self._decoder_utilization)),
            "nvmlDeviceGetPcieReplayCounter": (c_int, [v, v],
                                               d(self._pcie_replay_counter, field="pcie_replay")),
            "nvmlDeviceGetRemappedRows": (c_int, [v, v, v, v, v],
                                          d(self._remapped_rows, field="remapped_rows")),
            "nvmlDeviceGetComputeRunningProcesses_v3": (
                c_int, [v, v, v], d(self._processes, mig=True, field="processes")),
            "nvmlDeviceGetMPSComputeRunningProcesses_v3": (
                c_int, [v, v, v], d(self._mps_processes, mig=True, field="processes")),
            "nvmlDeviceGetGraphicsRunningProcesses_v3": (
                c_int, [v, v, v], d(self._no_processes, mig=True, field="processes")),
            "nvmlDeviceGetProcessUtilization": (
                c_int, [v, v, v, ull], d(self._process_utilization, field="process_utilization")),
            "nvmlDeviceGetPerformanceState": (c_int, [v, v], d(self._pstate, field="pstate")),
            "nvmlDeviceGetSupportedPerformanceStates": (
                c_int, [v, v, u], d(self._supported_pstates, field="pstate")),
            "nvmlDeviceGetAccountingMode": (c_int, [v, v],
                                            d(self._accounting_mode, field="accounting")),
            "nvmlDeviceGetAccountingBufferSize": (
                c_int, [v, v], d(self._accounting_buffer_size, field="accounting")),
            "nvmlDeviceGetAccountingPids": (c_int, [v, v, v],
                                            d(self._accounting_pids, field="accounting")),
            "nvmlDeviceGetAccountingStats": (c_int, [v, u, v],
                                             d(self._accounting_stats, field="accounting")),
            "nvmlDeviceGetMigMode": (c_int, [v, v, v], d(self._mig_mode, field="mig")),
            "nvmlDeviceGetMaxMigDeviceCount": (c_int, [v, v], d(self._max_mig, field="mig")),
            "nvmlDeviceGetMigDeviceHandleByIndex": (c_int, [v, u, v],
                                                    d(self._mig_handle, field="mig")),
            "nvmlDeviceGetGpuInstanceId": (c_int, [v, v], d(self._gpu_instance_id, mig=True)),
            "nvmlDeviceGetComputeInstanceId": (c_int, [v, v],
                                               d(self._compute_instance_id, mig=True)),
            "nvmlDeviceIsMigDeviceHandle": (c_int, [v, v], d(self._is_mig, mig=True)),
            "nvmlDeviceGetDeviceHandleFromMigDeviceHandle": (c_int, [v, v],
                                                             d(self._parent_handle, mig=True)),
            "nvmlEventSetCreate": (c_int, [v], self._event_set_create),
            "nvmlDeviceGetSupportedEventTypes": (c_int, [v, v],
                                                 d(self._supported_events, field="events")),
            "nvmlDeviceRegisterEvents": (c_int, [v, ull, v],
                                         d(self._register_events, field="events")),
            "nvmlEventSetWait_v2": (c_int, [v, v, u], self._event_wait),
            "nvmlEventSetFree": (c_int, [v], self._event_set_free),
            "nvmlGpmQueryDeviceSupport": (c_int, [v, v], d(self._gpm_support, mig=True)),
            "nvmlGpmSampleAlloc": (c_int, [v], self._gpm_alloc),
            "nvmlGpmSampleFree": (c_int, [v], self._gpm_free),
            "nvmlGpmSampleGet": (c_int, [v, v], d(self._gpm_sample, mig=True, field="gpm")),
            "nvmlGpmMigSampleGet": (c_int, [v, u, v], d(self._gpm_mig_sample, field="gpm")),
            "nvmlGpmMetricsGet": (c_int, [v], self._gpm_metrics),
        }

    def _with_device(self, impl, *, mig: bool = False, field: str | None = None):
        """Checks init, the handle, GPU_IS_LOST, MIG-handle support and NOT_SUPPORTED fields."""
        def call(handle, *args):
            if self._refcount <= 0:
                return UNINITIALIZED
            found = self._device_by_handle(handle)
            if found is None:
                return INVALID_ARGUMENT
            device, instance = found
            if device.lost:
                return GPU_IS_LOST
            if instance is not None and not mig:
                return NOT_SUPPORTED
            if field is not None and field in device.unsupported:
                return NOT_SUPPORTED
            return impl(device, instance, *args)
        call.__name__ = getattr(impl, "__name__", "call")
        return call

    # ------------------------------------------------------------ init and system

    def _init(self, flags: int) -> int:
        self._init_attempts += 1
        if self._init_attempts <= self._scenario.init_failures:
            return DRIVER_NOT_LOADED
        self._refcount += 1
        return SUCCESS

    def _shutdown(self) -> int:
        if self._refcount <= 0:
            return UNINITIALIZED
        self._refcount -= 1
        return SUCCESS

    def _driver_version(self, buf: int, length: int) -> int:
        return write_string(buf, length, self._scenario.driver_version)

    def _nvml_version(self, buf: int, length: int) -> int:
        return write_string(buf, length, "13." + self._scenario.driver_version)

    def _cuda_version(self, out: int) -> int:
        set_out(out, c_int, 13000)
        return SUCCESS

    def _count(self, out: int) -> int:
        if self._refcount <= 0:
            return UNINITIALIZED
        set_out(out, c_uint, len(self._scenario.devices))
        return SUCCESS

    def _handle_by_index(self, index: int, out: int) -> int:
        if self._refcount <= 0:
            return UNINITIALIZED
        for device in self._scenario.devices:
            if device.index == index:
                if device.lost:
                    return GPU_IS_LOST
                set_out(out, c_void_p, self._handle_of(device))
                return SUCCESS
        return INVALID_ARGUMENT

    def _handle_by_uuid(self, uuid: bytes, out: int) -> int:
        if self._refcount <= 0:
            return UNINITIALIZED
        wanted = (uuid or b"").decode()
        for device in self._scenario.devices:
            if device.lost:
                # The driver scans all GPUs (NVML API reference, nvmlDeviceGetCount).
                return GPU_IS_LOST
            if device.uuid == wanted:
                set_out(out, c_void_p, self._handle_of(device))
                return SUCCESS
            for instance in device.mig_instances:
                if instance.uuid == wanted:
                    set_out(out, c_void_p, self._handle_of(device, instance))
                    return SUCCESS
        return NOT_FOUND

    # ------------------------------------------------------------ identity and readings

    def _index(self, device: SimDevice, instance: SimMigInstance | None, out: int) -> int:
        set_out(out, c_uint, device.index)
        return SUCCESS

    def _name(self, device: SimDevice, instance: SimMigInstance | None, buf: int,
              length: int) -> int:
        name = device.name if instance is None else f"{device.name} MIG {instance.profile or ''}"
        return write_string(buf, length, name.strip())

    def _uuid(self, device: SimDevice, instance: SimMigInstance | None, buf: int,
              length: int) -> int:
        return write_string(buf, length, device.uuid if instance is None else instance.uuid)

    def _minor(self, device: SimDevice, instance: SimMigInstance | None, out: int) -> int:
        set_out(out, c_uint, device.minor)
        return SUCCESS

    def _pci(self, device: SimDevice, instance: SimMigInstance | None, out: int) -> int:
        info = struct_at(out, pynvml.nvmlPciInfo_t)
        bus_id = device.pci_bus_id.encode()
        info.busId = bus_id
        info.busIdLegacy = bus_id[-12:] if len(bus_id) > 15 else bus_id
        parts = device.pci_bus_id.replace(".", ":").split(":")
        try:
            info.domain, info.bus, info.device = (int(parts[0], 16), int(parts[1], 16),
                                                  int(parts[2], 16))
        except (IndexError, ValueError):
            pass
        info.pciDeviceId = 0x233010DE
        return SUCCESS

    def _architecture(self, device: SimDevice, instance: SimMigInstance | None, out: int) -> int:
        set_out(out, c_uint, device.architecture)
        return SUCCESS

    def _memory_figures(self, device: SimDevice,
                        instance: SimMigInstance | None) -> tuple[int, int, int]:
        """(total, reserved, used excluding the reservation)."""
        if instance is None:
            total = device.memory_total_bytes
            reserved = min(device.memory_reserved_bytes, total)
            return total, reserved, min(device.memory_used_bytes, total - reserved)
        used = sum(p.memory_used_bytes or 0 for p in self._scenario.processes
                   if p.device == device.uuid and p.gpu_instance_id == instance.gpu_instance_id)
        return instance.memory_total_bytes, 0, min(used, instance.memory_total_bytes)

    def _memory(self, device: SimDevice, instance: SimMigInstance | None, out: int) -> int:
        total, reserved, used = self._memory_figures(device, instance)
        mem = struct_at(out, pynvml.c_nvmlMemory_t)
        # v1 counts the driver's reservation as used (nvml.h, nvmlMemory_v2_t).
        mem.total, mem.used, mem.free = total, used + reserved, total - used - reserved
        return SUCCESS

    def _memory_v2(self, device: SimDevice, instance: SimMigInstance | None, out: int) -> int:
        mem = struct_at(out, pynvml.c_nvmlMemory_v2_t)
        if mem.version != pynvml.nvmlMemory_v2:
            return ARGUMENT_VERSION_MISMATCH
        if "memory_reserved" in device.unsupported:
            return NOT_SUPPORTED
        total, reserved, used = self._memory_figures(device, instance)
        mem.total, mem.reserved, mem.used, mem.free = total, reserved, used, total - used - reserved
        return SUCCESS

    def _utilization(self, device: SimDevice, instance: SimMigInstance | None, out: int) -> int:
        if device.mig_instances:
            return NOT_SUPPORTED          # not supported on MIG-enabled GPUs (NVML API reference)
        util = struct_at(out, pynvml.c_nvmlUtilization_t)
        util.gpu, util.memory = device.utilization_percent, device.memory_utilization_percent
        if self._idling(device):
            util.gpu = util.memory = 0
        return SUCCESS

    def _idling(self, device: SimDevice) -> bool:
        """In an idle phase of the device's idle cycle: no duty cycle, idle power."""
        return device.idle_cycle is not None and is_idle(
            device.idle_cycle, self._monotonic() - self._installed_at)

    def _power_watts(self, device: SimDevice) -> float:
        """The device's power now (its ``power_watts``, or its idle cycle's phase)."""
        return power_at(device.power_watts, device.idle_cycle,
                        self._monotonic() - self._installed_at)

    def _power(self, device: SimDevice, instance: SimMigInstance | None, out: int) -> int:
        set_out(out, c_uint, int(round(self._power_watts(device) * 1000)))
        return SUCCESS

    def _energy(self, device: SimDevice, instance: SimMigInstance | None, out: int) -> int:
        advanced_to = self._advance(device)
        set_out(out, c_ulonglong, int(self._energy_mj.get(device.uuid, 0.0)))
        self._trace("energy", uuid=device.uuid, mj=int(self._energy_mj.get(device.uuid, 0.0)),
                    mono=advanced_to)
        return SUCCESS

    def _power_limit(self, device: SimDevice, instance: SimMigInstance | None, out: int) -> int:
        set_out(out, c_uint, int(round(device.power_limit_watts * 1000)))
        return SUCCESS

    def _temperature(self, device: SimDevice, instance: SimMigInstance | None, sensor: int,
                     out: int) -> int:
        if sensor != 0:
            return INVALID_ARGUMENT
        set_out(out, c_uint, device.temperature_celsius)
        return SUCCESS

    def _clocks_reasons(self, device: SimDevice, instance: SimMigInstance | None, out: int) -> int:
        set_out(out, c_ulonglong, device.clocks_event_reasons)
        return SUCCESS

    def _supported_reasons(self, device: SimDevice, instance: SimMigInstance | None,
                           out: int) -> int:
        set_out(out, c_ulonglong, 0x7FF)
        return SUCCESS

    def _violation(self, device: SimDevice, instance: SimMigInstance | None, policy: int,
                   out: int) -> int:
        key = VIOLATION_POLICY_KEYS.get(policy)
        if key is None:
            return NOT_SUPPORTED
        self._advance(device)
        viol = struct_at(out, pynvml.c_nvmlViolationTime_t)
        viol.referenceTime = int(self._wall() * 1e6)
        viol.violationTime = int(self._violation_ns.get(device.uuid, {}).get(key, 0.0))
        return SUCCESS

    def _pcie(self, device: SimDevice, instance: SimMigInstance | None, counter: int,
              out: int) -> int:
        rate = {0: device.pcie_tx_bytes_per_second, 1: device.pcie_rx_bytes_per_second}.get(counter)
        if rate is None:
            return INVALID_ARGUMENT
        set_out(out, c_uint, int(rate / 1024))     # KB/s
        return SUCCESS

    # ------------------------------------------------------------ processes

    def _process_list(self, device: SimDevice, instance: SimMigInstance | None, *,
                      mps_only: bool = False, between_ticks: bool = False):
        """The device's (or instance's) processes: those in the driver's list, and with
        ``between_ticks`` also those that run only between its reads."""
        procs: Sequence[SimProcess] = self._scenario.processes_by_device.get(device.uuid, ())
        if not between_ticks:
            procs = [p for p in procs if not p.between_ticks]
        if instance is not None:
            procs = [p for p in procs if p.gpu_instance_id == instance.gpu_instance_id]
        if mps_only:
            procs = [p for p in procs if p.mps]
        return procs

    def _write_processes(self, device: SimDevice, procs: Sequence[SimProcess], count_ptr: int,
                         infos: int) -> int:
        count = struct_at(count_ptr, c_uint)
        capacity, count.value = count.value, len(procs)
        if not procs:
            return SUCCESS
        if infos is None or capacity < len(procs):
            return INSUFFICIENT_SIZE
        array = struct_at(infos, _ProcessInfo * len(procs))
        mig_on = bool(device.mig_instances)
        for i, p in enumerate(procs):
            info = array[i]
            info.pid = p.pid
            info.usedGpuMemory = (p.memory_used_bytes if p.memory_used_bytes is not None
                                  else pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value)
            gi = p.gpu_instance_id if mig_on and p.gpu_instance_id is not None else NO_INSTANCE
            info.gpuInstanceId = gi
            info.computeInstanceId = 0 if gi != NO_INSTANCE else NO_INSTANCE
        return SUCCESS

    def _processes(self, device: SimDevice, instance: SimMigInstance | None, count_ptr: int,
                   infos: int) -> int:
        self._trace("read", uuid=device.uuid, what="processes")
        return self._write_processes(device, self._process_list(device, instance), count_ptr, infos)

    def _mps_processes(self, device: SimDevice, instance: SimMigInstance | None, count_ptr: int,
                       infos: int) -> int:
        return self._write_processes(device, self._process_list(device, instance, mps_only=True),
                                     count_ptr, infos)

    def _no_processes(self, device: SimDevice, instance: SimMigInstance | None, count_ptr: int,
                      infos: int) -> int:
        return self._write_processes(device, [], count_ptr, infos)

    def _process_utilization(self, device: SimDevice, instance: SimMigInstance | None,
                             samples: int, count_ptr: int, last_seen: int) -> int:
        if device.mig_instances:
            return NOT_SUPPORTED
        self._trace("read", uuid=device.uuid, what="process_utilization")
        now_us = int(self._wall() * 1e6)
        busy = [p for p in self._process_list(device, None, between_ticks=True)
                if p.sm_util_percent is not None]
        if not busy or now_us <= last_seen or self._idling(device):
            # Nothing ran since the last sample: in an idle phase the processes keep their
            # contexts and compute nothing.
            return NOT_FOUND
        count = struct_at(count_ptr, c_uint)
        capacity, count.value = count.value, len(busy)
        if samples is None or capacity < len(busy):
            return INSUFFICIENT_SIZE
        array = struct_at(samples, _UtilizationSample * len(busy))
        for i, p in enumerate(busy):
            sample = array[i]
            sample.pid, sample.timeStamp, sample.smUtil = p.pid, now_us, p.sm_util_percent
            sample.memUtil = sample.encUtil = sample.decUtil = 0
        return SUCCESS

    # ------------------------------------------------------------ MIG

    def _mig_mode(self, device: SimDevice, instance: SimMigInstance | None, current: int,
                  pending: int) -> int:
        mode = 1 if device.mig_instances else 0
        set_out(current, c_uint, mode)
        set_out(pending, c_uint, mode)
        return SUCCESS

    def _max_mig(self, device: SimDevice, instance: SimMigInstance | None, out: int) -> int:
        set_out(out, c_uint, 7 if device.mig_instances else 0)
        return SUCCESS

    def _mig_handle(self, device: SimDevice, instance: SimMigInstance | None, index: int,
                    out: int) -> int:
        if not device.mig_instances:
            return INVALID_ARGUMENT
        if index >= len(device.mig_instances):
            return NOT_FOUND
        set_out(out, c_void_p, self._handle_of(device, device.mig_instances[index]))
        return SUCCESS

    def _gpu_instance_id(self, device: SimDevice, instance: SimMigInstance | None, out: int) -> int:
        if instance is None:
            return INVALID_ARGUMENT
        set_out(out, c_uint, instance.gpu_instance_id)
        return SUCCESS

    def _compute_instance_id(self, device: SimDevice, instance: SimMigInstance | None,
                             out: int) -> int:
        if instance is None:
            return INVALID_ARGUMENT
        set_out(out, c_uint, instance.compute_instance_id)
        return SUCCESS

    def _is_mig(self, device: SimDevice, instance: SimMigInstance | None, out: int) -> int:
        set_out(out, c_uint, 1 if instance is not None else 0)
        return SUCCESS

    def _parent_handle(self, device: SimDevice, instance: SimMigInstance | None, out: int) -> int:
        if instance is None:
            return INVALID_ARGUMENT
        set_out(out, c_void_p, self._handle_of(device))
        return SUCCESS
