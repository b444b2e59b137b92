"""End to end: a fake sysfs with an NVIDIA GPU and no NVML library, then a library appearing.

The library is a tiny C libnvidia-ml built here with the C compiler (skipped without one). It
exports only a few symbols, so the daemon also shows FunctionNotFound → absent values.
"""

import os
import re
import shutil
import subprocess
import time

import pytest

from tests.support.waiting import wait_until

TINY_NVML = r"""
#include <string.h>
typedef int nvmlReturn_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
static int dev = 1;
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { return 0; }
nvmlReturn_t nvmlInit_v2(void) { return 0; }
nvmlReturn_t nvmlShutdown(void) { return 0; }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) { *count = 1; return 0; }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **h) {
    if (i != 0) return 2; *h = &dev; return 0; }
nvmlReturn_t nvmlDeviceGetUUID(void *h, char *buf, unsigned int len) {
    strncpy(buf, "GPU-11111111-2222-3333-4444-555555555555", len); return 0; }
nvmlReturn_t nvmlDeviceGetName(void *h, char *buf, unsigned int len) {
    strncpy(buf, "Tiny Test GPU", len); return 0; }
nvmlReturn_t nvmlDeviceGetMemoryInfo(void *h, nvmlMemory_t *m) {
    m->total = 1000; m->used = 250; m->free = 750; return 0; }
nvmlReturn_t nvmlDeviceGetPowerUsage(void *h, unsigned int *mw) { *mw = 42000; return 0; }
"""


def _build_tiny_nvml(workdir, target_dir):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the test NVML library")
    src = workdir / "tiny_nvml.c"
    src.write_text(TINY_NVML)
    tmp_out = workdir / "libnvidia-ml.so.1.partial"
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libnvidia-ml.so.1", "-o", str(tmp_out),
                    str(src)], check=True)
    os.replace(tmp_out, target_dir / "libnvidia-ml.so.1")   # appears atomically


def _load_failures(log):
    return len(re.findall(r"NVML not available", log))


def test_keeps_serving_and_retries_at_interval(start_daemon, fake_sysfs, tmp_path):
    empty_lib_dir = tmp_path / "lib"
    empty_lib_dir.mkdir()
    daemon = start_daemon("--sysfs-root", str(fake_sysfs), "--nvml-retry-interval", "0.5",
                          "--housekeeping-interval", "0.1",
                          env={"LD_LIBRARY_PATH": str(empty_lib_dir)})
    daemon.wait_ready()
    time.sleep(2.0)                  # measures: 2 s of retries at their interval
    status, summary = daemon.get("/stats/summary")
    assert status == 200 and "accelerators" not in summary["node"] and summary["pods"] == []
    assert summary["node"]["cpu"]["usageCoreNanoSeconds"] > 0
    failures = _load_failures(daemon.log())
    # 2+ s at a 0.5 s retry interval: about 4-5 attempts, each logged once — not one per tick
    # (that would be ~20).
    assert 3 <= failures <= 7, daemon.log()


def test_library_appearing_is_picked_up_without_restart(start_daemon, fake_sysfs, tmp_path):
    lib_dir = tmp_path / "lib"
    lib_dir.mkdir()
    daemon = start_daemon("--sysfs-root", str(fake_sysfs), "--nvml-retry-interval", "0.3",
                          "--housekeeping-interval", "0.1",
                          env={"LD_LIBRARY_PATH": str(lib_dir)})
    daemon.wait_ready()
    wait_until(lambda: _load_failures(daemon.log()) >= 1, timeout=10)
    assert _load_failures(daemon.log()) >= 1
    _build_tiny_nvml(tmp_path, lib_dir)
    summary = daemon.wait_for(lambda s: s["node"].get("accelerators"), timeout=15)
    acc = summary["node"]["accelerators"][0]
    assert acc["id"] == "GPU-11111111-2222-3333-4444-555555555555"
    assert acc["model"] == "Tiny Test GPU"
    assert acc["memoryTotal"] == 1000 and acc["memoryUsed"] == 250
    assert acc["powerWatts"] == 42.0
    # Symbols the tiny library lacks are FunctionNotFound: absent, never 0.
    for key in ("dutyCycle", "temperatureCelsius", "powerLimitWatts"):
        assert key not in acc
    assert "NVML loaded" in daemon.log()
    assert daemon.proc.poll() is None


def test_nvml_is_loaded_from_the_driver_tree_given(start_daemon, fake_sysfs, tmp_path):
    """--nvml-driver-root: the library comes from the tree (an absolute link in it followed
    inside it), not the search path, where there is none."""
    root = tmp_path / "driver"
    real_dir = root / "usr" / "lib" / "x86_64-linux-gnu"
    real_dir.mkdir(parents=True)
    _build_tiny_nvml(tmp_path, real_dir)
    (real_dir / "libnvidia-ml.so.1").rename(real_dir / "libnvidia-ml.so.580.65.06")
    lib64 = root / "usr" / "lib64"
    lib64.mkdir(parents=True)
    (lib64 / "libnvidia-ml.so.1").symlink_to(
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.65.06")       # absolute, in the tree
    empty_lib_dir = tmp_path / "lib"
    empty_lib_dir.mkdir()
    daemon = start_daemon("--sysfs-root", str(fake_sysfs), "--nvml-driver-root", str(root),
                          "--housekeeping-interval", "0.1",
                          env={"LD_LIBRARY_PATH": str(empty_lib_dir)})
    daemon.wait_ready()
    summary = daemon.wait_for(lambda s: s["node"].get("accelerators"), timeout=15)
    assert summary["node"]["accelerators"][0]["model"] == "Tiny Test GPU"
    assert f"NVML library from the driver tree: {real_dir}" in daemon.log()


def test_a_driver_tree_without_nvml_is_retried_as_a_missing_library(start_daemon, fake_sysfs,
                                                                     tmp_path):
    daemon = start_daemon("--sysfs-root", str(fake_sysfs), "--nvml-driver-root",
                          str(tmp_path / "empty"), "--nvml-retry-interval", "0.5",
                          "--housekeeping-interval", "0.1")
    daemon.wait_ready()
    wait_until(lambda: _load_failures(daemon.log()) >= 2, timeout=10)
    assert re.search(r"NVML not available \(library_not_found: no libnvidia-ml.so.1 under",
                     daemon.log())
    assert _load_failures(daemon.log()) >= 2
