"""Untrusted YAML and JSON documents: alias bombs, deep nesting, FIFOs and huge files are
refused at once, legitimate anchors still load, and messages never expand a value."""

import os
import threading

import pytest
import yaml

from gpustats.documents import (MAX_ALIAS_EXPANSION, MAX_DEPTH, DocumentError, brief,
                                load_json, load_yaml, read_document)
from tests.support.documents import alias_bomb


def test_alias_bomb_is_refused_before_anything_is_built():
    text = f"kind: {alias_bomb()}\n"
    assert len(text) < 800
    with pytest.raises(DocumentError, match="aliases would expand it"):
        load_yaml(text)


def test_merge_key_bomb_is_refused():
    # Each level merges the one before twice: building would copy 2**29 keys.
    lines = ["m0: &m0 {a: 1}"] + [f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}], k{i}: 1}}"
                                  for i in range(1, 30)]
    with pytest.raises(DocumentError, match="aliases would expand it"):
        load_yaml("\n".join(lines))


def test_long_scalar_repeated_by_aliases_is_refused():
    text = f"s: &s {'y' * 1000}\nl: [" + ", ".join(["*s"] * 100) + "]\n"
    with pytest.raises(DocumentError, match="aliases"):
        load_yaml(text)


def test_recursive_alias_is_refused():
    with pytest.raises(DocumentError, match="contains it"):
        load_yaml("a: &a [1, *a]\n")


def test_anchors_as_a_dumper_writes_them_still_load():
    shared = {"sm_active_percent": 50, "dram_active_percent": 20}
    doc = {"devices": [{"uuid": f"GPU-{i}", "gpm": shared} for i in range(8)]}
    text = yaml.safe_dump(doc)
    assert "&id" in text and "*id" in text
    assert load_yaml(text) == doc


def test_expansion_just_under_the_bound_loads():
    per_alias = 1 + 100                           # one scalar node of 100 characters
    count = MAX_ALIAS_EXPANSION // per_alias
    text = f"s: &s {'z' * 100}\nl: [" + ", ".join(["*s"] * count) + "]\n"
    assert len(load_yaml(text)["l"]) == count


@pytest.mark.parametrize("text, load", [
    ("[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2), load_yaml),
    ("[" * 100_000 + "]" * 100_000, load_yaml),
    ("[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2), load_json),
    ("[" * 100_000 + "]" * 100_000, load_json),
    ('{"a":' * 50_000 + "1" + "}" * 50_000, load_json),
])
def test_deep_nesting_is_refused(text, load):
    with pytest.raises(DocumentError, match="nest"):
        load(text)


def test_nesting_within_the_bound_loads():
    depth = MAX_DEPTH - 1
    assert load_json("[" * depth + "]" * depth) is not None
    assert load_yaml("[" * depth + "]" * depth) is not None


@pytest.mark.parametrize("text, fragment", [
    ("a: [1\n b", "not valid YAML: .* at line"),
    ("a: !!python/object:os.system x\n", "not valid YAML: could not determine a constructor"),
    ("a: 1\n---\nb: 2\n", "single document"),
    ("a: 2001-13-45\n", "not valid YAML"),
])
def test_invalid_yaml_is_one_line(text, fragment):
    with pytest.raises(DocumentError, match=fragment) as info:
        load_yaml(text)
    assert "\n" not in str(info.value) and len(str(info.value)) < 300


def test_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(_refusal(str(fifo))), daemon=True)
    reader.start()
    reader.join(5)
    assert outcome == ["not a regular file"]


def _refusal(path: str) -> str | None:
    try:
        read_document(path, 1024)
    except DocumentError as exc:
        return str(exc)
    return None


def test_size_and_encoding_are_bounded(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("#" * 1025)
    with pytest.raises(DocumentError, match="larger than 1024 bytes"):
        read_document(str(big), 1024)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(DocumentError, match="not UTF-8"):
        read_document(str(latin), 1024)
    with pytest.raises(FileNotFoundError):
        read_document(str(tmp_path / "missing.yaml"), 1024)


def test_brief_never_walks_a_value():
    nested: list = ["x"] * 9
    for _ in range(12):
        nested = [nested] * 9                      # 9**13 strings if it were expanded
    assert brief(nested) == "a list of 9 items"
    assert brief({"a": nested}) == "a mapping of 1 keys"
    assert brief("y" * 10_000) == repr("y" * 60) + "..."
    assert brief(1 << 5000) == "an integer of 5001 bits"
    assert brief(None) == "None" and brief(1.5) == "1.5" and brief(b"ab") == "a bytes"
    assert brief("a\nb") == "'a\\nb'"
