"""Pure power and energy attribution (Kepler's model, extended): no I/O, no clocks.

Per device and tick: idle power is the configured value or else the lowest power seen;
``active = max(0, total − idle)``. The tick's energy comes from the hardware counter delta
when there is one (resets and glitches detected), else the trapezoid of two power samples.
Active energy is split across processes: exclusive → all of it; time-sliced or MPS → by SM
utilization samples since the last timestamp; processes but no usable samples → equal split;
MIG → across busy instances by activity (equal when unknown), then equally across each
instance's processes. Idle energy is never attributed. Whenever any process has a share, the
attributed energy sums to the active energy (up to float rounding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from gpustats.model.attribution import (
    SHARE_EQUAL, SHARE_EXCLUSIVE, SHARE_MIG_ACTIVITY, SHARE_MIG_EQUAL, SHARE_SM_UTIL,
    SHARING_EXCLUSIVE, SHARING_MIG, SHARING_MPS, SHARING_TIME_SLICING,
    DeviceAttribution, ProcessAttribution,
)
from gpustats.model.device import MigInstanceReading, ProcessReading, ProcessSample

# A counter delta above this many times the largest plausible power is a glitch, not energy.
GLITCH_FACTOR = 2.0
FALLBACK_MAX_WATTS = 1500.0


@dataclass(frozen=True)
class EnergyDelta:
    joules: float | None
    source: str | None            # "counter", "integrated" or None
    counter_reset: bool = False


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def next_idle_power(previous_min: float | None, power_watts: float | None,
                    configured: float | None) -> float | None:
    """Configured idle wins; otherwise the lowest power seen so far (it only ever decreases)."""
    if configured is not None:
        return configured
    if not _finite(power_watts) or power_watts < 0:
        return previous_min
    if previous_min is None:
        return power_watts
    return min(previous_min, power_watts)


def active_power(total_watts: float | None, idle_watts: float | None) -> float | None:
    if not _finite(total_watts) or not _finite(idle_watts):
        return None
    return max(0.0, total_watts - idle_watts)


def integrated_energy(prev_power_w: float | None, cur_power_w: float | None,
                      dt_seconds: float) -> float | None:
    """Trapezoid of two power samples; one sample alone is held flat over the interval."""
    known = [p for p in (prev_power_w, cur_power_w) if _finite(p) and p >= 0]
    if not known or dt_seconds <= 0:
        return None
    return sum(known) / len(known) * dt_seconds


def tick_energy_joules(prev_counter_mj: int | None, cur_counter_mj: int | None,
                       prev_power_w: float | None, cur_power_w: float | None,
                       dt_seconds: float, power_limit_w: float | None = None) -> EnergyDelta:
    """Energy of one tick: counter delta when sane, else integrated power.

    A counter that went backwards (driver reload) or jumped beyond ``GLITCH_FACTOR`` × the
    largest plausible power over the interval is reported as a reset and the integrated power
    is used for that tick, so a delta is never negative or huge.
    """
    if not dt_seconds > 0 or not math.isfinite(dt_seconds):
        return EnergyDelta(None, None)
    integrated = integrated_energy(prev_power_w, cur_power_w, dt_seconds)
    if prev_counter_mj is None or cur_counter_mj is None:
        return EnergyDelta(integrated, "integrated" if integrated is not None else None)
    delta = (cur_counter_mj - prev_counter_mj) / 1000.0
    ceiling_watts = max([p for p in (power_limit_w, prev_power_w, cur_power_w) if _finite(p)]
                        + [0.0]) or FALLBACK_MAX_WATTS
    if delta < 0 or delta > GLITCH_FACTOR * ceiling_watts * dt_seconds:
        return EnergyDelta(integrated, "integrated" if integrated is not None else None, True)
    return EnergyDelta(delta, "counter")


def active_energy_joules(tick_joules: float | None, idle_watts: float | None,
                         dt_seconds: float) -> float | None:
    """The tick's energy above idle, never negative."""
    if not _finite(tick_joules) or not _finite(idle_watts) or dt_seconds <= 0:
        return None
    return max(0.0, tick_joules - idle_watts * dt_seconds)


@dataclass(frozen=True)
class DeviceTickInput:
    device_uuid: str
    dt_seconds: float
    tick_energy_joules: float | None
    active_energy_joules: float | None
    idle_power_watts: float | None
    active_power_watts: float | None
    processes: tuple[ProcessReading, ...] = ()
    samples: tuple[ProcessSample, ...] | None = None   # None: no sample source
    mps: bool | None = None
    mig_enabled: bool = False
    mig_instances: tuple[MigInstanceReading, ...] = ()
    # gpu_instance_id -> activity ratio 0..1 (dcgm-exporter or GPM); missing: unknown
    mig_activity: Mapping[int, float] = field(default_factory=dict)


def sm_utilization_by_pid(processes: tuple[ProcessReading, ...],
                          samples: tuple[ProcessSample, ...] | None) -> dict[int, float] | None:
    """Mean SM utilization per process over the samples; 0 for a process without samples.

    ``None`` when the driver gives no samples at all (absent); an empty sample set (NVML's
    NOT_FOUND: nothing ran since the last timestamp) means 0 for everyone.
    """
    if samples is None:
        return None
    totals: dict[int, list[int]] = {}
    for sample in samples:
        totals.setdefault(sample.pid, []).append(sample.sm_util_percent)
    return {p.pid: (sum(totals[p.pid]) / len(totals[p.pid]) if p.pid in totals else 0.0)
            for p in processes}


def _weights(processes: tuple[ProcessReading, ...],
             samples: tuple[ProcessSample, ...] | None) -> tuple[dict[int, float], str]:
    if len(processes) == 1:
        return {processes[0].pid: 1.0}, SHARE_EXCLUSIVE
    pids = {p.pid for p in processes}
    sums: dict[int, float] = {pid: 0.0 for pid in pids}
    for sample in samples or ():
        if sample.pid in pids and sample.sm_util_percent > 0:
            sums[sample.pid] += sample.sm_util_percent
    total = sum(sums.values())
    if total > 0:
        return {pid: value / total for pid, value in sums.items()}, SHARE_SM_UTIL
    return {pid: 1.0 / len(pids) for pid in pids}, SHARE_EQUAL


def _unique(processes: tuple[ProcessReading, ...]) -> tuple[ProcessReading, ...]:
    seen: dict[tuple[int, int | None], ProcessReading] = {}
    for p in processes:
        seen.setdefault((p.pid, p.gpu_instance_id), p)
    return tuple(seen.values())


def sharing_mode(inp: DeviceTickInput) -> str | None:
    if inp.mig_enabled:
        return SHARING_MIG
    if inp.mps:
        return SHARING_MPS
    if len(_unique(inp.processes)) > 1:
        return SHARING_TIME_SLICING
    return SHARING_EXCLUSIVE


def attribute_device(inp: DeviceTickInput) -> DeviceAttribution:
    """Split the tick's active energy of one GPU across its processes."""
    processes = _unique(inp.processes)
    active = inp.active_energy_joules if _finite(inp.active_energy_joules) else None
    dt = inp.dt_seconds
    result = []
    if inp.mig_enabled:
        result = _attribute_mig(inp, processes, active)
    elif processes:
        weights, method = _weights(processes, inp.samples)
        utilization = sm_utilization_by_pid(processes, inp.samples)
        for p in processes:
            share = weights[p.pid]
            energy = active * share if active is not None else None
            result.append(ProcessAttribution(
                pid=p.pid, device_uuid=inp.device_uuid, gpu_instance_id=None, share=share,
                share_method=method,
                power_watts=energy / dt if energy is not None and dt > 0 else None,
                energy_joules=energy,
                sm_util_percent=utilization.get(p.pid) if utilization is not None else None,
            ))
    return DeviceAttribution(
        device_uuid=inp.device_uuid,
        idle_power_watts=inp.idle_power_watts,
        active_power_watts=inp.active_power_watts,
        tick_energy_joules=inp.tick_energy_joules,
        tick_active_energy_joules=active,
        sharing_mode=sharing_mode(inp),
        processes=tuple(result),
    )


def _attribute_mig(inp: DeviceTickInput, processes: tuple[ProcessReading, ...],
                   active: float | None) -> list[ProcessAttribution]:
    by_instance: dict[int, list[ProcessReading]] = {}
    for p in processes:
        if p.gpu_instance_id is not None:
            by_instance.setdefault(p.gpu_instance_id, []).append(p)
    busy = sorted(by_instance)
    if not busy:
        return []
    activity = {gi: inp.mig_activity.get(gi) for gi in busy}
    known = all(_finite(a) and a >= 0 for a in activity.values())
    total_activity = sum(activity.values()) if known else 0.0
    if known and total_activity > 0:
        instance_share = {gi: activity[gi] / total_activity for gi in busy}
        method = SHARE_MIG_ACTIVITY
    else:
        instance_share = {gi: 1.0 / len(busy) for gi in busy}
        method = SHARE_MIG_EQUAL
    dt = inp.dt_seconds
    result = []
    for gi in busy:
        members = by_instance[gi]
        for p in members:
            share = instance_share[gi] / len(members)
            energy = active * share if active is not None else None
            result.append(ProcessAttribution(
                pid=p.pid, device_uuid=inp.device_uuid, gpu_instance_id=gi, share=share,
                share_method=method,
                power_watts=energy / dt if energy is not None and dt > 0 else None,
                energy_joules=energy, sm_util_percent=None,
            ))
    return result


def mig_activity(instances: tuple[MigInstanceReading, ...],
                 exporter: Mapping[int, float] | None) -> dict[int, float]:
    """Activity ratio per GPU instance: dcgm-exporter's when it answered, else GPM's
    (graphics engine active, else SM active); instances with neither are left out."""
    if exporter is not None:
        return {gi: ratio for gi, ratio in exporter.items() if _finite(ratio)}
    out = {}
    for inst in instances:
        gpm = inst.gpm
        if gpm is None:
            continue
        percent = gpm.graphics_active_percent if gpm.graphics_active_percent is not None \
            else gpm.sm_active_percent
        if _finite(percent):
            out[inst.gpu_instance_id] = min(1.0, max(0.0, percent / 100.0))
    return out
