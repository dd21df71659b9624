"""SCRAM-SHA-256 through enmesh-router's authServicePlugin and enmesh-auth, against a real
Keycloak whose enmesh provider (enmesh/deploy/keycloak_scram) serves the users' keys."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest
from proton import ConnectionException
from proton.utils import BlockingConnection

from enmesh.auth.admin import KeycloakAdmin
from enmesh.auth.keycloak import KeycloakSettings
from enmesh.auth.lookup import LOOKUP_CLIENT, UserLookup
from enmesh.auth.realm import HASH_ITERATIONS, PASSWORD_POLICY
from enmesh.auth.sync import sync_realm
from enmesh.model import load_model
from tests.auth.conftest import (
    LOOKUP_SECRET,
    MODEL,
    PASSWORDS,
    AuthStack,
    check_shop_rights,
    connect,
    may,
    new_user,
    tls_options,
)
from tests.support.mesh import wait_until

SCRAM = "SCRAM-SHA-256"


def scram(stack: AuthStack, user: str, password: str, port: int = 0) -> Any:
    """A client of the router's amqps listener (or `port`, cleartext) with SCRAM alone."""
    if port:
        url = f"amqp://127.0.0.1:{port}"
        options: dict[str, Any] = {"timeout": 20, "virtual_host": "shop"}
    else:
        url, options = f"amqps://127.0.0.1:{stack.tls_port}", tls_options(stack.pki.ca_cert, "shop")
    return BlockingConnection(
        url, user=user, password=password, **{**options, "allowed_mechs": SCRAM}
    )


def refused(stack: AuthStack, user: str, password: str) -> str:
    with pytest.raises(ConnectionException) as refusal:
        scram(stack, user, password).close()
    return str(refusal.value)


def test_scram_over_tls_with_keycloaks_passwords_and_groups(stack: AuthStack) -> None:
    check_shop_rights(lambda user, password: scram(stack, user, password))
    assert "unauthorized" in refused(stack, "alice@shop", "not-her-password")
    assert "unauthorized" in refused(stack, "nobody@shop", "whatever")
    log = stack.auth_log.read_text()
    assert "refused 'nobody@shop': no such user" in log
    assert "alice-secret" not in log and "not-her-password" not in log


def test_a_listener_limited_to_scram_serves_scram(stack: AuthStack) -> None:
    """saslMechanisms: SCRAM-SHA-256 on a cleartext listener: SCRAM sends no password, so
    it may go without TLS; PLAIN is not offered there."""
    scram(stack, "alice@shop", "alice-secret", port=stack.scram_only_port).close()
    with pytest.raises(ConnectionException):
        connect(stack, "alice@shop", "alice-secret", "shop", stack.scram_only_port).close()


def test_scram_follows_keycloak_user_changes(stack: AuthStack) -> None:
    keycloak = stack.keycloak
    path = f"/enmesh/users/{new_user(stack, 'ivan@shop', 'ivan-secret', 'send_orders')['id']}"
    first = scram(stack, "ivan@shop", "ivan-secret")  # no router change, no enmesh-auth restart
    assert may(first, "orders", receive=False)
    assert not may(first, "orders", receive=True)

    new = {"type": "password", "value": "ivan-new", "temporary": False}
    keycloak.admin("PUT", f"{path}/reset-password", new)
    assert "unauthorized" in refused(stack, "ivan@shop", "ivan-secret")
    scram(stack, "ivan@shop", "ivan-new").close()

    keycloak.admin("PUT", path, {**keycloak.admin("GET", path), "enabled": False})
    assert "unauthorized" in refused(stack, "ivan@shop", "ivan-new")
    assert may(first, "orders", receive=False)  # the open connection carries on
    first.close()
    keycloak.admin("DELETE", path)
    assert "unauthorized" in refused(stack, "ivan@shop", "ivan-new")


def _keys(stack: AuthStack, user: str, token: str | None) -> tuple[int, dict[str, Any]]:
    query = urllib.parse.urlencode({"username": user})
    url = f"{stack.keycloak.url}/realms/enmesh/enmesh-scram/keys?{query}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    context = ssl.create_default_context(cafile=str(stack.pki.ca_cert))
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), context=context
        ) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as error:
        return error.code, {}


def _token(stack: AuthStack, form: dict[str, str]) -> str:
    context = ssl.create_default_context(cafile=str(stack.pki.ca_cert))
    request = urllib.request.Request(
        f"{stack.keycloak.url}/realms/enmesh/protocol/openid-connect/token",
        data=urllib.parse.urlencode(form).encode(),
    )
    with urllib.request.urlopen(request, context=context) as answer:
        return str(json.load(answer)["access_token"])


def test_only_enmesh_auths_account_reads_scram_keys_and_never_a_hash(stack: AuthStack) -> None:
    assert _keys(stack, "alice@shop", None)[0] == 401
    alices = _token(
        stack,
        {
            "grant_type": "password",
            "client_id": "enmesh-auth",
            "username": "alice@shop",
            "password": "alice-secret",
        },
    )
    assert _keys(stack, "alice@shop", alices)[0] == 403  # a user's own token: no
    other = {"clientId": "other-service", "secret": "other-secret", "publicClient": False,
             "serviceAccountsEnabled": True, "standardFlowEnabled": False}  # fmt: skip
    stack.keycloak.admin("POST", "/enmesh/clients", other)
    another = _token(
        stack,
        {"grant_type": "client_credentials", "client_id": "other-service",
         "client_secret": "other-secret"},
    )  # fmt: skip
    assert _keys(stack, "alice@shop", another)[0] == 403  # another service account: no

    lookup = _token(
        stack,
        {
            "grant_type": "client_credentials",
            "client_id": LOOKUP_CLIENT,
            "client_secret": LOOKUP_SECRET,
        },
    )
    status, answer = _keys(stack, "alice@shop", lookup)
    assert status == 200
    keys = answer["scram"]
    assert set(keys) == {"credential", "iterations", "salt", "serverKey", "storedKey"}
    assert keys["iterations"] == HASH_ITERATIONS  # the realm's policy
    # The keys are SCRAM's for alice's password (RFC 5802: StoredKey = H(HMAC(SaltedPassword,
    # "Client Key"))), computed here from the password alone.
    salted = hashlib.pbkdf2_hmac(
        "sha256", b"alice-secret", base64.b64decode(keys["salt"]), keys["iterations"]
    )
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    assert base64.b64decode(keys["storedKey"]) == hashlib.sha256(client_key).digest()
    assert answer["groups"] == [
        "/enmesh-managed",
        "/shop",
        "/shop/recv_orders",
        "/shop/send_orders",
    ]
    assert _keys(stack, "nobody@shop", lookup)[0] == 404
    assert _keys(stack, "../a/b", lookup)[0] == 404  # a name, never a path


def test_wrong_scram_proofs_count_towards_keycloaks_lockout(stack: AuthStack) -> None:
    """With the realm's brute-force detection on (Keycloak's default is off): a right
    proof clears the failures before it, as a login form's does; three wrong ones in a row
    lock the user out, and then the right password is refused too."""
    keycloak = stack.keycloak
    new_user(stack, "judy@shop", "judy-secret", "send_orders")
    lockout = {"bruteForceProtected": True, "failureFactor": 3, "waitIncrementSeconds": 300,
               "maxFailureWaitSeconds": 300, "quickLoginCheckMilliSeconds": 1}  # fmt: skip
    keycloak.admin("PUT", "/enmesh", lockout)
    try:
        for _ in range(2):
            assert "unauthorized" in refused(stack, "judy@shop", "a-guess")
        wait_until(  # the reports travel in the background
            lambda: _failures(stack, "judy@shop") == 2, 20, "Keycloak to count two failures"
        )
        scram(stack, "judy@shop", "judy-secret").close()  # reported: the count starts again
        for _ in range(2):
            assert "unauthorized" in refused(stack, "judy@shop", "a-guess")
        wait_until(lambda: _failures(stack, "judy@shop") == 2, 20, "Keycloak to count two failures")
        scram(stack, "judy@shop", "judy-secret").close()  # 2 failures since the success
        for _ in range(3):
            assert "unauthorized" in refused(stack, "judy@shop", "a-guess")
        wait_until(
            lambda: "unauthorized" in refused(stack, "judy@shop", "judy-secret"),
            20,
            "Keycloak to lock judy out",
        )
        assert "refused 'judy@shop': user disabled, locked out" in stack.auth_log.read_text()
    finally:
        keycloak.admin("PUT", "/enmesh", {"bruteForceProtected": False})


def _failures(stack: AuthStack, username: str) -> int:
    """Keycloak's count of a user's login failures (its attack-detection API)."""
    (user,) = stack.keycloak.admin("GET", f"/enmesh/users?exact=true&username={username}")
    return int(
        stack.keycloak.admin("GET", f"/enmesh/attack-detection/brute-force/users/{user['id']}")[
            "numFailures"
        ]
    )


def test_a_realm_from_before_scram_gets_its_policy_and_users_their_keys_at_next_login(
    stack: AuthStack,
) -> None:
    """A realm made without enmesh's password policy hashes with Keycloak's default
    (argon2), which holds no SCRAM key: SCRAM is refused and enmesh-auth's log says why.
    The sync (`enmesh apply`) sets the policy; the user's next PLAIN login has Keycloak
    hash the password again under it, and from then on SCRAM works."""
    keycloak = stack.keycloak
    keycloak.admin("PUT", "/enmesh", {"passwordPolicy": ""})
    new_user(stack, "kate@shop", "kate-secret", "send_orders")  # hashed with argon2
    assert "unauthorized" in refused(stack, "kate@shop", "kate-secret")
    assert "no SCRAM keys: the password is hashed with argon2" in stack.auth_log.read_text()

    admin = KeycloakAdmin(keycloak.url, str(stack.pki.ca_cert), "admin", keycloak.admin_password)
    synced = sync_realm(admin, load_model([MODEL]), PASSWORDS)
    assert "realm password policy" in synced.changed
    assert keycloak.admin("GET", "/enmesh")["passwordPolicy"] == PASSWORD_POLICY
    assert "unauthorized" in refused(stack, "kate@shop", "kate-secret")  # not hashed again yet

    connect(stack, "kate@shop", "kate-secret", "shop").close()
    scram(stack, "kate@shop", "kate-secret").close()


def test_the_providers_answer_gives_the_admin_apis_user_state(stack: AuthStack) -> None:
    """A remembered login is checked with one request to enmesh's provider where Keycloak
    has it, else with three to the admin API: both read the same state, and a password
    reset changes both stamps."""
    settings = KeycloakSettings(stack.keycloak.url, "enmesh", "enmesh-auth", None,
                                str(stack.pki.ca_cert))  # fmt: skip
    provider = UserLookup(settings, LOOKUP_CLIENT, LOOKUP_SECRET, provider=True)
    admin_api = UserLookup(settings, LOOKUP_CLIENT, LOOKUP_SECRET, provider=False)
    ivan = new_user(stack, "ivan@shop", "ivan-secret", "send_orders", "recv_orders")
    before = provider.state("ivan@shop")
    assert before is not None and before == admin_api.state("ivan@shop")
    assert before.usable and before.password_stamp
    assert before.groups == ("/shop/recv_orders", "/shop/send_orders")

    new_password = {"type": "password", "value": "ivan-new", "temporary": False}
    stack.keycloak.admin("PUT", f"/enmesh/users/{ivan['id']}/reset-password", new_password)
    after = provider.state("ivan@shop")
    assert after == admin_api.state("ivan@shop")
    assert after is not None and after.password_stamp != before.password_stamp
    assert provider.state("nobody@shop") is None and admin_api.state("nobody@shop") is None
