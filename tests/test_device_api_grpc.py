"""NVSentinel's GpuService over gRPC: the proto against NVSentinel's (facts kept with their
origin), the servicer over a store and event log (list, get, watch and resume, a provider's
conditions merged by type, ABORTED, the refusals, the bounds), and end to end through the
real daemon: a client lists, gets and watches while a second one, as a provider, sets a
condition that the first sees within a second and that /api/v1/gpus and /metrics show."""

from __future__ import annotations

import json
import os
import queue
import stat
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")
from gpustats.deviceapi.server import DeviceApiServer  # noqa: E402
from gpustats.deviceapi import nvsentinel_gpu_pb2 as pb  # noqa: E402
from gpustats.deviceapi import nvsentinel_gpu_pb2_grpc as pb_grpc  # noqa: E402
from gpustats.engine.provider_health import ProvidedHealthStore, merge_conditions  # noqa: E402
from gpustats.export.gpu_events import GpuEventLog  # noqa: E402
from gpustats.model.health import Condition  # noqa: E402
from tests.support.fakehost import write_scenario  # noqa: E402
from tests.support.gpus import GPU_A, GPU_B  # noqa: E402
from tests.support.snapshots import A, B, sample_snapshot  # noqa: E402

FACTS = json.loads((Path(__file__).parent / "peers" / "nvsentinel_gpu_proto.json").read_text())
_TYPES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 8: "bool", 9: "string",
          13: "uint32"}


# ------------------------------------------------------------------ the proto

def _field_type(field) -> str:
    kind = field.message_type.full_name if field.message_type is not None else \
        _TYPES[field.type]
    kind = kind.removeprefix(FACTS["package"] + ".")
    return f"repeated {kind}" if field.is_repeated else kind


def test_the_proto_has_nvsentinels_package_service_and_field_numbers():
    file = pb.DESCRIPTOR
    assert file.package == FACTS["package"]
    service = file.services_by_name[FACTS["service"]]
    methods = {m.name: [m.input_type.full_name.removeprefix(FACTS["package"] + "."),
                        m.output_type.full_name.removeprefix(FACTS["package"] + "."),
                        m.server_streaming] for m in service.methods}
    assert methods == FACTS["methods"]
    messages = {name: {f.name: [f.number, _field_type(f)] for f in m.fields}
                for name, m in file.message_types_by_name.items()}
    assert messages == FACTS["messages"]
    assert FACTS["origin"]["repository"] == "NVIDIA/NVSentinel"


# ------------------------------------------------------------------ the servicer

@pytest.fixture
def service(tmp_path):
    """The service on a unix socket over a store holding the sample snapshot: (store, log,
    stub, socket path)."""
    store, events = ProvidedHealthStore(), GpuEventLog(first_revision=1000)
    store.on_republish(events.observe)
    store.publish(sample_snapshot(1))
    events.observe(store.latest())
    path = str(tmp_path / "gs.sock")
    server = DeviceApiServer(store, events, path)
    assert server.start()
    channel = grpc.insecure_channel(f"unix:{path}")
    yield store, events, pb_grpc.GpuServiceStub(channel), path
    channel.close()
    server.stop(0)


def _provider_condition(status="False", type_="example.com/DcgmHealth", **kw):
    return pb.Condition(type=type_, status=status, reason=kw.pop("reason", "PcieReplays"),
                        message=kw.pop("message", "PCIe replays over budget"), **kw)


def test_list_and_get(service):
    _, _, stub, path = service
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o660
    listed = stub.ListGpus(pb.ListGpusRequest()).gpu_list
    assert [g.spec.uuid for g in listed.items][:2] == [A, B]
    first = listed.items[0]
    assert first.metadata.name == A.lower() and first.resource_version == \
        int(first.metadata.resource_version)
    assert int(listed.metadata.resource_version) >= first.resource_version
    assert [c.type for c in first.status.conditions] == ["NVMLReady"]
    assert first.status.conditions[0].last_transition_time.seconds > 0
    got = stub.GetGpu(pb.GetGpuRequest(name=A.lower())).gpu
    assert got == first
    assert stub.GetGpu(pb.GetGpuRequest(name=A)).gpu == first
    with pytest.raises(grpc.RpcError) as err:
        stub.GetGpu(pb.GetGpuRequest(name="gpu-nope"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_provider_condition_is_merged_by_type_and_watched(service):
    store, _, stub, _ = service
    watch = stub.WatchGpus(pb.WatchGpusRequest())
    added = [next(watch) for _ in range(3)]
    assert {e.type for e in added} == {"ADDED"}
    version = stub.GetGpu(pb.GetGpuRequest(name=A)).gpu.resource_version
    updated = stub.UpdateGpuStatus(pb.UpdateGpuStatusRequest(
        name=A.lower(), status=pb.GpuStatus(conditions=[_provider_condition()],
                                            recommended_action="RESET_GPU"),
        resource_version=version)).gpu
    event = next(watch)
    assert (event.type, event.object.spec.uuid) == ("MODIFIED", A)
    assert event.object == updated
    kinds = {c.type: (c.status, c.reason) for c in updated.status.conditions}
    assert kinds == {"NVMLReady": ("True", "NVMLReady"),
                     "example.com/DcgmHealth": ("False", "PcieReplays"),
                     "Ready": ("False", "PcieReplays")}
    assert updated.status.recommended_action == "RESET_GPU"
    assert updated.resource_version > version
    # A second provider's type is added beside the first's, not in its place.
    again = stub.UpdateGpuStatus(pb.UpdateGpuStatusRequest(name=A, status=pb.GpuStatus(
        conditions=[_provider_condition("True", "example.com/Thermal", reason="Cool")]))).gpu
    assert {c.type for c in again.status.conditions} == {
        "NVMLReady", "example.com/DcgmHealth", "example.com/Thermal", "Ready"}
    # The store's snapshot carries it: /api/v1/gpus, the page and /metrics read that.
    health = next(d for d in store.latest().devices if d.identity.uuid == A).health
    assert health.condition("example.com/DcgmHealth").source == "device-api"
    watch.cancel()


def test_stale_version_is_aborted_and_own_types_refused(service):
    _, _, stub, _ = service
    version = stub.GetGpu(pb.GetGpuRequest(name=A)).gpu.resource_version
    stub.UpdateGpuStatus(pb.UpdateGpuStatusRequest(
        name=A, status=pb.GpuStatus(conditions=[_provider_condition()]),
        resource_version=version))
    for request, code in (
            (pb.UpdateGpuStatusRequest(name=A, status=pb.GpuStatus(
                conditions=[_provider_condition("True")]), resource_version=version),
             grpc.StatusCode.ABORTED),
            (pb.UpdateGpuStatusRequest(name=A, status=pb.GpuStatus(
                conditions=[_provider_condition(type_="NVMLReady")])),
             grpc.StatusCode.INVALID_ARGUMENT),
            (pb.UpdateGpuStatusRequest(name=A, status=pb.GpuStatus(
                conditions=[_provider_condition(status="Maybe")])),
             grpc.StatusCode.INVALID_ARGUMENT),
            (pb.UpdateGpuStatusRequest(name=A, status=pb.GpuStatus(
                conditions=[_provider_condition(message="x" * 5000)])),
             grpc.StatusCode.INVALID_ARGUMENT),
            (pb.UpdateGpuStatusRequest(name=A, status=pb.GpuStatus(conditions=[
                _provider_condition(type_=f"example.com/T{i}") for i in range(17)])),
             grpc.StatusCode.INVALID_ARGUMENT),
            (pb.UpdateGpuStatusRequest(name="gpu-nope", status=pb.GpuStatus()),
             grpc.StatusCode.NOT_FOUND)):
        with pytest.raises(grpc.RpcError) as err:
            stub.UpdateGpuStatus(request)
        assert err.value.code() == code, request


def test_gpus_are_the_daemons_own(service):
    _, _, stub, _ = service
    for call, request, code in (
            (stub.CreateGpu, pb.CreateGpuRequest(gpu=pb.Gpu(
                metadata=pb.ObjectMeta(name=A.lower()), spec=pb.GpuSpec(uuid=A))),
             grpc.StatusCode.FAILED_PRECONDITION),
            (stub.CreateGpu, pb.CreateGpuRequest(gpu=pb.Gpu(
                metadata=pb.ObjectMeta(name="gpu-new"), spec=pb.GpuSpec(uuid="GPU-new"))),
             grpc.StatusCode.PERMISSION_DENIED),
            (stub.DeleteGpu, pb.DeleteGpuRequest(name=A), grpc.StatusCode.FAILED_PRECONDITION),
            (stub.DeleteGpu, pb.DeleteGpuRequest(name="gpu-new"), grpc.StatusCode.NOT_FOUND),
            (stub.UpdateGpu, pb.UpdateGpuRequest(gpu=pb.Gpu(
                metadata=pb.ObjectMeta(name=A), spec=pb.GpuSpec(uuid=B))),
             grpc.StatusCode.FAILED_PRECONDITION)):
        with pytest.raises(grpc.RpcError) as err:
            call(request)
        assert err.value.code() == code, request


def test_a_watch_resumes_after_a_version_and_a_lost_one_is_out_of_range(service):
    store, events, stub, _ = service
    listed = stub.ListGpus(pb.ListGpusRequest()).gpu_list
    stub.UpdateGpuStatus(pb.UpdateGpuStatusRequest(name=B, status=pb.GpuStatus(
        conditions=[_provider_condition()])))
    watch = stub.WatchGpus(pb.WatchGpusRequest(opts=pb.ListOptions(
        resource_version=listed.metadata.resource_version)))
    event = next(watch)
    assert (event.type, event.object.spec.uuid) == ("MODIFIED", B)
    watch.cancel()
    for version, code in (("5", grpc.StatusCode.OUT_OF_RANGE),
                          ("v1", grpc.StatusCode.INVALID_ARGUMENT)):
        with pytest.raises(grpc.RpcError) as err:
            next(stub.WatchGpus(pb.WatchGpusRequest(opts=pb.ListOptions(
                resource_version=version))))
        assert err.value.code() == code


def test_a_gpu_gone_from_the_snapshot_is_deleted(service):
    store, events, stub, _ = service
    watch = stub.WatchGpus(pb.WatchGpusRequest())
    for _ in range(3):
        next(watch)
    snapshot = store.latest()
    store.publish(replace(snapshot, sequence=snapshot.sequence + 1,
                          devices=tuple(d for d in snapshot.devices if d.identity.uuid != B)))
    events.observe(store.latest())
    event = next(watch)
    assert (event.type, event.object.spec.uuid) == ("DELETED", B)
    watch.cancel()


def test_watches_are_capped(tmp_path):
    from gpustats.deviceapi import service as nvsentinel_grpc
    store, events = ProvidedHealthStore(), GpuEventLog()
    store.publish(sample_snapshot(1))
    service = nvsentinel_grpc.GpuService(store, events, max_watches=1)
    server = grpc.server(__import__("concurrent.futures").futures.ThreadPoolExecutor(4))
    pb_grpc.add_GpuServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.GpuServiceStub(channel)
            first = stub.WatchGpus(pb.WatchGpusRequest())
            next(first)
            with pytest.raises(grpc.RpcError) as err:
                next(stub.WatchGpus(pb.WatchGpusRequest()))
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            # A watcher that reads no further holds its slot, never the other requests.
            assert stub.ListGpus(pb.ListGpusRequest(), timeout=5).gpu_list.items
            first.cancel()
    finally:
        server.stop(0)


def test_tcp_beside_the_socket(tmp_path):
    store, events = ProvidedHealthStore(), GpuEventLog()
    store.publish(sample_snapshot(1))
    server = DeviceApiServer(store, events, None, listen=("127.0.0.1", 0))
    assert server.start() and server.port
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            listed = pb_grpc.GpuServiceStub(channel).ListGpus(pb.ListGpusRequest(), timeout=5)
            assert A in {g.spec.uuid for g in listed.gpu_list.items}
    finally:
        server.stop(0)


def test_the_socket_gets_its_group(tmp_path):
    store, events = ProvidedHealthStore(), GpuEventLog()
    store.publish(sample_snapshot(1))
    path = tmp_path / "gs.sock"
    server = DeviceApiServer(store, events, str(path), socket_group=str(os.getgid()))
    assert server.start()
    try:
        info = os.stat(path)
        assert (stat.S_IMODE(info.st_mode), info.st_gid) == (0o660, os.getgid())
    finally:
        server.stop(0)
    assert not path.exists()


def test_a_stale_socket_is_replaced_and_another_file_left_alone(tmp_path):
    store, events = ProvidedHealthStore(), GpuEventLog()
    path = tmp_path / "gs.sock"
    path.write_text("not a socket")
    assert DeviceApiServer(store, events, str(path)).start() is False
    assert path.read_text() == "not a socket"


def test_an_expired_line_is_an_error_event_and_bad_types_are_refused():
    from gpustats.deviceapi.service import _Refused, event_message, provided_conditions
    from gpustats.export.gpu_events import expired_line
    assert event_message(expired_line(5)).type == "ERROR"
    for bad in ("has space", "-lead", "x" * 400, ""):
        with pytest.raises(_Refused):
            provided_conditions(pb.GpuStatus(conditions=[_provider_condition(type_=bad)]))
    with pytest.raises(_Refused):
        provided_conditions(pb.GpuStatus(conditions=[_provider_condition(reason="not camel")]))
    with pytest.raises(_Refused):
        provided_conditions(pb.GpuStatus(conditions=[_provider_condition(), _provider_condition()]))


def test_transition_times_are_kept_while_the_status_holds():
    old = (Condition("example.com/X", "False", "A", "m", 100.0, "device-api"),)
    same = merge_conditions(old, (Condition("example.com/X", "False", "B", "n", 0.0,
                                            "device-api"),), now=200.0)
    assert same[0].last_transition_time == 100.0 and same[0].reason == "B"
    flipped = merge_conditions(same, (Condition("example.com/X", "True", "C", "", 0.0,
                                                "device-api"),), now=300.0)
    assert flipped[0].last_transition_time == 300.0


# ------------------------------------------------------------------ end to end

SCENARIO = {"devices": [{"uuid": GPU_A, "minor": 0}, {"uuid": GPU_B, "minor": 1}]}


def test_a_provider_condition_reaches_a_watcher_within_a_second_and_every_output(
        start_daemon, tmp_path):
    path = tmp_path / "s.yaml"
    write_scenario(path, SCENARIO)
    sock = str(tmp_path / "device-api.sock")
    daemon = start_daemon("--simulate", str(path), "--housekeeping-interval", "2",
                          "--device-api-socket", sock)
    daemon.wait_ready()
    with grpc.insecure_channel(f"unix:{sock}") as consumer_channel, \
            grpc.insecure_channel(f"unix:{sock}") as provider_channel:
        consumer = pb_grpc.GpuServiceStub(consumer_channel)
        provider = pb_grpc.GpuServiceStub(provider_channel)
        listed = consumer.ListGpus(pb.ListGpusRequest(), timeout=5).gpu_list
        assert sorted(g.spec.uuid for g in listed.items) == sorted([GPU_A, GPU_B])
        gpu = consumer.GetGpu(pb.GetGpuRequest(name=GPU_A.lower()), timeout=5).gpu
        assert gpu.spec.uuid == GPU_A
        seen: queue.Queue = queue.Queue()
        watch = consumer.WatchGpus(pb.WatchGpusRequest())

        def read() -> None:
            try:
                for event in watch:
                    seen.put((time.monotonic(), event))
            except grpc.RpcError:
                pass
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        added = [seen.get(timeout=5)[1] for _ in range(2)]
        assert {e.type for e in added} == {"ADDED"}
        sent = time.monotonic()
        provider.UpdateGpuStatus(pb.UpdateGpuStatusRequest(
            name=GPU_A.lower(), status=pb.GpuStatus(conditions=[_provider_condition()],
                                                    recommended_action="DRAIN")), timeout=5)
        arrived, event = seen.get(timeout=1.0)
        while event.object.spec.uuid != GPU_A or not any(
                c.type == "example.com/DcgmHealth" for c in event.object.status.conditions):
            arrived, event = seen.get(timeout=max(0.01, sent + 1.0 - time.monotonic()))
        assert arrived - sent < 1.0
        watch.cancel()
    _, body = daemon.get("/api/v1/gpus")
    item = next(g for g in body["gpus"] if g["uuid"] == GPU_A)
    conditions = {c["type"]: c for c in item["health"]["conditions"]}
    assert conditions["example.com/DcgmHealth"]["status"] == "False"
    assert conditions["example.com/DcgmHealth"]["source"] == "device-api"
    assert conditions["Ready"]["status"] == "False"
    assert item["health"]["recommendedAction"] == "DRAIN"
    _, page = daemon.get("/")
    assert "example.com/DcgmHealth: PcieReplays" in page
    _, metrics = daemon.get("/metrics")
    assert 'type="example.com/DcgmHealth"' in metrics and 'reason="PcieReplays"' in metrics
    # A tick later the condition is still there (merged into every snapshot).
    first = daemon.get("/api/v1/status")[1]["snapshotSequence"]
    daemon.wait_for(lambda s: s["snapshotSequence"] > first, path="/api/v1/status")
    item = next(g for g in daemon.get("/api/v1/gpus")[1]["gpus"] if g["uuid"] == GPU_A)
    assert "example.com/DcgmHealth" in {c["type"] for c in item["health"]["conditions"]}
