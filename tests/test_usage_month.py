"""A month of usage through the real daemon on a simulated node: the bare-metal demo's tenants
(a Slurm job that ends mid-month among them) ticked by a clock that moves an hour a tick; the
API's sums against the counters' growth, its CSV in a spreadsheet parser, a two-rate tariff
and an hourly intensity file followed exactly, and the command line's report."""

from __future__ import annotations

import csv
import io
import shutil

import pytest

from gpustats.commands.usage import main as usage_main
from gpustats.demo import bare_metal
from gpustats.demo.node import Tree, write_scenario
from gpustats.usage.report import FOCUS_COLUMNS
from tests.support.clock import Clock

T0 = 1_793_491_200 - 3600          # 2026-10-31T23:00:00Z: the month starts a tick later
HOURS = 30 * 24 + 2
JOB_ENDS = 15 * 24
JOB = str(bare_metal.JOB_ID)


def _node(tmp_path) -> tuple[Tree, object]:
    root = tmp_path / "node"
    root.mkdir()
    cgroup, proc, host = bare_metal.build_host(root)
    return Tree(cgroup, proc, host, None), root / "scenario.yaml"


def _job_totals(snapshot) -> tuple[float, float, float]:
    """(the job's joules, every tenant's and bucket's, every GPU's) in the snapshot."""
    job = every = 0.0
    for _, entry in snapshot.containers_with_pods():
        for acc in entry.accelerators:
            joules = (acc.attributed_energy_joules or 0) + (acc.idle_share_energy_joules or 0)
            every += joules
            if entry.tenant is not None and entry.tenant.job_id == JOB:
                job += joules
    for device in snapshot.devices:
        every += (device.unattributed_energy_joules or 0) + \
            (device.unallocated_idle_energy_joules or 0)
    gpus = sum(d.energy_joules or 0 for d in snapshot.devices)
    return job, every, gpus


def _tariff(tmp_path):
    tariff = tmp_path / "tariff.yaml"
    tariff.write_text("currency: EUR\nrates:\n  - {from: '07:00', to: '23:00', price: 0.30}\n"
                      "  - {from: '23:00', to: '07:00', price: 0.10}\n")
    grid = tmp_path / "grid.csv"
    grid.write_text("time,gco2e_per_kwh\n" + "".join(
        f"{_hour_text(T0 + h * 3600)},{100 + (h * 37) % 300}\n" for h in range(HOURS + 2)))
    return tariff, grid


def _hour_text(epoch: int) -> str:
    import time
    return time.strftime("%Y-%m-%dT%H:00:00Z", time.gmtime(epoch))


def _intensity(epoch: int) -> float:
    return 100 + ((epoch - T0) // 3600 * 37) % 300


def _price(epoch: int) -> float:
    hour = (epoch // 3600) % 24
    return 0.30 if 7 <= hour < 23 else 0.10


@pytest.fixture
def month(tmp_path, in_process_daemon):
    """The daemon ticked once an hour for a month; returns (daemon, first, last snapshot,
    the expected cost and CO2e from the tick's own gains)."""
    tree, scenario = _node(tmp_path)
    write_scenario(scenario, bare_metal.scenario_at(0.0))
    tariff, grid = _tariff(tmp_path)
    daemon = in_process_daemon(
        "--simulate", str(scenario), "--cgroup-root", str(tree.cgroup), "--proc-root",
        str(tree.proc), "--host-root", str(tree.host), "--log-root", "", "--cdi-spec-dirs", "",
        "--idle-power-watts", "60", "--node-name", "sim-node", "--price-per-kwh", str(tariff),
        "--carbon-intensity", str(grid))
    clock = Clock(T0)
    daemon.housekeeper._wall = clock
    first = previous = None
    cost = co2e = 0.0
    for hour in range(HOURS):
        clock.now = T0 + hour * 3600 + 1800
        if hour == JOB_ENDS:                         # the job ends: its process and cgroup go
            job = bare_metal.TENANTS[0]
            write_scenario(scenario, {**bare_metal.scenario_at(hour), "processes": [
                p for p in bare_metal.scenario_at(hour)["processes"] if p["pid"] != job.pid]})
            assert daemon.simulator.reload()
            shutil.rmtree(tree.proc / str(job.pid))
            shutil.rmtree(tree.cgroup / job.tenant_cgroup)
        elif hour % 24 == 0 and hour < JOB_ENDS:
            write_scenario(scenario, bare_metal.scenario_at(hour))
            assert daemon.simulator.reload()
        snapshot = daemon.housekeeper.tick()
        daemon.usage.record(snapshot)
        if previous is not None:
            gained = (_job_totals(snapshot)[1] - _job_totals(previous)[1]) / 3.6e6
            cost += gained * _price(clock.now)
            co2e += gained * _intensity(clock.now - 1800)
        first = first or snapshot
        previous = snapshot
    return daemon, first, previous, cost, co2e


def test_a_month_by_job_sums_to_the_counters_growth(month):
    daemon, first, last, cost, co2e = month
    app = daemon.create_app()
    client = app.test_client()
    answer = client.get("/api/v1/usage?from=2026-10-31&to=2026-12&by=job&step=day").get_json()
    by_job: dict = {}
    for row in answer["rows"]:
        by_job[row["group"]["job"]] = by_job.get(row["group"]["job"], 0) + row["energyJoules"]
    assert len({r["periodStart"] for r in answer["rows"]}) == 32       # Oct 31 .. Dec 1
    job_growth = _job_totals(last)[0] - _job_totals(first)[0]
    every_growth = _job_totals(last)[1] - _job_totals(first)[1]
    gpu_growth = _job_totals(last)[2] - _job_totals(first)[2]
    assert job_growth > 0
    assert any(e.ended and e.tenant is not None and e.tenant.job_id == JOB
               for e in last.containers)                  # the ended job is still billed
    assert by_job[JOB] == pytest.approx(job_growth, rel=1e-3)
    assert sum(by_job.values()) == pytest.approx(every_growth, rel=1e-3)
    assert sum(by_job.values()) == pytest.approx(gpu_growth, rel=1e-3)
    # nothing of the job after it ended, everything of it before
    late = [r for r in answer["rows"] if r["group"]["job"] == JOB
            and r["periodStart"] >= "2026-11-16"]
    assert late == [] or all(r["attributedJoules"] == 0 for r in late)
    # cost and CO2e: each hour's kWh at that hour's rate and intensity
    assert answer["currency"] == "EUR"
    assert answer["totals"]["cost"] == pytest.approx(cost, rel=1e-9)
    assert answer["totals"]["co2eGrams"] == pytest.approx(co2e, rel=1e-9)
    hourly = client.get("/api/v1/usage?from=2026-11-02T00:00:00Z&to=2026-11-03T00:00:00Z"
                        "&by=node&step=hour").get_json()
    for row in hourly["rows"]:
        hour = int(_epoch(row["periodStart"]))
        assert row["cost"] == pytest.approx(row["energyKwh"] * _price(hour), rel=1e-6)
        assert row["co2eGrams"] == pytest.approx(row["energyKwh"] * _intensity(hour), rel=1e-6)


def _epoch(text: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_the_csv_loads_in_a_spreadsheet_parser(month):
    daemon = month[0]
    client = daemon.create_app().test_client()
    response = client.get("/api/v1/usage?month=2026-11&by=namespace,job",
                          headers={"Accept": "text/csv"})
    assert response.status_code == 200 and response.mimetype == "text/csv"
    text = response.get_data(as_text=True)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert tuple(rows[0]) == FOCUS_COLUMNS
    assert {r["ConsumedUnit"] for r in rows} == {"kWh"}
    assert any(r["ResourceId"] == f"namespace=,job={JOB}" for r in rows)


def test_the_csv_loads_in_pandas(month):
    pandas = pytest.importorskip("pandas")
    client = month[0].create_app().test_client()
    text = client.get("/api/v1/usage?month=2026-11&by=namespace,job&format=csv").get_data(
        as_text=True)
    rows = list(csv.DictReader(io.StringIO(text)))
    frame = pandas.read_csv(io.StringIO(text))
    assert list(frame.columns) == list(FOCUS_COLUMNS)
    assert frame["ConsumedQuantity"].sum() == pytest.approx(
        sum(float(r["ConsumedQuantity"]) for r in rows))


def test_the_command_line_reads_a_stopped_daemons_state_dir(month, tmp_path, capsys):
    daemon = month[0]
    daemon.close()
    state = str(tmp_path / "state")
    assert usage_main(["--state-dir", state, "--month", "2026-11", "--by", "job"]) == 0
    table = capsys.readouterr().out
    assert JOB in table and "total" in table
    assert all(len(line) <= 100 for line in table.splitlines())
    assert usage_main(["--state-dir", state, "--month", "2026-11", "--by", "job",
                       "--format", "csv"]) == 0
    assert capsys.readouterr().out.startswith(",".join(FOCUS_COLUMNS[:3]))
    assert usage_main(["--state-dir", state, "--month", "2026-13"]) == 2
    assert "month must be" in capsys.readouterr().err
    assert usage_main(["--state-dir", str(tmp_path / "none")]) == 2


def test_bad_requests_answer_json_errors(month):
    client = month[0].create_app().test_client()
    for query, status in (("by=colour", 400), ("step=week", 400), ("from=yesterday", 400),
                          ("month=2026-11&from=2026-11-01", 400), ("format=xml", 400),
                          ("step=day&step=hour", 400), ("bogus=1", 400),
                          ("from=2020-01-01&to=2026-12&by=tenant,gpu&step=hour", 200)):
        response = client.get(f"/api/v1/usage?{query}")
        assert response.status_code == status, (query, response.get_json())
        assert response.is_json
        if status != 200:
            assert set(response.get_json()) == {"error", "message"}
