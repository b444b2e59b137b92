"""Container names from the CRI runtime (``ListContainers`` labels), cached by container ID.

Labels: ``io.kubernetes.pod.name``, ``io.kubernetes.pod.namespace``, ``io.kubernetes.pod.uid``,
``io.kubernetes.container.name``; sandboxes carry ``io.cri-containerd.kind=sandbox`` or the
container name ``POD``. containerd listens on ``/run/containerd/containerd.sock``, CRI-O on
``/var/run/crio/crio.sock``. A container without the labels gets no names (never invented).
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable

from gpustats.model.containers import ContainerNames
from gpustats.sources.errors import CollectionErrors
from gpustats.sources.grpc_channel import UnixChannel

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/run/containerd/containerd.sock"
POD_NAME = "io.kubernetes.pod.name"
POD_NAMESPACE = "io.kubernetes.pod.namespace"
POD_UID = "io.kubernetes.pod.uid"
CONTAINER_NAME = "io.kubernetes.container.name"


def names_from_labels(labels: dict[str, str]) -> ContainerNames | None:
    if not any(key in labels for key in (POD_NAME, POD_NAMESPACE, POD_UID, CONTAINER_NAME)):
        return None
    container = labels.get(CONTAINER_NAME)
    return ContainerNames(
        pod_name=labels.get(POD_NAME) or None,
        pod_namespace=labels.get(POD_NAMESPACE) or None,
        pod_uid=labels.get(POD_UID) or None,
        container_name=container or None,
        is_sandbox=labels.get("io.cri-containerd.kind") == "sandbox" or container == "POD",
    )


def _stub(channel):
    # Imported on first use: the generated modules pull in grpc and protobuf.
    from gpustats.sources.runtime import cri_api_pb2_grpc as api_grpc
    return api_grpc.RuntimeServiceStub(channel)


def _list(stub, timeout: float):
    from gpustats.sources.runtime import cri_api_pb2 as api
    return stub.ListContainers(api.ListContainersRequest(), timeout=timeout)


class RuntimeNamesClient:
    def __init__(self, socket_path: str = DEFAULT_SOCKET, *, timeout_seconds: float = 1.0,
                 min_interval_seconds: float = 10.0,
                 errors: CollectionErrors | None = None,
                 monotonic: Callable[[], float] = time.monotonic):
        self._channel = UnixChannel(socket_path, "container runtime", log,
                                    timeout_seconds=timeout_seconds,
                                    source="runtime", errors=errors)
        self._min_interval = min_interval_seconds
        self._monotonic = monotonic
        self._cache: dict[str, ContainerNames | None] = {}
        self._last_call: float | None = None
        # The last answer: (the IDs asked for, whether some were left to ask about, names).
        self._answer: tuple[set[str], bool, dict[str, ContainerNames]] | None = None
        self.calls = 0

    def names(self, container_ids: Iterable[str]) -> dict[str, ContainerNames]:
        wanted = set(container_ids)
        now = self._monotonic()
        last = self._answer
        # The same IDs as last time, none of them still to ask about (or not yet time to
        # ask again): the cache has not changed since, nor has the answer.
        if last is not None and last[0] == wanted and not (last[1] and self._due(now)):
            return dict(last[2])
        for gone in set(self._cache) - wanted:
            del self._cache[gone]
        missing = wanted - set(self._cache)
        if missing and self._due(now):
            self._last_call = now
            self.calls += 1
            response = self._channel.call(_stub, _list)
            if response is not None:
                listed = {c.id: names_from_labels(dict(c.labels)) for c in response.containers}
                for container_id in missing:
                    # IDs are immutable: a container the runtime does not know stays unnamed.
                    self._cache[container_id] = listed.get(container_id)
                missing = set()
        answer = {cid: n for cid in wanted if (n := self._cache.get(cid)) is not None}
        self._answer = (wanted, bool(missing), answer)
        return dict(answer)

    def _due(self, now: float) -> bool:
        """Whether the runtime may be asked again (at most once per ``min_interval``)."""
        return self._last_call is None or now - self._last_call >= self._min_interval

    def close(self) -> None:
        self._channel.close()
