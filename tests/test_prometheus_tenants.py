"""The tenant family of /metrics: every tenant, of every kind, once per GPU, with its kind's
identity labels; the family adds up to the bill; ended tenants are served; process series carry
their command and user."""

from collections import Counter

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpustats.export.prometheus import render
from tests.support.tenant_snapshot import A, C1, C3, M, tenant_snapshot

TENANT_LABELS = {"node_name", "gpu", "gpu_uuid", "vendor", "kind", "tenant", "namespace", "pod",
                 "pod_uid", "container_id", "unit", "uid", "user", "job_id", "step"}


def _samples(snapshot=None, disabled=()):
    body = render(snapshot or tenant_snapshot(), None, disabled_groups=disabled)[0].decode()
    return [s for f in text_string_to_metric_families(body) for s in f.samples]


def _named(samples, name):
    return [s for s in samples if s.name == name]


def _key(sample):
    return tuple(sorted(sample.labels.items()))


def test_every_tenant_once_per_gpu_with_its_kinds_labels():
    joules = _named(_samples(), "gpustats_tenant_gpu_joules_total")
    assert all(set(s.labels) == TENANT_LABELS for s in joules)
    assert not [k for k, n in Counter(map(_key, joules)).items() if n > 1]      # no duplicate
    rows = {(s.labels["kind"], s.labels["tenant"], s.labels["gpu"]): s for s in joules}
    assert sorted(rows) == sorted([
        ("pod", "ml/trainer-0", "0"), ("pod", "ml/old-0", "0"), ("pod", "u2", "1"),
        ("container", "jupyter", "0"), ("service", "ollama.service", "1"),
        ("session", "alice", "0"), ("job", "job 4242", "1"), ("process", "python3", "0"),
        ("service", "old.service", "0")])
    empty = dict.fromkeys(TENANT_LABELS - {"node_name", "gpu", "gpu_uuid", "vendor", "kind",
                                           "tenant"}, "")

    def labels(kind, tenant, gpu, **identity):
        return {**empty, "node_name": "node-1", "kind": kind, "tenant": tenant, "gpu": gpu,
                "gpu_uuid": A if gpu == "0" else M, "vendor": "nvidia", **identity}

    assert rows["pod", "ml/trainer-0", "0"].labels == labels(
        "pod", "ml/trainer-0", "0", namespace="ml", pod="trainer-0", pod_uid="u1")
    assert rows["pod", "u2", "1"].labels == labels("pod", "u2", "1", pod_uid="u2")
    assert rows["container", "jupyter", "0"].labels == labels(
        "container", "jupyter", "0", container_id=C3)
    assert rows["service", "ollama.service", "1"].labels == labels(
        "service", "ollama.service", "1", unit="ollama.service")
    assert rows["session", "alice", "0"].labels == labels(
        "session", "alice", "0", uid="1000", user="alice")
    assert rows["job", "job 4242", "1"].labels == labels(
        "job", "job 4242", "1", job_id="4242", step="0", uid="1001", user="bob")
    assert rows["process", "python3", "0"].labels == labels(
        "process", "python3", "0", uid="1002")
    # The pod's series is the pod's, not one per container: its container's ID is not in it.
    assert C1 not in {s.labels["container_id"] for s in joules}


def test_a_tenant_on_two_mig_instances_of_one_gpu_is_one_row_their_sum():
    samples = _samples()
    for name, value in (("gpustats_tenant_gpu_joules_total", 50.0),
                        ("gpustats_tenant_gpu_watts", 5.0),
                        ("gpustats_tenant_gpu_idle_share_joules_total", 10.0),
                        ("gpustats_tenant_gpu_idle_share_watts", 2.0)):
        ollama = [s for s in _named(samples, name) if s.labels["unit"] == "ollama.service"]
        assert [(s.labels["gpu_uuid"], s.value) for s in ollama] == [(M, value)], name


@pytest.mark.parametrize("uuid", [A, M])
def test_the_family_adds_up_to_the_bill_on_each_gpu(uuid):
    """Σ tenants + unattributed = active, and Σ idle shares + unallocated idle = idle (energy −
    active): in joules, and in watts for the tick."""
    samples = [s for s in _samples() if s.labels.get("gpu_uuid") == uuid]

    def total(name):
        return sum(s.value for s in _named(samples, name))

    def one(name):
        found = _named(samples, name)
        assert len(found) == 1, name
        return found[0].value

    assert total("gpustats_tenant_gpu_joules_total") \
        + one("gpustats_node_gpu_unattributed_joules_total") \
        == pytest.approx(one("gpustats_node_gpu_active_joules_total"))
    assert total("gpustats_tenant_gpu_watts") + one("gpustats_node_gpu_unattributed_watts") \
        == pytest.approx(one("gpustats_node_gpu_active_watts"))
    assert total("gpustats_tenant_gpu_idle_share_joules_total") \
        + one("gpustats_node_gpu_unallocated_idle_joules_total") \
        == pytest.approx(one("gpustats_node_gpu_joules_total")
                         - one("gpustats_node_gpu_active_joules_total"))
    assert total("gpustats_tenant_gpu_idle_share_watts") \
        + one("gpustats_node_gpu_unallocated_idle_watts") \
        == pytest.approx(one("gpustats_node_gpu_idle_watts"))


def test_the_family_equals_the_containers_family_per_gpu():
    """The same energy as the per-container series (which bill every entry), cut by tenant."""
    samples = _samples()
    for uuid in (A, M):
        tenants = sum(s.value for s in _named(samples, "gpustats_tenant_gpu_joules_total")
                      if s.labels["gpu_uuid"] == uuid)
        containers = sum(s.value for s in _named(samples, "gpustats_container_gpu_joules_total")
                         if s.labels["gpu_uuid"] == uuid)
        assert tenants == pytest.approx(containers) and tenants > 0


def test_ended_tenants_are_served_with_their_counters_and_no_watts():
    samples = _samples()
    joules = {s.labels["tenant"]: s.value
              for s in _named(samples, "gpustats_tenant_gpu_joules_total")}
    assert joules["ml/old-0"] == 300.0 and joules["old.service"] == 25.0
    watts = {s.labels["tenant"] for s in _named(samples, "gpustats_tenant_gpu_watts")}
    assert "ml/old-0" not in watts and "old.service" not in watts      # absent, never 0
    assert "python3" in watts


def test_process_series_carry_command_uid_and_user():
    samples = _named(_samples(), "gpustats_process_gpu_joules_total")
    by_pid = {s.labels["pid"]: s.labels for s in samples}
    assert {k: by_pid["5000"][k] for k in ("comm", "uid", "user", "container_id")} == {
        "comm": "srun", "uid": "1001", "user": "bob", "container_id": "job:4242:0"}
    assert (by_pid["5001"]["comm"], by_pid["5001"]["uid"], by_pid["5001"]["user"]) == \
        ("python3", "1002", "")                                    # no passwd entry: empty
    assert (by_pid["4242"]["comm"], by_pid["4242"]["user"]) == ("train.py", "root")


def test_the_tenant_group_is_on_by_default_and_can_be_left_out():
    names = {s.name for s in _samples()}
    assert "gpustats_tenant_gpu_joules_total" in names
    without = {s.name for s in _samples(disabled=("tenant",))}
    assert not {n for n in without if n.startswith("gpustats_tenant_")}
    assert "gpustats_pod_gpu_joules_total" in without
