"""Load a router's config (qdrouterd 1.19's configuration language) and its vhost policies.

The format is read by `config_format`; what each entity and attribute means here (done,
ignored with a warning, or refused as recognised but not supported) is the table in
`config_schema`. Unknown entities or attributes, bad values and references to undefined
names are errors starting with `FILE:LINE: `.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from enmesh.router.config_checks import CheckError, CheckUnsupportedError
from enmesh.router.config_format import Attribute, Block, blocks, error
from enmesh.router.config_model import (
    Address,
    AutoLink,
    Connector,
    Direction,
    Distribution,
    Endpoint,
    LinkRoute,
    Listener,
    Log,
    Mode,
    Policy,
    Role,
    Router,
    RouterConfig,
    RouterConfigError,
    SslProfile,
    StripAnnotations,
)
from enmesh.router.config_schema import CONFIG_FILE_ENTITIES, SCHEMA, Disposition
from enmesh.router.config_values import IgnoredError, Raw, UnsupportedError
from enmesh.router.policy import PolicyError, Vhost, parse_policy_file, snake_case

__all__ = [
    "Address",
    "AutoLink",
    "Connector",
    "Direction",
    "Distribution",
    "Endpoint",
    "LinkRoute",
    "Listener",
    "Log",
    "Mode",
    "Policy",
    "Role",
    "Router",
    "RouterConfig",
    "RouterConfigError",
    "SslProfile",
    "StripAnnotations",
    "build_entity",
    "load_router_config",
    "resolve_password",
]

UNSUPPORTED = "recognised but not supported"


def _refuse(where: str, line: int, what: str, why: str) -> RouterConfigError:
    return error(where, line, f"{what}: {UNSUPPORTED}: {why}")


def _entity(where: str, block: Block, warnings: list[str]) -> Any:
    """The entity a block describes; settings without effect add to `warnings`."""
    kind = SCHEMA[block.type]
    given: dict[str, str] = {}  # attribute name -> the name written (maybe an alias)
    for key, attribute in block.attributes.items():
        spec = kind.attribute(key)
        if spec is None:
            expected = ", ".join(sorted(a.name for a in kind.attributes))
            message = f"unknown attribute {key!r}; expected one of: {expected}"
            raise error(where, attribute.line, f"{block.label}: {message}")
        if spec.name in given:
            message = f"both {given[spec.name]!r} and {key!r} set {spec.name!r}; expected one"
            raise error(where, attribute.line, f"{block.label}: {message}")
        given[spec.name] = key
    if kind.build is None:
        raise _refuse(where, block.line, block.label, kind.note)
    fields: dict[str, Any] = {}
    for name, key in given.items():
        spec, attribute = kind.attributes_by_name[name], block.attributes[key]
        what = f"{block.label}: {key}"
        try:
            value = spec.convert(attribute.value)
        except ValueError as problem:
            raise error(where, attribute.line, f"{what}: {problem}") from None
        except UnsupportedError as why:
            shown = repr(attribute.value)
            raise _refuse(where, attribute.line, f"{what}: {shown}", str(why)) from None
        except IgnoredError as why:
            warnings.append(f"{where}:{attribute.line}: {what}: ignored: {why}")
            continue
        if spec.disposition is Disposition.IGNORED:
            warnings.append(f"{where}:{attribute.line}: {what}: ignored: {spec.note}")
        elif spec.disposition is Disposition.REFUSED:
            raise _refuse(where, attribute.line, what, spec.note)
        elif spec.disposition is Disposition.DEFAULT_ONLY:
            if value != spec.default_value():
                shown = repr(attribute.value)
                raise _refuse(where, attribute.line, f"{what}: {shown}", spec.note)
        else:
            fields[snake_case(spec.name)] = value
    for key in kind.required:
        if key not in given:
            raise error(where, block.line, f"{block.label}: missing required attribute {key!r}")
    if kind.check is not None:
        try:
            for attribute_name, reason in kind.check(fields):
                line = block.line_of(given.get(attribute_name))
                message = f"{block.label}: {attribute_name}: ignored: {reason}"
                warnings.append(f"{where}:{line}: {message}")
        except CheckError as problem:
            line = block.line_of(given.get(problem.attribute or ""))
            if isinstance(problem, CheckUnsupportedError):
                raise _refuse(where, line, block.label, str(problem)) from None
            raise error(where, line, f"{block.label}: {problem}") from None
    return kind.build(**fields)


def build_entity(kind: str, attributes: Mapping[str, Raw], where: str) -> tuple[Any, list[str]]:
    """One entity from attribute values given elsewhere than a file (management CREATE),
    checked as a config block is; errors and warnings start with `where:1: `."""
    block = Block(kind, 1, {key: Attribute(value, 1) for key, value in attributes.items()})
    warnings: list[str] = []
    return _entity(where, block, warnings), warnings


# --- the whole config ----------------------------------------------------------------

_Found = list[tuple[Block, Any]]  # (where it is written, the entity)


def _single(where: str, found: _Found, kind: str, required: bool) -> Any:
    if len(found) > 1:
        first, second = found[0][0], found[1][0]
        message = f"a second {kind} entity; expected one, the first is at line {first.line}"
        raise error(where, second.line, message)
    if not found and required:
        raise error(where, 1, f"no {kind} entity; expected exactly one")
    return found[0][1] if found else None


def _names(where: str, found: _Found) -> dict[str, Block]:
    """Name -> the block that defines it; a name used twice is an error."""
    defined: dict[str, Block] = {}
    for block, entity in sorted(found, key=lambda pair: pair[0].line):
        name = entity.name
        if name is None:
            continue
        if name in defined:
            first = defined[name]
            message = f"name {name!r} is already used by the {first.type} at line {first.line}"
            raise error(where, block.line_of("name"), f"{block.label}: {message}")
        defined[name] = block
    return defined


def _check_references(
    where: str, found: _Found, attribute: str, defined: Mapping[str, Block], expected: str
) -> None:
    for block, _ in found:
        written = block.attributes.get(attribute)
        if written is not None and written.value not in defined:
            known = ", ".join(sorted(defined)) or "none are defined"
            message = f"{attribute} {written.value!r} is not defined; expected {expected}: {known}"
            raise error(where, written.line, f"{block.label}: {message}")


def _reason(error: OSError | UnicodeDecodeError) -> str:
    # A decode error quotes the offending bytes, which may be part of a secret.
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8 text"
    return error.strerror or str(error)


def _without_comments(text: str) -> str:
    """As qdrouterd reads a policy file: a line starting with `#` (after blanks) is
    blank, so JSON errors keep their line numbers."""
    return "\n".join("" if line.strip().startswith("#") else line for line in text.split("\n"))


def _load_policy_file(path: Path) -> tuple[Vhost, ...]:
    try:
        data = json.loads(_without_comments(path.read_text(encoding="utf-8")))
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
            raise error(where, block.line_of("policyDir"), message)
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
    found: dict[str, _Found] = {kind: [] for kind in CONFIG_FILE_ENTITIES}
    warnings: list[str] = []
    for block in blocks(where, text, CONFIG_FILE_ENTITIES):
        found[block.type].append((block, _entity(where, block, warnings)))

    profiles = _names(where, found["sslProfile"])
    connections = _names(where, found["listener"] + found["connector"])
    for kind in ("listener", "connector", "authServicePlugin"):
        _check_references(where, found[kind], "sslProfile", profiles, "an sslProfile")
    plugins = _names(where, found["authServicePlugin"])
    _check_references(where, found["listener"], "saslPlugin", plugins, "an authServicePlugin")
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
        auth_service_plugins=entities("authServicePlugin"),
        listeners=entities("listener"),
        connectors=entities("connector"),
        logs=entities("log"),
        policy=policy,
        vhosts=_vhosts(where, found["vhost"], found["policy"]),
        addresses=entities("address"),
        link_routes=entities("linkRoute"),
        auto_links=entities("autoLink"),
        warnings=tuple(warnings),
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
