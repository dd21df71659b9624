"""Every entity and attribute of qdrouterd 1.19's configuration: implemented, ignored with
exactly one warning, or refused as recognised but not supported; nothing silently accepted.

The list of qdrouterd's names is committed (enmesh/compile/engines/qdrouterd-1.19-config-names.json,
names only), so this test needs no qdrouterd checkout.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from enmesh.router.config import RouterConfig, RouterConfigError, load_router_config
from enmesh.router.config_schema import SCHEMA, Attribute, Disposition, EntityType

ENGINES = Path(__file__).resolve().parents[2] / "enmesh" / "compile" / "engines"
NAMES = json.loads((ENGINES / "qdrouterd-1.19-config-names.json").read_text(encoding="utf-8"))[
    "entities"
]
# Recognised beyond qdrouterd's settable names: console's (it refuses them itself) and
# group keys qdrouterd's policy reads though its schema marks them read-only.
EXTRA = {
    "console": {"args", "listener", "wsport"},
    "vhostUserGroupSettings": {"maxConnectionsPerHost", "maxConnectionsPerUser", "maxMessageSize"},
}
UNSUPPORTED = "recognised but not supported"

BASE = "sslProfile {\n    name: tls\n}\nconnector {\n    name: broker\n    port: 1\n}\n"
MINIMAL: dict[str, dict[str, str]] = {
    "router": {"id": "r0"},
    "sslProfile": {"name": "p2"},
    "listener": {"port": "5672"},
    "connector": {"name": "c2", "port": "5672"},
    "log": {"module": "DEFAULT"},
    "address": {"prefix": "a"},
    "linkRoute": {"prefix": "a", "direction": "in", "connection": "broker"},
    "autoLink": {"address": "a", "direction": "in", "connection": "broker"},
    "policy": {},
    "vhost": {"hostname": "v"},
    "authServicePlugin": {"name": "auth-min"},
}
# A value each implemented attribute takes that differs from what it replaces, and the
# attributes it needs beside it (None: drop that attribute).
SAMPLES: dict[tuple[str, str], tuple[str, dict[str, str | None]]] = {
    ("router", "id"): ("r1", {}),
    ("router", "mode"): ("standalone", {}),
    ("router", "defaultDistribution"): ("closest", {}),
    ("sslProfile", "name"): ("p3", {}),
    ("sslProfile", "ciphers"): ("ECDHE-RSA-AES128-GCM-SHA256", {}),
    ("sslProfile", "protocols"): ("TLSv1.3", {}),
    ("listener", "port"): ("5673", {}),
    ("listener", "maxSessions"): ("100", {}),
    ("connector", "maxSessions"): ("100", {}),
    ("listener", "stripAnnotations"): ("in", {}),
    ("connector", "stripAnnotations"): ("no", {}),
    ("policy", "policyDir"): ("{tmp}", {}),  # an empty directory
    ("listener", "role"): ("route-container", {}),
    ("listener", "sslProfile"): ("tls", {}),
    ("listener", "requireSsl"): ("true", {"sslProfile": "tls"}),
    ("listener", "http"): ("true", {"websockets": "false"}),
    ("connector", "name"): ("c3", {}),
    ("connector", "port"): ("5673", {}),
    ("connector", "role"): ("route-container", {}),
    ("connector", "sslProfile"): ("tls", {}),
    ("log", "module"): ("ROUTER", {}),
    ("log", "enable"): ("debug+", {}),
    ("log", "outputFile"): ("stderr", {}),
    ("address", "prefix"): ("b", {}),
    ("address", "pattern"): ("b/#", {"prefix": None}),
    ("address", "distribution"): ("multicast", {}),
    ("address", "ingressPhase"): ("0", {"egressPhase": "1"}),
    ("address", "egressPhase"): ("1", {"ingressPhase": "0"}),
    ("linkRoute", "prefix"): ("b", {}),
    ("linkRoute", "pattern"): ("b/#", {"prefix": None}),
    ("linkRoute", "direction"): ("out", {}),
    ("linkRoute", "connection"): ("broker2", {}),
    ("linkRoute", "containerId"): ("rabbit", {"connection": None}),
    ("autoLink", "address"): ("b", {}),
    ("autoLink", "direction"): ("out", {}),
    ("autoLink", "connection"): ("broker2", {}),
    ("autoLink", "containerId"): ("rabbit", {"connection": None}),
    ("vhost", "hostname"): ("w", {}),
    ("vhost", "groups"): ('{"g": {"users": "u"}}', {}),
    ("authServicePlugin", "name"): ("auth2", {}),
    ("authServicePlugin", "port"): ("5673", {}),
    ("authServicePlugin", "sslProfile"): ("tls", {}),
    ("listener", "saslPlugin"): ("auth", {}),
}
# Implemented for qdrouterd's default only, refused otherwise, per value.
VALUE_REFUSED = {
    ("router", "mode"): "edge",
    ("listener", "role"): "edge",
    ("connector", "role"): "edge",
}
EXTRA_BLOCKS = (
    "connector {\n    name: broker2\n    port: 2\n}\nauthServicePlugin {\n    name: auth\n}\n"
)


def sample(kind: EntityType, attribute: Attribute) -> tuple[str, dict[str, str | None]]:
    found = SAMPLES.get((kind.name, attribute.name))
    if found is not None:
        return found
    if attribute.type == "boolean":
        return ("false" if attribute.default == "true" else "true"), {}
    if attribute.type == "integer":
        return str(int(attribute.default or "0") + 100), {}
    if attribute.type.startswith("enum"):
        values = attribute.type[attribute.type.index("(") + 1 : -1].split("|")
        return next((x for x in values if x != attribute.default), values[0]), {}
    if attribute.type in ("map", "properties"):
        return '{"k": "v"}', {}
    return "/tmp/x" if attribute.type == "path" else "other", {}


def render(kind: str, attributes: dict[str, str]) -> str:
    body = "".join(f"    {key}: {value}\n" for key, value in attributes.items())
    router = {"id": "r0"} if kind != "router" else attributes
    head = "router {\n" + "".join(f"    {k}: {v}\n" for k, v in router.items()) + "}\n"
    return head + BASE + EXTRA_BLOCKS + ("" if kind == "router" else f"{kind} {{\n{body}}}\n")


def load(tmp_path: Path, kind: str, attributes: dict[str, str]) -> RouterConfig:
    path = tmp_path / "router.conf"
    (tmp_path / "empty").mkdir(exist_ok=True)
    text = render(kind, attributes).replace("{tmp}", str(tmp_path / "empty"))
    path.write_text(text, encoding="utf-8")
    return load_router_config(path)


def with_attribute(kind: str, name: str, value: str, more: dict[str, str | None]) -> dict[str, str]:
    attributes = dict(MINIMAL.get(kind, {}))
    for key, extra in more.items():
        if extra is None:
            attributes.pop(key, None)
        else:
            attributes[key] = extra
    attributes[name] = value
    return attributes


def config_entities(config: RouterConfig) -> Any:
    return replace(config, warnings=())


CASES = [
    (kind, attribute)
    for kind in SCHEMA.values()
    if kind.in_config_file
    for attribute in kind.attributes
]


def test_every_qdrouterd_name_is_described() -> None:
    assert set(NAMES) == set(SCHEMA)
    for kind, names in NAMES.items():
        ours = {n for a in SCHEMA[kind].attributes for n in (a.name, *a.aliases)}
        qdrouterd = set(names) - ({"name"} if kind == "vhostUserGroupSettings" else set())
        assert ours - qdrouterd == EXTRA.get(kind, set()), kind
        assert qdrouterd <= ours, kind


@pytest.mark.parametrize(("kind", "attribute"), CASES, ids=[f"{k.name}.{a.name}" for k, a in CASES])
def test_attribute(kind: EntityType, attribute: Attribute, tmp_path: Path) -> None:
    value, more = sample(kind, attribute)
    attributes = with_attribute(kind.name, attribute.name, value, more)
    if kind.build is None or attribute.disposition is Disposition.REFUSED:
        with pytest.raises(RouterConfigError, match=UNSUPPORTED) as caught:
            load(tmp_path, kind.name, attributes)
        assert str(caught.value).startswith(f"{tmp_path / 'router.conf'}:")
        return
    baseline = load(tmp_path, kind.name, MINIMAL[kind.name])
    if attribute.disposition is Disposition.DEFAULT_ONLY:
        assert attribute.default is not None
        at_default = load(
            tmp_path, kind.name, with_attribute(kind.name, attribute.name, attribute.default, {})
        )
        assert at_default.warnings == ()
        if value != attribute.default:  # (linkRoute distribution has one value only)
            with pytest.raises(RouterConfigError, match=UNSUPPORTED):
                load(tmp_path, kind.name, attributes)
        return
    config = load(tmp_path, kind.name, attributes)
    if attribute.disposition is Disposition.IGNORED:
        (warning,) = config.warnings
        assert f": {attribute.name}: ignored: " in warning
        assert config_entities(config) == config_entities(baseline)
        return
    refused = VALUE_REFUSED.get((kind.name, attribute.name))
    if refused is not None:
        bad = with_attribute(kind.name, attribute.name, refused, {})
        with pytest.raises(RouterConfigError, match=UNSUPPORTED):
            load(tmp_path, kind.name, bad)
    assert config.warnings == ()
    assert config_entities(config) != config_entities(baseline), "value not recorded"


def test_a_whole_users_config(tmp_path: Path) -> None:
    """The settings issue 19 lists, as a qdrouterd user writes them, with comments."""
    text = """\
router {
    id: r0   # trailing comments, as qdrouterd reads them
    mode: interior
    debugDumpFile: /tmp/qdrouterd.dump
    workerThreads: 8
    helloInterval: 2
    raInterval: 20
    remoteLsMaxAge: 90
    allowUnsettledMulticast: no
    defaultDistribution: closest
}
log {
    module: DEFAULT
    enable: info+
    outputFile: /var/log/qdrouterd.log
}
listener {
    host: 0.0.0.0
    port: amqp
    idleTimeoutSeconds: 30
    maxFrameSize: 65536
    stripAnnotations: both
}
connector {
    host: broker.example
    port: 5671
    role: route-container
    idleTimeoutSeconds: 0
}
address {
    prefix: q
    ingressPhase: 0
    egressPhase: 1
}
address {
    prefix: gone
    distribution: unavailable
}
autoLink {
    address: q
    direction: in
    containerId: rabbit
}
linkRoute {
    pattern: t/#
    direction: out
    containerId: rabbit
}
"""
    path = tmp_path / "router.conf"
    path.write_text(text, encoding="utf-8")
    config = load_router_config(path)
    assert config.router.default_distribution == "closest"
    (connector,) = config.connectors
    assert connector.name == "connector/broker.example:5671"
    assert connector.idle_timeout_seconds == 0
    (listener,) = config.listeners
    assert (listener.port, listener.idle_timeout_seconds, listener.max_frame_size) == (
        5672,
        30,
        65536,
    )
    assert config.addresses[0].waypoint and config.addresses[1].distribution == "unavailable"
    assert config.auto_links[0].container_id == "rabbit" and config.auto_links[0].connection is None
    assert config.link_routes[0].pattern == "t/#"
    assert config.logs[0].enable == "info+"
    ignored = [w.split(": ", 2)[2] for w in config.warnings]
    assert [w.split(":")[0] for w in ignored] == [
        "debugDumpFile",
        "workerThreads",
        "helloInterval",
        "raInterval",
        "remoteLsMaxAge",
        "allowUnsettledMulticast",  # deprecated in qdrouterd 1.19, read nowhere there
        "outputFile",
    ]


def test_policy_files_skip_comment_lines(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "iot.json").write_text(
        '# vhost for the iot space\n  # indented too\n[["vhost", {"hostname": "iot"}]]\n',
        encoding="utf-8",
    )
    path = tmp_path / "router.conf"
    path.write_text(f"router {{\n    id: r0\n}}\npolicy {{\n    policyDir: {policies}\n}}\n")
    assert [v.hostname for v in load_router_config(path).vhosts] == ["iot"]
