"""Price and carbon intensity per hour of use: ``--price-per-kwh`` and ``--carbon-intensity``.

A price is a flat ``<amount> <currency>`` or a YAML file of time-of-use rates; a carbon
intensity a constant (gCO2e per kWh) or a CSV file of hourly values. Both answer per hour
(epoch seconds of the hour's start, UTC), so a row's cost and CO2e follow the hour it was used
in, never a period's average. Parsing is pure apart from the one bounded read of a file.
"""

from __future__ import annotations

import bisect
import math
import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpustats.documents import brief, load_yaml, read_parsed

MAX_TARIFF_BYTES = 64 << 10
MAX_INTENSITY_BYTES = 8 << 20           # ten years of hourly values and then some
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_CURRENCY = re.compile(r"[A-Z]{3}")
_HOUR = re.compile(r"([01][0-9]|2[0-4]):00")


def _number(value: Any, what: str, *, low: float = 0.0) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{what}: expected a number, got {brief(value)}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected a number, got {brief(value)}") from None
    if not math.isfinite(number) or number < low:
        raise ValueError(f"{what}: expected a finite number >= {low:g}, got {brief(value)}")
    return number


@dataclass(frozen=True)
class Price:
    """Money per kWh in one currency: one rate for every hour, or one per weekday and hour
    of the day (UTC)."""

    currency: str
    flat: float | None = None
    # 7 × 24 rates, Monday 00:00 first (a time-of-use tariff); empty with ``flat``
    weekly: tuple[float, ...] = ()

    def per_kwh(self, hour_start: float) -> float:
        """The price of a kWh used in the hour starting at ``hour_start`` (epoch seconds)."""
        if self.flat is not None:
            return self.flat
        when = time.gmtime(hour_start)
        return self.weekly[when.tm_wday * 24 + when.tm_hour]


def parse_price(text: str) -> Price | None:
    """``0.25 EUR`` (a flat price) or the path of a tariff file; empty: none."""
    text = text.strip()
    if not text:
        return None
    if text.startswith("/"):
        return read_tariff(text)
    amount, _, currency = text.partition(" ")
    currency = currency.strip()
    if not _CURRENCY.fullmatch(currency):
        raise ValueError(f"expected '<price> <ISO 4217 currency>' (0.25 EUR) or an absolute "
                         f"tariff file path, got {brief(text)}")
    return Price(currency, flat=_number(amount, "price"))


def read_tariff(path: str) -> Price:
    return read_parsed(path, MAX_TARIFF_BYTES, lambda content: parse_tariff(load_yaml(content)),
                       f"tariff file {path}")


def _hour(value: Any, what: str) -> int:
    text = str(value).strip()
    if not _HOUR.fullmatch(text):
        raise ValueError(f"{what}: expected a whole hour HH:00 (00:00 to 24:00), got "
                         f"{brief(value)}")
    return int(text[:2])


def _rate_hours(rate: dict[str, Any]) -> tuple[list[int], int, int]:
    days = rate.get("days", list(DAYS))
    if isinstance(days, str):
        days = [d.strip() for d in days.split(",")]
    if not isinstance(days, list) or not days or any(d not in DAYS for d in days):
        raise ValueError(f"days: expected a list of {', '.join(DAYS)}, got {brief(days)}")
    return [DAYS.index(d) for d in days], _hour(rate.get("from", "00:00"), "from"), \
        _hour(rate.get("to", "24:00"), "to")


def parse_tariff(document: Any) -> Price:
    """A tariff document: ``currency`` and ``rates``, each a ``price`` with ``from`` and
    ``to`` (whole hours, UTC; ``to`` before ``from`` wraps past midnight) and ``days``
    (default every day). Every hour of the week must have exactly one rate."""
    if not isinstance(document, dict) or set(document) - {"currency", "rates"}:
        raise ValueError("expected a mapping with currency and rates")
    currency = str(document.get("currency", "")).strip()
    if not _CURRENCY.fullmatch(currency):
        raise ValueError(f"currency: expected an ISO 4217 code (EUR), got {brief(currency)}")
    rates = document.get("rates")
    if not isinstance(rates, list) or not rates:
        raise ValueError("rates: expected a list of {price, from, to, days}")
    weekly: list[float | None] = [None] * (7 * 24)
    for n, rate in enumerate(rates, 1):
        if not isinstance(rate, dict) or set(rate) - {"price", "from", "to", "days"}:
            raise ValueError(f"rate {n}: expected a mapping of price, from, to, days")
        price = _number(rate.get("price"), f"rate {n}: price")
        days, start, end = _rate_hours(rate)
        hours = range(start, end) if start < end else [*range(start, 24), *range(0, end)]
        for day in days:
            for hour in hours:
                slot = day * 24 + hour
                if weekly[slot] is not None:
                    raise ValueError(f"rate {n}: {DAYS[day]} {hour:02d}:00 already has a rate")
                weekly[slot] = price
    missing = [i for i, p in enumerate(weekly) if p is None]
    if missing:
        first = missing[0]
        raise ValueError(f"no rate for {DAYS[first // 24]} {first % 24:02d}:00 (every hour of "
                         f"the week needs one; {len(missing)} have none)")
    return Price(currency, weekly=tuple(p for p in weekly if p is not None))


@dataclass(frozen=True)
class CarbonIntensity:
    """gCO2e per kWh: a constant, or hourly values (each holds until the next one)."""

    constant: float | None = None
    hours: tuple[float, ...] = ()        # hour starts (epoch seconds), ascending
    values: tuple[float, ...] = ()

    def grams_per_kwh(self, hour_start: float) -> float | None:
        """The intensity of the hour starting at ``hour_start``; ``None`` before a series'
        first value."""
        if self.constant is not None:
            return self.constant
        at = bisect.bisect_right(self.hours, hour_start) - 1
        return self.values[at] if at >= 0 else None


def parse_carbon_intensity(text: str) -> CarbonIntensity | None:
    """A constant (``350``) or the absolute path of an hourly CSV file; empty: none."""
    text = text.strip()
    if not text:
        return None
    if text.startswith("/"):
        return read_parsed(text, MAX_INTENSITY_BYTES, parse_intensity_series,
                           f"carbon intensity file {text}")
    return CarbonIntensity(constant=_number(text, "carbon intensity"))


def parse_hour(text: str) -> float:
    """An RFC 3339 time on a whole hour (``2026-11-01T13:00:00Z``) as epoch seconds."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"expected an RFC 3339 time, got {brief(text)}") from None
    if when.tzinfo is None:
        raise ValueError(f"the time needs its offset (Z or +HH:MM), got {brief(text)}")
    epoch = when.timestamp()
    if epoch % 3600:
        raise ValueError(f"expected the start of an hour, got {brief(text)}")
    return epoch


def parse_intensity_series(content: str) -> CarbonIntensity:
    """CSV lines ``<RFC 3339 hour>,<gCO2e per kWh>`` in ascending order; a first line that
    is not a time is a header; ``#`` starts a comment."""
    series: dict[float, float] = {}
    last = 0.0
    for number, line in enumerate(content.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        when_text, sep, value_text = line.partition(",")
        if not sep:
            raise ValueError(f"line {number}: expected '<hour>,<gCO2e/kWh>'")
        try:
            hour = parse_hour(when_text)
        except ValueError as exc:
            if not series and number == 1:
                continue                                  # a header line
            raise ValueError(f"line {number}: {exc}") from None
        if series and hour <= last:
            raise ValueError(f"line {number}: hours must be ascending")
        series[hour] = _number(value_text, f"line {number}")
        last = hour
    if not series:
        raise ValueError("no hourly values")
    return CarbonIntensity(hours=tuple(series), values=tuple(series.values()))
