"""The kubelet's own leniency, end to end: ``only_cpu_and_memory`` (and gpustats' ``strict``) is
true only when given once as ``true``; any other value, or a repetition, is false and never an
error. ``strict=true`` answers what a Go client decoding into the kubelet's types with unknown
fields disallowed reads."""

import json
import urllib.request

import pytest

from tests.support.paths import REPO_ROOT
from tests.support.kubelet_go import DecodeError

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


# query -> whether the answer is strict (the same exact-`true` rule)
STRICT_TABLE = {
    "": False,
    "?strict=true": True,
    "?strict=True": False,
    "?strict=1": False,
    "?strict=": False,
    "?strict=true&strict=true": False,
    "?strict=true&only_cpu_and_memory=true": True,
}


def test_strict_summary_decodes_with_unknown_fields_disallowed(start_daemon, kubelet_decoder):
    """A node with GPUs and no pods: the default body is refused by a strict Go client
    (``accelerators`` on the node), ``strict=true`` is read by it, in a query or a POST form."""
    daemon = start_daemon("--simulate", str(REPO_ROOT / "examples" / "two-gpus.yaml"),
                          "--housekeeping-interval", "0.5")
    daemon.wait_ready()
    for query, strict in STRICT_TABLE.items():
        with urllib.request.urlopen(daemon.base + "/stats/summary" + query, timeout=5) as resp:
            raw = resp.read()
        lenient = kubelet_decoder(raw)
        assert lenient["node"]["nodeName"] and lenient["pods"] == [], query
        if strict:
            seen = kubelet_decoder(raw, strict=True)
            assert seen["node"]["nodeName"] == lenient["node"]["nodeName"]
            assert seen["node"]["cpu"]["usageCoreNanoSeconds"], query
        else:
            with pytest.raises(DecodeError, match='unknown field "accelerators"'):
                kubelet_decoder(raw, strict=True)
    for form in (b"strict=true", b"only_cpu_and_memory=false&strict=true"):
        request = urllib.request.Request(daemon.base + "/stats/summary", data=form)
        with urllib.request.urlopen(request, timeout=5) as resp:
            assert kubelet_decoder(resp.read(), strict=True)["node"]["nodeName"]
    # Given both in the query and the form: a repetition, so not strict.
    request = urllib.request.Request(daemon.base + "/stats/summary?strict=true",
                                     data=b"strict=true")
    with urllib.request.urlopen(request, timeout=5) as resp:
        assert "accelerators" in json.load(resp)["node"]
