"""Slow and smuggling HTTP peers against the real daemon on loopback.

Sockets that send a request a byte at a time must give their slot back within the request
deadlines, and, beyond the connection limit, must not keep probes and scrapes out; a request
framed by both Content-Length and Transfer-Encoding is refused and nothing after it served.
"""

from __future__ import annotations

import json
import resource
import socket
import threading
import time

import pytest

from bench.attackers import TricklingSockets, read_until_closed, replies
from gpustats.fdlimit import HEALTH_CONNECTIONS
from gpustats.serving import (BODY_DEADLINE_SECONDS, CLEANUP_SECONDS,
                              HEADER_DEADLINE_SECONDS)
from tests.support.daemon import timed_get
from tests.support.hostile import start

# A trickled request is answered at the first clean-up pass after its deadline.
SLACK_SECONDS = CLEANUP_SECONDS + 1.5


def probe_every_half_second(port: int, seconds: float) -> list[float]:
    """Times ``/healthz`` on fresh connections (1 s timeout, as a kubelet); raises on a miss."""
    took = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        status, elapsed = timed_get(port, "/healthz", timeout=1.0)
        assert status == 200
        took.append(elapsed)
        time.sleep(0.5)                  # measures: a probe every half second, as a kubelet
    return took


def test_health_listener_answers_beside_100_trickling_sockets(start_daemon, tmp_path):
    daemon = start(start_daemon, tmp_path, None, None, "--health-listen", "127.0.0.1:0")[0]
    health = daemon.health_port
    stop = threading.Event()
    trickle = TricklingSockets(health, stop, count=100, every=0.5)
    assert trickle.count > HEALTH_CONNECTIONS
    trickle.thread.start()
    try:
        time.sleep(3.0)             # measures: 3 s of trickling: every slot taken, the rest queued
        took = probe_every_half_second(health, 9.0)  # past the header deadline, twice
        assert max(took) < 1.0
        assert trickle.reopened > 0                # the server closed trickling sockets
    finally:
        stop.set()
        trickle.thread.join(10)


def test_data_port_answers_beside_more_trickling_sockets_than_its_limit(start_daemon,
                                                                        tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2048
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"open-file hard limit {hard} < {want}")
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    daemon, _, _ = start(start_daemon, tmp_path)
    stop = threading.Event()
    trickle = TricklingSockets(daemon.port, stop, count=1100, every=1.0)  # limit: 1,024
    trickle.thread.start()
    try:
        time.sleep(4.0)                                # measures: 4 s of trickling
        took = probe_every_half_second(daemon.port, 8.0)
        assert max(took) < 1.0
        assert timed_get(daemon.port, "/stats/summary", timeout=1.0)[0] == 200
    finally:
        stop.set()
        trickle.thread.join(15)
    assert daemon.proc.poll() is None


def _trickle_until_closed(port: int, head: bytes, tail: bytes, every: float,
                          limit: float) -> tuple[float, bytes]:
    """Sends ``head`` at once, then ``tail`` a byte every ``every`` s until the server closes
    the connection; (seconds from the first byte to the close, what the server sent)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    began = time.monotonic()
    sock.sendall(head)
    reply = b""
    sock.settimeout(every)
    try:
        for i in range(len(tail)):
            if time.monotonic() - began > limit:
                break
            try:
                sock.send(tail[i:i + 1])
            except OSError:
                break
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                break
            reply += chunk
            if not chunk or b"\r\n\r\n" in reply:
                break
        reply += read_until_closed(sock, 2.0)
    finally:
        sock.close()
    return time.monotonic() - began, reply


def _json_body(reply: bytes) -> dict:
    return json.loads(reply.split(b"\r\n\r\n", 1)[1])


def test_trickled_headers_are_answered_408_and_closed_at_the_deadline(start_daemon, tmp_path):
    daemon, _, _ = start(start_daemon, tmp_path)
    seconds, reply = _trickle_until_closed(
        daemon.port, b"G", b"ET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 200, 0.5,
        HEADER_DEADLINE_SECONDS + SLACK_SECONDS + 3)
    assert replies(reply) == [408], reply[:300]
    assert HEADER_DEADLINE_SECONDS - 0.5 < seconds < HEADER_DEADLINE_SECONDS + SLACK_SECONDS
    assert b"connection: close" in reply.lower()
    assert _json_body(reply)["error"] == "request_timeout"
    assert timed_get(daemon.port, "/healthz")[0] == 200


def test_trickled_body_is_answered_408_and_closed_at_the_deadline(start_daemon, tmp_path):
    daemon, _, _ = start(start_daemon, tmp_path)
    seconds, reply = _trickle_until_closed(
        daemon.port, b"POST /stats/summary HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n",
        b"{" * 1000, 0.5, BODY_DEADLINE_SECONDS + SLACK_SECONDS + 3)
    assert replies(reply) == [408], reply[:300]
    assert BODY_DEADLINE_SECONDS - 0.5 < seconds < BODY_DEADLINE_SECONDS + SLACK_SECONDS
    body = _json_body(reply)
    assert body["error"] == "request_timeout" and "body" in body["message"]


SMUGGLED = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.parametrize("head", [
    b"POST /stats/summary HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n",
    b"POST /stats/summary HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
    b"Content-Length: 40\r\n\r\n",
    b"POST /stats/summary HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n"
    b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
], ids=["cl-then-te", "te-then-cl", "http1.0-te"])
@pytest.mark.parametrize("split", [False, True], ids=["one-packet", "smuggled-later"])
def test_request_framed_twice_is_refused_and_nothing_after_it_served(start_daemon, tmp_path,
                                                                     head, split):
    daemon, _, _ = start(start_daemon, tmp_path)
    sock = socket.create_connection(("127.0.0.1", daemon.port), timeout=5)
    try:
        if split:
            sock.sendall(head + b"0\r\n\r\n")
            time.sleep(0.3)                   # measures: the second part comes apart
            try:
                sock.sendall(SMUGGLED)
            except OSError:
                pass                               # already closed by the server: fine
        else:
            sock.sendall(head + b"0\r\n\r\n" + SMUGGLED)
        reply = read_until_closed(sock, 5.0)
    finally:
        sock.close()
    assert replies(reply) == [400], reply
    assert b"connection: close" in reply.lower()
    body = _json_body(reply)
    assert body["error"] == "bad_request"
    assert "Transfer-Encoding" in body["message"]
    assert timed_get(daemon.port, "/healthz")[0] == 200


def test_chunked_request_alone_is_still_served(start_daemon, tmp_path):
    daemon, _, _ = start(start_daemon, tmp_path)
    sock = socket.create_connection(("127.0.0.1", daemon.port), timeout=5)
    try:
        sock.sendall(b"POST /stats/summary HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
                     b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reply = read_until_closed(sock, 5.0)
    finally:
        sock.close()
    assert replies(reply) == [200, 200], reply[:300]
