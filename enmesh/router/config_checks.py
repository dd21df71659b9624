"""Checks across one entity's attributes, run after each attribute is converted.

A check may fill in defaults that depend on other attributes, return warnings
(attribute, why) for settings accepted without effect, or raise `CheckError` (bad
input) or `CheckUnsupportedError` (recognised, not supported); both name the attribute
whose line locates the problem.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from enmesh.router.failover import parse_failover_urls

Warnings = list[tuple[str, str]]
Check = Callable[[dict[str, Any]], Warnings]


class CheckError(Exception):
    def __init__(self, attribute: str | None, message: str) -> None:
        super().__init__(message)
        self.attribute = attribute


class CheckUnsupportedError(CheckError):
    """The message says why the setting is not supported."""


def _prefix_or_pattern(fields: dict[str, Any]) -> None:
    if ("prefix" in fields) == ("pattern" in fields):
        where = "pattern" if "pattern" in fields else None
        raise CheckError(where, "expected exactly one of 'prefix' and 'pattern'")


def _connection_or_container(fields: dict[str, Any], kind: str) -> None:
    if "connection" in fields and "container_id" in fields:
        raise CheckError("containerId", "expected one of 'connection' and 'containerId', not both")
    if "connection" not in fields and "container_id" not in fields:
        raise CheckUnsupportedError(
            None,
            f"an {kind} with neither connection nor containerId: the broker would be "
            "found through other routers of the mesh; name its connection here",
        )


def router(fields: dict[str, Any]) -> Warnings:
    return []


def ssl_profile(fields: dict[str, Any]) -> Warnings:
    password_file = fields.pop("password_file", None)
    if password_file is not None:
        if "password" in fields:
            raise CheckError("passwordFile", "expected one of 'password' and 'passwordFile'")
        fields["password"] = f"file:{password_file}"
    return []


def listener(fields: dict[str, Any]) -> Warnings:
    if fields.get("require_ssl") and "ssl_profile" not in fields:
        raise CheckError("requireSsl", "requireSsl: true needs an sslProfile")
    if fields.get("http") and fields.get("websockets", True):
        raise CheckUnsupportedError(
            "websockets",
            "websockets: AMQP over WebSocket (on by default on http listeners) is not "
            "served; set websockets: false",
        )
    if "failover_urls" in fields:
        try:
            fields["failover_servers"] = parse_failover_urls(fields["failover_urls"])
        except ValueError as error:
            raise CheckError("failoverUrls", str(error)) from None
    return []


def connector(fields: dict[str, Any]) -> Warnings:
    # qdrouterd names an unnamed connector by its identity.
    fields.setdefault("name", f"connector/{fields.get('host', '127.0.0.1')}:{fields['port']}")
    return []


_LEVEL = re.compile(r"(trace|debug|info|notice|warning|error|critical)\+?")


def log(fields: dict[str, Any]) -> Warnings:
    warnings: Warnings = []
    enable = fields.get("enable")
    if enable is not None:
        levels = [part.strip() for part in enable.split(",")]
        if enable != "none" and not all(_LEVEL.fullmatch(level) for level in levels):
            raise CheckError("enable", f"expected 'none' or levels such as 'info+', got {enable!r}")
        if fields["module"] != "DEFAULT":
            warnings.append(("enable", "enmesh-router has one log level; set it on DEFAULT"))
            del fields["enable"]
    output = fields.get("output_file")
    if output is not None and output != "stderr":
        warnings.append(("outputFile", "enmesh-router logs JSON lines to stderr"))
        del fields["output_file"]
    return warnings


def address(fields: dict[str, Any]) -> Warnings:
    _prefix_or_pattern(fields)
    phases = (fields.get("ingress_phase"), fields.get("egress_phase"))
    if phases == (None, None):
        return []
    if None in phases:
        missing = "egressPhase" if phases[1] is None else "ingressPhase"
        raise CheckError(missing, "ingressPhase and egressPhase are set together")
    if phases not in ((0, 1), (0, 0)):
        raise CheckUnsupportedError(
            "egressPhase",
            f"phases {phases[0]} -> {phases[1]}: only 0 -> 1 (a waypoint) and 0 -> 0 route",
        )
    fields["waypoint"] = phases == (0, 1)  # qdrouterd: phases override waypoint
    return []


def link_route(fields: dict[str, Any]) -> Warnings:
    _prefix_or_pattern(fields)
    _connection_or_container(fields, "linkRoute")
    return []


def auto_link(fields: dict[str, Any]) -> Warnings:
    _connection_or_container(fields, "autoLink")
    fields.setdefault("external_address", fields["address"])
    # Deliveries from the broker (in) continue in phase 1, so they are not sent back to it.
    fields.setdefault("phase", 1 if fields["direction"] == "in" else 0)
    return []
