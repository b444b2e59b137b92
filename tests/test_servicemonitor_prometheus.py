"""The shipped ServiceMonitor, rendered as the Prometheus Operator renders it, in a real
Prometheus scraping the daemon: per-pod series keep their pods, node series carry no gpustats
pod label. A second job with the Operator's defaults shows what the relabelings prevent.

The Operator turns an endpoint into a scrape job whose target labels (after its own
relabelings from Kubernetes service discovery) are ``namespace``, ``service``, ``pod``,
``container``, ``endpoint`` and ``job``, then appends the ServiceMonitor's ``relabelings``.
Without an API server the test gives those target labels statically and appends the
manifest's relabelings, converted key by key. It scrapes gpustats directly (plain HTTP):
kube-rbac-proxy passes the body through unchanged.
"""

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from tests.support.daemon import free_port
from tests.support.fakehost import build, container_id, pod_uid, write_scenario
from tests.support.gpus import GPU_A as GPU
from tests.support.kubelet_logs import layout
from tests.support.paths import REPO_ROOT
from tests.support.servicemonitor import operator_job


def query(port: int, expr: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(expr)}"
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())["data"]["result"]


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed")
def test_servicemonitor_keeps_pod_labels_and_strips_the_target_pod(start_daemon, tmp_path):
    monitor = yaml.safe_load((REPO_ROOT / "manifests" / "servicemonitor.yaml").read_text())
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["honorLabels"] is True and endpoint["scheme"] == "https"

    cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
    logs = tmp_path / "host" / "log"
    layout(logs, {("ml", "trainer-0", pod_uid(1)): {"cuda": container_id(1)}})
    scenario = tmp_path / "s.yaml"
    write_scenario(scenario, {"devices": [{"uuid": GPU, "minor": 0, "power_watts": 300}],
                              "processes": [{"pid": 101, "device": GPU}]})
    daemon = start_daemon("--simulate", str(scenario), "--housekeeping-interval", "0.5",
                          "--cgroup-root", str(cgroup), "--proc-root", str(proc),
                          "--pod-resources-socket", "", "--log-root", str(logs),
                          "--idle-power-watts", "100")
    daemon.wait_ready()
    target = f"127.0.0.1:{daemon.port}"
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            operator_job(endpoint, target, "serviceMonitor/gpustats/gpustats/0"),
            # The Operator's defaults, for contrast: honorLabels false, no relabelings.
            operator_job({"path": "/metrics"}, target, "defaults")]}))
    log = open(tmp_path / "prometheus.log", "w")
    server = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT,
        cwd=tmp_path)
    try:
        deadline = time.monotonic() + 45
        per_pod = []
        while time.monotonic() < deadline and len(per_pod) < 2:
            time.sleep(1)
            try:
                per_pod = query(port, "gpustats_container_gpu_joules_total")
            except OSError:
                continue
        assert len(per_pod) == 2, (tmp_path / "prometheus.log").read_text()[-3000:]
        # Both jobs end with job="gpustats" (a target label); the defaults job is the one
        # whose series had their own pod label pushed aside.
        shipped = [s["metric"] for s in per_pod if "exported_pod" not in s["metric"]]
        defaults = [s["metric"] for s in per_pod if "exported_pod" in s["metric"]]
        assert len(shipped) == 1 and len(defaults) == 1, per_pod
        assert (shipped[0]["pod"], shipped[0]["namespace"], shipped[0]["container"]) == (
            "trainer-0", "ml", "cuda")
        assert "service" not in shipped[0] and "endpoint" not in shipped[0]
        # What the relabelings prevent: the workload's pod pushed aside for gpustats' own.
        assert defaults[0]["pod"] == "gpustats-x7k2p" and defaults[0]["exported_pod"] == "trainer-0"

        node = query(port, "gpustats_node_gpu_watts")
        shipped_node = [s["metric"] for s in node if s["metric"].get("pod") is None]
        assert len(node) == 2 and len(shipped_node) == 1, node
        labels = shipped_node[0]
        assert not {"pod", "namespace", "container", "service", "endpoint"} & set(labels)
        assert labels["gpu_uuid"] == GPU and labels["node_name"] and labels["job"] == "gpustats"
        up = query(port, "up")
        assert [float(s["value"][1]) for s in up] == [1.0, 1.0], up
    finally:
        server.terminate()
        server.wait(10)
        log.close()
