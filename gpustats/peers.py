"""Who is at the other end of a connection, as a key to count what one client holds: its
address on TCP (IPv4, IPv6; the port left out: one host's connections are one client), its
UID on a unix socket (``SO_PEERCRED``, socket(7))."""

from __future__ import annotations

import socket
import struct

_UCRED = struct.Struct("3i")            # struct ucred: pid, uid, gid


def client_of(sock: socket.socket) -> tuple[str, object]:
    """``("ip", address)``, ``("uid", uid)``, or ``("unknown", None)`` when the socket says
    neither (closed, or a family of another kind)."""
    try:
        if sock.family == socket.AF_UNIX:
            _, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                      _UCRED.size))
            return ("uid", uid)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            return ("ip", sock.getpeername()[0])
    except OSError:
        pass
    return ("unknown", None)
