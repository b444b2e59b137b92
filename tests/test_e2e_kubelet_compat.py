"""The kubelet's own leniency, end to end: ``only_cpu_and_memory`` is true only when given once
as ``true``; any other value, or a repetition, is false and never an error."""

import json
import urllib.request

from tests.conftest import REPO_ROOT

# query -> whether the answer is CPU and memory only (the kubelet's handler.go reading)
KUBELET_TABLE = {
    "": False,
    "?only_cpu_and_memory=true": True,
    "?only_cpu_and_memory=True": False,
    "?only_cpu_and_memory=1": False,
    "?only_cpu_and_memory=false": False,
    "?only_cpu_and_memory=": False,
    "?only_cpu_and_memory=true&only_cpu_and_memory=true": False,
}


def test_only_cpu_and_memory_kubelet_table(start_daemon):
    daemon = start_daemon("--simulate", str(REPO_ROOT / "examples" / "two-gpus.yaml"),
                          "--housekeeping-interval", "0.5")
    daemon.wait_ready()
    for query, only in KUBELET_TABLE.items():
        status, body = daemon.get("/stats/summary" + query)
        assert status == 200, (query, body)
        assert ("accelerators" not in body["node"]) is only, query
        request = urllib.request.Request(daemon.base + "/stats/summary" + query, data=b"",
                                         method="POST")
        with urllib.request.urlopen(request, timeout=5) as resp:
            assert resp.status == 200
            assert ("accelerators" not in json.load(resp)["node"]) is only, ("POST", query)
    # Real errors elsewhere keep their status.
    assert daemon.get("/stats/nope")[0] == 404
