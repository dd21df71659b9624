"""The console's login to Keycloak (OpenID Connect), on a stack whose identity provider is
Keycloak: the authorization code flow with PKCE (S256), a state and a nonce, by Authlib's
OAuth 2 client (the field's maintained implementation; its `requests` session runs in
Starlette's thread pool like every other blocking call of the console).

The console is a confidential client (`enmesh-console`, its secret generated with the
stack's). The code is exchanged over TLS checked against the stack's CA, with the client's
secret, so the tokens come straight from Keycloak: the ID token's signature is not checked
again (OpenID Connect Core 3.1.3.7), its issuer, audience, nonce and expiry are. The
access token then stands in for the password on the user's management connections
(enmesh.auth.bearer has Keycloak introspect it); it is refreshed when it is about to
expire, and logging out of the console ends the Keycloak session too.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from authlib.common.errors import AuthlibBaseError
from authlib.integrations.requests_client import OAuth2Session
from requests import RequestException

from enmesh.auth.keycloak import jwt_claims
from enmesh.auth.realm import CONSOLE_CALLBACK_PATH, CONSOLE_CLIENT

log = logging.getLogger("enmesh.console")
PENDING_SECONDS = 600  # a login started and not finished is forgotten after this
RENEW_BEFORE_SECONDS = 60  # refresh an access token this long before it expires
TIMEOUT_SECONDS = 10


class OidcError(Exception):
    """A login or refresh Keycloak did not complete (said in words, no token in them)."""


@dataclass(frozen=True)
class OidcSettings:
    keycloak_url: str  # https://host:port, as browsers and the console reach Keycloak
    realm: str
    client_secret: str
    console_url: str  # https://host:port, as browsers reach the console
    ca: Path  # what Keycloak's certificate chains to
    client_id: str = CONSOLE_CLIENT

    @property
    def issuer(self) -> str:
        realm = urllib.parse.quote(self.realm, safe="")
        return f"{self.keycloak_url.rstrip('/')}/realms/{realm}"

    def endpoint(self, name: str) -> str:
        return f"{self.issuer}/protocol/openid-connect/{name}"

    @property
    def redirect_uri(self) -> str:
        return self.console_url.rstrip("/") + CONSOLE_CALLBACK_PATH


@dataclass(frozen=True)
class Tokens:
    access: str
    refresh: str
    expires_at: float  # wall-clock seconds (the access token's `exp`)
    identity: str  # preferred_username: `user@space`
    groups: tuple[str, ...]  # full paths, `/<space>/manage` among them

    @classmethod
    def of(cls, answer: dict[str, Any]) -> Tokens:
        claims = jwt_claims(str(answer.get("access_token", "")))
        return cls(
            access=str(answer["access_token"]),
            refresh=str(answer.get("refresh_token", "")),
            expires_at=float(claims.get("exp", time.time())),
            identity=str(claims.get("preferred_username", "")),
            groups=tuple(str(g) for g in claims.get("groups") or []),
        )

    def expiring(self) -> bool:
        return time.time() > self.expires_at - RENEW_BEFORE_SECONDS


@dataclass(frozen=True)
class _Pending:
    state: str
    nonce: str
    verifier: str
    started: float


class OidcLogin:
    def __init__(self, settings: OidcSettings) -> None:
        self.settings = settings
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()

    def _session(self, state: str | None = None) -> OAuth2Session:
        session = OAuth2Session(
            self.settings.client_id,
            self.settings.client_secret,
            scope="openid",
            state=state,
            redirect_uri=self.settings.redirect_uri,
            code_challenge_method="S256",
            default_timeout=TIMEOUT_SECONDS,
        )
        # Keycloak's certificate chains to the stack's CA. Not the environment's: with
        # trust_env, requests takes REQUESTS_CA_BUNDLE over `verify` (and proxies from it).
        session.trust_env = False
        session.verify = str(self.settings.ca)
        return session

    def start(self) -> tuple[str, str]:
        """A login begins: (the browser's cookie value for it, Keycloak's URL to go to)."""
        pending = _Pending(
            secrets.token_urlsafe(24),
            secrets.token_urlsafe(24),
            secrets.token_urlsafe(48),
            time.monotonic(),
        )
        url, _ = self._session().create_authorization_url(
            self.settings.endpoint("auth"),
            state=pending.state,
            code_verifier=pending.verifier,
            nonce=pending.nonce,
        )
        key = secrets.token_urlsafe(32)
        with self._lock:
            self._forget_old()
            self._pending[key] = pending
        return key, url

    def finish(self, key: str | None, callback_url: str) -> Tokens:
        """The browser came back from Keycloak: the code exchanged for tokens, checked."""
        with self._lock:
            self._forget_old()
            pending = self._pending.pop(key or "", None)
        if pending is None:
            raise OidcError("this login was not started here, or took too long: log in again")
        try:
            answer = self._session(pending.state).fetch_token(
                self.settings.endpoint("token"),
                authorization_response=callback_url,
                code_verifier=pending.verifier,
            )
        except (AuthlibBaseError, RequestException, ValueError) as exc:
            raise OidcError(f"Keycloak did not complete the login: {_said(exc)}") from None
        self._check_id_token(str(answer.get("id_token", "")), pending.nonce)
        return Tokens.of(answer)

    def _check_id_token(self, id_token: str, nonce: str) -> None:
        try:
            claims = jwt_claims(id_token)
        except ValueError as exc:
            raise OidcError(f"Keycloak's ID token: {exc}") from None
        audience = claims.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        problems = [
            what
            for what, ok in (
                ("issuer", claims.get("iss") == self.settings.issuer),
                ("audience", self.settings.client_id in audiences),
                ("nonce", claims.get("nonce") == nonce),
                ("expiry", float(claims.get("exp", 0)) > time.time()),
            )
            if not ok
        ]
        if problems:
            raise OidcError(f"Keycloak's ID token has a wrong {', '.join(problems)}")

    def refresh(self, tokens: Tokens) -> Tokens:
        try:
            answer = self._session().refresh_token(
                self.settings.endpoint("token"), refresh_token=tokens.refresh
            )
        except (AuthlibBaseError, RequestException, ValueError) as exc:
            raise OidcError(f"your Keycloak session ended ({_said(exc)}): log in again") from None
        return Tokens.of(answer)

    def logout(self, tokens: Tokens) -> None:
        """End the user's Keycloak session (back channel: the refresh token and our secret)."""
        form = {
            "client_id": self.settings.client_id,
            "client_secret": self.settings.client_secret,
            "refresh_token": tokens.refresh,
        }
        try:
            answer = self._session().request(
                "POST", self.settings.endpoint("logout"), data=form, withhold_token=True
            )
        except (AuthlibBaseError, RequestException) as exc:
            log.warning("Keycloak logout of %s failed: %s", tokens.identity, _said(exc))
            return
        if answer.status_code >= 300:
            log.warning("Keycloak logout of %s: HTTP %s", tokens.identity, answer.status_code)

    def _forget_old(self) -> None:
        now = time.monotonic()
        for key in [k for k, p in self._pending.items() if now - p.started > PENDING_SECONDS]:
            del self._pending[key]


def _said(exc: Exception) -> str:
    """An error's words without URLs' query strings (a code or token could be in one)."""
    return str(exc).split("?", 1)[0][:300] or type(exc).__name__
