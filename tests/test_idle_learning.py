"""Idle is learned from idle ticks only; a GPU never seen idle is billed in full."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpustats.attribution import active_energy_joules, idle_tick
from gpustats.model.device import ProcessReading, ProcessSample
from tests.support.paths import REPO_ROOT

WORKER = ProcessReading(pid=7, memory_used_bytes=1 << 30)


def sample(pid: int, sm: int) -> ProcessSample:
    return ProcessSample(pid=pid, timestamp_us=1, sm_util_percent=sm)


@pytest.mark.parametrize("known, processes, samples, duty, mig, idle", [
    (True, (), None, 0, False, True),                    # nothing listed, nothing running
    (True, (), None, 40, False, False),                  # something runs (a graphics job)
    (True, (), None, None, False, False),                # duty not read: cannot tell
    (True, (), None, None, True, True),                  # MIG reports no duty: empty list
    (False, (), None, 0, False, False),                  # process list unreadable
    (True, (WORKER,), (sample(7, 0),), 0, False, True),  # an idle context
    (True, (WORKER,), (), 0, False, True),               # no sample since the last: idle
    (True, (WORKER,), (sample(7, 30),), 0, False, False),
    (True, (WORKER,), None, 0, False, False),            # no sample source: may be working
    (True, (WORKER,), (sample(7, 0),), 35, False, False),
])
def test_which_ticks_are_idle(known, processes, samples, duty, mig, idle):
    assert idle_tick(known, processes, samples, duty, mig) is idle


def test_with_no_idle_known_the_whole_tick_is_active():
    assert active_energy_joules(300.0, None, 1.0) == 300.0
    assert active_energy_joules(300.0, 100.0, 1.0) == 200.0
    assert active_energy_joules(None, None, 1.0) is None


def test_a_gpu_busy_from_the_start_is_billed_in_full_not_learned_as_idle(tmp_path):
    """examples/two-gpus.yaml's GPU 0 starts busy at 310 W and 40 % duty: the first tick's
    power was its learned idle (active 0 W); now no idle is known and all of it is active."""
    out = subprocess.run(
        [sys.executable, "-m", "gpustats", "--once", "--simulate",
         str(REPO_ROOT / "examples" / "two-gpus.yaml"), "--state-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, check=True)
    gpu0 = json.loads(out.stdout)["node"]["accelerators"][0]
    assert gpu0["powerWatts"] == pytest.approx(310.0)
    assert "idlePowerWatts" not in gpu0
    assert gpu0["activePowerWatts"] == pytest.approx(310.0, rel=0.01)
