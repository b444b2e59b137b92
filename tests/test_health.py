"""Pure health transitions and saturation window arithmetic."""

import pytest

from gpustats.health import (
    apply_event, initial_health, kernel_health, unknown_health, xid_message,
)
from gpustats.model.device import GpmReading, ViolationReading
from gpustats.model.health import HealthEvent, KernelHealthReading
from gpustats.saturation import SaturationSample, SaturationWindow

T0 = 1_700_000_000.0


def ready(health):
    """NVMLReady (listed first; the aggregated Ready last)."""
    c = health.conditions[0]
    assert c.type == "NVMLReady" and health.conditions[-1].type == "Ready"
    return c


def test_ignored_xid_counts_but_stays_healthy():
    h = apply_event(initial_health(T0), HealthEvent("GPU-a", "xid", T0 + 1, 13))
    assert h.healthy and h.xid_error_count == 1
    assert ready(h).last_transition_time == T0


def test_critical_xid_turns_unhealthy_and_is_sticky():
    h = apply_event(initial_health(T0), HealthEvent("GPU-a", "xid", T0 + 5, 79))
    c = ready(h)
    assert not h.healthy
    assert (c.status, c.reason, c.last_transition_time, c.source) == \
        ("False", "XidError", T0 + 5, "nvml-events")
    assert "79" in c.message and "fallen off the bus" in c.message
    later = apply_event(h, HealthEvent("GPU-a", "xid", T0 + 9, 31))     # ignored, counted
    later = apply_event(later, HealthEvent("GPU-a", "double_bit_ecc", T0 + 10))
    assert ready(later).reason == "XidError" and ready(later).last_transition_time == T0 + 5
    assert later.xid_error_count == 2 and later.double_bit_ecc_count == 1


@pytest.mark.parametrize("kind, reason", [("double_bit_ecc", "DoubleBitEcc"),
                                          ("gpu_lost", "GpuLost")])
def test_other_unhealthy_reasons(kind, reason):
    h = apply_event(initial_health(T0), HealthEvent("GPU-a", kind, T0 + 2, source="nvml-sweep"))
    assert ready(h).reason == reason and ready(h).source == "nvml-sweep" and not h.healthy


def test_single_bit_ecc_and_unknown():
    h = apply_event(initial_health(T0), HealthEvent("GPU-a", "single_bit_ecc", T0 + 1))
    assert h.healthy and h.single_bit_ecc_count == 1
    u = unknown_health(T0, "NVMLNotLoaded", "library not found")
    assert ready(u).status == "Unknown" and not u.healthy
    assert xid_message(4242) == "XID 4242"
    assert "unknown" in xid_message(999)


def _ratios(pairs):
    return dict(pairs) if pairs is not None else None


def test_scripted_minute_matches_expected_fractions():
    window = SaturationWindow(60.0, pressure_threshold=0.9)
    total = 80 << 30
    for second in range(0, 61, 5):               # one sample every 5 s over a minute
        window.add(SaturationSample(
            time=float(second),
            violations=ViolationReading(power_ns=int(second * 0.2e9), thermal_ns=0,
                                        sync_boost_ns=None, board_limit_ns=None),
            reasons=0x4 | (0x8 if second % 20 == 0 else 0),
            memory_used_bytes=int(total * (0.95 if second < 15 else 0.5)),
            memory_total_bytes=total,
            gpm=GpmReading(sm_active_percent=40.0, dram_active_percent=20.0,
                           pcie_tx_bytes_per_second=1e9)))
    s = window.saturation(xid_events_in_window=2)
    assert _ratios(s.throttle_violation_ratios)["power"] == pytest.approx(0.2, abs=0.01)
    assert _ratios(s.throttle_violation_ratios)["thermal"] == 0.0
    assert "sync_boost" not in _ratios(s.throttle_violation_ratios)    # no source: absent
    reasons = _ratios(s.throttle_reason_ratios)
    assert reasons["sw_power_cap"] == 1.0
    assert reasons["hw_slowdown"] == pytest.approx(4 / 13, abs=0.01)
    assert s.memory_pressure_ratio == pytest.approx(3 / 13, abs=0.01)
    assert s.memory_used_ratio_max == pytest.approx(0.95, abs=0.001)
    assert s.sm_active_avg == pytest.approx(0.4) and s.dram_active_avg == pytest.approx(0.2)
    assert s.pcie_tx_bytes_avg == 1e9 and s.xid_error_count == 2
    assert s.sm_occupancy_avg is None and s.nvlink_tx_bytes_avg is None   # absent, not 0


def test_counter_reset_and_missing_samples():
    window = SaturationWindow(60.0)
    window.add(SaturationSample(0.0, ViolationReading(power_ns=50_000_000_000)))
    window.add(SaturationSample(10.0, ViolationReading(power_ns=1_000_000_000)))   # reset
    window.add(SaturationSample(20.0))                                            # missing
    window.add(SaturationSample(30.0, ViolationReading(power_ns=2_000_000_000)))
    window.add(SaturationSample(40.0, ViolationReading(power_ns=4_000_000_000)))
    ratios = _ratios(window.saturation().throttle_violation_ratios)
    assert ratios["power"] == pytest.approx(0.2)        # only the 30→40 pair is usable


def test_window_shorter_than_one_sample_and_empty():
    window = SaturationWindow(1.0)
    assert window.saturation().memory_used_ratio_avg is None
    window.add(SaturationSample(0.0, ViolationReading(power_ns=0), reasons=0x4,
                                memory_used_bytes=5, memory_total_bytes=10))
    window.add(SaturationSample(5.0, ViolationReading(power_ns=1_000_000_000), reasons=0,
                                memory_used_bytes=10, memory_total_bytes=10))
    s = window.saturation()
    assert _ratios(s.throttle_violation_ratios)["power"] == pytest.approx(0.2)   # base kept
    assert s.memory_used_ratio_avg == 1.0        # only the sample inside the window
    assert _ratios(s.throttle_reason_ratios)["sw_power_cap"] == 0.0


def test_old_samples_leave_the_window():
    window = SaturationWindow(10.0)
    for t in range(100):
        window.add(SaturationSample(float(t), memory_used_bytes=t, memory_total_bytes=100))
    assert window.saturation().memory_used_ratio_max == pytest.approx(0.99)
    assert len(window.samples()) <= 12


# --- AMD and Intel: conditions from the kernel's files ----------------------------------------

def _types(health):
    return {c.type: (c.status, c.reason) for c in health.conditions}


def test_an_amd_gpu_without_errors_is_ready_from_its_ras_files():
    clean = KernelHealthReading(ras_uncorrectable=0, ras_correctable=3, retired_pages=2,
                                pending_pages=0, failed_pages=0, coredump=False)
    health = kernel_health(None, clean, 100.0)
    assert health is not None and health.healthy
    assert _types(health) == {"RasHealth": ("True", "RasHealth"),
                              "RetiredPagesHealth": ("True", "RetiredPagesHealth"),
                              "ResetHealth": ("True", "ResetHealth"), "Ready": ("True", "Ready")}
    assert health.condition("RasHealth").message == "no uncorrectable RAS error (3 corrected)"
    assert kernel_health(health, clean, 200.0) is health          # nothing changed: the same


@pytest.mark.parametrize("reading, condition, reason", [
    (dict(ras_uncorrectable=1, ras_correctable=0), "RasHealth", "UncorrectableRasErrors"),
    (dict(retired_pages=0, pending_pages=2, failed_pages=0), "RetiredPagesHealth",
     "RetiredPagePending"),
    (dict(retired_pages=9, pending_pages=1, failed_pages=1), "RetiredPagesHealth",
     "RetiredPageFailure"),
    (dict(hang_captured=True, coredump=False), "ResetHealth", "GpuHang"),
    (dict(coredump=True), "ResetHealth", "DeviceCoredump"),
    (dict(coredump=False, off_bus=True), "PciBusHealth", "GpuOffBus"),
])
def test_kernel_files_make_a_gpu_unhealthy(reading, condition, reason):
    health = kernel_health(None, KernelHealthReading(**reading), 100.0)
    assert health is not None and not health.healthy
    assert _types(health)[condition] == ("False", reason)
    assert _types(health)["Ready"] == ("False", reason)
    assert health.condition(condition).source == "kernel-sysfs"


def test_transition_times_are_kept_and_nothing_known_is_unknown():
    first = kernel_health(None, KernelHealthReading(coredump=False), 100.0)
    later = kernel_health(first, KernelHealthReading(coredump=True), 200.0)
    healed = kernel_health(later, KernelHealthReading(coredump=False), 300.0)
    assert [h.condition("ResetHealth").last_transition_time for h in (first, later, healed)] == \
        [100.0, 200.0, 300.0]
    assert kernel_health(None, KernelHealthReading(), 100.0) is None
