"""The image, built by scripts/build-image.sh and run the way the DaemonSet runs it: read-only
root, every capability dropped, no new privileges, host network, a tmpfs state dir, a
simulator scenario mounted. Skips where podman is missing or cannot run a container here.

The build is the session's shared one (the ``built_image`` fixture, tests/support/image_build.py).
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.support.daemon import free_port, http_get
from tests.support.gpus import GPU_A as GPU
from tests.support.waiting import poll


@pytest.fixture(scope="module")
def image(built_image):
    # By ID: the tag is the session's, but a later build elsewhere on the host may move it.
    return built_image.env, built_image.stdout, built_image.tmp, built_image.image_id


def _podman(env, *args, timeout=60, check=True):
    result = subprocess.run(["podman", *args], env=env, capture_output=True, text=True,
                            timeout=timeout)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_build_prints_size_and_stays_small(image):
    env, stdout, _, image_id = image
    assert "image size" in stdout
    size = int(json.loads(_podman(env, "image", "inspect", image_id).stdout)[0]["Size"])
    assert size <= 300_000_000, size
    config = json.loads(_podman(env, "image", "inspect", image_id).stdout)[0]["Config"]
    assert config["Entrypoint"] == ["gpustats"]


def test_image_runs_like_the_daemonset(image):
    env, _, tmp, image_id = image
    scenario = tmp / "scenario.yaml"
    scenario.write_text(f"devices:\n  - {{uuid: {GPU}, minor: 0, power_watts: 300}}\n")
    port = free_port()
    name = f"gpustats-test-{port}"
    _podman(env, "run", "-d", "--name", name, "--read-only", "--cap-drop=ALL",
            "--security-opt=no-new-privileges", "--network=host",
            "--tmpfs", "/var/lib/gpustats:rw,size=16m",
            "-v", f"{scenario}:/etc/gpustats/scenario.yaml:ro,Z",
            image_id, f"--listen=127.0.0.1:{port}", "--simulate=/etc/gpustats/scenario.yaml",
            "--housekeeping-interval=0.5", "--pod-resources-socket=")
    try:
        last: list = [None]

        def served() -> bool:
            try:
                status, last[0] = http_get(f"http://127.0.0.1:{port}/stats/summary")
            except OSError:
                return False
            return status == 200 and bool(last[0]["node"].get("accelerators"))

        poll(served, timeout=60, interval=0.5)
        body = last[0]
        logs = _podman(env, "logs", name, check=False).stdout
        assert isinstance(body, dict) and body["node"]["accelerators"][0]["id"] == GPU, logs
        # gpustats is PID 1 and has no capability at all.
        status_text = _podman(env, "exec", name, "cat", "/proc/1/status").stdout
        caps = {k: v.strip() for k, v in (line.split(":", 1) for line in status_text.splitlines()
                                          if line.startswith("Cap"))}
        assert caps["CapEff"] == caps["CapPrm"] == "0000000000000000", caps
        cmdline = _podman(env, "exec", name, "cat", "/proc/1/cmdline").stdout
        assert "gpustats" in cmdline
        started = time.monotonic()
        _podman(env, "stop", "--time=10", name, timeout=30)
        stopped_in = time.monotonic() - started
        state = json.loads(_podman(env, "inspect", name).stdout)[0]["State"]
        assert state["ExitCode"] == 0 and stopped_in < 5.0, (stopped_in, state)
        logs = _podman(env, "logs", name)
        assert "received SIGTERM" in logs.stdout + logs.stderr
    finally:
        _podman(env, "rm", "-f", name, check=False)
