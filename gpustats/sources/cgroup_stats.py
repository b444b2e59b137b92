"""Pure parsers of cgroup stat files (v1 and v2), and the kubelet's CPU/memory arithmetic."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gpustats.model.host import CpuStats, MemoryStats

log = logging.getLogger(__name__)

NVIDIA_MAJOR = 195
MAX_GPU_MINOR = 128            # 255 is nvidiactl, 254 nvidia-modeset
# DRM: /dev/dri/card<N> (minor N) and renderD<128+N>. AMD's /dev/kfd (a dynamic major) names
# no GPU of its own: KFD lets a process compute on a GPU only where its device cgroup allows
# that GPU's render node, so the 226 entries name the GPUs.
DRM_MAJOR = 226
MAX_DRM_MINOR = 256
V1_UNLIMITED = 1 << 62         # a v1 memory limit at or above this means "no limit"


@dataclass(frozen=True)
class DeviceRules:
    """A v1 ``devices.list``: only explicit ``c 195:<minor>`` (NVIDIA) and ``c 226:<minor>``
    (DRM: AMD, Intel) entries are GPU assignments."""

    all_devices: bool
    all_nvidia: bool
    gpu_minors: frozenset[int]
    malformed_lines: int = 0
    all_drm: bool = False
    drm_minors: frozenset[int] = frozenset()

    @property
    def gpu_nodes(self) -> frozenset[tuple[int, int]]:
        """The (major, minor) GPU nodes assigned one by one: none of a kind allowed whole."""
        nvidia = () if self.all_nvidia else ((NVIDIA_MAJOR, m) for m in self.gpu_minors)
        drm = () if self.all_drm else ((DRM_MAJOR, m) for m in self.drm_minors)
        return frozenset((*nvidia, *drm))


# The GPU device majors and the minors below which a node is a GPU's (above: control nodes).
GPU_MAJORS = {NVIDIA_MAJOR: MAX_GPU_MINOR, DRM_MAJOR: MAX_DRM_MINOR}
_MAJOR_TEXT = {str(major): major for major in GPU_MAJORS}     # as devices.list writes them


def parse_devices_list(text: str) -> DeviceRules:
    """``a *:* rwm`` (everything), ``c 195:* rwm`` (every NVIDIA node), ``c 195:0 rw`` (GPU 0),
    ``c 226:128 rw`` (a DRM render node), ``c 226:* rwm`` (every DRM node)."""
    all_devices = False
    whole: set[int] = set()                         # GPU majors allowed whole
    minors: dict[int, set[int]] = {major: set() for major in GPU_MAJORS}
    malformed = 0
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3 or parts[0] not in ("a", "b", "c") or ":" not in parts[1]:
            malformed += 1
            continue
        kind, numbers, _access = parts
        major, _, minor = numbers.partition(":")
        if kind == "a":
            all_devices = True
            continue
        gpu_major = _MAJOR_TEXT.get(major) if kind == "c" else None
        if gpu_major is None:
            if not (major == "*" or major.isdigit()) or not (minor == "*" or minor.isdigit()):
                malformed += 1
            continue
        if minor == "*":
            whole.add(gpu_major)
        elif minor.isdigit():
            if int(minor) < GPU_MAJORS[gpu_major]:
                minors[gpu_major].add(int(minor))
        else:
            malformed += 1
    return DeviceRules(all_devices, NVIDIA_MAJOR in whole, frozenset(minors[NVIDIA_MAJOR]),
                       malformed, DRM_MAJOR in whole, frozenset(minors[DRM_MAJOR]))


def parse_flat_keyed(text: str | bytes, keys: frozenset[str] | None = None) -> dict[str, int]:
    """``key value`` lines (cpu.stat, memory.stat); malformed lines are skipped.

    With ``keys``, only those are looked up (memory.stat has dozens of lines per read, and is
    read for every container: finding a few keys beats splitting every line). Bytes as read
    are taken too, and give what their text (decoded as ``read_text`` does) gives.
    """
    if isinstance(text, bytes):
        if keys is not None:
            return _pick_keyed_bytes(text, keys)
        text = text.decode("utf-8", "replace")
    if keys is not None:
        return _pick_keyed(text, keys)
    values = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        try:
            values[parts[0]] = int(parts[1])
        except ValueError:
            continue
    return values


def _pick_keyed(text: str, keys: frozenset[str]) -> dict[str, int]:
    """Each key's value from the first line that is the key, a space and an integer."""
    values = {}
    needles = _NEEDLES.get(keys)
    for key, needle in needles if needles is not None else ((k, k + " ") for k in keys):
        at = text.find(needle)
        while at >= 0:
            end = text.find("\n", at)
            if at == 0 or text[at - 1] == "\n":            # not the tail of a longer key
                try:
                    values[key] = int(text[at + len(needle):end if end >= 0 else None])
                    break
                except ValueError:
                    pass
            at = text.find(needle, at + 1)
    return values


def _pick_keyed_bytes(data: bytes, keys: frozenset[str]) -> dict[str, int]:
    """``_pick_keyed`` on undecoded bytes (no decoding of a whole memory.stat per read). A
    value that ``int`` refuses as bytes sends the whole file to ``_pick_keyed`` as text:
    ``int`` of text also takes non-ASCII digits and spaces, and the answer must not differ."""
    values = {}
    needles = _BYTE_NEEDLES.get(keys)
    for key, needle in needles if needles is not None else _byte_needles(keys):
        at = data.find(needle)
        while at >= 0:
            if at == 0 or data[at - 1] == 10:              # a line's start (10: newline)
                end = data.find(b"\n", at)
                try:
                    values[key] = int(data[at + len(needle):end if end >= 0 else None])
                except ValueError:
                    return _pick_keyed(data.decode("utf-8", "replace"), keys)
                break
            at = data.find(needle, at + 1)
    return values


def _byte_needles(keys: frozenset[str]) -> tuple[tuple[str, bytes], ...]:
    return tuple((key, (key + " ").encode()) for key in keys)


def cpu_stat_usage_usec(text: str | bytes) -> int | None:
    """``usage_usec`` of a v2 ``cpu.stat``: its first line on every kernel, looked for first.

    Bytes as read are taken too: the first line is parsed undecoded, and anything else is
    decoded (as ``read_text`` would) and looked at as text.
    """
    if isinstance(text, bytes):
        if text.startswith(b"usage_usec "):
            end = text.find(b"\n")
            try:
                return int(text[11:end if end >= 0 else None])
            except ValueError:
                pass          # as text below (int() of text takes more than ASCII digits)
        text = text.decode("utf-8", "replace")
    if text.startswith("usage_usec "):
        end = text.find("\n")
        try:
            return int(text[11:end if end >= 0 else None])
        except ValueError:
            pass
    return _pick_keyed(text, CPU_STAT_KEYS).get("usage_usec")


CPU_STAT_KEYS = frozenset({"usage_usec"})
MEMORY_STAT_KEYS_V1 = frozenset({"total_inactive_file", "total_rss", "total_pgfault",
                                 "total_pgmajfault"})
MEMORY_STAT_KEYS_V2 = frozenset({"inactive_file", "anon", "pgfault", "pgmajfault"})
# Each key and the text looked for, worked out once for the key sets read every tick.
_NEEDLES = {keys: tuple((key, key + " ") for key in keys)
            for keys in (CPU_STAT_KEYS, MEMORY_STAT_KEYS_V1, MEMORY_STAT_KEYS_V2)}
_BYTE_NEEDLES = {keys: _byte_needles(keys) for keys in _NEEDLES}


def parse_limit(text: str | None, *, v2: bool) -> int | None:
    """``memory.max`` (``max`` = none) or ``memory.limit_in_bytes`` (≥ 2^62 = none)."""
    if text is None:
        return None
    value = text.strip()
    if v2 and value == "max":
        return None
    try:
        limit = int(value)
    except ValueError:
        return None
    if not v2 and limit >= V1_UNLIMITED:
        return None
    return limit


def memory_stats(now: float, usage: int | None, stat: dict[str, int], limit: int | None,
                 *, v2: bool) -> MemoryStats:
    """cAdvisor's arithmetic: working set = usage − inactive file, clamped at 0."""
    inactive = stat.get("inactive_file" if v2 else "total_inactive_file")
    working_set = max(0, usage - inactive) if usage is not None and inactive is not None else None
    return MemoryStats(
        time=now,
        available_bytes=max(0, limit - working_set)
        if limit is not None and working_set is not None else None,
        usage_bytes=usage,
        working_set_bytes=working_set,
        rss_bytes=stat.get("anon" if v2 else "total_rss"),
        page_faults=stat.get("pgfault" if v2 else "total_pgfault"),
        major_page_faults=stat.get("pgmajfault" if v2 else "total_pgmajfault"),
    )


def cpu_rate(before_at: float | None, before_ns: int | None, now_at: float,
             now_ns: int) -> int | None:
    """``usageNanoCores`` between two cumulative CPU samples (monotonic seconds, ns); ``None``
    without an earlier sample, or when time or the counter went backwards (a new cgroup)."""
    if before_at is None or before_ns is None or now_at <= before_at or now_ns < before_ns:
        return None
    return int((now_ns - before_ns) / (now_at - before_at))


class CpuRateTracker:
    """Turns cumulative CPU ns into ``usageNanoCores`` from the previous sample of each key.

    Keys are never forgotten: its one user samples one key, the node.
    """

    def __init__(self) -> None:
        self._previous: dict[object, tuple[float, int]] = {}

    def stats(self, key: object, now_wall: float, now_mono: float,
              usage_ns: int | None) -> CpuStats | None:
        if usage_ns is None:
            return None
        previous = self._previous.get(key)
        rate = cpu_rate(*previous, now_mono, usage_ns) if previous is not None else None
        self._previous[key] = (now_mono, usage_ns)
        return CpuStats(time=now_wall, usage_core_nano_seconds=usage_ns, usage_nano_cores=rate)
