"""Snapshot bodies on the wire: gzip when the client accepts it, ETag per snapshot, 304.

Each body and its gzip variant are built at most once per snapshot (the store's memo), so a
compressed answer costs a dictionary lookup like an identity one. The ETag names the snapshot
(sequence and time, so it changes across restarts too) and the representation (format,
content coding); ``If-None-Match`` is compared weakly, as RFC 9110 §13.1.2 asks.
"""

from __future__ import annotations

import gzip
from typing import Callable, Hashable

from flask import Request, Response

from gpustats.engine.store import SnapshotStore
from gpustats.model.snapshot import Snapshot

GZIP_LEVEL = 6
_MAX_CODINGS = 32          # Accept-Encoding entries looked at; the rest is ignored


def accepts_gzip(header: str | None) -> bool:
    """Whether an ``Accept-Encoding`` value allows gzip: ``gzip``/``x-gzip`` with q > 0, or
    ``*`` with q > 0 when gzip is not named. A malformed q counts as 0."""
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


def compress(body: bytes) -> bytes:
    """gzip with a fixed header time, so equal bodies compress to equal bytes."""
    return gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0)


def etag(snapshot: Snapshot, representation: str) -> str:
    """An opaque tag (unquoted) for one representation of one snapshot."""
    return f"{snapshot.sequence:x}-{int(snapshot.taken_at * 1000):x}-{representation}"


def coded_tag(tag: str, coding: str | None) -> str:
    """The tag of one content coding of a body: each coding is its own representation."""
    return f"{tag}.gz" if coding == "gzip" else tag


def not_modified(request: Request, tag: str) -> bool:
    """A GET or HEAD whose ``If-None-Match`` names ``tag`` (weakly, RFC 9110 §13.1.2)."""
    return request.method in ("GET", "HEAD") and request.if_none_match.contains_weak(tag)


def snapshot_response(request: Request, store: SnapshotStore, key: Hashable,
                      build: Callable[[Snapshot], bytes], content_type: str,
                      representation: str, vary: tuple[str, ...] = ()) -> Response | None:
    """The latest snapshot's body for ``key`` as the request accepts it; ``None`` before the
    first snapshot. A GET or HEAD whose ``If-None-Match`` names this representation gets 304."""
    if accepts_gzip(request.headers.get("Accept-Encoding")):
        rendered = store.render_variant(key, build, "gzip", compress)
        coding = "gzip"
    else:
        rendered = store.render(key, build)
        coding = None
    if rendered is None:
        return None
    snapshot, body = rendered
    tag = coded_tag(etag(snapshot, representation), coding)
    if not_modified(request, tag):
        response = Response(status=304)
    else:
        response = Response(body, content_type=content_type)
        if coding is not None:
            response.headers["Content-Encoding"] = coding
    response.set_etag(tag)
    response.vary.update((*vary, "Accept-Encoding"))
    return response
