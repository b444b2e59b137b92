"""The simulator's AMD and Intel GPUs: scenario keys, and the sysfs and DRM fdinfo trees that
``SimulatedDrm`` renders, read back as the kernel documents them (amdgpu_pm.c, the hwmon ABI,
Documentation/gpu/drm-usage-stats.rst) — not through ``gpustats.sources.drm``."""

import os
import re
import threading
import time
from pathlib import Path

import pynvml
import pytest

from gpustats.simulator import SimulatedNvml
from gpustats.simulator.drm import SimulatedDrm
from gpustats.simulator.scenario import load_scenario, parse_scenario
from tests.support.clock import Clock
from tests.support.fakehost import write_scenario
from tests.support.gpus import GPU_A as A, GPU_B as B
from tests.support.paths import REPO_ROOT

AMD = "GPU-0123456789abcdef"
XE = "GPU-xe-card"
I915 = "GPU-i915-card"
GIB = 1 << 30
UNITS = {"": 1, "KiB": 1 << 10, "MiB": 1 << 20}


def amd(uuid=AMD, **fields):
    return {"uuid": uuid, "vendor": "amd", **fields}


def intel(uuid=XE, driver="xe", **fields):
    return {"uuid": uuid, "vendor": "intel", "driver": driver, **fields}


def parse_fdinfo(text: str) -> dict[str, str]:
    """``key: value`` lines (drm-usage-stats.rst); the value without surrounding blanks."""
    pairs = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        pairs[key] = value.strip()
    return pairs


def size_bytes(value: str) -> int:
    """``N [KiB|MiB]``; no unit means bytes."""
    number, _, unit = value.partition(" ")
    return int(number) * UNITS[unit]


def read(path: Path) -> str:
    return path.read_text()


class Tree:
    """A rendered scenario, read back through the paths a reader would take."""

    def __init__(self, tmp_path, scenario: dict, clock=None):
        self.clock = clock or Clock()
        self.sim = SimulatedDrm(parse_scenario(scenario), str(tmp_path / "root"),
                                monotonic=self.clock)
        self.sys = Path(self.sim.sysfs_root)
        self.proc = Path(self.sim.proc_root)

    def device(self, bdf: str) -> Path:
        return self.sys / "bus" / "pci" / "devices" / bdf

    def hwmon(self, bdf: str) -> Path:
        (only,) = (self.device(bdf) / "hwmon").glob("hwmon*")
        return only

    def fdinfo(self, pid: int, fd: int) -> dict[str, str]:
        return parse_fdinfo(read(self.proc / str(pid) / "fdinfo" / str(fd)))

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds
        self.sim.render()


# ------------------------------------------------------------ scenario keys

def test_vendor_and_driver_defaults_and_addresses():
    s = parse_scenario({"devices": [{"uuid": A}, amd(), {"uuid": B},
                                    intel(I915, driver="i915", pci_bus_id="00000000:3B:00.0"),
                                    {"uuid": XE, "vendor": "intel"}]})
    a, m, b, i, x = s.devices
    assert (a.vendor, a.driver, a.index, a.minor, a.pci_bus_id) == (
        "nvidia", None, 0, 0, "00000000:01:00.0")
    assert (b.index, b.minor, b.pci_bus_id) == (1, 1, "00000000:02:00.0")   # NVIDIA's own count
    assert (m.vendor, m.driver, m.index, m.minor, m.pci_bus_id) == (
        "amd", "amdgpu", 0, 0, "0000:03:00.0")
    assert m.name == "AMD Instinct MI300X" and (m.pci_device_id, m.pci_class) == (0x74A1, 0x038000)
    assert (i.driver, i.minor, i.pci_bus_id) == ("i915", 1, "0000:3b:00.0")   # sysfs form
    assert (x.driver, x.minor, x.pci_bus_id) == ("xe", 2, "0000:05:00.0")
    assert x.name.startswith("Intel(R) Data Center GPU") and x.pci_device_id == 0x56C0
    assert s.drm_devices == (m, i, x)
    assert parse_scenario({"devices": [amd(pci_class="0x120000", pci_device_id="0x74a5")]}
                          ).devices[0].pci_class == 0x120000


@pytest.mark.parametrize("scenario, message", [
    ({"devices": [{"uuid": A, "vendor": "matrox"}]}, r"vendor: expected one of nvidia, amd, intel"),
    ({"devices": [intel(driver="nouveau")]}, r"driver: expected one of xe, i915"),
    ({"devices": [amd(driver="i915")]}, r"driver: expected one of amdgpu"),
    ({"devices": [{"uuid": A, "driver": "xe"}]}, r"\['driver'\] are for AMD and Intel GPUs"),
    ({"devices": [{"uuid": A, "pci_class": 0x30000}]}, r"are for AMD and Intel GPUs"),
    ({"devices": [amd(mig_instances=[{"gpu_instance_id": 1}], gpm={}, accounting=True)]},
     r"\['accounting', 'gpm', 'mig_instances'\] not for an amd GPU"),
    ({"devices": [amd(pstate=2)]}, r"\['pstate'\] not for an amd GPU"),
    ({"devices": [amd(lost=True)]}, r"\['lost'\] not for an amd GPU"),
    ({"devices": [intel(utilization_percent=50)]}, r"\['utilization_percent'\] not for an intel"),
    ({"devices": [amd(energy_counter_base_millijoules=5)]}, r"not for an amd GPU"),
    ({"devices": [amd(unsupported=["gpm"])]}, r"unsupported: unknown names \['gpm'\]"),
    ({"devices": [amd(pci_device_id="zz")]}, r"pci_device_id: expected a hex number"),
    ({"devices": [amd(pci_class=1 << 24)]}, r"pci_class: expected a 24-bit number"),
    ({"devices": [amd(pci_bus_id="3b:00.0x")]}, r"pci_bus_id: expected domain:bus:device"),
    ({"devices": [amd(minor=64)]}, r"minor: a DRM card number is < 64"),
    ({"devices": [amd(), intel(minor=0)]}, r"devices\[1\]\.minor: card0 is also devices\[0\]'s"),
    ({"devices": [{"uuid": A, "pci_bus_id": "00000000:3B:00.0"},
                  amd(pci_bus_id="0000:3b:00.0")]}, r"devices\[1\]\.pci_bus_id: .* devices\[0\]'s"),
    ({"devices": [amd()], "processes": [{"pid": 1, "device": AMD, "mps": True}]},
     r"processes\[0\]: \['mps'\] not for a process on an amd GPU"),
    ({"devices": [intel()], "processes": [{"pid": 1, "device": XE, "gpu_instance_id": 1,
                                           "between_ticks": True}]},
     r"\['between_ticks', 'gpu_instance_id'\] not for a process on an intel GPU"),
    ({"devices": [{"uuid": A}], "processes": [{"pid": 1, "device": A, "engine": "gfx"}]},
     r"\['engine'\] not for a process on an nvidia GPU"),
    ({"devices": [amd()], "processes": [{"pid": 1, "device": AMD, "engine": "rcs"}]},
     r"processes\[0\]\.engine: amdgpu names gfx, compute"),
    ({"devices": [intel(driver="i915")], "processes": [{"pid": 1, "device": XE, "engine": "ccs"}]},
     r"engine: i915 names render, copy"),
    ({"devices": [amd()], "processes": [{"pid": 1, "device": AMD, "fds": 0}]},
     r"fds: must be >= 1"),
    ({"devices": [amd()], "processes": [{"pid": 1, "device": AMD, "fds": 65}]},
     r"fds: must be <= 64"),
    ({"devices": [amd()], "xid_events": [{"device": AMD, "xid": 79}]},
     r"xid_events\[0\]\.device: an amd GPU"),
])
def test_bad_drm_scenarios_are_refused(scenario, message):
    with pytest.raises(ValueError, match=message):
        parse_scenario(scenario)


def test_the_examples_are_drm_nodes():
    mi300x = load_scenario(str(REPO_ROOT / "examples" / "amd-mi300x.yaml"))
    assert len(mi300x.devices) == 8 and {d.vendor for d in mi300x.devices} == {"amd"}
    assert {d.power_limit_watts for d in mi300x.devices} == {750}
    assert {d.memory_total_bytes for d in mi300x.devices} == {192 * GIB}
    flex = load_scenario(str(REPO_ROOT / "examples" / "intel-flex.yaml"))
    assert {(d.vendor, d.driver) for d in flex.devices} == {("intel", "xe")}
    assert mi300x.processes and flex.processes


# ------------------------------------------------------------ the NVML fake

@pytest.fixture
def nvml(installed_nvml):
    """The fake NVML installed for a scenario: the simulator."""
    return lambda scenario: installed_nvml(scenario)[0]


def _nvml_view():
    out = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        out.append((pynvml.nvmlDeviceGetUUID(h), pynvml.nvmlDeviceGetMinorNumber(h),
                    pynvml.nvmlDeviceGetPciInfo(h).busId, pynvml.nvmlDeviceGetName(h),
                    pynvml.nvmlDeviceGetMemoryInfo(h).used, [p.pid for p in procs]))
    return out


def test_nvml_lists_only_the_nvidia_gpus_of_a_mixed_scenario_as_without_the_others(nvml):
    nvidia = {"devices": [{"uuid": A, "memory_used_bytes": 5}, {"uuid": B}],
              "processes": [{"pid": 7, "device": A, "sm_util_percent": 10},
                            {"pid": 8, "device": B, "memory_used_bytes": GIB}]}
    nvml(nvidia)
    alone = _nvml_view()
    pynvml.nvmlShutdown()
    mixed = {"devices": [amd(), nvidia["devices"][0], intel(), nvidia["devices"][1]],
             "processes": [{"pid": 9, "device": AMD, "sm_util_percent": 50},
                           *nvidia["processes"], {"pid": 7, "device": XE}]}
    sim = nvml(mixed)
    assert _nvml_view() == alone
    assert [d.uuid for d in sim.scenario.devices] == [A, B]
    assert {p.pid for p in sim.scenario.processes} == {7, 8}
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByUUID(AMD)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(2)


def test_an_all_drm_example_leaves_nvml_without_gpus():
    sim = SimulatedNvml(str(REPO_ROOT / "examples" / "amd-mi300x.yaml"))
    sim.install()
    try:
        pynvml.nvmlInit()
        assert pynvml.nvmlDeviceGetCount() == 0
        pynvml.nvmlShutdown()
    finally:
        sim.uninstall()


# ------------------------------------------------------------ the sysfs tree

def test_amd_sysfs_files_in_the_kernels_formats(tmp_path):
    t = Tree(tmp_path, {"devices": [amd(name="AMD Instinct MI300X", memory_total_bytes=192 * GIB,
                                        utilization_percent=85, memory_utilization_percent=30,
                                        power_watts=612.5, power_limit_watts=750,
                                        temperature_celsius=58, memory_temperature_celsius=61)],
                        "processes": [{"pid": 42, "device": AMD, "memory_used_bytes": 3 * GIB}]})
    dev = t.device("0000:01:00.0")
    assert dev.is_symlink() and dev.is_dir()
    assert int(read(dev / "vendor"), 16) == 0x1002 and read(dev / "vendor") == "0x1002\n"
    assert read(dev / "device") == "0x74a1\n" and read(dev / "class") == "0x038000\n"
    assert os.path.basename(os.readlink(dev / "driver")) == "amdgpu"
    assert (dev / "driver").resolve() == (t.sys / "bus/pci/drivers/amdgpu").resolve()
    assert (t.sys / "bus/pci/drivers/amdgpu/0000:01:00.0").resolve() == dev.resolve()
    assert read(dev / "drm/card0/dev") == "226:0\n"
    assert read(dev / "drm/renderD128/dev") == "226:128\n"
    assert (t.sys / "class/drm/card0/device").resolve() == dev.resolve()
    assert read(t.sys / "class/drm/renderD128/device/vendor") == "0x1002\n"
    assert read(dev / "gpu_busy_percent") == "85\n" and read(dev / "mem_busy_percent") == "30\n"
    assert int(read(dev / "mem_info_vram_total")) == 192 * GIB
    assert int(read(dev / "mem_info_vram_used")) == 3 * GIB
    assert re.fullmatch(r"[0-9a-f]{16}\n", read(dev / "unique_id"))
    assert read(dev / "unique_id") == "0123456789abcdef\n"      # from the scenario's UUID
    assert read(dev / "product_name") == "AMD Instinct MI300X\n"
    hwmon = t.hwmon("0000:01:00.0")
    assert read(hwmon / "name") == "amdgpu\n"
    assert int(read(hwmon / "power1_average")) == 612_500_000          # µW
    assert int(read(hwmon / "power1_cap")) == 750_000_000
    assert int(read(hwmon / "temp1_input")) == 58_000                  # m°C
    assert read(hwmon / "temp2_label") == "junction\n"
    assert int(read(hwmon / "temp3_input")) == 61_000
    assert t.sim.vendors == {"amd"}


def test_intel_sysfs_files_in_the_kernels_formats(tmp_path):
    t = Tree(tmp_path, {"devices": [intel(power_watts=120, power_limit_watts=150,
                                          energy_counter_base_millijoules=5000,
                                          temperature_celsius=61, memory_temperature_celsius=66),
                                    intel(I915, driver="i915", pci_bus_id="0000:b3:00.0")]})
    xe, i915 = t.device("0000:01:00.0"), t.device("0000:b3:00.0")
    assert read(xe / "vendor") == "0x8086\n" and read(xe / "device") == "0x56c0\n"
    assert os.path.basename(os.readlink(xe / "driver")) == "xe"
    assert os.path.basename(os.readlink(i915 / "driver")) == "i915"
    assert read(i915 / "drm/card1/dev") == "226:1\n"
    assert read(i915 / "drm/renderD129/dev") == "226:129\n"
    hwmon = t.hwmon("0000:01:00.0")
    assert read(hwmon / "name") == "xe\n"
    assert int(read(hwmon / "energy1_input")) == 5_000_000            # the base, in µJ
    assert int(read(hwmon / "power1_max")) == 150_000_000
    assert int(read(hwmon / "temp2_input")) == 61_000 and int(read(hwmon / "temp3_input")) == 66_000
    assert not (xe / "gpu_busy_percent").exists() and not (xe / "unique_id").exists()
    i915_hwmon = t.hwmon("0000:b3:00.0")
    assert read(i915_hwmon / "name") == "i915\n"
    assert sorted(p.name for p in i915_hwmon.iterdir()) == ["energy1_input", "name", "power1_max"]
    assert t.sim.vendors == {"intel"}


def test_unsupported_readings_leave_their_files_out(tmp_path):
    t = Tree(tmp_path, {"devices": [amd(unsupported=["utilization", "memory", "power",
                                                     "temperature", "unique_id"]),
                                    intel(unsupported=["power", "power_limit",
                                                       "memory_temperature"])]})
    dev, hwmon = t.device("0000:01:00.0"), t.hwmon("0000:01:00.0")
    for gone in ("gpu_busy_percent", "mem_busy_percent", "mem_info_vram_total", "unique_id"):
        assert not (dev / gone).exists()
    assert sorted(p.name for p in hwmon.iterdir()) == [
        "name", "power1_cap", "temp3_input", "temp3_label"]
    assert sorted(p.name for p in t.hwmon("0000:02:00.0").iterdir()) == ["name", "temp2_input"]


# ------------------------------------------------------------ fd and fdinfo

def test_fds_and_fdinfo_in_the_kernels_formats(tmp_path):
    t = Tree(tmp_path, {
        "devices": [amd(), intel(), intel(I915, driver="i915")],
        "processes": [{"pid": 100, "device": AMD, "sm_util_percent": 50,
                       "memory_used_bytes": 3 * GIB},
                      {"pid": 100, "device": XE, "fds": 2, "memory_used_bytes": 1536 << 10},
                      {"pid": 200, "device": I915, "memory_used_bytes": 1000}]})
    fd = t.proc / "100" / "fd"
    assert sorted(int(n.name) for n in fd.iterdir()) == [0, 1, 2, 3, 4, 5]
    assert [os.readlink(fd / str(n)) for n in range(6)] == [
        "/dev/null"] * 3 + ["/dev/dri/renderD128", "/dev/dri/renderD129", "/dev/dri/renderD129"]
    assert "drm-driver" not in t.fdinfo(100, 0)
    a = t.fdinfo(100, 3)
    assert (a["pos"], a["flags"]) == ("0", "02100002") and a["mnt_id"].isdigit()
    assert (a["drm-driver"], a["drm-pdev"]) == ("amdgpu", "0000:01:00.0")
    assert size_bytes(a["drm-resident-vram"]) == 3 * GIB == size_bytes(a["drm-total-vram"])
    assert a["drm-resident-vram"] == "3072 MiB"         # the largest unit that divides it
    assert size_bytes(a["drm-memory-vram"]) == 3 * GIB and a["drm-memory-vram"].endswith(" KiB")
    assert "drm-engine-gfx" not in a                    # no time yet: amdgpu leaves it out
    x, x_dup = t.fdinfo(100, 4), t.fdinfo(100, 5)
    assert x == x_dup and x["drm-driver"] == "xe" and x["drm-pdev"] == "0000:02:00.0"
    assert size_bytes(x["drm-resident-vram0"]) == 1536 << 10
    assert x["drm-resident-vram0"] == "1536 KiB"
    assert x["drm-cycles-rcs"] == "0" and int(x["drm-total-cycles-rcs"]) > 0
    assert x["drm-total-cycles-ccs"] == x["drm-total-cycles-rcs"]   # one GPU timestamp
    assert x["drm-engine-capacity-ccs"] == "4" and "drm-engine-capacity-rcs" not in x
    i = t.fdinfo(200, 3)
    assert i["drm-driver"] == "i915" and i["drm-engine-render"] == "0 ns"
    assert size_bytes(i["drm-total-local0"]) == 1000 and i["drm-total-local0"] == "1000"
    assert i["drm-engine-capacity-compute"] == "4"
    ids = {a["drm-client-id"], x["drm-client-id"], i["drm-client-id"]}
    assert len(ids) == 3 and all(c.isdigit() for c in ids)


def test_a_kernel_without_drm_keys(tmp_path):
    t = Tree(tmp_path, {"devices": [amd(unsupported=["processes"])],
                        "processes": [{"pid": 5, "device": AMD, "sm_util_percent": 90}]})
    t.advance(10)
    assert sorted(t.fdinfo(5, 3)) == ["flags", "ino", "mnt_id", "pos"]


# ------------------------------------------------------------ counters over time

def test_counters_grow_at_the_scenarios_rates(tmp_path):
    t = Tree(tmp_path, {
        "devices": [amd(power_watts=500), intel(power_watts=120, energy_counter_base_millijoules=7),
                    intel(I915, driver="i915", power_watts=80)],
        "processes": [{"pid": 1, "device": AMD, "sm_util_percent": 40},
                      {"pid": 2, "device": AMD, "sm_util_percent": 25, "engine": "compute"},
                      {"pid": 3, "device": XE, "sm_util_percent": 70},
                      {"pid": 4, "device": XE, "sm_util_percent": 50, "engine": "ccs"},
                      {"pid": 5, "device": I915, "sm_util_percent": 30}]})
    energy = t.hwmon("0000:02:00.0") / "energy1_input"
    before = {"e": int(read(energy)), "x3": t.fdinfo(3, 3), "x4": t.fdinfo(4, 3)}
    t.advance(10.0)
    assert int(read(energy)) - before["e"] == 120 * 10 * 1_000_000           # W × s in µJ
    assert int(read(t.hwmon("0000:03:00.0") / "energy1_input")) == 80 * 10 * 1_000_000
    assert t.fdinfo(1, 3)["drm-engine-gfx"] == f"{4 * 10**9} ns"            # 40 % of 10 s
    assert t.fdinfo(2, 3)["drm-engine-compute"] == f"{int(2.5 * 10**9)} ns"
    assert "drm-engine-gfx" not in t.fdinfo(2, 3)
    assert t.fdinfo(5, 3)["drm-engine-render"] == f"{3 * 10**9} ns"
    for pid, engine, util, capacity in ((3, "rcs", 70, 1), (4, "ccs", 50, 4)):
        now, then = t.fdinfo(pid, 3), before[f"x{pid}"]
        cycles = int(now[f"drm-cycles-{engine}"]) - int(then[f"drm-cycles-{engine}"])
        total = int(now[f"drm-total-cycles-{engine}"]) - int(then[f"drm-total-cycles-{engine}"])
        assert cycles / (total * capacity) == pytest.approx(util / 100)
    t.advance(5.0)
    assert t.fdinfo(1, 3)["drm-engine-gfx"] == f"{6 * 10**9} ns"
    assert int(read(energy)) == 7000 + 120 * 15 * 1_000_000


def test_idle_phases_draw_idle_power_and_no_engine_time(tmp_path):
    cycle = {"watts": 100, "idle_seconds": 20, "busy_seconds": 30}
    t = Tree(tmp_path, {"devices": [amd(power_watts=500, utilization_percent=80, idle_cycle=cycle),
                                    intel(power_watts=120, idle_cycle={**cycle, "start": "busy"})],
                        "processes": [{"pid": 1, "device": AMD, "sm_util_percent": 80},
                                      {"pid": 2, "device": XE, "sm_util_percent": 50}]})
    dev, hwmon = t.device("0000:01:00.0"), t.hwmon("0000:01:00.0")
    assert read(dev / "gpu_busy_percent") == "0\n"                       # idle first
    assert int(read(hwmon / "power1_average")) == 100_000_000
    t.advance(25)                                                         # 20 s idle, 5 busy
    assert read(dev / "gpu_busy_percent") == "80\n"
    assert int(read(hwmon / "power1_average")) == 500_000_000
    assert t.fdinfo(1, 3)["drm-engine-gfx"] == f"{4 * 10**9} ns"         # 80 % of 5 s
    xe = t.fdinfo(2, 3)
    assert int(xe["drm-cycles-rcs"]) == 25 * 19_200_000 // 2             # busy all 25 s
    energy = int(read(t.hwmon("0000:02:00.0") / "energy1_input"))
    assert energy == 120 * 25 * 1_000_000
    t.advance(10)                                                         # 5 s busy, 5 s idle
    assert int(read(t.hwmon("0000:02:00.0") / "energy1_input")) - energy == \
        (120 * 5 + 100 * 5) * 1_000_000


def test_counters_follow_real_time(tmp_path):
    sim = SimulatedDrm(parse_scenario({"devices": [intel(power_watts=1000)]}), str(tmp_path))
    energy = Path(sim.sysfs_root) / "bus/pci/devices/0000:01:00.0/hwmon/hwmon0/energy1_input"
    first = int(read(energy))
    time.sleep(0.05)                          # measures: 50 ms of real time
    sim.render()
    assert int(read(energy)) - first >= 1000 * 0.05 * 1e6 * 0.9


# ------------------------------------------------------------ rewriting

def test_render_rewrites_only_what_moved_and_never_a_torn_file(tmp_path):
    t = Tree(tmp_path, {"devices": [intel(power_watts=100)],
                        "processes": [{"pid": 3, "device": XE, "sm_util_percent": 50}]})
    dev = t.device("0000:01:00.0")
    vendor_inode = os.stat(dev / "vendor").st_ino
    energy_inode = os.stat(t.hwmon("0000:01:00.0") / "energy1_input").st_ino
    t.advance(1)
    assert os.stat(dev / "vendor").st_ino == vendor_inode
    assert os.stat(t.hwmon("0000:01:00.0") / "energy1_input").st_ino != energy_inode
    fdinfo = t.proc / "3" / "fdinfo" / "3"
    stop, seen = threading.Event(), []

    def reader():
        while not stop.is_set():
            seen.append(fdinfo.read_text())

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(200):
            t.advance(0.5)
    finally:
        stop.set()
        thread.join()
    assert seen and all(text.endswith("drm-engine-capacity-ccs:\t4\n") for text in seen)
    assert not list((tmp_path / "root" / ".simulated-drm").iterdir())


def test_a_reloaded_scenario_adds_and_removes_devices_and_clients(tmp_path):
    path = tmp_path / "s.yaml"
    scenario = {"devices": [amd()], "processes": [{"pid": 7, "device": AMD, "sm_util_percent": 50},
                                                  {"pid": 8, "device": AMD}]}
    write_scenario(path, scenario)
    clock = Clock()
    sim = SimulatedDrm(str(path), str(tmp_path / "root"), monotonic=clock)
    proc, sysfs = Path(sim.proc_root), Path(sim.sysfs_root)
    (proc / "7" / "cgroup").write_text("0::/system.slice/job.service\n")   # a fake host's
    first_id = parse_fdinfo(read(proc / "7/fdinfo/3"))["drm-client-id"]
    clock.now += 2
    scenario["devices"].append(intel())
    scenario["processes"] = [{"pid": 8, "device": AMD}, {"pid": 9, "device": XE}]
    write_scenario(path, scenario)
    os.utime(path, (1, 1))              # a new stamp even within the file system's resolution
    sim.render()
    assert not (proc / "7" / "fd").exists() and not (proc / "7" / "fdinfo").exists()
    assert read(proc / "7" / "cgroup")                         # left alone
    assert (proc / "9" / "fdinfo" / "3").exists() and sim.vendors == {"amd", "intel"}
    assert (sysfs / "bus/pci/devices/0000:02:00.0/vendor").read_text() == "0x8086\n"
    clock.now += 2
    scenario["devices"] = [amd()]
    scenario["processes"] = [{"pid": 7, "device": AMD, "sm_util_percent": 50}]
    write_scenario(path, scenario)
    os.utime(path, (2, 2))
    sim.render()
    assert not (sysfs / "bus/pci/devices/0000:02:00.0").exists()
    assert not (sysfs / "devices/pci0000:02").exists() and not (sysfs / "class/drm/card1").exists()
    assert not (sysfs / "bus/pci/drivers/xe").exists()
    assert not (proc / "9").exists() and not (proc / "8").exists()
    again = parse_fdinfo(read(proc / "7/fdinfo/3"))
    assert again["drm-client-id"] != first_id and "drm-engine-gfx" not in again   # a new client
    clock.now += 1
    sim.render()
    assert parse_fdinfo(read(proc / "7/fdinfo/3"))["drm-engine-gfx"] == f"{5 * 10**8} ns"


@pytest.mark.parametrize("name", ["amd-mi300x.yaml", "intel-flex.yaml"])
def test_the_examples_render(tmp_path, name):
    sim = SimulatedDrm(str(REPO_ROOT / "examples" / name), str(tmp_path))
    scenario = sim.scenario
    devices = sorted(os.listdir(Path(sim.sysfs_root) / "bus/pci/devices"))
    assert devices == sorted(d.pci_bus_id for d in scenario.devices)
    for p in scenario.processes:
        fdinfo = Path(sim.proc_root) / str(p.pid) / "fdinfo"
        infos = [parse_fdinfo(read(f)) for f in fdinfo.iterdir()]
        assert any(i.get("drm-pdev") == scenario.device(p.device).pci_bus_id for i in infos)


def test_each_render_traces_every_devices_energy_as_a_reader_integrating_it_gets(tmp_path):
    """Intel's counter, and for AMD (power, no counter) the trapezoid of the powers rendered:
    the chaos oracle's energy reads of AMD and Intel GPUs, on the render's monotonic time. The
    render made at construction, before any reader, is not one."""
    import json
    trace = tmp_path / "trace.jsonl"
    scenario = {"devices": [amd(power_watts=200), intel(power_watts=150)],
                "trace_file": str(trace), "trace_tag": "v1"}
    tree = Tree(tmp_path, scenario)
    tree.advance(2.0)
    tree.sim._scenario = parse_scenario(dict(scenario, devices=[
        amd(power_watts=400), intel(power_watts=150)]))
    tree.advance(1.0)
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    by_device = {uuid: [(x["mono"], x["mj"]) for x in lines if x["uuid"] == uuid]
                 for uuid in (AMD, XE)}
    assert {x["event"] for x in lines} == {"energy"} and {x["tag"] for x in lines} == {"v1"}
    assert by_device[AMD] == [(102.0, 0), (103.0, 300_000)]
    intel_mj = [mj for _, mj in by_device[XE]]
    assert [b - a for a, b in zip(intel_mj, intel_mj[1:])] == [150_000]


def test_a_process_sharing_anothers_client_shows_its_id_and_engine_time(tmp_path):
    """A dup'ed or passed fd: the holder's fdinfo shows the owner's client, whose work it is;
    a sharer naming no owner on that device, or working on its own, is refused."""
    tree = Tree(tmp_path, {"devices": [amd()], "processes": [
        {"pid": 10, "device": AMD, "sm_util_percent": 50},
        {"pid": 11, "device": AMD, "shares_client_of": 10}]})
    tree.advance(2.0)
    owner, sharer = tree.fdinfo(10, 3), tree.fdinfo(11, 3)
    assert sharer["drm-client-id"] == owner["drm-client-id"]
    assert sharer["drm-engine-gfx"] == owner["drm-engine-gfx"] == f"{10**9} ns"
    for bad in ({"pid": 11, "device": AMD, "shares_client_of": 12},
                {"pid": 11, "device": AMD, "shares_client_of": 10, "sm_util_percent": 5}):
        with pytest.raises(ValueError, match="shares_client_of|no work"):
            parse_scenario({"devices": [amd()], "processes": [
                {"pid": 10, "device": AMD, "sm_util_percent": 50}, bad]})
