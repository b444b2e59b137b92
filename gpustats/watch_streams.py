"""Watch streams: long responses written by a thread of their own, off the request workers.

A watch (``GET /api/v1/gpus?watch=true``) stays open for minutes. Held by a waitress worker,
each would take one of the few workers, and its connection a slot of the data port, from the
scrapes and probes. So a worker only checks and begins a watch; once its headers are due, the
serving loop hands the socket here (``serving._Server.start_watches``), out of the data
port's connections, and this thread writes the events: woken when the event log has new
ones (``notify``), or a watch's bookmark or end is due, or its socket can take more. It polls
only the watches' sockets, and is idle between events.

Bounds, per watch and in all:

- at most ``WATCH_CONNECTIONS`` watches (``reserve``; the view answers 429 past them), and at
  most ``WATCH_PER_CLIENT`` of one client (a peer address on TCP, a UID on a unix socket:
  ``peers.client_of``), so one client never holds every slot;
- unsent output at most ``WATCH_BUFFER_BYTES`` (the event lines are shared by every watch;
  this counts them per watch anyway): a watch whose reader falls further behind is closed,
  and so is one with output waiting and none of it read for ``WATCH_STALL_SECONDS``, or one
  whose sent output sits unread for as long where the kernel says what its reader has not
  read (``peer_unread``: a unix socket, a loopback peer; bookmark lines fit the socket
  buffers for hours, so the queue alone would never tell);
- what a watcher sends is read and dropped, at most ``WATCH_READ_BYTES`` (nothing is
  expected; more closes the watch); its end of the connection closing ends the watch;
- a BOOKMARK after ``BOOKMARK_SECONDS`` without an event keeps idle streams open through
  proxies; each stream ends at its ``ends_at`` (the view's jittered 5 to 10 minutes, or the
  client's ``timeoutSeconds``), with a chunked stream's last chunk, and the connection closes.
"""

from __future__ import annotations

import itertools
import logging
import os
import select
import socket
import threading
import time
from collections import deque
from typing import Callable, Protocol

from gpustats.fdlimit import WATCH_CONNECTIONS
from gpustats.peer_unread import kernel_unread, loopback_peer, read_rx_queues
from gpustats.peers import client_of

log = logging.getLogger(__name__)

WATCH_PER_CLIENT = WATCH_CONNECTIONS // 8
WATCH_BUFFER_BYTES = 4 * 1024 * 1024
WATCH_STALL_SECONDS = 30
WATCH_READ_BYTES = 64 * 1024
BOOKMARK_SECONDS = 15
_SEND_BUFFERS = 64                    # buffers handed to one sendmsg
_LAST_CHUNK = b"0\r\n\r\n"
_CRLF = b"\r\n"
_ERRORS = select.POLLERR | select.POLLNVAL
_READ = select.POLLIN | select.POLLHUP
REPORT_SECONDS = 60


class WatchStream(Protocol):
    """What a watch sends after its headers (built by the application: ``GpuWatch``)."""

    ends_at: float                    # monotonic seconds

    def take(self) -> tuple[list[bytes], bool]:
        """The lines not sent yet, and whether the stream is over after them."""

    def bookmark(self) -> bytes:
        """A line that says nothing changed."""


class _Watch:
    __slots__ = ("sock", "fd", "stream", "chunked", "out", "out_bytes", "progress_at",
                 "next_bookmark", "received", "ending", "mask", "sent", "window", "loopback")

    def __init__(self, sock: socket.socket, stream: WatchStream, chunked: bool, now: float):
        self.sock = sock
        self.fd = sock.fileno()
        self.stream = stream
        self.chunked = chunked
        self.out: deque[memoryview] = deque()
        self.out_bytes = 0
        self.progress_at = now            # the last send, or when output began to wait
        self.next_bookmark = now + BOOKMARK_SECONDS
        self.received = 0
        self.ending = False
        self.mask = 0
        self.sent = 0                     # bytes sent in all
        # Since when sent output may sit unread: (since, bytes sent then, unread then); None
        # when all was read at the last look (``_check_unread``).
        self.window: tuple[float, int, int] | None = None
        self.loopback = loopback_peer(sock)


class WatchStreams:
    """The watches of one listener, written by one thread (``start``)."""

    def __init__(self, limit: int = WATCH_CONNECTIONS,
                 clock: Callable[[], float] = time.monotonic,
                 per_client: int = WATCH_PER_CLIENT) -> None:
        self.limit = limit
        self.per_client = per_client
        self._clock = clock
        self._lock = threading.Lock()
        self._reserved = 0
        self._by_client: dict[object, int] = {}          # client → its watches
        self._client: dict[int, object] = {}             # id(socket) → its client
        self._adopted: deque[tuple[socket.socket, WatchStream, bytes, bool]] = deque()
        self._changed = False
        self._watches: dict[int, _Watch] = {}
        self._poll = select.poll()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._poll.register(self._wake_r, select.POLLIN)
        self._thread: threading.Thread | None = None
        self._closed = False
        self.closed_slow = 0               # watches closed for not reading
        self._reported = 0
        self._report_at = 0.0

    # -- any thread

    def reserve(self, sock: socket.socket) -> bool:
        """Takes a watch slot for the client at the other end of ``sock``; False when all
        ``limit`` are taken, or ``per_client`` of that client's."""
        client = client_of(sock)
        with self._lock:
            held = self._by_client.get(client, 0)
            if self._closed or self._reserved >= self.limit or held >= self.per_client:
                return False
            self._reserved += 1
            self._by_client[client] = held + 1
            self._client[id(sock)] = client
            return True

    def release(self, sock: socket.socket) -> None:
        """Gives back the slot ``reserve`` took for ``sock`` (its watch ended, or never
        began)."""
        with self._lock:
            self._reserved -= 1
            client = self._client.pop(id(sock), None)
            left = self._by_client.get(client, 1) - 1
            if left > 0:
                self._by_client[client] = left
            else:
                self._by_client.pop(client, None)

    @property
    def open_watches(self) -> int:
        return self._reserved

    def adopt(self, sock: socket.socket, stream: WatchStream, head: bytes,
              chunked: bool) -> None:
        """Takes over a connection whose slot was reserved: ``head`` (the response's status
        line and headers), then the stream's lines, chunked or not."""
        self._adopted.append((sock, stream, head, chunked))
        self._wake()

    def notify(self) -> None:
        """New events: every watch takes its lines (called by the event log's observer)."""
        self._changed = True
        self._wake()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="watch-streams", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Ends the thread and closes every watch's connection."""
        with self._lock:
            self._closed = True
        self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2.0)
        for watch in list(self._watches.values()):
            self._close(watch)
        while self._adopted:
            self._adopted.popleft()[0].close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"!")
        except (BlockingIOError, OSError):    # full: a wake is pending anyway; closed: done
            pass

    # -- the watch thread

    def _run(self) -> None:
        try:
            while not self._closed:
                self._turn()
        except Exception:                      # a thread's top: logged, every watch ended
            log.exception("the watch streams stopped")
            for watch in list(self._watches.values()):
                self._close(watch)

    def _turn(self) -> None:
        for fd, mask in self._poll.poll(self._timeout_ms(self._clock())):
            if fd == self._wake_r:
                try:
                    while os.read(self._wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
                continue
            watch = self._watches.get(fd)
            if watch is None:
                continue
            if mask & _ERRORS:
                self._close(watch)
                continue
            if mask & _READ and not self._read(watch):
                continue
            if mask & select.POLLOUT:
                self._send(watch)
        now = self._clock()
        while self._adopted:
            self._begin(*self._adopted.popleft(), now)
        if self._changed:
            self._changed = False
            for watch in list(self._watches.values()):
                if not watch.ending:
                    self._take(watch, now)
        self._timers(now)

    def _timeout_ms(self, now: float) -> int:
        """Until the next bookmark, end or stall deadline (at least 50 ms: due times close
        together are served in one wake)."""
        due = None
        for watch in self._watches.values():
            at = watch.progress_at + WATCH_STALL_SECONDS if watch.out else \
                min(watch.next_bookmark, watch.stream.ends_at)
            if watch.window is not None:
                at = min(at, watch.window[0] + WATCH_STALL_SECONDS)
            due = at if due is None else min(due, at)
        if due is None:
            return -1
        return max(50, int((due - now) * 1000) + 50)

    def _begin(self, sock: socket.socket, stream: WatchStream, head: bytes, chunked: bool,
               now: float) -> None:
        if self._closed:
            self.release(sock)
            sock.close()
            return
        sock.setblocking(False)
        watch = _Watch(sock, stream, chunked, now)
        self._watches[watch.fd] = watch
        watch.out.append(memoryview(head))
        watch.out_bytes = len(head)
        self._set_mask(watch, _READ | select.POLLOUT)
        self._take(watch, now)

    def _take(self, watch: _Watch, now: float) -> None:
        lines, over = watch.stream.take()
        if lines and not self._queue(watch, lines, now):
            return
        if lines:
            watch.next_bookmark = now + BOOKMARK_SECONDS
        if over:
            self._end(watch, now)
        else:
            self._send(watch)

    def _queue(self, watch: _Watch, lines: list[bytes], now: float) -> bool:
        """Appends ``lines`` (one chunk) to the watch's output; False: closed for holding
        more than its budget."""
        size = sum(len(line) for line in lines)
        if watch.out_bytes + size > WATCH_BUFFER_BYTES:
            self.closed_slow += 1
            self._close(watch)
            return False
        if not watch.out:
            watch.progress_at = now
        if watch.chunked:
            prefix = b"%x\r\n" % size
            watch.out.append(memoryview(prefix))
            watch.out_bytes += len(prefix) + len(_CRLF)
        watch.out.extend(memoryview(line) for line in lines)
        if watch.chunked:
            watch.out.append(memoryview(_CRLF))
        watch.out_bytes += size
        return True

    def _end(self, watch: _Watch, now: float) -> None:
        """The stream's end: its last chunk, then the connection closes once that is sent."""
        watch.ending = True
        if watch.chunked:
            if not watch.out:
                watch.progress_at = now
            watch.out.append(memoryview(_LAST_CHUNK))
            watch.out_bytes += len(_LAST_CHUNK)
        self._send(watch)

    def _send(self, watch: _Watch) -> None:
        out = watch.out
        while out:
            try:
                sent = watch.sock.sendmsg(list(itertools.islice(out, _SEND_BUFFERS)))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:                    # the watcher went away
                self._close(watch)
                return
            watch.progress_at = self._clock()
            if watch.window is None and sent:
                watch.window = (watch.progress_at, watch.sent, 0)
            watch.sent += sent
            watch.out_bytes -= sent
            while sent:
                first = out[0]
                if sent >= len(first):
                    sent -= len(first)
                    out.popleft()
                else:
                    out[0] = first[sent:]
                    sent = 0
        if not out and watch.ending:
            self._close(watch)
            return
        self._set_mask(watch, _READ | (select.POLLOUT if out else 0))

    def _read(self, watch: _Watch) -> bool:
        """Reads and drops what the watcher sent; False when that closed the watch (its
        end closed, or it sent more than ``WATCH_READ_BYTES``)."""
        try:
            data = watch.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            data = b""
        watch.received += len(data)
        if not data or watch.received > WATCH_READ_BYTES:
            self._close(watch)
            return False
        return True

    def _check_unread(self, now: float) -> None:
        """Closes each watch whose sent output sat unread for ``WATCH_STALL_SECONDS`` (none
        of it read since), where the kernel says what its reader has not read."""
        due = [w for w in self._watches.values()
               if w.window is not None and now - w.window[0] >= WATCH_STALL_SECONDS]
        if not due:
            return
        rx = read_rx_queues({w.loopback for w in due if w.loopback is not None})
        for watch in due:
            unread = kernel_unread(watch.sock)
            if unread is not None and watch.sock.family != socket.AF_UNIX:
                peer = rx.get(watch.loopback) if watch.loopback is not None else None
                unread = None if peer is None else unread + peer
            assert watch.window is not None
            since, sent_then, unread_then = watch.window
            if unread is None or unread == 0:
                watch.window = None            # all read, or not known: the queue rule only
            elif unread < unread_then + watch.sent - sent_then:
                watch.window = (now, watch.sent, unread)       # some was read meanwhile
            else:
                self.closed_slow += 1
                self._close(watch)

    def _timers(self, now: float) -> None:
        self._check_unread(now)
        for watch in list(self._watches.values()):
            if watch.out:
                if now - watch.progress_at > WATCH_STALL_SECONDS:
                    self.closed_slow += 1
                    self._close(watch)
            elif watch.ending:
                continue
            elif now >= watch.stream.ends_at:
                self._end(watch, now)
            elif now >= watch.next_bookmark:
                watch.next_bookmark = now + BOOKMARK_SECONDS
                if self._queue(watch, [watch.stream.bookmark()], now):
                    self._send(watch)
        if self.closed_slow != self._reported and now >= self._report_at:
            log.info("%d watch(es) closed for not reading their events (since start)",
                     self.closed_slow)
            self._reported, self._report_at = self.closed_slow, now + REPORT_SECONDS

    def _set_mask(self, watch: _Watch, mask: int) -> None:
        if mask == watch.mask:
            return
        if watch.mask:
            self._poll.modify(watch.fd, mask)
        else:
            self._poll.register(watch.fd, mask)
        watch.mask = mask

    def _close(self, watch: _Watch) -> None:
        if self._watches.pop(watch.fd, None) is None:
            return
        if watch.mask:
            try:
                self._poll.unregister(watch.fd)
            except (KeyError, ValueError):
                pass
        watch.out.clear()
        self.release(watch.sock)
        watch.sock.close()
