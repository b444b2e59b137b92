"""``GET /api/v1/usage``: energy, cost and CO2e by period and tenant field, from the usage
database.

The one view that reads a file on request: a read-only SQLite connection of its own (never
the writer's), a busy timeout, the query interrupted past ``QUERY_SECONDS``, at most
``MAX_ROWS`` rows and ``CONCURRENT_QUERIES`` queries at a time (the rest answered 429).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from typing import TYPE_CHECKING, Callable

from flask import Blueprint, Response, json, request

from gpustats.usage.database import open_database
from gpustats.usage.query import (
    QUERY_SECONDS, QueryError, QueryTimeout, TooManyRows, parse_query, run_query,
)
from gpustats.usage.report import focus_csv, report_dict
from gpustats.web.errors import json_error

if TYPE_CHECKING:
    from werkzeug.datastructures import MultiDict

CONCURRENT_QUERIES = 2
_PARAMETERS = ("from", "to", "month", "by", "step", "format")


def _wants_csv(args: MultiDict[str, str], accept: str | None) -> bool | None:
    """CSV (``format=csv`` or an Accept that prefers text/csv), JSON, or ``None``: a bad
    ``format``."""
    formats = args.getlist("format")
    if formats:
        if len(formats) != 1 or formats[0] not in ("csv", "json"):
            return None
        return formats[0] == "csv"
    return accept is not None and "text/csv" in accept and "application/json" not in accept


def usage_blueprint(path: str | None, *, currency: str | None, node: str,
                    wall: Callable[[], float] = time.time) -> Blueprint:
    """The usage API over the database at ``path``; ``None``: usage off (404)."""
    blueprint = Blueprint("usage", __name__)
    slots = threading.BoundedSemaphore(CONCURRENT_QUERIES)

    @blueprint.route("/api/v1/usage")
    def usage() -> Response:
        if path is None:
            return json_error(404, "not_found", "usage is not recorded (no state dir)")
        unknown = sorted(set(request.args) - set(_PARAMETERS))
        if unknown:
            return json_error(400, "bad_request", f"unknown parameter {unknown[0]!r}")
        csv_wanted = _wants_csv(request.args, request.headers.get("Accept"))
        if csv_wanted is None:
            return json_error(400, "bad_request", "format must be given once: csv or json")
        values = {k: request.args.getlist(k) for k in request.args if k != "format"}
        try:
            query = parse_query(values, wall())
        except QueryError as exc:
            return json_error(400, "bad_request", str(exc))
        if not os.path.exists(path):
            return json_error(503, "not_ready", "no usage has been recorded yet")
        if not slots.acquire(blocking=False):
            response = json_error(429, "too_many_requests",
                                  f"{CONCURRENT_QUERIES} usage queries are running already")
            response.headers["Retry-After"] = "1"
            return response
        try:
            connection = open_database(path, read_only=True, timeout=1.0)
            try:
                rows = run_query(connection, query, seconds=QUERY_SECONDS)
                stored = connection.execute(
                    "SELECT value FROM meta WHERE key='currency'").fetchone()
            finally:
                connection.close()
        except TooManyRows as exc:
            return json_error(413, "too_many_rows", str(exc))
        except (QueryTimeout, sqlite3.OperationalError) as exc:
            response = json_error(503, "unavailable", f"usage query failed: {exc}")
            response.headers["Retry-After"] = "5"
            return response
        finally:
            slots.release()
        shown_currency = currency or (stored[0] if stored else None)
        if csv_wanted:
            return Response(focus_csv(query, rows, shown_currency),
                            content_type="text/csv; charset=utf-8",
                            headers={"Vary": "Accept", "Cache-Control": "no-cache"})
        body = json.dumps(report_dict(query, rows, shown_currency, node))
        return Response(body, mimetype="application/json",
                        headers={"Vary": "Accept", "Cache-Control": "no-cache"})

    return blueprint
