"""Configuration: command-line flag > ``GPUSTATS_<NAME>`` environment > YAML file > default.

Every option is declared once in ``OPTIONS``; the flag, the environment variable and the config
file key are derived from its name. Values are validated at start-up; a bad value raises
``ConfigError`` naming the option and the reason (the CLI turns it into exit code 2).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Mapping

from gpustats.documents import DocumentError, brief, load_yaml, read_document

DEFAULT_PORT = 9477
MAX_CONFIG_BYTES = 1 << 20


class ConfigError(ValueError):
    """A configuration value is unusable; the message names the option and why."""


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


def _optional_listen(value: Any) -> tuple[str, int] | None:
    return parse_listen(value) if _scalar(value) else None


def _intervals(value: Any) -> float:
    count = _float(value)
    if not 2.0 <= count < 1e6:
        raise ValueError(f"must be a number of intervals >= 2, got {brief(value)}")
    return count


def _positive_seconds(value: Any) -> float:
    seconds = _float(value)
    if not seconds > 0 or seconds != seconds or seconds == float("inf"):
        raise ValueError(f"must be a positive number of seconds, got {brief(value)}")
    return seconds


def _positive_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected a whole number >= 1, got {brief(value)}")
    try:
        number = int(_scalar(value))
    except ValueError:
        raise ValueError(f"expected a whole number >= 1, got {brief(value)}") from None
    if number < 1:
        raise ValueError(f"expected a whole number >= 1, got {brief(value)}")
    return number


def _ratio(value: Any) -> float:
    ratio = _float(value)
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"must be a ratio in (0, 1], got {brief(value)}")
    return ratio


def _text(value: Any) -> str:
    text = _scalar(value)
    if not text:
        raise ValueError("must not be empty")
    return text


def _optional_text(value: Any) -> str | None:
    text = _scalar(value)
    return text or None


def _optional_directory(value: Any) -> str | None:
    text = _scalar(value)
    if not text:
        return None
    if not text.startswith("/") or "\0" in text:
        raise ValueError(f"expected an absolute directory path, got {brief(text)}")
    return text.rstrip("/") or "/"


def _directory(value: Any) -> str:
    path = _optional_directory(value)
    if path is None:
        raise ValueError("must not be empty")
    return path


def _url(value: Any) -> str | None:
    text = _scalar(value)
    if not text:
        return None
    if not text.startswith(("http://", "https://")):
        raise ValueError(f"expected an http:// or https:// URL, got {brief(text)}")
    return text


def _path_list(value: Any) -> tuple[str, ...]:
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
DEMO_KINDS = ("kubernetes", "bare-metal")


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


def _dcgm_hostname_label(value: Any) -> str:
    """Exactly one of ``DCGM_HOSTNAME_LABELS``: the two differ by case alone, so case counts."""
    text = _scalar(value)
    if text not in DCGM_HOSTNAME_LABELS:
        raise ValueError(f"expected Hostname or hostname, got {brief(value)}")
    return text


# --disable-metrics groups, as export.metric_table names them (config sits below export).
METRIC_GROUPS = ("gpu", "health", "saturation", "mig", "process", "container", "pod", "tenant",
                 "cadvisor", "daemon", "dcgm")


def _metric_groups(value: Any) -> tuple[str, ...]:
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


def _log_level(value: Any) -> str:
    level = _scalar(value).upper()
    if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
        raise ValueError("expected one of debug, info, warning, error, critical; "
                         f"got {brief(value)}")
    return level


def _watts(value: Any) -> float:
    watts = _float(value)
    if not 0.0 <= watts < 100_000 or watts != watts:
        raise ValueError(f"must be a power in watts >= 0, got {brief(value)}")
    return watts


def parse_idle_power(value: Any) -> "IdlePower":
    """A number (every GPU), or a mapping ``{default: W, GPU-<uuid>: W, ...}``."""
    if isinstance(value, Mapping):
        default = None
        per_uuid: dict[str, float] = {}
        for key, watts in value.items():
            if str(key) == "default":
                default = _watts(watts)
            elif str(key).startswith(("GPU-", "MIG-")):
                per_uuid[str(key)] = _watts(watts)
            else:
                raise ValueError(f"keys must be 'default' or a GPU UUID, got {brief(key)}")
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
    return IdlePower(default_watts=_watts(text))


# A day of history at a one-second tick is the most the daemon will hold in memory.
MAX_HISTORY_SECONDS = 86400


def _history_seconds(value: Any) -> int:
    text = _scalar(value)
    if isinstance(value, bool) or not text.isdigit() or not text.isascii():
        raise ValueError(f"must be a whole number of seconds from 0 (off) to "
                         f"{MAX_HISTORY_SECONDS}, got {brief(value)}")
    seconds = int(text)
    if seconds > MAX_HISTORY_SECONDS:
        raise ValueError(f"must be at most {MAX_HISTORY_SECONDS} seconds, got {seconds}")
    return seconds


def _xid_list(value: Any) -> tuple[int, ...]:
    items = value if isinstance(value, (list, tuple)) else _scalar(value).split(",")
    xids = []
    for item in items:
        text = _scalar(item)
        if not text:
            continue
        try:
            xid = int(text)
        except ValueError:
            raise ValueError(f"expected XID numbers, got {brief(text)}") from None
        if xid < 0:
            raise ValueError(f"XID codes are non-negative, got {xid}")
        xids.append(xid)
    return tuple(sorted(set(xids)))


@dataclass(frozen=True)
class IdlePower:
    default_watts: float | None = None
    per_uuid: tuple[tuple[str, float], ...] = ()

    def for_uuid(self, uuid: str) -> float | None:
        for key, watts in self.per_uuid:
            if key == uuid:
                return watts
        return self.default_watts


@dataclass(frozen=True)
class Option:
    name: str                       # snake_case; flag --name-with-dashes, env GPUSTATS_NAME
    parse: Callable[[Any], Any]
    default: Any
    help: str
    metavar: str | None = None
    const: str | None = None        # what the flag alone means (a boolean's: true)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return "GPUSTATS_" + self.name.upper()


OPTIONS: tuple[Option, ...] = (
    Option("listen", parse_listen, f"127.0.0.1:{DEFAULT_PORT}",
           "address to serve HTTP on (HOST:PORT)", "HOST:PORT"),
    Option("housekeeping_interval", _positive_seconds, 5.0,
           "seconds between collection ticks (a little jitter is added)", "SECONDS"),
    Option("nvml_retry_interval", _positive_seconds, 60.0,
           "seconds between attempts to load NVML while GPUs are present but NVML is not", "SECONDS"),
    Option("sysfs_root", _text, "/sys", "where sysfs is mounted", "PATH"),
    Option("proc_root", _text, "/proc", "where the host's procfs is mounted", "PATH"),
    Option("cgroup_root", _text, "/sys/fs/cgroup", "where the cgroup hierarchies are mounted", "PATH"),
    Option("host_root", _directory, "/",
           "where the host's root filesystem is mounted, read for user names (etc/passwd) and "
           "the names of Docker and Podman containers (their metadata under var/lib)", "PATH"),
    Option("pod_resources_socket", _optional_text, "/var/lib/kubelet/pod-resources/kubelet.sock",
           "kubelet pod-resources gRPC socket (empty: off)", "PATH"),
    Option("runtime_socket", _optional_text, None,
           "container runtime CRI socket for container names, opt-in for hosts without the "
           "kubelet's log layout (e.g. /run/containerd/containerd.sock; empty: off)", "PATH"),
    Option("log_root", _optional_directory, "/var/log",
           "directory holding the kubelet's pods/ and containers/ log layout, read for names "
           "(empty: off)", "PATH"),
    Option("cdi_spec_dirs", _path_list, "/etc/cdi,/var/run/cdi",
           "CDI spec directories, for GPUs allocated through DRA claims (empty: off)",
           "DIR,..."),
    Option("dcgm_exporter_url", _url, None,
           "dcgm-exporter /metrics URL for MIG instance activity (empty: off)", "URL"),
    Option("state_dir", _text, "/var/lib/gpustats",
           "directory for persisted energy counters (the default falls back to "
           "$XDG_STATE_HOME/gpustats or ~/.local/state/gpustats where it is not writable)",
           "PATH"),
    Option("node_name", _optional_text, None,
           "node name reported in the summary and on every metric (default: hostname)", "NAME"),
    Option("idle_power_watts", parse_idle_power, IdlePower(),
           "idle power per GPU: WATTS, or default=W,GPU-<uuid>=W (default: the lowest power "
           "that held three idle ticks)",
           "WATTS"),
    Option("simulate", _optional_text, None,
           "run against simulated GPUs described by this scenario YAML", "SCENARIO"),
    Option("demo", parse_demo, None,
           "run on a demo node: simulated GPUs with a moving load on a fake host in a temporary "
           "directory removed on exit (of this host, only the node's CPU and memory figures are "
           "read): kubernetes (the flag alone: named pods, one GPU in MIG mode) or bare-metal "
           "(a Slurm job, a systemd service, a Docker container and a user's notebook)",
           "KIND", const="kubernetes"),
    Option("log_level", _log_level, "INFO", "debug, info, warning or error", "LEVEL"),
    Option("saturation_window", _positive_seconds, 60.0,
           "seconds covered by the saturation signals", "SECONDS"),
    Option("memory_pressure_threshold", _ratio, 0.9,
           "framebuffer used ratio counted as memory pressure", "RATIO"),
    Option("xid_ignore", _xid_list, (13, 31, 43, 45, 68, 109),
           "application XIDs that are counted but do not make a GPU unhealthy", "XID,..."),
    Option("persist_interval", _positive_seconds, 30.0,
           "seconds between compactions of the energy counters in the state dir (changes are "
           "journaled every tick)", "SECONDS"),
    Option("counter_retention", _positive_seconds, 3600.0,
           "seconds a counter is kept after its process, container, pod or GPU is gone",
           "SECONDS"),
    Option("state_reset", parse_bool, False,
           "start counters from zero, moving the state files aside (needed to start over a "
           "state written by a newer gpustats)", "BOOL"),
    Option("dcgm_compat", parse_bool, False,
           "also expose dcgm-exporter's DCGM_FI_* metric names on /metrics", "BOOL"),
    Option("dcgm_hostname_label", _dcgm_hostname_label, "Hostname",
           "name of the node label on --dcgm-compat series: Hostname (dcgm-exporter's "
           "releases) or hostname (its main branch)", "NAME"),
    Option("disable_metrics", _metric_groups, (),
           "metric groups left out of /metrics, not built at all: gpu, health, saturation, "
           "mig, process, container, pod, cadvisor, daemon, dcgm (default: none)", "GROUP,..."),
    Option("history_duration", _history_seconds, 600,
           "seconds of history kept in memory for the page and /api/v1/history (0: off)",
           "SECONDS"),
    Option("cgroup_stats_interval", _positive_seconds, 10.0,
           "seconds between reads of each container's and pod's CPU and memory (the kubelet's "
           "cAdvisor housekeeping; spread over the ticks, at most once a tick)", "SECONDS"),
    Option("energy_every", _positive_int, 1,
           "read each GPU's energy counter every N ticks, integrating power in between", "N"),
    Option("health_listen", _optional_listen, None,
           "also serve /healthz and /readyz on this address, apart from the data port "
           "(empty: off)", "HOST:PORT"),
    Option("tick_watchdog_intervals", _intervals, 12.0,
           "/healthz answers 503 when no snapshot was published for this many intervals",
           "N"),
)

OPTION_NAMES = frozenset(o.name for o in OPTIONS)


@dataclass(frozen=True)
class Config:
    listen: tuple[str, int]
    housekeeping_interval: float
    nvml_retry_interval: float
    sysfs_root: str
    proc_root: str
    cgroup_root: str
    pod_resources_socket: str | None
    runtime_socket: str | None
    log_root: str | None
    cdi_spec_dirs: tuple[str, ...]
    dcgm_exporter_url: str | None
    state_dir: str
    node_name: str | None
    idle_power_watts: IdlePower
    simulate: str | None
    log_level: str
    saturation_window: float
    memory_pressure_threshold: float
    xid_ignore: tuple[int, ...]
    persist_interval: float
    counter_retention: float
    state_reset: bool
    dcgm_compat: bool
    history_duration: int
    energy_every: int = 1
    cgroup_stats_interval: float = 10.0
    health_listen: tuple[str, int] | None = None
    tick_watchdog_intervals: float = 12.0
    dcgm_hostname_label: str = "Hostname"
    demo: str | None = None         # one of DEMO_KINDS
    disable_metrics: tuple[str, ...] = ()
    host_root: str = "/"
    config_file: str | None = field(default=None)
    # Options given by flag, environment or file (the rest took their default).
    explicit: frozenset[str] = field(default=frozenset())


def _shown_default(default: Any) -> str | None:
    """A default as a user would type it; None where the help text says what absence means."""
    if default is None or default == () or isinstance(default, IdlePower):
        return None
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, (tuple, list)):
        return ",".join(str(v) for v in default)
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


def build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpustats",
        description="GPU container-stats daemon: serves /stats/summary and /metrics.",
    )
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="YAML config file (env GPUSTATS_CONFIG)")
    for option in OPTIONS:
        shown = _shown_default(option.default)
        default_text = f"; default {shown}" if shown is not None else ""
        const = "true" if isinstance(option.default, bool) else option.const
        extra = {"nargs": "?", "const": const} if const is not None else {}
        parser.add_argument(option.flag, dest=option.name, default=None, metavar=option.metavar,
                            help=f"{option.help} [env {option.env}{default_text}]", **extra)
    parser.add_argument("--once", action="store_true",
                        help="run two ticks a short interval apart, print the summary JSON, exit")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    return parser


def load_config_file(path: str) -> dict[str, Any]:
    """The file's options by name. Read as an untrusted document (``gpustats.documents``):
    a FIFO or device is refused at once, and so is a file over ``MAX_CONFIG_BYTES`` or one
    whose aliases expand it past the bound."""
    try:
        data = load_yaml(read_document(path, MAX_CONFIG_BYTES))
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read: {exc.strerror or exc}") from None
    except DocumentError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping of option: value")
    normalised = {}
    for key, value in data.items():
        name = key.replace("-", "_") if isinstance(key, str) else None
        if name not in OPTION_NAMES:
            raise ConfigError(f"config file {path}: unknown option {brief(key)}")
        normalised[name] = value
    return normalised


# What the demo brings its own of: giving one of them with --demo is refused.
DEMO_CONFLICTS = ("simulate", "sysfs_root", "proc_root", "cgroup_root", "host_root",
                  "pod_resources_socket", "runtime_socket", "log_root", "cdi_spec_dirs",
                  "dcgm_exporter_url")


def _check_demo(values: Mapping[str, Any], explicit: set[str]) -> None:
    given = [o.flag for o in OPTIONS if o.name in DEMO_CONFLICTS and o.name in explicit]
    if values["demo"] and given:
        raise ConfigError(f"--demo runs its own simulated node on a fake host; it cannot be "
                          f"combined with {', '.join(given)}")


def resolve(args: argparse.Namespace, environ: Mapping[str, str]) -> Config:
    """Merge flag > env > file > default and validate every value."""
    config_path = args.config or environ.get("GPUSTATS_CONFIG") or None
    file_values = load_config_file(config_path) if config_path else {}
    values: dict[str, Any] = {}
    explicit = set()
    for option in OPTIONS:
        flag_value = getattr(args, option.name, None)
        if flag_value is not None:
            raw, origin = flag_value, option.flag
        elif option.env in environ:
            raw, origin = environ[option.env], option.env
        elif option.name in file_values:
            raw, origin = file_values[option.name], f"{option.name} in {config_path}"
        else:
            default = option.default
            values[option.name] = option.parse(default) if isinstance(default, str) else default
            continue
        explicit.add(option.name)
        try:
            values[option.name] = option.parse(raw)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"invalid {origin}: {exc}") from None
    _check_demo(values, explicit)
    return Config(config_file=config_path, explicit=frozenset(explicit), **values)


def config_field_names() -> tuple[str, ...]:
    return tuple(f.name for f in fields(Config))


# Options a running daemon takes over from a re-read config file (SIGHUP); the rest need a
# restart, which the reload says by name.
RELOADABLE = ("log_level", "idle_power_watts")


def reload_changes(old: Config, new: Config) -> tuple[Config, tuple[str, ...], tuple[str, ...]]:
    """(the config to run with, options applied, options changed that need a restart)."""
    changed = [f.name for f in fields(Config)
               if f.name in OPTION_NAMES and getattr(old, f.name) != getattr(new, f.name)]
    applied = tuple(n for n in changed if n in RELOADABLE)
    restart = tuple(n for n in changed if n not in RELOADABLE)
    merged = replace(old, **{n: getattr(new, n) for n in applied})
    return merged, applied, restart
