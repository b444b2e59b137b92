"""Dynamic Resource Allocation: claim devices held by containers, and what CDI says they are."""

from __future__ import annotations

from gpustats.model.record import record

# Why a claim device stays unresolved (shown beside the container that holds it).
UNRESOLVED_NO_CDI_DEVICE = "no-cdi-device"           # the kubelet named no CDI device
UNRESOLVED_SPEC_NOT_FOUND = "cdi-spec-not-found"     # no readable spec defines the CDI name
UNRESOLVED_NO_NVIDIA_NODE = "no-nvidia-device-node"  # the CDI device gives no GPU node or UUID
UNRESOLVED_GPU_NOT_FOUND = "gpu-not-found"           # minor or UUID that NVML does not know
UNRESOLVED_MIG_UNKNOWN = "mig-instance-unknown"      # MIG GPU, capability minors not found


@record
class ClaimDevice:
    """One device of a ResourceClaim allocated to a container (pod-resources ClaimResource)."""

    claim_name: str
    claim_namespace: str
    driver_name: str | None = None
    pool_name: str | None = None
    device_name: str | None = None
    share_id: str | None = None              # consumable capacity (kubelet 1.35+)
    cdi_devices: tuple[str, ...] = ()        # fully qualified: vendor.com/class=name


@record
class CdiDeviceNodes:
    """What one CDI device gives a container: its spec-level and device-level edits merged."""

    gpu_minors: tuple[int, ...] = ()             # /dev/nvidia<minor>
    capability_minors: tuple[int, ...] = ()      # /dev/nvidia-caps/nvidia-cap<minor>
    visible_device_uuids: tuple[str, ...] = ()   # NVIDIA_VISIBLE_DEVICES=GPU-…,MIG-…


@record
class MigCapability:
    """A MIG capability device minor and the instance it opens (procfs ``…/access``)."""

    gpu_minor: int
    gpu_instance_id: int
    compute_instance_id: int | None = None   # None: the GPU instance's own capability


@record
class UnresolvedClaim:
    """A claim device a container holds that could not be mapped to a GPU, and why."""

    claim: ClaimDevice
    reason: str
