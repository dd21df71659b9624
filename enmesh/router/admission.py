"""Admission control for peers that have not proved who they are yet.

- Login throttling: every failed SASL login is logged once (listener, peer address,
  mechanism; never a password) and counted. A source address with `maxFailures` failed
  logins within `windowSeconds` is refused for `cooldownSeconds`: its connections are
  closed at accept, before any TLS or SASL work, whatever password they would bring.
  Throttling is per source address only: on a failed login neither proton nor Cyrus
  says which user was tried.
- Handshake limits: a connection must complete the protocol header, SASL and its AMQP
  open within the listener's `initialHandshakeTimeoutSeconds`; until then it counts
  against a per-listener and a per-source limit of connections still in their handshake.

The settings come from the stack's `security` section, compiled into `auth/admission.json`
(`--admission FILE`): qdrouterd 1.19 refuses unknown entities and attributes, so they
cannot live in the qdrouterd-format config a real qdrouterd must also start.
"""

from __future__ import annotations

import json
import logging
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proton import SASL

from enmesh.router.config import RouterConfigError
from enmesh.router.engine import Loop, ProtonSocket, Timer

log = logging.getLogger("enmesh.router.admission")

SUMMARY_INTERVAL_SECONDS = 10.0  # how often a repeating event is logged at most


@dataclass(frozen=True, kw_only=True)
class LoginThrottle:
    max_failures: int = 10
    window_seconds: float = 60.0
    cooldown_seconds: float = 60.0


@dataclass(frozen=True, kw_only=True)
class HandshakeLimits:
    max_pending_per_listener: int = 4000
    max_pending_per_source: int = 1000


@dataclass(frozen=True, kw_only=True)
class AdmissionSettings:
    login_throttle: LoginThrottle = field(default_factory=LoginThrottle)
    handshake: HandshakeLimits = field(default_factory=HandshakeLimits)


_FIELDS: dict[str, tuple[type, dict[str, str]]] = {
    "loginThrottle": (
        LoginThrottle,
        {
            "maxFailures": "max_failures",
            "windowSeconds": "window_seconds",
            "cooldownSeconds": "cooldown_seconds",
        },
    ),
    "handshake": (
        HandshakeLimits,
        {
            "maxPendingPerListener": "max_pending_per_listener",
            "maxPendingPerSource": "max_pending_per_source",
        },
    ),
}


def parse_admission(data: Any, where: str) -> AdmissionSettings:
    """Settings from the JSON `auth/admission.json` holds; errors name the field."""
    if not isinstance(data, dict):
        raise RouterConfigError(f"{where}: expected a JSON object")
    sections: dict[str, Any] = {}
    for section, value in data.items():
        if section not in _FIELDS:
            expected = ", ".join(_FIELDS)
            raise RouterConfigError(f"{where}: unknown section {section!r}; expected {expected}")
        kind, names = _FIELDS[section]
        if not isinstance(value, dict):
            raise RouterConfigError(f"{where}: {section}: expected a JSON object")
        values: dict[str, float] = {}
        for key, number in value.items():
            if key not in names:
                expected = ", ".join(names)
                message = f"unknown field {key!r}; expected {expected}"
                raise RouterConfigError(f"{where}: {section}: {message}")
            if isinstance(number, bool) or not isinstance(number, int | float) or number < 1:
                message = f"expected a number >= 1, got {number!r}"
                raise RouterConfigError(f"{where}: {section}.{key}: {message}")
            values[names[key]] = number
        sections[section] = kind(**values)
    return AdmissionSettings(
        login_throttle=sections.get("loginThrottle", LoginThrottle()),
        handshake=sections.get("handshake", HandshakeLimits()),
    )


def load_admission(path: Path) -> AdmissionSettings:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        reason = "not UTF-8 text" if isinstance(error, UnicodeDecodeError) else error.strerror
        raise RouterConfigError(f"{path}: cannot read: {reason}") from None
    except json.JSONDecodeError as error:
        message = f"invalid JSON: {error.msg} (column {error.colno})"
        raise RouterConfigError(f"{path}:{error.lineno}: {message}") from None
    return parse_admission(data, str(path))


class Summarised:
    """A warning that may repeat thousands of times a second: logged at most once per
    interval, with how many were held back, so an attack cannot flood the log."""

    def __init__(self, loop: Loop, interval: float = SUMMARY_INTERVAL_SECONDS) -> None:
        self.loop, self.interval = loop, interval
        self._next: dict[str, float] = {}
        self._held: Counter[str] = Counter()

    def __call__(self, kind: str, level: int, message: str, *args: object) -> None:
        now = self.loop.now()
        if now < self._next.get(kind, 0.0):
            self._held[kind] += 1
            return
        held = self._held.pop(kind, 0)
        suffix = f" ({held} more like this in the last {self.interval:.0f} s)" if held else ""
        log.log(level, message + suffix, *args)
        self._next[kind] = now + self.interval


@dataclass
class _Pending:
    listener: str
    source: str
    timer: Timer
    login_checked: bool = False


def _mechanism(sasl: SASL) -> str:
    """The mechanism the client chose, as far as it can be printed (the name is its own)."""
    try:
        return sasl.mech or "none"
    except UnicodeDecodeError:
        return "(not UTF-8)"


def source_of(peer: str) -> str:
    """`host:port` -> host (IPv6 hosts keep their colons)."""
    return peer.rpartition(":")[0] or peer


class Admission:
    """Throttling and handshake limits of one router, with the counters /metrics shows."""

    def __init__(self, loop: Loop, settings: AdmissionSettings, listeners: list[str]) -> None:
        self.loop, self.settings = loop, settings
        self.listeners = listeners
        self.summary = Summarised(loop)
        self._failures: dict[str, deque[float]] = {}
        self._blocked_until: dict[str, float] = {}
        self._pending: dict[int, _Pending] = {}
        self._pending_by_listener: Counter[str] = Counter()
        self._pending_by_source: Counter[str] = Counter()
        # (counter, listener) -> count: auth_failures, auth_throttled, handshake_timeouts,
        # handshake_refused
        self.counts: Counter[tuple[str, str]] = Counter()

    # --- at accept ---------------------------------------------------------------------

    def refusal(self, listener: str, peer: str) -> str | None:
        """Why a new connection from `peer` must be closed at once, or None to admit it."""
        source = source_of(peer)
        now = self.loop.now()
        until = self._blocked_until.get(source)
        if until is not None and now >= until:
            del self._blocked_until[source]
            until = None
        if until is not None:
            self.counts["auth_throttled", listener] += 1
            self.summary(
                f"throttled {source}",
                logging.WARNING,
                "login throttle: refused a connection from %s on listener %s (%.0f s of the"
                " cool-down left)",
                source,
                listener,
                until - now,
            )
            return "login throttle"
        limits = self.settings.handshake
        if self._pending_by_source[source] >= limits.max_pending_per_source:
            reason = f"{limits.max_pending_per_source} handshakes in progress from {source}"
        elif self._pending_by_listener[listener] >= limits.max_pending_per_listener:
            reason = f"{limits.max_pending_per_listener} handshakes in progress on {listener}"
        else:
            return None
        self.counts["handshake_refused", listener] += 1
        self.summary(f"refused {listener}", logging.WARNING, "refused a connection: %s", reason)
        return reason

    def start(self, conn: ProtonSocket, identity: int, listener: str, timeout: float) -> None:
        """Count `conn` as in its handshake; drop it if not opened within `timeout` s."""
        source = source_of(conn.peer)
        timer = self.loop.call_later(timeout, lambda: self._expire(conn, identity, timeout))
        if timeout <= 0:
            timer.cancel()  # 0 disables the timeout, as in qdrouterd; the limits still count
        self._pending[identity] = _Pending(listener, source, timer)
        self._pending_by_listener[listener] += 1
        self._pending_by_source[source] += 1

    # --- during the handshake ----------------------------------------------------------

    def check_login(self, conn: ProtonSocket, identity: int) -> None:
        """After a transport event: record a failed SASL login once per connection."""
        pending = self._pending.get(identity)
        if pending is None or pending.login_checked:
            return
        sasl = conn.transport.sasl()
        if sasl.outcome is None or sasl.outcome == SASL.OK:
            return
        pending.login_checked = True
        if sasl.outcome == SASL.AUTH:
            self._login_failed(conn, pending, sasl)

    def _login_failed(self, conn: ProtonSocket, pending: _Pending, sasl: SASL) -> None:
        settings = self.settings.login_throttle
        now = self.loop.now()
        self.counts["auth_failures", pending.listener] += 1
        recent = self._failures.setdefault(pending.source, deque())
        recent.append(now)
        while recent and recent[0] <= now - settings.window_seconds:
            recent.popleft()
        condition = conn.transport.condition
        log.warning(
            "login failed: listener %s, peer %s, mechanism %s, user and address space not"
            " disclosed by SASL (%s); %d of %d failures allowed from %s in %.0f s",
            pending.listener,
            conn.peer,
            _mechanism(sasl),
            condition.description if condition is not None else "authentication failed",
            len(recent),
            settings.max_failures,
            pending.source,
            settings.window_seconds,
        )
        if len(recent) >= settings.max_failures:
            del self._failures[pending.source]
            self._blocked_until[pending.source] = now + settings.cooldown_seconds
            log.warning(
                "login throttle: %s refused for %.0f s after %d failed logins",
                pending.source,
                settings.cooldown_seconds,
                settings.max_failures,
            )
        if len(self._failures) > 1000:  # forget sources whose failures are all old
            horizon = now - settings.window_seconds
            self._failures = {s: d for s, d in self._failures.items() if d and d[-1] > horizon}

    def opened(self, identity: int) -> None:
        """The peer's open arrived: its handshake is over."""
        pending = self._pending.pop(identity, None)
        if pending is not None:
            pending.timer.cancel()
            self._pending_by_listener[pending.listener] -= 1
            self._pending_by_source[pending.source] -= 1
            if not self._pending_by_source[pending.source]:
                del self._pending_by_source[pending.source]

    def closed(self, conn: ProtonSocket, identity: int) -> None:
        """The connection is gone (a failed login ends here too)."""
        self.check_login(conn, identity)
        self.opened(identity)

    def _expire(self, conn: ProtonSocket, identity: int, timeout: float) -> None:
        pending = self._pending.get(identity)
        if pending is None:
            return
        if conn.closed:  # gone without our hearing of it: just stop counting it
            self.opened(identity)
            return
        self.counts["handshake_timeouts", pending.listener] += 1
        self.summary(
            f"timeout {pending.listener}",
            logging.INFO,
            "closed a connection from %s on listener %s: no AMQP open within %.0f s",
            conn.peer,
            pending.listener,
            timeout,
        )
        conn.drop()

    # --- for /metrics ------------------------------------------------------------------

    def pending(self, listener: str) -> int:
        return self._pending_by_listener[listener]

    def blocked_sources(self) -> int:
        now = self.loop.now()
        return sum(1 for until in self._blocked_until.values() if until > now)
