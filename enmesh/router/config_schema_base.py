"""The vocabulary of the router config table (`config_schema`): entity types, attributes
and what enmesh-router does with each (its disposition)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from typing import Any

from enmesh.router import config_checks as checks
from enmesh.router import config_values as v


class Disposition(StrEnum):
    IMPLEMENTED = "implemented"
    DEFAULT_ONLY = "default only"  # qdrouterd's default is implemented; other values refused
    IGNORED = "ignored"  # accepted with one warning line
    REFUSED = "refused"  # recognised but not supported


@dataclass(frozen=True)
class Attribute:
    name: str
    type: str  # qdrouterd's: string, integer, boolean, path, map, properties, enum (a|b)
    disposition: Disposition
    note: str  # what it does here; for ignored and refused, why
    default: str | None = None  # qdrouterd's, as a config file would write it
    convert: v.Convert = v.text
    aliases: tuple[str, ...] = ()  # qdrouterd's deprecated names, read as this one

    def default_value(self) -> Any:
        return None if self.default is None else self.convert(self.default)


@dataclass(frozen=True)
class EntityType:
    name: str  # as written in a config file
    long_name: str  # management's type name
    attributes: tuple[Attribute, ...]
    build: Callable[..., Any] | None  # None: the entity is refused
    note: str
    required: tuple[str, ...] = ()
    check: checks.Check | None = None
    singleton: bool = False
    in_config_file: bool = True  # False: only inside a vhost's `groups`

    def attribute(self, name: str) -> Attribute | None:
        """The attribute `name` or one of its deprecated aliases names."""
        return self._by_any_name.get(name)

    @cached_property
    def attributes_by_name(self) -> Mapping[str, Attribute]:
        return {a.name: a for a in self.attributes}

    @cached_property
    def _by_any_name(self) -> Mapping[str, Attribute]:
        return {n: a for a in self.attributes for n in (a.name, *a.aliases)}


IMPL, ONLY_DEFAULT, IGNORE, REFUSE = (
    Disposition.IMPLEMENTED,
    Disposition.DEFAULT_ONLY,
    Disposition.IGNORED,
    Disposition.REFUSED,
)
INT = v.integer(0)
NAME = Attribute("name", "string", IMPL, "names the entity in messages and management")
LOGS_ONLY = "changes only what is logged"


def attr(name: str, kind: str, disposition: Disposition, note: str, **more: Any) -> Attribute:
    convert = more.pop("convert", None) or {
        "integer": INT,
        "boolean": v.boolean,
        "path": v.path,
    }.get(kind, v.text)
    return Attribute(name, kind, disposition, note, convert=convert, **more)


def ignored_name(entity: str) -> Attribute:
    return attr("name", "string", IGNORE, f"management's name for the {entity}; not reported")
