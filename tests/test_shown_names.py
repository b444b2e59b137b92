"""The one rule every output shows a host name by (export.text)."""

import json
import re

import pytest

from gpustats.export.text import MAX_SHOWN_CHARS, json_bytes, shown


@pytest.mark.parametrize("raw, expected", [
    ("trainer-0", "trainer-0"),
    ("system-serial\\x2dgetty.slice", "system-serial\\x2dgetty.slice"),   # systemd's own
    ("a b", "a b"),
    ("/x/\udcff\udcfe/y", "/x/\\xff\\xfe/y"),            # bytes that were not UTF-8
    ("evil\u202egnp", "evil\\u202egnp"),                 # right-to-left override
    ("\u2066x\u2069\u200f", "\\u2066x\\u2069\\u200f"),   # isolates and marks
    ("line\nbreak\t\x00\x7f\x85", "line\\x0abreak\\x09\\x00\\x7f\\x85"),
    ("caf\u00e9 \u05e9\u05dc\u05d5\u05dd", "caf\u00e9 \u05e9\u05dc\u05d5\u05dd"),  # printable
    ("\U000e0001", "\\U000e0001"),
])
def test_shown(raw, expected):
    assert shown(raw) == expected
    assert shown(expected) == expected                  # shown twice: the same
    shown(raw).encode("utf-8")                          # always valid UTF-8


def test_long_values_are_capped_and_stay_apart():
    a, b = "c" * 200_000, "c" * 199_999 + "d"
    assert len(shown(a)) == MAX_SHOWN_CHARS and shown(a).startswith("c" * 1000)
    assert shown(a) != shown(b) and len(shown(b)) == MAX_SHOWN_CHARS
    assert shown("c" * MAX_SHOWN_CHARS) == "c" * MAX_SHOWN_CHARS
    # The cap counts escapes: 400 odd bytes are 1,600 characters shown.
    assert len(shown("\udcff" * 400)) == MAX_SHOWN_CHARS


def test_json_bytes_shows_every_string_value():
    body = json_bytes({"pods": [{"name": "a\u202eb", "n": 1, "ok": None}], "x": ("\udcff",)})
    assert json.loads(body) == {"pods": [{"name": "a\\u202eb", "n": 1, "ok": None}],
                                "x": ["\\xff"]}
    assert b"\\ud" not in body


def _poisoned(value, skip=("status", "type", "source", "state", "sharing_mode",
                           "share_method", "runtime", "kind")):
    """Every string field of a snapshot (but a few enumerations) made hostile the same way:
    an undecodable byte, a right-to-left override and 1,100 more characters."""
    import dataclasses

    if isinstance(value, str):
        return value + "\udcff\u202e" + "x" * 1100
    if isinstance(value, tuple):
        return tuple(_poisoned(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _poisoned(getattr(value, f.name)) for f in dataclasses.fields(value)
                   if f.init and f.name not in skip}
        return dataclasses.replace(value, **changes)
    return value


def _strings(tree):
    if isinstance(tree, str):
        yield tree
    elif isinstance(tree, dict):
        for v in tree.values():
            yield from _strings(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _strings(v)


def _samples():
    from tests.support.snapshots import sample_snapshot
    from tests.support.tenant_snapshot import tenant_snapshot
    return [sample_snapshot(), tenant_snapshot()]    # the second: a tenant of every kind


@pytest.mark.parametrize("index", [0, 1])
def test_every_output_shows_every_name_by_the_rule(index):
    from gpustats.export.dcgm import render_dcgm
    from gpustats.export.page import page_view
    from gpustats.export.prometheus import render
    from gpustats.export.summary import summary_json

    snapshot = _poisoned(_samples()[index])
    body = summary_json(snapshot)
    strings = list(_strings(json.loads(body)))
    assert any("\\xff\\u202e" in s for s in strings)
    assert all(s.isprintable() and len(s) <= MAX_SHOWN_CHARS for s in strings)
    for accept in (None, "application/openmetrics-text; version=1.0.0"):
        text = render(snapshot, accept, dcgm_compat=True)[0].decode("utf-8")
        values = [re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], v)  # unescaped
                  for v in re.findall(r'="((?:[^"\\]|\\.)*)"', text)]
        assert values and all(len(v) <= MAX_SHOWN_CHARS and v.isprintable() for v in values)
    text = render_dcgm(snapshot).decode("utf-8")     # none without NVML readings (the second)
    assert "\u202e" not in text and ("\\\\xff\\\\u202e" in text) == (index == 0)
    page = page_view(snapshot)
    names = [page.node_name] + [getattr(r, f) for g in page.gpus for r in g.containers
                                for f in ("tenant", "namespace", "container")]
    names += [getattr(r, f) for r in page.tenants for f in ("tenant", "namespace")]
    assert any("\\xff\\u202e" in n for n in names)
    assert all(n.isprintable() and len(n) <= MAX_SHOWN_CHARS for n in names)
