"""Command line: the only place that wires sources, engine, exporters and web together."""

from __future__ import annotations

import dataclasses
import gc
import ipaddress
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from typing import Sequence

from gpustats import __version__, sdnotify
from gpustats.commands import SUBCOMMANDS, run_subcommand
from gpustats.config import Config, ConfigError, build_arg_parser, reload_changes, resolve
from gpustats.engine.collector import Housekeeper
from gpustats.engine.containers import ContainerTracker
from gpustats.engine.dra import ClaimResolver
from gpustats.engine.drm_source import ReportedDrmSweeper
from gpustats.engine.simulated_bus import SimulatedBus
from gpustats.engine.counters import EnergyCounters
from gpustats.engine.state_files import NewerStateVersion, StateFiles
from gpustats.engine.energy import EnergyAccountant
from gpustats.engine.health_monitor import HealthMonitor
from gpustats.engine.history import History
from gpustats.engine.gpus import GpuBackends, GpuSource, PciScan, SessionUnavailable, Sweeper
from gpustats.engine.loop import Housekeeping
from gpustats.engine.lost_gpus import LostGpuNamer
from gpustats.engine.persister import Persister, Problem
from gpustats.engine.reported_sweepers import ReportedSweeper
from gpustats.engine.statedir import StateDirError, choose_state_dir, existing_state_dir
from gpustats.deviceapi.server import start_device_api
from gpustats.engine.provider_health import ProvidedHealthStore
from gpustats.export.gpu_events import GpuEventLog
from gpustats.export.prometheus import MetricsBodies
from gpustats.export.summary import summary_dict
from gpustats.fdlimit import kept_file_shares
from gpustats.hostfs import HostRoots, read_boot_id
from gpustats.malloc_arenas import cap_malloc_arenas
from gpustats.sources.errors import CollectionErrors
from gpustats.sources.cdi import CdiSpecs
from gpustats.sources.dcgm_discovery import activity_source
from gpustats.sources.cgroups import CgroupReader
from gpustats.sources.mig_caps import MigCapabilities
from gpustats.sources.kubelet_logs import KubeletLogNames
from gpustats.sources.node import NodeReader
from gpustats.sources.podresources.client import PodResourcesClient
from gpustats.sources.procs import ProcReader
from gpustats.sources.runtime_store import RuntimeStoreNames
from gpustats.sources.users import UserNames
from gpustats.sources.runtime.client import RuntimeNamesClient
from gpustats.sources.nvml.events import NvmlEventSource
from gpustats.sources.nvml.query import DriverGone
from gpustats.sources.nvml.session import NvmlSession, NvmlUnavailable
from gpustats.sources.nvml.sweep import DeviceSweeper
from gpustats.serving import Interrupt, ListenError, Listeners
from gpustats.sources.driver_procfs import DriverProcfs, normalize_bus_id
from gpustats.sources.pci import PciScanner
from gpustats.sources.vendors import AMD, INTEL, Vendor
from gpustats.sources.psutil_root import use_proc_root
from gpustats.usage.recorder import Problem as UsageProblem, UsageRecorder
from gpustats.watch_streams import WatchStreams
from gpustats.web.app import WebSettings, create_app
from gpustats.web.history import history_blueprint
from gpustats.web.ui import ui_blueprint
from gpustats.web.usage import usage_blueprint

log = logging.getLogger("gpustats")

SHUTDOWN_BUDGET_SECONDS = 2.0
DRIVER_EVENT_WAIT_MS = 500
SIMULATED_EVENT_WAIT_MS = 10_000




class Daemon:
    """Everything one running gpustats holds, built from a Config."""

    def __init__(self, config: Config, adjust_config=None, *, write_state: bool = True):
        """``write_state`` False: the counters are read from the state dir, never written
        (``--once``)."""
        self.config = config
        # Applied to every config this daemon resolves again (SIGHUP): the demo's own node.
        self._adjust_config = adjust_config or (lambda c: c)
        self.roots = HostRoots(sysfs=config.sysfs_root, proc=config.proc_root,
                               cgroup=config.cgroup_root, host=config.host_root)
        use_proc_root(config.proc_root)      # psutil's root is process-wide: set before readers
        self.errors = CollectionErrors()
        self.store = ProvidedHealthStore()    # the device API's providers' conditions merged
        self.simulator = self.simulated_drm = None
        scanner: PciScan
        if config.simulate:
            from gpustats.simulator import SimulatedDrm, SimulatedNvml
            from gpustats.simulator.drm import fake_host_proc
            from gpustats.simulator.scenario import load_scenario
            # The simulated driver keeps its energy counters across daemon restarts, as
            # hardware does (it counts from the driver's load, not the daemon's start).
            self.simulator = SimulatedNvml(config.simulate, driver_state=os.path.join(
                config.state_dir, "simulated-driver.json"))
            self.simulator.install()
            scanner = SimulatedBus(self.simulator)
            # The scenario's AMD and Intel GPUs, as sysfs and fdinfo trees of their own.
            if load_scenario(config.simulate).drm_devices:
                self.simulated_drm = SimulatedDrm(config.simulate, os.path.join(
                    config.state_dir, "simulated-drm"), proc_root=fake_host_proc(config.proc_root))
        else:
            scanner = PciScanner(self.roots)
        self.counters = EnergyCounters(retention_seconds=config.counter_retention)
        self.state_files = StateFiles(
            config.state_dir, refused=lambda reason: self.errors.record("persistence", reason))
        if config.state_reset:
            self.state_files.reset()
        # NewerStateVersion stops start-up
        self.counters.load(self.state_files, write=write_state)
        for line in self.roots.absent():     # once the scenario and the state are read
            log.warning("%s", line)
        lost_namer = LostGpuNamer(DriverProcfs(self.roots).gpu_information,
                                  self.counters.devices, normalize_bus_id,
                                  logging.getLogger("gpustats.engine.gpus").error)
        self.gpus = GpuBackends((
            GpuSource(scanner, self._open_nvml,
                      is_driver_gone=lambda exc: isinstance(exc, DriverGone),
                      retry_interval=config.nvml_retry_interval, lost_namer=lost_namer),
            *self._drm_sources()))
        self.node_name = config.node_name or socket.gethostname()
        # A driver's event wait cannot be woken: short slices keep stop within its budget.
        # The simulator's can, so there the health thread wakes only for events.
        self.health = HealthMonitor(
            NvmlEventSource, ignored_xids=frozenset(config.xid_ignore),
            wait_ms=SIMULATED_EVENT_WAIT_MS if self.simulator else DRIVER_EVENT_WAIT_MS,
            interrupt=self.simulator.interrupt_event_waits if self.simulator else None)
        self.persister = Persister(self.counters, config.persist_interval,   # --once: no report
                                   report=self._persisted if write_state else None)
        # Usage by the hour in the state dir, written off the tick by a thread of its own.
        self.usage = UsageRecorder(
            config.state_dir, price=config.price_per_kwh, carbon=config.carbon_intensity,
            hourly_retention=config.usage_hourly_days * 86400.0, keep_seconds=max(
                config.counter_retention, 3600.0), report=self._usage_written,
            daily_retention=config.usage_daily_days * 86400.0) if write_state else None
        kept_cgroup_files, kept_proc_files = kept_file_shares()
        usage_every = max(1, round(config.cgroup_stats_interval / config.housekeeping_interval))
        parent = config.kubelet_cgroup_parent
        self.cgroups = cgroups = CgroupReader(self.roots, errors=self.errors,
                                              forget_after_ticks=usage_every + 4,
                                              kept_files=kept_cgroup_files, kubelet_parent=parent)
        self.procs = procs = ProcReader(self.roots, cgroups.report_unsafe,
                                        kept_files=kept_proc_files, kubelet_parent=parent)
        self.cdi_specs = CdiSpecs(config.cdi_spec_dirs) if config.cdi_spec_dirs else None
        self.dcgm = activity_source(config.dcgm_exporter_url, self.errors)
        self.housekeeper = Housekeeper(
            node_name=self.node_name, node=NodeReader(self.roots, errors=self.errors),
            gpus=self.gpus,
            errors=self.errors, store=self.store,
            energy=EnergyAccountant(lambda uuid: self.config.idle_power_watts.for_uuid(uuid),
                                    self.counters, boot_id=read_boot_id(self.roots)),
            counters=self.counters, persister=self.persister, process_starts=procs.start_times,
            containers=ContainerTracker(
                cgroups, procs, self.counters,
                pod_resources=PodResourcesClient(config.pod_resources_socket, errors=self.errors)
                if config.pod_resources_socket else None,
                runtime=RuntimeNamesClient(config.runtime_socket, errors=self.errors)
                if config.runtime_socket else None,
                claims=ClaimResolver(self.cdi_specs, MigCapabilities(self.roots))
                if self.cdi_specs is not None else None,
                names=(*((KubeletLogNames(config.log_root, errors=self.errors),)
                         if config.log_root else ()), RuntimeStoreNames(self.roots)),
                users=UserNames(self.roots), usage_every_ticks=usage_every),
            mig_activity_source=self.dcgm,
            health=self.health, saturation_window=config.saturation_window,
            memory_pressure_threshold=config.memory_pressure_threshold)
        self.history = History(config.history_duration) if config.history_duration else None
        # The device API's events: each snapshot diffed on the tick, so watches hear of it.
        self.gpu_events = GpuEventLog()
        self.store.on_republish(self.gpu_events.observe)
        self.housekeeping = Housekeeping(self._tick, config.housekeeping_interval,
                                         on_tick_done=self._after_tick)
        self._announced_ready = False

    def _tick(self) -> None:
        """One collection tick; the history records the snapshot it published."""
        snapshot = self.housekeeper.tick()
        snapshot = self.store.latest() or snapshot     # as published: providers' conditions in
        if self.history is not None:
            self.history.record(snapshot)
        self.gpu_events.observe(snapshot)
        if self.usage is not None:
            self.usage.observe(snapshot)

    def _after_tick(self) -> None:
        """systemd: READY=1 after the first tick, WATCHDOG=1 after every tick."""
        if not self._announced_ready:
            self._announced_ready = True
            sdnotify.ready()
            sdnotify.status(f"serving; {self.housekeeper.ticks_completed} tick(s)")
        sdnotify.watchdog()

    def _open_nvml(self) -> tuple[Sweeper, str | None]:
        try:
            session = NvmlSession.open(self.errors, self.config.nvml_driver_root)
        except NvmlUnavailable as exc:
            self.errors.failed("nvml", f"load_{exc.reason}", f"NVML cannot be loaded: {exc}")
            raise SessionUnavailable(f"{exc.reason}: {exc}") from exc
        return (ReportedSweeper(DeviceSweeper(session, energy_every=self.config.energy_every),
                                 self.errors), session.driver_version)

    def _drm_sources(self) -> tuple[GpuSource, ...]:
        """AMD's and Intel's GPUs, read from the kernel's sysfs and DRM fdinfo: under the
        simulator's trees where the scenario has such GPUs, else under the host's roots."""
        roots, refresh = self.roots, None
        drm = self.simulated_drm
        if drm is not None:
            roots = HostRoots(sysfs=drm.sysfs_root, proc=drm.proc_root)
            refresh = drm.render
        return tuple(
            GpuSource(PciScanner(roots, vendor), self._drm_opener(vendor, roots, refresh),
                      is_driver_gone=lambda exc: False,
                      retry_interval=self.config.nvml_retry_interval, vendor=vendor)
            for vendor in (AMD, INTEL))

    def _drm_opener(self, vendor: Vendor, roots: HostRoots, refresh):
        def open_session():
            from gpustats.sources.drm.sweep import DrmSweeper
            sweeper = DrmSweeper(vendor.name, roots, before_sweep=refresh, errors=self.errors)
            return ReportedDrmSweeper(sweeper, vendor.name, self.errors), None
        return open_session

    def _persisted(self, problem: Problem | None) -> None:
        if problem is None:
            self.errors.succeeded("persistence")
        else:
            reason, message = problem
            self.errors.failed("persistence", reason, f"{message} ({self.config.state_dir})")

    def _usage_written(self, problem: UsageProblem | None) -> None:
        if problem is None:
            self.errors.succeeded("usage")
        else:
            self.errors.failed("usage", *problem)

    def create_app(self, probes_only: bool = False):
        settings = WebSettings(self.config.housekeeping_interval,
                               watchdog_intervals=self.config.tick_watchdog_intervals,
                               history_seconds=int(self.history.duration_seconds)
                               if self.history is not None else 0)
        return create_app(self.store, settings,
                          metrics_bodies=MetricsBodies(
                              self.store, self.config.dcgm_compat,
                              self.config.dcgm_hostname_label, self.config.disable_metrics,
                              self.config.kepler_compat),
                          extra_blueprints=(
                              history_blueprint(self.history),
                              ui_blueprint(self.store,
                                           housekeeping_interval=self.config.housekeeping_interval,
                                           history_seconds=self.config.history_duration),
                              usage_blueprint(self.usage.path if self.usage else None,
                                              currency=None, node=self.node_name)),
                          probes_only=probes_only, gpu_events=self.gpu_events)

    def reload(self, args) -> None:
        """SIGHUP: persist the counters now, then re-read the config file and apply what can be
        applied live (``config.RELOADABLE``); options that need a restart are named."""
        persisted = self.persister.persist_now()
        try:
            new = self._adjust_config(resolve(args, os.environ))
            if "state_dir" not in new.explicit:         # the fallback chosen at start stays
                new = dataclasses.replace(new, state_dir=self.config.state_dir)
        except ConfigError as exc:
            log.error("SIGHUP: counters %s; config NOT reloaded, the running one stays: %s",
                      "persisted" if persisted else "NOT persisted", exc)
            return
        self.config, applied, restart = reload_changes(self.config, new)
        logging.getLogger().setLevel(self.config.log_level)
        log.info("SIGHUP: counters %s; config %s reloaded: %s%s",
                 "persisted" if persisted else "NOT persisted", new.config_file or "(none)",
                 ", ".join(applied) + " applied" if applied else "nothing changed",
                 f"; changed but needing a restart: {', '.join(restart)}" if restart else "")

    def start(self) -> None:
        self.health.start()
        self.housekeeping.start()
        if self.usage is not None:
            self.usage.start()

    def close(self) -> None:
        sdnotify.stopping()
        self.health.stop(SHUTDOWN_BUDGET_SECONDS / 2)
        self.housekeeping.stop(SHUTDOWN_BUDGET_SECONDS / 2)
        self.persister.close()      # waits for a line a tick still running is writing
        if self.usage is not None:
            self.usage.stop(SHUTDOWN_BUDGET_SECONDS / 4)
        self.gpus.close()
        if self.housekeeping.stopped:
            self.cgroups.close()      # a tick still running after the budget may read them
            if self.dcgm is not None:
                self.dcgm.close()
            self.procs.close()
        if self.simulator is not None:
            self.simulator.uninstall()


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # waitress warns on every queued request under concurrent scrapes; queueing is expected.
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)


def run_once(daemon: Daemon, interval: float = 1.0) -> int:
    """Two ticks ``interval`` apart (rates need two samples), then the summary JSON on stdout."""
    daemon.housekeeper.tick()
    time.sleep(interval)
    snapshot = daemon.housekeeper.tick()
    json.dump(summary_dict(snapshot), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


class _Stop(Interrupt):
    pass


def _shown_host(host: str) -> str:
    """The host part of a URL to open for a listen address (loopback for "every interface")."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host                                  # a name
    if address.is_unspecified:
        address = ipaddress.ip_address("::1" if address.version == 6 else "127.0.0.1")
    return f"[{address}]" if address.version == 6 else str(address)


def bind(config: Config) -> tuple[Listeners, WatchStreams]:
    """The listening sockets, bound before anything else starts (raises ``ListenError``)."""
    watches = WatchStreams()
    return Listeners(None, config.listen, None, config.health_listen, watches=watches), watches


def serve(daemon: Daemon, listeners: Listeners, watches: WatchStreams, args=None,
          announce=None) -> int:
    """Serve on ``listeners`` until SIGTERM or SIGINT; ``announce`` is handed the page's URL
    once serving."""
    config = daemon.config
    listeners.attach(daemon.create_app(),
                     daemon.create_app(probes_only=True) if config.health_listen else None)
    stopping = False

    def _on_signal(signum: int, _frame) -> None:
        # Raise once to leave server.run(); a second signal during shutdown is ignored so it
        # cannot interrupt the clean-up (counters are being persisted).
        nonlocal stopping
        if stopping:
            return
        stopping = True
        raise _Stop(signum)

    def _on_hup(_signum: int, _frame) -> None:
        # Off the signal frame: persisting and re-reading take locks the interrupted code
        # may hold.
        if args is not None and not stopping:
            threading.Thread(target=daemon.reload, args=(args,), name="reload",
                             daemon=True).start()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGHUP, _on_hup)
    daemon.gpu_events.listen(watches.notify)
    daemon.start()
    device_api = start_device_api(config, daemon.store, daemon.gpu_events)
    host, port = config.listen
    log.info("gpustats %s serving on http://%s:%s (node %s)%s", __version__, host,
             Listeners.port_of(listeners.data), daemon.node_name,
             f"; health on http://{config.health_listen[0]}:"
             f"{Listeners.port_of(listeners.health)}"
             if listeners.health and config.health_listen is not None else "")
    if announce is not None:
        announce(f"http://{_shown_host(host)}:{Listeners.port_of(listeners.data)}/")
    try:
        listeners.run()
    except _Stop as stop:
        log.info("received %s; shutting down", signal.Signals(stop.args[0]).name)
    finally:
        stopper = threading.Thread(target=daemon.close, daemon=True)
        stopper.start()
        listeners.close()
        if device_api is not None:
            device_api.stop()
        stopper.join(SHUTDOWN_BUDGET_SECONDS)
    return 0


GC_FIRST_GENERATION_THRESHOLD = 10_000


def settle_garbage_collector() -> None:
    """Tunes Python's cyclic garbage collector for the tick, once the daemon is built.

    What start-up made (modules, configuration, sources) is frozen out of the collector's
    scans, and the youngest generation is collected after 10,000 net allocations instead of
    700. A tick's garbage is acyclic (frozen dataclasses and tuples, freed by reference
    counting), but a tick keeps thousands of new objects alive until its snapshot is
    published: at the default threshold the collector ran several times a tick, each time
    walking every young object (and the oldest generation now and then). Cycles are still
    collected, only less often.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_FIRST_GENERATION_THRESHOLD, *gc.get_threshold()[1:])


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:          # gpustats usage ..., gpustats top ...
        return run_subcommand(argv)
    args = build_arg_parser().parse_args(argv)
    if args.version:
        print(f"gpustats {__version__}")
        return 0
    try:
        config = resolve(args, os.environ)
    except ConfigError as exc:
        print(f"gpustats: {exc}", file=sys.stderr)
        return 2
    _setup_logging(config.log_level)
    if not config.demo:
        return _run(config, args)
    from gpustats.demo import DemoNode
    if config.log_level != "DEBUG":     # the demo rewrites the scenario every second, on purpose
        logging.getLogger("gpustats.simulator.library").setLevel(logging.WARNING)
    try:
        demo = DemoNode.start(config.demo)
    except OSError as exc:
        print(f"gpustats: cannot make the demo's node: {exc}", file=sys.stderr)
        return 2
    try:
        return _run(demo.configure(config), args, demo)
    finally:
        demo.close()


def _announce_demo(demo, url: str) -> None:
    print(f"gpustats demo: {demo.describe()}.\n"
          f"Open {url} (summary: {url}stats/summary, metrics: {url}metrics); "
          f"Ctrl-C stops it and removes {demo.root}.", flush=True)


def _run(config: Config, args, demo=None) -> int:
    """Start the daemon on ``config``: ``--once``, or serve until stopped."""
    if args.once:
        return _start(config, args, demo, None)
    cap_malloc_arenas()                  # before the serving and housekeeping threads start
    try:
        bound = bind(config)
    except ListenError as exc:  # address in use, not an address of this host, no permission
        # Bound before the state dir is chosen or read: nothing was written (the state dir
        # may be that of the gpustats already on this port).
        print(f"gpustats: {exc}", file=sys.stderr)
        return 2
    try:
        return _start(config, args, demo, bound)
    finally:
        bound[0].close()


def _start(config: Config, args, demo, bound: tuple[Listeners, WatchStreams] | None) -> int:
    choose = existing_state_dir if args.once else choose_state_dir    # --once writes nothing
    try:
        state = choose(config.state_dir, explicit="state_dir" in config.explicit,
                       environ=os.environ)
    except StateDirError as exc:
        print(f"gpustats: {exc}", file=sys.stderr)
        return 2
    if state.note is not None:
        log.warning("%s", state.note)
        config = dataclasses.replace(config, state_dir=state.path)
    try:
        daemon = Daemon(config, adjust_config=demo.configure if demo is not None else None,
                        write_state=not args.once)
    except NewerStateVersion as exc:
        print(f"gpustats: the state in {config.state_dir} was written by a newer gpustats "
              f"({exc}); run that version, or start over with --state-reset",
              file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"gpustats: cannot start: {exc}", file=sys.stderr)
        return 2
    settle_garbage_collector()
    if bound is None:
        try:
            return run_once(daemon)
        finally:
            daemon.close()
    return serve(daemon, *bound, args, announce=(lambda url: _announce_demo(demo, url))
                 if demo is not None else None)
