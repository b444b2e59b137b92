"""systemd's notify protocol (``sd_notify``) over ``$NOTIFY_SOCKET``; a no-op when unset."""

from __future__ import annotations

import os
import socket


def _address(raw: str) -> str | bytes:
    # "@name" is a Linux abstract socket: a leading NUL byte.
    return b"\0" + raw[1:].encode() if raw.startswith("@") else raw


def notify(message: str, environ: dict[str, str] | None = None) -> bool:
    """Send one notification; False when there is no socket or sending failed."""
    env = os.environ if environ is None else environ
    target = env.get("NOTIFY_SOCKET")
    if not target:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(_address(target))
            sock.sendall(message.encode())
        return True
    except OSError:
        return False


def ready(environ: dict[str, str] | None = None) -> bool:
    return notify("READY=1", environ)


def watchdog(environ: dict[str, str] | None = None) -> bool:
    return notify("WATCHDOG=1", environ)


def stopping(environ: dict[str, str] | None = None) -> bool:
    return notify("STOPPING=1", environ)


def status(text: str, environ: dict[str, str] | None = None) -> bool:
    return notify(f"STATUS={text}", environ)


def watchdog_interval_seconds(environ: dict[str, str] | None = None) -> float | None:
    """``$WATCHDOG_USEC`` in seconds when it is meant for this process, else ``None``."""
    env = os.environ if environ is None else environ
    usec = env.get("WATCHDOG_USEC")
    pid = env.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 1e6 if value > 0 else None
