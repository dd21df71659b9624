"""A stack with Keycloak in the login path (stacks/keycloak.stack.yml; molecule's `keycloak`
scenario), checked from outside: Keycloak, its database and enmesh-auth run on loopback
behind the stack's CA, messaging users log in through them with SCRAM-SHA-256 and PLAIN,
and users managed in Keycloak take effect without touching a router."""

from __future__ import annotations

import secrets
import socket
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import ConnectionException, LinkException
from proton.utils import BlockingConnection

from enmesh.auth.admin import KeycloakAdmin
from enmesh.clients import connect_options
from enmesh.deploy.keycloak_users import ADMIN_USER
from enmesh.deploy.smoke import Stack
from tests.support.console import NoRedirect

PROGRAMS = ("enmesh-keycloak-db", "enmesh-keycloak", "enmesh-auth")
AUTH_LOG = Path("/var/log/enmesh/enmesh-auth.log")
LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1"}


@pytest.fixture(scope="module")
def identity(deployment: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = deployment["identity"]
    if found.get("provider") != "keycloak":
        pytest.skip(f"stack {deployment['stack']!r} keeps the routers' own database")
    return found


@pytest.fixture(scope="module")
def admin(identity: dict[str, Any], stack: Stack) -> KeycloakAdmin:
    password = Path(identity["keycloak"]["adminSecret"]).read_text(encoding="utf-8").strip()
    return KeycloakAdmin(identity["keycloak"]["url"], str(stack.ca), ADMIN_USER, password)


def _connect(stack: Stack, identity: str, password: str, mechanism: str) -> BlockingConnection:
    options = connect_options(
        stack.urls[0], user=identity, password=password, vhost=identity.split("@")[1],
        ca=stack.ca, mechanisms=mechanism,
    )  # fmt: skip
    options.pop("reconnect")
    return BlockingConnection(timeout=30, **options)


def _tls_peer(port: int, ca: Path) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        return dict(tls.getpeercert() or {})


def test_keycloak_its_database_and_enmesh_auth_run_on_loopback_behind_the_stack_ca(
    host: Any, identity: dict[str, Any], stack: Stack
) -> None:
    for name in PROGRAMS:
        program = host.supervisor(name)
        assert program.is_running, f"{name}: {program.status}"
    keycloak, auth = identity["keycloak"], identity["authService"]
    ports = {
        "Keycloak": keycloak["port"],
        "Keycloak's management": keycloak["managementPort"],
        "Keycloak's database": keycloak["databasePort"],
        "enmesh-auth": auth["port"],
    }
    bound: dict[int, set[str]] = {}  # port -> the addresses listening on it
    for socket_url in host.socket.get_listening_sockets():
        if socket_url.startswith("tcp://"):
            address, _, port = socket_url.removeprefix("tcp://").rpartition(":")
            bound.setdefault(int(port), set()).add(address)
    for what, port in ports.items():
        # Java's sockets are IPv6 ones: loopback shows as the v4-mapped ::ffff:127.0.0.1
        assert bound.get(port), f"{what} does not listen on {port}"
        assert bound[port] <= LOOPBACK, f"{what} listens beyond loopback: {bound[port]}"
    for port in (keycloak["port"], auth["port"]):  # verified against the stack's CA
        assert _tls_peer(port, stack.ca)["subjectAltName"]


def test_model_users_log_in_through_keycloak_with_scram_and_plain(stack: Stack) -> None:
    password = stack.password("device@iot")
    for mechanism in ("SCRAM-SHA-256", "PLAIN"):
        connection = _connect(stack, "device@iot", password, mechanism)
        connection.create_sender("telemetry")  # the device's rights, from its groups
        with pytest.raises(LinkException):
            connection.create_receiver("telemetry")
        connection.close()
        with pytest.raises(ConnectionException, match="unauthorized"):
            _connect(stack, "device@iot", password + "-wrong", mechanism)
    assert password not in AUTH_LOG.read_text(encoding="utf-8", errors="replace")


@pytest.fixture
def keycloak_user(admin: KeycloakAdmin) -> Iterator[tuple[str, str, str]]:
    """A user made in Keycloak alone (not in the model), in /iot/send_telemetry: its
    identity, password and Keycloak id; removed afterwards."""
    name = f"e2e-{uuid.uuid4().hex[:8]}@iot"
    password = secrets.token_urlsafe(16)
    credential = {"type": "password", "value": password, "temporary": False}
    admin.call("POST", "/enmesh/users", {"username": name, "enabled": True,
                                           "credentials": [credential]})  # fmt: skip
    (user,) = admin.call("GET", f"/enmesh/users?exact=true&username={name}")
    (iot,) = admin.call("GET", "/enmesh/groups?exact=true&search=iot")
    children = admin.call("GET", f"/enmesh/groups/{iot['id']}/children?max=1000")  # 10 unless told
    send = next(g for g in children if g["name"] == "send_telemetry")
    admin.call("PUT", f"/enmesh/users/{user['id']}/groups/{send['id']}")
    try:
        yield name, password, user["id"]
    finally:
        admin.call("DELETE", f"/enmesh/users/{user['id']}")


def test_a_user_managed_in_keycloak_needs_no_router_change(
    host: Any,
    deployment: dict[str, Any],
    stack: Stack,
    admin: KeycloakAdmin,
    keycloak_user: tuple[str, str, str],
) -> None:
    routers = [f"enmesh-router-{r['id']}" for r in deployment["routers"]]
    pids = {name: host.supervisor(name).pid for name in routers}
    name, password, user_id = keycloak_user
    for mechanism in ("SCRAM-SHA-256", "PLAIN"):
        connection = _connect(stack, name, password, mechanism)
        connection.create_sender("telemetry")
        connection.close()
    admin.call("PUT", f"/enmesh/users/{user_id}", {"enabled": False})
    for mechanism in ("SCRAM-SHA-256", "PLAIN"):  # PLAIN was remembered: no longer
        with pytest.raises(ConnectionException, match="unauthorized"):
            _connect(stack, name, password, mechanism)
    assert {name: host.supervisor(name).pid for name in routers} == pids


def test_the_console_sends_a_browser_to_keycloaks_login_page(
    identity: dict[str, Any], deployment: dict[str, Any], stack: Stack
) -> None:
    """The console's Keycloak login is wired: its client exists in the realm with the
    console's callback, so Keycloak shows its login form for it (a client or redirect it
    did not know would get Keycloak's error page instead)."""
    console = deployment.get("console")
    if not console:
        pytest.skip("this stack runs no console")
    context = ssl.create_default_context(cafile=str(stack.ca))
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), NoRedirect())
    start = f"https://{console['host']}:{console['port']}/login/keycloak"
    try:
        opener.open(start, timeout=30)
        raise AssertionError("the console did not redirect to Keycloak")
    except urllib.error.HTTPError as redirect:
        assert redirect.code == 303
        location = redirect.headers["Location"]
    assert location.startswith(identity["keycloak"]["url"] + "/realms/enmesh/")
    assert "client_id=enmesh-console" in location and "code_challenge=" in location
    with opener.open(location, timeout=30) as page:
        assert page.status == 200
        assert 'id="kc-login"' in page.read().decode()
