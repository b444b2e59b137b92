"""The page's header: its notes (what keeps GPUs from being read, per vendor; the sources that
fail) and its totals (GPUs by health, power, and where that power is billed), as display text.

Every vendor speaks for itself: a node of AMD GPUs is not told that no NVIDIA GPU is on its
bus, and a GPU whose health is not known is counted as such, never as unhealthy. The power
billed to tenants is their attributed power plus their idle shares, so that with what nobody
is billed for (unattributed, unallocated idle) it adds up to the GPUs' power over the tick.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from gpustats.export.tenants import present_sum
from gpustats.export.text import shown
from gpustats.model.snapshot import DaemonStatus, DeviceStats, Snapshot, VendorStatus
from gpustats.model.sources import STATE_FAILING

# Each vendor as the page names it, and the interface the daemon reads its GPUs through.
VENDOR_WORDS: dict[str, tuple[str, str]] = {
    "nvidia": ("NVIDIA", "NVML"), "amd": ("AMD", "amdgpu sysfs"),
    "intel": ("Intel", "i915/xe sysfs"),
}
# The health states of the page's badges, in the order the header counts them.
HEALTH_STATES = (("healthy", "healthy"), ("unhealthy", "unhealthy"), ("lost", "lost"),
                 ("unknown", "health unknown"))


def _vendors(status: DaemonStatus) -> tuple[VendorStatus, ...]:
    """Every vendor's status, NVIDIA's as the NVML gate counts it."""
    return (VendorStatus("nvidia", status.gpus_on_pci_bus, status.nvml_loaded),
            *(v for v in status.vendors if v.vendor != "nvidia"))


def _gpus(count: int, vendor: str) -> str:
    return f"{count} {vendor} GPU" + ("s" if count != 1 else "")


def vendor_notes(status: DaemonStatus) -> list[str]:
    """What keeps a vendor's GPUs on the bus from being read; one line when no GPU of any
    vendor is on the bus."""
    vendors = _vendors(status)
    if not any(v.gpus_on_pci_bus for v in vendors):
        return ["No GPU on this node's PCI bus"]
    notes = []
    for v in vendors:
        if not v.gpus_on_pci_bus or v.interface_open:
            continue
        name, interface = VENDOR_WORDS.get(v.vendor, (shown(v.vendor), "its interface"))
        why = f": {shown(status.nvml_error)}" if v.vendor == "nvidia" and status.nvml_error \
            else ""
        notes.append(f"{_gpus(v.gpus_on_pci_bus, name)} on the PCI bus, but {interface} is "
                     f"not loaded{why}")
    return notes


def source_notes(status: DaemonStatus) -> list[str]:
    """Each failing source by name, with its reason and last error."""
    notes = []
    for s in status.sources:
        if s.state != STATE_FAILING:
            continue
        reason = f" ({shown(s.last_error_reason)})" if s.last_error_reason else ""
        error = f": {shown(s.last_error)}" if s.last_error else ""
        notes.append(f"The {shown(s.source)} source is failing{reason}{error}")
    return notes


def page_notes(status: DaemonStatus) -> tuple[str, ...]:
    return (*vendor_notes(status), *source_notes(status))


def gpu_count(states: Sequence[str]) -> str:
    """"8 (6 healthy, 2 health unknown)": each health state that some GPU is in."""
    parts = [f"{states.count(state)} {words}" for state, words in HEALTH_STATES
             if state in states]
    return f"{len(states)} ({', '.join(parts)})" if parts else str(len(states))


def _watts(values: Iterable[float | None]) -> float | None:
    return present_sum(list(values))


def power_totals(snapshot: Snapshot) -> tuple[float | None, float | None, float | None]:
    """(power now, billed to tenants, billed to nobody) in watts: tenants' attributed power
    plus their idle shares; the unattributed and unallocated idle power of the GPUs."""
    holders = [a for p in snapshot.pods for a in p.accelerators]
    entries = [a for c in snapshot.containers if c.pod_uid is None for a in c.accelerators]
    billed = _watts([*(a.attributed_power_watts for a in holders),
                     *(a.idle_share_power_watts for a in holders),
                     *(a.attributed_power_watts for a in entries),
                     *(a.idle_share_power_watts for a in entries)])
    nobody = _watts([*(d.unattributed_power_watts for d in snapshot.devices),
                     *(d.unallocated_idle_power_watts for d in snapshot.devices)])
    return _watts(d.power_watts for d in snapshot.devices), billed, nobody


def gpu_names(devices: Sequence[DeviceStats]) -> dict[str, tuple[str, str]]:
    """Per GPU UUID: (its card's title, its short name in the tenants' "on GPU" column). Each
    vendor numbers its own GPUs from 0 (as nvidia-smi, amd-smi and xpu-smi do), so on a node of
    several vendors the vendor is named too: "AMD GPU 0", "AMD 0"; else "GPU 0", "0"."""
    vendors = {d.identity.vendor for d in devices}
    out = {}
    for d in devices:
        ident = d.identity
        if len(vendors) > 1:
            name = VENDOR_WORDS.get(ident.vendor or "", (shown(ident.vendor or "?"),))[0]
            out[ident.uuid] = (f"{name} GPU {ident.index}", f"{name} {ident.index}")
        else:
            out[ident.uuid] = (f"GPU {ident.index}", str(ident.index))
    return out
