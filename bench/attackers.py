"""Hostile peers for the soak: idle sockets, trickling sockets, large POSTs, smuggled requests,
pipelining clients that read nothing or a trickle, and probes. The hostile sources the daemon
itself calls live beside them, one module each: a kubelet whose pod-resources reply is huge
(``bench/hostile_kubelet.py``) and a dcgm-exporter serving 30 MB (``bench/hostile_exporter.py``).

Each attacker is a thread bounded by a stop event; sockets the server closes are re-opened, so
the pressure holds for the whole run. The probe times ``/healthz`` (and ``/readyz``) on fresh
connections twice a second, the way the kubelet does, with a 1 s timeout.
"""

from __future__ import annotations

import abc
import collections
import http.client
import os
import socket
import threading
import time
from pathlib import Path


class _Attacker(abc.ABC):
    def __init__(self, port: int, stop: threading.Event):
        self.port = port
        self.stop = stop
        self.thread = threading.Thread(target=self.run, daemon=True)

    def connect(self) -> socket.socket | None:
        try:
            return socket.create_connection(("127.0.0.1", self.port), timeout=2)
        except OSError:
            return None

    @abc.abstractmethod
    def run(self) -> None: ...

    def keep_open(self, count: int, open_socket, closed, every: float = 1.0) -> None:
        """``count`` sockets from ``open_socket`` held until the stop; every ``every`` seconds
        one that ``closed`` finds closed by the server (or that could not be opened) is opened
        again, counted in ``reopened``."""
        socks = [open_socket() for _ in range(count)]
        while not self.stop.wait(every):
            for i, s in enumerate(socks):
                if s is None or closed(s):
                    if s is not None:
                        s.close()
                    socks[i] = open_socket()
                    self.reopened += 1
        for s in socks:
            if s is not None:
                s.close()


class IdleSockets(_Attacker):
    """``count`` connections that never send a byte; re-opened when the server drops them."""

    def __init__(self, port: int, stop: threading.Event, count: int = 200):
        super().__init__(port, stop)
        self.count = count
        self.reopened = 0

    def run(self) -> None:
        self.keep_open(self.count, self.connect, lambda s: read_closed(s, 1))


class TricklingSockets(_Attacker):
    """``count`` connections sending one header byte each every ``every`` seconds."""

    def __init__(self, port: int, stop: threading.Event, count: int = 100, every: float = 1.0):
        super().__init__(port, stop)
        self.count = count
        self.every = every
        self.reopened = 0

    def run(self) -> None:
        header = b"GET /stats/summary HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100_000
        socks = [self.connect() for _ in range(self.count)]
        offsets = [0] * self.count
        while not self.stop.wait(self.every):
            for i, s in enumerate(socks):
                try:
                    if s is None:
                        raise OSError
                    s.send(header[offsets[i]:offsets[i] + 1])
                    offsets[i] = (offsets[i] + 1) % len(header)
                except OSError:
                    if s is not None:
                        s.close()
                    socks[i] = self.connect()
                    offsets[i] = 0
                    self.reopened += 1
        for s in socks:
            if s is not None:
                s.close()


class LargePosts(_Attacker):
    """POSTs declaring 300 MB bodies and streaming them as fast as the server takes them."""

    def __init__(self, port: int, stop: threading.Event, pid: int):
        super().__init__(port, stop)
        self.pid = pid
        self.sent = 0
        self.refused_413 = 0
        self.refused_reset = 0
        self.other = 0
        self.max_deleted_files = 0

    def run(self) -> None:
        chunk = b"\0" * (1 << 20)
        while not self.stop.is_set():
            s = self.connect()
            if s is None:
                self.stop.wait(0.5)
                continue
            try:
                s.sendall(b"POST /stats/summary HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: 300000000\r\n\r\n")
                self.sent += 1
                try:
                    for _ in range(16):
                        s.sendall(chunk)
                except OSError:
                    pass
                reply = s.recv(64)
                if reply.startswith(b"HTTP/1.1 413"):
                    self.refused_413 += 1
                elif not reply:
                    # Closed unanswered: refused at the connection limit (the idle and
                    # trickling peers beside hold it), or the 413 lost as below. Refused.
                    self.refused_reset += 1
                else:
                    self.other += 1               # answered, but not refused: a failure
            except (ConnectionResetError, BrokenPipeError):
                # The server answered 413 and closed while this side was still sending: the
                # kernel resets the connection and the 413 may be lost with it. Refused too.
                self.refused_reset += 1
            except OSError:
                self.other += 1
            finally:
                s.close()
            self.max_deleted_files = max(self.max_deleted_files, deleted_files(self.pid))
            self.stop.wait(0.2)


class Smuggler(_Attacker):
    """Requests framed by both ``Content-Length`` and ``Transfer-Encoding: chunked``, with a
    second request after the chunked body; counts how often that second one was answered."""

    REQUEST = (b"POST /stats/summary HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
               b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")

    def __init__(self, port: int, stop: threading.Event):
        super().__init__(port, stop)
        self.sent = 0
        self.refused_400 = 0
        self.smuggled_answered = 0
        self.other = 0

    def run(self) -> None:
        while not self.stop.wait(0.5):
            s = self.connect()
            if s is None:
                continue
            try:
                s.sendall(self.REQUEST)
                self.sent += 1
                reply = read_until_closed(s, 3.0)
            except OSError:
                self.other += 1
                continue
            finally:
                s.close()
            answers = replies(reply)
            if len(answers) > 1:
                self.smuggled_answered += 1
            elif answers == [400]:
                self.refused_400 += 1
            else:
                self.other += 1


class _Pipeliner(_Attacker):
    """``count`` connections, each sending ``depth`` pipelined ``GET path`` requests in one
    go as it opens (a receive buffer of ``receive_buffer`` bytes where given)."""

    receive_buffer: int | None = None

    def __init__(self, port: int, stop: threading.Event, count: int, depth: int, path: str):
        super().__init__(port, stop)
        self.count = count
        self.request = f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode() * depth
        self.sent_bytes = 0
        self.reopened = 0

    def open(self) -> socket.socket | None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if self.receive_buffer is not None:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", self.port))
            s.sendall(self.request)
        except OSError:
            s.close()
            return None
        self.sent_bytes += len(self.request)
        return s


class PipelinedNonReaders(_Pipeliner):
    """Connections with a 4 KB receive buffer, each sending one packet of ``depth``
    pipelined requests and then never reading; re-opened when the server closes them. Against
    a server whose workers wait for a client to read, every worker ends up parked on one."""

    receive_buffer = 4096

    def __init__(self, port: int, stop: threading.Event, count: int = 8, depth: int = 330,
                 path: str = "/metrics"):
        super().__init__(port, stop, count, depth, path)

    def run(self) -> None:
        self.keep_open(self.count, self.open, closed_by_peer)


class PipelinedSlowReaders(_Pipeliner):
    """Connections each pipelining ``depth`` requests for a small body (copied into the
    server's output buffer, not shared) and reading ``read_bytes`` every ``every`` seconds
    to look alive; re-opened when the server closes them."""

    def __init__(self, port: int, stop: threading.Event, count: int = 24, depth: int = 273,
                 path: str = "/openapi.json", read_bytes: int = 2048, every: float = 2.0):
        super().__init__(port, stop, count, depth, path)
        self.read_bytes = read_bytes
        self.every = every

    def run(self) -> None:
        self.keep_open(self.count, self.open, lambda s: read_closed(s, self.read_bytes),
                       self.every)


def read_closed(sock: socket.socket, size: int) -> bool:
    """Reads up to ``size`` bytes without waiting; whether the server closed ``sock``."""
    sock.setblocking(False)
    try:
        return sock.recv(size) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the server closed ``sock``, without reading what it sent.

    A peer that never reads cannot see the server's FIN behind the unread bytes, so this sends
    an empty line (ignored between requests, RFC 9112 section 2.2): to a closed connection
    the kernel answers with a reset, which the next call sees."""
    sock.setblocking(False)
    try:
        sock.send(b"\r\n")
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.settimeout(2)


def read_until_closed(sock: socket.socket, timeout: float) -> bytes:
    """Everything the server sends until it closes the connection or ``timeout`` passes."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + timeout
    data = b""
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data


def replies(stream: bytes) -> list[int]:
    """The status codes of the responses in a byte stream, read one after another by their
    Content-Length (a response without one ends the list: its end cannot be told)."""
    out = []
    while stream:
        head, sep, rest = stream.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = lines[0].split()
        if not sep or len(status) < 2 or not status[1].isdigit():
            break
        out.append(int(status[1]))
        lengths = [line.split(b":", 1)[1].strip() for line in lines[1:]
                   if line.lower().startswith(b"content-length:")]
        if len(lengths) != 1 or not lengths[0].isdigit():
            break
        stream = rest[int(lengths[0]):]
    return out


def deleted_files(pid: int) -> int:
    """Open files of ``pid`` that were deleted (a spooled request body is one)."""
    count = 0
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return 0
    for fd in fds:
        try:
            count += os.readlink(fd).endswith("(deleted)")
        except OSError:
            continue
    return count


def drm_fd_dups(proc: Path, first_pid: int, fdinfo: str, *, processes: int = 50,
                fds: int = 4096, node: str = "renderD128") -> list[int]:
    """Processes under a fake ``proc`` that each dup their one DRM client's fd ``fds`` times
    (the kernel shows every copy: a link to the node, and the same fdinfo text ``fdinfo``,
    hard-linked here): a daemon reading every DRM fd's fdinfo every tick reads
    ``processes`` × ``fds`` of them. Returns the PIDs."""
    pids = list(range(first_pid, first_pid + processes))
    for pid in pids:
        fd_dir, info_dir = _fd_dirs(proc, pid)
        first = info_dir / "0"
        first.write_text(fdinfo.replace("{pid}", str(pid)))
        for fd in range(fds):
            (fd_dir / str(fd)).symlink_to(f"/dev/dri/{node}")
            if fd:
                os.link(first, info_dir / str(fd))
    return pids


def drm_fd_crowd(proc: Path, first_pid: int, fdinfo: str, *, processes: int = 50,
                 fds: int = 4096, node: str = "renderD128") -> list[int]:
    """Processes that each hold ``fds`` − 1 ``/dev/null`` fds and their DRM client last: a
    daemon finding DRM fds by reading every link reads ``processes`` × ``fds`` links a
    tick. Returns the PIDs."""
    pids = list(range(first_pid, first_pid + processes))
    for pid in pids:
        fd_dir, info_dir = _fd_dirs(proc, pid)
        null = info_dir / "0"
        null.write_text("pos:\t0\nflags:\t0100002\nmnt_id:\t25\nino:\t5\n")
        for fd in range(fds - 1):
            (fd_dir / str(fd)).symlink_to("/dev/null")
            if fd:
                os.link(null, info_dir / str(fd))
        (fd_dir / str(fds - 1)).symlink_to(f"/dev/dri/{node}")
        (info_dir / str(fds - 1)).write_text(fdinfo.replace("{pid}", str(pid)))
    return pids


def _fd_dirs(proc: Path, pid: int) -> tuple[Path, Path]:
    fd_dir, info_dir = proc / str(pid) / "fd", proc / str(pid) / "fdinfo"
    fd_dir.mkdir(parents=True, exist_ok=True)
    info_dir.mkdir(exist_ok=True)
    return fd_dir, info_dir


class Probe(_Attacker):
    """Times ``path`` on a fresh connection every 0.5 s with a 1 s timeout, as a kubelet would."""

    def __init__(self, port: int, stop: threading.Event, path: str = "/healthz"):
        super().__init__(port, stop)
        self.path = path
        self.latencies: list[float] = []
        self.failures = 0
        self.errors: collections.Counter = collections.Counter()   # what each failure was

    def run(self) -> None:
        while not self.stop.wait(0.5):
            began = time.monotonic()
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1.0)
            try:
                conn.request("GET", self.path)
                resp = conn.getresponse()
                resp.read()
                if resp.status != 200:
                    self.failures += 1
                    self.errors[f"HTTP {resp.status}"] += 1
                else:
                    self.latencies.append(time.monotonic() - began)
            except (OSError, http.client.HTTPException) as exc:
                self.failures += 1
                self.errors[type(exc).__name__] += 1
            finally:
                conn.close()

    def figures(self) -> dict:
        values = sorted(self.latencies)
        p99 = values[min(len(values) - 1, int(0.99 * len(values)))] if values else None
        return {"probes": len(values) + self.failures, "failures": self.failures,
                "p99_ms": round(p99 * 1000, 1) if p99 is not None else None,
                "max_ms": round(values[-1] * 1000, 1) if values else None,
                "errors": dict(self.errors)}


def start_all(port: int, pid: int, stop: threading.Event, health_port: int | None = None):
    """Every attacker and the probes, started; returns them for ``report``."""
    found = {"idle": IdleSockets(port, stop), "trickle": TricklingSockets(port, stop),
             "posts": LargePosts(port, stop, pid),
             "pipelined_non_readers": PipelinedNonReaders(port, stop),
             "pipelined_slow_readers": PipelinedSlowReaders(port, stop),
             "healthz": Probe(port, stop, "/healthz"), "readyz": Probe(port, stop, "/readyz"),
             "summary": Probe(port, stop, "/stats/summary"),
             "metrics": Probe(port, stop, "/metrics")}
    found["smuggler"] = Smuggler(port, stop)
    if health_port is not None:
        found["trickle_health_port"] = TricklingSockets(health_port, stop)
        found["healthz_health_port"] = Probe(health_port, stop, "/healthz")
    for attacker in found.values():
        attacker.thread.start()
    return found


def report(found: dict) -> dict:
    for attacker in found.values():
        attacker.thread.join(10)
    posts = found["posts"]
    out = {"idle_sockets": found["idle"].count, "idle_reopened": found["idle"].reopened,
           "trickling_sockets": found["trickle"].count,
           "trickling_reopened": found["trickle"].reopened,
           "large_posts": posts.sent, "large_posts_413": posts.refused_413,
           "large_posts_reset": posts.refused_reset,
           "large_posts_other": posts.other, "spooled_files_max": posts.max_deleted_files,
           "smuggling_requests": found["smuggler"].sent,
           "smuggling_refused_400": found["smuggler"].refused_400,
           "smuggled_answered": found["smuggler"].smuggled_answered,
           "smuggling_other": found["smuggler"].other}
    for name in ("pipelined_non_readers", "pipelined_slow_readers"):
        out[f"{name}_sent_bytes"] = found[name].sent_bytes
        out[f"{name}_reopened"] = found[name].reopened
    if "trickle_health_port" in found:
        out["trickling_sockets_health_port"] = found["trickle_health_port"].count
        out["trickling_reopened_health_port"] = found["trickle_health_port"].reopened
    for name in ("healthz", "readyz", "summary", "metrics", "healthz_health_port"):
        if name in found:
            out[f"probe_{name}"] = found[name].figures()
    return out


WATCH_REQUEST = b"GET /api/v1/gpus?watch=true HTTP/1.1\r\nHost: soak\r\n\r\n"


def watch_status(port: int, source: str, timeout: float = 5.0) -> tuple[socket.socket | None,
                                                                           int | None]:
    """A watch requested from ``source`` and its status, peeked (nothing consumed: the watcher
    has read nothing); (None, None) when it could not be had."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                        source_address=(source, 0))
        sock.sendall(WATCH_REQUEST)
        head = b""
        while b"\r\n" not in head:
            head = sock.recv(4096, socket.MSG_PEEK)
            if not head:
                sock.close()
                return None, None
        return sock, int(head.split(b" ", 2)[1])
    except (OSError, ValueError, IndexError):
        return None, None


class WatchHoarder(_Attacker):
    """One client (127.0.0.1) holding ``count`` watches it never reads, re-opened when the
    daemon closes them (a reader of nothing is closed after the stall deadline) or refuses
    them, ``per_round`` every 2 s; every 2 s another client (127.0.0.3) asks for a watch of
    its own."""

    def __init__(self, port: int, stop: threading.Event, count: int = 64, per_round: int = 8):
        super().__init__(port, stop)
        self.count = count
        self.per_round = per_round
        self.statuses: collections.Counter = collections.Counter()
        self.closed_by_daemon = 0
        self.others: collections.Counter = collections.Counter()

    def run(self) -> None:
        held: list[socket.socket] = []
        while not self.stop.wait(2.0):
            for sock in [s for s in held if closed_by_peer(s)]:
                held.remove(sock)
                sock.close()
                self.closed_by_daemon += 1
            for _ in range(min(self.per_round, self.count - len(held))):
                sock, status = watch_status(self.port, "127.0.0.1")
                self.statuses[status] += 1
                if sock is None or status != 200:
                    if sock is not None:
                        sock.close()
                    break
                held.append(sock)
            other, status = watch_status(self.port, "127.0.0.3")
            self.others[status] += 1
            if other is not None:
                other.close()
        for sock in held:
            sock.close()

    def figures(self) -> dict:
        return {"hoarder_statuses": {str(k): v for k, v in self.statuses.items()},
                "hoarder_closed_by_daemon": self.closed_by_daemon,
                "other_client_statuses": {str(k): v for k, v in self.others.items()}}


def start_watch_hoarder(port: int, stop: threading.Event) -> WatchHoarder:
    hoarder = WatchHoarder(port, stop)
    hoarder.thread.start()
    return hoarder
