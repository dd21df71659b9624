"""Stored messages leave the broker only when a consumer asks for them.

Real RabbitMQ 3.10 (quorum queues with delivery limits, from the sample model) behind a
3-router mesh: routers 0 and 1 link to the broker, router 2 has no broker connection and
is fed by the others over transit links. The broker's own counters (`rabbitmqctl
list_queues`) and a direct AMQP connection to it are the witnesses: a message the routers
took is `messages_unacknowledged`, and one they gave back carries a delivery count.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from proton import Message

from enmesh.compile.layout import standard_broker_name
from tests.router.conftest import account
from tests.router.test_waypoints import SendAll
from tests.support.amqp import Scenario, run
from tests.support.mesh import Mesh, wait_until
from tests.support.rabbitmq import RabbitMQBroker, parse_queue_arguments
from tests.support.stack import broker_attached, brokered_mesh

STORED = 20
CONSUMER = "backend@iot"
WITH_BROKER, WITHOUT_BROKER = 1, 2


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    with brokered_mesh(
        tmp_path_factory.mktemp("waypoint-credit"), routers=3, brokerless=(WITHOUT_BROKER,)
    ) as mesh:
        yield mesh


@dataclass(frozen=True)
class Depth:
    ready: int
    unacknowledged: int


def depth(broker: RabbitMQBroker, address: str) -> Depth:
    name = standard_broker_name("iot", address)
    columns = ("name", "messages_ready", "messages_unacknowledged")
    row = next(r for r in broker.list_queues(*columns) if r["name"] == name)
    return Depth(int(row["messages_ready"]), int(row["messages_unacknowledged"]))


def settled(broker: RabbitMQBroker, address: str, condition: Callable[[Depth], bool]) -> Depth:
    """The queue's depth once it meets `condition`: RabbitMQ refreshes its queue counters
    on a timer (every 5 s), so a fresh state shows a moment after it is reached."""
    seen: list[Depth] = []

    def check() -> bool:
        seen.append(depth(broker, address))
        return condition(seen[-1])

    try:
        wait_until(check, 60, f"the depth of {address}")
    except TimeoutError as exc:
        raise AssertionError(f"{address}: unexpected depth {seen[-1]}") from exc
    return seen[-1]


def holds(count: int, depth: Depth) -> bool:
    return depth.ready + depth.unacknowledged == count


def delivery_limit(broker: RabbitMQBroker, address: str) -> int:
    name = standard_broker_name("iot", address)
    row = next(r for r in broker.list_queues("name", "arguments") if r["name"] == name)
    return int(parse_queue_arguments(row["arguments"])["x-delivery-limit"])


def fresh(mesh: Mesh) -> None:
    """Empty `events` and `dlq`, after a restart gave back what routers still held."""
    restart_routers(mesh)
    broker: RabbitMQBroker = mesh.extra["broker"]  # type: ignore[assignment]
    for address in ("events", "dlq"):
        broker.ctl("purge_queue", "-p", "enmesh", standard_broker_name("iot", address))


def store(mesh: Mesh, bodies: list[Any]) -> None:
    """Send through router 0; accepted means the broker has it."""
    sent = SendAll(mesh, 0, "device@iot", "events", bodies)
    run(sent, timeout=60)
    assert sent.accepted == len(bodies) and not sent.other
    broker: RabbitMQBroker = mesh.extra["broker"]  # type: ignore[assignment]
    settled(broker, "events", lambda d: d == Depth(len(bodies), 0))


def stored_messages(broker: RabbitMQBroker, address: str, count: int) -> list[Message]:
    """The `count` messages `address`'s queue holds, read straight from the broker."""
    settled(broker, address, lambda d: d == Depth(count, 0))
    connection = broker.connect()
    try:
        receiver = connection.create_receiver(f"/amq/queue/{standard_broker_name('iot', address)}")
        messages = []
        for _ in range(count):
            messages.append(receiver.receive(timeout=30))
            receiver.accept()
        return messages
    finally:
        connection.close()


def restart_routers(mesh: Mesh) -> None:
    for router in mesh.routers:
        router.kill()
    for router in mesh.routers:
        router.start()
    mesh.wait_converged()
    linked = [r for r in mesh.routers if r.index != WITHOUT_BROKER]
    wait_until(lambda: all(broker_attached(r.metrics()) for r in linked), 30, "autoLinks")


@pytest.mark.parametrize(
    ("consumer_at", "bound"),
    # Router 1 links to the broker itself: its consumer's credit is all that leaves it.
    # Router 2 is fed by routers 0 and 1, each for its consumer's whole credit (a router
    # cannot know whether the other's queue holds anything): at most credit x 2.
    [(WITH_BROKER, 1), (WITHOUT_BROKER, 2)],
    ids=["consumer-on-a-router-with-a-broker-link", "consumer-on-a-router-without"],
)
def test_a_consumer_with_credit_1_takes_1_and_the_rest_stay_in_the_broker(
    stack: Mesh, consumer_at: int, bound: int
) -> None:
    broker: RabbitMQBroker = stack.extra["broker"]  # type: ignore[assignment]
    fresh(stack)
    store(stack, [f"stored {i}" for i in range(STORED)])
    connection = account(stack, consumer_at, CONSUMER).blocking()
    try:
        # No prefetch: receive() grants one credit and waits for one message.
        receiver = connection.create_receiver("events")
        message = receiver.receive(timeout=30)
        # The consumer still holds its message unsettled: it shows as unacknowledged.
        seen = settled(broker, "events", lambda d: d.unacknowledged >= 1)
        receiver.accept()
    finally:
        connection.close()
    # Fed by two routers (each pulling for the whole credit), either of the first two
    # messages can arrive first; with its own broker link, the first.
    assert message.body in {f"stored {i}" for i in range(bound)}
    # Before: the routers took everything (credit 250 as soon as a consumer attached):
    # 0 ready, 20 unacknowledged, 19 of them held by routers for no one.
    assert seen.unacknowledged <= bound
    assert seen.ready == STORED - seen.unacknowledged


def test_router_restarts_do_not_count_as_deliveries_of_stored_messages(stack: Mesh) -> None:
    broker: RabbitMQBroker = stack.extra["broker"]  # type: ignore[assignment]
    fresh(stack)
    # One restart more than the queue's delivery limit: enough to dead-letter a message
    # if each restart counted as a delivery attempt.
    restarts = delivery_limit(broker, "events") + 1
    # One message for each consumer to take, then the one nobody asks for.
    store(stack, [f"taken {i}" for i in range(restarts)] + ["waiting"])
    taken = []
    for left in range(restarts, 0, -1):
        # A consumer that wants one message, takes it and leaves; then the routers restart.
        connection = account(stack, WITH_BROKER, CONSUMER).blocking()
        try:
            receiver = connection.create_receiver("events")
            taken.append(receiver.receive(timeout=30).body)
            receiver.accept()
        finally:
            connection.close()
        # Its outcome reached the broker (the message is gone) before the restart.
        settled(broker, "events", functools.partial(holds, left))
        restart_routers(stack)
    # Before: the routers took "waiting" along with each consumer's message and every
    # restart gave it back as one more delivery attempt; after the 6th it was in `dlq`.
    remaining = stored_messages(broker, "events", 1)
    assert [m.body for m in remaining] == ["waiting"]
    assert depth(broker, "dlq") == Depth(0, 0)
    # RabbitMQ marks a message it hands out again (delivery count > 0) as not the first
    # acquirer; AMQP 1.0 carries no count of its own from RabbitMQ 3.10.
    assert remaining[0].first_acquirer
    assert taken == [f"taken {i}" for i in range(restarts)]


class DrainOnce(Scenario):
    """A consumer with no credit drains once for `credit` messages (receiveNoWait)."""

    def __init__(self, mesh: Mesh, at: int, credit: int) -> None:
        super().__init__(prefetch=0, auto_accept=True)
        self.mesh, self.at, self.credit = mesh, at, credit
        self.receiver: Any = None
        self.asked = False
        self.bodies: list[Any] = []
        self.credit_back: int | None = None

    def on_start(self, event: Any) -> None:
        conn = self.open(account(self.mesh, self.at, CONSUMER))
        self.receiver = event.container.create_receiver(conn, "events", name="drainer")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "drainer" and not self.asked:
            self.asked = True
            self.receiver.drain(self.credit)

    def on_message(self, event: Any) -> None:
        self.bodies.append(event.message.body)

    def on_link_flow(self, event: Any) -> None:
        link = event.link
        if link.name == "drainer" and self.asked and not link.draining():
            self.credit_back = link.credit  # the drain is answered: what was left comes back
            self.done()


def test_a_drain_delivers_what_the_broker_holds_before_answering(stack: Mesh) -> None:
    fresh(stack)
    store(stack, ["first", "second", "third"])
    scenario = run(DrainOnce(stack, WITH_BROKER, credit=10), timeout=60)
    # Before: the router answered the drain at once (it held nothing; the messages wait in
    # the broker until a consumer's credit asks for them), so receiveNoWait found nothing.
    assert scenario.bodies == ["first", "second", "third"]
    assert scenario.credit_back == 0


class LeaveAtFirst(Scenario):
    """A consumer that asks for `credit` stored messages and leaves at the first one,
    unsettled: the rest are still on their way from the broker to its router."""

    def __init__(self, mesh: Mesh, at: int, credit: int) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.mesh, self.at, self.credit = mesh, at, credit
        self.receiver: Any = None

    def on_start(self, event: Any) -> None:
        conn = self.open(account(self.mesh, self.at, CONSUMER))
        self.receiver = event.container.create_receiver(conn, "events", name="leaver")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "leaver":
            self.receiver.flow(self.credit)

    def on_message(self, event: Any) -> None:
        event.connection.close()
        self.done()


class TakeAll(Scenario):
    """A consumer that accepts until it has `count` messages."""

    def __init__(self, mesh: Mesh, at: int, count: int) -> None:
        super().__init__(prefetch=count, auto_accept=True)
        self.mesh, self.at, self.count = mesh, at, count
        self.bodies: list[Any] = []

    def on_start(self, event: Any) -> None:
        conn = self.open(account(self.mesh, self.at, CONSUMER))
        event.container.create_receiver(conn, "events")

    def on_message(self, event: Any) -> None:
        self.bodies.append(event.message.body)
        self.state = f"{len(self.bodies)} of {self.count} received"  # said on a timeout
        if len(self.bodies) == self.count:
            self.done()


def test_what_a_router_took_for_a_consumer_that_left_reaches_a_consumer_elsewhere(
    stack: Mesh,
) -> None:
    broker: RabbitMQBroker = stack.extra["broker"]  # type: ignore[assignment]
    fresh(stack)
    count = 400
    bodies = [f"{i:04d} " + "x" * 4000 for i in range(count)]
    store(stack, bodies)
    # Router 1 asks the broker for 400 and its consumer is gone before most arrive: they
    # are held there, with no consumer on router 1 and none of router 0's credit (router 0
    # has its own broker link, so it takes nothing from router 1).
    run(LeaveAtFirst(stack, WITH_BROKER, count), timeout=60)
    # Before: they stayed unacknowledged at router 1 for good; the consumer on router 0
    # got only what the broker still had.
    taker = TakeAll(stack, 0, count)
    run(taker, timeout=90)
    assert sorted(taker.bodies) == sorted(bodies)
    assert depth(broker, "dlq") == Depth(0, 0)
