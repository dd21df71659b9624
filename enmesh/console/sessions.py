"""Logins kept on the server: the browser holds only a random session id (cookie `Secure`,
`HttpOnly`, `SameSite=Strict`). The password a session needs for its management reads
stays in this process's memory and is never sent back to the browser, logged or put in a
URL. Every form carries the session's CSRF token (synchronizer token pattern)."""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from enmesh.console.mesh import Credentials, ManagementLinks
from enmesh.console.oidc import Tokens

COOKIE = "enmesh_console"
IDLE_SECONDS = 30 * 60


@dataclass
class Session:
    credentials: Credentials
    space: str | None  # None: the stack administrator (every space)
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    seen: float = field(default_factory=time.monotonic)
    flash: list[str] = field(default_factory=list)  # messages for the next page
    links: ManagementLinks | None = None  # its management connections, opened on first use
    # A login to Keycloak (enmesh.console.oidc): the access token is the password, renewed
    # before it expires (the management connections then reopen with the new one).
    tokens: Tokens | None = None
    renew: Callable[[Tokens], Tokens] | None = None

    @property
    def administrator(self) -> bool:
        return self.space is None

    def may_see(self, space: str) -> bool:
        return self.space is None or self.space == space

    def management(self, ca: Path) -> ManagementLinks:
        if self.tokens is not None and self.renew is not None and self.tokens.expiring():
            self.tokens = self.renew(self.tokens)
            self.credentials = replace(self.credentials, password=self.tokens.access)
            self.end()
            self.links = None
        if self.links is None:
            self.links = ManagementLinks(self.credentials, ca)
        return self.links

    def end(self) -> None:
        if self.links is not None:
            self.links.close()

    def csrf_ok(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token, self.csrf)


def _end(sessions: list[Session]) -> None:
    for session in sessions:
        session.end()


class Sessions:
    def __init__(self, idle_seconds: float = IDLE_SECONDS) -> None:
        self.idle_seconds = idle_seconds
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def create(self, session: Session) -> str:
        key = secrets.token_urlsafe(32)
        self.sweep()
        with self._lock:
            self._sessions[key] = session
        return key

    def get(self, key: str | None) -> Session | None:
        self.sweep()  # an abandoned login's links and password go with anyone's next request
        if not key:
            return None
        with self._lock:
            session = self._sessions.get(key)
            if session is not None:
                session.seen = time.monotonic()
            return session

    def sweep(self) -> int:
        """End the sessions idle for longer than `idle_seconds`; how many ended."""
        now = time.monotonic()
        with self._lock:
            expired = [k for k, s in self._sessions.items() if now - s.seen > self.idle_seconds]
            ended = [self._sessions.pop(key) for key in expired]
        if ended:  # closing connections can block (waits for the router): not in the caller,
            # which may be the event loop, nor under the lock
            threading.Thread(target=_end, args=(ended,), name="sweep", daemon=True).start()
        return len(ended)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def drop(self, key: str | None) -> None:
        with self._lock:
            session = self._sessions.pop(key or "", None)
        if session is not None:
            session.end()
