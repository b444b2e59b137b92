"""HTTP listeners: the data port, and an optional health port, both bounded against hostile peers.

waitress's defaults suit a trusted network: 100 connections in all, idle connections kept
120 s, no deadline for a request that arrives a byte at a time, request bodies up to 1 GiB
spooled to temporary files. A node agent on a pod network gets none of that trust, so:

- the connection limit is sized from the file-descriptor limit (raised to its hard limit where
  needed), with ``poll`` instead of ``select`` so descriptors above 1024 work;
- a connection idle for ``CHANNEL_TIMEOUT_SECONDS`` is closed (checked every
  ``CLEANUP_SECONDS``); a request whose headers have not all arrived
  ``HEADER_DEADLINE_SECONDS`` after its first byte, or whose body has not arrived
  ``BODY_DEADLINE_SECONDS`` after its headers, is answered 408 and its connection closed, so a
  socket that trickles bytes frees its slot as surely as an idle one;
- at the connection limit a new connection is still accepted: the connection that has waited
  longest without a complete request (idle, or still sending one) is closed to make room, so
  a flood of slow sockets cannot keep probes and scrapes out;
- request bodies above ``MAX_BODY_BYTES`` are refused with 413 from their Content-Length (or
  as soon as a chunked body passes the cap) and never reach a temporary file; headers are
  capped at ``MAX_HEADER_BYTES`` (431);
- a request framed twice (``Content-Length`` and ``Transfer-Encoding``), or an HTTP/1.0 one
  with ``Transfer-Encoding``, is refused with 400 and its connection closed, and nothing sent
  after it is read as a request (RFC 9112 section 6.3: the bytes could smuggle one);
- errors found before the application sees the request are JSON, like the application's;
- the serving loop does not spin on a connection whose worker is sending its own output
  (``_Channel.writable``);
- a worker never waits for a client to read: waitress parked a worker on every connection
  holding more than 16 MB of unsent output, so eight clients pipelining hundreds of requests
  and reading nothing took every worker. Instead a connection has at most
  ``PIPELINE_DEPTH`` requests parsed ahead (the rest of what it sent waits unparsed, one
  receive at most, and its socket is not read meanwhile); its next request is parsed only
  while its unread output is under ``CONNECTION_OUTPUT_BYTES`` and, unless it has none, the
  output of all connections together is under ``ALL_OUTPUT_BYTES``; a connection over its
  own budget for ``OUTPUT_DEADLINE_SECONDS`` is closed, and so is one idle for
  ``CHANNEL_TIMEOUT_SECONDS`` whatever it holds unsent;
- ``/healthz`` and ``/readyz`` can also be served on a separate small listener with its own
  thread and connection budget (``--health-listen``), so probes answer while the data port is
  saturated;
- a watch (a response that streams for minutes) holds neither a worker nor a data-port slot:
  the app begins it through ``environ[START_WATCH]`` and answers headers only; once the
  worker is done, the serving loop takes the connection out of its own (``start_watches``)
  and hands the socket to the watch streams (``watch_streams.py``: their own thread, their
  own cap, bounded output per watch). What the connection pipelined after the watch is
  dropped: the watch answers ``Connection: close``.
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import threading
import time
from typing import Protocol

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser, ParsingError
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask, ThreadedTaskDispatcher, WSGITask
from waitress.utilities import Error, build_http_date

from gpustats.fdlimit import HEALTH_CONNECTIONS, connection_limit
from gpustats.serving_poll import poll_once

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024          # the API takes no body; 16 KiB is far above any real one
MAX_HEADER_BYTES = 16 * 1024
CHANNEL_TIMEOUT_SECONDS = 5
HEADER_DEADLINE_SECONDS = 5         # a client sends its headers in one packet or a few
BODY_DEADLINE_SECONDS = 5           # a body is at most 16 KiB
CLEANUP_SECONDS = 2
IDLE_WAKE_SECONDS = 30              # no client connection: nothing to expire, sleep long
ACCEPT_BATCH = 64                   # connections accepted per wake-up of the serving loop
REPORT_SECONDS = 60                 # timed-out and displaced connections: one log line a minute
# Output a client has not read yet, held by the serving loop (a worker never waits for it):
# Requests parsed ahead on one connection; the rest wait unparsed.
PIPELINE_DEPTH = 4
CONNECTION_OUTPUT_BYTES = 4 * 1024 * 1024   # past this, a connection's next request waits
ALL_OUTPUT_BYTES = 8 * 1024 * 1024          # past this, only connections with none pending are read
OUTPUT_DEADLINE_SECONDS = 10        # a connection over its own budget this long is closed
# waitress parks a worker in ``write_soon`` while a connection holds more than its high-water
# mark of unsent output; the budgets above bound what a connection can hold, so that wait
# (one worker lost to each client that does not read) is never reached.
NEVER_WAIT_BYTES = 1 << 62
# The environ key of ``start_watch(stream) -> bool`` offered to the app (web/gpus.py names it).
START_WATCH = "gpustats.start_watch"


class Watches(Protocol):
    """Where watch connections go (``watch_streams.WatchStreams``, handed in by cli)."""

    def reserve(self, sock) -> bool: ...
    def release(self, sock) -> None: ...
    def adopt(self, sock, stream, head: bytes, chunked: bool) -> None: ...
    def start(self) -> None: ...
    def close(self) -> None: ...


class RequestTimeout(Error):
    code = 408
    reason = "Request Timeout"


def _error_body(error: Error) -> bytes:
    return json.dumps({"error": error.reason.lower().replace(" ", "_"),
                       "message": str(error.body)}).encode()


class _JsonErrorTask(ErrorTask):
    """waitress's error response (400, 413, 431, 501) as the application's JSON error."""

    def execute(self) -> None:
        error = self.request.error
        body = _error_body(error)
        self.status = f"{error.code} {error.reason}"
        self.response_headers.append(("Content-Type", "application/json"))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class _Parser(HTTPRequestParser):
    """waitress's parser, refusing ambiguous framing, and ending the stream at an error."""

    def parse_header(self, header_plus: bytes) -> None:
        super().parse_header(header_plus)
        # waitress drops Transfer-Encoding from the headers once it has read it (HTTP/1.1
        # only), so one still there came with another version, where it has no meaning.
        if "TRANSFER_ENCODING" in self.headers:
            raise ParsingError("Transfer-Encoding is only understood in an HTTP/1.1 request")
        if self.chunked and "CONTENT_LENGTH" in self.headers:
            raise ParsingError("both Content-Length and Transfer-Encoding given")

    def received(self, data: bytes) -> int:
        consumed = super().received(data)
        # An error answer closes the connection: what follows it (a smuggled request, the
        # rest of a refused body) is consumed unread rather than parsed as a next request.
        return len(data) if self.error is not None else consumed


class _Task(WSGITask):
    """waitress's WSGI task, offering the app a watch (``START_WATCH``) where the server has
    watch streams: the task then writes nothing itself, and the serving loop hands the
    connection, with the response's headers, to the watch streams."""

    watch = None                     # the stream begun, its slot reserved, until handed over
    wrote_header: bool               # waitress's (WSGITask), typed here for the checker

    def get_environment(self) -> dict:
        environ = super().get_environment()
        if self.channel.server.watches is not None:
            environ[START_WATCH] = self._start_watch
        return environ

    def _start_watch(self, stream) -> bool:
        """Called by the app: True when a watch slot was free (then its response's body is
        the stream's, not the app's)."""
        if self.watch is None:
            if not self.channel.server.watches.reserve(self.channel.socket):
                return False
            self.watch = stream
        return True

    def finish(self) -> None:
        if self.watch is None or self.wrote_header or not self.status.startswith("200"):
            super().finish()             # no watch, or the app answered something else
            return
        # Chunked (HTTP/1.1) or ended by the close (1.0); ``Connection: close`` either way.
        head = self.build_response_header()
        self.wrote_header = True
        self.close_on_finish = False     # the connection is the watch's: closed at its end
        stream, self.watch = self.watch, None
        self.channel.begin_watch(stream, head, self.chunked_response)

    def service(self) -> None:
        try:
            super().service()
        finally:
            if self.watch is not None:   # begun, but the app failed or answered otherwise
                self.watch = None
                self.channel.server.watches.release(self.channel.socket)


class _Channel(HTTPChannel):
    """A connection that knows since when its request in progress has been arriving."""

    parser_class = _Parser
    task_class = _Task
    watching: tuple | None = None    # (stream, head, chunked) once its request is a watch
    error_task_class = _JsonErrorTask
    # The monotonic clock, as ``last_activity`` (below), so that a step of the wall clock
    # neither closes live connections nor keeps idle ones.
    request_began: float | None = None
    body_began: float | None = None
    held = b""                       # received, not parsed yet: requests past the depth
    over_budget_since: float | None = None
    _last_activity = 0.0
    # waitress's (HTTPChannel), typed here for the checker.
    request: _Parser | None
    close_when_flushed: bool
    sent_continue: bool

    @property
    def last_activity(self) -> float:
        return self._last_activity

    @last_activity.setter
    def last_activity(self, _wall: float) -> None:
        # waitress stamps activity with ``time.time()``; the stamp taken is the monotonic one.
        self._last_activity = time.monotonic()

    def received(self, data: bytes) -> bool:
        """Parses requests from ``data`` until ``PIPELINE_DEPTH`` are waiting to be served.

        waitress parses everything one receive brings: one 8 KiB packet of pipelined requests
        became hundreds of queued requests, each answered into the connection's buffer
        whether or not the client read. Past the depth, the rest of ``data`` is held unparsed
        (at most one receive: the socket is not read while it is held) and the serving loop
        parses it once the connection has room (``Server.feed_held``)."""
        if not data or self.watching is not None:
            return False
        with self.requests_lock:
            if self.will_close or self.close_when_flushed:
                return False                 # the connection closes after its last answer
            if self.requests and self.requests[-1].error is not None:
                return False
            while data:
                if len(self.requests) >= PIPELINE_DEPTH:
                    self.held = data
                    self.server.hold(self)
                    break
                data = self._parse_one(data)
        return True

    def _parse_one(self, data: bytes) -> bytes:
        """Feeds ``data`` to the request in progress; returns what it did not consume."""
        request = self.request
        if request is None:
            request = self.request = self.parser_class(self.adj)
            self.request_began, self.body_began = self.last_activity, None
        consumed = request.received(data)
        if request.headers_finished and self.body_began is None:
            self.body_began = self.last_activity
        if (request.expect_continue and request.headers_finished and not self.requests
                and not self.sent_continue):
            self.send_continue()
        if not request.completed:
            return data[consumed:] if consumed else b""
        self.sent_continue = False
        if not request.empty:
            self.requests.append(request)
            if len(self.requests) == 1:
                self.server.add_task(self)   # otherwise the worker takes it after the last
        self.request = None
        self.request_began = self.body_began = None
        # An error answer closes the connection: what follows is not parsed (``_Parser``
        # consumed it all already).
        return b"" if request.error is not None else data[consumed:]

    def feedable(self, all_output: int) -> bool:
        """Room to parse held requests: few enough waiting, little enough unsent output (any
        at all only while all connections together are under their budget)."""
        pending = self.total_outbufs_len
        return (len(self.requests) < PIPELINE_DEPTH and pending < CONNECTION_OUTPUT_BYTES
                and (not pending or all_output < ALL_OUTPUT_BYTES))

    def feed_held(self) -> None:
        data, self.held = self.held, b""
        self.received(data)

    def readable(self) -> bool:
        return not self.held and self.watching is None and super().readable()

    def begin_watch(self, stream, head: bytes, chunked: bool) -> None:
        """Its request became a watch (in the worker, at the task's end): nothing after it is
        served; the serving loop hands the connection over (``_Server.start_watches``)."""
        with self.requests_lock:
            for later in self.requests[1:]:
                later.close()
            del self.requests[1:]
            if self.request is not None:
                self.request.close()
                self.request = None
            self.held = b""
            self.watching = (stream, head, chunked)
        self.server.hand_over(self)

    def writable(self) -> bool:
        """Output to send, except what a worker is sending itself right now.

        While its request is served, a worker sends what it writes (waitress's ``send_bytes``
        is 1), holding the connection's ``outbuf_lock``. waitress calls the connection
        writable all that time, so the serving loop woke at once for it, found the lock taken
        and went round again, until the worker let go: a busy spin that kept taking the
        interpreter lock from the worker (a small body to 16 connections: 13 loop turns a
        request; now 0.2). Skipped while the lock is held: a worker that cannot send all of it
        wakes the loop (when it finishes, or when waiting for room), and the loop looks again."""
        if self.will_close or self.close_when_flushed:
            return True
        if not self.total_outbufs_len:
            return False
        if not self.requests:
            return True
        if self.outbuf_lock.acquire(False):
            self.outbuf_lock.release()
            return True
        return False

    def waiting(self) -> bool:
        """Nothing being served or sent, not closing: this side only waits for the peer."""
        return not (self.requests or self.total_outbufs_len or self.will_close
                    or self.close_when_flushed or self.watching is not None)

    def waiting_since(self) -> float:
        """Since when the connection has held its slot without a complete request."""
        if self.request is None:
            return self.last_activity
        assert self.request_began is not None        # set with the request (_parse_one)
        return self.request_began

    def overdue(self, now: float) -> str | None:
        """Which part of the request in progress is past its deadline, if one is."""
        if self.request is None or not self.waiting():
            return None
        if self.body_began is None:
            assert self.request_began is not None    # set with the request (_parse_one)
            return "headers" if now - self.request_began > HEADER_DEADLINE_SECONDS else None
        return "body" if now - self.body_began > BODY_DEADLINE_SECONDS else None

    def time_out(self, part: str) -> None:
        """Answers the request in progress 408 and closes the connection once that is sent.

        Written here, in the serving loop, rather than by a worker thread: at a deadline
        hundreds of sockets may time out at once, and their answers must not queue ahead of
        real requests."""
        deadline = HEADER_DEADLINE_SECONDS if part == "headers" else BODY_DEADLINE_SECONDS
        body = _error_body(RequestTimeout(f"the request's {part} did not arrive within "
                                          f"{deadline} s"))
        answer = (f"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
                  f"Content-Length: {len(body)}\r\nContent-Type: application/json\r\n"
                  f"Date: {build_http_date(time.time())}\r\nServer: {self.adj.ident}\r\n"
                  f"\r\n").encode() + body
        with self.requests_lock:
            request, self.request = self.request, None
            self.close_when_flushed = True
        assert request is not None            # called for an ``overdue`` request only
        request.close()
        self.request_began = self.body_began = None
        with self.outbuf_lock:
            self.outbufs[-1].append(answer)
            self.current_outbuf_count += len(answer)
            self.total_outbufs_len += len(answer)


class _Server(TcpWSGIServer):
    """waitress's TCP server with request deadlines and room made at the connection limit."""

    channel_class = _Channel
    watches: Watches | None = None       # set by Listeners where watches are served
    # waitress's (BaseWSGIServer), typed here for the checker.
    next_channel_cleanup: float
    in_connection_overflow: bool

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.timed_out = 0
        self.displaced = 0
        self.over_budget_closed = 0
        self._held: set[_Channel] = set()
        self._reported = (0, 0, 0)
        self._candidates: list[tuple[float, _Channel]] = []
        self._report_at = 0.0
        self._handovers: list[_Channel] = []
        self._handover_lock = threading.Lock()

    def readable(self) -> bool:
        # waitress's own ``readable`` stops accepting at the limit, which leaves new
        # connections in the backlog behind whatever slow sockets hold the slots. This one
        # stops only when no connection can give its slot up (every one is being served);
        # otherwise ``handle_accept`` makes room.
        now = time.monotonic()
        if now >= self.next_channel_cleanup:
            self.next_channel_cleanup = now + self.adj.cleanup_interval
            self.maintenance(now)
        if not self.accepting:
            return False
        full = (len(self._map) >= self.adj.connection_limit
                and not any(c.waiting() for c in self.active_channels.values()))
        if full != self.in_connection_overflow:
            self.in_connection_overflow = full
            log.log(logging.WARNING if full else logging.INFO, "%s:%s: %s",
                    self.effective_host, self.effective_port,
                    f"all {self.adj.connection_limit} connections are being served; new ones "
                    "wait in the backlog" if full else "accepting connections again")
        return not full

    def handle_accept(self) -> None:
        # waitress accepts one connection per wake-up of the loop; after a burst of closes
        # (every trickling socket timed out at the same pass) the reconnecting ones would
        # each cost a loop turn while a probe waits behind them in the backlog.
        for _ in range(ACCEPT_BATCH):
            try:
                pair = self.accept()         # None: no connection waits (or it went away)
            except OSError as exc:           # as waitress: logged, the listener goes on
                log.warning("%s:%s: accept failed: %s", self.effective_host,
                            self.effective_port, exc)
                return
            if pair is None:
                return
            conn, addr = pair
            try:
                self.set_socket_options(conn)
            except OSError:                  # the peer closed it before it was accepted
                conn.close()
                continue
            if len(self._map) >= self.adj.connection_limit:
                self._make_room()
            self.channel_class(self, conn, self.fix_addr(addr), self.adj, map=self._map)
            if not self.readable():
                return

    def _make_room(self) -> None:
        """Closes the connection that has waited longest without a complete request.

        Candidates are sorted once and taken in turn; one whose wait began again since (it
        was served meanwhile) is skipped until the next sort."""
        while True:
            if not self._candidates:
                self._candidates = sorted(
                    ((c.waiting_since(), c) for c in self.active_channels.values()
                     if c.waiting()), key=lambda pair: pair[0], reverse=True)
                if not self._candidates:
                    return
            since, channel = self._candidates.pop()
            if channel._fileno is not None and channel.waiting() \
                    and channel.waiting_since() == since:
                channel.handle_close()
                self.displaced += 1
                return

    def hold(self, channel: _Channel) -> None:
        """``channel`` holds requests past the pipelining depth: ``feed_held`` looks at it."""
        self._held.add(channel)

    def feed_held(self) -> None:
        """Parses held requests on each connection that has room for them again.

        Run by the serving loop after every wake-up: a worker finishing a request, or output
        sent, is what makes room, and both wake the loop."""
        if not self._held:
            return
        all_output = self.unsent_output()
        for channel in list(self._held):
            if channel._fileno is None or not channel.held:
                self._held.discard(channel)
            elif channel.feedable(all_output):
                self._held.discard(channel)
                channel.feed_held()

    def hand_over(self, channel: _Channel) -> None:
        """``channel``'s request became a watch: ``start_watches`` hands it over."""
        with self._handover_lock:
            self._handovers.append(channel)

    def start_watches(self) -> None:
        """Hands each connection whose request became a watch to the watch streams, once its
        worker is done and what it answered before is sent: out of this loop's map and the
        data port's connections, its socket with the response's headers.

        Run by the serving loop after every wake-up (the worker's end wakes it)."""
        if not self._handovers:
            return
        watches = self.watches
        assert watches is not None           # a watch begins only where there are watches
        with self._handover_lock:
            pending, self._handovers = self._handovers, []
        waiting = []
        for channel in pending:
            if channel._fileno is None or not channel.connected:
                watches.release(channel.socket)    # closed before it could begin
            elif channel.requests or channel.total_outbufs_len:
                waiting.append(channel)      # its worker, or earlier answers, not done yet
            else:
                assert channel.watching is not None    # set before it was handed over
                stream, head, chunked = channel.watching
                sock = channel.socket
                channel.del_channel()        # out of the map and the active channels
                with channel.outbuf_lock:
                    for outbuf in channel.outbufs:
                        outbuf.close()
                    channel.connected = False
                watches.adopt(sock, stream, head, chunked)
        if waiting:
            with self._handover_lock:
                self._handovers.extend(waiting)

    def unsent_output(self) -> int:
        """Output answered and not yet read by the clients, all connections together."""
        return sum(channel.total_outbufs_len for channel in self.active_channels.values())

    def maintenance(self, now: float) -> None:
        self._candidates = []                # sorted again when room is next needed
        idle_before = now - self.adj.channel_timeout
        for channel in list(self.active_channels.values()):
            if not channel.requests and channel.last_activity < idle_before:
                # Closed here, not marked for the next write as waitress does: a client that
                # reads nothing leaves its socket never writable, so that write never came.
                channel.handle_close()
                continue
            part = channel.overdue(now)
            if part is not None:
                channel.time_out(part)
                self.timed_out += 1
            self._check_output_budget(channel, now)
        self._report(now)

    def _check_output_budget(self, channel: _Channel, now: float) -> None:
        """Closes a connection that has held more unsent output than its budget for
        ``OUTPUT_DEADLINE_SECONDS``: a client that reads too slowly, or not at all."""
        if channel.total_outbufs_len <= CONNECTION_OUTPUT_BYTES:
            channel.over_budget_since = None
        elif channel.over_budget_since is None:
            channel.over_budget_since = now
        elif now - channel.over_budget_since > OUTPUT_DEADLINE_SECONDS:
            channel.handle_close()
            self.over_budget_closed += 1

    def _report(self, now: float) -> None:
        counts = (self.timed_out, self.displaced, self.over_budget_closed)
        if counts == self._reported or now < self._report_at:
            return
        log.info("%s:%s: %d request(s) timed out before arriving whole, %d waiting "
                 "connection(s) closed to make room at the limit of %d, %d connection(s) "
                 "closed for holding over %d MiB of unread output for %d s (since start)",
                 self.effective_host, self.effective_port, counts[0], counts[1],
                 self.adj.connection_limit, counts[2], CONNECTION_OUTPUT_BYTES >> 20,
                 OUTPUT_DEADLINE_SECONDS)
        self._reported, self._report_at = counts, now + REPORT_SECONDS


class _SignalWake(wasyncore.dispatcher):
    """A socket the interpreter writes each signal's number to (``signal.set_wakeup_fd``),
    in the serving loop's map. The kernel hands a signal sent to the process to any of its
    threads; Python runs the handler in the main thread, but only once that thread runs again,
    and the serving loop may be asleep in ``poll`` for ``IDLE_WAKE_SECONDS``. With this socket
    readable, the loop wakes at once whichever thread took the signal."""

    def __init__(self, sockets: dict):
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)
        super().__init__(self._reader, map=sockets)
        self._previous = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def handle_read(self) -> None:
        try:
            while self._reader.recv(512):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def close(self) -> None:
        signal.set_wakeup_fd(self._previous)
        super().close()
        self._writer.close()


def _run(server) -> None:
    """waitress's ``server.run()``, waking every ``CLEANUP_SECONDS`` only while clients are
    connected (idle channels must be expired); with none, every ``IDLE_WAKE_SECONDS``, which
    keeps a dormant daemon's CPU near zero. In the main thread a signal wakes it at once
    (``_SignalWake``); elsewhere (the health listener's thread) signals are not its business."""
    sockets = server._map
    wake = _SignalWake(sockets) if threading.current_thread() is threading.main_thread() \
        else None
    base = len(sockets)                  # the listening socket, the wake-up pipe (and signals')
    try:
        while sockets:
            poll_once(CLEANUP_SECONDS if len(sockets) > base else IDLE_WAKE_SECONDS, sockets)
            server.feed_held()
            server.start_watches()
    except (SystemExit, KeyboardInterrupt):
        server.task_dispatcher.shutdown()
    finally:
        if wake is not None:
            wake.close()


def _server(app, host: str, port: int, *, threads: int, connections: int) -> _Server:
    adj = Adjustments(
        host=host, port=port, threads=threads, ident="gpustats",
        clear_untrusted_proxy_headers=True, connection_limit=connections,
        channel_timeout=CHANNEL_TIMEOUT_SECONDS, cleanup_interval=CLEANUP_SECONDS,
        asyncore_loop_timeout=CLEANUP_SECONDS, asyncore_use_poll=True,
        max_request_body_size=MAX_BODY_BYTES, max_request_header_size=MAX_HEADER_BYTES,
        outbuf_high_watermark=NEVER_WAIT_BYTES,
        # Responses stay in memory (a /metrics body is a few MB at most): a spilled one would
        # land in /tmp, a small memory-backed volume in the DaemonSet.
        outbuf_overflow=64 * 1024 * 1024)
    dispatcher = ThreadedTaskDispatcher()
    dispatcher.set_thread_count(threads)
    # What waitress's ``create_server`` does for one address, with this server class.
    return _Server(app, {}, dispatcher=dispatcher, adj=adj, sockinfo=adj.listen[0])


class Interrupt(wasyncore.ExitNow):
    """Raised from a signal handler to leave the serving loop. The loop re-raises this kind
    from inside a connection's callbacks, where any other exception would be caught and
    logged as that connection's error (and the signal lost)."""


class ListenError(Exception):
    """An address that cannot be listened on (in use, not this host's, not permitted)."""

    def __init__(self, address: tuple[str, int], flag: str, exc: OSError):
        super().__init__(f"cannot listen on {address[0]}:{address[1]}: "
                         f"{exc.strerror or exc} (choose another with {flag} HOST:PORT)")


class Listeners:
    """The data server (run in the calling thread), the health server (its own thread) and,
    where given, the data server's watch streams (their own thread).

    The sockets are bound here, and nothing is served before ``run``: so the daemon binds
    them first and builds itself after (``attach`` hands the applications over), and a
    start-up refused its address has touched nothing else."""

    def __init__(self, app, listen: tuple[str, int], health_app=None,
                 health_listen: tuple[str, int] | None = None,
                 watches: Watches | None = None):
        connections = connection_limit()
        try:
            self.data = _server(app, *listen, threads=8, connections=connections)
        except OSError as exc:
            raise ListenError(listen, "--listen", exc) from exc
        self.watches = watches
        self.data.watches = watches
        self.health = None
        if health_listen is not None:
            try:
                self.health = _server(health_app, *health_listen, threads=1,
                                      connections=HEALTH_CONNECTIONS)
            except OSError as exc:
                self.data.close()
                raise ListenError(health_listen, "--health-listen", exc) from exc
        self._thread: threading.Thread | None = None
        self._closed = False
        log.debug("serving with up to %d connections, idle timeout %d s", connections,
                  CHANNEL_TIMEOUT_SECONDS)

    @staticmethod
    def port_of(server) -> int:
        return server.effective_port

    def attach(self, app, health_app=None) -> None:
        """The applications, once the daemon that answers is built (before ``run``)."""
        self.data.application = app
        if self.health is not None:
            self.health.application = health_app

    def run(self) -> None:
        """Serve until a signal handler raises out of the data server's loop."""
        if self.watches is not None:
            self.watches.start()
        if self.health is not None:
            self._thread = threading.Thread(target=self._run_health, name="health-http",
                                            daemon=True)
            self._thread.start()
        _run(self.data)

    def _run_health(self) -> None:
        try:
            _run(self.health)
        except (OSError, ValueError):      # closed under it at shutdown
            pass

    def close(self) -> None:
        """Once; again is nothing (start-up closes what a failed start left bound)."""
        if self._closed:
            return
        self._closed = True
        self.data.close()
        if self.health is not None:
            self.health.close()
        if self.watches is not None:
            self.watches.close()
