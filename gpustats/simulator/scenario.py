"""Simulator scenario files: YAML parsed into frozen dataclasses (pure; ``ValueError`` on bad
input).

Top level (every key optional except ``devices``):

- ``driver_version`` (str, default ``"580.65.06"``)
- ``init_failures`` (int): the first N ``nvmlInitWithFlags`` calls fail with DRIVER_NOT_LOADED
- ``missing_functions`` (list of C symbol names): absent from the fake library, so pynvml raises
  FunctionNotFound (read when the simulator is installed)
- ``driver_reloads`` (int): when it grows on a reload, every energy counter restarts at 0
- ``call_delay_seconds`` (number, default 0): every NVML call takes this long before it
  answers (a driver that hangs on a GPU in trouble)
- ``devices`` (list), ``processes`` (list), ``xid_events`` (list), as below.
- ``trace_file`` (path) and ``trace_tag`` (str): the simulator appends a JSON line to the file
  on each (re)load of the scenario and each energy counter read, tagged with ``trace_tag``
  (see ``trace.py``; for checkers that need the ground truth's timing)

Device keys: ``uuid`` (required, unique), ``vendor`` (``nvidia``, the default, ``amd`` or
``intel``: see "AMD and Intel devices" below), ``name`` (default ``NVIDIA Simulated GPU``),
``architecture`` (kepler … blackwell; default hopper), ``index`` and ``minor`` (default: the
position among the NVIDIA devices), ``pci_bus_id`` (default ``00000000:<index+1>:00.0``),
``memory_total_bytes`` (default 80 GiB), ``memory_used_bytes`` (default: the sum of its
processes' memory), ``utilization_percent`` and ``memory_utilization_percent`` (default 0),
``power_watts`` (default 70; the energy counter integrates it over real time),
``energy_counter_base_millijoules`` (default 0),
``power_limit_watts`` (default 700), ``temperature_celsius`` (default 40),
``memory_temperature_celsius`` (default 45), ``sm_clock_mhz`` (default 1980),
``memory_clock_mhz`` (default 2619), ``pcie_replay_count`` (cumulative, default 0),
``encoder_utilization_percent`` and ``decoder_utilization_percent`` (default 0; NOT_SUPPORTED
under MIG), ``memory_reserved_bytes`` (driver reservation, default 0: nvmlMemory_v2 reports it
apart, v1 counts it as used), ``remapped_rows`` (``{correctable, uncorrectable, pending,
failure}``, default 0/0/false/false; NOT_SUPPORTED under MIG), ``unsupported`` (list of:
memory, utilization, power, energy, power_limit, temperature, memory_temperature, sm_clock,
memory_clock, pcie_replay, encoder_utilization, decoder_utilization, memory_reserved,
remapped_rows, processes, process_utilization, clocks_event_reasons, violations, pcie, gpm,
events, ecc, mig, minor_number, pci_info — each answers NOT_SUPPORTED, through its own call and
as a field of ``nvmlDeviceGetFieldValues``; ``mig_events``: the GPU offers no MIG configuration
change events; ``memory_reserved`` makes nvmlMemory_v2 answer
NOT_SUPPORTED; ``fields`` makes every field of ``nvmlDeviceGetFieldValues`` answer
NOT_SUPPORTED while the single calls still answer, ``fields.<name>`` only that one, for power,
energy, memory_temperature, violations, pcie_replay, remapped_rows), ``lost`` (bool: every call
for this GPU
answers GPU_IS_LOST), ``clocks_event_reasons`` (list of names — gpu_idle, applications_clocks,
sw_power_cap, hw_slowdown, sync_boost, sw_thermal, hw_thermal, hw_power_brake, display_clock,
board_limit, reliability — or an int bitmask; default none set), ``violations``
(``{power_percent, thermal_percent, sync_boost_percent, board_limit_percent}``: the cumulative
violation time grows at that share of real time; default 0), ``pcie_tx_bytes_per_second`` and
``pcie_rx_bytes_per_second`` (default 0), ``gpm`` (mapping; present means GPM is supported:
``sm_active_percent, sm_occupancy_percent, dram_active_percent, graphics_active_percent,
pcie_tx_bytes_per_second, pcie_rx_bytes_per_second, nvlink_tx_bytes_per_second,
nvlink_rx_bytes_per_second``; a metric left out answers NOT_SUPPORTED), ``mig_instances``
(list; present and non-empty means MIG mode is on: ``gpu_instance_id`` (required),
``compute_instance_id``
(default 0), ``profile`` (e.g. ``1g.10gb``), ``memory_total_bytes``, ``uuid`` (default derived),
``gpm``), ``events_supported`` (default true), ``idle_cycle`` (``{watts, idle_seconds,
busy_seconds, start}``: the GPU draws ``watts`` in idle phases and ``power_watts`` in busy
ones, alternating from the simulator's start, idle first unless ``start: busy``, and its duty
cycle and its processes' utilization samples read 0 while idle; see ``idle_cycle.py``),
``pstate`` (the performance state nvmlDeviceGetPerformanceState gives, 0..15, default 0; in an
idle phase of ``idle_cycle`` the lowest of ``supported_pstates``), ``supported_pstates`` (list of
0..15, default P0 and ``pstate``; unsupported ``pstate`` turns both calls off),
``accounting`` (bool, default false: NVML's accounting mode is on; unsupported ``accounting``
makes its calls answer NOT_SUPPORTED, as they do with the mode off) and
``accounting_buffer_size`` (the records the driver keeps, default 4000; the oldest go first).
With accounting on, each listed process has a running record from when it appeared (the
scenario's writing, or the first read of the records), ended when it leaves the scenario (at
its writing); a ``between_ticks`` process ends its run at each read of the records and starts
another under the same PID (so its records cover all the time since the first read), with its
``sm_util_percent`` (else 0) as the run's GPU utilization.
Rewriting ``mig_instances`` while MIG stays on is a reconfiguration, as the MIG manager makes one:
instances left out are destroyed (their
handles answer INVALID_ARGUMENT), new ones created, and each event set registered for it gets
one ``nvmlEventMigConfigChange`` for that GPU.

Process keys: ``pid`` (required), ``device`` (a device UUID, required), ``sm_util_percent``
(present: the process has utilization samples), ``memory_used_bytes``, ``gpu_instance_id`` (MIG),
``mps`` (bool: also listed as an MPS client), ``between_ticks`` (bool: the process drops its
CUDA context before every read of the process list and makes it again after, so it is never
listed, while its SM work shows in the utilization samples and, with its device's accounting
on, its runs in the accounting records).

AMD and Intel devices (``vendor: amd`` or ``intel``) are not NVML's: ``SimulatedNvml`` leaves
them and their processes out (NVIDIA's indexes and handles are as without them), and
``SimulatedDrm`` (``drm.py``) renders them as the kernel's sysfs and DRM fdinfo files. They take
``uuid``, ``name`` (default ``AMD Instinct MI300X`` / ``Intel(R) Data Center GPU Flex 170``),
``driver`` (intel: ``xe``, the default, or ``i915``; amd: ``amdgpu``), ``index`` and ``minor``
(the card number N of ``cardN`` and ``renderD<128+N>``, below 64; default: the position among
the AMD and Intel devices), ``pci_bus_id`` (sysfs form ``0000:3b:00.0``, NVML's form accepted;
default ``0000:<number of NVIDIA devices + that position + 1>:00.0``; unique), ``pci_device_id``
(default 0x74a1, MI300X / 0x56c0, Flex 170) and ``pci_class`` (default 0x038000, a display
controller; MI300X's is 0x120000), ``memory_total_bytes``, ``memory_used_bytes``,
``power_watts``, ``power_limit_watts``, ``temperature_celsius``, ``memory_temperature_celsius``
and ``idle_cycle`` as above; amd also ``utilization_percent`` (``gpu_busy_percent``) and
``memory_utilization_percent`` (``mem_busy_percent``); intel also
``energy_counter_base_millijoules``. ``unsupported`` takes memory, utilization, power,
power_limit, temperature, memory_temperature, unique_id (each leaves its sysfs files out) and
processes (fdinfo without any ``drm-`` line, as a kernel before 5.19 writes it). Any other key
(MIG, GPM, accounting, pstates, clocks, ECC, ``lost``, …) is NVML's and a ValueError on them,
as are XID events. Their processes take ``pid``, ``device``, ``sm_util_percent`` (the share of
real time its engine is busy, times the class's engine count), ``memory_used_bytes`` (its VRAM),
``engine`` (the engine class as the driver's fdinfo names it; default amdgpu ``gfx``, i915
``render``, xe ``rcs``), ``fds`` (default 1: file descriptors open on its one DRM client, as
after a dup) and ``shares_client_of`` (a PID on the same device with a client of its own: this
process holds that client too, as after a fork or an fd passed over a socket: the same
``drm-client-id`` and engine counters, and no ``sm_util_percent`` of its own);
``gpu_instance_id``, ``mps`` and ``between_ticks`` are a ValueError on them, and
``engine`` and ``fds`` on an NVIDIA GPU's process.

XID event keys: ``device`` (UUID), ``xid`` (int, for ``type: xid``, the default),
``type`` (``xid``, ``single_bit_ecc`` or ``double_bit_ecc``), ``after_seconds`` (since the
simulator was installed; default 0). Each is delivered once through ``nvmlEventSetWait_v2``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from gpustats.documents import load_yaml, read_parsed
from gpustats.simulator.drm_vendors import (
    DEFAULT_DEVICE_IDS, DEFAULT_NAMES, DEFAULT_PCI_CLASS, DRIVERS, ENGINES, NVIDIA, VENDORS,
)
from gpustats.simulator.idle_cycle import IdleCycle
from gpustats.simulator.scenario_keys import check_scenario_keys

GIB = 1024 ** 3
MAX_SCENARIO_BYTES = 16 << 20      # a scenario of thousands of simulated processes fits

ARCHITECTURES = {"kepler": 2, "maxwell": 3, "pascal": 4, "volta": 5, "turing": 6, "ampere": 7,
                 "ada": 8, "hopper": 9, "blackwell": 10}
# Readings that nvmlDeviceGetFieldValues also gives (fields.<name> turns off only the field).
FIELD_READINGS = ("power", "energy", "memory_temperature", "violations", "pcie_replay",
                  "remapped_rows")
UNSUPPORTABLE = frozenset({
    "memory", "utilization", "power", "energy", "power_limit", "temperature", "processes",
    "process_utilization", "clocks_event_reasons", "violations", "pcie", "gpm", "events", "ecc",
    "mig", "mig_events", "minor_number", "pci_info", "memory_temperature", "sm_clock",
    "memory_clock", "pcie_replay", "encoder_utilization", "decoder_utilization", "memory_reserved",
    "remapped_rows", "fields", *(f"fields.{name}" for name in FIELD_READINGS), "pstate",
    "accounting",
})
MAX_PSTATE = 15
REMAPPED_ROWS_KEYS = ("correctable", "uncorrectable", "pending", "failure")
CLOCKS_EVENT_BITS = {
    "gpu_idle": 0x1, "applications_clocks": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
    "sync_boost": 0x10, "sw_thermal": 0x20, "hw_thermal": 0x40, "hw_power_brake": 0x80,
    "display_clock": 0x100, "board_limit": 0x200, "reliability": 0x400,
}
VIOLATION_KEYS = ("power_percent", "thermal_percent", "sync_boost_percent", "board_limit_percent")
GPM_KEYS = ("sm_active_percent", "sm_occupancy_percent", "dram_active_percent",
            "graphics_active_percent", "pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second",
            "nvlink_tx_bytes_per_second", "nvlink_rx_bytes_per_second", "tensor_active_percent")
EVENT_TYPES = ("xid", "single_bit_ecc", "double_bit_ecc")
# The device keys an AMD or Intel device takes; the others are NVML's and refused on one.
DRM_DEVICE_KEYS = frozenset({
    "uuid", "vendor", "driver", "name", "index", "minor", "pci_bus_id", "pci_device_id",
    "pci_class", "memory_total_bytes", "memory_used_bytes", "power_watts", "power_limit_watts",
    "temperature_celsius", "memory_temperature_celsius", "idle_cycle", "unsupported"})
VENDOR_DEVICE_KEYS = {"amd": frozenset({"utilization_percent", "memory_utilization_percent"}),
                      "intel": frozenset({"energy_counter_base_millijoules"})}
DRM_ONLY_DEVICE_KEYS = frozenset({"driver", "pci_device_id", "pci_class"})
DRM_UNSUPPORTABLE = frozenset({"memory", "utilization", "power", "power_limit", "temperature",
                               "memory_temperature", "processes", "unique_id"})
NVML_PROCESS_KEYS = frozenset({"gpu_instance_id", "mps", "between_ticks"})
DRM_PROCESS_KEYS = frozenset({"engine", "fds", "shares_client_of"})
MAX_DRM_CARDS = 64          # card0..63; render nodes renderD128..191
MAX_FDS = 64
PCI_ADDRESS = re.compile(r"([0-9a-fA-F]{1,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")


@dataclass(frozen=True)
class SimMigInstance:
    gpu_instance_id: int
    compute_instance_id: int
    profile: str | None
    memory_total_bytes: int
    uuid: str
    gpm: tuple[tuple[str, float], ...] | None


@dataclass(frozen=True)
class SimDevice:
    uuid: str
    name: str
    architecture: int
    index: int
    minor: int
    pci_bus_id: str
    memory_total_bytes: int
    memory_used_bytes: int
    utilization_percent: int
    memory_utilization_percent: int
    power_watts: float
    energy_counter_base_millijoules: int
    power_limit_watts: float
    temperature_celsius: int
    memory_temperature_celsius: int
    sm_clock_mhz: int
    memory_clock_mhz: int
    pcie_replay_count: int
    encoder_utilization_percent: int
    decoder_utilization_percent: int
    memory_reserved_bytes: int
    remapped_rows: tuple[int, int, bool, bool]
    unsupported: frozenset[str]
    lost: bool
    clocks_event_reasons: int
    violations: tuple[tuple[str, float], ...]
    pcie_tx_bytes_per_second: float
    pcie_rx_bytes_per_second: float
    gpm: tuple[tuple[str, float], ...] | None
    mig_instances: tuple[SimMigInstance, ...]
    events_supported: bool
    idle_cycle: IdleCycle | None = None
    pstate: int = 0
    supported_pstates: tuple[int, ...] = (0,)
    accounting: bool = False
    accounting_buffer_size: int = 4000
    vendor: str = NVIDIA
    driver: str | None = None          # amdgpu, i915 or xe; None for an NVIDIA GPU
    pci_device_id: int | None = None   # AMD and Intel only, as are the next
    pci_class: int | None = None

    @property
    def is_drm(self) -> bool:
        """An AMD or Intel GPU: rendered as sysfs and fdinfo trees, not served by NVML."""
        return self.vendor != NVIDIA


@dataclass(frozen=True)
class SimProcess:
    pid: int
    device: str
    sm_util_percent: int | None
    memory_used_bytes: int | None
    gpu_instance_id: int | None
    mps: bool
    between_ticks: bool = False      # never in the process list; its samples still come
    engine: str | None = None        # DRM: the engine class it runs on (None: the driver's first)
    fds: int = 1                     # DRM: its file descriptors on the one client
    # DRM: the PID whose client this process holds too (a dup'ed, inherited or passed fd):
    # the same drm-client-id and engine counters, no work of its own.
    shares_client_of: int | None = None


@dataclass(frozen=True)
class SimEvent:
    device: str
    kind: str
    xid: int
    after_seconds: float


@dataclass(frozen=True)
class Scenario:
    devices: tuple[SimDevice, ...]
    processes: tuple[SimProcess, ...] = ()
    xid_events: tuple[SimEvent, ...] = ()
    driver_version: str = "580.65.06"
    init_failures: int = 0
    missing_functions: frozenset[str] = frozenset()
    driver_reloads: int = 0
    call_delay_seconds: float = 0.0
    trace_file: str | None = None
    trace_tag: str | None = None

    @cached_property
    def processes_by_device(self) -> dict[str, tuple[SimProcess, ...]]:
        """Each device's processes, in the scenario's order (worked out once per scenario)."""
        out: dict[str, list[SimProcess]] = {}
        for p in self.processes:
            out.setdefault(p.device, []).append(p)
        return {uuid: tuple(procs) for uuid, procs in out.items()}

    def device(self, uuid: str) -> SimDevice | None:
        for device in self.devices:
            if device.uuid == uuid:
                return device
        return None

    def nvidia_only(self) -> Scenario:
        """What NVML sees: the NVIDIA devices and their processes (this same scenario when it
        has no other)."""
        if not any(d.is_drm for d in self.devices):
            return self
        keep = {d.uuid for d in self.devices if not d.is_drm}
        return replace(self, devices=tuple(d for d in self.devices if d.uuid in keep),
                       processes=tuple(p for p in self.processes if p.device in keep))

    @property
    def drm_devices(self) -> tuple[SimDevice, ...]:
        """The AMD and Intel devices, in the scenario's order."""
        return tuple(d for d in self.devices if d.is_drm)


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected a mapping")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list")
    return value


def _number(data: dict[str, Any], key: str, where: str, default: Any, *, integer: bool = False,
            minimum: float = 0.0) -> Any:
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, str):
        # YAML 1.1 reads "1.2e9" (no sign in the exponent) as a string.
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"{where}.{key}: expected a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}.{key}: expected a number, got {value!r}")
    if not math.isfinite(value):                   # YAML's .inf and .nan, or "INFINITY"
        raise ValueError(f"{where}.{key}: expected a finite number, got {value!r}")
    if value < minimum:
        raise ValueError(f"{where}.{key}: must be >= {minimum}, got {value!r}")
    return int(value) if integer else float(value)


def _percent(data: dict[str, Any], key: str, where: str, default: Any) -> Any:
    value = _number(data, key, where, default)
    if value is not None and value > 100:
        raise ValueError(f"{where}.{key}: a percentage must be <= 100, got {value!r}")
    return value


def _given(value: Any, key: str, where: str) -> Any:
    """A key that has a default must not be given as null."""
    if value is None:
        raise ValueError(f"{where}.{key}: expected a number, got null")
    return value


def _gpm(value: Any, where: str) -> tuple[tuple[str, float], ...] | None:
    if value is None:
        return None
    data = _mapping(value, where)
    unknown = set(data) - set(GPM_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown GPM keys {sorted(unknown)}")
    return tuple((k, float(_number(data, k, where, 0))) for k in GPM_KEYS if k in data)


def _clocks(value: Any, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{where}: bitmask must be >= 0")
        return value
    mask = 0
    for name in _list(value, where):
        if not isinstance(name, str) or name not in CLOCKS_EVENT_BITS:
            raise ValueError(f"{where}: unknown reason {name!r}")
        mask |= CLOCKS_EVENT_BITS[name]
    return mask


def _idle_cycle(value: Any, where: str) -> IdleCycle | None:
    if value is None:
        return None
    data = _mapping(value, where)
    unknown = set(data) - {"watts", "idle_seconds", "busy_seconds", "start"}
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    start = data.get("start", "idle")
    if start not in ("idle", "busy"):
        raise ValueError(f"{where}.start: expected idle or busy, got {start!r}")
    watts = _given(_number(data, "watts", where, None), "watts", where)
    seconds = [_given(_number(data, key, where, None), key, where)
               for key in ("idle_seconds", "busy_seconds")]
    if not all(s > 0 for s in seconds):
        raise ValueError(f"{where}: idle_seconds and busy_seconds must be > 0")
    return IdleCycle(watts=watts, idle_seconds=seconds[0], busy_seconds=seconds[1],
                     idle_first=start == "idle")


def _pstates(data: dict[str, Any], where: str) -> tuple[int, tuple[int, ...]]:
    """(the current performance state, the supported ones in ascending order)."""
    pstate = _given(_number(data, "pstate", where, 0, integer=True), "pstate", where)
    if pstate > MAX_PSTATE:
        raise ValueError(f"{where}.pstate: must be <= {MAX_PSTATE}, got {pstate!r}")
    given = data.get("supported_pstates")
    if given is None:
        return pstate, tuple(sorted({0, pstate}))
    supported = []
    for i, value in enumerate(_list(given, f"{where}.supported_pstates")):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PSTATE:
            raise ValueError(f"{where}.supported_pstates[{i}]: expected 0..{MAX_PSTATE}, "
                             f"got {value!r}")
        supported.append(value)
    if not supported:
        raise ValueError(f"{where}.supported_pstates: must not be empty")
    return pstate, tuple(sorted(set(supported)))


def _remapped_rows(value: Any, where: str) -> tuple[int, int, bool, bool]:
    data = _mapping(value or {}, where)
    unknown = set(data) - set(REMAPPED_ROWS_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    for key in ("pending", "failure"):
        if not isinstance(data.get(key, False), bool):
            raise ValueError(f"{where}.{key}: expected true or false")
    return (_given(_number(data, "correctable", where, 0, integer=True), "correctable", where),
            _given(_number(data, "uncorrectable", where, 0, integer=True), "uncorrectable", where),
            data.get("pending", False), data.get("failure", False))


def _mig(value: Any, where: str, parent_uuid: str) -> SimMigInstance:
    data = _mapping(value, where)
    gi = _number(data, "gpu_instance_id", where, None, integer=True)
    if gi is None:
        raise ValueError(f"{where}.gpu_instance_id: required")
    return SimMigInstance(
        gpu_instance_id=gi,
        compute_instance_id=_number(data, "compute_instance_id", where, 0, integer=True),
        profile=str(data["profile"]) if data.get("profile") is not None else None,
        memory_total_bytes=_number(data, "memory_total_bytes", where, 10 * GIB, integer=True),
        uuid=str(data.get("uuid") or f"MIG-{parent_uuid.removeprefix('GPU-')[:23]}-{gi:012x}"),
        gpm=_gpm(data.get("gpm"), f"{where}.gpm"),
    )


def _process(value: Any, where: str, vendors: dict[str, str]) -> SimProcess:
    data = _mapping(value, where)
    pid = _number(data, "pid", where, None, integer=True, minimum=1)
    if pid is None:
        raise ValueError(f"{where}.pid: required")
    device = data.get("device")
    if device not in vendors:
        raise ValueError(f"{where}.device: {device!r} is not a device UUID of this scenario")
    vendor = vendors[device]
    foreign = set(data) & (DRM_PROCESS_KEYS if vendor == NVIDIA else NVML_PROCESS_KEYS)
    if foreign:
        raise ValueError(f"{where}: {sorted(foreign)} not for a process on an {vendor} GPU")
    sm = _percent(data, "sm_util_percent", where, None)
    engine = data.get("engine")
    if engine is not None and not isinstance(engine, str):
        raise ValueError(f"{where}.engine: expected an engine class name, got {engine!r}")
    fds = _given(_number(data, "fds", where, 1, integer=True, minimum=1), "fds", where)
    if fds > MAX_FDS:
        raise ValueError(f"{where}.fds: must be <= {MAX_FDS}, got {fds!r}")
    return SimProcess(
        pid=pid, device=device,
        sm_util_percent=int(sm) if sm is not None else None,
        memory_used_bytes=_number(data, "memory_used_bytes", where, None, integer=True),
        gpu_instance_id=_number(data, "gpu_instance_id", where, None, integer=True),
        mps=bool(data.get("mps", False)),
        between_ticks=bool(data.get("between_ticks", False)),
        engine=engine, fds=fds,
        shares_client_of=_number(data, "shares_client_of", where, None, integer=True, minimum=1),
    )


def _vendor(value: Any, where: str) -> str:
    vendor: str = _mapping(value, where).get("vendor", NVIDIA)
    if vendor not in VENDORS:
        raise ValueError(f"{where}.vendor: expected one of {', '.join(VENDORS)}, got {vendor!r}")
    return vendor


def _hex(data: dict[str, Any], key: str, where: str, default: int, bits: int) -> int:
    """An id given as a number or as hex text (``0x74a1``)."""
    value = data.get(key, default)
    if isinstance(value, str):
        try:
            value = int(value, 16)
        except ValueError:
            raise ValueError(f"{where}.{key}: expected a hex number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << bits:
        raise ValueError(f"{where}.{key}: expected a {bits}-bit number, got {value!r}")
    return value


def pci_address(value: Any, where: str) -> str:
    """A PCI address in sysfs form (``0000:3b:00.0``), given in that form or NVML's."""
    match = PCI_ADDRESS.fullmatch(str(value))
    if match is None:
        raise ValueError(f"{where}: expected domain:bus:device.function, got {value!r}")
    domain, bus, device, function = match.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}.{function}"


def _drm_identity(data: dict[str, Any], where: str, vendor: str) -> tuple[str, int, int]:
    """(driver, PCI device id, PCI class) of an AMD or Intel device, whose keys are checked."""
    foreign = set(data) - DRM_DEVICE_KEYS - VENDOR_DEVICE_KEYS[vendor]
    if foreign:
        raise ValueError(f"{where}: {sorted(foreign)} not for an {vendor} GPU (NVML only, or "
                         f"another vendor's)")
    driver = data.get("driver", DRIVERS[vendor][0])
    if driver not in DRIVERS[vendor]:
        raise ValueError(f"{where}.driver: expected one of {', '.join(DRIVERS[vendor])} for an "
                         f"{vendor} GPU, got {driver!r}")
    return (driver, _hex(data, "pci_device_id", where, DEFAULT_DEVICE_IDS[vendor], 16),
            _hex(data, "pci_class", where, DEFAULT_PCI_CLASS, 24))


def _device(value: Any, position: int, processes_memory: dict[str, int], *,
            vendor_position: int, default_bus: int) -> SimDevice:
    """``vendor_position``: its place among the NVIDIA devices, or among the others (the
    default index and minor); ``default_bus``: an AMD or Intel device's default PCI bus."""
    where = f"devices[{position}]"
    data = _mapping(value, where)
    uuid = data.get("uuid")
    if not isinstance(uuid, str) or not uuid:
        raise ValueError(f"{where}.uuid: required")
    vendor = _vendor(data, where)
    drm = None
    if vendor != NVIDIA:
        drm = _drm_identity(data, where, vendor)
    elif set(data) & DRM_ONLY_DEVICE_KEYS:
        raise ValueError(f"{where}: {sorted(set(data) & DRM_ONLY_DEVICE_KEYS)} are for AMD and "
                         f"Intel GPUs")
    arch_name = str(data.get("architecture", "hopper")).lower()
    if arch_name not in ARCHITECTURES:
        raise ValueError(f"{where}.architecture: unknown {arch_name!r}")
    unsupported = frozenset(str(u) for u in _list(data.get("unsupported"), f"{where}.unsupported"))
    allowed = UNSUPPORTABLE if drm is None else DRM_UNSUPPORTABLE
    if unsupported - allowed:
        raise ValueError(f"{where}.unsupported: unknown names {sorted(unsupported - allowed)}")
    violations_data = _mapping(data.get("violations") or {}, f"{where}.violations")
    if set(violations_data) - set(VIOLATION_KEYS):
        raise ValueError(f"{where}.violations: unknown keys "
                         f"{sorted(set(violations_data) - set(VIOLATION_KEYS))}")
    index = _number(data, "index", where, vendor_position, integer=True)
    minor = _number(data, "minor", where, vendor_position, integer=True)
    if drm is None:
        pci_bus_id = str(data.get("pci_bus_id", f"00000000:{index + 1:02X}:00.0"))
    else:
        pci_bus_id = pci_address(data.get("pci_bus_id", f"0000:{default_bus:02x}:00.0"),
                                 f"{where}.pci_bus_id")
        if minor >= MAX_DRM_CARDS:
            raise ValueError(f"{where}.minor: a DRM card number is < {MAX_DRM_CARDS}, got {minor}")
    pstate, supported_pstates = _pstates(data, where)
    buffer_size = _given(_number(data, "accounting_buffer_size", where, 4000, integer=True,
                                 minimum=1), "accounting_buffer_size", where)
    migs = tuple(_mig(m, f"{where}.mig_instances[{i}]", uuid)
                 for i, m in enumerate(_list(data.get("mig_instances"), f"{where}.mig_instances")))
    return SimDevice(
        uuid=uuid,
        name=str(data.get("name", "NVIDIA Simulated GPU" if drm is None
                          else DEFAULT_NAMES[vendor])),
        architecture=ARCHITECTURES[arch_name],
        index=index,
        minor=minor,
        pci_bus_id=pci_bus_id,
        memory_total_bytes=_number(data, "memory_total_bytes", where, 80 * GIB, integer=True),
        memory_used_bytes=_number(data, "memory_used_bytes", where,
                                  processes_memory.get(uuid, 0), integer=True),
        utilization_percent=int(_given(_percent(data, "utilization_percent", where, 0),
                                        "utilization_percent", where)),
        memory_utilization_percent=int(_given(
            _percent(data, "memory_utilization_percent", where, 0),
            "memory_utilization_percent", where)),
        power_watts=_number(data, "power_watts", where, 70.0),
        energy_counter_base_millijoules=_number(data, "energy_counter_base_millijoules", where, 0,
                                                integer=True),
        power_limit_watts=_number(data, "power_limit_watts", where, 700.0),
        temperature_celsius=_number(data, "temperature_celsius", where, 40, integer=True,
                                    minimum=-273),
        memory_temperature_celsius=_given(_number(data, "memory_temperature_celsius", where, 45,
                                                  integer=True, minimum=-273),
                                          "memory_temperature_celsius", where),
        sm_clock_mhz=_given(_number(data, "sm_clock_mhz", where, 1980, integer=True),
                            "sm_clock_mhz", where),
        memory_clock_mhz=_given(_number(data, "memory_clock_mhz", where, 2619, integer=True),
                                "memory_clock_mhz", where),
        pcie_replay_count=_given(_number(data, "pcie_replay_count", where, 0, integer=True),
                                 "pcie_replay_count", where),
        encoder_utilization_percent=int(_given(_percent(data, "encoder_utilization_percent",
                                                        where, 0),
                                               "encoder_utilization_percent", where)),
        decoder_utilization_percent=int(_given(_percent(data, "decoder_utilization_percent",
                                                        where, 0),
                                               "decoder_utilization_percent", where)),
        memory_reserved_bytes=_given(_number(data, "memory_reserved_bytes", where, 0,
                                             integer=True), "memory_reserved_bytes", where),
        remapped_rows=_remapped_rows(data.get("remapped_rows"), f"{where}.remapped_rows"),
        unsupported=unsupported,
        lost=bool(data.get("lost", False)),
        clocks_event_reasons=_clocks(data.get("clocks_event_reasons"),
                                     f"{where}.clocks_event_reasons"),
        violations=tuple((k, float(_percent(violations_data, k, f"{where}.violations", 0)))
                         for k in VIOLATION_KEYS),
        pcie_tx_bytes_per_second=_number(data, "pcie_tx_bytes_per_second", where, 0.0),
        pcie_rx_bytes_per_second=_number(data, "pcie_rx_bytes_per_second", where, 0.0),
        gpm=_gpm(data.get("gpm"), f"{where}.gpm"),
        mig_instances=migs,
        events_supported=bool(data.get("events_supported", True)),
        idle_cycle=_idle_cycle(data.get("idle_cycle"), f"{where}.idle_cycle"),
        pstate=pstate,
        supported_pstates=supported_pstates,
        accounting=bool(data.get("accounting", False)),
        accounting_buffer_size=buffer_size,
        vendor=vendor,
        driver=None if drm is None else drm[0],
        pci_device_id=None if drm is None else drm[1],
        pci_class=None if drm is None else drm[2],
    )


def _event(value: Any, where: str, vendors: dict[str, str]) -> SimEvent:
    data = _mapping(value, where)
    if data.get("device") not in vendors:
        raise ValueError(f"{where}.device: {data.get('device')!r} is not a device UUID")
    if vendors[data["device"]] != NVIDIA:
        raise ValueError(f"{where}.device: an {vendors[data['device']]} GPU (NVML gives the "
                         f"events, for NVIDIA GPUs only)")
    kind = str(data.get("type", "xid"))
    if kind not in EVENT_TYPES:
        raise ValueError(f"{where}.type: expected one of {EVENT_TYPES}")
    xid = _number(data, "xid", where, None if kind == "xid" else 0, integer=True)
    if xid is None:
        raise ValueError(f"{where}.xid: required for an xid event")
    return SimEvent(device=data["device"], kind=kind, xid=xid,
                    after_seconds=_number(data, "after_seconds", where, 0.0))


def parse_scenario(data: Any) -> Scenario:
    """A Scenario from already-loaded YAML data."""
    check_scenario_keys(data := _mapping(data, "scenario"))     # a misspelt key is refused
    raw_devices = _list(data.get("devices"), "devices")
    uuids = set()
    for i, raw in enumerate(raw_devices):
        uuid = raw.get("uuid") if isinstance(raw, dict) else None
        if uuid in uuids:
            raise ValueError(f"devices[{i}].uuid: duplicate {uuid!r}")
        uuids.add(uuid)
    vendor_list = [_vendor(raw, f"devices[{i}]") for i, raw in enumerate(raw_devices)]
    vendors = {raw.get("uuid"): vendor for raw, vendor in zip(raw_devices, vendor_list)}
    processes = tuple(_process(p, f"processes[{i}]", vendors)
                      for i, p in enumerate(_list(data.get("processes"), "processes")))
    memory: dict[str, int] = {}
    for p in processes:
        memory[p.device] = memory.get(p.device, 0) + (p.memory_used_bytes or 0)
    nvidia_count, seen = vendor_list.count(NVIDIA), {True: 0, False: 0}
    device_list = []
    for i, raw in enumerate(raw_devices):
        drm = vendor_list[i] != NVIDIA
        device_list.append(_device(raw, i, memory, vendor_position=seen[drm],
                                   default_bus=nvidia_count + seen[drm] + 1))
        seen[drm] += 1
    devices = tuple(device_list)
    _check_drm(devices, processes)
    missing = _list(data.get("missing_functions"), "missing_functions")
    return Scenario(
        devices=devices,
        processes=processes,
        xid_events=tuple(_event(e, f"xid_events[{i}]", vendors)
                         for i, e in enumerate(_list(data.get("xid_events"), "xid_events"))),
        driver_version=str(data.get("driver_version", "580.65.06")),
        init_failures=_number(data, "init_failures", "scenario", 0, integer=True),
        missing_functions=frozenset(str(m) for m in missing),
        driver_reloads=_number(data, "driver_reloads", "scenario", 0, integer=True),
        call_delay_seconds=min(_number(data, "call_delay_seconds", "scenario", 0.0) or 0.0, 60.0),
        trace_file=str(data["trace_file"]) if data.get("trace_file") else None,
        trace_tag=str(data["trace_tag"]) if data.get("trace_tag") is not None else None,
    )


def _check_drm(devices: tuple[SimDevice, ...], processes: tuple[SimProcess, ...]) -> None:
    """AMD and Intel devices: one card number and one PCI address each (sysfs names them);
    their processes' engines named as their driver's fdinfo names them."""
    cards: dict[int, int] = {}
    addresses: dict[str, int] = {}
    for i, device in enumerate(devices):
        address = pci_address(device.pci_bus_id, f"devices[{i}].pci_bus_id") \
            if PCI_ADDRESS.fullmatch(device.pci_bus_id) else device.pci_bus_id
        if address in addresses and (device.is_drm or devices[addresses[address]].is_drm):
            raise ValueError(f"devices[{i}].pci_bus_id: {device.pci_bus_id!r} is also "
                             f"devices[{addresses[address]}]'s")
        addresses.setdefault(address, i)
        if device.is_drm:
            if device.minor in cards:
                raise ValueError(f"devices[{i}].minor: card{device.minor} is also "
                                 f"devices[{cards[device.minor]}]'s")
            cards[device.minor] = i
    drivers = {d.uuid: d.driver for d in devices if d.is_drm}
    owners = {(p.pid, p.device) for p in processes if p.shares_client_of is None}
    for i, p in enumerate(processes):
        if p.shares_client_of is not None and (p.shares_client_of, p.device) not in owners:
            raise ValueError(f"processes[{i}].shares_client_of: no process {p.shares_client_of} "
                             "with a client of its own on that device")
        if p.shares_client_of is not None and p.sm_util_percent:
            raise ValueError(f"processes[{i}]: a process sharing another's client does no work "
                             "of its own (no sm_util_percent)")
        driver = drivers.get(p.device)
        if driver is not None and p.engine is not None and p.engine not in ENGINES[driver]:
            raise ValueError(f"processes[{i}].engine: {driver} names {', '.join(ENGINES[driver])}"
                             f", not {p.engine!r}")


def load_scenario(path: str) -> Scenario:
    """Read and parse a scenario file; ``ValueError("<path>: <what is wrong>")`` on a bad one,
    a FIFO or device (refused at once), a file over ``MAX_SCENARIO_BYTES`` or one whose
    aliases or nesting go past the bounds of ``gpustats.documents``."""
    return read_parsed(path, MAX_SCENARIO_BYTES,
                       lambda content: parse_scenario(load_yaml(content)), path)
