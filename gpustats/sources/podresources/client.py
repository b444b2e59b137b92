"""kubelet pod-resources ``List``: which container holds which GPU (and MIG instance).

The NVIDIA device plugin reports ``GPU-<uuid>`` for a full GPU, ``MIG-<uuid>`` for a MIG
device (``MIG-GPU-<uuid>/<gi>/<ci>`` on drivers before R470), and ``<id>::<n>`` for
time-slicing and MPS replicas. GKE's plugin reports ``nvidia0``-style names, which carry no
UUID: those are not mapped (the NVML process path still is). ROCm's plugin (``amd.com/gpu``)
reports a GPU's PCI address, Intel's (``gpu.intel.com/i915``, ``gpu.intel.com/xe``) its DRM
card and share, ``card0-0``. Only resources that allocate some vendor's GPUs
(``vendors.Vendor.resources``) are kept; other device plugins' devices are skipped unread.

Devices allocated through ResourceClaims (DRA) come in ``dynamic_resources`` instead, from
every driver: which of them are GPUs is decided later, from their CDI devices. Kubelets before
1.35 send no ``share_id`` and before 1.31 no driver, pool or device name; those stay ``None``.

The reply is read from its wire bytes here, not decoded by protobuf: decoding builds every
field of every message (8 MiB of empty device entries is ~256 MB decoded, 8 MiB of packed CPU
IDs 128 MB), while this reader keeps only the fields above, skips the rest by length and
counts as it goes. A reply over ``REPLY_LIMITS`` is refused as soon as a count is crossed
(source ``pod_resources`` failing, reason ``reply_over_limits``; an unreadable one
``malformed_reply``), and the last good listing is kept until ``stale_after_seconds``, as
when a call fails. The limits are far above any real node: more than 5,000 pods (the kubelet
runs 110 by default, large nodes up to ~1,000), more than 10,000 GPU and claim devices
(device IDs of GPU resources, DRA claim devices and their CDI devices: 16 GPUs
of 7 MIG instances, each time-sliced 64 ways, is 7,168), or more than 250,000 fields walked
(1,000 pods of 3 containers, each holding a GPU replica and a NIC, walk 33,000). Reading a
reply within them takes at most ~11 MB and ~0.15 s (10,000 800-character device IDs; 5,000
pods of 253-character names), once per fetch; names are decoded only for pods and containers
holding a device, and repeated strings (pod, namespace, container and resource names, device
IDs and UUIDs, claim fields) are one object each per reply. After a reply of 1 MiB or more,
``malloc_trim(0)`` hands the freed heap back (without it ~5-7 MB stayed after a 5.8 MB reply).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import re
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from gpustats.model.containers import DeviceRef, PodDeviceAllocation
from gpustats.model.dra import ClaimDevice
from gpustats.sources.errors import CollectionErrors
from gpustats.sources.driver_procfs import normalize_bus_id
from gpustats.sources.grpc_channel import ReplyRefused, UnixChannel
from gpustats.sources.vendors import allocating_vendor

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"
REFUSED_OVER_LIMITS = "reply_over_limits"
REFUSED_MALFORMED = "malformed_reply"
# A reply at least this large is followed by malloc_trim(0): glibc keeps the heap it grew for
# it (its mmap threshold rises to the size of the last large block freed).
TRIM_AFTER_REPLY_BYTES = 1 << 20
_LEGACY_MIG = re.compile(r"^MIG-(GPU-[0-9A-Za-z-]+)/(\d+)/(\d+)$")
# ROCm's device plugin names a whole GPU by its PCI address; Intel's by its DRM card and a
# share number (``card0-0``; more than one share with ``-shared-dev-num``).
_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_INTEL_CARD_SHARE = re.compile(r"^(card\d+)-(\d+)$")
_UUID_BODY = re.compile(r"^[0-9A-Za-z][0-9A-Za-z-]*$")
_MAX_FIELD_NUMBER = (1 << 29) - 1


@dataclass(frozen=True)
class ReplyLimits:
    """How much of a ``List`` reply is read before it is refused (see the module docstring)."""

    pods: int = 5_000
    devices: int = 10_000       # GPU resources' device IDs, DRA claim devices and CDI devices
    fields: int = 250_000       # fields walked, at every level read


REPLY_LIMITS = ReplyLimits()


def _same(text: str) -> str:
    return text


def parse_device_id(device_id: str,
                    share: Callable[[str], str] = _same) -> DeviceRef | None:
    """A device-plugin ID → DeviceRef: an NVML UUID (NVIDIA's plugin), a PCI address (ROCm's)
    or a DRM card and its share (Intel's); ``None`` for IDs that name none (an AMD compute
    partition, GKE's ``nvidia0``). ``share`` returns the one object kept for a GPU's text
    (replicas of one GPU share it)."""
    text = device_id.strip()
    replica = None
    base, sep, suffix = text.rpartition("::")
    if sep:
        if not suffix.isdigit():
            return None
        text, replica = base, int(suffix)
    if _PCI_ADDRESS.match(text.lower()):
        return DeviceRef(kind="pci", uuid=share(normalize_bus_id(text)), replica=replica)
    card = _INTEL_CARD_SHARE.match(text)
    if card and replica is None:
        return DeviceRef(kind="card", uuid=share(card.group(1)), replica=int(card.group(2)))
    legacy = _LEGACY_MIG.match(text)
    if legacy:
        return DeviceRef(kind="mig", uuid=share(text), replica=replica,
                         parent_uuid=share(legacy.group(1)),
                         gpu_instance_id=int(legacy.group(2)))
    for prefix, kind in (("GPU-", "gpu"), ("MIG-", "mig")):
        if (text.startswith(prefix) and _UUID_BODY.match(text[len(prefix):] or "-x")
                and len(text) > len(prefix)):
            return DeviceRef(kind=kind, uuid=share(text), replica=replica)
    return None


@functools.lru_cache(maxsize=64)
def _allocates_gpus(resource: bytes) -> bool:
    """Whether a device-plugin resource (its name's bytes, not decoded: another plugin's is
    skipped unread) hands out some vendor's GPUs. A handful of names repeat in every reply."""
    try:
        return allocating_vendor(resource.decode("ascii")) is not None
    except UnicodeDecodeError:
        return False


class _Malformed(Exception):
    pass


_Span = tuple[int, int]                  # a field's bytes: data[start:end]
_NO_TEXT: _Span = (0, 0)                 # a string field not given reads "" (proto3)
# What a container holds, before its pod's names are known: (resource name, device ID,
# device, claim).
_Held = tuple[str, str, DeviceRef | None, ClaimDevice | None]


class _ReplyReader:
    """One ``ListPodResourcesResponse``'s wire bytes → allocations, counted as it reads.

    Field numbers (podresources_api.proto): reply ``pod_resources`` 1; pod ``name`` 1,
    ``namespace`` 2, ``containers`` 3; container ``name`` 1, ``devices`` 2,
    ``dynamic_resources`` 5; devices ``resource_name`` 1, ``device_ids`` 2; dynamic resource
    ``claim_name`` 2, ``claim_namespace`` 3, ``claim_resources`` 4; claim resource
    ``cdi_devices`` 1, ``driver_name`` 2, ``pool_name`` 3, ``device_name`` 4, ``share_id`` 5;
    CDI device ``name`` 1. Every other field is skipped by its length, unread. Each message
    is walked as it comes (a singular string's last occurrence wins, in any field order) and
    only what is kept is held: names are decoded for the pods and containers holding a
    device."""

    def __init__(self, data: bytes, limits: ReplyLimits):
        self._data = data
        self._view = memoryview(data)
        self._limits = limits
        self._fields = self._pods = self._devices = 0
        self._shared: dict[str, str] = {}
        self._refs: dict[str, DeviceRef | None] = {}
        self._claims: dict[ClaimDevice, ClaimDevice] = {}
        self._out: list[PodDeviceAllocation] = []

    def read(self) -> tuple[PodDeviceAllocation, ...]:
        for number, start, end in self._walk(0, len(self._data)):
            if number == 1:
                self._count_pod()
                self._pod(start, end)
        return tuple(self._out)

    # -- the wire format

    def _varint(self, pos: int, end: int) -> tuple[int, int]:
        data, value, shift = self._data, 0, 0
        while True:
            if pos >= end or shift > 63:
                raise _Malformed(f"a truncated or overlong varint at byte {pos}")
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos
            shift += 7

    def _walk(self, pos: int, end: int) -> Iterator[tuple[int, int, int]]:
        """(field number, start, end) of each length-delimited field of the message in
        ``data[pos:end]``; scalar fields are skipped. Every field counts toward the limit."""
        data, limit = self._data, self._limits.fields
        while pos < end:
            self._fields += 1
            if self._fields > limit:
                raise ReplyRefused(REFUSED_OVER_LIMITS, f"more than {limit:,} fields, far "
                                   "more than any node's listing")
            key = data[pos]
            if key < 0x80:
                pos += 1
            else:
                key, pos = self._varint(pos, end)
            number, wire_type = key >> 3, key & 7
            if not 0 < number <= _MAX_FIELD_NUMBER:
                raise _Malformed(f"field number {number} before byte {pos}")
            if wire_type == 2:
                size = data[pos] if pos < end else 0x80
                if size < 0x80:
                    pos += 1
                else:
                    size, pos = self._varint(pos, end)
                if pos + size > end:
                    raise _Malformed(f"a field of {size:,} bytes past its message's end")
                yield number, pos, pos + size
                pos += size
            elif wire_type == 0:
                _, pos = self._varint(pos, end)
            elif wire_type == 1 or wire_type == 5:
                pos += 8 if wire_type == 1 else 4
                if pos > end:
                    raise _Malformed("a fixed-size field past its message's end")
            else:
                raise _Malformed(f"wire type {wire_type} before byte {pos}")

    def _text(self, span: _Span) -> str:
        """The UTF-8 text of ``span``, one object for each distinct text."""
        return self._share(str(self._view[span[0]:span[1]], "utf-8"))

    def _share(self, text: str) -> str:
        return self._shared.setdefault(text, text)

    # -- the counts

    def _count_pod(self) -> None:
        self._pods += 1
        if self._pods > self._limits.pods:
            raise ReplyRefused(REFUSED_OVER_LIMITS, f"more than {self._limits.pods:,} pods "
                               "listed, far more than a node runs")

    def _count_device(self) -> None:
        self._devices += 1
        if self._devices > self._limits.devices:
            raise ReplyRefused(REFUSED_OVER_LIMITS, f"more than {self._limits.devices:,} "
                               "GPU and claim devices listed, far more than a node holds")

    # -- the messages

    def _pod(self, start: int, end: int) -> None:
        name = namespace = _NO_TEXT
        held: list[tuple[str, list[_Held]]] = []
        for number, s, e in self._walk(start, end):
            if number == 1:
                name = (s, e)
            elif number == 2:
                namespace = (s, e)
            elif number == 3:
                container = self._container(s, e)
                if container is not None:
                    held.append(container)
        if not held:
            return
        pod, pod_namespace = self._text(name), self._text(namespace)
        for container_name, items in held:
            for resource, device_id, device, claim in items:
                self._out.append(PodDeviceAllocation(
                    pod_name=pod, pod_namespace=pod_namespace, container_name=container_name,
                    resource_name=resource, device_id=device_id, device=device, claim=claim))

    def _container(self, start: int, end: int) -> tuple[str, list[_Held]] | None:
        """(container name, what it holds); ``None`` when it holds nothing kept."""
        name = _NO_TEXT
        items: list[_Held] = []
        for number, s, e in self._walk(start, end):
            if number == 1:
                name = (s, e)
            elif number == 2:
                self._gpu_devices(s, e, items)
            elif number == 5:
                self._claimed_devices(s, e, items)
        return (self._text(name), items) if items else None

    def _gpu_devices(self, start: int, end: int, items: list[_Held]) -> None:
        """One ``ContainerDevices``: its device IDs when its resource allocates GPUs."""
        resource = self._last(start, end, 1)
        if resource is None or not _allocates_gpus(self._data[resource[0]:resource[1]]):
            return
        resource_name = self._text(resource)
        for number, s, e in self._walk(start, end):
            if number == 2:
                self._count_device()
                device_id = self._text((s, e))
                items.append((resource_name, device_id, self._device(device_id), None))

    def _device(self, device_id: str) -> DeviceRef | None:
        if device_id not in self._refs:
            self._refs[device_id] = parse_device_id(device_id, self._share)
        return self._refs[device_id]

    def _claimed_devices(self, start: int, end: int, items: list[_Held]) -> None:
        """One ``DynamicResource``: a claim device for each of its claim resources."""
        claim_name = claim_namespace = _NO_TEXT
        resources: list[_Span] = []
        for number, s, e in self._walk(start, end):
            if number == 2:
                claim_name = (s, e)
            elif number == 3:
                claim_namespace = (s, e)
            elif number == 4:
                self._count_device()
                resources.append((s, e))
        for span in resources:
            claim = self._claim_device(self._text(claim_name), self._text(claim_namespace),
                                       *span)
            claim = self._claims.setdefault(claim, claim)
            device_id = self._share(f"{claim.pool_name or ''}/{claim.device_name or ''}")
            items.append((claim.driver_name or "", device_id, None, claim))

    def _claim_device(self, claim_name: str, claim_namespace: str, start: int,
                      end: int) -> ClaimDevice:
        strings: dict[int, _Span] = {}
        cdi_devices: list[str] = []
        for number, s, e in self._walk(start, end):
            if number == 1:
                self._count_device()            # each CDI device name is kept too
                cdi = self._cdi_device_name(s, e)
                if cdi:
                    cdi_devices.append(cdi)
            elif 2 <= number <= 5:
                strings[number] = (s, e)
        share_id = strings.get(5)
        return ClaimDevice(
            claim_name=claim_name, claim_namespace=claim_namespace,
            driver_name=self._text(strings.get(2, _NO_TEXT)) or None,
            pool_name=self._text(strings.get(3, _NO_TEXT)) or None,
            device_name=self._text(strings.get(4, _NO_TEXT)) or None,
            share_id=self._text(share_id) if share_id is not None else None,
            cdi_devices=tuple(cdi_devices))

    def _cdi_device_name(self, start: int, end: int) -> str:
        return self._text(self._last(start, end, 1) or _NO_TEXT)

    def _last(self, start: int, end: int, wanted: int) -> _Span | None:
        """The last occurrence of field ``wanted`` in a message (as protobuf reads a singular
        field given twice); ``None`` when it is not given."""
        found = None
        for number, s, e in self._walk(start, end):
            if number == wanted:
                found = (s, e)
        return found


def allocations_from_reply(data: bytes,
                           limits: ReplyLimits = REPLY_LIMITS) -> tuple[PodDeviceAllocation, ...]:
    """A ListPodResourcesResponse's wire bytes → its NVIDIA device-plugin and DRA claim
    allocations; raises ``ReplyRefused`` for a reply over ``limits`` or unreadable.

    A claim device shared by several containers is one object (each container lists it), so
    every later look-up of it is by the same object."""
    try:
        return _ReplyReader(data, limits).read()
    except (_Malformed, UnicodeDecodeError) as exc:
        raise ReplyRefused(REFUSED_MALFORMED, f"not a pod-resources listing ({exc})") from None


def allocations_from_response(response) -> tuple[PodDeviceAllocation, ...]:
    """A decoded ListPodResourcesResponse (tests, tools) → allocations, read as its bytes."""
    return allocations_from_reply(response.SerializeToString())


def release_freed_memory() -> None:
    """Best effort: glibc's ``malloc_trim(0)`` hands freed heap back to the system."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _list_method(channel):
    # The reply comes as its bytes (no deserializer): _ReplyReader reads it.
    return channel.unary_unary(LIST_METHOD, request_serializer=None,
                               response_deserializer=None)


class PodResourcesClient:
    """Cached ``List`` over the kubelet socket; ``None`` when the source is off or failing."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, *, timeout_seconds: float = 1.0,
                 cache_seconds: float = 15.0, stale_after_seconds: float = 300.0,
                 errors: CollectionErrors | None = None,
                 monotonic: Callable[[], float] = time.monotonic,
                 limits: ReplyLimits = REPLY_LIMITS):
        self._channel = UnixChannel(socket_path, "pod-resources", log,
                                    timeout_seconds=timeout_seconds,
                                    source="pod_resources", errors=errors)
        self._cache_seconds = cache_seconds
        self._stale_after = stale_after_seconds
        self._monotonic = monotonic
        self._limits = limits
        self._cached: tuple[PodDeviceAllocation, ...] | None = None
        self._cached_at: float | None = None
        self._last_attempt: float | None = None
        self._reply_bytes: int | None = None
        self.calls = 0
        self.generation = 0      # counts the listings received: the same while one is kept

    def allocations(self) -> tuple[PodDeviceAllocation, ...] | None:
        now = self._monotonic()
        if self._last_attempt is not None and now - self._last_attempt < self._cache_seconds:
            return self._fresh(now)
        self._last_attempt = now
        self.calls += 1
        self._reply_bytes = None
        listed = self._channel.call(_list_method, self._list)
        if listed is not None:
            self._cached = listed
            self.generation += 1
            self._cached_at = now
        if self._reply_bytes is not None and self._reply_bytes >= TRIM_AFTER_REPLY_BYTES:
            release_freed_memory()    # the reply, its reading and any listing replaced are freed
        return self._fresh(now)

    def _list(self, list_method, timeout: float) -> tuple[PodDeviceAllocation, ...]:
        reply = list_method(b"", timeout=timeout)
        self._reply_bytes = len(reply)
        try:
            return allocations_from_reply(reply, self._limits)
        except ReplyRefused as refused:
            kept = f"the last good listing is kept until it is {self._stale_after:g} s old" \
                if self._cached_at is not None else "no listing was received before"
            raise ReplyRefused(refused.reason,
                               f"{refused} ({len(reply):,} bytes); {kept}") from None

    def _fresh(self, now: float) -> tuple[PodDeviceAllocation, ...] | None:
        if self._cached_at is None or now - self._cached_at > self._stale_after:
            return None
        return self._cached

    def close(self) -> None:
        self._channel.close()
