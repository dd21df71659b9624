"""Direct messaging across a 3-router full mesh of real router processes."""

from __future__ import annotations

from collections import Counter
from typing import Any

from proton import Message

from tests.support.amqp import Account, Scenario, run
from tests.support.mesh import Mesh


def backend(mesh: Mesh, router: int) -> Account:
    return Account(mesh.url(router), "backend@iot", mesh.passwords["backend@iot"], "iot")


def device(mesh: Mesh, router: int) -> Account:
    return Account(mesh.url(router), "device@iot", mesh.passwords["device@iot"], "iot")


class ShareAnycast(Scenario):
    """3 consumers on 3 routers; a producer on router 0 sends `total` unsettled messages."""

    def __init__(self, mesh: Mesh, total: int) -> None:
        super().__init__(auto_accept=False, prefetch=50)
        self.mesh, self.total = mesh, total
        self.received: Counter[str] = Counter()
        self.by_consumer: Counter[int] = Counter()
        self.accepted = self.sent = self.ready = 0
        self.consumers: dict[str, int] = {}  # link name -> router index

    def on_start(self, event: Any) -> None:
        for i in range(3):
            name = f"consumer-{i}"
            event.container.create_receiver(
                self.open(backend(self.mesh, i)), "telemetry", name=name
            )
            self.consumers[name] = i

    def on_link_opened(self, event: Any) -> None:
        if event.receiver is not None and event.receiver.name in self.consumers:
            self.ready += 1
            if self.ready == 3:
                event.container.create_sender(self.open(device(self.mesh, 0)), "telemetry")

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit and self.sent < self.total:
            event.sender.send(Message(id=self.sent, body=f"reading {self.sent}"))
            self.sent += 1

    def on_message(self, event: Any) -> None:
        self.received[str(event.message.id)] += 1
        self.by_consumer[self.consumers[event.receiver.name]] += 1
        self.accept(event.delivery)

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        if self.accepted == self.total:
            self.done()


def test_three_consumers_share_unsettled_anycast_exactly_once(full_mesh: Mesh) -> None:
    scenario = run(ShareAnycast(full_mesh, 3000), timeout=60)
    assert scenario.accepted == 3000
    assert len(scenario.received) == 3000 and set(scenario.received.values()) == {1}
    assert all(scenario.by_consumer[i] > 0 for i in range(3)), scenario.by_consumer
