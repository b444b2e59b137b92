"""Configuration: command-line flag > ``GPUSTATS_<NAME>`` environment > YAML file > default.

Every option is declared once, as a field of ``Config`` (``_option``): its type, parser,
default, help and metavar; the flag, the environment variable and the config file key are
derived from its name, and ``OPTIONS`` from the fields. Values are validated at start-up
(parsers in ``config_values``); a bad value raises ``ConfigError`` naming the option and the
reason (the CLI turns it into exit code 2).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Mapping

from gpustats import config_values as parsers
from gpustats.config_values import (
    DCGM_HOSTNAME_LABELS, DEMO_KINDS, MAX_HISTORY_SECONDS, METRIC_GROUPS, IdlePower,
    parse_bool, parse_idle_power, parse_listen,
)
from gpustats.documents import DocumentError, brief, load_yaml, read_document
from gpustats.usage.tariff import CarbonIntensity, Price

__all__ = ["DCGM_HOSTNAME_LABELS", "DEMO_KINDS", "MAX_HISTORY_SECONDS", "METRIC_GROUPS",
           "OPTIONS", "Config", "ConfigError", "IdlePower", "Option", "build_arg_parser",
           "parse_bool", "parse_idle_power", "parse_listen", "reload_changes", "resolve"]

DEFAULT_PORT = 9477
MAX_CONFIG_BYTES = 1 << 20
_OPTION = "gpustats.option"      # a Config field's metadata key for its option declaration


class ConfigError(ValueError):
    """A configuration value is unusable; the message names the option and the reason."""


@dataclass(frozen=True)
class Option:
    name: str                       # snake_case; flag --name-with-dashes, env GPUSTATS_NAME
    parse: Callable[[Any], Any]
    default: Any                    # as a user would give it (text is parsed)
    help: str
    metavar: str | None = None
    const: str | None = None        # what the flag alone means (a boolean's: true)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return "GPUSTATS_" + self.name.upper()


def _option(parse: Callable[[Any], Any], default: Any, help: str, metavar: str | None = None,
            *, const: str | None = None) -> Any:
    """A ``Config`` field that is an option; its default is the parsed ``default``."""
    return field(default=parse(default) if isinstance(default, str) else default,
                 metadata={_OPTION: (parse, default, help, metavar, const)})


@dataclass(frozen=True)
class Config:
    # --- Serving
    listen: tuple[str, int] = _option(
        parsers.parse_listen, f"127.0.0.1:{DEFAULT_PORT}",
        "address to serve HTTP on (HOST:PORT)", "HOST:PORT")
    health_listen: tuple[str, int] | None = _option(
        parsers.optional_listen, None,
        "also serve /healthz and /readyz on this address, apart from the data port "
        "(empty: off)", "HOST:PORT")
    device_api_socket: str | None = _option(
        parsers.optional_text, None,
        "serve NVSentinel's GpuService (gRPC) on this unix socket, mode 0660 (empty: off)",
        "PATH")
    device_api_socket_group: str | None = _option(
        parsers.group_name, None, "the device API socket's group (empty: the daemon's)",
        "GROUP")
    device_api_listen: tuple[str, int] | None = _option(
        parsers.optional_listen, None,
        "also serve GpuService over TCP here, without TLS (empty: off)", "HOST:PORT")
    tick_watchdog_intervals: float = _option(
        parsers.intervals, 12.0,
        "/healthz answers 503 when no snapshot was published for this many intervals",
        "N")

    # --- Collection
    housekeeping_interval: float = _option(
        parsers.positive_seconds, 5.0,
        "seconds between collection ticks (a little jitter is added)", "SECONDS")
    nvml_retry_interval: float = _option(
        parsers.positive_seconds, 60.0,
        "seconds between attempts to load NVML while GPUs are present but NVML is not", "SECONDS")
    nvml_driver_root: str | None = _option(
        parsers.optional_directory, None,
        "load NVML from the driver tree mounted here (the GPU Operator's /run/nvidia/driver) "
        "instead of the library search path (empty: off)", "PATH")
    energy_every: int = _option(
        parsers.positive_int, 1,
        "read each GPU's energy counter every N ticks, integrating power in between", "N")
    cgroup_stats_interval: float = _option(
        parsers.positive_seconds, 10.0,
        "seconds between reads of each container's and pod's CPU and memory (the kubelet's "
        "cAdvisor housekeeping; spread over the ticks, at most once a tick)", "SECONDS")
    # --- The host's files
    sysfs_root: str = _option(
        parsers.nonempty_text, "/sys", "where sysfs is mounted", "PATH")
    proc_root: str = _option(
        parsers.nonempty_text, "/proc", "where the host's procfs is mounted", "PATH")
    cgroup_root: str = _option(
        parsers.nonempty_text, "/sys/fs/cgroup", "where the cgroup hierarchies are mounted", "PATH")
    kubelet_cgroup_parent: str = _option(
        parsers.cgroup_parent, "",
        "the cgroup (below each hierarchy's root) the kubelet's kubepods cgroup sits in, where "
        "not at the top (a kubelet in a nested tree); pods are looked for only there and at "
        "the top (empty: the top only)", "PATH")
    host_root: str = _option(
        parsers.absolute_directory, "/",
        "where the host's root filesystem is mounted, read for user names (etc/passwd) and "
        "the names of Docker and Podman containers (their metadata under var/lib)", "PATH")
    # --- Tenants and their names
    pod_resources_socket: str | None = _option(
        parsers.optional_text, "/var/lib/kubelet/pod-resources/kubelet.sock",
        "kubelet pod-resources gRPC socket (empty: off)", "PATH")
    runtime_socket: str | None = _option(
        parsers.optional_text, None,
        "container runtime CRI socket for container names, opt-in for hosts without the "
        "kubelet's log layout (e.g. /run/containerd/containerd.sock; empty: off)", "PATH")
    log_root: str | None = _option(
        parsers.optional_directory, "/var/log",
        "directory holding the kubelet's pods/ and containers/ log layout, read for names "
        "(empty: off)", "PATH")
    cdi_spec_dirs: tuple[str, ...] = _option(
        parsers.path_list, "/etc/cdi,/var/run/cdi",
        "CDI spec directories, for GPUs allocated through DRA claims (empty: off)",
        "DIR,...")
    dcgm_exporter_url: str | None = _option(
        parsers.dcgm_exporter_url, None,
        "dcgm-exporter /metrics URL for MIG instance activity (empty: find the node-local "
        "one, http://localhost:9400/metrics; none: off)", "URL")
    node_name: str | None = _option(
        parsers.optional_text, None,
        "node name reported in the summary and on every metric (default: hostname)", "NAME")
    # --- Energy and its state
    idle_power_watts: IdlePower = _option(
        parsers.parse_idle_power, IdlePower(),
        "idle power per GPU: WATTS, or default=W,GPU-<uuid>=W (default: the lowest power "
        "that held three idle ticks)",
        "WATTS")
    state_dir: str = _option(
        parsers.nonempty_text, "/var/lib/gpustats",
        "directory for persisted energy counters (the default falls back to "
        "$XDG_STATE_HOME/gpustats or ~/.local/state/gpustats where it is not writable)",
        "PATH")
    persist_interval: float = _option(
        parsers.positive_seconds, 30.0,
        "seconds between compactions of the energy counters in the state dir (changes are "
        "journaled every tick)", "SECONDS")
    counter_retention: float = _option(
        parsers.positive_seconds, 3600.0,
        "seconds a counter is kept after its process, container, pod or GPU is gone",
        "SECONDS")
    usage_hourly_days: int = _option(
        parsers.positive_int, 90,
        "days the usage database keeps hourly rows, before adding them into daily ones",
        "DAYS")
    usage_daily_days: int = _option(
        parsers.positive_int, 730, "days the usage database keeps daily rows", "DAYS")
    price_per_kwh: Price | None = _option(
        parsers.price_per_kwh, None,
        "price of a kWh for the usage reports: '0.25 EUR', or a YAML file of time-of-use "
        "rates (empty: no cost)", "PRICE|FILE")
    carbon_intensity: CarbonIntensity | None = _option(
        parsers.carbon_intensity, None,
        "gCO2e per kWh for the usage reports: a number, or a CSV file of hourly values "
        "(empty: no CO2e)", "G|FILE")
    state_reset: bool = _option(
        parsers.parse_bool, False,
        "start counters from zero, moving the state files aside (needed to start over a "
        "state written by a newer gpustats); the usage database is kept", "BOOL")
    # --- Health and saturation
    xid_ignore: tuple[int, ...] = _option(
        parsers.xid_list, (13, 31, 43, 45, 68, 109),
        "application XIDs that are counted but do not make a GPU unhealthy: a plain list "
        "replaces the defaults, a leading + adds to them (+94 or +94,+95; quote it in YAML, "
        "\"+94\", where a bare +94 is the number 94)", "[+]XID,...")
    saturation_window: float = _option(
        parsers.positive_seconds, 60.0,
        "seconds covered by the saturation signals", "SECONDS")
    memory_pressure_threshold: float = _option(
        parsers.ratio, 0.9,
        "framebuffer used ratio counted as memory pressure", "RATIO")
    # --- Metrics, history and other vocabularies
    disable_metrics: tuple[str, ...] = _option(
        parsers.metric_groups, (),
        "metric groups left out of /metrics, not built at all: gpu, health, saturation, "
        "mig, process, container, pod, tenant, cadvisor, daemon, dcgm, kepler (default: none)",
        "GROUP,...")
    history_duration: int = _option(
        parsers.history_seconds, 600,
        "seconds of history kept in memory for the page and /api/v1/history (0: off)",
        "SECONDS")
    dcgm_compat: bool = _option(
        parsers.parse_bool, False,
        "also expose dcgm-exporter's DCGM_FI_* metric names on /metrics", "BOOL")
    dcgm_hostname_label: str = _option(
        parsers.dcgm_hostname_label, "Hostname",
        "name of the node label on --dcgm-compat series: Hostname (dcgm-exporter's "
        "releases) or hostname (its main branch)", "NAME")
    kepler_compat: bool = _option(
        parsers.parse_bool, False,
        "also expose Kepler's kepler_*_gpu_* metric names (EP-003) on /metrics", "BOOL")
    # --- Simulated GPUs
    simulate: str | None = _option(
        parsers.optional_text, None,
        "run against simulated GPUs described by this scenario YAML", "SCENARIO")
    demo: str | None = _option(
        parsers.parse_demo, None,
        "run on a demo node: simulated GPUs with a moving load on a fake host in a temporary "
        "directory removed on exit (of this host, only the node's CPU and memory figures are "
        "read): kubernetes (the flag alone: named pods, one GPU in MIG mode), bare-metal "
        "(a Slurm job, a systemd service, a Docker container and a user's notebook), or those "
        "tenants on other vendors' GPUs: mixed (an NVIDIA H100, an AMD MI300X and an Intel "
        "Flex 170), amd or intel",
        "KIND", const="kubernetes")
    # --- Logging
    log_level: str = _option(
        parsers.log_level, "INFO", "debug, info, warning or error", "LEVEL")
    config_file: str | None = None
    # Options given by flag, environment or file (the rest took their default).
    explicit: frozenset[str] = frozenset()


# ``--help`` shows the options in sections, in their order above: each section from its first
# option on (an option declared among a section's is in it).
HELP_SECTIONS = {"listen": "serving", "housekeeping_interval": "collection",
                 "sysfs_root": "the host's files",
                 "pod_resources_socket": "tenants and their names",
                 "idle_power_watts": "energy and its state", "xid_ignore": "health and saturation",
                 "disable_metrics": "metrics, history and other vocabularies",
                 "simulate": "simulated GPUs", "log_level": "logging"}

OPTIONS: tuple[Option, ...] = tuple(Option(f.name, *f.metadata[_OPTION]) for f in fields(Config)
                                    if _OPTION in f.metadata)
OPTION_NAMES = frozenset(o.name for o in OPTIONS)



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


HELP_EXAMPLES = """examples:
  gpustats                                        serve on 127.0.0.1:9477 with defaults
  gpustats --demo                                 a simulated node with named pods
  gpustats --demo bare-metal                      a Slurm job, a service, a container
  gpustats --demo mixed                           the same on NVIDIA, AMD and Intel GPUs
  gpustats --simulate examples/two-gpus.yaml      the daemon on simulated GPUs
  gpustats --once                                 two ticks, the summary JSON, exit
  gpustats --listen 0.0.0.0:9477 --kepler-compat  every interface, with Kepler's names
  gpustats usage --month 2026-11 --by job         the month's bill per job (usage --help)
  gpustats top                                    a live view of the running daemon

Every option is also GPUSTATS_<NAME> in the environment and <name> in the config file."""


def build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpustats",
        description="GPU stats and energy-billing daemon: serves /stats/summary, /metrics, "
                    "the device API and a page.",
        epilog=HELP_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="YAML config file (env GPUSTATS_CONFIG)")
    parser.add_argument("--once", action="store_true",
                        help="run two ticks a short interval apart, print the summary JSON, exit "
                             "(writes nothing to the state dir)")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    group: argparse._ActionsContainer = parser      # the parser or its current section
    for option in OPTIONS:
        if option.name in HELP_SECTIONS:
            group = parser.add_argument_group(HELP_SECTIONS[option.name])
        shown = _shown_default(option.default)
        default_text = f"; default {shown}" if shown is not None else ""
        const = "true" if isinstance(option.default, bool) else option.const
        extra: dict[str, Any] = {"nargs": "?", "const": const} if const is not None else {}
        group.add_argument(option.flag, dest=option.name, default=None, metavar=option.metavar,
                           help=f"{option.help} [env {option.env}{default_text}]", **extra)
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
