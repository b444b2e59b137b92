"""MIG instance activity from dcgm-exporter's ``/metrics`` (Prometheus text).

``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (ratio of time the graphics engine was active) per GPU
instance, falling back per instance to ``DCGM_FI_PROF_SM_ACTIVE``. Series are keyed by the
``UUID`` label (the parent GPU; ``uuid`` with the exporter's ``--use-old-namespace``) and
``GPU_I_ID`` (absent on a GPU without MIG: instance ``None``). Responses are cached for
``cache_seconds`` (``failure_backoff_seconds`` after a failure) and fetched by one caller at a
time; a down, slow or garbage exporter yields ``None``, is counted and logged when it starts
failing and when it recovers. Falling back to GPM or an equal split is the caller's job.

Fetched with ``requests`` through one session kept across scrapes. One fetch never takes
longer than ``timeout_seconds`` in all, connect and body together: the socket timeout is set to
what is left of that deadline before every receive, so an exporter that drips a byte at a time
is cut off at the deadline (not per chunk); the body is streamed and reading stops past
``MAX_BODY_BYTES``; redirects are refused.
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from typing import Callable
from urllib.parse import urlsplit

import requests
import urllib3
from prometheus_client.parser import text_string_to_metric_families

from gpustats.sources.errors import CollectionErrors, LogOnce

log = logging.getLogger(__name__)

PRIMARY = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FALLBACK = "DCGM_FI_PROF_SM_ACTIVE"
MAX_BODY_BYTES = 32 * 1024 * 1024
SOURCE = "dcgm_exporter"

Activity = dict[tuple[str, int | None], float]


SNIFF_LINES = 20


def _activity_lines(text: str) -> str:
    """Only the two families' sample lines: the rest of a large exposition is not parsed."""
    return "\n".join(line for line in text.splitlines()
                     if line.lstrip().startswith((PRIMARY, FALLBACK))) + "\n"


def _parse(text: str) -> list:
    try:
        return list(text_string_to_metric_families(text))
    except Exception as exc:  # noqa: BLE001 - the parser raises assorted types on garbage
        raise ValueError(f"not Prometheus text: {exc}") from None


def _check_exposition(text: str) -> None:
    """``ValueError`` unless the first lines parse as Prometheus text (an HTML page, say)."""
    head = [line for line in text.splitlines() if line.strip()][:SNIFF_LINES]
    _parse("\n".join(head) + "\n")


def _instance_id(labels: dict[str, str]) -> tuple[bool, int | None]:
    raw = labels.get("GPU_I_ID")
    if raw is None or raw == "":
        return True, None
    if raw.isascii() and raw.isdigit():
        return True, int(raw)
    return False, None


def parse_dcgm_activity(text: str) -> Activity:
    """(GPU UUID, GPU instance id or None) → activity ratio 0..1.

    Lines of other families are not parsed; ``ValueError`` when an activity line is
    unparsable, or when there is none and the text does not start like Prometheus text.
    Non-finite values and series without a GPU UUID are skipped; ratios are clamped to 0..1.
    """
    primary: Activity = {}
    fallback: Activity = {}
    wanted = _activity_lines(text)
    if wanted == "\n":
        _check_exposition(text)
    families = _parse(wanted)
    for family in families:
        for sample in family.samples:
            target = primary if sample.name == PRIMARY else \
                fallback if sample.name == FALLBACK else None
            uuid = sample.labels.get("UUID") or sample.labels.get("uuid")
            ok, gi = _instance_id(sample.labels)
            value = sample.value
            if target is None or not uuid or not ok or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                continue
            target[(uuid, gi)] = min(1.0, max(0.0, float(value)))
    merged = dict(fallback)
    merged.update(primary)
    return merged


class _Deadline(Exception):
    pass


class _Refused(Exception):
    """An answer that is not the exposition: an HTTP error status or a redirect."""


def _session() -> requests.Session:
    """A session that behaves the same whatever the environment says.

    No proxy, ``.netrc`` or CA-bundle variables from the environment (``trust_env``): the
    exporter is the node's own, reached as configured. The body is asked for unencoded, so
    the size cap counts the bytes that are parsed (no gzip bomb).
    """
    session = requests.Session()
    session.trust_env = False
    session.headers.update({"Accept": "text/plain", "Accept-Encoding": "identity"})
    return session


class DcgmExporterClient:
    def __init__(self, url: str, *, timeout_seconds: float = 1.0, cache_seconds: float = 2.0,
                 failure_backoff_seconds: float = 10.0, errors: CollectionErrors | None = None,
                 clock: Callable[[], float] = time.monotonic):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self._url = url
        self._timeout = timeout_seconds
        self._cache_seconds = cache_seconds
        self._backoff_seconds = max(cache_seconds, failure_backoff_seconds)
        self._errors = errors or CollectionErrors()
        self._clock = clock
        self._lock = threading.Lock()
        self._session = _session()       # one connection pool, kept alive across scrapes
        self._cached: Activity | None = None
        self._next_fetch: float | None = None
        self._log_once = LogOnce(log, every_seconds=300.0)
        self.requests = 0

    def activity(self) -> Activity | None:
        """The latest activity map, or ``None`` while the exporter cannot be used."""
        if not self._lock.acquire(blocking=False):
            return self._cached          # single flight: another caller is fetching
        try:
            now = self._clock()
            if self._next_fetch is not None and now < self._next_fetch:
                return self._cached
            self._cached = self._fetch()
            wait = self._cache_seconds if self._cached is not None else self._backoff_seconds
            self._next_fetch = now + wait
            return self._cached
        finally:
            self._lock.release()

    def close(self) -> None:
        """Let go of the kept-alive connection."""
        self._session.close()

    def _read_body(self) -> str:
        """GET the URL within one total deadline (wall time, whatever the server's pace).

        Redirects are not followed (the exporter's URL is configured, not discovered). The
        body is streamed and reading stops at the cap. Before every receive the socket's
        timeout is set to what is left of the deadline, so neither a silent nor a dripping
        server holds the tick past it.
        """
        deadline = time.monotonic() + self._timeout

        def left() -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Deadline()
            return remaining

        try:
            # ``total``: connect and the wait for the headers share what is left (a plain
            # number would give each of them all of it).
            response = self._session.get(self._url, timeout=urllib3.Timeout(total=left()),
                                         stream=True, allow_redirects=False)
        except requests.Timeout:
            raise _Deadline() from None
        try:
            if response.is_redirect:
                raise _Refused(f"HTTP {response.status_code} redirect to "
                               f"{response.headers.get('Location', '?')!r} not followed")
            if response.status_code >= 300:
                raise _Refused(f"HTTP {response.status_code} {response.reason}")
            raw = response.raw
            sock = getattr(raw.connection, "sock", None)
            chunks, size = [], 0
            while True:
                remaining = left()
                if sock is not None:
                    sock.settimeout(remaining)
                chunk = raw.read1(65536)
                if not chunk:
                    raw.release_conn()        # read to the end: kept alive for the next scrape
                    break
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise ValueError(f"body larger than {MAX_BODY_BYTES} bytes")
                chunks.append(chunk)
        except (socket.timeout, TimeoutError, urllib3.exceptions.TimeoutError):
            raise _Deadline() from None
        except urllib3.exceptions.HTTPError as exc:     # the body broke off, say
            raise OSError(str(exc)) from None
        finally:
            response.close()      # an unread rest is not drained: the connection is dropped
        return b"".join(chunks).decode("utf-8", errors="replace")

    def _fetch(self) -> Activity | None:
        self.requests += 1
        try:
            activity = parse_dcgm_activity(self._read_body())
        except _Deadline:
            self._errors.failed(SOURCE, "timeout", f"dcgm-exporter {self._url} did not answer "
                                f"within {self._timeout:.1f} s; MIG activity falls back")
            return None
        except (OSError, requests.RequestException, _Refused) as exc:
            self._errors.failed(SOURCE, "down", f"dcgm-exporter {self._url} unreachable "
                                f"({exc or type(exc).__name__}); MIG activity falls back")
            return None
        except ValueError as exc:
            self._errors.failed(SOURCE, "garbage", f"dcgm-exporter {self._url} answered garbage "
                                f"({exc}); MIG activity falls back")
            return None
        self._errors.succeeded(SOURCE)
        if not activity:
            self._log_once("empty", logging.WARNING, "dcgm-exporter %s serves neither %s nor "
                           "%s (profiling metrics not enabled or not supported?); MIG "
                           "activity falls back", self._url, PRIMARY, FALLBACK)
        else:
            self._log_once.forget("empty")
        return activity
