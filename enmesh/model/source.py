"""Multi-document YAML loading that remembers where every value came from.

PyYAML's composer gives nodes with marks; we build plain Python values from them and
keep a map from field path to line, so every problem can name the line to edit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from enmesh.model.problems import Problem

FieldPath = tuple[str | int, ...]


def format_path(path: FieldPath) -> str:
    """`("spec", "authorization", 0, "operations")` -> `spec.authorization[0].operations`."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


@dataclass
class SourceDocument:
    """One YAML document: its value and the line of every field in it."""

    file: str
    index: int  # 1-based
    line: int
    value: Any
    lines: dict[FieldPath, int] = field(default_factory=dict)

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
        for end in range(len(path), -1, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return self.line

    def problem(self, path: FieldPath, message: str) -> Problem:
        return Problem(
            self.file, self.line_of(path), self.index, self.name, format_path(path), message
        )


class _Builder:
    """Turns composed nodes into Python values, recording lines and duplicate keys."""

    def __init__(self, doc: SourceDocument) -> None:
        self.doc = doc
        self.problems: list[Problem] = []
        self._scalars = yaml.SafeLoader("")

    def build(self, node: yaml.Node, path: FieldPath) -> Any:
        # A mapping value is located at its key (set by the caller): `spec:` not `type:`.
        self.doc.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            result: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = self._scalars.construct_object(key_node, deep=True)
                if not isinstance(key, str):
                    key = str(key)
                if key in result:
                    self.doc.lines[(*path, key)] = key_node.start_mark.line + 1
                    self.problems.append(
                        self.doc.problem((*path, key), "duplicate key; each key may appear once")
                    )
                self.doc.lines.setdefault((*path, key), key_node.start_mark.line + 1)
                result[key] = self.build(value_node, (*path, key))
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        return self._scalars.construct_object(node, deep=True)


def load_documents(
    path: Path, display_name: str | None = None
) -> tuple[list[SourceDocument], list[Problem]]:
    """Read every document of a YAML file. Syntax errors become problems, never exceptions."""
    shown = display_name or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        return [], [Problem(shown, 0, 0, "", "", f"cannot read file: {exc.strerror}")]
    except UnicodeDecodeError:
        return [], [Problem(shown, 0, 0, "", "", "cannot read file: not UTF-8 text")]

    documents: list[SourceDocument] = []
    problems: list[Problem] = []
    try:
        for node in yaml.compose_all(text, Loader=yaml.SafeLoader):
            if node is None:  # an empty document between two `---`
                continue
            doc = SourceDocument(shown, len(documents) + 1, node.start_mark.line + 1, None)
            builder = _Builder(doc)
            doc.value = builder.build(node, ())
            problems.extend(builder.problems)
            documents.append(doc)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 0
        reason = getattr(exc, "problem", None) or str(exc)
        problems.append(
            Problem(shown, line, len(documents) + 1, "", "", f"YAML syntax error: {reason}")
        )
    return documents, problems
