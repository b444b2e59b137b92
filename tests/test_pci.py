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
