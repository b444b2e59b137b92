"""The serving loop: writes only where a write can happen, parses pipelined requests a few at
a time, and holds unread output within its budgets."""

from __future__ import annotations

import http.client
import socket
import threading

import pytest
from flask import Flask

from gpustats import serving
from gpustats.serving import (ALL_OUTPUT_BYTES, CONNECTION_OUTPUT_BYTES, OUTPUT_DEADLINE_SECONDS,
                              PIPELINE_DEPTH, Listeners, _Channel, _server)
from gpustats.serving_poll import poll_once


@pytest.fixture
def channel():
    """A data-port connection over a socket pair, outside any running loop."""
    server = _server(Flask("t"), "127.0.0.1", 0, threads=1, connections=8)
    ours, peer = socket.socketpair()
    conn = _Channel(server, ours, ("127.0.0.1", 1), server.adj, map={})
    yield conn
    conn.close()
    peer.close()
    server.close()


def _buffer(conn: _Channel, data: bytes) -> None:
    conn.outbufs[-1].append(data)
    conn.total_outbufs_len += len(data)


def _held_elsewhere(lock) -> threading.Event:
    """``lock`` taken by another thread until the returned event is set."""
    held, release = threading.Event(), threading.Event()

    def hold():
        with lock:
            held.set()
            release.wait(5)

    threading.Thread(target=hold, daemon=True).start()
    assert held.wait(5)
    return release


def test_nothing_buffered_is_not_writable(channel):
    assert not channel.writable()


def test_output_with_no_request_in_service_is_writable(channel):
    _buffer(channel, b"HTTP/1.1 200 OK\r\n")
    assert channel.writable()


def test_output_a_worker_is_sending_itself_is_not_writable(channel):
    """Stock waitress calls it writable: the loop woke at once, found the lock taken by the
    worker and went round again until the worker let go."""
    channel.requests = [object()]
    _buffer(channel, b"HTTP/1.1 200 OK\r\n")
    release = _held_elsewhere(channel.outbuf_lock)
    try:
        assert not channel.writable()
    finally:
        release.set()


def test_output_left_by_a_worker_that_let_go_is_writable(channel):
    channel.requests = [object()]
    _buffer(channel, b"HTTP/1.1 200 OK\r\n")
    assert channel.writable()
    assert channel.outbuf_lock.acquire(False)      # the look left the lock free
    channel.outbuf_lock.release()


def test_a_connection_to_close_is_writable_whoever_holds_the_lock(channel):
    channel.requests = [object()]
    channel.close_when_flushed = True
    release = _held_elsewhere(channel.outbuf_lock)
    try:
        assert channel.writable()
    finally:
        release.set()


def test_requests_are_answered_whole_with_few_loop_turns(monkeypatch):
    """Through the real loop: every body arrives whole, a large one too (what its worker
    could not send is sent by the loop), and the loop does not spin while workers send."""
    body = b"x" * 700
    large = b"y" * 300_000               # more than a socket takes at once
    app = Flask("t")
    app.add_url_rule("/small", "small", lambda: body)
    app.add_url_rule("/large", "large", lambda: large)
    turns = [0]

    def counting(timeout, sockets):
        turns[0] += 1
        return poll_once(timeout, sockets)

    monkeypatch.setattr(serving, "poll_once", counting)
    listeners = Listeners(app, ("127.0.0.1", 0))
    port = Listeners.port_of(listeners.data)
    thread = threading.Thread(target=listeners.run, daemon=True)
    thread.start()
    try:
        requests = 0
        connections = [http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                       for _ in range(4)]
        for _ in range(50):
            for conn in connections:
                conn.request("GET", "/small")
                assert conn.getresponse().read() == body
                requests += 1
        for conn in connections:
            conn.request("GET", "/large")
            assert conn.getresponse().read() == large
            requests += 1
            conn.close()
        # About 2 a request (its arrival, its worker's end); 4 to 5 with the spin.
        assert 0 < turns[0] < 3 * requests
    finally:
        # Closed from inside the loop's thread: with its map empty, the loop returns.
        sockets = listeners.data._map
        listeners.data.trigger.pull_trigger(lambda: [s.close() for s in list(sockets.values())])
        thread.join(10)
        listeners.data.task_dispatcher.shutdown()
    assert not thread.is_alive()


@pytest.fixture
def running():
    """A data listener with ``/n/<i>`` (a small body naming ``i``) and ``/large``, served
    by the real loop in a thread; yields (port, server)."""
    app = Flask("t")
    app.add_url_rule("/n/<int:i>", "n", lambda i: f"answer {i}".encode())
    app.add_url_rule("/large", "large", lambda: b"z" * 500_000)
    listeners = Listeners(app, ("127.0.0.1", 0))
    thread = threading.Thread(target=listeners.run, daemon=True)
    thread.start()
    yield int(Listeners.port_of(listeners.data)), listeners.data
    sockets = listeners.data._map
    listeners.data.trigger.pull_trigger(lambda: [s.close() for s in list(sockets.values())])
    thread.join(10)
    listeners.data.task_dispatcher.shutdown()


def _read_answers(sock: socket.socket, count: int) -> list[bytes]:
    """The bodies of ``count`` answers read off ``sock`` in order (each has a length)."""
    sock.settimeout(10)
    stream, bodies = b"", []
    while len(bodies) < count:
        head, sep, rest = stream.partition(b"\r\n\r\n")
        if sep:
            length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:")))
            if len(rest) >= length:
                bodies.append(rest[:length])
                stream = rest[length:]
                continue
        chunk = sock.recv(65536)
        assert chunk, f"closed after {len(bodies)} answers"
        stream += chunk
    return bodies


def test_pipelined_requests_past_the_depth_are_all_answered_in_order(running):
    """Requests past ``PIPELINE_DEPTH`` wait unparsed, and are parsed and answered in turn
    as the ones before them are served: nothing is lost or reordered."""
    port, _ = running
    count = 12 * PIPELINE_DEPTH
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"".join(f"GET /n/{i} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
                              for i in range(count)))
        assert _read_answers(sock, count) == [f"answer {i}".encode() for i in range(count)]


def test_a_connection_that_does_not_read_has_few_requests_parsed(running):
    """Hundreds of pipelined requests in one packet: the unread answers stop at the
    connection's output budget (or the budget for all), the rest is never parsed."""
    port, server = running
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        sock.sendall(b"GET /large HTTP/1.1\r\nHost: x\r\n\r\n" * 200)
        channel = None
        for _ in range(50):
            threading.Event().wait(0.05)
            channel = next(iter(server.active_channels.values()), None)
            if channel is not None and channel.held and not channel.requests:
                break
        assert channel is not None and channel.held
        assert len(channel.requests) <= PIPELINE_DEPTH
        answered = channel.total_outbufs_len // 500_000
        assert answered <= CONNECTION_OUTPUT_BYTES // 500_000 + PIPELINE_DEPTH
        # Every worker is free: another client is answered at once.
        with socket.create_connection(("127.0.0.1", port), timeout=2) as other:
            other.sendall(b"GET /n/7 HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _read_answers(other, 1) == [b"answer 7"]


def test_a_connection_over_its_budget_too_long_is_closed(channel, monkeypatch):
    now = 1000.0
    _buffer(channel, b"x" * (CONNECTION_OUTPUT_BYTES + 1))
    server = channel.server
    server._check_output_budget(channel, now)
    assert channel._fileno is not None
    server._check_output_budget(channel, now + OUTPUT_DEADLINE_SECONDS)
    assert channel._fileno is not None
    server._check_output_budget(channel, now + OUTPUT_DEADLINE_SECONDS + 0.1)
    assert channel._fileno is None and server.over_budget_closed == 1


def test_a_connection_back_under_its_budget_starts_over(channel):
    server = channel.server
    _buffer(channel, b"x" * (CONNECTION_OUTPUT_BYTES + 1))
    server._check_output_budget(channel, 0.0)
    channel.total_outbufs_len = 10
    server._check_output_budget(channel, 5.0)
    channel.total_outbufs_len = CONNECTION_OUTPUT_BYTES + 1
    server._check_output_budget(channel, OUTPUT_DEADLINE_SECONDS + 1.0)
    assert channel._fileno is not None


@pytest.mark.parametrize("pending, all_output, waiting, feedable", [
    (0, 0, 0, True),
    (0, ALL_OUTPUT_BYTES * 4, 0, True),         # nothing of its own: a probe still answers
    (1000, ALL_OUTPUT_BYTES, 0, False),         # all connections over budget
    (CONNECTION_OUTPUT_BYTES, 0, 0, False),     # its own budget
    (0, 0, PIPELINE_DEPTH, False),              # deep enough already
])
def test_held_requests_are_parsed_only_with_room(channel, pending, all_output, waiting,
                                                 feedable):
    channel.total_outbufs_len = pending
    channel.requests = [object()] * waiting
    assert channel.feedable(all_output) is feedable
