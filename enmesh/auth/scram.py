"""SCRAM-SHA-256 (RFC 5802, RFC 7677) in enmesh-auth, against Keycloak's users.

Keycloak's own API never returns a password hash, so enmesh ships a small Keycloak
provider (enmesh/deploy/keycloak_scram) that answers a user's SCRAM keys: salt, iteration
count, StoredKey and ServerKey, derived from the user's pbkdf2-sha256 password hash (the
realm's password policy, enmesh.auth.realm), never the hash itself; with them the user's
state (enabled, no required action, not locked out) and groups. Only enmesh-auth's
service account may read them (enmesh.auth.lookup). The exchange itself is scramp's, a
SCRAM library kept for pg8000 and asyncpg's users, not ours.

A client does not learn whether a user exists: a name Keycloak lacks (or whose password
is stored in a hash that holds no SCRAM key) gets a decoy challenge, its salt derived from
the name under a key derived from the service account's secret (so it stays the same
across restarts, as a real salt does), and the exchange fails at the proof as a wrong
password does. A user who exists but may not log in now (disabled, locked out, a required
action) gets its real challenge and is refused after the proof, so locking a user out
changes nothing a client sees. enmesh-auth's log says why. Each wrong proof is reported to
Keycloak, for its brute-force detection, and a right one only while Keycloak counts
failures for the user (the keys' answer says how many), since a success only clears them:
nearly every login then costs Keycloak one request, not two. Reports go after the verdict,
in the background, so their round trip does not time the answer. (A failure reported
between the keys' read and a right proof stays counted until the next right proof.)
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable
from typing import Protocol

from scramp import ScramException, ScramMechanism  # type: ignore[import-untyped]

from enmesh.auth.frames import AUTH, OK, SYS_TEMP
from enmesh.auth.keycloak import Verdict
from enmesh.auth.lookup import AdminApiError, ScramRecord
from enmesh.auth.realm import HASH_ITERATIONS

MECHANISM = "SCRAM-SHA-256"
_SCRAM_SHA_256 = ScramMechanism(MECHANISM)  # stateless: one for every exchange


class ScramSource(Protocol):
    def scram_keys(self, username: str) -> ScramRecord | None: ...

    def report(self, username: str, success: bool) -> None: ...


def _in_background(report: Callable[[], None]) -> None:
    """The verdict does not wait for Keycloak's answer to a report."""
    threading.Thread(target=report, daemon=True, name="scram-report").start()


class ScramRefusedError(Exception):
    """The exchange ends before a challenge: the client's first message or Keycloak."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.reason)
        self.verdict = verdict


class ScramExchange:
    """One client's exchange: `first` (client-first -> server-first), then `final`
    (client-final -> verdict and server-final). Both may block on Keycloak: run them in a
    thread."""

    def __init__(
        self,
        source: ScramSource,
        decoy_key: bytes,
        run: Callable[[Callable[[], None]], None] = _in_background,
    ) -> None:
        """`run` runs a report to Keycloak (in a thread of its own unless told otherwise)."""
        self.source, self.decoy_key, self._run = source, decoy_key, run
        self.username = ""
        self._record: ScramRecord | None = None
        self._refusal = ""  # why the login is refused whatever the proof, for the log
        self._server = _SCRAM_SHA_256.make_server(self._keys)

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
        record = self._record
        try:
            self._server.set_client_final(client_final)
        except ScramException as exc:
            if record is not None and not record.unavailable:  # a guess at a real password
                self._report(success=False)
            return Verdict(AUTH, reason=self._refusal or f"SCRAM: {exc}"), ""
        if record is None or self._refusal:  # no record: _refusal says so
            return Verdict(AUTH, reason=self._refusal), ""
        if record.failures:  # a success clears the count; with none, nothing to tell
            self._report(success=True)
        return Verdict(OK, record.username, record.groups), str(self._server.get_server_final())

    def _report(self, success: bool) -> None:
        username, source = self.username, self.source
        self._run(lambda: source.report(username, success))

    def _keys(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        """scramp's auth_fn: the user's keys, or a decoy for a user that cannot log in."""
        self.username = username
        record = self.source.scram_keys(username)  # AdminApiError: Keycloak unreachable
        self._record = record
        if record is None:
            self._refusal = "no such user"
        elif record.unavailable:
            self._refusal = f"no SCRAM keys: {record.unavailable}"
        else:
            if not record.usable:  # refused after the proof: its challenge is its own
                self._refusal = "user disabled, locked out or with a required action"
            return record.salt, record.stored_key, record.server_key, record.iterations
        return self._decoy(username)

    def _decoy(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        def derived(label: str) -> bytes:
            return hmac.new(self.decoy_key, f"{label}\0{username}".encode(), "sha256").digest()

        return derived("salt")[:16], derived("stored"), derived("server"), HASH_ITERATIONS


def decoy_key(secret: str) -> bytes:
    """The key decoy salts are derived under, from the service account's secret: the same
    across restarts of enmesh-auth (a real user's salt does not change either), and
    unknown to clients."""
    return hmac.new(secret.encode("utf-8"), b"enmesh-auth SCRAM decoys", "sha256").digest()
