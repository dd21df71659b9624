"""Keycloak's admin REST API, as its administrator: what `enmesh apply` needs to manage
the realm's users (enmesh.auth.sync).

The token comes from the `master` realm's `admin-cli` client with the password grant of
the administrator Keycloak was bootstrapped with, and is fetched again for each sync
(a sync is a handful of calls, run when the model changes). urllib over TLS, checked
against the stack's CA: no new dependency.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

UNAUTHORIZED = 401


class KeycloakAdminError(Exception):
    """Keycloak's admin API refused a call or could not be reached (said in words)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status of a refusal; None: unreachable


@dataclass
class KeycloakAdmin:
    url: str  # https://host:port
    ca_file: str
    username: str
    password: str = field(repr=False)
    timeout: float = 30.0
    _token: str | None = field(default=None, repr=False)

    def _open(self, request: urllib.request.Request) -> bytes:
        context = ssl.create_default_context(cafile=self.ca_file)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as answer:
                return bytes(answer.read())
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")[:300]
            raise KeycloakAdminError(
                f"Keycloak {request.get_method()} {request.full_url}: {error.code} {detail}",
                error.code,
            ) from None
        except (OSError, ssl.SSLError) as error:
            raise KeycloakAdminError(f"Keycloak at {self.url} unreachable: {error}") from None

    def _login(self) -> str:
        form = urllib.parse.urlencode(
            {
                "grant_type": "password",
                "client_id": "admin-cli",
                "username": self.username,
                "password": self.password,
            }
        ).encode()
        url = f"{self.url}/realms/master/protocol/openid-connect/token"
        token = json.loads(self._open(urllib.request.Request(url, data=form)))["access_token"]
        return str(token)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """One call under `/admin/realms` (`path` starts with `/`); the decoded answer. An
        expired token (admin-cli's live a minute) is renewed once and the call made again."""
        fresh = self._token is None
        if self._token is None:
            self._token = self._login()
        try:
            return self._call(method, path, body)
        except KeycloakAdminError as error:
            if error.status != UNAUTHORIZED or fresh:
                raise
        self._token = self._login()
        return self._call(method, path, body)

    def _call(self, method: str, path: str, body: Any) -> Any:
        request = urllib.request.Request(
            f"{self.url}/admin/realms{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"},
        )
        text = self._open(request)
        return json.loads(text) if text else None
