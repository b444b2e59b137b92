"""Hypothesis: every parser of outside input either parses or says why, never crashes."""

import tempfile
from types import SimpleNamespace

import pytest
import yaml
from hypothesis import given, settings, strategies as st

from gpustats.config import ConfigError, build_arg_parser, load_config_file, resolve
from gpustats.sources.cgroup_paths import parse_cgroup_path
from gpustats.sources.cgroup_stats import (
    cpu_stat_usage_usec, parse_devices_list, parse_flat_keyed, parse_limit,
)
from gpustats.sources.node import BUSY_FIELDS, busy_ticks, parse_key_values
from gpustats.simulator.scenario import load_scenario, parse_scenario
from gpustats.sources.procs import container_from_paths, parse_proc_cgroup

HEX = "0123456789abcdef"
segment = st.one_of(
    st.text(min_size=1, max_size=20).filter(lambda s: "/" not in s),
    st.sampled_from(["kubepods", "burstable", "besteffort", "kubepods.slice",
                     "kubepods-burstable.slice", "docker", "system.slice", "x.mount"]),
    st.text(alphabet=HEX, min_size=60, max_size=68).map(lambda h: f"cri-containerd-{h}.scope"),
    st.uuids().map(lambda u: f"pod{u}"),
    st.uuids().map(lambda u: f"kubepods-besteffort-pod{str(u).replace('-', '_')}.slice"),
    st.text(alphabet=HEX, min_size=64, max_size=64),
)


@given(st.lists(segment, max_size=8))
def test_cgroup_paths(parts):
    path = "/" + "/".join(parts)
    info = parse_cgroup_path(path)
    if info is not None:
        if info.container_id is not None:
            assert len(info.container_id) == 64 and path.startswith(info.container_path)
        if info.pod_uid is not None:
            assert len(info.pod_uid) == 36 and "_" not in info.pod_uid
            assert info.qos_class in ("guaranteed", "burstable", "besteffort")


devices_line = st.one_of(
    st.text(max_size=30),
    st.builds(lambda k, a, b, m: f"{k} {a}:{b} {m}", st.sampled_from("abcx"),
              st.sampled_from(["195", "*", "1", "x"]),
              st.one_of(st.integers(0, 300).map(str), st.just("*")), st.just("rwm")),
)


@given(st.lists(devices_line, max_size=12))
def test_devices_list(lines):
    text = "\n".join(lines)
    rules = parse_devices_list(text)
    assert all(0 <= m < 128 for m in rules.gpu_minors)
    assert rules.malformed_lines <= len(text.splitlines())


@given(st.text())
def test_flat_keyed_and_limits(text):
    assert all(isinstance(v, int) for v in parse_flat_keyed(text).values())
    limit = parse_limit(text, v2=True)
    assert limit is None or isinstance(limit, int)


stat_key = st.sampled_from(["anon", "anon_thp", "inactive_file", "total_inactive_file",
                            "file", "pgfault", "pgmajfault", "x"])
stat_line = st.one_of(
    st.builds(lambda k, v: f"{k} {v}", stat_key,
              st.one_of(st.integers(0, 1 << 63).map(str), st.sampled_from(["", "x", "1 2"]))),
    st.text(alphabet="anopgfiletx_ 01\t", max_size=20),
)


@given(st.lists(stat_line, max_size=12), st.booleans())
def test_flat_keyed_picks_what_a_full_parse_finds(lines, trailing_newline):
    """A key's value is that of the first line that is the key, a space and an integer."""
    text = "\n".join(lines) + ("\n" if trailing_newline else "")
    wanted = frozenset({"anon", "inactive_file", "pgfault", "pgmajfault"})
    expected = {}
    for line in text.split("\n"):
        key, space, value = line.partition(" ")
        if space and key in wanted and key not in expected:
            try:
                expected[key] = int(value)
            except ValueError:
                pass
    assert parse_flat_keyed(text, wanted) == expected


@given(st.lists(stat_line, max_size=12), st.booleans(), st.binary(max_size=8), st.integers(0, 60))
def test_flat_keyed_bytes_give_what_their_text_gives(lines, trailing_newline, junk, at):
    """Bytes as read and the text ``read_text`` makes of them give the same values (junk
    bytes, invalid UTF-8 among them, put anywhere)."""
    data = ("\n".join(lines) + ("\n" if trailing_newline else "")).encode()
    data = data[:at] + junk + data[at:]
    text = data.decode("utf-8", "replace")
    wanted = frozenset({"anon", "inactive_file", "pgfault", "pgmajfault"})
    assert parse_flat_keyed(data, wanted) == parse_flat_keyed(text, wanted)
    assert parse_flat_keyed(data) == parse_flat_keyed(text)
    usage = data.replace(b"anon", b"usage_usec", 1)
    assert cpu_stat_usage_usec(usage) == cpu_stat_usage_usec(usage.decode("utf-8", "replace"))


meminfo_key = st.sampled_from(["MemTotal", "MemFree", "AnonPages", "AnonHugePages",
                               "Inactive(file)", "pgfault", "x"])
meminfo_line = st.one_of(
    st.builds(lambda k, sep, v, unit: f"{k}{sep}{v}{unit}", meminfo_key,
              st.sampled_from([":", ": ", ":      ", " "]),
              st.one_of(st.integers(0, 1 << 50).map(str), st.sampled_from(["", "x", "-"])),
              st.sampled_from(["", " kB", " MB", "  kB"])),
    st.text(alphabet="MemFrTotal:k B(file) 01\t", max_size=24),
)


@given(st.lists(meminfo_line, max_size=12), st.booleans())
def test_key_values_picked_as_a_line_by_line_parse_finds_them(lines, trailing_newline):
    """A key's value comes from its first line: the key, ':' or a space, an integer, maybe
    'kB' (bytes)."""
    text = "\n".join(lines) + ("\n" if trailing_newline else "")
    wanted = ("MemTotal", "MemFree", "AnonPages", "Inactive(file)", "pgfault")
    expected = {}
    for line in text.split("\n"):
        for key in wanted:
            if key in expected or not line.startswith(key) or line[len(key):len(key) + 1] \
                    not in (":", " "):
                continue
            parts = line[len(key) + 1:].split()
            try:
                number = int(parts[0]) if parts else None
            except ValueError:
                number = None
            if number is not None:
                expected[key] = number * 1024 if parts[1:2] == ["kB"] else number
    assert parse_key_values(text, wanted) == expected


# 2**48 ticks: ten years of 1,000 CPUs at 1,000 Hz, with room to spare.
@given(st.lists(st.integers(0, 2**48), min_size=len(BUSY_FIELDS), max_size=len(BUSY_FIELDS)),
       st.sampled_from([100, 250, 300, 1000]))
def test_busy_ticks_are_the_kernels_integers_again(ticks, hz):
    """psutil hands out ticks / hz as floats: the kernel's integers come back exactly."""
    times = SimpleNamespace(**{name: float(t) / hz for name, t in zip(BUSY_FIELDS, ticks)},
                            idle=12345.0, iowait=6.0)
    assert busy_ticks(times, hz) == sum(ticks)


@given(st.text())
def test_proc_files(text):
    paths = parse_proc_cgroup(text)
    assert all(p.startswith("/") for p in paths.values())
    container_from_paths(paths)
    assert all(isinstance(v, int) for v in parse_key_values(text).values())


scalar = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**12), st.floats(allow_nan=True),
                   st.text(max_size=12))
yaml_like = st.recursive(scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=5)),
    max_leaves=20)
device_like = st.fixed_dictionaries({"uuid": st.one_of(st.just("GPU-a"), scalar)},
                                    optional={k: yaml_like for k in (
                                        "power_watts", "unsupported", "mig_instances", "gpm",
                                        "violations", "clocks_event_reasons", "minor")})


@settings(max_examples=200)
@given(st.one_of(yaml_like, st.fixed_dictionaries(
    {"devices": st.lists(device_like, max_size=3)},
    optional={"processes": yaml_like, "xid_events": yaml_like, "init_failures": scalar})))
def test_scenario(data):
    try:
        scenario = parse_scenario(data)
    except ValueError as exc:
        assert str(exc)
        return
    assert len({d.uuid for d in scenario.devices}) == len(scenario.devices)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(["listen", "housekeeping_interval", "nvml_retry_interval",
                                        "idle_power_watts", "dcgm_exporter_url", "log_level",
                                        "xid_ignore", "node_name", "bogus"]),
                       yaml_like, max_size=4))
def test_config_file(values):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(values, f)
    args = build_arg_parser().parse_args(["--config", f.name])
    try:
        resolve(args, {})
    except ConfigError as exc:
        assert str(exc).startswith(("invalid ", "config file "))


@pytest.mark.parametrize("load", [load_config_file, load_scenario])
@given(data=st.binary(max_size=200))
def test_files_of_arbitrary_bytes(load, data):
    """Config and scenario files: any bytes give a value or a ValueError, never a crash."""
    with tempfile.NamedTemporaryFile("wb", suffix=".yaml", delete=False) as f:
        f.write(data)
    try:
        load(f.name)
    except ValueError:            # ConfigError is a ValueError
        pass
