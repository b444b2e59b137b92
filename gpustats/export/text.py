"""How a name from the host is shown in every output: one escaping rule and one length cap.

Names come from cgroup directories, the kubelet's log layout, CDI specs, pod-resources and the
CRI; the daemon keeps them as they came (a cgroup path must still open its directory), and every
exporter (JSON, Prometheus and dcgm-compat labels, the page) passes them through :func:`shown`:

* a byte that was not UTF-8 (held as a ``surrogateescape`` code point) is shown as ``\\xNN``;
* a character that does not print — controls, format characters such as the bidirectional
  overrides U+202A–U+202E and isolates U+2066–U+2069, line and paragraph separators, private
  use, unassigned — is shown as ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``;
* a value longer than :data:`MAX_SHOWN_CHARS` after escaping keeps its head and ends in ``…``
  and 8 hex digits of its SHA-256, so two long names that share a head stay apart.

Backslashes are left as they are (systemd writes its own ``\\x2d`` escapes into unit names), so a
shown ``\\xff`` may stand for the byte or for those four characters: the output is for reading
and joining, never for opening the path again.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# The longest value any output carries for one name. Kubernetes names are at most 253
# characters and a pod container's cgroup path about 200; this leaves nested runtimes room.
MAX_SHOWN_CHARS = 1024
_DIGEST_CHARS = 8


def _escape(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:               # surrogateescape: the byte it stood for
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def shown(value: str) -> str:
    """``value`` as every output shows it: printable, valid UTF-8, at most MAX_SHOWN_CHARS."""
    if len(value) <= MAX_SHOWN_CHARS and value.isprintable():
        return value                           # the common case: nothing to do
    text = value if value.isprintable() else \
        "".join(c if c.isprintable() else _escape(c) for c in value)
    if len(text) <= MAX_SHOWN_CHARS:
        return text
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
    return text[:MAX_SHOWN_CHARS - 1 - _DIGEST_CHARS] + "…" + digest[:_DIGEST_CHARS]


def shown_or_none(value: object) -> object:
    """:func:`shown` for a string; anything else unchanged."""
    return shown(value) if isinstance(value, str) else value


def shown_tree(value: Any) -> Any:
    """Every string value in a JSON-shaped tree of dicts and lists passed through ``shown``
    (keys are the exporters' own and are left as they are)."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, dict):
        return {k: shown_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [shown_tree(v) for v in value]
    return value


def json_bytes(body: Any) -> bytes:
    """A JSON response body, compact, with every string shown by the one rule."""
    return json.dumps(shown_tree(body), separators=(",", ":")).encode()
