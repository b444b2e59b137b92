"""Bodies on the wire: gzip when accepted (compressed once per snapshot and variant), ETag per
body, 304 on a matching If-None-Match."""

import dataclasses
import gzip
import threading

import pytest

from gpustats.engine.store import SnapshotStore
from gpustats.export.prometheus import MetricsBodies
from gpustats.web import conditional
from gpustats.web.app import WebSettings, create_app
from gpustats.web.conditional import accepts_gzip
from tests.support.snapshots import sample_snapshot

OPENMETRICS = "application/openmetrics-text; version=1.0.0"
# (path, Accept) for every body served from the snapshot
VARIANTS = [
    ("/metrics", None),
    ("/metrics", OPENMETRICS),
    ("/stats/summary", None),
    ("/stats/summary?only_cpu_and_memory=true", None),
    ("/api/v1/gpus", None),
]


@pytest.fixture
def store():
    s = SnapshotStore()
    s.publish(sample_snapshot(7))
    return s


@pytest.fixture
def client(store):
    app = create_app(store, WebSettings(housekeeping_interval=5.0),
                     metrics_bodies=MetricsBodies(store))
    return app.test_client()


@pytest.fixture
def compressions(monkeypatch):
    made = []
    real = conditional.compress

    def counting(body):
        made.append(len(body))
        return real(body)

    monkeypatch.setattr(conditional, "compress", counting)
    return made


def _get(client, path, accept=None, encoding=None, **headers):
    if accept:
        headers["Accept"] = accept
    if encoding:
        headers["Accept-Encoding"] = encoding
    return client.get(path, headers=headers)


@pytest.mark.parametrize("header, expected", [
    ("gzip", True), ("GZIP", True), ("x-gzip", True), ("gzip, deflate, br", True),
    ("br;q=1.0, gzip;q=0.8, *;q=0.1", True), ("*", True), ("gzip;q=0", False),
    ("gzip;q=0.000", False), ("*;q=0", False), ("*, gzip;q=0", False), ("gzip;q=0, *", False),
    ("identity", False), ("deflate, br", False), ("", False), (None, False),
    ("gzip;q=abc", False), ("gzip;q=2", False), ("gzip ; q=0.5", True), (" , ,gzip", True),
])
def test_accept_encoding(header, expected):
    assert accepts_gzip(header) is expected


@pytest.mark.parametrize("path, accept", VARIANTS)
def test_gzip_and_identity_decode_to_the_same_body(client, path, accept):
    plain = _get(client, path, accept)
    packed = _get(client, path, accept, "gzip, deflate")
    assert plain.status_code == packed.status_code == 200
    assert "Content-Encoding" not in plain.headers
    assert packed.headers["Content-Encoding"] == "gzip"
    assert packed.headers["Content-Type"] == plain.headers["Content-Type"]
    assert gzip.decompress(packed.data) == plain.data
    assert len(packed.data) < len(plain.data)
    assert int(packed.headers["Content-Length"]) == len(packed.data)
    for response in (plain, packed):
        assert "Accept-Encoding" in response.headers["Vary"]
    if path == "/metrics":
        assert "Accept" in [v.strip() for v in plain.headers["Vary"].split(",")]
    assert plain.headers["ETag"] != packed.headers["ETag"]     # one tag per representation


def test_each_variant_is_compressed_once_per_snapshot(client, store, compressions):
    for _ in range(3):
        for path, accept in VARIANTS:
            assert _get(client, path, accept, "gzip").status_code == 200
            _get(client, path, accept)                         # identity compresses nothing
    assert len(compressions) == len(VARIANTS)
    store.publish(sample_snapshot(8))
    for path, accept in VARIANTS:
        _get(client, path, accept, "gzip")
        _get(client, path, accept, "gzip")
    assert len(compressions) == 2 * len(VARIANTS)


def test_concurrent_gzip_requests_compress_once(store, compressions):
    app = create_app(store, WebSettings(housekeeping_interval=5.0),
                     metrics_bodies=MetricsBodies(store))
    start = threading.Barrier(8)
    codes = []

    def worker():
        client = app.test_client()
        start.wait(timeout=10)
        for _ in range(5):
            codes.append(_get(client, "/stats/summary", encoding="gzip").status_code)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert codes == [200] * 40
    assert len(compressions) == 1


@pytest.mark.parametrize("path, accept", VARIANTS)
@pytest.mark.parametrize("encoding", [None, "gzip"])
def test_if_none_match_gives_304_until_the_body_changes(client, store, path, accept, encoding):
    first = _get(client, path, accept, encoding)
    tag = first.headers["ETag"]
    assert tag.startswith('"') and tag.endswith('"')
    again = _get(client, path, accept, encoding, **{"If-None-Match": tag})
    assert again.status_code == 304 and again.data == b""
    assert again.headers["ETag"] == tag and "Accept-Encoding" in again.headers["Vary"]
    weak = _get(client, path, accept, encoding, **{"If-None-Match": f'"other", W/{tag}'})
    assert weak.status_code == 304
    assert _get(client, path, accept, encoding, **{"If-None-Match": "*"}).status_code == 304
    later = sample_snapshot(8, energy_scale=2.0)                # every body differs
    object.__setattr__(later, "node", dataclasses.replace(later.node, node_name="node-2"))
    store.publish(later)
    fresh = _get(client, path, accept, encoding, **{"If-None-Match": tag})
    assert fresh.status_code == 200 and fresh.headers["ETag"] != tag
    assert fresh.data


def test_etag_of_one_coding_does_not_match_the_other(client):
    packed = _get(client, "/stats/summary", encoding="gzip")
    plain = _get(client, "/stats/summary", **{"If-None-Match": packed.headers["ETag"]})
    assert plain.status_code == 200 and "Content-Encoding" not in plain.headers


def test_etag_names_the_bytes_not_the_sequence():
    """One snapshot sequence with other bytes (a restart) gets another tag; equal bytes one."""
    a, b = sample_snapshot(7), sample_snapshot(7, energy_scale=2.0)
    tags = []
    for snapshot in (a, b, a):
        store = SnapshotStore()
        store.publish(snapshot)
        client = create_app(store, WebSettings(housekeeping_interval=5.0)).test_client()
        tags.append(_get(client, "/stats/summary").headers["ETag"])
    assert tags[0] != tags[1] and tags[0] == tags[2]


def test_post_ignores_if_none_match_and_head_has_no_body(client):
    tag = _get(client, "/stats/summary").headers["ETag"]
    post = client.post("/stats/summary", headers={"If-None-Match": tag})
    assert post.status_code == 200 and post.get_json()["node"]
    head = client.head("/stats/summary", headers={"Accept-Encoding": "gzip"})
    assert head.status_code == 200 and head.data == b""
    assert head.headers["Content-Encoding"] == "gzip"


def test_not_ready_is_a_json_error_whatever_the_encoding():
    app = create_app(SnapshotStore(), WebSettings(housekeeping_interval=5.0),
                     metrics_bodies=MetricsBodies(SnapshotStore()))
    client = app.test_client()
    resp = _get(client, "/stats/summary", encoding="gzip", **{"If-None-Match": "*"})
    assert resp.status_code == 503 and resp.get_json()["error"] == "not_ready"
    assert "Content-Encoding" not in resp.headers


def test_real_daemon_serves_gzip_and_304(start_daemon):
    """Through waitress: a gzip scrape decodes to the identity body of the same snapshot."""
    import urllib.error
    import urllib.request

    from tests.support.paths import REPO_ROOT

    daemon = start_daemon("--simulate", str(REPO_ROOT / "examples" / "two-gpus.yaml"),
                          "--housekeeping-interval", "2")
    daemon.wait_ready()

    def fetch(path, **headers):
        request = urllib.request.Request(daemon.base + path, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5) as resp:
                return resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()

    for path in ("/metrics", "/stats/summary", "/api/v1/gpus"):
        for _ in range(10):                      # both reads within one snapshot
            _, plain_headers, plain = fetch(path)
            status, headers, packed = fetch(path, **{"Accept-Encoding": "gzip"})
            if headers["ETag"] == plain_headers["ETag"][:-1] + '.gz"':
                break
        assert status == 200 and headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(packed) == plain
        status, headers, body = fetch(path, **{"Accept-Encoding": "gzip",
                                               "If-None-Match": headers["ETag"]})
        assert status in (304, 200)              # 200 only if a tick landed in between
        if status == 304:
            assert body == b""
