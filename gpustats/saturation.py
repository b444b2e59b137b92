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
from operator import attrgetter
from typing import NamedTuple

from gpustats.model.device import DeviceReading, GpmReading, ViolationReading
from gpustats.model.health import Saturation

REASON_BITS = (("sw_power_cap", 0x4), ("hw_slowdown", 0x8), ("sync_boost", 0x10),
               ("sw_thermal", 0x20), ("hw_thermal", 0x40), ("hw_power_brake", 0x80))
VIOLATION_FIELDS = (("power", "power_ns"), ("thermal", "thermal_ns"),
                    ("sync_boost", "sync_boost_ns"), ("board_limit", "board_limit_ns"))
# GPM figures averaged over the window (percentages and bytes per second, as GPM gives them).
GPM_MEANS = ("sm_active_percent", "sm_occupancy_percent", "dram_active_percent",
             "pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second",
             "nvlink_tx_bytes_per_second", "nvlink_rx_bytes_per_second")
_violation_values = attrgetter(*(name for _, name in VIOLATION_FIELDS))
_gpm_values = attrgetter(*GPM_MEANS)


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


class _Row(NamedTuple):
    """A sample and what it gives the signals that need working out, once, when it is added."""

    sample: SaturationSample
    memory_ratio: float | None
    gpm: tuple[float | None, ...] | None              # GPM_MEANS' values
    violations_at: float                              # the reading's reference time, else time
    violation_values: tuple[int | None, ...] | None   # VIOLATION_FIELDS' counters

    @classmethod
    def of(cls, s: SaturationSample) -> "_Row":
        v = s.violations
        return cls(s,
                   s.memory_used_bytes / s.memory_total_bytes
                   if s.memory_used_bytes is not None and s.memory_total_bytes else None,
                   _gpm_values(s.gpm) if s.gpm is not None else None,
                   v.reference_time_us / 1e6 if v is not None and v.reference_time_us
                   else s.time,
                   _violation_values(v) if v is not None else None)


def _violation_readings(rows) -> list[tuple[float, tuple[int | None, ...] | None]]:
    """Distinct violation readings with the time they were taken: the driver's reference time
    when it gave one (counters may be read less often than every tick), else the sample's."""
    out: list[tuple[float, tuple[int | None, ...] | None]] = []
    last = None
    for r in rows:
        v = r.sample.violations
        if v is not None and v is last:
            continue                      # the same reading carried into a later tick
        last = v
        out.append((r.violations_at, r.violation_values))
    return out


def violation_ratios(rows) -> tuple[tuple[str, float], ...] | None:
    readings = _violation_readings(rows)
    # Consecutive readings that both exist and move forward in time, with the time between.
    steps = [(a, b, (tb - ta) * 1e9) for (ta, a), (tb, b) in zip(readings, readings[1:])
             if a is not None and b is not None and not tb - ta <= 0]
    out = []
    for i, (name, _) in enumerate(VIOLATION_FIELDS):
        increase = elapsed = 0.0
        pairs = 0
        for a, b, ns in steps:
            va, vb = a[i], b[i]
            if va is None or vb is None or vb < va:
                continue
            increase += vb - va
            elapsed += ns
            pairs += 1
        if pairs:
            out.append((name, min(1.0, max(0.0, increase / elapsed))))
    return tuple(out) or None


def reason_ratios(masks: list[int]) -> tuple[tuple[str, float], ...] | None:
    """Each reason's share of the samples that gave a clocks-event mask."""
    if not masks:
        return None
    return tuple((name, sum(1 for m in masks if m & bit) / len(masks)) for name, bit in REASON_BITS)


class SaturationWindow:
    """Samples of one GPU over the last ``window_seconds``."""

    def __init__(self, window_seconds: float = 60.0, pressure_threshold: float = 0.9):
        self.window_seconds = window_seconds
        self.pressure_threshold = pressure_threshold
        self._rows: deque[_Row] = deque()

    def samples(self) -> tuple[SaturationSample, ...]:
        """The samples kept: those in the window and the one base before it."""
        return tuple(r.sample for r in self._rows)

    def add(self, sample: SaturationSample) -> None:
        self._rows.append(_Row.of(sample))
        horizon = sample.time - self.window_seconds
        # Keep one sample at or before the horizon as the base of counter deltas.
        while len(self._rows) > 1 and self._rows[1].sample.time <= horizon:
            self._rows.popleft()

    def saturation(self, xid_events_in_window: int | None = None) -> Saturation:
        rows = self._rows
        start = rows[-1].sample.time - self.window_seconds if rows else 0.0
        inside = [r for r in rows if r.sample.time >= start]
        ratios = [r.memory_ratio for r in inside if r.memory_ratio is not None]
        gpm = [r.gpm for r in inside if r.gpm is not None]
        means = {name: _mean([g[i] for g in gpm if g[i] is not None])
                 for i, name in enumerate(GPM_MEANS)}

        def scaled(field: str, scale: float) -> float | None:
            mean = means[field]
            return mean * scale if mean is not None else None

        def rate(gpm_field: str, nvml: list[float | None]) -> float | None:
            """GPM's figure when the window has one, else NVML's PCIe throughput."""
            if means[gpm_field] is not None:
                return means[gpm_field]
            return _mean([value for value in nvml if value is not None])

        return Saturation(
            window_seconds=self.window_seconds,
            throttle_violation_ratios=violation_ratios(rows),
            throttle_reason_ratios=reason_ratios([r.sample.reasons for r in inside
                                                  if r.sample.reasons is not None]),
            memory_used_ratio_avg=_mean(ratios),
            memory_used_ratio_max=max(ratios) if ratios else None,
            memory_pressure_ratio=(sum(1 for r in ratios if r >= self.pressure_threshold)
                                   / len(ratios)) if ratios else None,
            xid_error_count=xid_events_in_window,
            sm_active_avg=scaled("sm_active_percent", 0.01),
            sm_occupancy_avg=scaled("sm_occupancy_percent", 0.01),
            dram_active_avg=scaled("dram_active_percent", 0.01),
            pcie_tx_bytes_avg=rate("pcie_tx_bytes_per_second",
                                   [r.sample.pcie_tx_bytes_per_second for r in inside]),
            pcie_rx_bytes_avg=rate("pcie_rx_bytes_per_second",
                                   [r.sample.pcie_rx_bytes_per_second for r in inside]),
            nvlink_tx_bytes_avg=means["nvlink_tx_bytes_per_second"],
            nvlink_rx_bytes_avg=means["nvlink_rx_bytes_per_second"],
        )
