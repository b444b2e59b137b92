"""HTTP listeners: the data port, and an optional health port, both bounded against hostile peers.

waitress's defaults suit a trusted network: 100 connections in all, idle connections kept
120 s, request bodies up to 1 GiB spooled to temporary files. A node agent on a pod network
gets none of that trust, so:

- the connection limit is sized from the file-descriptor limit (raised to its hard limit where
  needed), with ``poll`` instead of ``select`` so descriptors above 1024 work;
- a connection idle for ``CHANNEL_TIMEOUT_SECONDS`` is closed (checked every
  ``CLEANUP_SECONDS``), so idle and trickling sockets free their slot within seconds;
- request bodies above ``MAX_BODY_BYTES`` are refused with 413 from their Content-Length (or
  as soon as a chunked body passes the cap) and never reach a temporary file; headers are
  capped at ``MAX_HEADER_BYTES`` (431);
- ``/healthz`` and ``/readyz`` can also be served on a separate small listener with its own
  thread and connection budget (``--health-listen``), so probes answer while the data port is
  saturated.
"""

from __future__ import annotations

import logging
import threading

from waitress import create_server, wasyncore

from gpustats.fdlimit import HEALTH_CONNECTIONS, connection_limit

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024          # the API takes no body; 16 KiB is far above any real one
MAX_HEADER_BYTES = 16 * 1024
CHANNEL_TIMEOUT_SECONDS = 5
CLEANUP_SECONDS = 2
IDLE_WAKE_SECONDS = 30              # no client connection: nothing to expire, sleep long


def _run(server) -> None:
    """waitress's ``server.run()``, waking every ``CLEANUP_SECONDS`` only while clients are
    connected (idle channels must be expired); with none, every ``IDLE_WAKE_SECONDS``, which
    keeps a dormant daemon's CPU near zero. Signals interrupt the wait either way."""
    sockets = server._map
    base = len(sockets)                  # the listening socket and the wake-up pipe
    try:
        while sockets:
            wasyncore.poll2(CLEANUP_SECONDS if len(sockets) > base else IDLE_WAKE_SECONDS,
                            sockets)
    except (SystemExit, KeyboardInterrupt):
        server.task_dispatcher.shutdown()


def _server(app, host: str, port: int, *, threads: int, connections: int):
    return create_server(
        app, host=host, port=port, threads=threads, ident="gpustats",
        clear_untrusted_proxy_headers=True, connection_limit=connections,
        channel_timeout=CHANNEL_TIMEOUT_SECONDS, cleanup_interval=CLEANUP_SECONDS,
        asyncore_loop_timeout=CLEANUP_SECONDS, asyncore_use_poll=True,
        max_request_body_size=MAX_BODY_BYTES, max_request_header_size=MAX_HEADER_BYTES,
        # Responses stay in memory (a /metrics body is a few MB at most): a spilled one would
        # land in /tmp, a small memory-backed volume in the DaemonSet.
        outbuf_overflow=64 * 1024 * 1024)


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
    """The data server (run in the calling thread) and the health server (its own thread)."""

    def __init__(self, app, listen: tuple[str, int], health_app=None,
                 health_listen: tuple[str, int] | None = None):
        connections = connection_limit()
        try:
            self.data = _server(app, *listen, threads=8, connections=connections)
        except OSError as exc:
            raise ListenError(listen, "--listen", exc) from exc
        self.health = None
        if health_app is not None and health_listen is not None:
            try:
                self.health = _server(health_app, *health_listen, threads=1,
                                      connections=HEALTH_CONNECTIONS)
            except OSError as exc:
                self.data.close()
                raise ListenError(health_listen, "--health-listen", exc) from exc
        self._thread: threading.Thread | None = None
        log.debug("serving with up to %d connections, idle timeout %d s", connections,
                  CHANNEL_TIMEOUT_SECONDS)

    @staticmethod
    def port_of(server) -> int:
        return server.effective_port

    def run(self) -> None:
        """Serve until a signal handler raises out of the data server's loop."""
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
        self.data.close()
        if self.health is not None:
            self.health.close()
