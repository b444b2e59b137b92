"""The usage database: SQLite in WAL mode under the state dir, one writer.

``hourly`` holds each (hour, tenant, GPU)'s attributed and idle-share joules, their cost and
CO2e at the price and intensity of that hour, and the tenant's counters at the last tick
written (the baseline a restart continues from). Hours older than the hourly retention are
added into ``daily`` rows and deleted; days older than the daily retention are deleted. One
transaction per tick: a SIGKILL loses at most the tick being written, and SQLite's journal
keeps the file whole.
"""

from __future__ import annotations

import functools
import sqlite3
from typing import Any
from gpustats.usage.tariff import CarbonIntensity, Price
from gpustats.usage.ticks import Gains, Totals, UsageTenant

FILE_NAME = "usage.sqlite"
CHUNK_ROWS = 256            # rows a statement (SQLite allows 32,766 values in one)
SCHEMA_VERSION = 1
HOUR = 3600
DAY = 86400

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tenants(
    id INTEGER PRIMARY KEY, key TEXT UNIQUE NOT NULL, kind TEXT NOT NULL, namespace TEXT,
    pod TEXT, container TEXT, service TEXT, user TEXT, job TEXT, node TEXT);
CREATE TABLE IF NOT EXISTS gpus(id INTEGER PRIMARY KEY, uuid TEXT UNIQUE NOT NULL);
CREATE TABLE IF NOT EXISTS hourly(
    hour INTEGER NOT NULL, tenant INTEGER NOT NULL, gpu INTEGER NOT NULL,
    attributed REAL NOT NULL, idle REAL NOT NULL, cost REAL, co2e REAL,
    last_attributed REAL, last_idle REAL,
    PRIMARY KEY(hour, tenant, gpu)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS daily(
    day INTEGER NOT NULL, tenant INTEGER NOT NULL, gpu INTEGER NOT NULL,
    attributed REAL NOT NULL, idle REAL NOT NULL, cost REAL, co2e REAL,
    PRIMARY KEY(day, tenant, gpu)) WITHOUT ROWID;
"""

@functools.lru_cache(maxsize=2 * CHUNK_ROWS)
def _upsert(cost: bool, co2e: bool, rows: int) -> str:
    """The statement adding ``rows`` of one tick's gains into their hours' rows; cost and
    CO2e only where this hour has a price and an intensity (a column never touched stays as
    it was: absent where no tick of the hour had them). Many rows in one statement: SQLite
    runs it in one call, leaving the interpreter's lock once, where a statement a row takes
    it back a thousand times from the tick."""
    columns = ["hour", "tenant", "gpu", "attributed", "idle", "last_attributed", "last_idle",
               *(["cost"] if cost else []), *(["co2e"] if co2e else [])]
    updates = ["attributed = attributed + excluded.attributed",
               "idle = idle + excluded.idle", "last_attributed = excluded.last_attributed",
               "last_idle = excluded.last_idle",
               *(["cost = coalesce(cost, 0) + excluded.cost"] if cost else []),
               *(["co2e = coalesce(co2e, 0) + excluded.co2e"] if co2e else [])]
    row = f"({', '.join('?' * len(columns))})"
    values = ", ".join([row] * rows)
    # Built from the constant names above only; every value is a bound parameter.
    return (f"INSERT INTO hourly({', '.join(columns)}) VALUES {values} "  # nosec B608
            "ON CONFLICT(hour, tenant, gpu) DO UPDATE SET " + ", ".join(updates))

_ROLL = """
INSERT INTO daily(day, tenant, gpu, attributed, idle, cost, co2e)
SELECT hour - hour % 86400, tenant, gpu, sum(attributed), sum(idle), sum(cost), sum(co2e)
FROM hourly WHERE hour >= ? AND hour < ? GROUP BY hour - hour % 86400, tenant, gpu
ON CONFLICT(day, tenant, gpu) DO UPDATE SET
    attributed = attributed + excluded.attributed, idle = idle + excluded.idle,
    cost = CASE WHEN excluded.cost IS NULL THEN cost ELSE coalesce(cost, 0) + excluded.cost END,
    co2e = CASE WHEN excluded.co2e IS NULL THEN co2e ELSE coalesce(co2e, 0) + excluded.co2e END
"""
_LATE = """
INSERT INTO daily(day, tenant, gpu, attributed, idle, cost, co2e) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(day, tenant, gpu) DO UPDATE SET
    attributed = attributed + excluded.attributed, idle = idle + excluded.idle,
    cost = CASE WHEN excluded.cost IS NULL THEN cost ELSE coalesce(cost, 0) + excluded.cost END,
    co2e = CASE WHEN excluded.co2e IS NULL THEN co2e ELSE coalesce(co2e, 0) + excluded.co2e END
"""

JOULES_PER_KWH = 3.6e6
# An hourly row's parameters: hour, tenant id, GPU id, joules, then its cost and CO2e if priced.
Row = tuple[Any, ...]


def today_of(epoch: int) -> int:
    """The start of the UTC day of ``epoch``."""
    return epoch - epoch % DAY


def _late_rows(rows: list[Row], priced: bool, carbon: bool) -> list[Row]:
    """The daily rows' parameters (day, tenant, GPU, attributed, idle, cost, CO2e) of hourly
    rows that came after their day was rolled."""
    cost_at = 7 if priced else None
    co2e_at = 7 + priced if carbon else None
    return [(today_of(row[0]), row[1], row[2], row[3], row[4],
             None if cost_at is None else row[cost_at],
             None if co2e_at is None else row[co2e_at]) for row in rows]


class UsageVersionError(sqlite3.DatabaseError):
    """The database was written by a newer gpustats."""


def open_database(path: str, *, read_only: bool = False, timeout: float = 5.0
                  ) -> sqlite3.Connection:
    """The database at ``path``: for writing (made, WAL, schema checked) or read only."""
    if read_only:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout,
                                     check_same_thread=False)
        return connection
    connection = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    # WAL with NORMAL: a killed process loses nothing committed; a power cut the last ones.
    connection.execute("PRAGMA synchronous=NORMAL")
    connection.executescript(_SCHEMA)
    row = connection.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    if row is None:
        connection.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
    elif int(row[0]) > SCHEMA_VERSION:
        connection.close()
        raise UsageVersionError(f"{path} has usage schema {row[0]}, newer than this "
                                f"gpustats's {SCHEMA_VERSION}")
    return connection


class UsageWriter:
    """Writes each tick's gains into the hourly rows, one transaction each (the writer
    thread's own connection)."""

    def __init__(self, connection: sqlite3.Connection, *, price: Price | None,
                 carbon: CarbonIntensity | None, hourly_retention: float,
                 daily_retention: float):
        self._db = connection
        self._price = price
        self._carbon = carbon
        self._hourly_retention = hourly_retention
        self._daily_retention = daily_retention
        self._tenants: dict[str, tuple[int, UsageTenant]] = {}
        self._gpus: dict[str, int] = {}
        self._rolled_hour: int | None = None
        row = connection.execute("SELECT value FROM meta WHERE key='rolled_until'").fetchone()
        # Every day before this one is in the daily rows (its hours too, while kept).
        self._rolled_until: int | None = int(row[0]) if row is not None else None
        if price is not None:
            connection.execute("INSERT OR REPLACE INTO meta VALUES ('currency', ?)",
                               (price.currency,))
        for gpu_id, uuid in connection.execute("SELECT id, uuid FROM gpus"):
            self._gpus[uuid] = gpu_id

    def baseline(self, since: float) -> Totals | None:
        """The counters as last written, for tenants written since ``since``; ``None`` for a
        database with no usage at all yet."""
        db = self._db
        if db.execute("SELECT 1 FROM hourly LIMIT 1").fetchone() is None and \
                db.execute("SELECT 1 FROM daily LIMIT 1").fetchone() is None:
            return None
        rows = db.execute(
            "SELECT t.key, g.uuid, h.last_attributed, h.last_idle, max(h.hour) FROM hourly h "
            "JOIN tenants t ON t.id = h.tenant JOIN gpus g ON g.id = h.gpu "
            "WHERE h.hour >= ? GROUP BY h.tenant, h.gpu", (int(since) - int(since) % HOUR,))
        return {(key, uuid): (attributed, idle) for key, uuid, attributed, idle, _ in rows}

    def _tenant_id(self, tenant: UsageTenant) -> int:
        known = self._tenants.get(tenant.key)
        if known is not None and (known[1] is tenant or known[1] == tenant):
            if known[1] is not tenant:
                self._tenants[tenant.key] = (known[0], tenant)
            return known[0]
        db = self._db
        if known is None:                        # not in the cache: in the table, or new
            row = db.execute("SELECT id, key, kind, namespace, pod, container, service, user, "
                             "job, node FROM tenants WHERE key = ?", (tenant.key,)).fetchone()
            if row is not None:
                known = (row[0], UsageTenant(*row[1:]))
                if known[1] == tenant:
                    self._tenants[tenant.key] = (known[0], tenant)
                    return known[0]
        if known is None:
            cursor = db.execute("INSERT INTO tenants(key, kind, namespace, pod, container, "
                                "service, user, job, node) VALUES (?,?,?,?,?,?,?,?,?)",
                                (tenant.key, *tenant.fields()))
            tenant_id = cursor.lastrowid
            assert tenant_id is not None
        else:
            # A name learnt later (a pod's namespace and name), or changed: the latest wins.
            tenant_id = known[0]
            db.execute("UPDATE tenants SET kind=?, namespace=?, pod=?, container=?, service=?, "
                       "user=?, job=?, node=? WHERE id=?", (*tenant.fields(), tenant_id))
        self._tenants[tenant.key] = (tenant_id, tenant)
        return tenant_id

    def _gpu_id(self, uuid: str) -> int:
        gpu_id = self._gpus.get(uuid)
        if gpu_id is None:
            cursor = self._db.execute("INSERT INTO gpus(uuid) VALUES (?)", (uuid,))
            assert cursor.lastrowid is not None
            gpu_id = self._gpus[uuid] = cursor.lastrowid
        return gpu_id

    def _params(self, hour: int, gains: Gains, tenants: dict[str, UsageTenant],
                factors: list[float]) -> list[Any]:
        """The rows' values, one after the other (the statements' parameters): hour, tenant
        id, GPU id, the gains, the counters, then the cost and CO2e of the gains' kWh."""
        known, gpus_known = self._tenants, self._gpus
        params: list[Any] = []
        extend = params.extend
        for key, uuid, attributed, idle, last_attributed, last_idle in gains:
            tenant = tenants[key]
            seen = known.get(key)
            gpu = gpus_known.get(uuid)
            extend((hour, seen[0] if seen is not None and seen[1] is tenant
                    else self._tenant_id(tenant),
                    gpu if gpu is not None else self._gpu_id(uuid), attributed, idle,
                    last_attributed, last_idle))
            if factors:                    # the hour's cost and CO2e of the row's joules
                extend([(attributed + idle) * f for f in factors])
        return params

    def write(self, when: float, gains: Gains, tenants: dict[str, UsageTenant]) -> None:
        """One tick's gains, dated ``when`` (epoch seconds), in one transaction; raises
        ``sqlite3.Error`` with nothing written."""
        hour = int(when) - int(when) % HOUR
        price = self._price.per_kwh(hour) if self._price is not None else None
        grams = self._carbon.grams_per_kwh(hour) if self._carbon is not None else None
        db = self._db
        before = dict(self._tenants), dict(self._gpus)
        db.execute("BEGIN IMMEDIATE")
        try:
            priced, carbon = price is not None, grams is not None
            factors = [f / JOULES_PER_KWH for f in (price, grams) if f is not None]
            width = 7 + len(factors)
            params = self._params(hour, gains, tenants, factors)
            step = CHUNK_ROWS * width
            for at in range(0, len(params), step):
                chunk = params[at:at + step]
                db.execute(_upsert(priced, carbon, len(chunk) // width), chunk)
            if self._rolled_until is not None and hour < self._rolled_until:
                # A tick dated in a day already rolled (the wall clock stepped back): its
                # daily rows get the gains too.
                db.executemany(_LATE, _late_rows(
                    [tuple(params[at:at + width]) for at in range(0, len(params), width)],
                    priced, carbon))
            if self._rolled_hour != hour:
                self._roll(hour)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            self._tenants, self._gpus = before      # none of its ids were kept
            raise
        self._rolled_hour = hour
        if len(self._tenants) > 2 * len(tenants) + 1024:     # only the live ones cached
            self._tenants = {k: v for k, v in self._tenants.items() if k in tenants}

    def _roll(self, hour: int) -> None:
        """Each day that has ended into its daily rows (its hours kept for their retention);
        hours past the hourly retention deleted, whole days at a time; days past theirs."""
        db = self._db
        today = hour - hour % DAY
        rolled = self._rolled_until
        if rolled is None:                       # a new database: from its first hour
            first = db.execute("SELECT min(hour) FROM hourly").fetchone()[0]
            rolled = today if first is None else first - first % DAY
        if rolled < today:
            db.execute(_ROLL, (rolled, today))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('rolled_until', ?)", (str(today),))
            self._rolled_until = today
        elif self._rolled_until is None:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('rolled_until', ?)", (str(rolled),))
            self._rolled_until = rolled
        horizon = hour - int(self._hourly_retention)
        db.execute("DELETE FROM hourly WHERE hour < ?", (horizon - horizon % DAY,))
        day_horizon = hour - int(self._daily_retention)
        if db.execute("DELETE FROM daily WHERE day < ?",
                      (day_horizon - day_horizon % DAY,)).rowcount:
            # Tenants in no row any more (ended longer ago than every retention) go too.
            db.execute("DELETE FROM tenants WHERE id NOT IN (SELECT tenant FROM daily) AND "
                       "id NOT IN (SELECT tenant FROM hourly)")
            self._tenants = {}

    def close(self) -> None:
        self._db.close()

