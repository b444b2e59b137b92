"""A hostile dcgm-exporter against the real daemon on loopback.

The exporter serves a 30 MB /metrics body fast, within the fetch deadline: series of the
family gpustats reads, every one with labels of its own (so the family filter alone does not
bound the parse), or series of a family it skips. While it serves, the tick stays short, the
probes and the data answer within 1 s, and ``dcgm_exporter`` is marked failing with its reason.
"""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.hostile_exporter import HostileExporter
from tests.support.daemon import timed_get
from tests.support.fakehost import build
from tests.support.gpus import GPU_A as GPU, device
from tests.support.simulated import start_simulated

INTERVAL = 1.0
PATHS = ("/healthz", "/readyz", "/stats/summary", "/metrics")
EXPECTED_REASON = {"activity": "too_many_series", "other": "garbage"}


def mig_scenario() -> dict:
    return {"devices": [device(mig_instances=[
        {"gpu_instance_id": 7, "profile": "3g.40gb", "uuid": "MIG-aaaa-7"}])],
        "processes": [{"pid": 101, "device": GPU, "gpu_instance_id": 7}]}


def honest_body() -> bytes:
    return f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{UUID="{GPU}",GPU_I_ID="7"}} 0.5\n'.encode()


def dcgm_source(daemon) -> dict:
    status, body = daemon.get("/api/v1/status")
    assert status == 200, body
    return {s["name"]: s for s in body["sources"]}["dcgm_exporter"]


def failing_gauge(daemon) -> float | None:
    """``gpustats_source_failing{source="dcgm_exporter"}`` on /metrics; ``None`` when absent."""
    for family in text_string_to_metric_families(daemon.get("/metrics")[1]):
        for sample in family.samples:
            if sample.name == "gpustats_source_failing" \
                    and sample.labels.get("source") == "dcgm_exporter":
                return sample.value
    return None


def check_while_serving(daemon, seconds: float) -> list[float]:
    """Every quarter second for ``seconds``: each path answers 200 within 1 s, and the last
    tick took under a second. Returns the tick durations seen."""
    ticks = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for path in PATHS:
            status, took = timed_get(daemon.port, path, timeout=1.0)
            assert status == 200 and took < 1.0, (path, status, took, daemon.log()[-2000:])
        tick = daemon.get("/api/v1/status")[1]["tickDurationSeconds"]
        assert tick < INTERVAL, (tick, daemon.log()[-2000:])
        ticks.append(tick)
        time.sleep(0.25)                 # measures: a probe every 0.25 s over the span
    return ticks


@pytest.mark.parametrize("kind", ["activity", "other"])
def test_a_fast_30_mb_exporter_body_costs_a_short_tick_and_a_failing_source(
        start_daemon, tmp_path, kind):
    stop = threading.Event()
    exporter = HostileExporter(stop, kind, honest=honest_body()).start()
    try:
        cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
        daemon, _ = start_simulated(start_daemon, tmp_path, mig_scenario(), (cgroup, proc),
                                    "--housekeeping-interval", str(INTERVAL),
                                    "--pod-resources-socket", "", "--runtime-socket", "",
                                    "--dcgm-exporter-url", exporter.url)
        assert daemon.wait_for(lambda _: dcgm_source(daemon)["state"] == "ok", timeout=10)
        exporter.arm()
        failing_by = time.monotonic() + 8.0           # the 2 s cache, then a scrape
        while dcgm_source(daemon)["state"] != "failing":
            assert time.monotonic() < failing_by, (dcgm_source(daemon), daemon.log())
            check_while_serving(daemon, 0.5)
        assert exporter.hostile_requests >= 1
        ticks = check_while_serving(daemon, 3.0)
        assert ticks and max(ticks) < INTERVAL
        assert dcgm_source(daemon)["lastErrorReason"] == EXPECTED_REASON[kind]
        assert failing_gauge(daemon) == 1
        assert daemon.log().count(f"dcgm_exporter failing ({EXPECTED_REASON[kind]})") == 1
    finally:
        exporter.close()
