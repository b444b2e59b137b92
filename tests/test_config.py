import subprocess
import sys

import pytest

from gpustats.config import (
    OPTIONS, ConfigError, IdlePower, build_arg_parser, parse_idle_power, parse_listen, resolve,
)
from tests.support.paths import REPO_ROOT


def _resolve(argv=(), env=None):
    return resolve(build_arg_parser().parse_args(list(argv)), env or {})


def test_defaults():
    config = _resolve()
    assert config.listen == ("127.0.0.1", 9477)
    assert config.housekeeping_interval == 5.0
    assert config.nvml_retry_interval == 60.0
    assert config.pod_resources_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert config.idle_power_watts == IdlePower()
    assert config.xid_ignore == (13, 31, 43, 45, 68, 109)
    assert config.simulate is None


def test_default_port_is_not_a_peers_port():
    assert _resolve().listen[1] not in {8080, 9100, 9400, 9835, 28282}


def test_precedence_flag_over_env_over_file_over_default(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("housekeeping_interval: 7\nnvml_retry_interval: 30\nnode_name: from-file\n"
                   "log_level: debug\n")
    env = {"GPUSTATS_CONFIG": str(cfg), "GPUSTATS_NVML_RETRY_INTERVAL": "20",
           "GPUSTATS_NODE_NAME": "from-env"}
    config = _resolve(["--node-name", "from-flag"], env)
    assert config.node_name == "from-flag"          # flag beats env and file
    assert config.nvml_retry_interval == 20.0       # env beats file
    assert config.housekeeping_interval == 7.0      # file beats default
    assert config.log_level == "DEBUG"
    assert config.listen == ("127.0.0.1", 9477)     # default


def test_every_option_has_flag_env_and_file_key(tmp_path):
    parser = build_arg_parser()
    flags = {a.option_strings[0] for a in parser._actions if a.option_strings}
    for option in OPTIONS:
        assert option.flag in flags
        assert option.env.startswith("GPUSTATS_")


def test_design_flags_exist():
    flags = {a.option_strings[0] for a in build_arg_parser()._actions if a.option_strings}
    for flag in ("--config", "--listen", "--housekeeping-interval", "--nvml-retry-interval",
                 "--sysfs-root", "--proc-root", "--cgroup-root", "--pod-resources-socket",
                 "--runtime-socket", "--dcgm-exporter-url", "--state-dir", "--node-name",
                 "--idle-power-watts", "--simulate", "--log-level", "--once", "--version"):
        assert flag in flags


@pytest.mark.parametrize("argv, env, fragment", [
    (["--listen", "nonsense"], {}, "--listen"),
    (["--listen", "127.0.0.1:99999"], {}, "out of range"),
    (["--housekeeping-interval", "-1"], {}, "--housekeeping-interval"),
    (["--housekeeping-interval", "abc"], {}, "--housekeeping-interval"),
    ([], {"GPUSTATS_NVML_RETRY_INTERVAL": "0"}, "GPUSTATS_NVML_RETRY_INTERVAL"),
    (["--dcgm-exporter-url", "localhost:9400"], {}, "http://"),
    (["--log-level", "chatty"], {}, "--log-level"),
    (["--idle-power-watts", "-5"], {}, "--idle-power-watts"),
    (["--idle-power-watts", "bogus=1"], {}, "GPU ID"),
    (["--idle-power-watts", "amd-=1"], {}, "GPU ID"),
    (["--memory-pressure-threshold", "1.5"], {}, "ratio"),
    (["--health-listen", "nonsense"], {}, "--health-listen"),
    ([], {"GPUSTATS_HEALTH_LISTEN": "127.0.0.1:70000"}, "GPUSTATS_HEALTH_LISTEN"),
    (["--tick-watchdog-intervals", "1"], {}, "--tick-watchdog-intervals"),
    (["--tick-watchdog-intervals", "x"], {}, "--tick-watchdog-intervals"),
    (["--log-root", "var/log"], {}, "--log-root"),
    ([], {"GPUSTATS_LOG_ROOT": "relative"}, "absolute directory"),
    (["--counter-retention", "0"], {}, "--counter-retention"),
    ([], {"GPUSTATS_COUNTER_RETENTION": "forever"}, "GPUSTATS_COUNTER_RETENTION"),
    (["--state-reset", "maybe"], {}, "--state-reset"),
    ([], {"GPUSTATS_STATE_RESET": "2"}, "GPUSTATS_STATE_RESET"),
    (["--dcgm-compat=maybe"], {}, "--dcgm-compat"),
    ([], {"GPUSTATS_DCGM_COMPAT": "2"}, "GPUSTATS_DCGM_COMPAT"),
    (["--cdi-spec-dirs", "/etc/cdi,relative/cdi"], {}, "--cdi-spec-dirs"),
    ([], {"GPUSTATS_CDI_SPEC_DIRS": "cdi"}, "absolute"),
    (["--energy-every", "0"], {}, "--energy-every"),
    (["--energy-every", "2.5"], {}, "whole number"),
    ([], {"GPUSTATS_ENERGY_EVERY": "often"}, "GPUSTATS_ENERGY_EVERY"),
    (["--cgroup-stats-interval", "0"], {}, "--cgroup-stats-interval"),
    ([], {"GPUSTATS_CGROUP_STATS_INTERVAL": "often"}, "GPUSTATS_CGROUP_STATS_INTERVAL"),
    (["--dcgm-hostname-label", "HOSTNAME"], {}, "--dcgm-hostname-label"),
    (["--dcgm-hostname-label", "node"], {}, "Hostname or hostname"),
    ([], {"GPUSTATS_DCGM_HOSTNAME_LABEL": ""}, "GPUSTATS_DCGM_HOSTNAME_LABEL"),
    (["--demo", "maybe"], {}, "--demo"),
    ([], {"GPUSTATS_DEMO": "2"}, "GPUSTATS_DEMO"),
    (["--demo", "baremetal"], {}, "expected kubernetes, bare-metal, mixed, amd, intel, true or "
                                  "false, got 'baremetal'"),
    ([], {"GPUSTATS_DEMO": "slurm"}, "invalid GPUSTATS_DEMO: expected kubernetes, bare-metal"),
    ([], {"GPUSTATS_DEMO": ""}, "GPUSTATS_DEMO"),
    (["--demo", "bare-metal", "--simulate", "s.yaml"], {}, "cannot be combined with --simulate"),
    (["--demo", "--simulate", "examples/two-gpus.yaml"], {}, "cannot be combined with --simulate"),
    (["--demo", "--cgroup-root", "/sys/fs/cgroup", "--runtime-socket", "/run/c.sock"], {},
     "cannot be combined with --cgroup-root, --runtime-socket"),
    (["--simulate", "s.yaml"], {"GPUSTATS_DEMO": "true"}, "--demo runs its own simulated node"),
    (["--disable-metrics", "process,bogus"], {}, "--disable-metrics"),
    ([], {"GPUSTATS_DISABLE_METRICS": "gpus"}, "unknown metric group 'gpus'"),
    (["--dcgm-exporter-url", "localhost:9400"], {}, "--dcgm-exporter-url"),
    ([], {"GPUSTATS_DCGM_EXPORTER_URL": "off"}, "http:// or https://"),
    (["--device-api-socket-group", "gpu users"], {}, "--device-api-socket-group"),
    ([], {"GPUSTATS_DEVICE_API_SOCKET_GROUP": "-x"}, "group name or number"),
    (["--device-api-listen", "9480"], {}, "--device-api-listen"),
    ([], {"GPUSTATS_DEVICE_API_LISTEN": "localhost:port"}, "GPUSTATS_DEVICE_API_LISTEN"),
    (["--kubelet-cgroup-parent", "kubepods"], {}, "--kubelet-cgroup-parent"),
    ([], {"GPUSTATS_KUBELET_CGROUP_PARENT": "/a/../b"}, "absolute cgroup path"),
    (["--nvml-driver-root", "run/nvidia/driver"], {}, "--nvml-driver-root"),
    (["--usage-hourly-days", "0"], {}, "--usage-hourly-days"),
    ([], {"GPUSTATS_USAGE_HOURLY_DAYS": "ninety"}, "GPUSTATS_USAGE_HOURLY_DAYS"),
    (["--usage-daily-days", "-1"], {}, "--usage-daily-days"),
    ([], {"GPUSTATS_USAGE_DAILY_DAYS": "1.5"}, "whole number"),
    (["--price-per-kwh", "0.25"], {}, "--price-per-kwh"),
    ([], {"GPUSTATS_PRICE_PER_KWH": "-1 EUR"}, "GPUSTATS_PRICE_PER_KWH"),
    (["--price-per-kwh", "/nonexistent/tariff.yaml"], {}, "cannot read"),
    (["--carbon-intensity", "lots"], {}, "--carbon-intensity"),
    ([], {"GPUSTATS_CARBON_INTENSITY": "/nonexistent/grid.csv"}, "GPUSTATS_CARBON_INTENSITY"),
    ([], {"GPUSTATS_NVML_DRIVER_ROOT": "driver"}, "absolute directory"),
])
def test_bad_values_name_the_option(argv, env, fragment):
    with pytest.raises(ConfigError) as err:
        _resolve(argv, env)
    assert fragment in str(err.value)


def test_usage_options_from_flag_env_and_file(tmp_path):
    config = _resolve()
    assert (config.usage_hourly_days, config.usage_daily_days) == (90, 730)
    assert config.price_per_kwh is None and config.carbon_intensity is None
    assert _resolve(["--price-per-kwh", "0.25 EUR"]).price_per_kwh.currency == "EUR"
    assert _resolve([], {"GPUSTATS_CARBON_INTENSITY": "350"}).carbon_intensity.constant == 350
    tariff = tmp_path / "tariff.yaml"
    tariff.write_text("currency: CHF\nrates:\n  - {price: 0.2}\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"price_per_kwh: {tariff}\nusage_hourly_days: 30\n")
    config = _resolve(["--config", str(cfg)])
    assert (config.price_per_kwh.currency, config.usage_hourly_days) == ("CHF", 30)
    tariff.write_text("currency: CHF\nrates:\n  - {price: 0.2, from: '08:00'}\n")
    with pytest.raises(ConfigError, match="no rate for mon 00:00"):
        _resolve(["--config", str(cfg)])


def test_dcgm_compat_switch(tmp_path):
    assert _resolve().dcgm_compat is False
    assert _resolve(["--dcgm-compat"]).dcgm_compat is True
    assert _resolve(["--dcgm-compat=false"], {"GPUSTATS_DCGM_COMPAT": "true"}).dcgm_compat is False
    assert _resolve([], {"GPUSTATS_DCGM_COMPAT": "on"}).dcgm_compat is True
    cfg = tmp_path / "c.yaml"
    cfg.write_text("dcgm_compat: true\n")
    assert _resolve(["--config", str(cfg)]).dcgm_compat is True
    cfg.write_text("dcgm_compat: [1]\n")
    with pytest.raises(ConfigError, match="dcgm_compat in"):
        _resolve(["--config", str(cfg)])


def test_demo_kind_from_flag_env_and_file(tmp_path):
    assert _resolve().demo is None
    assert _resolve(["--demo"]).demo == "kubernetes"           # the flag alone
    assert _resolve(["--demo", "kubernetes"]).demo == "kubernetes"
    assert _resolve(["--demo=bare-metal"]).demo == "bare-metal"
    assert _resolve(["--demo", "--listen", ":9999"]).demo == "kubernetes"
    assert _resolve([], {"GPUSTATS_DEMO": "yes"}).demo == "kubernetes"
    assert _resolve([], {"GPUSTATS_DEMO": "Bare-Metal"}).demo == "bare-metal"
    assert _resolve([], {"GPUSTATS_DEMO": "off"}).demo is None
    assert _resolve(["--demo=false"], {"GPUSTATS_DEMO": "bare-metal"}).demo is None
    cfg = tmp_path / "c.yaml"
    cfg.write_text("demo: true\nlisten: 127.0.0.1:9999\n")
    assert _resolve(["--config", str(cfg)]).demo == "kubernetes"
    cfg.write_text("demo: bare-metal\n")
    assert _resolve(["--config", str(cfg)]).demo == "bare-metal"
    cfg.write_text("demo: false\n")
    assert _resolve(["--config", str(cfg)]).demo is None
    cfg.write_text("demo: bare-metal\nhost_root: /host\n")
    with pytest.raises(ConfigError, match="cannot be combined with --host-root"):
        _resolve(["--config", str(cfg)])
    cfg.write_text("demo: true\ncgroup_root: /sys/fs/cgroup\n")
    with pytest.raises(ConfigError, match="cannot be combined with --cgroup-root"):
        _resolve(["--config", str(cfg)])


def test_bad_config_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("listen: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        _resolve(["--config", str(bad)])
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("listn: 1.2.3.4:5\n")
    with pytest.raises(ConfigError, match="unknown option 'listn'"):
        _resolve(["--config", str(unknown)])
    with pytest.raises(ConfigError, match="cannot read"):
        _resolve(["--config", str(tmp_path / "missing.yaml")])


@pytest.mark.parametrize("text, fragment", [
    ("state_dir: [a, b]\n", "state_dir in .*: expected a single value, got a list of 2 items"),
    ("log_level: {a: 1}\n", "log_level in .*: expected a single value, got a mapping of 1 keys"),
    ("cdi_spec_dirs: [[/a]]\n", "expected a single value, got a list of 1 items"),
    ("housekeeping_interval: 0x" + "f" * 300 + "\n",
     "housekeeping_interval in .*: expected a number, got an integer of 1200 bits"),
    ("? 0x" + "f" * 5000 + "\n: 1\n", "unknown option an integer of 20000 bits"),
    ("listen: " + "x" * 100_000 + "\n", "expected HOST:PORT, got 'xxx"),
])
def test_file_values_are_refused_without_being_written_out(tmp_path, text, fragment):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=fragment) as info:
        _resolve(["--config", str(cfg)])
    assert len(str(info.value)) < 300


def test_file_value_error_names_file_and_key(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("housekeeping_interval: soon\n")
    with pytest.raises(ConfigError, match=r"housekeeping_interval in .*c\.yaml"):
        _resolve(["--config", str(cfg)])


def test_idle_power_forms():
    assert parse_idle_power("120").for_uuid("GPU-x") == 120.0
    per = parse_idle_power({"default": 60, "GPU-a": 70})
    assert per.for_uuid("GPU-a") == 70.0 and per.for_uuid("GPU-b") == 60.0
    flag_form = parse_idle_power("default=60,GPU-a=70")
    assert flag_form == per
    assert parse_idle_power({"GPU-a": 70}).for_uuid("GPU-b") is None


def test_idle_power_takes_every_gpu_id_the_daemon_serves():
    from gpustats.config_values import GPU_ID_PREFIXES
    from gpustats.sources.drm import amdgpu, intel
    assert {amdgpu.UUID_PREFIX, intel.UUID_PREFIX} <= set(GPU_ID_PREFIXES)
    per = parse_idle_power("amd-2b4a=90,intel-0000:03:00.0=20,MIG-x=10")
    assert per.for_uuid("amd-2b4a") == 90.0 and per.for_uuid("intel-0000:03:00.0") == 20.0


def test_listen_forms():
    assert parse_listen("0.0.0.0:80") == ("0.0.0.0", 80)
    assert parse_listen("[::1]:9477") == ("::1", 9477)
    assert parse_listen(":9477") == ("0.0.0.0", 9477)


def test_cli_exit_code_2_with_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "gpustats", "--housekeeping-interval", "x"],
                            capture_output=True, text=True, cwd=str(REPO_ROOT), timeout=30)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--housekeeping-interval" in lines[0]


def test_cli_version():
    result = subprocess.run([sys.executable, "-m", "gpustats", "--version"],
                            capture_output=True, text=True, cwd=str(REPO_ROOT), timeout=30)
    assert result.returncode == 0 and result.stdout.startswith("gpustats ")


def test_boolean_options_take_a_bare_flag_or_a_value(tmp_path):
    assert _resolve(["--state-reset"]).state_reset is True
    assert _resolve(["--state-reset", "false"]).state_reset is False
    assert _resolve([], {"GPUSTATS_STATE_RESET": "yes"}).state_reset is True
    config = tmp_path / "c.yaml"
    config.write_text("state_reset: true\ncounter_retention: 60\n")
    resolved = _resolve(["--config", str(config)])
    assert resolved.state_reset is True and resolved.counter_retention == 60.0


def test_a_state_from_a_newer_version_stops_start_up_with_one_line(tmp_path):
    import json
    import subprocess
    import sys
    state = tmp_path / "state"
    state.mkdir()
    (state / "counters.json").write_text(json.dumps({"version": 99, "counters": []}))
    common = [sys.executable, "-m", "gpustats", "--once", "--state-dir", str(state),
              "--sysfs-root", str(tmp_path / "nosys"), "--cgroup-root", str(tmp_path / "nocg"),
              "--pod-resources-socket", "", "--runtime-socket", ""]
    refused = subprocess.run(common, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    lines = [x for x in refused.stderr.splitlines() if x.startswith("gpustats:")]
    assert len(lines) == 1 and "--state-reset" in lines[0] and "newer" in lines[0]
    reset = subprocess.run(common + ["--state-reset"], capture_output=True, text=True,
                           timeout=60)
    assert reset.returncode == 0, reset.stderr
    assert list(state.glob("counters.json.reset-*"))


def test_reload_applies_what_it_can_and_names_the_rest():
    from gpustats.config import reload_changes
    old = _resolve(["--idle-power-watts", "100"], {})
    new = _resolve(["--idle-power-watts", "250", "--log-level", "debug",
                    "--listen", "127.0.0.1:1234"], {})
    merged, applied, restart = reload_changes(old, new)
    assert applied == ("idle_power_watts", "log_level") and restart == ("listen",)
    assert merged.idle_power_watts.default_watts == 250 and merged.log_level == "DEBUG"
    assert merged.listen == old.listen


def test_disable_metrics(tmp_path):
    assert _resolve().disable_metrics == ()                  # every group exported
    assert _resolve(["--disable-metrics", "Process, mig,,process"]).disable_metrics \
        == ("process", "mig")
    assert _resolve([], {"GPUSTATS_DISABLE_METRICS": "cadvisor"}).disable_metrics \
        == ("cadvisor",)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("disable_metrics: [process, dcgm]\n")
    assert _resolve(["--config", str(cfg)]).disable_metrics == ("process", "dcgm")
    cfg.write_text("disable_metrics: [process, [dcgm]]\n")
    with pytest.raises(ConfigError, match="disable_metrics in"):
        _resolve(["--config", str(cfg)])


def test_dcgm_hostname_label(tmp_path):
    assert _resolve().dcgm_hostname_label == "Hostname"      # dcgm-exporter's releases
    assert _resolve(["--dcgm-hostname-label", "hostname"]).dcgm_hostname_label == "hostname"
    assert _resolve([], {"GPUSTATS_DCGM_HOSTNAME_LABEL": "hostname"}).dcgm_hostname_label \
        == "hostname"
    cfg = tmp_path / "c.yaml"
    cfg.write_text("dcgm_hostname_label: hostname\n")
    assert _resolve(["--config", str(cfg)]).dcgm_hostname_label == "hostname"
    cfg.write_text("dcgm_hostname_label: Host-name\n")
    with pytest.raises(ConfigError, match="dcgm_hostname_label in"):
        _resolve(["--config", str(cfg)])


def test_each_option_is_declared_once_as_a_config_field():
    """OPTIONS is derived from Config: a field's default is its option's default, parsed."""
    import dataclasses

    from gpustats.config import Config
    names = [f.name for f in dataclasses.fields(Config)]
    assert [o.name for o in OPTIONS] == [n for n in names if n not in ("config_file",
                                                                       "explicit")]
    resolved = _resolve()
    for option in OPTIONS:
        assert getattr(Config(), option.name) == getattr(resolved, option.name), option.name


def test_help_shows_every_option_in_a_section_with_examples():
    from gpustats.config import HELP_SECTIONS
    text = build_arg_parser().format_help()
    assert list(HELP_SECTIONS)[0] == OPTIONS[0].name        # no option before the first
    assert set(HELP_SECTIONS) <= {o.name for o in OPTIONS}
    for title in HELP_SECTIONS.values():
        assert f"\n{title}:\n" in text, title
    for option in OPTIONS:
        assert option.flag in text, option.flag
    assert "examples:" in text and "gpustats --demo bare-metal" in text
