"""``gpustats --demo``: the real daemon on its own simulated node, pods billed, the page alive."""

from __future__ import annotations

import re
import subprocess
import sys

from gpustats.demo.load import MIG_GPU, TENANTS, gpu_uuid, scenario_at
from gpustats.simulator import parse_scenario
from tests.support.browser import HEADLESS, chromium
from tests.support.paths import REPO_ROOT
from tests.support.demo import demo_root, start_demo

PODS = {(t.namespace, t.pod) for t in TENANTS}


def _billed(pod: dict) -> float:
    """The pod's attributed energy over its GPUs (0 before any is attributed)."""
    return sum(a.get("attributedEnergyJoules", 0.0) for a in pod.get("accelerators", ()))


def _all_billed(summary: dict) -> bool:
    pods = {(p["podRef"]["namespace"], p["podRef"]["name"]): p for p in summary["pods"]}
    return set(pods) == PODS and all(_billed(p) > 0 for p in pods.values())


def test_demo_bills_named_pods_on_a_node_with_a_mig_gpu(start_daemon, tmp_path):
    daemon = start_demo(start_daemon, tmp_path)
    first = daemon.wait_for(_all_billed)
    assert f"Open {daemon.base}/ " in daemon.log()
    root = demo_root(daemon)
    assert root.parent == tmp_path / "tmp"
    assert (root / "cgroup").is_dir() and (root / "scenario.yaml").is_file()
    gpus = {a["id"]: a for a in first["node"]["accelerators"]}
    assert set(gpus) == {gpu_uuid(i) for i in range(3)}
    assert all(a["activePowerWatts"] > 0 for a in gpus.values())     # idle/active split shown
    assert [m["profile"] for m in gpus[gpu_uuid(MIG_GPU)]["migInstances"]] \
        == ["3g.40gb", "2g.20gb", "1g.10gb"]
    assert gpus[gpu_uuid(MIG_GPU)]["sharingMode"] == "mig"
    before = {p["podRef"]["name"]: _billed(p) for p in first["pods"]}
    # Busy pods keep being billed (the notebook may be stopped for a while: not asked of it).
    later = daemon.wait_for(lambda s: all(
        _billed(p) > before[p["podRef"]["name"]] for p in s["pods"]
        if p["podRef"]["name"] != "notebook-ada"))
    assert sum(_billed(p) for p in later["pods"]) > sum(before.values())
    assert daemon.stop() == 0
    assert not root.exists(), "the demo's temporary host was left behind"


def test_demo_page_in_headless_chromium_shows_the_pods(start_daemon, tmp_path):
    binary = chromium()
    daemon = start_demo(start_daemon, tmp_path)
    daemon.wait_for(_all_billed)
    daemon.wait_ticks(3)                              # a few ticks of history for the charts
    dom = subprocess.run([binary, *HEADLESS, "--virtual-time-budget=5000", "--dump-dom",
                          daemon.base + "/"], capture_output=True, text=True, timeout=120).stdout
    assert dom.count('class="model"') == 3
    for _namespace, pod in PODS:
        assert re.search(r"<div class=\"legend\">.*?" + re.escape(pod), dom, re.S), pod
    assert "3g.40gb" in dom                           # the MIG GPU's instances


def test_demo_with_simulate_is_refused_before_anything_is_made(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "gpustats", "--demo", "--simulate",
         str(REPO_ROOT / "examples" / "two-gpus.yaml")],
        capture_output=True, text=True, timeout=60, cwd=str(REPO_ROOT),
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT), "TMPDIR": str(tmp_path)})
    assert result.returncode == 2
    assert "--demo runs its own simulated node on a fake host; it cannot be combined with " \
           "--simulate" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_demo_load_moves_and_is_a_valid_scenario():
    scenarios = [scenario_at(t) for t in range(0, 120, 3)]
    for data in scenarios:
        parse_scenario(data)                          # ValueError on a bad one
    powers = {d["devices"][0]["power_watts"] for d in scenarios}
    assert len(powers) > 10                           # GPU 0's power moves
    notebook = [p["sm_util_percent"] for d in scenarios for p in d["processes"] if p["pid"] == 4102]
    assert 0 in notebook and max(notebook) > 0        # the notebook stops and starts


def test_the_two_gpus_example_learns_an_idle_and_shows_active_power(start_daemon):
    """Without --idle-power-watts: GPU 1 idles for its first 25 s, the daemon learns that idle,
    and the busy phase after it is active power (before the idle cycle, a GPU at constant power
    was all idle: activePowerWatts 0)."""
    daemon = start_daemon("--simulate", str(REPO_ROOT / "examples" / "two-gpus.yaml"),
                          "--housekeeping-interval", "0.5", "--pod-resources-socket", "")
    daemon.wait_ready()
    body = daemon.wait_for(lambda s: s["node"]["accelerators"][1].get("activePowerWatts", 0) > 500,
                           timeout=40)
    gpu1 = body["node"]["accelerators"][1]
    assert gpu1["idlePowerWatts"] == 90
