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
