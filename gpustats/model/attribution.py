"""Results of power/energy attribution for one tick, plus the cumulative counters."""

from __future__ import annotations

from gpustats.model.record import record

SHARING_EXCLUSIVE = "exclusive"
SHARING_TIME_SLICING = "time-slicing"
SHARING_MPS = "mps"
SHARING_MIG = "mig"

# How a process's share was decided.
SHARE_EXCLUSIVE = "exclusive"
SHARE_SM_UTIL = "sm-utilization"
SHARE_EQUAL = "equal-split"
SHARE_MIG_ACTIVITY = "mig-activity"
SHARE_MIG_ASSUMED = "mig-assumed-activity"   # instance without activity data: mean of the rest
SHARE_MIG_EQUAL = "mig-equal-split"
SHARE_ACCOUNTING = "accounting"   # ended between ticks: NVML's accounting record of its run
SHARE_ENGINE_TIME = "engine-time"  # by engine busy time the driver measured (DRM fdinfo)


@record
class ProcessAttribution:
    pid: int
    device_uuid: str
    gpu_instance_id: int | None
    share: float                        # fraction of the device's active energy this tick
    share_method: str
    power_watts: float | None           # attributed active power over the tick (None: unknown)
    energy_joules: float | None         # attributed active energy this tick (None: unknown)
    sm_util_percent: float | None = None


@record
class DeviceAttribution:
    device_uuid: str
    idle_power_watts: float | None
    active_power_watts: float | None
    tick_energy_joules: float | None    # total energy of the tick
    tick_active_energy_joules: float | None
    sharing_mode: str | None
    processes: tuple[ProcessAttribution, ...] = ()
    power_watts: float | None = None    # read, or the energy counter's rate without a reading
    dt_seconds: float = 0.0             # the tick's length (0: the first tick, no energy yet)
    # What the GPU's own energy counter gains this tick: the tick's energy plus any energy
    # used while it was not observed (a restart, a lost GPU back). None: no hardware counter.
    device_energy_joules: float | None = None
    processes_known: bool = True        # False: NVML did not give the process list
