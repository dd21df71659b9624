"""Clients authenticate through enmesh-router's authServicePlugin, enmesh-auth and a real
Keycloak: passwords, group membership, tenants and user changes are Keycloak's alone."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from proton import ConnectionException, Message, symbol
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from enmesh.auth import frames
from enmesh.auth.admin import KeycloakAdmin
from enmesh.auth.realm import ConsoleClient
from enmesh.auth.sync import sync_realm
from enmesh.control.apply import apply_stack
from enmesh.control.management import Administrator, session
from enmesh.model import Model, load_model
from tests.auth.conftest import (
    MODEL,
    PASSWORDS,
    AuthStack,
    CompiledStack,
    check_shop_rights,
    connect,
    may,
    new_user,
    shop_sender,
    tls_options,
)
from tests.mqtt.conftest import Device, GatewayProcess
from tests.support.apply_target import mesh_target, stack_file
from tests.support.browser import click, text
from tests.support.console import Http, browser, save_screenshot, serve_console
from tests.support.keycloak import Keycloak
from tests.support.mesh import wait_until

SHOP_PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret"}


def refusal(stack: AuthStack, user: str, password: str, vhost: str, port: int = 0) -> str:
    with pytest.raises(ConnectionException) as refused:
        connect(stack, user, password, vhost, port).close()
    return str(refused.value)


def test_keycloak_password_and_groups_decide(stack: AuthStack) -> None:
    check_shop_rights(lambda user, password: connect(stack, user, password, "shop"))


def test_plain_over_tls(stack: AuthStack) -> None:
    """TLS terminated by the router in Python, SASL relayed inside it."""
    options = tls_options(stack.pki.ca_cert, "shop")
    url = f"amqps://127.0.0.1:{stack.tls_port}"
    check_shop_rights(
        lambda user, password: BlockingConnection(url, user=user, password=password, **options)
    )
    with pytest.raises(ConnectionException, match="unauthorized"):
        BlockingConnection(url, user="bob@shop", password="wrong", **options).close()
    # A client that rejects the certificate (not issued for "nowhere") ends only its own
    # handshake; the router serves the next client.
    with pytest.raises(ConnectionException):
        wrong_name = {**options, "virtual_host": "nowhere"}
        BlockingConnection(url, user="bob@shop", password="bob-secret", **wrong_name).close()
    BlockingConnection(url, user="bob@shop", password="bob-secret", **options).close()


def test_wrong_password_is_refused(stack: AuthStack) -> None:
    assert "unauthorized" in refusal(stack, "alice@shop", "not-her-password", "shop")
    assert "unauthorized" in refusal(stack, "nobody@shop", "whatever", "shop")


def test_tenants_stay_isolated(stack: AuthStack) -> None:
    """carol@lab's password is right, but shop is not her address space."""
    assert "may not use address space 'shop'" in refusal(stack, "carol@lab", "carol-secret", "shop")
    carol = connect(stack, "carol@lab", "carol-secret", "lab")
    try:
        assert may(carol, "orders", receive=False)
    finally:
        carol.close()


def test_keycloak_user_changes_need_no_router_change(stack: AuthStack) -> None:
    keycloak = stack.keycloak
    groups = {
        g["name"]: g for g in keycloak.admin("GET", "/enmesh/groups?briefRepresentation=false")
    }
    sub = {
        g["name"]: g["id"]
        for g in keycloak.admin("GET", f"/enmesh/groups/{groups['shop']['id']}/children")
    }
    keycloak.admin(
        "POST",
        "/enmesh/users",
        {
            "username": "dave@shop",
            "enabled": True,
            "credentials": [{"type": "password", "value": "dave-secret", "temporary": False}],
        },
    )
    (dave,) = keycloak.admin("GET", "/enmesh/users?exact=true&username=dave@shop")
    keycloak.admin("PUT", f"/enmesh/users/{dave['id']}/groups/{sub['send_orders']}")

    first = connect(stack, "dave@shop", "dave-secret", "shop")
    assert may(first, "orders", receive=False)
    assert not may(first, "orders", receive=True)

    keycloak.admin("PUT", f"/enmesh/users/{dave['id']}", {**dave, "enabled": False})
    assert "unauthorized" in refusal(stack, "dave@shop", "dave-secret", "shop")
    assert may(first, "orders", receive=False)  # the open connection carries on
    first.close()


def _keycloak_sessions(stack: AuthStack, user: dict[str, Any]) -> int:
    """Keycloak's sessions of a user: one per password grant it made."""
    return len(stack.keycloak.admin("GET", f"/enmesh/users/{user['id']}/sessions"))


def test_a_repeated_login_costs_keycloak_one_password_grant(stack: AuthStack) -> None:
    erin = new_user(stack, "erin@shop", "erin-secret", "send_orders")
    for _ in range(3):
        connection = connect(stack, "erin@shop", "erin-secret", "shop")
        assert may(connection, "orders", receive=False)
        connection.close()
    assert _keycloak_sessions(stack, erin) == 1
    assert "unauthorized" in refusal(stack, "erin@shop", "not-erins", "shop")


def test_a_remembered_login_follows_password_and_group_changes(stack: AuthStack) -> None:
    frank = new_user(stack, "frank@shop", "frank-secret", "send_orders")
    connect(stack, "frank@shop", "frank-secret", "shop").close()  # remembered from here

    keycloak, user_path = stack.keycloak, f"/enmesh/users/{frank['id']}"
    send_orders = frank["group_ids"]["send_orders"]
    keycloak.admin("DELETE", f"{user_path}/groups/{send_orders}")
    connection = connect(stack, "frank@shop", "frank-secret", "shop")
    assert not may(connection, "orders", receive=False)  # the group left counts at once
    connection.close()

    new_password = {"type": "password", "value": "frank-new", "temporary": False}
    keycloak.admin("PUT", f"{user_path}/reset-password", new_password)
    assert "unauthorized" in refusal(stack, "frank@shop", "frank-secret", "shop")
    connect(stack, "frank@shop", "frank-new", "shop").close()

    keycloak.admin("DELETE", user_path)
    assert "unauthorized" in refusal(stack, "frank@shop", "frank-new", "shop")


def test_auth_service_down_refuses_new_connections(stack: AuthStack) -> None:
    assert "unauthorized" in refusal(stack, "alice@shop", "alice-secret", "shop", stack.dead_port)
    assert "auth service" in stack.router_log.read_text()


def test_a_compiled_keycloak_stack_logs_in_through_keycloak(compiled: CompiledStack) -> None:
    """The router runs the files `enmesh render` makes for `identity.provider: keycloak`:
    messaging users log in over TLS through enmesh-auth and Keycloak with the rights of
    their groups; the cleartext listener knows none of them; the stack's administrator
    still reaches management there (the control plane keeps working)."""
    mesh = compiled.mesh
    url = mesh.url(0, tls=True)
    alice = BlockingConnection(
        url, user="alice@shop", password="alice-secret", **tls_options(mesh.ca, "shop")
    )
    try:
        receiver = alice.create_receiver("orders")
        alice.create_sender("orders", options=AtMostOnce()).send(Message(body="compiled"))
        assert receiver.receive(timeout=10).body == "compiled"
        assert not may(alice, "audit", receive=True)  # no recv_audit group in Keycloak
    finally:
        alice.close()
    with pytest.raises(ConnectionException, match="unauthorized"):
        options = tls_options(mesh.ca, "shop")
        BlockingConnection(url, user="alice@shop", password="wrong", **options).close()
    with pytest.raises(ConnectionException, match="may not use address space 'shop'"):
        options = tls_options(mesh.ca, "shop")
        BlockingConnection(url, user="carol@lab", password="carol-secret", **options).close()
    with pytest.raises(ConnectionException, match="unauthorized"):
        BlockingConnection(  # the routers' own database holds no messaging user
            mesh.url(0),
            timeout=20,
            user="alice@shop",
            password="alice-secret",
            virtual_host="shop",
            allowed_mechs="SCRAM-SHA-256",
        ).close()
    deployment = json.loads((mesh.directory / "config" / "deploy.json").read_text())
    admin = Administrator.of(deployment, mesh.secrets_dir)
    assert isinstance(admin, Administrator)
    with session(mesh.url(0), admin) as management:
        listeners = {row["name"]: row for row in management.query("listener", ["name"])}
    assert {"amqp", "amqps"} <= set(listeners)
    assert "authenticated alice@shop" in compiled.auth_log.read_text()


def test_mqtt_devices_log_in_through_keycloak(compiled: CompiledStack, tmp_path: Path) -> None:
    """The MQTT gateway opens each device's AMQP connection to the routers' amqps
    listener with the device's own credentials: on a Keycloak stack, Keycloak decides the
    password and the device's groups decide what it may publish."""
    gateway = GatewayProcess(compiled.mesh, tmp_path / "state", tmp_path / "gw.log", tls=True)
    gateway.start()
    devices = [
        Device(gateway.port, "alice@shop", "alice-secret", client_id="alice-sub"),
        Device(gateway.port, "alice@shop", "alice-secret", client_id="alice-pub"),
        Device(gateway.port, "bob@shop", "bob-secret", client_id="bob"),
        Device(gateway.port, "alice@shop", "not-her-password", client_id="mallory"),
    ]
    subscriber, publisher, bob, mallory = devices
    try:
        assert subscriber.connect() == 0
        assert [rc.value for rc in subscriber.subscribe("orders", qos=1)] == [1]
        assert publisher.connect() == 0
        assert publisher.publish("orders", b"via keycloak", qos=1) == 0  # the accept
        assert subscriber.receive().payload == b"via keycloak"
        assert bob.connect() == 0
        assert bob.publish("orders", b"bob may only receive", qos=1) == 135  # not authorized
        assert mallory.connect() == 134  # bad user name or password
    finally:
        for device in devices:
            with contextlib.suppress(Exception):  # already closed or never connected
                device.close()
        gateway.stop()
    assert "authenticated bob@shop" in compiled.auth_log.read_text()


def test_console_logins_on_a_keycloak_stack(compiled: CompiledStack) -> None:
    """The console checks a user's password by a login to the routers' amqps listener,
    which on a Keycloak stack asks Keycloak; the stack administrator, whom Keycloak does
    not know, logs in on the cleartext listener with SCRAM against the routers' own
    database and reads every router's management."""
    mesh = compiled.mesh
    admin = "admin@enmesh.stack"
    with serve_console(mesh, administrator=admin) as console:
        http = Http(console)
        refused = http.login("alice@shop", "not-her-password")
        assert refused.status == 401 and "wrong username or password" in refused.read().decode()
        # Keycloak took her password: what stops her is the console's `manage` rule.
        no_manage = http.login("alice@shop", "alice-secret").read().decode()
        assert "has no `manage` right" in no_manage
        assert http.login(admin, mesh.passwords[admin]).status == 303
        spaces = http.request("GET", "/spaces").read().decode()
        assert "shop" in spaces and "lab" in spaces


GINA = shop_sender("gina")


def _rights(stack: AuthStack, user: str, password: str, address: str) -> tuple[bool, bool]:
    """Whether `user` (of shop) may send to and receive from `address`."""
    connection = connect(stack, user, password, "shop")
    try:
        return may(connection, address, receive=False), may(connection, address, receive=True)
    finally:
        connection.close()


def _model(directory: Path, extra: str = "") -> Model:
    path = directory / "keycloak.model.yml"
    path.write_text(MODEL.read_text() + extra)
    return load_model([path])


def test_the_model_reaches_keycloak_users_made_by_hand_stay(
    stack: AuthStack, tmp_path: Path
) -> None:
    """`enmesh.auth.sync` (what `enmesh apply` runs on a Keycloak stack) through the real
    admin API: a user added to the model can log in with its rights, a rights or password
    change counts from the next login, a user removed from the model is removed from
    Keycloak; a user made in Keycloak by hand is left alone; a second run changes nothing."""
    keycloak = stack.keycloak
    admin = KeycloakAdmin(keycloak.url, str(stack.pki.ca_cert), "admin", keycloak.admin_password)
    new_user(stack, "frank@shop", "frank-secret", "recv_orders")  # by hand, in Keycloak
    passwords = {**PASSWORDS, "shop-gina": "gina-secret"}
    added = sync_realm(admin, _model(tmp_path, GINA), passwords)
    assert added.created == ["/shop/send_audit", "gina@shop"]
    assert _rights(stack, "gina@shop", "gina-secret", "audit") == (True, False)
    assert sync_realm(admin, _model(tmp_path, GINA), passwords).unchanged

    recv_only = _model(tmp_path, GINA.replace("[send]", "[recv]"))
    new_password = {**passwords, "shop-gina": "gina-new-secret"}
    changed = sync_realm(admin, recv_only, new_password, reset={"gina@shop"})
    assert (changed.changed, changed.removed) == (["gina@shop"], ["/shop/send_audit"])
    assert "unauthorized" in refusal(stack, "gina@shop", "gina-secret", "shop")
    assert _rights(stack, "gina@shop", "gina-new-secret", "audit") == (False, True)

    removed = sync_realm(admin, _model(tmp_path), PASSWORDS)
    assert removed.removed == ["gina@shop"]
    assert "unauthorized" in refusal(stack, "gina@shop", "gina-new-secret", "shop")
    assert _rights(stack, "frank@shop", "frank-secret", "orders") == (False, True)
    assert sync_realm(admin, _model(tmp_path), PASSWORDS).unchanged


HANA = shop_sender("hana")


def test_apply_on_a_keycloak_stack_manages_its_users_in_keycloak(compiled: CompiledStack) -> None:
    """`enmesh apply` on a running Keycloak stack: a user added to the model gets a
    generated password and can log in through the compiled router with it; removed from
    the model, the user is removed from Keycloak; a second apply changes nothing."""
    mesh = compiled.mesh
    model = mesh.directory / "keycloak.model.yml"
    original = model.read_text()
    said: list[str] = []
    try:
        model.write_text(original + HANA)
        apply_stack(stack_file(mesh), mesh_target(mesh, None), echo=said.append)
        # (the first apply also makes the console's client: the realm predates it)
        assert any(
            line.startswith("Keycloak users: changed: created: ")
            and line.endswith("/shop/send_audit, hana@shop")
            for line in said
        ), said
        password = (mesh.secrets_dir / "shop-hana" / "password").read_text().strip()
        url, options = mesh.url(0, tls=True), tls_options(mesh.ca, "shop")
        hana = BlockingConnection(url, user="hana@shop", password=password, **options)
        try:
            assert may(hana, "audit", receive=False)
        finally:
            hana.close()
    finally:
        model.write_text(original)
        said.clear()
        apply_stack(stack_file(mesh), mesh_target(mesh, None), echo=said.append)
    assert "Keycloak users: changed: removed: /shop/send_audit, hana@shop" in said
    with pytest.raises(ConnectionException, match="unauthorized"):
        BlockingConnection(url, user="hana@shop", password=password, **options).close()
    said.clear()
    apply_stack(stack_file(mesh), mesh_target(mesh, None), echo=said.append)
    assert "Keycloak users: unchanged" in said


def test_apply_names_a_hand_made_user_it_leaves_alone(
    compiled: CompiledStack, keycloak: Keycloak
) -> None:
    """A user of the model whom Keycloak already has, made there by hand, is left as it
    is (its password and groups are Keycloak's), and apply says so."""
    mesh = compiled.mesh
    model = mesh.directory / "keycloak.model.yml"
    original = model.read_text()
    credential = {"type": "password", "value": "by-hand", "temporary": False}
    user = {"username": "lena@shop", "enabled": True, "credentials": [credential]}
    keycloak.admin("POST", "/enmesh/users", user)
    said: list[str] = []
    try:
        model.write_text(original + GINA.replace("gina", "lena"))
        apply_stack(stack_file(mesh), mesh_target(mesh, None), echo=said.append)
        assert (
            "Keycloak users: warning: left alone, made in Keycloak by hand (their passwords "
            "and groups are Keycloak's, not the model's): lena@shop"
        ) in said
        # Keycloak's password, and none of the model's rights (no send_audit group)
        url, options = mesh.url(0, tls=True), tls_options(mesh.ca, "shop")
        lena = BlockingConnection(url, user="lena@shop", password="by-hand", **options)
        try:
            assert not may(lena, "audit", receive=False)
        finally:
            lena.close()
    finally:
        model.write_text(original)
        apply_stack(stack_file(mesh), mesh_target(mesh, None), echo=said.append)
        (lena,) = keycloak.admin("GET", "/enmesh/users?exact=true&username=lena@shop")
        keycloak.admin("DELETE", f"/enmesh/users/{lena['id']}")


CONSOLE_SECRET = "console-client-secret-of-the-test"


def _keycloak_page_login(driver: Any, username: str, password: str) -> None:
    """Keycloak's own login page (theme keycloak.v2), as a user fills it in."""
    WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.ID, "kc-login"))
    for field, value in (("username", username), ("password", password)):
        element = driver.find_element(By.ID, field)
        element.clear()  # after a refusal Keycloak fills the username in again
        element.send_keys(value)
    click(driver, driver.find_element(By.ID, "kc-login"))


def test_the_console_logs_in_through_keycloak(
    compiled: CompiledStack, stack: AuthStack, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """OIDC in a real browser: the console sends the user to Keycloak's login page (a wrong
    password is Keycloak's to refuse), back with a code, and reads the routers' management
    as that user, with the access token in place of a password (enmesh-auth has Keycloak
    introspect it); a user without `manage` is refused; logging out ends the Keycloak
    session too; the token appears in no log."""
    mesh, keycloak = compiled.mesh, stack.keycloak
    (shop,) = keycloak.admin("GET", "/enmesh/groups?exact=true&search=shop")
    keycloak.admin("POST", f"/enmesh/groups/{shop['id']}/children", {"name": "manage"})
    new_user(stack, "olga@shop", "olga-secret", "manage", "recv_orders")
    mesh.set_secret("enmesh-console-oidc", "password", CONSOLE_SECRET)
    admin = KeycloakAdmin(keycloak.url, str(stack.pki.ca_cert), "admin", keycloak.admin_password)
    driver = browser(tmp_path_factory.mktemp("chromium"))
    try:
        with serve_console(mesh) as console:
            client = ConsoleClient(CONSOLE_SECRET, console.url)
            synced = sync_realm(admin, load_model([MODEL]), PASSWORDS, console=client)
            # apply made it for the stack's own console address: now this one's
            assert "client enmesh-console" in synced.created + synced.changed
            driver.get(console.url + "/login")
            click(driver, driver.find_element(By.ID, "login-keycloak"))
            assert driver.current_url.startswith(keycloak.url)
            _keycloak_page_login(driver, "olga@shop", "not-her-password")
            assert "Invalid username or password" in driver.page_source
            _keycloak_page_login(driver, "olga@shop", "olga-secret")
            WebDriverWait(driver, 60).until(lambda d: d.current_url.endswith("/spaces/shop"))
            assert text(driver, "#who") == "olga@shop"
            click(driver, driver.find_element(By.ID, "connections-link"))
            assert driver.find_elements(By.CSS_SELECTOR, "section.router")
            assert not driver.find_elements(By.CSS_SELECTOR, "section.router .error")
            save_screenshot(driver, "keycloak-login")
            assert "authenticated olga@shop" in compiled.auth_log.read_text()

            click(driver, driver.find_element(By.ID, "logout"))
            driver.get(console.url + "/login/keycloak")  # no Keycloak session: its form again
            _keycloak_page_login(driver, "alice@shop", "alice-secret")
            assert "has no `manage` right" in text(driver, "#login-error")
        assert sync_realm(admin, load_model([MODEL]), PASSWORDS, console=client).unchanged
    finally:
        driver.quit()
    assert "eyJ" not in compiled.auth_log.read_text()  # no JWT (they all begin so)


def test_keycloak_down_refuses_new_connections_and_keeps_open_ones(stack: AuthStack) -> None:
    """Last in this module: it stops Keycloak (and starts it again for the package's
    other module)."""
    open_before = connect(stack, "alice@shop", "alice-secret", "shop")
    receiver = open_before.create_receiver("orders")
    process = stack.keycloak.process
    assert process is not None
    process.terminate()
    try:
        # Wait on the open connection, so its heartbeats keep flowing meanwhile.
        open_before.wait(lambda: process.poll() is not None, timeout=60, msg="Keycloak to stop")
        assert "unauthorized" in refusal(stack, "alice@shop", "alice-secret", "shop")
        assert "Keycloak at" in stack.auth_log.read_text()  # why, in enmesh-auth's log
        open_before.create_sender("orders", options=AtMostOnce()).send(Message(body="still here"))
        assert receiver.receive(timeout=10).body == "still here"
        open_before.close()
    finally:
        process.wait(60)
        stack.keycloak.start()


def test_a_mechanism_the_listener_does_not_offer_is_refused(stack: AuthStack) -> None:
    """A client may only choose among the mechanisms offered: a listener limited to PLAIN
    offers no SCRAM-SHA-256 although the service has it, and a raw SASL exchange that picks
    SCRAM-SHA-256 anyway gets `auth` without reaching the service."""
    reader = frames.FrameReader()
    items: list[Any] = []
    with socket.create_connection(("127.0.0.1", stack.router_port), timeout=20) as sock:
        sock.sendall(frames.SASL_HEADER)

        def until(code: int) -> Any:
            while True:
                for item in items:
                    if isinstance(item, frames.Frame) and item.code == code:
                        return item
                data = sock.recv(4096)
                assert data, f"closed before frame {code:#x}: {items}"
                items.extend(reader.feed(data))

        offered = [str(m) for m in until(frames.SASL_MECHANISMS).field(0) or []]
        assert offered == ["PLAIN"], offered
        init = [symbol("SCRAM-SHA-256"), b"n,,n=alice@shop,r=abcdefghijklmnop", "shop"]
        sock.sendall(frames.encode(frames.SASL_FRAME, frames.SASL_INIT, init))
        outcome = until(frames.SASL_OUTCOME)
    assert int(outcome.field(0)) == frames.AUTH
    wait_until(
        lambda: "'SCRAM-SHA-256' was not offered" in stack.router_log.read_text(),
        10,
        "the router to log why",  # it logs just after writing the outcome
    )


def _links_to(port: int) -> int:
    """Established TCP connections to 127.0.0.1:`port` (the router's to the service)."""
    out = subprocess.run(
        ["ss", "-Htn", "state", "established", "dst", f"127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return len(out.splitlines())


def test_a_client_that_leaves_mid_sasl_ends_the_routers_service_link(stack: AuthStack) -> None:
    """The router opens a connection to the auth service per SASL exchange; a client that
    goes away before the outcome must not leave it open (it stayed until the service's
    own timeout)."""
    before = _links_to(stack.auth_port)
    with socket.create_connection(("127.0.0.1", stack.router_port), timeout=20) as sock:
        sock.sendall(frames.SASL_HEADER)
        reader = frames.FrameReader()
        items: list[Any] = []
        while not any(isinstance(i, frames.Frame) for i in items):  # the mechanisms
            data = sock.recv(4096)
            assert data, items
            items.extend(reader.feed(data))
        assert _links_to(stack.auth_port) == before + 1  # the exchange's service link
    wait_until(lambda: _links_to(stack.auth_port) == before, 10, "the service link to close")
