"""The AMD and Intel sweepers over fake sysfs and /proc trees written in the kernel's formats."""

import pytest

from gpustats.model.device import VENDOR_AMD, VENDOR_INTEL
from gpustats.model.health import KernelHealthReading
from gpustats.sources.drm.kernel_health import parse_err_count
from gpustats.sources.drm.reads import FsReads
from gpustats.sources.drm.sweep import DrmSweeper
from tests.support.clock import Clock
from tests.support.drm_tree import (INTEL_VENDOR, DrmClient, DrmTree, listdir_as_unprivileged)

AMD_A = "0000:19:00.0"
AMD_B = "0000:0a:00.0"
INTEL_A = "0000:03:00.0"
INTEL_B = "0000:4d:00.0"


@pytest.fixture
def tree(tmp_path):
    return DrmTree(tmp_path)


def _sweeper(tree, vendor, clock, **kw):
    return DrmSweeper(vendor, tree.roots, monotonic=clock, **kw)


def _by_bus(readings):
    return {r.identity.pci_bus_id: r for r in readings}


def _busy(reading):
    return {p.pid: p.engine_busy_seconds for p in reading.processes}


# --- AMD ------------------------------------------------------------------------------------

def test_amd_identity_ordered_by_pci_address(tree):
    tree.add_amd_gpu(AMD_A, card=1, unique_id="2b4a1c0e9f8d7e6a",
                     product_name="AMD Instinct MI300X", vram_total=192 << 30)
    tree.add_amd_gpu(AMD_B, card=0, unique_id=None, product_name=None, vram_total=16 << 30)
    readings = _sweeper(tree, VENDOR_AMD, Clock()).sweep()
    a, b = _by_bus(readings)[AMD_A].identity, _by_bus(readings)[AMD_B].identity
    assert [r.identity.pci_bus_id for r in readings] == [AMD_B, AMD_A]
    assert (b.index, a.index) == (0, 1)
    assert a.uuid == "amd-2b4a1c0e9f8d7e6a" and b.uuid == "amd-" + AMD_B
    assert a.name == "AMD Instinct MI300X" and b.name is None
    assert (a.vendor, a.drm_card, a.drm_minors) == (VENDOR_AMD, "card1", (1, 129))
    assert a.memory_total_bytes == 192 << 30 and b.memory_total_bytes == 16 << 30
    assert a.minor_number is None and a.architecture is None


def test_amd_values(tree):
    tree.add_amd_gpu(AMD_A, vram_used=3 << 30, busy_percent=42, power_uw=312_500_000,
                     power_cap_uw=750_000_000, temp_mc=51_600)
    r = _sweeper(tree, VENDOR_AMD, Clock()).sweep()[0]
    assert (r.memory_used_bytes, r.utilization_percent) == (3 << 30, 42)
    assert r.power_watts == pytest.approx(312.5)
    assert r.power_limit_watts == pytest.approx(750.0)
    assert r.temperature_celsius == 52
    assert r.processes == () and r.unsupported_fields == frozenset()
    assert r.process_samples is None and r.mig_enabled is None and r.mps is None
    assert r.clocks_event_reasons is None and r.gpm is None


def test_amd_power_input_and_temp2_where_average_and_temp1_are_hidden(tree):
    tree.add_amd_gpu(AMD_A, power_file="power1_input", power_uw=90_000_000,
                     temp_file="temp2_input", temp_mc=38_000)
    r = _sweeper(tree, VENDOR_AMD, Clock()).sweep()[0]
    assert r.power_watts == pytest.approx(90.0) and r.temperature_celsius == 38


def test_amd_energy_is_power_integrated_over_read_times(tree):
    tree.add_amd_gpu(AMD_A, power_uw=100_000_000)
    clock = Clock(1000.0)
    sweeper = _sweeper(tree, VENDOR_AMD, clock)
    assert sweeper.sweep()[0].energy_counter_millijoules == 0
    tree.set_hwmon(AMD_A, power1_average=200_000_000)
    clock.now += 10
    assert sweeper.sweep()[0].energy_counter_millijoules == 1_500_000      # (100+200)/2 × 10
    clock.now += 5
    r = sweeper.sweep()[0]
    assert r.energy_counter_millijoules == 2_500_000 and r.monotonic_seconds == 1015.0


def test_amd_energy_bridges_a_failed_power_read(tree):
    tree.add_amd_gpu(AMD_A, power_uw=100_000_000)
    clock = Clock(0.0)
    sweeper = _sweeper(tree, VENDOR_AMD, clock)
    sweeper.sweep()
    tree.set_hwmon(AMD_A, power1_average=None)         # EOPNOTSUPP/EPERM: no sample
    clock.now += 5
    gap = sweeper.sweep()[0]
    assert gap.power_watts is None and gap.energy_counter_millijoules is None
    tree.set_hwmon(AMD_A, power1_average=100_000_000)
    clock.now += 5
    assert sweeper.sweep()[0].energy_counter_millijoules == 1_000_000


def test_vanished_files_are_absent_not_zero(tree):
    tree.add_amd_gpu(AMD_A)
    sweeper = _sweeper(tree, VENDOR_AMD, Clock())
    sweeper.sweep()
    for name in ("gpu_busy_percent", "mem_info_vram_used"):
        tree.set_attr(AMD_A, name, None)
    tree.set_hwmon(AMD_A, power1_average=None, power1_cap=None, temp1_input=None)
    r = sweeper.sweep()[0]
    assert r.utilization_percent is None and r.memory_used_bytes is None
    assert r.power_watts is None and r.energy_counter_millijoules is None
    assert r.power_limit_watts is None and r.temperature_celsius is None
    assert r.identity.memory_total_bytes is not None


def test_two_processes_growing_three_to_one_get_busy_seconds_three_to_one(tree):
    tree.add_amd_gpu(AMD_A, card=1)
    tree.add_amd_gpu(AMD_B, card=0)
    tree.add_process(100, {3: DrmClient("amdgpu", AMD_A, 11, engine_ns={"gfx": 10**9},
                                        memory={"vram": 2 << 30, "gtt": 1 << 20})})
    tree.add_process(200, {3: DrmClient("amdgpu", AMD_A, 12, engine_ns={"gfx": 5 * 10**9},
                                        memory={"vram": 1 << 30})})
    tree.add_process(300, {5: DrmClient("amdgpu", AMD_B, 13, memory={"vram": 4096})})
    clock = Clock(0.0)
    sweeper = _sweeper(tree, VENDOR_AMD, clock)
    first = _by_bus(sweeper.sweep())
    assert _busy(first[AMD_A]) == {100: 0.0, 200: 0.0}
    tree.update_client(100, 3, engine_ns={"gfx": 10**9 + 3 * 10**9})
    tree.update_client(200, 3, engine_ns={"gfx": 5 * 10**9 + 10**9})
    clock.now += 5
    readings = _by_bus(sweeper.sweep())
    a = readings[AMD_A]
    assert _busy(a) == {100: pytest.approx(3.0), 200: pytest.approx(1.0)}
    assert {p.pid: p.memory_used_bytes for p in a.processes} == {100: 2 << 30, 200: 1 << 30}
    assert [(p.pid, p.memory_used_bytes) for p in readings[AMD_B].processes] == [(300, 4096)]


def test_a_process_with_two_clients_sums_them(tree):
    tree.add_amd_gpu(AMD_A)
    tree.add_process(100, {3: DrmClient("amdgpu", AMD_A, 1, memory={"vram": 100}),
                           4: DrmClient("amdgpu", AMD_A, 2, memory={"vram": 50})})
    clock = Clock(0.0)
    sweeper = _sweeper(tree, VENDOR_AMD, clock)
    sweeper.sweep()
    tree.update_client(100, 3, engine_ns={"gfx": 10**9})
    tree.update_client(100, 4, engine_ns={"compute": 2 * 10**9})
    clock.now += 5
    (p,) = sweeper.sweep()[0].processes
    assert (p.memory_used_bytes, p.engine_busy_seconds) == (150, pytest.approx(3.0))


def test_a_client_without_drm_pdev_is_placed_by_its_node(tree):
    tree.add_amd_gpu(AMD_A, card=1)
    tree.add_amd_gpu(AMD_B, card=0)
    fd_dir, info_dir = tree.proc / "50" / "fd", tree.proc / "50" / "fdinfo"
    fd_dir.mkdir(parents=True)
    info_dir.mkdir()
    (fd_dir / "3").symlink_to("/dev/dri/renderD129")
    (info_dir / "3").write_text("pos:\t0\nflags:\t02\ndrm-driver:\tamdgpu\n"
                                "drm-memory-vram:\t8 KiB\n")
    readings = _by_bus(_sweeper(tree, VENDOR_AMD, Clock()).sweep())
    assert [(p.pid, p.memory_used_bytes) for p in readings[AMD_A].processes] == [(50, 8192)]
    assert readings[AMD_B].processes == ()


def test_only_the_vendors_display_functions_bound_to_its_driver(tree):
    tree.add_amd_gpu(AMD_A)
    tree.add_pci_device("0000:1a:00.0", vendor="0x1002", driver="vfio-pci", card=5)
    tree.add_pci_device("0000:1b:00.0", vendor="0x1002", driver=None, card=6)
    tree.add_pci_device("0000:1c:00.0", vendor="0x1002", driver="snd_hda_intel", card=7,
                        pci_class="0x040300")
    tree.add_intel_gpu(INTEL_A, driver="i915", card=2)
    tree.add_intel_gpu(INTEL_B, driver="xe", card=3)
    tree.add_pci_device("0000:00:1f.0", vendor=INTEL_VENDOR, driver="i915", card=9,
                        pci_class="0x060100")
    amd = _sweeper(tree, VENDOR_AMD, Clock()).sweep()
    intel = _sweeper(tree, VENDOR_INTEL, Clock()).sweep()
    assert [r.identity.pci_bus_id for r in amd] == [AMD_A]
    assert [r.identity.pci_bus_id for r in intel] == [INTEL_A, INTEL_B]
    assert [r.identity.uuid for r in intel] == ["intel-" + INTEL_A, "intel-" + INTEL_B]
    assert {r.identity.vendor for r in intel} == {VENDOR_INTEL}


def test_identity_is_the_same_object_while_unchanged_and_calls_are_counted(tree):
    tree.add_amd_gpu(AMD_A)
    calls = []
    sweeper = _sweeper(tree, VENDOR_AMD, Clock(), before_sweep=lambda: calls.append(1))
    first = sweeper.sweep()[0]
    after_first = sweeper.calls
    second = sweeper.sweep()[0]
    assert second.identity is first.identity and calls == [1, 1]
    assert 0 < sweeper.calls - after_first < after_first    # static files read once
    assert sweeper.unidentified() == ()
    sweeper.close()


def test_no_gpu_no_process_scan(tree):
    tree.add_process(10, {3: "/dev/null"})
    sweeper = _sweeper(tree, VENDOR_AMD, Clock())
    assert sweeper.sweep() == ()
    assert sweeper.calls == 1                       # the PCI bus listed, nothing else


# --- Intel ----------------------------------------------------------------------------------

def test_intel_energy_counter_limit_and_device_level_hwmon(tree):
    tree.add_intel_gpu(INTEL_A, driver="i915", energy_uj=123_456_789, power_max_uw=150_000_000)
    sweeper = _sweeper(tree, VENDOR_INTEL, Clock())
    r = sweeper.sweep()[0]
    assert r.energy_counter_millijoules == 123_456            # µJ // 1000; not the GT's
    assert r.power_watts is None                             # no power file on i915/xe
    assert r.power_limit_watts == pytest.approx(150.0)
    assert r.temperature_celsius is None                     # i915 has no temperature
    assert r.memory_used_bytes is None and r.identity.memory_total_bytes is None
    tree.set_hwmon(INTEL_A, energy1_input=2**40 + 999, power1_max=0)
    r = sweeper.sweep()[0]
    assert r.energy_counter_millijoules == (2**40 + 999) // 1000   # 64-bit, not truncated
    assert r.power_limit_watts is None                             # 0: PL1 disabled


def test_xe_temperature(tree):
    tree.add_intel_gpu(INTEL_A, driver="xe", temp_mc=61_400)
    assert _sweeper(tree, VENDOR_INTEL, Clock()).sweep()[0].temperature_celsius == 61


def test_i915_engine_time_split_and_utilization(tree):
    tree.add_intel_gpu(INTEL_A, driver="i915")
    tree.add_process(100, {3: DrmClient("i915", INTEL_A, 1, capacity={"video": 2},
                                        engine_ns={"render": 0, "video": 0})})
    tree.add_process(200, {3: DrmClient("i915", INTEL_A, 2, capacity={"video": 2},
                                        engine_ns={"render": 0, "video": 0})})
    clock = Clock(0.0)
    sweeper = _sweeper(tree, VENDOR_INTEL, clock)
    first = sweeper.sweep()[0]
    assert first.utilization_percent is None                 # no interval yet
    tree.update_client(100, 3, engine_ns={"render": 3 * 10**9, "video": 6 * 10**9})
    tree.update_client(200, 3, engine_ns={"render": 10**9})
    tree.set_idle_residency(INTEL_A, 6000)                   # the GT idled 6 s of 10
    clock.now += 10
    r = sweeper.sweep()[0]
    assert _busy(r) == {100: pytest.approx(9.0), 200: pytest.approx(1.0)}
    assert r.utilization_percent == 40          # the GT's own figure, not the clients'
    assert r.unattributed_engine_seconds == 0.0             # render 4 s / 10 s: all seen


def test_xe_cycles_give_busy_seconds_and_utilization(tree):
    tree.add_intel_gpu(INTEL_A, driver="xe")
    hz = 19_200_000                                          # the GPU timestamp's rate
    start = 7_655_183_225
    tree.add_process(100, {3: DrmClient("xe", INTEL_A, 1, cycles={"rcs": 0, "ccs": 0},
                                        capacity={"ccs": 4}, total_cycles=start)})
    tree.add_process(200, {3: DrmClient("xe", INTEL_A, 2, cycles={"rcs": 0},
                                        total_cycles=start)})
    clock = Clock(0.0)
    sweeper = _sweeper(tree, VENDOR_INTEL, clock)
    sweeper.sweep()
    ticks = 10 * hz
    tree.update_client(100, 3, cycles={"rcs": 6 * hz, "ccs": 8 * hz}, total_cycles=start + ticks)
    tree.update_client(200, 3, cycles={"rcs": 2 * hz}, total_cycles=start + ticks)
    tree.set_idle_residency(INTEL_A, 2000)                   # xe's gtidle: idle 2 s of 10
    clock.now += 10
    r = sweeper.sweep()[0]
    assert _busy(r) == {100: pytest.approx(14.0), 200: pytest.approx(2.0)}
    assert r.utilization_percent == 80                       # rcs 8 s of 10 s
    # A client opened since: its cycles over the clock rate seen from the others.
    tree.add_process(300, {3: DrmClient("xe", INTEL_A, 3, cycles={"rcs": 3 * hz},
                                        total_cycles=start + 2 * ticks)})
    tree.update_client(100, 3, total_cycles=start + 2 * ticks)
    tree.update_client(200, 3, total_cycles=start + 2 * ticks)
    clock.now += 10
    assert _busy(sweeper.sweep()[0]) == {100: 0.0, 200: 0.0, 300: pytest.approx(3.0)}


def test_refused_processes_are_unknown(tree):
    tree.add_intel_gpu(INTEL_A, driver="i915")
    tree.add_amd_gpu(AMD_A)
    tree.add_process(100, {3: DrmClient("i915", INTEL_A, 1)})
    tree.add_process(200, {3: DrmClient("i915", INTEL_A, 2)})
    tree.add_process(300, {3: DrmClient("amdgpu", AMD_A, 3)})
    tree.refuse(200)
    tree.refuse(300)
    clock = Clock(0.0)
    fs = FsReads(listdir=listdir_as_unprivileged)
    intel = _sweeper(tree, VENDOR_INTEL, clock, fs=fs, capabilities=lambda: 0)
    amd = _sweeper(tree, VENDOR_AMD, clock, fs=FsReads(listdir=listdir_as_unprivileged),
                   capabilities=lambda: 0)
    intel.sweep()
    amd.sweep()
    tree.set_idle_residency(INTEL_A, 5000)
    clock.now += 5
    r = intel.sweep()[0]
    assert r.unsupported_fields == frozenset({"processes"})
    assert [p.pid for p in r.processes] == [100]            # what could be read is kept
    assert r.utilization_percent == 0               # the GT's own figure: idle all along
    assert r.energy_counter_millijoules is not None
    a = amd.sweep()[0]
    assert a.unsupported_fields == frozenset({"processes"}) and a.processes == ()
    assert a.utilization_percent == 0                        # the SMU's figure still stands
    assert intel.refusals["fd"] >= 1


def test_a_process_no_capability_opens_is_named_and_the_rest_are_known(tree):
    """Refused although the daemon holds both capabilities: that PID is the reading's
    ``unreadable_pids``, the others are listed as known; the duty cycle is the GPU's own (GT
    idle residency: busy all the tick here), and the work the known clients do not account for
    is the reading's unattributed engine time, never theirs."""
    tree.add_intel_gpu(INTEL_A, driver="i915")
    tree.add_process(100, {3: DrmClient("i915", INTEL_A, 1)})
    tree.add_process(200, {3: DrmClient("i915", INTEL_A, 2)})
    tree.refuse(200)
    clock = Clock(0.0)
    intel = _sweeper(tree, VENDOR_INTEL, clock, fs=FsReads(listdir=listdir_as_unprivileged),
                     capabilities=lambda: 1 << 2 | 1 << 19)
    intel.sweep()
    clock.now += 5
    r = intel.sweep()[0]
    assert r.unsupported_fields == frozenset() and r.unreadable_pids == (200,)
    assert [p.pid for p in r.processes] == [100]
    assert r.utilization_percent == 100 and r.unattributed_engine_seconds == 5.0


def test_unknown_vendor_is_refused(tree):
    with pytest.raises(ValueError):
        DrmSweeper("nvidia", tree.roots)


def test_a_process_with_very_many_open_files_is_read_only_so_far(tmp_path, monkeypatch):
    """The fd scan stops at MAX_FDS_PER_PID entries a process: a million sockets cost no more."""
    from gpustats.sources.drm import clients, fd_walk
    from gpustats.sources.drm.reads import FsReads
    monkeypatch.setattr(fd_walk, "MAX_FDS_PER_PID", 8)
    fd_dir = tmp_path / "4000" / "fd"
    fd_dir.mkdir(parents=True)
    for n in range(50):
        (fd_dir / str(n)).symlink_to("socket:[1]")
    fs = FsReads()
    scanner = clients.ClientScanner(str(tmp_path), fs, ("amdgpu",), monotonic=lambda: 0.0)
    scan = scanner.scan()
    assert scan.clients == () and scan.complete
    assert fs.calls <= 1 + 1 + 8          # the proc dir, the fd dir, eight links


def test_a_refused_scan_marks_the_vendors_source_failing():
    """The daemon's wrapper turns "processes unknown" into the source's state and reason."""
    from gpustats.engine.drm_source import ReportedDrmSweeper
    from gpustats.model.device import DeviceIdentity, DeviceReading
    from gpustats.sources.errors import CollectionErrors

    class Sweeper:
        unsupported = frozenset({"processes"})

        def sweep(self):
            return (DeviceReading(identity=DeviceIdentity(index=0, uuid="amd-1", vendor="amd"),
                                  monotonic_seconds=0.0, unsupported_fields=self.unsupported),)

    errors, sweeper = CollectionErrors(), Sweeper()
    reported = ReportedDrmSweeper(sweeper, "amd", errors, capabilities=lambda: 1 << 19)
    reported.sweep()
    [state] = errors.states()
    assert (state.source, state.state, state.last_error_reason) == (
        "amd", "failing", "fdinfo_refused")
    assert "the daemon lacks CAP_DAC_READ_SEARCH;" in state.last_error     # not the one held
    sweeper.unsupported = frozenset()
    reported.sweep()
    assert [(s.source, s.state) for s in errors.states()] == [("amd", "ok")]


def test_intel_cards_are_named_by_pci_device_id_and_sized_from_the_drivers_sysfs(tree):
    """xe: each tile's ``physical_vram_size_bytes`` (xe_tile_sysfs.c), summed; the backport
    i915's ``card<N>/lmem_total_bytes``; mainline i915 has none: absent. An ID the kernel
    lists under a platform whose product is not pinned down is named by its family."""
    xe = tree.add_intel_gpu(INTEL_A, driver="xe", card=1, device_id="0x56c0")
    for tile in ("tile0", "tile1"):
        (xe / tile).mkdir(exist_ok=True)
        (xe / tile / "physical_vram_size_bytes").write_text(f"{8 << 30}\n")
    backport = tree.add_intel_gpu(INTEL_B, driver="i915", card=2, device_id="0x0bd9")
    (backport / "drm" / "card2" / "lmem_total_bytes").write_text(f"{64 << 30}\n")
    tree.add_intel_gpu("0000:9a:00.0", driver="i915", card=3, device_id="0x56c1")
    tree.add_intel_gpu("0000:00:02.0", driver="i915", card=0, device_id="0x46a6")  # an iGPU
    identities = {r.identity.pci_bus_id: (r.identity.name, r.identity.memory_total_bytes)
                  for r in _sweeper(tree, VENDOR_INTEL, Clock()).sweep()}
    assert identities == {
        INTEL_A: ("Intel Data Center GPU Flex 170", 16 << 30),
        INTEL_B: ("Intel Data Center GPU Max", 64 << 30),
        "0000:9a:00.0": ("Intel Data Center GPU Flex 140", None),       # mainline i915
        "0000:00:02.0": (None, None)}


# --- health from the kernel's files ----------------------------------------------------------

def test_amdgpu_ras_counts_and_retired_pages_are_read(tree):
    """ras/<block>_err_count ("ue: N", "ce: N"; a newer "de: N" line ignored) summed over the
    blocks; gpu_vram_bad_pages' lines counted by flag (amdgpu_ras.c's formats)."""
    d = tree.add_amd_gpu(AMD_A)
    (d / "ras").mkdir()
    (d / "ras" / "umc_err_count").write_text("ue: 2\nce: 5\n")
    (d / "ras" / "gfx_err_count").write_text("ue: 0\nce: 1\nde: 3\n")
    (d / "ras" / "gpu_vram_bad_pages").write_text(
        "0x00000001 : 0x00001000 : R\n0x00000002 : 0x00001000 : P\n0x00000003 : 0x00001000 : R\n")
    (d / "ras" / "features").write_text("feature mask: 0x3fff\n")
    tree.add_amd_gpu(AMD_B, card=1)                       # no RAS (a Radeon card)
    readings = _by_bus(_sweeper(tree, VENDOR_AMD, Clock()).sweep())
    assert readings[AMD_A].kernel_health == KernelHealthReading(
        ras_uncorrectable=2, ras_correctable=6, retired_pages=2, pending_pages=1,
        failed_pages=0, coredump=False)
    assert readings[AMD_B].kernel_health == KernelHealthReading(coredump=False)


def test_an_i915_error_state_and_a_device_coredump_are_read(tree):
    d = tree.add_intel_gpu(INTEL_A, driver="i915", card=2)
    (d / "drm" / "card2" / "error").write_text("No error state collected\n")
    x = tree.add_intel_gpu(INTEL_B, driver="xe", card=3)
    sweeper = _sweeper(tree, VENDOR_INTEL, Clock())
    health = {r.identity.pci_bus_id: r.kernel_health for r in sweeper.sweep()}
    assert health == {INTEL_A: KernelHealthReading(hang_captured=False, coredump=False),
                      INTEL_B: KernelHealthReading(coredump=False)}
    (d / "drm" / "card2" / "error").write_text("[drm] GPU HANG: ecode 12:1:85dffffb\n" * 10**5)
    (tree.sysfs / "devcd1").mkdir()
    (x / "devcoredump").symlink_to(tree.sysfs / "devcd1")
    health = {r.identity.pci_bus_id: r.kernel_health for r in sweeper.sweep()}
    assert health == {INTEL_A: KernelHealthReading(hang_captured=True, coredump=False),
                      INTEL_B: KernelHealthReading(coredump=True)}


@pytest.mark.parametrize("text, counts", [
    ("ue: 3\nce: 4\n", (3, 4)), ("ue: 0\n", (0, None)), ("", (None, None)),
    ("ue: x\nce: -1\n", (None, None)), ("garbage" * 50, (None, None)),
])
def test_err_count_parsing(text, counts):
    assert parse_err_count(text) == counts


def test_a_gpu_whose_config_space_reads_all_ones_is_off_the_bus(tree):
    """The PCI config space's vendor ID, read from the hardware: 0xffff once the GPU fell off
    the bus (the cached ``vendor`` file still says 0x1002)."""
    d = tree.add_amd_gpu(AMD_A)
    (d / "config").write_bytes(b"\x02\x10\xa1\x74" + bytes(60))
    sweeper = _sweeper(tree, VENDOR_AMD, Clock())
    assert sweeper.sweep()[0].kernel_health.off_bus is False
    (d / "config").write_bytes(b"\xff" * 64)
    assert sweeper.sweep()[0].kernel_health.off_bus is True


def test_an_intel_gpu_without_gt_idle_residency_has_no_duty_cycle(tree):
    """Older kernels: no residency file, so no duty cycle (absent, never 0 nor the clients')."""
    tree.add_intel_gpu(INTEL_A, driver="i915")
    tree.set_idle_residency(INTEL_A, None)
    tree.add_process(100, {3: DrmClient("i915", INTEL_A, 1, engine_ns={"render": 0})})
    clock = Clock(0.0)
    sweeper = _sweeper(tree, VENDOR_INTEL, clock)
    sweeper.sweep()
    tree.update_client(100, 3, engine_ns={"render": 4 * 10**9})
    clock.now += 10
    r = sweeper.sweep()[0]
    assert r.utilization_percent is None
    assert r.unattributed_engine_seconds == 0.0 and r.processes[0].engine_busy_seconds == 4.0


def test_an_unreadable_process_is_named_and_the_source_stays_ok():
    from gpustats.engine.drm_source import ReportedDrmSweeper
    from gpustats.model.device import DeviceIdentity, DeviceReading
    from gpustats.sources.errors import CollectionErrors

    class Sweeper:
        def sweep(self):
            return (DeviceReading(identity=DeviceIdentity(index=0, uuid="amd-1", vendor="amd"),
                                  monotonic_seconds=0.0, unreadable_pids=(4242,)),)

    errors = CollectionErrors()
    ReportedDrmSweeper(Sweeper(), "amd", errors, capabilities=lambda: 0x80004).sweep()
    [state] = errors.states()
    assert (state.state, state.last_error_reason) == ("ok", "process_unreadable")
    assert state.last_error.startswith("PID 4242 cannot be read although the daemon holds")
    assert ("amd", "process_unreadable", 1) in errors.totals()
