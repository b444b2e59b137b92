"""The GPU vendors the daemon reads, one declaration each: how its GPUs look on the PCI bus,
which kernel drivers serve them, the interface the daemon reads them through, and the
Kubernetes device-plugin resources that hand them to containers."""

from __future__ import annotations

from dataclasses import dataclass

from gpustats.model.device import VENDOR_AMD, VENDOR_INTEL, VENDOR_NVIDIA

DISPLAY_CLASS = 0x03            # display controllers: VGA (0x0300), 3D (0x0302), other (0x0380)
ACCELERATOR_CLASS = 0x12        # processing accelerators (0x1200)


@dataclass(frozen=True)
class Vendor:
    name: str                              # model.device.VENDOR_*: the ``vendor`` label
    title: str                             # as people write it, for log lines
    pci_vendor_id: int
    # The kernel drivers that serve its GPUs. A GPU bound to none of them (vfio-pci, for a
    # virtual machine) is not the daemon's to read; one bound to no driver yet may be soon.
    drivers: tuple[str, ...]
    interface: str                         # what its GPUs are read through, for log lines
    # Device-plugin resources that allocate its GPUs: a name ending in "/" is a prefix.
    resources: tuple[str, ...]

    # PCI classes (the class code's top byte) its GPUs may have besides display controllers
    # (0x03): AMD's Instinct accelerators are processing accelerators (0x12), a class other
    # devices share, so a function of such a class is its only when bound to its driver.
    accelerator_classes: tuple[int, ...] = ()

    def serves(self, vendor_id: int | None, pci_class: int | None, driver: str | None) -> bool:
        if vendor_id != self.pci_vendor_id or pci_class is None:
            return False
        if pci_class >> 16 == DISPLAY_CLASS:
            return driver is None or driver in self.drivers
        return pci_class >> 16 in self.accelerator_classes and driver in self.drivers

    def allocates(self, resource: str) -> bool:
        """Whether a device-plugin resource of this name hands out this vendor's GPUs."""
        return any(resource.startswith(r) if r.endswith("/") else resource == r
                   for r in self.resources)


NVIDIA = Vendor(VENDOR_NVIDIA, "NVIDIA", 0x10DE, ("nvidia",), "NVML", ("nvidia.com/",))
# ROCm's device plugin: ``amd.com/gpu``, or ``amd.com/<compute>_<memory>`` per partition.
AMD = Vendor(VENDOR_AMD, "AMD", 0x1002, ("amdgpu",), "amdgpu sysfs and DRM fdinfo",
             ("amd.com/",), accelerator_classes=(ACCELERATOR_CLASS,))
# Intel's device plugin, by the card's driver; ``gpu.intel.com/monitoring`` (device ID
# ``all``) grants no GPU of its own.
INTEL = Vendor(VENDOR_INTEL, "Intel", 0x8086, ("i915", "xe"), "i915/xe sysfs and DRM fdinfo",
               ("gpu.intel.com/i915", "gpu.intel.com/xe"))

VENDORS: tuple[Vendor, ...] = (NVIDIA, AMD, INTEL)


def allocating_vendor(resource: str) -> Vendor | None:
    return next((v for v in VENDORS if v.allocates(resource)), None)
