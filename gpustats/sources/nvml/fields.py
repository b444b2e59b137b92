"""The per-tick scalars NVML offers as field values, read in one ``nvmlDeviceGetFieldValues``
call per GPU instead of one call each (ids and units: nvml.h ``NVML_FI_DEV_*``).

Each has a single-call equivalent the sweep falls back to where the field is not supported;
memory temperature has none.
"""

from __future__ import annotations

import pynvml

from gpustats.model.device import RemappedRowsReading, ViolationReading

POWER = ("power", pynvml.NVML_FI_DEV_POWER_AVERAGE)          # mW, the 1 s average nvidia-smi shows
ENERGY = ("energy", pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION)   # mJ since driver load
MEMORY_TEMPERATURE = ("memory_temperature", pynvml.NVML_FI_DEV_MEMORY_TEMP)   # °C
PCIE_REPLAY = ("pcie_replay", pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER)        # cumulative
# Cumulative throttle time in ns, the counters nvmlDeviceGetViolationStatus gives per policy.
VIOLATIONS = (
    ("violation_power", pynvml.NVML_FI_DEV_PERF_POLICY_POWER),
    ("violation_thermal", pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL),
    ("violation_sync_boost", pynvml.NVML_FI_DEV_PERF_POLICY_SYNC_BOOST),
    ("violation_board_limit", pynvml.NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT),
)
REMAPPED_ROWS = (
    ("remapped_correctable", pynvml.NVML_FI_DEV_REMAPPED_COR),
    ("remapped_uncorrectable", pynvml.NVML_FI_DEV_REMAPPED_UNC),
    ("remapped_pending", pynvml.NVML_FI_DEV_REMAPPED_PENDING),
    ("remapped_failure", pynvml.NVML_FI_DEV_REMAPPED_FAILURE),
)
EVERY_TICK = (POWER, MEMORY_TEMPERATURE, PCIE_REPLAY, *VIOLATIONS, *REMAPPED_ROWS)

FieldValues = dict[str, tuple[int | float, int]]     # name -> (value, CPU timestamp µs)


def _int(values: FieldValues, name: str) -> int | None:
    found = values.get(name)
    return int(found[0]) if found is not None else None


def violations_of(values: FieldValues) -> ViolationReading | None:
    """The violation counters the fields gave, stamped with the driver's time; ``None`` when
    none answered (the caller then asks nvmlDeviceGetViolationStatus)."""
    got = {name: values[name] for name, _ in VIOLATIONS if name in values}
    if not got:
        return None
    stamp = max(t for _, t in got.values())
    return ViolationReading(
        power_ns=_int(values, "violation_power"),
        thermal_ns=_int(values, "violation_thermal"),
        sync_boost_ns=_int(values, "violation_sync_boost"),
        board_limit_ns=_int(values, "violation_board_limit"),
        reference_time_us=stamp or None,
    )


def remapped_rows_of(values: FieldValues) -> RemappedRowsReading | None:
    """Row remapping from fields 142-145; ``None`` when none answered."""
    if not any(name in values for name, _ in REMAPPED_ROWS):
        return None
    pending = _int(values, "remapped_pending")
    failure = _int(values, "remapped_failure")
    return RemappedRowsReading(
        correctable=_int(values, "remapped_correctable"),
        uncorrectable=_int(values, "remapped_uncorrectable"),
        pending=bool(pending) if pending is not None else None,
        failure=bool(failure) if failure is not None else None,
    )


def value(values: FieldValues, name: str) -> int | None:
    """One integer field, ``None`` when it did not answer."""
    return _int(values, name)
