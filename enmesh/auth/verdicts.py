"""Remembered logins: a password Keycloak accepted once is accepted again without a
password grant, for as long as Keycloak's admin API shows the user unchanged.

A password grant costs hundreds of milliseconds of Keycloak's CPU (PBKDF2 at its default
iterations, then a signed token): the limit on authenticated connections per second.
Devices reconnect with the same password again and again, so enmesh-auth keeps, per user,
a keyed digest of the password Keycloak last accepted (HMAC-SHA256 under a key made at
start and held only in memory; never the password) and the user's id and password
credential at that time. A login with the same password is accepted when a lookup
(enmesh.auth.lookup, three GETs and no hashing) shows the same user id, enabled with no
required action, and the same password credential; the groups come from that lookup, so
a membership change counts on the next connection as it does with a grant. Anything else
(another password, the password reset, the user disabled, removed or re-created, the
admin API unreachable, the entry older than `max_age`) goes to Keycloak's password grant,
which decides as before.

What is given up: Keycloak's brute-force lockout and its login events see only the logins
that reach a grant (a wrong password always does).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from enmesh.auth.frames import OK
from enmesh.auth.keycloak import Verdict
from enmesh.auth.lookup import AdminApiError, UserState

log = logging.getLogger("enmesh.auth")
DEFAULT_MAX_AGE_SECONDS = 3600.0
DEFAULT_MAX_ENTRIES = 100_000


class Check(Protocol):
    def check(self, username: str, password: str) -> Verdict: ...


class Lookup(Protocol):
    def state(self, username: str) -> UserState | None: ...


@dataclass(frozen=True)
class _Remembered:
    digest: bytes
    identity: str
    user_id: str
    password_stamp: tuple[tuple[str, int], ...]
    since: float  # monotonic time of the grant


class RememberingCheck:
    """A password check that asks Keycloak for a grant only when it must."""

    def __init__(
        self,
        grant: Check,
        lookup: Lookup,
        max_age: float = DEFAULT_MAX_AGE_SECONDS,
        max_entries: int = DEFAULT_MAX_ENTRIES,
    ) -> None:
        self.grant, self.lookup = grant, lookup
        self.max_age, self.max_entries = max_age, max_entries
        self._key = os.urandom(32)
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Remembered] = OrderedDict()

    def check(self, username: str, password: str) -> Verdict:
        digest = self._digest(username, password)
        remembered = self._recall(username, digest)
        if remembered is not None:
            state = self._state(username)
            if _still_valid(remembered, state):
                assert state is not None
                return Verdict(OK, remembered.identity, state.groups)
            self._forget(username)
        before = self._state(username)
        verdict = self.grant.check(username, password)
        if verdict.code == OK and before is not None and before.usable:
            after = self._state(username)
            # Unchanged across the grant: the stamp then belongs to the password just checked.
            if after is not None and (after.user_id, after.password_stamp) == (
                before.user_id,
                before.password_stamp,
            ):
                self._remember(username, digest, verdict.identity, after)
        return verdict

    def _digest(self, username: str, password: str) -> bytes:
        message = username.encode() + b"\x00" + password.encode()
        return hmac.new(self._key, message, hashlib.sha256).digest()

    def _recall(self, username: str, digest: bytes) -> _Remembered | None:
        with self._lock:
            remembered = self._entries.get(username)
        if remembered is None or time.monotonic() - remembered.since > self.max_age:
            return None
        return remembered if hmac.compare_digest(remembered.digest, digest) else None

    def _state(self, username: str) -> UserState | None:
        try:
            return self.lookup.state(username)
        except AdminApiError as exc:
            log.warning("user lookup for %r failed, asking for a password grant: %s", username, exc)
            return None

    def _remember(self, username: str, digest: bytes, identity: str, state: UserState) -> None:
        entry = _Remembered(digest, identity, state.user_id, state.password_stamp, time.monotonic())
        with self._lock:
            self._entries[username] = entry
            self._entries.move_to_end(username)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def _forget(self, username: str) -> None:
        with self._lock:
            self._entries.pop(username, None)


def _still_valid(remembered: _Remembered, state: UserState | None) -> bool:
    return (
        state is not None
        and state.usable
        and state.user_id == remembered.user_id
        and state.password_stamp == remembered.password_stamp
        and bool(state.password_stamp)
    )
