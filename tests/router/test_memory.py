"""Router memory: nothing the router keeps for a message or a link outlives it.

The router runs in this process (tests/support/inprocess.py) so the tests can look at
what it holds; clients are real proton peers in a thread. Both tests count, not time:
- presettled messages: proton's own count of unsettled deliveries on the router's
  receiving links stays at zero (it grew by one per message when the router never
  settled presettled deliveries on its side: ~1.4 KB each, never freed);
- link churn: after clients that attached a sender and a receiver have gone, none of
  the router's per-link or per-connection objects is left (each stayed, with its proton
  link, session and connection, held by a cycle through proton's C record).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from proton import Message
from proton.handlers import MessagingHandler

from enmesh.router.engine import ProtonSocket
from enmesh.router.forwarding import OutLink
from enmesh.router.inlinks import InLink
from tests.support.amqp import Account
from tests.support.inprocess import ClientThread, InProcessRouter, live_objects, start_router

pytestmark = pytest.mark.slow

PRESETTLED_MESSAGES = 2000
CHURN_CONNECTIONS = 200


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessRouter]:
    # One per test process: Cyrus SASL reads its configuration (the sasldb) once.
    running = start_router(tmp_path_factory.mktemp("router"))
    try:
        yield running
    finally:
        running.stop()


def account(router: InProcessRouter, identity: str) -> Account:
    return Account(router.mesh.url(0), identity, router.mesh.passwords[identity], "iot")


class PresettledFlow(MessagingHandler):  # type: ignore[misc]
    """A receiver, then a presettled sender of `total` messages on `address`; once every
    message arrived, waits for `may_close` before closing (so links are still attached
    while the test looks at the router)."""

    def __init__(self, sender: Account, receiver: Account, address: str, total: int) -> None:
        super().__init__()
        self.sender_account, self.receiver_account = sender, receiver
        self.address, self.total = address, total
        self.sent = self.received = 0
        self.may_close = False
        self.connections: list[Any] = []

    def on_start(self, event: Any) -> None:
        self.container = event.container
        conn = self.receiver_account.connect(self.container)
        self.connections.append(conn)
        self.container.create_receiver(conn, self.address, name="receiver")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "receiver":
            conn = self.sender_account.connect(self.container)
            self.connections.append(conn)
            sender = self.container.create_sender(conn, self.address, name="sender")
            sender.snd_settle_mode = 1  # SND_SETTLED: every message goes presettled

    def on_sendable(self, event: Any) -> None:
        sender = event.sender
        while sender.credit and self.sent < self.total:
            delivery = sender.send(Message(body=self.sent))
            delivery.settle()
            self.sent += 1

    def on_message(self, event: Any) -> None:
        self.received += 1
        if self.received == self.total:
            self.container.schedule(0.05, self)

    def on_timer_task(self, event: Any) -> None:
        if not self.may_close:
            self.container.schedule(0.05, self)
            return
        for conn in self.connections:
            conn.close()


@pytest.mark.parametrize(
    ("address", "producer", "consumer"),
    [("telemetry", "device@iot", "backend@iot"), ("broadcast", "backend@iot", "device@iot")],
    ids=["anycast", "multicast"],
)
def test_presettled_deliveries_are_not_kept(
    router: InProcessRouter, address: str, producer: str, consumer: str
) -> None:
    flow = PresettledFlow(
        account(router, producer), account(router, consumer), address, PRESETTLED_MESSAGES
    )
    client = ClientThread(flow)
    client.start()
    router.run_until(lambda: flow.received == PRESETTLED_MESSAGES, 60, "every message")
    inbound = [
        producer_link
        for state in router.router.addresses.values()
        for producer_link in state.producers
    ]
    assert inbound, "the router has the producer's link"
    assert sum(link.received for link in inbound) == PRESETTLED_MESSAGES
    assert [link.link.unsettled for link in inbound] == [0] * len(inbound)
    flow.may_close = True
    router.run_until(lambda: not client.is_alive(), 30, "the clients to leave")
    assert client.error is None


class Churn(MessagingHandler):  # type: ignore[misc]
    """`total` connections one after another; each attaches a sender and a receiver,
    then closes the connection (even ones) or detaches both links first (odd ones)."""

    def __init__(self, account: Account, total: int) -> None:
        super().__init__()
        self.account, self.total = account, total
        self.done = self.opened = 0
        self.links: list[Any] = []

    def on_start(self, event: Any) -> None:
        self.container = event.container
        self._next()

    def _next(self) -> None:
        if self.done == self.total:
            return
        conn = self.account.connect(self.container)
        self.links = [
            self.container.create_sender(conn, "telemetry"),
            self.container.create_receiver(conn, "telemetry"),
        ]
        self.opened = 0

    def on_link_opened(self, event: Any) -> None:
        self.opened += 1
        if self.opened < 2:
            return
        if self.done % 2:
            for link in self.links:
                link.close()
        else:
            event.connection.close()

    def on_link_closed(self, event: Any) -> None:
        if all(link.state & link.REMOTE_CLOSED for link in self.links):
            event.connection.close()

    def on_connection_closed(self, event: Any) -> None:
        self.done += 1
        self._next()


def test_nothing_of_a_closed_client_link_or_connection_stays(router: InProcessRouter) -> None:
    churn = Churn(account(router, "backend@iot"), CHURN_CONNECTIONS)
    client = ClientThread(churn)
    client.start()
    router.run_until(lambda: not client.is_alive(), 120, "the churning client to finish")
    assert client.error is None
    assert churn.done == CHURN_CONNECTIONS

    def only_the_brokers_left() -> bool:
        return all(
            conn.context["info"].role != "normal" for conn in router.router.connections.values()
        )

    router.run_until(only_the_brokers_left, 10, "the router to see every client go")
    left = live_objects(InLink, OutLink, ProtonSocket)
    assert left["InLink"] == 0
    assert left["OutLink"] == 0
    assert left["ProtonSocket"] <= len(router.router.connections)
