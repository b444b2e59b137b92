"""One turn of the serving loop: waitress's ``wasyncore.poll2``, with each readiness the kernel
reported handed only to the connection that was polled for it.

A turn polls every connection, then handles what the kernel reported, one descriptor after
another. Handling one can close a connection (its peer's end, a deadline, room made at the
limit, a worker's failed send) and accept new ones, and the kernel gives a new socket the
lowest free descriptor: often the one just freed. waitress looked each reported descriptor up
in its map again, so the closed connection's readiness reached the new one: its ``recv``
found nothing yet (EAGAIN, which waitress takes for a socket error and closes on), or the old
one's hang-up closed it, before its request was read; the client, a probe among hundreds of
reconnecting peers, saw its connection reset. Here an event whose descriptor now belongs to
another connection is dropped: that connection is polled at the next turn.
"""

from __future__ import annotations

import select
from typing import Any

from waitress import wasyncore


def poll_once(timeout: float, sockets: dict[int, Any]) -> None:
    """Polls ``sockets`` (descriptor → dispatcher) for up to ``timeout`` seconds and handles
    what each polled dispatcher is ready for."""
    pollster = select.poll()
    polled = {}
    for fd, obj in list(sockets.items()):
        flags = 0
        if obj.readable():
            flags |= select.POLLIN | select.POLLPRI
        if obj.writable() and not obj.accepting:    # a listening socket is never writable
            flags |= select.POLLOUT
        if flags:
            pollster.register(fd, flags)
            polled[fd] = obj
    try:
        events = pollster.poll(int(timeout * 1000))
    except InterruptedError:
        return
    for fd, flags in events:
        obj = sockets.get(fd)
        if obj is not None and obj is polled.get(fd):
            wasyncore.readwrite(obj, flags)
