"""Deployment artefacts checked by the tools their ecosystems trust (skipped without them)."""

import json
import re
import shutil
import subprocess
import sys
import zipfile
import tarfile

import pytest
import yaml

from gpustats.export.metric_table import COUNTER, FAMILIES, INFO
from tests.conftest import REPO_ROOT

UNIT = REPO_ROOT / "systemd" / "gpustats.service"
MANIFESTS = REPO_ROOT / "manifests"


def _tool(name):
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed")
    return path


def _unit_for_checks(tmp_path):
    # verify wants ExecStart's binary to exist; everything else is checked as shipped.
    text = UNIT.read_text().replace("/usr/local/bin/gpustats", "/bin/true")
    path = tmp_path / "gpustats.service"
    path.write_text(text)
    return path


def test_systemd_analyze_verify(tmp_path):
    result = subprocess.run([_tool("systemd-analyze"), "verify", str(_unit_for_checks(tmp_path))],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "gpustats.service" not in result.stderr, result.stderr


def test_systemd_security_score_is_ok(tmp_path):
    result = subprocess.run([_tool("systemd-analyze"), "security", "--offline=true",
                             str(_unit_for_checks(tmp_path))], capture_output=True, text=True)
    match = re.search(r"Overall exposure level for gpustats.service: ([\d.]+) (\w+)",
                      result.stdout)
    assert match, result.stdout[-2000:] + result.stderr
    assert float(match.group(1)) <= 3.0, match.group(0)


def test_unit_contract():
    text = UNIT.read_text()
    for line in ("Type=notify", "Restart=on-failure", "StateDirectory=gpustats",
                 "--config /etc/gpustats/config.yaml", "NoNewPrivileges=yes",
                 "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
                 "DevicePolicy=closed", "WatchdogSec="):
        assert line in text


def test_kubernetes_validate_strict():
    tool = _tool("kubernetes-validate")
    files = [str(p) for p in sorted(MANIFESTS.glob("*.yaml"))
             if p.name not in ("kustomization.yaml", "servicemonitor.yaml",
                                  "prometheusrule.yaml")]
    result = subprocess.run([tool, "--strict", "-k", "1.33.0", *files], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "passed" in result.stdout and "ERROR" not in result.stdout


def test_checkov_no_failed_checks():
    tool = _tool("checkov")
    result = subprocess.run([tool, "-d", str(MANIFESTS), "--framework", "kubernetes",
                             "--skip-download", "-o", "json"],
                            capture_output=True, text=True, timeout=600)
    report = json.loads(result.stdout)
    reports = report if isinstance(report, list) else [report]
    failed = [c["check_id"] for r in reports for c in r["results"]["failed_checks"]]
    assert failed == []
    skipped = {c["check_id"] for r in reports for c in r["results"]["skipped_checks"]}
    reasons = {}
    for path in MANIFESTS.glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            for key, value in ((doc or {}).get("metadata", {}).get("annotations") or {}).items():
                if key.startswith("checkov.io/skip"):
                    check, _, reason = value.partition("=")
                    reasons[check] = reason
    assert skipped == set(reasons)                  # no stale or undocumented suppression
    assert all(len(reason) > 20 for reason in reasons.values())


def test_daemonset_contract():
    ds = yaml.safe_load((MANIFESTS / "daemonset.yaml").read_text())
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["runtimeClassName"] == "nvidia"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert "nvidia.com/gpu" not in json.dumps(c["resources"])
    sc = c["securityContext"]
    assert sc["privileged"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    host_mounts = [m for m in c["volumeMounts"] if m["name"] in ("sys", "proc", "pod-resources",
                                                                 "containerd")]
    assert all(m["readOnly"] for m in host_mounts) and len(host_mounts) == 4


def test_dashboard_uses_declared_metrics_only():
    dashboard = json.loads((MANIFESTS / "grafana-dashboard.json").read_text())
    exposed = set()
    for f in FAMILIES:
        exposed.add(f.name + ("_info" if f.kind == INFO else "_total" if f.kind == COUNTER else ""))
    used = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            used |= set(re.findall(r"\b(gpustats_[a-z_]+)\b", target["expr"]))
    assert used and used <= exposed, used - exposed


def test_containerfile():
    text = (REPO_ROOT / "Containerfile").read_text()
    assert re.search(r"^FROM .*python:3\.11", text, re.M)
    assert 'ENTRYPOINT ["gpustats"]' in text and re.search(r"^USER ", text, re.M)


def test_sdist_and_wheel_build(tmp_path):
    pytest.importorskip("build")
    result = subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir",
                             str(tmp_path), str(REPO_ROOT)], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    wheel = next(tmp_path.glob("gpustats-*.whl"))
    sdist = next(tmp_path.glob("gpustats-*.tar.gz"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpustats/sources/podresources/podresources_api_pb2.py" in names
    assert any(n.endswith("entry_points.txt") for n in names)
    with tarfile.open(sdist) as tar:
        assert any(n.endswith("gpustats/cli.py") for n in tar.getnames())
