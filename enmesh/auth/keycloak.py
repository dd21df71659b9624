"""Checking a user's password with Keycloak, and reading the user's groups.

Keycloak's token endpoint with the password grant ("direct access grant", RFC 6749
4.3) on a client of the realm: Keycloak itself checks the password against its own
store (with its hashing, brute-force detection, disabled users and required actions),
and the access token it returns carries the user's groups (the realm's group-membership
mapper). The admin API cannot do this: it never returns a password hash, so nothing
outside Keycloak can verify a password, and SCRAM (which needs the salted password on
the server side) is out of reach without code inside Keycloak (EnMasse shipped a Java
SPI for that). The token comes straight from Keycloak over TLS in answer to our own
request, so its signature adds nothing here and is not checked.

The standard library's urllib is enough for one form POST; it runs in a thread so the
service's event loop keeps serving other connections meanwhile.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from enmesh.auth.frames import AUTH, OK, SYS_TEMP

log = logging.getLogger("enmesh.auth")


@dataclass(frozen=True)
class Verdict:
    code: int  # a sasl-code: OK, AUTH (refused), SYS_TEMP (Keycloak unreachable)
    identity: str = ""
    groups: tuple[str, ...] = ()
    reason: str = ""  # why not OK, for the log; never the password


@dataclass(frozen=True)
class KeycloakSettings:
    url: str  # e.g. https://127.0.0.1:8443
    realm: str
    client_id: str
    client_secret: str | None = None
    ca_file: str | None = None
    timeout: float = 10.0

    @property
    def realm_path(self) -> str:
        """`/realms/<realm>`, quoted: the root of the realm's endpoints."""
        return f"/realms/{urllib.parse.quote(self.realm, safe='')}"

    @property
    def token_endpoint(self) -> str:
        return f"{self.url.rstrip('/')}{self.realm_path}/protocol/openid-connect/token"


class PasswordCheck:
    def __init__(self, settings: KeycloakSettings) -> None:
        self.settings = settings
        self._tls = ssl.create_default_context(cafile=settings.ca_file)

    def check(self, username: str, password: str) -> Verdict:
        form = {
            "grant_type": "password",
            "client_id": self.settings.client_id,
            "username": username,
            "password": password,
            "scope": "openid",
        }
        if self.settings.client_secret:
            form["client_secret"] = self.settings.client_secret
        request = urllib.request.Request(
            self.settings.token_endpoint,
            data=urllib.parse.urlencode(form).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        try:
            with urllib.request.urlopen(
                request, timeout=self.settings.timeout, context=self._tls
            ) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as exc:
            return _refusal(exc)
        except (OSError, ValueError) as exc:  # unreachable, TLS, timeout, not JSON
            return Verdict(SYS_TEMP, reason=f"Keycloak at {self.settings.url}: {exc}")
        claims = jwt_claims(str(body.get("access_token", "")))
        identity = str(claims.get("preferred_username") or username)
        groups = claims.get("groups") or []
        return Verdict(OK, identity, tuple(str(g) for g in groups))


def _refusal(exc: urllib.error.HTTPError) -> Verdict:
    try:
        error = json.load(exc)
    except ValueError:
        error = {}
    if exc.code in (400, 401) and error.get("error") in ("invalid_grant", "unauthorized_client"):
        # "Invalid user credentials", "Account disabled", "Account is not fully set up"
        return Verdict(AUTH, reason=str(error.get("error_description", error["error"])))
    return Verdict(SYS_TEMP, reason=f"Keycloak answered HTTP {exc.code}: {error or exc.reason}")


def jwt_claims(token: str) -> dict[str, Any]:
    """The payload of a JWT (header.payload.signature), unverified: callers have it from
    Keycloak over TLS, or have Keycloak check it."""
    try:
        payload = token.split(".")[1]
        decoded = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError) as exc:
        raise ValueError(f"not a JWT: {exc}") from exc
    return decoded if isinstance(decoded, dict) else {}
