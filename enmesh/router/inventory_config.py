"""Management rows for the router's configuration entities (listener, connector, address,
...), read off the loaded config through the config table: each row has every attribute
the table lists for that entity, so management reports what config loading accepts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from enmesh.router.config_schema import SCHEMA, Disposition
from enmesh.router.policy import snake_case

if TYPE_CHECKING:
    from enmesh.router.router import Router

PREFIX = "org.apache.qpid.dispatch."
SECRETS = frozenset({"password", "saslPassword"})  # never reported
FIELDS: dict[str, str] = {}  # attribute -> model field, where not snake_case


def value(raw: Any) -> Any:
    """A model value as AMQP management carries it (strings, numbers, booleans)."""
    if isinstance(raw, Enum):
        return str(raw.value)
    if isinstance(raw, Path):
        return str(raw)
    if isinstance(raw, tuple):
        return " ".join(str(v) for v in raw)
    if isinstance(raw, Mapping):
        return None  # vhost groups: qdrouterd's own map form is not kept after loading
    return raw


def settings(entity: Any, kind: str) -> dict[str, Any]:
    """Every attribute the config table lists for `kind`, as `entity` has it set."""
    row: dict[str, Any] = {}
    for attribute in SCHEMA[kind].attributes:
        name = attribute.name
        field = FIELDS.get(name, snake_case(name))
        if name in SECRETS:
            row[name] = None
        elif hasattr(entity, field):
            row[name] = value(getattr(entity, field))
        elif attribute.disposition is Disposition.DEFAULT_ONLY:
            row[name] = attribute.default_value()  # the only value the router runs with
        else:
            row[name] = None  # ignored or refused: not kept
    return row


def _rows(kind: str, found: Iterable[Any]) -> list[dict[str, Any]]:
    long_name = SCHEMA[kind].long_name
    rows = []
    for number, entity in enumerate(found, start=1):
        row = settings(entity, kind)
        identity = f"{kind}/{number}"
        name = getattr(entity, "name", None) or getattr(entity, "module", None)
        rows.append(row | {"identity": identity, "name": name or identity, "type": long_name})
    return rows


def entities(router: Router, long_name: str) -> list[dict[str, Any]]:
    """Rows of one configuration entity type (none for types the router has not got)."""
    config = router.config
    by_kind: dict[str, Iterable[Any]] = {
        "sslProfile": config.ssl_profiles,
        "listener": config.listeners,
        "log": config.logs,
        "policy": [config.policy] if config.policy is not None else [],
        "vhost": config.vhosts,
        "address": config.addresses,
        "linkRoute": config.link_routes,
        "autoLink": config.auto_links,
    }
    if long_name == SCHEMA["connector"].long_name:
        return [
            row | _connector_status(router, row["name"])
            for row in _rows("connector", config.connectors)
        ]
    for kind, found in by_kind.items():
        if SCHEMA[kind].long_name == long_name:
            return _rows(kind, found)
    return []


def _connector_status(router: Router, name: str) -> dict[str, Any]:
    """qdrouterd's connectionStatus: SUCCESS once the connection is open, else CONNECTING."""
    state = router.connectors.get(name)
    conn = state.socket if state is not None else None
    opened = conn is not None and conn.context["info"].opened_at is not None and not conn.closed
    return {"connectionStatus": "SUCCESS" if opened else "CONNECTING", "connectionMsg": None}
