"""One conditional-response path: every body built from a snapshot (and the page's assets, the
OpenAPI document) gets the same ETag, 304, gzip, Vary and Cache-Control handling."""

import dataclasses
import gzip
import http.client

import pytest
from flask import Flask, request

from bench.scenarios import node_scenario, write_scenario
from gpustats.engine.history import History
from gpustats.engine.store import SnapshotStore
from gpustats.export.prometheus import MetricsBodies
from gpustats.web import conditional
from gpustats.web.app import WebSettings, create_app
from gpustats.web.conditional import GZIP_MIN_BYTES, SHARED_MIN_BYTES, Body, respond
from gpustats.web.history import history_blueprint
from gpustats.web.ui import ui_blueprint
from tests.support.snapshots import sample_snapshot

# Every path whose body is built once and served through the one path.
PATHS = ("/stats/summary", "/stats/summary?only_cpu_and_memory=true", "/api/v1/gpus",
         "/api/v1/status", "/metrics", "/api/v1/history", "/", "/assets/gpustats.js",
         "/openapi.json")


@pytest.fixture
def client():
    store = SnapshotStore()
    history = History(60)
    snapshot = sample_snapshot(7)
    store.publish(snapshot)
    history.record(snapshot)
    app = create_app(store, WebSettings(5.0, history_seconds=60),
                     metrics_bodies=MetricsBodies(store),
                     extra_blueprints=(history_blueprint(history),
                                       ui_blueprint(store, housekeeping_interval=5.0,
                                                    history_seconds=60)))
    return app.test_client()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("coding", ["identity", "gzip"])
def test_every_body_revalidates_the_same_way(client, path, coding):
    first = client.get(path, headers={"Accept-Encoding": coding})
    assert first.status_code == 200
    tag = first.headers["ETag"]
    assert tag.startswith('"') and tag.endswith('"')
    assert "Accept-Encoding" in [v.strip() for v in first.headers["Vary"].split(",")]
    assert first.headers["Cache-Control"]
    for header in (tag, f"W/{tag}", f'"other", W/{tag}', "*"):
        again = client.get(path, headers={"Accept-Encoding": coding, "If-None-Match": header})
        assert again.status_code == 304, header
        assert again.data == b"" and again.headers["ETag"] == tag
    assert client.get(path, headers={"Accept-Encoding": coding,
                                     "If-None-Match": '"other"'}).status_code == 200


@pytest.mark.parametrize("path", PATHS)
def test_gzip_only_from_the_same_size_everywhere(client, path):
    plain = client.get(path).data
    packed = client.get(path, headers={"Accept-Encoding": "gzip"})
    if len(plain) < GZIP_MIN_BYTES:
        assert "Content-Encoding" not in packed.headers and packed.data == plain
    else:
        assert packed.headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(packed.data) == plain


@pytest.mark.parametrize("path", ["/api/v1/gpus", "/api/v1/status"])
def test_a_small_snapshot_body_is_not_compressed(path):
    store = SnapshotStore()
    store.publish(dataclasses.replace(sample_snapshot(7), devices=()))
    client = create_app(store, WebSettings(5.0)).test_client()
    small = client.get(path, headers={"Accept-Encoding": "gzip"})
    assert small.status_code == 200 and len(small.data) < GZIP_MIN_BYTES
    assert "Content-Encoding" not in small.headers


def _app_serving(body: Body) -> Flask:
    app = Flask("t")
    app.add_url_rule("/b", "b", lambda: respond(request, body))
    return app


class _RecordingWrapper:
    """Stands in for the server's ``wsgi.file_wrapper``: records what it was handed."""

    def __init__(self, file, block_size=8192):
        self.file = file

    def __iter__(self):
        return iter((self.file.read(),))


def test_a_large_body_goes_to_the_server_as_a_file_not_a_copy():
    data = b"x" * SHARED_MIN_BYTES
    app = _app_serving(Body(data, "text/plain"))
    environ = {"wsgi.file_wrapper": _RecordingWrapper}
    with app.test_request_context("/b", environ_overrides=environ):
        response = app.full_dispatch_request()
    assert isinstance(response.response, _RecordingWrapper)
    assert response.headers["Content-Length"] == str(len(data))
    assert b"".join(response.response) == data


def test_head_of_a_large_body_has_its_length_and_no_body():
    app = _app_serving(Body(b"y" * (2 * SHARED_MIN_BYTES), "text/plain"))
    head = app.test_client().head("/b")
    assert head.status_code == 200 and head.data == b""
    assert head.headers["Content-Length"] == str(2 * SHARED_MIN_BYTES)


def test_each_body_is_compressed_once(monkeypatch):
    made = []
    real = conditional.compress
    monkeypatch.setattr(conditional, "compress", lambda data: made.append(1) or real(data))
    client = _app_serving(Body(b"z" * 5000, "text/plain")).test_client()
    for _ in range(3):
        assert gzip.decompress(client.get("/b", headers={"Accept-Encoding": "gzip"}).data) \
            == b"z" * 5000
    assert made == [1]


def test_real_daemon_sends_a_large_body_whole_on_a_kept_connection(start_daemon, tmp_path):
    """Through waitress: a body above SHARED_MIN_BYTES (/metrics of 8 GPUs, 64 processes) is
    sent whole, identity and gzip, GET and HEAD, on one keep-alive connection."""
    scenario = write_scenario(tmp_path / "node.yaml", node_scenario(8, 64))
    daemon = start_daemon("--simulate", scenario)
    daemon.wait_ready()
    conn = http.client.HTTPConnection("127.0.0.1", int(daemon.base.rsplit(":", 1)[1]),
                                      timeout=10)
    try:
        for method, coding in (("GET", "identity"), ("GET", "gzip"), ("HEAD", "identity"),
                               ("GET", "identity")):
            conn.request(method, "/metrics", headers={"Accept-Encoding": coding})
            resp = conn.getresponse()
            body = resp.read()
            assert resp.status == 200
            length = int(resp.getheader("Content-Length"))
            if method == "HEAD":
                assert body == b"" and length > SHARED_MIN_BYTES
                continue
            assert len(body) == length
            if coding == "gzip":
                assert resp.getheader("Content-Encoding") == "gzip"
                body = gzip.decompress(body)
            assert len(body) > SHARED_MIN_BYTES and b"gpu" in body
    finally:
        conn.close()


def test_header_parses_are_remembered_for_short_values_only():
    calls = []
    lookup = conditional.memoized_per_header(lambda value: calls.append(value) or len(value))
    for _ in range(3):
        assert lookup("gzip") == 4
    long_value = "x" * (conditional.MEMO_MAX_CHARS + 1)
    for _ in range(2):
        assert lookup(long_value) == len(long_value)
    assert calls == ["gzip", long_value, long_value]
    assert conditional.accepts_gzip("identity;q=0.500, " * 16 + "gzip") is True  # 306 chars
