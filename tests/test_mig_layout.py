"""MIG layout followed while MIG stays on, at the sweep, with the simulator below pynvml.

Instances destroyed and created (as the MIG manager does) show up on NVML's MIG configuration
change event, else at the slow cadence, and when a process names an instance the layout lacks;
every instance's memory is read each tick, idle ones too.
"""


import pynvml
import pytest

from gpustats.sources.errors import CollectionErrors
from gpustats.sources.nvml.mig import read_layout
from gpustats.sources.nvml.query import Querier
from tests.support.fakehost import write_scenario
from tests.support.gpus import GPU_A as A, GPU_B as B
from tests.support.sweepers import SimulatedSweepers

GIB = 1024 ** 3


def instance(gi, profile="3g.40gb", **extra):
    return {"gpu_instance_id": gi, "profile": profile, "uuid": f"MIG-aaaa-{gi}",
            "memory_total_bytes": int(profile.split(".")[1].removesuffix("gb")) * GIB, **extra}


def scenario(instances, processes=(), unsupported=(), **device):
    return {"devices": [{"uuid": A, "name": "NVIDIA H100 80GB HBM3", "power_watts": 300,
                         "unsupported": list(unsupported), "mig_instances": list(instances),
                         **device}],
            "processes": [{"pid": pid, "device": A, "gpu_instance_id": gi,
                           "memory_used_bytes": GIB} for pid, gi in processes]}


class Sim:
    def __init__(self, path, sim, sweeper, clock):
        self.path, self.sim, self.sweeper, self.clock = path, sim, sweeper, clock

    def tick(self):
        self.clock.now += 1.0
        (reading,) = [r for r in self.sweeper.sweep() if r.identity.uuid == A]
        return reading

    def rewrite(self, data):
        """A new scenario, seen by the simulated driver from its next call on."""
        write_scenario(self.path, data)
        assert self.sim.reload()

    def calls(self, name):
        return self.sim.calls_by_function[name]


@pytest.fixture
def simulate(tmp_path):
    sweepers = SimulatedSweepers(tmp_path)
    yield lambda data, **sweeper_args: Sim(*sweepers.start(data, **sweeper_args))
    sweepers.close()


def layout(reading):
    return [(m.gpu_instance_id, m.profile, m.uuid) for m in reading.mig_instances]


def test_a_reconfiguration_is_followed_on_the_mig_configuration_event(simulate):
    s = simulate(scenario([instance(1), instance(2)], [(101, 1), (102, 2)]))
    assert layout(s.tick()) == [(1, "3g.40gb", "MIG-aaaa-1"), (2, "3g.40gb", "MIG-aaaa-2")]
    s.tick()                                    # registered for events after the first tick
    s.rewrite(scenario([instance(1), instance(5, "1g.10gb")], [(101, 1)]))
    reading = s.tick()                          # tick 3 of slow_every 12: the event, no cadence
    assert layout(reading) == [(1, "3g.40gb", "MIG-aaaa-1"), (5, "1g.10gb", "MIG-aaaa-5")]
    new = reading.mig_instances[1]
    assert new.memory_total_bytes == 10 * GIB and new.processes == ()
    assert s.calls("nvmlEventSetWait_v2") == 3      # one per tick since the set was opened,
                                                    # one more for the event
    before = s.calls("nvmlDeviceGetMaxMigDeviceCount")
    for _ in range(3):
        assert layout(s.tick())[1] == (5, "1g.10gb", "MIG-aaaa-5")
    assert s.calls("nvmlDeviceGetMaxMigDeviceCount") == before     # no event, no re-read


def test_without_mig_events_the_layout_is_re_read_every_slow_tick(simulate):
    s = simulate(scenario([instance(1), instance(2)], unsupported=["mig_events"]), slow_every=4)
    s.tick()
    s.rewrite(scenario([instance(1), instance(2), instance(3, "1g.10gb")],
                       unsupported=["mig_events"]))   # an idle instance created: no other hint
    seen = [[m.gpu_instance_id for m in s.tick().mig_instances] for _ in range(4)]
    assert seen == [[1, 2], [1, 2], [1, 2], [1, 2, 3]]  # ticks 1-3, then slow tick 4
    assert s.calls("nvmlEventSetWait_v2") == 0          # no GPU offers the event: no set


def test_a_process_on_an_instance_the_layout_lacks_re_reads_it(simulate):
    s = simulate(scenario([instance(1)], [(101, 1)], unsupported=["mig_events"]),
                 slow_every=1000)
    s.tick()
    s.rewrite(scenario([instance(1), instance(4, "2g.20gb")], [(101, 1), (104, 4)],
                       unsupported=["mig_events"]))
    reading = s.tick()
    assert layout(reading)[1] == (4, "2g.20gb", "MIG-aaaa-4")
    assert [p.pid for p in reading.mig_instances[1].processes] == [104]


def test_an_instance_the_driver_lists_no_device_for_costs_one_re_read(simulate):
    s = simulate(scenario([instance(1)], [(101, 1), (109, 9)], unsupported=["mig_events"]),
                 slow_every=1000)
    s.tick()
    before = s.calls("nvmlDeviceGetMaxMigDeviceCount")
    for _ in range(5):
        assert [m.gpu_instance_id for m in s.tick().mig_instances] == [1]
    assert s.calls("nvmlDeviceGetMaxMigDeviceCount") == before


def test_a_destroyed_instance_goes_and_its_handle_is_not_reused(simulate):
    s = simulate(scenario([instance(1), instance(2)], [(101, 1)]))
    s.tick()
    s.tick()
    s.rewrite(scenario([instance(2)]))
    reading = s.tick()
    assert layout(reading) == [(2, "3g.40gb", "MIG-aaaa-2")]
    assert reading.mig_instances[0].memory_used_bytes == 0      # read through its new handle


def test_idle_instances_memory_is_read_every_tick(simulate):
    s = simulate(scenario([instance(1), instance(2), instance(3, "1g.10gb")], [(101, 1)]))
    s.tick()
    before = s.calls("nvmlDeviceGetMemoryInfo")
    reading = s.tick()
    used = {m.gpu_instance_id: m.memory_used_bytes for m in reading.mig_instances}
    assert used == {1: GIB, 2: 0, 3: 0}                 # idle: observed 0, not absent
    assert {m.gpu_instance_id: m.memory_total_bytes for m in reading.mig_instances} == \
        {1: 40 * GIB, 2: 40 * GIB, 3: 10 * GIB}
    assert s.calls("nvmlDeviceGetMemoryInfo") - before == 3     # one per instance


def test_a_layout_re_read_costs_three_calls_per_instance(simulate):
    simulate(scenario([instance(1), instance(2)]))
    q = Querier(CollectionErrors())
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    first = read_layout(q, A, handle, [])
    # 1 count + 7 indices (5 empty: 1 call each) + per instance handle, UUID, name, GI, CI.
    assert q.calls == 1 + 5 + 2 * 5
    again = read_layout(q, A, handle, first)
    assert q.calls - 16 == 1 + 5 + 2 * 3                # known instances: handle, UUID, name
    assert [m.gpu_instance_id for m in again] == [1, 2]


def test_a_lost_gpu_closes_the_event_set_and_the_cadence_takes_over(simulate):
    two = scenario([instance(1)])
    two["devices"].append({"uuid": B})
    s = simulate(two, slow_every=3)
    s.tick()
    s.tick()
    lost = scenario([instance(1), instance(2)])
    lost["devices"].append({"uuid": B, "lost": True})
    s.rewrite(lost)
    assert [m.gpu_instance_id for m in s.tick().mig_instances] == [1, 2]    # named once
    waits = s.calls("nvmlEventSetWait_v2")
    for _ in range(3):
        s.tick()
    assert s.calls("nvmlEventSetWait_v2") == waits      # closed: the cadence from now on


def test_a_gpu_back_from_lost_has_its_layout_re_read_at_once(simulate, caplog):
    """While a GPU is lost no MIG event can tell of a change, and the event set is closed:
    its first tick back re-reads the layout, so an instance made meanwhile (idle: no process
    names it) is sampled from then on, not a cadence later."""
    s = simulate(scenario([instance(1)], [(101, 1)]), slow_every=1000)
    s.tick()
    s.tick()
    s.rewrite(scenario([instance(1)], [(101, 1)], lost=True))
    assert s.tick().lost
    s.rewrite(scenario([instance(1), instance(2)], [(101, 1)]))
    back = s.tick()
    assert [m.gpu_instance_id for m in back.mig_instances] == [1, 2]
    s.rewrite(scenario([instance(1)], [(101, 1)], lost=True))
    with caplog.at_level("ERROR"):
        assert s.tick().lost
    assert sum(r.name.endswith(".sweep") and "is lost" in r.getMessage()
               for r in caplog.records) == 2                         # each loss told


def test_an_instance_whose_memory_read_fails_prompts_a_re_read(simulate):
    """Without events, a destroyed instance's handle answers INVALID_ARGUMENT: gone a tick later,
    not at the next slow tick."""
    s = simulate(scenario([instance(1), instance(2)], [(101, 1)], unsupported=["mig_events"]),
                 slow_every=1000)
    s.tick()
    s.rewrite(scenario([instance(1)], [(101, 1)], unsupported=["mig_events"]))
    stale = s.tick()
    assert [(m.gpu_instance_id, m.memory_used_bytes) for m in stale.mig_instances] == \
        [(1, GIB), (2, None)]                   # unreadable this tick: absent, not 0
    assert [m.gpu_instance_id for m in s.tick().mig_instances] == [1]
    before = s.calls("nvmlDeviceGetMaxMigDeviceCount")
    for _ in range(3):
        s.tick()
    assert s.calls("nvmlDeviceGetMaxMigDeviceCount") == before


def test_a_tenant_on_an_idle_instance_has_its_activity_on_its_first_busy_tick(simulate):
    """Idle instances are sampled (a sample only, no metrics), so GPM gives a new tenant's
    instance its activity at once instead of the daemon assuming it for a tick."""
    busy = [instance(1, gpm={"graphics_active_percent": 60}),
            instance(2, gpm={"graphics_active_percent": 20})]
    s = simulate(scenario(busy, [(101, 1)]))
    s.tick()
    s.tick()
    samples, metrics = s.calls("nvmlGpmMigSampleGet"), s.calls("nvmlGpmMetricsGet")
    reading = s.tick()
    assert reading.mig_instances[1].gpm is None                       # idle: no metrics
    assert s.calls("nvmlGpmMigSampleGet") - samples == 2              # yet sampled
    assert s.calls("nvmlGpmMetricsGet") - metrics == 1                # instance 1 only
    s.rewrite(scenario(busy, [(101, 1), (102, 2)]))
    reading = s.tick()
    assert [p.pid for p in reading.mig_instances[1].processes] == [102]
    assert reading.mig_instances[1].gpm.graphics_active_percent == 20.0


def test_a_tick_too_close_to_the_last_sample_carries_the_last_activity(simulate):
    """GPM needs samples over 100 ms apart. A tick that comes sooner (a late tick, then one on
    time) takes no sample and carries the metrics read last, so no instance's activity is
    unknown for it (its share would be assumed); the next tick pairs with the kept sample."""
    busy = [instance(1, gpm={"graphics_active_percent": 60}),
            instance(2, gpm={"graphics_active_percent": 20})]
    s = simulate(scenario(busy, [(101, 1), (102, 2)]))
    s.tick()
    s.tick()
    samples = s.calls("nvmlGpmMigSampleGet")
    s.clock.now += 0.05
    (close,) = [r for r in s.sweeper.sweep() if r.identity.uuid == A]
    assert [m.gpm.graphics_active_percent for m in close.mig_instances] == [60.0, 20.0]
    assert s.calls("nvmlGpmMigSampleGet") == samples            # the base is kept
    s.rewrite(scenario([instance(1, gpm={"graphics_active_percent": 10}),
                        instance(2, gpm={"graphics_active_percent": 20})],
                       [(101, 1), (102, 2)]))
    later = s.tick()
    assert [m.gpm.graphics_active_percent for m in later.mig_instances] == [10.0, 20.0]
    assert s.calls("nvmlGpmMigSampleGet") == samples + 2


def test_an_instance_idle_at_its_last_sample_carries_nothing(simulate):
    """An idle instance is sampled without metrics: a too-close tick just after it became
    busy has no activity of it to carry (absent, not 0)."""
    busy = [instance(1, gpm={"graphics_active_percent": 60}),
            instance(2, gpm={"graphics_active_percent": 20})]
    s = simulate(scenario(busy, [(101, 1)]))
    s.tick()
    s.tick()
    s.rewrite(scenario(busy, [(101, 1), (102, 2)]))
    s.clock.now += 0.05
    (close,) = [r for r in s.sweeper.sweep() if r.identity.uuid == A]
    assert close.mig_instances[0].gpm.graphics_active_percent == 60.0
    assert close.mig_instances[1].gpm is None
