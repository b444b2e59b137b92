"""Untrusted YAML and JSON documents (CDI specs, the config file, simulator scenarios).

A few hundred bytes of YAML aliases name a tree of billions of nodes. Loading shares the
aliased nodes, so it is quick, but anything that walks or prints the result expands it: a
750-byte CDI spec whose rejected ``kind`` was formatted into an error message took 2.4 GB and
23 s a tick. So a document is read only from a regular file, without blocking and up to a
byte limit (``read_document``); it is loaded only when its aliases add at most
``MAX_ALIAS_EXPANSION`` nodes and scalar characters to it and it nests at most ``MAX_DEPTH``
deep (``load_yaml``, ``load_json``); and a value is shown in a message only through
``brief``, which never walks it. Every refusal is a ``DocumentError`` (a ``ValueError``)
with a one-line message.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, TypeVar

import yaml

from gpustats.hostfs import DEADLINE, NOT_REGULAR, TOO_LARGE, UnsafeFile, read_regular

MAX_ALIAS_EXPANSION = 65536     # nodes + scalar characters that aliases may add to a document
MAX_DEPTH = 64                  # nesting of lists and mappings; our formats need under 10
READ_DEADLINE_SECONDS = 1.0
_MESSAGE_CHARS = 200
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DocumentError(ValueError):
    """A document refused: unreadable as data, too large, not valid, or expanding too far."""


# ------------------------------------------------------------------ messages

def brief(value: Any, limit: int = 60) -> str:
    """A value as a message may show it: a scalar's repr cut to ``limit`` characters, a
    collection's kind and length (it is never walked, so an alias tree is never expanded)."""
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    if isinstance(value, dict):
        return f"a mapping of {len(value)} keys"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"      # repr could refuse or crawl
    if isinstance(value, str):
        text = repr(value[:limit]) + ("..." if len(value) > limit else "")
    elif value is None or isinstance(value, (bool, int, float)):
        text = repr(value)
    else:
        return f"a {type(value).__name__}"
    return text if len(text) <= limit + 8 else text[:limit] + "..."


def one_line(text: str, limit: int = _MESSAGE_CHARS) -> str:
    """``text`` with its whitespace runs (newlines included) as single spaces, cut to ``limit``."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's several-line error (context, problem, a snippet with a caret) as one line."""
    if isinstance(exc, yaml.MarkedYAMLError):
        what = ", ".join(p for p in (exc.context, exc.problem) if p) or "invalid"
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return one_line(what) + where
    return one_line(str(exc))


# ------------------------------------------------------------------ reading

def read_document(path: str, max_bytes: int) -> str:
    """A regular file's UTF-8 text, read without blocking and at most ``max_bytes``.

    ``DocumentError`` for a FIFO, socket or device (refused at once, before any read), a file
    larger than ``max_bytes``, a read slower than ``READ_DEADLINE_SECONDS`` or bytes that are
    not UTF-8; a missing or unreadable file raises its ``OSError``.
    """
    try:
        data = read_regular(path, max_bytes=max_bytes, deadline_seconds=READ_DEADLINE_SECONDS)
    except UnsafeFile as exc:
        why = {NOT_REGULAR: "not a regular file", TOO_LARGE: f"larger than {max_bytes} bytes",
               DEADLINE: f"still reading after {READ_DEADLINE_SECONDS} s"}
        raise DocumentError(why.get(exc.reason, exc.reason)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"not UTF-8 text (byte {exc.start})") from None


T = TypeVar("T")


def read_parsed(path: str, max_bytes: int, parse: Callable[[str], T], name: str) -> T:
    """``parse`` of the document at ``path`` (``read_document``); every failure, of the read
    or of ``parse``, a ``ValueError("<name>: <what is wrong>")``."""
    try:
        content = read_document(path, max_bytes)
    except OSError as exc:
        raise ValueError(f"{name}: cannot read: {exc.strerror or exc}") from None
    except DocumentError as exc:
        raise ValueError(f"{name}: {exc}") from None
    try:
        return parse(content)
    except ValueError as exc:                   # DocumentError (a ValueError) included
        raise ValueError(f"{name}: {exc}") from None


# ------------------------------------------------------------------ loading

def _measure(root: Any, children: Callable[[Any], Iterable[Any]],
             own: Callable[[Any], int]) -> tuple[int, int]:
    """(weight with every shared node counted once, weight as fully expanded) of a graph.

    A node's weight is ``own(node)`` plus its children's. Iterative, so a deep document costs
    no Python stack; ``DocumentError`` when it nests deeper than ``MAX_DEPTH`` or contains
    itself (a recursive alias, which no format of ours needs and no walk would finish).
    """
    expanded: dict[int, tuple[int, int]] = {}       # id -> (expanded weight, height)
    on_path: set[int] = set()
    unique = 0
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            weight, height = own(node), 0
            for child in children(node):
                child_weight, child_height = expanded[id(child)]
                weight += child_weight
                height = max(height, child_height + 1)
            if height > MAX_DEPTH:
                raise DocumentError(f"nested deeper than {MAX_DEPTH} levels")
            expanded[key] = (min(weight, 1 << 62), height)
            on_path.discard(key)
            continue
        if key in expanded:
            continue
        if key in on_path:
            raise DocumentError("an alias refers to a node that contains it")
        on_path.add(key)
        unique += own(node)
        stack.append((node, True))
        stack.extend((child, False) for child in children(node))
    return unique, expanded[id(root)][0]


def _node_children(node: yaml.Node) -> Iterable[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        children: list[yaml.Node] = node.value
        return children
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return ()


def _node_weight(node: yaml.Node) -> int:
    return 1 + len(node.value) if isinstance(node, yaml.ScalarNode) else 1


class _BoundedLoader(_Loader):        # type: ignore[misc, valid-type]
    """PyYAML's safe loader, measuring the composed node graph before any value is built
    (building is where ``<<`` merge keys would copy an aliased mapping into each user)."""

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            unique, expanded = _measure(node, _node_children, _node_weight)
            if expanded - unique > MAX_ALIAS_EXPANSION:
                raise DocumentError(f"its aliases would expand it by more than "
                                    f"{MAX_ALIAS_EXPANSION} nodes and characters")
        return node


def load_yaml(text: str) -> Any:
    """YAML text -> plain data (safe tags only); ``DocumentError`` when it is not valid YAML,
    is more than one document, or expands or nests beyond the bounds above."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise DocumentError(f"not valid YAML: {_yaml_problem(exc)}") from None
    except (ValueError, OverflowError) as exc:
        # An int too long to convert, a bad timestamp: raised while a value is built.
        if isinstance(exc, DocumentError):
            raise
        raise DocumentError(f"not valid YAML: {one_line(str(exc))}") from None
    except RecursionError:
        raise DocumentError(f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


def _data_children(value: Any) -> Iterable[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        return [part for pair in value.items() for part in pair]
    return ()


def load_json(text: str) -> Any:
    """JSON text -> data; ``DocumentError`` when it is not valid JSON or nests too deep."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise DocumentError(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise DocumentError(f"not valid JSON: {one_line(str(exc))}") from None
    # JSON has no aliases, and equal scalars may share one object: only the depth is checked.
    _measure_depth(data)
    return data


def _measure_depth(data: Any) -> None:
    stack = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        children = _data_children(value)
        if children and depth >= MAX_DEPTH:
            raise DocumentError(f"nested deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)
