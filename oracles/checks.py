"""The invariants the chaos run checks on every scrape of ``/metrics`` and ``/stats/summary``.

Pure functions of what was served (and of what the checker remembers from earlier scrapes):
each returns the violations it found as short strings, empty when all hold.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

# Containers and pods are served while retained, so their sums equal the active energy;
# a process's series ends with the process, so Σ processes may only fall short of it.
LEVELS = ("gpustats_container_gpu_joules", "gpustats_pod_gpu_joules")
PROCESS = "gpustats_process_gpu_joules"
MIG = "gpustats_node_gpu_mig_joules"          # compared on GPUs that serve it
ACTIVE = "gpustats_node_gpu_active_joules"
UNATTRIBUTED = "gpustats_node_gpu_unattributed_joules"
POD = "gpustats_pod_gpu_joules"
ENERGY = "gpustats_node_gpu_joules"
POD_IDLE = "gpustats_pod_gpu_idle_share_joules"
UNALLOCATED = "gpustats_node_gpu_unallocated_idle_joules"
UNOBSERVED = "gpustats_node_gpu_unobserved_joules"      # a gap's energy: no one's idle
# Every tenant, of every kind (pods among them): the level the books and idle are checked on.
TENANT = "gpustats_tenant_gpu_joules"
TENANT_IDLE = "gpustats_tenant_gpu_idle_share_joules"
# Relative slack of conservation per GPU, and an absolute one for float rounding.
CONSERVATION_REL = 0.01
CONSERVATION_ABS = 1.0

Series = tuple[str, frozenset]
SHOWN_LABELS = ("pod_uid", "pod", "container", "pid", "gpu", "gpu_instance_id")


def series_name(key: Series) -> str:
    labels = dict(key[1])
    shown = ",".join(f"{k}={labels[k]}" for k in SHOWN_LABELS if labels.get(k))
    return f"{key[0]}{{{shown}}}"


# Labels that describe a series rather than tell it apart, added by a release after another
# (the previous release serves the same counter without them): left out of a series' key.
DESCRIPTIVE_LABELS = frozenset({"vendor"})
# A tenant's and a process's series are told apart by who they are, not by what names them
# now: a pod named once the kubelet's logs are read, a service whose UID label went with its
# last process, a process moved to another tenant's cgroup (its counter goes on under its new
# owner's labels) is each the same series.
IDENTITY_LABELS = {
    "gpustats_tenant_gpu_joules": ("node_name", "gpu", "gpu_uuid", "kind", "tenant", "pod_uid"),
    "gpustats_tenant_gpu_idle_share_joules": ("node_name", "gpu", "gpu_uuid", "kind", "tenant",
                                              "pod_uid"),
    "gpustats_process_gpu_joules": ("node_name", "gpu", "gpu_uuid", "gpu_instance_id", "pid"),
}


def _identity(name: str, labels: dict[str, str]) -> frozenset:
    kept = IDENTITY_LABELS.get(name)
    if kept is None:
        return frozenset((k, v) for k, v in labels.items() if k not in DESCRIPTIVE_LABELS)
    if labels.get("kind") == "pod":
        kept = tuple(k for k in kept if k != "tenant")      # a pod by its UID
    return frozenset((k, labels[k]) for k in kept if k in labels)


def counters(text: str) -> dict[Series, float]:
    """Every ``*_joules_total`` sample (the counters users bill by), keyed by the labels that
    tell its series apart."""
    out = {}
    for family in text_string_to_metric_families(text):
        if family.type != "counter" or not family.name.endswith("_joules"):
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                key = (family.name, _identity(family.name, sample.labels))
                out[key] = max(out.get(key, sample.value), sample.value)
    return out


def tenant_key(labels: dict[str, str]) -> str:
    """A tenant series' key as the world keys its tenants: a pod's UID, else kind:name."""
    if labels.get("kind") == "pod":
        return labels.get("pod_uid", "?")
    return f"{labels.get('kind')}:{labels.get('tenant')}"


def pod_totals(values: dict[Series, float]) -> dict[str, float]:
    """Each pod's joules over all its GPUs."""
    out: dict[str, float] = defaultdict(float)
    for (name, labels), value in values.items():
        if name == POD:
            out[dict(labels)["pod_uid"]] += value
    return out


def known_gpus(text: str) -> set[str]:
    """GPUs whose processes the daemon could read this tick: a sharing mode served, not lost."""
    shared, lost = set(), set()
    for family in text_string_to_metric_families(text):
        if family.name in ("gpustats_node_gpu_sharing_mode",          # an info family is
                           "gpustats_node_gpu_sharing_mode_info"):    # exposed as a gauge
            shared |= {s.labels.get("gpu_uuid") for s in family.samples}
        elif family.name == "gpustats_node_gpu_lost":
            lost |= {s.labels.get("gpu_uuid") for s in family.samples if s.value == 1}
    return shared - lost


COMPARED = (*LEVELS, ACTIVE, PROCESS, MIG, UNATTRIBUTED, ENERGY, POD_IDLE, UNALLOCATED,
            UNOBSERVED, TENANT, TENANT_IDLE)


@dataclass
class Interval:
    """Per GPU and level, what the counters gained between two scrapes, and which levels lost
    or regained a series in between."""
    gained: dict[str, dict[str, float]]
    vanished: dict[str, set[str]]      # GPU -> levels with a series served before, absent now
    reappeared: dict[str, set[str]]    # GPU -> levels with a series absent before, seen earlier


def _gpu_of(key: Series) -> str:
    return dict(key[1]).get("gpu_uuid", "?")


def grown(before: dict[Series, float], after: dict[Series, float],
          last_seen: dict[Series, float]) -> Interval:
    """What the series served in ``after`` gained since ``before``. A series absent from
    ``before`` counts its growth since the last value seen of it (``last_seen``: a MIG
    instance re-created with its id continues its retained counter), one never seen counts
    all of its value. A series that vanished in between is left out: its last gains are not
    seen."""
    out = Interval(defaultdict(lambda: defaultdict(float)), defaultdict(set), defaultdict(set))
    for key, value in after.items():
        name = key[0]
        if name not in COMPARED:
            continue
        uuid = _gpu_of(key)
        if key not in before and key in last_seen:
            out.reappeared[uuid].add(name)
        out.gained[uuid][name] += value - before.get(key, last_seen.get(key, 0.0))
    for key in before:
        if key[0] in COMPARED and key not in after:
            out.vanished[_gpu_of(key)].add(key[0])
    return out


@dataclass
class Conservation:
    """Per GPU, between two scrapes of one daemon run in which the GPU's processes were
    known: Σ container + unattributed = Σ pod + unattributed = the active joules gained
    (within 1 %), Σ process ≤ it; Σ pod idle shares + unallocated idle = the joules gained
    less the active ones (the idle, within 1 %); on a MIG GPU Σ MIG instance lies between the active
    joules less the unattributed ones and the active joules (energy of a process in no container is
    unattributed, yet its instance's).
    A process's series ends with the process; a container's series for a GPU ends when the
    container no longer holds it (its pod's goes on); a MIG instance's ends when the instance
    is destroyed. Where a level's series on a GPU vanished since the previous scrape, its
    gains in the ticks before it vanished are not seen: the level's sum is a lower bound of
    what was billed, checked on its upper side alone, and the shortfall is remembered as
    owed. A series that comes back counts its growth since it was last seen, so its level may
    exceed the interval's active joules by what that level is owed (by any amount where the
    series vanished over an interval that was not compared: its shortfall was not measured).
    While processes are unknown or the GPU is lost the daemon may leave the energy
    unattributed, so those intervals are not compared. Every tenant (pods and bare-metal ones)
    is compared as its own level; on a GPU that ever had a bare-metal tenant
    (``bare_metal``), containers and pods are not all of its tenants: only the tenant level."""
    previous: tuple[int, dict[Series, float], set[str]] | None = None
    last_seen: dict[Series, float] = field(default_factory=dict)   # across daemon runs
    owed: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    unmeasured: set[tuple[str, str]] = field(default_factory=set)  # vanished, shortfall unknown
    bare_metal: set[str] = field(default_factory=set)     # GPUs (served IDs) with such tenants

    def check(self, run: int, values: dict[Series, float], known: set[str]) -> list[str]:
        previous, self.previous = self.previous, (run, values, known)
        last_seen = dict(self.last_seen)
        self.last_seen.update(values)
        if previous is None:
            return []
        out = []
        interval = grown(previous[1], values, last_seen)
        for uuid in set(interval.gained) | set(interval.vanished):
            if previous[0] != run or uuid not in known or uuid not in previous[2]:
                self.unmeasured |= {(uuid, level) for level in interval.vanished[uuid]}
        if previous[0] != run:
            return []
        for uuid, levels in sorted(interval.gained.items()):
            if uuid not in known or uuid not in previous[2]:
                continue
            vanished, reappeared = interval.vanished[uuid], interval.reappeared[uuid]
            active = levels.get(ACTIVE, 0.0)
            unattributed = levels.get(UNATTRIBUTED, 0.0)
            slack = CONSERVATION_REL * active + CONSERVATION_ABS
            for level in (TENANT,) if uuid in self.bare_metal else (*LEVELS, TENANT):
                if level == TENANT and TENANT not in levels and TENANT not in vanished:
                    continue                     # no tenant series served (an older release)
                billed = levels.get(level, 0.0) + unattributed
                low, high = self._bounds((uuid, level), active, slack, vanished, reappeared,
                                         billed)
                if not low <= billed <= high:
                    out.append(f"conservation {uuid}: Σ {level} gained "
                               f"{levels.get(level, 0.0):.1f} J + unattributed "
                               f"{unattributed:.1f} J, active gained {active:.1f} J")
            mig = levels.get(MIG)
            if mig is not None:
                low, high = self._bounds((uuid, MIG), active, slack, vanished, reappeared,
                                         mig)
                if not low - unattributed <= mig <= high:
                    out.append(f"conservation {uuid}: Σ {MIG} gained {mig:.1f} J, active "
                               f"gained {active:.1f} J, unattributed {unattributed:.1f} J")
            out += self._idle(uuid, levels, vanished, reappeared)
            processes = levels.get(PROCESS, 0.0)
            _, high = self._bounds((uuid, PROCESS), active, slack, vanished, reappeared,
                                   processes)
            if processes > high:
                out.append(f"conservation {uuid}: Σ {PROCESS} gained "
                           f"{levels.get(PROCESS, 0.0):.1f} J > active gained {active:.1f} J")
        return out

    def _idle(self, uuid: str, levels: dict[str, float], vanished: set[str],
              reappeared: set[str]) -> list[str]:
        """Σ tenants' idle shares + unallocated idle = the GPU's energy less its active and its
        unobserved energy (within 1 %), where the GPU has an idle (its idle counters grew)."""
        if UNALLOCATED not in levels:
            return []                            # no idle known: nothing is shared
        idle = levels.get(ENERGY, 0.0) - levels.get(ACTIVE, 0.0) - levels.get(UNOBSERVED, 0.0)
        shared = levels.get(TENANT_IDLE, 0.0) + levels[UNALLOCATED]
        slack = CONSERVATION_REL * max(idle, 0.0) + CONSERVATION_ABS
        low, high = self._bounds((uuid, TENANT_IDLE), idle, slack, vanished, reappeared, shared)
        if low <= shared <= high:
            return []
        return [f"conservation {uuid}: Σ tenant idle shares {levels.get(TENANT_IDLE, 0.0):.1f} J + "
                f"unallocated idle {levels[UNALLOCATED]:.1f} J, idle gained {idle:.1f} J "
                f"(energy {levels.get(ENERGY, 0.0):.1f} J less active "
                f"{levels.get(ACTIVE, 0.0):.1f} J)"]

    def _bounds(self, owed_key: tuple[str, str], active: float, slack: float,
                vanished: set[str], reappeared: set[str], billed: float) -> tuple[float, float]:
        """(lowest, highest) a level may show gained over the interval; settles what it owes."""
        level = owed_key[1]
        low, high = active - slack, active + slack
        if level in reappeared:
            high += float("inf") if owed_key in self.unmeasured else self.owed[owed_key]
            self.unmeasured.discard(owed_key)
            self.owed[owed_key] = max(0.0, self.owed[owed_key] - max(0.0, billed - active))
        if level in vanished:
            low = float("-inf")
            self.owed[owed_key] += max(0.0, active - billed)
        return low, high


def idle_unknown(summary: dict) -> set[str]:
    """GPUs served with no idle power (none configured, none learnt yet), lost ones aside."""
    node, _ = accelerators_by_gpu(summary)
    return {uuid for uuid, d in node.items() if "idlePowerWatts" not in d and not d.get("lost")}


@dataclass
class NoIdle:
    """On a GPU with no idle at either end of an interval of one daemon run (none configured,
    none learnt: ``idle_unknown``) and its processes known, the whole energy is active: the
    active joules gained equal the energy gained (within 1 %), and no idle is shared or left
    unallocated. With conservation (Σ pod + unattributed = active) its holders get the GPU's
    whole energy less what is unattributed."""
    previous: tuple[int, dict[Series, float], set[str]] | None = None

    def check(self, run: int, values: dict[Series, float], known: set[str],
              no_idle: set[str]) -> list[str]:
        previous, self.previous = self.previous, (run, values, known & no_idle)
        if previous is None or previous[0] != run:
            return []
        out = []
        gained = grown(previous[1], values, {}).gained
        for uuid in sorted(previous[2] & known & no_idle):
            levels = gained.get(uuid, {})
            energy, active = levels.get(ENERGY, 0.0), levels.get(ACTIVE, 0.0)
            shared = levels.get(TENANT_IDLE, 0.0) + levels.get(UNALLOCATED, 0.0)
            if abs(energy - active) > CONSERVATION_REL * energy + CONSERVATION_ABS or \
                    abs(shared) > CONSERVATION_ABS:
                out.append(f"no idle on {uuid}, yet energy gained {energy:.1f} J, active "
                           f"{active:.1f} J, idle shared {levels.get(TENANT_IDLE, 0.0):.1f} J "
                           f"and unallocated {levels.get(UNALLOCATED, 0.0):.1f} J")
        return out


# How long after SIGCONT the first tick (the one billing the stall) may take to be served: a
# tick due at once, on a machine that may be loaded.
STALL_PUBLISH_SECONDS = 2.0


@dataclass
class Monotonic:
    """The highest value served per counter series, across daemon restarts; a pod's series
    must not vanish while the pod exists."""
    highest: dict[Series, float] = field(default_factory=dict)
    reported: set[Series] = field(default_factory=set)      # each lowered series said once

    def vanished(self, values: dict[Series, float], live_pods: set[str]) -> list[str]:
        """Series of a pod that still exists, served before and absent now. (A container's
        series for a GPU ends when the container no longer holds it: not checked.)"""
        return [f"{series_name(key)} served before ({value:.1f} J), absent now though the "
                "pod exists" for key, value in sorted(self.highest.items(), key=str)
                if key[0] == POD and key not in values
                and dict(key[1]).get("pod_uid") in live_pods]

    def check(self, values: dict[Series, float]) -> list[str]:
        out = []
        for key, value in values.items():
            before = self.highest.get(key)
            if before is not None and value < before - 1e-6 and key not in self.reported:
                self.reported.add(key)
                out.append(f"counter down {series_name(key)}: {before:.3f} -> {value:.3f}")
            if before is None or value > before:
                self.highest[key] = value
        return out


@dataclass
class Rate:
    """No pod gains more than the most any GPU can give above idle over the elapsed time
    (plus a tick on each side): a GPU's lost interval billed at once shows here. A stall
    (SIGSTOP) is time the GPUs ran too: the first tick after it bills it, so a scrape taken
    before that tick was published is allowed the stall's seconds as well."""
    max_active_watts: float
    tick_seconds: float
    seen: dict[Series, tuple[float, float]] = field(default_factory=dict)
    stalls: list[tuple[float, float]] = field(default_factory=list)   # (resumed at, seconds)

    def stalled(self, resumed_at: float, seconds: float) -> None:
        self.stalls.append((resumed_at, seconds))

    def _stalled_seconds(self, since: float, now: float) -> float:
        """Stalls whose first tick after may be billed between a scrape at ``since`` and one
        at ``now``: resumed before ``now``, and not long enough before ``since`` for that tick
        to have been served to it."""
        return sum(seconds for resumed_at, seconds in self.stalls
                   if since < resumed_at + STALL_PUBLISH_SECONDS and resumed_at < now)

    def check(self, now: float, values: dict[Series, float]) -> list[str]:
        out = []
        for key, value in values.items():
            if key[0] != POD:
                continue
            before = self.seen.get(key)
            if before is None or now - before[0] < 1.0:
                if before is None:
                    self.seen[key] = (now, value)
                continue
            elapsed = now - before[0] + self._stalled_seconds(before[0], now)
            allowed = self.max_active_watts * (elapsed + 2 * self.tick_seconds) + 1.0
            if value - before[1] > allowed:
                out.append(f"pod gained {value - before[1]:.0f} J in {now - before[0]:.2f} s "
                           f"(at most {allowed:.0f} J possible) {series_name(key)}")
            self.seen[key] = (now, value)
        return out


def accelerators_by_gpu(summary: dict) -> tuple[dict[str, dict], list[tuple[str, dict]]]:
    """(node accelerators by UUID, (pod UID, accelerator entry) of every container)."""
    node = {a["id"]: a for a in summary.get("node", {}).get("accelerators", [])}
    entries = []
    for pod in summary.get("pods", []):
        for c in pod.get("containers", []):
            for acc in c.get("accelerators", []):
                entries.append((pod["podRef"]["uid"], acc))
    for c in summary.get("containers", []):
        for acc in c.get("accelerators", []):
            entries.append((c.get("podUid", "?"), acc))
    return node, entries


def attributed_watts(summary: dict) -> list[str]:
    """Σ attributed watts on a GPU ≤ its active watts (one snapshot)."""
    out = []
    node, entries = accelerators_by_gpu(summary)
    attributed: dict[str, float] = defaultdict(float)
    for _, acc in entries:
        if "attributedPowerWatts" in acc:
            attributed[acc["id"]] += acc["attributedPowerWatts"]
    for uuid, watts in attributed.items():
        device = node.get(uuid)
        if device is None or device.get("lost"):
            continue
        active = device.get("activePowerWatts")
        if active is not None and watts > active * 1.01 + 0.5:
            out.append(f"attributed {watts:.1f} W > active {active:.1f} W on {uuid}")
    return out


def unknown_absent(summary: dict, temperature_celsius: float) -> list[str]:
    """What the GPU did not give is absent, never 0: no attribution where its processes are
    unknown (no ``sharingMode``), no temperature other than the one it reads."""
    out = []
    node, entries = accelerators_by_gpu(summary)
    for pod, acc in entries:
        device = node.get(acc["id"])
        if device is None or device.get("lost") or "sharingMode" in device:
            continue
        if "attributedPowerWatts" in acc:
            out.append(f"{acc['id']}: processes unknown, yet pod {pod} is attributed "
                       f"{acc['attributedPowerWatts']} W (must be absent)")
    for uuid, device in node.items():
        if device.get("lost"):
            continue
        temperature = device.get("temperature", device.get("temperatureCelsius"))
        if temperature is not None and temperature != temperature_celsius:
            out.append(f"{uuid}: temperature {temperature} served, the GPU reads "
                       f"{temperature_celsius} or nothing")
    return out


def persistence_failing(text: str) -> float | None:
    """``gpustats_source_failing{source="persistence"}``, None when not served."""
    for family in text_string_to_metric_families(text):
        if family.name != "gpustats_source_failing":
            continue
        for sample in family.samples:
            if sample.labels.get("source") == "persistence":
                return sample.value
    return None


def served_pods(summary: dict, values: dict[Series, float]) -> tuple[set[str], set[str]]:
    """(pod UIDs in the summary's pods[], pod UIDs with a pod series in /metrics)."""
    in_summary = {p["podRef"]["uid"] for p in summary.get("pods", [])}
    in_metrics = {dict(labels)["pod_uid"] for (name, labels) in values if name == POD}
    return in_summary, in_metrics
