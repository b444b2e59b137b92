import time

import pytest

from gpustats.engine.store import SnapshotStore
from gpustats.model.host import NodeStats
from gpustats.model.device import DeviceIdentity
from gpustats.model.snapshot import DeviceStats, Snapshot
from gpustats.web.app import WebSettings, create_app


def _device():
    return DeviceStats(identity=DeviceIdentity(0, "GPU-a", "NVIDIA H100 80GB HBM3", 0,
                                               "00000000:3B:00.0", 85520809984))


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


def test_only_cpu_and_memory_parsed_as_the_kubelet_does(client, store):
    """True only when given once as ``true``; anything else is false and never a 400."""
    store.publish(Snapshot(sequence=1, taken_at=time.time(), monotonic=time.monotonic(),
                           node=NodeStats("n1", 0.0), devices=(_device(),)))
    table = {"": False, "?only_cpu_and_memory=true": True,
             "?only_cpu_and_memory=True": False, "?only_cpu_and_memory=TRUE": False,
             "?only_cpu_and_memory=1": False, "?only_cpu_and_memory=yes": False,
             "?only_cpu_and_memory=false": False, "?only_cpu_and_memory=": False,
             "?only_cpu_and_memory": False,
             "?only_cpu_and_memory=true&only_cpu_and_memory=true": False,
             "?only_cpu_and_memory=true&only_cpu_and_memory=false": False,
             "?only_cpu_and_memory=%74rue": True, "?other=1&only_cpu_and_memory=true": True}
    for query, only in table.items():
        for method in (client.get, client.post):
            resp = method("/stats/summary" + query)
            assert resp.status_code == 200, query
            assert ("accelerators" not in resp.get_json()["node"]) is only, query
    # POST form fields count, as the kubelet's parsed form does.
    resp = client.post("/stats/summary", data={"only_cpu_and_memory": "true"})
    assert "accelerators" not in resp.get_json()["node"]
    resp = client.post("/stats/summary?only_cpu_and_memory=true",
                       data={"only_cpu_and_memory": "true"})
    assert "accelerators" in resp.get_json()["node"]            # given twice: false


def test_strict_parsed_by_the_same_rule_and_rendered_once_per_snapshot(client, store):
    """``strict`` is true only when given once as ``true`` (query or POST form); its body is a
    representation of its own (ETag, memo), built once per snapshot."""
    store.publish(Snapshot(sequence=1, taken_at=time.time(), monotonic=time.monotonic(),
                           node=NodeStats("n1", 0.0), devices=(_device(),)))
    table = {"": False, "?strict=true": True, "?strict=True": False, "?strict=1": False,
             "?strict=": False, "?strict": False, "?strict=true&strict=true": False,
             "?strict=%74rue": True, "?strict=true&only_cpu_and_memory=true": True}
    for query, strict in table.items():
        for method in (client.get, client.post):
            resp = method("/stats/summary" + query)
            assert resp.status_code == 200, query
            assert ("accelerators" not in resp.get_json()["node"]) is strict, query
    assert "accelerators" not in client.post("/stats/summary",
                                             data={"strict": "true"}).get_json()["node"]
    assert "accelerators" in client.post("/stats/summary?strict=true",
                                         data={"strict": "true"}).get_json()["node"]
    answers = [client.get("/stats/summary" + q)
               for q in ("", "?strict=true", "?only_cpu_and_memory=true",
                         "?only_cpu_and_memory=true&strict=true")]
    # One tag per distinct body: strict differs from the default, and equal bytes share one.
    tags = {resp.headers["ETag"]: resp.data for resp in answers}
    assert len(tags) == len({resp.data for resp in answers}) >= 2
    first = client.get("/stats/summary?strict=true").data
    assert store.render(("summary", False, True), lambda s: b"rebuilt")[1].data == first
    tag = client.get("/stats/summary?strict=true").headers["ETag"]
    resp = client.get("/stats/summary?strict=true", headers={"If-None-Match": tag})
    assert resp.status_code == 304


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
    rendered = store.render(("summary", False, False), lambda s: b"rebuilt")[1].data
    assert rendered == first            # served from the memo, not rebuilt
    store.publish(_snap(2))
    assert store.render(("summary", False, False), lambda s: b"rebuilt")[1] == b"rebuilt"


def test_gpus_endpoint_and_openapi(client, store):
    assert client.get("/api/v1/gpus").status_code == 503
    store.publish(_snap())
    body = client.get("/api/v1/gpus").get_json()
    assert body == {"nodeName": "n1", "nvmlLoaded": False,
                    "resourceVersion": body["resourceVersion"], "gpus": []}
    doc = client.get("/openapi.json").get_json()
    assert doc["openapi"].startswith("3.")
    paths = set(doc["paths"])
    assert {"/stats/summary", "/api/v1/gpus", "/healthz", "/readyz", "/metrics"} <= paths
