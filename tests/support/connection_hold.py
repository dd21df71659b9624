"""Many authenticated AMQP connections held open against one router, opened by this process
with the router's own event loop as a lightweight client (no proton reactor per
connection): the way to see what an idle connection costs the router, and whether it keeps
serving while holding thousands.

At most `in_flight` handshakes (TCP, SASL SCRAM-SHA-256, AMQP open) run at once; each one
that ends starts the next, so a router is never handed more logins at once than a real
reconnect storm through a load balancer would, and none times out waiting in its queue.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass, field
from typing import Any

from proton import Connection, Event

from enmesh.router.engine import Loop, ProtonSocket, connect_nonblocking
from enmesh.router.security import SaslSettings, client_transport


def raise_open_files_limit() -> int:
    """This process's soft limit on open files raised to its hard one; returns it."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


@dataclass
class HeldConnections:
    """Client connections to one router port, opened `in_flight` at a time and held."""

    port: int
    user: str
    password: str
    vhost: str
    in_flight: int = 200
    opened: int = 0
    failed: int = 0
    sockets: list[ProtonSocket] = field(default_factory=list)
    _loop: Loop = field(default_factory=Loop)
    wanted: int = 0  # connections asked for so far

    def open(self, count: int, timeout: float = 600) -> float:
        """Open `count` more connections; seconds it took (all opened or failed by then)."""
        started = time.perf_counter()
        self.wanted += count
        for _ in range(min(self.in_flight, count)):
            self._start_one()
        self._loop.run_until(lambda: self.opened + self.failed >= self.wanted, timeout)
        return time.perf_counter() - started

    def _start_one(self) -> None:
        if len(self.sockets) >= self.wanted:
            return
        transport = client_transport("127.0.0.1", ("SCRAM-SHA-256",), SaslSettings(None, "x"), None)
        connection = Connection()
        connection.user, connection.password = self.user, self.password
        connection.hostname = self.vhost
        sock = connect_nonblocking("127.0.0.1", self.port)
        self.sockets.append(
            ProtonSocket(
                self._loop,
                sock,
                transport,
                self,
                peer="router",
                connecting=True,
                connection=connection,
            )
        )
        connection.open()

    # the engine's handler interface
    def on_event(self, source: ProtonSocket, event: Event) -> None:
        if event.type == Event.CONNECTION_REMOTE_OPEN:
            self.opened += 1
            self._start_one()
        elif event.type == Event.TRANSPORT_ERROR:
            self.failed += 1
            self._start_one()

    def on_closed(self, source: ProtonSocket) -> None:
        pass

    def serve(self, seconds: float) -> None:
        """Keep the held connections alive (heartbeats) for `seconds`."""
        self._loop.run_until(lambda: False, seconds)

    def close(self) -> None:
        for proton_socket in self.sockets:
            proton_socket.sock.close()
        self.sockets.clear()


def held_figures(
    held: HeldConnections, seconds: float, before_kb: int, after_kb: int
) -> dict[str, Any]:
    return {
        "requested": held.wanted,
        "opened": held.opened,
        "failed": held.failed,
        "seconds_to_open": round(seconds, 2),
        "router_rss_kb_before": before_kb,
        "router_rss_kb_after": after_kb,
        "kb_per_idle_connection": round((after_kb - before_kb) / max(held.opened, 1), 2),
    }
