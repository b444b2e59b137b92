"""The kubelet's Go types as a test tool: ``kubelet_decoder`` builds tests/kubelet_decode (the
vendored k8s.io/kubelet/pkg/apis/stats/v1alpha1 types, standard library only) and decodes a
body the way a Go client does, leniently or, with ``strict=True``, rejecting unknown fields."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parent.parent / "kubelet_decode"


class DecodeError(AssertionError):
    """The Go decoder refused the body; the message is its error."""


@pytest.fixture
def kubelet_decoder(tmp_path):
    """``decode(body, strict=False) -> dict``: what a Go client holds after decoding ``body``;
    raises DecodeError when the decoder refuses it. Skipped without a Go toolchain."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("no Go toolchain (Debian: golang-go)")
    binary = tmp_path / "kubelet-decode"
    env = dict(os.environ, GOCACHE=str(tmp_path / "gocache"), GOPATH=str(tmp_path / "gopath"),
               GOPROXY="off", GO111MODULE="off", GOFLAGS="", CGO_ENABLED="0")
    sources = sorted(str(p) for p in SOURCE.glob("*.go"))
    built = subprocess.run([go, "build", "-o", str(binary), *sources], env=env,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr

    def decode(body: bytes, strict: bool = False) -> dict:
        argv = [str(binary), "-strict"] if strict else [str(binary)]
        result = subprocess.run(argv, input=body, capture_output=True, timeout=30)
        if result.returncode != 0:
            raise DecodeError(result.stderr.decode().strip())
        return json.loads(result.stdout)
    return decode
