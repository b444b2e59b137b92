"""This test process's open file descriptors, to check that nothing leaks them."""

import os


def open_descriptors() -> set[str]:
    """This process's open file descriptors (their numbers)."""
    return set(os.listdir("/proc/self/fd"))
