"""Every HTTP error as JSON ``{"error": ..., "message": ...}`` with the right status."""

from __future__ import annotations

from flask import Flask, Response, json
from werkzeug.exceptions import HTTPException, MethodNotAllowed


def json_error(status: int, error: str, message: str) -> Response:
    body = json.dumps({"error": error, "message": message})
    return Response(body, status=status, mimetype="application/json")


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        error = (exc.name or "error").lower().replace(" ", "_")
        response = json_error(exc.code or 500, error, exc.description or exc.name)
        if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
            response.headers["Allow"] = ", ".join(exc.valid_methods)
        return response

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        app.logger.exception("unhandled error serving %s", exc)
        return json_error(500, "internal_error", "internal error; see the daemon log")
