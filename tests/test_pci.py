from gpustats.hostfs import HostRoots
from gpustats.sources.pci import PciScanner, is_nvidia_gpu, parse_hex, scan_sysfs
from tests.support.fakehost import make_pci_device


def test_parse_hex():
    assert parse_hex("0x10de\n") == 0x10DE
    assert parse_hex("garbage") is None
    assert parse_hex(None) is None


def test_only_nvidia_display_class():
    assert is_nvidia_gpu(0x10DE, 0x030200)      # 3D controller
    assert is_nvidia_gpu(0x10DE, 0x030000)      # VGA controller
    assert not is_nvidia_gpu(0x10DE, 0x040300)  # NVIDIA HD audio function
    assert not is_nvidia_gpu(0x10DE, 0x068000)  # NVSwitch bridge
    assert not is_nvidia_gpu(0x8086, 0x030000)
    assert not is_nvidia_gpu(0x10DE, None)


def test_scan_fake_tree(fake_sysfs, tmp_path):
    make_pci_device(fake_sysfs, "0000:3b:00.1", pci_class="0x040300")   # audio function
    make_pci_device(fake_sysfs, "0000:86:00.0")
    broken = fake_sysfs / "bus" / "pci" / "devices" / "0000:99:00.0"
    broken.mkdir()                                                      # vanished files
    found = scan_sysfs(HostRoots(sysfs=str(fake_sysfs)))
    assert [g.address for g in found] == ["0000:3b:00.0", "0000:86:00.0"]
    assert found[0].device_id == 0x2330


def test_no_pci_tree_means_no_gpus(tmp_path):
    assert PciScanner(HostRoots(sysfs=str(tmp_path / "nothing"))).scan() == ()


def test_scanner_uses_plain_sysfs_for_other_roots(fake_sysfs):
    scanner = PciScanner(HostRoots(sysfs=str(fake_sysfs)))
    assert len(scanner.scan()) == 1


def test_real_host_scan_does_not_fail():
    # On this machine (no GPU) the udev path or the sysfs fallback must answer, not raise.
    assert isinstance(PciScanner(HostRoots()).scan(), tuple)


def _bind(sysfs, address, driver):
    drivers = sysfs / "bus" / "pci" / "drivers" / driver
    drivers.mkdir(parents=True, exist_ok=True)
    (sysfs / "bus" / "pci" / "devices" / address / "driver").symlink_to(drivers)


def test_each_vendor_scans_its_own_gpus_bound_to_its_drivers(fake_sysfs):
    from gpustats.sources.vendors import AMD, INTEL, NVIDIA
    make_pci_device(fake_sysfs, "0000:19:00.0", vendor="0x1002", pci_class="0x038000",
                    device="0x74a1")
    _bind(fake_sysfs, "0000:19:00.0", "amdgpu")
    make_pci_device(fake_sysfs, "0000:1a:00.0", vendor="0x1002", pci_class="0x038000")
    _bind(fake_sysfs, "0000:1a:00.0", "vfio-pci")           # passed through to a VM: not ours
    make_pci_device(fake_sysfs, "0000:00:02.0", vendor="0x8086", pci_class="0x030000")
    _bind(fake_sysfs, "0000:00:02.0", "xe")
    make_pci_device(fake_sysfs, "0000:00:1f.3", vendor="0x8086", pci_class="0x040300")  # audio
    roots = HostRoots(sysfs=str(fake_sysfs))
    amd = PciScanner(roots, AMD).scan()
    assert [(g.address, g.driver, g.device_id) for g in amd] == [("0000:19:00.0", "amdgpu",
                                                                   0x74A1)]
    assert [g.address for g in PciScanner(roots, INTEL).scan()] == ["0000:00:02.0"]
    # The NVIDIA GPU of the fake tree is bound to no driver yet: still counted (it may be).
    assert [g.address for g in PciScanner(roots, NVIDIA).scan()] == ["0000:3b:00.0"]


def test_device_plugin_resources_name_their_vendor():
    from gpustats.sources.vendors import allocating_vendor
    assert allocating_vendor("nvidia.com/gpu").name == "nvidia"
    assert allocating_vendor("nvidia.com/mig-1g.10gb").name == "nvidia"
    assert allocating_vendor("amd.com/gpu").name == "amd"
    assert allocating_vendor("gpu.intel.com/xe").name == "intel"
    assert allocating_vendor("gpu.intel.com/monitoring") is None
    assert allocating_vendor("example.com/fpga") is None


def test_an_amd_accelerator_counts_only_bound_to_amdgpu(fake_sysfs):
    """MI300X is a processing accelerator (class 0x1200), as AMD's NPU is (bound to amdxdna)."""
    from gpustats.sources.vendors import AMD
    make_pci_device(fake_sysfs, "0000:05:00.0", vendor="0x1002", pci_class="0x120000")
    _bind(fake_sysfs, "0000:05:00.0", "amdgpu")
    make_pci_device(fake_sysfs, "0000:c6:00.1", vendor="0x1002", pci_class="0x118000")
    make_pci_device(fake_sysfs, "0000:c7:00.1", vendor="0x1002", pci_class="0x120000")
    _bind(fake_sysfs, "0000:c7:00.1", "amdxdna")
    make_pci_device(fake_sysfs, "0000:c8:00.1", vendor="0x1002", pci_class="0x120000")
    found = PciScanner(HostRoots(sysfs=str(fake_sysfs)), AMD).scan()
    assert [g.address for g in found] == ["0000:05:00.0"]
