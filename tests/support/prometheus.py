"""A real Prometheus server (Debian's package) for tests: start it on a free loopback port
scraping the given targets, query its HTTP API, stop it."""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from tests.support.daemon import free_port
from tests.support.waiting import poll


class PrometheusServer:
    def __init__(self, workdir: Path, targets: list[int], scrape_interval: str = "1s",
                 scrape_configs: list[dict] | None = None):
        """Scrape ``targets`` as job ``gpustats``, or run the given ``scrape_configs``."""
        self.port = free_port()
        config = workdir / "prometheus.yml"
        if scrape_configs is None:
            listed = ", ".join(f"'127.0.0.1:{port}'" for port in targets)
            config.write_text(
                f"global: {{scrape_interval: {scrape_interval}, "
                f"scrape_timeout: {scrape_interval}, evaluation_interval: 1s}}\n"
                "scrape_configs:\n"
                "  - job_name: gpustats\n"
                f"    static_configs: [{{targets: [{listed}]}}]\n")
        else:
            config.write_text(yaml.safe_dump({
                "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval,
                           "evaluation_interval": "1s"},
                "scrape_configs": scrape_configs}))
        self.log_path = workdir / "prometheus.log"
        with open(self.log_path, "w") as log:     # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                ["prometheus", f"--config.file={config}",
                 f"--storage.tsdb.path={workdir / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT)

    def api(self, path: str, **params) -> dict:
        query = urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/{path}?{query}",
                                    timeout=5) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self.api("query", **params)["result"]

    def wait_for(self, expr: str, timeout: float = 45.0) -> list[dict]:
        def found() -> list[dict]:
            try:
                return self.query(expr)
            except OSError:
                return []

        result = poll(found, timeout=timeout, interval=0.5)
        if result:
            return result
        raise AssertionError(f"no series for {expr} in {timeout} s:\n"
                             + self.log_path.read_text()[-3000:])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
