"""MIG instance activity from dcgm-exporter's ``/metrics`` (Prometheus text).

``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (ratio of time the graphics engine was active) per GPU
instance, falling back per instance to ``DCGM_FI_PROF_SM_ACTIVE``. Series are keyed by the
``UUID`` label (the parent GPU; ``uuid`` with the exporter's ``--use-old-namespace``) and
``GPU_I_ID`` (absent on a GPU without MIG: instance ``None``). Responses are cached for
``cache_seconds`` (``failure_backoff_seconds`` after a failure) and fetched by one caller at a
time; a down, slow, garbage or oversized exporter yields ``None``, is counted and logged when
it starts failing and when it recovers. Falling back to GPM or an equal split is the caller's
job.

Fetched with ``requests`` through one session kept across scrapes. One fetch never takes
longer than ``timeout_seconds`` in all, connect and body together: the socket timeout is set to
what is left of that deadline before every receive, so an exporter that drips a byte at a time
is cut off at the deadline (not per chunk); redirects are refused.

The body is parsed as it streams in, never held whole: each piece's complete lines are
searched for the two families' sample lines (a regular expression, no Python loop over the
other lines) and only those reach prometheus_client's parser; the first ``SNIFF_LINES``
non-blank lines are kept to tell an exposition without them from garbage (an HTML page, say).
One scrape stops, and the source is marked failing with its reason, at the first of:

- ``MAX_BODY_BYTES`` (8 MiB) read: ``garbage``. A real exporter's page for 16 GPUs with
  every MIG instance and Kubernetes labels is a few MB at most;
- a line longer than ``MAX_LINE_BYTES`` (16 KiB) among those kept: ``garbage``;
- more than ``MAX_SERIES`` (2,048) activity sample lines: ``too_many_series``. A node has at
  most 16 GPUs x (the GPU + 7 instances) x 2 families = 256; the cap leaves 8 label variants
  of each (pods sharing a GPU, say). prometheus_client takes 25-50 us a line, so the cap
  holds the parse to about 0.1 s;
- more than ``SCRAPE_CPU_SECONDS`` (0.25 s) of this thread's CPU time
  (``time.thread_time``) since the scrape began, reading and parsing together:
  ``cpu_deadline``. Checked after every piece (at most 64 KiB), so it overruns by one
  piece's parse, milliseconds.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from typing import Any, Callable
from urllib.parse import urlsplit

import requests
import urllib3
from prometheus_client.parser import text_string_to_metric_families

from gpustats.sources.errors import CollectionErrors, LogOnce

log = logging.getLogger(__name__)

PRIMARY = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FALLBACK = "DCGM_FI_PROF_SM_ACTIVE"
MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_LINE_BYTES = 16 * 1024
MAX_SERIES = 2048
SCRAPE_CPU_SECONDS = 0.25
READ_BYTES = 65536
SNIFF_LINES = 20
SOURCE = "dcgm_exporter"

Activity = dict[tuple[str, int | None], float]

# A sample line of either family: the exact name, then labels or the value.
_ACTIVITY_LINE = re.compile(rb"^[ \t]*(?:" + PRIMARY.encode() + rb"|" + FALLBACK.encode()
                            + rb")[{ \t][^\n]*", re.MULTILINE)
_NON_BLANK_LINE = re.compile(rb"^[^\S\n]*\S[^\n]*", re.MULTILINE)


class Overloaded(ValueError):
    """The exposition costs more than a real node's would: the scrape stopped. ``reason`` is
    the failure reason the source is marked with."""

    reason = "overloaded"


class TooManySeries(Overloaded):
    reason = "too_many_series"


class CpuDeadline(Overloaded):
    reason = "cpu_deadline"


def _parse(text: str) -> list[Any]:
    try:
        return list(text_string_to_metric_families(text))
    except Exception as exc:  # noqa: BLE001 - the parser raises assorted types on garbage
        raise ValueError(f"not Prometheus text: {exc}") from None


def _instance_id(labels: dict[str, str]) -> tuple[bool, int | None]:
    raw = labels.get("GPU_I_ID")
    if raw is None or raw == "":
        return True, None
    if raw.isascii() and raw.isdigit():
        return True, int(raw)
    return False, None


def _decode(lines: list[bytes]) -> str:
    return b"\n".join(lines).decode("utf-8", errors="replace") + "\n"


class ActivityParser:
    """Prometheus text fed in pieces as it arrives, to the activity map, within the bounds.

    ``feed`` each piece, then ``close`` for the map. Raises ``ValueError`` on garbage (an
    unparsable activity line, none and a head that is not Prometheus text, a line too long),
    ``TooManySeries`` past ``max_series`` activity lines and ``CpuDeadline`` past
    ``cpu_seconds`` of ``cpu_clock`` from its creation.
    """

    def __init__(self, *, max_series: int = MAX_SERIES,
                 cpu_seconds: float = SCRAPE_CPU_SECONDS,
                 cpu_clock: Callable[[], float] = time.thread_time):
        self._max_series = max_series
        self._cpu_seconds = cpu_seconds
        self._cpu_clock = cpu_clock
        self._cpu_deadline = cpu_clock() + cpu_seconds
        self._carry = b""                   # the last, incomplete line
        self._head: list[bytes] = []        # the first non-blank lines, for garbage detection
        self._series = 0
        self._primary: Activity = {}
        self._fallback: Activity = {}

    def feed(self, data: bytes) -> None:
        complete, _, self._carry = (self._carry + data).rpartition(b"\n")
        if len(self._carry) > MAX_LINE_BYTES:
            raise ValueError(f"a line longer than {MAX_LINE_BYTES} bytes")
        self._take(complete)

    def close(self) -> Activity:
        """The map, once the whole body was fed."""
        self._take(self._carry)
        self._carry = b""
        if not self._series:
            _parse(_decode(self._head))
        merged = dict(self._fallback)
        merged.update(self._primary)
        return merged

    def _take(self, complete: bytes) -> None:
        """The complete lines of one piece: the head kept, activity lines parsed."""
        if len(self._head) < SNIFF_LINES:
            found = _NON_BLANK_LINE.finditer(complete)
            self._head += [m.group() for _, m in zip(range(SNIFF_LINES - len(self._head)),
                                                     found)]
        wanted = _ACTIVITY_LINE.findall(complete)
        if wanted:
            self._count(wanted)
            self._add(_parse(_decode(wanted)))
        self._check_cpu()

    def _count(self, wanted: list[bytes]) -> None:
        self._series += len(wanted)
        if self._series > self._max_series:
            raise TooManySeries(f"more than {self._max_series} activity series")
        if any(len(line) > MAX_LINE_BYTES for line in wanted):
            raise ValueError(f"a line longer than {MAX_LINE_BYTES} bytes")

    def _check_cpu(self) -> None:
        if self._cpu_clock() > self._cpu_deadline:
            raise CpuDeadline(f"reading and parsing took more than {self._cpu_seconds:g} s "
                              "of CPU")

    def _add(self, families: list[Any]) -> None:
        for family in families:
            for sample in family.samples:
                target = self._primary if sample.name == PRIMARY else \
                    self._fallback if sample.name == FALLBACK else None
                uuid = sample.labels.get("UUID") or sample.labels.get("uuid")
                ok, gi = _instance_id(sample.labels)
                value = sample.value
                if target is None or not uuid or not ok \
                        or not isinstance(value, (int, float)) or not math.isfinite(value):
                    continue
                target[(uuid, gi)] = min(1.0, max(0.0, float(value)))


def parse_dcgm_activity(text: str, *, max_series: int = MAX_SERIES,
                        cpu_seconds: float = SCRAPE_CPU_SECONDS,
                        cpu_clock: Callable[[], float] = time.thread_time) -> Activity:
    """(GPU UUID, GPU instance id or None) → activity ratio 0..1.

    Lines of other families are not parsed; ``ValueError`` when an activity line is
    unparsable, or when there is none and the text does not start like Prometheus text
    (``TooManySeries`` and ``CpuDeadline``, both ``ValueError``, past the bounds).
    Non-finite values and series without a GPU UUID are skipped; ratios are clamped to 0..1.
    """
    parser = ActivityParser(max_series=max_series, cpu_seconds=cpu_seconds,
                            cpu_clock=cpu_clock)
    data = text.encode("utf-8", errors="replace")
    for start in range(0, len(data), READ_BYTES):
        parser.feed(data[start:start + READ_BYTES])
    return parser.close()


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
    """The exporter's activity map, fetched and parsed within the module's bounds.

    ``max_series``, ``cpu_seconds`` and ``cpu_clock`` are ``ActivityParser``'s, for one
    scrape (reading and parsing)."""

    def __init__(self, url: str, *, timeout_seconds: float = 1.0, cache_seconds: float = 2.0,
                 failure_backoff_seconds: float = 10.0, errors: CollectionErrors | None = None,
                 clock: Callable[[], float] = time.monotonic, max_series: int = MAX_SERIES,
                 cpu_seconds: float = SCRAPE_CPU_SECONDS,
                 cpu_clock: Callable[[], float] = time.thread_time):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self._url = url
        self._timeout = timeout_seconds
        self._cache_seconds = cache_seconds
        self._backoff_seconds = max(cache_seconds, failure_backoff_seconds)
        self._errors = errors or CollectionErrors()
        self._clock = clock
        self._max_series = max_series
        self._cpu_seconds = cpu_seconds
        self._cpu_clock = cpu_clock
        self._lock = threading.Lock()
        self._session = _session()       # one connection pool, kept alive across scrapes
        self._cached: Activity | None = None
        self._next_fetch: float | None = None
        self._log_once = LogOnce(log, every_seconds=300.0)
        self.requests = 0

    @property
    def url(self) -> str:
        return self._url

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

    def _scrape(self) -> Activity:
        """GET the URL within one total deadline (wall time, whatever the server's pace) and
        parse the body as it comes, within the parser's bounds.

        Redirects are not followed (the exporter's URL is configured, not discovered). The
        body is streamed and reading stops at the cap or when the parser gives up. Before
        every receive the socket's timeout is set to what is left of the deadline, so neither
        a silent nor a dripping server holds the tick past it.
        """
        parser = ActivityParser(max_series=self._max_series, cpu_seconds=self._cpu_seconds,
                                cpu_clock=self._cpu_clock)
        deadline = time.monotonic() + self._timeout

        def left() -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Deadline()
            return remaining

        try:
            # ``total``: connect and the wait for the headers share what is left (a plain
            # number would give each of them all of it). requests' hints leave out the
            # urllib3 Timeout its adapter documents and takes (HTTPAdapter.send).
            response = self._session.get(
                self._url, timeout=urllib3.Timeout(total=left()),  # type: ignore[arg-type]
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
            size = 0
            while True:
                remaining = left()
                if sock is not None:
                    sock.settimeout(remaining)
                chunk = raw.read1(READ_BYTES)
                if not chunk:
                    raw.release_conn()        # read to the end: kept alive for the next scrape
                    break
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise ValueError(f"body larger than {MAX_BODY_BYTES} bytes")
                parser.feed(chunk)
        except (TimeoutError, urllib3.exceptions.TimeoutError):
            raise _Deadline() from None
        except urllib3.exceptions.HTTPError as exc:     # the body broke off, say
            raise OSError(str(exc)) from None
        finally:
            response.close()      # an unread rest is not drained: the connection is dropped
        return parser.close()

    def _fetch(self) -> Activity | None:
        self.requests += 1
        try:
            activity = self._scrape()
        except _Deadline:
            self._errors.failed(SOURCE, "timeout", f"dcgm-exporter {self._url} did not answer "
                                f"within {self._timeout:.1f} s; MIG activity falls back")
            return None
        except (OSError, requests.RequestException, _Refused) as exc:
            self._errors.failed(SOURCE, "down", f"dcgm-exporter {self._url} unreachable "
                                f"({exc or type(exc).__name__}); MIG activity falls back")
            return None
        except Overloaded as exc:
            self._errors.failed(SOURCE, exc.reason, f"dcgm-exporter {self._url} serves more "
                                f"than a node would ({exc}); scrape stopped, MIG activity "
                                "falls back")
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
