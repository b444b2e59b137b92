"""Flask app factory: views read the snapshot store only (no NVML, cgroup or socket I/O)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Hashable, Protocol

from flask import Blueprint, Flask, Response, current_app, json, request

from gpustats.engine.store import SnapshotStore
from gpustats.export.gpus import gpus_json
from gpustats.export.status import status_json
from gpustats.export.summary import summary_json
from gpustats.model.snapshot import Snapshot
from gpustats.web.errors import json_error, register_error_handlers
from gpustats.web.openapi import openapi_document
from gpustats.web.representation import snapshot_response


class MetricsRenderer(Protocol):
    def negotiate(self, accept: str | None
                  ) -> tuple[Hashable, Callable[[Snapshot], bytes], str]:
        """(memo key, body builder, content type) of the format the Accept header asks for."""


@dataclass(frozen=True)
class WebSettings:
    housekeeping_interval: float
    stale_after_intervals: float = 3.0
    # /healthz turns 503 when no snapshot was published for this many intervals (a wedged tick)
    watchdog_intervals: float = 12.0
    started_monotonic: float = field(default_factory=time.monotonic)


def _store() -> SnapshotStore:
    return current_app.extensions["gpustats.store"]


def _kubelet_flag(name: str) -> bool:
    """A kubelet query flag as the kubelet reads it: true only when given once as ``true``;
    any other value, or a repetition, is false, never an error (kubelet server/stats
    handler.go reads ``only_cpu_and_memory`` from the parsed form this way)."""
    values = request.values.getlist(name)
    return len(values) == 1 and values[0] == "true"


stats = Blueprint("stats", __name__)


@stats.route("/stats/summary", methods=["GET", "POST"])
@stats.route("/stats/summary/", methods=["GET", "POST"])
def summary() -> Response:
    only = _kubelet_flag("only_cpu_and_memory")
    # strict: the kubelet's keys only, for decoders that reject unknown fields; read by the
    # same exact-"true" rule (a gpustats flag, not the kubelet's).
    strict = _kubelet_flag("strict")
    key = ("summary", only) if not strict else ("summary", only, "strict")
    response = snapshot_response(request, _store(), key,
                                 lambda s: summary_json(s, only_cpu_and_memory=only,
                                                        strict=strict),
                                 "application/json",
                                 ("cm" if only else "s") + ("k" if strict else ""))
    if response is None:
        return json_error(503, "not_ready", "no collection tick has completed yet")
    return response


api = Blueprint("api", __name__)


@api.route("/api/v1/gpus")
def gpus() -> Response:
    response = snapshot_response(request, _store(), "gpus", gpus_json, "application/json", "g")
    if response is None:
        return json_error(503, "not_ready", "no collection tick has completed yet")
    return response


@api.route("/api/v1/status")
def status() -> Response:
    rendered = _store().render("status", status_json)
    if rendered is None:
        return json_error(503, "not_ready", "no collection tick has completed yet")
    return Response(rendered[1], mimetype="application/json")


@api.route("/openapi.json")
def openapi() -> Response:
    body = current_app.extensions.setdefault("gpustats.openapi", json.dumps(openapi_document(
        current_app.extensions.get("gpustats.history_seconds", 0))))
    return Response(body, mimetype="application/json")


probes = Blueprint("probes", __name__)


@probes.route("/healthz")
def healthz() -> Response:
    """Alive unless the housekeeping loop is wedged: no snapshot for ``watchdog_intervals``."""
    settings: WebSettings = current_app.extensions["gpustats.settings"]
    snapshot = _store().latest()
    since = snapshot.monotonic if snapshot is not None else settings.started_monotonic
    age = time.monotonic() - since
    limit = settings.housekeeping_interval * settings.watchdog_intervals
    if age > limit:
        return json_error(503, "tick_stalled",
                          f"no snapshot published for {age:.1f} s (watchdog {limit:.1f} s): "
                          "the collection tick is stuck")
    return Response(b'{"status":"ok"}', mimetype="application/json")


@probes.route("/readyz")
def readyz() -> Response:
    settings: WebSettings = current_app.extensions["gpustats.settings"]
    snapshot = _store().latest()
    if snapshot is None:
        return json_error(503, "not_ready", "the first collection tick has not completed")
    age = time.monotonic() - snapshot.monotonic
    limit = settings.housekeeping_interval * settings.stale_after_intervals
    if age > limit:
        return json_error(503, "stale",
                          f"the last collection tick finished {age:.1f} s ago (limit {limit:.1f} s)")
    body = json.dumps({"status": "ready", "snapshotSequence": snapshot.sequence,
                       "snapshotAgeSeconds": round(age, 3)})
    return Response(body, mimetype="application/json")


metrics = Blueprint("metrics", __name__)


@metrics.route("/metrics")
def metrics_view() -> Response:
    renderer: MetricsRenderer | None = current_app.extensions.get("gpustats.metrics")
    if renderer is None:
        return json_error(404, "not_found", "metrics are not enabled")
    key, build, content_type = renderer.negotiate(request.headers.get("Accept"))
    representation = "om" if content_type.startswith("application/openmetrics") else "t"
    response = snapshot_response(request, _store(), key, build, content_type, representation,
                                 vary=("Accept",))
    if response is None:
        return Response(b"", content_type=content_type)      # before the first tick, as before
    return response


def create_app(store: SnapshotStore, settings: WebSettings,
               metrics_renderer: MetricsRenderer | None = None,
               extra_blueprints: tuple[Blueprint, ...] = (), probes_only: bool = False) -> Flask:
    """The app; ``probes_only``: just /healthz and /readyz (the separate health listener)."""
    app = Flask("gpustats")
    app.json.sort_keys = False
    # No redirects at all: werkzeug builds their absolute Location from the Host header, so
    # "//" merging or slash appending would send clients wherever a request's Host says.
    app.url_map.merge_slashes = False
    app.url_map.strict_slashes = False
    app.extensions["gpustats.store"] = store
    app.extensions["gpustats.settings"] = settings
    if metrics_renderer is not None:
        app.extensions["gpustats.metrics"] = metrics_renderer
    blueprints = (probes,) if probes_only else (stats, api, probes, metrics, *extra_blueprints)
    for blueprint in blueprints:
        app.register_blueprint(blueprint)
    register_error_handlers(app)
    return app
