"""Router configs and vhost policies as keyed entities, so two versions can be compared.

A key names an entity the way an operator would (`address 'iot/telemetry'`); two
entities with the same key are the same thing, changed or not. Secrets never appear:
the values of password attributes are replaced before anything is compared or printed.
"""

from __future__ import annotations

import hmac
import json
import secrets
from typing import Any

from enmesh.router.config_format import blocks
from enmesh.router.config_schema import CONFIG_FILE_ENTITIES

Attributes = dict[str, str]
Entities = dict[tuple[str, str], Attributes]  # (entity type, key) -> attributes as text

_SECRET_ATTRIBUTES = ("saslPassword", "password", "privateKeyPassword")
SECRET_MARK = "********"
# Secrets are compared through a keyed digest whose key lives only in this process: a
# change shows, the value never does (not even as a digest one could guess against).
_KEY = secrets.token_bytes(32)


def _masked(value: str) -> str:
    return f"{SECRET_MARK} {hmac.new(_KEY, value.encode(), 'sha256').hexdigest()}"


_SINGLETONS = ("router", "policy", "tcpKeepalive")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _key(kind: str, attributes: Attributes) -> str:
    get = attributes.get
    if kind in _SINGLETONS:
        return kind
    if kind == "autoLink":
        via = get("connection") or get("containerId") or "?"
        return f"{get('address') or get('addr')} {get('direction')} via {via}"
    if kind == "linkRoute":
        via = get("connection") or get("containerId") or "?"
        return f"{get('prefix') or get('pattern')} {get('direction')} via {via}"
    for name in ("name", "prefix", "pattern", "module", "hostname"):
        if name in attributes:
            return attributes[name]
    return f"{get('host', '')}:{get('port', '')}"


def router_entities(text: str, where: str) -> Entities:
    """Every entity of a qdrouterd-format config (errors name `where:line`)."""
    found: Entities = {}
    for block in blocks(where, text, CONFIG_FILE_ENTITIES):
        attributes = {
            name: _masked(_text(attribute.value))
            if name in _SECRET_ATTRIBUTES
            else _text(attribute.value)
            for name, attribute in block.attributes.items()
        }
        found[(block.type, _key(block.type, attributes))] = attributes
    return found


def policy_entities(text: str) -> Entities:
    """A vhost policy file (`[["vhost", {...}]]`): the vhost, and each of its user groups."""
    found: Entities = {}
    for kind, body in json.loads(text):
        if kind != "vhost":
            continue
        hostname = str(body.get("hostname") or body.get("id"))
        settings = {k: _text(v) for k, v in body.items() if k != "groups"}
        found[("vhost", hostname)] = settings
        for group, rules in sorted(body.get("groups", {}).items()):
            found[("vhost group", f"{hostname}/{group}")] = {k: _text(v) for k, v in rules.items()}
    return found
