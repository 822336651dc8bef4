"""Scenario files read safely: bounded YAML (size, depth, aliases, tags, duplicate keys), one mapping per document.

Every problem becomes an InputError naming the file and where in it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from harness.errors import InputError

#: Largest scenario file read, in bytes.
MAX_FILE_BYTES = 1_000_000
#: Deepest nesting of YAML collections accepted.
MAX_DEPTH = 20
#: Most YAML alias uses accepted (guards against alias bombs).
MAX_ALIASES = 100
#: Most YAML values (nodes) a file may hold, every alias counted as the values it stands for: a
#: scenario has a few hundred; an alias bomb of 81 aliases under the alias limit expands to 9^9.
#: Counted while the file is parsed, so a refusal comes within a second.
MAX_NODES = 10_000
#: Most characters the scalars of a file may hold, every alias counted as what it stands for.
MAX_EXPANDED_CHARS = 1_000_000
#: Most scenarios (YAML documents) in one file.
MAX_DOCUMENTS = 100

class _Refused(yaml.YAMLError):
    """A YAML file refused for its size or shape (not a syntax error), with where it was refused."""

    def __init__(self, message: str, mark=None):
        super().__init__(message)
        self.message = message
        self.mark = mark


def _expanded(node, memo: dict) -> tuple[int, int, int]:
    """(values, characters, depth of collections) of a composed node with every alias expanded.

    Memoized per node, so a node that many aliases share is measured once: linear in the file,
    however large its expansion."""
    key = id(node)
    if key in memo:
        return memo[key]
    if isinstance(node, yaml.ScalarNode):
        out = (1, len(node.value or ""), 0)
    else:
        children = node.value if isinstance(node, yaml.SequenceNode) else [part for pair in node.value for part in pair]
        sizes = [_expanded(child, memo) for child in children]
        out = (1 + sum(s[0] for s in sizes), sum(s[1] for s in sizes), 1 + max((s[2] for s in sizes), default=0))
    memo[key] = out
    return out


def _refuse_tag(loader, node):
    raise yaml.constructor.ConstructorError(
        None, None, f"tag {node.tag} is not accepted in a scenario file (plain values, lists and mappings only)",
        node.start_mark)


class _LimitedLoader(yaml.SafeLoader):
    """SafeLoader (no code execution) that refuses deep nesting, alias bombs, recursive aliases,
    duplicate keys, binary/set/ordered-map tags, and files that expand (aliases counted as what
    they stand for) beyond MAX_NODES values or MAX_EXPANDED_CHARS characters: counted while
    composing, before anything is constructed or validated."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0
        self._nodes = 0
        self._chars = 0
        self._documents = 0
        self._open_anchors: list[str] = []
        self._sizes: dict = {}

    def _count(self, nodes: int, chars: int, mark) -> None:
        self._nodes += nodes
        self._chars += chars
        if self._nodes > MAX_NODES:
            raise _Refused(f"the file expands to more than {MAX_NODES} values (aliases counted as the values they "
                           "stand for); a scenario has a few hundred", mark)
        if self._chars > MAX_EXPANDED_CHARS:
            raise _Refused(f"the file expands to more than {MAX_EXPANDED_CHARS} characters of values (aliases counted "
                           "as what they stand for)", mark)

    def compose_document(self):
        self._documents += 1
        if self._documents > MAX_DOCUMENTS:
            raise _Refused(f"more than {MAX_DOCUMENTS} documents (scenarios separated by ---) in one file",
                           self.peek_event().start_mark)
        return super().compose_document()

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _Refused(f"more than {MAX_ALIASES} aliases", event.start_mark)
            if event.anchor in self._open_anchors:
                raise _Refused(f"alias *{event.anchor} refers to a value that contains it (a recursive structure)",
                               event.start_mark)
            node = super().compose_node(parent, index)
            nodes, chars, depth = _expanded(node, self._sizes)
            if self._depth + max(depth, 1) > MAX_DEPTH:
                raise _Refused(f"nesting deeper than {MAX_DEPTH} levels once aliases are expanded", event.start_mark)
            self._count(nodes, chars, event.start_mark)
            return node
        event = self.peek_event()
        anchor = getattr(event, "anchor", None)
        self._depth += 1
        if anchor:
            self._open_anchors.append(anchor)
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nesting deeper than {MAX_DEPTH} levels", event.start_mark)
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if anchor:
                self._open_anchors.pop()
        self._count(1, len(node.value or "") if isinstance(node, yaml.ScalarNode) else 0, event.start_mark)
        return node

    def compose_mapping_node(self, anchor):
        node = super().compose_mapping_node(anchor)
        seen: dict = {}
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                ident = (key.tag, key.value)
                if ident in seen:
                    raise _Refused(f"duplicate key {key.value!r} (first at line {seen[ident].line + 1}); each key may "
                                   "appear once in a mapping", key.start_mark)
                seen[ident] = key.start_mark
        return node


for _tag in ("binary", "set", "omap", "pairs"):
    _LimitedLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse_tag)

#: Numbers YAML 1.2 and YAML 1.1 read alike, by tag: decimal or `0x` integers; floats without `:` or `_`.
_SAME_IN_1_2 = {
    "tag:yaml.org,2002:int": re.compile(r"[-+]?(0|[1-9][0-9]*)|0x[0-9a-fA-F]+"),
    "tag:yaml.org,2002:float": re.compile(r"[-+]?(\.[0-9]+|[0-9]+\.[0-9]*)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)"
                                          r"|\.(nan|NaN|NAN)"),
}


def _number_as_in_1_2(loader, node):
    """A number PyYAML (YAML 1.1) reads as YAML 1.2 would, else refused: `0100` is octal 64 and `1:04` is 64
    (base 60) to YAML 1.1 but 100 and text to 1.2 and to anyone reading the file; `0b1`, `1_000` alike."""
    construct = _NUMBERS[node.tag]
    if not _SAME_IN_1_2[node.tag].fullmatch(node.value):
        raise _Refused(f"{node.value!r} is a YAML 1.1 number ({construct(loader, node)}) that YAML 1.2 reads "
                       "otherwise (a leading 0 is octal, `:` base 60, `0b` binary, `_` ignored): write it in decimal, "
                       "or quote it for text", node.start_mark)
    return construct(loader, node)


_NUMBERS = {"tag:yaml.org,2002:int": yaml.SafeLoader.construct_yaml_int,
            "tag:yaml.org,2002:float": yaml.SafeLoader.construct_yaml_float}


for _tag in _NUMBERS:
    _LimitedLoader.add_constructor(_tag, _number_as_in_1_2)


def parse_yaml(text: str, source: str, *, documents: bool = False) -> Any:
    """Parse YAML text safely (a list of every document if `documents`); InputError with the line
    and column of a syntax error or of what was refused."""
    try:
        if documents:
            return list(yaml.load_all(text, Loader=_LimitedLoader))  # noqa: S506 - a SafeLoader subclass
        return yaml.load(text, Loader=_LimitedLoader)  # noqa: S506 - a SafeLoader subclass
    except _Refused as exc:
        mark = exc.mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InputError(f"{source}: refused{where}: {exc.message}", source=source) from None
    except yaml.reader.ReaderError as exc:  # a control character, a NUL: one line, with where it is
        before = text[: exc.position] if isinstance(exc.position, int) else ""
        where = f" at line {before.count(chr(10)) + 1}, column {len(before) - (before.rfind(chr(10)) + 1) + 1}"
        code = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "?")
        raise InputError(f"{source}: not valid YAML{where}: character U+{code:04X} is not allowed in YAML text",
                         source=source) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InputError(f"{source}: not valid YAML{where}: {exc.problem or exc}", source=source) from None
    except (yaml.YAMLError, RecursionError, ValueError, TypeError, OverflowError, MemoryError) as exc:
        raise InputError(f"{source}: refused: {exc}", source=source) from None


def read_scenario_documents(path: str | os.PathLike) -> list[dict]:
    """Read and safely parse a scenario file into its mappings, one per YAML document (`---`).

    A file may hold several scenarios (several workloads measured in one session); each document
    must be a mapping. InputError for any problem.
    """
    source = str(path)
    p = Path(path)
    if not p.exists():
        raise InputError(f"{source}: no such file (expected a scenario YAML file)", source=source)
    if not p.is_file():
        raise InputError(f"{source}: not a file (expected a scenario YAML file)", source=source)
    size = p.stat().st_size
    if size > MAX_FILE_BYTES:
        raise InputError(f"{source}: {size} bytes is too large for a scenario file (limit {MAX_FILE_BYTES})", source=source)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{source}: cannot read: {exc}", source=source) from None
    documents = [d for d in parse_yaml(text, source, documents=True) if d is not None]
    if not documents:
        raise InputError(f"{source}: the file is empty; expected a mapping with at least `name` and `workload`", source=source)
    for i, data in enumerate(documents, 1):
        if not isinstance(data, dict):
            where = f" (document {i})" if len(documents) > 1 else ""
            raise InputError(
                f"{source}{where}: the file is a {type(data).__name__}; expected a mapping with at least `name` and `workload`",
                source=source,
            )
    return documents


def read_scenario_file(path: str | os.PathLike) -> dict:
    """The first scenario mapping of a file (see read_scenario_documents)."""
    return read_scenario_documents(path)[0]
