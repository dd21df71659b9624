"""The console's Keycloak login, the parts that need no Keycloak: which passwords are
tokens, what a token's introspection must say, the realm's console client and how the
sync puts it back (tests/auth runs the whole login against a real Keycloak)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from enmesh.auth.bearer import _token_verdict, is_realm_token
from enmesh.auth.frames import AUTH, OK
from enmesh.auth.realm import CONSOLE_CLIENT, ConsoleClient, realm_json, space_groups
from enmesh.auth.sync import SyncResult, _Realm, _wanted_users, wanted_of_export
from enmesh.console.mesh import Credentials
from enmesh.console.oidc import OidcError, OidcLogin, OidcSettings, Tokens
from enmesh.console.sessions import Session
from enmesh.model import load_model

REALM_PATH = "/realms/enmesh"


def jwt(claims: dict[str, Any]) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


@pytest.mark.parametrize(
    ("password", "token"),
    [
        (jwt({"iss": "https://kc.example:8443/realms/enmesh"}), True),
        (jwt({"iss": "https://kc.example:8443/realms/other"}), False),  # another realm's
        (jwt({"sub": "no issuer"}), False),
        ("a.b.c", False),  # three parts, no JSON
        ("plain-password", False),
        ("with.one.dot.too.many", False),
    ],
)
def test_only_a_jwt_of_the_realm_is_taken_for_a_token(password: str, token: bool) -> None:
    assert is_realm_token(password, REALM_PATH) is token


def introspection(**changes: Any) -> dict[str, Any]:
    answer = {
        "active": True,
        "azp": CONSOLE_CLIENT,
        "preferred_username": "olga@shop",
        "groups": ["/shop/manage", "/shop/recv_orders"],
    }
    return {**answer, **changes}


def test_an_active_console_token_of_the_user_logs_in_with_its_groups() -> None:
    verdict = _token_verdict("olga@shop", introspection())
    assert (verdict.code, verdict.identity) == (OK, "olga@shop")
    assert verdict.groups == ("/shop/manage", "/shop/recv_orders")


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"active": False}, "not active"),
        ({"azp": "enmesh-auth"}, "not the console"),
        ({"preferred_username": "alice@shop"}, "another user"),
    ],
)
def test_a_token_is_refused_unless_active_the_consoles_and_the_users(
    changes: dict[str, Any], reason: str
) -> None:
    verdict = _token_verdict("olga@shop", introspection(**changes))
    assert verdict.code == AUTH and reason in verdict.reason


def test_the_realm_has_the_console_client_with_pkce_and_its_callback() -> None:
    model = load_model([Path(__file__).parents[1] / "fixtures" / "keycloak.model.yml"])
    passwords = {"shop-alice": "a", "shop-bob": "b", "lab-carol": "c"}
    client = ConsoleClient("s3cret", "https://127.0.0.1:9443/")
    realm = json.loads(realm_json(model, passwords, console=client))
    (console,) = [c for c in realm["clients"] if c["clientId"] == CONSOLE_CLIENT]
    assert console["redirectUris"] == ["https://127.0.0.1:9443/login/keycloak/callback"]
    assert console["attributes"]["pkce.code.challenge.method"] == "S256"
    assert (console["publicClient"], console["directAccessGrantsEnabled"]) == (False, False)
    assert console["secret"] == "s3cret"
    assert CONSOLE_CLIENT not in realm_json(model, passwords)


class FakeAdmin:
    def __init__(self, clients: list[dict[str, Any]]) -> None:
        self.clients = clients
        self.calls: list[tuple[str, str, Any]] = []

    def call(self, method: str, path: str, body: Any = None) -> Any:
        self.calls.append((method, path, body))
        return self.clients if method == "GET" else None


def test_the_sync_creates_the_console_client_then_puts_back_what_changed() -> None:
    client = ConsoleClient("s3cret", "https://127.0.0.1:9443")
    missing = FakeAdmin([])
    result = SyncResult()
    _Realm(missing, result).align_client(client.representation())
    assert [c[:2] for c in missing.calls][-1] == ("POST", "/enmesh/clients")
    assert result.created == ["client enmesh-console"]

    current = {"id": "c1", **client.representation()}
    same = FakeAdmin([current])
    _Realm(same, SyncResult()).align_client(client.representation())
    assert [c[0] for c in same.calls] == ["GET"]

    moved = FakeAdmin([{**current, "redirectUris": ["https://old:1/cb"], "secret": "old"}])
    result = SyncResult()
    _Realm(moved, result).align_client(client.representation())
    method, path, body = moved.calls[-1]
    assert (method, path) == ("PUT", "/enmesh/clients/c1")
    assert body["secret"] == "s3cret" and body["redirectUris"] == current["redirectUris"]
    assert result.changed == ["client enmesh-console"]


def test_a_callback_for_a_login_not_started_here_is_refused(tmp_path: Path) -> None:
    settings = OidcSettings("https://kc:8443", "enmesh", "s", "https://c:9443", tmp_path / "ca")
    login = OidcLogin(settings)
    key, url = login.start()
    assert url.startswith("https://kc:8443/realms/enmesh/protocol/openid-connect/auth?")
    assert "code_challenge_method=S256" in url and "nonce=" in url
    with pytest.raises(OidcError, match="not started here"):
        login.finish("another-key", "https://c:9443/login/keycloak/callback?code=x&state=y")
    with pytest.raises(OidcError, match="not started here"):
        login.finish(None, "https://c:9443/login/keycloak/callback?code=x&state=y")
    # Its own key but another login's state: refused before any request; and used up.
    with pytest.raises(OidcError, match="did not complete"):
        login.finish(key, "https://c:9443/login/keycloak/callback?code=x&state=forged")
    with pytest.raises(OidcError, match="not started here"):
        login.finish(key, "https://c:9443/login/keycloak/callback?code=x&state=forged")


def test_tokens_say_who_and_when_they_expire() -> None:
    access = jwt({"preferred_username": "olga@shop", "exp": 4_000_000_000, "groups": ["/a"]})
    tokens = Tokens.of({"access_token": access, "refresh_token": "r"})
    assert (tokens.identity, tokens.groups, tokens.expiring()) == ("olga@shop", ("/a",), False)
    expired = Tokens.of({"access_token": jwt({"exp": 1}), "refresh_token": "r"})
    assert expired.expiring()


def test_a_realm_export_asks_for_what_its_model_asks_for() -> None:
    """The Kubernetes sync Job reads the realm Secret, not the model: the same groups,
    users, rights and passwords come out of it; service accounts are not users to align."""
    model = load_model([Path(__file__).parents[1] / "fixtures" / "keycloak.model.yml"])
    passwords = {"shop-alice": "a", "shop-bob": "b", "lab-carol": "c"}
    export = json.loads(realm_json(model, passwords, lookup_secret="l"))
    wanted = wanted_of_export(export)
    assert wanted.groups == space_groups(model)
    assert wanted.users == _wanted_users(model, passwords)
    assert wanted.export == export and wanted.clients == ()
    client = ConsoleClient("s", "https://localhost:8443")
    with_console = json.loads(realm_json(model, passwords, lookup_secret="l", console=client))
    assert wanted_of_export(with_console).clients == (client.representation(),)


def test_a_session_renews_its_token_before_it_expires_and_reopens_its_links() -> None:
    """The access token is the management connections' password: one about to expire is
    refreshed before links are handed out, and the links are new ones carrying it."""
    old = Tokens.of({"access_token": jwt({"exp": 1, "preferred_username": "o@s"})})
    new = Tokens.of({"access_token": jwt({"exp": 4_000_000_000, "preferred_username": "o@s"})})
    renewed: list[Tokens] = []

    def renew(tokens: Tokens) -> Tokens:
        renewed.append(tokens)
        return new

    session = Session(Credentials("o@s", old.access, "s"), "s", tokens=old, renew=renew)
    ca = Path("/nonexistent/ca.crt")  # links open on first use: none is opened here
    first = session.management(ca)
    assert renewed == [old] and first.who.password == new.access
    assert session.management(ca) is first and renewed == [old]  # fresh: kept as it is
