"""Store-and-forward addresses through a real RabbitMQ (Debian package, AMQP 1.0 plugin)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from proton import Message

from tests.router.conftest import account
from tests.support.amqp import Scenario, run
from tests.support.mesh import Mesh, wait_until
from tests.support.stack import broker_attached, brokered_mesh


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """Two routers in front of one RabbitMQ holding the sample model's queues."""
    with brokered_mesh(tmp_path_factory.mktemp("waypoints")) as mesh:
        yield mesh


class OneLink(Scenario):
    """One connection as `identity` to `router`, and one link on `address`."""

    def __init__(
        self, mesh: Mesh, router: int, identity: str, address: str, **handler_options: Any
    ) -> None:
        super().__init__(**handler_options)
        self.mesh, self.router, self.identity, self.address = mesh, router, identity, address

    def on_start(self, event: Any) -> None:
        self.attach(event.container, self.open(account(self.mesh, self.router, self.identity)))

    def attach(self, container: Any, connection: Any) -> None:
        raise NotImplementedError


class SendAll(OneLink):
    def __init__(
        self,
        mesh: Mesh,
        router: int,
        identity: str,
        address: str,
        bodies: list[Any],
        **message: Any,
    ) -> None:
        super().__init__(mesh, router, identity, address)
        self.bodies, self.message = bodies, message
        self.sent = self.accepted = 0
        self.other: list[str] = []

    def attach(self, container: Any, connection: Any) -> None:
        container.create_sender(connection, self.address)

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit and self.sent < len(self.bodies):
            event.sender.send(Message(body=self.bodies[self.sent], **self.message))
            self.sent += 1

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        if self.accepted == len(self.bodies):
            self.done()

    def on_rejected(self, event: Any) -> None:
        self.other.append("rejected")
        self.done()

    def on_released(self, event: Any) -> None:
        self.other.append("released")
        self.done()


class Receive(OneLink):
    """Receive `count` messages; optionally release each one instead of accepting."""

    def __init__(
        self,
        mesh: Mesh,
        router: int,
        identity: str,
        address: str,
        count: int,
        *,
        release: bool = False,
    ) -> None:
        super().__init__(mesh, router, identity, address, auto_accept=False)
        self.count, self.release_each = count, release
        self.bodies: list[Any] = []

    def attach(self, container: Any, connection: Any) -> None:
        container.create_receiver(connection, self.address)

    def on_message(self, event: Any) -> None:
        self.bodies.append(event.message.body)
        if self.release_each:
            self.release(event.delivery, delivered=False)
        else:
            self.accept(event.delivery)
        if len(self.bodies) == self.count:
            self.done()


def test_queue_messages_survive_a_router_restart(stack: Mesh) -> None:
    sent = run(SendAll(stack, 0, "device@iot", "events", list(range(1000))), timeout=60)
    assert sent.accepted == 1000 and not sent.other
    for router in stack.routers:
        router.kill()
    for router in stack.routers:
        router.start()
    stack.wait_converged()
    for router in stack.routers:
        wait_until(lambda r=router: broker_attached(r.metrics()), 30, "autoLinks to reattach")
    received = run(Receive(stack, 1, "backend@iot", "events", 1000), timeout=60)
    assert sorted(received.bodies) == list(range(1000))


def test_expired_command_goes_to_the_dead_letter_queue(stack: Mesh) -> None:
    sent = run(SendAll(stack, 0, "backend@iot", "commands", ["reboot"], ttl=0.3), timeout=30)
    assert sent.accepted == 1
    dead = run(Receive(stack, 1, "backend@iot", "dlq", 1), timeout=60)
    assert dead.bodies == ["reboot"]
    # The device connecting after the TTL gets only what was sent since.
    run(SendAll(stack, 0, "backend@iot", "commands", ["fresh"]), timeout=30)
    device = run(Receive(stack, 0, "device@iot", "commands", 1), timeout=30)
    assert device.bodies == ["fresh"]


def test_dead_letter_after_max_deliveries(stack: Mesh) -> None:
    run(SendAll(stack, 0, "device@iot", "events", ["poison"]), timeout=30)
    # events: maxDeliveries 5. Each release is one more delivery attempt.
    attempts = run(Receive(stack, 0, "backend@iot", "events", 6, release=True), timeout=60)
    assert attempts.bodies == ["poison"] * 6
    dead = run(Receive(stack, 1, "backend@iot", "dlq", 1), timeout=60)
    assert dead.bodies == ["poison"]


class TopicFanout(Scenario):
    def __init__(self, mesh: Mesh) -> None:
        super().__init__()
        self.mesh = mesh
        self.received: dict[str, list[Any]] = {"live": [], "audit": []}
        self.ready = 0

    def on_start(self, event: Any) -> None:
        conn = self.open(account(self.mesh, 1, "backend@iot"))
        event.container.create_receiver(conn, "alerts::audit", name="audit")
        event.container.create_receiver(conn, "telemetry", name="unused")
        # A live (non-durable) subscriber of the topic itself.
        event.container.create_receiver(conn, "alerts", name="live")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name in ("audit", "live"):
            self.ready += 1
            if self.ready == 2:
                conn = self.open(account(self.mesh, 0, "backend@iot"))
                event.container.create_sender(conn, "alerts", name="publisher")

    def on_sendable(self, event: Any) -> None:
        if event.sender.name == "publisher" and not getattr(self, "sent", False):
            self.sent = True
            event.sender.send(Message(subject="overheat", body="device 7 at 91C"))

    def on_message(self, event: Any) -> None:
        self.received[event.receiver.name].append(event.message.body)
        if all(self.received.values()):
            self.done()


def test_topic_reaches_live_and_durable_subscribers(stack: Mesh) -> None:
    received = run(TopicFanout(stack), timeout=60).received
    assert received == {"live": ["device 7 at 91C"], "audit": ["device 7 at 91C"]}


def test_a_subscriber_that_releases_and_leaves_does_not_stall_the_subscription(
    stack: Mesh,
) -> None:
    # Overshot credit and a released message in flight to a link the router detaches:
    # RabbitMQ held them unacknowledged until the router's broker session ended, and the
    # subscription's next subscribers through that router got nothing.
    bodies = [f"stall {i}" for i in range(3)]
    sent = run(SendAll(stack, 0, "backend@iot", "alerts", bodies), timeout=30)
    assert sent.accepted == len(bodies)
    for _ in range(2):  # (audit allows 3 delivery attempts: a third would dead-letter it)
        left = run(Receive(stack, 1, "backend@iot", "alerts::audit", 1, release=True), 30)
        assert left.bodies[0] == bodies[0]  # (and what else its credit brought)
    received = run(Receive(stack, 1, "backend@iot", "alerts::audit", len(bodies)), timeout=30)
    assert received.bodies == bodies
