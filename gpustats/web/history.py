"""``GET /api/v1/history?seconds=N``: the recent history, rendered once per recorded tick and N."""

from __future__ import annotations

import re
import threading
from typing import Protocol

from flask import Blueprint, Response, request
from werkzeug.exceptions import BadRequest

from gpustats.export.history import history_json
from gpustats.model.history import HistoryWindow
from gpustats.web.conditional import Body, respond
from gpustats.web.errors import json_error

_DIGITS = re.compile(r"[0-9]{1,10}")


class HistorySource(Protocol):
    duration_seconds: float

    @property
    def sequence(self) -> int | None: ...

    def window(self, seconds: float | None = None) -> HistoryWindow | None: ...


def parse_seconds(values: list[str], duration_seconds: float) -> int | None:
    """The ``seconds`` query value: absent (the whole duration) or one integer 1..duration."""
    if not values:
        return None
    limit = int(duration_seconds)
    message = f"query parameter 'seconds' must be given once as an integer from 1 to {limit}"
    if len(values) > 1 or not _DIGITS.fullmatch(values[0]):
        raise BadRequest(message)
    seconds = int(values[0])
    if not 1 <= seconds <= limit:
        raise BadRequest(message)
    return seconds


# Bodies kept per tick: the whole window and the few spans pages ask for. Other spans are
# rendered per request and not kept, so odd queries cannot fill memory.
KEPT_PER_TICK = 4


class _Rendered:
    """Bodies of the latest recorded tick, per ``seconds``; rebuilt at most once per tick."""

    def __init__(self, history: HistorySource) -> None:
        self._history = history
        self._lock = threading.Lock()
        self._sequence: int | None = None
        self._bodies: dict[int | None, Body] = {}

    def body(self, seconds: int | None) -> Body | None:
        sequence = self._history.sequence
        if sequence is None:
            return None
        with self._lock:
            if sequence != self._sequence:
                self._sequence, self._bodies = sequence, {}
            body = self._bodies.get(seconds)
            if body is None:
                window = self._history.window(seconds)
                if window is None:
                    return None
                body = Body(history_json(window), "application/json")
                if window.sequence == sequence and (seconds is None
                                                    or len(self._bodies) < KEPT_PER_TICK):
                    self._bodies[seconds] = body
            return body


def history_blueprint(history: HistorySource | None) -> Blueprint:
    """The history API over ``history``; ``None`` (history off) answers 404."""
    blueprint = Blueprint("history", __name__)
    rendered = _Rendered(history) if history is not None else None

    @blueprint.route("/api/v1/history")
    def history_view() -> Response:
        if history is None or rendered is None:
            return json_error(404, "not_found", "history is off (--history-duration 0)")
        seconds = parse_seconds(request.args.getlist("seconds"), history.duration_seconds)
        body = rendered.body(seconds)
        if body is None:
            return json_error(503, "not_ready", "no collection tick has completed yet")
        return respond(request, body)

    return blueprint
