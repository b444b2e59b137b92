"""Hostile peers, files and sockets against the real daemon on loopback.

Each test reproduces one attack or broken-node condition that used to take the daemon (or a
part of it) down, and checks that it now holds: probes and data answer, the tick goes on, the
failure is visible in /api/v1/status and /metrics, and it is logged once.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.support.daemon import timed_get
from tests.support.dcgm_exporter import Exporter
from tests.support.fakehost import build, container_id, write_scenario
from tests.support.gpus import GPU_A as GPU, device
from tests.support.hostile import ARGS, start
from tests.support.waiting import poll


def source(daemon, name: str) -> dict | None:
    status, body = daemon.get("/api/v1/status")
    assert status == 200, body
    return {s["name"]: s for s in body["sources"]}.get(name)


def wait_source(daemon, name: str, state: str, timeout: float = 15.0) -> dict:
    last: list[dict | None] = [None]

    def reached() -> dict | None:
        last[0] = source(daemon, name)
        return last[0] if last[0] is not None and last[0]["state"] == state else None

    found = poll(reached, timeout=timeout, interval=0.1)
    if found is None:
        raise AssertionError(f"{name} not {state} in {timeout}s: {last[0]}\n{daemon.log()}")
    return found


def rss_mb(daemon) -> float:
    return psutil.Process(daemon.proc.pid).memory_info().rss / 2**20


def all_containers(summary: dict) -> dict[str, dict]:
    """Containers by ID: in named pods (by name, which is the ID here) and outside them."""
    out = {c["name"]: c for p in summary["pods"] for c in p["containers"]}
    out.update({c["id"]: c for c in summary.get("containers", [])})
    return out


# ------------------------------------------------------------------ serving


def test_idle_and_trickling_sockets_leave_probes_and_data_answering(start_daemon, tmp_path):
    daemon, _, _ = start(start_daemon, tmp_path)
    idle = [socket.create_connection(("127.0.0.1", daemon.port)) for _ in range(200)]
    trickling = [socket.create_connection(("127.0.0.1", daemon.port)) for _ in range(100)]
    stop = threading.Event()

    def trickle():
        header = b"GET /stats/summary HTTP/1.1\r\nX-Slow: " + b"a" * 1000
        for i in range(len(header)):
            for s in trickling:
                try:
                    s.send(header[i:i + 1])
                except OSError:
                    pass
            if stop.wait(1.0):
                return

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        slowest = 0.0
        for _ in range(8):                       # ~8 s: past the idle timeout
            for path in ("/healthz", "/stats/summary", "/readyz"):
                status, seconds = timed_get(daemon.port, path, timeout=1.0)
                assert status == 200
                slowest = max(slowest, seconds)
            time.sleep(1.0)        # measures: ~8 s of requests, past the idle timeout
        assert slowest < 1.0
        # Idle connections were closed by the server (EOF), not left holding slots.
        closed = 0
        for s in idle:
            s.settimeout(0.05)
            try:
                closed += s.recv(1) == b""
            except (TimeoutError, ConnectionResetError):
                pass
        assert closed == len(idle)
    finally:
        stop.set()
        thread.join(5)
        for s in idle + trickling:
            s.close()
    assert daemon.proc.poll() is None


def test_separate_health_listener(start_daemon, tmp_path):
    daemon, _, _ = start(start_daemon, tmp_path, None, None, "--health-listen", "127.0.0.1:0")
    health = daemon.health_port
    assert timed_get(health, "/healthz")[0] == 200
    assert timed_get(health, "/readyz")[0] == 200
    assert timed_get(health, "/stats/summary")[0] == 404      # probes only there


def _deleted_files(pid: int) -> list[str]:
    out = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.endswith("(deleted)"):
            out.append(target)
    return out


def test_large_posts_are_refused_without_spooling(start_daemon, tmp_path):
    daemon, _, _ = start(start_daemon, tmp_path)
    # A declared 300 MB body: refused from its Content-Length, before any of it is read.
    sock = socket.create_connection(("127.0.0.1", daemon.port), timeout=5)
    sock.sendall(b"POST /stats/summary HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 300000000\r\n\r\n")
    try:
        sock.sendall(b"\0" * (4 << 20))            # 4 MiB of it, as fast as it goes
    except OSError:
        pass                                       # the server may close on us: fine
    reply = sock.recv(4096)
    sock.close()
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    # A chunked body with no length: refused once it passes the cap.
    sock = socket.create_connection(("127.0.0.1", daemon.port), timeout=5)
    sock.sendall(b"POST /stats/summary HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    try:
        for _ in range(64):
            sock.sendall(b"4000\r\n" + b"a" * 0x4000 + b"\r\n")
    except OSError:
        pass
    reply = sock.recv(4096)
    sock.close()
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert _deleted_files(daemon.proc.pid) == []
    # A small POST still works (the Summary API accepts POST).
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=5)
    conn.request("POST", "/stats/summary", body=b"{}",
                 headers={"Content-Type": "application/json"})
    assert conn.getresponse().status == 200
    conn.close()


def test_huge_headers_are_refused(start_daemon, tmp_path):
    daemon, _, _ = start(start_daemon, tmp_path)
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=5)
    conn.request("GET", "/healthz", headers={f"X-Pad-{i}": "a" * 1000 for i in range(40)})
    assert conn.getresponse().status == 431
    conn.close()


@pytest.mark.parametrize("path", ["/stats/summary//", "//stats/summary", "/stats//summary",
                                  "/metrics/", "/api/v1/gpus/", "/healthz/"])
def test_no_redirect_is_built_from_the_host_header(start_daemon, tmp_path, path):
    daemon, _, _ = start(start_daemon, tmp_path)
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=5)
    conn.request("GET", path, headers={"Host": "evil.example"})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    assert not 300 <= resp.status < 400
    assert b"evil" not in body and "evil" not in str(resp.getheaders())


# ------------------------------------------------------------------ sources


def mig_scenario():
    return {"devices": [device(mig_instances=[
        {"gpu_instance_id": 7, "profile": "3g.40gb", "uuid": "MIG-aaaa-7"}])],
        "processes": [{"pid": 101, "device": GPU, "gpu_instance_id": 7}]}


def test_dripping_dcgm_exporter_costs_one_deadline_and_a_line(start_daemon, tmp_path):
    exporter = Exporter()
    exporter.body = (b"# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge\n" * 50)
    exporter.drip_seconds = 0.3
    try:
        daemon, _, _ = start(start_daemon, tmp_path, mig_scenario(), None,
                             "--dcgm-exporter-url", exporter.url)
        state = wait_source(daemon, "dcgm_exporter", "failing")
        assert state["lastErrorReason"] == "timeout"
        daemon.wait_ticks(5, timeout=10)             # the tick goes on (0.2 s interval)
        assert daemon.get("/healthz")[0] == 200
        status = daemon.get("/api/v1/status")[1]
        errors = {(e["source"], e["reason"]): e["count"] for e in status["collectionErrors"]}
        assert errors[("dcgm_exporter", "timeout")] >= 1
        metrics = daemon.get("/metrics")[1]
        assert 'gpustats_source_failing{node_name' in metrics
        assert 'reason="timeout",source="dcgm_exporter"' in metrics
        assert daemon.log().count("dcgm_exporter failing") == 1
        # Recovery: logged once, state ok, a last-success time.
        exporter.drip_seconds = 0.0
        exporter.body = (f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{UUID="{GPU}",GPU_I_ID="7"}} 0.5\n'
                         .encode())
        state = wait_source(daemon, "dcgm_exporter", "ok", timeout=20)
        assert "lastSuccessTime" in state and state["lastErrorReason"] == "timeout"
        assert daemon.log().count("dcgm_exporter recovered") == 1
    finally:
        exporter.close()


def test_fifo_cgroup_file_costs_nothing_and_is_visible(start_daemon, tmp_path):
    cgroup, proc = build(tmp_path / "host", {101: (1, 1), 102: (2, 2)})
    victim = next(cgroup.rglob(f"cri-containerd-{container_id(2)}.scope"))
    (victim / "memory.current").unlink()
    os.mkfifo(victim / "memory.current")             # nobody ever writes to it
    path = tmp_path / "s.yaml"
    write_scenario(path, {"devices": [device()], "processes": [
        {"pid": 101, "device": GPU}, {"pid": 102, "device": GPU}]})
    daemon = start_daemon("--simulate", str(path), "--cgroup-root", str(cgroup),
                          "--proc-root", str(proc), *ARGS)
    daemon.wait_ready()
    state = wait_source(daemon, "cgroups", "failing")
    assert state["lastErrorReason"] == "not_regular_file"
    assert "memory.current" in state["lastError"]
    daemon.wait_ticks(4, timeout=10)
    names = all_containers(daemon.get("/stats/summary")[1])
    assert "memory" not in names[container_id(2)] and "cpu" in names[container_id(2)]
    assert "memory" in names[container_id(1)]
    assert daemon.log().count("cgroups failing") == 1
    assert daemon.log().count("not a regular file; left out") == 1


def test_fifo_in_proc_tree_does_not_block(start_daemon, tmp_path):
    cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
    (proc / "101" / "cgroup").unlink()
    os.mkfifo(proc / "101" / "cgroup")
    path = tmp_path / "s.yaml"
    write_scenario(path, {"devices": [device()], "processes": [{"pid": 101, "device": GPU}]})
    daemon = start_daemon("--simulate", str(path), "--cgroup-root", str(cgroup),
                          "--proc-root", str(proc), *ARGS)
    daemon.wait_ready()
    daemon.wait_ticks(3, timeout=10)
    assert wait_source(daemon, "cgroups", "failing")["lastErrorReason"] == "not_regular_file"


def test_huge_sparse_cgroup_file_keeps_memory_flat(start_daemon, tmp_path):
    cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
    victim = next(cgroup.rglob(f"cri-containerd-{container_id(1)}.scope"))
    with open(victim / "memory.stat", "wb") as f:
        f.truncate(1 << 30)                          # 1 GiB of zeros, no disk used
    path = tmp_path / "s.yaml"
    write_scenario(path, {"devices": [device()], "processes": [{"pid": 101, "device": GPU}]})
    daemon = start_daemon("--simulate", str(path), "--cgroup-root", str(cgroup),
                          "--proc-root", str(proc), *ARGS)
    daemon.wait_ready()
    state = wait_source(daemon, "cgroups", "failing")
    assert state["lastErrorReason"] == "too_large"
    daemon.wait_ticks(5, timeout=10)
    assert rss_mb(daemon) < 100
    assert daemon.get("/api/v1/status")[1]["tickDurationSeconds"] < 1.0


def _big_pod_resources_server(path: Path, allocations: int):
    """A pod-resources server whose List answers ``allocations`` GPU allocations (~180 B each)."""
    from concurrent import futures

    import grpc

    from gpustats.sources.podresources import podresources_api_pb2 as api

    pods = []
    for i in range(allocations // 10):
        pods.append(api.PodResources(
            name=f"pod-{i:06d}-" + "x" * 40, namespace="ns-" + "y" * 30, containers=[
                api.ContainerResources(name=f"c{j}-" + "z" * 110, devices=[
                    api.ContainerDevices(resource_name="nvidia.com/gpu",
                                         device_ids=[f"GPU-{i:08x}-{j:04x}-4000-8000-"
                                                     f"{i * 10 + j:012x}"])])
                for j in range(10)]))
    payload = api.ListPodResourcesResponse(pod_resources=pods).SerializeToString()
    handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
        "List": grpc.unary_unary_rpc_method_handler(       # sent pre-serialized: no delay
            lambda request, context: payload, request_deserializer=None,
            response_serializer=None)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2),
                         options=[("grpc.max_send_message_length", 256 << 20)])
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{path}")
    server.start()
    return server, len(payload)


def test_huge_pod_resources_reply_is_refused_and_memory_stays_flat(start_daemon, tmp_path):
    pytest.importorskip("grpc")
    sock = tmp_path / "kubelet.sock"
    server, size = _big_pod_resources_server(sock, 300_000)
    try:
        assert size > 50_000_000
        cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
        path = tmp_path / "s.yaml"
        write_scenario(path, {"devices": [device()], "processes": [{"pid": 101, "device": GPU}]})
        daemon = start_daemon("--simulate", str(path), "--cgroup-root", str(cgroup),
                              "--proc-root", str(proc), "--housekeeping-interval", "0.2",
                              "--runtime-socket", "", "--pod-resources-socket", str(sock))
        daemon.wait_ready()
        state = wait_source(daemon, "pod_resources", "failing")
        assert state["lastErrorReason"] == "resource_exhausted"
        assert rss_mb(daemon) < 100
        daemon.wait_ticks(3, timeout=10)
        assert daemon.log().count("pod_resources failing") == 1
    finally:
        server.stop(0)


# ------------------------------------------------------------------ the tick, signals, rediscovery


def test_watchdog_turns_healthz_503_while_the_tick_is_stuck(start_daemon, tmp_path):
    daemon, path, _ = start(start_daemon, tmp_path, None, None,
                            "--tick-watchdog-intervals", "5")
    assert daemon.get("/healthz")[0] == 200
    # Every NVML call now takes 0.5 s: a sweep takes seconds, far past 5 x 0.2 s.
    write_scenario(path, {"devices": [device()], "processes": [{"pid": 101, "device": GPU}],
                          "call_delay_seconds": 0.5})
    status, body = poll(lambda: (got := daemon.get("/healthz"))[0] != 200 and got,
                        timeout=20, interval=0.1) or daemon.get("/healthz")
    assert status == 503 and body["error"] == "tick_stalled", body
    assert "no snapshot published for" in body["message"]
    write_scenario(path, {"devices": [device()], "processes": [{"pid": 101, "device": GPU}]})
    status, body = poll(lambda: (got := daemon.get("/healthz"))[0] == 200 and got,
                        timeout=30, interval=0.2) or daemon.get("/healthz")
    assert status == 200, body


def test_sighup_persists_and_reloads_the_config(start_daemon, tmp_path):
    config = tmp_path / "gpustats.yaml"
    config.write_text("log_level: info\nidle_power_watts: 100\n")
    daemon, _, _ = start(start_daemon, tmp_path, None, None, "--config", str(config),
                         "--persist-interval", "3600")
    state_file = tmp_path / "state" / "counters.json"

    def written() -> int | None:
        try:
            return state_file.stat().st_mtime_ns
        except FileNotFoundError:
            return None

    before = written()                              # compaction is not due for an hour
    node = daemon.get("/stats/summary")[1]["node"]["accelerators"][0]
    assert node["idlePowerWatts"] == 100.0
    config.write_text("log_level: info\nidle_power_watts: 250\nsaturation_window: 30\n")
    daemon.proc.send_signal(signal.SIGHUP)
    daemon.wait_for(lambda s: s["node"]["accelerators"][0].get("idlePowerWatts") == 250.0,
                    timeout=20)
    assert written() is not None and written() != before       # persisted by the SIGHUP
    log = daemon.log()
    assert "SIGHUP: counters persisted" in log and "idle_power_watts applied" in log
    assert "needing a restart: saturation_window" in log
    # A broken file is refused; the daemon keeps running with what it has.
    config.write_text("idle_power_watts: [not, a, number\n")
    daemon.proc.send_signal(signal.SIGHUP)
    poll(lambda: "config NOT reloaded" in daemon.log(), timeout=10, interval=0.1)
    assert "config NOT reloaded" in daemon.log()
    assert daemon.proc.poll() is None and daemon.get("/healthz")[0] == 200
    assert daemon.stop() == 0


def test_cgroup_hierarchy_mounted_after_start_is_picked_up(start_daemon, tmp_path):
    empty = tmp_path / "late-cgroup"
    empty.mkdir()
    cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
    path = tmp_path / "s.yaml"
    write_scenario(path, {"devices": [device()], "processes": [{"pid": 101, "device": GPU}]})
    daemon = start_daemon("--simulate", str(path), "--cgroup-root", str(empty),
                          "--proc-root", str(proc), *ARGS)
    daemon.wait_ready()
    assert wait_source(daemon, "cgroups", "failing")["lastErrorReason"] == "no_hierarchy"
    # The hierarchy appears (as a mount would): the same tree, now under the configured root.
    for entry in cgroup.iterdir():
        entry.rename(empty / entry.name)
    before = all_containers(daemon.get("/stats/summary")[1]).get(container_id(1), {})
    assert "memory" not in before              # known from /proc at most, no cgroup files
    daemon.wait_for(lambda s: "memory" in all_containers(s).get(container_id(1), {}),
                    timeout=10)
    wait_source(daemon, "cgroups", "ok")
    assert "cgroup hierarchies: v2=" in daemon.log()


def test_lost_gpu_that_answers_again_is_ready_again(start_daemon, tmp_path):
    daemon, path, _ = start(start_daemon, tmp_path)

    def ready(body):
        (gpu,) = body["gpus"]
        return gpu["health"]["conditions"][0]

    first = ready(daemon.get("/api/v1/gpus")[1])
    assert first["status"] == "True"
    write_scenario(path, {"devices": [device(lost=True)]})
    lost = ready(daemon.wait_for(lambda b: ready(b)["status"] == "False", path="/api/v1/gpus"))
    assert lost["reason"] == "GpuLost"
    daemon.wait_ticks(5)                             # several ticks while lost
    write_scenario(path, {"devices": [device()]})
    back = ready(daemon.wait_for(lambda b: ready(b)["status"] == "True", path="/api/v1/gpus"))
    assert back["lastTransitionTime"] > lost["lastTransitionTime"] >= first["lastTransitionTime"]
    log = daemon.log()
    assert log.count("lost (GPU_IS_LOST)") == 1 and log.count("answers again") == 1
    # A second loss is a second transition, logged again.
    write_scenario(path, {"devices": [device(lost=True)]})
    daemon.wait_for(lambda b: ready(b)["status"] == "False", path="/api/v1/gpus")
    assert daemon.log().count("lost (GPU_IS_LOST)") == 2
