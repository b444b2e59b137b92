"""dcgm-exporter found by itself where ``--dcgm-exporter-url`` is unset: a bounded probe of the
node-local endpoint, in a thread of its own, at a slow cadence; what is not dcgm-exporter is
not taken for it; ``none`` turns it off; the URL found is in /api/v1/status."""

from __future__ import annotations

import json

import pytest

from gpustats.config import build_arg_parser, resolve
from gpustats.export.status import status_json
from gpustats.sources.dcgm import DcgmExporterClient
from gpustats.sources.dcgm_discovery import (
    NODE_LOCAL_URL, DcgmDiscovery, activity_source, looks_like_dcgm_exporter, probe,
)
from tests.support.dcgm_exporter import Exporter
from tests.support.fakehost import build, write_scenario
from tests.support.gpus import GPU_A


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def exporter():
    server = Exporter()
    yield server
    server.server.shutdown()


def test_the_option_finds_by_default_and_none_turns_it_off():
    parse = build_arg_parser().parse_args
    assert resolve(parse([]), {}).dcgm_exporter_url is None
    assert resolve(parse(["--dcgm-exporter-url", "none"]), {}).dcgm_exporter_url == "none"
    assert resolve(parse([]), {"GPUSTATS_DCGM_EXPORTER_URL": "NONE"}).dcgm_exporter_url == "none"
    assert activity_source("none", None) is None
    found = activity_source(None, None)
    assert isinstance(found, DcgmDiscovery) and found.candidates == (NODE_LOCAL_URL,)
    configured = activity_source("http://127.0.0.1:1/metrics", None)
    assert isinstance(configured, DcgmExporterClient)
    configured.close()


def test_the_node_local_exporter_is_found_off_the_caller(exporter):
    clock = _Clock()
    discovery = DcgmDiscovery(lambda url: DcgmExporterClient(url), (exporter.url,),
                              every_seconds=300, clock=clock)
    assert discovery.activity() is None and discovery.url is None     # the probe runs apart
    discovery.wait_probe(5)
    assert discovery.url == exporter.url
    assert discovery.activity()[("GPU-a", 7)] == pytest.approx(0.6)
    discovery.close()


def test_what_is_not_dcgm_exporter_is_not_taken_and_probed_again_only_later(exporter):
    exporter.body = b"# TYPE node_load1 gauge\nnode_load1 0.5\n"
    clock = _Clock()
    discovery = DcgmDiscovery(lambda url: DcgmExporterClient(url), (exporter.url,),
                              every_seconds=300, clock=clock)
    discovery.activity()
    discovery.wait_probe(5)
    assert discovery.url is None and discovery.probes == 1
    clock.now += 299
    discovery.activity()
    discovery.wait_probe(5)
    assert discovery.probes == 1
    exporter.body = b"# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 1\n"
    clock.now += 2
    discovery.activity()
    discovery.wait_probe(5)
    assert discovery.probes == 2 and discovery.url == exporter.url
    discovery.close()


def test_the_probe_is_bounded(exporter):
    exporter.status = 500
    assert probe(exporter.url, 2.0) is False
    exporter.status = 200
    exporter.delay = 1.0
    assert probe(exporter.url, 0.2) is False          # a silent server: the timeout
    assert probe("https://127.0.0.1:1/metrics", 0.2) is False
    assert not looks_like_dcgm_exporter(301, b"DCGM_FI_DEV_GPU_UTIL 1\n")


def test_the_url_found_is_in_the_status(tmp_path, in_process_daemon, exporter):
    """Looked for once a MIG GPU is there (its instances' activity is what it is read for)."""
    write_scenario(tmp_path / "s.yaml", {"devices": [{"uuid": GPU_A, "minor": 0, "mig_instances": [
        {"gpu_instance_id": 7, "profile": "1g.10gb", "memory_total_bytes": 10 << 30}]}]})
    cgroup, proc = build(tmp_path / "host", {})
    daemon = in_process_daemon("--simulate", str(tmp_path / "s.yaml"), "--cgroup-root",
                               str(cgroup), "--proc-root", str(proc))
    assert isinstance(daemon.dcgm, DcgmDiscovery)
    daemon.dcgm.candidates = (exporter.url,)
    status = json.loads(status_json(daemon.housekeeper.tick()))
    assert "dcgmExporterUrl" not in status
    daemon.dcgm.wait_probe(5)
    status = json.loads(status_json(daemon.housekeeper.tick()))
    assert status["dcgmExporterUrl"] == exporter.url
