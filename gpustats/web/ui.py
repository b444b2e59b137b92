"""``GET /``: the node at a glance for people, and its two assets (script and style sheet).

The page is rendered on the server from the latest snapshot (readable without JavaScript) once
per snapshot; its script adds live charts from ``api/v1/history``. Every URL is relative, so the
page works behind a path prefix (serve it as ``/prefix/``). Page and assets carry ETags.
"""

from __future__ import annotations

from importlib import resources

import jinja2
from flask import Blueprint, Response, request

from gpustats import __version__
from gpustats.engine.store import SnapshotStore
from gpustats.export.page import chart_colours_json, page_view
from gpustats.model.snapshot import Snapshot
from gpustats.web.conditional import Body, respond
from gpustats.web.errors import json_error

ASSETS = {"gpustats.js": "text/javascript; charset=utf-8",
          "gpustats.css": "text/css; charset=utf-8"}

# Scripts and styles come from this origin only; the page asks for nothing elsewhere.
PAGE_HEADERS = (
    ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; "
                                "img-src 'self' data:; connect-src 'self'; base-uri 'none'; "
                                "form-action 'none'; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
)

_WAITING = (b"<!doctype html><html lang=en><meta charset=utf-8><meta http-equiv=refresh "
            b"content=2><title>gpustats</title><p>Waiting for the first collection tick.</p>")


def _package_file(*parts: str) -> bytes:
    return resources.files("gpustats.web").joinpath(*parts).read_bytes()


def _interval_text(seconds: float) -> str:
    return f"{seconds:g} s"


def ui_blueprint(store: SnapshotStore, *, housekeeping_interval: float,
                 history_seconds: float) -> Blueprint:
    """The page over ``store``; ``history_seconds`` 0 means no charts (history off)."""
    blueprint = Blueprint("ui", __name__)
    # Read once at start-up: nothing on the request path opens a file.
    assets = {name: Body(_package_file("static", name), content_type)
              for name, content_type in ASSETS.items()}
    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined,
                                     trim_blocks=True, lstrip_blocks=True)
    template = environment.from_string(_package_file("templates", "index.html").decode())
    static_context = {
        "assets": {name: body.tag[:10] for name, body in assets.items()},
        "interval": f"{housekeeping_interval:g}",
        "interval_text": _interval_text(housekeeping_interval),
        "history_seconds": int(history_seconds),
        "colours": chart_colours_json(),
        "version": __version__,
    }

    def build(snapshot: Snapshot) -> Body:
        html = template.render(page=page_view(snapshot), **static_context)
        return Body(html.encode(), "text/html; charset=utf-8")

    @blueprint.route("/")
    def page() -> Response:
        rendered = store.render("ui.page", build)
        if rendered is None:
            return Response(_WAITING, status=503, content_type="text/html; charset=utf-8",
                            headers=(("Retry-After", "2"), *PAGE_HEADERS))
        body = rendered[1]
        if not isinstance(body, Body):       # the store keeps what ``build`` made: a Body
            raise TypeError(f"the page rendered as {type(body).__name__}, not a Body")
        return respond(request, body, headers=PAGE_HEADERS)

    @blueprint.route("/assets/<name>")
    def asset(name: str) -> Response:
        body = assets.get(name)
        if body is None:
            return json_error(404, "not_found", f"no asset named {name!r}")
        return respond(request, body, cache_control="public, max-age=86400",
                       headers=(("X-Content-Type-Options", "nosniff"),))

    return blueprint
