"""The saturation window's one-pass figures equal a signal-by-signal reading of the same
samples, exactly (same sums in the same order), on arbitrary sample sequences."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from gpustats.model.device import GpmReading, ViolationReading
from gpustats.saturation import REASON_BITS, VIOLATION_FIELDS, SaturationSample, SaturationWindow

WINDOW = 10.0
GPM_FIELDS = ("sm_active_percent", "sm_occupancy_percent", "dram_active_percent",
              "pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second",
              "nvlink_tx_bytes_per_second", "nvlink_rx_bytes_per_second")

maybe_float = st.none() | st.floats(0, 1e10, allow_nan=False)
maybe_counter = st.none() | st.integers(0, 10**12)
violations = st.none() | st.builds(
    ViolationReading, power_ns=maybe_counter, thermal_ns=maybe_counter,
    sync_boost_ns=maybe_counter, board_limit_ns=maybe_counter,
    reference_time_us=st.none() | st.integers(0, 10**9))
gpm = st.none() | st.builds(GpmReading, **{f: maybe_float for f in GPM_FIELDS})
# Gaps that land exactly on the window's edge, and arbitrary ones.
gaps = st.sampled_from([0.5, 1.0, 2.5]) | st.floats(0.05, 4.0)
sample_parts = st.tuples(
    gaps, violations, st.none() | st.integers(0, 0xFF),
    st.none() | st.integers(0, 80 << 30), st.sampled_from([None, 0, 80 << 30]), gpm,
    maybe_float, maybe_float)


def _mean(values):
    return sum(values) / len(values) if values else None


def _reference(samples, threshold):
    """Each figure computed on its own, the plain way."""
    inside = [s for s in samples if s.time >= samples[-1].time - WINDOW] if samples else []
    ratios = [s.memory_used_bytes / s.memory_total_bytes for s in inside
              if s.memory_used_bytes is not None and s.memory_total_bytes]
    masks = [s.reasons for s in inside if s.reasons is not None]

    def gpm_mean(name):
        return _mean([getattr(s.gpm, name) for s in inside
                      if s.gpm is not None and getattr(s.gpm, name) is not None])

    def rate(name):
        from_gpm = gpm_mean(name)
        return from_gpm if from_gpm is not None else \
            _mean([getattr(s, name) for s in inside if getattr(s, name) is not None])

    readings = []
    for s in samples:
        v = s.violations
        if v is not None and readings and readings[-1][1] is v:
            continue
        when = v.reference_time_us / 1e6 if v is not None and v.reference_time_us else s.time
        readings.append((when, v))
    violations = []
    for name, field in VIOLATION_FIELDS:
        increase = 0.0
        elapsed = []
        for (ta, a), (tb, b) in zip(readings, readings[1:]):
            va = getattr(a, field) if a else None
            vb = getattr(b, field) if b else None
            if va is None or vb is None or tb - ta <= 0 or vb < va:
                continue
            increase += vb - va
            elapsed.append((tb - ta) * 1e9)
        if elapsed:
            # Summed by ``sum`` as the means are (Python 3.12's adds floats compensated).
            violations.append((name, min(1.0, max(0.0, increase / sum(elapsed, 0.0)))))
    scaled = {k: (m * 0.01 if m is not None else None)
              for k, m in ((k, gpm_mean(k)) for k in GPM_FIELDS[:3])}
    return {
        "throttle_violation_ratios": tuple(violations) or None,
        "throttle_reason_ratios": tuple((n, sum(1 for m in masks if m & b) / len(masks))
                                        for n, b in REASON_BITS) if masks else None,
        "memory_used_ratio_avg": _mean(ratios),
        "memory_used_ratio_max": max(ratios) if ratios else None,
        "memory_pressure_ratio": sum(1 for r in ratios if r >= threshold) / len(ratios)
        if ratios else None,
        "sm_active_avg": scaled["sm_active_percent"],
        "sm_occupancy_avg": scaled["sm_occupancy_percent"],
        "dram_active_avg": scaled["dram_active_percent"],
        "pcie_tx_bytes_avg": rate("pcie_tx_bytes_per_second"),
        "pcie_rx_bytes_avg": rate("pcie_rx_bytes_per_second"),
        "nvlink_tx_bytes_avg": gpm_mean("nvlink_tx_bytes_per_second"),
        "nvlink_rx_bytes_avg": gpm_mean("nvlink_rx_bytes_per_second"),
    }


@settings(max_examples=300, deadline=None)
@given(st.lists(sample_parts, max_size=30), st.booleans())
def test_one_pass_equals_signal_by_signal(parts, carry_readings):
    window = SaturationWindow(WINDOW, pressure_threshold=0.9)
    now, previous = 0.0, None
    for gap, v, reasons, used, total, g, tx, rx in parts:
        now += gap
        if carry_readings and v is None and previous is not None:
            v = previous                 # the same reading carried into a later tick
        previous = v
        window.add(SaturationSample(now, v, reasons, used, total, g, tx, rx))
        got = window.saturation(xid_events_in_window=3)
        expected = _reference(list(window.samples()), 0.9)
        assert {k: getattr(got, k) for k in expected} == expected
        assert got.xid_error_count == 3 and got.window_seconds == WINDOW
