"""The qdrouterd.conf format: entity blocks of `attribute: value` lines.

    # comment
    entity {
        attribute: value   # comment
    }

As in qdrouterd, `#` starts a comment anywhere, except in `pattern`, `bindingKey` and
`hostname`, whose value is the first word (AMQP addresses contain `#`); names are read
in camelCase (`link-capacity` is `linkCapacity`). A value starting with `{` is a JSON
object that may span lines (vhost `groups`). Errors start with `FILE:LINE: `.
"""

from __future__ import annotations

import bisect
import itertools
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from enmesh.router.config_model import RouterConfigError
from enmesh.router.config_values import Raw, camel_case

# The attribute that names an entity in messages, as the compiler sorts by it.
_IDENTIFYING = ("name", "id", "hostname", "prefix", "pattern", "address", "module")
# qdrouterd reads these values' first word without cutting at `#`.
_HASH_OK = ("pattern", "bindingKey", "hostname")


@dataclass(frozen=True)
class Attribute:
    value: Raw
    line: int


@dataclass
class Block:
    type: str
    line: int
    attributes: dict[str, Attribute] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """`listener 'amqps'`: how messages name the entity."""
        for key in _IDENTIFYING:
            found = self.attributes.get(key)
            if found is not None and isinstance(found.value, str):
                return f"{self.type} {found.value!r}"
        return self.type

    def line_of(self, attribute: str | None) -> int:
        found = self.attributes.get(attribute) if attribute else None
        return found.line if found else self.line


def error(where: str, line: int, message: str) -> RouterConfigError:
    return RouterConfigError(f"{where}:{line}: {message}")


def _excerpt(line: str) -> str:
    """A line for an error message; never an attribute's value, which may be a secret."""
    key, colon, _ = line.partition(":")
    return repr(f"{key}: ..." if colon else line)


_BEGIN = re.compile(r"([A-Za-z][\w-]*)\s*\{")
_ATTRIBUTE = re.compile(r"([A-Za-z][\w-]*)\s*:\s*(.*)")
_JSON = json.JSONDecoder()


def _uncommented(line: str) -> str:
    """The line without its comment, as qdrouterd reads it."""
    line = line.strip()
    attribute = _ATTRIBUTE.fullmatch(line)
    if attribute is not None and camel_case(attribute[1]) in _HASH_OK:
        return f"{attribute[1]}: {attribute[2].split()[0]}" if attribute[2] else line
    if attribute is not None and attribute[2].startswith("{"):
        return line  # JSON: read as it is
    return line.split("#")[0].strip()


def blocks(where: str, text: str, known: Sequence[str]) -> Iterator[Block]:
    """Entity blocks in file order, each as soon as it is closed; `known` entity names."""
    lines = text.split("\n")
    starts = list(itertools.accumulate((len(line) + 1 for line in lines), initial=0))
    block: Block | None = None
    index = 0
    while index < len(lines):
        number, line = index + 1, _uncommented(lines[index])
        index += 1
        if not line:
            continue
        begin = _BEGIN.fullmatch(line)
        if block is None:
            if begin is None:
                raise error(where, number, f"expected 'ENTITY {{', got {_excerpt(line)}")
            kind = camel_case(begin[1])
            if kind not in known:
                expected = ", ".join(known)
                raise error(where, number, f"unknown entity {kind!r}; expected one of: {expected}")
            block = Block(kind, number)
        elif line == "}":
            yield block
            block = None
        elif begin is not None:
            raise _unterminated(where, block, f"before line {number}")
        else:
            attribute = _ATTRIBUTE.fullmatch(line)
            if attribute is None:
                message = f"expected 'attribute: value' or '}}', got {_excerpt(line)}"
                raise error(where, number, f"{block.label}: {message}")
            key, value = camel_case(attribute[1]), attribute[2]
            if key in block.attributes:
                first = block.attributes[key].line
                message = f"duplicate attribute {key!r}; first set at line {first}"
                raise error(where, number, f"{block.label}: {message}")
            if not value:
                raise error(where, number, f"{block.label}: {key}: expected a value")
            raw: Raw = value
            if value.startswith("{"):
                what = f"{block.label}: {key}"
                start = starts[index - 1] + lines[index - 1].index("{")
                raw, index = _json_object(where, what, text, starts, start)
            block.attributes[key] = Attribute(raw, number)
    if block is not None:
        raise _unterminated(where, block, "before the end of the file")


def _json_object(
    where: str, what: str, text: str, starts: list[int], start: int
) -> tuple[dict[str, Any], int]:
    """The JSON object at offset `start`, and the index of the line after it."""
    try:
        value, end = _JSON.raw_decode(text, start)
    except json.JSONDecodeError as problem:
        message = f"{what}: invalid JSON: {problem.msg} (column {problem.colno})"
        raise error(where, problem.lineno, message) from None
    last = bisect.bisect_right(starts, end - 1) - 1
    if text[end : starts[last + 1]].strip():
        raise error(where, last + 1, f"{what}: unexpected text after the JSON object")
    return value, last + 1


def _unterminated(where: str, block: Block, end: str) -> RouterConfigError:
    message = f"unterminated entity block: {block.label} has no closing '}}' {end}"
    return error(where, block.line, message)
