"""Multi-document YAML loading that can say where every value came from.

Values come straight from libyaml (fast). Field positions are needed only to report
a problem, so the position index (PyYAML's composer with marks) is built lazily, the
first time any document of the file is asked for a line. A valid 10,000-address
model therefore never pays for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from enmesh.gcpause import paused_gc
from enmesh.model.problems import Problem

FieldPath = tuple[str | int, ...]
_STR_TAG = "tag:yaml.org,2002:str"
_NULL_TAG = "tag:yaml.org,2002:null"

# libyaml's parser is much faster than PyYAML's pure-Python one and gives the same
# values and marks; fall back where PyYAML was built without libyaml.
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# YAML 1.1 words that a plain scalar starting with a letter could resolve to (bool, null):
# PyYAML's exact spellings. Anything else starting with a letter is a string.
_NON_STRING_WORDS = frozenset(
    w
    for word in ("yes", "no", "true", "false", "on", "off", "null")
    for w in (word, word.capitalize(), word.upper())
)


class _CLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    """Skips PyYAML's regex-based tag resolution for plain scalars that can only be strings
    (most of a model: names, addresses, kinds); every other scalar resolves as usual."""

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: Any) -> str:
        if (
            kind is yaml.ScalarNode
            and implicit[0]
            and value[:1].isalpha()
            and value not in _NON_STRING_WORDS
        ):
            return _STR_TAG
        return super().resolve(kind, value, implicit)  # type: ignore[no-any-return]


def format_path(path: FieldPath) -> str:
    """`("spec", "authorization", 0, "operations")` -> `spec.authorization[0].operations`."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


class _Values:
    """Plain values from composed nodes; notes whether any mapping repeats a key.

    A direct walk is several times faster than PyYAML's generic constructor, which
    is only used for the few non-string scalars (ints, bools, nulls).
    """

    def __init__(self) -> None:
        self.repeated_key = False
        self._scalars = yaml.SafeLoader("")

    def of(self, node: yaml.Node) -> Any:
        if isinstance(node, yaml.MappingNode):
            mapping = {self._key(k): self.of(v) for k, v in node.value}
            if len(mapping) != len(node.value):
                self.repeated_key = True
            return mapping
        if isinstance(node, yaml.SequenceNode):
            return [self.of(item) for item in node.value]
        if node.tag == _STR_TAG:
            return node.value
        return self._scalars.construct_object(node, deep=True)

    def _key(self, node: yaml.Node) -> Any:
        key = self.of(node)
        return key if isinstance(key, str) else str(key)


def _is_empty(node: yaml.Node | None) -> bool:
    return node is None or (isinstance(node, yaml.ScalarNode) and node.tag == _NULL_TAG)


class _PositionIndex:
    """Line of every field of every document of one file, built on first use."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._lines: list[dict[FieldPath, int]] | None = None
        self.repeated_keys: list[tuple[int, FieldPath]] = []  # (document index, path)

    def lines(self, document: int) -> dict[FieldPath, int]:
        if self._lines is None:
            self._lines = self._build()
        return self._lines[document - 1] if document <= len(self._lines) else {}

    def _build(self) -> list[dict[FieldPath, int]]:
        nodes = [n for n in yaml.compose_all(self._text, Loader=_CLoader) if not _is_empty(n)]
        result = []
        for number, node in enumerate(nodes, start=1):
            lines: dict[FieldPath, int] = {}
            self._walk(node, (), lines, number)
            result.append(lines)
        return result

    def _walk(
        self, node: yaml.Node, path: FieldPath, lines: dict[FieldPath, int], doc: int
    ) -> None:
        # A mapping value is located at its key (set below): `spec:`, not its first field.
        lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key_node, value_node in node.value:
                key = str(key_node.value)
                child = (*path, key)
                if key in seen:
                    self.repeated_keys.append((doc, child))
                    lines[child] = key_node.start_mark.line + 1
                seen.add(key)
                lines.setdefault(child, key_node.start_mark.line + 1)
                self._walk(value_node, child, lines, doc)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._walk(item, (*path, i), lines, doc)


@dataclass
class SourceDocument:
    """One YAML document: its value, and (on demand) the line of every field in it."""

    file: str
    index: int  # 1-based among the file's non-empty documents
    value: Any
    _positions: _PositionIndex = field(repr=False, compare=False)

    @property
    def line(self) -> int:
        return self._positions.lines(self.index).get((), 1)

    @property
    def name(self) -> str:
        kind = self.value.get("kind") if isinstance(self.value, dict) else None
        meta = self.value.get("metadata") if isinstance(self.value, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        if isinstance(kind, str) and isinstance(name, str):
            return f"{kind}/{name}"
        return kind if isinstance(kind, str) else ""

    def line_of(self, path: FieldPath) -> int:
        """Line of the deepest known prefix of `path` (a missing field points at its parent)."""
        lines = self._positions.lines(self.index)
        for end in range(len(path), -1, -1):
            if path[:end] in lines:
                return lines[path[:end]]
        return self.line

    def problem(self, path: FieldPath, message: str) -> Problem:
        return Problem(
            self.file, self.line_of(path), self.index, self.name, format_path(path), message
        )


def _read(path: Path, shown: str) -> tuple[str | None, list[Problem]]:
    try:
        return path.read_text(encoding="utf-8"), []
    except OSError as exc:
        return None, [Problem(shown, 0, 0, "", "", f"cannot read file: {exc.strerror}")]
    except UnicodeDecodeError:
        return None, [Problem(shown, 0, 0, "", "", "cannot read file: not UTF-8 text")]


def load_documents(
    path: Path, display_name: str | None = None
) -> tuple[list[SourceDocument], list[Problem]]:
    """Read every document of a YAML file. Syntax errors become problems, never exceptions."""
    shown = display_name or str(path)
    text, problems = _read(path, shown)
    if text is None:
        return [], problems
    positions = _PositionIndex(text)
    builder = _Values()
    values: list[Any] = []
    try:
        with paused_gc():
            for node in yaml.compose_all(text, Loader=_CLoader):
                if not _is_empty(node):
                    values.append(builder.of(node))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 0
        reason = getattr(exc, "problem", None) or str(exc)
        return [], [Problem(shown, line, len(values) + 1, "", "", f"YAML syntax error: {reason}")]
    documents = [
        SourceDocument(shown, number, value, positions)
        for number, value in enumerate(values, start=1)
    ]
    if builder.repeated_key:
        positions.lines(1)  # builds the index, which finds where
        problems += [
            documents[doc - 1].problem(path, "duplicate key; each key may appear once")
            for doc, path in positions.repeated_keys
        ]
    return documents, problems
