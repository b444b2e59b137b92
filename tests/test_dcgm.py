"""dcgm-exporter activity: parser properties and a real HTTP server on loopback."""

import http.server
import logging
import threading
import time

import pytest
from hypothesis import given, strategies as st

from gpustats.sources.dcgm import DcgmExporterClient, parse_dcgm_activity

GOOD = """# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.
# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7",Hostname="n"} 0.600000
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a",GPU_I_PROFILE="1g.10gb",GPU_I_ID="8",Hostname="n"} NaN
# HELP DCGM_FI_PROF_SM_ACTIVE The ratio of cycles an SM has at least 1 warp assigned.
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a",GPU_I_ID="8"} 0.2
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a",GPU_I_ID="7"} 0.9
DCGM_FI_PROF_SM_ACTIVE{gpu="1",UUID="GPU-b"} 0.5
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} 40
"""


def test_parse_primary_then_fallback():
    assert parse_dcgm_activity(GOOD) == {("GPU-a", 7): 0.6, ("GPU-a", 8): 0.2}


def test_parse_garbage_raises_value_error():
    with pytest.raises(ValueError):
        parse_dcgm_activity("DCGM_FI_PROF_GR_ENGINE_ACTIVE{UUID=\"x\" 0.5\n{{{{ garbage")


@given(st.text())
def test_parser_never_raises_other_than_value_error(text):
    try:
        result = parse_dcgm_activity(text)
    except ValueError:
        return
    assert all(0.0 <= v <= 1.0 for v in result.values())


class Exporter:
    def __init__(self):
        self.body = GOOD.encode()
        self.delay = 0.0
        self.requests = 0
        handler = self._handler()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    def _handler(self):
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                exporter.requests += 1
                time.sleep(exporter.delay)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(exporter.body)

            def log_message(self, *args):
                pass

        return Handler

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def exporter():
    e = Exporter()
    yield e
    e.close()


def test_fetch_and_cache(exporter):
    client = DcgmExporterClient(exporter.url, cache_seconds=60)
    assert client.activity() == {("GPU-a", 7): 0.6, ("GPU-a", 8): 0.2}
    client.activity()
    assert exporter.requests == 1


def test_garbage_slow_and_down_give_none_and_one_line(exporter, caplog):
    exporter.body = b"\x00\x01 this is not prometheus {{{"
    client = DcgmExporterClient(exporter.url, cache_seconds=0, timeout_seconds=0.3)
    with caplog.at_level(logging.WARNING):
        assert client.activity() is None
        assert client.activity() is None
    assert len([r for r in caplog.records if "garbage" in r.getMessage()]) == 1
    exporter.body = GOOD.encode()
    exporter.delay = 1.0
    started = time.monotonic()
    assert client.activity() is None
    assert time.monotonic() - started < 0.9
    exporter.delay = 0.0
    time.sleep(1.0)
    down = DcgmExporterClient("http://127.0.0.1:9/metrics", cache_seconds=0, timeout_seconds=0.3)
    with caplog.at_level(logging.WARNING):
        assert down.activity() is None
        assert down.activity() is None
    assert len([r for r in caplog.records if "unreachable" in r.getMessage()]) == 1


def test_single_flight(exporter):
    exporter.delay = 0.3
    client = DcgmExporterClient(exporter.url, cache_seconds=0.0)
    threads = [threading.Thread(target=client.activity) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert exporter.requests == 1
