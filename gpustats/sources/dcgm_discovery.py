"""dcgm-exporter found by itself: the node-local endpoint its chart exposes, tried now and then.

Where ``--dcgm-exporter-url`` is unset, dcgm-exporter's chart usually serves on the node itself
(hostPort or hostNetwork ``9400``): ``http://localhost:9400/metrics`` is probed every
``every_seconds`` in a thread of its own, never on a request and never holding the tick. A
probe is one bounded GET (``timeout_seconds`` in all, at most ``PROBE_BYTES`` read, no
redirect) whose body must be Prometheus text carrying a ``DCGM_FI_`` family; once one answers
so, the exporter's client (``make_client(url)``) is kept and every ``activity()`` is its.
Until then ``activity()`` is None (MIG activity falls back, as with no exporter).
"""

from __future__ import annotations

import http.client
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Protocol
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from gpustats.sources.dcgm import Activity
    from gpustats.sources.errors import CollectionErrors

log = logging.getLogger(__name__)

NODE_LOCAL_URL = "http://localhost:9400/metrics"
PROBE_BYTES = 256 * 1024
_MARKERS = (b"\nDCGM_FI_", b"# TYPE DCGM_FI_", b"# HELP DCGM_FI_")


class ActivityClient(Protocol):
    def activity(self) -> Activity | None: ...

    def close(self) -> None: ...


def looks_like_dcgm_exporter(status: int, body: bytes) -> bool:
    """A 200 whose body carries dcgm-exporter's families."""
    return status == 200 and (body.startswith(b"DCGM_FI_") or any(m in body for m in _MARKERS))


def probe(url: str, timeout_seconds: float) -> bool:
    """One bounded GET of ``url``: does dcgm-exporter answer there?"""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout_seconds)
    try:
        conn.request("GET", parts.path or "/", headers={"Accept": "text/plain",
                                                         "Accept-Encoding": "identity"})
        response = conn.getresponse()
        return looks_like_dcgm_exporter(response.status, response.read(PROBE_BYTES))
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


class DcgmDiscovery:
    """An activity source that is dcgm-exporter's once it is found at one of ``candidates``."""

    def __init__(self, make_client: Callable[[str], ActivityClient],
                 candidates: tuple[str, ...] = (NODE_LOCAL_URL,), every_seconds: float = 300.0,
                 timeout_seconds: float = 2.0, clock: Callable[[], float] = time.monotonic,
                 probe: Callable[[str, float], bool] = probe) -> None:
        self._make_client = make_client
        self.candidates = candidates           # where it is looked for (tests: a fake)
        self._every = every_seconds
        self._timeout = timeout_seconds
        self._clock = clock
        self._probe = probe
        self._lock = threading.Lock()
        self._client: ActivityClient | None = None
        self._url: str | None = None
        self._next_try = clock()
        self._probing: threading.Thread | None = None
        self._closed = False
        self.probes = 0

    @property
    def url(self) -> str | None:
        """The exporter's URL once found."""
        return self._url

    def activity(self) -> Activity | None:
        client = self._client
        if client is not None:
            return client.activity()
        self._maybe_probe()
        return None

    def _maybe_probe(self) -> None:
        with self._lock:
            now = self._clock()
            if self._closed or now < self._next_try or \
                    (self._probing is not None and self._probing.is_alive()):
                return
            self._next_try = now + self._every
            self._probing = threading.Thread(target=self._find, name="dcgm-discovery",
                                             daemon=True)
            self._probing.start()

    def _find(self) -> None:
        for url in self.candidates:
            self.probes += 1
            if self._probe(url, self._timeout):
                with self._lock:
                    if self._closed:
                        return
                    self._client = self._make_client(url)
                    self._url = url
                log.info("dcgm-exporter found at %s: MIG instance activity is read from it", url)
                return

    def wait_probe(self, timeout: float) -> None:
        """Until the probe under way (if any) is over (tests, shutdown)."""
        probing = self._probing
        if probing is not None:
            probing.join(timeout)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            client = self._client
        if client is not None:
            client.close()


def activity_source(url: str | None, errors: CollectionErrors) -> Any:
    """What ``--dcgm-exporter-url`` asks for: that exporter, none (``none``), or the one found
    on the node (unset). The HTTP client (requests and what it loads, about 5 MB resident) is
    imported only once an exporter is configured or found."""
    # Any: the collector's ActivitySource (a DcgmExporterClient or DcgmDiscovery), or None.
    if url == "none":
        return None

    def client(found: str) -> ActivityClient:
        from gpustats.sources.dcgm import DcgmExporterClient
        return DcgmExporterClient(found, errors=errors)
    return DcgmDiscovery(client) if url is None else client(url)
