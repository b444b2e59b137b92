import time

import pytest

from gpustats.engine.store import SnapshotStore
from gpustats.model.host import NodeStats
from gpustats.model.snapshot import Snapshot
from gpustats.web.app import WebSettings, create_app


def _snap(seq=1, age=0.0):
    return Snapshot(sequence=seq, taken_at=time.time(), monotonic=time.monotonic() - age,
                    node=NodeStats("n1", 0.0))


@pytest.fixture
def store():
    return SnapshotStore()


@pytest.fixture
def client(store):
    return create_app(store, WebSettings(housekeeping_interval=5.0)).test_client()


def test_not_ready_before_first_tick(client):
    resp = client.get("/readyz")
    assert resp.status_code == 503
    assert resp.get_json()["error"] == "not_ready"
    assert client.get("/stats/summary").status_code == 503
    assert client.get("/healthz").status_code == 200


def test_ready_and_stale(client, store):
    store.publish(_snap())
    assert client.get("/readyz").status_code == 200
    store.publish(_snap(2, age=16.0))   # older than 3 intervals
    resp = client.get("/readyz")
    assert resp.status_code == 503 and resp.get_json()["error"] == "stale"


def test_summary_get_and_post(client, store):
    store.publish(_snap())
    for method in (client.get, client.post):
        resp = method("/stats/summary")
        assert resp.status_code == 200 and resp.mimetype == "application/json"
        assert resp.get_json()["node"]["nodeName"] == "n1"
        assert resp.get_json()["pods"] == []


def test_only_cpu_and_memory_values(client, store):
    store.publish(_snap())
    assert client.get("/stats/summary?only_cpu_and_memory=true").status_code == 200
    assert client.get("/stats/summary?only_cpu_and_memory=false").status_code == 200
    for bad in ("yes", "1", "true&only_cpu_and_memory=true"):
        resp = client.get("/stats/summary?only_cpu_and_memory=" + bad)
        assert resp.status_code == 400
        body = resp.get_json()
        assert body["error"] == "bad_request" and "only_cpu_and_memory" in body["message"]


def test_unknown_path_and_wrong_method_are_json(client):
    resp = client.get("/nope")
    assert resp.status_code == 404 and resp.get_json()["error"] == "not_found"
    resp = client.delete("/stats/summary")
    assert resp.status_code == 405 and resp.get_json()["error"] == "method_not_allowed"
    assert "GET" in resp.headers["Allow"]


def test_summary_body_reused_per_snapshot(store):
    app = create_app(store, WebSettings(5.0))
    store.publish(_snap())
    client = app.test_client()
    first = client.get("/stats/summary").data
    rendered = store.render(("summary", False), lambda s: b"rebuilt")[1]
    assert rendered == first            # served from the memo, not rebuilt
    store.publish(_snap(2))
    assert store.render(("summary", False), lambda s: b"rebuilt")[1] == b"rebuilt"


def test_gpus_endpoint_and_openapi(client, store):
    assert client.get("/api/v1/gpus").status_code == 503
    store.publish(_snap())
    body = client.get("/api/v1/gpus").get_json()
    assert body == {"nodeName": "n1", "nvmlLoaded": False, "gpus": []}
    doc = client.get("/openapi.json").get_json()
    assert doc["openapi"].startswith("3.")
    assert {"/stats/summary", "/api/v1/gpus", "/healthz", "/readyz", "/metrics"} <= set(doc["paths"])
