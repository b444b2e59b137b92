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
    readings = [(when, _violation_values(v) if v is not None else None)
                for when, v in _violation_readings(samples)]
    increase, elapsed = [0.0] * len(VIOLATION_FIELDS), [0.0] * len(VIOLATION_FIELDS)
    pairs = [0] * len(VIOLATION_FIELDS)
    for (ta, a), (tb, b) in zip(readings, readings[1:]):
        dt = tb - ta
        if a is None or b is None or dt <= 0:
            continue
        for i, (va, vb) in enumerate(zip(a, b)):
            if va is None or vb is None or vb < va:
                continue
            increase[i] += vb - va
            elapsed[i] += dt * 1e9
            pairs[i] += 1
    out = tuple((name, min(1.0, max(0.0, increase[i] / elapsed[i])))
                for i, (name, _) in enumerate(VIOLATION_FIELDS) if pairs[i])
    return out or None


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
        self._samples: deque[SaturationSample] = deque()

    def add(self, sample: SaturationSample) -> None:
        self._samples.append(sample)
        horizon = sample.time - self.window_seconds
        # Keep one sample at or before the horizon as the base of counter deltas.
        while len(self._samples) > 1 and self._samples[1].time <= horizon:
            self._samples.popleft()

    def saturation(self, xid_events_in_window: int | None = None) -> Saturation:
        samples = list(self._samples)
        start = samples[-1].time - self.window_seconds if samples else 0.0
        # One pass over the samples inside the window, each signal into its own column.
        ratios: list[float] = []
        masks: list[int] = []
        gpm: list[list[float]] = [[] for _ in GPM_MEANS]
        pcie_tx: list[float] = []
        pcie_rx: list[float] = []
        for s in samples:
            if s.time < start:
                continue
            if s.memory_used_bytes is not None and s.memory_total_bytes:
                ratios.append(s.memory_used_bytes / s.memory_total_bytes)
            if s.reasons is not None:
                masks.append(s.reasons)
            if s.gpm is not None:
                for column, value in zip(gpm, _gpm_values(s.gpm)):
                    if value is not None:
                        column.append(value)
            if s.pcie_tx_bytes_per_second is not None:
                pcie_tx.append(s.pcie_tx_bytes_per_second)
            if s.pcie_rx_bytes_per_second is not None:
                pcie_rx.append(s.pcie_rx_bytes_per_second)
        means = dict(zip(GPM_MEANS, map(_mean, gpm)))

        def scaled(field: str, scale: float) -> float | None:
            mean = means[field]
            return mean * scale if mean is not None else None

        def rate(gpm_field: str, nvml: list[float]) -> float | None:
            """GPM's figure when the window has one, else NVML's PCIe throughput."""
            return means[gpm_field] if means[gpm_field] is not None else _mean(nvml)

        return Saturation(
            window_seconds=self.window_seconds,
            throttle_violation_ratios=violation_ratios(samples),
            throttle_reason_ratios=reason_ratios(masks),
            memory_used_ratio_avg=_mean(ratios),
            memory_used_ratio_max=max(ratios) if ratios else None,
            memory_pressure_ratio=(sum(1 for r in ratios if r >= self.pressure_threshold)
                                   / len(ratios)) if ratios else None,
            xid_error_count=xid_events_in_window,
            sm_active_avg=scaled("sm_active_percent", 0.01),
            sm_occupancy_avg=scaled("sm_occupancy_percent", 0.01),
            dram_active_avg=scaled("dram_active_percent", 0.01),
            pcie_tx_bytes_avg=rate("pcie_tx_bytes_per_second", pcie_tx),
            pcie_rx_bytes_avg=rate("pcie_rx_bytes_per_second", pcie_rx),
            nvlink_tx_bytes_avg=means["nvlink_tx_bytes_per_second"],
            nvlink_rx_bytes_avg=means["nvlink_rx_bytes_per_second"],
        )
