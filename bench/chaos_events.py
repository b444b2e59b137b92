"""The chaos run's world events, one function each: ``event(run, rng)`` edits the world
through ``run.commit`` (host trees, then the scenario) and holds states with ``run.hold``.

Every draw comes from ``rng`` in a fixed order, so one seed gives one event sequence.
"""

from __future__ import annotations

import random
import signal
import time

from oracles import checks
from bench import chaos_release as release
from oracles.world import IDLE_WATTS, LIMIT_WATTS, POD
from gpustats.engine.state_files import FORMAT_VERSION

# Fields toggled NOT_SUPPORTED (the daemon remembers a NOT_SUPPORTED until it restarts).
TOGGLED_FIELDS = ("processes", "process_utilization", "memory", "temperature", "power")
MIG_PROFILE_IDS = range(1, 15)
STEP_SETTLE_SECONDS = 0.3


def _gpu(run, rng: random.Random):
    return rng.choice(run.world.gpus)


def _nvidia_gpu(run, rng: random.Random):
    """An NVIDIA GPU (lost GPUs and NOT_SUPPORTED fields are NVML's)."""
    return rng.choice([g for g in run.world.gpus if not g.drm])


def _new_pod(run, rng: random.Random, gpu) -> str:
    gi = rng.choice(sorted(gpu.mig)) if gpu.mig else None
    pod = run.world.new_pod(gpu.index, gi, rng.randint(10, 90))
    return f"pod {pod.name} on GPU {gpu.index}" + (f" instance {gi}" if gi else "")


def power(run, rng):
    gpu = _gpu(run, rng)
    gpu.power_watts = round(rng.uniform(150, 650), 1)
    run.commit(f"power GPU {gpu.index} -> {gpu.power_watts} W")


def glitch(run, rng):
    gpu = _gpu(run, rng)
    before = gpu.power_watts
    gpu.power_watts = rng.choice([0.0, round(IDLE_WATTS / 2, 1), LIMIT_WATTS + 150])
    run.commit(f"glitch GPU {gpu.index}: {before} -> {gpu.power_watts} W")
    run.hold(rng.uniform(0.3, 0.7))
    gpu.power_watts = before
    run.commit(f"glitch GPU {gpu.index} over: {before} W")


def pod_create(run, rng):
    gpu = _gpu(run, rng)
    run.commit("create " + _new_pod(run, rng, gpu))


def pod_delete(run, rng):
    if not run.world.pods:
        return
    number = rng.choice(sorted(run.world.pods))
    pod = run.world.pods.pop(number)
    run.commit(f"delete pod {pod.name}")


def process_churn(run, rng):
    running = [(p, c) for p in run.world.pods.values() for c in p.containers if c.pid]
    if not running:
        return
    pod, container = rng.choice(sorted(running, key=lambda pc: pc[1].number))
    old = container.pid
    container.pid = run.world.fresh("pid")
    container.sm_percent = rng.randint(10, 90)
    run.commit(f"process churn in {pod.name}/{container.name}: pid {old} -> {container.pid} "
               f"(SM {container.sm_percent} %)")


def container_restart(run, rng):
    pods = sorted(p.number for p in run.world.pods.values() if p.containers)
    if not pods:
        return
    pod = run.world.pods[rng.choice(pods)]
    gone = pod.containers.pop(0)
    run.commit(f"container {gone.name} of {pod.name} exits (restart gap)")
    run.hold(rng.uniform(1.0, 3.0))
    if pod.number not in run.world.pods:
        return
    new = run.world.new_container(pod, rng.randint(10, 90))
    run.commit(f"container of {pod.name} restarted as {new.name}")


def gpu_lost(run, rng):
    gpu = _nvidia_gpu(run, rng)
    gpu.lost = True
    run.commit(f"GPU {gpu.index} lost")
    run.hold(rng.uniform(0.8, 2.0))
    if rng.random() < 0.5:
        run.commit("while lost, create " + _new_pod(run, rng, gpu))
        run.hold(rng.uniform(0.5, 1.5))
    gpu.lost = False
    run.commit(f"GPU {gpu.index} back")


def not_supported(run, rng):
    gpu = _nvidia_gpu(run, rng)
    name = rng.choice(TOGGLED_FIELDS)
    gpu.unsupported.add(name)
    run.commit(f"GPU {gpu.index}: {name} NOT_SUPPORTED")
    run.hold(rng.uniform(1.0, 3.0))
    gpu.unsupported.discard(name)
    run.commit(f"GPU {gpu.index}: {name} supported again")


def mig_reconfigure(run, rng):
    gpus = [g for g in run.world.gpus if g.mig]
    if not gpus:
        return
    gpu = rng.choice(gpus)
    old = rng.choice(sorted(gpu.mig))
    for number in sorted(run.world.pods):
        pod = run.world.pods[number]
        if pod.gpu == gpu.index and pod.gpu_instance == old:
            del run.world.pods[number]
    new = rng.choice([gi for gi in MIG_PROFILE_IDS if gi not in gpu.mig])
    del gpu.mig[old]
    gpu.mig[new] = float(rng.randint(10, 90))
    pod = run.world.new_pod(gpu.index, new, 50)
    run.commit(f"MIG on GPU {gpu.index}: instance {old} destroyed, {new} created "
               f"(activity {gpu.mig[new]} %), its tenant {pod.name}")


def _disk(run, rng, fill: bool):
    if fill:
        run.disk.fill()
    else:
        run.disk.make_readonly()
    run.note("state dir " + ("full" if fill else "read-only"))
    run.hold(rng.uniform(1.0, 3.0))
    if rng.random() < 0.3:
        run.daemon.send(signal.SIGHUP)
        run.note("SIGHUP while the state dir is " + ("full" if fill else "read-only"))
        run.hold(rng.uniform(0.3, 1.0))
    run.disk.restore()
    run.note("state dir restored")
    run.hold(1.0)


def disk_full(run, rng):
    _disk(run, rng, True)


def disk_readonly(run, rng):
    _disk(run, rng, False)


def sigkill(run, rng):
    run.restart(signal.SIGKILL, rng.uniform(0.2, 1.5))


def sigterm(run, rng):
    run.restart(signal.SIGTERM, rng.uniform(0.2, 1.0))


def reboot(run, rng):
    """The node reboots: a new boot id, the daemon killed with everything else, and every
    process back with the PID and start time it had. Each is another process: its counter
    starts from zero (the checker forgets the process series' highest values; a process
    counter that goes on from before the reboot is a violation), while its container's and
    pod's counters go on."""
    before = {key: value for key, value in _served(run).items() if key[0] == checks.PROCESS}
    run.note(f"reboot: boot id {run.world.reboot(rng)}")
    run.restart(signal.SIGKILL, rng.uniform(0.2, 1.0))
    for key in [k for k in run.monotonic.highest if k[0] == checks.PROCESS]:
        del run.monotonic.highest[key]
    for key, value in sorted(_served(run).items(), key=str):
        old = before.get(key)
        # The most a process can have gained from zero since the start (a tick each side).
        possible = (LIMIT_WATTS + 150 - IDLE_WATTS) * \
            (time.monotonic() - run.daemon.started_at + 0.8) + 1.0
        if old is not None and old > possible and value >= old - 1e-6:
            run.violation("process counter across a reboot",
                          f"{checks.series_name(key)}: {old:.1f} J before the reboot, "
                          f"{value:.1f} J after it (a new process counts from zero)")


def _served(run) -> dict:
    """The counters ``/metrics`` serves now (empty when it does not answer)."""
    status, text = run.daemon.get("/metrics")
    return checks.counters(text) if status == 200 else {}


def sighup(run, rng):
    run.daemon.send(signal.SIGHUP)
    run.note("SIGHUP")


def compaction_kill(run, rng):
    """SIGHUP compacts the state (fsync slow) while ticks go on; SIGKILL lands during the
    compaction or a little after it. Half the time every GPU falls to idle as the SIGHUP is
    sent: the last ticks with energy are journaled during the compaction, and nothing changes
    afterwards, so a compaction that erased their lines leaves them lost at the kill."""
    quiet = rng.random() < 0.5
    before = [g.power_watts for g in run.world.gpus]
    if quiet:
        for gpu in run.world.gpus:
            gpu.power_watts = IDLE_WATTS
        run.write_now("every GPU idle")
    run.daemon.send(signal.SIGHUP)
    delay = rng.uniform(0.6, 2.0) if quiet else rng.choice([rng.uniform(0.02, 0.3),
                                                            rng.uniform(0.5, 2.0)])
    run.note(f"SIGHUP, SIGKILL {delay:.2f} s later")
    run.hold(delay)                 # scraped: what was served must come back
    run.restart(signal.SIGKILL, rng.uniform(0.2, 1.0))
    if quiet:
        for gpu, watts in zip(run.world.gpus, before):
            gpu.power_watts = watts
        run.commit("GPUs back to their power")


def stall(run, rng):
    """SIGSTOP for several intervals, the world going on meanwhile (a pod may come); the
    first tick after it covers the whole stall."""
    seconds = rng.uniform(1.0, 3.0)
    run.daemon.send(signal.SIGSTOP)
    stopped_at = time.monotonic()
    run.note(f"SIGSTOP for {seconds:.1f} s")
    try:
        run.hold(seconds / 2, scrape=False)        # a stopped daemon answers nothing
        if rng.random() < 0.5:             # written at once: no hold that scrapes
            created = _new_pod(run, rng, _gpu(run, rng))
            run.world.sync_host(create=True)
            run.write_now("during the stall, create " + created)
        run.hold(seconds / 2, scrape=False)
    finally:
        run.daemon.send(signal.SIGCONT)
        run.rate.stalled(time.monotonic(), time.monotonic() - stopped_at)
        run.note("SIGCONT")


def between_ticks(run, rng):
    """A container's process starts dropping its CUDA context before every read of the
    process list (or stops doing so): its work must still be billed to it, not to a
    neighbour holding an idle context."""
    containers = [c for pod in run.world.pods.values() for c in pod.containers
                  if c.pid is not None and not run.world.gpus[pod.gpu].drm]
    if not containers:
        return
    container = rng.choice(containers)
    container.between_ticks = not container.between_ticks
    run.commit(f"container {container.name} "
               + ("runs between ticks" if container.between_ticks else "listed again"))


def tenant_create(run, rng):
    """A bare-metal tenant comes on a whole GPU: a service, a user's session, a Slurm job
    step, a process in the root cgroup, an LXC container or a cgroup no rule names."""
    gpu = rng.choice([g for g in run.world.gpus if g.mig is None])
    kind = rng.choice(run.bare_metal_kinds)
    tenant = run.world.new_pod(gpu.index, None, rng.randint(10, 90), kind)
    run.commit(f"create {tenant.key} on GPU {gpu.index}")


def late_client(run, rng):
    """A process of a tenant on an AMD or Intel GPU runs a while without a DRM client, then
    opens one: from then on its work is its tenant's (until the daemon finds the client,
    unattributed, never a neighbour's beyond the tick the docs allow)."""
    tenants = sorted((t for t in run.world.pods.values() if run.world.gpus[t.gpu].drm),
                     key=lambda t: t.number)
    if not tenants:
        return
    tenant = rng.choice(tenants)
    process = run.world.new_container(tenant, rng.randint(10, 90))
    process.client = False
    run.commit(f"{tenant.key}: process {process.pid} starts, no DRM client yet")
    run.hold(rng.uniform(1.0, 2.5))
    if tenant.number not in run.world.pods or process not in tenant.containers:
        return
    process.client = True
    run.commit(f"{tenant.key}: process {process.pid} opens its DRM client "
               f"({process.sm_percent} %)")


def cgroup_move(run, rng):
    """A running process moves to another cgroup (another tenant's, or a new bare-metal
    tenant's) on the same GPU: billed to the new tenant from the next tick. The /proc entry is
    rewritten and the new world state written at once, as one edit."""
    running = sorted(((t, c) for t in run.world.pods.values() for c in t.containers
                      if c.pid is not None and run.world.gpus[t.gpu].mig is None),
                     key=lambda tc: tc[1].number)
    if not running:
        return
    tenant, process = rng.choice(running)
    others = sorted((t for t in run.world.pods.values() if t is not tenant
                     and t.gpu == tenant.gpu), key=lambda t: t.number)
    if others and rng.random() < 0.5:
        target = rng.choice(others)
    else:
        target = run.world.new_pod(tenant.gpu, None, 0, rng.choice((POD, *run.bare_metal_kinds)))
        target.containers.clear()           # the process moved in is its only one
    run.world.move(process, target)
    run.write_now(f"process {process.pid} moves from {tenant.key} to {target.key}")
    run.hold(0.6)


def shared_fd(run, rng):
    """A process on an AMD or Intel GPU shares its DRM client with a new process: forked in
    its own cgroup (the client stays its tenant's), or passed over a socket to a process of
    another tenant (its energy is then no one's: unattributed, never the receiver's; where the
    kernel lists clients, it names the file under the process using it, the owner)."""
    owners = sorted(((t, c) for t in run.world.pods.values() for c in t.containers
                     if run.world.gpus[t.gpu].drm and c.pid is not None and c.client
                     and c.shares_client_of is None), key=lambda tc: tc[1].number)
    if not owners:
        return
    tenant, owner = rng.choice(owners)
    forked = tenant.kind != POD and rng.random() < 0.5
    to = tenant if forked else run.world.new_pod(tenant.gpu, None, 0, rng.choice(
        (POD, *run.bare_metal_kinds)))
    if not forked:
        to.containers.clear()
    holder = run.world.new_container(to, 0)
    holder.shares_client_of = owner.pid
    run.commit(f"process {owner.pid} of {tenant.key} shares its DRM client with process "
               f"{holder.pid} of {to.key} ({'forked' if forked else 'passed'})")


def interval(run, rng):
    seconds = rng.choice([0.2, 0.25, 0.3, 0.4])
    run.write_config(seconds)
    run.daemon.send(signal.SIGHUP)
    run.note(f"config housekeeping_interval {seconds} s, SIGHUP")


def clock_step(run, rng):
    """The daemon's wall clock steps back or forward by 30 s to 15 min while it runs (an NTP
    step, ``date -s``), through libfaketime; the monotonic and boot clocks, and the harness's
    own clocks, do not move. The simulated NVML runs inside the daemon, so its utilization
    samples' stamps step with it, as a real driver's would; its trace lines carry a monotonic
    stamp for the oracle. Every check goes on as before: billing must not notice."""
    seconds = rng.randint(30, 900) * rng.choice([-1, 1])
    taken = run.clock.step(seconds)
    run.note(f"wall clock stepped {taken:+d} s (now {run.clock.offset_seconds:+d} s off)")
    # Not scraped until every thread of the daemon reads the new offset: libfaketime takes
    # it up a moment apart, so a connection accepted meanwhile would straddle a step no
    # real clock makes (the daemon's HTTP timers run on the wall clock, so one accepted on
    # the old time and read on the new is closed as idle after a step forward).
    run.hold(STEP_SETTLE_SECONDS, scrape=False)


def busy_from_start(run, rng):
    """A start-of-run option, drawn before the daemon's first start (never in the run's
    loop): half the seeds have one GPU with no idle configured, busy and held from the
    daemon's first tick (as every GPU here is) and reporting a duty cycle, so it has no idle
    tick until a world event leaves it without a process. Until the daemon learns an idle,
    the GPU's whole energy must reach its holders (``checks.NoIdle``, and the oracle)."""
    if rng.random() < 0.5:
        return
    gpu = _nvidia_gpu(run, rng)
    gpu.learns_idle = True
    run.result.counts["busy_from_start"] += 1
    run.note(f"GPU {gpu.index}: no idle configured, busy from the first tick")


def start_on_previous_release(run, rng):
    """A start-of-run draw of ``previous_release``: half the seeds start on the previous
    release (``forward_from_previous_release``, counted as one of its events)."""
    run.start_on_previous = rng.random() < 0.5
    if run.start_on_previous:
        run.result.counts["previous_release"] += 1


def forward_from_previous_release(run, rng):
    """The run's first start is the previous release's, over an empty state dir; a few
    seconds later it is killed and this release starts over the state it wrote, which must
    say the previous format before and this one after a tick (every counter going on)."""
    state = run.workdir / "state"
    run.note("start on the previous release")
    run.start_daemon(release=run.previous)
    run.hold(rng.uniform(2.0, 4.0))
    sig = rng.choice([signal.SIGKILL, signal.SIGTERM])
    code = run.daemon.stop(sig)
    if sig == signal.SIGTERM and code != 0:
        run.violation("exit status", f"SIGTERM: the previous release exited {code}")
    written = release.format_version(state)
    run.note(f"{signal.Signals(sig).name} to the previous release: FORMAT says {written}; "
             "this release starts over its state")
    if written != str(FORMAT_VERSION - 1):
        run.violation("release hand-over", f"the previous release left FORMAT {written}, "
                      f"not {FORMAT_VERSION - 1}")
    release.restamp_driver_to_boot_clock(state)
    time.sleep(rng.uniform(0.2, 1.0))
    run.start_daemon()
    run.hold(1.0)
    migrated = release.format_version(state)
    if migrated != str(FORMAT_VERSION):
        run.violation("release hand-over", f"FORMAT says {migrated} after this release's "
                      f"first ticks over the previous release's state, not {FORMAT_VERSION}")


def previous_release(run, rng):
    """SIGKILL, then the previous release started over this release's (newer) state: it must
    exit with status 2 naming ``--state-reset`` and leave every state file byte for byte;
    then this release starts again over it (every counter going on). See
    ``bench/chaos_release.py`` for what the run exercises and why nothing is converted."""
    state = run.workdir / "state"
    run.note("SIGKILL; the previous release started over this release's state")
    run.daemon.stop(signal.SIGKILL)
    before = release.state_bytes(state)
    driver = state / release.DRIVER_FILE
    driver_bytes = driver.read_bytes() if driver.exists() else None
    code, output = release.run_to_exit(
        run.daemon.command(), dict(run.daemon.env, PYTHONPATH=run.daemon.python_path(
            run.previous)), run.workdir, run.daemon.log_path,
        "the previous release over this release's state")
    changed = release.changed_files(before, release.state_bytes(state))
    if driver_bytes is not None and driver.read_bytes() != driver_bytes:
        driver.write_bytes(driver_bytes)          # the stand-in driver's, kept as it was
        run.note("the previous release's simulator rewrote the simulated driver's file: put back")
    run.note(f"the previous release exited {code}"
             + (f"; changed: {', '.join(changed)}" if changed else "; state files unchanged"))
    last = output.strip().splitlines()[-1:] or ["(nothing)"]
    if code != release.REFUSED_STATUS or "--state-reset" not in output:
        run.violation("previous release over newer state",
                      f"exit status {code} (expected {release.REFUSED_STATUS}), last line: "
                      f"{last[0]}")
    if changed:
        run.violation("previous release over newer state",
                      f"state files changed: {', '.join(changed)}")
    time.sleep(rng.uniform(0.2, 1.0))
    run.start_daemon()


def drm_gpus(run, rng):
    """A start-of-run draw, made where the world is built (``bench.chaos.Run``): half the
    seeds have an AMD and an Intel GPU, half of those the kernel's DRM clients lists."""


EVENTS = {f.__name__: f for f in (
    power, glitch, pod_create, pod_delete, process_churn, container_restart, gpu_lost,
    not_supported, mig_reconfigure, disk_full, disk_readonly, sigkill, sigterm, reboot, sighup,
    compaction_kill, interval, stall, between_ticks, clock_step, busy_from_start,
    previous_release, tenant_create, late_client, cgroup_move, shared_fd, drm_gpus)}
DISK_EVENTS = ("disk_full", "disk_readonly")
# Drawn once before the daemon's first start, in this order, where the event is in the run.
START_OPTIONS = {"busy_from_start": busy_from_start,
                 "previous_release": start_on_previous_release}
START_ONLY = ("busy_from_start", "drm_gpus")      # never drawn in the run's loop
