"""A real Keycloak on PostgreSQL with the test model's realm, enmesh-auth in front of
it, and an enmesh-router whose listener authenticates through them (authServicePlugin).

Keycloak's start dominates (about a minute on a busy 2-core machine), so everything
here is started once per module.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from proton import Message, SSLDomain
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection, LinkDetached

from enmesh.auth.realm import realm_json
from enmesh.compile.identity import AUTH_COMPONENT
from enmesh.model.model import load_model
from tests.support.keycloak import Keycloak, start_keycloak
from tests.support.mesh import Mesh, build_mesh, wait_until
from tests.support.pki import Pki, make_pki
from tests.support.ports import free_port, port_is_listening

MODEL = Path(__file__).parents[1] / "fixtures" / "keycloak.model.yml"
PASSWORDS = {"shop-alice": "alice-secret", "shop-bob": "bob-secret", "lab-carol": "carol-secret"}
# The secret of enmesh-auth's service-account client (remembered logins).
LOOKUP_SECRET = secrets.token_urlsafe(24)
ROUTER_BIN = Path(sys.executable).parent / "enmesh-router"


@dataclass
class AuthStack:
    keycloak: Keycloak
    pki: Pki
    auth_port: int
    router_port: int  # plain AMQP, authServicePlugin -> enmesh-auth
    dead_port: int  # a listener whose authServicePlugin points at nothing
    tls_port: int  # amqps, TLS terminated in Python in front of the relay
    scram_only_port: int  # saslMechanisms: SCRAM-SHA-256 (the listener allows it alone)
    router_log: Path
    auth_log: Path


# One Keycloak (and the PKI its certificate is from) for the package: a boot is minutes
# of CPU on a busy machine. Each module's checks create users of their own names and put
# back what they change in the realm.
@pytest.fixture(scope="package")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    # proton clients check the router's certificate against their AMQP hostname (the space)
    hostnames = ("localhost", "127.0.0.1", "shop", "lab")
    components = ["keycloak", "auth", "router"]
    return make_pki(tmp_path_factory.mktemp("pki"), components, hostnames, key_type="rsa")


@pytest.fixture(scope="package")
def keycloak(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Keycloak]:
    state = tmp_path_factory.mktemp("keycloak")
    server = start_keycloak(state, pki.cert("keycloak"), pki.key("keycloak"), pki.ca_cert)
    try:
        model = load_model([MODEL])
        server.admin("POST", "", json.loads(realm_json(model, PASSWORDS, LOOKUP_SECRET)))
        yield server
    finally:
        server.stop()
        server.database.stop()


def auth_service_process(
    keycloak: Keycloak,
    pki: Pki,
    log: Path,
    remember: bool = True,
    *,
    port: int = 0,
    serve_with: tuple[Path, Path] | None = None,
) -> tuple[subprocess.Popen[str], int]:
    """enmesh-auth in front of `keycloak` (whose CA is `pki`'s); `remember`: with its
    service account; `serve_with`: its certificate and key, if not `pki`'s "auth"."""
    cert, key = serve_with or (pki.cert("auth"), pki.key("auth"))
    lookup: list[str] = []
    if remember:  # and SCRAM, whose keys the same service account reads
        secret_file = log.with_name("lookup-secret")
        secret_file.write_text(LOOKUP_SECRET)
        lookup = ["--lookup-secret-file", str(secret_file), "--scram"]
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "enmesh.auth",
            "--port",
            str(port),
            "--cert",
            str(cert),
            "--key",
            str(key),
            "--keycloak-url",
            keycloak.url,
            "--keycloak-ca",
            str(pki.ca_cert),
            *lookup,
        ],
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # printed once it listens
    match = re.search(r"listening on [^:]+:(\d+)", line)
    if not match:
        process.kill()
        raise RuntimeError(f"enmesh-auth did not start: {line!r} {log.read_text()[-2000:]}")
    return process, int(match[1])


def router_config(
    directory: Path, pki: Pki, auth_port: int, ports: tuple[int, int, int, int]
) -> Path:
    policies = directory / "policies"
    policies.mkdir()
    for space in ("shop", "lab"):
        vhost = [["vhost", {"hostname": space, "maxConnections": 100, "groups": {}}]]
        (policies / f"{space}.json").write_text(json.dumps(vhost))
    config = directory / "router.conf"
    config.write_text(
        f"""
router {{
    mode: standalone
    id: keycloak-test
}}
sslProfile {{
    name: auth-service-tls
    caCertFile: {pki.ca_cert}
}}
authServicePlugin {{
    name: enmesh-auth
    host: 127.0.0.1
    port: {auth_port}
    sslProfile: auth-service-tls
}}
sslProfile {{
    name: client-tls
    certFile: {pki.cert("router")}
    privateKeyFile: {pki.key("router")}
}}
listener {{
    host: 127.0.0.1
    port: {ports[2]}
    role: normal
    authenticatePeer: yes
    sslProfile: client-tls
    saslPlugin: enmesh-auth
    multiTenant: yes
}}
authServicePlugin {{
    name: nowhere
    host: 127.0.0.1
    port: {free_port()}
}}
listener {{
    host: 127.0.0.1
    port: {ports[0]}
    role: normal
    authenticatePeer: yes
    saslPlugin: enmesh-auth
    saslMechanisms: PLAIN
    multiTenant: yes
}}
listener {{
    host: 127.0.0.1
    port: {ports[1]}
    role: normal
    authenticatePeer: yes
    saslPlugin: nowhere
}}
listener {{
    host: 127.0.0.1
    port: {ports[3]}
    role: normal
    authenticatePeer: yes
    saslPlugin: enmesh-auth
    saslMechanisms: SCRAM-SHA-256
    multiTenant: yes
}}
address {{
    prefix: shop
    distribution: balanced
}}
address {{
    prefix: lab
    distribution: balanced
}}
policy {{
    enableVhostPolicy: true
    policyDir: {policies}
}}
"""
    )
    return config


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, keycloak: Keycloak, pki: Pki
) -> Iterator[AuthStack]:
    directory = tmp_path_factory.mktemp("auth-stack")
    # Keycloak is the package's: the other module's wrong passwords count towards its
    # lockout of those users, so each module starts with none counted.
    keycloak.admin("DELETE", "/enmesh/attack-detection/brute-force/users")
    auth_log = directory / "enmesh-auth.log"
    auth, auth_port = auth_service_process(keycloak, pki, auth_log)
    ports = (free_port(), free_port(), free_port(), free_port())
    config = router_config(directory, pki, auth_port, ports)
    log = directory / "router.log"
    router = subprocess.Popen(
        [str(ROUTER_BIN), "--config", str(config)], stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    try:
        wait_until(lambda: port_is_listening(ports[0]), 20, "the router to listen")
        yield AuthStack(
            keycloak, pki, auth_port, ports[0], ports[1], ports[2], ports[3], log, auth_log
        )
    finally:
        for process in (router, auth):
            process.terminate()
            process.wait(10)


@dataclass
class CompiledStack:
    """A one-router stack compiled with `identity.provider: keycloak`, run from the
    compiled files, its enmesh-auth in front of the module's Keycloak."""

    mesh: Mesh
    auth_log: Path


@pytest.fixture(scope="module")
def compiled(
    tmp_path_factory: pytest.TempPathFactory, keycloak: Keycloak, pki: Pki
) -> Iterator[CompiledStack]:
    directory = tmp_path_factory.mktemp("compiled-keycloak")
    auth_port = free_port()
    identity: dict[str, object] = {
        "provider": "keycloak",
        "authService": {"port": auth_port},
        "keycloak": {
            "port": keycloak.port,
            "managementPort": keycloak.management_port,
            "databasePort": keycloak.database.port,
        },
    }
    mesh = build_mesh(directory, routers=1, models=[MODEL], identity=identity)
    mesh_pki = mesh.extra["pki"]
    assert isinstance(mesh_pki, Pki)
    # The module's Keycloak has a certificate of the auth tests' CA: the stack's CA file
    # becomes a bundle of both, as a site trusting two CAs would have.
    mesh.ca.write_text(mesh.ca.read_text() + pki.ca_cert.read_text())
    mesh.set_secret("enmesh-keycloak-admin", "password", keycloak.admin_password)
    mesh.set_secret("enmesh-auth-lookup", "password", LOOKUP_SECRET)
    auth_log = directory / "enmesh-auth.log"
    served = (mesh_pki.cert(AUTH_COMPONENT), mesh_pki.key(AUTH_COMPONENT))
    auth, _ = auth_service_process(keycloak, pki, auth_log, port=auth_port, serve_with=served)
    try:
        mesh.start()
        yield CompiledStack(mesh, auth_log)
    finally:
        mesh.stop()
        auth.terminate()
        auth.wait(10)


def may(connection: Any, address: str, receive: bool) -> bool:
    """Whether the connection may attach a receiver (or a sender) on `address`."""
    try:
        link = connection.create_receiver(address) if receive else connection.create_sender(address)
    except LinkDetached as exc:
        assert "unauthorized" in str(exc)
        return False
    link.close()
    return True


def check_shop_rights(login: Callable[[str, str], Any]) -> None:
    """What the fixture model's groups give alice and bob of `shop`, through `login(user,
    password)`: alice sends to and receives from orders but may not receive audit; bob
    receives audit and orders and may not send to orders."""
    alice = login("alice@shop", PASSWORDS["shop-alice"])
    try:
        receiver = alice.create_receiver("orders")
        # Presettled: a blocking unsettled send would wait for an accept nobody sends yet.
        alice.create_sender("orders", options=AtMostOnce()).send(Message(body="granted"))
        assert receiver.receive(timeout=10).body == "granted"
        assert not may(alice, "audit", receive=True)  # no recv_audit group
    finally:
        alice.close()
    bob = login("bob@shop", PASSWORDS["shop-bob"])
    try:
        assert may(bob, "audit", receive=True)
        assert may(bob, "orders", receive=True)
        assert not may(bob, "orders", receive=False)  # recv only
    finally:
        bob.close()


def tls_options(ca: Path, vhost: str) -> dict[str, Any]:
    """A blocking client's options for a router's amqps listener: TLS checked against
    `ca` and the host name, SASL PLAIN."""
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(str(ca))
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    return {
        "timeout": 20,
        "virtual_host": vhost,
        "allowed_mechs": "PLAIN",
        "ssl_domain": domain,
        "sasl_enabled": True,
    }


def new_user(stack: AuthStack, name: str, password: str, *groups: str) -> dict[str, Any]:
    """A user created in Keycloak only, in `groups` (subgroups of /shop)."""
    keycloak = stack.keycloak
    (shop,) = keycloak.admin("GET", "/enmesh/groups?exact=true&search=shop")
    sub = {
        g["name"]: g["id"] for g in keycloak.admin("GET", f"/enmesh/groups/{shop['id']}/children")
    }
    credential = {"type": "password", "value": password, "temporary": False}
    body = {"username": name, "enabled": True, "credentials": [credential]}
    keycloak.admin("POST", "/enmesh/users", body)
    (user,) = keycloak.admin("GET", f"/enmesh/users?exact=true&username={name}")
    for group in groups:
        keycloak.admin("PUT", f"/enmesh/users/{user['id']}/groups/{sub[group]}")
    return {**user, "group_ids": sub}


def connect(stack: AuthStack, user: str, password: str, vhost: str, port: int = 0) -> Any:
    return BlockingConnection(
        f"amqp://127.0.0.1:{port or stack.router_port}",
        timeout=20,
        user=user,
        password=password,
        virtual_host=vhost,
        allowed_mechs="PLAIN",
        allow_insecure_mechs=True,  # plain AMQP on loopback: the test's own machine
    )


def shop_sender(name: str) -> str:
    """A model document: user `name` of shop, who may send to `audit` (a right no fixture
    user has, so its group appears and goes with the user)."""
    return f"""
---
apiVersion: enmesh.io/v1
kind: MessagingUser
metadata: {{name: shop.{name}}}
spec:
  addressSpace: shop
  username: {name}
  authentication: {{passwordSecret: {{name: shop-{name}, key: password}}}}
  authorization:
    - {{operations: [send], addresses: [audit]}}
"""
