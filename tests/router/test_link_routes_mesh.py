"""Link routes whose broker is attached to another router of the mesh (real RabbitMQ).

Router 0 has no broker connection; router 1 has. A subscriber of `alerts::audit` and a
publisher to `alerts` (both link-routed) attach on router 0: their attaches travel to
router 1, which attaches to RabbitMQ; deliveries, credit and outcomes pass back hop by hop.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from proton import Message

from tests.router.conftest import account
from tests.support.amqp import Scenario, run
from tests.support.mesh import Mesh, wait_until
from tests.support.rabbitmq import RabbitMQBroker
from tests.support.stack import brokered_mesh


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    with brokered_mesh(tmp_path_factory.mktemp("lrmesh"), routers=2, brokerless=(0,)) as mesh:
        yield mesh


class SubscribeThroughTheMesh(Scenario):
    """On router 0: wait until router 1's broker is reachable (a named sender to the
    `commands` queue gets credit only then), then subscribe to `alerts::audit`, publish
    one alert to `alerts`, accept it on the subscription."""

    def __init__(self, mesh: Mesh) -> None:
        super().__init__(auto_accept=False)
        self.mesh = mesh
        self.connection: Any = None
        self.received: list[Any] = []
        self.outcome: str | None = None
        self.published = False

    def on_start(self, event: Any) -> None:
        self.connection = self.open(account(self.mesh, 0, "backend@iot"))
        event.container.create_sender(self.connection, "commands", name="probe")

    def on_sendable(self, event: Any) -> None:
        name = event.sender.name
        if name == "probe" and not self.published:
            event.sender.close()
            event.container.create_receiver(self.connection, "alerts::audit", name="audit")
        elif name == "publisher" and not self.published:
            self.published = True
            event.sender.send(Message(subject="overheat", body="device 9 at 95C"))

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "audit":
            event.container.create_sender(self.connection, "alerts", name="publisher")

    def on_message(self, event: Any) -> None:
        self.received.append(event.message.body)
        self.accept(event.delivery)
        self._check()

    def on_accepted(self, event: Any) -> None:
        self.outcome = "accepted"
        self._check()

    def on_rejected(self, event: Any) -> None:
        self.outcome = "rejected"
        self.done()

    def on_released(self, event: Any) -> None:
        self.outcome = "released"
        self.done()

    def _check(self) -> None:
        if self.received and self.outcome:
            self.done()


def _audit_depth(broker: RabbitMQBroker) -> tuple[str, str]:
    """The audit subscription's (ready + unacknowledged, unacknowledged) messages."""
    rows = broker.list_queues("name", "messages", "messages_unacknowledged")
    row = next(row for row in rows if row["name"] == "iot.audit")
    return row["messages"], row["messages_unacknowledged"]


def test_subscription_routed_to_a_broker_on_another_router(stack: Mesh) -> None:
    scenario = run(SubscribeThroughTheMesh(stack), timeout=60)
    assert scenario.errors == []
    assert scenario.outcome == "accepted"  # RabbitMQ took the alert, through router 1
    assert scenario.received == ["device 9 at 95C"]
    # The subscriber's accept reached RabbitMQ: nothing left, nothing unacknowledged.
    broker: RabbitMQBroker = stack.extra["broker"]  # type: ignore[assignment]
    wait_until(lambda: _audit_depth(broker) == ("0", "0"), 20, "iot.audit to be empty")
