"""Tenant- and host-chosen names against the real daemon: a pod name long enough that the
kubelet cuts its log link still bills its container, and odd bytes or characters in a name
render in every output (JSON, Prometheus text and OpenMetrics, dcgm-compat, the page)."""

from __future__ import annotations

import json
import os
import re
import urllib.request
from concurrent import futures
from pathlib import Path

import pytest

from tests.support.fakehost import build, container_id, containers_by_id, metric_value, pod_uid, \
    write_scenario
from tests.support.gpus import GPU_A as GPU

ARGS = ("--housekeeping-interval", "0.2", "--runtime-socket", "")
OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def scenario_file(tmp_path: Path, pids: list[int]) -> Path:
    path = tmp_path / "s.yaml"
    write_scenario(path, {"devices": [{"uuid": GPU, "name": "NVIDIA H100 80GB HBM3",
                                       "minor": 0, "power_watts": 540}],
                          "processes": [{"pid": pid, "device": GPU} for pid in pids]})
    return path


def raw_get(daemon, path: str, accept: str | None = None) -> tuple[int, str]:
    """(status, body): the body must be valid UTF-8 whatever the names in it."""
    request = urllib.request.Request(daemon.base + path,
                                     headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, resp.read().decode("utf-8")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode("utf-8", "replace")


def kubelet_link(pod: str, namespace: str, container: str, cid: str) -> str:
    """The kubelet's ``/var/log/containers`` link name: ``<pod>_<ns>_<container>-<id>`` cut
    to 251 characters, then ``.log`` (kuberuntime ``logSymlink``, the ext4 name limit)."""
    return f"{pod}_{namespace}_{container}-{cid}"[:251] + ".log"


def kubelet_layout(root: Path, namespace: str, pod: str, uid: str, container: str,
                   cid: str) -> str:
    pod_dir = root / "pods" / f"{namespace}_{pod}_{uid}" / container
    pod_dir.mkdir(parents=True)
    (pod_dir / "0.log").write_text("never read\n")
    (root / "containers").mkdir(exist_ok=True)
    link = kubelet_link(pod, namespace, container, cid)
    os.symlink(f"/var/log/pods/{namespace}_{pod}_{uid}/{container}/0.log",
               root / "containers" / link)
    return link


def pod_resources_server(path: Path, pods: list[tuple[str, str, str]]):
    """A pod-resources server whose List gives ``GPU`` to each (namespace, pod, container)."""
    import grpc

    from gpustats.sources.podresources import podresources_api_pb2 as api

    payload = api.ListPodResourcesResponse(pod_resources=[
        api.PodResources(name=pod, namespace=namespace, containers=[
            api.ContainerResources(name=container, devices=[api.ContainerDevices(
                resource_name="nvidia.com/gpu", device_ids=[GPU])])])
        for namespace, pod, container in pods]).SerializeToString()
    handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
        "List": grpc.unary_unary_rpc_method_handler(
            lambda request, context: payload, request_deserializer=None,
            response_serializer=None)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{path}")
    server.start()
    return server


# ------------------------------------------------------------------ cut log links


LONG_POD = "trainer-" + "x" * 190 + "-0"        # 200 characters: a valid DNS subdomain


@pytest.mark.parametrize("with_pod_resources", [False, True])
def test_a_pod_name_long_enough_to_cut_its_log_link_still_bills_its_container(
        start_daemon, tmp_path, with_pod_resources):
    cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
    logs = tmp_path / "host" / "log"
    link = kubelet_layout(logs, "ml", LONG_POD, pod_uid(1), "main", container_id(1))
    assert len(link) == 255 and container_id(1) not in link     # the kubelet cut the ID
    server = None
    socket_args = ("--pod-resources-socket", "")
    if with_pod_resources:
        pytest.importorskip("grpc")
        sock = tmp_path / "kubelet.sock"
        server = pod_resources_server(sock, [("ml", LONG_POD, "main")])
        socket_args = ("--pod-resources-socket", str(sock))
    try:
        daemon = start_daemon("--simulate", str(scenario_file(tmp_path, [101])),
                              "--cgroup-root", str(cgroup), "--proc-root", str(proc),
                              "--log-root", str(logs), *ARGS, *socket_args)
        daemon.wait_ready()
        summary = daemon.wait_for(lambda s: any(
            a.get("attributedPowerWatts") for p in s["pods"] for c in p["containers"]
            for a in c.get("accelerators", ())), timeout=10)
        (pod,) = summary["pods"]
        assert pod["podRef"] == {"name": LONG_POD, "namespace": "ml", "uid": pod_uid(1)}
        (container,) = pod["containers"]
        assert container["name"] == "main"
        assert container["accelerators"][0]["attributedPowerWatts"] > 0
        text = raw_get(daemon, "/metrics")[1]
        assert metric_value(text, "gpustats_container_gpu_watts", pod=LONG_POD,
                            container="main", container_id=container_id(1)) > 0
        assert metric_value(text, "gpustats_pod_gpu_watts", pod_uid=pod_uid(1)) > 0
    finally:
        if server is not None:
            server.stop(0)


def test_a_gpu_container_the_log_layout_calls_a_sandbox_is_still_billed(start_daemon,
                                                                        tmp_path):
    """The pod's log directory is there and the container has no link (the kubelet failed to
    make it): the log layout takes it for the pod's sandbox, but it holds the GPU."""
    cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
    logs = tmp_path / "host" / "log"
    (logs / "pods" / f"ml_trainer-0_{pod_uid(1)}" / "main").mkdir(parents=True)
    (logs / "containers").mkdir()
    daemon = start_daemon("--simulate", str(scenario_file(tmp_path, [101])),
                          "--cgroup-root", str(cgroup), "--proc-root", str(proc),
                          "--log-root", str(logs), "--pod-resources-socket", "", *ARGS)
    daemon.wait_ready()
    summary = daemon.wait_for(lambda s: s["pods"] and s["pods"][0]["containers"], timeout=10)
    (pod,) = summary["pods"]
    assert pod["podRef"] == {"name": "trainer-0", "namespace": "ml", "uid": pod_uid(1)}
    (container,) = pod["containers"]
    assert container["name"] == container_id(1)            # no name: shown by its ID
    daemon.wait_for(lambda s: s["pods"][0]["containers"][0]["accelerators"][0]
                    .get("attributedPowerWatts"), timeout=10)


# ------------------------------------------------------------------ odd names in every output


def odd_cgroup_host(tmp_path: Path) -> tuple[Path, Path, str]:
    """A pod container (pid 101) and a Docker container (pid 102) below a directory of the
    kubelet's tree whose name is not UTF-8 (``\\xff\\xfe``), both on the GPU."""
    cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
    cid = container_id(2)
    rel = os.fsencode("kubepods.slice/") + b"\xff\xfe" + f"/docker-{cid}.scope".encode()
    d = os.path.join(os.fsencode(cgroup), rel)
    os.makedirs(d)
    for name, text in ((b"cpu.stat", "usage_usec 5000\n"), (b"memory.current", "1048576\n"),
                       (b"memory.stat", "anon 1048576\ninactive_file 0\n")):
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    (proc / "102").mkdir()
    (proc / "102" / "cgroup").write_bytes(b"0::/" + rel + b"\n")
    return cgroup, proc, cid


def test_a_non_utf8_cgroup_directory_renders_in_every_output(start_daemon, tmp_path):
    cgroup, proc, cid = odd_cgroup_host(tmp_path)
    daemon = start_daemon("--simulate", str(scenario_file(tmp_path, [101, 102])),
                          "--cgroup-root", str(cgroup), "--proc-root", str(proc),
                          "--log-root", "", "--pod-resources-socket", "", "--dcgm-compat",
                          *ARGS)
    daemon.wait_ready()
    daemon.wait_for(lambda s: cid in containers_by_id(s)
                    and containers_by_id(s)[cid].get("accelerators"), timeout=10)
    shown = "/kubepods.slice/\\xff\\xfe/docker-" + cid + ".scope"
    for accept in (None, OPENMETRICS):                # cAdvisor's ``id`` label is the path
        status, text = raw_get(daemon, "/metrics", accept)
        assert status == 200, text
        assert f'id="{shown.replace(chr(92), chr(92) * 2)}"' in text
        assert "DCGM_FI_DEV_POWER_USAGE{" in text
    status, body = raw_get(daemon, "/stats/summary")
    assert status == 200 and "\\ud" not in body                # no lone surrogate escapes
    assert containers_by_id(json.loads(body))[cid]["cgroup"] == shown
    status, page = raw_get(daemon, "/")
    assert status == 200 and cid[:12] in page
    assert raw_get(daemon, "/api/v1/history")[0] == 200
    assert daemon.proc.poll() is None


def test_huge_and_bidi_names_are_capped_and_neutralised(start_daemon, tmp_path):
    """pod-resources names a tenant's container 200,000 characters long and its pod with a
    right-to-left override: every output carries them capped and escaped, one way."""
    pytest.importorskip("grpc")
    cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
    huge, bidi = "c" * 200_000, "evil\u202egnp.exe"
    sock = tmp_path / "kubelet.sock"
    server = pod_resources_server(sock, [("ml", bidi, huge)])
    try:
        daemon = start_daemon("--simulate", str(scenario_file(tmp_path, [101])),
                              "--cgroup-root", str(cgroup), "--proc-root", str(proc),
                              "--log-root", "", "--pod-resources-socket", str(sock),
                              "--dcgm-compat", *ARGS)
        daemon.wait_ready()
        summary = daemon.wait_for(lambda s: s["pods"] and s["pods"][0]["podRef"].get("name"),
                                  timeout=10)
        for accept in (None, OPENMETRICS):
            status, text = raw_get(daemon, "/metrics", accept)
            assert status == 200
            assert len(text) < 100_000                 # 1.4 MB with the whole name in labels
            assert "\u202e" not in text
            labels = re.findall(r'container="([^"]*)"', text)
            assert labels and all(len(value) <= 1024 and value == labels[0] for value in labels)
            assert 'pod="evil\\\\u202egnp.exe"' in text
        (pod,) = summary["pods"]
        assert pod["podRef"]["name"] == "evil\\u202egnp.exe"
        (container,) = pod["containers"]
        name = container["name"]
        assert len(name) <= 1024 and name.startswith("c" * 1000) and name == labels[0]
        status, page = raw_get(daemon, "/")
        assert status == 200 and len(page) < 100_000
        assert "\u202e" not in page and "<bdi>evil\\u202egnp.exe</bdi>" in page
        history = raw_get(daemon, "/api/v1/history")[1]
        assert "\u202e" not in history and "\\u202e" not in history.replace("\\\\u202e", "")
    finally:
        server.stop(0)


def _tenant_host(root: Path, comm: str, uid: int, cgroup_rel: str = "") -> tuple[Path, Path]:
    """(cgroup, proc) of a host with one GPU process (pid 301) named ``comm`` in
    ``cgroup_rel`` (the root cgroup by default) on cgroup v2."""
    from gpustats import fakehost

    cgroup, proc = root / "cgroup", root / "proc"
    fakehost.start_cgroup_tree(cgroup)
    fakehost.copy_node_files(proc)
    if cgroup_rel:
        fakehost.add_container(cgroup, cgroup_rel)
    fakehost.add_process_files(proc, 301, fakehost.v2_cgroup_lines(cgroup_rel), comm, uid)
    return cgroup, proc


def test_control_bytes_in_a_process_name_never_reach_the_page_raw(start_daemon, tmp_path):
    """Issue: a process named with ESC, BEL and CR reached the page raw in a ``data-pod``
    attribute (markup was escaped, control bytes were not); every place it is shown escapes
    them (``\\x1b``)."""
    comm = "x\x1b[2J\x07\ry"
    cgroup, proc = _tenant_host(tmp_path / "host", comm, 1002)
    daemon = start_daemon("--simulate", str(scenario_file(tmp_path, [301])),
                          "--cgroup-root", str(cgroup), "--proc-root", str(proc),
                          "--log-root", "", "--pod-resources-socket", "", *ARGS)
    daemon.wait_ready()
    daemon.wait_for(lambda s: any(t.get("accelerators") for t in s.get("tenants", ())),
                    timeout=10)
    status, page = raw_get(daemon, "/")
    assert status == 200 and "x\\x1b[2J\\x07\\x0dy" in page
    for raw in ("\x1b", "\x07", "\r"):
        assert raw not in page, (raw, [line for line in page.split("\n") if raw in line][:2])
    for path in ("/stats/summary", "/metrics", "/api/v1/history"):
        status, body = raw_get(daemon, path)
        assert status == 200 and not {"\x1b", "\x07"} & set(body), path


def test_a_gecos_field_with_line_separators_keeps_the_users_name(start_daemon, tmp_path):
    """Issue: a GECOS field holding U+2028 or U+0085 (``chfn``) cut the passwd line in two
    (``str.splitlines``) and the user's name was lost; lines end at ``\\n`` only."""
    from gpustats import fakehost

    cgroup, proc = _tenant_host(tmp_path / "host", "python3", 1002,
                                fakehost.session_cgroup(1002, "4"))
    host = tmp_path / "hostroot"
    (host / "etc").mkdir(parents=True)
    (host / "etc" / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/bash\n"
        "carol:x:1002:1002:Carol\u2028Ops\u0085Team,,,:/home/carol:/bin/bash\n",
        encoding="utf-8")
    daemon = start_daemon("--simulate", str(scenario_file(tmp_path, [301])),
                          "--cgroup-root", str(cgroup), "--proc-root", str(proc),
                          "--host-root", str(host), "--log-root", "",
                          "--pod-resources-socket", "", *ARGS)
    daemon.wait_ready()
    summary = daemon.wait_for(
        lambda s: any(t.get("accelerators") for t in s.get("tenants", ())), timeout=10)
    (tenant,) = summary["tenants"]
    assert (tenant["kind"], tenant["uid"], tenant.get("user"), tenant["name"]) == \
        ("session", 1002, "carol", "carol")


def test_a_line_separator_in_a_cgroup_name_forges_no_cgroup_line(start_daemon, tmp_path):
    """A user's cgroup named ``a\\u20280::`` with ``system.slice/docker-<victim>.scope`` below
    it: split at U+2028, ``/proc/<pid>/cgroup`` would read as a second ``0::`` line naming the
    victim's container. The path is one line, the user's."""
    from gpustats import fakehost

    victim = container_id(0xF1C7)
    forged = (f"user.slice/user-1002.slice/user@1002.service/a\u20280::/system.slice/"
              f"docker-{victim}.scope")
    cgroup, proc = _tenant_host(tmp_path / "host", "miner", 1002, forged)
    fakehost.add_container(cgroup, f"system.slice/docker-{victim}.scope")
    daemon = start_daemon("--simulate", str(scenario_file(tmp_path, [301])),
                          "--cgroup-root", str(cgroup), "--proc-root", str(proc),
                          "--log-root", "", "--pod-resources-socket", "", *ARGS)
    daemon.wait_ready()
    summary = daemon.wait_for(
        lambda s: any(t.get("accelerators") for t in s.get("tenants", ())), timeout=10)
    assert not any(c.get("accelerators") for c in summary.get("containers", ()))
    (tenant,) = summary["tenants"]
    assert tenant["kind"] == "container" and tenant["uid"] == 1002
