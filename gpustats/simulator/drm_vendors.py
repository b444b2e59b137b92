"""What the simulator knows of AMD's and Intel's GPUs (pure tables): PCI ids, kernel drivers,
and the engine classes each driver's DRM fdinfo names, with how many engines of each class a
card has (``drm-engine-capacity-<class>``)."""

from __future__ import annotations

NVIDIA = "nvidia"
VENDORS = (NVIDIA, "amd", "intel")
PCI_VENDOR_IDS = {"amd": 0x1002, "intel": 0x8086}
DRIVERS = {"amd": ("amdgpu",), "intel": ("xe", "i915")}      # the first is the default
DEFAULT_NAMES = {"amd": "AMD Instinct MI300X", "intel": "Intel(R) Data Center GPU Flex 170"}
DEFAULT_DEVICE_IDS = {"amd": 0x74A1, "intel": 0x56C0}
# A display controller that is not VGA-compatible: what data-center cards without display
# outputs report. (MI300X reports 0x120000, a processing accelerator: its scenario says so.)
DEFAULT_PCI_CLASS = 0x038000
DRM_MAJOR = 226
RENDER_MINOR_BASE = 128

# Engine class -> engines of that class; the first class is a process's default. amdgpu
# (amdgpu_fdinfo.c) prints no capacity; i915 and xe print it for classes with more than one
# engine (DG2's counts: one render and one copy engine, two video, two enhance, four compute).
ENGINES = {
    "amdgpu": {"gfx": 1, "compute": 1, "dma": 1, "dec": 1, "enc": 1, "enc_1": 1, "jpeg": 1,
               "vpe": 1},
    "i915": {"render": 1, "copy": 1, "video": 2, "video-enhance": 2, "compute": 4},
    "xe": {"rcs": 1, "bcs": 1, "vcs": 2, "vecs": 2, "ccs": 4},
}
# xe's drm-total-cycles is the GPU's timestamp counter; DG2's runs at the 19.2 MHz reference.
XE_TIMESTAMP_HZ = 19_200_000


def default_engine(driver: str) -> str:
    return next(iter(ENGINES[driver]))
