"""The housekeeping tick over scripted GPU readings: what it keeps of a GPU that went away."""

from __future__ import annotations

import pytest

from gpustats.engine.collector import Housekeeper
from gpustats.engine.counters import EnergyCounters
from gpustats.engine.energy import EnergyAccountant
from gpustats.engine.store import SnapshotStore
from gpustats.model.device import DeviceIdentity, DeviceReading, ProcessReading
from tests.support.clock import Clock
from tests.support.gpus import GPU_A as GPU
from tests.support.housekeeper_fakes import NoErrors, Node, ScriptedGpus


def busy(at: float, counter_mj: int) -> DeviceReading:
    return DeviceReading(DeviceIdentity(0, GPU), at, power_watts=300.0, power_limit_watts=400.0,
                         energy_counter_millijoules=counter_mj,
                         processes=(ProcessReading(pid=7),))


def test_a_gpu_that_vanished_and_came_back_bills_nobody_for_the_time_it_was_gone():
    """Its accounting starts afresh, as for a lost GPU: the energy of the time it was gone
    goes to its device counter alone (the hardware counter ran on continuously), never to the
    process running when it is back. Its counters are kept throughout."""
    wall = Clock(1000.0)
    counters = EnergyCounters(wall=wall)
    gpus = ScriptedGpus()
    housekeeper = Housekeeper(
        node_name="n", node=Node(), gpus=gpus, errors=NoErrors(), store=SnapshotStore(),
        energy=EnergyAccountant(lambda uuid: 100.0, counters, boot_id="boot-1", wall=wall),
        counters=counters, wall=wall, monotonic=wall)
    gpus.next = (busy(0.0, 0),)
    housekeeper.tick()
    wall.now += 1.0
    gpus.next = (busy(1.0, 300_000),)
    before = housekeeper.tick()
    assert before.processes[0].attributed_energy_joules == pytest.approx(200.0)
    wall.now += 1.0
    gpus.next = ()                                    # gone from the driver's list
    housekeeper.tick()
    wall.now += 99.0
    gpus.next = (busy(101.0, 300_000 + 30_000_000),)  # 100 s at 300 W later
    back = housekeeper.tick()
    assert back.processes[0].attributed_energy_joules == pytest.approx(200.0)
    assert back.devices[0].energy_joules == pytest.approx(300.0 + 30_000.0)
    wall.now += 1.0
    gpus.next = (busy(102.0, 300_000 + 30_300_000),)  # and from there on, billed as before
    assert housekeeper.tick().processes[0].attributed_energy_joules == pytest.approx(400.0)


def _housekeeper(wall, gpus):
    counters = EnergyCounters(wall=wall)
    return Housekeeper(
        node_name="n", node=Node(), gpus=gpus, errors=NoErrors(), store=SnapshotStore(),
        energy=EnergyAccountant(lambda uuid: 100.0, counters, boot_id="boot-1", wall=wall),
        counters=counters, wall=wall, monotonic=wall)


def test_idle_energy_is_whole_minus_active_and_never_goes_down():
    """A tick whose energy counter could not be read counts its active energy (integrated
    power) but not the GPU's whole: whole − active would dip; the idle served holds."""
    wall, gpus = Clock(1000.0), ScriptedGpus()
    housekeeper = _housekeeper(wall, gpus)
    gpus.next = (busy(0.0, 0),)
    housekeeper.tick()
    wall.now += 1.0
    gpus.next = (busy(1.0, 300_000),)                  # 300 J: 100 idle, 200 active
    assert housekeeper.tick().devices[0].idle_energy_joules == pytest.approx(100.0)
    wall.now += 1.0
    unread = DeviceReading(DeviceIdentity(0, GPU), 2.0, power_watts=300.0,
                           power_limit_watts=400.0, processes=(ProcessReading(pid=7),))
    gpus.next = (unread,)
    device = housekeeper.tick().devices[0]
    assert device.energy_joules - device.active_energy_joules < 100.0      # the dip
    assert device.idle_energy_joules == pytest.approx(100.0)               # held


def test_an_ended_process_is_kept_with_its_energy_while_its_counter_is():
    wall, gpus = Clock(1000.0), ScriptedGpus()
    housekeeper = _housekeeper(wall, gpus)
    gpus.next = (busy(0.0, 0),)
    housekeeper.tick()
    wall.now += 1.0
    gpus.next = (busy(1.0, 300_000),)
    live = housekeeper.tick().processes
    assert [(p.pid, p.ended) for p in live] == [(7, False)]
    wall.now += 1.0
    gpus.next = (DeviceReading(DeviceIdentity(0, GPU), 2.0, power_watts=100.0,
                               power_limit_watts=400.0, energy_counter_millijoules=400_000),)
    ended = housekeeper.tick().processes
    assert [(p.pid, p.ended) for p in ended] == [(7, True)]
    assert ended[0].attributed_energy_joules == pytest.approx(200.0)
    assert ended[0].attributed_power_watts is None and ended[0].memory_used_bytes is None
