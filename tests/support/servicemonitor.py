"""The shipped ServiceMonitor's endpoints rendered as the Prometheus Operator renders them: a
scrape job with static targets carrying the Operator's target labels."""

TARGET_LABELS = {"namespace": "gpustats", "service": "gpustats", "pod": "gpustats-x7k2p",
                 "container": "kube-rbac-proxy", "endpoint": "https", "job": "gpustats"}
_KEYS = {"sourceLabels": "source_labels", "targetLabel": "target_label",
         "replacement": "replacement", "regex": "regex", "action": "action",
         "separator": "separator", "modulus": "modulus"}


def operator_job(endpoint: dict, target: str, job_name: str) -> dict:
    """One ServiceMonitor endpoint as the Operator renders it, with static targets."""
    relabel = [{_KEYS[k]: v for k, v in rule.items()} for rule in endpoint.get("relabelings", [])]
    metric_relabel = [{_KEYS.get(k, k): v for k, v in rule.items()}
                      for rule in endpoint.get("metricRelabelings", [])]
    return {"job_name": job_name, "honor_labels": bool(endpoint.get("honorLabels", False)),
            "metrics_path": endpoint.get("path", "/metrics"), "scrape_interval": "1s",
            "static_configs": [{"targets": [target], "labels": TARGET_LABELS}],
            "relabel_configs": relabel, "metric_relabel_configs": metric_relabel}
