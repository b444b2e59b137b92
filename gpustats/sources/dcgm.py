"""MIG instance activity from dcgm-exporter's ``/metrics`` (Prometheus text).

``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (ratio of time the graphics engine was active) per GPU
instance, falling back per instance to ``DCGM_FI_PROF_SM_ACTIVE``. Series are keyed by the
``UUID`` label (the parent GPU) and ``GPU_I_ID``. Responses are cached for ``cache_seconds``
and fetched by one caller at a time; a down, slow or garbage exporter yields ``None`` and one
log line per kind of failure (rate-limited).
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

Activity = dict[tuple[str, int], float]


def parse_dcgm_activity(text: str) -> Activity:
    """(GPU UUID, GPU instance id) → activity ratio 0..1. ``ValueError`` on unparsable text."""
    primary: Activity = {}
    fallback: Activity = {}
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # noqa: BLE001 - the parser raises assorted types on garbage
        raise ValueError(f"not Prometheus text: {exc}") from None
    for family in families:
        target = primary if family.name == PRIMARY else fallback if family.name == FALLBACK \
            else None
        if target is None:
            continue
        for sample in family.samples:
            uuid = sample.labels.get("UUID")
            gi = sample.labels.get("GPU_I_ID")
            if not uuid or gi is None or not str(gi).isdigit():
                continue
            value = sample.value
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            target[(uuid, int(gi))] = min(1.0, max(0.0, float(value)))
    merged = dict(fallback)
    merged.update(primary)
    return merged


class DcgmExporterClient:
    def __init__(self, url: str, *, timeout_seconds: float = 1.0, cache_seconds: float = 2.0,
                 session: requests.Session | None = None,
                 monotonic: Callable[[], float] = time.monotonic):
        self._url = url
        self._timeout = timeout_seconds
        self._cache_seconds = cache_seconds
        self._session = session or requests.Session()
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._cached: Activity | None = None
        self._fetched_at: float | None = None
        self._log_once = LogOnce(log, every_seconds=300.0)
        self.requests = 0

    def activity(self) -> Activity | None:
        if not self._lock.acquire(blocking=False):
            return self._cached          # single flight: another caller is fetching
        try:
            now = self._monotonic()
            if self._fetched_at is not None and now - self._fetched_at < self._cache_seconds:
                return self._cached
            self._fetched_at = now
            self._cached = self._fetch()
            return self._cached
        finally:
            self._lock.release()

    def _fetch(self) -> Activity | None:
        self.requests += 1
        try:
            response = self._session.get(self._url, timeout=self._timeout)
            response.raise_for_status()
            activity = parse_dcgm_activity(response.text)
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
        return activity
