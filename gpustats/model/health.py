"""GPU health conditions and saturation signals (absent signals are ``None``)."""

from __future__ import annotations

from gpustats.model.record import record

STATUS_TRUE = "True"
STATUS_FALSE = "False"
STATUS_UNKNOWN = "Unknown"

# Condition types, NVSentinel's model: each is True when healthy, False with a CamelCase
# reason when not, Unknown when it cannot be told. ``Ready`` is computed from the others.
CONDITION_NVML_READY = "NVMLReady"          # XIDs, double-bit ECC events, GPU_IS_LOST
CONDITION_ECC = "EccHealth"                 # volatile double-bit ECC (events since NVML init)
CONDITION_ROW_REMAP = "RowRemapHealth"      # row remapping pending or failed (the sweep)
CONDITION_READY = "Ready"                   # aggregated: every other condition True
# AMD and Intel GPUs, from the kernel's files (no vendor library): amdgpu's RAS error counts
# and retired VRAM pages; a GPU hang the driver captured (i915's error state, a devcoredump).
CONDITION_RAS = "RasHealth"                 # uncorrectable RAS errors (amdgpu ras/*_err_count)
CONDITION_RETIRED_PAGES = "RetiredPagesHealth"   # VRAM pages pending or failing retirement
CONDITION_RESET = "ResetHealth"             # a hang captured, the GPU reset since
CONDITION_BUS = "PciBusHealth"              # the GPU answers on the PCI bus
CONDITION_TYPES = (CONDITION_NVML_READY, CONDITION_ECC, CONDITION_ROW_REMAP, CONDITION_RAS,
                   CONDITION_RETIRED_PAGES, CONDITION_RESET, CONDITION_BUS, CONDITION_READY)

# Per-XID counts: at most this many series per GPU (the XIDs seen; any further code is counted
# under ``XID_OTHER``), and the events of the last window dcgm-exporter counts over (its
# ``--xid-count-window-size`` default), at most RECENT_XIDS_CAP of them.
XID_SERIES_CAP = 64
XID_OTHER = "other"
XID_WINDOW_SECONDS = 300.0
RECENT_XIDS_CAP = 1024

# Well-known XIDs (NVIDIA's XID catalog); others are reported by number alone.
XID_DESCRIPTIONS = {
    13: "graphics engine exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
    45: "preemptive cleanup after previous errors", 48: "double-bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed", 68: "video processor exception",
    74: "NVLink error", 79: "GPU has fallen off the bus", 92: "high single-bit ECC error rate",
    94: "contained ECC error", 95: "uncontained ECC error", 109: "context switch timeout",
    119: "GSP RPC timeout", 120: "GSP error", 999: "unknown XID",
}


@record
class Condition:
    type: str
    status: str
    reason: str
    message: str
    last_transition_time: float        # epoch seconds
    source: str


@record
class KernelHealthReading:
    """What an AMD or Intel GPU's driver says of its health in sysfs (``None``: no such file,
    or not readable)."""

    ras_uncorrectable: int | None = None     # Σ "ue" over ras/*_err_count
    ras_correctable: int | None = None       # Σ "ce"
    retired_pages: int | None = None         # ras/gpu_vram_bad_pages lines flagged R
    pending_pages: int | None = None         # ... P: retired at the next reservation window
    failed_pages: int | None = None          # ... F: could not be retired
    hang_captured: bool | None = None        # i915 cardN/error holds an error state
    coredump: bool | None = None             # a devcoredump of the device waits to be read
    off_bus: bool | None = None              # its PCI config space reads all ones


@record
class HealthEvent:
    """Something the driver reported about one GPU."""

    device_uuid: str
    kind: str                  # "xid", "single_bit_ecc", "double_bit_ecc" or "gpu_lost"
    time: float                # epoch seconds
    code: int | None = None    # the XID
    source: str = "nvml-events"


@record
class DeviceHealth:
    conditions: tuple[Condition, ...]
    xid_error_count: int = 0
    last_xid: int | None = None        # the most recent XID code (None: none since start)
    xid_counts: tuple[tuple[str, int], ...] = ()    # (XID, events) since start, first seen first
    recent_xids: tuple[tuple[int, float], ...] = ()  # (XID, epoch s) of the last window
    single_bit_ecc_count: int = 0
    double_bit_ecc_count: int = 0      # since NVML was initialised (volatile)
    critical_xid_count: int = 0        # XIDs not on the ignore list, since NVML was initialised
    last_critical_xid: int | None = None
    lost: bool = False                 # GPU_IS_LOST at the last sweep or event
    recommended_action: str | None = None    # a provider's suggestion (the device API)

    @property
    def healthy(self) -> bool:
        return all(c.status == STATUS_TRUE for c in self.conditions)

    def condition(self, type_: str) -> Condition | None:
        """The condition of that type, None when the GPU has none (NVSentinel's
        GetCondition)."""
        return next((c for c in self.conditions if c.type == type_), None)


@record
class SaturationCounters:
    """What the window's ratios are built from, accumulated since the daemon started (not kept
    across restarts), so a window of any length is an ``increase()`` apart. A signal whose
    source never gave a value is ``None`` (absent), never 0."""

    samples: int                                   # samples taken
    sampled_seconds: float                         # Σ time between consecutive samples
    # Per violation policy: Σ increase of the driver's cumulative counter, in seconds.
    throttle_violation_seconds: tuple[tuple[str, float], ...] | None = None
    # Per clocks-event reason: Σ of each sample's time since the previous where the bit is set.
    throttle_reason_seconds: tuple[tuple[str, float], ...] | None = None
    memory_pressure_seconds: float | None = None   # likewise, with used/total >= threshold


@record
class Saturation:
    """Signals over the saturation window (keys as in the OpenCost saturation design)."""

    window_seconds: float
    throttle_violation_ratios: tuple[tuple[str, float], ...] | None = None
    throttle_reason_ratios: tuple[tuple[str, float], ...] | None = None
    memory_used_ratio_avg: float | None = None
    memory_used_ratio_max: float | None = None
    memory_pressure_ratio: float | None = None
    xid_error_count: int | None = None
    sm_active_avg: float | None = None
    sm_occupancy_avg: float | None = None
    dram_active_avg: float | None = None
    dram_active_max: float | None = None
    pcie_tx_bytes_avg: float | None = None
    pcie_rx_bytes_avg: float | None = None
    nvlink_tx_bytes_avg: float | None = None
    nvlink_rx_bytes_avg: float | None = None
    counters: SaturationCounters | None = None

