"""One DRM client's ``/proc/<pid>/fdinfo/<fd>`` text, parsed.

The format is the kernel's Documentation/gpu/drm-usage-stats.rst: one ``key:<tab>value`` pair
per line, standard keys starting with ``drm-``, a number optionally followed by a unit. What
the drivers print (amdgpu_fdinfo.c, i915_drm_client.c, xe_drm_client.c):

- ``drm-engine-<class>: N ns``: busy time (amdgpu, i915); amdgpu prints a class only once it
  was used. ``drm-engine-capacity-<class>``: identical engines in the class (absent: 1).
- ``drm-cycles-<class>`` with ``drm-total-cycles-<class>`` (xe): busy GPU ticks and the GPU
  timestamp, in the same unspecified clock.
- ``drm-{total,shared,resident,purgeable,active}-<region>: N [KiB|MiB]`` (no unit: bytes);
  ``drm-memory-<region>`` is the deprecated name of ``drm-resident-<region>``.
"""

from __future__ import annotations

from dataclasses import field

from gpustats.model.record import record

MEMORY_KINDS = ("total", "shared", "resident", "purgeable", "active")
_UNITS = {"": 1, "B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
MAX_VALUE = 2 ** 64 - 1          # the kernel prints u64 counters; more is not a counter
MAX_NAME = 64                    # an engine class or region name is a short word
MAX_ENTRIES = 64                 # per table: a hostile file cannot grow the record unbounded


@record
class DrmFdinfo:
    """What one DRM file's fdinfo says. Tables map an engine class or memory region to its
    value; a class or region the driver did not print is missing, not 0."""

    driver: str
    pdev: str | None = None                  # PCI address, "0000:19:00.0"
    client_id: int | None = None
    client_name: str | None = None
    engine_ns: dict[str, int] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)
    cycles: dict[str, int] = field(default_factory=dict)
    total_cycles: dict[str, int] = field(default_factory=dict)
    memory: dict[str, dict[str, int]] = field(default_factory=dict)   # kind -> region -> bytes

    def engine_capacity(self, engine: str) -> int:
        return self.capacity.get(engine, 1)

    def resident_bytes(self, region: str) -> int | None:
        """Resident bytes of a region; where the driver does not say, its total."""
        for kind in ("resident", "total"):
            value = self.memory.get(kind, {}).get(region)
            if value is not None:
                return value
        return None

    def regions(self) -> set[str]:
        return {region for table in self.memory.values() for region in table}


def parse_number(text: str, *, units: bool = True) -> int | None:
    """``"123"``, ``"123 ns"`` (a unit other than a size's is ignored, ``units`` False) or
    ``"4 KiB"`` → bytes; ``None`` when malformed or out of u64's range."""
    parts = text.split()
    if not parts or len(parts) > 2 or not (parts[0].isascii() and parts[0].isdigit()):
        return None
    value = int(parts[0])
    if units and len(parts) == 2:
        scale = _UNITS.get(parts[1])
        if scale is None:
            return None
        value *= scale
    return value if value <= MAX_VALUE else None


def _put(table: dict, key: str, value: int | None) -> None:
    if value is not None and key and len(key) <= MAX_NAME and \
            (key in table or len(table) < MAX_ENTRIES):
        table[key] = value


def parse_fdinfo(text: str) -> DrmFdinfo | None:
    """The DRM stats of one fdinfo text; ``None`` when it is not a DRM file's (no
    ``drm-driver``). Malformed lines are skipped; a key printed twice keeps its last value."""
    pairs: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.startswith("drm-"):
            pairs[key] = value.strip()
    driver = pairs.get("drm-driver")
    if not driver:
        return None
    info = DrmFdinfo(driver=driver[:MAX_NAME], pdev=pairs.get("drm-pdev") or None,
                     client_id=parse_number(pairs.get("drm-client-id", ""), units=False),
                     client_name=pairs.get("drm-client-name") or None)
    legacy: dict[str, int] = {}
    for key, value in pairs.items():
        _parse_pair(info, legacy, key[len("drm-"):], value)
    resident = info.memory.setdefault("resident", {})
    for region, size in legacy.items():      # drm-memory-<region>: resident, unless also named
        if region not in resident:
            _put(resident, region, size)
    if not resident:
        del info.memory["resident"]
    return info


def _parse_pair(info: DrmFdinfo, legacy: dict[str, int], key: str, value: str) -> None:
    """One ``drm-`` pair into ``info`` (the key without ``drm-``). Longer prefixes first:
    ``total-cycles-`` before ``total-``, ``engine-capacity-`` before ``engine-``."""
    if key.startswith("engine-capacity-"):
        capacity = parse_number(value, units=False)
        if capacity:                                       # 0 engines is no capacity
            _put(info.capacity, key[len("engine-capacity-"):], capacity)
    elif key.startswith("engine-"):
        _put(info.engine_ns, key[len("engine-"):], _nanoseconds(value))
    elif key.startswith("total-cycles-"):
        _put(info.total_cycles, key[len("total-cycles-"):], parse_number(value, units=False))
    elif key.startswith("cycles-"):
        _put(info.cycles, key[len("cycles-"):], parse_number(value, units=False))
    elif key.startswith("memory-"):
        _put(legacy, key[len("memory-"):], parse_number(value))
    else:
        kind, sep, region = key.partition("-")
        size = parse_number(value) if sep and kind in MEMORY_KINDS else None
        if size is not None:
            _put(info.memory.setdefault(kind, {}), region, size)


def _nanoseconds(value: str) -> int | None:
    """``"N ns"`` (the spec's unit; a bare number is taken as ns too); another unit (the
    pre-5.19 amdgpu percentages do not reach here: their keys lack ``drm-``) is refused."""
    parts = value.split()
    if len(parts) == 2 and parts[1] != "ns":
        return None
    return parse_number(value, units=False)
