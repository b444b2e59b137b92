"""The chaos run's world events, one function each: ``event(run, rng)`` edits the world
through ``run.commit`` (host trees, then the scenario) and holds states with ``run.hold``.

Every draw comes from ``rng`` in a fixed order, so one seed gives one event sequence.
"""

from __future__ import annotations

import random
import signal
import time

from bench import chaos_checks as checks
from bench.chaos_world import IDLE_WATTS, LIMIT_WATTS

# Fields toggled NOT_SUPPORTED (the daemon remembers a NOT_SUPPORTED until it restarts).
TOGGLED_FIELDS = ("processes", "process_utilization", "memory", "temperature", "power")
MIG_PROFILE_IDS = range(1, 15)


def _gpu(run, rng: random.Random):
    return rng.choice(run.world.gpus)


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
    gpu = _gpu(run, rng)
    gpu.lost = True
    run.commit(f"GPU {gpu.index} lost")
    run.hold(rng.uniform(0.8, 2.0))
    if rng.random() < 0.5:
        run.commit("while lost, create " + _new_pod(run, rng, gpu))
        run.hold(rng.uniform(0.5, 1.5))
    gpu.lost = False
    run.commit(f"GPU {gpu.index} back")


def not_supported(run, rng):
    gpu = _gpu(run, rng)
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
        run.note("SIGCONT")


def between_ticks(run, rng):
    """A container's process starts dropping its CUDA context before every read of the
    process list (or stops doing so): its work must still be billed to it, not to a
    neighbour holding an idle context."""
    containers = [c for pod in run.world.pods.values() for c in pod.containers
                  if c.pid is not None]
    if not containers:
        return
    container = rng.choice(containers)
    container.between_ticks = not container.between_ticks
    run.commit(f"container {container.name} "
               + ("runs between ticks" if container.between_ticks else "listed again"))


def interval(run, rng):
    seconds = rng.choice([0.2, 0.25, 0.3, 0.4])
    run.write_config(seconds)
    run.daemon.send(signal.SIGHUP)
    run.note(f"config housekeeping_interval {seconds} s, SIGHUP")


EVENTS = {f.__name__: f for f in (
    power, glitch, pod_create, pod_delete, process_churn, container_restart, gpu_lost,
    not_supported, mig_reconfigure, disk_full, disk_readonly, sigkill, sigterm, reboot, sighup,
    compaction_kill, interval, stall, between_ticks)}
DISK_EVENTS = ("disk_full", "disk_readonly")
