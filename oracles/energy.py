"""Each pod's expected energy, from the simulator's ground-truth trace and the world states.

The trace says when each scenario version took effect in the simulator and when the daemon
read each GPU's energy counter (its ticks). Between two reads of one GPU by one daemon run,
the GPU's active energy is ``max(0, ΔE − idle × Δt)``, exactly what the hardware counter
gave; it belongs to the processes holding the GPU at the second read, by their SM shares
(MIG: by instance activity, equally within an instance) — the daemon's documented rule, and
the only one a sampler can follow. Nothing is expected for an interval over which the GPU
was lost or the daemon was not running. A GPU with no idle configured (``learns_idle``) has
the idle the daemon learns from idle ticks (``oracles/idle.py``), none at first: until it
has one, its whole energy is active.

Times are the trace lines' ``mono`` stamps where they have one (the monotonic clock, which a
step of the daemon's wall clock leaves alone), else their wall-clock ``t``.

What the oracle cannot know exactly becomes a range ``[low, high]`` per pod:
- a process that appeared in the world (or came back to it) within the interval: the daemon
  bills it for the part of the interval it lived (its start time, which the world states do
  not give), after a stall maybe a small part;
- on an AMD or Intel GPU (``unseen``: its UUID with how long a client may stay unseen), a
  client that appeared within that time before the interval's start: the daemon may not have
  found it yet (the bounded scan's periodic or forced rescan), so it may be billed nothing and
  its neighbours its part (the one tick the docs allow a bounded scan), or the split with it;
- a scenario edit that took effect just before a read, or after it and before the sweep's
  last read of that GPU that decides who the energy goes to (the process list, utilization
  samples, GPM metrics: ``read`` lines in the trace; under load they may come long after the
  energy counter's read), so the sweep may have seen either side;
- the last tick before a daemon dies (it may not have journaled it);
- the ticks around the final scrape (``final_scrape`` lines, the harness's own, before and
  after it): its snapshot may lack the last tick read before it began, and may hold one read
  while it ran; nothing after it is counted;
- a GPU whose process list the daemon could not read (unknown: nothing is owed, at most the
  whole share);
- a GPU whose per-process utilization the daemon could not read (equal split or SM shares);
- a GPU that learns its idle, where a read's view is uncertain (each possible idle);
- a MIG instance's activity at a tick whose sweep read no GPM metrics of it (the trace's
  ``read`` lines say which instances' metrics each sweep read, and what they saw): its first
  busy tick in a daemon run (no sample yet at the start of the interval: an instance created
  with its tenant is learnt of at that tick), or a tick within 100 ms of its last sample,
  which carries the metrics read before, if any. Without metrics the daemon assumes the mean
  of the known instances (equal shares when none is known), as it serves in
  ``gpustats_process_gpu_share_method``; the range spans that split and the true one. Where
  a sweep left no such lines (the previous release, which neither traces them nor carries),
  any busy instance may have been assumed.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from oracles.idle import LearnedIdle, idle_tick_power
from oracles.world import IDLE_WATTS, GpuState, Holder, WorldState

# A reload this close before or after a read may have been seen by only part of the sweep.
SWEEP_SECONDS = 0.1
_KEY = "\0"          # a tenant's key and a PID, joined (``_by_process``)


@dataclass
class Expected:
    low: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    high: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    intervals: int = 0
    unbilled_intervals: int = 0


def stamp(line: dict) -> float:
    """When a trace line was written: monotonic where stamped so, else wall-clock."""
    return line.get("mono", line["t"])


def read_trace(path: Path) -> list[dict]:
    out = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue          # a line cut by a kill while it was written
    return out


def shares(gpu: GpuState, equal_split: bool,
           unsampled: frozenset[int] = frozenset()) -> dict[str, float]:
    """Share of the GPU's active energy per pod UID in one world state; on a MIG GPU the
    ``unsampled`` instances are given the daemon's assumption instead of their activity."""
    holders = gpu.holders
    if not holders:
        return {}
    per_pid: dict[int, float] = {}
    if gpu.mig is not None:
        activity = dict(gpu.mig)
        busy = sorted({h.gpu_instance for h in holders if h.gpu_instance in activity})
        if unsampled & set(busy):     # the daemon's assumption: the mean of the known ones,
            known = [activity[gi] for gi in busy if gi not in unsampled]   # else all equal
            mean = sum(known) / len(known) if sum(known) > 0 else None
            activity = {gi: 1.0 if mean is None else mean if gi in unsampled else activity[gi]
                        for gi in busy}
        total = sum(activity[gi] for gi in busy)
        for gi in busy:
            members = [h.pid for h in holders if h.gpu_instance == gi]
            weight = activity[gi] / total if total > 0 else 1.0 / len(busy)
            for pid in members:
                per_pid[pid] = weight / len(members)
    elif any(h.shares for h in holders):
        per_pid = _shared_clients(holders)
    else:
        pids = sorted({h.pid for h in holders})
        total = sum(h.sm_percent for h in holders)
        for h in holders:
            per_pid[h.pid] = (1.0 / len(pids)) if equal_split or total <= 0 or len(pids) == 1 \
                else h.sm_percent / total
    out: dict[str, float] = defaultdict(float)
    for h in holders:
        out[h.pod_uid] += per_pid.get(h.pid, 0.0)
    return out


def _shared_clients(holders: tuple[Holder, ...]) -> dict[int, float]:
    """A DRM GPU where processes share clients: each client's engine time counted once, its
    share to its owner where every holder sits in the owner's cgroup, else to no one (the
    GPU's unattributed energy); a process holding another's client has no share of its own."""
    total = sum(h.sm_percent for h in holders if not h.shares)
    out: dict[int, float] = {}
    for h in holders:
        if h.shares or total <= 0:
            continue
        group = [h] + [x for x in holders if x.shares == h.pid]
        out[h.pid] = h.sm_percent / total if all(_same_cgroup(h, x) for x in group) else 0.0
    return out


def _same_cgroup(a: Holder, b: Holder) -> bool:
    """A bare-metal tenant's processes share its one cgroup; a pod's, its container's."""
    tenant = a.pod_uid.split(_KEY)[0]
    return tenant == b.pod_uid.split(_KEY)[0] and (
        ":" in tenant or a.container_id == b.container_id)


def _candidates(gpu: GpuState, util_unknown: bool) -> list[dict[str, float]]:
    if gpu.mig is None and util_unknown:
        # Samples not supported at some point of this daemon run: it does not ask again
        # until it restarts, so a process that works between ticks may stay invisible though
        # the GPU gives samples again (its energy then goes to the others, or nobody).
        unseen = tuple(h for h in gpu.holders if not h.between_ticks)
        hidden = [] if len(unseen) == len(gpu.holders) else \
            [shares(dataclasses.replace(gpu, holders=unseen), split) for split in (False, True)]
        return [shares(gpu, False), shares(gpu, True), *hidden]
    return [shares(gpu, False)]


def _by_process(gpu: GpuState) -> GpuState:
    """The GPU with each holder's pod keyed with its PID as well, so a split comes per process."""
    return dataclasses.replace(gpu, holders=tuple(
        dataclasses.replace(h, pod_uid=f"{h.pod_uid}{_KEY}{h.pid}") for h in gpu.holders))


def _per_pod(split: dict[str, float], leave_out: set[int] = frozenset()) -> dict[str, float]:
    """A per-process split (``_by_process``) summed per pod, ``leave_out`` PIDs left out."""
    out: dict[str, float] = defaultdict(float)
    for key, share in split.items():
        uid, pid = key.split(_KEY)
        out[uid] += 0.0 if int(pid) in leave_out else share
    return out


def _busy(gpu: GpuState) -> set[int]:
    return {h.gpu_instance for h in gpu.holders if h.gpu_instance in dict(gpu.mig or ())}


def _sweeps(trace: list[dict]) -> list[tuple[float | None, dict[int, str] | None]]:
    """Per energy read, what its sweep's later reads of that GPU (``read`` lines, before its
    next energy read, in the same daemon run) say:

    - when the last of them took place (its process list, samples, GPM metrics: the reads
      that decide who the energy goes to); None where it made none;
    - on a MIG GPU, the instances whose GPM metrics it read, each with the scenario version
      the read saw; None where it left no ``read`` line, or GPM reads that do not name the
      instance (a release that does not trace them): nothing is known of its metrics.
    """
    out: list[tuple[float | None, dict[int, str] | None]] = [(None, None)] * len(trace)
    last: dict[str, float] = {}
    metrics: dict[str, dict[int, str] | None] = {}
    for index in range(len(trace) - 1, -1, -1):
        line = trace[index]
        event = line.get("event")
        if event == "read":
            uuid = line["uuid"]
            last[uuid] = max(last.get(uuid, 0.0), stamp(line))
            found = metrics.setdefault(uuid, {})
            if line.get("what") != "gpm" or found is None:
                continue
            if "gi" not in line:
                metrics[uuid] = None
            elif line["gi"] is not None:
                found[line["gi"]] = line["tag"]     # walking back: the sweep's first read wins
        elif event == "energy":
            out[index] = (last.pop(line["uuid"], None), metrics.pop(line["uuid"], None))
        elif event == "start":
            last.clear()
            metrics.clear()
    return out


def _metered(gpu: GpuState, uuid: str, states: dict[str, WorldState],
             fresh: dict[int, str], carried: dict[int, str],
             shaky: set[int]) -> list[dict[str, float]]:
    """A MIG GPU's split as the daemon made it from the metrics it had: an instance's activity
    as its metrics read this tick saw it; else the metrics it carried (read at a tick too close
    to the last sample); else unknown, assumed. Where the oracle cannot tell whether it still
    carried them (``shaky``: it may have had an idle tick, or re-read a changed layout), both."""
    busy = _busy(gpu)
    layout = set(dict(gpu.mig or ()))
    unsure = {gi for gi in busy - set(fresh) if gi in carried and (
        gi in shaky or set(_mig_of(states, carried[gi], uuid)) != layout)}
    out = []
    choices: set[frozenset[int]] = {frozenset(), frozenset(unsure)}
    for dropped in choices:
        activity: dict[int, float] = {}
        unknown: set[int] = set()
        for gi in busy:
            tag = fresh.get(gi) or (carried.get(gi) if gi not in dropped else None)
            value = _mig_of(states, tag, uuid).get(gi)
            if value is None:
                unknown.add(gi)
            activity[gi] = value or 0.0
        out.append(shares(dataclasses.replace(gpu, mig=tuple(activity.items())), False,
                          frozenset(unknown)))
    return out


def _mig_of(states: dict[str, WorldState], tag: str | None, uuid: str) -> dict[int, float]:
    """The MIG instances' activity of GPU ``uuid`` in scenario version ``tag`` ({}: none)."""
    seen = states.get(tag) if tag is not None else None
    then = seen.gpu(uuid) if seen is not None else None
    return dict(then.mig or ()) if then is not None else {}


def _any_unmetered(gpu: GpuState) -> list[frozenset[int]]:
    """The sets of busy instances a sweep with no trace of its GPM reads may have lacked the
    metrics of (a tick too close to a sample, in a release that did not carry them): each
    one alone, and all."""
    busy = sorted(_busy(gpu))
    return [frozenset({gi}) for gi in busy] + ([frozenset(busy)] if len(busy) > 1 else [])


def _carry(carried: dict[int, str], shaky: set[int], fresh: dict[int, str],
           gpus: list[GpuState]) -> None:
    """After a sweep: what the daemon carries into the next. An instance whose metrics were
    read carries them; one idle in every view was only sampled and carries nothing; one busy
    in some views only may or may not (``shaky``)."""
    busy_everywhere = set.intersection(*(_busy(g) for g in gpus)) if gpus else set()
    busy_somewhere = set.union(*(_busy(g) for g in gpus)) if gpus else set()
    for gi, tag in fresh.items():
        carried[gi] = tag
        shaky.discard(gi)
    for gi in list(carried):
        if gi in fresh or gi in busy_everywhere:
            continue
        if gi in busy_somewhere:
            shaky.add(gi)
        else:
            del carried[gi]
            shaky.discard(gi)


def _reloads_in_sweep(trace: list[dict], index: int, until: float) -> list[str]:
    """The scenario versions that took effect after trace line ``index`` and by ``until``,
    in the same daemon run."""
    tags = []
    for line in trace[index + 1:]:
        if stamp(line) > until or line.get("event") == "start":
            break
        if line.get("event") == "scenario":
            tags.append(line["tag"])
    return tags


def expected_energy(trace: list[dict], states: dict[str, WorldState],
                    learns_idle: frozenset[str] = frozenset(),
                    unseen: dict[str, float] | None = None) -> Expected:
    """Walk the trace once; see the module docstring for the rules. ``learns_idle``: the
    UUIDs of GPUs with no idle configured (the others' is ``IDLE_WATTS``); ``unseen``: per
    DRM GPU, how long (s) a new client may stay unseen."""
    unseen = unseen or {}
    out = Expected()
    tag: str | None = None
    previous_tag: str | None = None
    reloaded_at = -1.0
    last_read: dict[str, tuple[float, int]] = {}
    lost_since: set[str] = set()
    unknown_processes: set[str] = set()
    unknown_util: set[str] = set()
    unknown_power: set[str] = set()
    learnt = {uuid: LearnedIdle() for uuid in learns_idle}
    last_gain: dict[str, dict[str, float]] = {}      # per GPU: the last interval's low gains
    scraping = False                     # within the final scrape: a tick may or may not count
    present: set[int] = set()            # the PIDs holding a GPU in the current version
    appeared: dict[int, float] = {}      # when each was last absent from one and then not

    def note_appeared(state: WorldState | None, at: float) -> None:
        pids = {h.pid for g in state.gpus for h in g.holders} if state else set()
        for pid in pids - present:
            appeared[pid] = at
        present.clear()
        present.update(pids)

    def drop_last_gains() -> None:
        """Each GPU's last interval may be missing from what was served: out of ``low``."""
        for gains in last_gain.values():
            for uid, joules in gains.items():
                out.low[uid] -= joules
        last_gain.clear()

    def note_lost(state: WorldState | None) -> None:
        for g in state.gpus if state else ():
            if g.lost:
                lost_since.add(g.uuid)

    sweeps = _sweeps(trace)
    carried: dict[str, dict[int, str]] = defaultdict(dict)   # per MIG GPU: its last metrics
    shaky: dict[str, set[int]] = defaultdict(set)             # ... those it may have dropped
    for index, line in enumerate(trace):
        event = line.get("event")
        if event == "start":
            drop_last_gains()    # a new daemon run: its last tick may not have been journaled
            last_read.clear()
            lost_since.clear()
            unknown_processes.clear()
            unknown_util.clear()
            unknown_power.clear()
            for idle in learnt.values():
                idle.restart()
            carried.clear()
            shaky.clear()
            tag, previous_tag = line["tag"], None
            note_lost(states.get(tag))
            note_appeared(states.get(tag), stamp(line))
            continue
        if event == "scenario":
            previous_tag, tag = tag, line["tag"]
            reloaded_at = stamp(line)
            note_lost(states.get(tag))
            note_appeared(states.get(tag), reloaded_at)
            continue
        if event == "final_scrape":
            if line.get("phase") != "begin":
                break                                  # served: nothing after counts
            drop_last_gains()                          # its snapshot may lack the last tick
            scraping = True
            continue
        if event != "energy":
            continue
        uuid, t, mj = line["uuid"], stamp(line), line["mj"]
        views = [states.get(tag)]
        if previous_tag is not None and 0 <= t - reloaded_at < SWEEP_SECONDS:
            views.append(states.get(previous_tag))
        # A version that took effect during the sweep's reads of this GPU (under load they
        # may lie far apart) may be what its later reads saw.
        sweep_end, metrics = sweeps[index]
        until = max(t + SWEEP_SECONDS, sweep_end or t)
        views.extend(states.get(later) for later in _reloads_in_sweep(trace, index, until))
        gpus = [s.gpu(uuid) for s in views if s is not None and s.gpu(uuid) is not None]
        for g in gpus:
            if "processes" in g.unsupported:
                unknown_processes.add(uuid)
            if "process_utilization" in g.unsupported:
                unknown_util.add(uuid)
            if "power" in g.unsupported:
                unknown_power.add(uuid)
        before = last_read.get(uuid)
        last_read[uuid] = (t, mj)
        carried_before, shaky_before = dict(carried[uuid]), set(shaky[uuid])
        if metrics is not None:
            _carry(carried[uuid], shaky[uuid], metrics, gpus)
        was_lost = uuid in lost_since
        if uuid in learnt:
            _learn(learnt[uuid], gpus, uuid in unknown_processes,
                   None if before is None or was_lost else (t - before[0], mj - before[1]),
                   uuid in unknown_power, was_lost)
        if before is None:
            continue
        if was_lost:
            lost_since.discard(uuid)
            out.unbilled_intervals += 1
            continue
        dt = t - before[0]
        idles = learnt[uuid].values() if uuid in learnt else {IDLE_WATTS}
        actives = [max(0.0, (mj - before[1]) / 1000.0 - (idle if idle is not None else 0.0) * dt)
                   for idle in idles]             # no idle learnt yet: the whole energy
        out.intervals += 1
        by_process = [_by_process(g) for g in gpus]
        options = [c for g in by_process
                   for c in _candidates(g, uuid in unknown_util)]
        if metrics is not None:
            options += [c for g in by_process if g.mig is not None
                        for c in _metered(g, uuid, states, metrics, carried_before,
                                          shaky_before)]
        else:        # a sweep that says nothing of its metrics: any instance may be assumed
            options += [shares(g, False, unsure) for g in by_process if g.mig is not None
                        for unsure in _any_unmetered(g)]
        # A process that appeared in the world during the interval (its start time, a
        # moment before) may have lived only part of it: the daemon bills it that part, the
        # rest stays unattributed. Appeared in a later version than the walk has reached: new.
        late = unseen.get(uuid, SWEEP_SECONDS)
        new = {h.pid for g in gpus for h in g.holders
               if appeared.get(h.pid, t) > before[0] - late}
        if uuid in unseen and new:     # a client not found yet: its part on its neighbours
            options += [shares(dataclasses.replace(g, holders=tuple(
                h for h in g.holders if h.pid not in new)), False) for g in by_process]
        full = [_per_pod(c) for c in options]
        lived = [_per_pod(c, new) for c in options]
        gains: dict[str, float] = {}
        for uid in {uid for c in full for uid in c}:
            low = 0.0 if uuid in unknown_processes or scraping else min(
                active * c.get(uid, 0.0) for c in lived for active in actives)
            out.low[uid] += low
            out.high[uid] += max(active * c.get(uid, 0.0) for c in full for active in actives)
            gains[uid] = low
        last_gain[uuid] = gains
    return out


def _learn(idle: LearnedIdle, gpus: list[GpuState], processes_unknown: bool,
           since_last: tuple[float, float] | None, power_unknown: bool, was_lost: bool) -> None:
    """One read of a GPU that learns its idle, in each of its possible views. ``since_last``:
    (seconds, mJ) since the daemon's previous read of it in this run, None at its first."""
    if was_lost:
        idle.lost()
    outcomes = set()
    for g in gpus:
        if not power_unknown:
            power = g.power_watts
        elif since_last is not None and since_last[0] > 0:
            power = since_last[1] / 1000.0 / since_last[0]      # the counter's rate
        else:
            power = None
        outcomes.add(idle_tick_power(g, processes_unknown, power))
    idle.read(outcomes or {None})
