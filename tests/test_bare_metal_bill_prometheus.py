"""The README's bare-metal bill, asked of a real Prometheus: scraping ``gpustats --demo
bare-metal``, its per-job and per-user queries (read from the README itself) name the demo's
Slurm job and users, each within 2 % of what the daemon's own counters billed them while
Prometheus watched."""

from __future__ import annotations

import re
import shutil
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpustats.demo.bare_metal import JOB_ID, TENANTS, USERS
from tests.support.daemon import free_port
from tests.support.demo import start_demo
from tests.support.paths import REPO_ROOT
from tests.support.prometheus import PrometheusServer

SECTION = "### Energy per job and per user this month"
BILLED = ("gpustats_tenant_gpu_joules_total", "gpustats_tenant_gpu_idle_share_joules_total")
# Enough scrapes that what Prometheus extrapolates at either end of a series (half an interval
# at most) is well under 2 % of the bill.
SCRAPES = 60


def readme_queries() -> tuple[str, str]:
    """The section's two PromQL blocks: per job, per user."""
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split(SECTION, 1)[1].split("\n### ", 1)[0]
    per_job, per_user = re.findall(r"```promql\n(.*?)\n```", section, re.S)
    return per_job, per_user


def _series(name: str, labels: dict[str, str]) -> tuple[str, frozenset]:
    """A series as both sides name it (Prometheus drops empty labels, adds job and instance)."""
    return name, frozenset((k, v) for k, v in labels.items()
                           if v and k not in ("__name__", "job", "instance"))


def first_scraped(server: PrometheusServer, at: float) -> dict[tuple[str, frozenset], float]:
    """Each billed series' value at Prometheus's first scrape of it: the energy the daemon
    counted before Prometheus saw the series, which no ``increase()`` can see."""
    return {_series(name, r["metric"]): float(r["values"][0][1])
            for name in BILLED for r in server.query(f"{name}[10m]", at=at)}


def daemon_bills(text: str, before: dict[tuple[str, frozenset], float]
                 ) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
    """kWh billed per (job ID, user) and per (UID, user) by the daemon's own counters since
    Prometheus's first scrape of each (``before``)."""
    jobs: dict[tuple[str, str], float] = {}
    users: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name not in BILLED:
                continue
            kwh = (s.value - before.get(_series(s.name, s.labels), 0.0)) / 3.6e6
            if s.labels["kind"] == "job":
                key = (s.labels["job_id"], s.labels["user"])
                jobs[key] = jobs.get(key, 0.0) + kwh
            if s.labels["uid"]:
                key = (s.labels["uid"], s.labels["user"])
                users[key] = users.get(key, 0.0) + kwh
    return jobs, users


def _answer(result: list[dict], *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(r["metric"].get(label, "") for label in labels): float(r["value"][1])
            for r in result}


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed")
def test_prometheus_answers_the_readmes_bill_per_job_and_per_user(start_daemon, tmp_path):
    per_job, per_user = readme_queries()
    port = free_port()
    # Prometheus scraping first (the daemon not up yet), so that its first scrape of the
    # daemon finds the tenants' counters near zero: increase() sees no energy counted before.
    server = PrometheusServer(tmp_path, [], scrape_interval="500ms", scrape_configs=[{
        "job_name": "gpustats", "honor_labels": True,
        "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}])
    try:
        server.wait_for('up{job="gpustats"} == 0')
        daemon = start_demo(start_daemon, tmp_path, "bare-metal", port=port)
        server.wait_for(f'sum_over_time(up{{job="gpustats"}}[10m]) >= {SCRAPES}',
                        timeout=90)
        at = time.time()
        text = daemon.get("/metrics")[1]
        jobs, users = daemon_bills(text, first_scraped(server, at))
        all_jobs, all_users = daemon_bills(text, {})
        asked_jobs = _answer(server.query(per_job, at=at), "job_id", "user")
        asked_users = _answer(server.query(per_user, at=at), "uid", "user")
    finally:
        server.stop()

    assert set(asked_jobs) == {(str(JOB_ID), "ada")} == set(jobs)
    assert set(asked_users) == {(str(t.uid), USERS[t.uid]) for t in TENANTS} == set(users)
    # Prometheus extrapolates a series' start back to zero where its first sample is small
    # (within an interval of it), so its answer lies between the bill since the first scrape
    # and the whole bill; within 2 % of either.
    for asked, since, total in ((asked_jobs, jobs, all_jobs), (asked_users, users, all_users)):
        for key, kwh in since.items():
            assert kwh > 0, key
            assert 0.98 * kwh <= asked[key] <= 1.02 * total[key], (key, asked, since, total)
            assert since[key] > 0.9 * total[key], (key, since, total)   # seen from near zero
