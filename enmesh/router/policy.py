"""Vhost policies: which users may connect to an address space and what they may use.

The schema is the qdrouterd `vhost` entity as `enmesh.compile.auth` writes it, both in
`policyDir/*.json` files and inline in a router config. Errors raised here name the
vhost, group and key; the caller prefixes the file (and line).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

DEFAULT_GROUP = "$default"
# qdrouterd's default for vhost and global connection limits.
DEFAULT_MAX_CONNECTIONS = 65535


class PolicyError(ValueError):
    """A vhost that does not match the schema."""


def snake_case(name: str) -> str:
    """`allowUnknownUser` -> `allow_unknown_user`: attribute names become field names."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _matches(patterns: Iterable[str], address: str) -> bool:
    return any(address.startswith(p[:-1]) if p.endswith("*") else address == p for p in patterns)


@dataclass(frozen=True, kw_only=True)
class VhostGroup:
    name: str
    users: tuple[str, ...] = ()
    remote_hosts: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    allow_anonymous_sender: bool = False
    allow_dynamic_source: bool = False
    allow_admin_status_update: bool = False

    def allows_source(self, address: str) -> bool:
        """May members receive from `address`? `x*` matches any address starting with x."""
        return _matches(self.sources, address)

    def allows_target(self, address: str) -> bool:
        """May members send to `address`? Same patterns as `allows_source`."""
        return _matches(self.targets, address)


@dataclass(frozen=True, kw_only=True)
class Vhost:
    hostname: str
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    allow_unknown_user: bool = False
    # Read-only view; left out of the hash because a mapping has none.
    groups: Mapping[str, VhostGroup] = field(
        default_factory=lambda: MappingProxyType({}), hash=False
    )

    @cached_property
    def _members(self) -> dict[str, VhostGroup]:
        return {user: group for group in self.groups.values() for user in group.users}

    def group_for(self, user: str) -> VhostGroup | None:
        """The group listing `user`, else `$default` if there is one."""
        return self._members.get(user) or self.groups.get(DEFAULT_GROUP)


# --- JSON -> types -------------------------------------------------------------------

Convert = Callable[[object], Any]


def _describe(value: object) -> str:
    if isinstance(value, dict):
        return "a JSON object"
    if isinstance(value, list):
        return "a JSON array"
    return json.dumps(value)


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {_describe(value)}")
    return value


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected an integer >= 0, got {_describe(value)}")
    return value


def _name(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {_describe(value)}")
    return value


def _names(value: object) -> tuple[str, ...]:
    if not isinstance(value, str):
        raise ValueError(f"expected a comma-separated string, got {_describe(value)}")
    return tuple(item for item in (part.strip() for part in value.split(",")) if item)


# qdrouterd 1.19 keys enmesh-router recognises but does not implement: key -> (type,
# qdrouterd's default as JSON or None, what a value would change). The default, which is
# what enmesh-router does, is accepted; anything else is refused. `config_schema` lists
# these with the implemented keys.
_LIMIT = "would limit members' {}; not enforced"
GROUP_NOT_IMPLEMENTED: dict[str, tuple[str, str | None, str]] = {
    "maxConnectionsPerUser": ("integer", None, _LIMIT.format("connections per user")),
    "maxConnectionsPerHost": ("integer", None, _LIMIT.format("connections per host")),
    "maxMessageSize": ("integer", None, _LIMIT.format("message size")),
    "maxFrameSize": ("integer", None, _LIMIT.format("frame size")),
    "maxSessionWindow": ("integer", None, _LIMIT.format("session window")),
    "maxSessions": ("integer", None, _LIMIT.format("sessions")),
    "maxSenders": ("integer", "2147483647", _LIMIT.format("senders")),
    "maxReceivers": ("integer", "2147483647", _LIMIT.format("receivers")),
    "allowUserIdProxy": ("boolean", "false", "true would let members send as another user"),
    "allowWaypointLinks": ("boolean", "true", "false would refuse waypoint links"),
    "allowDynamicLinkRoutes": ("boolean", "true", "false would refuse dynamic link routes"),
    "allowFallbackLinks": ("boolean", "true", "false would refuse fallback links"),
    "sourcePattern": ("string", None, "would match sources by qdrouterd's address patterns"),
    "targetPattern": ("string", None, "would match targets by qdrouterd's address patterns"),
}
VHOST_NOT_IMPLEMENTED: dict[str, tuple[str, str | None, str]] = {
    "aliases": ("string", None, "would let clients name this vhost by other hostnames"),
    "maxConnectionsPerUser": ("integer", "65535", _LIMIT.format("connections per user")),
    "maxConnectionsPerHost": ("integer", "65535", _LIMIT.format("connections per host")),
}


def _not_implemented(
    what: str, key: str, value: object, known: Mapping[str, tuple[str, str | None, str]]
) -> None:
    """Accept a recognised key at qdrouterd's default; refuse it otherwise."""
    _, default, why = known[key]
    if default is None or json.dumps(value) != default:
        raise PolicyError(f"{what}: {key}: recognised but not supported: {why}")


def _fields(
    what: str,
    data: object,
    schema: Mapping[str, Convert],
    recognised: Mapping[str, tuple[str, str | None, str]],
) -> dict[str, Any]:
    """Convert a JSON object's keys with `schema` into dataclass keyword arguments."""
    if not isinstance(data, dict):
        raise PolicyError(f"{what}: expected a JSON object, got {_describe(data)}")
    fields = {}
    for key, value in data.items():
        convert = schema.get(key)
        if convert is None and key in recognised:
            _not_implemented(what, key, value, recognised)
            continue
        if convert is None:
            expected = ", ".join(sorted(schema))
            raise PolicyError(f"{what}: unknown key {key!r}; expected one of: {expected}")
        try:
            fields[snake_case(key)] = convert(value)
        except ValueError as error:
            raise PolicyError(f"{what}: {key}: {error}") from None
    return fields


def _any_host(value: object) -> tuple[str, ...]:
    hosts = _names(value)
    if hosts != ("*",):
        raise ValueError(
            "recognised but not supported: only '*' (the router does not check clients' addresses)"
        )
    return hosts


_GROUP_SCHEMA: dict[str, Convert] = {
    "users": _names,
    "remoteHosts": _any_host,
    "sources": _names,
    "targets": _names,
    "allowAnonymousSender": _flag,
    "allowDynamicSource": _flag,
    "allowAdminStatusUpdate": _flag,
}


def parse_groups(data: object) -> Mapping[str, VhostGroup]:
    """The `groups` value: group name -> group. A user may be in one group only."""
    if not isinstance(data, dict):
        raise PolicyError(f"expected a JSON object, got {_describe(data)}")
    groups: dict[str, VhostGroup] = {}
    member_of: dict[str, str] = {}
    for name, spec in data.items():
        what = f"group {name!r}"
        group = VhostGroup(name=name, **_fields(what, spec, _GROUP_SCHEMA, GROUP_NOT_IMPLEMENTED))
        for user in group.users:
            if user in member_of:
                raise PolicyError(f"{what}: user {user!r} is already in group {member_of[user]!r}")
            member_of[user] = name
        groups[name] = group
    return MappingProxyType(groups)


_VHOST_SCHEMA: dict[str, Convert] = {
    "hostname": _name,
    "maxConnections": _count,
    "allowUnknownUser": _flag,
    "groups": parse_groups,
}


def parse_vhost(data: object, what: str = "vhost") -> Vhost:
    """One vhost object; `what` names it in errors until its hostname is known."""
    hostname = data.get("hostname") if isinstance(data, dict) else None
    if isinstance(hostname, str) and hostname:
        what = f"vhost {hostname!r}"
    fields = _fields(what, data, _VHOST_SCHEMA, VHOST_NOT_IMPLEMENTED)
    if "hostname" not in fields:
        raise PolicyError(f"{what}: missing required key 'hostname'")
    return Vhost(**fields)


def parse_policy_file(data: object) -> tuple[Vhost, ...]:
    """A policy file's content: a JSON list of `["vhost", {...}]` pairs."""
    if not isinstance(data, list):
        raise PolicyError(f'expected a JSON array of ["vhost", {{...}}], got {_describe(data)}')
    vhosts = []
    for number, entry in enumerate(data, start=1):
        if not (isinstance(entry, list) and len(entry) == 2):
            raise PolicyError(
                f'entry {number}: expected ["vhost", {{...}}], got {_describe(entry)}'
            )
        if entry[0] != "vhost":
            got = _describe(entry[0])
            raise PolicyError(f'entry {number}: unknown entity {got}; expected "vhost"')
        vhosts.append(parse_vhost(entry[1], f"entry {number} (vhost)"))
    return tuple(vhosts)
