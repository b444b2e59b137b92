"""Results of power/energy attribution for one tick, plus the cumulative counters."""

from __future__ import annotations

from dataclasses import dataclass

SHARING_EXCLUSIVE = "exclusive"
SHARING_TIME_SLICING = "time-slicing"
SHARING_MPS = "mps"
SHARING_MIG = "mig"

# How a process's share was decided.
SHARE_EXCLUSIVE = "exclusive"
SHARE_SM_UTIL = "sm-utilization"
SHARE_EQUAL = "equal-split"
SHARE_MIG_ACTIVITY = "mig-activity"
SHARE_MIG_EQUAL = "mig-equal-split"


@dataclass(frozen=True)
class ProcessAttribution:
    pid: int
    device_uuid: str
    gpu_instance_id: int | None
    share: float                        # fraction of the device's active energy this tick
    share_method: str
    power_watts: float                  # attributed active power over the tick
    energy_joules: float                # attributed active energy this tick
    sm_util_percent: float | None = None


@dataclass(frozen=True)
class DeviceAttribution:
    device_uuid: str
    idle_power_watts: float | None
    active_power_watts: float | None
    tick_energy_joules: float | None    # total energy of the tick
    tick_active_energy_joules: float | None
    sharing_mode: str | None
    processes: tuple[ProcessAttribution, ...] = ()


@dataclass(frozen=True)
class ContainerShare:
    """One container's attributed power and tick energy on one GPU (or MIG instance)."""

    container_id: str
    pod_uid: str | None
    device_uuid: str
    gpu_instance_id: int | None
    power_watts: float | None
    energy_joules: float | None
    pids: tuple[int, ...] = ()


@dataclass(frozen=True)
class PodShare:
    """One pod's attributed power and tick energy on one physical GPU."""

    pod_uid: str
    device_uuid: str
    power_watts: float | None
    energy_joules: float | None


@dataclass(frozen=True)
class Rollup:
    """Process shares rolled up to containers and pods for one tick.

    Processes in no known container stay in ``uncontained`` (process level only); their sum
    is ``uncontained_energy_joules``/``uncontained_power_watts`` (None when nothing is known).
    """

    containers: tuple[ContainerShare, ...] = ()
    pods: tuple[PodShare, ...] = ()
    uncontained: tuple[ProcessAttribution, ...] = ()
    uncontained_power_watts: float | None = None
    uncontained_energy_joules: float | None = None
