"""What a container sees of one of its GPUs: the whole device, or under MIG its own instance.

A MIG tenant's accelerator is its MIG device (the kubelet's ``AcceleratorStats`` of that
device): its UUID, its memory and its activity as the duty cycle. The whole GPU's figures would
hand every tenant the same memory total and the sum of everyone's memory in use.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpustats.model.snapshot import ContainerAccelerator, DeviceStats, MigInstanceStats


@dataclass(frozen=True)
class AcceleratorView:
    """The kubelet's accelerator figures for one container; ``None`` = unknown."""

    id: str
    model: str | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    duty_cycle_percent: int | None
    parent_id: str | None = None     # the physical GPU's UUID when this is a MIG device


def _instance(device: DeviceStats, gpu_instance_id: int) -> MigInstanceStats | None:
    for instance in device.mig_instances:
        if instance.gpu_instance_id == gpu_instance_id:
            return instance
    return None


def activity_percent(ratio: float | None) -> int | None:
    """A MIG instance's activity (0..1, GPM or dcgm-exporter) as an integer percent."""
    if ratio is None:
        return None
    return min(100, max(0, round(ratio * 100)))


def container_view(acc: ContainerAccelerator, device: DeviceStats) -> AcceleratorView:
    """The device's own figures, or its MIG instance's when the container holds one."""
    ident = device.identity
    if acc.gpu_instance_id is None:
        return AcceleratorView(ident.uuid, ident.name, ident.memory_total_bytes,
                               device.memory_used_bytes, device.duty_cycle_percent)
    instance = _instance(device, acc.gpu_instance_id)
    if instance is None:
        # The instance is gone from this tick's list: nothing of it is known but its parent.
        return AcceleratorView(ident.uuid, ident.name, None, None, None, parent_id=ident.uuid)
    return AcceleratorView(instance.uuid or ident.uuid, ident.name,
                           instance.memory_total_bytes, instance.memory_used_bytes,
                           activity_percent(instance.activity_ratio), parent_id=ident.uuid)
