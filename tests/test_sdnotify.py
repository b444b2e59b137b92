import os
import socket

from gpustats import sdnotify


def _receiver(address):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(2)
    return sock


def test_ready_and_watchdog_reach_the_socket(tmp_path):
    path = str(tmp_path / "notify")
    sock = _receiver(path)
    env = {"NOTIFY_SOCKET": path}
    assert sdnotify.ready(env) and sdnotify.watchdog(env) and sdnotify.status("ok", env)
    assert [sock.recv(100) for _ in range(3)] == [b"READY=1", b"WATCHDOG=1", b"STATUS=ok"]
    sock.close()


def test_abstract_socket():
    name = f"@gpustats-test-{os.getpid()}"
    sock = _receiver(b"\0" + name[1:].encode())
    assert sdnotify.notify("READY=1", {"NOTIFY_SOCKET": name})
    assert sock.recv(100) == b"READY=1"
    sock.close()


def test_unset_or_broken_is_a_no_op(tmp_path):
    assert sdnotify.ready({}) is False
    assert sdnotify.ready({"NOTIFY_SOCKET": str(tmp_path / "missing")}) is False


def test_watchdog_interval():
    assert sdnotify.watchdog_interval_seconds({"WATCHDOG_USEC": "30000000"}) == 30.0
    assert sdnotify.watchdog_interval_seconds({"WATCHDOG_USEC": "30000000",
                                               "WATCHDOG_PID": "1"}) is None
    assert sdnotify.watchdog_interval_seconds({}) is None
    assert sdnotify.watchdog_interval_seconds({"WATCHDOG_USEC": "x"}) is None


def test_daemon_notifies_ready_after_first_tick(tmp_path, start_daemon):
    path = str(tmp_path / "notify")
    sock = _receiver(path)
    daemon = start_daemon("--sysfs-root", str(tmp_path / "nosys"), "--housekeeping-interval",
                          "0.2", env={"NOTIFY_SOCKET": path})
    daemon.wait_ready()
    messages = [sock.recv(100) for _ in range(3)]
    assert messages[0] == b"READY=1" and b"WATCHDOG=1" in messages
    sock.close()
