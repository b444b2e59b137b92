"""``gpustats top`` in a terminal: driven in tmux against the demo daemon, it shows the demo's
tenants and quits on q; and its frame, built from a /metrics text, fits 80 columns."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys

import pytest

from gpustats.commands.top import build_view, parse_samples, render
from gpustats.demo.load import TENANTS
from tests.support.demo import start_demo
from tests.support.paths import REPO_ROOT
from tests.support.waiting import wait_until

METRICS = """\
# HELP gpustats_node_gpu_watts GPU power draw.
gpustats_node_gpu_watts{gpu="0",gpu_uuid="GPU-a",vendor="nvidia",node_name="n"} 300
gpustats_node_gpu_idle_watts{gpu="0",gpu_uuid="GPU-a",vendor="nvidia",node_name="n"} 60
gpustats_node_gpu_unallocated_idle_watts{gpu="0",gpu_uuid="GPU-a",vendor="nvidia"} 20
gpustats_node_gpu_unattributed_watts{gpu="0",gpu_uuid="GPU-a",vendor="nvidia"} 10
gpustats_node_gpu_duty_cycle_ratio{gpu="0",gpu_uuid="GPU-a",vendor="nvidia"} 0.5
gpustats_node_gpu_healthy{gpu="0",gpu_uuid="GPU-a",vendor="nvidia"} 1
gpustats_node_gpu_memory_used_bytes{gpu="0",gpu_uuid="GPU-a",vendor="nvidia"} 1073741824
gpustats_tenant_gpu_watts{gpu="0",gpu_uuid="GPU-a",kind="pod",tenant="ml/a \\"quoted\\""} 200
gpustats_tenant_gpu_idle_share_watts{gpu="0",gpu_uuid="GPU-a",kind="pod",\
tenant="ml/a \\"quoted\\""} 20
gpustats_tenant_gpu_watts{gpu="0",gpu_uuid="GPU-a",kind="job",tenant="job 7"} 70
gpustats_tenant_gpu_idle_share_watts{gpu="0",gpu_uuid="GPU-a",kind="job",tenant="job 7"} 20
gpustats_last_tick_timestamp_seconds{node_name="n"} 1.7e9
"""


def test_a_frame_splits_each_gpus_power_and_sorts_tenants_by_power():
    view = build_view(parse_samples(METRICS))
    lines = render(view, 80, 24)
    assert all(len(line) <= 80 for line in lines)
    gpu = next(line for line in lines if line.startswith("0 "))
    assert gpu.split()[:8] == ["0", "300W", "60W", "310W", "20W", "10W", "50%", "1.0/-"]
    tenants = [line for line in lines if line.startswith(("ml/", "job"))]
    assert tenants[0].startswith('ml/a "quoted"') and tenants[1].startswith("job 7")


def test_top_in_tmux_shows_the_demo_and_quits_on_q(start_daemon, tmp_path):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    daemon = start_demo(start_daemon, tmp_path)
    session = f"gpustats-top-{daemon.port}"
    command = (f"cd {shlex.quote(str(REPO_ROOT))} && {shlex.quote(sys.executable)} -m gpustats"
               f" top --url {daemon.base} --poll 0.2")
    env = {"TERM": "xterm-256color"}
    started = subprocess.run(["tmux", "-L", session, "new-session", "-d", "-s", session, "-x",
                              "80", "-y", "24", command], env={**_env(), **env})
    assert started.returncode == 0
    try:
        pods = [t.pod for t in TENANTS]
        assert wait_until(lambda: sum(p in _tmux(session) for p in pods) >= 3, timeout=30), \
            _tmux(session)
        screen = _tmux(session)
        assert "POWER" in screen and "TENANT" in screen
        assert all(len(line) <= 80 for line in screen.splitlines())
        subprocess.run(["tmux", "-L", session, "send-keys", "-t", session, "q"], check=True)
        assert wait_until(lambda: _alive(session) is False, timeout=10)
    finally:
        subprocess.run(["tmux", "-L", session, "kill-server"], capture_output=True)


def _env() -> dict:
    import os
    return dict(os.environ)


def _tmux(session: str) -> str:
    return subprocess.run(["tmux", "-L", session, "capture-pane", "-p", "-t", session],
                          capture_output=True, text=True).stdout


def _alive(session: str) -> bool:
    """Whether the session (and so top) is still running: it ends when top exits."""
    return subprocess.run(["tmux", "-L", session, "has-session", "-t", session],
                          capture_output=True).returncode == 0
