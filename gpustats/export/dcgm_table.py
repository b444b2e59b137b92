"""dcgm-exporter's metric vocabulary, declared once: name, type, help, and where NVML gives it.

Names, types and units are dcgm-exporter's (its default counters, ``export.dcgm_counters``, plus
the throttle fields the saturation design reads): MHz, C, W, mJ, %, MiB, ns (the violation
counters, as DCGM's field reference gives them), ratios 0..1 and bytes per second. Each
field names the reading it comes from as an attribute path and a conversion; a reading that is
``None`` gives no sample. Profiling (``DCGM_FI_PROF_*``) fields come from NVML GPM only, per
GPU and per MIG instance, and are absent where GPM is: never derived from the duty cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

GAUGE, COUNTER = "gauge", "counter"

MIB = 1 << 20


def _same(value: Any) -> Any:
    return value


def _int(value: float) -> int:
    return int(value)


def _mib(value: float) -> int:
    return int(value) // MIB


def _percent_to_ratio(value: float) -> float:
    return float(value) / 100.0


@dataclass(frozen=True)
class DcgmField:
    name: str
    kind: str
    help: str
    path: str                                  # attribute path from the reading
    convert: Callable[[Any], float | int] = _same     # the reading's value: any number type


# From a GPU's sweep (``DeviceReading``), one series per GPU.
DEVICE_FIELDS: tuple[DcgmField, ...] = (
    DcgmField("DCGM_FI_DEV_SM_CLOCK", GAUGE, "SM clock frequency (in MHz).", "sm_clock_mhz",
              _int),
    DcgmField("DCGM_FI_DEV_MEM_CLOCK", GAUGE, "Memory clock frequency (in MHz).",
              "memory_clock_mhz", _int),
    DcgmField("DCGM_FI_DEV_MEMORY_TEMP", GAUGE, "Memory temperature (in C).",
              "memory_temperature_celsius", _int),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", GAUGE, "GPU temperature (in C).", "temperature_celsius",
              _int),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", GAUGE, "Power draw (in W).", "power_watts", float),
    DcgmField("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", COUNTER,
              "Total energy consumption since the driver loaded (in mJ).",
              "energy_counter_millijoules", _int),
    DcgmField("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", COUNTER, "Total number of PCIe retries.",
              "pcie_replay_count", _int),
    DcgmField("DCGM_FI_DEV_GPU_UTIL", GAUGE, "GPU utilization (in %).", "utilization_percent",
              _int),
    DcgmField("DCGM_FI_DEV_MEM_COPY_UTIL", GAUGE, "Memory copy utilization (in %).",
              "memory_utilization_percent", _int),
    DcgmField("DCGM_FI_DEV_ENC_UTIL", GAUGE, "Encoder utilization (in %).",
              "encoder_utilization_percent", _int),
    DcgmField("DCGM_FI_DEV_DEC_UTIL", GAUGE, "Decoder utilization (in %).",
              "decoder_utilization_percent", _int),
    DcgmField("DCGM_FI_DEV_FB_FREE", GAUGE, "Framebuffer memory free (in MiB).",
              "memory_free_bytes", _mib),
    DcgmField("DCGM_FI_DEV_FB_USED", GAUGE, "Framebuffer memory used (in MiB).",
              "memory_used_bytes", _mib),
    DcgmField("DCGM_FI_DEV_FB_RESERVED", GAUGE, "Framebuffer memory reserved (in MiB).",
              "memory_reserved_bytes", _mib),
    DcgmField("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", COUNTER,
              "Number of remapped rows for correctable errors.", "remapped_rows.correctable",
              _int),
    DcgmField("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", COUNTER,
              "Number of remapped rows for uncorrectable errors.", "remapped_rows.uncorrectable",
              _int),
    DcgmField("DCGM_FI_DEV_ROW_REMAP_PENDING", GAUGE,
              "Whether a row remapping is pending (a GPU reset applies it).",
              "remapped_rows.pending", _int),
    DcgmField("DCGM_FI_DEV_ROW_REMAP_FAILURE", GAUGE, "Whether remapping of rows has failed.",
              "remapped_rows.failure", _int),
    DcgmField("DCGM_FI_DEV_POWER_VIOLATION", COUNTER,
              "Throttling duration due to power constraints (in ns).", "violations.power_ns",
              _int),
    DcgmField("DCGM_FI_DEV_THERMAL_VIOLATION", COUNTER,
              "Throttling duration due to thermal constraints (in ns).", "violations.thermal_ns",
              _int),
    DcgmField("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", COUNTER,
              "Throttling duration due to sync-boost constraints (in ns).",
              "violations.sync_boost_ns", _int),
    DcgmField("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", COUNTER,
              "Throttling duration due to board limit constraints (in ns).",
              "violations.board_limit_ns", _int),
    DcgmField("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", GAUGE,
              "Current clocks event reasons (bitmask of NVML clocks event reasons).",
              "clocks_event_reasons", _int),
)

# From a GPM reading (``GpmReading``), per GPU and per MIG instance.
PROF_FIELDS: tuple[DcgmField, ...] = (
    DcgmField("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GAUGE,
              "Ratio of time the graphics engine is active.", "graphics_active_percent",
              _percent_to_ratio),
    DcgmField("DCGM_FI_PROF_SM_ACTIVE", GAUGE,
              "The ratio of cycles an SM has at least 1 warp assigned.", "sm_active_percent",
              _percent_to_ratio),
    DcgmField("DCGM_FI_PROF_SM_OCCUPANCY", GAUGE,
              "The ratio of number of warps resident on an SM to the maximum.",
              "sm_occupancy_percent", _percent_to_ratio),
    DcgmField("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", GAUGE,
              "Ratio of cycles the tensor (HMMA) pipe is active.", "tensor_active_percent",
              _percent_to_ratio),
    DcgmField("DCGM_FI_PROF_DRAM_ACTIVE", GAUGE,
              "Ratio of cycles the device memory interface is active sending or receiving data.",
              "dram_active_percent", _percent_to_ratio),
    DcgmField("DCGM_FI_PROF_PCIE_TX_BYTES", GAUGE,
              "The rate of data transmitted over the PCIe bus (in bytes per second).",
              "pcie_tx_bytes_per_second", float),
    DcgmField("DCGM_FI_PROF_PCIE_RX_BYTES", GAUGE,
              "The rate of data received over the PCIe bus (in bytes per second).",
              "pcie_rx_bytes_per_second", float),
    DcgmField("DCGM_FI_PROF_NVLINK_TX_BYTES", GAUGE,
              "The rate of data transmitted over NVLink (in bytes per second).",
              "nvlink_tx_bytes_per_second", float),
    DcgmField("DCGM_FI_PROF_NVLINK_RX_BYTES", GAUGE,
              "The rate of data received over NVLink (in bytes per second).",
              "nvlink_rx_bytes_per_second", float),
)

# From a MIG instance reading (``MigInstanceReading``): its share of the framebuffer.
INSTANCE_MEMORY_FIELDS = ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED")

# From the health monitor: the last XID, with ``err_code`` and ``err_msg`` labels.
XID = DcgmField("DCGM_FI_DEV_XID_ERRORS", GAUGE, "Value of the last XID error encountered.",
                "health.last_xid", _int)
# dcgm-exporter's own count per XID (``xid`` label) over its window (``window_size_in_ms``).
XID_COUNT = DcgmField("DCGM_EXP_XID_ERRORS_COUNT", GAUGE,
                      "Count of XID errors within the time window, per XID.",
                      "health.recent_xids", _int)

# On a shared GPU, the fields each holder gets its own processes' figure of (dcgm-exporter's
# per-process metrics), beside the device's series without pod labels.
PER_HOLDER = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED")

NAMES = frozenset(f.name for f in (*DEVICE_FIELDS, *PROF_FIELDS, XID, XID_COUNT))
