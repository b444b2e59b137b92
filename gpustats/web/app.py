"""Flask app factory: views read the snapshot store only (no NVML, cgroup or socket I/O).

Every blueprint is built by a factory handed its dependencies; every body derived from a
snapshot goes out through ``conditional.respond`` (ETag, 304, gzip, Vary, Cache-Control).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Hashable, Protocol, cast

from flask import Blueprint, Flask, Response, json, request
from flask.json.provider import DefaultJSONProvider

from gpustats.engine.store import SnapshotStore
from gpustats.export.gpu_events import GpuEventLog
from gpustats.export.status import status_json
from gpustats.export.summary import summary_json
from gpustats.model.snapshot import Snapshot
from gpustats.web.conditional import Body, memoized_per_header, respond
from gpustats.web.errors import json_error, register_error_handlers
from gpustats.web.gpus import gpus_blueprint
from gpustats.web.openapi import openapi_document


class MetricsNegotiator(Protocol):
    """Chooses the exposition format of ``/metrics`` from the Accept header."""

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
    # The bound of /api/v1/history's ``seconds`` the OpenAPI document states; 0: history off.
    history_seconds: int = 0


def _not_ready() -> Response:
    return json_error(503, "not_ready", "no collection tick has completed yet")


def snapshot_body(store: SnapshotStore, key: Hashable, build: Callable[[Snapshot], bytes],
                  content_type: str) -> Body | None:
    """The latest snapshot's body for ``key``, built at most once per snapshot; ``None``
    before the first snapshot."""
    rendered = store.render(key, lambda s: Body(build(s), content_type))
    return None if rendered is None else cast(Body, rendered[1])    # what the lambda gave


def _kubelet_flag(args, name: str) -> bool:
    """A kubelet query flag as the kubelet reads it: true only when given once as ``true``;
    any other value, or a repetition, is false, never an error (kubelet server/stats
    handler.go reads ``only_cpu_and_memory`` from the parsed form this way)."""
    values = args.getlist(name)
    return len(values) == 1 and values[0] == "true"


def stats_blueprint(store: SnapshotStore) -> Blueprint:
    """The kubelet's ``/stats/summary``."""
    blueprint = Blueprint("stats", __name__)

    @blueprint.route("/stats/summary", methods=["GET", "POST"])
    @blueprint.route("/stats/summary/", methods=["GET", "POST"])
    def summary() -> Response:
        # GET: the query; POST: the query and a form body, as the kubelet parses the form.
        # A GET with no query (what pollers send) has no flag set: nothing to parse.
        environ = request.environ
        only = strict = False
        if environ.get("QUERY_STRING") or environ["REQUEST_METHOD"] != "GET":
            args = request.args if environ["REQUEST_METHOD"] == "GET" else request.values
            only = _kubelet_flag(args, "only_cpu_and_memory")
            # strict: the kubelet's keys only, for decoders that reject unknown fields; read
            # by the same exact-"true" rule (a gpustats flag, not the kubelet's).
            strict = _kubelet_flag(args, "strict")
        body = snapshot_body(store, ("summary", only, strict),
                             lambda s: summary_json(s, only_cpu_and_memory=only, strict=strict),
                             "application/json")
        return _not_ready() if body is None else respond(request, body)

    return blueprint


def api_blueprint(store: SnapshotStore, history_seconds: int) -> Blueprint:
    """``/api/v1/status`` and the OpenAPI document (``/api/v1/gpus``: ``web/gpus.py``)."""
    blueprint = Blueprint("api", __name__)
    document = Body(json.dumps(openapi_document(history_seconds)).encode(), "application/json")

    @blueprint.route("/api/v1/status")
    def status() -> Response:
        body = snapshot_body(store, "status", status_json, "application/json")
        return _not_ready() if body is None else respond(request, body)

    @blueprint.route("/openapi.json")
    def openapi() -> Response:
        return respond(request, document)

    return blueprint


def probes_blueprint(store: SnapshotStore, settings: WebSettings) -> Blueprint:
    """``/healthz`` and ``/readyz``: answers about the loop's age, never cached."""
    blueprint = Blueprint("probes", __name__)

    @blueprint.route("/healthz")
    def healthz() -> Response:
        """Alive unless the housekeeping loop is wedged: no snapshot for ``watchdog_intervals``."""
        snapshot = store.latest()
        since = snapshot.monotonic if snapshot is not None else settings.started_monotonic
        age = time.monotonic() - since
        limit = settings.housekeeping_interval * settings.watchdog_intervals
        if age > limit:
            return json_error(503, "tick_stalled",
                              f"no snapshot published for {age:.1f} s (watchdog {limit:.1f} s): "
                              "the collection tick is stuck")
        return Response(b'{"status":"ok"}', mimetype="application/json")

    @blueprint.route("/readyz")
    def readyz() -> Response:
        snapshot = store.latest()
        if snapshot is None:
            return json_error(503, "not_ready", "the first collection tick has not completed")
        age = time.monotonic() - snapshot.monotonic
        limit = settings.housekeeping_interval * settings.stale_after_intervals
        if age > limit:
            return json_error(503, "stale", f"the last collection tick finished {age:.1f} s "
                                            f"ago (limit {limit:.1f} s)")
        body = json.dumps({"status": "ready", "snapshotSequence": snapshot.sequence,
                           "snapshotAgeSeconds": round(age, 3)})
        return Response(body, mimetype="application/json")

    return blueprint


def metrics_blueprint(store: SnapshotStore, negotiator: MetricsNegotiator | None) -> Blueprint:
    """``/metrics`` in the format the Accept header negotiates; ``None``: metrics off (404)."""
    blueprint = Blueprint("metrics", __name__)
    # Scrapers send one Accept value over and over: negotiated once per value.
    negotiate = memoized_per_header(negotiator.negotiate) if negotiator is not None else None

    @blueprint.route("/metrics")
    def metrics_view() -> Response:
        if negotiate is None:
            return json_error(404, "not_found", "metrics are not enabled")
        key, build, content_type = negotiate(request.environ.get("HTTP_ACCEPT"))
        body = snapshot_body(store, key, build, content_type)
        if body is None:
            return Response(b"", content_type=content_type)      # before the first tick
        return respond(request, body, vary=("Accept",))

    return blueprint


def create_app(store: SnapshotStore, settings: WebSettings,
               metrics_bodies: MetricsNegotiator | None = None,
               extra_blueprints: tuple[Blueprint, ...] = (), probes_only: bool = False,
               gpu_events: GpuEventLog | None = None) -> Flask:
    """The app; ``probes_only``: just /healthz and /readyz (the separate health listener).
    ``gpu_events``: the device API's event log, observed by the tick (else one of its own,
    observed by requests only)."""
    app = Flask("gpustats")
    assert isinstance(app.json, DefaultJSONProvider)     # Flask's own; none other is set
    app.json.sort_keys = False
    # No redirects at all: werkzeug builds their absolute Location from the Host header, so
    # "//" merging or slash appending would send clients wherever a request's Host says.
    app.url_map.merge_slashes = False
    app.url_map.strict_slashes = False
    probes = probes_blueprint(store, settings)
    blueprints = (probes,) if probes_only else (
        stats_blueprint(store), api_blueprint(store, settings.history_seconds),
        gpus_blueprint(store, gpu_events if gpu_events is not None else GpuEventLog()), probes,
        metrics_blueprint(store, metrics_bodies), *extra_blueprints)
    for blueprint in blueprints:
        app.register_blueprint(blueprint)
    register_error_handlers(app)
    return app
