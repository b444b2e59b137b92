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
import re
import shutil
import subprocess
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
from tests.support.waiting import poll


def query(port: int, expr: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(expr)}"
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())["data"]["result"]


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed")

def _trainer_node(start_daemon, tmp_path):
    """The daemon on one simulated GPU with pod ml/trainer-0's process, named through the
    kubelet's log layout; ready."""
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
    return daemon

def test_servicemonitor_keeps_pod_labels_and_strips_the_target_pod(start_daemon, tmp_path):
    monitor = yaml.safe_load((REPO_ROOT / "manifests" / "servicemonitor.yaml").read_text())
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["honorLabels"] is True and endpoint["scheme"] == "https"

    daemon = _trainer_node(start_daemon, tmp_path)
    target = f"127.0.0.1:{daemon.port}"
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            operator_job(endpoint, target, "serviceMonitor/gpustats/gpustats/0"),
            # The Operator's defaults, for contrast: honorLabels false, no relabelings.
            operator_job({"path": "/metrics"}, target, "defaults")]}))
    with open(tmp_path / "prometheus.log", "w") as log:
        server = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT,
            cwd=tmp_path)
    try:
        def both() -> list:
            try:
                found = query(port, "gpustats_container_gpu_joules_total")
            except OSError:
                return []
            return found if len(found) >= 2 else []

        per_pod = poll(both, timeout=45, interval=1) or []
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


def _component_endpoint(endpoint: dict) -> dict:
    """The endpoint as components/dcgm-exporter-scrape-labels patches it (its JSON patch)."""
    component = yaml.safe_load((REPO_ROOT / "manifests" / "components" /
                                "dcgm-exporter-scrape-labels" / "kustomization.yaml").read_text())
    patched = dict(endpoint)
    for op in yaml.safe_load(component["patches"][0]["patch"]):
        key = op["path"].rsplit("/", 1)[1]
        if op["op"] == "remove":
            patched.pop(key)
        else:
            patched[key] = op["value"]
    return patched


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed")
@pytest.mark.parametrize("option", ["shipped", "dcgm-exporter-scrape-labels"])
def test_rules_and_dashboard_find_the_workload_pod_under_both_label_options(
        start_daemon, tmp_path, option):
    """Every recording rule and every per-pod dashboard query returns the workload's pod (never
    the gpustats pod) whichever label option the ServiceMonitor is deployed with."""
    monitor = yaml.safe_load((REPO_ROOT / "manifests" / "servicemonitor.yaml").read_text())
    endpoint = monitor["spec"]["endpoints"][0]
    if option != "shipped":
        endpoint = _component_endpoint(endpoint)
        assert endpoint["honorLabels"] is False
    daemon = _trainer_node(start_daemon, tmp_path)
    port = free_port()
    rules = tmp_path / "gpustats.rules.yml"
    shutil.copy(REPO_ROOT / "prometheus" / "gpustats.rules.yml", rules)
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [operator_job(endpoint, f"127.0.0.1:{daemon.port}",
                                        "serviceMonitor/gpustats/gpustats/0")]}))
    with open(tmp_path / "prometheus.log", "w") as log:
        server = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT,
            cwd=tmp_path)

    def wait(expr):
        def answered() -> list:
            try:
                return query(port, expr)
            except OSError:
                return []

        result = poll(answered, timeout=45, interval=1)
        if result:
            return result
        raise AssertionError(f"{option}: nothing for {expr}\n"
                             + (tmp_path / "prometheus.log").read_text()[-3000:])

    try:
        groups = yaml.safe_load(rules.read_text())["groups"]
        # The bill of tenants outside Kubernetes (jobs, users, services) has nothing on a node
        # of pods: promtool's tests and the bare-metal demo's Prometheus test cover it.
        records = [r["record"] for g in groups for r in g["rules"] if "record" in r
                   and r["record"].split(":", 1)[0] not in ("job", "user", "service")]
        for record in records:
            for series in wait(record):
                labels = series["metric"]
                assert not any(k.startswith("exported_") for k in labels), (option, labels)
                if "namespace" in labels or "pod" in labels:
                    assert labels.get("namespace") == "ml", (option, labels)
                    assert labels.get("pod", "trainer-0") == "trainer-0", (option, labels)
        dashboard = json.loads((REPO_ROOT / "manifests" / "grafana-dashboard.json").read_text())

        def panels(items):
            for panel in items:
                yield panel
                yield from panels(panel.get("panels", ()))
        exprs = [t["expr"].replace("$node", ".*") for p in panels(dashboard["panels"])
                 for t in p.get("targets", ())
                 if re.search(r"\b(pod|namespace|container)\b", t["expr"])
                 or "gpustats_pod_" in t["expr"] or "gpustats_container_" in t["expr"]]
        assert exprs
        wait("gpustats_pod_gpu_joules_total")
        checked = 0
        for expr in exprs:
            names = set(re.findall(r"\b((?:gpustats|container_accelerator)_[a-z_]+)\b", expr))
            if not all(query(port, f"count({{__name__={name!r}}})".replace("'", '"'))
                       for name in names):
                continue                    # a family the scenario does not serve
            checked += 1
            for series in wait(expr):
                labels = series["metric"]
                assert not any(k.startswith("exported_") for k in labels), (option, expr, labels)
                assert labels.get("pod") == "trainer-0", (option, expr, labels)
                assert labels.get("namespace") == "ml", (option, expr, labels)
                if "container" in labels:
                    assert labels["container"] == "cuda", (option, expr, labels)
        assert checked >= 5, (checked, exprs)
        # The README's first billing question, as a user pastes it (the bill per job and per
        # user, of tenants outside Kubernetes, is the bare-metal demo's test).
        readme = (REPO_ROOT / "README.md").read_text()
        section = readme.split("### Energy per namespace this month", 1)[1].split("\n### ", 1)[0]
        billing = re.findall(r"```promql\n(.*?)\n```", section, re.S)
        assert billing
        for expr in billing:
            result = wait(expr)
            assert [s["metric"] for s in result] == [{"namespace": "ml"}], (option, result)
            assert float(result[0]["value"][1]) > 0, (option, result)
    finally:
        server.terminate()
        server.wait(10)
