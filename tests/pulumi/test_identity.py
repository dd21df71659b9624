"""Kubernetes stacks authenticate through Keycloak by default (`enmesh:identity`): the
compiled router configs point their TLS listener at enmesh-auth's Service, enmesh-auth
runs with a certificate from the stack's CA and the realm's lookup client, only routers
reach it; `enmesh:identity: sasldb` deploys no Keycloak, enmesh-auth or database."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from enmesh.console.main import routers_of
from enmesh.deploy.keycloak_provider import PROVIDER_SOURCES, build_script, source_files
from enmesh.k8s.capture import Capture
from enmesh.k8s.schema import containers, hardening_problems, pod_spec, schema_problems
from tests.pulumi.conftest import capture_of, run_with


def _named(capture: Capture, kind: str, name: str) -> dict[str, Any]:
    found = [o for o in capture.kind(kind) if o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def _router_conf(capture: Capture) -> str:
    secret = _named(capture, "Secret", capture.outputs["routerConfigSecret"])
    return str(secret["stringData"]["routers_local-router-0.conf"])


def _block(conf: str, kind: str) -> str:
    match = re.search(kind + r" \{\n(.*?)\n\}", conf, re.S)
    assert match, f"no {kind} in the router config"
    return match[1]


def test_router_configs_point_at_the_auth_service() -> None:
    capture = capture_of("local")
    conf = _router_conf(capture)
    plugin = _block(conf, "authServicePlugin")
    assert "host: local-auth.enmesh.svc.cluster.local" in plugin
    assert "port: 5671" in plugin
    amqps = next(b for b in re.findall(r"listener \{\n(.*?)\n\}", conf, re.S) if "amqps" in b)
    assert "saslPlugin: enmesh-auth" in amqps and "saslMechanisms: SCRAM-SHA-256 PLAIN" in amqps
    # Keycloak's pod builds enmesh's provider in: enmesh-auth offers SCRAM-SHA-256 too.
    auth = _named(capture, "Deployment", "local-auth")
    (container,) = auth["spec"]["template"]["spec"]["containers"]
    assert "--scram" in container["command"]
    assert any(a.startswith("--lookup-secret-file=") for a in container["command"])
    service = _named(capture, "Service", "local-auth")
    assert [p["port"] for p in service["spec"]["ports"]] == [5671]


def test_keycloaks_pod_builds_enmeshs_provider_from_its_sources() -> None:
    """Init containers: Keycloak's own jars copied out of its image, the provider's
    sources (a ConfigMap, laid out as in the package) compiled against them in a JDK
    image by the hosts' recipe, the jar mounted where Keycloak loads providers.
    tests/auth runs the same script against a real distribution."""
    capture = capture_of("local")
    spec = pod_spec(_named(capture, "Deployment", "local-keycloak"))
    assert spec is not None
    copy, build = spec["initContainers"]
    assert copy["image"] == "quay.io/keycloak/keycloak:26.5.6"
    assert copy["command"][-1] == "cp /opt/keycloak/lib/lib/main/*.jar /provider/lib/"
    assert build["image"] == "eclipse-temurin:21-jdk"
    assert build["command"][-1] == build_script(
        "/provider/src", "/provider/lib", "/provider/out", "/tmp"
    )
    sources = _named(capture, "ConfigMap", "local-keycloak-provider")["data"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "provider-src"]
    laid_out = {i["path"]: sources[i["key"]] for i in volume["configMap"]["items"]}
    assert sorted(laid_out) == source_files()
    assert all(laid_out[p] == (PROVIDER_SOURCES / p).read_text() for p in laid_out)
    (keycloak,) = spec["containers"]
    mounts = {m["name"]: m["mountPath"] for m in keycloak["volumeMounts"]}
    assert mounts["providers"] == "/opt/keycloak/providers"


def test_a_job_syncs_the_realm_into_a_running_keycloak() -> None:
    """`--import-realm` only acts at Keycloak's first start: the realm sync Job brings a
    changed realm to a running one, with the realm Secret, the CA (not Keycloak's key) and
    the admin password from its Secret; its template carries the realm's digest, so a
    changed realm replaces (reruns) the Job."""
    capture = capture_of("local")
    job = _named(capture, "Job", "local-keycloak-sync")
    spec = pod_spec(job)
    assert spec is not None and spec["restartPolicy"] == "OnFailure"
    (container,) = spec["containers"]
    assert container["command"][:3] == ["enmesh", "deploy", "keycloak-realm"]
    assert "--url=https://local-keycloak.enmesh.svc.cluster.local:8443" in container["command"]
    (env,) = container["env"]
    assert env["valueFrom"]["secretKeyRef"] == {
        "name": "local-keycloak-credentials",
        "key": "admin-password",
    }
    volumes = {v["name"]: v["secret"] for v in spec["volumes"]}
    assert volumes["realm"]["secretName"] == "local-keycloak-realm"
    assert volumes["ca"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    realm = _named(capture, "Secret", "local-keycloak-realm")["stringData"]["enmesh-realm.json"]
    digest = job["spec"]["template"]["metadata"]["annotations"]["enmesh.io/realm-digest"]
    assert digest == hashlib.sha256(realm.encode()).hexdigest()[:16]


def test_auth_service_runs_with_the_stacks_ca_and_the_lookup_client() -> None:
    capture = capture_of("local")
    deployment = _named(capture, "Deployment", "local-auth")
    ((_, container),) = containers(deployment)
    command = container["command"]
    assert command[0] == "enmesh-auth"
    assert "--keycloak-url=https://local-keycloak.enmesh.svc.cluster.local:8443" in command
    spec = pod_spec(deployment)
    assert spec is not None
    volumes = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"]}
    assert volumes == {"tls": "local-auth-tls", "lookup": "enmesh-auth-lookup"}
    requests = {r.name: r.inputs for r in capture.of_type("tls:index/certRequest:CertRequest")}
    assert "local-auth.enmesh.svc.cluster.local" in requests["tls-enmesh-auth"]["dnsNames"]
    realm = json.loads(
        _named(capture, "Secret", "local-keycloak-realm")["stringData"]["enmesh-realm.json"]
    )
    lookup = next(c for c in realm["clients"] if c["clientId"] == "enmesh-auth-lookup")
    secret = _named(capture, "Secret", "enmesh-auth-lookup")["stringData"]["password"]
    assert lookup["secret"] == secret and secret in capture.secrets
    # Keycloak's own passwords stay its component's (a running Keycloak keeps them);
    # the stack's Credentials make no unused copy.
    names = {o["metadata"]["name"] for o in capture.kind("Secret")}
    assert not {"enmesh-keycloak-admin", "enmesh-keycloak-db"} & names
    assert {r.name for r in capture.of_type("random:index/randomPassword:RandomPassword")} >= {
        "keycloak-admin",
        "keycloak-db",
    }


def test_only_routers_reach_the_auth_service() -> None:
    policies = {o["metadata"]["name"]: o["spec"] for o in capture_of("local").kind("NetworkPolicy")}
    (rule,) = policies["local-auth"]["ingress"]
    assert rule["ports"] == [{"port": 5671, "protocol": "TCP"}]
    assert [p["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for p in rule["from"]] == [
        "router"
    ]


def test_a_sasldb_stack_deploys_no_identity_provider() -> None:
    capture = run_with("local", identity="sasldb")
    assert schema_problems(capture.objects, "1.33") == []
    assert hardening_problems(capture.objects) == []
    names = {o["metadata"]["name"] for o in capture.objects}
    assert not {n for n in names if "keycloak" in n or n.startswith("local-auth")}
    assert "keycloakUrl" not in capture.outputs
    conf = _router_conf(capture)
    assert "authServicePlugin" not in conf and "saslPlugin" not in conf


def test_the_console_logs_its_administrator_in_on_the_routers_own_database() -> None:
    """Keycloak does not know the stack administrator: on a Keycloak stack the console
    reaches management on the amqp port (SCRAM, the routers' database), users on amqps."""
    data = _named(capture_of("local"), "ConfigMap", "local-console")["data"]
    deployment = json.loads(data["deploy.json"])
    (first, *_) = routers_of(deployment)
    assert first.url.startswith("amqps://") and first.url.endswith(":5671")
    assert first.administrator_url is not None and first.administrator_url.endswith(":5672")
    sasldb = json.loads(
        _named(run_with("local", identity="sasldb"), "ConfigMap", "local-console")["data"][
            "deploy.json"
        ]
    )
    assert routers_of(sasldb)[0].administrator_url is None
