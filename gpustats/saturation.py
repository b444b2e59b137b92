"""Saturation signals over a sliding window (pure; the caller passes sample times).

Ratios are fractions of the window in [0, 1]; throughputs are bytes per second. A signal
whose source gave nothing in the window is ``None`` (absent), never 0:

- ``throttleViolationRatios``: Σ increase of each cumulative violation counter (ns) over
  Σ elapsed ns, across consecutive sample pairs where both readings exist; a decrease (driver
  reload, wrap) drops that pair.
- ``throttleReasonRatios``: fraction of samples with each saturation-relevant bit set
  (idle and configured-clock bits excluded), as OpenCost does.
- ``memoryUsedRatioAvg/Max`` and ``memoryPressureRatio`` (share of samples at or above the
  threshold), ``smActiveAvg``, ``smOccupancyAvg``, ``dramActiveAvg`` (GPM, as ratios),
  ``pcie*/nvlink*BytesAvg`` (GPM, else NVML's PCIe throughput), ``xidErrorCount`` (every XID
  event in the window).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from gpustats.model.device import DeviceReading, GpmReading, ViolationReading
from gpustats.model.health import Saturation

REASON_BITS = (("sw_power_cap", 0x4), ("hw_slowdown", 0x8), ("sync_boost", 0x10),
               ("sw_thermal", 0x20), ("hw_thermal", 0x40), ("hw_power_brake", 0x80))
VIOLATION_FIELDS = (("power", "power_ns"), ("thermal", "thermal_ns"),
                    ("sync_boost", "sync_boost_ns"), ("board_limit", "board_limit_ns"))


@dataclass(frozen=True)
class SaturationSample:
    time: float                                    # monotonic seconds
    violations: ViolationReading | None = None
    reasons: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    gpm: GpmReading | None = None
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None

    @classmethod
    def of(cls, reading: DeviceReading) -> "SaturationSample":
        return cls(time=reading.monotonic_seconds, violations=reading.violations,
                   reasons=reading.clocks_event_reasons,
                   memory_used_bytes=reading.memory_used_bytes,
                   memory_total_bytes=reading.identity.memory_total_bytes, gpm=reading.gpm,
                   pcie_tx_bytes_per_second=reading.pcie_tx_bytes_per_second,
                   pcie_rx_bytes_per_second=reading.pcie_rx_bytes_per_second)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _violation_readings(samples: list[SaturationSample]) -> list[tuple[float, ViolationReading]]:
    """Distinct violation readings with the time they were taken: the driver's reference time
    when it gave one (counters may be read less often than every tick), else the sample's."""
    out: list[tuple[float, ViolationReading]] = []
    for s in samples:
        v = s.violations
        if v is None:
            out.append((s.time, v))
            continue
        if out and out[-1][1] is v:
            continue                      # the same reading carried into a later tick
        when = v.reference_time_us / 1e6 if v.reference_time_us else s.time
        out.append((when, v))
    return out


def violation_ratios(samples: list[SaturationSample]) -> tuple[tuple[str, float], ...] | None:
    readings = _violation_readings(samples)
    out = []
    for name, field in VIOLATION_FIELDS:
        increase = elapsed = 0.0
        pairs = 0
        for (ta, a), (tb, b) in zip(readings, readings[1:]):
            va = getattr(a, field) if a else None
            vb = getattr(b, field) if b else None
            dt = tb - ta
            if va is None or vb is None or dt <= 0 or vb < va:
                continue
            increase += vb - va
            elapsed += dt * 1e9
            pairs += 1
        if pairs:
            out.append((name, min(1.0, max(0.0, increase / elapsed))))
    return tuple(out) or None


def reason_ratios(samples: list[SaturationSample]) -> tuple[tuple[str, float], ...] | None:
    masks = [s.reasons for s in samples if s.reasons is not None]
    if not masks:
        return None
    return tuple((name, sum(1 for m in masks if m & bit) / len(masks)) for name, bit in REASON_BITS)


class SaturationWindow:
    """Samples of one GPU over the last ``window_seconds``."""

    def __init__(self, window_seconds: float = 60.0, pressure_threshold: float = 0.9):
        self.window_seconds = window_seconds
        self.pressure_threshold = pressure_threshold
        self._samples: deque[SaturationSample] = deque()

    def add(self, sample: SaturationSample) -> None:
        self._samples.append(sample)
        horizon = sample.time - self.window_seconds
        # Keep one sample at or before the horizon as the base of counter deltas.
        while len(self._samples) > 1 and self._samples[1].time <= horizon:
            self._samples.popleft()

    def saturation(self, xid_events_in_window: int | None = None) -> Saturation:
        samples = list(self._samples)
        inside = [s for s in samples if s.time >= samples[-1].time - self.window_seconds] \
            if samples else []
        ratios = [s.memory_used_bytes / s.memory_total_bytes for s in inside
                  if s.memory_used_bytes is not None and s.memory_total_bytes]
        gpm = [s.gpm for s in inside if s.gpm is not None]

        def gpm_mean(field: str, scale: float = 1.0) -> float | None:
            values = [getattr(g, field) for g in gpm if getattr(g, field) is not None]
            mean = _mean(values)
            return mean * scale if mean is not None else None

        def rate(gpm_field: str, nvml_field: str) -> float | None:
            from_gpm = gpm_mean(gpm_field)
            if from_gpm is not None:
                return from_gpm
            return _mean([getattr(s, nvml_field) for s in inside
                          if getattr(s, nvml_field) is not None])

        return Saturation(
            window_seconds=self.window_seconds,
            throttle_violation_ratios=violation_ratios(samples),
            throttle_reason_ratios=reason_ratios(inside),
            memory_used_ratio_avg=_mean(ratios),
            memory_used_ratio_max=max(ratios) if ratios else None,
            memory_pressure_ratio=(sum(1 for r in ratios if r >= self.pressure_threshold)
                                   / len(ratios)) if ratios else None,
            xid_error_count=xid_events_in_window,
            sm_active_avg=gpm_mean("sm_active_percent", 0.01),
            sm_occupancy_avg=gpm_mean("sm_occupancy_percent", 0.01),
            dram_active_avg=gpm_mean("dram_active_percent", 0.01),
            pcie_tx_bytes_avg=rate("pcie_tx_bytes_per_second", "pcie_tx_bytes_per_second"),
            pcie_rx_bytes_avg=rate("pcie_rx_bytes_per_second", "pcie_rx_bytes_per_second"),
            nvlink_tx_bytes_avg=gpm_mean("nvlink_tx_bytes_per_second"),
            nvlink_rx_bytes_avg=gpm_mean("nvlink_rx_bytes_per_second"),
        )
