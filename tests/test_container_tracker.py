"""The container tracker's merge of mapping sources and names, with fake sources."""

import zlib

from gpustats.engine.containers import ContainerTracker
from gpustats.engine.counters import EnergyCounters
from gpustats.model.attribution import DeviceAttribution, ProcessAttribution
from gpustats.model.containers import (
    CgroupRef, ContainerIdentity, ContainerNames, ContainerUsage, DeviceRef, PodDeviceAllocation,
)
from gpustats.model.device import MigInstanceReading, ProcessReading
from gpustats.model.snapshot import ProcessStats
from gpustats.sources.cgroup_stats import DeviceRules
from tests.support.tracker_fakes import (
    GPU0, GPU1, UID, A, B, D, S, FakeAllocations, FakeCgroups, FakeNames, FakeProcs, ident,
    reading,
)


def alloc(pod, container, device_id, kind="gpu"):
    return PodDeviceAllocation(pod_name=pod, pod_namespace="ml", container_name=container,
                               resource_name="nvidia.com/gpu", device_id=device_id,
                               device=DeviceRef(kind=kind, uuid=device_id))


def test_devices_list_maps_explicit_minors_only():
    cgroups = FakeCgroups({A: ident(A), B: ident(B)}, rules={
        f"/k/pod{UID}/{A}": DeviceRules(False, False, frozenset({1})),
        f"/k/pod{UID}/{B}": DeviceRules(True, False, frozenset({0})),      # a *:* rwm
    })
    tracker = ContainerTracker(cgroups, FakeProcs({}), EnergyCounters())
    view = tracker.tick((reading(GPU0, 0), reading(GPU1, 1)), {}, ())
    by_id = {c.container_id: c for p in view.pods for c in p.containers}
    assert [(a.device_uuid, a.reasons) for a in by_id[A].accelerators] == \
        [(GPU1, ("devices.list",))]
    assert by_id[B].accelerators == ()
    assert cgroups.ended == 1


def test_nvml_process_path_adds_containers_the_walk_missed():
    path = f"/kubepods/besteffort/pod{UID}/{D}"
    procs = FakeProcs({4242: path})
    tracker = ContainerTracker(FakeCgroups({}), procs, EnergyCounters())
    proc = ProcessReading(pid=4242, memory_used_bytes=100)
    stats = (ProcessStats(pid=4242, device_uuid=GPU0, memory_used_bytes=100,
                          compute_utilization_percent=40.0, attributed_power_watts=50.0),)
    attribution = {GPU0: DeviceAttribution(GPU0, 100.0, 50.0, 1000.0, 250.0, "exclusive", (
        ProcessAttribution(4242, GPU0, None, 1.0, "exclusive", 50.0, 250.0, 40.0),),
        dt_seconds=5.0)}
    view = tracker.tick((reading(GPU0, 0, [proc]),), attribution, stats)
    container = view.pods[0].containers[0]
    acc = container.accelerators[0]
    assert container.container_id == D and acc.reasons == ("nvml-process",)
    assert acc.process_memory_used_bytes == 100 and acc.compute_utilization_percent == 40.0
    assert acc.attributed_energy_joules == 250.0
    assert view.pods[0].accelerators[0].attributed_energy_joules == 250.0
    assert view.pid_to_container == {(GPU0, 4242): D}
    # A process that vanished or lives outside containers stays at process level; the pod
    # (no cgroup of its own found) stays served with its total while its container's counter
    # is retained.
    view = tracker.tick((reading(GPU0, 0, [ProcessReading(pid=999)]),), {}, ())
    assert view.pid_to_container == {}
    assert [(p.uid, p.containers) for p in view.pods] == [(UID, ())]
    assert [(a.device_uuid, a.attributed_power_watts, a.attributed_energy_joules)
            for a in view.pods[0].accelerators] == [(GPU0, None, 250.0)]


def test_pod_resources_joined_by_runtime_names_and_sandbox_skipped():
    cgroups = FakeCgroups({A: ident(A), S: ident(S)})
    names = FakeNames({A: ContainerNames("trainer-0", "ml", UID, "trainer"),
                       S: ContainerNames("trainer-0", "ml", UID, "POD", is_sandbox=True)})
    allocations = FakeAllocations((alloc("trainer-0", "trainer", GPU1),))
    tracker = ContainerTracker(cgroups, FakeProcs({}), EnergyCounters(),
                               pod_resources=allocations, runtime=names)
    view = tracker.tick((reading(GPU0, 0), reading(GPU1, 1)), {}, ())
    pod = view.pods[0]
    assert (pod.name, pod.namespace, pod.uid) == ("trainer-0", "ml", UID)
    assert [c.container_id for c in pod.containers] == [A]          # sandbox left out
    assert pod.containers[0].name == "trainer"
    assert pod.containers[0].accelerators[0].reasons == ("pod-resources",)


def test_pod_resources_without_runtime_joins_only_unambiguous_gpu():
    cgroups = FakeCgroups({A: ident(A), B: ident(B)}, rules={
        f"/k/pod{UID}/{A}": DeviceRules(False, False, frozenset({0})),
        f"/k/pod{UID}/{B}": DeviceRules(False, False, frozenset({1})),
    })
    allocations = FakeAllocations((alloc("p", "trainer", GPU0),
                                   alloc("q", "x", GPU1), alloc("r", "y", GPU1)))
    tracker = ContainerTracker(cgroups, FakeProcs({}), EnergyCounters(),
                               pod_resources=allocations)
    view = tracker.tick((reading(GPU0, 0), reading(GPU1, 1)), {}, ())
    by_id = {c.container_id: c for p in view.pods for c in p.containers}
    assert by_id[A].name == "trainer"
    assert set(by_id[A].accelerators[0].reasons) == {"devices.list", "pod-resources"}
    assert by_id[B].name is None                 # two holders of GPU1: no guessed name
    assert by_id[B].accelerators[0].reasons == ("devices.list",)


def test_time_slicing_replicas_are_kept_per_container():
    names = FakeNames({A: ContainerNames("p", "ml", UID, "a"),
                       B: ContainerNames("p", "ml", UID, "b")})

    def replica(container, n):
        return PodDeviceAllocation(pod_name="p", pod_namespace="ml", container_name=container,
                                   resource_name="nvidia.com/gpu", device_id=f"{GPU0}::{n}",
                                   device=DeviceRef(kind="gpu", uuid=GPU0, replica=n))
    allocations = FakeAllocations((replica("a", 3), replica("b", 1), replica("b", 0),
                                   alloc("p", "b", GPU1)))
    tracker = ContainerTracker(FakeCgroups({A: ident(A), B: ident(B)}), FakeProcs({}),
                               EnergyCounters(), pod_resources=allocations, runtime=names)
    view = tracker.tick((reading(GPU0, 0), reading(GPU1, 1)), {}, ())
    by_id = {c.container_id: c for p in view.pods for c in p.containers}
    assert [(a.device_uuid, a.replicas) for a in by_id[A].accelerators] == [(GPU0, (3,))]
    assert [(a.device_uuid, a.replicas) for a in by_id[B].accelerators] == [
        (GPU0, (0, 1)), (GPU1, ())]


def test_mig_allocation_maps_to_instance():
    mig = (MigInstanceReading(gpu_instance_id=7, uuid="MIG-x", profile="1g.10gb"),)
    names = FakeNames({A: ContainerNames("p", "ml", UID, "c")})
    tracker = ContainerTracker(FakeCgroups({A: ident(A)}), FakeProcs({}), EnergyCounters(),
                               pod_resources=FakeAllocations((alloc("p", "c", "MIG-x", "mig"),)),
                               runtime=names)
    view = tracker.tick((reading(GPU0, 0, mig=mig),), {}, ())
    acc = view.pods[0].containers[0].accelerators[0]
    assert (acc.device_uuid, acc.gpu_instance_id, acc.mig_profile) == (GPU0, 7, "1g.10gb")


def test_containers_outside_pods_are_top_level():
    docker = ContainerIdentity(container_id=D, runtime="docker",
                               cgroup=CgroupRef((("devices", f"/docker/{D}"),)))
    view = ContainerTracker(FakeCgroups({D: docker}), FakeProcs({}), EnergyCounters()).tick(
        (), {}, ())
    assert view.pods == () and view.containers[0].container_id == D
    assert view.containers[0].cgroup_path == f"/docker/{D}"


def test_cpu_and_memory_reread_every_nth_tick_and_rates_kept(tmp_path):
    from gpustats.hostfs import HostRoots
    from gpustats.sources.cgroups import CgroupReader
    from gpustats.sources.procs import ProcReader

    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory\n")
    scope = root / f"kubepods/pod{UID}/{A}"
    scope.mkdir(parents=True)
    (scope / "memory.current").write_text("100\n")
    reader = CgroupReader(HostRoots(cgroup=str(root), proc=str(tmp_path / "proc")),
                          forget_after_ticks=6)
    tracker = ContainerTracker(reader, ProcReader(HostRoots(proc=str(tmp_path / "proc"))),
                               EnergyCounters(), usage_every_ticks=2)
    reads = []
    for n in range(6):
        (scope / "cpu.stat").write_text(f"usage_usec {1000 * (n + 1)}\n")
        view = tracker.tick((), {}, ())
        reads.append(view.pods[0].containers[0].usage.cpu.usage_core_nano_seconds)
    assert reads[0] == 1_000_000                   # read at first sight
    repeats = sum(reads[i] == reads[i - 1] for i in range(1, len(reads)))
    assert repeats in (2, 3)                       # then every other tick, not every tick
    assert view.pods[0].containers[0].usage.cpu.usage_nano_cores is not None


class CountingCgroups(FakeCgroups):
    def __init__(self, containers):
        super().__init__(containers)
        self.read = []

    def usages(self, wanted):
        self.read.extend(key for key, _ in wanted)
        return [ContainerUsage(start_time=1.0) for _ in wanted]


def test_reads_are_spread_over_the_ticks_and_gpu_holders_follow_the_same_cadence():
    """Each cgroup on its own phase: every tick reads a share, each cgroup once per N ticks."""
    ids = [f"{i:064x}" for i in range(90)]
    containers = {cid: ContainerIdentity(container_id=cid, runtime="docker",
                                         cgroup=CgroupRef((("", f"/docker/{cid}"),)))
                  for cid in ids}
    cgroups = CountingCgroups(containers)
    procs = FakeProcs({7: f"/docker/{ids[0]}"})
    tracker = ContainerTracker(cgroups, procs, EnergyCounters(), usage_every_ticks=3)
    gpu = reading(GPU0, 0, processes=(ProcessReading(pid=7),))
    per_tick = []
    for _ in range(7):
        cgroups.read = []
        tracker.tick((gpu,), {}, ())
        per_tick.append(list(cgroups.read))
    assert sorted(per_tick[0]) == sorted(ids)                  # all at first sight
    later = per_tick[1:]
    assert all(10 <= len(t) <= 50 for t in later)              # a share each tick (90 / 3)
    for cid in ids:                                            # the GPU holder included
        assert sum(t.count(cid) for t in later) == 2           # once every 3 ticks over 6


def test_cgroup_ref_main_path_prefers_v2_then_memory_cpuacct_devices():
    assert CgroupRef((("devices", "/d"), ("memory", "/m"), ("", "/u"))).main_path == "/u"
    assert CgroupRef((("devices", "/d"), ("cpuacct", "/c"), ("memory", "/m"))).main_path == "/m"
    assert CgroupRef((("devices", "/d"), ("cpuacct", "/c"))).main_path == "/c"
    assert CgroupRef((("pids", "/p"), ("devices", "/d"))).main_path == "/d"
    assert CgroupRef((("pids", "/p"),)).main_path == "/p"
    assert CgroupRef(()).main_path is None
    assert CgroupRef((("memory", "/m"),)) == CgroupRef((("memory", "/m"),))   # not compared


def test_counters_of_containers_and_pods_that_gain_nothing_outlive_the_retention():
    """A container and its pod that used a GPU once, then idle on it for longer than the
    retention, keep their totals while they are seen: their counters are read, not advanced,
    and their owners are alive every tick. The pod here is known by its UID from the names
    only (its cgroup path names none)."""
    clock = [1000.0]
    counters = EnergyCounters(retention_seconds=60, wall=lambda: clock[0])
    plain = ContainerIdentity(container_id=A, runtime="docker",
                              cgroup=CgroupRef((("devices", f"/docker/{A}"),)))
    tracker = ContainerTracker(
        FakeCgroups({A: plain}, rules={f"/docker/{A}": DeviceRules(False, False,
                                                                   frozenset({0}))}),
        FakeProcs({4242: f"/docker/{A}"}), counters,
        runtime=FakeNames({A: ContainerNames("trainer-0", "ml", UID, "trainer")}))
    busy = {GPU0: DeviceAttribution(GPU0, 50.0, 10.0, 100.0, 25.0, "exclusive", (
        ProcessAttribution(4242, GPU0, None, 1.0, "exclusive", 10.0, 25.0, 30.0),),
        dt_seconds=2.5)}
    idle = {GPU0: DeviceAttribution(GPU0, 50.0, 0.0, 50.0, 0.0, "exclusive", (),
                                    dt_seconds=1.0)}
    stats = (ProcessStats(pid=4242, device_uuid=GPU0, attributed_power_watts=10.0),)
    tracker.tick((reading(GPU0, 0, [ProcessReading(pid=4242)]),), busy, stats)
    for _ in range(5):
        clock[0] += 30.0                          # 150 s idle in all, past the 60 s retention
        view = tracker.tick((reading(GPU0, 0),), idle, ())
        counters.expire()
    pod = view.pods[0]
    assert pod.uid == UID and pod.accelerators[0].attributed_energy_joules == 25.0
    assert pod.containers[0].accelerators[0].attributed_energy_joules == 25.0
    assert counters.value(("pod", UID, GPU0)) == 25.0
    assert counters.value(("container", A, GPU0, None)) == 25.0


class StampingCgroups(FakeCgroups):
    """Each read gives new figures (the read's number as start time)."""

    def __init__(self, containers, rules=None):
        super().__init__(containers, rules)
        self.reads = 0

    def usages(self, wanted):
        self.reads += 1
        return [ContainerUsage(start_time=float(self.reads)) for _ in wanted]


def test_an_entry_without_gpu_follows_its_usage_names_cgroup_and_gpus():
    """A container holding no GPU keeps its entry while nothing it shows changed; a new
    usage read, new names, a moved cgroup or a GPU gained each show at once."""
    cgroups = StampingCgroups({A: ident(A)})
    names = FakeNames({A: ContainerNames("web", "ml", UID, "app")})
    tracker = ContainerTracker(cgroups, FakeProcs({}), EnergyCounters(), runtime=names,
                               usage_every_ticks=2)

    def entry():
        return tracker.tick((reading(GPU0, 0),), {}, ()).pods[0].containers[0]

    entries = [entry() for _ in range(4)]
    pairs = list(zip(entries, entries[1:]))
    for before, after in pairs:                    # read every other tick
        assert (after is before) == (after.usage is before.usage)
    assert any(a is b for a, b in pairs) and any(a.usage != b.usage for a, b in pairs)
    names.table[A] = ContainerNames("web", "ml", UID, "app2")
    renamed = entry()
    assert renamed.name == "app2"
    cgroups.containers[A] = ident(A, devices_path="/moved")
    assert entry().cgroup_path == "/moved"
    cgroups.rules["/moved"] = DeviceRules(False, False, frozenset({0}))
    assert [a.device_uuid for a in entry().accelerators] == [GPU0]
    cgroups.rules.clear()
    assert entry().accelerators == ()


def test_cgroups_that_come_and_go_between_reads_are_read_at_first_sight_and_then_dropped():
    """Ticks showing the same cgroups read only those due; a container that appears is read
    at once, one that goes is read no more, and the rest keep their cadence."""
    ids = [f"{i:064x}" for i in range(40)]

    def identity(cid):
        return ContainerIdentity(container_id=cid, runtime="docker",
                                 cgroup=CgroupRef((("", f"/docker/{cid}"),)))

    cgroups = CountingCgroups({cid: identity(cid) for cid in ids[:30]})
    tracker = ContainerTracker(cgroups, FakeProcs({}), EnergyCounters(), usage_every_ticks=3)
    per_tick = []
    for n in range(11):
        if n == 5:
            cgroups.containers.update((cid, identity(cid)) for cid in ids[30:])
            del cgroups.containers[ids[0]]
        cgroups.read = []
        tracker.tick((), {}, ())
        per_tick.append(list(cgroups.read))
    assert set(per_tick[5]) >= set(ids[30:])                 # at first sight
    assert all(ids[0] not in t for t in per_tick[5:])         # gone: no more reads
    for cid in ids[1:]:          # then on the phase its key gives (ticks counted from 1)
        first = 0 if cid in ids[:30] else 5
        phase = zlib.crc32(repr(cid).encode()) % 3
        assert [n for n, t in enumerate(per_tick) if cid in t] == \
            [first] + [n for n in range(first + 1, 11) if (n + 1 + phase) % 3 == 0]


def test_every_container_and_pod_of_the_tick_is_an_owner_kept_alive_as_they_come_and_go():
    other = "9" * 8 + UID[8:]
    cgroups = FakeCgroups({A: ident(A)}, pods={UID: CgroupRef((("", f"/k/pod{UID}"),))})
    names = FakeNames({})
    tracker = ContainerTracker(cgroups, FakeProcs({}), EnergyCounters(), runtime=names)

    def owners():
        mapped = tracker.map((reading(GPU0, 0),), {})
        cgroups.end_tick()
        return sorted(mapped.holdings.alive)

    assert owners() == owners() == [("container", A), ("pod", UID)]
    cgroups.containers[B] = ContainerIdentity(container_id=B, cgroup=CgroupRef((("", "/b"),)))
    assert owners() == [("container", A), ("container", B), ("pod", UID)]
    names.table[B] = ContainerNames("web", "ml", other, "app")     # its pod by its names
    assert owners() == [("container", A), ("container", B), ("pod", UID), ("pod", other)]
    del cgroups.containers[A]
    cgroups.pods.clear()
    assert owners() == [("container", B), ("pod", other)]


def test_a_process_is_billed_to_its_new_cgroup_and_when_ended_to_its_last_owner():
    """Its cgroup is read every tick: moved, it is its new container's from the next tick;
    ended (its /proc entry gone, listed once more for its last work), the one it had."""
    first, second = f"/kubepods/besteffort/pod{UID}/{D}", f"/kubepods/besteffort/pod{UID}/{S}"
    procs = FakeProcs({4242: first})
    tracker = ContainerTracker(FakeCgroups({}), procs, EnergyCounters())
    listed = (ProcessReading(pid=4242),)
    started = (ProcessStats(pid=4242, device_uuid=GPU0, start_time_ticks=700),)
    assert tracker.tick((reading(GPU0, 0, listed),), {}, started).pid_to_container == \
        {(GPU0, 4242): D}
    procs.by_pid[4242] = second
    assert tracker.tick((reading(GPU0, 0, listed),), {}, started).pid_to_container == \
        {(GPU0, 4242): S}
    del procs.by_pid[4242]
    ended = (ProcessReading(pid=4242, listed=False),)
    gone = (ProcessStats(pid=4242, device_uuid=GPU0),)            # no start time left
    assert tracker.tick((reading(GPU0, 0, ended),), {}, gone).pid_to_container == \
        {(GPU0, 4242): S}
    assert tracker.tick((reading(GPU0, 0, ended),), {}, gone).pid_to_container == \
        {(GPU0, 4242): S}
