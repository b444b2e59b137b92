"""Usage kept on the node: what a snapshot bills, the hourly rows and their roll-up into days,
the query's parameters and bounds, the reports (JSON, FOCUS CSV, table), tariffs and carbon."""

from __future__ import annotations

import csv
import io
import sqlite3
from dataclasses import replace

import pytest

from gpustats.engine.state_files import StateFiles
from gpustats.usage.database import FILE_NAME, UsageWriter, open_database
from gpustats.usage.query import (
    QueryError, QueryTimeout, TooManyRows, UsageQuery, parse_query, run_query,
)
from gpustats.usage.recorder import UsageRecorder
from gpustats.usage.report import FOCUS_COLUMNS, focus_csv, report_dict, table
from gpustats.usage.tariff import (
    parse_carbon_intensity, parse_intensity_series, parse_price, parse_tariff,
)
from gpustats.usage.ticks import Deltas, UsageTenant, snapshot_totals
from tests.support.tenant_snapshot import A, M, tenant_snapshot

T0 = 1_793_491_200          # 2026-11-01T00:00:00Z
HOUR = 3600


def test_a_snapshot_bills_every_joule_of_each_gpu():
    snapshot = tenant_snapshot()
    totals, tenants = snapshot_totals(snapshot)
    for device in snapshot.devices:
        uuid = device.identity.uuid
        billed = sum((a or 0) + (i or 0) for (key, gpu), (a, i) in totals.items() if gpu == uuid)
        assert billed == pytest.approx(device.energy_joules)
    # one service on two MIG instances: one row with their sum
    assert totals[("service:ollama.service", M)] == (50.0, 10.0)
    job = tenants["job:4242:0"]
    assert (job.kind, job.job, job.user, job.node) == ("job", "4242", "bob", "node-1")
    trainer = tenants["1" * 64]
    assert (trainer.namespace, trainer.pod, trainer.container) == ("ml", "trainer-0", "trainer")
    assert tenants["0" * 64].pod == "old-0"               # an ended pod's container stays
    assert "unobserved" not in tenants                     # absent from the snapshot: skipped


def test_an_unobserved_bucket_in_the_snapshot_is_recorded():
    snapshot = tenant_snapshot()

    class WithDowntime:
        def __init__(self, device):
            self._device = device
            self.unobserved_energy_joules = 12.5

        def __getattr__(self, name):
            return getattr(self._device, name)

    snapshot = replace(snapshot, devices=tuple(WithDowntime(d) for d in snapshot.devices))
    totals, tenants = snapshot_totals(snapshot)
    assert totals[("unobserved", A)] == (12.5, None)
    assert tenants["unobserved"].kind == "unobserved"


def test_gains_count_growth_restarts_and_skip_a_new_database():
    deltas = Deltas(None, keep_seconds=3600)
    gains, updated = deltas.gains({("a", A): (10.0, 1.0)}, T0)
    assert [g[2:4] for g in gains] == [(0.0, 0.0)]          # a new database: a baseline only
    deltas.commit(updated, T0)
    gains, updated = deltas.gains({("a", A): (15.0, 1.5), ("b", A): (2.0, None)}, T0 + 5)
    assert {g[0]: g[2:4] for g in gains} == {"a": (5.0, 0.5), "b": (2.0, 0.0)}
    deltas.commit(updated, T0 + 5)
    # a missing tick (a source failed) then back: only the growth, not the whole counter
    deltas.commit(deltas.gains({}, T0 + 10)[1], T0 + 10)
    gains, updated = deltas.gains({("a", A): (16.0, 1.5), ("b", A): (1.0, None)}, T0 + 15)
    assert {g[0]: g[2:4] for g in gains} == {"a": (1.0, 0.0), "b": (1.0, 0.0)}   # b restarted


def test_a_counter_without_idle_share_gains_its_attributed_growth():
    deltas = Deltas({("a", A): (2.0, None), ("b", A): (5.0, 1.0)}, keep_seconds=3600)
    gains, updated = deltas.gains({("a", A): (5.0, None), ("b", A): (6.0, None)}, T0)
    # the idle share missing this tick: nothing gained, the last one known kept as baseline
    assert sorted(gains) == [("a", A, 3.0, 0.0, 5.0, None), ("b", A, 1.0, 0.0, 6.0, 1.0)]
    deltas.commit(updated, T0)
    gains, _ = deltas.gains({("a", A): (5.0, None), ("b", A): (6.0, None)}, T0 + 5)
    assert gains == []                                      # nothing grew: no row


def test_a_failed_write_keeps_its_energy_for_the_next(tmp_path):
    problems = []
    recorder = UsageRecorder(str(tmp_path), report=problems.append)
    snapshot = tenant_snapshot()
    recorder.record(snapshot)
    writer = recorder._writer

    def full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    original = writer.write
    writer.write = full
    grown = _grown(snapshot, 100.0, T0 + 5)
    recorder.record(grown)
    assert problems[-1][0] == "disk_full"
    writer.write = original
    recorder.record(_grown(snapshot, 200.0, T0 + 10))
    assert problems[-1] is None
    db = open_database(recorder.path, read_only=True)
    total = db.execute("SELECT sum(attributed + idle) FROM hourly").fetchone()[0]
    assert total == pytest.approx(200.0 * _counters(snapshot))


def test_a_state_reset_keeps_the_usage_rows_and_counts_on_from_zero(tmp_path):
    snapshot = tenant_snapshot()
    grown = _grown(snapshot, 100.0, T0 + 5)
    recorder = UsageRecorder(str(tmp_path))
    recorder.record(snapshot)                         # a new database: the baseline
    recorder.record(grown)
    recorder._writer.close()
    StateFiles(str(tmp_path)).reset()                 # the counters start over
    assert (tmp_path / FILE_NAME).exists()            # usage is history: kept
    restarted = UsageRecorder(str(tmp_path))
    restarted.record(replace(snapshot, sequence=grown.sequence + 1, taken_at=T0 + 10))
    restarted._writer.close()
    # each counter back below what the rows hold counts whole, from zero
    before, after = snapshot_totals(grown)[0], snapshot_totals(snapshot)[0]
    restarts = sum(now for pair in after for now, last in zip(after[pair], before[pair])
                   if now is not None and last is not None and now < last)
    db = open_database(restarted.path, read_only=True)
    total = db.execute("SELECT sum(attributed + idle) FROM hourly").fetchone()[0]
    assert total == pytest.approx(100.0 * _counters(snapshot) + restarts)


def _counters(snapshot) -> int:
    return len(snapshot_totals(snapshot)[0])


def _grown(snapshot, joules: float, when: float):
    """``snapshot`` with every tenant's attributed and every bucket grown by ``joules``."""
    def acc(a):
        return replace(a, attributed_energy_joules=(a.attributed_energy_joules or 0) + joules)

    def entry(c):
        per_gpu = {}
        accs = []
        for a in c.accelerators:              # one gain per (tenant, GPU)
            accs.append(acc(a) if a.device_uuid not in per_gpu else a)
            per_gpu[a.device_uuid] = True
        return replace(c, accelerators=tuple(accs))

    pods = tuple(replace(p, containers=tuple(entry(c) for c in p.containers))
                 for p in snapshot.pods)
    devices = tuple(replace(d, unattributed_energy_joules=d.unattributed_energy_joules + joules,
                            unallocated_idle_energy_joules=d.unallocated_idle_energy_joules
                            + joules) for d in snapshot.devices)
    return replace(snapshot, sequence=snapshot.sequence + 1, taken_at=when, pods=pods,
                   devices=devices, containers=tuple(entry(c) for c in snapshot.containers))


def _writer(tmp_path, **kwargs) -> UsageWriter:
    settings = {"price": None, "carbon": None, "hourly_retention": 90 * 86400,
                "daily_retention": 730 * 86400, **kwargs}
    return UsageWriter(open_database(str(tmp_path / "u.sqlite")), **settings)


TENANTS = {"j1": UsageTenant("j1", "job", job="1", user="ada", node="n"),
           "p1": UsageTenant("p1", "pod", namespace="ml", pod="a", container="c", node="n"),
           "unallocated": UsageTenant("unallocated", "unallocated", node="n")}


def test_hours_roll_into_days_and_a_query_spans_both(tmp_path):
    writer = _writer(tmp_path, hourly_retention=2 * 86400, daily_retention=30 * 86400)
    for hour in range(10 * 24):
        writer.write(T0 + hour * HOUR, [("j1", A, 1.0, 0.5, None, None),
                                        ("p1", M, 2.0, 0.0, None, None),
                                        ("unallocated", A, 0.0, 0.25, None, None)], TENANTS)
    db = writer._db
    assert db.execute("SELECT min(hour) FROM hourly").fetchone()[0] == T0 + 7 * 86400
    assert db.execute("SELECT count(*) FROM daily").fetchone()[0] > 0
    rows = run_query(db, parse_query({"from": ["2026-11-01"], "to": ["2026-11-10"],
                                      "by": ["job"], "step": ["day"]}, T0))
    assert len(rows) == 20                               # job 1 and none, 10 days
    assert sum(r.energy_joules for r in rows) == pytest.approx(240 * 3.75)
    by_job = {r.group: 0.0 for r in rows}
    for r in rows:
        by_job[r.group] += r.energy_joules
    assert by_job == pytest.approx({("1",): 240 * 1.5, (None,): 240 * 2.25})


def test_daily_rows_past_their_retention_are_deleted(tmp_path):
    writer = _writer(tmp_path, hourly_retention=86400, daily_retention=3 * 86400)
    writer.write(T0, [("p1", A, 1.0, 0.0, None, None)], TENANTS)       # ended long ago
    for day in range(8):
        writer.write(T0 + day * 86400, [("j1", A, 1.0, 0.0, None, None)], TENANTS)
    days = [d for (d,) in writer._db.execute("SELECT day FROM daily")]
    assert min(days) >= T0 + 4 * 86400
    # a tenant in no row any more is gone from the tenants too; the others stay
    assert [k for (k,) in writer._db.execute("SELECT key FROM tenants")] == ["j1"]
    writer.write(T0 + 8 * 86400, [("p1", A, 1.0, 0.0, None, None)], TENANTS)   # back
    assert {k for (k,) in writer._db.execute("SELECT key FROM tenants")} == {"j1", "p1"}


def test_a_period_within_a_day_takes_its_hours_only(tmp_path):
    writer = _writer(tmp_path)
    for hour in range(72):
        writer.write(T0 + hour * HOUR, [("j1", A, 1.0, 0.0, None, None)], TENANTS)
    for start, end, joules in ((T0 + 30 * HOUR, T0 + 33 * HOUR, 3.0),    # within day 2
                               (T0 + 20 * HOUR, T0 + 50 * HOUR, 30.0),   # across day 2
                               (T0, T0 + 48 * HOUR, 48.0)):               # days 1 and 2
        for step in (None, "day", "hour"):
            rows = run_query(writer._db, UsageQuery(start, end, ("job",), step))
            assert sum(r.energy_joules for r in rows) == joules, (start, end, step)


def test_a_restart_continues_from_the_last_written_counters(tmp_path):
    writer = _writer(tmp_path)
    assert writer.baseline(0) is None
    writer.write(T0, [("j1", A, 1.0, 0.5, 10.0, 5.0)], TENANTS)
    writer.write(T0 + 5, [("j1", A, 1.0, 0.5, 11.0, 5.5)], TENANTS)
    writer.close()
    again = _writer(tmp_path)
    assert again.baseline(T0 - 86400) == {("j1", A): (11.0, 5.5)}


def test_a_name_learnt_later_is_the_one_reported(tmp_path):
    writer = _writer(tmp_path)
    nameless = {"p1": UsageTenant("p1", "pod", node="n")}
    writer.write(T0, [("p1", A, 1.0, 0.0, None, None)], nameless)
    writer.write(T0 + 5, [("p1", A, 1.0, 0.0, None, None)], TENANTS)
    rows = run_query(writer._db, UsageQuery(T0, T0 + HOUR, ("namespace", "pod"), None))
    assert [(r.group, r.energy_joules) for r in rows] == [(("ml", "a"), 2.0)]


@pytest.mark.parametrize("values, message", [
    ({"from": ["yesterday"]}, "from must be"),
    ({"to": ["2026-13"]}, "to must be"),
    ({"from": ["2026-11-01T00:00:00"]}, "offset"),
    ({"from": ["2026-11-02"], "to": ["2026-11-01T00:00:00Z"]}, "after"),
    ({"by": ["color"]}, "by must be"),
    ({"by": [","]}, "by must be"),
    ({"step": ["week"]}, "step must be"),
    ({"step": ["day", "hour"]}, "once"),
    ({"month": ["2026-11"], "from": ["2026-11-01"]}, "cannot be combined"),
    ({"month": ["2026-11-01"]}, "YYYY-MM"),
])
def test_bad_queries_say_why(values, message):
    with pytest.raises(QueryError, match=message):
        parse_query(values, T0)


def test_periods_in_days_and_months_cover_their_whole_span():
    query = parse_query({"month": ["2026-02"], "by": ["namespace,job"]}, T0)
    assert (query.start, query.end) == (1_769_904_000, 1_772_323_200)     # Feb 1 .. Mar 1
    query = parse_query({"from": ["2026-11-01"], "to": ["2026-11-01"]}, T0)
    assert query.end - query.start == 86400
    query = parse_query({"from": ["2026-11-01T00:30:00+01:00"],
                         "to": ["2026-11-01T05:30:00Z"]}, T0)
    assert (query.start, query.end) == (T0 - HOUR, T0 + 6 * HOUR)     # whole hours, outward
    assert parse_query({}, T0 + 10 * 86400 + 10).start == T0               # this month so far


def test_answers_are_bounded_in_rows_and_time(tmp_path):
    writer = _writer(tmp_path)
    for hour in range(50):
        writer.write(T0 + hour * HOUR, [("j1", A, 1.0, 0.0, None, None)], TENANTS)
    query = UsageQuery(T0, T0 + 50 * HOUR, ("job",), "hour")
    with pytest.raises(TooManyRows):
        run_query(writer._db, query, max_rows=49)
    assert len(run_query(writer._db, query, max_rows=50)) == 50
    with pytest.raises(QueryTimeout):
        run_query(writer._db, query, seconds=-1.0)


def test_month_steps_start_on_the_first(tmp_path):
    writer = _writer(tmp_path)
    writer.write(T0 - HOUR, [("j1", A, 1.0, 0.0, None, None)], TENANTS)     # Oct 31
    writer.write(T0 + HOUR, [("j1", A, 2.0, 0.0, None, None)], TENANTS)
    rows = run_query(writer._db, UsageQuery(T0 - 86400, T0 + 86400, ("job",), "month"))
    assert [(r.period_start, r.period_end, r.energy_joules) for r in rows] == [
        (T0 - 86400, T0, 1.0), (T0, T0 + 86400, 2.0)]


TWO_RATES = {"currency": "EUR", "rates": [
    {"from": "07:00", "to": "23:00", "price": 0.30},
    {"from": "23:00", "to": "07:00", "price": 0.10}]}


def test_cost_and_carbon_follow_the_hour_of_use(tmp_path):
    price = parse_tariff(TWO_RATES)
    carbon = parse_intensity_series("time,gco2e_per_kwh\n2026-11-01T00:00:00Z,100\n"
                                    "2026-11-01T08:00:00Z,400\n")
    writer = _writer(tmp_path, price=price, carbon=carbon)
    kwh = 3.6e6
    for hour in range(24):                               # one kWh an hour, split over ticks
        for tick in range(4):
            writer.write(T0 + hour * HOUR + tick * 900, [("j1", A, kwh / 8, kwh / 8, None,
                                                          None)], TENANTS)
    rows = run_query(writer._db, UsageQuery(T0, T0 + 86400, ("job",), "day"))
    assert rows[0].energy_kwh == pytest.approx(24.0)
    assert rows[0].cost == pytest.approx(16 * 0.30 + 8 * 0.10)
    assert rows[0].co2e_grams == pytest.approx(8 * 100 + 16 * 400)


def test_tariffs_and_intensities_refuse_what_they_cannot_use():
    assert parse_price("0.25 EUR").per_kwh(T0) == 0.25
    assert parse_price("") is None
    assert parse_carbon_intensity("350").grams_per_kwh(T0) == 350.0
    for bad in ("0.25", "cheap EUR", "-1 EUR", "0.25 euro", "nan EUR"):
        with pytest.raises(ValueError):
            parse_price(bad)
    with pytest.raises(ValueError, match="no rate for mon 07:00"):
        parse_tariff({"currency": "EUR", "rates": [{"from": "23:00", "to": "07:00",
                                                    "price": 1}]})
    with pytest.raises(ValueError, match="already has a rate"):
        parse_tariff({"currency": "EUR", "rates": [{"price": 1}, {"price": 2, "days": ["sun"]}]})
    with pytest.raises(ValueError, match="whole hour"):
        parse_tariff({"currency": "EUR", "rates": [{"price": 1, "from": "07:30"}]})
    with pytest.raises(ValueError, match="ascending"):
        parse_intensity_series("2026-11-01T01:00:00Z,1\n2026-11-01T00:00:00Z,2\n")
    with pytest.raises(ValueError, match="start of an hour"):
        parse_intensity_series("2026-11-01T01:30:00Z,1\n2026-11-01T00:30:00Z,2\n")
    assert parse_intensity_series("2026-11-01T01:00:00Z,5\n").grams_per_kwh(T0) is None


def test_the_csv_has_focus_columns_and_loads(tmp_path):
    writer = _writer(tmp_path, price=parse_price("0.2 EUR"))
    writer.write(T0, [("j1", A, 3.6e6, 0.0, None, None),
                      ("p1", A, 1.8e6, 0.0, None, None)], TENANTS)
    query = UsageQuery(T0, T0 + 86400, ("namespace", "job"), "day")
    rows = run_query(writer._db, query)
    loaded = list(csv.DictReader(io.StringIO(focus_csv(query, rows, "EUR"))))
    assert tuple(loaded[0]) == FOCUS_COLUMNS
    job = next(r for r in loaded if r["ResourceId"] == "namespace=,job=1")
    assert (job["ConsumedQuantity"], job["ConsumedUnit"], job["BilledCost"],
            job["BillingCurrency"]) == ("1.0", "kWh", "0.2", "EUR")
    assert (job["ChargePeriodStart"], job["BillingPeriodEnd"]) == ("2026-11-01T00:00:00Z",
                                                                   "2026-11-02T00:00:00Z")
    assert job["Tags"] == '{"job": "1"}'
    answer = report_dict(query, rows, "EUR", "n")
    assert answer["totals"]["energyKwh"] == pytest.approx(1.5)
    assert answer["totals"]["cost"] == pytest.approx(0.3)
    text = table(answer)
    assert "total" in text and all(len(line) <= 100 for line in text.splitlines())
