"""How much of what was sent on a connection its reader has not read yet, where the kernel
says: what a watch's stall is judged by, rather than by its own queue (small lines fit the
socket buffers for hours, so a watcher that reads nothing would never fill that queue).

- A unix socket: ``SIOCOUTQ`` is what sits in the peer's receive queue, unread (unix(7)).
- TCP: ``SIOCOUTQ`` is what the peer's kernel has not acknowledged (tcp(7)); where the peer is
  on this host (loopback: a local client, or a proxy in the pod), its socket's receive queue
  in ``/proc/self/net/tcp`` and ``tcp6`` (proc(5), ``rx_queue``) is what its application has
  not read. Of a remote peer, what its kernel acknowledged and its application did not read
  is not known here: only the unacknowledged part counts.

The peer's advertised window (``TCP_INFO``'s ``tcpi_snd_wnd``, Linux 5.4 on) does not tell it
either: a receiver never moves its window's right edge back, and the window it offers moves
in coarse steps, not byte by byte as its application leaves data unread. Measured
on loopback (Linux 6.18): six 70-byte lines left unread, the window stayed at 65,536; only
100 KB unread brought it down (to 28,672). A watcher that reads nothing gets a bookmark line
every 15 s: its window would not move for hours.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct
import termios

SIOCOUTQ = termios.TIOCOUTQ           # the same ioctl number (linux/sockios.h)
_INT = struct.Struct("i")
MAX_TABLE_BYTES = 16 * 1024 * 1024    # /proc/net/tcp at ~150 bytes a socket: ~100,000 sockets
_TABLES = ("/proc/self/net/tcp", "/proc/self/net/tcp6")

Endpoint = tuple[str, int]            # (address as /proc/net/tcp writes it, port)


def kernel_unread(sock: socket.socket) -> int | None:
    """Bytes the kernel holds of what was sent on ``sock`` (``SIOCOUTQ``); None if not said."""
    try:
        unread: int = _INT.unpack(fcntl.ioctl(sock.fileno(), SIOCOUTQ, b"\0" * _INT.size))[0]
        return unread
    except (OSError, ValueError):
        return None


def _hex_address(address: str) -> str | None:
    """An address as /proc/net/tcp writes it: each 32-bit word in host order, hex."""
    try:
        packed = ipaddress.ip_address(address.split("%", 1)[0]).packed
    except ValueError:
        return None
    words = struct.unpack(f"={len(packed) // 4}I", packed)
    return "".join(f"{w:08X}" for w in words)


def loopback_peer(sock: socket.socket) -> tuple[Endpoint, Endpoint] | None:
    """(the peer's endpoint, ours) as /proc/net/tcp names them, where the peer is on this
    host's loopback; None for a remote peer or another family."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        peer, ours = sock.getpeername(), sock.getsockname()
        if not ipaddress.ip_address(peer[0].split("%", 1)[0]).is_loopback:
            return None
    except (OSError, ValueError):
        return None
    peer_hex, our_hex = _hex_address(peer[0]), _hex_address(ours[0])
    if peer_hex is None or our_hex is None:
        return None
    return (peer_hex, peer[1]), (our_hex, ours[1])


def parse_rx_queues(text: str, wanted: set[tuple[Endpoint, Endpoint]]
                    ) -> dict[tuple[Endpoint, Endpoint], int]:
    """(local, remote) → ``rx_queue`` of the sockets of ``wanted`` in a /proc/net/tcp table;
    lines that are not a socket's are skipped."""
    found: dict[tuple[Endpoint, Endpoint], int] = {}
    for line in text.split("\n")[1:]:
        fields = line.split()
        if len(fields) < 5:
            continue
        try:
            local_addr, local_port = fields[1].split(":")
            remote_addr, remote_port = fields[2].split(":")
            key = ((local_addr, int(local_port, 16)), (remote_addr, int(remote_port, 16)))
            if key in wanted:
                found[key] = int(fields[4].split(":")[1], 16)
        except (ValueError, IndexError):
            continue
    return found


def _read_table(path: str) -> bytes | None:
    """A /proc/net table whole, at most ``MAX_TABLE_BYTES`` (None past that, or unreadable).
    Read until an empty read: a seq_file gives a page a read, short reads included."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    chunks: list[bytes] = []
    size = 0
    try:
        while size <= MAX_TABLE_BYTES:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
        return None
    except OSError:
        return None
    finally:
        os.close(fd)


def read_rx_queues(wanted: set[tuple[Endpoint, Endpoint]]
                   ) -> dict[tuple[Endpoint, Endpoint], int]:
    """``parse_rx_queues`` over this namespace's TCP tables (empty when unreadable)."""
    found: dict[tuple[Endpoint, Endpoint], int] = {}
    if not wanted:
        return found
    for table in _TABLES:
        data = _read_table(table)
        if data is not None:
            found.update(parse_rx_queues(data.decode("ascii", "replace"), wanted))
    return found
