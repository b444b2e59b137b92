"""Watches against the real daemon, held by hostile clients: one client opening many watches and
reading none gets its cap and every other client still gets theirs; a watcher that never
reads is closed within the stall deadline, though the bookmark lines it is sent fit the kernel's
buffers (it was judged by the daemon's own queue, which never filled)."""

from __future__ import annotations

import select
import socket
import time

from gpustats.watch_streams import WATCH_PER_CLIENT, WATCH_STALL_SECONDS
from tests.support.fakehost import write_scenario
from tests.support.gpus import device

WATCH = b"GET /api/v1/gpus?watch=true HTTP/1.1\r\nHost: gpustats\r\n\r\n"


def _daemon(start_daemon, tmp_path):
    path = tmp_path / "s.yaml"
    write_scenario(path, {"devices": [device(power_watts=300)], "processes": []})
    daemon = start_daemon("--simulate", str(path), "--housekeeping-interval", "0.5",
                          "--pod-resources-socket", "", "--runtime-socket", "")
    daemon.wait_ready()
    return daemon


def _watch(port: int, source: str = "127.0.0.1") -> tuple[socket.socket, int]:
    """A watch request from ``source``, and its status, read without consuming a byte
    (``MSG_PEEK``): the watcher has read nothing."""
    sock = socket.socket()
    sock.settimeout(10)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    sock.sendall(WATCH)
    head = b""
    while b"\r\n" not in head:
        head = sock.recv(4096, socket.MSG_PEEK)
        assert head, "closed before its status line"
    return sock, int(head.split(b" ", 2)[1])


def test_one_client_gets_its_cap_and_the_others_theirs(start_daemon, tmp_path):
    daemon = _daemon(start_daemon, tmp_path)
    hog = [_watch(daemon.port) for _ in range(WATCH_PER_CLIENT)]
    try:
        assert [status for _, status in hog] == [200] * WATCH_PER_CLIENT
        sock, status = _watch(daemon.port)
        sock.close()
        assert status == 429
        others = [_watch(daemon.port, "127.0.0.2") for _ in range(3)]
        assert [status for _, status in others] == [200] * 3
        for sock, _ in others:
            sock.close()
    finally:
        for sock, _ in hog:
            sock.close()


def test_a_watcher_that_never_reads_is_closed_within_the_stall_deadline(start_daemon,
                                                                         tmp_path):
    daemon = _daemon(start_daemon, tmp_path)
    silent, status = _watch(daemon.port)
    assert status == 200
    reader, status = _watch(daemon.port)
    assert status == 200
    poll = select.poll()
    poll.register(silent, select.POLLRDHUP)
    poll.register(reader, select.POLLIN)
    deadline = time.monotonic() + WATCH_STALL_SECONDS * 1.5 + 5
    closed, reader_open = False, True
    while not closed and time.monotonic() < deadline:
        for fd, mask in poll.poll(1000):
            if fd == silent.fileno() and mask & (select.POLLRDHUP | select.POLLHUP):
                closed = True
            elif fd == reader.fileno() and mask & select.POLLIN:
                reader_open = bool(reader.recv(65536))
    assert closed, "a watcher that reads nothing is still open"
    assert reader_open, "the watcher that reads was closed too"
    silent.close()
    reader.close()
