"""A session that ends without detaching its links (AMQP 1.0 lets it: ending a session
detaches its links implicitly) takes them out of routing: nothing is routed to them
afterwards, as if their connection had gone. The broker case (RabbitMQ ending the
router's session when a queue is deleted) is in tests/router/test_broker_session_end.py."""

from __future__ import annotations

from typing import Any

from proton import Message
from proton.reactor import AtMostOnce

from tests.router.conftest import account
from tests.support.amqp import Scenario, run
from tests.support.mesh import Mesh

MESSAGES = 20


class ConsumerSessionEnds(Scenario):
    """A consumer with credit ends its session (never detaching its link); a second
    consumer attaches; a producer sends presettled messages. Each must reach the second:
    one routed to the first would be lost, presettled, and the scenario would time out."""

    def __init__(self, mesh: Mesh) -> None:
        super().__init__(auto_accept=True)
        self.mesh = mesh
        self.received: list[int] = []
        self.sent = 0
        self.orphan_session: Any = None

    def on_start(self, event: Any) -> None:
        connection = self.open(account(self.mesh, 0, "backend@iot"))
        self.orphan_session = connection.session()
        self.orphan_session.open()
        orphan = self.orphan_session.receiver("session-ends-under-me")
        orphan.source.address = "telemetry"
        orphan.open()
        orphan.flow(MESSAGES)

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "session-ends-under-me":
            self.orphan_session.close()  # an end frame only: the link is never detached
        elif event.link.name == "live":
            sender_connection = self.open(account(self.mesh, 0, "device@iot"))
            event.container.create_sender(sender_connection, "telemetry", options=AtMostOnce())

    def on_session_remote_close(self, event: Any) -> None:
        if event.session == self.orphan_session:
            consumer = self.open(account(self.mesh, 0, "backend@iot"))
            event.container.create_receiver(consumer, "telemetry", name="live")

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit and self.sent < MESSAGES:
            event.sender.send(Message(body=self.sent))
            self.sent += 1

    def on_message(self, event: Any) -> None:
        self.received.append(event.message.body)
        if len(self.received) == MESSAGES:
            self.done()


def test_a_consumer_whose_session_ended_gets_nothing_more(full_mesh: Mesh) -> None:
    scenario = run(ConsumerSessionEnds(full_mesh), timeout=30)
    assert sorted(scenario.received) == list(range(MESSAGES))
