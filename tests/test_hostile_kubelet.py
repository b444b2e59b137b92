"""A hostile kubelet against the real daemon: its pod-resources ``List`` answers 2,000 pods
holding 50 ``GPU-…::N`` devices each, with 200-character names (5.8 MB, under the 8 MiB
receive cap). The reply is refused (pod_resources failing, ``reply_over_limits``) before it
costs memory, every endpoint answers meanwhile, and RSS is back where it was once the kubelet
answers normally again. Before the reply was read with its counts bounded, RSS grew from ~59
to ~190 MB and stayed 14-19 MB above its start (bench/hostile_kubelet.py).

The daemon fetches pod-resources every 15 s (its cache), so the test waits for two fetches
after the first: about 35 s.
"""

from __future__ import annotations

import time

import psutil
import pytest

from bench.hostile_kubelet import HostileKubelet, RssPeak, hostile_reply, normal_reply
from tests.support.daemon import timed_get
from tests.support.fakehost import build, metric_value
from tests.support.gpus import GPU_A as GPU, device
from tests.support.simulated import start_simulated

pytest.importorskip("grpc")

ARGS = ("--housekeeping-interval", "0.2", "--runtime-socket", "", "--idle-power-watts", "100")
ENDPOINTS = ("/healthz", "/readyz", "/stats/summary", "/metrics")
FETCH_SECONDS = 20.0            # the daemon's 15 s pod-resources cache, and some room
MAX_GROWTH_MB = 30.0
MAX_LEFT_MB = 10.0


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def failing(metrics: str) -> float | None:
    return metric_value(metrics, "gpustats_source_failing", source="pod_resources")


def assert_endpoints_answer_within_a_second(port: int) -> None:
    for path in ENDPOINTS:
        status, seconds = timed_get(port, path, timeout=1.0)
        assert status == 200 and seconds < 1.0, (path, status, seconds)


def test_hostile_kubelet_reply_is_refused_with_memory_bounded(start_daemon, tmp_path):
    hostile = hostile_reply()
    assert 5_000_000 < len(hostile) < 8 << 20
    with HostileKubelet(tmp_path / "kubelet.sock", normal_reply([GPU])) as kubelet:
        daemon, _ = start_simulated(
            start_daemon, tmp_path, {"devices": [device()],
                                     "processes": [{"pid": 101, "device": GPU}]},
            build(tmp_path / "host", {101: (1, 1)}), *ARGS,
            "--pod-resources-socket", kubelet.socket_path)
        pid = daemon.proc.pid
        assert kubelet.wait_for_calls(1, FETCH_SECONDS)
        daemon.wait_ticks(5)                               # a few ticks on the normal listing
        start = rss_mb(pid)

        kubelet.reply = hostile
        with RssPeak(pid) as during:
            assert kubelet.wait_for_calls(2, FETCH_SECONDS)
            daemon.wait_for(lambda m: failing(m) == 1, timeout=5, path="/metrics")
            for _ in range(10):                            # ten ticks while it is refused
                assert_endpoints_answer_within_a_second(daemon.port)
                time.sleep(0.2)                            # measures: a tick apart
        status = daemon.get("/api/v1/status")[1]
        state = next(s for s in status["sources"] if s["name"] == "pod_resources")
        assert state["lastErrorReason"] == "reply_over_limits", state

        kubelet.reply = normal_reply([GPU])
        assert kubelet.wait_for_calls(3, FETCH_SECONDS)
        daemon.wait_for(lambda m: failing(m) == 0, timeout=5, path="/metrics")
        daemon.wait_ticks(3)
        end = rss_mb(pid)

    log = daemon.log()
    assert log.count("pod_resources failing (reply_over_limits)") == 1, log
    assert "more than 10,000 GPU and claim devices" in log
    assert during.peak - start <= MAX_GROWTH_MB, (start, during.peak)
    assert end - start <= MAX_LEFT_MB, (start, end)
