"""Tenants from cgroup paths: systemd services, user sessions, Slurm steps (v1, v2, 26.05
SLUIDs); containers never claimed; untrusted paths never crash the parser. And the tenant
model's keys and display names."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustats.model.tenants import (
    TENANT_KINDS, container_tenant, display_name, job_tenant, pod_tenant, process_tenant,
    service_tenant, session_tenant, tenant_from_key, with_uid,
)
from gpustats.sources.cgroup_paths import parse_cgroup_path
from gpustats.sources.tenant_paths import MAX_PATH_CHARS, any_layout_tenant, parse_tenant_path

CID = "3f1c0a9be25294a1b0c7d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4"
POD_UID_ = "2fc932ce_fdcc_454b_97bd_aadfdeb4c340"
SLUID = "sEKNKTV3WPV500"

SERVICES = [
    ("/system.slice/sshd.service", "sshd.service", "/system.slice/sshd.service"),
    ("/system.slice/nvidia-persistenced.service", "nvidia-persistenced.service",
     "/system.slice/nvidia-persistenced.service"),
    # A template instance in its generated slice; systemd's \x2d escape kept as is.
    ("/system.slice/system-getty.slice/getty@tty1.service", "getty@tty1.service",
     "/system.slice/system-getty.slice/getty@tty1.service"),
    ("/system.slice/system-ml\\x2dtrain.slice/ml\\x2dtrain@0.service", "ml\\x2dtrain@0.service",
     "/system.slice/system-ml\\x2dtrain.slice/ml\\x2dtrain@0.service"),
    # Nested slices (a-b.slice lives under a.slice).
    ("/system.slice/a.slice/a-b.slice/x.service", "x.service",
     "/system.slice/a.slice/a-b.slice/x.service"),
    # A transient scope (systemd-run --scope) and a service's own delegated sub-cgroups.
    ("/system.slice/run-r0b1c2d3e4f5.scope", "run-r0b1c2d3e4f5.scope",
     "/system.slice/run-r0b1c2d3e4f5.scope"),
    ("/system.slice/containerd.service/sandbox", "containerd.service",
     "/system.slice/containerd.service"),
    # Other slices: a custom Slice=, the root slice (systemd itself).
    ("/batch.slice/batch-gpu.slice/render.service", "render.service",
     "/batch.slice/batch-gpu.slice/render.service"),
    ("/init.scope", "init.scope", "/init.scope"),
    # A unit in user.slice that is no user's slice is still a service.
    ("/user.slice/shared-tools.service", "shared-tools.service",
     "/user.slice/shared-tools.service"),
    # slurmstepd's own infrastructure cgroup, no job in it: the scope is the service.
    ("/system.slice/slurmstepd.scope/system", "slurmstepd.scope",
     "/system.slice/slurmstepd.scope"),
    ("/system.slice/slurmd.service", "slurmd.service", "/system.slice/slurmd.service"),
    # A service's own subtree is the service's, whatever a cgroup in it is named.
    (f"/system.slice/container-web.service/libpod-payload-{CID}", "container-web.service",
     "/system.slice/container-web.service"),
    (f"/system.slice/containerd.service/default/{CID}", "containerd.service",
     "/system.slice/containerd.service"),
    (f"/system.slice/build.service/docker-{CID}.scope", "build.service",
     "/system.slice/build.service"),
    # A cgroup outside the reader's cgroup namespace, as the kernel shows it.
    ("/../../system.slice/sshd.service", "sshd.service", "/system.slice/sshd.service"),
]


@pytest.mark.parametrize("path, unit, own", SERVICES)
def test_services(path, unit, own):
    tenant = parse_tenant_path(path)
    assert tenant is not None
    assert (tenant.kind, tenant.unit, tenant.key, tenant.cgroup_path) == (
        "service", unit, f"service:{unit}", own)
    assert tenant.uid is None and tenant.job_id is None


SESSIONS = [
    ("/user.slice/user-1000.slice/session-3.scope", 1000,
     "/user.slice/user-1000.slice/session-3.scope"),
    ("/user.slice/user-120.slice/session-c1.scope", 120,            # gdm's greeter session
     "/user.slice/user-120.slice/session-c1.scope"),
    ("/user.slice/user-1000.slice/user@1000.service/init.scope", 1000,
     "/user.slice/user-1000.slice/user@1000.service"),
    # The user manager's own services are the user's, not services.
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/"
     "app-jupyter-lab.slice/jupyter.service", 1000,
     "/user.slice/user-1000.slice/user@1000.service"),
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/x.service", 1000,
     "/user.slice/user-1000.slice/user@1000.service"),
    ("/user.slice/user-0.slice/session-1.scope", 0, "/user.slice/user-0.slice/session-1.scope"),
    # Something else in a user's slice is still that user's.
    ("/user.slice/user-1001.slice/run-u5.scope", 1001, "/user.slice/user-1001.slice"),
]


@pytest.mark.parametrize("path, uid, own", SESSIONS)
def test_sessions(path, uid, own):
    tenant = parse_tenant_path(path)
    assert tenant is not None
    assert (tenant.kind, tenant.uid, tenant.key, tenant.cgroup_path) == (
        "session", uid, f"session:{uid}", own)
    assert tenant.unit is None


JOBS = [
    # cgroup v1: each controller's hierarchy, CgroupPrepend /slurm or /slurm_%n.
    ("/slurm/uid_1000/job_4242/step_0/task_0", "4242", "0", 1000,
     "/slurm/uid_1000/job_4242/step_0"),
    ("/slurm/uid_1000/job_4242/step_batch/task_0", "4242", "batch", 1000,
     "/slurm/uid_1000/job_4242/step_batch"),
    ("/slurm_gpu-node07/uid_2001/job_17/step_extern", "17", "extern", 2001,
     "/slurm_gpu-node07/uid_2001/job_17/step_extern"),
    ("/slurm/uid_1000/job_4242", "4242", None, 1000, "/slurm/uid_1000/job_4242"),
    # cgroup v2: <slice>/slurmstepd.scope/job_<id>/step_<step>/user/task_<n>.
    ("/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0", "4242", "0", None,
     "/system.slice/slurmstepd.scope/job_4242/step_0"),
    ("/system.slice/slurmstepd.scope/job_4242/step_batch/user/task_special", "4242", "batch",
     None, "/system.slice/slurmstepd.scope/job_4242/step_batch"),
    ("/system.slice/slurmstepd.scope/job_4242/step_interactive/user/task_0", "4242",
     "interactive", None, "/system.slice/slurmstepd.scope/job_4242/step_interactive"),
    ("/system.slice/slurmstepd.scope/job_4242/step_TBD/slurm", "4242", "TBD", None,
     "/system.slice/slurmstepd.scope/job_4242/step_TBD"),
    # A heterogeneous job's component, and slurmstepd itself in the step's slurm/ cgroup.
    ("/system.slice/slurmstepd.scope/job_4242/step_3+1/user/task_2", "4242", "3+1", None,
     "/system.slice/slurmstepd.scope/job_4242/step_3+1"),
    ("/system.slice/slurmstepd.scope/job_4242/step_extern/slurm", "4242", "extern", None,
     "/system.slice/slurmstepd.scope/job_4242/step_extern"),
    # Several slurmd on one host: <node>_slurmstepd.scope.
    ("/system.slice/node07_slurmstepd.scope/job_9/step_0/user/task_0", "9", "0", None,
     "/system.slice/node07_slurmstepd.scope/job_9/step_0"),
    # Slurm 26.05: the job directory is the SLUID.
    (f"/system.slice/slurmstepd.scope/{SLUID}/step_0/user/task_0", SLUID, "0", None,
     f"/system.slice/slurmstepd.scope/{SLUID}/step_0"),
    (f"/system.slice/slurmstepd.scope/{SLUID}", SLUID, None, None,
     f"/system.slice/slurmstepd.scope/{SLUID}"),
]


@pytest.mark.parametrize("path, job_id, step, uid, own", JOBS)
def test_slurm_steps(path, job_id, step, uid, own):
    tenant = parse_tenant_path(path)
    assert tenant is not None
    assert (tenant.kind, tenant.job_id, tenant.step, tenant.uid, tenant.cgroup_path) == (
        "job", job_id, step, uid, own)
    assert tenant.key == (f"job:{job_id}:{step}" if step else f"job:{job_id}")


@pytest.mark.parametrize("path", [
    # Node containers: cgroup_paths' (the caller tries it first), never claimed here.
    f"/system.slice/docker-{CID}.scope",
    f"/docker/{CID}",
    f"/machine.slice/libpod-{CID}.scope",
    f"/machine.slice/libpod-{CID}.scope/container",
    f"/libpod_parent/libpod-{CID}",
    f"/kubepods.slice/kubepods-pod{POD_UID_}.slice",
    f"/kubepods.slice/kubepods-pod{POD_UID_}.slice/cri-containerd-{CID}.scope",
    # The root cgroup, bare slices, unknown layouts.
    "/", "", "/system.slice", "/user.slice", "/user.slice/user-1000.slice/../x.service",
    "/system.slice/home.mount", "/system.slice/sshd.socket", "/my-batch-group/worker1",
    "/lxc.monitor.web", "/lxc",
    "/slurm", "/slurm/uid_1000", "/slurm/uid_x/job_1/step_0", "/slurmX/uid_1/job_1/step_0",
    # A user manager in another user's slice; a UID beyond uid_t.
    "/user.slice/user-1000.slice/user@1001.service/init.scope",
    "/user.slice/user-99999999999.slice/session-1.scope",
    # Not systemd's unit-name characters.
    "/system.slice/bad name.service", "/system.slice/ünïcode.service",
    "/system.slice/tab\there.service",
])
def test_not_a_service_session_or_job(path):
    assert parse_tenant_path(path) is None


USER_CONTAINERS = [
    # Rootless Docker and Podman in the user manager's subtree (user@.service(5)).
    (f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope", 1000,
     f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope"),
    (f"/user.slice/user-1000.slice/user@1000.service/app.slice/docker-{CID}.scope/x", 1000,
     f"/user.slice/user-1000.slice/user@1000.service/app.slice/docker-{CID}.scope"),
    # A kubelet's names made in a delegated subtree: the user's container, not a pod's.
    (f"/user.slice/user-1002.slice/user@1002.service/app.slice/kubepods-pod{POD_UID_}.slice/"
     f"cri-containerd-{CID}.scope", 1002,
     f"/user.slice/user-1002.slice/user@1002.service/app.slice/kubepods-pod{POD_UID_}.slice/"
     f"cri-containerd-{CID}.scope"),
]


@pytest.mark.parametrize("path, uid, own", USER_CONTAINERS)
def test_containers_in_a_users_subtree_are_the_users(path, uid, own):
    assert parse_cgroup_path(path) is None
    tenant = parse_tenant_path(path)
    assert (tenant.kind, tenant.key, tenant.uid, tenant.name, tenant.cgroup_path) == (
        "container", f"container:{uid}:{CID}", uid, CID, own)
    assert tenant.container_id is None and display_name(tenant) == f"{CID} ({uid})"
    assert display_name(tenant, "carol") == f"{CID} (carol)"
    assert tenant.key not in (CID, container_tenant(CID).key, pod_tenant(CID, None).key)


@pytest.mark.parametrize("path, kind, key, name, own", [
    ("/lxc.payload.web/init.scope", "container", "lxc:web", "web", "/lxc.payload.web"),
    ("/lxc.payload.db", "container", "lxc:db", "db", "/lxc.payload.db"),
    ("/lxc/old", "container", "lxc:old", "old", "/lxc/old"),
    ("/machine.slice/machine-qemu\\x2d1\\x2dvm1.scope/libvirt/vcpu0", "machine",
     "machine:qemu\\x2d1\\x2dvm1", "qemu\\x2d1\\x2dvm1",
     "/machine.slice/machine-qemu\\x2d1\\x2dvm1.scope"),
    ("/machine.slice/systemd-nspawn@box.service/payload", "machine",
     "machine:systemd-nspawn@box.service", "systemd-nspawn@box.service",
     "/machine.slice/systemd-nspawn@box.service"),
    (f"/machine.slice/libpod-conmon-{CID}.scope", "machine",
     f"machine:libpod-conmon-{CID}.scope", f"libpod-conmon-{CID}.scope",
     f"/machine.slice/libpod-conmon-{CID}.scope"),
])
def test_lxc_containers_and_machines(path, kind, key, name, own):
    tenant = parse_tenant_path(path)
    assert (tenant.kind, tenant.key, tenant.name, tenant.cgroup_path) == (kind, key, name, own)
    assert display_name(tenant) == name
    assert tenant_from_key(key).key == key


@pytest.mark.parametrize("path, own", [
    ("/my-batch-group/worker1", "/my-batch-group/worker1"),
    ("/../../lxc.monitor.web", "/lxc.monitor.web"),
    (f"/actions_job/abc/kubepods/burstable/pod2fc932ce-fdcc-454b-97bd-aadfdeb4c340/{CID}",
     f"/actions_job/abc/kubepods/burstable/pod2fc932ce-fdcc-454b-97bd-aadfdeb4c340/{CID}"),
])
def test_any_other_cgroup_is_a_tenant_of_its_own(path, own):
    assert parse_tenant_path(path) is None
    tenant = any_layout_tenant(path)
    assert (tenant.kind, tenant.key, tenant.cgroup_path) == ("cgroup", f"cgroup:{own}", own)
    assert any_layout_tenant("/") is None and any_layout_tenant("/a/../b") is None


def test_no_docker_or_podman_container_under_system_slice_is_a_service():
    for path in (f"/system.slice/docker-{CID}.scope", f"/machine.slice/libpod-{CID}.scope"):
        assert parse_cgroup_path(path).container_id == CID
        assert parse_tenant_path(path) is None


def test_unknown_job_or_step_directories_fall_back():
    # No job directory under the scope: the scope itself (a service).
    tenant = parse_tenant_path("/system.slice/slurmstepd.scope/job_x/step_0")
    assert (tenant.kind, tenant.unit) == ("service", "slurmstepd.scope")
    # A SLUID is s + 13 Crockford base32 digits: no I, L, O or U, exactly 13.
    for bad in ("sEKNKTV3WPV50", "sEKNKTV3WPV5000", "sEKNKTV3WPVI00", "SEKNKTV3WPV500"):
        assert parse_tenant_path(f"/system.slice/slurmstepd.scope/{bad}/step_0").kind \
            == "service"
    # A step name Slurm does not make: the job, without a step.
    tenant = parse_tenant_path("/system.slice/slurmstepd.scope/job_5/step_foo/user/task_0")
    assert (tenant.kind, tenant.job_id, tenant.step, tenant.key) == ("job", "5", None, "job:5")


def test_long_paths_and_components_are_not_claimed():
    long_unit = "a" * 248 + ".service"                     # 256 characters: over NAME_MAX
    assert parse_tenant_path(f"/system.slice/{long_unit}") is None
    fits = "a" * 247 + ".service"                          # 255: a unit name systemd allows
    assert parse_tenant_path(f"/system.slice/{fits}").unit == fits
    deep = "/system.slice/" + "a.slice/" * ((MAX_PATH_CHARS // 8) + 1) + "x.service"
    assert len(deep) > MAX_PATH_CHARS
    assert parse_tenant_path(deep) is None
    shallow = "/system.slice/" + "a.slice/" * 100 + "x.service"
    assert parse_tenant_path(shallow).unit == "x.service"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_no_string_crashes_it(text):
    tenant = parse_tenant_path(text)
    assert tenant is None or tenant.kind in ("service", "session", "job", "container", "machine")


_PIECES = st.sampled_from([
    "system.slice", "user.slice", "user-1000.slice", "user@1000.service", "session-2.scope",
    "slurmstepd.scope", "job_1", "step_0", "step_batch", "user", "task_0", "slurm", "uid_5",
    SLUID, "x.service", "a-b.slice", "..", ".", f"docker-{CID}.scope", "\x00", "\udcff",
    "init.scope", "machine.slice", "\\x2d", "a" * 300])


@settings(max_examples=500, deadline=None)
@given(st.lists(_PIECES, max_size=12), st.booleans())
def test_paths_built_of_real_pieces_give_consistent_tenants(pieces, leading_slash):
    path = ("/" if leading_slash else "") + "/".join(pieces)
    tenant = parse_tenant_path(path)
    if tenant is None:
        return
    assert tenant.kind in ("service", "session", "job", "container", "machine")
    own = tenant.cgroup_path
    assert own is not None and own.startswith("/") and ".." not in own.split("/")
    # The tenant's cgroup is the path's head (less any leading ".."), whole components.
    components = [p for p in path.split("/") if p]
    while components and components[0] == "..":
        components.pop(0)
    assert ("/" + "/".join(components) + "/").startswith(own + "/")
    assert tenant.key.startswith(tenant.kind + ":")
    assert tenant_from_key(tenant.key).key == tenant.key


# ------------------------------------------------------------------ the model


def test_keys_tell_kinds_apart_and_containers_keep_their_id():
    keys = [pod_tenant(CID, "2fc932ce-fdcc-454b-97bd-aadfdeb4c340").key,
            service_tenant("sshd.service").key, session_tenant(1000).key,
            job_tenant("42", "0").key, job_tenant("42", None).key,
            process_tenant(1000, "python3").key, process_tenant(None, None).key]
    assert keys == [CID, "service:sshd.service", "session:1000", "job:42:0", "job:42",
                    "process:1000:python3", "process::"]
    assert container_tenant(CID).key == CID
    assert container_tenant(CID).kind == "container" and pod_tenant(CID, None).kind == "pod"
    assert TENANT_KINDS == ("pod", "container", "service", "session", "job", "process",
                            "machine", "cgroup")


def test_display_names():
    assert display_name(container_tenant(CID), container_name="web") == "web"
    assert display_name(container_tenant(CID)) == CID
    assert display_name(pod_tenant(CID, None), container_name="trainer") == "trainer"
    assert display_name(service_tenant("sshd.service")) == "sshd.service"
    assert display_name(session_tenant(1000), user_name="alice") == "alice"
    assert display_name(session_tenant(1000)) == "1000"
    assert display_name(job_tenant("4242", "batch", 1000), user_name="alice") == "job 4242"
    assert display_name(process_tenant(0, "python3")) == "python3"
    assert display_name(process_tenant(0, None)) is None


def test_with_uid_fills_a_v2_steps_user_only():
    step = parse_tenant_path("/system.slice/slurmstepd.scope/job_7/step_0/user/task_0")
    filled = with_uid(step, 1000)
    assert (filled.uid, filled.key) == (1000, step.key)
    v1 = parse_tenant_path("/slurm/uid_2000/job_7/step_0/task_0")
    assert with_uid(v1, 1000).uid == 2000                   # the path's owner stays
    assert with_uid(service_tenant("x.service"), 1000).uid is None
