"""Access tokens in place of passwords: the console logs a user in to Keycloak (OIDC, in
the browser) and opens that user's management connections with SASL PLAIN whose password
is the user's access token, as RabbitMQ's OAuth 2 plugin takes one. No SASL mechanism
for tokens is needed in the clients or the routers (proton's Cyrus build has none).

A password that is a JWT issued by this realm goes to Keycloak's token introspection
(RFC 7662) instead of a password grant. Keycloak decides: the token is active (signed by
the realm, not expired, its session not logged out, its user enabled); then it must have
been issued to the console's client and name the user who logs in. The user's groups come
from the same answer, so rights are exactly the password path's. The introspecting client
is enmesh-auth's service account (the lookup client): introspection needs a confidential
client, and that one exists on every Keycloak stack.
"""

from __future__ import annotations

import json
import logging
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Protocol

from enmesh.auth.frames import AUTH, OK, SYS_TEMP
from enmesh.auth.keycloak import KeycloakSettings, Verdict, jwt_claims
from enmesh.auth.realm import CONSOLE_CLIENT

log = logging.getLogger("enmesh.auth")


class Check(Protocol):
    def check(self, username: str, password: str) -> Verdict: ...


def is_realm_token(password: str, realm_path: str) -> bool:
    """Whether `password` is a JWT whose issuer is a realm at `realm_path` (`/realms/x`)."""
    if password.count(".") != 2:
        return False
    try:
        issuer = jwt_claims(password).get("iss")
    except ValueError:
        return False
    return isinstance(issuer, str) and issuer.endswith(realm_path)


class TokenOrPasswordCheck:
    """Tokens by introspection, anything else by `passwords` (grant or remembered)."""

    def __init__(
        self, settings: KeycloakSettings, client_id: str, client_secret: str, passwords: Check
    ) -> None:
        self.settings, self.passwords = settings, passwords
        self._client = {"client_id": client_id, "client_secret": client_secret}
        self._tls = ssl.create_default_context(cafile=settings.ca_file)

    def check(self, username: str, password: str) -> Verdict:
        if not is_realm_token(password, self.settings.realm_path):
            return self.passwords.check(username, password)
        try:
            answer = self._introspect(password)
        except urllib.error.HTTPError as exc:
            return Verdict(SYS_TEMP, reason=f"Keycloak's introspection answered HTTP {exc.code}")
        except (OSError, ValueError) as exc:
            return Verdict(SYS_TEMP, reason=f"Keycloak at {self.settings.url}: {exc}")
        return _token_verdict(username, answer)

    def _introspect(self, token: str) -> dict[str, Any]:
        url = f"{self.settings.token_endpoint}/introspect"
        form = {**self._client, "token": token, "token_type_hint": "access_token"}
        request = urllib.request.Request(
            url,
            data=urllib.parse.urlencode(form).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        with urllib.request.urlopen(
            request, timeout=self.settings.timeout, context=self._tls
        ) as answer:
            body = json.load(answer)
        if not isinstance(body, dict):
            raise ValueError("introspection did not answer a JSON object")
        return body


def _token_verdict(username: str, answer: dict[str, Any]) -> Verdict:
    if answer.get("active") is not True:
        return Verdict(AUTH, reason="access token not active (expired, logged out or disabled)")
    if answer.get("azp") != CONSOLE_CLIENT:
        return Verdict(
            AUTH, reason=f"access token issued to {answer.get('azp')!r}, not the console"
        )
    if answer.get("preferred_username") != username:
        return Verdict(AUTH, reason="access token of another user")
    groups = answer.get("groups") or []
    return Verdict(OK, username, tuple(str(g) for g in groups))
