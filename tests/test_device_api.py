"""The device API: GET one GPU, versioned lists, and watches (NVSentinel's GetGpu, ListGpus,
WatchGpus, as Kubernetes watches): the event log's diff, versions and 410; the watch streams
off the request workers; end to end on the simulator, an XID as a MODIFIED event, resuming
from a version, and probe latency beside 100 open watches."""

from __future__ import annotations

import http.client
import json
import socket
import statistics
import threading
import time
from dataclasses import replace

import pytest

from bench.watches import PATHS, close_all, open_watches, probe
from gpustats import watch_streams
from gpustats.engine.store import SnapshotStore
from gpustats.export.gpu_events import Expired, GpuEventLog, GpuWatch, added_lines
from gpustats.model.health import Condition, DeviceHealth, Saturation
from gpustats.serving import Listeners
from gpustats.watch_streams import WatchStreams
from gpustats.web.app import WebSettings, create_app
from gpustats.web.gpus import START_WATCH
from gpustats.web.openapi import openapi_document
from tests.support.fakehost import write_scenario
from tests.support.gpus import GPU_A, GPU_B, device
from tests.support.snapshots import A, B, M, T, sample_snapshot
from tests.support.waiting import poll, wait_until


# ------------------------------------------------------------------ the event log


def _health(status: str = "True", reason: str = "NVMLReady", *extra: Condition) -> DeviceHealth:
    return DeviceHealth((Condition("NVMLReady", status, reason, "m", T, "nvml"), *extra))


def _with(snapshot, sequence: int, uuid: str, **fields):
    devices = tuple(replace(d, **fields) if d.identity.uuid == uuid else d
                    for d in snapshot.devices)
    return replace(snapshot, sequence=sequence, devices=devices)


def _events(lines) -> list[dict]:
    return [json.loads(line) for line in lines]


def _kinds(lines) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["uuid"]) for e in _events(lines)]


def test_the_first_snapshot_adds_every_gpu_and_versions_them():
    log = GpuEventLog(first_revision=100)
    versions = log.observe(sample_snapshot(1))
    assert versions.revision == 103 and dict(versions.objects) == {A: 101, B: 102, M: 103}
    lines, reached = log.replay(100)
    assert reached == 103 and _kinds(lines) == [("ADDED", A), ("ADDED", B), ("ADDED", M)]
    objects = [e["object"] for e in _events(lines)]
    assert [o["metadata"] for o in objects] == [
        {"name": u.lower(), "resourceVersion": str(v)} for u, v in ((A, 101), (B, 102), (M, 103))]
    assert log.observe(sample_snapshot(1)) is versions          # once per snapshot


def test_saturation_moves_no_version_but_health_and_new_condition_types_do():
    log = GpuEventLog(first_revision=0)
    first = sample_snapshot(1)
    log.observe(first)
    busier = _with(first, 2, A, saturation=Saturation(window_seconds=60, sm_active_avg=0.99))
    assert log.observe(busier).revision == 3                       # no event
    unhealthy = _with(busier, 3, A, health=_health("False", "XidError"))
    versions = log.observe(unhealthy)
    assert versions.revision == 4 and versions.objects[A] == 4 and versions.objects[B] == 2
    lines, _ = log.replay(3)
    (event,) = _events(lines)
    assert event["type"] == "MODIFIED" and event["object"]["health"]["healthy"] is False
    # A condition type this module never heard of is part of the object all the same.
    novel = Condition("SomeVendorHealth", "True", "Fine", "m", T, "vendor")
    noted = _with(unhealthy, 4, A, health=_health("False", "XidError", novel))
    assert log.observe(noted).revision == 5
    assert log.observe(_with(noted, 5, B, lost=False)).revision == 6       # lost changed


def test_a_gpu_gone_from_the_snapshot_is_deleted_with_its_last_object():
    log = GpuEventLog(first_revision=0)
    first = sample_snapshot(1)
    log.observe(first)
    gone = replace(first, sequence=2, devices=first.devices[:2])
    versions = log.observe(gone)
    assert versions.revision == 4 and M not in versions.objects
    (event,) = _events(log.replay(3)[0])
    assert event["type"] == "DELETED" and event["object"]["uuid"] == M
    assert event["object"]["metadata"]["resourceVersion"] == "4"
    assert _kinds(log.replay(4)[0]) == []
    assert log.observe(replace(first, sequence=3)).revision == 5     # back: ADDED again
    assert _kinds(log.replay(4)[0]) == [("ADDED", M)]


def test_versions_too_old_or_not_of_this_run_are_expired():
    log = GpuEventLog(capacity=4, first_revision=0)
    snapshot = sample_snapshot(1)
    log.observe(snapshot)                                          # 1..3
    for sequence in range(2, 5):                                    # 4..6
        status = "False" if sequence % 2 else "True"
        snapshot = _with(snapshot, sequence, A, health=_health(status))
        log.observe(snapshot)
    assert log.revision == 6
    assert [e["object"]["metadata"]["resourceVersion"] for e in _events(log.replay(2)[0])] == [
        "3", "4", "5", "6"]
    for stale in (0, 1, 7, 10**15):
        with pytest.raises(Expired):
            log.replay(stale)
    assert log.replay(6) == ([], 6)


def test_the_log_keeps_a_bounded_number_of_bytes():
    log = GpuEventLog(max_bytes=600, first_revision=0)
    log.observe(sample_snapshot(1))                     # lines of 677, 424 and 243 bytes
    with pytest.raises(Expired):
        log.replay(1)                                   # A's and B's ADDED are gone
    kept, reached = log.replay(2)
    assert reached == 3 and _kinds(kept) == [("ADDED", M)]


def test_an_older_snapshot_rendered_late_gets_its_own_versions():
    log = GpuEventLog(first_revision=0)
    first = sample_snapshot(1)
    log.observe(first)
    log.observe(_with(first, 3, A, health=_health("False")))
    assert log.observe(replace(first, sequence=2)).revision == 3      # the newest at or before
    assert log.observe(replace(first, sequence=0)).revision == 0      # before all: replay all


def test_listeners_hear_of_snapshots_that_made_events_only():
    log = GpuEventLog(first_revision=0)
    heard = []
    log.listen(lambda: heard.append(log.revision))
    first = sample_snapshot(1)
    log.observe(first)
    log.observe(replace(first, sequence=2))
    log.observe(_with(first, 3, A, health=_health("False")))
    assert heard == [3, 4]


def test_a_watch_takes_its_first_lines_then_what_follows_then_an_error_when_compacted():
    log = GpuEventLog(capacity=2, first_revision=0)
    first = sample_snapshot(1)
    versions = log.observe(first)
    watch = GpuWatch(log, added_lines(first, versions), versions.revision, ends_at=0.0)
    lines, over = watch.take()
    assert _kinds(lines) == [("ADDED", A), ("ADDED", B), ("ADDED", M)] and not over
    assert watch.take() == ([], False)
    log.observe(_with(first, 2, A, health=_health("False")))
    lines, over = watch.take()
    assert _kinds(lines) == [("MODIFIED", A)] and not over
    assert json.loads(watch.bookmark()) == {"type": "BOOKMARK", "object": {
        "metadata": {"resourceVersion": "4"}}}
    for sequence in range(3, 6):                                    # 3 events past a cap of 2
        log.observe(_with(first, sequence, A, health=_health("True" if sequence % 2 else "x")))
    lines, over = watch.take()
    assert over and json.loads(lines[-1])["type"] == "ERROR"
    assert json.loads(lines[-1])["object"]["code"] == 410


# ------------------------------------------------------------------ the views


@pytest.fixture
def api():
    store = SnapshotStore()
    log = GpuEventLog(first_revision=1000)
    app = create_app(store, WebSettings(5.0), gpu_events=log)
    return store, log, app.test_client()


def test_list_and_one_gpu_by_uuid_or_name(api):
    store, _, client = api
    assert client.get("/api/v1/gpus").status_code == 503
    assert client.get(f"/api/v1/gpus/{A}").status_code == 503
    store.publish(sample_snapshot(1))
    body = client.get("/api/v1/gpus").get_json()
    assert body["resourceVersion"] == "1003"
    items = {g["uuid"]: g for g in body["gpus"]}
    assert items[A]["metadata"] == {"name": A.lower(), "resourceVersion": "1001"}
    assert "saturation" in items[A]                                 # the items as they were
    for name in (A, A.lower()):
        one = client.get(f"/api/v1/gpus/{name}")
        assert one.status_code == 200 and one.get_json() == items[A]
        assert one.headers["ETag"]
    missing = client.get("/api/v1/gpus/GPU-nope")
    assert missing.status_code == 404
    assert missing.get_json()["error"] == "not_found"
    assert client.get(f"/api/v1/gpus/{A.upper()}x").status_code == 404


def test_the_list_and_objects_fit_the_openapi_document(api):
    jsonschema_rs = pytest.importorskip("jsonschema_rs")
    store, _, client = api
    store.publish(sample_snapshot(1))
    components = openapi_document()["components"]["schemas"]
    body = client.get("/api/v1/gpus").get_json()
    jsonschema_rs.validate(components["GpuList"], body)
    jsonschema_rs.validate(components["Gpu"], client.get(f"/api/v1/gpus/{B}").get_json())
    for line in client.get("/api/v1/gpus?watch=true").data.splitlines():
        jsonschema_rs.validate(components["GpuWatchEvent"], json.loads(line))
    listing = openapi_document()["paths"]["/api/v1/gpus"]["get"]
    assert {p["name"] for p in listing["x-watch"]["parameters"]} == {
        "watch", "resourceVersion", "timeoutSeconds"}
    assert {"410", "429", "400"} <= set(listing["x-watch"]["responses"])
    assert "404" in openapi_document()["paths"]["/api/v1/gpus/{id}"]["get"]["responses"]


def test_a_watch_without_streams_answers_its_first_events(api):
    store, _, client = api
    store.publish(sample_snapshot(1))
    whole = client.get("/api/v1/gpus?watch=true")
    assert whole.status_code == 200 and whole.content_type == "application/x-ndjson"
    assert _kinds(whole.data.splitlines()) == [("ADDED", A), ("ADDED", B), ("ADDED", M)]
    assert client.get("/api/v1/gpus?watch=1&resourceVersion=1003").data == b""
    assert _kinds(client.get("/api/v1/gpus?watch=true&resourceVersion=1002").data
                  .splitlines()) == [("ADDED", M)]
    for old in ("1", "999", "5000"):
        gone = client.get(f"/api/v1/gpus?watch=true&resourceVersion={old}")
        assert gone.status_code == 410 and gone.get_json()["error"] == "expired"
    for bad in ("watch=yes", "watch=true&resourceVersion=x", "watch=true&timeoutSeconds=0",
                "watch=true&timeoutSeconds=601", "watch=true&watch=true"):
        answer = client.get(f"/api/v1/gpus?{bad}")
        assert answer.status_code == 400 and answer.get_json()["error"] == "bad_request", bad


def test_a_watch_with_no_slot_free_is_answered_429(api):
    store, _, client = api
    store.publish(sample_snapshot(1))
    answer = client.get("/api/v1/gpus?watch=true", environ_base={START_WATCH: lambda s: False})
    assert answer.status_code == 429 and answer.headers["Retry-After"]
    begun = []
    answer = client.get("/api/v1/gpus?watch=true", environ_base={START_WATCH: begun.append})
    assert answer.status_code == 429 and len(begun) == 1            # append returns None


# ------------------------------------------------------------------ the watch streams


class _Stream:
    def __init__(self, lines=(), ends_in: float = 60.0):
        self.pending = list(lines)
        self.ends_at = time.monotonic() + ends_in

    def take(self):
        lines, self.pending = self.pending, []
        return lines, False

    def bookmark(self):
        return b'{"type":"BOOKMARK"}\n'


def _read_until(sock: socket.socket, marker: bytes, timeout: float = 5.0) -> bytes:
    sock.settimeout(timeout)
    got = b""
    while marker not in got:
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


@pytest.fixture
def streams():
    made = WatchStreams(limit=2)
    made.start()
    yield made
    made.close()


def _adopt(streams, stream, chunked=True):
    ours, peer = socket.socketpair()
    assert streams.reserve(ours)
    streams.adopt(ours, stream, b"HTTP/1.1 200 OK\r\n\r\n", chunked)
    return peer


def _until(predicate, timeout: float = 5.0) -> None:
    assert wait_until(predicate, timeout), "not in time"


def test_streams_write_chunks_as_events_come_and_end_with_the_last_chunk(streams):
    stream = _Stream([b"a\n", b"bc\n"], ends_in=0.5)
    peer = _adopt(streams, stream)
    assert _read_until(peer, b"bc\n\r\n") == b"HTTP/1.1 200 OK\r\n\r\n5\r\na\nbc\n\r\n"
    stream.pending = [b"later\n"]
    streams.notify()
    assert _read_until(peer, b"later\n\r\n") == b"6\r\nlater\n\r\n"
    assert _read_until(peer, b"never") == b"0\r\n\r\n"             # then closed: EOF
    _until(lambda: streams.open_watches == 0)
    plain = _adopt(streams, _Stream([b"x\n"], ends_in=0.2), chunked=False)
    assert _read_until(plain, b"never") == b"HTTP/1.1 200 OK\r\n\r\nx\n"


def test_the_slots_are_capped_and_given_back_when_the_peer_closes(streams):
    peers = [_adopt(streams, _Stream()) for _ in range(2)]
    ours, _ = socket.socketpair()
    assert not streams.reserve(ours)
    peers[0].close()
    _until(lambda: streams.open_watches == 1)
    assert streams.reserve(ours)
    streams.release(ours)


def test_a_watcher_that_reads_nothing_is_closed_past_its_budget(streams, monkeypatch):
    monkeypatch.setattr(watch_streams, "WATCH_BUFFER_BYTES", 256 * 1024)
    stream = _Stream()
    peer = _adopt(streams, stream)
    for _ in range(64):                   # far past the socket buffers and the budget
        if streams.open_watches == 0:
            break
        stream.pending = [b"z" * 16 * 1024 + b"\n"] * 4
        streams.notify()
        time.sleep(0.01)                  # measures: paces the writes past the budget
    _until(lambda: streams.open_watches == 0)
    assert streams.closed_slow == 1
    peer.close()


def test_a_watcher_that_stops_reading_is_closed_after_the_stall_deadline(streams,
                                                                         monkeypatch):
    monkeypatch.setattr(watch_streams, "WATCH_STALL_SECONDS", 0.3)
    stream = _Stream([b"y" * 1024 * 1024 + b"\n"])   # more than the socket pair holds
    peer = _adopt(streams, stream)
    _until(lambda: streams.open_watches == 0, timeout=5.0)
    assert streams.closed_slow == 1
    peer.close()


def test_an_idle_watch_gets_bookmarks(streams, monkeypatch):
    monkeypatch.setattr(watch_streams, "BOOKMARK_SECONDS", 0.2)
    peer = _adopt(streams, _Stream())
    got = _read_until(peer, b"BOOKMARK")
    assert got.endswith(b'{"type":"BOOKMARK"}\n') or b"BOOKMARK" in got
    peer.close()


# ------------------------------------------------------------------ in process: the real loop


@pytest.fixture
def served():
    """The app on a real data listener with watch streams of 3 slots; yields
    (port, store, log, listeners)."""
    store, log = SnapshotStore(), GpuEventLog(first_revision=0)
    store.publish(sample_snapshot(1))
    watches = WatchStreams(limit=3)
    log.listen(watches.notify)
    listeners = Listeners(create_app(store, WebSettings(5.0), gpu_events=log),
                          ("127.0.0.1", 0), watches=watches)
    thread = threading.Thread(target=listeners.run, daemon=True)
    thread.start()
    yield int(Listeners.port_of(listeners.data)), store, log, listeners
    sockets = listeners.data._map
    listeners.data.trigger.pull_trigger(lambda: [s.close() for s in list(sockets.values())])
    thread.join(10)
    listeners.data.task_dispatcher.shutdown()
    watches.close()


def test_watches_leave_the_workers_and_the_data_ports_connections(served):
    port, store, log, listeners = served
    socks = open_watches(port, 3)
    try:
        assert listeners.watches.open_watches == 3
        # Out of the data server's connections: none of the three is still there.
        assert not listeners.data.active_channels
        extra = socket.create_connection(("127.0.0.1", port), timeout=5)
        extra.sendall(b"GET /api/v1/gpus?watch=true HTTP/1.1\r\nHost: x\r\n\r\n")
        refused = _read_until(extra, b"}")
        assert b" 429 " in refused.split(b"\r\n")[0] and b"too_many_watches" in refused
        extra.close()
        store.publish(_with(sample_snapshot(2), 2, A, health=_health("False", "XidError")))
        log.observe(store.latest())
        for sock in socks:
            got = _read_until(sock, b'"MODIFIED"')
            assert b'"MODIFIED"' in got and b"XidError" in got
        for _ in range(8):                                           # the workers are free
            assert probe(port, "/openapi.json") < 1.0
    finally:
        close_all(socks)
    _until(lambda: listeners.watches.open_watches == 0)


def test_what_is_pipelined_after_a_watch_is_not_served(served):
    port, *_ = served
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(b"GET /api/v1/gpus?watch=true&timeoutSeconds=1 HTTP/1.1\r\nHost: x\r\n\r\n"
                 b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    got = _read_until(sock, b"never", timeout=5)
    sock.close()
    assert got.count(b"HTTP/1.1 ") == 1 and b"Connection: close" in got
    assert got.endswith(b"0\r\n\r\n") and b'"status":"ok"' not in got


# ------------------------------------------------------------------ end to end


class _Watch:
    """One watch over HTTP/1.1 (http.client undoes the chunking): its events, with their
    arrival times, read by a thread until the stream ends."""

    def __init__(self, port: int, query: str, timeout: float = 30.0):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.conn.request("GET", f"/api/v1/gpus?{query}")
        self.response = self.conn.getresponse()
        self.events: list[tuple[float, dict]] = []
        self.ended = threading.Event()
        if self.response.status == 200:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for line in self.response:
                self.events.append((time.monotonic(), json.loads(line)))
        finally:
            self.ended.set()

    def wait_for(self, predicate, timeout: float = 10.0) -> tuple[float, dict]:
        found = poll(lambda: next(((at, event) for at, event in list(self.events)
                                   if predicate(event)), None), timeout=timeout)
        if found is not None:
            return found
        raise AssertionError(f"no such event in {timeout} s: {self.events}")

    def close(self) -> None:
        self.conn.close()


def _scenario(xid: bool = False) -> dict:
    scenario = {"devices": [device(GPU_A), device(GPU_B, minor=1, events_supported=False)]}
    if xid:
        scenario["xid_events"] = [{"device": GPU_A, "xid": 79, "after_seconds": 0}]
    return scenario


def _rv(event: dict) -> int:
    return int(event["object"]["metadata"]["resourceVersion"])


INTERVAL = 0.5


def test_an_xid_is_a_modified_event_within_two_ticks_and_watches_resume(start_daemon,
                                                                        tmp_path):
    path = tmp_path / "s.yaml"
    write_scenario(path, _scenario())
    daemon = start_daemon("--simulate", str(path), "--housekeeping-interval", str(INTERVAL),
                          "--pod-resources-socket", "", "--runtime-socket", "")
    daemon.wait_ready()
    watch = _Watch(daemon.port, "watch=true&timeoutSeconds=60")
    try:
        assert watch.response.getheader("Content-Type") == "application/x-ndjson"
        watch.wait_for(lambda e: e["type"] == "ADDED" and e["object"]["uuid"] == GPU_B)
        assert [e["type"] for _, e in watch.events[:2]] == ["ADDED", "ADDED"]
        daemon.wait_ticks(2)                      # the first ticks' changes settled
        listed = daemon.get("/api/v1/gpus")[1]
        before = int(listed["resourceVersion"])
        written = time.monotonic()
        write_scenario(path, _scenario(xid=True))
        at, event = watch.wait_for(
            lambda e: e["type"] == "MODIFIED" and e["object"]["uuid"] == GPU_A
            and not e["object"]["health"]["healthy"])
        # The scenario is re-read at a tick's NVML calls (every 0.2 s at most), the XID
        # reaches the health thread at once, and the next tick publishes it.
        assert at - written < 2 * INTERVAL + 0.2 + 1.0, at - written
        condition = event["object"]["health"]["conditions"][0]
        assert (condition["status"], condition["reason"]) == ("False", "XidError")
        assert "79" in condition["message"]
        modified = _rv(event)
        assert modified > before
    finally:
        watch.close()

    # From the list's version before the XID: only what came after it, the XID included.
    resumed = _Watch(daemon.port, f"watch=true&resourceVersion={before}&timeoutSeconds=1")
    assert resumed.ended.wait(10)
    replayed = [e for _, e in resumed.events]
    assert replayed and all(_rv(e) > before for e in replayed)
    assert "ADDED" not in {e["type"] for e in replayed}
    assert any(_rv(e) == modified for e in replayed)
    resumed.close()
    # From the MODIFIED event's version: nothing before it; the stream ends on time, whole.
    began = time.monotonic()
    later = _Watch(daemon.port, f"watch=true&resourceVersion={modified}&timeoutSeconds=1")
    assert later.ended.wait(10)
    assert 0.8 < time.monotonic() - began < 4.0
    assert all(_rv(e) > modified for _, e in later.events)
    later.close()
    # A version not kept (older than this run's first) is 410 Gone, in JSON.
    for stale in ("1", str(int(listed["resourceVersion"]) + 10**9)):
        gone = _Watch(daemon.port, f"watch=true&resourceVersion={stale}")
        assert gone.response.status == 410
        assert json.loads(gone.response.read())["error"] == "expired"
        gone.close()


def test_a_gpu_nothing_changes_on_keeps_the_version_it_was_added_with(start_daemon, tmp_path):
    """The first snapshot already has every condition (the health thread's event registration
    included): no GPU is MODIFIED on the ticks after start when nothing about it changed."""
    path = tmp_path / "s.yaml"
    write_scenario(path, _scenario())
    daemon = start_daemon("--simulate", str(path), "--housekeeping-interval", str(INTERVAL),
                          "--pod-resources-socket", "", "--runtime-socket", "")
    daemon.wait_ready()
    daemon.wait_ticks(4)
    listed = daemon.get("/api/v1/gpus")[1]
    versions = sorted(int(gpu["metadata"]["resourceVersion"]) for gpu in listed["gpus"])
    assert len(versions) == 2 and {"EccHealth", "Ready"} <= {
        c["type"] for c in listed["gpus"][0]["health"]["conditions"]}
    # ADDED events are numbered one after the other; nothing came after them.
    assert versions == [versions[0], versions[0] + 1] == [
        int(listed["resourceVersion"]) - 1, int(listed["resourceVersion"])], listed


def _latency_ratios(port: int, rounds: int, per_block: int) -> dict[str, float]:
    """Per path, the median over rounds of (median with 100 watches / median with none), the
    two blocks of a round back to back, their order alternating by round. Both blocks follow
    the same work: 100 watches opened (and, for the block without, closed at once)."""
    ratios: dict[str, list[float]] = {p: [] for p in PATHS}
    for _ in range(5):
        for p in PATHS:
            probe(port, p)
    for round_ in range(rounds):
        blocks = {}
        for with_watches in ((False, True) if round_ % 2 == 0 else (True, False)):
            socks = open_watches(port, 100)
            if not with_watches:
                close_all(socks)
                socks = []
                time.sleep(0.05)        # measures: the closes settle before the timed block
            try:
                samples: dict[str, list[float]] = {p: [] for p in PATHS}
                for _ in range(per_block):
                    for p in PATHS:
                        samples[p].append(probe(port, p))
            finally:
                close_all(socks)
            blocks[with_watches] = {p: statistics.median(v) for p, v in samples.items()}
            time.sleep(0.05)            # measures: the closes settle before the next block
        for p in PATHS:
            ratios[p].append(blocks[True][p] / blocks[False][p])
    return {p: statistics.median(v) for p, v in ratios.items()}


def test_100_open_watches_leave_probes_and_scrapes_as_fast(start_daemon, tmp_path):
    path = tmp_path / "s.yaml"
    write_scenario(path, _scenario())
    daemon = start_daemon("--simulate", str(path), "--housekeeping-interval", "1",
                          "--pod-resources-socket", "", "--runtime-socket", "")
    daemon.wait_ready()
    ratios = _latency_ratios(daemon.port, rounds=12, per_block=25)
    if max(ratios.values()) > 1.10:      # a loaded machine: measured again, once
        ratios = _latency_ratios(daemon.port, rounds=12, per_block=25)
    assert max(ratios.values()) <= 1.10, ratios
