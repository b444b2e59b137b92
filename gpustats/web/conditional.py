"""Responses for bodies built once: ETag revalidation (304) and a gzip copy when accepted."""

from __future__ import annotations

import hashlib
import threading

from flask import Request, Response

from gpustats.web.representation import accepts_gzip, coded_tag, compress, not_modified


def content_etag(body: bytes) -> str:
    return hashlib.blake2b(body, digest_size=12).hexdigest()


class Body:
    """One rendered body, its ETag, and its gzip copy (compressed on first demand, once)."""

    __slots__ = ("data", "etag", "content_type", "_gzipped", "_lock")

    def __init__(self, data: bytes, content_type: str, etag: str | None = None) -> None:
        self.data = data
        self.etag = etag or content_etag(data)
        self.content_type = content_type
        self._gzipped: bytes | None = None
        self._lock = threading.Lock()

    def gzipped(self) -> bytes:
        if self._gzipped is None:
            with self._lock:
                if self._gzipped is None:
                    self._gzipped = compress(self.data)
        return self._gzipped


# Below this size gzip saves too little to be worth a compression per body.
GZIP_MIN_BYTES = 1024


def respond(request: Request, body: Body, *, cache_control: str,
            headers: dict[str, str] | None = None) -> Response:
    """200 with the body (gzip when the client accepts it), or 304 when ``If-None-Match``
    names its ETag (compared as for snapshot bodies)."""
    use_gzip = len(body.data) >= GZIP_MIN_BYTES \
        and accepts_gzip(request.headers.get("Accept-Encoding"))
    etag = coded_tag(body.etag, "gzip" if use_gzip else None)
    if not_modified(request, etag):
        response = Response(status=304)
    else:
        response = Response(body.gzipped() if use_gzip else body.data,
                            content_type=body.content_type)
        if use_gzip:
            response.headers["Content-Encoding"] = "gzip"
    response.set_etag(etag)
    response.headers["Cache-Control"] = cache_control
    response.vary.add("Accept-Encoding")
    for key, value in (headers or {}).items():
        response.headers[key] = value
    return response
