"""The device API: ``GET /api/v1/gpus`` (list, or ``?watch=true``) and ``/api/v1/gpus/<id>``.

Lists and objects are bodies of the latest snapshot (built once per snapshot, conditional
like every body). A watch is checked and begun here, by a worker, and streamed by the serving
loop's watch streams (``serving.py``), which the server offers the app as a callable in
``environ[START_WATCH]``: the view hands it a ``GpuWatch`` and answers headers only. A server
without it (a plain WSGI server, a test client) gets the watch's first events and the end.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any, Callable, cast

from flask import Blueprint, Response, request

from gpustats.engine.store import SnapshotStore
from gpustats.export.gpu_events import Expired, GpuEventLog, GpuWatch, added_lines
from gpustats.export.gpus import gpu_json, gpu_name, gpus_json
from gpustats.web.conditional import Body, respond
from gpustats.web.errors import json_error

if TYPE_CHECKING:
    from werkzeug.datastructures import MultiDict

    from gpustats.model.snapshot import Snapshot

# The environ key under which serving.py offers ``start_watch(stream) -> bool`` (False: no
# watch slot free); serving.py names the same key.
START_WATCH = "gpustats.start_watch"
WATCH_CONTENT_TYPE = "application/x-ndjson"
# A watch without timeoutSeconds ends after 5 to 10 minutes (jittered, so that a fleet of
# clients does not reconnect at once); timeoutSeconds, at most 10 minutes, ends it sooner.
WATCH_SECONDS_MIN, WATCH_SECONDS_MAX = 300, 600
_TRUE, _FALSE = ("true", "1"), ("false", "0")


def _one(args: MultiDict[str, str], name: str) -> str | None:
    values = args.getlist(name)
    if len(values) > 1:
        raise ValueError(f"{name} is given {len(values)} times")
    return values[0] if values else None


def _watch_options(args: MultiDict[str, str]) -> tuple[bool, str | None, int | None]:
    """(watch, resourceVersion, timeoutSeconds) of the query; ValueError says what is wrong."""
    watch = _one(args, "watch")
    if watch is not None and watch not in _TRUE + _FALSE:
        raise ValueError("watch is true or false")
    version = _one(args, "resourceVersion")
    if version is not None and not (version.isascii() and version.isdigit()
                                    and len(version) <= 20):
        raise ValueError("resourceVersion is a version this API gave (decimal digits)")
    timeout = _one(args, "timeoutSeconds")
    seconds = None
    if timeout is not None:
        if not (timeout.isascii() and timeout.isdigit() and len(timeout) <= 4
                and 1 <= int(timeout) <= WATCH_SECONDS_MAX):
            raise ValueError(f"timeoutSeconds is an integer from 1 to {WATCH_SECONDS_MAX}")
        seconds = int(timeout)
    return watch in _TRUE, version, seconds


def _not_ready() -> Response:
    return json_error(503, "not_ready", "no collection tick has completed yet")


def gpus_blueprint(store: SnapshotStore, events: GpuEventLog) -> Blueprint:
    """The device API over the store's snapshots and ``events``."""
    blueprint = Blueprint("gpus", __name__)

    def body(key: Any, build: Callable[[Snapshot], bytes]) -> Body | None:
        rendered = store.render(key, lambda s: Body(build(s), "application/json"))
        return None if rendered is None else cast(Body, rendered[1])   # what the lambda gave

    def index(snapshot: Snapshot) -> dict[str, str]:
        """Each GPU's UUID by its UUID and by its object name."""
        uuids: dict[str, str] = {}
        for device in snapshot.devices:
            for name in (device.identity.uuid, gpu_name(device.identity.uuid)):
                uuids.setdefault(name, device.identity.uuid)
        return uuids

    def one(snapshot: Snapshot, uuid: str) -> Body | bool:
        """The body of the GPU ``uuid`` in ``snapshot`` (False: not in it)."""
        for device in snapshot.devices:
            if device.identity.uuid == uuid:
                return Body(gpu_json(device, events.observe(snapshot)), "application/json")
        return False

    @blueprint.route("/api/v1/gpus")
    def gpus() -> Response:
        try:
            watch, version, seconds = _watch_options(request.args)
        except ValueError as exc:
            return json_error(400, "bad_request", str(exc))
        if watch:
            return _watch(version, seconds)
        listed = body("gpus", lambda s: gpus_json(s, events.observe(s)))
        return _not_ready() if listed is None else respond(request, listed)

    @blueprint.route("/api/v1/gpus/<gpu_id>")
    def gpu(gpu_id: str) -> Response:
        rendered = store.render("gpus-index", index)
        if rendered is None:
            return _not_ready()
        uuid = cast("dict[str, str]", rendered[1]).get(gpu_id)     # what ``index`` gave
        # Memoized per GPU found (never per requested name: those are the client's), built
        # from the snapshot it is memoized for (a newer one may have come meanwhile).
        found = None if uuid is None else store.render(("gpu", uuid), lambda s: one(s, uuid))
        answer = None if found is None else found[1]       # what ``one`` gave: Body or False
        if not isinstance(answer, Body):
            return json_error(404, "not_found", "no GPU has this UUID or name")
        return respond(request, answer)

    def _watch(version: str | None, seconds: int | None) -> Response:
        rendered = store.render("gpus-added", lambda s: added_lines(s, events.observe(s)))
        if rendered is None:
            return _not_ready()
        snapshot = rendered[0]
        added = cast("tuple[bytes, ...]", rendered[1])     # what ``added_lines`` gave
        if version is None or version == "0":       # Kubernetes' "0": from any point
            first, cursor = list(added), events.observe(snapshot).revision
        else:
            try:
                first, cursor = events.replay(int(version))
            except Expired:
                return json_error(410, "expired",
                                  f"the events after resourceVersion {version} are no longer "
                                  "kept (or it is not a version of this run); list again and "
                                  "watch from the list's resourceVersion")
        lasting = seconds if seconds is not None else random.uniform(  # nosec B311: jitter
            WATCH_SECONDS_MIN, WATCH_SECONDS_MAX)
        stream = GpuWatch(events, first, cursor, time.monotonic() + lasting)
        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        start = request.environ.get(START_WATCH)
        if request.method == "HEAD":
            return Response(b"", content_type=WATCH_CONTENT_TYPE, headers=headers)
        if start is None:
            return Response(b"".join(stream.take()[0]), content_type=WATCH_CONTENT_TYPE,
                            headers=headers)
        if not start(stream):
            response = json_error(429, "too_many_watches",
                                  "every watch slot is taken; try again later")
            response.headers["Retry-After"] = "10"
            return response
        # Headers only: the serving loop writes the events (no Content-Length: chunked).
        return Response(iter(()), content_type=WATCH_CONTENT_TYPE, headers=headers)

    return blueprint
