"""This tick's GPUs looked up by what device plugins and devices lists name them by."""

from gpustats.engine.gpu_mapping import GpuIndex
from gpustats.model.containers import PodDeviceAllocation
from gpustats.model.device import DeviceIdentity, DeviceReading
from gpustats.sources.podresources.client import parse_device_id


def _reading(**identity):
    return DeviceReading(identity=DeviceIdentity(**identity), monotonic_seconds=0.0)


INDEX = GpuIndex.of((
    _reading(index=0, uuid="GPU-aaaa", minor_number=0, pci_bus_id="00000000:3B:00.0",
             vendor="nvidia"),
    _reading(index=0, uuid="amd-0123456789abcdef", pci_bus_id="0000:19:00.0", vendor="amd",
             drm_card="card1", drm_minors=(1, 129)),
    _reading(index=0, uuid="intel-0000:03:00.0", pci_bus_id="0000:03:00.0", vendor="intel",
             drm_card="card2", drm_minors=(2, 130)),
))


def _resolve(device_id):
    return INDEX.resolve(PodDeviceAllocation(pod_name="p", pod_namespace="n",
                                             container_name="c", resource_name="r",
                                             device_id=device_id,
                                             device=parse_device_id(device_id)))


def test_device_plugin_ids_of_every_vendor_resolve():
    assert _resolve("GPU-aaaa") == ("GPU-aaaa", None)
    assert _resolve("0000:19:00.0") == ("amd-0123456789abcdef", None)
    assert _resolve("card2-0") == ("intel-0000:03:00.0", None)
    assert _resolve("card7-0") is None and _resolve("0000:99:00.0") is None


def test_device_nodes_of_every_vendor():
    assert INDEX.by_node[(195, 0)] == "GPU-aaaa"
    assert INDEX.by_node[(226, 129)] == "amd-0123456789abcdef"
    assert INDEX.by_node[(226, 2)] == "intel-0000:03:00.0"
    assert INDEX.by_minor == {0: "GPU-aaaa"}
