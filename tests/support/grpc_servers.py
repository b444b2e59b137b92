"""Fake gRPC peers (the kubelet's pod-resources, a CRI runtime) on a unix socket."""

from __future__ import annotations

from concurrent import futures
from pathlib import Path
from typing import Callable

import grpc


def serve_unix(path: Path | str, add: Callable[[grpc.Server], None], *,
               workers: int = 2) -> grpc.Server:
    """A server on ``path`` with the servicers ``add`` registers, started; the caller stops
    it (``server.stop(0)``)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
    add(server)
    server.add_insecure_port(f"unix://{path}")
    server.start()
    return server
