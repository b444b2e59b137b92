"""Every scenario in ``examples/`` bills its processes on a fake host that places them: the
daemon run once (``--once``) on the example, with ``--proc-root`` and ``--cgroup-root`` of a
tree where each of the example's PIDs is a systemd service's process. NVIDIA's processes come
from the simulated NVML; AMD's and Intel's from the DRM fd and fdinfo the simulator writes into
that same ``/proc``. Each example's header says why plain ``--simulate`` bills no one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpustats import fakehost
from gpustats.simulator.scenario import load_scenario
from tests.support.paths import REPO_ROOT

EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.yaml"))


def _unit(pid: int) -> str:
    return f"example-{pid}.service"


def _fake_host(root, pids):
    cgroup, proc = root / "cgroup", root / "proc"
    fakehost.start_cgroup_tree(cgroup)
    fakehost.copy_node_files(proc)
    for pid in pids:
        rel = fakehost.service_cgroup(_unit(pid))
        fakehost.add_container(cgroup, rel)
        fakehost.add_process_files(proc, pid, fakehost.v2_cgroup_lines(rel), "worker", 0)
    (root / "host").mkdir()
    return cgroup, proc, root / "host"


def test_there_are_examples():
    assert {p.name for p in EXAMPLES} >= {"amd-mi300x.yaml", "intel-flex.yaml", "two-gpus.yaml"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_each_header_says_where_its_processes_are_billed(example):
    header = "".join(line for line in example.read_text().splitlines(keepends=True)
                     if line.startswith("#"))
    assert "--proc-root" in header and "exist in no real /proc" in header, header


@pytest.mark.e2e
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_each_example_bills_its_processes_on_a_fake_host(tmp_path, example):
    scenario = load_scenario(str(example))
    pids = sorted({p.pid for p in scenario.processes})
    cgroup, proc, host = _fake_host(tmp_path, pids)
    done = subprocess.run(
        [sys.executable, "-m", "gpustats", "--once", "--simulate", str(example),
         "--proc-root", str(proc), "--cgroup-root", str(cgroup), "--host-root", str(host),
         "--state-dir", str(tmp_path / "state"), "--pod-resources-socket", "",
         "--runtime-socket", "", "--log-root", ""],
        capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert done.returncode == 0, done.stderr[-3000:]
    tenants = {t["name"]: t for t in json.loads(done.stdout)["tenants"]}
    for pid in pids:
        tenant = tenants.get(_unit(pid))
        assert tenant is not None, (pid, sorted(tenants))
        billed = sum(a.get("attributedEnergyJoules", 0.0) for a in tenant["accelerators"])
        assert billed > 0, (pid, tenant["accelerators"])
