"""Table tests over real-world cgroup paths: both drivers, three runtimes, three QoS, v1/v2."""

import pytest

from gpustats.sources.cgroup_paths import parse_cgroup_path

UID = "2fc932ce-fdcc-454b-97bd-aadfdeb4c340"
UID_ = UID.replace("-", "_")
CID = "9be25294a1b0c7d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7"
assert len(CID) == 64

CASES = [
    # cgroupfs driver, containerd / docker-shim (bare id)
    (f"/kubepods/burstable/pod{UID}/{CID}", CID, None, UID, "burstable"),
    (f"/kubepods/besteffort/pod{UID}/{CID}", CID, None, UID, "besteffort"),
    (f"/kubepods/pod{UID}/{CID}", CID, None, UID, "guaranteed"),
    # cgroupfs driver, CRI-O
    (f"/kubepods/burstable/pod{UID}/crio-{CID}", CID, "crio", UID, "burstable"),
    # systemd driver, containerd
    (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
     f"cri-containerd-{CID}.scope", CID, "containerd", UID, "burstable"),
    (f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/"
     f"cri-containerd-{CID}.scope", CID, "containerd", UID, "besteffort"),
    (f"/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope",
     CID, "containerd", UID, "guaranteed"),
    # systemd driver, CRI-O (and crun's child cgroup inside the scope)
    (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
     f"crio-{CID}.scope", CID, "crio", UID, "burstable"),
    (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
     f"crio-{CID}.scope/container", CID, "crio", UID, "burstable"),
    # systemd driver, Docker (cri-dockerd)
    (f"/kubepods.slice/kubepods-pod{UID_}.slice/docker-{CID}.scope", CID, "docker", UID,
     "guaranteed"),
    # Docker outside Kubernetes
    (f"/docker/{CID}", CID, "docker", None, None),
    (f"/system.slice/docker-{CID}.scope", CID, "docker", None, None),
    # A kind/k3d node's kubelet tree inside its Docker container: the node container's.
    (f"/docker/{'e' * 64}/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope",
     "e" * 64, "docker", None, None),
    # Podman (systemd manager: machine.slice; cgroupfs: libpod_parent; split mode's payload)
    (f"/machine.slice/libpod-{CID}.scope", CID, "podman", None, None),
    (f"/machine.slice/libpod-{CID}.scope/container", CID, "podman", None, None),
    (f"/libpod_parent/libpod-{CID}", CID, "podman", None, None),
    # containerd outside Kubernetes: nerdctl's systemd scope, cgroupfs <namespace>/<id>
    (f"/system.slice/nerdctl-{CID}.scope", CID, "containerd", None, None),
    (f"/default/{CID}", CID, "containerd", None, None),
    # Outside the reader's cgroup namespace (a DaemonSet's pod as its root): the kubelet's
    # tree below the common ancestor.
    (f"/../../kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
     f"cri-containerd-{CID}.scope", CID, "containerd", UID, "burstable"),
    (f"/../../../burstable/pod{UID}/{CID}", CID, None, UID, "burstable"),
    (f"/../cri-containerd-{CID}.scope", CID, "containerd", None, None),
]


@pytest.mark.parametrize("path, cid, runtime, uid, qos", CASES)
def test_container_paths(path, cid, runtime, uid, qos):
    info = parse_cgroup_path(path)
    assert info is not None
    assert ((info.container_id, info.runtime, info.pod_uid, info.qos_class)
            == (cid, runtime, uid, qos))
    assert path.startswith(info.container_path)


@pytest.mark.parametrize("path, uid, qos", [
    (f"/kubepods/burstable/pod{UID}", UID, "burstable"),
    (f"/kubepods/pod{UID}", UID, "guaranteed"),
    (f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice", UID,
     "besteffort"),
    (f"/kubepods.slice/kubepods-pod{UID_}.slice", UID, "guaranteed"),
])
def test_pod_cgroups(path, uid, qos):
    info = parse_cgroup_path(path)
    assert info.container_id is None and info.pod_uid == uid and info.qos_class == qos
    assert info.pod_path == path


@pytest.mark.parametrize("path", [
    "/",
    "/system.slice/sshd.service",
    "/kubepods",
    "/kubepods/burstable",
    "/kubepods.slice/kubepods-burstable.slice",
    f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
    f"crio-conmon-{CID}.scope",                                 # CRI-O's monitor
    f"/system.slice/run-containerd-io.containerd.runtime.v2.task-k8s.io-{CID}-rootfs.mount",
    f"/kubepods/burstable/pod{UID}/{CID[:63]}",                   # not 64 hex: garbage
    f"/kubepods/burstable/pod{UID}/{CID.upper()}",
    "/user.slice/user-1000.slice/session-2.scope",
])
def test_not_containers(path):
    info = parse_cgroup_path(path)
    assert info is None or info.container_id is None


def test_pod_uid_not_taken_outside_kubepods():
    # "pod" + uuid-looking text in an unrelated group is not a pod
    assert parse_cgroup_path(f"/system.slice/pod{UID}") is None


def test_a_podman_split_mode_payload_cgroup_is_its_container():
    cid = "ab" * 32
    info = parse_cgroup_path(f"/machine.slice/libpod-{cid}.scope/libpod-payload-{cid}")
    assert (info.container_id, info.runtime) == (cid, "podman")


@pytest.mark.parametrize("path", [
    # Where a tenant makes cgroups (a user's delegated user@.service, a service's subtree):
    # the names of a runtime's or the kubelet's cgroups are not theirs.
    f"/user.slice/user-1002.slice/user@1002.service/app.slice/docker-{CID}.scope",
    f"/user.slice/user-1002.slice/user@1002.service/user.slice/libpod-{CID}.scope",
    f"/user.slice/user-1002.slice/user@1002.service/app.slice/kubepods-pod{UID_}.slice/"
    f"cri-containerd-{CID}.scope",
    f"/user.slice/user-1002.slice/user@1002.service/kubepods/pod{UID}/{CID}",
    f"/system.slice/build.service/docker-{CID}.scope",
    f"/system.slice/containerd.service/default/{CID}",
    f"/user.slice/libpod-{CID}.scope/libpod-payload-{CID}",
    # kubepods below another group, a runtime's name in the wrong slice or shape.
    f"/actions_job/abc/kubepods/burstable/pod{UID}/{CID}",
    f"/machine.slice/docker-{CID}.scope",
    f"/system.slice/docker-{CID}",
    f"/system.slice/a.slice/docker-{CID}.scope",
    f"/lxc.payload.web/{CID}",
    f"/{CID}",
])
def test_runtime_names_elsewhere_are_no_node_containers(path):
    assert parse_cgroup_path(path) is None


def test_a_configured_kubelet_parent_holds_pods_too():
    from gpustats.sources.cgroup_paths import may_hold_node_cgroups

    nested = f"/process_api/abc/kubepods/burstable/pod{UID}/{CID}"
    assert parse_cgroup_path(nested) is None
    info = parse_cgroup_path(nested, "/process_api/abc")
    assert (info.container_id, info.pod_uid, info.qos_class, info.container_path) == (
        CID, UID, "burstable", nested)
    # The top stays the kubelet's too; elsewhere below the parent nothing is a pod.
    assert parse_cgroup_path(f"/kubepods/pod{UID}/{CID}", "/process_api/abc").pod_uid == UID
    assert parse_cgroup_path(f"/process_api/abc/x/kubepods/pod{UID}/{CID}",
                             "/process_api/abc") is None
    # The walk goes down to the parent and into its kubepods, nowhere else below it.
    for path, walked in (("/process_api", True), ("/process_api/abc", True),
                         ("/process_api/abc/kubepods", True), ("/process_api/abc/x", False),
                         ("/process_api/other", False), ("/user.slice", False),
                         ("/system.slice", True), ("/system.slice/sshd.service", False)):
        assert may_hold_node_cgroups(path, "/process_api/abc") is walked, path
