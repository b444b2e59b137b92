"""The DRA benchmark node: one transient CDI spec per claim, and in-process kubelet
pod-resources and CRI runtime servers that list the claims and name the containers.

With ``dra=False`` the same pods hold the same GPUs through device-plugin time-slicing
replicas instead: the control that shows what the claims themselves cost."""

from __future__ import annotations

from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

from bench.scenarios import gpu_uuid

DRIVER = "gpu.nvidia.com"


def pod_name(pod: int) -> str:
    return f"train-{pod}"


def pod_uid(pod: int) -> str:
    return f"{pod:08x}-0000-4000-8000-{pod:012x}"    # as bench.scenarios.fake_host names it


def cdi_name(pod: int, gpu: int) -> str:
    return f"k8s.gpu.nvidia.com/claim={pod_uid(pod)}-gpu-{gpu}"


def dra_spec(pod: int, gpus: int) -> dict:
    """The spec NVIDIA's DRA driver would write for pod ``pod``'s claim on GPU ``pod % gpus``."""
    gpu = pod % gpus
    return {"cdiVersion": "0.6.0", "kind": "k8s.gpu.nvidia.com/claim",
            "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"},
                                               {"path": "/dev/nvidia-uvm"}]},
            "devices": [{"name": f"{pod_uid(pod)}-gpu-{gpu}", "containerEdits": {
                "deviceNodes": [{"path": f"/dev/nvidia{gpu}", "type": "c", "major": 195,
                                 "minor": gpu}]}}]}


@dataclass
class Servers:
    pod_resources: str
    runtime: str
    _servers: tuple

    def stop(self) -> None:
        for server in self._servers:
            server.stop(0)


def serve_kubelet_and_runtime(workdir: Path, pods: int, containers_per_pod: int,
                              gpus: int, dra: bool = True) -> Servers:
    import grpc

    from gpustats.sources.podresources import podresources_api_pb2 as api
    from gpustats.sources.podresources import podresources_api_pb2_grpc as api_grpc
    from gpustats.sources.runtime import cri_api_pb2 as cri
    from gpustats.sources.runtime import cri_api_pb2_grpc as cri_grpc

    def holding(p: int, k: int):
        if not dra:
            return api.ContainerResources(name=f"c{k}", devices=[api.ContainerDevices(
                resource_name="nvidia.com/gpu", device_ids=[f"{gpu_uuid(p % gpus)}::{p}"])])
        return api.ContainerResources(name=f"c{k}", dynamic_resources=[api.DynamicResource(
            claim_name=f"claim-{p}", claim_namespace="bench", claim_resources=[
                api.ClaimResource(cdi_devices=[api.CDIDevice(name=cdi_name(p, p % gpus))],
                                  driver_name=DRIVER, pool_name="node",
                                  device_name=f"gpu-{p % gpus}", share_id=f"share-{p}")])])

    listed = api.ListPodResourcesResponse(pod_resources=[
        api.PodResources(name=pod_name(p), namespace="bench",
                         containers=[holding(p, k) for k in range(containers_per_pod)])
        for p in range(pods)])
    containers = cri.ListContainersResponse(containers=[
        cri.Container(id=f"{i:064x}", labels={
            "io.kubernetes.pod.name": pod_name(i // containers_per_pod),
            "io.kubernetes.pod.namespace": "bench",
            "io.kubernetes.pod.uid": pod_uid(i // containers_per_pod),
            "io.kubernetes.container.name": f"c{i % containers_per_pod}"})
        for i in range(pods * containers_per_pod)])

    class Kubelet(api_grpc.PodResourcesListerServicer):
        def List(self, request, context):
            return listed

    class Runtime(cri_grpc.RuntimeServiceServicer):
        def ListContainers(self, request, context):
            return containers

    started = []
    paths = []
    for name, add in (("kubelet.sock", lambda s: api_grpc.add_PodResourcesListerServicer_to_server(
                           Kubelet(), s)),
                      ("containerd.sock", lambda s: cri_grpc.add_RuntimeServiceServicer_to_server(
                           Runtime(), s))):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        add(server)
        path = workdir / f"dra-{name}"
        server.add_insecure_port(f"unix://{path}")
        server.start()
        started.append(server)
        paths.append(str(path))
    return Servers(paths[0], paths[1], tuple(started))
