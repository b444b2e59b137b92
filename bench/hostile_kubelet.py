"""A hostile kubelet: a pod-resources socket whose ``List`` answer is switched between a normal
reply and a huge one, and a run of it against a fresh daemon.

    python -m bench.hostile_kubelet          # prints RSS start, peak and end (MB) as JSON

The huge reply is 2,000 pods each holding 50 ``GPU-…::N`` devices of ``nvidia.com/gpu``, with
200-character names: about 5.8 MB on the wire, under the daemon's 8 MiB receive cap. Replies
are written here as protobuf wire bytes (no generated module needed) and served as they are.
The run answers normally, then hostile for one fetch, then normally again; the daemon fetches
every 15 s (its pod-resources cache), so a run takes about 35 s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
import urllib.request
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import psutil

LIST_METHOD = "List"
SERVICE = "v1.PodResourcesLister"
HOSTILE_PODS = 2000
HOSTILE_DEVICES_PER_POD = 50
HOSTILE_NAME_LENGTH = 200


@dataclass(frozen=True)
class Container:
    name: str
    devices: tuple[tuple[str, tuple[str, ...]], ...] = ()    # (resource name, device IDs)


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    containers: tuple[Container, ...] = field(default_factory=tuple)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): a string or an embedded message."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _text(number: int, text: str) -> bytes:
    return _field(number, text.encode())


def _container(container: Container) -> bytes:
    devices = b"".join(
        _field(2, _text(1, resource) + b"".join(_text(2, i) for i in ids))
        for resource, ids in container.devices)
    return _text(1, container.name) + devices


def list_reply(pods: Iterable[Pod]) -> bytes:
    """A ``ListPodResourcesResponse`` as wire bytes (pod_resources = 1; name = 1,
    namespace = 2, containers = 3; container name = 1, devices = 2; resource_name = 1,
    device_ids = 2)."""
    return b"".join(
        _field(1, _text(1, pod.name) + _text(2, pod.namespace)
               + b"".join(_field(3, _container(c)) for c in pod.containers))
        for pod in pods)


def _long_name(prefix: str, n: int, length: int) -> str:
    head = f"{prefix}-{n}-"
    return head + "x" * max(0, length - len(head))


def hostile_pods(pods: int = HOSTILE_PODS, devices_per_pod: int = HOSTILE_DEVICES_PER_POD,
                 name_length: int = HOSTILE_NAME_LENGTH) -> Iterable[Pod]:
    """Pods each with one container holding ``devices_per_pod`` distinct time-slicing
    replicas, every name distinct and ``name_length`` characters long."""
    for p in range(pods):
        ids = tuple(f"GPU-{p:08x}-0000-4000-8000-{d:012x}::{d}" for d in range(devices_per_pod))
        yield Pod(_long_name("pod", p, name_length), _long_name("ns", p, name_length),
                  (Container(_long_name("c", p, name_length), (("nvidia.com/gpu", ids),)),))


def hostile_reply(pods: int = HOSTILE_PODS, devices_per_pod: int = HOSTILE_DEVICES_PER_POD,
                  name_length: int = HOSTILE_NAME_LENGTH) -> bytes:
    return list_reply(hostile_pods(pods, devices_per_pod, name_length))


def normal_reply(gpu_uuids: Iterable[str], namespace: str = "ml") -> bytes:
    """Pod ``train-<n>`` (container ``main``) holding GPU ``n`` of ``gpu_uuids``, and a NIC."""
    return list_reply(
        Pod(f"train-{n}", namespace, (Container("main", (
            ("nvidia.com/gpu", (uuid,)), ("example.com/nic", (f"nic{n}",)))),))
        for n, uuid in enumerate(gpu_uuids))


class HostileKubelet:
    """A pod-resources gRPC server on ``socket_path`` answering ``List`` with ``reply``, bytes
    sent as they are; ``reply`` may be replaced while it serves. ``calls`` counts answers."""

    def __init__(self, socket_path: Path | str, reply: bytes):
        self.socket_path = str(socket_path)
        self.reply = reply
        self.calls = 0
        self._answered = threading.Condition()
        self._server = None

    def _list(self, request: bytes, context) -> bytes:
        reply = self.reply
        with self._answered:
            self.calls += 1
            self._answered.notify_all()
        return reply

    def start(self) -> HostileKubelet:
        import grpc

        handler = grpc.method_handlers_generic_handler(SERVICE, {
            LIST_METHOD: grpc.unary_unary_rpc_method_handler(
                self._list, request_deserializer=None, response_serializer=None)})
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2),
                                   options=[("grpc.max_send_message_length", -1)])
        self._server.add_generic_rpc_handlers((handler,))
        self._server.add_insecure_port(f"unix://{self.socket_path}")
        self._server.start()
        return self

    def wait_for_calls(self, count: int, timeout: float) -> bool:
        """Whether ``count`` answers have been given within ``timeout`` seconds."""
        with self._answered:
            return self._answered.wait_for(lambda: self.calls >= count, timeout)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0)
            self._server = None

    def __enter__(self) -> HostileKubelet:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def rss_mb(pid: int) -> float:
    return round(psutil.Process(pid).memory_info().rss / 2**20, 1)


class RssPeak:
    """The most RSS (MB) of ``pid`` seen while it runs, sampled every ``every`` seconds in a
    thread (a reply's bytes may be held for a few milliseconds only)."""

    def __init__(self, pid: int, every: float = 0.02):
        self._pid = pid
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self.peak = rss_mb(pid)

    def _sample(self) -> None:
        while not self._stop.wait(self._every):
            self.peak = max(self.peak, rss_mb(self._pid))

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb(self._pid))


def source_failing(metrics: str, source: str = "pod_resources") -> float | None:
    """``gpustats_source_failing`` of ``source`` in a /metrics body; ``None`` when absent."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == "gpustats_source_failing" and \
                    sample.labels.get("source") == source:
                return sample.value
    return None


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def run_attack(workdir: Path, hostile_seconds: float = 3.0, fetch_timeout: float = 25.0) -> dict:
    """A fresh simulated daemon on ``workdir``: RSS after a normal reply (start), the most
    while the hostile reply is answered and for ``hostile_seconds`` after (peak), and after a
    normal reply again (end)."""
    from bench.daemons import DaemonProc
    from bench.scenarios import fake_host, gpu_uuid, node_scenario, write_scenario

    scenario = write_scenario(workdir / "node.yaml", node_scenario(1, 1))
    cgroup, proc = fake_host(workdir / "host", 1, [100000])
    normal, hostile = normal_reply([gpu_uuid(0)]), hostile_reply()
    with HostileKubelet(workdir / "kubelet.sock", normal) as kubelet:
        daemon = DaemonProc(["--simulate", scenario, "--cgroup-root", cgroup,
                             "--proc-root", proc, "--housekeeping-interval", "0.2",
                             "--pod-resources-socket", kubelet.socket_path,
                             "--runtime-socket", "", "--idle-power-watts", "100"], workdir)
        pid = daemon.proc.pid
        try:
            if not kubelet.wait_for_calls(1, fetch_timeout):
                raise RuntimeError("the daemon never asked the kubelet")
            time.sleep(2.0)
            start = rss_mb(pid)
            kubelet.reply = hostile
            with RssPeak(pid) as peak:
                if not kubelet.wait_for_calls(2, fetch_timeout):
                    raise RuntimeError("the daemon did not ask the kubelet again")
                time.sleep(hostile_seconds)
                failing = source_failing(_metrics(daemon.port)) == 1
            kubelet.reply = normal
            if not kubelet.wait_for_calls(3, fetch_timeout):
                raise RuntimeError("the daemon did not ask the kubelet again")
            time.sleep(2.0)
            end = rss_mb(pid)
        finally:
            daemon.stop()
    return {"hostile_reply_bytes": len(hostile), "rss_mb_start": start,
            "rss_mb_peak": peak.peak, "rss_mb_end": end, "growth_mb": round(peak.peak - start, 1),
            "end_minus_start_mb": round(end - start, 1),
            "source_failing_while_hostile": failing}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hostile-seconds", type=float, default=3.0,
                        help="how long to keep sampling after the hostile reply is answered")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="gpustats-hostile-kubelet-"))
    try:
        result = run_attack(workdir, args.hostile_seconds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
