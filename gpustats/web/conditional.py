"""The one response path for bodies built once: ETag, 304, gzip, Vary and Cache-Control.

Every body the API serves from a snapshot (and the page's assets, the OpenAPI document) is a
``Body``: its bytes, built at most once per snapshot (the store's memo), and its gzip copy,
compressed at most once and only when a client asks for it. The ETag is a hash of the
identity bytes, so equal bodies share a tag and a restart cannot reuse one for other bytes;
the gzip copy is its own representation (``.gz``). ``If-None-Match`` is compared weakly
(RFC 9110 §13.1.2) on GET and HEAD.

Per-request work is kept to look-ups in the request's environ and a few header tuples: the
negotiated coding is memoized per ``Accept-Encoding`` value, a 200's headers are sent as they
are built here (werkzeug would copy and check them again), and a large body is handed to the
server as a file (``wsgi.file_wrapper``), so waitress sends it from the one shared buffer
instead of copying it into each connection's output buffer.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import threading

from flask import Request, Response
from werkzeug.datastructures import Headers
from werkzeug.wsgi import wrap_file

GZIP_LEVEL = 6
# Below this size gzip saves too little to be worth a compression per body.
GZIP_MIN_BYTES = 1024
# From this size a body is sent from a shared buffer, not copied per connection (below it the
# copy costs less than the file wrapper's extra output buffer).
SHARED_MIN_BYTES = 64 * 1024
_MAX_CODINGS = 32          # Accept-Encoding entries looked at; the rest is ignored


# Header values remembered per parse: clients repeat one value; the bound keeps a stream of
# distinct long values from pinning memory (longer ones are parsed every time).
MEMO_ENTRIES = 256
MEMO_MAX_CHARS = 256


def memoized_per_header(parse):
    """``parse(value)`` remembered for short header values (``MEMO_ENTRIES`` of them)."""
    cached = functools.lru_cache(maxsize=MEMO_ENTRIES)(parse)

    def lookup(value):
        return cached(value) if value is None or len(value) <= MEMO_MAX_CHARS else parse(value)

    return lookup


def _parse_accepts_gzip(header: str | None) -> bool:
    if not header:
        return False
    gzip_q = star_q = None
    for part in header.split(",", _MAX_CODINGS)[:_MAX_CODINGS]:
        coding, _, params = part.partition(";")
        coding = coding.strip().lower()
        q = 1.0
        for param in params.split(";"):
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 0.0
                if not 0.0 <= q <= 1.0:
                    q = 0.0
        if coding in ("gzip", "x-gzip"):
            gzip_q = q if gzip_q is None else max(gzip_q, q)
        elif coding == "*":
            star_q = q
    if gzip_q is not None:
        return gzip_q > 0
    return star_q is not None and star_q > 0


_accepts_gzip = memoized_per_header(_parse_accepts_gzip)


def accepts_gzip(header: str | None) -> bool:
    """Whether an ``Accept-Encoding`` value allows gzip: ``gzip``/``x-gzip`` with q > 0, or
    ``*`` with q > 0 when gzip is not named. A malformed q counts as 0."""
    return _accepts_gzip(header)


def compress(body: bytes) -> bytes:
    """gzip with a fixed header time, so equal bodies compress to equal bytes."""
    return gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0)


def content_tag(data: bytes) -> str:
    """The opaque tag (unquoted) of a body's identity bytes."""
    return hashlib.blake2b(data, digest_size=12).hexdigest()


class Body:
    """One rendered body, its ETag, and its gzip copy (compressed on first demand, once)."""

    __slots__ = ("data", "tag", "content_type", "_gzipped", "_lock")

    def __init__(self, data: bytes, content_type: str) -> None:
        self.data = data
        self.tag = content_tag(data)
        self.content_type = content_type
        self._gzipped: bytes | None = None
        self._lock = threading.Lock()

    @property
    def compressible(self) -> bool:
        return len(self.data) >= GZIP_MIN_BYTES

    def gzipped(self) -> bytes:
        if self._gzipped is None:
            with self._lock:
                if self._gzipped is None:
                    self._gzipped = compress(self.data)
        return self._gzipped


def _matches(request: Request, environ: dict, quoted_tag: str) -> bool:
    """A GET or HEAD whose ``If-None-Match`` names the tag, compared weakly."""
    if "HTTP_IF_NONE_MATCH" not in environ or environ["REQUEST_METHOD"] not in ("GET", "HEAD"):
        return False
    return request.if_none_match.contains_weak(quoted_tag[1:-1])


class _BodyResponse(Response):
    """A body's 200: its headers, built by ``respond`` (Content-Length included), need none
    of werkzeug's per-request fix-ups (Location, Content-Location, lengths by status), so
    they are sent as they are rather than copied and checked again for every request."""

    def get_wsgi_headers(self, environ) -> Headers:
        return self.headers


def respond(request: Request, body: Body, *, cache_control: str = "no-cache",
            vary: tuple[str, ...] = (), headers: tuple[tuple[str, str], ...] = ()) -> Response:
    """200 with the body (gzip when the client accepts it and the body is worth it), or 304
    when ``If-None-Match`` names the representation's ETag."""
    # The environ, read once (``request`` is a context proxy; each attribute costs a look-up),
    # and no header view built per request.
    environ = request.environ
    use_gzip = body.compressible and accepts_gzip(environ.get("HTTP_ACCEPT_ENCODING"))
    quoted = f'"{body.tag}.gz"' if use_gzip else f'"{body.tag}"'
    common = [("ETag", quoted), ("Cache-Control", cache_control),
              ("Vary", ", ".join((*vary, "Accept-Encoding"))), *headers]
    if _matches(request, environ, quoted):
        return Response(status=304, headers=common)
    data = body.gzipped() if use_gzip else body.data
    common.append(("Content-Type", body.content_type))
    if use_gzip:
        common.append(("Content-Encoding", "gzip"))
    if len(data) < SHARED_MIN_BYTES:
        return _BodyResponse(data, headers=common)
    common.append(("Content-Length", str(len(data))))
    # BytesIO over bytes shares them until written to: no copy per request.
    return _BodyResponse(wrap_file(environ, io.BytesIO(data)), headers=common,
                         direct_passthrough=True)
