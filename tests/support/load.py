"""Steady traffic through a running mesh in a background thread, counting every sign of
disruption: connections closed by the far end, deliveries released or modified.

`Load` opens its connections, then sends one message per `interval` on every sender
(unsettled, so a router that lost it would have to release it) while its receivers
accept what arrives. `stop()` stops sending, lets what is in flight settle, then closes
everything from our side (not counted as a drop): closing a consumer with a message still
on its way to it would have the router release that message, a disruption we caused.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

from tests.support.amqp import Account
from tests.support.mesh import wait_until


@dataclass(frozen=True)
class Flow:
    account: Account
    address: str
    send: bool  # a sender; otherwise a receiver


OPENING_AT_ONCE = 20
DRAIN_SECONDS = 10.0  # at most this long for in-flight deliveries to settle at stop


class _Handler(MessagingHandler):
    def __init__(self, flows: list[Flow], interval: float) -> None:
        super().__init__(prefetch=50, auto_accept=True)
        self.flows, self.interval = flows, interval
        self.counts: Counter[str] = Counter()
        self.stopping = threading.Event()
        self.senders: list[Any] = []
        self.connections: list[Any] = []
        self.lock = threading.Lock()
        self.drain_until: float | None = None

    def on_start(self, event: Any) -> None:
        # A few handshakes at a time: a thousand SCRAM logins at once would outlast the
        # routers' handshake timeout on a small machine.
        for _ in range(OPENING_AT_ONCE):
            self._open_next(event.container)
        event.container.schedule(self.interval, self)

    def _open_next(self, container: Any) -> None:
        if len(self.connections) == len(self.flows):
            return
        flow = self.flows[len(self.connections)]
        connection = flow.account.connect(container)
        self.connections.append(connection)
        if flow.send:
            self.senders.append(container.create_sender(connection, flow.address))
        else:
            container.create_receiver(connection, flow.address)

    def on_timer_task(self, event: Any) -> None:
        if self.stopping.is_set():
            if self._drained():
                for connection in self.connections:
                    connection.close()
                return
            event.container.schedule(min(self.interval, 0.05), self)
            return
        for sender in self.senders:
            if sender.credit > 0:
                sender.send(Message(body="load"))
                self._count("sent")
        event.container.schedule(self.interval, self)

    def _drained(self) -> bool:
        now = time.monotonic()
        if self.drain_until is None:
            self.drain_until = now + DRAIN_SECONDS
        with self.lock:
            settled = sum(self.counts[o] for o in ("accepted", "released", "modified", "rejected"))
            in_flight = self.counts["sent"] - settled
        return in_flight <= 0 or now >= self.drain_until

    def _count(self, what: str) -> None:
        with self.lock:
            self.counts[what] += 1

    def on_connection_opened(self, event: Any) -> None:
        self._count("opened")
        self._open_next(event.container)

    def on_accepted(self, event: Any) -> None:
        self._count("accepted")

    def on_released(self, event: Any) -> None:
        self._count("released")

    def on_modified(self, event: Any) -> None:
        self._count("modified")

    def on_rejected(self, event: Any) -> None:
        self._count("rejected")

    def on_message(self, event: Any) -> None:
        self._count("received")

    def on_connection_remote_close(self, event: Any) -> None:
        if not self.stopping.is_set():
            self._count("closed")

    def on_transport_error(self, event: Any) -> None:
        if not self.stopping.is_set():
            self._count("closed")

    def on_link_remote_close(self, event: Any) -> None:
        if not self.stopping.is_set():
            self._count("link closed")


class Load:
    def __init__(self, flows: list[Flow], interval: float = 0.005) -> None:
        self.handler = _Handler(flows, interval)
        self.container = Container(self.handler)
        self.thread = threading.Thread(target=self.container.run, name="load", daemon=True)
        self.flows = flows

    def start(self) -> None:
        self.thread.start()
        wait_until(
            lambda: self.counts()["opened"] == len(self.flows),
            max(20.0, 0.1 * len(self.flows)),
            f"{len(self.flows)} load connections",
        )
        wait_until(lambda: self.counts()["received"] > 50, 20, "load traffic to flow")

    def counts(self) -> Counter[str]:
        with self.handler.lock:
            return Counter(self.handler.counts)

    def stop(self) -> Counter[str]:
        self.handler.stopping.set()
        self.thread.join(20 + DRAIN_SECONDS)
        return self.counts()


class LoadProcess:
    """`Load` in a child process, as real clients are: their work does not compete with the
    caller's for the interpreter (a benchmark timing something else meanwhile)."""

    def __init__(self, flows: list[Flow], interval: float = 0.005) -> None:
        context = multiprocessing.get_context("fork")
        self.pipe, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, flows, interval), daemon=True)

    def start(self) -> None:
        self.process.start()
        answer = self.pipe.recv()
        if answer != "started":
            raise RuntimeError(f"load did not start: {answer}")

    def counts(self) -> Counter[str]:
        self.pipe.send("counts")
        return Counter(self.pipe.recv())

    def stop(self) -> Counter[str]:
        self.pipe.send("stop")
        counts = Counter(self.pipe.recv())
        self.process.join(30)
        return counts


def _serve(pipe: Any, flows: list[Flow], interval: float) -> None:
    load = Load(flows, interval)
    try:
        load.start()
    except Exception as exc:  # the parent reports it
        pipe.send(f"{type(exc).__name__}: {exc}")
        return
    pipe.send("started")
    while pipe.recv() == "counts":
        pipe.send(dict(load.counts()))
    pipe.send(dict(load.stop()))
