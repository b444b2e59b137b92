"""``gpustats --demo bare-metal``: the real daemon on a simulated host with no Kubernetes, a Slurm
job, a systemd service, a Docker container and a user's notebook billed, each shown on the page
by its name; and the demo's kinds as options take them."""

from __future__ import annotations

import re
import subprocess
import sys

from gpustats.demo import bare_metal
from gpustats.demo.bare_metal import DOCKER_ID, JOB_ID, TENANTS, gpu_uuid, scenario_at
from gpustats.simulator import parse_scenario
from gpustats.sources.procs import ProcessIdentity, owner_from, parse_proc_cgroup
from tests.support.browser import HEADLESS, chromium
from tests.support.paths import REPO_ROOT
from tests.support.tenant_series import samples, tenant_series
from tests.support.demo import demo_root, start_demo

# (kind, the name it is shown by): the job, the user's notebook by her name, the service, the
# Docker container by its config.v2.json name.
SHOWN = {("job", f"job {JOB_ID}"), ("session", "grace"), ("service", "vllm.service"),
         ("container", "embeddings")}
NOTEBOOK_PID = next(t.pid for t in TENANTS if t.comm == "jupyter-lab")


def _billed(entry: dict) -> float:
    return sum(a.get("attributedEnergyJoules", 0.0) for a in entry.get("accelerators", ()))


def _tenants(summary: dict) -> dict[tuple[str, str], dict]:
    """The summary's tenants outside pods by (kind, name): ``tenants[]`` and top-level
    containers."""
    out = {(t["kind"], t["name"]): t for t in summary.get("tenants", ())}
    out.update({("container", c.get("name", c["id"])): c for c in summary.get("containers", ())})
    return out


def _all_billed(summary: dict) -> bool:
    found = _tenants(summary)
    return set(found) == SHOWN and all(_billed(t) > 0 for t in found.values())


def test_bare_metal_demo_bills_its_tenants_with_no_kubernetes(start_daemon, tmp_path):
    daemon = start_demo(start_daemon, tmp_path, "bare-metal")
    summary = daemon.wait_for(_all_billed, timeout=30)
    assert "no Kubernetes" in daemon.log() and "Docker container embeddings" in daemon.log()
    assert summary["pods"] == []
    assert {a["id"] for a in summary["node"]["accelerators"]} == {gpu_uuid(i) for i in range(3)}
    found = _tenants(summary)
    job = found[("job", f"job {JOB_ID}")]
    assert (job["jobId"], job["step"], job["user"]) == (str(JOB_ID), "0", "ada")
    assert found[("session", "grace")]["uid"] == 1002
    assert found[("container", "embeddings")]["id"] == DOCKER_ID
    assert found[("service", "vllm.service")]["cpu"]["usageCoreNanoSeconds"] > 0

    text = daemon.get("/metrics")[1]
    shown = {key for i in range(3) for key in tenant_series(text, gpu_uuid(i))}
    assert shown == SHOWN
    assert not [s for s in samples(text, "gpustats_pod_gpu_joules_total")]
    notebook = samples(text, "gpustats_process_gpu_joules_total", pid=str(NOTEBOOK_PID))
    assert [(s.labels["comm"], s.labels["user"]) for s in notebook] == [("jupyter-lab", "grace")]

    root = demo_root(daemon)
    assert root.parent == tmp_path / "tmp"
    assert (root / "host" / "etc" / "passwd").is_file()
    assert not (root / "log").exists()                     # no kubelet log layout
    assert not [p for p in (root / "cgroup").rglob("*") if "kubepods" in p.name]
    assert daemon.stop() == 0
    assert not root.exists(), "the demo's temporary host was left behind"


def test_bare_metal_demo_page_in_headless_chromium_shows_every_tenant(start_daemon, tmp_path):
    binary = chromium()
    daemon = start_demo(start_daemon, tmp_path, "bare-metal")
    daemon.wait_for(_all_billed, timeout=30)
    daemon.wait_ticks(3)                              # a few ticks of history for the charts
    dom = subprocess.run([binary, *HEADLESS, "--virtual-time-budget=5000", "--dump-dom",
                          daemon.base + "/"], capture_output=True, text=True, timeout=120).stdout
    assert dom.count('class="model"') == 3
    for kind, name in SHOWN:
        cell = re.escape(name) + r"</bdi></td>"
        # A row of the tenants table (rendered on the server), of its kind ...
        assert re.search(rf"<tr><td>{kind}</td><td class=\"pod[^>]*>(?:<i [^>]*></i>)?<bdi>"
                         + cell, dom), (kind, name)
        # ... and a layer of its GPU's power chart (drawn by the script).
        assert re.search(r"<div class=\"legend\">(?:(?!</div>).)*" + re.escape(name), dom,
                         re.S), name
    assert "kubepods" not in dom
    # Beside each name, whose it is: a service and a container are their processes' user's.
    owners = {"job": "ada", "session": "grace", "service": "vllm", "container": "root"}
    for kind, name in SHOWN:
        assert re.search(rf"<tr><td>{kind}</td><td class=\"pod[^>]*>(?:<i [^>]*></i>)?<bdi>"
                         + re.escape(name) + r"</bdi></td><td class=\"name\"[^>]*><bdi>"
                         + owners[kind] + "</bdi>", dom), (kind, name, owners[kind])


def test_the_bare_metal_load_moves_and_is_a_valid_scenario():
    scenarios = [scenario_at(t) for t in range(0, 120, 3)]
    for data in scenarios:
        parse_scenario(data)                          # ValueError on a bad one
    assert len({d["devices"][0]["power_watts"] for d in scenarios}) > 10
    notebook = [p["sm_util_percent"] for d in scenarios for p in d["processes"]
                if p["pid"] == NOTEBOOK_PID]
    assert 0 in notebook and max(notebook) > 0        # the notebook stops and starts
    assert all(p["device"].startswith("GPU-") for p in scenarios[0]["processes"])


def test_the_bare_metal_host_names_a_tenant_of_each_kind_and_no_pod(tmp_path):
    cgroup, proc, host = bare_metal.build_host(tmp_path)
    kinds = {}
    for tenant in TENANTS:
        paths = parse_proc_cgroup((proc / str(tenant.pid) / "cgroup").read_text())
        owner = owner_from(paths, ProcessIdentity(tenant.comm, tenant.uid))
        if owner.container is not None:
            assert owner.container.info.pod_uid is None          # no pod
            kinds["container"] = owner.container.info.container_id
        else:
            kinds[owner.tenant.kind] = owner.tenant.key
    assert kinds == {"job": f"job:{JOB_ID}:0", "session": "session:1002",
                     "service": "service:vllm.service", "container": DOCKER_ID}
    assert "grace:x:1002:" in (host / "etc" / "passwd").read_text()
    assert (host / "var/lib/docker/containers" / DOCKER_ID / "config.v2.json").is_file()
    assert not [p for p in tmp_path.rglob("*") if "kube" in p.name or "pod" in p.name]


def test_a_demo_kind_not_known_is_refused_before_anything_is_made(tmp_path):
    for argv, env, origin in ((["--demo", "baremetal"], {}, "--demo"),
                              ([], {"GPUSTATS_DEMO": "slurm"}, "GPUSTATS_DEMO")):
        result = subprocess.run(
            [sys.executable, "-m", "gpustats", *argv], capture_output=True, text=True,
            timeout=60, cwd=str(REPO_ROOT),
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT), "TMPDIR": str(tmp_path),
                 **env})
        assert result.returncode == 2, result
        assert result.stderr.startswith(
            f"gpustats: invalid {origin}: expected kubernetes, bare-metal, mixed, amd, intel, "
            "true or false, got "), result.stderr
        assert len(result.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
