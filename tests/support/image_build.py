"""The container image built once per test session by scripts/build-image.sh, shared by the
tests that run it (tests/test_container_image.py) and push it to a registry
(tests/test_registry_roundtrip.py). Skips where podman is missing or cannot run a container.

The build reuses what an earlier run made (the Debian base image, and the image itself when
its inputs are unchanged), so only the first run on a machine pays for the base.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.oci_images import busybox, rootfs_tar

TAG = "localhost/gpustats:test"
PROBE = "localhost/gpustats-probe:busybox"
# Rootful podman raises RLIMIT_NOFILE and RLIMIT_NPROC in every container by default; where the
# host's hard limits are lower and podman may not raise them, runc fails with "error setting
# rlimit type 7" (or 6). docs/kubernetes.md documents this same file for `podman run`.
NO_DEFAULT_ULIMITS = "[containers]\ndefault_ulimits = []\n"


@dataclass(frozen=True)
class BuiltImage:
    env: dict[str, str]      # the environment podman runs in (CONTAINERS_CONF set)
    stdout: str              # build-image.sh's output
    image_id: str            # the image's ID as built (the tag may move under a later build)
    tmp: Path


def runc_engine() -> str:
    """The [engine] lines this host needs: runc on the hybrid cgroup layout (crun refuses it)."""
    if Path("/sys/fs/cgroup/unified").is_dir() and shutil.which("runc"):
        return '[engine]\nruntime = "runc"\n'
    return ""


def containers_conf(path: Path) -> Path:
    """No default rlimits (runc cannot raise them in some sandboxes); runc on hybrid cgroups."""
    text = NO_DEFAULT_ULIMITS + runc_engine()
    path.write_text(text)
    return path


def build_or_skip(tmp: Path, repo_root: Path) -> BuiltImage:
    """Build ``TAG`` with scripts/build-image.sh, or skip when this host cannot."""
    if shutil.which("podman") is None:
        pytest.skip("podman not installed")
    env = dict(os.environ, CONTAINERS_CONF=str(containers_conf(tmp / "containers.conf")))
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
    build = subprocess.run(["bash", str(repo_root / "scripts" / "build-image.sh"), TAG],
                           env=env, capture_output=True, text=True, timeout=1500, cwd=repo_root)
    if build.returncode != 0 and "mmdebstrap is not installed" in build.stderr:
        pytest.skip("no registry answered for the base image and mmdebstrap is not installed")
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    print(build.stdout, f"(build step {time.monotonic() - started:.0f} s)")
    image_id = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", TAG],
                              env=env, capture_output=True, text=True, timeout=60,
                              check=True).stdout.strip()
    return BuiltImage(env, build.stdout, image_id, tmp)
