"""A session that ends without detaching its links (AMQP 1.0 lets it: ending a session
detaches its links implicitly) takes them out of routing: nothing is routed to them
afterwards, as if their connection had gone; and the router lets the ended session and
its links go, not only when the connection goes (the MQTT gateway ends one session per
device that leaves, on a connection its user's other devices keep). The broker case
(RabbitMQ ending the router's session when a queue is deleted) is in
tests/router/test_broker_session_end.py."""

from __future__ import annotations

from typing import Any

from proton import Endpoint, Message
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection

from tests.router.conftest import account
from tests.support.amqp import Scenario, run
from tests.support.device_sessions import open_device_session
from tests.support.fuzz import rss_kb
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
        self.open_orphan(self.open(account(self.mesh, 0, "backend@iot")))

    def open_orphan(self, connection: Any) -> None:
        """A consumer of `telemetry` with credit, in a session that ends under it."""
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


ENDED = 1000  # sessions ended on one connection
WARM_UP = 200


def end_session(connection: BlockingConnection, name: str) -> None:
    """Open a session with a receiver and a sender, wait until the router attached both,
    end the session without detaching them (AMQP 1.0 2.5.5: the end detaches them)."""
    receiver, sender = open_device_session(connection, name)
    session = receiver.session
    connection.wait(
        lambda: bool(receiver.state & sender.state & Endpoint.REMOTE_ACTIVE),
        msg="the router attaches both links",
    )
    session.close()
    connection.wait(lambda: bool(session.state & Endpoint.REMOTE_CLOSED), msg="the end")
    session.free()


def end_sessions(connection: BlockingConnection, count: int) -> None:
    for i in range(count):
        end_session(connection, f"device-{i}")


def test_ended_sessions_are_freed_while_their_connection_lives(full_mesh: Mesh) -> None:
    process = full_mesh.routers[0].process
    assert process is not None
    connection = account(full_mesh, 0, "device@iot").blocking()
    try:
        end_sessions(connection, WARM_UP)  # the allocator and the tables at their size
        before = rss_kb(process.pid)
        end_sessions(connection, ENDED)
        growth = rss_kb(process.pid) - before
    finally:
        connection.close()
    # Unfreed, each ended session kept about 7.5 KB: 7.5 MB here.
    assert growth < 2048, f"router RSS grew {growth} KB over {ENDED} ended sessions"


class NeighbourSessionEnds(ConsumerSessionEnds):
    """As above, but the consumer that stays is on the same connection as the session
    that ends, in a session of its own, attached before the end: ending one session must
    take only that session's links out of routing, not its connection's others."""

    def on_start(self, event: Any) -> None:
        connection = self.open(account(self.mesh, 0, "backend@iot"))
        neighbour = connection.session()
        neighbour.open()
        live = neighbour.receiver("live")
        live.source.address = "telemetry"
        live.open()
        live.flow(MESSAGES)
        self.open_orphan(connection)

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "session-ends-under-me":
            self.orphan_session.close()

    def on_session_remote_close(self, event: Any) -> None:
        if event.session == self.orphan_session:
            sender_connection = self.open(account(self.mesh, 0, "device@iot"))
            event.container.create_sender(sender_connection, "telemetry", options=AtMostOnce())


def test_ending_a_session_leaves_its_connections_other_sessions_routed(full_mesh: Mesh) -> None:
    scenario = run(NeighbourSessionEnds(full_mesh), timeout=30)
    assert sorted(scenario.received) == list(range(MESSAGES))
