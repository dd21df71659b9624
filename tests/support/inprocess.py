"""A router running inside the test process, for tests that look at its objects.

The router's event loop runs in the calling thread; proton clients run in a thread of
their own (`ClientThread`), each with its own container, so both sides are real AMQP
peers over real sockets. Used where a test must see what the router keeps in memory,
which a separate process would hide.
"""

from __future__ import annotations

import gc
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proton.reactor import Container

from enmesh.router.config import load_router_config
from enmesh.router.engine import Loop
from enmesh.router.router import Router
from tests.support.mesh import Mesh, build_mesh


@dataclass
class InProcessRouter:
    mesh: Mesh  # the compiled one-router stack: config, users, passwords
    router: Router
    loop: Loop

    def run_until(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        if not self.loop.run_until(condition, timeout):
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")

    def stop(self) -> None:
        for acceptor in self.router.acceptors:
            acceptor.close()
        for conn in list(self.router.connections.values()):
            self.loop.unregister(conn.sock)
            conn.sock.close()
        self.loop.selector.close()


def start_router(directory: Path) -> InProcessRouter:
    mesh = build_mesh(directory, routers=1, topology="chain")
    loop = Loop()
    router = Router(load_router_config(mesh.routers[0].config), loop)
    router.start()
    return InProcessRouter(mesh, router, loop)


class ClientThread(threading.Thread):
    """Runs one proton container (a MessagingHandler) until it ends by itself."""

    def __init__(self, handler: Any) -> None:
        super().__init__(daemon=True)
        self.handler = handler
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            Container(self.handler).run()
        except BaseException as exc:  # reported by the test's thread
            self.error = exc


def live_objects(*types: type) -> Counter[str]:
    """How many instances of each type are still allocated, after a full collection."""
    gc.collect()
    wanted = tuple(types)
    return Counter(type(o).__name__ for o in gc.get_objects() if isinstance(o, wanted))
