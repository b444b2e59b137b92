"""MIG instance activity from dcgm-exporter's ``/metrics`` (Prometheus text).

``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (ratio of time the graphics engine was active) per GPU
instance, falling back per instance to ``DCGM_FI_PROF_SM_ACTIVE``. Series are keyed by the
``UUID`` label (the parent GPU; ``uuid`` with the exporter's ``--use-old-namespace``) and
``GPU_I_ID`` (absent on a GPU without MIG: instance ``None``). Responses are cached for
``cache_seconds`` (``failure_backoff_seconds`` after a failure) and fetched by one caller at a
time; a down, slow or garbage exporter yields ``None`` and one log line per kind of failure
(rate-limited). Falling back to GPM or an equal split is the caller's job.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Callable

import requests
from prometheus_client.parser import text_string_to_metric_families

from gpustats.sources.errors import LogOnce

log = logging.getLogger(__name__)

PRIMARY = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FALLBACK = "DCGM_FI_PROF_SM_ACTIVE"
MAX_BODY_BYTES = 32 * 1024 * 1024

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


class DcgmExporterClient:
    def __init__(self, url: str, *, timeout_seconds: float = 1.0, cache_seconds: float = 2.0,
                 failure_backoff_seconds: float = 10.0, session: requests.Session | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self._url = url
        self._timeout = timeout_seconds
        self._cache_seconds = cache_seconds
        self._backoff_seconds = max(cache_seconds, failure_backoff_seconds)
        self._session = session or requests.Session()
        self._clock = clock
        self._lock = threading.Lock()
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

    def _read_body(self) -> str:
        deadline = self._clock() + self._timeout
        with self._session.get(self._url, timeout=self._timeout, stream=True) as response:
            response.raise_for_status()
            chunks, size = [], 0
            for chunk in response.iter_content(65536):
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise ValueError(f"body larger than {MAX_BODY_BYTES} bytes")
                if self._clock() > deadline:
                    raise requests.Timeout("body still arriving after the timeout")
                chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", errors="replace")

    def _fetch(self) -> Activity | None:
        self.requests += 1
        try:
            activity = parse_dcgm_activity(self._read_body())
        except requests.Timeout:
            self._log_once("timeout", logging.WARNING, "dcgm-exporter %s did not answer within "
                           "%.1f s; MIG activity falls back", self._url, self._timeout)
            return None
        except requests.RequestException as exc:
            self._log_once("down", logging.WARNING, "dcgm-exporter %s unreachable (%s); MIG "
                           "activity falls back", self._url, exc)
            return None
        except ValueError as exc:
            self._log_once("garbage", logging.WARNING, "dcgm-exporter %s answered garbage (%s); "
                           "MIG activity falls back", self._url, exc)
            return None
        for kind in ("timeout", "down", "garbage"):
            self._log_once.forget(kind)
        if not activity:
            self._log_once("empty", logging.WARNING, "dcgm-exporter %s serves neither %s nor "
                           "%s (profiling metrics not enabled or not supported?); MIG "
                           "activity falls back", self._url, PRIMARY, FALLBACK)
        else:
            self._log_once.forget("empty")
        return activity
