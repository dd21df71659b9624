"""Which neighbour routers are heard from: qdrouterd's HELLO max age, apart from the
inter-router connections' idle timeout.

A neighbour that sends nothing for `helloMaxAgeSeconds` is *silent*: it leaves this
router's advertisement, so routes go around it within seconds of its host freezing or
losing power. Its connection stays open until the listener's or connector's own idle
timeout (16 s by default), as qdrouterd keeps it: a neighbour that only paused (a
stalled process, a starved CPU) comes back with the messages in flight on its links
still on their way, instead of every one failed to its producer.

Every neighbour sends often enough to be judged: each end advertises `helloMaxAgeSeconds`
as its idle timeout, so any AMQP peer (an older enmesh router too) sends a frame at least
every half of it; `keep_open_through_silence` then makes each end enforce its longer one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from enmesh.router.loop import Timer

if TYPE_CHECKING:
    from enmesh.router.connecting import ConnectionInfo
    from enmesh.router.engine import ProtonSocket
    from enmesh.router.router import Router

log = logging.getLogger("enmesh.router")

CHECK_SECONDS = 0.5  # a silent neighbour is lost between max age and max age + this


def keep_open_through_silence(conn: ProtonSocket, info: ConnectionInfo) -> None:
    """Once this end's open is out (advertising helloMaxAgeSeconds), enforce the
    endpoint's own idle timeout. Called when both opens are done: proton writes the
    open frame (and the timeout in it) on `pending()`, and reads its local idle timeout
    afresh at every tick."""
    conn.transport.pending()
    conn.transport.idle_timeout = info.idle_timeout_seconds


@dataclass
class _Heard:
    bytes_in: int  # the connection's count when it last changed
    at: float  # loop time of that change


class NeighbourWatch:
    """Marks neighbours silent (and heard again) from the bytes their connections read."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.silent: set[str] = set()
        self._heard: dict[str, _Heard] = {}
        self._checked_at: float | None = None
        self._timer: Timer | None = None

    @property
    def max_age(self) -> float:
        return float(self.router.config.router.hello_max_age_seconds)

    def connected(self, neighbour: str, conn: ProtonSocket) -> None:
        """A (new) connection to `neighbour`: heard now; watch from here on."""
        self._heard[neighbour] = _Heard(conn.bytes_in, self.router.loop.now())
        self.silent.discard(neighbour)
        if self._timer is None:
            self._schedule()

    def live(self, neighbour: str, conn: ProtonSocket) -> bool:
        return not conn.closed and neighbour not in self.silent

    def _schedule(self) -> None:
        loop = self.router.loop
        self._timer = loop.call_at(loop.now() + CHECK_SECONDS, self._check, quiet=True)

    def _check(self) -> None:
        now = self.router.loop.now()
        # Woken much later than asked: this router stalled, and what its neighbours sent
        # meanwhile may still be unread. Judge them from now on, not by our own pause.
        stalled = self._checked_at is not None and now - self._checked_at > 2 * CHECK_SECONDS
        self._checked_at = now
        neighbours = self.router.neighbours
        changed = False
        for name in list(self._heard):
            if name not in neighbours:
                del self._heard[name]
                self.silent.discard(name)
        for name, conn in neighbours.items():
            heard = self._heard.setdefault(name, _Heard(conn.bytes_in, now))
            if stalled or conn.bytes_in != heard.bytes_in:
                heard.bytes_in, heard.at = conn.bytes_in, now
                if name in self.silent:
                    self.silent.discard(name)
                    changed = True
                    log.info("neighbour router %s heard again: routes through it return", name)
            elif name not in self.silent and now - heard.at > self.max_age and not conn.closed:
                self.silent.add(name)
                changed = True
                log.warning(
                    "neighbour router %s silent for %.1f s (helloMaxAgeSeconds %g): routes go "
                    "around it; its connection stays open until its idle timeout",
                    name, now - heard.at, self.max_age,
                )  # fmt: skip
        if changed:
            self.router.loop.work += 1
            self.router.mesh_links.neighbours_changed()
        self._timer = None
        if neighbours:
            self._schedule()
