"""The one rule every output shows a host name by (export.text)."""

import json

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
