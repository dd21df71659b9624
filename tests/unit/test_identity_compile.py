"""`spec.identity.provider: keycloak`: the compiled routers hand their TLS listener's client
logins to enmesh-auth (authServicePlugin) and keep their own database for the stack's
administrator only; policies name no messaging user (rights come with each connection);
deploy.json tells the deployer where enmesh-auth and Keycloak run. The default (sasldb)
is unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from enmesh.compile import CompileError, compile_stack_file
from enmesh.compile.artefacts import write_artefacts
from enmesh.deploy.sasldb import read_users
from enmesh.router.config import load_router_config
from tests.unit.test_cli import ROOT

LOCAL = ROOT / "stacks" / "local.stack.yml"
KEYCLOAK = {"provider": "keycloak", "authService": {"port": 5679}}


def _compiled(tmp_path: Path, **spec: Any) -> Path:
    """The local stack with `spec` entries replaced, compiled into tmp_path/etc (the
    stack's config path, so the router configs' policy folder is the written one)."""
    document = yaml.safe_load(LOCAL.read_text())
    document["spec"]["models"] = [str(ROOT / "stacks" / "iot.model.yml")]
    document["spec"]["paths"] = {
        "config": str(tmp_path / "etc"),
        "state": str(tmp_path / "state"),
        "secrets": str(tmp_path / "secrets"),
    }
    document["spec"].update(spec)
    stack_file = tmp_path / "test.stack.yml"
    stack_file.write_text(yaml.safe_dump(document))
    _, artefacts = compile_stack_file(stack_file)
    write_artefacts(artefacts, tmp_path / "etc")
    return tmp_path / "etc"


def _listener(config: Any, name: str) -> Any:
    return next(listener for listener in config.listeners if listener.name == name)


def test_keycloak_stack_routes_tls_logins_to_enmesh_auth(tmp_path: Path) -> None:
    out = _compiled(tmp_path, identity=KEYCLOAK)
    configs = sorted((out / "routers").glob("*.conf"))
    assert len(configs) == 3
    for path in configs:
        config = load_router_config(path)  # the router's own loader accepts it
        (plugin,) = config.auth_service_plugins
        assert (plugin.name, plugin.host, plugin.port) == ("enmesh-auth", "127.0.0.1", 5679)
        profile = next(p for p in config.ssl_profiles if p.name == plugin.ssl_profile)
        assert profile.ca_cert_file == tmp_path / "state" / "tls" / "ca.crt"
        amqps = _listener(config, "amqps")
        assert amqps.sasl_plugin == "enmesh-auth"
        # what clients may choose; enmesh-auth offers SCRAM only where Keycloak has the provider
        assert amqps.sasl_mechanisms == ("SCRAM-SHA-256", "PLAIN")
        assert amqps.require_ssl and amqps.authenticate_peer
        amqp = _listener(config, "amqp")  # cleartext: the router's own SCRAM database
        assert not amqp.sasl_plugin
        assert amqp.sasl_mechanisms == ("SCRAM-SHA-256",)


def test_keycloak_stack_lists_no_user_in_policies_or_the_sasl_database(tmp_path: Path) -> None:
    out = _compiled(tmp_path, identity=KEYCLOAK)
    policy = json.loads((out / "auth" / "policies" / "iot.json").read_text())
    vhost = policy[0][1]
    assert vhost["hostname"] == "iot" and vhost["groups"] == {}
    assert vhost["maxConnections"] > 0  # the plan's limit still holds
    # What Keycloak's groups grant, for the smoke check: the rights a sasldb stack has.
    rights = json.loads((out / "auth" / "rights" / "iot.json").read_text())
    assert "device" in rights[0][1]["groups"]
    deployment = json.loads((out / "deploy.json").read_text())
    assert deployment["users"]  # the model's users, for Keycloak's realm
    secrets = tmp_path / "secrets"
    for secret in {s["name"]: s["key"] for s in deployment["secrets"]}.items():
        (secrets / secret[0]).mkdir(parents=True, exist_ok=True)
        (secrets / secret[0] / secret[1]).write_text("a-password\n")
    assert list(read_users(deployment, secrets)) == ["admin@enmesh.stack"]


def test_keycloak_stack_tells_the_deployer_where_auth_runs(tmp_path: Path) -> None:
    spec = {**KEYCLOAK, "keycloak": {"host": "127.0.0.2", "port": 8455}}
    deployment = json.loads((_compiled(tmp_path, identity=spec) / "deploy.json").read_text())
    identity = deployment["identity"]
    assert identity["provider"] == "keycloak"
    assert identity["authService"]["host"] == "127.0.0.1"  # the first router's host
    assert identity["authService"]["port"] == 5679
    (auth_cert,) = identity["authService"]["certificates"]
    assert auth_cert["name"] == "enmesh-auth" and "127.0.0.1" in auth_cert["dnsNames"]
    keycloak = identity["keycloak"]
    assert keycloak["url"] == "https://127.0.0.2:8455"
    assert (keycloak["managementPort"], keycloak["databasePort"]) == (8454, 5442)
    # generated with the stack's other secrets, installed with them
    secrets = {(s["name"], s["key"]) for s in deployment["secrets"]}
    assert {
        ("enmesh-keycloak-admin", "password"),
        ("enmesh-keycloak-db", "password"),
        ("enmesh-auth-lookup", "password"),
    } <= secrets
    assert keycloak["adminSecret"] == str(tmp_path / "secrets/enmesh-keycloak-admin/password")
    assert keycloak["realm"] == "enmesh"
    assert keycloak["certificates"][0]["dnsNames"] == ["127.0.0.2", "localhost"]


def test_default_stack_keeps_users_in_the_sasl_database(tmp_path: Path) -> None:
    out = _compiled(tmp_path)
    config = load_router_config(out / "routers" / "local-router-0.conf")
    assert config.auth_service_plugins == ()
    assert not _listener(config, "amqps").sasl_plugin
    policy = json.loads((out / "auth" / "policies" / "iot.json").read_text())
    assert "device" in policy[0][1]["groups"]
    assert json.loads((out / "deploy.json").read_text())["identity"] == {"provider": "sasldb"}


def test_auth_service_on_a_router_port_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CompileError) as refused:
        _compiled(tmp_path, identity={"provider": "keycloak", "authService": {"port": 5682}})
    assert (
        "port 5682 on 127.0.0.1: router local-router-1 amqp (spec.routers.ports.amqp) "
        "and enmesh-auth (spec.identity.authService.port)"
    ) in str(refused.value)


def test_an_engine_without_auth_service_refuses_a_keycloak_stack(tmp_path: Path) -> None:
    routers = yaml.safe_load(LOCAL.read_text())["spec"]["routers"]
    routers["engine"] = "skupper-router"
    with pytest.raises(CompileError) as refused:
        _compiled(tmp_path, identity=KEYCLOAK, routers=routers)
    assert "authServicePlugin" in str(refused.value)
