"""Deployment artefacts checked by the tools their ecosystems trust (skipped without them)."""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
import tarfile

import pytest
import yaml

from gpustats.export.metric_table import COUNTER, FAMILIES, INFO
from tests.support.paths import REPO_ROOT

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



def _kubectl_with_components() -> str:
    """kubectl, where its kustomize knows components (v4+); the test skips elsewhere."""
    tool = _tool("kubectl")
    version = subprocess.run([tool, "version", "--client"], capture_output=True, text=True)
    if not re.search(r"Kustomize Version: v[4-9]", version.stdout):
        pytest.skip("kubectl's kustomize predates components (v4+ needed)")
    return tool

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


def test_amd_intel_drop_in_keeps_the_two_capabilities_the_kernel_checks(tmp_path):
    """The AMD/Intel drop-in adds exactly the capabilities reading other users' DRM clients
    needs to the unit, which keeps none; systemd takes the unit with it."""
    drop_in = UNIT.parent / "gpustats.service.d" / "amd-intel-gpus.conf"
    lines = [x for x in drop_in.read_text().splitlines() if x and not x.startswith("#")]
    assert lines == ["[Service]", "CapabilityBoundingSet=CAP_DAC_READ_SEARCH CAP_SYS_PTRACE"]
    assert "CapabilityBoundingSet=\n" in UNIT.read_text()
    unit = _unit_for_checks(tmp_path)
    (tmp_path / "gpustats.service.d").mkdir()
    shutil.copy(drop_in, tmp_path / "gpustats.service.d")
    result = subprocess.run([_tool("systemd-analyze"), "verify", str(unit)],
                            capture_output=True, text=True)
    assert result.returncode == 0 and "gpustats.service" not in result.stderr, result.stderr


def test_unit_contract():
    text = UNIT.read_text()
    for line in ("Type=notify", "Restart=on-failure", "StateDirectory=gpustats",
                 "--config /etc/gpustats/config.yaml", "NoNewPrivileges=yes",
                 "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
                 "DevicePolicy=closed", "WatchdogSec="):
        assert line in text


# Directives whose entries are host paths that systemd must find at start unless "-"-prefixed.
PATH_LIST_DIRECTIVES = ("ReadOnlyPaths", "ReadWritePaths", "InaccessiblePaths", "ExecPaths",
                        "NoExecPaths", "BindPaths", "BindReadOnlyPaths")
# Kernel interfaces present on every host the unit can run on.
ALWAYS_PRESENT = {"/sys", "/proc"}


def _unit_path_entries(text):
    entries = []
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() in PATH_LIST_DIRECTIVES:
            for entry in value.split():
                source = entry.split(":", 1)[0]         # Bind*Paths: SOURCE[:DEST[:OPTIONS]]
                entries.append((key.strip(), source))
    return entries


def test_unit_optional_host_paths_may_be_missing():
    # systemd refuses to start a unit whose listed path is missing (226/NAMESPACE) unless the
    # path is "-"-prefixed; the pod-resources directory is absent on hosts without a kubelet.
    entries = _unit_path_entries(UNIT.read_text())
    assert ("ReadOnlyPaths", "-/var/lib/kubelet/pod-resources") in entries
    required = [(key, path) for key, path in entries
                if path.lstrip("+").startswith("/") and path.lstrip("+") not in ALWAYS_PRESENT]
    assert required == [], "optional host paths without the '-' prefix"


def _manifest_files():
    return sorted(p for p in MANIFESTS.rglob("*.yaml") if p.name != "kustomization.yaml")


def test_kubernetes_validate_strict():
    tool = _tool("kubernetes-validate")
    files = [str(p) for p in _manifest_files()
             if p.name not in ("servicemonitor.yaml", "prometheusrule.yaml")]
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
    for path in _manifest_files():
        for doc in yaml.safe_load_all(path.read_text()):
            for key, value in ((doc or {}).get("metadata", {}).get("annotations") or {}).items():
                if key.startswith("checkov.io/skip"):
                    check, _, reason = value.partition("=")
                    reasons[check] = reason
    assert skipped == set(reasons)                  # no stale or undocumented suppression
    assert all(len(reason) > 20 for reason in reasons.values())


def pod_labels(ds: dict) -> dict:
    return ds["spec"]["template"]["metadata"]["labels"]


def test_daemonset_contract():
    ds = yaml.safe_load((MANIFESTS / "daemonset.yaml").read_text())
    pod = ds["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    c, proxy = containers["gpustats"], containers["kube-rbac-proxy"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["priorityClassName"] == "system-node-critical"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert "nvidia.com/gpu" not in json.dumps(c["resources"])
    for container in (c, proxy):
        sc = container["securityContext"]
        assert sc["privileged"] is False and sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
    # gpustats on the pod's loopback only; the proxy is the one way in.
    assert "--listen=127.0.0.1:9477" in c["args"]
    assert "--upstream=http://127.0.0.1:9477/" in proxy["args"]
    assert "--ignore-paths=/healthz,/readyz" in proxy["args"]
    assert proxy["ports"][0]["containerPort"] == 9478
    # The probes reach a listener of their own, which the pod network cannot: no client of
    # the data port can make the kubelet restart the pod.
    assert "--health-listen=0.0.0.0:9479" in c["args"]
    assert c["ports"] == [{"name": "health", "containerPort": 9479, "protocol": "TCP"}]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert c[probe]["httpGet"] == {"path": path, "port": "health"}
    policy = yaml.safe_load((MANIFESTS / "networkpolicy.yaml").read_text())
    assert policy["spec"]["podSelector"]["matchLabels"] == pod_labels(ds)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"ports": [{"port": 9478, "protocol": "TCP"}]}]
    # No runtime socket by default: not in the args, not among the volumes.
    assert not any(a.startswith("--runtime-socket") for a in c["args"])
    assert "--log-root=/var/log" in c["args"]
    paths = {v["name"]: v.get("hostPath", {}).get("path") for v in pod["volumes"]}
    assert not any(p and ("containerd" in p or "crio" in p or p.endswith(".sock"))
                   for p in paths.values()), paths
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    for name in ("sys", "proc", "pod-resources", "log-pods", "log-containers", "nvidia-devices"):
        assert mounts[name]["readOnly"] is True, name
    assert mounts["log-pods"]["mountPath"] == "/var/log/pods"
    assert mounts["log-containers"]["mountPath"] == "/var/log/containers"
    assert mounts["nvidia-devices"]["mountPath"] == "/var/run/nvidia-container-devices/all"
    # Host processes are read through the host's procfs, mounted read-only, never by joining
    # the host's namespaces: a process of the pod cannot signal or trace the kubelet.
    for shared in ("hostPID", "hostIPC", "hostNetwork", "shareProcessNamespace"):
        assert not pod.get(shared), shared
    assert paths["proc"] == "/proc" and mounts["proc"]["mountPath"] == "/host/proc"
    assert "--proc-root=/host/proc" in c["args"]
    assert "--sysfs-root=/host/sys" in c["args"] and mounts["sys"]["mountPath"] == "/host/sys"
    assert "--cgroup-root=/host/sys/fs/cgroup" in c["args"]
    # Every host path is read-only but the state directory.
    host_paths = {v["name"] for v in pod["volumes"] if "hostPath" in v}
    assert {n for n in host_paths if not mounts[n].get("readOnly")} == {"state"}
    for name in ("sys", "proc", "pod-resources", "cdi-static", "cdi-transient", "log-pods",
                 "log-containers"):          # the mounts below them read-only too
        assert mounts[name]["recursiveReadOnly"] in ("IfPossible", "Enabled"), name
    assert host_paths <= set(mounts)
    # The API token reaches the proxy alone.
    assert pod["automountServiceAccountToken"] is False
    assert "kube-api-access" not in mounts
    assert [m["name"] for m in proxy["volumeMounts"]] == ["kube-api-access"]


def test_rbac_and_monitor_contract():
    docs = {(d["kind"], d["metadata"]["name"]): d
            for d in yaml.safe_load_all((MANIFESTS / "rbac.yaml").read_text())}
    proxy = docs[("ClusterRole", "gpustats-kube-rbac-proxy")]["rules"]
    assert {(r["apiGroups"][0], r["resources"][0], tuple(r["verbs"])) for r in proxy} == {
        ("authentication.k8s.io", "tokenreviews", ("create",)),
        ("authorization.k8s.io", "subjectaccessreviews", ("create",))}
    reader = docs[("ClusterRole", "gpustats-reader")]["rules"]
    assert reader == [{"nonResourceURLs": ["/metrics", "/stats/summary", "/api/v1/*"],
                       "verbs": ["get"]}]
    monitor = yaml.safe_load((MANIFESTS / "servicemonitor.yaml").read_text())
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "https" and endpoint["honorLabels"] is True
    assert endpoint["relabelings"] == [
        {"action": "labeldrop", "regex": "(pod|namespace|container|service|endpoint)"}]
    quota = yaml.safe_load((MANIFESTS / "resourcequota.yaml").read_text())
    assert quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == [
        "system-node-critical"]


def test_kustomize_renders_with_and_without_the_runtimeclass(tmp_path):
    tool = _kubectl_with_components()
    rendered = subprocess.run([tool, "kustomize", str(MANIFESTS)], capture_output=True,
                              text=True, timeout=120)
    assert rendered.returncode == 0, rendered.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(rendered.stdout)]
    assert "RuntimeClass" in kinds and "ResourceQuota" in kinds and kinds.count("DaemonSet") == 1
    # An overlay that leaves the component out (a GPU Operator cluster).
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    base["resources"] = [str(MANIFESTS / r) for r in base["resources"]]
    for generator in base.get("configMapGenerator", ()):      # the dashboard's ConfigMap
        generator["files"] = [f"{key}={MANIFESTS / path}" for key, _, path in
                              (f.partition("=") for f in generator["files"])]
    base.pop("components")
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(base))
    without = subprocess.run([tool, "kustomize", "--load-restrictor", "LoadRestrictionsNone",
                              str(overlay)], capture_output=True, text=True, timeout=120)
    assert without.returncode == 0, without.stderr
    assert "RuntimeClass" not in [d["kind"] for d in yaml.safe_load_all(without.stdout)]


def test_kustomize_renders_the_dcgm_exporter_scrape_labels_component(tmp_path):
    tool = _kubectl_with_components()
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = os.path.relpath(MANIFESTS, overlay)       # kustomize refuses absolute directories
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [base],
        "components": [f"{base}/components/dcgm-exporter-scrape-labels"]}))

    def render(path):
        done = subprocess.run([tool, "kustomize", "--load-restrictor", "LoadRestrictionsNone",
                               str(path)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(done.stdout)}

    plain, patched = render(MANIFESTS), render(overlay)
    monitor = ("ServiceMonitor", "gpustats")
    shipped, endpoint = (d[monitor]["spec"]["endpoints"][0] for d in (plain, patched))
    assert shipped["honorLabels"] is True and endpoint["honorLabels"] is False
    assert "relabelings" not in endpoint
    # gpustats' own families get pod/namespace/container back (the DCGM_FI_* ones keep the
    # exported_* names): tests/test_servicemonitor_prometheus.py runs them in a Prometheus.
    assert {r["targetLabel"] for r in endpoint["metricRelabelings"]} == {
        "pod", "namespace", "container", "exported_pod", "exported_namespace",
        "exported_container"}
    assert all(r["sourceLabels"][0] == "__name__" and
               r["regex"].startswith("(?:gpustats|container_accelerator)_")
               for r in endpoint["metricRelabelings"])
    assert {k: v for k, v in shipped.items() if k not in ("honorLabels", "relabelings")} == \
        {k: v for k, v in endpoint.items() if k not in ("honorLabels", "metricRelabelings")}
    # Nothing else changes.
    assert {k: v for k, v in plain.items() if k != monitor} == \
        {k: v for k, v in patched.items() if k != monitor}
    component = yaml.safe_load(
        (MANIFESTS / "components" / "dcgm-exporter-scrape-labels" / "kustomization.yaml")
        .read_text())
    assert component["kind"] == "Component"


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
    assert re.search(r"^ARG BASE=.*python:3\.11-slim$", text, re.M)
    assert re.search(r"^FROM \$\{BASE\}$", text, re.M)
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
    page_files = ("gpustats/web/templates/index.html", "gpustats/web/static/gpustats.js",
                  "gpustats/web/static/gpustats.css")
    assert set(page_files) <= set(names)
    with tarfile.open(sdist) as tar:
        assert any(n.endswith("gpustats/cli.py") for n in tar.getnames())
        assert all(any(n.endswith(f) for n in tar.getnames()) for f in page_files)
        assert any(n.endswith("/LICENSE") for n in tar.getnames())


def _render_component(tmp_path, component: str, **extra) -> dict:
    """The DaemonSet of an overlay of the manifests with ``component`` (and ``extra`` keys)."""
    tool = _kubectl_with_components()
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = os.path.relpath(MANIFESTS, overlay)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [base], "components": [f"{base}/components/{component}"], **extra}))
    done = subprocess.run([tool, "kustomize", "--load-restrictor", "LoadRestrictionsNone",
                           str(overlay)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return next(d for d in yaml.safe_load_all(done.stdout) if d["kind"] == "DaemonSet")


def test_kustomize_renders_the_amd_intel_gpu_nodes_component(tmp_path):
    """AMD and Intel nodes: no NVIDIA runtime or device request, those nodes' labels, and
    CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE (other users' /proc/<pid>/fd and DRM fdinfo) as the
    only capabilities kept."""
    daemonset = _render_component(tmp_path, "amd-intel-gpu-nodes", nameSuffix="-drm")
    spec = daemonset["spec"]["template"]["spec"]
    assert daemonset["metadata"]["name"] == "gpustats-drm"
    assert "runtimeClassName" not in spec and "nodeSelector" not in spec
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [t["matchExpressions"][0]["key"] for t in terms["nodeSelectorTerms"]] == [
        "feature.node.kubernetes.io/amd-gpu", "intel.feature.node.kubernetes.io/gpu"]
    gpustats = spec["containers"][0]
    assert gpustats["securityContext"]["capabilities"] == {
        "drop": ["ALL"], "add": ["DAC_READ_SEARCH", "SYS_PTRACE"]}
    assert not any(e["name"].startswith("NVIDIA_") for e in gpustats["env"])
    assert "nvidia-devices" not in [v["name"] for v in spec["volumes"]]
    assert {"/host/sys", "/host/proc"} <= {m["mountPath"] for m in gpustats["volumeMounts"]}


def test_kustomize_renders_the_nvidia_driver_root_component(tmp_path):
    """The GPU Operator's driver tree mounted read-only and handed to --nvml-driver-root."""
    spec = _render_component(tmp_path, "nvidia-driver-root")["spec"]["template"]["spec"]
    gpustats = spec["containers"][0]
    assert "--nvml-driver-root=/run/nvidia/driver" in gpustats["args"]
    mount = next(m for m in gpustats["volumeMounts"] if m["name"] == "nvidia-driver-root")
    assert mount["mountPath"] == "/run/nvidia/driver" and mount["readOnly"] is True
    volume = next(v for v in spec["volumes"] if v["name"] == "nvidia-driver-root")
    assert volume["hostPath"]["path"] == "/run/nvidia/driver"
