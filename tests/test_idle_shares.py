"""A GPU's idle energy split among its holders (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from gpustats.attribution import idle_shares, instance_fractions
from gpustats.model.device import MigInstanceReading


def test_holders_of_a_whole_gpu_share_equally():
    shares, unallocated = idle_shares(90.0, [("a", None), ("b", None), ("c", None)])
    assert shares == {("a", None): 30.0, ("b", None): 30.0, ("c", None): 30.0}
    assert unallocated == 0.0


def test_idle_no_one_holds_is_unallocated():
    assert idle_shares(70.0, []) == ({}, 70.0)


def test_no_idle_is_no_share():
    assert idle_shares(0.0, [("a", None)]) == ({("a", None): 0.0}, 0.0)


def test_mig_instances_carry_their_size_and_split_among_their_holders():
    fractions = {1: 0.5, 2: 0.25, 3: 0.125}       # instance 3 held by no one
    shares, unallocated = idle_shares(80.0, [("a", 1), ("b", 1), ("c", 2)], fractions)
    assert shares == {("a", 1): 20.0, ("b", 1): 20.0, ("c", 2): 20.0}
    assert unallocated == pytest.approx(20.0)     # instance 3 and the unpartitioned eighth


def test_a_whole_gpu_holder_on_mig_takes_what_no_instance_holder_does():
    shares, unallocated = idle_shares(80.0, [("a", 1), ("w", None)], {1: 0.5, 2: 0.5})
    assert shares == {("a", 1): 40.0, ("w", None): 40.0} and unallocated == 0.0


def test_instance_fractions_by_memory():
    instances = [MigInstanceReading(gpu_instance_id=1, memory_total_bytes=10),
                 MigInstanceReading(gpu_instance_id=2, memory_total_bytes=None)]
    assert instance_fractions(80, instances) == {1: 0.125}
    assert instance_fractions(None, instances) == {}


holder = st.tuples(st.sampled_from("abcde"), st.one_of(st.none(), st.integers(0, 6)))


@given(idle=st.floats(0, 1e6), holders=st.lists(holder, max_size=8),
       fractions=st.one_of(st.none(), st.dictionaries(st.integers(0, 6),
                                                      st.floats(0, 1.0 / 7), max_size=7)))
def test_shares_and_the_unallocated_rest_add_up_to_the_idle(idle, holders, fractions):
    shares, unallocated = idle_shares(idle, holders, fractions)
    assert all(v >= 0 for v in shares.values()) and unallocated >= 0
    assert sum(shares.values()) + unallocated == pytest.approx(idle, rel=1e-9, abs=1e-9)
    assert set(shares) == set(holders)


# ------------------------------------------------------------ shares: allocations and tenants

def _held(*entries):
    """ContainerKey -> pod of each (container, GPU instance, pod) on GPU "G"."""
    from gpustats.model.energy_keys import ContainerKey
    return {ContainerKey(cid, "G", gi): pod for cid, gi, pod in entries}


def test_a_tenant_seen_through_processes_is_one_share_whatever_its_containers():
    from gpustats.engine.idle_holders import holder_shares
    held = _held(("p1", None, "P"), ("p2", None, "P"), ("q1", None, "Q"), ("svc", None, None))
    shares, unallocated = holder_shares(90.0, "G", [(k[1], k[3]) for k in held], held,
                                        frozenset(held), None)
    assert shares == {("p1", None): 15.0, ("p2", None): 15.0, ("q1", None): 30.0,
                      ("svc", None): 30.0}
    assert unallocated == 0.0


def test_each_allocation_is_one_share_and_takes_its_pods_process_only_containers():
    from gpustats.engine.idle_holders import holder_shares
    held = _held(("p1", None, "P"), ("p2", None, "P"), ("p3", None, "P"), ("q1", None, "Q"))
    allocated = {k for k in held if k[1] in ("p1", "p2")}     # two allocations of pod P
    shares, _ = holder_shares(90.0, "G", [(k[1], k[3]) for k in held], held,
                              frozenset(set(held) - allocated), None)
    # p3 (process only) joins P's first allocation; Q's one container is one share.
    assert shares == {("p1", None): 15.0, ("p2", None): 30.0, ("p3", None): 15.0,
                      ("q1", None): 30.0}


def test_on_mig_the_tenant_shares_are_within_each_instance():
    from gpustats.engine.idle_holders import holder_shares
    held = _held(("p1", 1, "P"), ("p2", 1, "P"), ("q1", 1, "Q"), ("r1", 2, "R"))
    shares, unallocated = holder_shares(80.0, "G", [(k[1], k[3]) for k in held], held,
                                        frozenset(held), {1: 0.5, 2: 0.25})
    assert shares == {("p1", 1): 10.0, ("p2", 1): 10.0, ("q1", 1): 20.0, ("r1", 2): 20.0}
    assert unallocated == pytest.approx(20.0)


@pytest.mark.parametrize("activity, pstate, idle", [
    ({1: 0.0, 2: 0.0}, None, True),        # every instance at 0 %
    ({1: 0.0, 2: 0.3}, None, False),       # one working
    ({1: 0.0}, None, False),               # one of unknown activity
    ({1: 0.0, 2: 0.3}, 8, True),           # in its idle performance state
])
def test_a_mig_gpu_held_by_processes_is_idle_when_no_instance_works(activity, pstate, idle):
    from gpustats.engine.energy import mig_idle_tick
    from gpustats.model.device import DeviceIdentity, DeviceReading, ProcessReading
    reading = DeviceReading(
        DeviceIdentity(index=0, uuid="G"), 1.0, mig_enabled=True, performance_state=pstate,
        mig_instances=(MigInstanceReading(1), MigInstanceReading(2)),
        processes=(ProcessReading(pid=1, gpu_instance_id=1),))
    assert mig_idle_tick(reading, activity) is idle
