"""Chaos run: random world events through the real daemon, checked against the simulator's
ground truth on every scrape and at the end.

    python -m bench.chaos --seed 7 --seconds 120
    python -m bench.chaos --seed 7 --seconds 30 --events power,pod_create,pod_delete,sigkill
    python -m bench.chaos --seeds 1-50 --seconds 120          # many seeds, one after another

The world (oracles/world.py) is two simulated H100s, the second in MIG mode with two
instances, and pods on fake cgroup v2 or v1 trees (the seed picks) named through the
kubelet's log layout; with ``tenant_create``, bare-metal tenants beside them (a service, a
session, a Slurm job, a root process, an LXC container, a cgroup no rule names); with
``drm_gpus``, half the seeds add an AMD MI300X and an Intel Flex (xe or i915), whose clients
the simulator writes as DRM fdinfo, half of those with the kernel's DRM clients lists.
Events (bench/chaos_events.py, each kind once in a drawn order, then drawn at random) edit
it; each edit writes new host entries first, then the scenario, and removes host entries
last, and every state is held for several ticks. Some act on the daemon instead: signals, a
full or read-only state dir, its wall clock stepped (``clock_step``, libfaketime:
bench/chaos_clock.py), the previous release started over its state and it over the previous
release's (``previous_release``: bench/chaos_release.py). A few are drawn once before the first
start: ``busy_from_start`` (a GPU with no idle configured) and whether the run starts on the
previous release. The checks (oracles/checks.py) run on each scrape of
/metrics and /stats/summary: conservation per GPU within 1 %, no counter lower than a value
served before (across restarts), each GPU's books closing (energy = Σ pods' energy and idle
shares + unallocated + unattributed + unobserved, after every restart: oracles/identity.py),
no pod gaining more than a GPU can give (lost time billed),
attributed watts ≤ active watts, unknown absent rather than 0, every live pod that was served
still served, a GPU with no idle billed in full. At the end each tenant's total must lie within
2 % of the oracle's range (oracles/energy.py, from the simulator's trace of reloads and
energy reads). An event this host cannot run (no libfaketime, no git history) is left out
with a line in the log.

A failure prints the seed, the event log and the command that replays it (same seed, same
events: the same sequence of world edits), and keeps its work dir: the daemon's log, the
simulator's trace (``host/trace.jsonl``) and what the oracle was given beside it
(``oracle-input.pickle``: the world state of each trace tag), to walk the trace again
(``oracles.energy.expected_energy``) where a failure does not replay, and each scrape's
tenant and GPU totals (``scrapes.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from oracles import checks
from oracles.identity import Identity, books
from bench.chaos_clock import SteppedClock, find_libfaketime
from bench.chaos_daemon import REPO, Daemon, StateDisk
from bench.chaos_events import (
    DISK_EVENTS, EVENTS, START_ONLY, START_OPTIONS, forward_from_previous_release,
)
from oracles.energy import expected_energy, read_trace
from bench.chaos_release import extract_release, previous_release_commit
from oracles.world import (
    BARE_METAL, IDLE_WATTS, JOB, LIMIT_WATTS, POD, PROCESS, SERVICE, SESSION, World, WorldState,
)
from gpustats.engine.state_files import FORMAT_VERSION

TEMPERATURE = 40
SCRAPE_EVERY = 0.25
QUIET_SECONDS = 2.0           # all GPUs at idle before the final comparison
ORACLE_INPUT = "oracle-input.pickle"   # the world states and idle learners, in the work dir
SCRAPES = "scrapes.jsonl"              # each scrape's tenant and GPU totals, in the work dir
END_REL, END_ABS = 0.02, 2.0  # each tenant's total against the oracle's range
# How long a new DRM client may stay unseen (s): with the kernel's clients list, the tick
# after it opens; with the bounded scan, that tick and the forced rescan's next one.
UNSEEN_LISTED, UNSEEN_SCANNED = 0.5, 0.9
CHECKS = ("conservation", "counter vanished", "counter lowered", "lost time billed",
          "attributed watts", "unknown served", "live pod not served",
          "persistence failure not shown", "tenant total vs oracle",
          "billed in full without idle", "previous release over newer state",
          "release hand-over", "books")


@dataclass
class Result:
    seed: int
    seconds: float
    events: list[str]
    log: list[str] = field(default_factory=list)
    violations: list[tuple[str, str]] = field(default_factory=list)   # (kind, text)
    counts: Counter = field(default_factory=Counter)
    scrapes: int = 0
    starts: int = 0
    wall_seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)
    ignore: tuple[str, ...] = ()                       # checks turned off
    ignored: Counter = field(default_factory=Counter)   # their violations, counted only

    @property
    def ok(self) -> bool:
        return not self.violations

    def kinds(self) -> Counter:
        return Counter(kind for kind, _ in self.violations)

    def report(self, verbose: bool) -> str:
        lines = [f"seed {self.seed}: {'PASS' if self.ok else 'FAIL'} — {self.wall_seconds:.0f} s,"
                 f" {sum(self.counts.values())} events, {self.scrapes} scrapes, "
                 f"{self.starts} daemon starts"]
        lines.append("  events: " + ", ".join(f"{k}×{n}" for k, n in sorted(self.counts.items())))
        if self.skipped:
            lines.append("  not run here: " + ", ".join(self.skipped))
        if self.ignored:
            lines.append("  ignored (checks turned off): " + ", ".join(
                f"{k}×{n}" for k, n in sorted(self.ignored.items())))
        if not self.ok:
            for kind, n in sorted(self.kinds().items()):
                examples = [t for k, t in self.violations if k == kind][:3]
                lines.append(f"  {kind}: {n}")
                lines.extend(f"      {e}" for e in examples)
            lines.append(f"  replay: python -m bench.chaos --seed {self.seed} "
                         f"--seconds {self.seconds:g} --events {','.join(self.events)}" +
                         (f" --ignore '{','.join(self.ignore)}'" if self.ignore else ""))
        if verbose or not self.ok:
            lines.append("  event log:")
            lines.extend(f"    {e}" for e in self.log)
        return "\n".join(lines)


class Run:
    """One seed's run: the world, the daemon, the checks."""

    def __init__(self, seed: int, seconds: float, events: list[str], workdir: Path,
                 ignored: frozenset[str] = frozenset()):
        self.ignored = ignored
        self.rng = random.Random(seed)
        self.seconds = seconds
        self.result = Result(seed, seconds, list(events), ignore=tuple(sorted(ignored)))
        self.events = list(events)
        self.workdir = workdir
        self.began = time.monotonic()
        cgroup_version = self.rng.choice([1, 2])
        # drm_gpus: half the seeds have an AMD and an Intel GPU beside the NVIDIA ones, half
        # of those the kernel's DRM clients lists; their simulated trees live outside the state
        # dir (a full or read-only state dir is the daemon's trouble, not the kernel's).
        drm: tuple[str, ...] = ()
        self.clients_listed = False
        if "drm_gpus" in self.events and self.rng.random() < 0.5:
            drm = ("amd", self.rng.choice(["intel-xe", "intel-i915"]))
            self.clients_listed = self.rng.random() < 0.5
            self.result.counts["drm_gpus"] += 1
        self.drm_root = workdir / "simulated-drm"
        self.world = World(workdir / "host", 2, cgroup_version, mig_gpu=True, drm=drm,
                           clients_lists=self.drm_root / "sys" / "kernel" / "debug" / "dri"
                           if self.clients_listed else None)
        self.note(f"cgroup v{cgroup_version}; GPUs: " + ", ".join(
            g.uuid + (" (MIG)" if g.mig else "") + (f" ({g.vendor} {g.driver}, "
                                                    f"{g.served_id})" if g.drm else "")
            for g in self.world.gpus) + ("; DRM clients lists" if self.clients_listed
                                         else "; no DRM clients list" if drm else ""))
        if drm and "previous_release" in self.events:
            self.skip("previous_release", "its simulator traces no AMD or Intel energy read")
        self.clock: SteppedClock | None = None
        self.previous: Path | None = None          # the previous release's tree
        self.start_on_previous = False
        self.prepare_clock_and_releases()
        # The previous release names no LXC container nor unknown cgroup layout (it bills them
        # as the process in them): a run that starts it places only the kinds it names.
        self.bare_metal_kinds = (SERVICE, SESSION, JOB, PROCESS) \
            if "previous_release" in self.events else BARE_METAL
        for name, option in START_OPTIONS.items():   # draws before the first start
            if name in self.events:
                option(self, self.rng)
        self.config_path = workdir / "gpustats.yaml"
        self.write_config(0.25)
        self.daemon = Daemon(workdir, [
            "--config", str(self.config_path), "--simulate", str(self.world.scenario_path),
            "--cgroup-root", str(self.world.cgroup), "--proc-root", str(self.world.proc),
            "--log-root", str(self.world.logs), "--state-dir", str(workdir / "state"),
            "--pod-resources-socket", "", "--runtime-socket", "",
            "--idle-power-watts", self.idle_power_flag(), "--counter-retention", "3600",
            "--persist-interval", "10"], workdir / "state",
            slow_fsync=(0.08, 0.3) if "compaction_kill" in events else None,
            env=self.clock.env() if self.clock is not None else None)
        self.disk: StateDisk | None = None
        if any(e in events for e in DISK_EVENTS):
            self.disk = StateDisk(workdir / "state", self.daemon.readonly_flag)
            if not self.disk.mounted and "disk_full" in self.events:
                self.skip("disk_full", "the state dir cannot be mounted as a small tmpfs")
        if drm:
            (workdir / "state").mkdir(exist_ok=True)
            self.drm_root.mkdir()
            (workdir / "state" / "simulated-drm").symlink_to(self.drm_root)
        self.states: dict[str, WorldState] = {}
        self.version = 0
        self.monotonic = checks.Monotonic()
        self.conservation = checks.Conservation()
        self.no_idle = checks.NoIdle()
        self.books = Identity()
        self.unseen = {g.uuid: UNSEEN_LISTED if self.clients_listed else UNSEEN_SCANNED
                       for g in self.world.gpus if g.drm}
        self.on_previous = False                 # the daemon running is the previous release
        learns = any(g.learns_idle for g in self.world.gpus)
        self.rate = checks.Rate(LIMIT_WATTS + 150 - (0.0 if learns else IDLE_WATTS), 0.4)
        self.ever_served: set[str] = set()
        self.idle_learnt: set[str] = set()      # GPUs that learn their idle and have one

    def skip(self, event: str, why: str) -> None:
        """Leave an event this host cannot run out of the draw, with a line in the log."""
        self.result.skipped.append(event)
        self.events.remove(event)
        self.note(f"{event} not run: {why}")

    def prepare_clock_and_releases(self) -> None:
        """libfaketime for ``clock_step``, the previous release for ``previous_release``."""
        if "clock_step" in self.events:
            library = find_libfaketime()
            if library is None:
                self.skip("clock_step", "libfaketime not found (Debian: libfaketime)")
            else:
                self.clock = SteppedClock(library, self.workdir / "faketime")
        if "previous_release" in self.events:
            commit, why = previous_release_commit(REPO, FORMAT_VERSION - 1)
            if commit is None:
                self.skip("previous_release", why)
                return
            try:
                self.previous = extract_release(REPO, commit, self.workdir / "previous")
            except RuntimeError as exc:
                self.skip("previous_release", str(exc))
                return
            self.note(f"previous release: {commit[:12]} (state format {FORMAT_VERSION - 1})")

    def idle_power_flag(self) -> str:
        """``--idle-power-watts``: every GPU's, but for those that learn their idle."""
        if not any(g.learns_idle for g in self.world.gpus):
            return str(IDLE_WATTS)
        return ",".join(f"{g.served_id}={IDLE_WATTS}" for g in self.world.gpus
                        if not g.learns_idle)

    # ------------------------------------------------------------ used by events

    def note(self, text: str) -> None:
        self.result.log.append(f"{time.monotonic() - self.began:7.2f}  {text}")

    def violation(self, kind: str, text: str) -> None:
        if kind in self.ignored:
            self.result.ignored[kind] += 1
            return
        self.result.violations.append(
            (kind, f"[{time.monotonic() - self.began:.2f} s] {text}"))

    def write_config(self, interval: float) -> None:
        self.config_path.write_text(yaml.safe_dump({"housekeeping_interval": interval,
                                                    "log_level": "INFO"}))

    def commit(self, text: str) -> None:
        """Host entries first, the scenario next, removals last (each seen for a tick)."""
        if self.world.sync_host(create=True):
            self.hold(0.6)
        self.write_now(text)
        self.hold(0.6)
        self.world.sync_host(create=False)

    def write_now(self, text: str) -> None:
        """A scenario edit that needs no host change, written at once (no hold)."""
        self.note(text)
        self.version += 1
        self.write_state(f"v{self.version}")

    def write_state(self, tag: str) -> None:
        """The world's state as version ``tag``: kept for the oracle, then written."""
        self.states[tag] = self.world.state()
        self.conservation.bare_metal |= {self.world.gpus[t.gpu].served_id
                                         for t in self.world.pods.values() if t.kind != POD}
        self.world.write_scenario(tag)

    def hold(self, seconds: float, scrape: bool = True) -> None:
        deadline = time.monotonic() + seconds
        while True:
            now = time.monotonic()
            if now >= deadline:
                return
            if scrape:
                self.scrape()
            time.sleep(min(SCRAPE_EVERY, max(0.0, deadline - time.monotonic())))

    def restart(self, sig: int, down_seconds: float) -> None:
        name = signal.Signals(sig).name
        self.note(f"{name}, down {down_seconds:.2f} s")
        code = self.daemon.stop(sig)
        if sig == signal.SIGTERM and code != 0:
            self.violation("exit status", f"SIGTERM: daemon exited {code}\n"
                                          f"{self.daemon.log_tail(120)}")
        time.sleep(down_seconds)
        self.start_daemon()

    def start_daemon(self, release: Path = REPO) -> None:
        self.on_previous = release != REPO
        try:
            self.daemon.start(release=release)
        except RuntimeError as exc:
            self.violation("daemon start", f"{exc}\n{self.daemon.log_tail()}")
            if self.disk is not None:
                self.disk.restore()
            self.daemon.start(release=release)
        self.result.starts += 1

    # ------------------------------------------------------------ checks

    def mark_trace(self, event: str, phase: str) -> None:
        """A line of the harness's own in the simulator's trace, on the clock its lines are."""
        line = {"t": time.time(), "mono": time.monotonic(), "event": event, "tag": None,
                "phase": phase}
        with open(self.world.trace_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    def scrape(self) -> None:
        if not self.daemon.running:
            if self.daemon.proc is not None:
                self.violation("daemon died", f"exit {self.daemon.proc.returncode}\n"
                               f"{self.daemon.log_tail()}")
                self.start_daemon()
            return
        now = time.monotonic()
        status, text = self.daemon.get("/metrics")
        summary = self.daemon.get_json("/stats/summary")
        if status != 200 or summary is None:
            if self.daemon.running:
                self.violation("http", f"/metrics {status}, summary {summary is not None}")
            return
        self.result.scrapes += 1
        values = checks.counters(text)
        self.record_scrape(now, values)
        known = checks.known_gpus(text)
        vanished = self.monotonic.vanished(values, self.world.live_pod_uids()) \
            if now - self.daemon.started_at > 1.5 else []
        for kind, found in (("conservation", self.conservation.check(
                                self.daemon.starts, values, known)),
                            ("billed in full without idle", self.no_idle.check(
                                self.daemon.starts, values, known,
                                checks.idle_unknown(summary))),
                            ("books", self.books.check(self.daemon.starts, values,
                                                       self.on_previous)),
                            ("counter vanished", vanished),
                            ("counter lowered", self.monotonic.check(values)),
                            ("lost time billed", self.rate.check(now, values)),
                            ("attributed watts", checks.attributed_watts(summary)),
                            ("unknown served", checks.unknown_absent(summary, TEMPERATURE))):
            for text_ in found:
                self.violation(kind, text_)
        stalled = self.disk.journal_stalled_for(now) if self.disk is not None else 0.0
        if stalled > 1.0 and checks.persistence_failing(text) != 1:
            self.violation("persistence failure not shown",
                           "state dir " + ("full" if self.disk.full else "read-only") +
                           f" for {now - self.disk.since:.1f} s (journal unchanged for "
                           f"{stalled:.1f} s), gpustats_source_failing"
                           f"{{source=\"persistence\"}} = {checks.persistence_failing(text)}")
        self.note_learnt_idle(summary)
        in_summary, in_metrics = checks.served_pods(summary, values)
        self.ever_served |= in_metrics
        if now - self.daemon.started_at > 1.5:
            for uid in sorted(self.world.live_pod_uids() & self.ever_served):
                if uid not in in_summary or uid not in in_metrics:
                    self.violation("live pod not served",
                                   f"pod {uid} (cgroup exists): pods[] {uid in in_summary}, "
                                   f"/metrics {uid in in_metrics}")

    def record_scrape(self, now: float, values: dict) -> None:
        """Each scrape's tenant and GPU totals, a line in ``scrapes.jsonl`` of the work dir (to
        follow a failing tenant's counter scrape by scrape)."""
        series = {}
        for (name, labels), value in values.items():
            if name in (checks.TENANT, checks.TENANT_IDLE):
                who = checks.tenant_key(dict(labels))
            elif name in (checks.ENERGY, checks.UNATTRIBUTED, checks.UNOBSERVED,
                          checks.UNALLOCATED):
                who = ""
            else:
                continue
            short = name.removeprefix("gpustats_")
            series[f"{short} {who} {dict(labels).get('gpu_uuid')}"] = round(value, 1)
        line = {"t": round(now - self.began, 3), "start": self.daemon.starts, "series": series}
        with open(self.workdir / SCRAPES, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    def note_learnt_idle(self, summary: dict) -> None:
        """Say in the log when the daemon first serves an idle for a GPU that learns it."""
        node, _ = checks.accelerators_by_gpu(summary)
        for gpu in self.world.gpus:
            watts = node.get(gpu.uuid, {}).get("idlePowerWatts")
            if gpu.learns_idle and watts is not None and gpu.uuid not in self.idle_learnt:
                self.idle_learnt.add(gpu.uuid)
                self.note(f"GPU {gpu.index}: the daemon serves an idle of {watts} W (learnt)")

    def note_books(self) -> None:
        """Each GPU's last books in the log: energy, and the parts outside the tenants'."""
        for uuid, (joules, parts) in sorted(books(self.monotonic.highest).items()):
            self.note(f"GPU {uuid}: energy {joules:.1f} J, " + ", ".join(
                f"{name.removeprefix('gpustats_')} {value:.1f}" for name, value in parts.items()))

    def final_check(self) -> None:
        self.note_books()
        served: dict[str, float] = defaultdict(float)
        for (name, labels), value in self.monotonic.highest.items():
            if name == checks.TENANT:
                served[checks.tenant_key(dict(labels))] += value
        learns_idle = frozenset(g.uuid for g in self.world.gpus if g.learns_idle)
        # What the oracle was given, beside the trace, to walk it again when a seed fails.
        with open(self.workdir / ORACLE_INPUT, "wb") as f:
            pickle.dump({"states": self.states, "learns_idle": learns_idle,
                         "unseen": self.unseen}, f)
        expected = expected_energy(read_trace(self.world.trace_path), self.states, learns_idle,
                                   self.unseen)
        self.note(f"oracle: {expected.intervals} tick intervals, "
                  f"{expected.unbilled_intervals} unbillable (lost GPU)")
        for uid in sorted(set(served) | set(expected.high)):
            low, high = expected.low.get(uid, 0.0), expected.high.get(uid, 0.0)
            got = served.get(uid, 0.0)
            self.note(f"tenant {uid}: served {got:.1f} J, oracle [{low:.1f}, {high:.1f}] J")
            if got < low * (1 - END_REL) - END_ABS or got > high * (1 + END_REL) + END_ABS:
                self.violation("tenant total vs oracle",
                               f"tenant {uid}: {got:.1f} J served, oracle [{low:.1f}, "
                               f"{high:.1f}] J")

    # ------------------------------------------------------------ the run

    def run(self) -> Result:
        for gpu in self.world.gpus:               # two tenants on each GPU to start with
            for n in range(2):
                gi = sorted(gpu.mig)[len(self.world.pods) % len(gpu.mig)] if gpu.mig else None
                # A bare-metal tenant beside a pod, on a whole GPU, where the run has them.
                kind = self.rng.choice(self.bare_metal_kinds) if n and gpu.mig is None and \
                    "tenant_create" in self.events else POD
                self.world.new_pod(gpu.index, gi, 30 + 20 * (len(self.world.pods) % 4), kind)
        self.world.sync_host(create=True)
        self.version += 1
        self.write_state("v1")
        end = self.began + self.seconds - QUIET_SECONDS
        drawn = [e for e in self.events if e not in START_ONLY]
        try:
            if self.start_on_previous:
                forward_from_previous_release(self, self.rng)
            else:
                self.start_daemon()
            first = self.rng.sample(drawn, len(drawn))   # every kind once, then at random
            while time.monotonic() < end:
                if not drawn:
                    self.hold(end - time.monotonic())
                    break
                name = first.pop() if first else self.rng.choice(drawn)
                self.result.counts[name] += 1
                EVENTS[name](self, self.rng)
                self.hold(self.rng.uniform(0.8, 2.0))
            for gpu in self.world.gpus:
                gpu.power_watts, gpu.lost = IDLE_WATTS, False
                gpu.unsupported.clear()
            self.commit("quiet: every GPU at idle, nothing more to bill")
            self.hold(QUIET_SECONDS)
            # A GPU that has no idle yet bills its idle power on: the oracle counts the ticks
            # up to the last scrape, whose snapshot lies between these two marks.
            self.mark_trace("final_scrape", "begin")
            self.scrape()
            self.mark_trace("final_scrape", "end")
            code = self.daemon.stop(signal.SIGTERM)
            if code != 0:
                self.violation("exit status", f"SIGTERM at the end: daemon exited {code}\n"
                                              f"{self.daemon.log_tail(120)}")
            self.final_check()
        finally:
            self.daemon.stop(signal.SIGKILL)
            if self.disk is not None:
                self.disk.close()
        self.result.wall_seconds = time.monotonic() - self.began
        return self.result


def run_chaos(seed: int, seconds: float, events: list[str], workdir: Path | None = None,
              keep: bool = False, ignored: frozenset[str] = frozenset()) -> Result:
    """One seed; the work dir is removed afterwards unless ``keep`` (or it was given)."""
    own = workdir is None
    workdir = workdir or Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-"))
    try:
        return Run(seed, seconds, events, workdir, ignored).run()
    finally:
        if own and not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def _seeds(text: str) -> list[int]:
    if "-" in text:
        low, high = text.split("-", 1)
        return list(range(int(low), int(high) + 1))
    return [int(s) for s in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--seeds", default=None, help="e.g. 1-50 or 3,7,9")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--events", default=",".join(EVENTS),
                        help=f"comma-separated, of: {', '.join(EVENTS)}")
    parser.add_argument("--ignore", default="",
                        help=f"checks to turn off, comma-separated, of: {', '.join(CHECKS)}")
    parser.add_argument("--keep", action="store_true", help="keep every seed's work dir "
                        "(daemon log, trace, scenario) and print where; a failing seed's is "
                        "always kept, since a failure that hangs on timing may not replay")
    parser.add_argument("--verbose", action="store_true", help="print the event log always")
    args = parser.parse_args(argv)
    events = [e for e in args.events.split(",") if e]
    unknown = [e for e in events if e not in EVENTS]
    if unknown:
        parser.error(f"unknown events {unknown}; known: {', '.join(EVENTS)}")
    ignored = frozenset(c for c in args.ignore.split(",") if c)
    if ignored - set(CHECKS):
        parser.error(f"unknown checks {sorted(ignored - set(CHECKS))}; known: {', '.join(CHECKS)}")
    if args.seconds < QUIET_SECONDS + 3:
        parser.error(f"--seconds must be at least {QUIET_SECONDS + 3:g}")
    seeds = _seeds(args.seeds) if args.seeds else [args.seed if args.seed is not None else 1]
    failed = []
    started = time.monotonic()
    for seed in seeds:
        workdir = Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-"))
        result = run_chaos(seed, args.seconds, events, workdir, ignored=ignored)
        print(result.report(args.verbose), flush=True)
        if args.keep or not result.ok:
            print(f"  work dir: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        if not result.ok:
            failed.append(seed)
    print(f"{len(seeds)} seed(s) in {time.monotonic() - started:.0f} s; "
          f"failed: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
