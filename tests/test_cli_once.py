import json
import subprocess
import sys

import pytest

from tests.support.paths import REPO_ROOT


def test_once_prints_the_summary_of_two_ticks(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "gpustats", "--once", "--simulate",
         str(REPO_ROOT / "examples" / "two-gpus.yaml"), "--state-dir", str(tmp_path),
         "--idle-power-watts", "70"],
        capture_output=True, text=True, timeout=60, cwd=str(REPO_ROOT))
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    accs = summary["node"]["accelerators"]
    assert len(accs) == 2 and summary["pods"] == []
    # The second tick has a rate: its active energy over its length (the energy counter,
    # read at its own cadence and estimated from power between reads, is not exact).
    assert accs[0]["activePowerWatts"] == pytest.approx(240.0, rel=0.01)
    assert summary["node"]["cpu"]["usageNanoCores"] >= 0


def test_a_failing_source_gives_a_partial_snapshot(caplog):
    from gpustats.engine.collector import Housekeeper
    from gpustats.engine.counters import EnergyCounters
    from gpustats.engine.energy import EnergyAccountant
    from gpustats.engine.store import SnapshotStore

    from tests.support.housekeeper_fakes import BrokenGpus, NoErrors, Node

    counters = EnergyCounters()
    store = SnapshotStore()
    housekeeper = Housekeeper(node_name="n", node=Node(), gpus=BrokenGpus(), errors=NoErrors(),
                              store=store, energy=EnergyAccountant(lambda u: None, counters),
                              counters=counters)
    snapshot = housekeeper.tick()
    assert snapshot.devices == () and store.latest() is snapshot
    assert any("GPU sweep failed" in r.getMessage() for r in caplog.records)



def test_once_leaves_the_state_dir_as_found(tmp_path):
    """--once reads the counters and writes none: it may run beside the daemon on its
    state dir."""
    import subprocess
    import sys

    from tests.support.paths import REPO_ROOT
    once = tmp_path / "once"
    done = subprocess.run([sys.executable, "-m", "gpustats", "--once", "--simulate",
                           str(REPO_ROOT / "examples" / "two-gpus.yaml"), "--state-dir",
                           str(once)], capture_output=True, text=True, timeout=120,
                          cwd=str(REPO_ROOT))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in once.iterdir()) == ["simulated-driver.json"]  # the fake's


def test_once_neither_makes_a_state_dir_nor_says_persistence_fails(tmp_path):
    """Nothing is written, so nothing is said to be at risk, and a state dir that is not
    there is not made (only read, where it is)."""
    absent = tmp_path / "absent"
    done = subprocess.run([sys.executable, "-m", "gpustats", "--once", "--state-dir",
                           str(absent), "--sysfs-root", str(tmp_path), "--cgroup-root",
                           str(tmp_path), "--pod-resources-socket", "", "--log-root", ""],
                          capture_output=True, text=True, timeout=120, cwd=str(REPO_ROOT))
    assert done.returncode == 0, done.stderr
    assert not absent.exists()
    assert "persistence" not in done.stderr and "crash now loses" not in done.stderr
    assert json.loads(done.stdout)["node"]["nodeName"]


def test_a_root_that_is_not_there_is_said_by_its_option(tmp_path):
    """A mistyped --sysfs-root or --host-root is named, not read as a host without GPUs."""
    done = subprocess.run([sys.executable, "-m", "gpustats", "--once", "--state-dir",
                           str(tmp_path / "state"), "--sysfs-root", str(tmp_path / "sys-typo"),
                           "--host-root", str(tmp_path / "host-typo"), "--cgroup-root",
                           str(tmp_path), "--pod-resources-socket", "", "--log-root", ""],
                          capture_output=True, text=True, timeout=120, cwd=str(REPO_ROOT))
    assert done.returncode == 0, done.stderr
    said = [x for x in done.stderr.splitlines() if "is not a directory" in x]
    assert len(said) == 2 and all("WARNING" in x for x in said), done.stderr
    assert f"--sysfs-root {tmp_path / 'sys-typo'} is not a directory: no GPU" in said[0]
    assert f"--host-root {tmp_path / 'host-typo'} is not a directory" in said[1]

