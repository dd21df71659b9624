"""Reading a user's current state from Keycloak's admin API, as a service account.

What a remembered login must still hold before it is trusted again (enmesh.auth.verdicts):
the user exists with the same id, is enabled, has no required action, has the same
password credential (its id and creation time change when the password is set or reset),
and which groups it is in now. No password hashing: a few milliseconds in Keycloak against
the tens a password grant costs (PBKDF2 at the realm's iterations, then a signed token).
Where Keycloak has enmesh's provider (the keycloak role installs it; `--scram` says so) it
is one GET of the provider's answer, which also holds the SCRAM keys; elsewhere (the
Kubernetes image) three GETs of the admin API.

The service account is the realm's confidential client `enmesh-auth-lookup` with the
`realm-management` role `view-users` only (enmesh.auth.realm); the same account alone may
read users' SCRAM keys from the realm's enmesh-scram resource (enmesh.auth.scram). Its
token comes from the client-credentials grant and is reused until shortly before it
expires. One HTTPS connection per worker thread is kept open (http.client), so a lookup
costs no TLS handshake.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from enmesh.auth.keycloak import KeycloakSettings

log = logging.getLogger("enmesh.auth")

LOOKUP_CLIENT = "enmesh-auth-lookup"
SCRAM_RESOURCE = "enmesh-scram"  # the realm resource of enmesh/deploy/keycloak_scram
NO_SUCH_USER = b'{"error":"no such user"}'  # its answer (404) for a user Keycloak lacks
TOKEN_MARGIN_SECONDS = 30.0  # a token this close to expiry is renewed first


class AdminApiError(Exception):
    """Keycloak's admin API could not answer; the caller falls back to a password grant."""


@dataclass(frozen=True)
class UserState:
    user_id: str
    usable: bool  # enabled, and no required action would hold a login
    password_stamp: tuple[tuple[str, int], ...]  # (credential id, created) of its passwords
    groups: tuple[str, ...]  # full paths, as the token's `groups` claim has them


@dataclass(frozen=True)
class ScramRecord:
    """What Keycloak's enmesh-scram resource answers for one user."""

    username: str
    usable: bool  # enabled, no required action, not locked out
    groups: tuple[str, ...]  # full paths
    salt: bytes = b""
    iterations: int = 0
    stored_key: bytes = b""
    server_key: bytes = b""
    unavailable: str = ""  # why there are no keys (e.g. the password's hash), or ""
    failures: int = 0  # login failures Keycloak counts now (brute-force detection)


class UserLookup:
    def __init__(
        self,
        settings: KeycloakSettings,
        client_id: str,
        client_secret: str,
        provider: bool = False,
    ) -> None:
        """`provider`: Keycloak has enmesh's provider (enmesh/deploy/keycloak_scram), whose
        one answer replaces the admin API's three for a user's state."""
        self.settings, self.provider = settings, provider
        self.client_id, self.client_secret = client_id, client_secret
        parts = urllib.parse.urlsplit(settings.url)
        if parts.scheme != "https" or not parts.hostname:
            raise ValueError(f"Keycloak URL {settings.url!r}: the admin API is read over https")
        self._host, self._port = parts.hostname, parts.port or 443
        self._base = parts.path.rstrip("/")
        self._tls = ssl.create_default_context(cafile=settings.ca_file)
        self._local = threading.local()
        self._token_lock = threading.Lock()
        self._token: tuple[str, float] | None = None  # (access token, monotonic expiry)

    def state(self, username: str) -> UserState | None:
        """The user's state now, or None if Keycloak has no such user: one request to
        enmesh's provider where Keycloak has it, else three to the admin API."""
        if self.provider:
            return self._state_from_provider(username)
        realm = f"/admin{self.settings.realm_path}"
        query = urllib.parse.urlencode(
            {"username": username, "exact": "true", "briefRepresentation": "false"}
        )
        found = [u for u in self._get(f"{realm}/users?{query}") if u.get("username") == username]
        if not found:
            return None
        user = found[0]
        user_id = str(user["id"])
        quoted = urllib.parse.quote(user_id, safe="")
        credentials = self._get(f"{realm}/users/{quoted}/credentials")
        groups = self._get(f"{realm}/users/{quoted}/groups?briefRepresentation=true&max=1000")
        stamp = sorted(
            (str(c.get("id")), int(c.get("createdDate") or 0))
            for c in credentials
            if c.get("type") == "password"
        )
        return UserState(
            user_id=user_id,
            usable=bool(user.get("enabled")) and not user.get("requiredActions"),
            password_stamp=tuple(stamp),
            groups=tuple(sorted(str(g["path"]) for g in groups)),
        )

    def _state_from_provider(self, username: str) -> UserState | None:
        answer = self._keys_answer(username)
        return None if answer is None else _from_answer(_user_state, answer)

    # --- SCRAM keys (enmesh.auth.scram) -------------------------------------------------------

    def scram_keys(self, username: str) -> ScramRecord | None:
        """The user's SCRAM keys and state from the realm's enmesh-scram resource, or None
        if Keycloak has no such user."""
        answer = self._keys_answer(username)
        return None if answer is None else _from_answer(_scram_record, answer)

    def _keys_answer(self, username: str) -> Any:
        """The provider's answer for `username` (JSON), or None if Keycloak has no such user."""
        query = urllib.parse.urlencode({"username": username})
        status, body = self._authorized("GET", f"{self._scram_base}/keys?{query}")
        if status == 404 and body.strip() == NO_SUCH_USER:
            return None
        if status == 404:
            raise AdminApiError(
                f"Keycloak at {self.settings.url} has no {SCRAM_RESOURCE} resource "
                "(enmesh's provider is not installed there)"
            )
        if status != 200:
            raise AdminApiError(f"Keycloak's enmesh-scram resource answered HTTP {status}")
        return _json(body, "Keycloak's enmesh-scram answer")

    def report(self, username: str, success: bool) -> None:
        """A SCRAM proof's result, for Keycloak's brute-force detection (a success resets
        the user's failure count, as a login form's does). The login is decided either
        way: a report that does not arrive is logged."""
        outcome = "success" if success else "failure"
        query = urllib.parse.urlencode({"username": username})
        try:
            status, _ = self._authorized("POST", f"{self._scram_base}/{outcome}?{query}")
        except AdminApiError as exc:
            log.warning("could not report a SCRAM %s of %r: %s", outcome, username, exc)
            return
        if status != 204:
            log.warning("Keycloak answered HTTP %d to a SCRAM %s of %r", status, outcome, username)

    @property
    def _scram_base(self) -> str:
        return f"{self.settings.realm_path}/{SCRAM_RESOURCE}"

    # --- HTTP ------------------------------------------------------------------------------

    def _authorized(self, method: str, path: str) -> tuple[int, bytes]:
        """A request with the service account's token, renewed once on 401."""
        status, body = self._request(method, path, {"Authorization": f"Bearer {self._bearer()}"})
        if status == 401:  # revoked or expired early: one more try with a new token
            self._token = None
            status, body = self._request(
                method, path, {"Authorization": f"Bearer {self._bearer()}"}
            )
        return status, body

    def _get(self, path: str) -> Any:
        status, body = self._authorized("GET", path)
        if status != 200:
            raise AdminApiError(f"Keycloak admin API answered HTTP {status} to GET {path}")
        return _json(body, f"Keycloak admin API: GET {path}")

    def _bearer(self) -> str:
        with self._token_lock:
            if self._token is not None and time.monotonic() < self._token[1]:
                return self._token[0]
            status, body = self._post_form(self._token_path, {"grant_type": "client_credentials"})
            if status != 200:
                raise AdminApiError(
                    f"Keycloak refused client {self.client_id!r} a token (HTTP {status})"
                )
            try:
                answer = json.loads(body)
                token, lifetime = str(answer["access_token"]), float(answer["expires_in"])
            except (ValueError, KeyError) as exc:
                raise AdminApiError(f"Keycloak's token answer is not usable: {exc}") from exc
            self._token = (token, time.monotonic() + lifetime - TOKEN_MARGIN_SECONDS)
            return token

    def introspect(self, token: str) -> dict[str, Any]:
        """Keycloak's verdict on an access token (RFC 7662), asked as this client."""
        form = {"token": token, "token_type_hint": "access_token"}
        status, body = self._post_form(f"{self._token_path}/introspect", form)
        if status != 200:
            raise AdminApiError(f"Keycloak's introspection answered HTTP {status}")
        answer = _json(body, "Keycloak's introspection")
        if not isinstance(answer, dict):
            raise AdminApiError("Keycloak's introspection did not answer a JSON object")
        return answer

    @property
    def _token_path(self) -> str:
        return f"{self.settings.realm_path}/protocol/openid-connect/token"

    def _post_form(self, path: str, form: dict[str, str]) -> tuple[int, bytes]:
        """A form POST authenticated with this client's id and secret."""
        credentials = {"client_id": self.client_id, "client_secret": self.client_secret}
        body = urllib.parse.urlencode({**credentials, **form}).encode()
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        return self._request("POST", path, headers, body)

    def _request(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None = None
    ) -> tuple[int, bytes]:
        """One request on this thread's kept-open connection (reopened once if it broke)."""
        for attempt in (1, 2):
            connection = self._connection()
            try:
                connection.request(method, self._base + path, body=body, headers=headers)
                response = connection.getresponse()
                return response.status, response.read()
            except (OSError, http.client.HTTPException) as exc:
                connection.close()
                self._local.connection = None
                if attempt == 2:
                    raise AdminApiError(f"Keycloak at {self.settings.url}: {exc}") from exc
        raise AssertionError("unreachable")

    def _connection(self) -> http.client.HTTPSConnection:
        connection: http.client.HTTPSConnection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPSConnection(
                self._host, self._port, timeout=self.settings.timeout, context=self._tls
            )
            self._local.connection = connection
        return connection


def _json(body: bytes, what: str) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:
        raise AdminApiError(f"{what} is not JSON: {exc}") from exc


_Parsed = TypeVar("_Parsed")


def _from_answer(parse: Callable[[Any], _Parsed], answer: Any) -> _Parsed:
    """What `parse` reads from the provider's answer; a field missing or of the wrong type
    is Keycloak not answering usably, as an HTTP error is."""
    try:
        return parse(answer)
    except (ValueError, KeyError, TypeError) as exc:
        raise AdminApiError(f"Keycloak's enmesh-scram answer is not usable: {exc}") from exc


def _user_state(answer: Any) -> UserState:
    stamp = sorted((str(p["id"]), int(p["created"])) for p in answer["passwords"])
    return UserState(
        user_id=str(answer["id"]),
        usable=bool(answer["usable"]),  # locked out counts too, as for SCRAM
        password_stamp=tuple(stamp),
        groups=tuple(sorted(str(g) for g in answer["groups"])),
    )


def _scram_record(answer: Any) -> ScramRecord:
    keys = answer.get("scram") or {}
    return ScramRecord(
        username=str(answer["username"]),
        usable=bool(answer["usable"]),
        groups=tuple(str(g) for g in answer["groups"]),
        salt=base64.b64decode(keys.get("salt", "")),
        iterations=int(keys.get("iterations", 0)),
        stored_key=base64.b64decode(keys.get("storedKey", "")),
        server_key=base64.b64decode(keys.get("serverKey", "")),
        unavailable=str(answer.get("unavailable", "")),
        failures=int(answer.get("failures", 0)),
    )
