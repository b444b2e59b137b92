"""pod-resources and runtime clients against real in-process gRPC servers on unix sockets."""

import logging
import socket
import threading
import time

import grpc
import pytest
from hypothesis import given, strategies as st

from gpustats.sources.podresources import podresources_api_pb2 as api
from gpustats.sources.podresources import podresources_api_pb2_grpc as api_grpc
from gpustats.sources.podresources.client import PodResourcesClient, parse_device_id
from gpustats.sources.runtime import cri_api_pb2 as cri
from gpustats.sources.runtime import cri_api_pb2_grpc as cri_grpc
from gpustats.sources.runtime.client import RuntimeNamesClient
from tests.support.grpc_servers import serve_unix

GPU = "GPU-7f1c2a4e-0d3b-4c55-9a61-2b8e6f0c1d01"
MIG = "MIG-5c1d2a4e-0d3b-4c55-9a61-2b8e6f0c1d02"


def _response():
    return api.ListPodResourcesResponse(pod_resources=[
        api.PodResources(name="trainer-0", namespace="ml", containers=[
            api.ContainerResources(name="trainer", devices=[
                api.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=[GPU]),
                api.ContainerDevices(resource_name="example.com/nic", device_ids=["nic0"]),
            ]),
        ]),
        api.PodResources(name="infer", namespace="serve", containers=[
            api.ContainerResources(name="a", devices=[
                api.ContainerDevices(resource_name="nvidia.com/mig-1g.10gb", device_ids=[MIG]),
                api.ContainerDevices(resource_name="nvidia.com/gpu.shared",
                                     device_ids=[f"{GPU}::3"]),
            ]),
        ]),
    ])


class Lister(api_grpc.PodResourcesListerServicer):
    def __init__(self, delay=0.0):
        self.calls = 0
        self.delay = delay

    def List(self, request, context):
        self.calls += 1
        time.sleep(self.delay)
        return _response()


@pytest.fixture
def serve(tmp_path):
    servers = []

    def _serve(servicer, adder, name="kubelet.sock"):
        path = tmp_path / name
        servers.append(serve_unix(path, lambda server: adder(servicer, server), workers=4))
        return str(path)

    yield _serve
    for server in servers:
        server.stop(0)


def test_parse_device_ids():
    assert parse_device_id(GPU).kind == "gpu"
    assert parse_device_id(MIG).kind == "mig"
    ref = parse_device_id(f"{GPU}::7")
    assert (ref.uuid, ref.replica) == (GPU, 7)
    legacy = parse_device_id("MIG-GPU-7f1c2a4e-0d3b-4c55-9a61-2b8e6f0c1d01/3/0")
    assert legacy.parent_uuid == GPU and legacy.gpu_instance_id == 3
    for other in ("nvidia0", "nvidia0/gi0/vgpu1", "", "GPU-", f"{GPU}::x"):
        assert parse_device_id(other) is None


@given(st.text())
def test_parse_device_id_never_raises(text):
    ref = parse_device_id(text)
    assert ref is None or ref.uuid.startswith(("GPU-", "MIG-"))


def test_list_maps_nvidia_devices_only(serve):
    lister = Lister()
    path = serve(lister, api_grpc.add_PodResourcesListerServicer_to_server)
    client = PodResourcesClient(path, timeout_seconds=1.0, cache_seconds=60)
    allocations = client.allocations()
    assert {(a.pod_namespace, a.pod_name, a.container_name, a.device.uuid, a.device.replica)
            for a in allocations} == {("ml", "trainer-0", "trainer", GPU, None),
                                      ("serve", "infer", "a", MIG, None),
                                      ("serve", "infer", "a", GPU, 3)}
    assert all(a.resource_name.startswith("nvidia.com/") for a in allocations)
    generation = client.generation
    client.allocations()
    client.allocations()
    assert lister.calls == 1                  # cached
    assert client.generation == generation    # the same listing, kept


def test_each_listing_received_is_a_new_generation(serve):
    lister = Lister()
    path = serve(lister, api_grpc.add_PodResourcesListerServicer_to_server)
    now = [0.0]
    client = PodResourcesClient(path, timeout_seconds=1.0, cache_seconds=10,
                                monotonic=lambda: now[0])
    client.allocations()
    first = client.generation
    now[0] = 11.0
    client.allocations()
    assert lister.calls == 2 and client.generation == first + 1


def test_hanging_server_returns_within_budget(serve, caplog):
    path = serve(Lister(delay=3.0), api_grpc.add_PodResourcesListerServicer_to_server)
    client = PodResourcesClient(path, timeout_seconds=0.3, cache_seconds=0)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        assert client.allocations() is None
    assert time.monotonic() - started < 1.5
    assert any("DEADLINE_EXCEEDED" in r.getMessage() for r in caplog.records)


def test_garbage_server(tmp_path, caplog):
    path = tmp_path / "garbage.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    stop = threading.Event()

    def junk():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            try:
                conn.sendall(b"\x00garbage, not HTTP/2 at all\r\n" * 64)
            except OSError:
                pass
            conn.close()

    thread = threading.Thread(target=junk, daemon=True)
    thread.start()
    try:
        client = PodResourcesClient(str(path), timeout_seconds=0.5, cache_seconds=0)
        with caplog.at_level(logging.WARNING):
            assert client.allocations() is None
            assert client.allocations() is None
        failures = [r for r in caplog.records if "pod-resources call" in r.getMessage()]
        assert len(failures) == 1             # logged once per kind, not per call
    finally:
        stop.set()
        thread.join()
        listener.close()


def test_undecodable_response(serve, caplog):
    handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
        "List": grpc.unary_unary_rpc_method_handler(
            lambda req, ctx: b"\xff\xff\xff\xff not a protobuf",
            request_deserializer=None, response_serializer=None)})
    path = serve(None, lambda _s, server: server.add_generic_rpc_handlers((handler,)))
    client = PodResourcesClient(path, timeout_seconds=1.0, cache_seconds=0)
    with caplog.at_level(logging.WARNING):
        assert client.allocations() is None
    assert any("pod-resources call" in r.getMessage() for r in caplog.records)


def test_absent_socket_is_off_with_one_line_and_appearing_later_works(tmp_path, serve, caplog):
    path = tmp_path / "kubelet.sock"
    client = PodResourcesClient(str(path), timeout_seconds=0.5, cache_seconds=0)
    with caplog.at_level(logging.INFO):
        for _ in range(5):
            assert client.allocations() is None
    assert len([r for r in caplog.records if "absent" in r.getMessage()]) == 1
    serve(Lister(), api_grpc.add_PodResourcesListerServicer_to_server)
    assert len(client.allocations()) == 3


class Runtime(cri_grpc.RuntimeServiceServicer):
    def __init__(self):
        self.calls = 0

    def ListContainers(self, request, context):
        self.calls += 1
        return cri.ListContainersResponse(containers=[
            cri.Container(id="a" * 64, labels={
                "io.kubernetes.pod.name": "trainer-0", "io.kubernetes.pod.namespace": "ml",
                "io.kubernetes.pod.uid": "u-1", "io.kubernetes.container.name": "trainer"}),
            cri.Container(id="b" * 64, labels={
                "io.kubernetes.pod.name": "trainer-0", "io.kubernetes.pod.namespace": "ml",
                "io.kubernetes.pod.uid": "u-1", "io.kubernetes.container.name": "POD",
                "io.cri-containerd.kind": "sandbox"}),
            cri.Container(id="c" * 64, labels={"maintainer": "nobody"}),
        ])


def test_runtime_names_cached_by_id(serve):
    runtime = Runtime()
    path = serve(runtime, cri_grpc.add_RuntimeServiceServicer_to_server, "containerd.sock")
    client = RuntimeNamesClient(path, timeout_seconds=1.0, min_interval_seconds=0)
    names = client.names({"a" * 64, "b" * 64, "c" * 64})
    assert names["a" * 64].container_name == "trainer" and names["a" * 64].pod_uid == "u-1"
    assert names["b" * 64].is_sandbox
    assert "c" * 64 not in names                      # no labels: no names, never invented
    client.names({"a" * 64, "b" * 64, "c" * 64})
    assert runtime.calls == 1                         # every ID already answered
    client.names({"a" * 64, "d" * 64})
    assert runtime.calls == 2                         # a new ID asks again


def test_runtime_answer_kept_for_the_same_ids_and_asked_again_while_some_are_unasked(
        serve, tmp_path):
    """The same IDs get the same answer without a call; IDs a failed call left unanswered
    are asked about again once the interval allows, and then named."""
    clock = [0.0]
    path = str(tmp_path / "containerd.sock")
    client = RuntimeNamesClient(path, timeout_seconds=0.5, min_interval_seconds=10,
                                monotonic=lambda: clock[0])
    ids = {"a" * 64, "b" * 64}
    assert client.names(ids) == {} and client.calls == 1          # no runtime yet
    runtime = Runtime()
    serve(runtime, cri_grpc.add_RuntimeServiceServicer_to_server, "containerd.sock")
    clock[0] = 5.0
    assert client.names(ids) == {} and client.calls == 1          # not yet time to ask
    clock[0] = 10.0
    named = client.names(ids)
    assert named["a" * 64].container_name == "trainer" and client.calls == 2
    named.clear()                                                  # the caller's own copy
    clock[0] = 100.0
    assert client.names(ids)["a" * 64].container_name == "trainer"
    assert client.calls == 2 and runtime.calls == 1               # all answered: kept


def test_runtime_absent_socket(tmp_path):
    client = RuntimeNamesClient(str(tmp_path / "none.sock"), timeout_seconds=0.2)
    assert client.names({"a" * 64}) == {}
