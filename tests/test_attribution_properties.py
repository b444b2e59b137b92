"""Invariants of the attribution math for any readings (hypothesis)."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from gpustats.attribution import (
    FALLBACK_MAX_WATTS, GLITCH_FACTOR, DeviceTickInput, active_energy_joules, active_power,
    attribute_device, learned_idle_power, tick_energy_joules,
)
from gpustats.model.device import ProcessReading, ProcessSample

pids_st = st.lists(st.integers(1, 40), max_size=8)
# Whatever a driver might hand back, in range or not.
samples_st = st.one_of(
    st.none(),
    st.lists(st.builds(ProcessSample, pid=st.integers(1, 45), timestamp_us=st.integers(0, 5),
                       sm_util_percent=st.integers(-50, 300)), max_size=24).map(tuple))
energy_st = st.one_of(st.none(), st.floats(0, 1e6), st.just(float("nan")),
                      st.just(float("inf")))
gi_st = st.one_of(st.none(), st.integers(0, 6))
readings = st.fixed_dictionaries({
    "pids": st.lists(st.tuples(st.integers(1, 40), gi_st), max_size=10),
    "samples": samples_st,
    "tick": st.floats(0, 1e6),
    "idle": st.floats(0, 1000),
    "dt": st.floats(0.01, 120),
    "mps": st.one_of(st.none(), st.booleans()),
    "mig": st.booleans(),
    "activity": st.dictionaries(st.integers(0, 6),
                                st.one_of(st.floats(0, 1), st.just(float("nan")))),
})


def build(r):
    active = active_energy_joules(r["tick"], r["idle"], r["dt"])
    return DeviceTickInput(
        device_uuid="GPU-a", dt_seconds=r["dt"], tick_energy_joules=r["tick"],
        active_energy_joules=active, idle_power_watts=r["idle"],
        active_power_watts=active / r["dt"],
        processes=tuple(ProcessReading(pid=p, gpu_instance_id=gi if r["mig"] else None)
                        for p, gi in r["pids"]),
        samples=r["samples"], mps=r["mps"], mig_enabled=r["mig"], mig_activity=r["activity"])


@settings(max_examples=400, deadline=None)
@given(readings)
def test_shares_conserve_active_energy_and_never_touch_idle(r):
    inp = build(r)
    result = attribute_device(inp)
    active = inp.active_energy_joules
    energies = [p.energy_joules for p in result.processes]
    assert all(e is not None and e >= 0 for e in energies)
    assert all(p.power_watts >= 0 and 0 <= p.share <= 1 + 1e-12 for p in result.processes)
    total = sum(energies)
    assert total <= active * (1 + 1e-9) + 1e-9
    # Idle is never attributed: what is shared fits in the tick's energy above idle.
    assert total <= max(0.0, r["tick"] - r["idle"] * r["dt"]) * (1 + 1e-9) + 1e-9
    if result.processes:
        assert total == pytest.approx(active, rel=1e-3, abs=1e-9)
        assert sum(p.share for p in result.processes) == pytest.approx(1.0, rel=1e-9)
    for p in result.processes:
        assert p.power_watts == pytest.approx(p.energy_joules / r["dt"])


@settings(max_examples=300, deadline=None)
@given(readings)
def test_sharing_mode_follows_the_device(r):
    inp = build(r)
    mode = attribute_device(inp).sharing_mode
    distinct = {p for p, _ in r["pids"]}
    expected = "mig" if r["mig"] else "mps" if r["mps"] else \
        "time-slicing" if len(distinct) > 1 else "exclusive"
    assert mode == expected


counter_st = st.one_of(st.none(), st.integers(0, 2**64))
power_st = st.one_of(st.none(), st.floats(0, 5000), st.just(float("nan")))


@settings(max_examples=400)
@given(prev=counter_st, cur=counter_st, p0=power_st, p1=power_st,
       dt=st.one_of(st.floats(0, 120), st.just(float("nan")), st.just(-1.0)),
       limit=st.one_of(st.none(), st.floats(0, 2000), st.just(float("nan"))))
def test_tick_energy_is_never_negative_or_huge(prev, cur, p0, p1, dt, limit):
    delta = tick_energy_joules(prev, cur, p0, p1, dt, limit)
    if delta.joules is None:
        return
    assert delta.joules >= 0 and math.isfinite(delta.joules)
    base = limit if limit is not None and math.isfinite(limit) and limit > 0 \
        else FALLBACK_MAX_WATTS
    ceiling = max([base] + [p for p in (p0, p1) if p is not None and math.isfinite(p)])
    assert delta.joules <= GLITCH_FACTOR * ceiling * dt * (1 + 1e-12)
    if prev is not None and cur is not None and cur < prev:
        assert delta.counter_reset


@given(start=st.integers(0, 2**50), steps=st.lists(
    st.tuples(st.integers(0, 2_000_000), st.booleans()), max_size=30))
def test_a_counter_that_resets_still_gives_a_sane_running_total(start, steps):
    """Summing the tick deltas over any resets never goes down and never overshoots."""
    counter, total, bound = start, 0.0, 0.0
    for increment_mj, reset in steps:
        previous = counter
        counter = increment_mj if reset else counter + increment_mj
        delta = tick_energy_joules(previous, counter, 300.0, 300.0, 1.0, 700.0)
        assert delta.joules is not None and delta.joules >= 0
        total += delta.joules
        bound += max(increment_mj / 1000.0, 300.0)
    assert total <= bound + 1e-6


@given(st.lists(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
                max_size=50))
def test_idle_never_increases_and_active_never_negative(samples):
    idle, recent = None, []
    for power in samples:
        recent.append(power)
        new = learned_idle_power(idle, tuple(recent), 3)
        assert idle is None or new <= idle
        held = [p for p in recent[-3:] if p is not None and p == p and p >= 0]
        assert new is None or len(held) < 3 or new <= max(held)  # never below a held low
        idle = new
        watts = active_power(power, idle)
        assert watts is None or watts >= 0
