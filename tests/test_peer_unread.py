"""What a connection's reader has not read, as the kernel says: a loopback TCP peer's receive
queue, a unix socket's send queue; and the client a connection counts against."""

from __future__ import annotations

import select
import socket

from gpustats.peer_unread import kernel_unread, loopback_peer, parse_rx_queues, read_rx_queues
from gpustats.peers import client_of


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    client = socket.create_connection(server.getsockname())
    ours, _ = server.accept()
    server.close()
    return ours, client


def _arrived(sock: socket.socket) -> None:
    assert select.select([sock], [], [], 5)[0], "nothing arrived"


def test_a_loopback_peers_unread_bytes_are_its_receive_queue():
    ours, peer = _tcp_pair()
    ours.sendall(b"x" * 500)
    _arrived(peer)
    where = loopback_peer(ours)
    assert where is not None
    assert read_rx_queues({where}) == {where: 500}
    assert kernel_unread(ours) == 0                       # acknowledged: not what tells
    assert peer.recv(1000) == b"x" * 500
    assert read_rx_queues({where}) == {where: 0}
    assert client_of(ours) == ("ip", "127.0.0.1")
    ours.close()
    peer.close()


def test_a_unix_peers_unread_bytes_are_the_send_queue():
    ours, peer = socket.socketpair()
    ours.sendall(b"y" * 300)
    assert kernel_unread(ours) >= 300                     # the skbs charged to the sender
    assert loopback_peer(ours) is None
    peer.recv(1000)
    assert kernel_unread(ours) == 0
    assert client_of(ours)[0] == "uid"
    ours.close()
    peer.close()
    assert client_of(ours) == ("unknown", None)


def test_table_lines_that_are_not_sockets_are_skipped():
    text = ("  sl  local_address rem_address   st tx_queue rx_queue\n"
            "   0: 0100007F:1F90 0100007F:C396 01 00000000:000001F4 00:00000000\n"
            "   1: garbage\n   2: 0100007F:ZZZZ 0100007F:C396 01 0:1\n")
    wanted = {(("0100007F", 0x1F90), ("0100007F", 0xC396))}
    assert parse_rx_queues(text, wanted) == {(("0100007F", 0x1F90), ("0100007F", 0xC396)): 500}
