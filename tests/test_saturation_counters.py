"""The counters beside the saturation ratios: any window is an increase() apart. Pure
accumulation (resets, repeated readings, gaps, absence), the families and keys they are served
as, and through the real daemon on the simulator: the window worked out from the counters
matches the ratios the daemon serves for the same span within 2 %.

The 120 s check (``test_counters_match_the_served_ratios_over_120_s``) is marked ``slow`` and
runs only when asked for: ``pytest -m slow tests/test_saturation_counters.py`` (or with
``GPUSTATS_SLOW_TESTS=1``); the default suite runs the same check over a 12 s window."""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import given, settings, strategies as st
from prometheus_client.parser import text_string_to_metric_families

from gpustats.export.summary import saturation_dict
from gpustats.model.device import GpmReading, ViolationReading
from gpustats.saturation import SaturationSample, SaturationWindow
from tests.support.fakehost import write_scenario
from tests.support.gpus import GPU_A as A, GPU_B as B
from tests.support.waiting import poll

GIB = 1 << 30


def _dict(pairs):
    return dict(pairs) if pairs is not None else None


def _sample(t, power_ns=None, reasons=None, used=None, dram=None, reference_us=None,
            violations=None):
    return SaturationSample(
        time=t,
        violations=violations if violations is not None else (
            ViolationReading(power_ns=power_ns, thermal_ns=0, reference_time_us=reference_us)
            if power_ns is not None else None),
        reasons=reasons, memory_used_bytes=used,
        memory_total_bytes=80 * GIB if used is not None else None,
        gpm=GpmReading(dram_active_percent=dram) if dram is not None else None)


# ------------------------------------------------------------------ pure accumulation


def test_counters_over_any_window_equal_the_ratios():
    """One sample a second for 200 s; the signals change at 100 s. At every t1 the window's
    ratios equal (counter(t1) - counter(t1 - 60)) / 60."""
    window = SaturationWindow(60.0, pressure_threshold=0.9)
    counters, served = {}, {}
    power = 0
    for t in range(201):
        late = t >= 100
        power += int((0.6 if late else 0.2) * 1e9) if t else 0
        window.add(_sample(float(t), power_ns=power,
                           reasons=0x4 | (0x8 if late else 0),
                           used=int(80 * GIB * (0.95 if late else 0.5))))
        s = window.saturation()
        counters[t], served[t] = s.counters, s
    for t1 in (60, 90, 100, 130, 159, 160, 200):
        t0 = t1 - 60
        before, after, s = counters[t0], counters[t1], served[t1]

        def rate(field, key=None, after=after, before=before):
            a, b = getattr(after, field), getattr(before, field)
            if key is not None:
                a, b = _dict(a)[key], _dict(b)[key]
            return (a - b) / 60.0

        assert after.sampled_seconds - before.sampled_seconds == 60.0
        assert rate("throttle_violation_seconds", "power") == pytest.approx(
            _dict(s.throttle_violation_ratios)["power"], rel=1e-9)
        assert rate("throttle_violation_seconds", "thermal") == 0.0
        # The window holds its 60 samples and the one at its edge: the ratios count 61 samples,
        # the counters 60 seconds; equal where the edge sample agrees with the window.
        for key in ("sw_power_cap", "hw_slowdown"):
            assert rate("throttle_reason_seconds", key) == pytest.approx(
                _dict(s.throttle_reason_ratios)[key], abs=1 / 61 + 1e-9)
        assert rate("memory_pressure_seconds") == pytest.approx(s.memory_pressure_ratio,
                                                                abs=1 / 61 + 1e-9)
    assert counters[200].samples == 201
    late = counters[200]
    # Each sample counts the second before it: the 101 samples from 100 s on, 101 s.
    assert _dict(late.throttle_reason_seconds) == {
        "sw_power_cap": 200.0, "hw_slowdown": 101.0, "sync_boost": 0.0, "sw_thermal": 0.0,
        "hw_thermal": 0.0, "hw_power_brake": 0.0}
    assert late.memory_pressure_seconds == 101.0


def test_a_counter_that_goes_down_restarted_from_zero():
    """A driver reload resets the violation counters: the new value is what grew since the
    reset, at most the time between the readings; the total only grows."""
    window = SaturationWindow(60.0)
    window.add(_sample(0.0, power_ns=50 * 10**9, reference_us=0))
    window.add(_sample(10.0, power_ns=52 * 10**9, reference_us=10 * 10**6))
    window.add(_sample(20.0, power_ns=3 * 10**9, reference_us=20 * 10**6))     # reset
    assert _dict(window.saturation().counters.throttle_violation_seconds)["power"] == 5.0
    window.add(_sample(30.0, power_ns=1 * 10**9, reference_us=30 * 10**6 + 1))  # again
    window.add(_sample(40.0, power_ns=99 * 10**9, reference_us=40 * 10**6))
    # The second reset counts its 1 s; the jump after it counts what the driver says.
    assert _dict(window.saturation().counters.throttle_violation_seconds)["power"] == 104.0
    capped = SaturationWindow(60.0)
    capped.add(_sample(0.0, power_ns=50 * 10**9, reference_us=0))
    capped.add(_sample(1.0, power_ns=40 * 10**9, reference_us=10**6))   # 40 s in 1 s: capped
    assert _dict(capped.saturation().counters.throttle_violation_seconds)["power"] == 1.0


def test_a_repeated_reading_is_counted_once():
    """Violation counters read every third tick: the ticks between carry the same reading."""
    window = SaturationWindow(60.0)
    for t in range(10):
        if t % 3 == 0:
            reading = ViolationReading(power_ns=t * 10**8, reference_time_us=t * 10**6)
        window.add(_sample(float(t), violations=reading))
    counters = window.saturation().counters
    assert _dict(counters.throttle_violation_seconds) == {"power": 0.9}
    assert counters.samples == 10 and counters.sampled_seconds == 9.0


def test_absent_sources_give_absent_counters():
    window = SaturationWindow(60.0)
    window.add(SaturationSample(0.0))
    window.add(SaturationSample(1.0))
    s = window.saturation()
    c = s.counters
    assert (c.samples, c.sampled_seconds) == (2, 1.0)
    assert c.throttle_violation_seconds is None and c.throttle_reason_seconds is None
    assert c.memory_pressure_seconds is None and s.dram_active_max is None
    # A policy the driver does not give is left out; a reason seen once is 0, not absent.
    window.add(SaturationSample(2.0, ViolationReading(power_ns=0, thermal_ns=None), reasons=0))
    c = window.saturation().counters
    assert _dict(c.throttle_violation_seconds) == {"power": 0.0}
    assert _dict(c.throttle_reason_seconds)["sw_power_cap"] == 0.0


def test_a_gap_is_counted_in_no_counter():
    window = SaturationWindow(600.0)
    window.add(_sample(0.0, reasons=0x4, used=80 * GIB))
    window.add(_sample(1.0, reasons=0x4, used=80 * GIB))
    window.gap()                                        # the GPU was lost for a minute
    window.add(_sample(61.0, reasons=0x4, used=80 * GIB))
    window.add(_sample(62.0, reasons=0x4, used=80 * GIB))
    c = window.saturation().counters
    assert (c.samples, c.sampled_seconds, c.memory_pressure_seconds) == (4, 2.0, 2.0)
    assert _dict(c.throttle_reason_seconds)["sw_power_cap"] == 2.0


def test_dram_active_max_beside_the_average():
    window = SaturationWindow(10.0)
    for t, dram in enumerate((90.0, 20.0, 80.0, 50.0)):
        window.add(_sample(float(t) * 5, dram=dram))
    s = window.saturation()           # 90 left the window (its edge is 5 s): 20, 80, 50
    assert s.dram_active_max == pytest.approx(0.8)
    assert s.dram_active_avg == pytest.approx(0.5)
    out = saturation_dict(s)
    assert out["dramActiveMax"] == pytest.approx(0.8) and "counters" not in out


counter_steps = st.lists(st.tuples(
    st.floats(0.01, 5.0), st.none() | st.integers(0, 10**12), st.none() | st.integers(0, 0xFF),
    st.none() | st.integers(0, 80 * GIB), st.booleans()), max_size=40)


@settings(max_examples=200, deadline=None)
@given(counter_steps)
def test_every_counter_only_grows(steps):
    window = SaturationWindow(10.0)
    t, previous = 0.0, None
    for gap, power, reasons, used, lost in steps:
        t += gap
        if lost:
            window.gap()
            continue
        window.add(_sample(t, power_ns=power, reasons=reasons, used=used,
                           reference_us=int(t * 1e6)))
        c = window.saturation().counters
        if previous is not None:
            assert c.samples == previous.samples + 1
            assert c.sampled_seconds >= previous.sampled_seconds
            for field in ("throttle_violation_seconds", "throttle_reason_seconds"):
                before, after = _dict(getattr(previous, field)), _dict(getattr(c, field))
                if before is not None:
                    assert all(after[k] >= v for k, v in before.items())
            if previous.memory_pressure_seconds is not None:
                assert c.memory_pressure_seconds >= previous.memory_pressure_seconds
        previous = c


# ------------------------------------------------------------------ through the daemon

POLICIES = ("power", "thermal")
REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal")


def _scenario(late: bool) -> dict:
    """GPU A throttled by power at 20 %, then 60 % and thermal 10 % with hw_slowdown set and
    framebuffer pressure; B gives no violations, reasons or GPM (absent, not 0)."""
    return {"devices": [
        {"uuid": A, "minor": 0, "memory_total_bytes": 1000,
         "memory_used_bytes": 950 if late else 500,
         "violations": {"power_percent": 60 if late else 20, "thermal_percent": 10 if late else 0},
         "clocks_event_reasons": ["sw_power_cap", "hw_slowdown"] if late else ["sw_power_cap"],
         "gpm": {"dram_active_percent": 80 if late else 30}},
        {"uuid": B, "minor": 1, "unsupported": ["violations", "clocks_event_reasons", "gpm"]},
    ]}


def _scrape(daemon) -> dict:
    """One /metrics body (one snapshot): the tick's time, and A's and B's saturation series."""
    status, text = daemon.get("/metrics")
    assert status == 200
    out: dict = {"gpus": {A: {}, B: {}}}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "gpustats_last_tick_timestamp_seconds":
                out["time"] = s.value
            gpu = s.labels.get("gpu_uuid")
            if gpu in out["gpus"] and ("saturation" in s.name or "throttle" in s.name
                                       or "pressure" in s.name or "dram" in s.name):
                key = s.labels.get("policy") or s.labels.get("reason")
                out["gpus"][gpu][(s.name, key)] = s.value
    return out


def _check_counters_against_ratios(start_daemon, tmp_path, window: float, interval: float):
    path = tmp_path / "s.yaml"
    write_scenario(path, _scenario(late=False))
    daemon = start_daemon("--simulate", str(path), "--housekeeping-interval", str(interval),
                          "--saturation-window", str(window))
    daemon.wait_ready()
    first = poll(lambda: (got := _scrape(daemon))["gpus"][A].get(
        ("gpustats_node_gpu_throttle_violation_seconds_total", "power")) is not None and got,
        timeout=20, interval=interval / 2)
    assert first, daemon.log()
    t0 = first["time"]
    # Halfway through the span the load changes: the ratios are no constant.
    time.sleep(max(0.0, t0 + window / 2 - time.time()))     # measures: half the window
    write_scenario(path, _scenario(late=True))
    # The first snapshot a full window after t0: the served window covers the same span.
    last = poll(lambda: (got := _scrape(daemon))["time"] >= t0 + window and got,
                timeout=window + 30, interval=min(0.05, interval / 4))
    assert last, daemon.log()
    span = last["time"] - t0
    assert window <= span < window + 2 * interval + 0.5
    a0, a1 = first["gpus"][A], last["gpus"][A]

    def from_counters(name, key=None):
        return (a1[(name, key)] - a0[(name, key)]) / span

    found = {}
    for policy in POLICIES:
        found[f"violation {policy}"] = (
            from_counters("gpustats_node_gpu_throttle_violation_seconds_total", policy),
            a1[("gpustats_node_gpu_throttle_violation_ratio", policy)])
    for reason in REASONS:
        found[f"reason {reason}"] = (
            from_counters("gpustats_node_gpu_throttle_reason_seconds_total", reason),
            a1[("gpustats_node_gpu_throttle_reason_ratio", reason)])
    found["memory pressure"] = (
        from_counters("gpustats_node_gpu_memory_pressure_seconds_total"),
        a1[("gpustats_node_gpu_memory_pressure_ratio", None)])
    found["sampled seconds"] = (from_counters("gpustats_node_gpu_saturation_sampled_seconds_total"),
                                1.0)
    for what, (derived, served) in found.items():
        assert derived == pytest.approx(served, rel=0.02, abs=1e-6), (what, found, span)
    # The span is not trivial: what changed halfway shows in the window.
    assert found["violation power"][1] == pytest.approx(0.4, abs=0.05)
    assert found["reason hw_slowdown"][1] == pytest.approx(0.5, abs=0.1)
    assert found["reason sw_power_cap"][1] == 1.0 and found["reason sw_thermal"][1] == 0.0
    samples = from_counters("gpustats_node_gpu_saturation_samples_total") * span
    assert samples == pytest.approx(window / interval, rel=0.2)
    assert a1[("gpustats_node_gpu_dram_active_max_ratio", None)] == pytest.approx(0.8)
    # B gives no violations, reasons or GPM: no such series, never 0.
    b = last["gpus"][B]
    assert not [k for k in b if "throttle" in k[0] or "dram" in k[0]], b
    assert ("gpustats_node_gpu_saturation_samples_total", None) in b
    return found, span


def test_counters_match_the_served_ratios(start_daemon, tmp_path):
    """The same check as the 120 s one below, over a 12 s window at 0.1 s ticks."""
    found, span = _check_counters_against_ratios(start_daemon, tmp_path, window=12.0,
                                                 interval=0.1)
    print(_report(found, span))


@pytest.mark.slow
def test_counters_match_the_served_ratios_over_120_s(start_daemon, tmp_path, request):
    """--saturation-window 120, --housekeeping-interval 0.5: (counter at t1 - counter at t0) /
    (t1 - t0), t1 - t0 = 120 s, matches the ratios served at t1 within 2 %."""
    if "slow" not in (request.config.getoption("markexpr") or "") \
            and not os.environ.get("GPUSTATS_SLOW_TESTS"):
        pytest.skip("120 s: run with -m slow or GPUSTATS_SLOW_TESTS=1")
    found, span = _check_counters_against_ratios(start_daemon, tmp_path, window=120.0,
                                                 interval=0.5)
    print(_report(found, span))


def _report(found: dict, span: float) -> str:
    return f"\nover {span:.2f} s, from the counters vs served: " + ", ".join(
        f"{what} {derived:.4f} vs {served:.4f}" for what, (derived, served) in found.items())
