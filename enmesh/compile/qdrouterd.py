"""Writer for the qdrouterd.conf format (Qpid Dispatch Router / skupper-router).

    ENTITY {
        attribute: value
    }

Entities are written in a fixed order and attributes sorted (name first), so the same
input always gives the same bytes. Map values (vhost groups) are written as JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

AttributeValue = str | int | bool | list[str] | dict[str, object]

# Order in which entity types appear in a file: what the router needs first, first.
ENTITY_ORDER = (
    "router",
    "sslProfile",
    "authServicePlugin",  # before the listeners that name it
    "listener",
    "connector",
    "policy",
    "vhost",
    "address",
    "linkRoute",
    "autoLink",
)

IDENTIFYING = ("name", "id", "hostname", "prefix", "pattern", "address")


@dataclass(frozen=True)
class Entity:
    type: str
    attributes: dict[str, AttributeValue] = field(default_factory=dict)

    def sort_key(self) -> tuple[int, str, tuple[tuple[str, str], ...]]:
        """Type order, then the identifying attribute, then all attributes as text."""
        ident = next((str(self.attributes[k]) for k in IDENTIFYING if k in self.attributes), "")
        rest = tuple(sorted((key, str(value)) for key, value in self.attributes.items()))
        return ENTITY_ORDER.index(self.type), ident, rest


def _value(value: AttributeValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return " ".join(value)
    if isinstance(value, dict):
        return json.dumps(value, indent=4, sort_keys=True).replace("\n", "\n    ")
    return value


def render_header(header: str) -> str:
    return "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())


def render_entities(entities: list[Entity]) -> str:
    """Entities in canonical order. Blocks of later entity types may be appended."""
    lines = []
    for entity in sorted(entities, key=Entity.sort_key):
        names = sorted(entity.attributes, key=lambda k: (k not in ("name", "id"), k))
        lines.append("")
        lines.append(f"{entity.type} {{")
        lines.extend(f"    {key}: {_value(entity.attributes[key])}" for key in names)
        lines.append("}")
    return "".join(line + "\n" for line in lines)
