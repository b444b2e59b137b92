"""Pure power and energy attribution (Kepler's model, extended): no I/O, no clocks.

Per device and tick: idle power is the configured value or else the lowest power that held
for a few idle ticks (no process, and 0 % duty or the GPU in its idle performance state;
``idle_tick``); ``active = max(0, total − idle)``, all of the tick while no idle is known.
The tick's energy comes from the hardware counter delta
when there is one (resets and glitches detected), else the trapezoid of two power samples.
Active energy is split across processes: exclusive → all of it; time-sliced or MPS → by SM
utilization samples since the last timestamp; processes but no usable samples → equal split;
a process NVML's accounting saw end during the tick, without samples of it → by utilization ×
the part of the tick each process ran (``_weights_with_accounting``); processes whose engine
busy time the driver measured (DRM fdinfo: AMD, Intel) → by that time (``SHARE_ENGINE_TIME``;
bounded by the tick's length where some process could not be read: ``weights_by_engine_time``);
MIG → across busy instances by activity (an instance whose activity is unknown is assumed as
active as the mean of the known ones; equal only when none is known), then equally across each
instance's processes. Idle energy is never attributed. No process is billed for more of a
tick than the part of it that it lived (``lived_share``): the rest of a tick that began before
its process did stays unattributed. Otherwise, whenever any process has a share, the
attributed energy sums to the active energy (up to float rounding).
"""

from __future__ import annotations

import math
from dataclasses import field
from typing import Iterable, Mapping, TypeGuard

from gpustats.model.attribution import (
    SHARE_ACCOUNTING, SHARE_EQUAL, SHARE_EXCLUSIVE, SHARE_MIG_ACTIVITY,
    SHARE_MIG_ASSUMED, SHARE_MIG_EQUAL, SHARE_SM_UTIL,
    SHARING_EXCLUSIVE, SHARING_MIG, SHARING_MPS, SHARING_TIME_SLICING,
    DeviceAttribution, ProcessAttribution,
)
from gpustats.model.device import MigInstanceReading, ProcessReading, ProcessSample
from gpustats.model.record import record
from gpustats.engine_time import engine_seconds, weights_by_engine_time

# A counter delta above GLITCH_FACTOR × the largest plausible power × dt is a glitch or a
# reset, not energy. Without a power limit, FALLBACK_MAX_WATTS bounds a board (B200: 1000 W).
GLITCH_FACTOR = 2.0
FALLBACK_MAX_WATTS = 1500.0


@record
class EnergyDelta:
    joules: float | None
    source: str | None            # "counter", "integrated" or None
    counter_reset: bool = False


def _finite(value: float | None) -> TypeGuard[float]:
    return value is not None and math.isfinite(value)


def learned_idle_power(previous: float | None, recent_watts: tuple[float, ...],
                       hold: int) -> float | None:
    """The lowest power that held for ``hold`` consecutive readings (it only ever decreases).

    A low "holds" when every one of the last ``hold`` readings is at or below it, so the
    candidate is the highest of them: one glitch far below its neighbours (a 0 W reading)
    never becomes the idle. Readings that are not finite or negative are ignored.
    """
    window = [w for w in recent_watts[-hold:] if _finite(w) and w >= 0]
    if hold <= 0 or len(window) < hold:
        return previous
    sustained = max(window)
    return sustained if previous is None else min(previous, sustained)


# P8: the state NVIDIA GPUs that have idle states drop to with nothing to do (P12 and the
# other higher numbers are lower states still).
IDLE_PERFORMANCE_STATE = 8


def idle_performance_state(state: int | None, lowest: int | None) -> bool:
    """Whether a GPU sits in its idle performance state: its lowest supported one (``lowest``,
    the highest-numbered of nvmlDeviceGetSupportedPerformanceStates) where that is P8 or a
    lower state, else, its supported states unknown, any of P8 to P15. A GPU whose lowest
    state is a working one (data-centre boards such as the A100 and H100 commonly report P0
    when idle; a compute board may go no lower than P2) is never idle by its P-state, and
    one in P8 that can go lower still is not yet at its floor. Unknown (``None``): not idle."""
    if state is None:
        return False
    return state >= max(IDLE_PERFORMANCE_STATE, lowest if lowest is not None else 0)


def idle_tick(processes_known: bool, processes: tuple[ProcessReading, ...],
              samples: tuple[ProcessSample, ...] | None, duty_percent: int | None,
              mig_enabled: bool = False, performance_state: int | None = None,
              lowest_performance_state: int | None = None) -> bool:
    """Whether a tick shows the GPU idle, so that its power may teach the idle.

    Its process list was read, and either it is empty with the duty cycle read as 0 % (a MIG
    GPU reports no duty cycle: an empty list is enough there) or the GPU in its idle
    performance state (``idle_performance_state``: the driver's own judgement that it has
    nothing to do, its clocks and voltage at their floor, whatever a display or the driver's
    housekeeping does to the duty cycle, or where the duty cycle is not read), or the duty
    cycle reads 0 % and every listed process's utilization samples (or its engine time, where
    the driver measures it) show no work (a notebook holding an idle context). Without
    samples a listed process may be working, and one NVML's accounting saw run during the
    tick did: not idle. A busy reading never
    becomes the idle: a GPU that never idles (a training node) would keep a busy power as its
    idle and bill that much less for ever."""
    if not processes_known:
        return False
    if not processes:
        return duty_percent == 0 or (mig_enabled and duty_percent is None) \
            or idle_performance_state(performance_state, lowest_performance_state)
    if duty_percent != 0:
        return False
    measured = engine_seconds(processes)
    if measured is not None:                  # the driver measured each one's engine time
        return not any(measured.values())
    if samples is None or any(p.accounted is not None for p in processes):
        return False
    listed = {p.pid for p in processes}
    return not any(s.sm_util_percent > 0 for s in samples if s.pid in listed)


def active_power(total_watts: float | None, idle_watts: float | None) -> float | None:
    if not _finite(total_watts) or not _finite(idle_watts):
        return None
    return max(0.0, total_watts - idle_watts)


def integrated_energy(prev_power_w: float | None, cur_power_w: float | None,
                      dt_seconds: float) -> float | None:
    """Trapezoid of two power samples; one sample alone is held flat over the interval."""
    known = [p for p in (prev_power_w, cur_power_w) if _finite(p) and p >= 0]
    if not known or not dt_seconds > 0 or not math.isfinite(dt_seconds):
        return None
    return sum(known) / len(known) * dt_seconds


def plausible_max_watts(power_limit_w: float | None, prev_power_w: float | None,
                        cur_power_w: float | None) -> float:
    """The most a board can draw: its limit (or a fixed bound), raised by any sample above it."""
    base = power_limit_w if _finite(power_limit_w) and power_limit_w > 0 else FALLBACK_MAX_WATTS
    return max([base] + [p for p in (prev_power_w, cur_power_w) if _finite(p) and p > 0])


def tick_energy_joules(prev_counter_mj: int | None, cur_counter_mj: int | None,
                       prev_power_w: float | None, cur_power_w: float | None,
                       dt_seconds: float, power_limit_w: float | None = None) -> EnergyDelta:
    """Energy of one tick: counter delta when sane, else integrated power.

    A counter that went backwards (driver reload) or jumped beyond ``GLITCH_FACTOR`` × the
    plausible power over the interval is reported as a reset; that tick uses the integrated
    power, or, with no power samples, the new counter value itself when it is plausible (a
    reloaded driver counts from zero). A delta is never negative or huge.
    """
    if not dt_seconds > 0 or not math.isfinite(dt_seconds):
        return EnergyDelta(None, None)
    integrated = integrated_energy(prev_power_w, cur_power_w, dt_seconds)
    if prev_counter_mj is None or cur_counter_mj is None:
        return EnergyDelta(integrated, "integrated" if integrated is not None else None)
    bound = GLITCH_FACTOR * plausible_max_watts(power_limit_w, prev_power_w, cur_power_w) \
        * dt_seconds
    delta = (cur_counter_mj - prev_counter_mj) / 1000.0
    if 0 <= delta <= bound:
        return EnergyDelta(delta, "counter")
    if integrated is not None:
        return EnergyDelta(integrated, "integrated", True)
    since_reset = cur_counter_mj / 1000.0
    if delta < 0 and 0 <= since_reset <= bound:
        return EnergyDelta(since_reset, "counter", True)
    return EnergyDelta(None, None, True)


def active_energy_joules(tick_joules: float | None, idle_watts: float | None,
                         dt_seconds: float) -> float | None:
    """The tick's energy above idle, never negative. With no idle known (none configured,
    none seen yet) the whole tick is active: a GPU busy from its first tick is billed in full
    to whoever runs on it, not left unbilled until it idles."""
    if not _finite(tick_joules) or not dt_seconds > 0:
        return None
    if idle_watts is None:
        return max(0.0, tick_joules)
    if not _finite(idle_watts):
        return None
    return max(0.0, tick_joules - idle_watts * dt_seconds)


@record
class DeviceTickInput:
    device_uuid: str
    dt_seconds: float
    tick_energy_joules: float | None
    active_energy_joules: float | None
    idle_power_watts: float | None
    active_power_watts: float | None
    power_watts: float | None = None                   # read, or the counter's rate
    device_energy_joules: float | None = None          # the device counter's gain (ledger)
    processes: tuple[ProcessReading, ...] = ()
    processes_known: bool = True                       # False: the process list is unreadable
    unseen_holders: bool = False                       # some process could not be read at all
    samples: tuple[ProcessSample, ...] | None = None   # None: no sample source
    mps: bool | None = None
    mig_enabled: bool = False
    mig_instances: tuple[MigInstanceReading, ...] = ()
    # gpu_instance_id -> activity ratio 0..1 (dcgm-exporter or GPM); missing: unknown
    mig_activity: Mapping[int, float] = field(default_factory=dict)
    # PID -> the seconds of this tick the process lived, for those that started during it
    # (missing: the whole tick)
    lived_seconds: Mapping[int, float] = field(default_factory=dict)
    unattributed_engine_seconds: float = 0.0           # DRM: work no process seen accounts for


def _sm_by_pid(samples: Iterable[ProcessSample]) -> dict[int, list[float]]:
    """SM percent per PID, one value per distinct sample (clamped to 0..100)."""
    seen: set[tuple[int, int]] = set()
    out: dict[int, list[float]] = {}
    for s in samples:
        if (s.pid, s.timestamp_us) in seen:
            continue          # the driver can hand the same sample out twice
        seen.add((s.pid, s.timestamp_us))
        out.setdefault(s.pid, []).append(min(100.0, max(0.0, float(s.sm_util_percent))))
    return out


def _mean_sm(processes: tuple[ProcessReading, ...],
             values: Mapping[int, list[float]]) -> dict[int, float]:
    """Mean SM utilization per process over its samples (``_sm_by_pid``); 0 for a process
    without samples. The caller leaves it absent when the driver gives no samples at all; an
    empty sample set (NVML's NOT_FOUND: nothing ran since the last timestamp) means 0."""
    return {p.pid: (sum(values[p.pid]) / len(values[p.pid]) if p.pid in values else 0.0)
            for p in processes}


def _weights(processes: tuple[ProcessReading, ...],
             values: Mapping[int, list[float]]) -> tuple[dict[int, float], str]:
    """Share per PID and how it was decided.

    Time-sliced and MPS processes share by their SM utilization summed over the samples since
    the last read (utilization × time, as Kepler and nvitop do; ``values``: ``_sm_by_pid`` of
    the samples); a process without samples gets 0. When no process has a non-zero sample (no
    sample source, NOT_FOUND, or all zeros) yet the GPU drew power above idle, the split is
    equal and recorded as ``SHARE_EQUAL``: processes holding a context keep the GPU out of its
    idle state and copy engines do not show in SM utilization, so the energy is theirs, just
    not measurably apportioned. Leaving it unattributed would drop energy the processes did cause.
    """
    if len(processes) == 1:
        return {processes[0].pid: 1.0}, SHARE_EXCLUSIVE
    pids = {p.pid for p in processes}
    sums = {pid: 0.0 for pid in pids}
    for pid, sm in values.items():
        if pid in sums:
            sums[pid] = sum(sm)
    total = sum(sums.values())
    if total > 0:
        return {pid: value / total for pid, value in sums.items()}, SHARE_SM_UTIL
    return {pid: 1.0 / len(pids) for pid in pids}, SHARE_EQUAL


def _weights_with_accounting(inp: DeviceTickInput, processes: tuple[ProcessReading, ...],
                             values: Mapping[int, list[float]]
                             ) -> tuple[dict[int, float], dict[int, str]]:
    """Shares and their methods when NVML's accounting saw processes end during the tick
    without samples of them (``accounted``).

    Each process weighs how much of the tick its GPU work filled: its utilization × the part
    of the tick it ran. A sampled process: its mean SM utilization × the part of the tick it
    lived; an accounted one: its lifetime GPU utilization × the seconds of the tick it ran
    (``SHARE_ACCOUNTING``). Where the GPU gives samples, a listed process without any did no
    work; where it gives none, a listed process (and an accounted one whose utilization NVML
    does not give) is assumed as busy as the mean of the known ones (MIG's rule for an
    instance without activity data; fully busy when none is known), and listed ones share
    that equally. With no weight at all, the split is equal.
    """
    known: dict[int, float] = {}          # utilization 0..1
    for p in processes:
        if p.pid in values:
            known[p.pid] = sum(values[p.pid]) / len(values[p.pid]) / 100.0
        elif p.accounted is not None:
            percent = p.accounted.gpu_utilization_percent
            if _finite(percent):
                known[p.pid] = min(100.0, max(0.0, percent)) / 100.0
        elif inp.samples is not None:
            known[p.pid] = 0.0
    assumed = sum(known.values()) / len(known) if known else 1.0
    weights: dict[int, float] = {}
    methods: dict[int, str] = {}
    for p in processes:
        if p.accounted is not None:
            part = _ran_share(inp, p.accounted.seconds)
            methods[p.pid] = SHARE_ACCOUNTING
        else:
            part = lived_share(inp, p.pid)
            methods[p.pid] = SHARE_SM_UTIL if p.pid in known else SHARE_EQUAL
        weights[p.pid] = known.get(p.pid, assumed) * part
    total = sum(weights.values())
    if total > 0:
        return {pid: w / total for pid, w in weights.items()}, methods
    return {p.pid: 1.0 / len(processes) for p in processes}, \
        {p.pid: SHARE_EQUAL for p in processes}


def _unique(processes: tuple[ProcessReading, ...]) -> tuple[ProcessReading, ...]:
    seen: dict[tuple[int, int | None], ProcessReading] = {}
    for p in processes:
        seen.setdefault((p.pid, p.gpu_instance_id), p)
    return tuple(seen.values())


def sharing_mode(inp: DeviceTickInput) -> str | None:
    """How the GPU is shared; ``None`` when its processes could not be read (unknown)."""
    if inp.mig_enabled:
        return SHARING_MIG
    if not inp.processes_known:
        return None
    if inp.mps:
        return SHARING_MPS
    if len({p.pid for p in inp.processes}) > 1:
        return SHARING_TIME_SLICING
    return SHARING_EXCLUSIVE


def lived_share(inp: DeviceTickInput, pid: int) -> float:
    """The most of the tick a process may be billed for: the part of it that it lived. A
    tick longer than its interval (a stalled daemon, a long interval) otherwise billed a
    process started near its end for all of it."""
    return _ran_share(inp, inp.lived_seconds.get(pid))


def _ran_share(inp: DeviceTickInput, seconds: float | None) -> float:
    """``seconds`` of the tick as a part of it, 0 to 1 (``None``: all of it)."""
    if seconds is None or not inp.dt_seconds > 0:
        return 1.0
    return min(1.0, max(0.0, seconds / inp.dt_seconds))


def _process_share(inp: DeviceTickInput, pid: int, gi: int | None, share: float, method: str,
                   active: float | None, sm: float | None,
                   ran_seconds: float | None = None) -> ProcessAttribution:
    """``ran_seconds``: of a process NVML's accounting saw end, the part of the tick it ran,
    which bounds its share as the part a process lived does."""
    share = min(share, lived_share(inp, pid), _ran_share(inp, ran_seconds))
    energy = active * share if active is not None else None
    dt = inp.dt_seconds
    return ProcessAttribution(
        pid=pid, device_uuid=inp.device_uuid, gpu_instance_id=gi, share=share,
        share_method=method,
        power_watts=energy / dt if energy is not None and dt > 0 else None,
        energy_joules=energy, sm_util_percent=sm)


def attribute_device(inp: DeviceTickInput) -> DeviceAttribution:
    """Split the tick's active energy of one GPU across its processes."""
    processes = _unique(inp.processes)
    active = inp.active_energy_joules \
        if _finite(inp.active_energy_joules) and inp.active_energy_joules >= 0 else None
    result: list[ProcessAttribution] = []
    if inp.mig_enabled:
        result = _attribute_mig(inp, processes, active)
    elif processes:
        by_pid = {p.pid: p for p in processes}     # without MIG a PID is one process
        unique = tuple(by_pid.values())
        values = _sm_by_pid(inp.samples or ())     # once, for the shares and the means
        measured = engine_seconds(unique)
        if measured is not None:
            weights, method = weights_by_engine_time(
                measured, inp.unattributed_engine_seconds,
                inp.dt_seconds if inp.unseen_holders else None)
            methods = dict.fromkeys(by_pid, method)
        elif any(p.accounted is not None for p in unique):
            weights, methods = _weights_with_accounting(inp, unique, values)
        else:
            weights, method = _weights(unique, values)
            methods = dict.fromkeys(by_pid, method)
        utilization = _mean_sm(unique, values) if inp.samples is not None else None
        if measured is not None and inp.dt_seconds > 0:
            utilization = {pid: min(100.0, 100.0 * busy / inp.dt_seconds)
                           for pid, busy in measured.items()}
        for pid, p in by_pid.items():
            sm = utilization.get(pid) if utilization is not None else None
            ran = None
            if p.accounted is not None:
                ran = p.accounted.seconds
                if pid not in values:
                    sm = p.accounted.gpu_utilization_percent
            result.append(_process_share(inp, pid, None, weights[pid], methods[pid], active,
                                         sm, ran))
    return DeviceAttribution(
        device_uuid=inp.device_uuid,
        idle_power_watts=inp.idle_power_watts,
        active_power_watts=inp.active_power_watts,
        power_watts=inp.power_watts,
        tick_energy_joules=inp.tick_energy_joules,
        tick_active_energy_joules=active,
        sharing_mode=sharing_mode(inp),
        processes=tuple(result),
        dt_seconds=inp.dt_seconds,
        device_energy_joules=inp.device_energy_joules,
        processes_known=inp.processes_known,
    )


def _attribute_mig(inp: DeviceTickInput, processes: tuple[ProcessReading, ...],
                   active: float | None) -> list[ProcessAttribution]:
    """Across busy instances by activity, then equally within an instance.

    NVML has no per-process utilization under MIG, so an instance's processes share equally.
    Instances with a known activity share by it (``SHARE_MIG_ACTIVITY``); a busy instance
    whose activity is unknown (no GPM on it, not in dcgm-exporter) is assumed as active as the
    mean of the known ones (``SHARE_MIG_ASSUMED``), so the others keep their ratio. With no
    activity known at all, or none positive, busy instances share equally
    (``SHARE_MIG_EQUAL``). A process without a GPU instance id on a MIG device cannot be placed
    and gets nothing.
    """
    by_instance: dict[int, list[int]] = {}
    for p in processes:
        if p.gpu_instance_id is not None and p.pid not in by_instance.get(p.gpu_instance_id, []):
            by_instance.setdefault(p.gpu_instance_id, []).append(p.pid)
    busy = sorted(by_instance)
    if not busy:
        return []
    known = {gi: inp.mig_activity[gi] for gi in busy
             if _finite(inp.mig_activity.get(gi)) and inp.mig_activity[gi] >= 0}
    weights: dict[int, float] = dict(known)
    methods = {gi: SHARE_MIG_ACTIVITY for gi in known}
    if known and sum(known.values()) > 0:
        assumed = sum(known.values()) / len(known)
        for gi in busy:
            if gi not in known:
                weights[gi] = assumed
                methods[gi] = SHARE_MIG_ASSUMED
    else:
        weights = {gi: 1.0 for gi in busy}
        methods = {gi: SHARE_MIG_EQUAL for gi in busy}
    total = sum(weights.values())
    result = []
    for gi in busy:
        members = by_instance[gi]
        for pid in members:
            result.append(_process_share(inp, pid, gi, weights[gi] / total / len(members),
                                         methods[gi], active, None))
    return result


def mig_activity(instances: tuple[MigInstanceReading, ...],
                 exporter: Mapping[int, float] | None) -> dict[int, float]:
    """Activity ratio per GPU instance: dcgm-exporter's where it has the instance, else GPM's
    (graphics engine active, else SM active); instances with neither are left out."""
    out = {}
    for inst in instances:
        ratio = exporter.get(inst.gpu_instance_id) if exporter is not None else None
        if not _finite(ratio) and inst.gpm is not None:
            gpm = inst.gpm
            percent = gpm.graphics_active_percent if _finite(gpm.graphics_active_percent) \
                else gpm.sm_active_percent
            ratio = percent / 100.0 if _finite(percent) else None
        if _finite(ratio):
            out[inst.gpu_instance_id] = min(1.0, max(0.0, ratio))
    return out


Holder = tuple[str, "int | None"]      # (container ID, GPU instance or None: the whole GPU)


def idle_shares(idle_joules: float, holders: Iterable[Holder],
                instance_fractions: Mapping[int, float] | None = None,
                ) -> tuple[dict[Holder, float], float]:
    """A GPU's idle energy of one tick split among the tenants holding it; returns each
    holder entry's share and what no one holds (the GPU's unallocated idle).

    Without MIG (no ``instance_fractions``) every holder shares equally: a GPU held for a day
    at 0 % burns its idle for whoever holds it. On a MIG GPU each instance carries its
    fraction of the GPU (``instance_fractions``: its size over the GPU's), split equally among
    the holders of that instance; holders of the whole GPU share what no instance holder
    takes, and an unheld instance or unpartitioned capacity is unallocated. The shares and
    the unallocated rest always add up to ``idle_joules``.
    """
    entries = sorted(set(holders), key=lambda h: (h[0], -1 if h[1] is None else h[1]))
    if not _finite(idle_joules) or idle_joules <= 0:
        return {h: 0.0 for h in entries}, 0.0
    if not instance_fractions:
        if not entries:
            return {}, idle_joules
        return {h: idle_joules / len(entries) for h in entries}, 0.0
    shares: dict[Holder, float] = {}
    whole = [h for h in entries if h[1] is None]
    rest = idle_joules
    for gi, fraction in sorted(instance_fractions.items()):
        members = [h for h in entries if h[1] == gi]
        part = idle_joules * min(1.0, max(0.0, fraction))
        if members and part > 0:
            for h in members:
                shares[h] = part / len(members)
            rest -= part
    rest = max(0.0, rest)
    if whole:
        for h in whole:
            shares[h] = rest / len(whole)
        rest = 0.0
    for h in entries:
        shares.setdefault(h, 0.0)        # holds an instance no size is known for
    return shares, rest


def instance_fractions(gpu_memory_bytes: int | None,
                       instances: Iterable[MigInstanceReading]) -> dict[int, float]:
    """Each MIG instance's size as a fraction of its GPU, by memory (the one size every
    instance reports); instances of unknown size are left out."""
    if not gpu_memory_bytes or gpu_memory_bytes <= 0:
        return {}
    return {inst.gpu_instance_id: inst.memory_total_bytes / gpu_memory_bytes
            for inst in instances
            if inst.memory_total_bytes is not None and inst.memory_total_bytes > 0}
