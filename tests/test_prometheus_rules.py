"""The alerting and recording rules: promtool checks them and runs their unit tests, the
PrometheusRule carries the same groups, every alert has its texts and a runbook section, and
every metric a rule reads is one gpustats exposes."""

import re
import shutil
import subprocess

import pytest
import yaml

from gpustats.export.metric_table import COUNTER, FAMILIES, INFO
from tests.support.paths import REPO_ROOT

RULES = REPO_ROOT / "prometheus" / "gpustats.rules.yml"
RULE_TESTS = REPO_ROOT / "prometheus" / "gpustats.rules.test.yml"
OPERATOR_RULES = REPO_ROOT / "manifests" / "prometheusrule.yaml"
RUNBOOKS = REPO_ROOT / "docs" / "runbooks.md"


def _promtool():
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed")
    return path


def _groups():
    return yaml.safe_load(RULES.read_text())["groups"]


def _rules(kind):
    return [r for g in _groups() for r in g["rules"] if kind in r]


def test_promtool_check_rules(tmp_path):
    operator = tmp_path / "operator-groups.yml"
    operator.write_text(yaml.safe_dump(
        {"groups": yaml.safe_load(OPERATOR_RULES.read_text())["spec"]["groups"]}))
    for path in (RULES, operator):
        result = subprocess.run([_promtool(), "check", "rules", str(path)], capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS: 19 rules found" in result.stdout


def test_promtool_unit_tests_pass():
    result = subprocess.run([_promtool(), "test", "rules", RULE_TESTS.name],
                            cwd=RULE_TESTS.parent, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_can_fail(tmp_path):
    """A wrong expectation fails: the unit tests compare values, not just run."""
    shutil.copy(RULES, tmp_path / RULES.name)
    broken = RULE_TESTS.read_text().replace("value: 0.09", "value: 0.0901", 1)
    assert broken != RULE_TESTS.read_text()
    (tmp_path / RULE_TESTS.name).write_text(broken)
    result = subprocess.run([_promtool(), "test", "rules", RULE_TESTS.name], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr


def test_every_rule_has_a_unit_test_that_fires_or_records():
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {case["alertname"] for t in tests for case in t.get("alert_rule_test", ())
             if case.get("exp_alerts")}
    recorded = {case["expr"] for t in tests for case in t.get("promql_expr_test", ())
                if case.get("exp_samples")}
    assert {r["alert"] for r in _rules("alert")} == fired
    assert {r["record"] for r in _rules("record")} <= recorded


def test_operator_rule_carries_the_same_groups():
    doc = yaml.safe_load(OPERATOR_RULES.read_text())
    assert doc["kind"] == "PrometheusRule" and doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert doc["spec"]["groups"] == _groups()
    kustomization = yaml.safe_load((REPO_ROOT / "manifests" / "kustomization.yaml").read_text())
    assert OPERATOR_RULES.name in kustomization["resources"]


def _anchor(heading: str) -> str:
    return re.sub(r"[^a-z0-9 -]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_has_summary_description_and_a_runbook_section():
    anchors = {_anchor(line[3:]) for line in RUNBOOKS.read_text().splitlines()
               if line.startswith("## ")}
    for rule in _rules("alert"):
        annotations = rule["annotations"]
        assert annotations["summary"] and len(annotations["description"]) > 60, rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}
        url, _, anchor = annotations["runbook_url"].partition("#")
        assert url == "https://github.com/gpustats/gpustats/blob/main/docs/runbooks.md", url
        assert anchor == _anchor(rule["alert"]), rule["alert"]
        assert anchor in anchors, f"no runbook section for {rule['alert']}"


def test_rules_read_only_metrics_gpustats_exposes():
    exposed = {f.name + ("_info" if f.kind == INFO else "_total" if f.kind == COUNTER else "")
               for f in FAMILIES}
    used = set()
    for rule in _rules("alert") + _rules("record"):
        used |= set(re.findall(r"\b(gpustats_[a-z_]+)\b", rule["expr"]))
    assert used and used <= exposed, used - exposed
