"""The router's config loader: goldens, round trip against the compiler, every error."""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from enmesh.compile import load_stack
from enmesh.compile.auth import vhost_policy
from enmesh.compile.layout import Layout
from enmesh.compile.qdrouterd import Entity, render_entities
from enmesh.compile.router import address_entities, instance_entities
from enmesh.model import load_model
from enmesh.router.config import (
    Direction,
    Distribution,
    Mode,
    Role,
    RouterConfig,
    RouterConfigError,
    load_router_config,
    resolve_password,
)
from enmesh.router.policy import Vhost, VhostGroup, snake_case

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
LOCAL_STACK = ROOT / "stacks" / "local.stack.yml"
GOLDEN_CONFS = sorted(GOLDEN.glob("*/routers/*.conf"))

# The config file's field for each entity type the compiler writes.
FIELDS = {
    "router": "router",
    "sslProfile": "ssl_profiles",
    "listener": "listeners",
    "connector": "connectors",
    "policy": "policy",
    "address": "addresses",
    "linkRoute": "link_routes",
    "autoLink": "auto_links",
}


def relocate(conf: str, policies: Path) -> str:
    """Point policyDir at `policies`: the rendered path exists only on a deployed host."""
    return re.sub(r"(?m)^(\s*policyDir:).*$", rf"\1 {policies}", conf)


def deploy(tmp_path: Path, conf: str, policies: dict[str, str]) -> Path:
    """Write a router config and its policy files as a host would have them."""
    directory = tmp_path / "policies"
    directory.mkdir(exist_ok=True)
    for name, text in policies.items():
        (directory / name).write_text(text, encoding="utf-8")
    path = tmp_path / "router.conf"
    path.write_text(relocate(conf, directory), encoding="utf-8")
    return path


def load_text(tmp_path: Path, text: str) -> RouterConfig:
    path = tmp_path / "router.conf"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return load_router_config(path)


def golden_policies(conf: Path) -> dict[str, str]:
    directory = conf.parents[1] / "auth" / "policies"
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(directory.glob("*.json"))}


# --- goldens -------------------------------------------------------------------------


@pytest.mark.parametrize("conf", GOLDEN_CONFS, ids=lambda p: p.stem)
def test_every_golden_conf_parses(conf: Path, tmp_path: Path) -> None:
    text = conf.read_text(encoding="utf-8")
    config = load_router_config(deploy(tmp_path, text, golden_policies(conf)))
    assert config.router.id == conf.stem
    for entity_type, field in FIELDS.items():
        parsed = getattr(config, field)
        count = len(parsed) if isinstance(parsed, tuple) else 1
        assert count == len(re.findall(rf"(?m)^{entity_type} {{$", text)), entity_type
    # `<space>.json` per address space; `_default.json` is the administrator's `$default`
    assert [v.hostname for v in config.vhosts] == [
        p.removesuffix(".json").replace("_default", "$default") for p in golden_policies(conf)
    ]


def test_local_router_0_in_detail(tmp_path: Path) -> None:
    conf = GOLDEN / "local" / "routers" / "local-router-0.conf"
    config = load_router_config(
        deploy(tmp_path, conf.read_text(encoding="utf-8"), golden_policies(conf))
    )
    assert config.router.mode is Mode.INTERIOR
    assert config.router.sasl_config_dir == Path("/etc/enmesh/auth/sasl2")
    assert [(x.name, x.port, x.role) for x in config.listeners] == [
        ("amqp", 5672, Role.NORMAL),
        ("amqps", 5671, Role.NORMAL),
        ("inter-router", 55671, Role.INTER_ROUTER),
        ("metrics", 9090, Role.NORMAL),
    ]
    amqps = config.listeners[1]
    assert amqps.sasl_mechanisms == ("SCRAM-SHA-256", "PLAIN")
    assert amqps.require_ssl and amqps.multi_tenant and amqps.authenticate_peer
    assert config.ssl_profile("client-tls").cert_file == Path(
        "/var/lib/enmesh/tls/router-0-client.crt"
    )
    assert config.listeners[3].http and config.listeners[3].metrics
    assert not config.listeners[3].websockets
    # Router 0 is the one the others dial in a full mesh: its only connector is the broker.
    (broker,) = config.connectors
    assert (broker.name, broker.role, broker.port) == ("broker-0", Role.ROUTE_CONTAINER, 25671)
    assert broker.sasl_password == "file:/etc/enmesh/secrets/enmesh-broker-router/password"
    assert broker.verify_hostname
    assert config.connection("broker-0") is broker
    assert config.policy is not None
    assert config.policy.enable_vhost_policy
    # the tenants' plans, and the administrator's vhost
    assert config.policy.max_connections == 2000 + 10
    assert [a.prefix for a in config.addresses] == [
        "acme/orders",
        "acme/telemetry",
        "iot/broadcast",
        "iot/commands",
        "iot/dlq",
        "iot/events",
        "iot/readings",
        "iot/telemetry",
    ]
    assert {a.prefix: a.distribution for a in config.addresses}["iot/broadcast"] is (
        Distribution.MULTICAST
    )
    assert [a.prefix for a in config.addresses if a.waypoint] == [
        "acme/orders",
        "iot/commands",
        "iot/dlq",
        "iot/events",
        "iot/readings",
    ]
    assert {(r.prefix, r.direction, r.add_external_prefix) for r in config.link_routes} == {
        ("iot/alerts", Direction.OUT, "/exchange/iot.alerts/iot.alerts"),
        ("iot/alerts", Direction.IN, "/exchange/iot.alerts"),  # `#` is a value, not a comment
        ("iot/alerts::audit", Direction.IN, "/amq/queue/iot.audit"),
    }
    assert len(config.auto_links) == 9
    assert all(
        link.phase == (1 if link.direction is Direction.IN else 0) for link in config.auto_links
    )
    assert ("iot/dlq", Direction.OUT) not in {(a.address, a.direction) for a in config.auto_links}


def test_inter_router_connectors(tmp_path: Path) -> None:
    conf = GOLDEN / "local" / "routers" / "local-router-2.conf"
    config = load_router_config(
        deploy(tmp_path, conf.read_text(encoding="utf-8"), golden_policies(conf))
    )
    assert [(c.name, c.port, c.role) for c in config.connectors] == [
        ("broker-0", 25671, Role.ROUTE_CONTAINER),
        ("local-router-0", 55671, Role.INTER_ROUTER),
        ("local-router-1", 55681, Role.INTER_ROUTER),  # ports `stride` apart
    ]
    assert config.connectors[1].sasl_mechanisms == ("EXTERNAL",)
    assert config.connectors[1].ssl_profile == "inter-router-tls"


# --- round trip against the compiler -------------------------------------------------


@pytest.fixture(scope="module")
def layout() -> Layout:
    stack, model_files = load_stack(LOCAL_STACK)
    return Layout(stack, load_model(model_files))


def plain(value: Any) -> Any:
    """A parsed value in the compiler's terms (enums already compare equal to text)."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def policy_files(layout: Layout) -> dict[str, str]:
    return {f"{t.name}.json": json.dumps(vhost_policy(t)) for t in layout.standard_tenants}


def test_every_compiled_attribute_comes_back(layout: Layout, tmp_path: Path) -> None:
    for router in layout.routers:
        written = instance_entities(layout, router) + address_entities(layout)
        conf = render_entities(written)
        config = load_router_config(deploy(tmp_path, conf, policy_files(layout)))
        for entity_type, field in FIELDS.items():
            expected = sorted((e for e in written if e.type == entity_type), key=Entity.sort_key)
            parsed = getattr(config, field)
            parsed = parsed if isinstance(parsed, tuple) else (parsed,)
            assert len(parsed) == len(expected), entity_type
            for entity, value in zip(expected, parsed, strict=True):
                attributes = dict(entity.attributes)
                if entity_type == "policy":  # relocated for the test
                    attributes.pop("policyDir")
                for key, attribute in attributes.items():
                    assert plain(getattr(value, snake_case(key))) == attribute, (entity_type, key)


def test_vhost_policies_come_back(layout: Layout, tmp_path: Path) -> None:
    router = layout.routers[0]
    conf = render_entities(instance_entities(layout, router))
    config = load_router_config(deploy(tmp_path, conf, policy_files(layout)))
    for tenant in layout.standard_tenants:
        ((_, written),) = vhost_policy(tenant)
        vhost = config.vhost(tenant.name)
        assert vhost is not None
        assert vhost.max_connections == written["maxConnections"]
        assert vhost.allow_unknown_user == written["allowUnknownUser"]
        assert list(vhost.groups) == list(written["groups"])
        for name, group in written["groups"].items():
            parsed = vhost.groups[name]
            assert ", ".join(parsed.sources) == group["sources"]
            assert ", ".join(parsed.targets) == group["targets"]
            assert ", ".join(parsed.users) == group["users"]
    iot = config.vhost("iot")
    assert iot is not None
    device = iot.groups["device"]
    assert device.sources == ("broadcast", "commands")
    # `_dynamic.*`: replies to request/response clients' dynamic reply addresses.
    assert device.targets == ("events", "readings", "telemetry", "_dynamic.*")
    assert iot.group_for("device@iot") is device
    assert not device.allow_admin_status_update and device.allow_dynamic_source


def test_inline_vhost_as_the_compiler_writes_it(layout: Layout, tmp_path: Path) -> None:
    """A vhost entity in the conf: `groups` is multi-line JSON (qdrouterd.py `_value`)."""
    tenant = next(t for t in layout.standard_tenants if t.name == "iot")
    ((_, attributes),) = vhost_policy(tenant)
    conf = render_entities([Entity("router", {"id": "r0"}), Entity("vhost", attributes)])
    assert "    groups: {\n" in conf
    config = load_text(tmp_path, conf + "\naddress {\n    prefix: after/the/json\n}\n")
    (vhost,) = config.vhosts
    assert vhost.hostname == "iot" and vhost.max_connections == 1000
    assert vhost.groups["backend"].sources == (
        "alerts",
        "alerts::audit",
        "dlq",
        "events",
        "readings",
        "telemetry",
        "$management",
    )
    assert vhost.groups["backend"].allow_admin_status_update
    assert config.addresses[0].prefix == "after/the/json"


# --- the format and defaults ---------------------------------------------------------


def test_format_comments_booleans_and_defaults(tmp_path: Path) -> None:
    config = load_text(
        tmp_path,
        """\
        # leading comment

        router {
            # a comment inside a block
            id: r0

        }
        listener {
            port: 5672
            authenticatePeer: yes
            multiTenant: no
            saslMechanisms:   SCRAM-SHA-256   PLAIN
        }
        connector {
            name: peer
            port: 55671
        }
        address {
            pattern: iot/#
        }
        autoLink {
            address: iot/q
            direction: out
            connection: peer
        }
        autoLink {
            address: iot/q
            direction: in
            connection: peer
            externalAddress: q
            phase: 3
        }
        """,
    )
    assert config.router.mode is Mode.INTERIOR
    assert config.router.sasl_config_name == "qdrouterd"
    (listener,) = config.listeners
    assert listener.name is None and listener.host == "127.0.0.1" and listener.role is Role.NORMAL
    assert listener.authenticate_peer and not listener.multi_tenant
    assert listener.sasl_mechanisms == ("SCRAM-SHA-256", "PLAIN")
    assert listener.link_capacity == 250
    assert config.connectors[0].verify_hostname
    assert config.connectors[0].link_capacity == 250
    assert config.policy is None and config.vhosts == ()
    assert config.addresses[0].pattern == "iot/#" and config.addresses[0].prefix is None
    assert config.addresses[0].distribution is Distribution.BALANCED
    assert not config.addresses[0].waypoint
    out, into = config.auto_links
    assert (out.external_address, out.phase) == ("iot/q", 0)
    assert (into.external_address, into.phase) == ("q", 3)


# --- errors in the conf --------------------------------------------------------------

ROUTER = "router {\n    id: r0\n}\n"
MARK = " <--"


def error_of(tmp_path: Path, text: str) -> tuple[str, int, str]:
    """Load `text`; returns the error and the line marked with `<--` (1 if none)."""
    lines = textwrap.dedent(text).split("\n")
    marked = next((i + 1 for i, line in enumerate(lines) if line.endswith(MARK)), 1)
    path = tmp_path / "router.conf"
    path.write_text("\n".join(line.removesuffix(MARK) for line in lines), encoding="utf-8")
    with pytest.raises(RouterConfigError) as caught:
        load_router_config(path)
    return str(caught.value), marked, f"{path}:{marked}: "


CONF_ERRORS = {
    "unknown entity": (
        "routr { <--\n    id: r0\n}\n",
        "unknown entity 'routr'; expected one of: router, sslProfile, authServicePlugin, "
        "listener, connector, log, address, linkRoute, autoLink, exchange, binding, console, "
        "policy, vhost",
    ),
    "unknown attribute": (
        ROUTER + "listener {\n    name: amqp\n    prot: 5672 <--\n}\n",
        "listener 'amqp': unknown attribute 'prot'; expected one of: authenticatePeer, cost, "
        "failoverUrls, healthz, host, http, httpRootDir, idleTimeoutSeconds, "
        "initialHandshakeTimeoutSeconds, linkCapacity, maxFrameSize, maxSessionFrames, "
        "maxSessions, messageLoggingComponents, metrics, multiTenant, name, openProperties, "
        "policyVhost, port, requireEncryption, requireSsl, role, saslMechanisms, saslPlugin, "
        "socketAddressFamily, sslProfile, stripAnnotations, trustedCertsFile, websockets",
    ),
    "undefined sslProfile": (
        ROUTER + "listener {\n    name: amqps\n    port: 5671\n    sslProfile: nope <--\n}\n",
        "listener 'amqps': sslProfile 'nope' is not defined; expected an sslProfile: "
        "none are defined",
    ),
    "undefined sslProfile of a connector": (
        ROUTER + "sslProfile {\n    name: tls\n}\n"
        "connector {\n    name: b\n    port: 1\n    sslProfile: nope <--\n}\n",
        "connector 'b': sslProfile 'nope' is not defined; expected an sslProfile: tls",
    ),
    "port not a number": (
        ROUTER + "listener {\n    name: amqp\n    port: abc <--\n}\n",
        "listener 'amqp': port: expected an integer 1-65535, got 'abc'",
    ),
    "port out of range": (
        ROUTER + "listener {\n    port: 65536 <--\n}\n",
        "listener: port: expected an integer 1-65535, got '65536'",
    ),
    "port zero": (
        ROUTER + "listener {\n    port: 0 <--\n}\n",
        "port: expected an integer 1-65535, got '0'",
    ),
    "link capacity": (
        ROUTER + "listener {\n    port: 1\n    linkCapacity: 0 <--\n}\n",
        "listener: linkCapacity: expected an integer >= 1, got '0'",
    ),
    "negative phase": (
        ROUTER + "connector {\n    name: b\n    port: 1\n}\n"
        "autoLink {\n    address: a\n    direction: in\n    connection: b\n    phase: -1 <--\n}\n",
        "autoLink 'a': phase: expected an integer >= 0, got '-1'",
    ),
    "not a boolean": (
        ROUTER + "listener {\n    port: 1\n    multiTenant: maybe <--\n}\n",
        "listener: multiTenant: expected true or false, got 'maybe'",
    ),
    "bad role": (
        ROUTER + "listener {\n    port: 1\n    role: edge <--\n}\n",
        "listener: role: 'edge': recognised but not supported: edge routers",
    ),
    "bad mode": (
        "router {\n    id: r0\n    mode: edge <--\n}\n",
        "router 'r0': mode: 'edge': recognised but not supported: an edge router",
    ),
    "bad distribution": (
        ROUTER + "address {\n    prefix: a\n    distribution: random <--\n}\n",
        "address 'a': distribution: expected one of balanced, closest, multicast, unavailable, "
        "got 'random'",
    ),
    "missing router id": (
        "router { <--\n    mode: interior\n}\n",
        "router: missing required attribute 'id'",
    ),
    "missing listener port": (
        ROUTER + "listener { <--\n    name: amqp\n}\n",
        "listener 'amqp': missing required attribute 'port'",
    ),
    "missing connector port": (
        ROUTER + "connector { <--\n    name: b\n}\n",
        "connector 'b': missing required attribute 'port'",
    ),
    "missing linkRoute direction": (
        ROUTER + "linkRoute { <--\n    prefix: a\n    connection: b\n}\n",
        "linkRoute 'a': missing required attribute 'direction'",
    ),
    "duplicate attribute": (
        ROUTER + "listener {\n    port: 1\n    host: a\n    host: b <--\n}\n",
        "listener: duplicate attribute 'host'; first set at line 6",
    ),
    "unterminated at end of file": (
        ROUTER + "listener { <--\n    port: 1\n",
        "unterminated entity block: listener has no closing '}' before the end of the file",
    ),
    "unterminated before the next entity": (
        ROUTER + "listener { <--\n    name: amqp\n    port: 1\naddress {\n    prefix: a\n}\n",
        "unterminated entity block: listener 'amqp' has no closing '}' before line 7",
    ),
    "not an attribute": (
        ROUTER + "listener {\n    port 5672 <--\n}\n",
        "listener: expected 'attribute: value' or '}', got 'port 5672'",
    ),
    "no value": (
        ROUTER + "listener {\n    port: <--\n}\n",
        "listener: port: expected a value",
    ),
    "text outside a block": (
        ROUTER + "port: 5672 <--\n",
        "expected 'ENTITY {', got 'port: ...'",
    ),
    "stray closing brace": (
        ROUTER + "} <--\n",
        "expected 'ENTITY {', got '}'",
    ),
    "invalid JSON in groups": (
        ROUTER + 'vhost {\n    hostname: v\n    groups: {\n        "a": {\n'
        '            "sources": "x"\n            "targets": "y" <--\n        }\n    }\n}\n',
        "vhost 'v': groups: invalid JSON: Expecting ',' delimiter",
    ),
    "unterminated JSON": (
        ROUTER + 'vhost {\n    hostname: v\n    groups: {\n        "a": {} <--',
        "vhost 'v': groups: invalid JSON: Expecting ',' delimiter",
    ),
    "text after the JSON": (
        ROUTER + "vhost {\n    hostname: v\n    groups: {\n    } extra <--\n}\n",
        "vhost 'v': groups: unexpected text after the JSON object",
    ),
    "unknown key in an inline group": (
        ROUTER + 'vhost {\n    hostname: v\n    groups: {"a": {"sorces": "x"}} <--\n}\n',
        "vhost 'v': groups: group 'a': unknown key 'sorces'; expected one of: "
        "allowAdminStatusUpdate, allowAnonymousSender, allowDynamicSource, remoteHosts, "
        "sources, targets, users",
    ),
    "groups as text": (
        ROUTER + "vhost {\n    hostname: v\n    groups: none <--\n}\n",
        "vhost 'v': groups: expected a JSON object, got \"none\"",
    ),
    "JSON where text is expected": (
        ROUTER + 'listener {\n    port: 1\n    host: {"a": 1} <--\n}\n',
        "listener: host: expected text, got a JSON object",
    ),
    "a failover URL with a path": (
        ROUTER + "listener {\n    port: 1\n    failoverUrls: amqp://a:1, amqps://b:2/x <--\n}\n",
        "listener: 'amqps://b:2/x' is not a failover URL: expected "
        "[(amqp|amqps|ws|wss)://]host[:port]",
    ),
    "a failover URL with a port out of range": (
        ROUTER + "listener {\n    port: 1\n    failoverUrls: b:70000 <--\n}\n",
        "listener: 'b:70000' is not a failover URL",
    ),
    "requireSsl without sslProfile": (
        ROUTER + "listener {\n    port: 1\n    requireSsl: true <--\n}\n",
        "listener: requireSsl: true needs an sslProfile",
    ),
    "prefix and pattern": (
        ROUTER + "address {\n    prefix: a\n    pattern: b <--\n}\n",
        "address 'a': expected exactly one of 'prefix' and 'pattern'",
    ),
    "neither prefix nor pattern": (
        ROUTER + "address { <--\n    distribution: closest\n}\n",
        "address: expected exactly one of 'prefix' and 'pattern'",
    ),
    "undefined connection": (
        ROUTER + "listener {\n    name: amqp\n    port: 1\n}\n"
        "linkRoute {\n    prefix: a\n    direction: in\n    connection: broker <--\n}\n",
        "linkRoute 'a': connection 'broker' is not defined; expected a connector or listener: amqp",
    ),
    "bad direction": (
        ROUTER + "autoLink {\n    address: a\n    direction: sideways <--\n    connection: b\n}\n",
        "autoLink 'a': direction: expected one of in, out, got 'sideways'",
    ),
    "duplicate listener name": (
        ROUTER + "listener {\n    name: amqp\n    port: 1\n}\n"
        "listener {\n    name: amqp <--\n    port: 2\n}\n",
        "listener 'amqp': name 'amqp' is already used by the listener at line 4",
    ),
    "connector named like a listener": (
        ROUTER + "connector {\n    name: amqp\n    port: 1\n}\n"
        "listener {\n    name: x\n    port: 1\n}\n"
        "listener {\n    name: amqp <--\n    port: 2\n}\n",
        "listener 'amqp': name 'amqp' is already used by the connector at line 4",
    ),
    "duplicate sslProfile": (
        ROUTER + "sslProfile {\n    name: tls\n}\nsslProfile {\n    name: tls <--\n}\n",
        "sslProfile 'tls': name 'tls' is already used by the sslProfile at line 4",
    ),
    "second router": (
        ROUTER + "router { <--\n    id: r1\n}\n",
        "a second router entity; expected one, the first is at line 1",
    ),
    "no router": (
        "address {\n    prefix: a\n}\n",
        "no router entity; expected exactly one",
    ),
    "second policy": (
        ROUTER + "policy {\n    maxConnections: 1\n}\npolicy { <--\n    maxConnections: 2\n}\n",
        "a second policy entity; expected one, the first is at line 4",
    ),
    "policyDir missing": (
        ROUTER
        + "policy {\n    enableVhostPolicy: true\n    policyDir: /nonexistent/enmesh <--\n}\n",
        "policy: policyDir: '/nonexistent/enmesh' is not a directory",
    ),
}


@pytest.mark.parametrize("case", sorted(CONF_ERRORS))
def test_conf_errors(case: str, tmp_path: Path) -> None:
    text, phrase = CONF_ERRORS[case]
    message, _, prefix = error_of(tmp_path, text)
    assert message.startswith(prefix), message
    assert phrase in message, message


def test_a_bad_line_never_echoes_a_value(tmp_path: Path) -> None:
    message, _, prefix = error_of(tmp_path, ROUTER + "saslPassword: pass:hunter2 <--\n")
    assert message.startswith(prefix)
    assert "hunter2" not in message


def test_unreadable_conf(tmp_path: Path) -> None:
    with pytest.raises(RouterConfigError, match=r"missing\.conf: cannot read: No such file"):
        load_router_config(tmp_path / "missing.conf")


# --- errors in policy files ----------------------------------------------------------

VHOST = {"hostname": "iot", "groups": {"device": {"users": "device@iot", "sources": "a"}}}


def with_policies(tmp_path: Path, policies: dict[str, str], inline: str = "") -> RouterConfig:
    conf = ROUTER + "policy {\n    policyDir: PLACEHOLDER\n}\n" + inline
    return load_router_config(deploy(tmp_path, conf, policies))


def policy_error(tmp_path: Path, policies: dict[str, str], inline: str = "") -> str:
    with pytest.raises(RouterConfigError) as caught:
        with_policies(tmp_path, policies, inline)
    return str(caught.value)


def vhost_file(vhost: object) -> str:
    return json.dumps([["vhost", vhost]], indent=2)


def test_policy_files_load_in_name_order(tmp_path: Path) -> None:
    config = with_policies(
        tmp_path,
        {
            "b.json": vhost_file({"hostname": "b"}),
            "a.json": vhost_file({"hostname": "a", "maxConnections": 5}),
            "notes.txt": "not a policy",
        },
    )
    assert [(v.hostname, v.max_connections) for v in config.vhosts] == [("a", 5), ("b", 65535)]


POLICY_ERRORS = {
    "invalid JSON": (
        '[\n  ["vhost", {\n    "hostname": "iot",\n  }]\n]\n',
        ":4: invalid JSON: Expecting property name enclosed in double quotes",
    ),
    "unknown group key": (
        vhost_file({"hostname": "iot", "groups": {"device": {"sorces": "a"}}}),
        ": vhost 'iot': groups: group 'device': unknown key 'sorces'; expected one of: "
        "allowAdminStatusUpdate, allowAnonymousSender",
    ),
    "unknown vhost key": (
        vhost_file({"hostname": "iot", "maxConnection": 5}),
        ": vhost 'iot': unknown key 'maxConnection'; expected one of: allowUnknownUser, groups, "
        "hostname, maxConnections",
    ),
    "wrong type": (
        vhost_file({"hostname": "iot", "maxConnections": "5"}),
        ": vhost 'iot': maxConnections: expected an integer >= 0, got \"5\"",
    ),
    "boolean as a number": (
        vhost_file({"hostname": "iot", "groups": {"g": {"allowDynamicSource": 1}}}),
        ": vhost 'iot': groups: group 'g': allowDynamicSource: expected true or false, got 1",
    ),
    "users as a list": (
        vhost_file({"hostname": "iot", "groups": {"g": {"users": ["a"]}}}),
        ": vhost 'iot': groups: group 'g': users: expected a comma-separated string, "
        "got a JSON array",
    ),
    "missing hostname": (
        vhost_file({"maxConnections": 5}),
        ": entry 1 (vhost): missing required key 'hostname'",
    ),
    "not a list": (
        json.dumps({"hostname": "iot"}),
        ': expected a JSON array of ["vhost", {...}], got a JSON object',
    ),
    "not a pair": (
        json.dumps([VHOST]),
        ': entry 1: expected ["vhost", {...}], got a JSON object',
    ),
    "not a vhost": (
        json.dumps([["vhots", VHOST]]),
        ': entry 1: unknown entity "vhots"; expected "vhost"',
    ),
    "user in two groups": (
        vhost_file({"hostname": "iot", "groups": {"a": {"users": "u, v"}, "b": {"users": "v"}}}),
        ": vhost 'iot': groups: group 'b': user 'v' is already in group 'a'",
    ),
}


@pytest.mark.parametrize("case", sorted(POLICY_ERRORS))
def test_policy_file_errors(case: str, tmp_path: Path) -> None:
    text, phrase = POLICY_ERRORS[case]
    message = policy_error(tmp_path, {"iot.json": text})
    assert message.startswith(f"{tmp_path / 'policies' / 'iot.json'}{phrase}"), message


def test_hostnames_are_unique_across_files_and_inline(tmp_path: Path) -> None:
    files = {"a.json": vhost_file({"hostname": "iot"}), "b.json": vhost_file({"hostname": "iot"})}
    message = policy_error(tmp_path, files)
    directory = tmp_path / "policies"
    assert (
        message
        == f"{directory / 'b.json'}: vhost 'iot' is already defined at {directory / 'a.json'}"
    )
    inline = "vhost {\n    hostname: iot\n}\n"
    message = policy_error(tmp_path, {"a.json": vhost_file({"hostname": "iot"})}, inline)
    assert message == (
        f"{directory / 'a.json'}: vhost 'iot' is already defined at {tmp_path / 'router.conf'}:7"
    )


# --- vhost semantics -----------------------------------------------------------------


def test_group_for_prefers_the_users_group_then_default() -> None:
    device = VhostGroup(name="device", users=("device@iot", "other@iot"))
    fallback = VhostGroup(name="$default", sources=("*",))
    vhost = Vhost(hostname="iot", groups={"device": device, "$default": fallback})
    assert vhost.group_for("device@iot") is device
    assert vhost.group_for("other@iot") is device
    assert vhost.group_for("stranger@iot") is fallback
    assert Vhost(hostname="iot", groups={"device": device}).group_for("stranger@iot") is None
    assert Vhost(hostname="empty").group_for("anyone") is None


def test_users_are_comma_separated_and_stripped(tmp_path: Path) -> None:
    group = {"users": " a@iot ,b@iot,, c@iot ", "sources": "x, y*", "remoteHosts": "*"}
    config = with_policies(
        tmp_path, {"iot.json": vhost_file({"hostname": "iot", "groups": {"g": group}})}
    )
    (vhost,) = config.vhosts
    parsed = vhost.groups["g"]
    assert parsed.users == ("a@iot", "b@iot", "c@iot")
    assert parsed.sources == ("x", "y*") and parsed.targets == ()
    assert parsed.remote_hosts == ("*",)
    assert vhost.group_for("c@iot") is parsed


@pytest.mark.parametrize(
    ("patterns", "address", "allowed"),
    [
        (("telemetry",), "telemetry", True),
        (("telemetry",), "telemetry2", False),
        (("telemetry",), "tele", False),
        (("tele*",), "telemetry", True),
        (("tele*",), "tele", True),
        (("tele*",), "tel", False),
        (("*",), "anything/at/all", True),
        (("a", "b*"), "bee", True),
        ((), "a", False),
        (("$management",), "$management", True),
    ],
)
def test_allowed_sources_and_targets(
    patterns: tuple[str, ...], address: str, allowed: bool
) -> None:
    group = VhostGroup(name="g", sources=patterns, targets=patterns)
    assert group.allows_source(address) is allowed
    assert group.allows_target(address) is allowed
    assert not VhostGroup(name="g", targets=patterns).allows_source(address)


# --- passwords -----------------------------------------------------------------------


def test_password_from_file(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret word\n", encoding="utf-8")
    assert resolve_password(f"file:{secret}") == "s3cret word"


def test_password_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENMESH_TEST_PASSWORD", "s3cret")
    assert resolve_password("env:ENMESH_TEST_PASSWORD") == "s3cret"


def test_password_literal() -> None:
    assert resolve_password("pass:s3cret:with:colons") == "s3cret:with:colons"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("file:{tmp}/absent", "password file:{tmp}/absent: cannot read: No such file or directory"),
        ("file:{tmp}/binary", "password file:{tmp}/binary: cannot read: not UTF-8 text"),
        ("file:{tmp}/empty", "password file:{tmp}/empty: the password is empty"),
        (
            "env:ENMESH_TEST_UNSET",
            "password env:ENMESH_TEST_UNSET: environment variable 'ENMESH_TEST_UNSET' is not set",
        ),
        ("pass:", "password pass:...: the password is empty"),
        (
            "hunter2",
            "password: expected file:PATH, env:NAME or pass:LITERAL (the value is not shown)",
        ),
        ("secret:hunter2", "password: expected file:PATH, env:NAME or pass:LITERAL"),
    ],
)
def test_password_errors(
    value: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENMESH_TEST_UNSET", raising=False)
    (tmp_path / "binary").write_bytes(b"hunter2\xff\n")
    (tmp_path / "empty").write_text("\n", encoding="utf-8")
    with pytest.raises(RouterConfigError) as caught:
        resolve_password(value.format(tmp=tmp_path))
    assert str(caught.value).startswith(message.format(tmp=tmp_path))
    assert "hunter2" not in str(caught.value)


def test_golden_policy_dir_copied_as_deployed(tmp_path: Path) -> None:
    """The other way to relocate: copy the rendered auth/policies directory itself."""
    shutil.copytree(GOLDEN / "multi" / "auth" / "policies", tmp_path / "policies")
    conf = (GOLDEN / "multi" / "routers" / "multi-router-0.conf").read_text(encoding="utf-8")
    path = tmp_path / "router.conf"
    path.write_text(relocate(conf, tmp_path / "policies"), encoding="utf-8")
    public = load_router_config(path).vhost("public")
    assert public is not None and public.allow_unknown_user
    fallback = public.group_for("anyone")
    assert fallback is not None and fallback.name == "$default"
    assert fallback.allows_source("anything") and fallback.allows_target("anything")
    # May send anywhere, so also on an anonymous-relay link (each `to` still checked).
    assert fallback.allow_anonymous_sender
