"""A real Prometheus server scrapes the daemon; an instant query finds container joules."""

import json
import shutil
import subprocess
import urllib.parse
import urllib.request

import pytest

from tests.support.daemon import free_port
from tests.support.fakehost import build, container_id, write_scenario
from tests.support.gpus import GPU_A as GPU
from tests.support.waiting import poll


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed")
def test_prometheus_scrapes_container_joules(start_daemon, tmp_path):
    cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
    scenario = tmp_path / "s.yaml"
    write_scenario(scenario, {"devices": [{"uuid": GPU, "minor": 0, "power_watts": 300}],
                              "processes": [{"pid": 101, "device": GPU}]})
    daemon = start_daemon("--simulate", str(scenario), "--housekeeping-interval", "0.5",
                          "--cgroup-root", str(cgroup), "--proc-root", str(proc),
                          "--pod-resources-socket", "", "--runtime-socket", "",
                          "--idle-power-watts", "100")
    daemon.wait_ready()
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: gpustats\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{daemon.port}']}}]\n")
    with open(tmp_path / "prometheus.log", "w") as log:
        server = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        query = urllib.parse.quote('gpustats_container_gpu_joules_total')
        def queried() -> list:
            try:
                with urllib.request.urlopen(
                        f"http://127.0.0.1:{port}/api/v1/query?query={query}", timeout=5) as r:
                    return json.loads(r.read())["data"]["result"]
            except OSError:
                return []

        result = poll(queried, timeout=45, interval=1)
        assert result, (tmp_path / "prometheus.log").read_text()[-3000:]
        series = result[0]
        assert series["metric"]["container_id"] == container_id(1)
        assert series["metric"]["gpu_uuid"] == GPU
        assert float(series["value"][1]) > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=5) as r:
            targets = json.loads(r.read())["data"]["activeTargets"]
        assert targets[0]["health"] == "up", targets
    finally:
        server.terminate()
        server.wait(10)
