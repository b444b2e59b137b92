"""The page's header speaks each vendor's words: no NVIDIA banner on a node of AMD GPUs, a GPU
whose health is unknown counted as such, a failing source named, and the power billed to
tenants (attributed and idle shares) adding up with what nobody is billed for."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpustats.export.page import format_watts, page_view
from gpustats.export.page_header import gpu_count, gpu_names, page_notes
from gpustats.model.device import VENDOR_AMD, DeviceIdentity
from gpustats.model.snapshot import DaemonStatus, DeviceStats, VendorStatus
from gpustats.model.sources import STATE_FAILING, STATE_OK, SourceState
from tests.support.snapshots import T
from tests.support.tenant_snapshot import UNALLOCATED_IDLE, UNATTRIBUTED, tenant_snapshot

AMD_NODE = DaemonStatus(gpus_on_pci_bus=0, nvml_loaded=False, vendors=(
    VendorStatus("nvidia", 0, False), VendorStatus("amd", 8, True),
    VendorStatus("intel", 0, False)))


def test_a_node_of_amd_gpus_has_no_nvidia_banner():
    assert page_notes(AMD_NODE) == ()


def test_each_vendor_says_what_keeps_its_gpus_from_being_read():
    status = replace(AMD_NODE, gpus_on_pci_bus=2, nvml_error="libnvidia-ml.so.1: not found",
                     vendors=(VendorStatus("amd", 8, False), VendorStatus("intel", 1, True)))
    assert page_notes(status) == (
        "2 NVIDIA GPUs on the PCI bus, but NVML is not loaded: libnvidia-ml.so.1: not found",
        "8 AMD GPUs on the PCI bus, but amdgpu sysfs is not loaded")
    bare = DaemonStatus(vendors=(VendorStatus("amd", 0, False),))
    assert page_notes(bare) == ("No GPU on this node's PCI bus",)


def test_a_failing_source_is_named_with_its_reason():
    status = replace(AMD_NODE, sources=(
        SourceState("amd", STATE_FAILING, T, last_error_reason="fdinfo_refused",
                    last_error="fdinfo of 3 processes refused", last_error_time=T),
        SourceState("persistence", STATE_OK, T)))
    assert page_notes(status) == (
        "The amd source is failing (fdinfo_refused): fdinfo of 3 processes refused",)


@pytest.mark.parametrize("states, text", [
    (["unknown"] * 8, "8 (8 health unknown)"),
    (["healthy", "healthy", "unknown", "unhealthy", "lost"],
     "5 (2 healthy, 1 unhealthy, 1 lost, 1 health unknown)"),
    ([], "0"),
])
def test_gpus_are_counted_by_health_unknown_apart(states, text):
    assert gpu_count(states) == text


def test_gpus_of_unknown_health_are_not_counted_unhealthy_on_the_page():
    snapshot = tenant_snapshot()
    amd = DeviceStats(identity=DeviceIdentity(2, "amd-0123", "AMD Instinct MI300X", None,
                                              "0000:19:00.0", vendor=VENDOR_AMD))
    page = page_view(replace(snapshot, devices=(*snapshot.devices, amd), status=AMD_NODE))
    totals = dict(page.totals)
    assert totals["GPUs"] == "3 (3 health unknown)"       # none of them has conditions
    assert not page.notes


def test_billed_to_tenants_holds_their_idle_shares_and_adds_up():
    """Σ tenants' attributed and idle-share power + unattributed + unallocated idle: every
    watt of the tick's power is in one of the two totals."""
    snapshot = tenant_snapshot()
    totals = dict(page_view(snapshot).totals)
    live = [a for p in snapshot.pods for a in p.accelerators] + [
        a for c in snapshot.containers if c.pod_uid is None for a in c.accelerators]
    billed = sum((a.attributed_power_watts or 0) + (a.idle_share_power_watts or 0)
                 for a in live)
    nobody = sum(w for w, _ in UNATTRIBUTED.values()) + sum(
        w for w, _ in UNALLOCATED_IDLE.values())
    assert totals["billed to tenants (active + idle share)"] == format_watts(billed)
    assert totals["billed to nobody (unattributed + unallocated idle)"] == format_watts(nobody)
    active_and_idle = sum((d.active_power_watts or 0) + (d.idle_power_watts or 0)
                          for d in snapshot.devices)
    assert billed + nobody == pytest.approx(active_and_idle)


def test_gpus_are_named_by_vendor_where_several_vendors_number_theirs_from_zero():
    def gpu(uuid, index, vendor):
        return DeviceStats(identity=DeviceIdentity(index, uuid, None, None, None, vendor=vendor))
    amd = [gpu("amd-a", 0, VENDOR_AMD), gpu("amd-b", 1, VENDOR_AMD)]
    assert gpu_names(amd) == {"amd-a": ("GPU 0", "0"), "amd-b": ("GPU 1", "1")}
    mixed = gpu_names([gpu("GPU-n", 0, "nvidia"), *amd, gpu("intel-x", 0, "intel")])
    assert mixed == {"GPU-n": ("NVIDIA GPU 0", "NVIDIA 0"), "amd-a": ("AMD GPU 0", "AMD 0"),
                     "amd-b": ("AMD GPU 1", "AMD 1"), "intel-x": ("Intel GPU 0", "Intel 0")}
