"""SCRAM-SHA-256 (RFC 5802, RFC 7677) in enmesh-auth, against Keycloak's users.

Keycloak's own API never returns a password hash, so enmesh ships a small Keycloak
provider (enmesh/deploy/keycloak_scram) that answers a user's SCRAM keys: salt, iteration
count, StoredKey and ServerKey, derived from the user's pbkdf2-sha256 password hash (the
realm's password policy, enmesh.auth.realm), never the hash itself; with them the user's
state (enabled, no required action, not locked out) and groups. Only enmesh-auth's
service account may read them (enmesh.auth.lookup). The exchange itself is scramp's, a
SCRAM library kept for pg8000 and asyncpg's users, not ours.

A client never learns whether a user exists, is disabled or has a password stored in
another hash: each of those gets keys derived from a per-process secret instead, and the
exchange fails at the proof as a wrong password does; enmesh-auth's log says why. A wrong
proof is reported to Keycloak, which counts it towards its brute-force lockout.
"""

from __future__ import annotations

import hmac
import logging
import os
from typing import Protocol

from scramp import ScramException, ScramMechanism  # type: ignore[import-untyped]

from enmesh.auth.frames import AUTH, OK, SYS_TEMP
from enmesh.auth.keycloak import Verdict
from enmesh.auth.lookup import AdminApiError, ScramRecord
from enmesh.auth.realm import HASH_ITERATIONS

log = logging.getLogger("enmesh.auth")
MECHANISM = "SCRAM-SHA-256"


class ScramSource(Protocol):
    def scram_keys(self, username: str) -> ScramRecord | None: ...

    def report_failure(self, username: str) -> None: ...


class ScramRefusedError(Exception):
    """The exchange ends before a challenge: the client's first message or Keycloak."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.reason)
        self.verdict = verdict


class ScramExchange:
    """One client's exchange: `first` (client-first -> server-first), then `final`
    (client-final -> verdict and server-final). Both may block on Keycloak: run them in a
    thread."""

    def __init__(self, source: ScramSource, decoy_key: bytes) -> None:
        self.source, self.decoy_key = source, decoy_key
        self.username = ""
        self._record: ScramRecord | None = None
        self._refusal = ""  # why the keys are a decoy, for the log
        self._server = ScramMechanism(MECHANISM).make_server(self._keys)

    def first(self, client_first: str) -> str:
        """scramp refuses an authzid (acting as another user), as PLAIN here refuses one
        that differs from the username."""
        try:
            self._server.set_client_first(client_first)
        except ScramException as exc:
            cause = exc.__cause__
            if isinstance(cause, AdminApiError):
                raise ScramRefusedError(Verdict(SYS_TEMP, reason=str(cause))) from exc
            raise ScramRefusedError(Verdict(AUTH, reason=f"SCRAM client-first: {exc}")) from exc
        return str(self._server.get_server_first())

    def final(self, client_final: str) -> tuple[Verdict, str]:
        try:
            self._server.set_client_final(client_final)
        except ScramException as exc:
            if self._record is not None and not self._refusal:
                self.source.report_failure(self.username)
            return Verdict(AUTH, reason=self._refusal or f"SCRAM: {exc}"), ""
        record = self._record
        if record is None or self._refusal:
            return Verdict(AUTH, reason=self._refusal or "no such user"), ""
        return Verdict(OK, record.username, record.groups), str(self._server.get_server_final())

    def _keys(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        """scramp's auth_fn: the user's keys, or a decoy for a user that cannot log in."""
        self.username = username
        record = self.source.scram_keys(username)  # AdminApiError: Keycloak unreachable
        self._record = record
        if record is None:
            self._refusal = "no such user"
        elif not record.usable:
            self._refusal = "user disabled, locked out or with a required action"
        elif record.unavailable:
            self._refusal = f"no SCRAM keys: {record.unavailable}"
        else:
            return record.salt, record.stored_key, record.server_key, record.iterations
        return self._decoy(username)

    def _decoy(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        def derived(label: str) -> bytes:
            return hmac.new(self.decoy_key, f"{label}\0{username}".encode(), "sha256").digest()

        return derived("salt")[:16], derived("stored"), derived("server"), HASH_ITERATIONS


def decoy_key() -> bytes:
    """Made at start, held in memory: a username's decoy salt stays the same meanwhile."""
    return os.urandom(32)
