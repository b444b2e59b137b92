"""DRA claim devices: pod-resources decoding (current and older kubelets), resolution to GPU
keys through CDI and MIG capability minors, and the container tracker's attribution."""

import dataclasses
import logging
from concurrent import futures

import grpc
import pytest

from gpustats.engine.containers import ContainerTracker
from gpustats.engine.counters import EnergyCounters
from gpustats.engine.dra import ClaimResolver
from gpustats.model.attribution import DeviceAttribution, ProcessAttribution
from gpustats.model.containers import ContainerNames, PodDeviceAllocation
from gpustats.model.device import MigInstanceReading, ProcessReading
from gpustats.model.dra import CdiDeviceNodes, ClaimDevice, MigCapability
from gpustats.model.snapshot import ProcessStats
from gpustats.sources.podresources import podresources_api_pb2 as api
from gpustats.sources.podresources.client import PodResourcesClient, allocations_from_response
from tests.support.podresources import old_response
from tests.support.tracker_fakes import (
    GPU0, GPU1, UID, A, B, FakeAllocations, FakeCgroups, FakeNames, FakeProcs, ident, reading,
)

NV = "gpu.nvidia.com"


class FakeSpecs:
    def __init__(self, table):
        self.table = table
        self.refreshes = 0
        self.generation = 0

    def refresh(self):
        self.refreshes += 1

    def lookup(self, name):
        return self.table.get(name)


class FakeCaps:
    def __init__(self, table):
        self.table = table

    def lookup(self, minor):
        return self.table.get(minor)


def claim(name="gpu-claim", cdi=("k8s.gpu.nvidia.com/claim=u-gpu-0",), driver=NV, device="gpu-0",
          share=None, namespace="ml"):
    return ClaimDevice(claim_name=name, claim_namespace=namespace, driver_name=driver,
                       pool_name="node-1", device_name=device, share_id=share,
                       cdi_devices=tuple(cdi))


class Lookups:
    def __init__(self, *readings):
        self.by_uuid = {r.identity.uuid: r for r in readings}
        self.by_minor = {r.identity.minor_number: r.identity.uuid for r in readings}
        self.mig_by_uuid = {i.uuid: (r.identity.uuid, i.gpu_instance_id)
                            for r in readings for i in r.mig_instances if i.uuid}


MIG7 = (MigInstanceReading(gpu_instance_id=7, uuid="MIG-7", profile="3g.40gb"),
        MigInstanceReading(gpu_instance_id=8, uuid="MIG-8", profile="3g.40gb"))
SPECS = {
    "k8s.gpu.nvidia.com/claim=u-gpu-0": CdiDeviceNodes(gpu_minors=(0,)),
    "k8s.gpu.nvidia.com/claim=u-mig": CdiDeviceNodes(gpu_minors=(1,), capability_minors=(66, 67)),
    "k8s.gpu.nvidia.com/claim=u-mig-unknown": CdiDeviceNodes(gpu_minors=(1,),
                                                             capability_minors=(90, 91)),
    "k8s.gpu.nvidia.com/claim=u-env": CdiDeviceNodes(visible_device_uuids=("MIG-8",)),
    "k8s.gpu.nvidia.com/claim=u-gpu-9": CdiDeviceNodes(gpu_minors=(9,)),
    "k8s.gpu.nvidia.com/claim=common": CdiDeviceNodes(),
    "nic.example.com/vf=0": CdiDeviceNodes(),
    "other.example.com/x=gpu": CdiDeviceNodes(gpu_minors=(0,)),
}
CAPS = {66: MigCapability(1, 7), 67: MigCapability(1, 7, 0)}


@pytest.fixture
def resolver():
    return ClaimResolver(FakeSpecs(SPECS), FakeCaps(CAPS))


@pytest.mark.parametrize("cdi, driver, expected", [
    (["k8s.gpu.nvidia.com/claim=u-gpu-0"], NV, ((GPU0, None),)),
    (["k8s.gpu.nvidia.com/claim=common", "k8s.gpu.nvidia.com/claim=u-gpu-0"], NV,
     ((GPU0, None),)),
    (["k8s.gpu.nvidia.com/claim=u-mig"], NV, ((GPU1, 7),)),
    (["k8s.gpu.nvidia.com/claim=u-env"], NV, ((GPU1, 8),)),
    (["other.example.com/x=gpu"], "other.example.com", ((GPU0, None),)),
])
def test_resolves(resolver, cdi, driver, expected):
    devices = Lookups(reading(GPU0, 0), reading(GPU1, 1, mig=MIG7))
    assert resolver.resolve(claim(cdi=cdi, driver=driver), devices) == (expected, None)


@pytest.mark.parametrize("cdi, reason", [
    ([], "no-cdi-device"),
    (["k8s.gpu.nvidia.com/claim=gone"], "cdi-spec-not-found"),
    (["k8s.gpu.nvidia.com/claim=common"], "no-nvidia-device-node"),
    (["k8s.gpu.nvidia.com/claim=u-gpu-9"], "gpu-not-found"),
    (["k8s.gpu.nvidia.com/claim=u-mig-unknown"], "mig-instance-unknown"),
])
def test_unresolved_nvidia_claims_have_a_reason_and_one_log_line(resolver, caplog, cdi, reason):
    devices = Lookups(reading(GPU0, 0), reading(GPU1, 1, mig=MIG7))
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            resolver.begin_tick()
            assert resolver.resolve(claim(cdi=cdi), devices) == ((), reason)
    assert len([r for r in caplog.records if reason in r.getMessage()]) == 1


def test_other_drivers_are_ignored_unless_their_nodes_are_gpus(resolver, caplog):
    devices = Lookups(reading(GPU0, 0))
    with caplog.at_level(logging.WARNING):
        assert resolver.resolve(claim(cdi=["nic.example.com/vf=0"], driver="nic.example.com"),
                                devices) == ((), None)
        assert resolver.resolve(claim(cdi=["nic.example.com/vf=9"], driver="nic.example.com"),
                                devices) == ((), None)
    assert caplog.records == []


def test_claim_coming_back_logs_again(resolver, caplog):
    devices = Lookups(reading(GPU0, 0))
    gone = claim(cdi=["k8s.gpu.nvidia.com/claim=gone"])
    with caplog.at_level(logging.INFO):
        resolver.begin_tick()
        resolver.resolve(gone, devices)
        resolver.begin_tick()                  # a tick where it is not listed
        resolver.begin_tick()
        resolver.resolve(gone, devices)
    assert len(caplog.records) == 2


def test_answers_kept_until_specs_or_gpus_change():
    specs = FakeSpecs(dict(SPECS))
    lookups = []
    real = specs.lookup
    specs.lookup = lambda name: lookups.append(name) or real(name)
    resolver = ClaimResolver(specs, FakeCaps(CAPS))
    devices = Lookups(reading(GPU0, 0), reading(GPU1, 1))
    for _ in range(5):
        resolver.begin_tick()
        assert resolver.resolve(claim(), devices) == (((GPU0, None),), None)
        assert resolver.resolve(claim(), Lookups(reading(GPU0, 0), reading(GPU1, 1))) == \
            (((GPU0, None),), None)            # a new tick's lookups with the same GPUs
    assert len(lookups) == 1
    specs.table["k8s.gpu.nvidia.com/claim=u-gpu-0"] = CdiDeviceNodes(gpu_minors=(1,))
    specs.generation += 1
    assert resolver.resolve(claim(), devices) == (((GPU1, None),), None)
    swapped = Lookups(reading(GPU1, 0), reading(GPU0, 1))      # minors changed hands
    assert resolver.resolve(claim(), swapped) == (((GPU0, None),), None)
    # Unresolved answers are worked out again each time (a spec may appear any tick).
    gone = claim(cdi=["k8s.gpu.nvidia.com/claim=later"])
    assert resolver.resolve(gone, swapped)[1] == "cdi-spec-not-found"
    specs.table["k8s.gpu.nvidia.com/claim=later"] = CdiDeviceNodes(gpu_minors=(0,))
    assert resolver.resolve(gone, swapped) == (((GPU1, None),), None)


def test_the_same_claim_object_follows_changes_and_old_objects_are_let_go():
    """Claims are looked up by object first (each tick hands the kept listing's objects)."""
    specs = FakeSpecs(dict(SPECS))
    resolver = ClaimResolver(specs, FakeCaps(CAPS))
    devices = Lookups(reading(GPU0, 0), reading(GPU1, 1))
    held = claim()
    assert resolver.resolve(held, devices) == (((GPU0, None),), None)
    assert resolver.resolve(held, devices) == (((GPU0, None),), None)
    specs.table["k8s.gpu.nvidia.com/claim=u-gpu-0"] = CdiDeviceNodes(gpu_minors=(1,))
    specs.generation += 1
    assert resolver.resolve(held, devices) == (((GPU1, None),), None)
    assert resolver.resolve(held, Lookups(reading(GPU1, 0), reading(GPU0, 1))) == \
        (((GPU0, None),), None)
    # Listings replaced many times over: equal claims in new objects, a bounded memory.
    for _ in range(3000):
        assert resolver.resolve(claim(), devices) == (((GPU1, None),), None)
    assert len(resolver._answers_by_id) <= 2 * len(resolver._answers) + 1025


# ------------------------------------------------------------------ the tracker

def claim_alloc(pod, container, c):
    return PodDeviceAllocation(pod_name=pod, pod_namespace="ml", container_name=container,
                               resource_name=c.driver_name or "", device_id="x", device=None,
                               claim=c)


def attribution(uuid, shares, active=100.0):
    """shares: {pid: (gpu instance, fraction)} of ``active`` joules over a 1 s tick."""
    return DeviceAttribution(uuid, 50.0, active, active + 50.0, active, "time-slicing", tuple(
        ProcessAttribution(pid, uuid, gi, f, "sm-util", active * f, active * f, None)
        for pid, (gi, f) in shares.items()), dt_seconds=1.0)


def stats_of(attr):
    return tuple(ProcessStats(pid=a.pid, device_uuid=a.device_uuid,
                              gpu_instance_id=a.gpu_instance_id,
                              attributed_power_watts=a.power_watts) for a in attr.processes)


def test_claim_joined_by_names_shown_with_zero_watts_when_idle(resolver):
    names = FakeNames({A: ContainerNames("idle-0", "ml", UID, "main")})
    tracker = ContainerTracker(
        FakeCgroups({A: ident(A)}), FakeProcs({}), EnergyCounters(),
        pod_resources=FakeAllocations((claim_alloc("idle-0", "main", claim(share="s-1")),)),
        runtime=names, claims=resolver)
    view = tracker.tick((reading(GPU0, 0),), {GPU0: attribution(GPU0, {})}, ())
    pod = view.pods[0]
    acc = pod.containers[0].accelerators[0]
    assert acc.reasons == ("dra",) and acc.claim == claim(share="s-1")
    assert acc.attributed_power_watts == 0.0 and acc.attributed_energy_joules == 0.0
    assert pod.accelerators[0].attributed_power_watts == 0.0
    assert pod.accelerators[0].claim.claim_name == "gpu-claim"


def test_shared_claim_split_by_processes_like_time_slicing(resolver):
    path_a, path_b = f"/kubepods/pod{UID}/{A}", f"/kubepods/podother/{B}"
    names = FakeNames({A: ContainerNames("p", "ml", UID, "a"),
                       B: ContainerNames("q", "ml", "other", "b")})
    shared = claim(name="shared")
    tracker = ContainerTracker(
        FakeCgroups({A: ident(A, path_a), B: ident(B, path_b)}),
        FakeProcs({101: path_a, 102: path_b}), EnergyCounters(),
        pod_resources=FakeAllocations((claim_alloc("p", "a", shared),
                                       claim_alloc("q", "b", shared))),
        runtime=names, claims=resolver)
    attr = attribution(GPU0, {101: (None, 0.75), 102: (None, 0.25)})
    device = reading(GPU0, 0, [ProcessReading(pid=101), ProcessReading(pid=102)])
    view = tracker.tick((device,), {GPU0: attr}, stats_of(attr))
    accs = {c.container_id: c.accelerators[0] for p in view.pods for c in p.containers}
    assert accs[A].attributed_energy_joules == pytest.approx(75.0)
    assert accs[B].attributed_energy_joules == pytest.approx(25.0)
    assert set(accs[A].reasons) == {"dra", "nvml-process"}
    assert accs[A].claim == accs[B].claim == shared


def test_mig_claim_maps_to_its_instance_and_unresolved_is_listed(resolver):
    names = FakeNames({A: ContainerNames("p", "ml", UID, "a")})
    allocations = (claim_alloc("p", "a", claim(cdi=["k8s.gpu.nvidia.com/claim=u-mig"])),
                   claim_alloc("p", "a", claim(name="lost", cdi=["k8s.gpu.nvidia.com/claim=x"])))
    tracker = ContainerTracker(FakeCgroups({A: ident(A)}), FakeProcs({}), EnergyCounters(),
                               pod_resources=FakeAllocations(allocations), runtime=names,
                               claims=resolver)
    view = tracker.tick((reading(GPU1, 1, mig=MIG7),), {}, ())
    container = view.pods[0].containers[0]
    acc = container.accelerators[0]
    assert (acc.device_uuid, acc.gpu_instance_id, acc.mig_profile) == (GPU1, 7, "3g.40gb")
    assert [(u.claim.claim_name, u.reason) for u in container.unresolved_claims] == \
        [("lost", "cdi-spec-not-found")]


def test_claim_on_parent_gpu_follows_the_instance_it_is_folded_into():
    specs = FakeSpecs({"k8s.gpu.nvidia.com/claim=u-env-parent":
                       CdiDeviceNodes(visible_device_uuids=(GPU1,))})
    path = f"/kubepods/pod{UID}/{A}"
    names = FakeNames({A: ContainerNames("p", "ml", UID, "a")})
    tracker = ContainerTracker(
        FakeCgroups({A: ident(A, path)}), FakeProcs({101: path}), EnergyCounters(),
        pod_resources=FakeAllocations((claim_alloc("p", "a", claim(
            cdi=["k8s.gpu.nvidia.com/claim=u-env-parent"])),)),
        runtime=names, claims=ClaimResolver(specs, FakeCaps({})))
    device = reading(GPU1, 1, [ProcessReading(pid=101, gpu_instance_id=7)], mig=MIG7)
    view = tracker.tick((device,), {}, ())
    [acc] = view.pods[0].containers[0].accelerators
    assert (acc.gpu_instance_id, set(acc.reasons)) == (7, {"dra", "nvml-process"})
    assert acc.claim.claim_name == "gpu-claim"


def test_resolution_kept_while_listing_gpus_and_specs_stay_the_same():
    specs = FakeSpecs(dict(SPECS))
    resolver = ClaimResolver(specs, FakeCaps(CAPS))
    asked = []
    real_resolve = resolver.resolve
    resolver.resolve = lambda c, devices: asked.append(c) or real_resolve(c, devices)
    names = FakeNames({A: ContainerNames("p", "ml", UID, "a")})
    listing = FakeAllocations((claim_alloc("p", "a", claim()),))
    tracker = ContainerTracker(FakeCgroups({A: ident(A)}), FakeProcs({}), EnergyCounters(),
                               pod_resources=listing, runtime=names, claims=resolver)
    gpus = (reading(GPU0, 0), reading(GPU1, 1))

    def held():
        view = tracker.tick(gpus, {}, ())
        return [a.device_uuid for a in view.pods[0].containers[0].accelerators]

    assert [held() for _ in range(3)] == [[GPU0]] * 3
    assert len(asked) == 1 and specs.refreshes == 3      # specs still looked at every tick
    specs.table["k8s.gpu.nvidia.com/claim=u-gpu-0"] = CdiDeviceNodes(gpu_minors=(1,))
    specs.generation += 1                                   # the CDI devices changed
    assert held() == [GPU1] and len(asked) == 2
    gpus = (reading(GPU1, 0), reading(GPU0, 1))             # minors changed hands
    assert held() == [GPU0] and len(asked) == 3
    listing.result = (claim_alloc("p", "a", claim()),)      # the kubelet listed again
    assert held() == [GPU0] and len(asked) == 4
    assert held() == [GPU0] and len(asked) == 4
    # A claim not resolved yet is asked about every tick, until its spec appears.
    later = claim(name="later", cdi=["k8s.gpu.nvidia.com/claim=later"])
    listing.result = (*listing.result, claim_alloc("p", "a", later))
    for _ in range(2):
        view = tracker.tick(gpus, {}, ())
        assert [u.reason for u in view.pods[0].containers[0].unresolved_claims] == \
            ["cdi-spec-not-found"]
    assert asked.count(later) == 2
    specs.table["k8s.gpu.nvidia.com/claim=later"] = CdiDeviceNodes(gpu_minors=(0,))
    view = tracker.tick(gpus, {}, ())
    assert view.pods[0].containers[0].unresolved_claims == ()
    assert {a.device_uuid for a in view.pods[0].containers[0].accelerators} == {GPU0, GPU1}


def test_resolution_keyed_by_the_listing_generation_not_the_objects_handed():
    """A source that hands an equal copy of the same listing each tick (its generation the
    same) is resolved once; a new generation is resolved again."""
    specs = FakeSpecs(dict(SPECS))
    resolver = ClaimResolver(specs, FakeCaps(CAPS))
    asked = []
    real_resolve = resolver.resolve
    resolver.resolve = lambda c, devices: asked.append(c) or real_resolve(c, devices)

    class CopyingListing(FakeAllocations):
        def allocations(self):
            return tuple(dataclasses.replace(a) for a in self.result)

    listing = CopyingListing((claim_alloc("p", "a", claim()),))
    tracker = ContainerTracker(FakeCgroups({A: ident(A)}), FakeProcs({}), EnergyCounters(),
                               pod_resources=listing, runtime=FakeNames(
                                   {A: ContainerNames("p", "ml", UID, "a")}), claims=resolver)
    gpus = (reading(GPU0, 0), reading(GPU1, 1))
    for _ in range(3):
        view = tracker.tick(gpus, {}, ())
        assert [a.device_uuid for a in view.pods[0].containers[0].accelerators] == [GPU0]
    assert len(asked) == 1
    listing.result = listing.result                         # the kubelet listed again
    tracker.tick(gpus, {}, ())
    assert len(asked) == 2


def test_join_kept_while_names_stay_and_redone_when_they_change(resolver):
    """The join of a kept resolution to containers is reused only while every name is the
    same: a container named later, renamed, or gone is joined afresh that very tick."""
    names = FakeNames({})
    listing = FakeAllocations((claim_alloc("p", "a", claim()), claim_alloc("q", "b", claim())))
    tracker = ContainerTracker(FakeCgroups({A: ident(A), B: ident(B)}), FakeProcs({}),
                               EnergyCounters(), pod_resources=listing, runtime=names,
                               claims=resolver)
    gpus = (reading(GPU0, 0),)

    def claimed():
        view = tracker.tick(gpus, {GPU0: attribution(GPU0, {})}, ())
        # Entries held this tick (a GPU held before stays listed, with its total only).
        return {c.container_id: [a.claim.claim_namespace for a in c.accelerators if a.reasons]
                for p in view.pods for c in p.containers}

    assert claimed() == {A: [], B: []}                  # nothing names them yet
    names.table[A] = ContainerNames("p", "ml", UID, "a")
    assert claimed() == {A: ["ml"], B: []}
    assert claimed() == {A: ["ml"], B: []}
    names.table[B] = ContainerNames("q", "ml", UID, "b")
    assert claimed() == {A: ["ml"], B: ["ml"]}
    names.table[A] = ContainerNames("p", "ml", UID, "renamed")
    assert claimed() == {A: [], B: ["ml"]}
    del names.table[B]
    assert claimed() == {A: [], B: []}


def test_join_through_gpu_users_follows_the_processes_every_tick(resolver):
    """Without runtime names an allocation is joined through the one container using its
    GPU: that join is never kept, so it follows the processes from tick to tick."""
    path_a, path_b = f"/kubepods/pod{UID}/{A}", f"/kubepods/pod{UID}/{B}"
    procs = FakeProcs({101: path_a, 102: path_b})
    tracker = ContainerTracker(
        FakeCgroups({A: ident(A, path_a), B: ident(B, path_b)}), procs, EnergyCounters(),
        pod_resources=FakeAllocations((claim_alloc("p", "a", claim()),)), claims=resolver)

    def holders(pid):
        device = reading(GPU0, 0, [ProcessReading(pid=pid)])
        view = tracker.tick((device,), {}, ())
        return sorted(c.container_id for p in view.pods for c in p.containers
                      if any(a.claim is not None for a in c.accelerators))

    assert holders(101) == [A]
    assert holders(101) == [A]
    assert holders(102) == [B]


def test_no_claim_source_no_cost():
    specs = FakeSpecs(SPECS)
    resolver = ClaimResolver(specs, FakeCaps(CAPS))
    names = FakeNames({A: ContainerNames("p", "ml", UID, "a")})
    tracker = ContainerTracker(FakeCgroups({A: ident(A)}), FakeProcs({}), EnergyCounters(),
                               pod_resources=FakeAllocations(()), runtime=names, claims=resolver)
    tracker.tick((reading(GPU0, 0),), {}, ())
    assert specs.refreshes == 0                    # no claims listed: CDI dirs not even stat'ed


# ------------------------------------------------------------------ pod-resources over gRPC

def current_response():
    return api.ListPodResourcesResponse(pod_resources=[
        api.PodResources(name="train-0", namespace="ml", containers=[
            api.ContainerResources(name="main", dynamic_resources=[
                api.DynamicResource(claim_name="gpu", claim_namespace="ml", claim_resources=[
                    api.ClaimResource(
                        cdi_devices=[api.CDIDevice(name="k8s.gpu.nvidia.com/claim=u-gpu-0")],
                        driver_name=NV, pool_name="node-1", device_name="gpu-0",
                        share_id="7d1c"),
                    api.ClaimResource(
                        cdi_devices=[api.CDIDevice(name="k8s.gpu.nvidia.com/claim=u-mig")],
                        driver_name=NV, pool_name="node-1", device_name="gpu-1-mig-7"),
                ])]),
        ]),
    ])


def serve_bytes(tmp_path, body: bytes):
    handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
        "List": grpc.unary_unary_rpc_method_handler(
            lambda req, ctx: body, request_deserializer=None, response_serializer=None)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    path = tmp_path / "kubelet.sock"
    server.add_insecure_port(f"unix://{path}")
    server.start()
    return server, str(path)


def test_a_claim_shared_by_containers_is_one_object():
    def holding(container, device):
        return api.ContainerResources(name=container, dynamic_resources=[api.DynamicResource(
            claim_name="shared", claim_namespace="ml", claim_resources=[api.ClaimResource(
                cdi_devices=[api.CDIDevice(name=f"k8s.gpu.nvidia.com/claim=u-{device}")],
                driver_name=NV, pool_name="node-1", device_name=device)])])

    response = api.ListPodResourcesResponse(pod_resources=[
        api.PodResources(name="a", namespace="ml", containers=[holding("main", "gpu-0"),
                                                                holding("side", "gpu-0")]),
        api.PodResources(name="b", namespace="ml", containers=[holding("main", "gpu-0"),
                                                                holding("other", "gpu-1")])])
    claims = [a.claim for a in allocations_from_response(response)]
    assert claims[0] is claims[1] is claims[2]
    assert claims[3] is not claims[0] and claims[3].device_name == "gpu-1"


@pytest.mark.parametrize("kind", ["current", "1.34", "1.30"])
def test_claims_read_from_current_and_older_kubelets(tmp_path, kind):
    if kind == "current":
        body = current_response().SerializeToString()
    else:
        body = old_response(with_driver_fields=(kind == "1.34")).SerializeToString()
    server, path = serve_bytes(tmp_path, body)
    try:
        allocations = PodResourcesClient(path, timeout_seconds=2.0).allocations()
    finally:
        server.stop(0)
    claims = [a.claim for a in allocations]
    assert all(a.device is None and (a.pod_name, a.container_name) == ("train-0", "main")
               for a in allocations)
    first = claims[0]
    assert (first.claim_name, first.claim_namespace, first.cdi_devices) == \
        ("gpu", "ml", ("k8s.gpu.nvidia.com/claim=u-gpu-0",))
    if kind == "current":
        assert (first.driver_name, first.pool_name, first.device_name, first.share_id) == \
            (NV, "node-1", "gpu-0", "7d1c")
        assert claims[1].share_id is None and claims[1].device_name == "gpu-1-mig-7"
    elif kind == "1.34":
        assert (first.driver_name, first.device_name, first.share_id) == (NV, "gpu-0", None)
    else:
        assert (first.driver_name, first.pool_name, first.device_name, first.share_id) == \
            (None, None, None, None)


def test_proto_field_numbers_match_the_kubelet():
    fields = {m: {f.name: f.number for f in api.DESCRIPTOR.message_types_by_name[m].fields}
              for m in ("ContainerResources", "DynamicResource", "ClaimResource", "CDIDevice")}
    assert fields["ContainerResources"]["dynamic_resources"] == 5
    assert fields["DynamicResource"] == {"claim_name": 2, "claim_namespace": 3,
                                         "claim_resources": 4}
    assert fields["ClaimResource"] == {"cdi_devices": 1, "driver_name": 2, "pool_name": 3,
                                       "device_name": 4, "share_id": 5}
    share = api.DESCRIPTOR.message_types_by_name["ClaimResource"].fields_by_name["share_id"]
    assert share.has_presence                       # proto3 optional: absent is not ""


# ------------------------------------------------------------------ option and manifest

def test_cdi_spec_dirs_option_forms(tmp_path):
    from gpustats.config import build_arg_parser, resolve

    def dirs(argv=(), env=None):
        return resolve(build_arg_parser().parse_args(list(argv)), env or {}).cdi_spec_dirs

    assert dirs() == ("/etc/cdi", "/var/run/cdi")
    assert dirs(["--cdi-spec-dirs", " /a , /b,/a "]) == ("/a", "/b")
    assert dirs(["--cdi-spec-dirs", ""]) == ()                 # off
    config = tmp_path / "c.yaml"
    config.write_text("cdi_spec_dirs: [/x, /y]\n")
    assert dirs(["--config", str(config)]) == ("/x", "/y")
    assert dirs(["--config", str(config)], {"GPUSTATS_CDI_SPEC_DIRS": "/z"}) == ("/z",)


def test_daemonset_mounts_cdi_dirs_read_only():
    import yaml
    from tests.support.paths import REPO_ROOT

    docs = yaml.safe_load_all((REPO_ROOT / "manifests" / "daemonset.yaml").read_text())
    pod = next(d for d in docs if d and d.get("kind") == "DaemonSet")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    for path in ("/etc/cdi", "/var/run/cdi"):
        assert mounts[path]["readOnly"] is True
        assert volumes[mounts[path]["name"]]["hostPath"]["path"] == path


# ------------------------------------------------------------------ --dcgm-compat

def test_dcgm_compat_series_carry_dra_labels_in_dcgm_exporter_order():
    from dataclasses import replace

    from gpustats.export.dcgm import render_dcgm
    from tests.support.dcgm_snapshot import dcgm_snapshot as _snapshot, one_sample as _one

    snapshot = _snapshot()
    full, mig = claim(name="train", share="s-1"), claim(name="embed", namespace="serving",
                                                        device="gpu-1-mig-7")
    pods = []
    for pod in snapshot.pods:
        containers = tuple(replace(c, accelerators=tuple(
            replace(a, claim=full if a.gpu_instance_id is None else mig,
                    mig_profile=None if a.gpu_instance_id is None else "1g.10gb")
            for a in c.accelerators)) for c in pod.containers)
        pods.append(replace(pod, containers=containers))
    text = render_dcgm(replace(snapshot, pods=tuple(pods))).decode()
    labels, _ = _one(text, "DCGM_FI_DEV_GPU_TEMP", gpu="0")
    assert {k: v for k, v in labels.items() if k.startswith("dra_")} == {
        "dra_claim_name": "train", "dra_claim_namespace": "ml", "dra_driver_name": NV,
        "dra_pool_name": "node-1", "dra_device_name": "gpu-0"}
    line = next(ln for ln in text.splitlines() if ln.startswith("DCGM_FI_DEV_GPU_TEMP{"))
    keys = [kv.split("=")[0] for kv in line[line.index("{") + 1:line.index("}")].split(",")]
    assert keys[keys.index("DCGM_FI_DRIVER_VERSION") + 1:] == [
        "container", "dra_claim_name", "dra_claim_namespace", "dra_device_name",
        "dra_driver_name", "dra_pool_name", "namespace", "pod", "pod_uid"]
    instance, _ = _one(text, "DCGM_FI_DEV_FB_USED", gpu="1", GPU_I_ID="7")
    assert (instance["dra_claim_name"], instance["dra_mig_profile"],
            instance["dra_mig_device_uuid"]) == ("embed", "1g.10gb", "MIG-7")
    assert "dra_claim_name" not in _one(text, "DCGM_FI_DEV_FB_USED", gpu="1", GPU_I_ID="8")[0]
