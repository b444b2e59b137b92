"""Every kustomize variant of manifests/ renders and validates: the core objects with
``kubernetes-validate --strict``, the Prometheus Operator objects against the CRD schemas
vendored in tests/crds (see its README: the ServiceMonitor's is trimmed by hand)."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.support.paths import REPO_ROOT

MANIFESTS = REPO_ROOT / "manifests"
CRDS = REPO_ROOT / "tests" / "crds"
SCHEMAS = {"ServiceMonitor": "servicemonitors.schema.yaml",
           "PrometheusRule": "prometheusrules.schema.yaml"}

# name -> (components, drop nvidia-runtimeclass, extra kustomization keys)
VARIANTS = {
    "base": ((), False, {}),
    "base-without-runtimeclass": ((), True, {}),
    "dcgm-exporter-scrape-labels": (("dcgm-exporter-scrape-labels",), False, {}),
    "amd-intel-gpu-nodes": (("amd-intel-gpu-nodes",), True, {"nameSuffix": "-drm"}),
    "nvidia-driver-root": (("nvidia-driver-root",), False, {}),
    "kube-prometheus-stack": (("kube-prometheus-stack",), False, {}),
    "combined": (("nvidia-driver-root", "dcgm-exporter-scrape-labels",
                  "kube-prometheus-stack"), True, {}),
}


def _tool(name):
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed")
    return path


def render(tmp_path, name) -> list:
    tool = _tool("kubectl")
    version = subprocess.run([tool, "version", "--client"], capture_output=True, text=True)
    if not re.search(r"Kustomize Version: v[4-9]", version.stdout):
        pytest.skip("kubectl's kustomize predates components (v4+ needed)")
    components, drop_runtimeclass, extra = VARIANTS[name]
    overlay = tmp_path / name
    overlay.mkdir()
    base = os.path.relpath(MANIFESTS, overlay)       # kustomize refuses absolute directories
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    resources = [f"{base}/{r}" for r in kustomization["resources"]]
    shipped = [] if drop_runtimeclass else [f"{base}/{c}" for c in kustomization["components"]]
    generators = [dict(g, files=[f.replace("=", f"={base}/", 1) for g_ in [g]
                                 for f in g_["files"]]) for g in
                  kustomization.get("configMapGenerator", [])]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": resources, "configMapGenerator": generators,
        "components": shipped + [f"{base}/components/{c}" for c in components], **extra}))
    done = subprocess.run([tool, "kustomize", "--load-restrictor", "LoadRestrictionsNone",
                           str(overlay)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return list(yaml.safe_load_all(done.stdout))


def _strict(schema):
    """The API server's strict field validation: no key beyond those a schema names."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema \
                and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [_strict(v) for v in schema]
    return schema


_VALIDATE = """
import json, sys, jsonschema
schema, docs = json.load(sys.stdin)
errors = []
for doc in docs:
    v = jsonschema.Draft7Validator(schema)
    errors += [f"{doc['kind']}/{doc['metadata']['name']}: "
               f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
               for e in v.iter_errors(doc)]
print(json.dumps(errors))
"""


def crd_errors(kind: str, docs: list) -> list:
    """jsonschema runs where it is installed: here, or beside kubernetes-validate."""
    schema = _strict(yaml.safe_load((CRDS / SCHEMAS[kind]).read_text()))
    try:
        import jsonschema  # noqa: F401
        python = sys.executable
    except ImportError:
        with open(_tool("kubernetes-validate")) as f:
            python = f.readline()[2:].strip()
    done = subprocess.run([python, "-c", _VALIDATE], input=json.dumps([schema, docs]),
                          capture_output=True, text=True, timeout=60)
    if done.returncode and "No module named 'jsonschema'" in done.stderr:
        pytest.skip("jsonschema not installed")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_renders_and_validates(tmp_path, name):
    docs = render(tmp_path, name)
    kinds = [d["kind"] for d in docs]
    assert kinds.count("ServiceMonitor") == kinds.count("PrometheusRule") == 1
    assert ("RuntimeClass" in kinds) is not VARIANTS[name][1]
    core = [d for d in docs if d["kind"] not in SCHEMAS]
    files = []
    for i, doc in enumerate(core):
        path = tmp_path / f"{i:02d}-{doc['kind']}.yaml"
        path.write_text(yaml.safe_dump(doc))
        files.append(str(path))
    result = subprocess.run([_tool("kubernetes-validate"), "--strict", "-k", "1.33.0", *files],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ERROR" not in result.stdout
    for kind in SCHEMAS:
        assert crd_errors(kind, [d for d in docs if d["kind"] == kind]) == []


def test_crd_validation_catches_mistakes():
    """The vendored schemas reject what the API server would: an unknown key, a bad enum."""
    monitor = yaml.safe_load((MANIFESTS / "servicemonitor.yaml").read_text())
    assert crd_errors("ServiceMonitor", [monitor]) == []
    bad = json.loads(json.dumps(monitor))
    bad["spec"]["endpoints"][0]["bearerTokenSecrett"] = {"key": "token"}
    bad["spec"]["endpoints"][0]["relabelings"][0]["action"] = "rename"
    errors = crd_errors("ServiceMonitor", [bad])
    assert len(errors) == 2, errors
    rule = yaml.safe_load((MANIFESTS / "prometheusrule.yaml").read_text())
    assert crd_errors("PrometheusRule", [rule]) == []
    rule["spec"]["groups"][0]["rules"][0]["for"] = "1 minute"
    assert len(crd_errors("PrometheusRule", [rule])) == 1


def test_kube_prometheus_stack_component(tmp_path):
    plain = {(d["kind"], d["metadata"]["name"]): d for d in render(tmp_path, "base")}
    stack = {(d["kind"], d["metadata"]["name"]): d
             for d in render(tmp_path, "kube-prometheus-stack")}
    for key in (("ServiceMonitor", "gpustats"), ("PrometheusRule", "gpustats")):
        assert stack[key]["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        stack[key]["metadata"]["labels"].pop("release")
    assert stack == plain                            # nothing else changes
    # The scrape identity is gpustats' own: a token Secret of gpustats-scraper, bound to
    # gpustats-reader, whatever the Prometheus' service account.
    endpoint = plain[("ServiceMonitor", "gpustats")]["spec"]["endpoints"][0]
    assert "bearerTokenFile" not in endpoint
    assert endpoint["authorization"] == {
        "type": "Bearer", "credentials": {"name": "gpustats-scraper-token", "key": "token"}}
    secret = plain[("Secret", "gpustats-scraper-token")]
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["namespace"] == "gpustats"
    assert secret["metadata"]["annotations"] == {
        "kubernetes.io/service-account.name": "gpustats-scraper"}
    binding = plain[("ClusterRoleBinding", "gpustats-reader-scraper")]
    assert binding["roleRef"]["name"] == "gpustats-reader"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpustats-scraper", "namespace": "gpustats"}]
    readers = [b for (k, _), b in plain.items() if k == "ClusterRoleBinding"
               and b["roleRef"]["name"] == "gpustats-reader"]
    assert readers == [binding]
    # The dashboard for Grafana's sidecar, one ConfigMap with a stable name.
    dashboard = plain[("ConfigMap", "gpustats-grafana-dashboard")]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["gpustats.json"]) == json.loads(
        (MANIFESTS / "grafana-dashboard.json").read_text())
