"""The page at ``/``, its assets and ``/api/v1/history`` through the Flask app (no browser)."""

import gzip
import re
from dataclasses import replace

import pytest
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.test import Client

from gpustats.engine.history import History
from gpustats.engine.store import SnapshotStore
from gpustats.web.app import WebSettings, create_app
from gpustats.web.history import history_blueprint
from gpustats.web.ui import ui_blueprint
from tests.support.snapshots import A, C1, T, sample_snapshot

DURATION = 120


def app_for(store, history, duration=DURATION):
    settings = WebSettings(5.0, history_seconds=duration if history is not None else 0)
    return create_app(store, settings, extra_blueprints=(
        history_blueprint(history),
        ui_blueprint(store, housekeeping_interval=5.0, history_seconds=duration)))


def tick(store, history, seconds, snapshot=None):
    snap = replace(snapshot or sample_snapshot(), sequence=int(seconds) + 1,
                   monotonic=1.0 + seconds, taken_at=T + seconds)
    store.publish(snap)
    if history is not None:
        history.record(snap)
    return snap


@pytest.fixture
def node():
    store, history = SnapshotStore(), History(DURATION)
    return store, history, app_for(store, history).test_client()


# ------------------------------------------------------------------ /api/v1/history

def test_history_not_ready_then_shape(node):
    store, history, client = node
    resp = client.get("/api/v1/history")
    assert resp.status_code == 503 and resp.get_json()["error"] == "not_ready"
    for s in range(0, 50, 5):
        tick(store, history, s)
    body = client.get("/api/v1/history").get_json()
    assert body["seconds"] == DURATION
    assert [g["id"] for g in body["gpus"]] == [A, "GPU-bbbb", "GPU-mmmm"]
    assert all(len(g["points"]) == 10 for g in body["gpus"])
    trainer = next(c for c in body["containers"] if c["id"] == C1)
    assert trainer["pod"] == "trainer-0" and len(trainer["points"]) == 10


@pytest.mark.parametrize("seconds, points", [(1, 1), (5, 2), (12, 3), (DURATION, 10)])
def test_history_seconds_bounds_the_points(node, seconds, points):
    store, history, client = node
    for s in range(0, 50, 5):
        tick(store, history, s)
    body = client.get(f"/api/v1/history?seconds={seconds}").get_json()
    assert body["seconds"] == seconds
    assert len(body["gpus"][0]["points"]) == points


@pytest.mark.parametrize("query", ["seconds=0", "seconds=-1", "seconds=abc", "seconds=1.5",
                                   f"seconds={DURATION + 1}", "seconds=", "seconds=1&seconds=2",
                                   "seconds=%201", "seconds=99999999999", "seconds=\u0661"])
def test_history_bad_queries_are_400_json(node, query):
    store, history, client = node
    tick(store, history, 0)
    resp = client.get("/api/v1/history?" + query)
    assert resp.status_code == 400
    body = resp.get_json()
    assert body["error"] == "bad_request" and "seconds" in body["message"]
    assert str(DURATION) in body["message"]


def test_history_off_is_404_and_not_in_the_document():
    store = SnapshotStore()
    client = app_for(store, None, duration=0).test_client()
    tick(store, None, 0)
    resp = client.get("/api/v1/history")
    assert resp.status_code == 404 and "history is off" in resp.get_json()["message"]
    assert "/api/v1/history" not in client.get("/openapi.json").get_json()["paths"]
    assert client.get("/").status_code == 200


def test_history_in_the_openapi_document_with_its_bound(node):
    _store, _history, client = node
    doc = client.get("/openapi.json").get_json()
    param = doc["paths"]["/api/v1/history"]["get"]["parameters"][0]
    assert param["name"] == "seconds" and param["schema"]["maximum"] == DURATION
    assert {"/", "/assets/{name}"} <= set(doc["paths"])


def test_history_rendered_once_per_tick_and_revalidated(node, monkeypatch):
    store, history, client = node
    tick(store, history, 0)
    calls = []
    real = history.window
    monkeypatch.setattr(history, "window", lambda s=None: calls.append(s) or real(s))
    first = client.get("/api/v1/history?seconds=10")
    again = client.get("/api/v1/history?seconds=10")
    assert first.data == again.data and calls == [10]
    etag = first.headers["ETag"]
    assert client.get("/api/v1/history?seconds=10",
                      headers={"If-None-Match": etag}).status_code == 304
    tick(store, history, 5)
    fresh = client.get("/api/v1/history?seconds=10", headers={"If-None-Match": etag})
    assert fresh.status_code == 200 and fresh.headers["ETag"] != etag and calls == [10, 10]


def test_history_gzip_when_accepted(node):
    store, history, client = node
    for s in range(0, 50, 5):
        tick(store, history, s)
    plain = client.get("/api/v1/history")
    zipped = client.get("/api/v1/history", headers={"Accept-Encoding": "gzip"})
    assert zipped.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(zipped.data) == plain.data
    assert len(zipped.data) < len(plain.data) / 4
    assert zipped.headers["ETag"] != plain.headers["ETag"]
    assert "Accept-Encoding" in zipped.headers["Vary"]


# ------------------------------------------------------------------ the page

def test_page_before_the_first_tick_is_503_html(node):
    _store, _history, client = node
    resp = client.get("/")
    assert resp.status_code == 503 and resp.mimetype == "text/html"
    assert resp.headers["Retry-After"] == "2"


def test_page_shows_every_gpu_and_pod_without_javascript(node):
    store, history, client = node
    tick(store, history, 0)
    resp = client.get("/")
    assert resp.status_code == 200 and resp.mimetype == "text/html"
    html = resp.get_data(as_text=True)
    assert html.count('class="model"><bdi>NVIDIA H100 80GB HBM3</bdi><') == 3
    assert "trainer-0" in html and ">ml<" in html and ">trainer<" in html
    assert "GPU lost" in html                                   # the lost GPU says so
    assert "2.0 / 79.6 GiB" in html and "310 W / 700 W" in html
    assert "GI 7 · 3g.40gb" in html                             # the MIG sidecar's instance
    assert C1[:12] not in html                                  # named: no ID shown
    assert "333333333333" in html                               # unnamed: its short ID
    assert 'data-history-seconds="120"' in html and 'data-interval="5"' in html


def test_page_urls_are_relative_and_nothing_is_fetched_elsewhere(node):
    store, history, client = node
    tick(store, history, 0)
    html = client.get("/").get_data(as_text=True)
    urls = re.findall(r'(?:href|src)="([^"]*)"', html)
    assert urls and all(not u.startswith(("/", "http:", "https:")) for u in urls
                        if not u.startswith("data:"))
    script = client.get("/assets/gpustats.js").get_data(as_text=True)
    assert re.findall(r'fetch\("([^"]+)"', script) == ["./"]
    assert '"api/v1/history"' in script and "http" not in script.replace(
        "http://www.w3.org/2000/svg", "")
    policy = client.get("/").headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy


def test_page_works_behind_a_path_prefix(node):
    store, history, client = node
    tick(store, history, 0)
    app = client.application
    prefixed = Client(DispatcherMiddleware(lambda e, s: s("404 Not Found", []) or [b""],
                                           {"/gpu": app}))
    page = prefixed.get("/gpu/")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    urls = re.findall(r'(?:href|src)="((?:assets|api|stats|openapi)[^"]*)"', html)
    assert len(urls) == 6
    for url in urls:
        assert prefixed.get("/gpu/" + url).status_code == 200, url


def test_page_escapes_names(node):
    store, history, client = node
    snap = sample_snapshot()
    evil = replace(snap.pods[0], name='<script>alert("x")</script>', namespace="<b>ns</b>")
    tick(store, history, 0, replace(snap, pods=(evil,)))
    html = client.get("/").get_data(as_text=True)
    assert "<script>alert" not in html and "&lt;script&gt;alert" in html
    assert "<b>ns</b>" not in html


def test_page_memoized_per_snapshot_with_etag(node):
    store, history, client = node
    tick(store, history, 0)
    first = client.get("/")
    etag = first.headers["ETag"]
    assert client.get("/", headers={"If-None-Match": etag}).status_code == 304
    assert first.headers["Cache-Control"] == "no-cache"
    tick(store, history, 5)
    assert client.get("/", headers={"If-None-Match": etag}).status_code == 200


def test_no_gpu_node_says_so(node):
    store, history, client = node
    snap = sample_snapshot()
    tick(store, history, 0, replace(snap, devices=(), pods=(), containers=(), processes=(),
                                   status=replace(snap.status, gpus_on_pci_bus=0,
                                                  nvml_loaded=False)))
    html = client.get("/").get_data(as_text=True)
    assert "No NVIDIA GPU on this node" in html and "No tenant uses a GPU." in html


@pytest.mark.parametrize("name, mimetype", [("gpustats.js", "text/javascript"),
                                            ("gpustats.css", "text/css")])
def test_assets_cached_by_etag_and_gzip(node, name, mimetype):
    _store, _history, client = node
    resp = client.get(f"/assets/{name}")
    assert resp.status_code == 200 and resp.mimetype == mimetype
    assert "max-age" in resp.headers["Cache-Control"]
    assert client.get(f"/assets/{name}",
                      headers={"If-None-Match": resp.headers["ETag"]}).status_code == 304
    zipped = client.get(f"/assets/{name}", headers={"Accept-Encoding": "gzip"})
    assert gzip.decompress(zipped.data) == resp.data


def test_unknown_asset_is_404_json(node):
    _store, _history, client = node
    for path in ("/assets/nope.js", "/assets/..%2fapp.py", "/assets/"):
        resp = client.get(path)
        assert resp.status_code == 404 and resp.get_json()["error"] == "not_found"


def test_odd_spans_are_rendered_but_not_kept(node):
    store, history, client = node
    tick(store, history, 0)
    from gpustats.web import history as web_history
    for seconds in range(1, 30):
        assert client.get(f"/api/v1/history?seconds={seconds}").status_code == 200
    assert client.get("/api/v1/history").status_code == 200       # the whole window: kept
    rendered = [c.cell_contents for c in
                client.application.view_functions["history.history_view"].__closure__
                if isinstance(c.cell_contents, web_history._Rendered)][0]
    assert len(rendered._bodies) == web_history.KEPT_PER_TICK + 1


def test_page_revalidates_like_snapshot_bodies(node):
    """Weak comparison, a tag per content coding, GET and HEAD only: as /stats/summary does."""
    store, history, client = node
    tick(store, history, 0)
    plain = client.get("/").headers["ETag"]
    zipped = client.get("/", headers={"Accept-Encoding": "gzip"}).headers["ETag"]
    assert plain != zipped and zipped.endswith('.gz"')
    assert client.get("/", headers={"If-None-Match": f'"x", W/{plain}'}).status_code == 304
    assert client.head("/", headers={"If-None-Match": plain}).status_code == 304
    assert client.get("/", headers={"If-None-Match": zipped}).status_code == 200
    assert client.get("/", headers={"If-None-Match": zipped,
                                    "Accept-Encoding": "gzip"}).status_code == 304


def test_page_shows_tenants_of_every_kind_and_not_the_ended(node):
    """Pods, a Docker container, a service on two MIG instances, a user's sessions, a Slurm
    job and a process: in the GPU cards and in the tenant table, with their kind; the pod and
    the service that ended (kept for their counters) nowhere."""
    from gpustats.export.page import page_view
    from tests.support.tenant_snapshot import tenant_snapshot

    store, history, client = node
    snapshot = tenant_snapshot()
    page = page_view(snapshot)
    table = [(r.kind, r.tenant, r.namespace, r.gpus, r.power, r.energy) for r in page.tenants]
    assert table == [
        ("pod", "trainer-0", "ml", "0", "100 W", "1.00 kJ"),
        ("job", "job 4242", "–", "1", "7.0 W", "70.0 J"),
        ("session", "alice", "–", "0", "6.0 W", "60.0 J"),
        ("service", "ollama.service", "–", "1", "5.0 W", "50.0 J"),
        ("container", "jupyter", "–", "0", "4.0 W", "40.0 J"),
        ("pod", "u2", "–", "1", "2.0 W", "20.0 J"),
        ("process", "python3", "–", "0", "1.5 W", "15.0 J")]
    assert [r.tenant_is_id for r in page.tenants] == [False] * 5 + [True, False]
    assert dict(page.totals)["tenants on GPUs"] == "7"
    cards = {g.uuid: [(r.kind, r.tenant, r.container, r.instance) for r in g.containers]
             for g in page.gpus}
    assert sorted(cards["GPU-aaaa"]) == [
        ("container", "jupyter", "–", ""), ("pod", "trainer-0", "trainer", ""),
        ("process", "python3", "–", ""), ("session", "alice", "–", "")]
    assert sorted(cards["GPU-mmmm"]) == [
        ("job", "job 4242", "–", "GI 8 · 3g.40gb"),
        ("pod", "u2", "222222222222", "GI 7 · 3g.40gb"),
        ("service", "ollama.service", "–", "GI 7 · 3g.40gb"),
        ("service", "ollama.service", "–", "GI 8 · 3g.40gb")]
    # The charts colour a tenant outside pods by the key its history series has.
    service = next(r for r in page.tenants if r.kind == "service")
    assert service.pod_key == "container:service:ollama.service"

    tick(store, history, 0, snapshot)
    html = client.get("/").get_data(as_text=True)
    for name in ("ollama.service", "alice", "job 4242", "python3", "jupyter", "trainer-0"):
        assert f"<bdi>{name}</bdi>" in html, name
    assert "old-0" not in html and "old.service" not in html and ">old<" not in html
    assert "Energy per tenant" in html
