"""A usage report's question and its answer: the period, the grouping and the step, parsed
from text (pure), and the one SQL query over the hourly and daily rows that answers it, bounded
in rows and in time."""

from __future__ import annotations

import calendar
import re
import sqlite3
import time
from dataclasses import dataclass
from datetime import datetime

from gpustats.usage.database import JOULES_PER_KWH

STEPS = ("hour", "day", "month")
# Group fields: the tenant's identity fields, the GPU, and the tenant itself (its key).
GROUP_COLUMNS = {
    "tenant": "t.key", "kind": "t.kind", "namespace": "t.namespace", "pod": "t.pod",
    "container": "t.container", "service": "t.service", "user": "t.user", "job": "t.job",
    "node": "t.node", "gpu": "g.uuid",
}
MAX_ROWS = 10_000
QUERY_SECONDS = 5.0
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_MONTH = re.compile(r"\d{4}-\d{2}")


class QueryError(ValueError):
    """The question is malformed; the message says which parameter and why."""


class TooManyRows(Exception):
    """The answer would have more rows than allowed."""


class QueryTimeout(Exception):
    """The query ran past its time."""


@dataclass(frozen=True)
class UsageQuery:
    start: int                  # epoch seconds, inclusive, on an hour
    end: int                    # epoch seconds, exclusive, on an hour
    by: tuple[str, ...]
    step: str | None            # None: one row per group for the whole period


@dataclass(frozen=True)
class UsageRow:
    period_start: int
    period_end: int
    group: tuple[str | None, ...]      # the ``by`` fields' values, in order
    attributed_joules: float
    idle_joules: float
    cost: float | None
    co2e_grams: float | None

    @property
    def energy_joules(self) -> float:
        return self.attributed_joules + self.idle_joules

    @property
    def energy_kwh(self) -> float:
        return self.energy_joules / JOULES_PER_KWH


def _month_start(year: int, month: int) -> int:
    return calendar.timegm((year, month, 1, 0, 0, 0))


def _next_month(epoch: int) -> int:
    when = time.gmtime(epoch)
    year, month = (when.tm_year + 1, 1) if when.tm_mon == 12 else (when.tm_year, when.tm_mon + 1)
    return _month_start(year, month)


def parse_time(text: str, name: str, *, end: bool) -> int:
    """RFC 3339 (``2026-11-01T00:00:00Z``), a day (``2026-11-01``) or a month (``2026-11``),
    UTC. A day or month given as the end means its end. Rounded out to whole hours."""
    text = text.strip()
    try:
        if _MONTH.fullmatch(text):
            year, month = int(text[:4]), int(text[5:])
            if not 1 <= month <= 12:
                raise ValueError
            start = _month_start(year, month)
            return _next_month(start) if end else start
        if _DAY.fullmatch(text):
            day = calendar.timegm(time.strptime(text, "%Y-%m-%d"))
            return day + 86400 if end else day
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        if when.tzinfo is None:
            raise ValueError
        epoch = when.timestamp()
    except (ValueError, OverflowError):
        raise QueryError(f"{name} must be an RFC 3339 time with its offset, a day "
                         f"(YYYY-MM-DD) or a month (YYYY-MM)") from None
    whole = int(epoch) - int(epoch) % 3600
    return whole + 3600 if end and whole < epoch else whole


def parse_query(values: dict[str, list[str]], now: float) -> UsageQuery:
    """The query's parameters, each given at most once: ``from`` (default: this month's
    start), ``to`` (default: now), ``month`` (instead of both), ``by`` (comma-separated
    fields; default ``tenant``), ``step`` (``hour``, ``day``, ``month``; default none: the
    whole period)."""
    one: dict[str, str] = {}
    for name, given in values.items():
        if len(given) != 1:
            raise QueryError(f"{name} must be given once")
        one[name] = given[0]
    if "month" in one:
        if "from" in one or "to" in one:
            raise QueryError("month cannot be combined with from or to")
        if not _MONTH.fullmatch(one["month"].strip()):
            raise QueryError("month must be YYYY-MM")
        start = parse_time(one["month"], "month", end=False)
        end = parse_time(one["month"], "month", end=True)
    else:
        this_month = time.gmtime(now)
        start = parse_time(one["from"], "from", end=False) if "from" in one else \
            _month_start(this_month.tm_year, this_month.tm_mon)
        end = parse_time(one["to"], "to", end=True) if "to" in one else \
            int(now) - int(now) % 3600 + 3600
    if end <= start:
        raise QueryError("to must be after from")
    by = tuple(dict.fromkeys(f.strip() for f in one.get("by", "tenant").split(",")
                             if f.strip()))
    if not by or any(f not in GROUP_COLUMNS for f in by):
        raise QueryError(f"by must be fields among {', '.join(GROUP_COLUMNS)}")
    step = one.get("step")
    if step is not None and step not in STEPS:
        raise QueryError(f"step must be one of {', '.join(STEPS)}")
    return UsageQuery(start, end, by, step)


_PERIOD = {
    None: "0",
    "hour": "t",
    "day": "t - t % 86400",
    "month": "CAST(strftime('%s', t, 'unixepoch', 'start of month') AS INTEGER)",
}


def _period_end(query: UsageQuery, start: int) -> int:
    if query.step is None:
        return query.end
    if query.step == "hour":
        return start + 3600
    if query.step == "day":
        return start + 86400
    return _next_month(start)


def _floor_day(epoch: int) -> int:
    return epoch - epoch % 86400


def _ceil_day(epoch: int) -> int:
    return -(-epoch // 86400) * 86400


def daily_span(query: UsageQuery, rolled_until: int | None, hourly_from: int | None
               ) -> tuple[int, int]:
    """The days [a0, a1) the daily rows answer; the hourly rows answer the rest of the
    period. A step of an hour takes days only where the hours are gone; the others take every
    whole day rolled (a thirtieth of the rows). Where the hours at the period's start are
    gone, its first day counts whole."""
    start, end = query.start, query.end
    gone = hourly_from is None or start < hourly_from
    a0 = _floor_day(start) if gone else _ceil_day(start)
    if query.step == "hour":
        limit = hourly_from if hourly_from is not None else _ceil_day(end)
    else:
        limit = rolled_until if rolled_until is not None else a0
    a1 = max(a0, min(_floor_day(end), limit))
    if gone and a1 == a0 < end:                  # within one day whose hours are gone
        a1 = max(a0, min(a0 + 86400, limit))
    return a0, a1


def _coverage(connection: sqlite3.Connection) -> tuple[int | None, int | None]:
    row = connection.execute("SELECT value FROM meta WHERE key='rolled_until'").fetchone()
    first = connection.execute("SELECT min(hour) FROM hourly").fetchone()[0]
    return (int(row[0]) if row is not None else None,
            None if first is None else _floor_day(int(first)))


def run_query(connection: sqlite3.Connection, query: UsageQuery, *,
              max_rows: int = MAX_ROWS, seconds: float = QUERY_SECONDS) -> list[UsageRow]:
    """The rows answering ``query``, ordered by period then group. Raises ``TooManyRows``
    past ``max_rows`` and ``QueryTimeout`` past ``seconds`` (the query is interrupted)."""
    columns = [GROUP_COLUMNS[f] for f in query.by]
    period = _PERIOD[query.step]
    group = ", ".join(["period", *columns])
    # Summed per tenant and GPU first (integers), then per group over the few that remain.
    # The text is made of the constant columns and expressions above (``by`` and ``step``
    # choose among them); every value is a bound parameter.
    sql = (f"SELECT period"  # nosec B608
           f", {', '.join(columns)}, sum(a), sum(i), sum(c), sum(e) FROM ("
           f"SELECT {period} AS period, tenant, gpu, sum(attributed) AS a, sum(idle) AS i, "
           "sum(cost) AS c, sum(co2e) AS e FROM ("
           "SELECT day AS t, tenant, gpu, attributed, idle, cost, co2e FROM daily "
           "WHERE day >= ?3 AND day < ?4 UNION ALL "
           "SELECT hour AS t, tenant, gpu, attributed, idle, cost, co2e FROM hourly "
           "WHERE hour >= ?1 AND hour < ?3 AND hour < ?2 UNION ALL "
           "SELECT hour AS t, tenant, gpu, attributed, idle, cost, co2e FROM hourly "
           "WHERE hour >= ?4 AND hour < ?2) u GROUP BY period, tenant, gpu) x "
           "JOIN tenants t ON t.id = x.tenant JOIN gpus g ON g.id = x.gpu "
           f"GROUP BY {group} ORDER BY {group} LIMIT ?5")
    deadline = time.monotonic() + seconds
    connection.set_progress_handler(lambda: int(time.monotonic() > deadline), 1_000)
    try:
        a0, a1 = daily_span(query, *_coverage(connection))
        found = connection.execute(sql, (query.start, query.end, a0, a1,
                                         max_rows + 1)).fetchall()
    except sqlite3.OperationalError as exc:
        if "interrupt" in str(exc):
            raise QueryTimeout(f"the usage query ran past {seconds:g} s") from None
        raise
    finally:
        connection.set_progress_handler(None, 0)
    if len(found) > max_rows:
        raise TooManyRows(f"the answer has more than {max_rows} rows: ask for a shorter "
                          "period, a coarser step or fewer fields")
    rows = []
    width = len(columns)
    for row in found:
        start = query.start if query.step is None else max(int(row[0]), query.start)
        rows.append(UsageRow(start, min(_period_end(query, int(row[0]) if query.step else
                                                    start), query.end),
                             tuple(row[1:1 + width]), row[1 + width] or 0.0,
                             row[2 + width] or 0.0, row[3 + width], row[4 + width]))
    return rows
