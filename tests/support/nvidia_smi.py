"""nvidia-smi's own answers, for checks against the real GPU."""

import shutil
import subprocess

import pytest


def nvidia_smi(fields: str) -> list[list[str]]:
    """``nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`` rows."""
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi not on PATH")
    out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return [[c.strip() for c in line.split(",")] for line in out.strip().splitlines()]
