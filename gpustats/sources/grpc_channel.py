"""A unix-socket gRPC channel that turns an absent socket and call failures into ``None``.

Shared by the pod-resources and runtime clients: the socket is checked with one ``stat``
before any connect (an absent socket is "source off", logged once, no retry storm); a failing
call is counted and logged when the source starts failing and when it recovers; the channel
is reused across calls. Replies are capped at ``MAX_RECEIVE_BYTES``: grpc refuses a larger
message from its length prefix (RESOURCE_EXHAUSTED) before buffering it, so a huge reply
costs neither memory nor a tick. A reply under the cap that the caller will not use (over its
own counts, or malformed) is refused by raising ``ReplyRefused`` from ``invoke``: the source
fails with that reason, as when the call itself fails.
grpc itself is imported only once a socket exists (it is ~20 MB of a daemon's memory, and
bare-metal hosts have neither socket).
"""

from __future__ import annotations

import logging
import os
import stat
from typing import Any, Callable

from gpustats.sources.errors import CollectionErrors

# A pod-resources List for 1,000 pods of three containers holding 8 devices each is under 1 MB
# on the wire; 8 MiB leaves room for CPU and memory assignments while keeping a hostile or
# runaway reply (decoded, a reply costs several times its wire size in Python objects) far
# from the daemon's memory limit.
MAX_RECEIVE_BYTES = 8 * 1024 * 1024


class ReplyRefused(Exception):
    """The peer answered, but with a reply the caller will not use: the source fails for
    ``reason`` (a short snake_case word, shown as the source's error reason)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class UnixChannel:
    def __init__(self, socket_path: str, what: str, logger: logging.Logger, *,
                 timeout_seconds: float, source: str | None = None,
                 errors: CollectionErrors | None = None):
        self.socket_path = socket_path
        self._what = what
        self._source = source or what.replace(" ", "_").replace("-", "_")
        self._log = logger
        self.timeout = timeout_seconds
        self._channel: Any = None
        self._errors = errors or CollectionErrors()
        self._was_present: bool | None = None

    def _present(self) -> bool:
        try:
            present = stat.S_ISSOCK(os.stat(self.socket_path).st_mode)
        except OSError:
            present = False
        if present != self._was_present:
            if present and self._was_present is not None:
                self._log.info("%s socket %s appeared", self._what, self.socket_path)
            elif not present:
                self._log.info("%s socket %s is absent; that source is off until it appears",
                               self._what, self.socket_path)
                self.close()
            self._was_present = present
        return present

    def call(self, make_stub: Callable[[Any], Any],
             invoke: Callable[[Any, float], Any]) -> Any | None:
        """``invoke(stub, timeout)``; ``None`` when the socket is absent, the call failed or
        ``invoke`` refused the reply (``ReplyRefused``)."""
        if not self._present():
            self._errors.absent(self._source)
            return None
        import grpc

        if self._channel is None:
            self._channel = grpc.insecure_channel(
                f"unix://{os.path.abspath(self.socket_path)}",
                options=[("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
                         ("grpc.enable_retries", 0)])
        try:
            reply = invoke(make_stub(self._channel), self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            name = code.name if code is not None else "UNKNOWN"
            details = exc.details() if hasattr(exc, "details") else exc
            self._errors.failed(self._source, name.lower(), f"{self._what} call on "
                                f"{self.socket_path} failed: {name} ({details})")
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL,
                        grpc.StatusCode.RESOURCE_EXHAUSTED):
                self.close()
            return None
        except ReplyRefused as refused:
            self._errors.failed(self._source, refused.reason, f"{self._what} call on "
                                f"{self.socket_path}: reply refused: {refused}")
            return None
        self._errors.succeeded(self._source)
        return reply

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
