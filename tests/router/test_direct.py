"""Direct messaging semantics: credit follows reachability, outcomes travel end to end."""

from __future__ import annotations

from typing import Any

from proton import Condition, Delivery, Message
from proton.reactor import AtMostOnce

from tests.router.conftest import ConsumerFirst, account
from tests.support.amqp import Scenario, run
from tests.support.mesh import Mesh


class CreditFollowsConsumer(Scenario):
    """Producer on router 0; a consumer comes and goes on router 1."""

    def __init__(self, mesh: Mesh) -> None:
        super().__init__(prefetch=10)
        self.mesh = mesh
        self.state: dict[str, Any] = {"phase": "attach-producer", "credits": []}
        self.consumer: Any = None
        self.producer: Any = None

    def on_start(self, event: Any) -> None:
        conn = self.open(account(self.mesh, 0, "device@iot"))
        self.producer = event.container.create_sender(conn, "telemetry", name="producer")
        # A second link on the same connection: once it is open, the router has long
        # answered the producer's attach with whatever credit it was going to grant.
        self.probe_conn = conn

    def on_link_opened(self, event: Any) -> None:
        link, phase = event.link, self.state["phase"]
        if link.name == "producer":
            self.state["credit_at_attach"] = link.credit
            event.container.create_sender(self.probe_conn, "events", name="probe")
        elif link.name == "probe" and phase == "attach-producer":
            self.state["credit_after_round_trip"] = self.producer.credit
            self.state["phase"] = "attach-consumer"
            conn = self.open(account(self.mesh, 1, "backend@iot"))
            self.consumer = event.container.create_receiver(conn, "telemetry", name="consumer")

    def on_link_flow(self, event: Any) -> None:
        if event.link.name != "producer":
            return
        credit = event.link.credit
        self.state["credits"].append(credit)
        if self.state["phase"] == "attach-consumer" and credit > 0:
            self.state["credit_with_consumer"] = credit
            self.state["phase"] = "detach-consumer"
            self.consumer.close()
        elif self.state["phase"] == "detach-consumer" and credit == 0:
            self.state["credit_after_detach"] = credit
            self.done()


def test_credit_only_while_a_consumer_is_reachable(full_mesh: Mesh) -> None:
    state = run(CreditFollowsConsumer(full_mesh), timeout=30).state
    assert state["credit_at_attach"] == 0
    assert state["credit_after_round_trip"] == 0
    assert state["credit_with_consumer"] > 0
    assert state["credit_after_detach"] == 0


class Multicast(Scenario):
    """Listeners (device@iot) on `listeners_at`; once all are attached, the announcer
    (backend@iot) on router 0 sends `total` messages to `broadcast`."""

    def __init__(
        self, mesh: Mesh, total: int, listeners_at: tuple[int, ...], prefetch: int
    ) -> None:
        super().__init__(prefetch=prefetch)
        self.mesh, self.total, self.listeners_at = mesh, total, listeners_at
        self.received = dict.fromkeys(listeners_at, 0)
        self.ready = self.sent = 0

    def on_start(self, event: Any) -> None:
        for i in self.listeners_at:
            conn = self.open(account(self.mesh, i, "device@iot"))
            event.container.create_receiver(conn, "broadcast", name=f"listener-{i}")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name.startswith("listener-"):
            self.ready += 1
            if self.ready == len(self.listeners_at):
                conn = self.open(account(self.mesh, 0, "backend@iot"))
                event.container.create_sender(conn, "broadcast", name="announcer")

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit and self.sent < self.total:
            event.sender.send(Message(id=self.sent, body="all hands"))
            self.sent += 1

    def on_message(self, event: Any) -> None:
        self.received[int(event.receiver.name.rsplit("-", 1)[1])] += 1
        if all(n == self.total for n in self.received.values()):
            self.done()


def test_multicast_reaches_every_consumer_in_the_mesh(full_mesh: Mesh) -> None:
    scenario = run(Multicast(full_mesh, 1000, (0, 1, 2), prefetch=100), timeout=60)
    assert scenario.received == {0: 1000, 1: 1000, 2: 1000}


OUTCOMES = ("accept", "reject", "release", "modify")


class OutcomesEndToEnd(ConsumerFirst):
    """Consumer on router 2 of a chain settles each message its own way; producer on 0."""

    def __init__(self, mesh: Mesh) -> None:
        super().__init__(mesh, auto_accept=False, auto_settle=True)
        self.seen: dict[str, Any] = {}
        self.sent = False

    def on_sendable(self, event: Any) -> None:
        if not self.sent and event.sender.credit >= len(OUTCOMES):
            self.sent = True
            for outcome in OUTCOMES:
                delivery = event.sender.send(Message(body=outcome))
                delivery.outcome = outcome

    def on_message(self, event: Any) -> None:
        delivery, outcome = event.delivery, event.message.body
        if outcome == "accept":
            delivery.update(Delivery.ACCEPTED)
        elif outcome == "reject":
            delivery.local.condition = Condition("app:bad-reading", "sensor out of range")
            delivery.update(Delivery.REJECTED)
        elif outcome == "release":
            delivery.update(Delivery.RELEASED)
        else:
            delivery.local.failed = True
            delivery.local.undeliverable = True
            delivery.local.annotations = {"x-opt-reason": "try elsewhere"}
            delivery.update(Delivery.MODIFIED)
        delivery.settle()

    def _record(self, event: Any) -> None:
        delivery = event.delivery
        remote = delivery.remote
        self.seen[delivery.outcome] = {
            "state": delivery.remote_state,
            "condition": (remote.condition.name, remote.condition.description)
            if remote.condition
            else None,
            "failed": remote.failed,
            "undeliverable": remote.undeliverable,
            "annotations": remote.annotations,
        }
        if len(self.seen) == len(OUTCOMES):
            self.done()

    on_accepted = on_rejected = on_released = _record


def test_consumer_outcomes_reach_the_producer_unchanged_across_two_hops(chain: Mesh) -> None:
    seen = run(OutcomesEndToEnd(chain), timeout=30).seen
    assert seen["accept"]["state"] == Delivery.ACCEPTED
    assert seen["reject"]["state"] == Delivery.REJECTED
    assert seen["reject"]["condition"] == ("app:bad-reading", "sensor out of range")
    assert seen["release"]["state"] == Delivery.RELEASED
    assert seen["modify"]["state"] == Delivery.MODIFIED
    assert seen["modify"]["failed"] is True and seen["modify"]["undeliverable"] is True
    assert seen["modify"]["annotations"] == {"x-opt-reason": "try elsewhere"}


def test_multicast_reaches_routers_with_no_local_consumer_on_the_way(chain: Mesh) -> None:
    """Announcer on A; listeners only on B and C: A has no local consumer at all."""
    scenario = run(Multicast(chain, 500, (1, 2), prefetch=50), timeout=60)
    assert scenario.received == {1: 500, 2: 500}


class PresettledThenLeave(ConsumerFirst):
    """A presettled producer on A sends `total` and closes at once; the consumer on C takes
    them slowly, so most are still inside the routers when the producer is gone."""

    def __init__(self, mesh: Mesh, total: int) -> None:
        super().__init__(mesh, prefetch=5)
        self.total = total
        self.sent = self.received = 0

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            conn = self.open(account(self.mesh, self.producer_at, "device@iot"))
            event.container.create_sender(conn, "telemetry", name="producer", options=AtMostOnce())

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit and self.sent < self.total:
            event.sender.send(Message(body=self.sent))
            self.sent += 1
        if self.sent == self.total:
            event.connection.close()  # the router took responsibility for every one

    def on_message(self, event: Any) -> None:
        self.received += 1
        if self.received == self.total:
            self.done()


def test_presettled_messages_outlive_their_producer(chain: Mesh) -> None:
    scenario = run(PresettledThenLeave(chain, 400), timeout=60)
    assert scenario.received == 400
