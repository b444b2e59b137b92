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
        time.sleep(self.delay)                  # measures: a slow kubelet
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


# ------------------------------------------------------------------ the reply, bounded
# The reply is read from its wire bytes: only GPU resources (and DRA claims) kept, repeated
# strings shared, and a reply over the documented counts refused as malformed while the last
# good listing is served until stale.


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def _pod_field(body: bytes) -> bytes:
    """``body`` (a PodResources' bytes) as one ``pod_resources`` field of the reply."""
    return b"\x0a" + _varint(len(body)) + body


def _reference_allocations(data: bytes):
    """What protobuf's own decoding gives for ``data``: the reply read the way gpustats read
    it before it read the wire bytes itself."""
    from gpustats.model.containers import PodDeviceAllocation
    from gpustats.model.dra import ClaimDevice

    out = []
    for pod in api.ListPodResourcesResponse.FromString(data).pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if devices.resource_name.startswith("nvidia.com/"):
                    out += [PodDeviceAllocation(pod.name, pod.namespace, container.name,
                                                devices.resource_name, i, parse_device_id(i))
                            for i in devices.device_ids]
            for dynamic in container.dynamic_resources:
                for r in dynamic.claim_resources:
                    claim = ClaimDevice(
                        dynamic.claim_name, dynamic.claim_namespace, r.driver_name or None,
                        r.pool_name or None, r.device_name or None,
                        r.share_id if r.HasField("share_id") else None,
                        tuple(d.name for d in r.cdi_devices if d.name))
                    out.append(PodDeviceAllocation(
                        pod.name, pod.namespace, container.name, claim.driver_name or "",
                        f"{claim.pool_name or ''}/{claim.device_name or ''}", None, claim))
    return tuple(out)


def _replicas_reply():
    """Two pods of one namespace; pod a's two containers hold replicas of one GPU."""
    def holding(name, *ids):
        return api.ContainerResources(name=name, devices=[
            api.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=list(ids))])

    return api.ListPodResourcesResponse(pod_resources=[
        api.PodResources(name="a", namespace="ml", containers=[
            holding("main", f"{GPU}::0", f"{GPU}::1"), holding("side", f"{GPU}::2")]),
        api.PodResources(name="b", namespace="ml", containers=[holding("main", f"{GPU}::3")]),
    ]).SerializeToString()


def test_only_gpu_resources_are_kept_and_counted():
    """Other device plugins' devices are skipped unread: not kept, not counted toward the
    device limit, not even decoded (a NIC's ID that is not UTF-8 refuses nothing)."""
    from gpustats.sources.podresources.client import ReplyLimits, allocations_from_reply

    nic = api.ContainerDevices(resource_name="example.com/nic",
                               device_ids=[f"nic{n}" for n in range(50)]).SerializeToString()
    not_utf8 = b"\x0a\x0frdma/hca_shared\x12\x02\xff\xfe"       # resource, one device ID
    container = (api.ContainerResources(name="main", devices=[
        api.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=[GPU, MIG]),
        api.ContainerDevices(resource_name="amd.com/gpu", device_ids=["0000:03:00.0"]),
    ], dynamic_resources=[api.DynamicResource(claim_name="c", claim_namespace="ml",
                                              claim_resources=[api.ClaimResource(
                                                  driver_name="gpu.nvidia.com")])])
        .SerializeToString() + b"\x12" + _varint(len(nic)) + nic
        + b"\x12" + _varint(len(not_utf8)) + not_utf8)
    pod = api.PodResources(name="p", namespace="ml").SerializeToString() + \
        b"\x1a" + _varint(len(container)) + container
    allocations = allocations_from_reply(_pod_field(pod), ReplyLimits(devices=4))
    assert [(a.resource_name, a.device_id) for a in allocations] == [
        ("nvidia.com/gpu", GPU), ("nvidia.com/gpu", MIG), ("amd.com/gpu", "0000:03:00.0"),
        ("gpu.nvidia.com", "/")]


def test_repeated_strings_are_one_object_each():
    from gpustats.sources.podresources.client import allocations_from_reply

    a0, a1, side, b = allocations_from_reply(_replicas_reply())
    assert a0.pod_name is a1.pod_name is side.pod_name
    assert a0.pod_namespace is b.pod_namespace                  # across pods
    assert a0.container_name is a1.container_name is b.container_name      # "main"
    assert a0.resource_name is side.resource_name is b.resource_name
    assert a0.device.uuid is a1.device.uuid is side.device.uuid is b.device.uuid
    assert (a0.device.replica, b.device.replica) == (0, 3)


def test_repeated_strings_are_shared_through_the_client(serve):
    servicer = Lister()
    servicer.List = lambda request, context: api.ListPodResourcesResponse.FromString(
        _replicas_reply())
    path = serve(servicer, api_grpc.add_PodResourcesListerServicer_to_server)
    a0, a1, side, b = PodResourcesClient(path, timeout_seconds=1.0).allocations()
    assert a0.pod_name is side.pod_name and a0.pod_namespace is b.pod_namespace
    assert a0.device.uuid is b.device.uuid


@pytest.mark.parametrize("limits, body, count", [
    ({"pods": 2}, b"".join(_pod_field(b"") for _ in range(3)), "more than 2 pods"),
    ({"devices": 3}, _replicas_reply(), "more than 3 GPU and claim devices"),
    ({"fields": 100}, b"\x10\x01" * 101, "more than 100 fields"),      # unknown varints
])
def test_a_reply_over_a_limit_is_refused(limits, body, count):
    from gpustats.sources.grpc_channel import ReplyRefused
    from gpustats.sources.podresources.client import ReplyLimits, allocations_from_reply

    with pytest.raises(ReplyRefused, match=count) as refused:
        allocations_from_reply(body, ReplyLimits(**limits))
    assert refused.value.reason == "reply_over_limits"


@pytest.mark.parametrize("body", [
    b"\xff\xff\xff\xff not a protobuf", b"\x0a\x05ab",              # past its end
    b"\x0b", b"\x00\x01",                                           # a group; field 0
    _pod_field(b"\x0a\x02\xc3\x28" + api.PodResources(containers=[api.ContainerResources(
        devices=[api.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=[GPU])])])
        .SerializeToString()),                     # a GPU holder's name that is not UTF-8
])
def test_an_unreadable_reply_is_refused_as_malformed(body):
    from gpustats.sources.grpc_channel import ReplyRefused
    from gpustats.sources.podresources.client import allocations_from_reply

    with pytest.raises(ReplyRefused) as refused:
        allocations_from_reply(body)
    assert refused.value.reason == "malformed_reply"


def test_reading_8_mib_of_empty_entries_stops_at_the_field_count_keeping_nothing():
    """Protobuf decodes 8 MiB of empty device entries into ~256 MB; the reader stops at its
    field count (which bounds its time: ~0.15 s here, measured by bench.hostile_kubelet),
    having kept nothing."""
    import tracemalloc

    from gpustats.sources.grpc_channel import ReplyRefused
    from gpustats.sources.podresources.client import allocations_from_reply

    entries = b"\x12\x00" * ((4 << 20) - 16)
    container = b"\x1a" + _varint(len(entries)) + entries
    body = _pod_field(container)
    assert len(body) > 8_000_000
    tracemalloc.start()
    try:
        with pytest.raises(ReplyRefused, match="fields"):
            allocations_from_reply(body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_fields_in_any_order_and_repeated_read_as_protobuf_reads_them():
    """Names after the containers, a name given twice (the last wins), an unknown field and
    CPU IDs between: the same allocations as protobuf's decoding of the same bytes."""
    from gpustats.sources.podresources.client import allocations_from_reply

    containers = api.PodResources(containers=[api.ContainerResources(
        name="main", cpu_ids=[1, 2, 3], devices=[api.ContainerDevices(
            device_ids=[GPU], resource_name="nvidia.com/gpu")])]).SerializeToString()
    pod = (containers + b"\x98\x06\x07"                 # field 99, a varint: unknown
           + api.PodResources(name="first", namespace="ml").SerializeToString()
           + api.PodResources(name="last").SerializeToString())
    body = _pod_field(pod)
    assert allocations_from_reply(body) == _reference_allocations(body)
    assert allocations_from_reply(body)[0].pod_name == "last"


_NAMES = st.sampled_from(["", "a", "ml", "trainer-0", "é", "x" * 200])
_IDS = st.sampled_from([GPU, MIG, f"{GPU}::3", f"{MIG}::12", "nvidia0", "",
                        "MIG-GPU-7f1c2a4e-0d3b-4c55-9a61-2b8e6f0c1d01/3/0"])
_RESOURCES = st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "example.com/nic",
                              "nvidia.com", ""])
_CLAIM_RESOURCES = st.builds(
    lambda cdi, driver, pool, device, share: api.ClaimResource(
        cdi_devices=[api.CDIDevice(name=n) for n in cdi], driver_name=driver,
        pool_name=pool, device_name=device, share_id=share),
    st.lists(_NAMES, max_size=2), _NAMES, _NAMES, _NAMES, st.none() | _NAMES)
_CONTAINERS = st.builds(
    lambda name, devices, dynamic: api.ContainerResources(
        name=name, devices=[api.ContainerDevices(resource_name=r, device_ids=ids)
                            for r, ids in devices],
        dynamic_resources=[api.DynamicResource(claim_name=c, claim_namespace=n,
                                               claim_resources=rs) for c, n, rs in dynamic]),
    _NAMES, st.lists(st.tuples(_RESOURCES, st.lists(_IDS, max_size=3)), max_size=3),
    st.lists(st.tuples(_NAMES, _NAMES, st.lists(_CLAIM_RESOURCES, max_size=2)), max_size=2))
_REPLIES = st.builds(
    lambda pods: api.ListPodResourcesResponse(pod_resources=[
        api.PodResources(name=n, namespace=ns, containers=cs) for n, ns, cs in pods]),
    st.lists(st.tuples(_NAMES, _NAMES, st.lists(_CONTAINERS, max_size=3)), max_size=4))


@given(_REPLIES)
def test_the_reader_reads_what_protobuf_decodes(response):
    from gpustats.sources.podresources.client import allocations_from_reply

    body = response.SerializeToString()
    assert allocations_from_reply(body) == _reference_allocations(body)


def test_a_reply_over_the_limits_keeps_the_last_good_listing_until_stale(tmp_path, caplog):
    """A hostile kubelet's 5.8 MB reply (2,000 pods x 50 GPU replicas, 200-character names)
    refused: the source fails with its reason and one log line, the last good listing is
    served until ``stale_after_seconds``; a normal reply again recovers it."""
    from bench.hostile_kubelet import HostileKubelet, hostile_reply, normal_reply
    from gpustats.sources.errors import CollectionErrors

    errors, now = CollectionErrors(), [0.0]
    with HostileKubelet(tmp_path / "kubelet.sock", normal_reply([GPU])) as kubelet:
        client = PodResourcesClient(kubelet.socket_path, timeout_seconds=5.0, cache_seconds=10,
                                    stale_after_seconds=60, errors=errors,
                                    monotonic=lambda: now[0])
        good = client.allocations()
        assert [a.device.uuid for a in good] == [GPU]
        generation = client.generation
        kubelet.reply = hostile_reply()
        with caplog.at_level(logging.WARNING):
            for now[0] in (10.0, 30.0, 50.0):
                assert client.allocations() is good            # the last good listing
        assert kubelet.calls == 4 and client.generation == generation
        (state,) = errors.states()
        assert (state.source, state.state, state.last_error_reason) == \
            ("pod_resources", "failing", "reply_over_limits")
        assert "more than 10,000 GPU and claim devices" in state.last_error
        assert "last good listing is kept" in state.last_error
        failing = [r.getMessage() for r in caplog.records if "pod_resources failing" in
                   r.getMessage()]
        assert len(failing) == 1 and "reply_over_limits" in failing[0]
        now[0] = 70.0
        assert client.allocations() is None                    # stale: no mapping at all
        kubelet.reply = normal_reply([GPU])
        now[0] = 80.0
        assert [a.device.uuid for a in client.allocations()] == [GPU]
        assert errors.states()[0].state == "ok"


def test_amd_and_intel_device_ids_name_their_gpus():
    from gpustats.sources.podresources.client import parse_device_id
    amd = parse_device_id("0000:19:00.0")
    assert (amd.kind, amd.uuid, amd.replica) == ("pci", "0000:19:00.0", None)
    intel = parse_device_id("card1-3")
    assert (intel.kind, intel.uuid, intel.replica) == ("card", "card1", 3)
    assert parse_device_id("amdgpu_xcp_3") is None          # a compute partition: not mapped
    assert parse_device_id("all") is None                    # Intel's monitoring resource
