"""qdrouterd 1.19's configuration entities as enmesh-router reads them: the one table.

Every entity and attribute a qdrouterd 1.19 config can set is listed with its type,
qdrouterd's default and what enmesh-router does with it:

- implemented: it takes effect (or, for `default only`, qdrouterd's default is what
  enmesh-router does, and any other value is refused);
- ignored: accepted with one warning line, because ignoring it changes nothing a client
  sees (logging, thread counts, qdrouterd's own mesh-protocol timers);
- refused: start-up fails with `recognised but not supported: <what would change>`.

The loader (`config.py`), management's GET-TYPES / GET-ATTRIBUTES and the generated
reference (`docs/router-config.md`, `python -m enmesh.router.config_doc`) read this table.
Written from qdrouterd's documented schema; the names are checked against it by
tests/unit/test_router_config_schema.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from enmesh.router import config_checks as checks
from enmesh.router import config_values as v
from enmesh.router.config_model import (
    Address,
    AutoLink,
    Direction,
    Distribution,
    LinkRoute,
    Log,
    Policy,
)
from enmesh.router.config_schema_base import (
    IGNORE,
    IMPL,
    INT,
    NAME,
    ONLY_DEFAULT,
    REFUSE,
    Attribute,
    Disposition,
    EntityType,
    ignored_name,
)
from enmesh.router.config_schema_base import attr as _a
from enmesh.router.config_schema_connections import (
    AUTH_SERVICE_PLUGIN,
    CONNECTOR,
    LISTENER,
    ROUTER,
    SSL_PROFILE,
)
from enmesh.router.policy import GROUP_NOT_IMPLEMENTED, VHOST_NOT_IMPLEMENTED, Vhost, parse_groups

__all__ = ["CONFIG_FILE_ENTITIES", "SCHEMA", "Attribute", "Disposition", "EntityType"]

_LOG_MODULES = (
    *("ROUTER", "ROUTER_CORE", "ROUTER_HELLO", "ROUTER_LS", "ROUTER_MA", "MESSAGE", "SERVER"),
    *("AGENT", "AUTHSERVICE", "CONTAINER", "ERROR", "POLICY", "HTTP", "CONN_MGR", "PYTHON"),
    *("PROTOCOL", "DEFAULT"),
)

LOG = EntityType(
    "log",
    "org.apache.qpid.dispatch.log",
    (
        ignored_name("log module"),
        _a(
            "module",
            f"enum ({'|'.join(_LOG_MODULES)})",
            IMPL,
            "which module's settings",
            convert=v.one_of(*_LOG_MODULES),
        ),
        _a(
            "enable",
            "string",
            IMPL,
            "DEFAULT's level (`info+`, `debug+`, `none`, ...) sets the "
            "router's log level; other modules warn (one logger level for all)",
        ),
        _a(
            "includeTimestamp",
            "boolean",
            IGNORE,
            "JSON log lines always carry the time",
            aliases=("timestamp",),
        ),
        _a(
            "includeSource",
            "boolean",
            IGNORE,
            "JSON log lines name the logger, not the source",
            aliases=("source",),
        ),
        _a(
            "outputFile",
            "string",
            IMPL,
            "stderr; other destinations warn (logs go to stderr)",
            aliases=("output",),
        ),
    ),
    Log,
    "logging of one module",
    required=("module",),
    check=checks.log,
)

POLICY = EntityType(
    "policy",
    "org.apache.qpid.dispatch.policy",
    (
        ignored_name("policy"),
        _a("maxConnections", "integer", IMPL, "connections to the router", default="65535"),
        _a(
            "maxMessageSize",
            "integer",
            ONLY_DEFAULT,
            "other values would reject larger messages",
            default="0",
        ),
        _a("enableVhostPolicy", "boolean", IMPL, "apply vhost policies", default="false"),
        _a(
            "enableVhostNamePatterns",
            "boolean",
            ONLY_DEFAULT,
            "true would match hostnames against vhost name patterns",
            default="false",
        ),
        _a("policyDir", "path", IMPL, "directory of vhost policy JSON files"),
        _a(
            "defaultVhost",
            "string",
            ONLY_DEFAULT,
            "another name would admit clients naming an unknown vhost under that vhost's policy",
            default="$default",
        ),
    ),
    Policy,
    "global connection limits and vhost policy",
    singleton=True,
)


def _policy_attributes(
    implemented: Mapping[str, tuple[str, str]],
    not_implemented: Mapping[str, tuple[str, str | None, str]],
) -> tuple[Attribute, ...]:
    """Rows for the JSON keys `enmesh.router.policy` reads (implemented) or refuses."""
    # `id` is qdrouterd's deprecated name for a vhost's hostname.
    rows = [
        _a(key, kind, IMPL, note, aliases=("id",) if key == "hostname" else ())
        for key, (kind, note) in implemented.items()
    ]
    rows += [
        _a(key, kind, ONLY_DEFAULT if default is not None else REFUSE, why, default=default)
        for key, (kind, default, why) in not_implemented.items()
    ]
    return tuple(rows)


VHOST = EntityType(
    "vhost",
    "org.apache.qpid.dispatch.vhost",
    (
        ignored_name("vhost"),
        *_policy_attributes(
            {
                "hostname": ("string", "the AMQP hostname clients name (deprecated: id)"),
                "maxConnections": ("integer", "connections to the vhost"),
                "allowUnknownUser": ("boolean", "users in no group get $default"),
            },
            VHOST_NOT_IMPLEMENTED,
        ),
        _a("groups", "map", IMPL, "user groups (vhostUserGroupSettings)", convert=parse_groups),
    ),
    Vhost,
    "the policy of one address space (inline or in policyDir/*.json)",
    required=("hostname",),
)
VHOST_GROUP = EntityType(
    "vhostUserGroupSettings",
    "org.apache.qpid.dispatch.vhostUserGroupSettings",
    _policy_attributes(
        {
            "users": ("string", "members, comma separated"),
            "remoteHosts": (
                "string",
                "`*` only: other values would admit members from these hosts only",
            ),
            "sources": ("string", "addresses members may receive from (`x*` patterns)"),
            "targets": ("string", "addresses members may send to"),
            "allowAnonymousSender": ("boolean", "anonymous-relay senders"),
            "allowDynamicSource": ("boolean", "dynamic (temporary) receivers"),
            "allowAdminStatusUpdate": ("boolean", "recorded (management is read-only)"),
        },
        GROUP_NOT_IMPLEMENTED,
    ),
    None,
    "a group inside a vhost's `groups` JSON, keyed by group name",
    in_config_file=False,
)

_PHASE = v.integer(0, 9)

ADDRESS = EntityType(
    "address",
    "org.apache.qpid.dispatch.router.config.address",
    (
        NAME,
        _a(
            "prefix",
            "string",
            IMPL,
            "addresses starting with this (exactly one of prefix, pattern)",
        ),
        _a("pattern", "string", IMPL, "addresses matching this (`*` a word, `#` any words)"),
        _a(
            "distribution",
            "enum (multicast|closest|balanced|unavailable)",
            IMPL,
            "how deliveries spread over consumers",
            default="balanced",
            convert=v.choice(Distribution),
        ),
        _a("waypoint", "boolean", IMPL, "phase 0 to the broker, phase 1 back out", default="false"),
        _a(
            "ingressPhase",
            "integer",
            IMPL,
            "with egressPhase: 0 and 1 is a waypoint, 0 and 0 not",
            convert=_PHASE,
        ),
        _a("egressPhase", "integer", IMPL, "see ingressPhase", convert=_PHASE),
        _a(
            "priority",
            "integer",
            REFUSE,
            "would order this address's deliveries on inter-router links by priority",
        ),
        _a(
            "enableFallback",
            "boolean",
            ONLY_DEFAULT,
            "true would send to a fallback destination when no consumer is reachable",
            default="false",
        ),
    ),
    Address,
    "distribution and phases of matching addresses",
    check=checks.address,
)

_CONTAINER = "the broker whose open frame carries this container-id (instead of connection)"

LINK_ROUTE = EntityType(
    "linkRoute",
    "org.apache.qpid.dispatch.router.config.linkRoute",
    (
        NAME,
        _a("prefix", "string", IMPL, "link addresses starting with this"),
        _a("pattern", "string", IMPL, "link addresses matching this"),
        _a("addExternalPrefix", "string", IMPL, "prefix added for the broker"),
        _a("delExternalPrefix", "string", IMPL, "prefix removed for the broker"),
        _a("containerId", "string", IMPL, _CONTAINER),
        _a("connection", "string", IMPL, "the connector or listener of the broker"),
        _a(
            "distribution",
            "enum (linkBalanced)",
            ONLY_DEFAULT,
            "the only value",
            default="linkBalanced",
            convert=v.one_of("linkBalanced"),
        ),
        _a(
            "direction",
            "enum (in|out)",
            IMPL,
            "in: clients receive; out: clients send",
            convert=v.choice(Direction),
            aliases=("dir",),
        ),
    ),
    LinkRoute,
    "links to matching addresses attach through to a broker",
    required=("direction",),
    check=checks.link_route,
)

AUTO_LINK = EntityType(
    "autoLink",
    "org.apache.qpid.dispatch.router.config.autoLink",
    (
        NAME,
        _a("address", "string", IMPL, "the address the link serves", aliases=("addr",)),
        _a(
            "direction",
            "enum (in|out)",
            IMPL,
            "out: to the broker; in: from it",
            convert=v.choice(Direction),
            aliases=("dir",),
        ),
        _a("phase", "integer", IMPL, "address phase (default: 0 out, 1 in)", convert=INT),
        _a("containerId", "string", IMPL, _CONTAINER),
        _a("connection", "string", IMPL, "the connector or listener of the broker"),
        _a(
            "externalAddress",
            "string",
            IMPL,
            "the broker's name for the address",
            aliases=("externalAddr",),
        ),
        _a(
            "fallback",
            "boolean",
            ONLY_DEFAULT,
            "true would make this a fallback destination",
            default="false",
        ),
    ),
    AutoLink,
    "a link the router keeps attached to a broker",
    required=("address", "direction"),
    check=checks.auto_link,
)


def _refused(name: str, long_name: str, note: str, attributes: str) -> EntityType:
    """An entity enmesh-router refuses outright; its attributes are still recognised."""
    rows = tuple(
        _a(key, "string", REFUSE, "part of a refused entity") for key in attributes.split()
    )
    return EntityType(name, long_name, rows, None, note)


_PREFIX = "org.apache.qpid.dispatch."
ENTITY_TYPES: tuple[EntityType, ...] = (
    ROUTER,
    SSL_PROFILE,
    AUTH_SERVICE_PLUGIN,
    LISTENER,
    CONNECTOR,
    LOG,
    ADDRESS,
    LINK_ROUTE,
    AUTO_LINK,
    _refused(
        "exchange",
        _PREFIX + "router.config.exchange",
        "would route messages by subject through bindings; enmesh-router has no exchanges",
        "name address phase alternateAddress alternatePhase matchMethod",
    ),
    _refused(
        "binding",
        _PREFIX + "router.config.binding",
        "belongs to an exchange (refused)",
        "name exchangeName bindingKey nextHopAddress nextHopPhase",
    ),
    _refused(
        "console",
        _PREFIX + "console",
        "qdrouterd's deprecated web console proxy",
        "name listener wsport proxy home args",
    ),
    POLICY,
    VHOST,
    VHOST_GROUP,
)
SCHEMA: dict[str, EntityType] = {e.name: e for e in ENTITY_TYPES}
CONFIG_FILE_ENTITIES = tuple(e.name for e in ENTITY_TYPES if e.in_config_file)
