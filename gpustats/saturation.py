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
  event in the window), ``dramActiveMax`` (GPM, the window's largest).

Beside the ratios, counters of what they are built from, accumulated over every sample since
the window was made (the daemon's start; not kept across restarts), so a window of any length
is an ``increase()`` apart: seconds throttled per violation policy (the increases of the
driver's cumulative counters; one that goes down, as on a driver reload, restarted from 0 and
counts its new value, at most the time between the readings), seconds per clocks-event reason
and under memory pressure (each sample's time since the previous one, where the bit is set or
the ratio at or above the threshold), samples taken and the seconds between them. A gap (the GPU
lost) is counted in none.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from operator import attrgetter
from typing import Any, Callable, Iterable, NamedTuple

from gpustats.model.device import DeviceReading, GpmReading, ViolationReading
from gpustats.model.health import Saturation, SaturationCounters
from gpustats.model.record import record

REASON_BITS = (("sw_power_cap", 0x4), ("hw_slowdown", 0x8), ("sync_boost", 0x10),
               ("sw_thermal", 0x20), ("hw_thermal", 0x40), ("hw_power_brake", 0x80))
VIOLATION_FIELDS = (("power", "power_ns"), ("thermal", "thermal_ns"),
                    ("sync_boost", "sync_boost_ns"), ("board_limit", "board_limit_ns"))
# GPM figures averaged over the window (percentages and bytes per second, as GPM gives them).
GPM_MEANS = ("sm_active_percent", "sm_occupancy_percent", "dram_active_percent",
             "pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second",
             "nvlink_tx_bytes_per_second", "nvlink_rx_bytes_per_second")
_DRAM = GPM_MEANS.index("dram_active_percent")
_violation_values = attrgetter(*(name for _, name in VIOLATION_FIELDS))
_gpm_values = attrgetter(*GPM_MEANS)


@record
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
    def of(cls, reading: DeviceReading) -> SaturationSample:
        return cls(time=reading.monotonic_seconds, violations=reading.violations,
                   reasons=reading.clocks_event_reasons,
                   memory_used_bytes=reading.memory_used_bytes,
                   memory_total_bytes=reading.identity.memory_total_bytes, gpm=reading.gpm,
                   pcie_tx_bytes_per_second=reading.pcie_tx_bytes_per_second,
                   pcie_rx_bytes_per_second=reading.pcie_rx_bytes_per_second)


# One step between two violation readings: per VIOLATION_FIELDS entry, (increase, elapsed ns),
# or None where that counter is missing in either reading or went down.
Step = tuple[tuple[int, float] | None, ...]


class _Row(NamedTuple):
    """A sample and what it gives the signals that need working out, once, when it is added."""

    sample: SaturationSample
    memory_ratio: float | None
    gpm: tuple[float | None, ...] | None              # GPM_MEANS' values
    violations_at: float                              # the reading's reference time, else time
    violation_values: tuple[int | None, ...] | None   # VIOLATION_FIELDS' counters
    # False when the sample carries the previous sample's violation reading (the same object):
    # no new reading, no step.
    new_reading: bool = True
    step: Step | None = None          # from the newest earlier reading, when this one is new

    @classmethod
    def of(cls, s: SaturationSample, last: _Row | None = None, repeated: bool = False
           ) -> _Row:
        """The row of ``s``; its step from ``last`` (the newest earlier row with a new
        reading), unless ``repeated`` (``s`` carries the previous sample's reading)."""
        v = s.violations
        at = v.reference_time_us / 1e6 if v is not None and v.reference_time_us else s.time
        values = _violation_values(v) if v is not None else None
        step = None if repeated or last is None else _step_between(
            last.violations_at, last.violation_values, at, values)
        return cls(s,
                   s.memory_used_bytes / s.memory_total_bytes
                   if s.memory_used_bytes is not None and s.memory_total_bytes else None,
                   _gpm_values(s.gpm) if s.gpm is not None else None,
                   at, values, not repeated, step)


# The window's values per signal are kept as samples come and go: each signal keeps a column
# of the values its samples gave, appended when a sample arrives and taken from the front when
# it leaves, so a tick's figures are C-level sums over columns rather than a walk over every
# sample per signal. ``sum`` adds in the walk's order, so every figure is the float such a walk
# gives. The oldest sample kept may be just outside the window (the base of counter deltas):
# it is in no column, and the figures add it where it is inside.


def _drop_front(column: deque[Any], value: object) -> None:
    if value is not None:
        column.popleft()


class Columns:
    """Per signal, the values of every row but the oldest (rows with ``memory_ratio``,
    ``gpm``, ``sample``, ``new_reading`` and ``step`` as ``saturation._Row`` has them)."""

    def __init__(self, gpm_fields: int, violation_fields: int, reason_bits: Iterable[int],
                 pressure_threshold: float):
        self._bits = tuple(reason_bits)
        self._bits_of: dict[int, tuple[int, ...]] = {}
        self._threshold = pressure_threshold
        self.memory: deque[float] = deque()
        self.pressured = 0                           # memory ratios at or above the threshold
        self.masks = 0                               # rows that gave a clocks-event mask
        self.bit_counts = [0] * len(self._bits)
        self.gpm: list[deque[float]] = [deque() for _ in range(gpm_fields)]
        self.pcie: tuple[deque[float], deque[float]] = (deque(), deque())     # NVML's tx, rx
        # Cached steps of rows with a new violation reading: per field, increase and elapsed ns.
        self.increases: list[deque[int]] = [deque() for _ in range(violation_fields)]
        # Σ of each increases column, kept as rows come and go: the counters are integers
        # (nanoseconds), so the running total is the exact sum a walk gives.
        self.increase_totals: list[int] = [0] * violation_fields
        self.elapsed: list[deque[float]] = [deque() for _ in range(violation_fields)]

    def push(self, row: _Row) -> None:
        """``row`` joins the columns (it is not the oldest row kept)."""
        self._count(row, 1)
        if row.memory_ratio is not None:
            self.memory.append(row.memory_ratio)
        if row.gpm is not None:
            for column, value in zip(self.gpm, row.gpm):
                if value is not None:
                    column.append(value)
        for column, value in zip(self.pcie, _pcie(row)):
            if value is not None:
                column.append(value)
        if row.new_reading and row.step is not None:
            totals = self.increase_totals
            for i, (increases, elapsed, counted) in enumerate(
                    zip(self.increases, self.elapsed, row.step)):
                if counted is not None:
                    increases.append(counted[0])
                    elapsed.append(counted[1])
                    totals[i] += counted[0]

    def pop(self, row: _Row) -> None:
        """``row``, the oldest of the columns' rows, leaves them (it became the oldest kept)."""
        self._count(row, -1)
        _drop_front(self.memory, row.memory_ratio)
        if row.gpm is not None:
            for column, value in zip(self.gpm, row.gpm):
                _drop_front(column, value)
        for column, value in zip(self.pcie, _pcie(row)):
            _drop_front(column, value)
        if row.new_reading and row.step is not None:
            totals = self.increase_totals
            for i, (increases, elapsed, counted) in enumerate(
                    zip(self.increases, self.elapsed, row.step)):
                if counted is not None:
                    totals[i] -= increases.popleft()
                    elapsed.popleft()

    def _count(self, row: _Row, sign: int) -> None:
        if row.memory_ratio is not None and row.memory_ratio >= self._threshold:
            self.pressured += sign
        mask = row.sample.reasons
        if mask is not None:
            self.masks += sign
            counts = self.bit_counts
            for i in self._set_bits(mask):
                counts[i] += sign

    def _set_bits(self, mask: int) -> tuple[int, ...]:
        """Which of the reason bits ``mask`` sets (their positions), worked out once per mask:
        a GPU's mask rarely changes from one sample to the next."""
        found = self._bits_of.get(mask)
        if found is None:
            if len(self._bits_of) >= 256:
                self._bits_of.clear()
            found = self._bits_of[mask] = tuple(
                i for i, bit in enumerate(self._bits) if mask & bit)
        return found

    def violation_sums(self, skip_first: tuple[bool, ...],
                       first: Step | None) -> list[tuple[int, float, int] | None]:
        """Per violation field: (Σ increase, Σ elapsed ns, pairs), or None without a pair.
        ``first`` is the window's first step, worked out by the caller, which replaces the
        cached one of its row (``skip_first[i]``: that row's cached step is in column i)."""
        out: list[tuple[int, float, int] | None] = []
        for i, (increases, elapsed) in enumerate(zip(self.increases, self.elapsed)):
            skip = 1 if skip_first[i] else 0
            counted = first[i] if first is not None else None
            pairs = len(increases) - skip + (counted is not None)
            if not pairs:
                out.append(None)
                continue
            start_increase, start_ns = counted if counted is not None else (0, 0.0)
            increase = self.increase_totals[i] - (increases[0] if skip else 0)
            out.append((start_increase + increase,
                        sum(islice(elapsed, skip, None), start_ns), pairs))
        return out


class Counters:
    """The monotonic counters beside the window's ratios (module docstring), fed every row."""

    def __init__(self, pressure_threshold: float, set_bits: Callable[[int], tuple[int, ...]]):
        self._threshold = pressure_threshold
        self._set_bits = set_bits                 # mask -> positions of REASON_BITS set
        self.samples = 0
        self.sampled_seconds = 0.0
        self._last_time: float | None = None
        self._reason_seconds: list[float] | None = None
        self._pressure_seconds: float | None = None
        self._violation_ns: list[int | None] = [None] * len(VIOLATION_FIELDS)
        # Per violation field, the last reading's (time, value).
        self._violation_last: list[tuple[float, int] | None] = [None] * len(VIOLATION_FIELDS)

    def gap(self) -> None:
        """No sample for a while (the GPU lost): the next one's time since this is not counted."""
        self._last_time = None

    def add(self, row: _Row) -> None:
        s = row.sample
        self.samples += 1
        last, self._last_time = self._last_time, s.time
        length = s.time - last if last is not None and s.time > last else 0.0
        self.sampled_seconds += length
        if s.reasons is not None:
            seconds = self._reason_seconds
            if seconds is None:
                seconds = self._reason_seconds = [0.0] * len(REASON_BITS)
            if length:
                for i in self._set_bits(s.reasons):
                    seconds[i] += length
        if row.memory_ratio is not None:
            self._pressure_seconds = (self._pressure_seconds or 0.0) + (
                length if row.memory_ratio >= self._threshold else 0.0)
        if row.new_reading and row.violation_values is not None:
            self._add_violations(row.violations_at, row.violation_values)

    def _add_violations(self, at: float, values: tuple[int | None, ...]) -> None:
        totals, lasts = self._violation_ns, self._violation_last
        for i, value in enumerate(values):
            if value is None:
                continue
            total = totals[i] or 0
            last = lasts[i]
            if last is not None:
                before_at, before = last
                if value >= before:
                    total += value - before
                else:
                    # Went down (driver reload): it restarted from 0, within the time between.
                    total += min(value, max(0, int((at - before_at) * 1e9)))
            totals[i] = total
            lasts[i] = (at, value)

    def counters(self) -> SaturationCounters:
        violations = tuple((name, ns / 1e9) for (name, _), ns in zip(VIOLATION_FIELDS,
                                                                     self._violation_ns)
                           if ns is not None)
        reasons = self._reason_seconds
        return SaturationCounters(
            samples=self.samples, sampled_seconds=self.sampled_seconds,
            throttle_violation_seconds=violations or None,
            throttle_reason_seconds=tuple((name, seconds) for (name, _), seconds
                                          in zip(REASON_BITS, reasons))
            if reasons is not None else None,
            memory_pressure_seconds=self._pressure_seconds)


def _pcie(row: _Row) -> tuple[float | None, float | None]:
    s = row.sample
    return s.pcie_tx_bytes_per_second, s.pcie_rx_bytes_per_second


def _step(a: _Row, b: _Row) -> Step | None:
    """The step from reading ``a`` to reading ``b``; None unless both exist and time moved
    forward between them."""
    return _step_between(a.violations_at, a.violation_values, b.violations_at,
                         b.violation_values)


def _step_between(ta: float, a: tuple[int | None, ...] | None, tb: float,
                  b: tuple[int | None, ...] | None) -> Step | None:
    if a is None or b is None or tb - ta <= 0:
        return None
    ns = (tb - ta) * 1e9
    return tuple((vb - va, ns) if va is not None and vb is not None and vb >= va else None
                 for va, vb in zip(a, b))


def _first_step(rows: deque[_Row]) -> tuple[Step | None, _Row | None]:
    """The window's first step between distinct violation readings, worked out from the
    oldest row kept (the reading its row's cached step was measured from may have left the
    window since), and that row: the first newer row with a new reading."""
    first = rows[0]
    for r in islice(rows, 1, None):
        if r.new_reading:
            return _step(first, r), r
    return None, None


def _violation_ratios(rows: deque[_Row], columns: Columns) -> tuple[tuple[str, float], ...] | None:
    """Σ increase over Σ elapsed per violation counter, over consecutive distinct readings (a
    reading is taken at the driver's reference time when it gave one, else at the sample's:
    counters may be read less often than every tick)."""
    step, row = _first_step(rows) if rows else (None, None)
    cached = row.step if row is not None and row.step is not None else (None,) * len(
        VIOLATION_FIELDS)
    sums = columns.violation_sums(tuple(c is not None for c in cached), step)
    return tuple((name, min(1.0, max(0.0, found[0] / found[1])))
                 for (name, _), found in zip(VIOLATION_FIELDS, sums)
                 if found is not None) or None


def _reason_ratios(columns: Columns, oldest_mask: int | None
                   ) -> tuple[tuple[str, float], ...] | None:
    """Each reason's share of the samples in the window that gave a clocks-event mask."""
    masks = columns.masks + (oldest_mask is not None)
    if not masks:
        return None
    return tuple((name, (count + (oldest_mask is not None and bool(oldest_mask & bit))) / masks)
                 for (name, bit), count in zip(REASON_BITS, columns.bit_counts))


def _column_max(column: deque[float], oldest: float | None) -> float | None:
    """The largest of a column and the oldest row's value; None when neither has one."""
    if oldest is None:
        return max(column, default=None)
    return max(max(column, default=oldest), oldest)


def _percent_ratio(percent: float | None) -> float | None:
    return percent * 0.01 if percent is not None else None


def _column_mean(column: deque[float], oldest: float | None) -> float | None:
    """The mean of a column and the oldest row's value (first, as a walk adds them)."""
    count = len(column) + (oldest is not None)
    if not count:
        return None
    return (sum(column, oldest) if oldest is not None else sum(column)) / count


class SaturationWindow:
    """Samples of one GPU over the last ``window_seconds``."""

    def __init__(self, window_seconds: float = 60.0, pressure_threshold: float = 0.9):
        self.window_seconds = window_seconds
        self.pressure_threshold = pressure_threshold
        self._rows: deque[_Row] = deque()
        self._last_reading: _Row | None = None     # the newest row with a new reading
        self._columns = Columns(len(GPM_MEANS), len(VIOLATION_FIELDS),
                                (bit for _, bit in REASON_BITS), pressure_threshold)
        self._counters = Counters(pressure_threshold, self._columns._set_bits)

    def samples(self) -> tuple[SaturationSample, ...]:
        """The samples kept: those in the window and the one base before it."""
        return tuple(r.sample for r in self._rows)

    def add(self, sample: SaturationSample) -> None:
        rows = self._rows
        violations = sample.violations
        # The previous sample's reading carried over (the same object): no new reading.
        repeated = violations is not None and bool(rows) \
            and violations is rows[-1].sample.violations
        row = _Row.of(sample, self._last_reading, repeated)
        if not repeated:
            self._last_reading = row
        self._counters.add(row)
        if rows:
            self._columns.push(row)
        rows.append(row)
        horizon = sample.time - self.window_seconds
        # Keep one sample at or before the horizon as the base of counter deltas.
        while len(rows) > 1 and rows[1].sample.time <= horizon:
            rows.popleft()
            self._columns.pop(rows[0])

    def gap(self) -> None:
        """No sample this tick (the GPU lost): the counters skip the time until the next."""
        self._counters.gap()

    def saturation(self, xid_events_in_window: int | None = None) -> Saturation:
        rows, columns = self._rows, self._columns
        # Every row but the oldest is in the window; the oldest is when it is not before it.
        oldest = rows[0] if rows and rows[0].sample.time >= rows[-1].sample.time \
            - self.window_seconds else None
        oldest_ratio = oldest.memory_ratio if oldest is not None else None
        ratios = len(columns.memory) + (oldest_ratio is not None)
        oldest_gpm = oldest.gpm if oldest is not None and oldest.gpm is not None \
            else (None,) * len(GPM_MEANS)
        means = {name: _column_mean(column, value)
                 for name, column, value in zip(GPM_MEANS, columns.gpm, oldest_gpm)}

        def scaled(field: str, scale: float) -> float | None:
            mean = means[field]
            return mean * scale if mean is not None else None

        def rate(gpm_field: str, nvml: deque[float], oldest_nvml: float | None) -> float | None:
            """GPM's figure when the window has one, else NVML's PCIe throughput."""
            if means[gpm_field] is not None:
                return means[gpm_field]
            return _column_mean(nvml, oldest_nvml)

        oldest_sample = oldest.sample if oldest is not None else SaturationSample(0.0)
        pressured = columns.pressured + (
            oldest is not None and oldest.memory_ratio is not None
            and oldest.memory_ratio >= self.pressure_threshold)
        return Saturation(
            window_seconds=self.window_seconds,
            throttle_violation_ratios=_violation_ratios(rows, columns),
            throttle_reason_ratios=_reason_ratios(columns, oldest_sample.reasons),
            memory_used_ratio_avg=_column_mean(columns.memory, oldest_ratio),
            memory_used_ratio_max=_column_max(columns.memory, oldest_ratio),
            memory_pressure_ratio=pressured / ratios if ratios else None,
            xid_error_count=xid_events_in_window,
            sm_active_avg=scaled("sm_active_percent", 0.01),
            sm_occupancy_avg=scaled("sm_occupancy_percent", 0.01),
            dram_active_avg=scaled("dram_active_percent", 0.01),
            dram_active_max=_percent_ratio(_column_max(columns.gpm[_DRAM], oldest_gpm[_DRAM])),
            pcie_tx_bytes_avg=rate("pcie_tx_bytes_per_second", columns.pcie[0],
                                   oldest_sample.pcie_tx_bytes_per_second),
            pcie_rx_bytes_avg=rate("pcie_rx_bytes_per_second", columns.pcie[1],
                                   oldest_sample.pcie_rx_bytes_per_second),
            nvlink_tx_bytes_avg=means["nvlink_tx_bytes_per_second"],
            nvlink_rx_bytes_avg=means["nvlink_rx_bytes_per_second"],
            counters=self._counters.counters(),
        )
