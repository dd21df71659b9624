"""Load a router's qdrouterd.conf: the subset `enmesh.compile.qdrouterd` writes.

    # comment
    entity {
        attribute: value
    }

Comments are whole lines only: values are taken verbatim because AMQP addresses
contain `#` (`addExternalPrefix: /exchange/iot.alerts/#`). A value starting with `{` is
a JSON object that may span lines (vhost `groups`). Unknown entities or attributes,
bad values and references to undefined names are errors starting with `FILE:LINE: `.
"""

from __future__ import annotations

import bisect
import itertools
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from enmesh.router.policy import (
    DEFAULT_MAX_CONNECTIONS,
    PolicyError,
    Vhost,
    parse_groups,
    parse_policy_file,
    snake_case,
)


class RouterConfigError(Exception):
    """A problem in a router config or policy file, located as `FILE:LINE: ` or `FILE: `."""


class Mode(StrEnum):
    INTERIOR = "interior"
    STANDALONE = "standalone"


class Role(StrEnum):
    NORMAL = "normal"  # clients
    INTER_ROUTER = "inter-router"  # the mesh
    ROUTE_CONTAINER = "route-container"  # brokers


class Distribution(StrEnum):
    BALANCED = "balanced"
    CLOSEST = "closest"
    MULTICAST = "multicast"


class Direction(StrEnum):
    IN = "in"
    OUT = "out"


@dataclass(frozen=True, kw_only=True)
class Router:
    id: str
    mode: Mode = Mode.INTERIOR
    sasl_config_path: Path | None = None
    sasl_config_name: str = "qdrouterd"


@dataclass(frozen=True, kw_only=True)
class SslProfile:
    name: str
    ca_cert_file: Path | None = None
    cert_file: Path | None = None
    private_key_file: Path | None = None
    password: str | None = None  # a reference as written; see `resolve_password`


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """What listeners and connectors share."""

    host: str = "127.0.0.1"
    port: int
    role: Role = Role.NORMAL
    ssl_profile: str | None = None
    sasl_mechanisms: tuple[str, ...] = ()
    link_capacity: int = 250


@dataclass(frozen=True, kw_only=True)
class Listener(Endpoint):
    name: str | None = None
    authenticate_peer: bool = False
    multi_tenant: bool = False
    require_ssl: bool = False
    http: bool = False
    metrics: bool = False
    websockets: bool = False


@dataclass(frozen=True, kw_only=True)
class Connector(Endpoint):
    name: str
    verify_hostname: bool = True
    sasl_username: str | None = None
    sasl_password: str | None = None  # a reference as written; see `resolve_password`


@dataclass(frozen=True, kw_only=True)
class Policy:
    enable_vhost_policy: bool = False
    policy_dir: Path | None = None
    max_connections: int = DEFAULT_MAX_CONNECTIONS


@dataclass(frozen=True, kw_only=True)
class Address:
    prefix: str | None = None
    pattern: str | None = None
    distribution: Distribution = Distribution.BALANCED
    waypoint: bool = False


@dataclass(frozen=True, kw_only=True)
class LinkRoute:
    prefix: str | None = None
    pattern: str | None = None
    direction: Direction
    connection: str
    add_external_prefix: str | None = None
    del_external_prefix: str | None = None


@dataclass(frozen=True, kw_only=True)
class AutoLink:
    address: str
    direction: Direction
    connection: str
    external_address: str
    phase: int


@dataclass(frozen=True, kw_only=True)
class RouterConfig:
    """One router's config, checked: every entity tuple is in file order."""

    router: Router
    ssl_profiles: tuple[SslProfile, ...] = ()
    listeners: tuple[Listener, ...] = ()
    connectors: tuple[Connector, ...] = ()
    policy: Policy | None = None
    vhosts: tuple[Vhost, ...] = ()  # inline first, then policyDir files by name
    addresses: tuple[Address, ...] = ()
    link_routes: tuple[LinkRoute, ...] = ()
    auto_links: tuple[AutoLink, ...] = ()

    def ssl_profile(self, name: str) -> SslProfile:
        """A profile that a listener or connector names (checked when loading)."""
        return next(p for p in self.ssl_profiles if p.name == name)

    def connection(self, name: str) -> Listener | Connector:
        """The listener or connector a linkRoute or autoLink names (checked when loading)."""
        connections: tuple[Listener | Connector, ...] = (*self.connectors, *self.listeners)
        return next(c for c in connections if c.name == name)

    def vhost(self, hostname: str) -> Vhost | None:
        """The policy for the address space a client names in its AMQP open `hostname`."""
        return next((v for v in self.vhosts if v.hostname == hostname), None)


# --- attribute values ----------------------------------------------------------------

Raw = str | dict[str, Any]  # a value as written: text, or a JSON object
Convert = Callable[[Raw], Any]


def _text(value: Raw) -> str:
    if not isinstance(value, str):
        raise ValueError("expected text, got a JSON object")
    return value


def _boolean(value: Raw) -> bool:
    text = _text(value)
    if text in ("true", "yes", "false", "no"):
        return text in ("true", "yes")
    raise ValueError(f"expected true or false, got {text!r}")


def _integer(low: int, high: int | None = None) -> Convert:
    expected = f"an integer {low}-{high}" if high is not None else f"an integer >= {low}"

    def convert(value: Raw) -> int:
        text = _text(value)
        number = int(text) if re.fullmatch(r"-?[0-9]+", text) else None
        if number is None or number < low or (high is not None and number > high):
            raise ValueError(f"expected {expected}, got {text!r}")
        return number

    return convert


def _choice(kind: type[StrEnum]) -> Convert:
    def convert(value: Raw) -> StrEnum:
        text = _text(value)
        try:
            return kind(text)
        except ValueError:
            raise ValueError(f"expected one of {', '.join(kind)}, got {text!r}") from None

    return convert


def _words(value: Raw) -> tuple[str, ...]:
    return tuple(_text(value).split())


def _path(value: Raw) -> Path:
    return Path(_text(value))


# --- entity schemas ------------------------------------------------------------------


class _CheckError(Exception):
    """A check across an entity's attributes failed; `attribute` locates it."""

    def __init__(self, attribute: str | None, message: str) -> None:
        super().__init__(message)
        self.attribute = attribute


def _prefix_or_pattern(fields: dict[str, Any]) -> None:
    if ("prefix" in fields) == ("pattern" in fields):
        where = "pattern" if "pattern" in fields else None
        raise _CheckError(where, "expected exactly one of 'prefix' and 'pattern'")


def _ssl_required(fields: dict[str, Any]) -> None:
    if fields.get("require_ssl") and "ssl_profile" not in fields:
        raise _CheckError("requireSsl", "requireSsl: true needs an sslProfile")


def _auto_link_defaults(fields: dict[str, Any]) -> None:
    fields.setdefault("external_address", fields["address"])
    # Deliveries from the broker (in) continue in phase 1, so they are not sent back to it.
    fields.setdefault("phase", 1 if fields["direction"] is Direction.IN else 0)


@dataclass(frozen=True)
class _Schema:
    build: Callable[..., Any]
    attributes: Mapping[str, Convert]
    required: tuple[str, ...] = ()
    check: Callable[[dict[str, Any]], None] | None = None  # may raise _CheckError


_ENDPOINT: dict[str, Convert] = {
    "name": _text,
    "host": _text,
    "port": _integer(1, 65535),
    "role": _choice(Role),
    "sslProfile": _text,
    "saslMechanisms": _words,
    "linkCapacity": _integer(1),
}
_LISTENER_FLAGS = ("authenticatePeer", "multiTenant", "requireSsl", "http", "metrics", "websockets")
_PREFIX_OR_PATTERN: dict[str, Convert] = {"prefix": _text, "pattern": _text}

_SCHEMAS: dict[str, _Schema] = {
    "router": _Schema(
        Router,
        {"id": _text, "mode": _choice(Mode), "saslConfigPath": _path, "saslConfigName": _text},
        required=("id",),
    ),
    "sslProfile": _Schema(
        SslProfile,
        {
            "name": _text,
            "caCertFile": _path,
            "certFile": _path,
            "privateKeyFile": _path,
            "password": _text,
        },
        required=("name",),
    ),
    "listener": _Schema(
        Listener,
        _ENDPOINT | dict.fromkeys(_LISTENER_FLAGS, _boolean),
        required=("port",),
        check=_ssl_required,
    ),
    "connector": _Schema(
        Connector,
        _ENDPOINT | {"verifyHostname": _boolean, "saslUsername": _text, "saslPassword": _text},
        required=("name", "port"),
    ),
    "policy": _Schema(
        Policy,
        {"enableVhostPolicy": _boolean, "policyDir": _path, "maxConnections": _integer(0)},
    ),
    "vhost": _Schema(
        Vhost,
        {
            "hostname": _text,
            "maxConnections": _integer(0),
            "allowUnknownUser": _boolean,
            "groups": parse_groups,
        },
        required=("hostname",),
    ),
    "address": _Schema(
        Address,
        _PREFIX_OR_PATTERN | {"distribution": _choice(Distribution), "waypoint": _boolean},
        check=_prefix_or_pattern,
    ),
    "linkRoute": _Schema(
        LinkRoute,
        _PREFIX_OR_PATTERN
        | {
            "direction": _choice(Direction),
            "connection": _text,
            "addExternalPrefix": _text,
            "delExternalPrefix": _text,
        },
        required=("direction", "connection"),
        check=_prefix_or_pattern,
    ),
    "autoLink": _Schema(
        AutoLink,
        {
            "address": _text,
            "direction": _choice(Direction),
            "connection": _text,
            "externalAddress": _text,
            "phase": _integer(0),
        },
        required=("address", "direction", "connection"),
        check=_auto_link_defaults,
    ),
}

# The attribute that names an entity in messages, as the compiler sorts by it.
_IDENTIFYING = ("name", "id", "hostname", "prefix", "pattern", "address")


# --- the file format -----------------------------------------------------------------


@dataclass(frozen=True)
class _Attribute:
    value: Raw
    line: int


@dataclass
class _Block:
    type: str
    line: int
    attributes: dict[str, _Attribute] = field(default_factory=dict)

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


def _error(where: str, line: int, message: str) -> RouterConfigError:
    return RouterConfigError(f"{where}:{line}: {message}")


def _excerpt(line: str) -> str:
    """A line for an error message; never an attribute's value, which may be a secret."""
    key, colon, _ = line.partition(":")
    return repr(f"{key}: ..." if colon else line)


_BEGIN = re.compile(r"([A-Za-z][\w-]*)\s*\{")
_ATTRIBUTE = re.compile(r"([A-Za-z][\w-]*)\s*:\s*(.*)")
_JSON = json.JSONDecoder()


def _blocks(where: str, text: str) -> Iterator[_Block]:
    """Entity blocks in file order, each as soon as it is closed."""
    lines = text.split("\n")
    starts = list(itertools.accumulate((len(line) + 1 for line in lines), initial=0))
    block: _Block | None = None
    index = 0
    while index < len(lines):
        number, line = index + 1, lines[index].strip()
        index += 1
        if not line or line.startswith("#"):
            continue
        begin = _BEGIN.fullmatch(line)
        if block is None:
            if begin is None:
                raise _error(where, number, f"expected 'ENTITY {{', got {_excerpt(line)}")
            if begin[1] not in _SCHEMAS:
                expected = ", ".join(_SCHEMAS)
                raise _error(
                    where, number, f"unknown entity {begin[1]!r}; expected one of: {expected}"
                )
            block = _Block(begin[1], number)
        elif line == "}":
            yield block
            block = None
        elif begin is not None:
            raise _unterminated(where, block, f"before line {number}")
        else:
            attribute = _ATTRIBUTE.fullmatch(line)
            if attribute is None:
                message = f"expected 'attribute: value' or '}}', got {_excerpt(line)}"
                raise _error(where, number, f"{block.label}: {message}")
            key, value = attribute[1], attribute[2]
            if key in block.attributes:
                first = block.attributes[key].line
                message = f"duplicate attribute {key!r}; first set at line {first}"
                raise _error(where, number, f"{block.label}: {message}")
            if not value:
                raise _error(where, number, f"{block.label}: {key}: expected a value")
            raw: Raw = value
            if value.startswith("{"):
                what = f"{block.label}: {key}"
                start = starts[index - 1] + lines[index - 1].index("{")
                raw, index = _json_object(where, what, text, starts, start)
            block.attributes[key] = _Attribute(raw, number)
    if block is not None:
        raise _unterminated(where, block, "before the end of the file")


def _json_object(
    where: str, what: str, text: str, starts: list[int], start: int
) -> tuple[dict[str, Any], int]:
    """The JSON object at offset `start`, and the index of the line after it."""
    try:
        value, end = _JSON.raw_decode(text, start)
    except json.JSONDecodeError as error:
        message = f"{what}: invalid JSON: {error.msg} (column {error.colno})"
        raise _error(where, error.lineno, message) from None
    last = bisect.bisect_right(starts, end - 1) - 1
    if text[end : starts[last + 1]].strip():
        raise _error(where, last + 1, f"{what}: unexpected text after the JSON object")
    return value, last + 1


def _unterminated(where: str, block: _Block, end: str) -> RouterConfigError:
    message = f"unterminated entity block: {block.label} has no closing '}}' {end}"
    return _error(where, block.line, message)


def _entity(where: str, block: _Block) -> Any:
    schema = _SCHEMAS[block.type]
    fields: dict[str, Any] = {}
    for key, attribute in block.attributes.items():
        convert = schema.attributes.get(key)
        if convert is None:
            expected = ", ".join(sorted(schema.attributes))
            message = f"unknown attribute {key!r}; expected one of: {expected}"
            raise _error(where, attribute.line, f"{block.label}: {message}")
        try:
            fields[snake_case(key)] = convert(attribute.value)
        except ValueError as error:
            raise _error(where, attribute.line, f"{block.label}: {key}: {error}") from None
    for key in schema.required:
        if key not in block.attributes:
            raise _error(where, block.line, f"{block.label}: missing required attribute {key!r}")
    if schema.check is not None:
        try:
            schema.check(fields)
        except _CheckError as problem:
            line = block.line_of(problem.attribute)
            raise _error(where, line, f"{block.label}: {problem}") from None
    return schema.build(**fields)


# --- the whole config ----------------------------------------------------------------

_Found = list[tuple[_Block, Any]]  # (where it is written, the entity)


def _single(where: str, found: _Found, kind: str, required: bool) -> Any:
    if len(found) > 1:
        first, second = found[0][0], found[1][0]
        message = f"a second {kind} entity; expected one, the first is at line {first.line}"
        raise _error(where, second.line, message)
    if not found and required:
        raise _error(where, 1, f"no {kind} entity; expected exactly one")
    return found[0][1] if found else None


def _names(where: str, found: _Found) -> dict[str, _Block]:
    """Name -> the block that defines it; a name used twice is an error."""
    defined: dict[str, _Block] = {}
    for block, _ in sorted(found, key=lambda pair: pair[0].line):
        written = block.attributes.get("name")
        if written is None:
            continue
        name = _text(written.value)
        if name in defined:
            first = defined[name]
            message = f"name {name!r} is already used by the {first.type} at line {first.line}"
            raise _error(where, written.line, f"{block.label}: {message}")
        defined[name] = block
    return defined


def _check_references(
    where: str, found: _Found, attribute: str, defined: Mapping[str, _Block], expected: str
) -> None:
    for block, _ in found:
        written = block.attributes.get(attribute)
        if written is not None and written.value not in defined:
            known = ", ".join(sorted(defined)) or "none are defined"
            message = f"{attribute} {written.value!r} is not defined; expected {expected}: {known}"
            raise _error(where, written.line, f"{block.label}: {message}")


def _reason(error: OSError | UnicodeDecodeError) -> str:
    # A decode error quotes the offending bytes, which may be part of a secret.
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8 text"
    return error.strerror or str(error)


def _load_policy_file(path: Path) -> tuple[Vhost, ...]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        message = f"invalid JSON: {error.msg} (column {error.colno})"
        raise RouterConfigError(f"{path}:{error.lineno}: {message}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RouterConfigError(f"{path}: cannot read: {_reason(error)}") from None
    try:
        return parse_policy_file(data)
    except PolicyError as error:
        raise RouterConfigError(f"{path}: {error}") from None


def _vhosts(where: str, found: _Found, policy: _Found) -> tuple[Vhost, ...]:
    """Inline vhosts, then those of `policyDir/*.json` by file name; hostnames unique.

    `policy` holds at most one entity (checked before).
    """
    located = [(f"{where}:{block.line}", vhost) for block, vhost in found]
    if policy and policy[0][1].policy_dir is not None:
        block, directory = policy[0][0], policy[0][1].policy_dir
        if not directory.is_dir():
            message = f"policy: policyDir: {str(directory)!r} is not a directory"
            raise _error(where, block.line_of("policyDir"), message)
        for path in sorted(directory.glob("*.json")):
            located += [(str(path), vhost) for vhost in _load_policy_file(path)]
    origins: dict[str, str] = {}
    for origin, vhost in located:
        if vhost.hostname in origins:
            message = f"vhost {vhost.hostname!r} is already defined at {origins[vhost.hostname]}"
            raise RouterConfigError(f"{origin}: {message}")
        origins[vhost.hostname] = origin
    return tuple(vhost for _, vhost in located)


def load_router_config(path: Path) -> RouterConfig:
    """Parse and check a router config, and load the vhost policies it points to."""
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RouterConfigError(f"{where}: cannot read: {_reason(error)}") from None
    found: dict[str, _Found] = {kind: [] for kind in _SCHEMAS}
    for block in _blocks(where, text):
        found[block.type].append((block, _entity(where, block)))

    profiles = _names(where, found["sslProfile"])
    connections = _names(where, found["listener"] + found["connector"])
    for kind in ("listener", "connector"):
        _check_references(where, found[kind], "sslProfile", profiles, "an sslProfile")
    for kind in ("linkRoute", "autoLink"):
        expected = "a connector or listener"
        _check_references(where, found[kind], "connection", connections, expected)

    router = _single(where, found["router"], "router", required=True)
    policy = _single(where, found["policy"], "policy", required=False)

    def entities(kind: str) -> tuple[Any, ...]:
        return tuple(entity for _, entity in found[kind])

    return RouterConfig(
        router=router,
        ssl_profiles=entities("sslProfile"),
        listeners=entities("listener"),
        connectors=entities("connector"),
        policy=policy,
        vhosts=_vhosts(where, found["vhost"], found["policy"]),
        addresses=entities("address"),
        link_routes=entities("linkRoute"),
        auto_links=entities("autoLink"),
    )


def resolve_password(value: str) -> str:
    """The secret a password reference names: `file:PATH`, `env:NAME` or `pass:LITERAL`.

    A file's trailing newline is dropped. Errors say which form failed and why; they
    never contain the password.
    """
    form, colon, rest = value.partition(":")
    shown = "pass:..." if form == "pass" else value
    if not colon or form not in ("file", "env", "pass"):
        raise RouterConfigError(
            "password: expected file:PATH, env:NAME or pass:LITERAL (the value is not shown)"
        )
    if form == "file":
        try:
            secret = Path(rest).read_text(encoding="utf-8").rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as error:
            raise RouterConfigError(f"password {shown}: cannot read: {_reason(error)}") from None
    elif form == "env":
        if rest not in os.environ:
            raise RouterConfigError(f"password {shown}: environment variable {rest!r} is not set")
        secret = os.environ[rest]
    else:
        secret = rest
    if not secret:
        raise RouterConfigError(f"password {shown}: the password is empty")
    return secret
