"""A unix-socket gRPC channel that turns an absent socket and call failures into ``None``.

Shared by the pod-resources and runtime clients: the socket is checked with one ``stat``
before any connect (an absent socket is "source off", logged once, no retry storm); each
failure kind is logged once per ``log_every`` seconds; the channel is reused across calls.
grpc itself is imported only once a socket exists (it is ~20 MB of a daemon's memory, and
bare-metal hosts have neither socket).
"""

from __future__ import annotations

import logging
import os
import stat
from typing import Any, Callable

from gpustats.sources.errors import LogOnce

MAX_RECEIVE_BYTES = 64 * 1024 * 1024   # nodes with many pods exceed grpc's 4 MiB default


class UnixChannel:
    def __init__(self, socket_path: str, what: str, logger: logging.Logger, *,
                 timeout_seconds: float, log_every: float = 300.0):
        self.socket_path = socket_path
        self._what = what
        self._log = logger
        self.timeout = timeout_seconds
        self._channel: Any = None
        self._log_once = LogOnce(logger, every_seconds=log_every)
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
        """``invoke(stub, timeout)``; ``None`` when the socket is absent or the call failed."""
        if not self._present():
            return None
        import grpc

        if self._channel is None:
            self._channel = grpc.insecure_channel(
                f"unix://{os.path.abspath(self.socket_path)}",
                options=[("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
                         ("grpc.enable_retries", 0)])
        try:
            return invoke(make_stub(self._channel), self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            name = code.name if code is not None else "UNKNOWN"
            self._log_once(name, logging.WARNING, "%s call on %s failed: %s (%s)", self._what,
                           self.socket_path, name, exc.details() if hasattr(exc, "details")
                           else exc)
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL):
                self.close()
            return None

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
