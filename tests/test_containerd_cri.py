"""A real container runtime: the test starts its own containerd (temporary root, state, socket
and config), acts as a kubelet through CRI (a host-network pod sandbox and a container with the
labels, log directory and log link a kubelet makes, from an image imported from a tarball the
test builds out of busybox-static), and checks that ``--runtime-socket`` names that container
exactly as the log layout does, through the client and through the real daemon.

Skips with its reason where containerd, runc, busybox-static or grpcio-tools is missing, or
where containerd cannot run a container here.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from gpustats.sources.kubelet_logs import KubeletLogNames
from gpustats.sources.runtime.client import RuntimeNamesClient
from tests.support.gpus import GPU_A as GPU
from tests.support.oci_images import busybox, oci_archive
from tests.support.waiting import poll

IMAGE = "localhost/gpustats-test/busybox:1"
NAMESPACE, POD, CONTAINER = "ml", "trainer-0", "cuda"
PROTO = Path(__file__).parent / "cri" / "cri_test_api.proto"


def _require():
    for tool in ("containerd", "runc", "containerd-shim-runc-v2", "ctr"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed")
    if busybox() is None:
        pytest.skip("busybox-static not installed")
    if os.geteuid() != 0:
        pytest.skip("containerd needs root")
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.skip("grpcio-tools not installed")


def _messages(tmp: Path):
    from grpc_tools import protoc
    out = tmp / "gen"
    out.mkdir()
    rc = protoc.main(["protoc", f"-I{PROTO.parent}", f"--python_out={out}", str(PROTO)])
    assert rc == 0
    spec = importlib.util.spec_from_file_location("cri_test_api_pb2", out / "cri_test_api_pb2.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Cri:
    """The kubelet's side of the few CRI calls the test makes."""

    def __init__(self, socket: str, api):
        import grpc
        self.api = api
        self.channel = grpc.insecure_channel(f"unix://{socket}")

    def call(self, method: str, request, response_type, timeout: float = 60.0):
        rpc = self.channel.unary_unary(f"/runtime.v1.RuntimeService/{method}",
                                       request_serializer=lambda m: m.SerializeToString(),
                                       response_deserializer=response_type.FromString)
        return rpc(request, timeout=timeout)


def _write_config(tmp: Path) -> Path:
    (tmp / "cni" / "bin").mkdir(parents=True)
    (tmp / "cni" / "conf").mkdir(parents=True)
    config = tmp / "config.toml"
    config.write_text(f"""
version = 2
root = "{tmp}/root"
state = "{tmp}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper",
                    "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{tmp}/containerd.sock"
[ttrpc]
  address = "{tmp}/containerd.sock.ttrpc"
[debug]
  address = "{tmp}/debug.sock"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{IMAGE}"
  enable_selinux = false
  # Never below containerd's own oom_score_adj: lowering it needs CAP_SYS_RESOURCE, which
  # sandboxed CI machines lack (the kubelet's -998 for sandboxes would fail there).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{tmp}/cni/bin"
    conf_dir = "{tmp}/cni/conf"
""")
    return config


@pytest.fixture
def containerd(tmp_path_factory):
    _require()
    # A short path: unix socket paths are limited to 107 bytes.
    tmp = Path(f"/tmp/gpustats-cri-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    tmp.mkdir()
    config = _write_config(tmp)
    socket = str(tmp / "containerd.sock")
    with open(tmp / "containerd.log", "w") as log:
        proc = subprocess.Popen(["containerd", "--config", str(config), "--log-level", "info"],
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        poll(lambda: os.path.exists(socket) or proc.poll() is not None, timeout=30,
             interval=0.1)
        if not os.path.exists(socket):
            pytest.skip("containerd did not start here: "
                        + (tmp / "containerd.log").read_text()[-500:])
        archive = tmp / "busybox-oci.tar"
        archive.write_bytes(oci_archive(busybox(), IMAGE,
                                        ["/bin/busybox", "sleep", "3600"]))
        imported = subprocess.run(["ctr", "--address", socket, "-n", "k8s.io", "images",
                                   "import", str(archive)], capture_output=True, text=True,
                                  timeout=120)
        assert imported.returncode == 0, imported.stderr
        yield socket, tmp
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        subprocess.run(["umount", "-R", "-l", str(tmp / "root")], capture_output=True)
        subprocess.run(["umount", "-R", "-l", str(tmp / "state")], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def _run_pod(cri: Cri, logs: Path, uid: str, cgroup_parent: str) -> tuple[str, str]:
    """What a kubelet does for a one-container host-network pod; returns (sandbox, cid)."""
    api = cri.api
    pod_labels = {"io.kubernetes.pod.name": POD, "io.kubernetes.pod.namespace": NAMESPACE,
                  "io.kubernetes.pod.uid": uid, "app": "trainer"}
    log_dir = logs / "pods" / f"{NAMESPACE}_{POD}_{uid}"
    log_dir.mkdir(parents=True)
    sandbox_config = api.PodSandboxConfig(
        metadata=api.PodSandboxMetadata(name=POD, uid=uid, namespace=NAMESPACE, attempt=0),
        log_directory=str(log_dir), labels=pod_labels,   # no hostname: host network
        annotations={"kubernetes.io/config.source": "api"},
        linux=api.LinuxPodSandboxConfig(
            cgroup_parent=cgroup_parent,
            security_context=api.LinuxSandboxSecurityContext(
                namespace_options=api.NamespaceOption(network=api.NODE, pid=api.POD,
                                                      ipc=api.POD))))
    try:
        sandbox = cri.call("RunPodSandbox", api.RunPodSandboxRequest(config=sandbox_config),
                           api.RunPodSandboxResponse).pod_sandbox_id
    except Exception as exc:        # grpc.RpcError
        details = str(exc)
        if re.search(r"not permitted|permission denied|cgroup|no such device|not supported",
                     details, re.I):
            pytest.skip(f"containerd cannot run a pod sandbox here: {details[-400:]}")
        raise
    container_labels = {"io.kubernetes.container.name": CONTAINER,
                        "io.kubernetes.pod.name": POD, "io.kubernetes.pod.namespace": NAMESPACE,
                        "io.kubernetes.pod.uid": uid}
    config = api.ContainerConfig(
        metadata=api.ContainerMetadata(name=CONTAINER, attempt=0),
        image=api.ImageSpec(image=IMAGE), command=["/bin/busybox", "sleep", "3600"],
        labels=container_labels, annotations={"io.kubernetes.container.restartCount": "0"},
        log_path=f"{CONTAINER}/0.log",
        linux=api.LinuxContainerConfig(security_context=api.LinuxContainerSecurityContext(
            namespace_options=api.NamespaceOption(network=api.NODE, pid=api.CONTAINER,
                                                  ipc=api.POD))))
    cid = cri.call("CreateContainer", api.CreateContainerRequest(
        pod_sandbox_id=sandbox, config=config, sandbox_config=sandbox_config),
        api.CreateContainerResponse).container_id
    # The kubelet links the container's log before starting it.
    (logs / "containers").mkdir(exist_ok=True)
    os.symlink(log_dir / CONTAINER / "0.log",
               logs / "containers" / f"{POD}_{NAMESPACE}_{CONTAINER}-{cid}.log")
    cri.call("StartContainer", api.StartContainerRequest(container_id=cid),
             api.StartContainerResponse)
    return sandbox, cid


def _container_pid(cgroup_parent: str, cid: str) -> int | None:
    for hierarchy in ("memory", "pids", "cpuacct", "unified"):
        procs = Path("/sys/fs/cgroup") / hierarchy / cgroup_parent.lstrip("/") / cid / \
            "cgroup.procs"
        try:
            pids = [int(p) for p in procs.read_text().split()]
        except (OSError, ValueError):
            continue
        if pids:
            return pids[0]
    return None


def test_runtime_socket_names_the_container_as_the_log_layout_does(containerd, tmp_path,
                                                                   start_daemon):
    socket, tmp = containerd
    cri = Cri(socket, _messages(tmp_path))
    logs = tmp_path / "log"
    uid = str(uuid.uuid4())
    # The kubelet's cgroupfs layout: <kubepods root>/pod<uid>/<container id>.
    cgroup_parent = f"/kubepods-gpustats-test-{os.getpid()}/pod{uid}"
    sandbox, cid = _run_pod(cri, logs, uid, cgroup_parent)
    try:
        from_cri = RuntimeNamesClient(socket).names([cid])
        from_logs = KubeletLogNames(str(logs)).names([cid])
        assert from_cri[cid] == from_logs[cid]
        assert (from_cri[cid].pod_namespace, from_cri[cid].pod_name, from_cri[cid].pod_uid,
                from_cri[cid].container_name) == (NAMESPACE, POD, uid, CONTAINER)
        # containerd wrote the container's output where the link points.
        assert (logs / "pods" / f"{NAMESPACE}_{POD}_{uid}" / CONTAINER / "0.log").exists()

        # The real daemon, naming from the socket alone, then from the log layout alone: the
        # container's real process is the simulated GPU's process.
        pid = _container_pid(cgroup_parent, cid)
        assert pid is not None, f"no process in the container's cgroup under {cgroup_parent}"
        scenario = tmp_path / "s.yaml"
        scenario.write_text(f"devices:\n  - {{uuid: {GPU}, minor: 0, power_watts: 300}}\n"
                            f"processes:\n  - {{pid: {pid}, device: {GPU}}}\n")
        summaries = []
        for names in (("--runtime-socket", socket, "--log-root", ""),
                      ("--runtime-socket", "", "--log-root", str(logs))):
            daemon = start_daemon("--simulate", str(scenario), "--housekeeping-interval", "0.3",
                                  "--pod-resources-socket", "", *names)
            daemon.wait_ready()
            summary = daemon.wait_for(lambda s: any(
                c["name"] == CONTAINER for p in s["pods"] for c in p["containers"]))
            pod = next(p for p in summary["pods"] if p["podRef"]["uid"] == uid)
            # The GPU container by its name (the pod's sandbox, which the runtime's
            # ListContainers does not list, is not compared).
            gpu_users = [c["name"] for c in pod["containers"] if c.get("accelerators")]
            summaries.append((pod["podRef"], gpu_users))
            daemon.stop()
        assert summaries[0] == summaries[1] == (
            {"name": POD, "namespace": NAMESPACE, "uid": uid}, [CONTAINER])
    finally:
        api = cri.api
        try:
            cri.call("StopPodSandbox", api.StopPodSandboxRequest(pod_sandbox_id=sandbox),
                     api.StopPodSandboxResponse)
            cri.call("RemovePodSandbox", api.RemovePodSandboxRequest(pod_sandbox_id=sandbox),
                     api.RemovePodSandboxResponse)
        finally:
            cri.channel.close()
            for hierarchy in Path("/sys/fs/cgroup").iterdir():
                parent = hierarchy / cgroup_parent.lstrip("/")
                for path in (parent, parent.parent):
                    try:
                        path.rmdir()
                    except OSError:
                        pass
