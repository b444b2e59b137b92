"""Every field of dcgm-exporter's default counters file, and whether ``--dcgm-compat`` serves it.

One row per field of the file (enabled there or commented out): its name, its Prometheus type,
its unit ("" for a count, a code or a state) and, where gpustats does not serve it, why. The
violation counters are in nanoseconds, as DCGM's field reference gives them. The served
families themselves are declared once in ``export.dcgm_table``; a test checks these rows
against the facts read from dcgm-exporter's source (kept with the commit they were read at).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpustats.export.dcgm_table import COUNTER, GAUGE

_NO_READING = "the sweep does not read it"
_ECC = "the sweep reads no aggregate ECC counters (health counts ECC events instead)"
_RETIRED = "retired pages are not read (row remapping is, on Ampere and newer)"
_NVLINK = "NVLink error counters are not read"


@dataclass(frozen=True)
class DefaultCounter:
    name: str
    kind: str                  # GAUGE or COUNTER
    unit: str                  # "" for a count, a code or a state
    enabled: bool              # uncommented in dcgm-exporter's file
    not_served: str | None = None     # why gpustats leaves it out; None: served


def _c(name: str, kind: str, unit: str = "", enabled: bool = True,
       not_served: str | None = None) -> DefaultCounter:
    return DefaultCounter("DCGM_FI_DEV_" + name, kind, unit, enabled, not_served)


DEFAULT_COUNTERS: tuple[DefaultCounter, ...] = (
    _c("SM_CLOCK", GAUGE, "MHz"), _c("MEM_CLOCK", GAUGE, "MHz"),
    _c("MEMORY_TEMP", GAUGE, "C"), _c("GPU_TEMP", GAUGE, "C"),
    _c("POWER_USAGE", GAUGE, "W"), _c("TOTAL_ENERGY_CONSUMPTION", COUNTER, "mJ"),
    _c("PCIE_TX_THROUGHPUT", COUNTER, "KB",
       not_served="NVML gives PCIe throughput as a rate (gpustats_node_gpu_pcie_*), no counter"),
    _c("PCIE_RX_THROUGHPUT", COUNTER, "KB",
       not_served="NVML gives PCIe throughput as a rate (gpustats_node_gpu_pcie_*), no counter"),
    _c("PCIE_REPLAY_COUNTER", COUNTER),
    _c("GPU_UTIL", GAUGE, "%"), _c("MEM_COPY_UTIL", GAUGE, "%"),
    _c("ENC_UTIL", GAUGE, "%"), _c("DEC_UTIL", GAUGE, "%"),
    _c("XID_ERRORS", GAUGE),
    _c("POWER_VIOLATION", COUNTER, "ns", enabled=False),
    _c("THERMAL_VIOLATION", COUNTER, "ns", enabled=False),
    _c("SYNC_BOOST_VIOLATION", COUNTER, "ns", enabled=False),
    _c("BOARD_LIMIT_VIOLATION", COUNTER, "ns", enabled=False),
    _c("LOW_UTIL_VIOLATION", COUNTER, "ns", enabled=False, not_served=_NO_READING),
    _c("RELIABILITY_VIOLATION", COUNTER, "ns", enabled=False, not_served=_NO_READING),
    _c("FB_FREE", GAUGE, "MiB"), _c("FB_USED", GAUGE, "MiB"),
    _c("ECC_SBE_VOL_TOTAL", COUNTER, enabled=False, not_served=_ECC),
    _c("ECC_DBE_VOL_TOTAL", COUNTER, enabled=False, not_served=_ECC),
    _c("ECC_SBE_AGG_TOTAL", COUNTER, enabled=False, not_served=_ECC),
    _c("ECC_DBE_AGG_TOTAL", COUNTER, enabled=False, not_served=_ECC),
    _c("RETIRED_SBE", COUNTER, enabled=False, not_served=_RETIRED),
    _c("RETIRED_DBE", COUNTER, enabled=False, not_served=_RETIRED),
    _c("RETIRED_PENDING", COUNTER, enabled=False, not_served=_RETIRED),
    _c("NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", COUNTER, enabled=False, not_served=_NVLINK),
    _c("NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", COUNTER, enabled=False, not_served=_NVLINK),
    _c("NVLINK_REPLAY_ERROR_COUNT_TOTAL", COUNTER, enabled=False, not_served=_NVLINK),
    _c("NVLINK_RECOVERY_ERROR_COUNT_TOTAL", COUNTER, enabled=False, not_served=_NVLINK),
    _c("NVLINK_BANDWIDTH_TOTAL", COUNTER, not_served="NVLink throughput counters are not read "
       "(GPM's NVLink rates are: DCGM_FI_PROF_NVLINK_*_BYTES)"),
    _c("VGPU_LICENSE_STATUS", GAUGE, not_served="vGPU licensing is not read"),
    _c("UNCORRECTABLE_REMAPPED_ROWS", COUNTER), _c("CORRECTABLE_REMAPPED_ROWS", COUNTER),
    _c("ROW_REMAP_FAILURE", GAUGE),
)
