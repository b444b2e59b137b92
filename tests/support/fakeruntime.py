"""A CRI runtime on a unix socket that names containers, for end-to-end tests of names."""

from __future__ import annotations

from pathlib import Path

import grpc

from gpustats.sources.runtime import cri_api_pb2 as cri
from gpustats.sources.runtime import cri_api_pb2_grpc as cri_grpc
from tests.support.grpc_servers import serve_unix


class NamingRuntime(cri_grpc.RuntimeServiceServicer):
    """``names``: container ID -> (pod name, namespace, pod UID, container name)."""

    def __init__(self, names: dict[str, tuple[str, str, str, str]]):
        self.names = names

    def ListContainers(self, request, context):
        return cri.ListContainersResponse(containers=[
            cri.Container(id=cid, labels={
                "io.kubernetes.pod.name": pod, "io.kubernetes.pod.namespace": namespace,
                "io.kubernetes.pod.uid": uid, "io.kubernetes.container.name": container})
            for cid, (pod, namespace, uid, container) in self.names.items()])


def serve(path: Path, names: dict[str, tuple[str, str, str, str]]) -> grpc.Server:
    """Start the runtime on ``path``; the caller stops it (``server.stop(0)``)."""
    return serve_unix(path, lambda server: cri_grpc.add_RuntimeServiceServicer_to_server(
        NamingRuntime(names), server))
