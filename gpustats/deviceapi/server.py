"""The gRPC server of NVSentinel's GpuService: on a unix socket (mode 0660, its group as
configured) and, where asked, on TCP beside the health port.

Access is the socket's: a client in the socket's group (or root) may read and set conditions.
The socket file is made by gRPC's bind with the process umask (typically 0755 for a socket:
only the owner can connect) and then set to 0660 and its group, so it is never wider than
asked. A stale socket left by an earlier run is removed; any other file at that path is left
alone and the service is not served there (logged). The TCP port has no TLS: bind it to a
node-local address, or guard it as the data port is guarded.
"""

from __future__ import annotations

import grp
import logging
import os
import stat
from concurrent import futures

import grpc

from gpustats.deviceapi import nvsentinel_gpu_pb2_grpc as pb_grpc
from gpustats.engine.provider_health import ProvidedHealthStore
from gpustats.export.gpu_events import GpuEventLog
from gpustats.deviceapi.service import MAX_WATCHES, WATCH_SECONDS_MAX, GpuService

log = logging.getLogger(__name__)

SOCKET_MODE = 0o660
UNARY_WORKERS = 8
# Requests are small (a status of a few conditions); answers at most the GPU list.
OPTIONS = (
    ("grpc.max_receive_message_length", 64 * 1024),
    ("grpc.max_send_message_length", 4 * 1024 * 1024),
    # Connections (and with them a watcher that stopped reading) last at most this long.
    ("grpc.max_connection_age_ms", (WATCH_SECONDS_MAX + 60) * 1000),
    ("grpc.max_connection_age_grace_ms", 5000),
    ("grpc.so_reuseport", 0),
)


def socket_gid(group: str | None) -> int | None:
    """The group ID ``group`` names (a name, or a number); None for none. KeyError: no such
    group on this host."""
    if group is None:
        return None
    return int(group) if group.isdigit() else grp.getgrnam(group).gr_gid


def _clear_stale_socket(path: str) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(f"{path} exists and is not a socket")
    os.unlink(path)


class DeviceApiServer:
    """GpuService on ``socket_path`` (and ``listen``), until ``stop``."""

    def __init__(self, store: ProvidedHealthStore, events: GpuEventLog,
                 socket_path: str | None, socket_group: str | None = None,
                 listen: tuple[str, int] | None = None) -> None:
        self._socket_path = socket_path
        self._socket_group = socket_group
        self._listen = listen
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=MAX_WATCHES + UNARY_WORKERS,
                                       thread_name_prefix="device-api"),
            options=OPTIONS, maximum_concurrent_rpcs=MAX_WATCHES + UNARY_WORKERS)
        pb_grpc.add_GpuServiceServicer_to_server(GpuService(store, events), self._server)
        self.port: int | None = None

    def start(self) -> bool:
        """Binds and serves; False (logged) when no address could be bound."""
        socket_bound = bool(self._socket_path) and self._bind_socket(self._socket_path or "")
        bound = socket_bound
        if self._listen is not None:
            host, port = self._listen
            try:
                self.port = self._server.add_insecure_port(f"{host}:{port}")
                bound = True
            except RuntimeError as exc:
                log.error("device API: cannot listen on %s:%s: %s", host, port, exc)
        if not bound:
            return False
        self._server.start()
        if socket_bound:
            self._restrict(self._socket_path or "")
        return True

    def _bind_socket(self, path: str) -> bool:
        try:
            _clear_stale_socket(path)
            self._server.add_insecure_port(f"unix:{path}")
        except (OSError, RuntimeError) as exc:
            log.error("device API: cannot serve on unix socket %s: %s", path, exc)
            return False
        return True

    def _restrict(self, path: str) -> None:
        try:
            gid = socket_gid(self._socket_group)
            os.chmod(path, SOCKET_MODE)
            if gid is not None:
                os.chown(path, -1, gid)
        except (OSError, KeyError) as exc:
            log.error("device API: cannot give %s mode %o and group %s: %s", path, SOCKET_MODE,
                      self._socket_group, exc)

    def stop(self, grace: float = 1.0) -> None:
        self._server.stop(grace).wait(grace + 1.0)
        if self._socket_path:
            try:
                _clear_stale_socket(self._socket_path)
            except OSError:
                pass


def start_device_api(config, store: ProvidedHealthStore, events: GpuEventLog
                     ) -> DeviceApiServer | None:
    """The device API as ``config`` asks (``--device-api-socket``, ``--device-api-listen``),
    serving; None when off or when nothing could be bound (logged)."""
    if not config.device_api_socket and config.device_api_listen is None:
        return None
    server = DeviceApiServer(store, events, config.device_api_socket,
                             config.device_api_socket_group, config.device_api_listen)
    if not server.start():
        return None
    log.info("device API (nvidia.device.v1alpha1.GpuService) serving%s%s",
             f" on unix:{config.device_api_socket}" if config.device_api_socket else "",
             f" on port {server.port}" if server.port is not None else "")
    return server
