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
client, and that one exists on every Keycloak stack; its kept-open connection serves.
"""

from __future__ import annotations

from typing import Any

from enmesh.auth.frames import AUTH, OK, SYS_TEMP
from enmesh.auth.keycloak import Verdict, jwt_claims
from enmesh.auth.lookup import AdminApiError, UserLookup
from enmesh.auth.realm import CONSOLE_CLIENT
from enmesh.auth.verdicts import Check


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

    def __init__(self, lookup: UserLookup, passwords: Check) -> None:
        self.lookup, self.passwords = lookup, passwords

    def check(self, username: str, password: str) -> Verdict:
        if not is_realm_token(password, self.lookup.settings.realm_path):
            return self.passwords.check(username, password)
        try:
            answer = self.lookup.introspect(password)
        except AdminApiError as exc:
            return Verdict(SYS_TEMP, reason=str(exc))
        return _token_verdict(username, answer)


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
