"""A read-only window of the recent history: per GPU, MIG instance and container, rows of figures.

Rows are kept compact: each series holds one flat ``array('d')`` of rows ``(monotonic, *FIELDS)``
where NaN stands for absent. ``HistoryWindow`` hands out private copies, so readers never see
the recorder's arrays change under them.
"""

from __future__ import annotations

from array import array

from gpustats.model.device_values import DEVICE_VALUES, DeviceValue
from gpustats.model.record import record

# The device values the history keeps (``history`` rows of the table), in its order.
GPU_VALUES: tuple[DeviceValue, ...] = tuple(v for v in DEVICE_VALUES if v.history)
# Field order of one row after its monotonic time (the first column).
GPU_FIELDS = tuple(v.name for v in GPU_VALUES) + ("healthy",)
MIG_FIELDS = ("memory_used_bytes", "activity_ratio", "attributed_power_watts")
CONTAINER_FIELDS = ("attributed_power_watts", "attributed_energy_joules",
                    "idle_share_power_watts", "process_memory_used_bytes",
                    "compute_utilization_percent")


@record
class GpuSeries:
    uuid: str
    index: int
    name: str | None
    memory_total_bytes: int | None
    power_limit_watts: float | None
    rows: array[float]                  # flat: (monotonic, *GPU_FIELDS) per row


@record
class MigSeries:
    device_uuid: str
    gpu_instance_id: int
    uuid: str | None
    profile: str | None
    memory_total_bytes: int | None
    rows: array[float]                  # flat: (monotonic, *MIG_FIELDS) per row


@record
class ContainerSeries:
    """One container's use of one GPU (or MIG instance)."""

    container_id: str
    device_uuid: str
    gpu_instance_id: int | None
    name: str | None
    pod_name: str | None
    pod_namespace: str | None
    pod_uid: str | None
    rows: array[float]                  # flat: (monotonic, *CONTAINER_FIELDS) per row


@record
class HistoryWindow:
    """What the history holds for the last ``seconds`` up to the snapshot ``sequence``."""

    sequence: int
    seconds: float
    wall_minus_monotonic: float         # add to a row's monotonic time to get epoch seconds
    gpus: tuple[GpuSeries, ...] = ()
    mig_instances: tuple[MigSeries, ...] = ()
    containers: tuple[ContainerSeries, ...] = ()
