"""The malloc arena cap: set through glibc's mallopt, left alone when the operator chose."""

import ctypes

import pytest

from gpustats.malloc_arenas import cap_malloc_arenas


def _glibc() -> bool:
    return hasattr(ctypes.CDLL(None), "gnu_get_libc_version")


@pytest.mark.skipif(not _glibc(), reason="the C library is not glibc")
def test_the_cap_is_set_on_glibc():
    assert cap_malloc_arenas({}) is True


def test_an_operator_setting_is_left_alone(monkeypatch):
    called = []
    monkeypatch.setattr(ctypes, "CDLL", lambda name: called.append(name))
    assert cap_malloc_arenas({"MALLOC_ARENA_MAX": "4"}) is False
    assert called == []


def test_a_c_library_without_mallopt_is_left_alone(monkeypatch):
    monkeypatch.setattr(ctypes, "CDLL", lambda name: object())
    assert cap_malloc_arenas({}) is False

