"""The serving loop asks to write to a connection only when a write there can happen."""

from __future__ import annotations

import http.client
import socket
import threading

import pytest
from flask import Flask

from gpustats.serving import Listeners, _Channel, _server
from waitress import wasyncore


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
    poll2 = wasyncore.poll2

    def counting(timeout=0.0, map=None):
        turns[0] += 1
        return poll2(timeout, map)

    monkeypatch.setattr(wasyncore, "poll2", counting)
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
        assert turns[0] < 3 * requests
    finally:
        # Closed from inside the loop's thread: with its map empty, the loop returns.
        sockets = listeners.data._map
        listeners.data.trigger.pull_trigger(lambda: [s.close() for s in list(sockets.values())])
        thread.join(10)
        listeners.data.task_dispatcher.shutdown()
    assert not thread.is_alive()
