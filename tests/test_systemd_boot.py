"""The shipped unit under a real systemd: a Debian root booted with systemd-nspawn.

The root (minbase, systemd, python3) is made once by mmdebstrap and cached in the temporary
directory, keyed by what goes into it; each run unpacks it, installs the wheel built from this
checkout into /opt/gpustats as the README ("Install on bare metal") says, and boots it. Inside,
a oneshot unit (systemd_boot/check-unit.sh) starts, probes, reloads and stops gpustats.service on
hosts with and without the kubelet's directories. Skipped without root, mmdebstrap or
systemd-nspawn, or where this host does not let nspawn run a container.
"""

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

SUITE = "bookworm"
PACKAGES = ("systemd", "systemd-sysv", "dbus", "procps", "python3", "python3-venv")
CHECK_SCRIPT = Path(__file__).parent / "systemd_boot" / "check-unit.sh"
CHECK_UNIT = """[Unit]
Description=Drive gpustats.service through systemctl and power off
After=multi-user.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/check-unit
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
"""
# The simulator stands in for the GPUs; the daemon otherwise runs on the container's defaults.
CONFIG = "simulate: /etc/gpustats/two-gpus.yaml\nhousekeeping_interval: 1\n"
# No unit allocation or machined registration: the host need not run systemd itself.
NSPAWN = ("systemd-nspawn", "--quiet", "--register=no", "--keep-unit")
ROUNDS = ("bare", "relaxed", "kubelet")


def _need_tools():
    if os.geteuid() != 0:
        pytest.skip("systemd-nspawn needs root")
    for tool in ("mmdebstrap", "systemd-nspawn"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed")


def _cached_root_tarball():
    mirror = os.environ.get("GPUSTATS_DEBIAN_MIRROR", "")
    key = hashlib.sha256(repr((SUITE, PACKAGES, mirror, platform.machine())).encode()).hexdigest()
    cache = Path(tempfile.gettempdir()) / "gpustats-systemd-root"
    tarball = cache / f"{SUITE}-{key[:16]}.tar"
    if tarball.exists():
        return tarball
    cache.mkdir(exist_ok=True)
    partial = cache / f"{tarball.stem}.partial.tar"
    command = ["mmdebstrap", "--quiet", "--format=tar", "--variant=minbase",
               "--include=" + ",".join(PACKAGES),
               "--dpkgopt=path-exclude=/usr/share/doc/*",
               "--dpkgopt=path-exclude=/usr/share/man/*",
               "--dpkgopt=path-exclude=/usr/share/locale/*", SUITE, str(partial)]
    if mirror:
        command.append(mirror)
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        pytest.skip("mmdebstrap took longer than 15 minutes (mirror too slow)")
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        pytest.skip(f"mmdebstrap could not make a {SUITE} root: {result.stderr[-500:]}")
    partial.rename(tarball)
    return tarball


def _wheels(dest):
    """gpustats from this checkout and its dependencies as binary wheels for bookworm's 3.11."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--wheel-dir", str(dest), str(REPO_ROOT)], check=True, timeout=600,
                   capture_output=True)
    wheel = next(dest.glob("gpustats-*.whl"))
    machine = platform.machine()
    platforms = [f"--platform=manylinux{tag}_{machine}"
                 for tag in ("2014", "_2_17", "_2_28", "_2_5", "1")]
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
                    "--python-version=3.11", "--implementation=cp", *platforms,
                    "--dest", str(dest), str(wheel)], check=True, timeout=600,
                   capture_output=True)


def _nspawn(root, *args, timeout):
    return subprocess.run([*NSPAWN, "--directory", str(root), *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def booted(tmp_path_factory):
    """The report of the check unit, its journal of gpustats.service, and the console."""
    _need_tools()
    tarball = _cached_root_tarball()
    work = tmp_path_factory.mktemp("systemd-boot")
    root, results = work / "root", work / "results"
    root.mkdir()
    results.mkdir()
    try:
        subprocess.run(["tar", "-C", str(root), "-xf", str(tarball)], check=True, timeout=300)
        probe = _nspawn(root, "--pipe", "/bin/true", timeout=60)
        if probe.returncode != 0:
            pytest.skip(f"systemd-nspawn cannot run a container here: {probe.stderr[-300:]}")
        _wheels(root / "wheels")
        (root / "etc" / "hostname").write_text("gpu-node-1\n")
        install = _nspawn(root, "--pipe", "/bin/sh", "-ec",
                          "python3 -m venv /opt/gpustats\n"
                          "/opt/gpustats/bin/pip install -q --no-index --find-links /wheels "
                          "gpustats\n"
                          "ln -s /opt/gpustats/bin/gpustats /usr/local/bin/gpustats\n"
                          "rm -r /wheels", timeout=600)
        assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
        systemd_dir = root / "etc" / "systemd" / "system"
        shutil.copy(REPO_ROOT / "systemd" / "gpustats.service", systemd_dir)
        (root / "etc" / "gpustats").mkdir()
        shutil.copy(REPO_ROOT / "examples" / "two-gpus.yaml", root / "etc" / "gpustats")
        (root / "etc" / "gpustats" / "config.yaml").write_text(CONFIG)
        shutil.copy(CHECK_SCRIPT, root / "usr" / "local" / "sbin" / "check-unit")
        (systemd_dir / "check-unit.service").write_text(CHECK_UNIT)
        (systemd_dir / "multi-user.target.wants").mkdir(exist_ok=True)
        (systemd_dir / "multi-user.target.wants" / "check-unit.service").symlink_to(
            "/etc/systemd/system/check-unit.service")
        boot = _nspawn(root, "--boot", "--private-network", f"--bind={results}:/results",
                       timeout=300)
        report_file, journal_file = results / "report.txt", results / "journal.txt"
        report = dict(line.split("=", 1) for line in report_file.read_text().splitlines()
                      if "=" in line) if report_file.exists() else {}
        journal = journal_file.read_text() if journal_file.exists() else ""
        yield report, journal, boot.stdout[-4000:] + boot.stderr[-2000:]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_check_unit_ran_to_the_end(booted):
    report, journal, console = booted
    assert report.get("done") == "1", console


@pytest.mark.parametrize("name", ROUNDS)
def test_unit_starts_serves_reloads_and_stops(booted, name):
    report, journal, _ = booted
    got = {k.split(".", 1)[1]: v for k, v in report.items() if k.startswith(name + ".")}
    assert got.get("start_rc") == "0", journal[-3000:]
    # Type=notify: systemctl start returns once the daemon sent READY=1.
    assert (got["started_ActiveState"], got["started_SubState"], got["started_Type"]) == (
        "active", "running", "notify"), got
    assert got["readyz"] == "200 ready", got
    assert got["reload_rc"] == "0" and got["pid_kept"] == "0", got
    assert int(got["sighup_logged"]) >= 1, journal[-3000:]
    assert got["stop_rc"] == "0", got
    assert (got["stopped_ActiveState"], got["stopped_Result"], got["stopped_ExecMainStatus"]) == (
        "inactive", "success", "0"), journal[-3000:]
