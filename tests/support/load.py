"""Steady traffic through a running mesh in a background thread, counting every sign of
disruption: connections closed by the far end, deliveries released or modified.

`Load` opens its connections, then sends one message per `interval` on every sender
(unsettled, so a router that lost it would have to release it) while its receivers
accept what arrives. `stop()` closes everything from our side (not counted as a drop).
"""

from __future__ import annotations

import threading
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


class _Handler(MessagingHandler):  # type: ignore[misc]
    def __init__(self, flows: list[Flow], interval: float) -> None:
        super().__init__(prefetch=50, auto_accept=True)
        self.flows, self.interval = flows, interval
        self.counts: Counter[str] = Counter()
        self.stopping = threading.Event()
        self.senders: list[Any] = []
        self.connections: list[Any] = []
        self.lock = threading.Lock()

    def on_start(self, event: Any) -> None:
        for flow in self.flows:
            connection = flow.account.connect(event.container)
            self.connections.append(connection)
            if flow.send:
                self.senders.append(event.container.create_sender(connection, flow.address))
            else:
                event.container.create_receiver(connection, flow.address)
        event.container.schedule(self.interval, self)

    def on_timer_task(self, event: Any) -> None:
        if self.stopping.is_set():
            for connection in self.connections:
                connection.close()
            return
        for sender in self.senders:
            if sender.credit > 0:
                sender.send(Message(body="load"))
                self._count("sent")
        event.container.schedule(self.interval, self)

    def _count(self, what: str) -> None:
        with self.lock:
            self.counts[what] += 1

    def on_connection_opened(self, event: Any) -> None:
        self._count("opened")

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
        wait_until(lambda: self.counts()["opened"] == len(self.flows), 20, "load connections")
        wait_until(lambda: self.counts()["received"] > 50, 20, "load traffic to flow")

    def counts(self) -> Counter[str]:
        with self.handler.lock:
            return Counter(self.handler.counts)

    def stop(self) -> Counter[str]:
        self.handler.stopping.set()
        self.thread.join(20)
        return self.counts()
