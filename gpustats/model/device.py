"""What one sweep of one GPU observed, whatever its vendor's interface (NVML, or the kernel's
sysfs and DRM fdinfo). Every reading may be ``None`` (absent)."""

from __future__ import annotations

from dataclasses import field

from gpustats.model.health import KernelHealthReading
from gpustats.model.record import record


VENDOR_NVIDIA = "nvidia"
VENDOR_AMD = "amd"
VENDOR_INTEL = "intel"


@record
class DeviceIdentity:
    """Identity read once per session of the vendor's interface (refreshed on re-init or MIG
    mode change). ``uuid`` is the GPU's stable ID: NVML's UUID, or what a DRM backend derives
    from the card's unique ID or PCI address."""

    index: int                               # within its vendor's GPUs
    uuid: str
    name: str | None = None
    minor_number: int | None = None          # /dev/nvidia<N> (NVIDIA only)
    pci_bus_id: str | None = None
    memory_total_bytes: int | None = None
    architecture: str | None = None
    vendor: str | None = None                # VENDOR_*; None: not known
    drm_card: str | None = None              # the DRM card node's name, "card0" (DRM GPUs)
    drm_minors: tuple[int, ...] = ()         # its DRM nodes' minors (major 226): card, render


@record
class AccountedRun:
    """What NVML's accounting records (nvmlDeviceGetAccountingStats) say a process that ended
    without being listed at this tick did in it: how long of the tick it ran, and its GPU
    utilization over its life (the driver's lifetime figure, weighted over its runs in the
    tick)."""

    seconds: float                                   # of this tick, the process ran this long
    gpu_utilization_percent: float | None = None
    max_memory_used_bytes: int | None = None         # the most it held during its life


@record
class ProcessReading:
    """One compute process on a GPU (nvmlDeviceGetComputeRunningProcesses), or one that ran
    since the last tick without being in that list at this tick (``listed`` False: it ended,
    or dropped its context, between ticks; its utilization samples show it, or, with NVML's
    accounting mode on and no samples of it, its accounting record: ``accounted``)."""

    pid: int
    memory_used_bytes: int | None = None
    gpu_instance_id: int | None = None      # None when not MIG
    compute_instance_id: int | None = None
    listed: bool = True
    accounted: AccountedRun | None = None
    # Seconds its engines were busy over the tick, measured by the driver (DRM fdinfo's
    # engine time); None where the interface gives utilization samples instead (NVML).
    engine_busy_seconds: float | None = None


@record
class ProcessSample:
    """One per-process utilization sample (nvmlDeviceGetProcessUtilization)."""

    pid: int
    timestamp_us: int
    sm_util_percent: int
    mem_util_percent: int | None = None


@record
class MigInstanceReading:
    """One MIG GPU instance as seen through its MIG device handle."""

    gpu_instance_id: int
    compute_instance_id: int | None = None
    uuid: str | None = None
    profile: str | None = None               # e.g. "1g.10gb"
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    processes: tuple[ProcessReading, ...] = ()
    gpm: GpmReading | None = None


@record
class GpmReading:
    """GPM metrics (Hopper+) over the interval between two samples > 100 ms apart (a tick
    within 100 ms of the last sample carries the last metrics)."""

    sm_active_percent: float | None = None
    sm_occupancy_percent: float | None = None
    dram_active_percent: float | None = None
    graphics_active_percent: float | None = None
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    nvlink_tx_bytes_per_second: float | None = None
    nvlink_rx_bytes_per_second: float | None = None
    tensor_active_percent: float | None = None     # any tensor pipe active (DCGM PIPE_TENSOR)


@record
class RemappedRowsReading:
    """Row remapping (Ampere+; nvmlDeviceGetRemappedRows or fields 142-145): cumulative counts."""

    correctable: int | None = None         # rows remapped after correctable errors
    uncorrectable: int | None = None       # rows remapped after uncorrectable errors
    pending: bool | None = None            # a remapping waits for the next GPU reset
    failure: bool | None = None            # a remapping failed (no spare row left)


@record
class ViolationReading:
    """Cumulative throttle violation time in ns per policy (nvmlDeviceGetViolationStatus)."""

    power_ns: int | None = None
    thermal_ns: int | None = None
    sync_boost_ns: int | None = None
    board_limit_ns: int | None = None
    reference_time_us: int | None = None   # when the driver took these counters (CPU µs)


@record
class DeviceReading:
    """One tick's sweep of one physical GPU."""

    identity: DeviceIdentity
    monotonic_seconds: float                     # when the sweep read this device
    lost: bool = False
    memory_used_bytes: int | None = None
    utilization_percent: int | None = None       # device duty cycle
    memory_utilization_percent: int | None = None
    power_watts: float | None = None
    # The hardware counter (resets on driver reload); with --energy-every > 1, between its
    # reads, the last read plus integrated power (never behind a later hardware value).
    energy_counter_millijoules: int | None = None
    power_limit_watts: float | None = None
    temperature_celsius: int | None = None
    mig_enabled: bool | None = None
    mig_instances: tuple[MigInstanceReading, ...] = ()
    processes: tuple[ProcessReading, ...] = ()
    mps: bool | None = None                       # MPS clients present (None: not checked)
    process_samples: tuple[ProcessSample, ...] | None = None  # None: no sample source; () idle
    clocks_event_reasons: int | None = None      # bitmask
    violations: ViolationReading | None = None
    gpm: GpmReading | None = None
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    memory_temperature_celsius: int | None = None   # HBM/GDDR sensor (field 82)
    pcie_replay_count: int | None = None            # cumulative PCIe replays
    encoder_utilization_percent: int | None = None
    decoder_utilization_percent: int | None = None
    memory_free_bytes: int | None = None
    memory_reserved_bytes: int | None = None        # driver reservation (nvmlMemory_v2)
    remapped_rows: RemappedRowsReading | None = None
    # nvmlDeviceGetPerformanceState: 0 (P0, the most performance) to 15; a higher number is a
    # lower state. The lowest one the GPU supports: the highest-numbered of
    # nvmlDeviceGetSupportedPerformanceStates.
    performance_state: int | None = None
    lowest_performance_state: int | None = None
    # AMD and Intel: the driver's RAS, retired-page and hang files (None: an NVML sweep)
    kernel_health: KernelHealthReading | None = None
    unsupported_fields: frozenset[str] = field(default_factory=frozenset)
    # DRM: engine seconds of the tick's work no process listed accounts for (the device's own
    # busy measure above its clients', clients with no owner decided); None: not measured.
    unattributed_engine_seconds: float | None = None
    # PIDs whose GPU use could not be read whatever the daemon's capabilities (DRM fdinfo
    # refused by a security module): the process list is whole but for them, which may be
    # on this GPU.
    unreadable_pids: tuple[int, ...] = ()
