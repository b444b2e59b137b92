"""Option values: each parser turns a flag's, an environment variable's or a config file's
value into what the daemon runs with, or raises ``ValueError`` saying why it cannot (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from gpustats.documents import brief
from gpustats.usage.tariff import CarbonIntensity, Price, parse_carbon_intensity, parse_price

def _scalar(value: Any) -> str:
    """A flag, environment or file value as stripped text. A list or mapping where one value
    belongs is refused: its text would be the whole structure, every alias expanded."""
    if isinstance(value, (list, tuple, dict)):
        raise ValueError(f"expected a single value, got {brief(value)}")
    return str(value).strip()


def _float(value: Any) -> float:
    try:
        return float(value)
    except (ValueError, TypeError, OverflowError):
        raise ValueError(f"expected a number, got {brief(value)}") from None


def parse_listen(value: Any) -> tuple[str, int]:
    text = _scalar(value)
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text:
        raise ValueError(f"expected HOST:PORT, got {brief(text)}")
    # ":PORT" asks for every interface explicitly; the default stays on loopback.
    host = host.strip("[]") or "0.0.0.0"  # nosec B104
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"port {brief(port_text)} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is out of range 0-65535")
    return host, port


def optional_listen(value: Any) -> tuple[str, int] | None:
    return parse_listen(value) if _scalar(value) else None


def intervals(value: Any) -> float:
    count = _float(value)
    if not 2.0 <= count < 1e6:
        raise ValueError(f"must be a number of intervals >= 2, got {brief(value)}")
    return count


def positive_seconds(value: Any) -> float:
    seconds = _float(value)
    if not seconds > 0 or seconds != seconds or seconds == float("inf"):
        raise ValueError(f"must be a positive number of seconds, got {brief(value)}")
    return seconds


def positive_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected a whole number >= 1, got {brief(value)}")
    try:
        number = int(_scalar(value))
    except ValueError:
        raise ValueError(f"expected a whole number >= 1, got {brief(value)}") from None
    if number < 1:
        raise ValueError(f"expected a whole number >= 1, got {brief(value)}")
    return number


def ratio(value: Any) -> float:
    number = _float(value)
    if not 0.0 < number <= 1.0:
        raise ValueError(f"must be a ratio in (0, 1], got {brief(value)}")
    return number


def nonempty_text(value: Any) -> str:
    text = _scalar(value)
    if not text:
        raise ValueError("must not be empty")
    return text


def optional_text(value: Any) -> str | None:
    text = _scalar(value)
    return text or None


def optional_directory(value: Any) -> str | None:
    text = _scalar(value)
    if not text:
        return None
    if not text.startswith("/") or "\0" in text:
        raise ValueError(f"expected an absolute directory path, got {brief(text)}")
    return text.rstrip("/") or "/"


def cgroup_parent(value: Any) -> str:
    """A cgroup path below a hierarchy's root (``/a/b``); empty or ``/``: the root (``""``)."""
    text = _scalar(value)
    parts = [p for p in text.split("/") if p]
    if text and (not text.startswith("/") or "\0" in text
                 or any(p in (".", "..") for p in parts)):
        raise ValueError(f"expected an absolute cgroup path such as /a/b, got {brief(text)}")
    return "/" + "/".join(parts) if parts else ""


def absolute_directory(value: Any) -> str:
    path = optional_directory(value)
    if path is None:
        raise ValueError("must not be empty")
    return path


def url(value: Any) -> str | None:
    text = _scalar(value)
    if not text:
        return None
    if not text.startswith(("http://", "https://")):
        raise ValueError(f"expected an http:// or https:// URL, got {brief(text)}")
    return text


DCGM_EXPORTER_OFF = "none"


def dcgm_exporter_url(value: Any) -> str | None:
    """A URL; ``none`` turns dcgm-exporter off; empty (None) finds the node-local one."""
    text = _scalar(value)
    return DCGM_EXPORTER_OFF if text.lower() == DCGM_EXPORTER_OFF else url(text)


def group_name(value: Any) -> str | None:
    """A group's name or number (empty: the daemon's own group)."""
    text = _scalar(value)
    if text and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?|[0-9]{1,10}", text):
        raise ValueError(f"expected a group name or number, got {brief(text)}")
    return text or None


def path_list(value: Any) -> tuple[str, ...]:
    """Absolute directories, comma-separated (or a YAML list); empty turns the feature off."""
    items = value if isinstance(value, (list, tuple)) else _scalar(value).split(",")
    paths = []
    for item in items:
        text = _scalar(item)
        if not text:
            continue
        if not text.startswith("/") or "\0" in text:
            raise ValueError(f"expected absolute paths, got {brief(text)}")
        paths.append(text)
    return tuple(dict.fromkeys(paths))


def parse_bool(value: Any) -> bool:
    """``true/false``, ``yes/no``, ``on/off``, ``1/0`` (any case), or a YAML boolean."""
    if isinstance(value, bool):
        return value
    text = _scalar(value).lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"expected true or false, got {brief(value)}")


# The demo nodes (--demo KIND); the flag alone, or true, is the Kubernetes one.
DEMO_KINDS = ("kubernetes", "bare-metal", "mixed", "amd", "intel")


def parse_demo(value: Any) -> str | None:
    """One of ``DEMO_KINDS``; a boolean's words too: true is ``kubernetes``, false ``None``
    (no demo)."""
    text = _scalar(value).lower() if not isinstance(value, bool) else ""
    if text in DEMO_KINDS:
        return text
    try:
        return DEMO_KINDS[0] if parse_bool(value) else None
    except ValueError:
        raise ValueError(f"expected {', '.join(DEMO_KINDS)}, true or false, got "
                         f"{brief(value)}") from None


# dcgm-exporter's node label: ``Hostname`` in its releases, ``hostname`` on its main branch.
DCGM_HOSTNAME_LABELS = ("Hostname", "hostname")


def dcgm_hostname_label(value: Any) -> str:
    """Exactly one of ``DCGM_HOSTNAME_LABELS``: the two differ by case alone, so case counts."""
    text = _scalar(value)
    if text not in DCGM_HOSTNAME_LABELS:
        raise ValueError(f"expected Hostname or hostname, got {brief(value)}")
    return text


# --disable-metrics groups, as export.metric_table names them (config sits below export).
METRIC_GROUPS = ("gpu", "health", "saturation", "mig", "process", "container", "pod", "tenant",
                 "cadvisor", "daemon", "dcgm", "kepler")


def metric_groups(value: Any) -> tuple[str, ...]:
    """Metric groups, comma-separated (or a YAML list), each one of ``METRIC_GROUPS``; empty
    leaves every group on."""
    items = value if isinstance(value, (list, tuple)) else _scalar(value).split(",")
    groups = []
    for item in items:
        name = _scalar(item).lower()
        if not name:
            continue
        if name not in METRIC_GROUPS:
            raise ValueError(f"unknown metric group {brief(name)}; groups are "
                             + ", ".join(METRIC_GROUPS))
        groups.append(name)
    return tuple(dict.fromkeys(groups))


def log_level(value: Any) -> str:
    level = _scalar(value).upper()
    if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
        raise ValueError("expected one of debug, info, warning, error, critical; "
                         f"got {brief(value)}")
    return level


def power_watts(value: Any) -> float:
    watts = _float(value)
    if not 0.0 <= watts < 100_000 or watts != watts:
        raise ValueError(f"must be a power in watts >= 0, got {brief(value)}")
    return watts


# The prefixes of every GPU ID the daemon serves: NVIDIA's UUIDs (GPU-, MIG-) and the DRM
# backends' IDs (sources/drm: amd-, intel-); a test keeps these equal to the backends'.
GPU_ID_PREFIXES = ("GPU-", "MIG-", "amd-", "intel-")


def _gpu_id(key: str) -> bool:
    return any(key.startswith(prefix) and len(key) > len(prefix) for prefix in GPU_ID_PREFIXES)


def parse_idle_power(value: Any) -> IdlePower:
    """A number (every GPU), or a mapping ``{default: W, <GPU ID>: W, ...}`` keyed by any GPU
    ID the daemon serves (a UUID, ``amd-…``, ``intel-…``)."""
    if isinstance(value, Mapping):
        default = None
        per_uuid: dict[str, float] = {}
        for key, watts in value.items():
            if str(key) == "default":
                default = power_watts(watts)
            elif _gpu_id(str(key)):
                per_uuid[str(key)] = power_watts(watts)
            else:
                raise ValueError("keys must be 'default' or a GPU ID (GPU-…, MIG-…, amd-…, "
                                 f"intel-…), got {brief(key)}")
        return IdlePower(default_watts=default, per_uuid=tuple(sorted(per_uuid.items())))
    text = _scalar(value)
    if not text:
        return IdlePower()
    if "=" in text:  # flag/env form: "120" or "default=60,GPU-abc=70"
        pairs = {}
        for item in text.split(","):
            key, sep, watts = item.partition("=")
            if not sep:
                raise ValueError(f"expected KEY=WATTS items, got {brief(item)}")
            pairs[key.strip()] = watts.strip()
        return parse_idle_power(pairs)
    return IdlePower(default_watts=power_watts(text))


# A day of history at a one-second tick is the most the daemon will hold in memory.
MAX_HISTORY_SECONDS = 86400


def history_seconds(value: Any) -> int:
    text = _scalar(value)
    if isinstance(value, bool) or not text.isdigit() or not text.isascii():
        raise ValueError(f"must be a whole number of seconds from 0 (off) to "
                         f"{MAX_HISTORY_SECONDS}, got {brief(value)}")
    seconds = int(text)
    if seconds > MAX_HISTORY_SECONDS:
        raise ValueError(f"must be at most {MAX_HISTORY_SECONDS} seconds, got {seconds}")
    return seconds


# NVSentinel's application XIDs; the same set as ``health.DEFAULT_IGNORED_XIDS`` and the
# ``xid_ignore`` default (a test keeps the three equal: this module imports only documents).
DEFAULT_IGNORED_XIDS = (13, 31, 43, 45, 68, 109)


def xid_list(value: Any) -> tuple[int, ...]:
    """The ignored XIDs. A plain list replaces the default ones; a list whose first XID has a
    leading ``+`` (``+94``, ``+94,+95``, a YAML list whose first item is the text ``"+94"``)
    adds to them, as NVSentinel's "additional ignored XIDs" do."""
    items = value if isinstance(value, (list, tuple)) else _scalar(value).split(",")
    texts = [text for text in map(_scalar, items) if text]
    adding = bool(texts) and texts[0].startswith("+")
    xids = set(DEFAULT_IGNORED_XIDS) if adding else set()
    for text in texts:
        number = text
        if text.startswith("+"):
            if not adding:
                raise ValueError(f"a leading + (add to the default XIDs) belongs on the first "
                                 f"XID of the list, got {brief(text)} after a plain one")
            number = text[1:]
        try:
            xid = int(number)
        except ValueError:
            raise ValueError(f"expected XID numbers, got {brief(text)}") from None
        if xid < 0:
            raise ValueError(f"XID codes are non-negative, got {xid}")
        if number.lstrip().startswith("+"):       # "++94": int() took the second +
            raise ValueError(f"expected XID numbers, got {brief(text)}")
        xids.add(xid)
    return tuple(sorted(xids))


@dataclass(frozen=True)
class IdlePower:
    default_watts: float | None = None
    per_uuid: tuple[tuple[str, float], ...] = ()

    def for_uuid(self, uuid: str) -> float | None:
        for key, watts in self.per_uuid:
            if key == uuid:
                return watts
        return self.default_watts


def price_per_kwh(value: Any) -> Price | None:
    """``0.25 EUR`` or a tariff file's absolute path (``usage.tariff``); empty: none."""
    return parse_price(_scalar(value))


def carbon_intensity(value: Any) -> CarbonIntensity | None:
    """gCO2e per kWh, or an hourly series file's absolute path; empty: none."""
    return parse_carbon_intensity(_scalar(value))
