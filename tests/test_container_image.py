"""The image, built by scripts/build-image.sh and run the way the DaemonSet runs it: read-only
root, every capability dropped, no new privileges, host network, a tmpfs state dir, a
simulator scenario mounted. Skips where podman is missing or cannot run a container here.

The build reuses what an earlier run made (the Debian base image, and the image itself when
its inputs are unchanged), so only the first run on a machine pays for the base.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, free_port, http_get
from tests.oci_images import busybox, rootfs_tar

TAG = "localhost/gpustats:test"
PROBE = "localhost/gpustats-probe:busybox"
GPU = "GPU-aaaaaaaa-1111-4111-8111-aaaaaaaaaaaa"


def _containers_conf(path: Path) -> Path:
    """No default rlimits (runc cannot raise them in some sandboxes); runc on hybrid cgroups."""
    text = "[containers]\ndefault_ulimits = []\n"
    if Path("/sys/fs/cgroup/unified").is_dir() and shutil.which("runc"):
        text += '[engine]\nruntime = "runc"\n'
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    if shutil.which("podman") is None:
        pytest.skip("podman not installed")
    tmp = tmp_path_factory.mktemp("image")
    env = dict(os.environ, CONTAINERS_CONF=str(_containers_conf(tmp / "containers.conf")))
    binary = busybox()
    if binary is None:
        pytest.skip("busybox-static not installed (needed to check podman can run here)")
    rootfs = tmp / "rootfs.tar"
    rootfs.write_bytes(rootfs_tar(binary))
    probe = subprocess.run(f"podman import --quiet {rootfs} {PROBE} >/dev/null && "
                           f"podman run --rm --network=none {PROBE} /bin/true",
                           shell=True, env=env, capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        pytest.skip(f"podman cannot run a container here: {probe.stderr.strip()[-300:]}")
    started = time.monotonic()
    build = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "build-image.sh"), TAG],
                           env=env,
                           capture_output=True, text=True, timeout=1500, cwd=REPO_ROOT)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    print(build.stdout, f"(build step {time.monotonic() - started:.0f} s)")
    return env, build.stdout, tmp


def _podman(env, *args, timeout=60, check=True):
    result = subprocess.run(["podman", *args], env=env, capture_output=True, text=True,
                            timeout=timeout)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_build_prints_size_and_stays_small(image):
    env, stdout, _ = image
    assert "image size" in stdout
    size = int(json.loads(_podman(env, "image", "inspect", TAG).stdout)[0]["Size"])
    assert size <= 300_000_000, size
    config = json.loads(_podman(env, "image", "inspect", TAG).stdout)[0]["Config"]
    assert config["Entrypoint"] == ["gpustats"]


def test_image_runs_like_the_daemonset(image):
    env, _, tmp = image
    scenario = tmp / "scenario.yaml"
    scenario.write_text(f"devices:\n  - {{uuid: {GPU}, minor: 0, power_watts: 300}}\n")
    port = free_port()
    name = f"gpustats-test-{port}"
    _podman(env, "run", "-d", "--name", name, "--read-only", "--cap-drop=ALL",
            "--security-opt=no-new-privileges", "--network=host",
            "--tmpfs", "/var/lib/gpustats:rw,size=16m",
            "-v", f"{scenario}:/etc/gpustats/scenario.yaml:ro,Z",
            TAG, f"--listen=127.0.0.1:{port}", "--simulate=/etc/gpustats/scenario.yaml",
            "--housekeeping-interval=0.5", "--pod-resources-socket=")
    try:
        deadline, body = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            try:
                status, body = http_get(f"http://127.0.0.1:{port}/stats/summary")
                if status == 200 and body["node"].get("accelerators"):
                    break
            except OSError:
                pass
            time.sleep(0.5)
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
