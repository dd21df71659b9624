"""Management writes on `$management`: CREATE, UPDATE and DELETE as qdrouterd 1.19 answers
them, applied through the live-reconfiguration core (`reconfigure`).

- CREATE and DELETE of `router.config.address`, `router.config.autoLink`,
  `router.config.linkRoute`, `listener`, `connector` and `vhost` (201 Created with the new
  entity; 204 No Content); UPDATE of a `vhost` (200 with it); UPDATE of a `connection` with
  `adminStatus: deleted` closes that connection (an inter-router one: 403, as qdrouterd).
  qdrouterd 1.19 updates no other configuration entity: 501, as it answers.
- Only the stack administrator may write (`tenancy.is_administrator`); without vhost
  policy, every client may (qdrouterd's management is open then). Anyone else gets 403
  with `amqp:unauthorized-access` in the description.
- A change made here lives until the router restarts or reloads its config file.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from enmesh.router import inventory, inventory_config
from enmesh.router import management_schema as schema
from enmesh.router.config import RouterConfig, RouterConfigError, build_entity
from enmesh.router.config_schema import SCHEMA
from enmesh.router.management_ops import (
    BAD_REQUEST,
    NOT_FOUND,
    NOT_IMPLEMENTED,
    OK,
    ManagementError,
)
from enmesh.router.management_schema import ManagedType
from enmesh.router.policy import snake_case
from enmesh.router.reconfigure import ReconfigureError, listener_name

if TYPE_CHECKING:
    from enmesh.router.reconfigure import LiveConfig
    from enmesh.router.router import Router

log = logging.getLogger("enmesh.router.management")
CREATED, NO_CONTENT, FORBIDDEN = 201, 204, 403
DESCRIPTIONS = {OK: "OK", CREATED: "Created", NO_CONTENT: "No Content"}
UNAUTHORIZED = "amqp:unauthorized-access"
WRITE_OPERATIONS = ("CREATE", "UPDATE", "DELETE")
# management type -> (config entity, RouterConfig field)
WRITABLE: Mapping[str, tuple[str, str]] = {
    "router.config.address": ("address", "addresses"),
    "router.config.autoLink": ("autoLink", "auto_links"),
    "router.config.linkRoute": ("linkRoute", "link_routes"),
    "listener": ("listener", "listeners"),
    "connector": ("connector", "connectors"),
    "vhost": ("vhost", "vhosts"),
}
NOT_ATTRIBUTES = ("type", "identity")  # in a request body, not settings


def answer(
    router: Router,
    live: LiveConfig | None,
    properties: Mapping[str, Any],
    body: Any,
    *,
    may_write: bool,
    who: str,
) -> tuple[int, str, Any]:
    operation = str(properties.get("operation")).upper()
    try:
        if not may_write:
            raise ManagementError(
                FORBIDDEN,
                f"{UNAUTHORIZED}: {operation} needs the stack administrator; an address"
                " space's manage right is read-only",
            )
        wanted = schema.find(str(properties.get("type") or ""))
        if wanted is None:
            raise ManagementError(BAD_REQUEST, f"No such entity type '{properties.get('type')}'")
        if live is None or operation not in schema.WRITES.get(
            wanted.short, schema.UNLISTED_WRITES.get(wanted.short, ())
        ):
            raise ManagementError(
                NOT_IMPLEMENTED,
                f"Operation '{operation}' not implemented for '{wanted.name}' "
                f"{wanted.operations()}",
            )
        attributes = body if isinstance(body, Mapping) else {}
        write = Write(router, live, wanted, properties, attributes, who)
        status, reply = write.run(operation)
    except ManagementError as exc:
        return exc.status, exc.description, {}
    return status, DESCRIPTIONS[status], reply


@dataclasses.dataclass
class Write:
    router: Router
    live: LiveConfig
    wanted: ManagedType
    properties: Mapping[str, Any]
    body: Mapping[str, Any]
    who: str

    def run(self, operation: str) -> tuple[int, Any]:
        if self.wanted.short == "connection":
            return self._update_connection()
        if operation == "CREATE":
            return self._create()
        if operation == "DELETE":
            return self._delete()
        return self._update_vhost()

    # --- configuration entities -----------------------------------------------------------

    @property
    def kind(self) -> str:
        return WRITABLE[self.wanted.short][0]

    @property
    def field(self) -> str:
        return WRITABLE[self.wanted.short][1]

    def _current(self) -> tuple[Any, ...]:
        found: tuple[Any, ...] = getattr(self.router.config, self.field)
        return found

    def _with(self, entities: tuple[Any, ...]) -> RouterConfig:
        """The running config with this type's entities replaced."""
        changes: dict[str, Any] = {self.field: entities}
        return dataclasses.replace(self.router.config, **changes)

    def _build(self, attributes: Mapping[str, Any]) -> Any:
        raw = {k: _raw(v) for k, v in attributes.items() if k not in NOT_ATTRIBUTES}
        raw = {k: v for k, v in raw.items() if v is not None}
        try:
            entity, _ = build_entity(self.kind, raw, "management")
        except RouterConfigError as exc:
            raise ManagementError(BAD_REQUEST, str(exc).removeprefix("management:1: ")) from None
        return entity

    def _create(self) -> tuple[int, Any]:
        attributes = dict(self.body)
        name = self.properties.get("name")
        if name and "name" not in attributes and SCHEMA[self.kind].attribute("name"):
            attributes["name"] = name
        entity = self._build(attributes)
        self._check_unique(entity)
        self._check_references(entity)
        self._apply(self._with((*self._current(), entity)))
        rows = inventory_config.entities(self.router, self.wanted.name)
        return CREATED, rows[-1]  # a new entity comes last, as in a file

    def _delete(self) -> tuple[int, Any]:
        index = self._find()
        current = self._current()
        remaining = current[:index] + current[index + 1 :]
        self._apply(self._with(remaining))
        return NO_CONTENT, {}

    def _update_vhost(self) -> tuple[int, Any]:
        index = self._find()
        old = self._current()[index]
        given = {k: v for k, v in self.body.items() if k not in (*NOT_ATTRIBUTES, "name")}
        built = self._build({**given, "hostname": old.hostname})
        changed = {
            snake_case(k): getattr(built, snake_case(k))
            for k in given
            if hasattr(built, snake_case(k))
        }
        vhost = dataclasses.replace(old, **changed)
        vhosts = (*self._current()[:index], vhost, *self._current()[index + 1 :])
        self._apply(dataclasses.replace(self.router.config, vhosts=vhosts))
        return OK, inventory_config.entities(self.router, self.wanted.name)[index]

    def _find(self) -> int:
        """The config index of the entity the request names by identity or name."""
        rows = inventory_config.entities(self.router, self.wanted.name)
        for key in ("identity", "name"):
            value = self.properties.get(key)
            if value is not None:
                for index, row in enumerate(rows):
                    if row.get(key) == value or row.get("hostname") == value:
                        return index
                raise ManagementError(NOT_FOUND, f"No entity with {key}={value}")
        raise ManagementError(BAD_REQUEST, f"{self.wanted.name}: No name or identity provided")

    def _check_unique(self, entity: Any) -> None:
        def identity(e: Any) -> Any:
            if self.kind == "vhost":
                return e.hostname
            return listener_name(e) if self.kind == "listener" else getattr(e, "name", None)

        mine = identity(entity)
        if mine is not None and any(identity(e) == mine for e in self._current()):
            raise ManagementError(BAD_REQUEST, "Name conflicts with an existing entity")

    def _check_references(self, entity: Any) -> None:
        config = self.router.config
        connection = getattr(entity, "connection", None)
        names = {c.name for c in config.connectors} | {listener_name(x) for x in config.listeners}
        if connection is not None and connection not in names:
            raise ManagementError(BAD_REQUEST, f"connection {connection!r} is not defined")
        profile = getattr(entity, "ssl_profile", None)
        if profile is not None and profile not in {p.name for p in config.ssl_profiles}:
            raise ManagementError(BAD_REQUEST, f"sslProfile {profile!r} is not defined")

    def _apply(self, new: RouterConfig) -> None:
        try:
            changes = self.live.apply(new)
        except ReconfigureError as exc:
            raise ManagementError(BAD_REQUEST, str(exc)) from None
        for change in changes:
            log.info("management (%s): %s", self.who, change)

    # --- connections ----------------------------------------------------------------------

    def _update_connection(self) -> tuple[int, Any]:
        identity, name = self.properties.get("identity"), self.properties.get("name")
        rows = list(inventory.connection_entities(self.router))
        row = next(
            (
                r
                for r in rows
                if (identity is not None and r["identity"] == str(identity))
                or (identity is None and name is not None and r["name"] == name)
            ),
            None,
        )
        if row is None:
            described = f"identity={identity}" if identity is not None else f"name={name}"
            raise ManagementError(NOT_FOUND, f"No entity with {described}")
        status = self.body.get("adminStatus")
        if status not in (None, "enabled", "deleted"):
            raise ManagementError(BAD_REQUEST, f"Invalid adminStatus {status!r}")
        if status == "deleted":
            if row["role"] == "inter-router":
                raise ManagementError(FORBIDDEN, "You are not allowed to perform this operation.")
            conn = self.router.connections[int(row["identity"])]
            log.info("management (%s): closing connection %s", self.who, conn.peer)
            conn.abort("amqp:connection:forced", "Connection closed by management")
            row = row | {"adminStatus": "deleted", "operStatus": "closing"}
        return OK, row


def _raw(value: Any) -> Any:
    """A management value as the config file would write it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    if isinstance(value, Mapping):
        return dict(value)
    return value
