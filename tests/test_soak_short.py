"""A short soak: concurrent scrapes of both endpoints, container churn, changing load."""

from bench.soak import run_soak


def test_short_soak(tmp_path):
    # 4 processes flooding their fd tables on the AMD GPU (the bench: 50 x 4,096 fds)
    result = run_soak(seconds=12, clients=32, churn=10, warmup=4, workdir=tmp_path,
                      drm_processes=4, drm_fds=512)
    assert result["requests"] > 100
    assert result["http_5xx"] == 0 and result["client_errors"] == 0
    assert result["containers_created"] >= 80
    assert result["threads_min"] == result["threads_max"], result
    assert result["drm_fd_attackers"] == 4 and result["summary_tenants"] > 0, result
    assert result["rss_growth_ratio"] < 0.10, result      # the 10-minute run holds 5%
    attack = result["attack"]     # idle, trickling, large-POST, smuggling, pipelining peers beside
    assert attack["large_posts_413"] >= 1 and attack["large_posts_other"] == 0, attack
    assert attack["spooled_files_max"] == 0
    assert attack["smuggling_refused_400"] >= 1 and attack["smuggling_other"] == 0, attack
    assert attack["smuggled_answered"] == 0, attack
    # 100 trickling sockets on the 64-connection health port, and every probe answered
    assert attack["trickling_reopened_health_port"] >= 1, attack
    assert attack["probe_healthz_health_port"]["failures"] == 0, attack
    # Pipelining clients that read nothing or a trickle take no worker from the probes:
    # every answer within 1 s. None is reset: a connection accepted into a descriptor freed in
    # the same turn of the serving loop, among hundreds of reconnecting attackers, is no longer
    # closed for the old one's readiness (a timeout on a loaded machine aside).
    for name in ("healthz", "readyz", "summary", "metrics"):
        probe = attack[f"probe_{name}"]
        assert probe["max_ms"] is not None and probe["max_ms"] < 1000, (name, attack)
        assert "ConnectionResetError" not in probe["errors"], (name, attack)
        assert probe["failures"] <= max(1, 0.05 * probe["probes"]), (name, attack)
    # The hostile kubelet and dcgm-exporter are refused as failing sources.
    assert attack["pod_resources_failing"] == 1 and attack["dcgm_exporter_failing"] == 1, attack
