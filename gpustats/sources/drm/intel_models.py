"""Intel GPUs' model names by PCI device ID, and their local memory from the driver's sysfs.

Neither i915 nor xe has a name file (amdgpu's ``product_name`` has no Intel peer), so a card
is named from its PCI ``device`` ID. The IDs are the kernel's own lists
(include/drm/intel/pciids.h: ``INTEL_ATS_M150_IDS``, ``INTEL_ATS_M75_IDS``, ``INTEL_PVC_IDS``,
``INTEL_DG2_G10/G11/G12_IDS``, ``INTEL_BMG_IDS``); the kernel names platforms, not products,
so an ID whose product is not pinned down here is named by its family, never guessed.

Local memory (``memory_total_bytes``): xe's ``<device>/tile<N>/physical_vram_size_bytes``
(xe_tile_sysfs.c, decimal bytes; summed over tiles); i915's ``card<N>/lmem_total_bytes``, which
only Intel's out-of-tree (DKMS backport) i915 registers on the DRM card. Mainline i915 has no
sysfs total: absent, never 0.
"""

from __future__ import annotations

import os
import re

from gpustats.sources.drm.reads import FsReads

FLEX = "Intel Data Center GPU Flex"
MAX = "Intel Data Center GPU Max"
ARC_A = "Intel Arc A-series"
ARC_B = "Intel Arc B-series"

# Products whose ID is pinned down: the data-center cards, and Arc's desktop and Pro cards.
PRODUCTS: dict[int, str] = {
    0x56C0: f"{FLEX} 170", 0x56C2: f"{FLEX} 170", 0x56C1: f"{FLEX} 140",     # ATS-M150, M75
    0x0BD5: f"{MAX} 1550", 0x0BDA: f"{MAX} 1100",                            # PVC
    0x56A0: "Intel Arc A770", 0x56A1: "Intel Arc A750", 0x56A2: "Intel Arc A580",
    0x56A5: "Intel Arc A380", 0x56A6: "Intel Arc A310",
    0x56B3: "Intel Arc Pro A60", 0xE20B: "Intel Arc B580", 0xE20C: "Intel Arc B570",
}
# Every other ID of those platforms: the family.
FAMILIES: dict[int, str] = {
    **dict.fromkeys((0x0B69, 0x0B6E, 0x0BD4, 0x0BD6, 0x0BD7, 0x0BD8, 0x0BD9, 0x0BDB, 0x0BE0,
                     0x0BE1, 0x0BE5), MAX),
    **dict.fromkeys((0x5690, 0x5691, 0x5692, 0x56BE, 0x56BF,                 # DG2-G10
                     0x5693, 0x5694, 0x5695, 0x56B0, 0x56B1, 0x56BA, 0x56BB, 0x56BC,
                     0x56BD,                                                 # DG2-G11
                     0x5696, 0x5697, 0x56A3, 0x56A4, 0x56B2), ARC_A),       # DG2-G12
    **dict.fromkeys((0xE202, 0xE20D, 0xE210, 0xE211, 0xE212, 0xE215, 0xE216), ARC_B),
}
_TILE = re.compile(r"tile\d+")


def model_name(device_id: int | None) -> str | None:
    """The card's name by its PCI device ID; ``None`` for an ID not listed (an integrated
    GPU, a newer card)."""
    if device_id is None:
        return None
    return PRODUCTS.get(device_id) or FAMILIES.get(device_id)


def local_memory_bytes(fs: FsReads, device_dir: str, card: str | None) -> int | None:
    """The card's local memory: xe's tiles' VRAM summed, else the backport i915's total."""
    tiles = [fs.integer(os.path.join(device_dir, name, "physical_vram_size_bytes"))
             for name in sorted(fs.names(device_dir)) if _TILE.fullmatch(name)]
    sizes = [size for size in tiles if size is not None and size > 0]
    if sizes:
        return sum(sizes)
    if card is None:
        return None
    total = fs.integer(os.path.join(device_dir, "drm", card, "lmem_total_bytes"))
    return total if total is not None and total > 0 else None
