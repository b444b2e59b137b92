"""The energy ledger: per GPU and tick, every level adds up to the active energy."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from gpustats.attribution import DeviceTickInput, attribute_device
from gpustats.engine.counters import EnergyCounters
from gpustats.engine.ledger import EnergyLedger, Holdings
from gpustats.model.device import (
    DeviceIdentity, DeviceReading, MigInstanceReading, ProcessReading, ProcessSample,
)
from gpustats.model.energy_keys import (
    ActiveKey, ContainerKey, DeviceKey, MigKey, PodKey, ProcessKey, UnattributedKey,
)

UUIDS = ("GPU-a", "GPU-b")

process_st = st.tuples(st.integers(1, 12), st.integers(0, 3),      # pid, GPU instance
                       st.integers(0, 100),                         # SM percent
                       st.one_of(st.none(), st.integers(0, 4)))     # container number
gpu_st = st.fixed_dictionaries({
    "processes": st.lists(process_st, max_size=8),
    "mig": st.booleans(),
    "known": st.booleans(),
    "active": st.one_of(st.none(), st.floats(0, 5000)),
    "activity": st.dictionaries(st.integers(0, 3), st.floats(0, 1)),
    "holders": st.lists(st.integers(0, 4), max_size=3),    # devices.list holders, no process
})
tick_st = st.tuples(gpu_st, gpu_st)


def pod_of(container: int) -> str | None:
    return None if container == 4 else f"pod-{container % 2}"      # container 4: no pod


def tick_inputs(gpus, dt=2.0):
    readings, attributions, owners, held = [], {}, {}, {}
    for uuid, g in zip(UUIDS, gpus):
        procs = tuple(ProcessReading(pid=pid, gpu_instance_id=gi if g["mig"] else None)
                      for pid, gi, _, _ in g["processes"])
        instances = tuple(MigInstanceReading(gpu_instance_id=gi) for gi in range(4)) \
            if g["mig"] else ()
        reading = DeviceReading(DeviceIdentity(0, uuid), 1.0, processes=procs,
                                mig_enabled=g["mig"], mig_instances=instances,
                                unsupported_fields=frozenset() if g["known"]
                                else frozenset({"processes"}))
        readings.append(reading)
        samples = tuple(ProcessSample(pid, 1, sm) for pid, _, sm, _ in g["processes"])
        attributions[uuid] = attribute_device(DeviceTickInput(
            device_uuid=uuid, dt_seconds=dt, tick_energy_joules=None,
            active_energy_joules=g["active"], idle_power_watts=50.0,
            active_power_watts=None if g["active"] is None else g["active"] / dt,
            device_energy_joules=(g["active"] or 0.0) + 100.0,
            processes=procs if g["known"] else (), processes_known=g["known"],
            samples=samples, mig_enabled=g["mig"], mig_instances=instances,
            mig_activity=g["activity"]))
        for container in g["holders"]:       # through devices.list, processes known or not
            held.setdefault(ContainerKey(f"c{container}", uuid, None), pod_of(container))
        if not g["known"]:
            continue
        for pid, _, _, container in g["processes"]:
            if container is not None:
                # A process is in one container (the first one listed for it)...
                owners.setdefault((uuid, pid), f"c{container}")
        for pid, gi, _, _ in g["processes"]:
            cid = owners.get((uuid, pid))
            if cid is not None:       # ...which holds each GPU (instance) it runs on
                held[ContainerKey(cid, uuid, gi if g["mig"] else None)] = pod_of(int(cid[1:]))
    return readings, attributions, Holdings(owners, held)


def of_gpu(tick, kind, uuid):
    return [v for k, v in tick.items()
            if k[0] == kind and (k[1] == uuid if kind in ("process", "mig") else uuid in k)]


@settings(max_examples=300, deadline=None)
@given(st.lists(tick_st, min_size=1, max_size=4))
def test_every_level_adds_up_to_the_active_energy(ticks):
    counters = EnergyCounters()
    ledger = EnergyLedger(counters)
    before: dict = {}
    for gpus in ticks:
        readings, attributions, holdings = tick_inputs(gpus)
        settled = ledger.settle(readings, attributions, {}, holdings)
        tick = settled.tick
        for uuid, g in zip(UUIDS, gpus):
            active = g["active"]
            containers = of_gpu(tick, "container", uuid)
            pods = of_gpu(tick, "pod", uuid)
            unattributed = tick.get(UnattributedKey(uuid))
            if active is None:
                assert unattributed is None and not containers and not pods
                continue
            if not g["known"]:
                # Unknown processes: nobody's figure this tick, all of it unattributed.
                assert not containers and not pods
                assert unattributed == active
                continue
            assert sum(containers) + unattributed == pytest.approx(active, abs=1e-6)
            in_pods = sum(v for k, v in tick.items()
                          if k[0] == "container" and k[2] == uuid and pod_of(int(k[1][1:])))
            assert sum(pods) == pytest.approx(in_pods, abs=1e-6)
            in_containers = sum(v for k, v in tick.items() if k[0] == "process"
                                and k[1] == uuid and (uuid, k[2]) in holdings.process_owner)
            assert sum(containers) == pytest.approx(in_containers, abs=1e-6)
            if any(a.energy_joules for a in attributions[uuid].processes):
                assert sum(of_gpu(tick, "process", uuid)) == pytest.approx(active, rel=1e-9)
            if g["mig"]:
                placed = sum(a.energy_joules or 0.0 for a in attributions[uuid].processes)
                assert sum(of_gpu(tick, "mig", uuid)) == pytest.approx(placed, abs=1e-6)
            for key in (DeviceKey(uuid), ActiveKey(uuid)):
                assert settled.total(key) is not None
        now = dict(counters.items())
        lowered = {k: (v, now.get(k)) for k, v in before.items() if now.get(k, -1) < v}
        assert not lowered
        before = now


def test_watts_are_the_ticks_energy_over_its_length():
    gpus = ({"processes": [(1, 0, 50, 0), (2, 0, 50, 1)], "mig": False, "known": True,
             "active": 400.0, "activity": {}, "holders": [3]},
            {"processes": [(3, 0, 0, 2)], "mig": False, "known": False,
             "active": 200.0, "activity": {}, "holders": []})
    readings, attributions, holdings = tick_inputs(gpus, dt=2.0)
    settled = EnergyLedger(EnergyCounters()).settle(
        readings, attributions, {("GPU-a", 1): 77}, holdings)
    assert settled.watts(ContainerKey("c0", "GPU-a", None), "GPU-a") == pytest.approx(100.0)
    assert settled.watts(PodKey("pod-0", "GPU-a"), "GPU-a") == pytest.approx(100.0)
    # A holder with no process: billed an observed 0 where processes are known.
    assert settled.watts(ContainerKey("c3", "GPU-a", None), "GPU-a") == 0.0
    assert settled.total(ProcessKey("GPU-a", 1, 77)) == pytest.approx(200.0)
    assert settled.watts(UnattributedKey("GPU-b"), "GPU-b") == pytest.approx(100.0)
    assert settled.total(ContainerKey("c2", "GPU-b", None)) is None       # unknown: absent
    assert settled.total(MigKey("GPU-a", 0)) is None                       # not MIG
    assert settled.total(DeviceKey("GPU-a")) == pytest.approx(500.0)


def test_typed_keys_are_the_stored_tuples():
    assert ProcessKey("GPU-a", 4, None) == ("process", "GPU-a", 4, None)
    assert hash(PodKey("u", "GPU-a")) == hash(("pod", "u", "GPU-a"))
    assert {("container", "c", "GPU-a", 1): 5.0}[ContainerKey("c", "GPU-a", 1)] == 5.0
    assert ContainerKey("c", "GPU-a", 1).gpu_instance_id == 1
