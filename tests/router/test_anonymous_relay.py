"""Anonymous relay across a real 3-router mesh: a sender with no target, `to` per message.

The address space `relay` has anycast addresses red, green, blue (a consumer on each
router), nowhere (no consumer), secret (the user may receive from it but not send to
it); `closed` is an `address` with `distribution: unavailable` added to every router's
config. Producer readiness is observed the router's own way: a named sender to an
address gets credit only once a consumer for it is reachable.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from proton import Message

from tests.support.amqp import Account, Scenario, run
from tests.support.mesh import Mesh, build_mesh

MODEL = (
    """\
apiVersion: enmesh.io/v1
kind: AddressPlan
metadata: {name: anycast}
spec: {addressType: anycast}
---
apiVersion: enmesh.io/v1
kind: AddressSpacePlan
metadata: {name: small}
spec:
  addressSpaceType: standard
  resourceLimits: {connections: 100, addresses: 10}
  addressPlans: [anycast]
---
apiVersion: enmesh.io/v1
kind: AddressSpace
metadata: {name: relay}
spec: {type: standard, plan: small}
"""
    + "".join(
        f"""---
apiVersion: enmesh.io/v1
kind: Address
metadata: {{name: relay.{name}}}
spec: {{addressSpace: relay, address: {name}, type: anycast, plan: anycast}}
"""
        for name in ("red", "green", "blue", "nowhere", "secret")
    )
    + """---
apiVersion: enmesh.io/v1
kind: MessagingUser
metadata: {name: relay.app}
spec:
  addressSpace: relay
  username: app
  authentication: {passwordSecret: {name: relay-app, key: password}}
  authorization:  # closed is no model address, only router config: validate takes a prefix
    - {operations: [send], addresses: [red, green, blue, nowhere, "closed*"]}
    - {operations: [recv], addresses: [red, green, blue, secret, "closed*"]}
"""
)
UNAVAILABLE = "\naddress {\n    distribution: unavailable\n    prefix: relay/closed\n}\n"
COLOURS = ("red", "green", "blue")  # consumer of colour i is on router i
PER_ADDRESS = 10


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    directory = tmp_path_factory.mktemp("relay")
    model = directory / "relay.model.yml"
    model.write_text(MODEL)
    built = build_mesh(directory / "mesh", routers=3, models=[model])
    for router in built.routers:
        router.config.write_text(router.config.read_text() + UNAVAILABLE)
    # Replies go to the router's temporary addresses: the operator lets `app` send there.
    policy = built.directory / "config" / "auth" / "policies" / "relay.json"
    policy.write_text(policy.read_text().replace('"targets": "', '"targets": "_dynamic.*, '))
    try:
        built.start()
        built.wait_converged()
        yield built
    finally:
        built.stop()


def app(mesh: Mesh, router: int) -> Account:
    return Account(mesh.url(router), "app@relay", mesh.passwords["app@relay"], "relay")


class Consumer(Scenario):
    """Base: consumers of `COLOURS` on routers 0..2, then `producer_ready`."""

    def __init__(self, mesh: Mesh) -> None:
        super().__init__(auto_accept=False)
        self.mesh = mesh
        self.opened: set[str] = set()
        self.received: dict[str, list[Any]] = {c: [] for c in COLOURS}

    def consumers(self) -> tuple[str, ...]:
        return COLOURS

    def on_start(self, event: Any) -> None:
        for colour in self.consumers():
            connection = self.open(app(self.mesh, COLOURS.index(colour)))
            event.container.create_receiver(connection, colour, name=f"consumer-{colour}")

    def on_link_opened(self, event: Any) -> None:
        name = event.link.name
        if name.startswith("consumer-"):
            self.opened.add(name)
            if len(self.opened) == len(self.consumers()):
                self.start_producer(event.container)

    def start_producer(self, container: Any) -> None:
        raise NotImplementedError


class RelayToThreeRouters(Consumer):
    """An anonymous sender on router 0 sends to red (accepted by its consumer), green
    (rejected by its consumer), blue (released by its consumer), nowhere, secret, closed
    and to no address at all, once named probes show every colour reachable."""

    def __init__(self, mesh: Mesh) -> None:
        super().__init__(mesh)
        self.relay: Any = None
        self.first_credit: int | None = None
        self.offered: list[str] = []
        self.ready: set[str] = set()
        self.labels: dict[Any, str] = {}
        self.outcomes: dict[str, list[tuple[str, str | None]]] = {}
        self.expected = 3 * PER_ADDRESS + 4
        self.sent = False

    def start_producer(self, container: Any) -> None:
        connection = self.open(app(self.mesh, 0))
        self.relay = container.create_sender(connection, None, name="relay")
        for colour in COLOURS:
            container.create_sender(connection, colour, name=f"probe-{colour}")

    def on_connection_opened(self, event: Any) -> None:
        capabilities = event.connection.remote_offered_capabilities
        self.offered = [str(c) for c in capabilities or []]

    def on_sendable(self, event: Any) -> None:
        sender = event.sender
        if sender.name == "relay" and self.first_credit is None:
            self.first_credit = sender.credit
        elif sender.name.startswith("probe-"):
            self.ready.add(sender.name)
        if len(self.ready) == len(COLOURS) and self.relay.credit and not self.sent:
            self.sent = True
            self.send_all()

    def send_all(self) -> None:
        plan = [(c, f"{c}-{i}") for i in range(PER_ADDRESS) for c in COLOURS]
        plan += [("nowhere", "nowhere"), ("secret", "secret"), ("closed", "closed")]
        for address, body in plan:
            self.labels[self.relay.send(Message(address=address, body=body)).tag] = address
        self.labels[self.relay.send(Message(body="no address")).tag] = "none"
        # After the refusals: the link is still open and still routes.
        self.expected += 1
        self.labels[self.relay.send(Message(address="red", body="after")).tag] = "red"

    def on_message(self, event: Any) -> None:
        colour = event.link.name.removeprefix("consumer-")
        self.received[colour].append(event.message.body)
        if colour == "red":
            self.accept(event.delivery)
        elif colour == "green":
            self.reject(event.delivery)
        else:
            self.release(event.delivery, delivered=False)

    def _outcome(self, event: Any, outcome: str) -> None:
        condition = event.delivery.remote.condition
        label = self.labels[event.delivery.tag]
        self.outcomes.setdefault(label, []).append((outcome, condition and condition.name))
        if sum(len(v) for v in self.outcomes.values()) == self.expected:
            self.done()

    def on_accepted(self, event: Any) -> None:
        self._outcome(event, "accepted")

    def on_rejected(self, event: Any) -> None:
        self._outcome(event, "rejected")

    def on_released(self, event: Any) -> None:
        self._outcome(event, "released")


def test_anonymous_sender_routes_each_message_by_its_to(mesh: Mesh) -> None:
    scenario = run(RelayToThreeRouters(mesh), timeout=60)
    assert "ANONYMOUS-RELAY" in scenario.offered
    assert scenario.first_credit == 250  # the listener's linkCapacity, from the start
    assert scenario.received["red"] == [f"red-{i}" for i in range(PER_ADDRESS)] + ["after"]
    for colour in ("green", "blue"):
        assert scenario.received[colour] == [f"{colour}-{i}" for i in range(PER_ADDRESS)]
    outcomes = {label: Counter(found) for label, found in scenario.outcomes.items()}
    assert outcomes == {
        "red": Counter({("accepted", None): PER_ADDRESS + 1}),
        "green": Counter({("rejected", None): PER_ADDRESS}),
        "blue": Counter({("released", None): PER_ADDRESS}),
        "nowhere": Counter({("released", None): 1}),
        "secret": Counter({("rejected", "amqp:unauthorized-access"): 1}),
        "closed": Counter({("rejected", "amqp:not-found"): 1}),
        "none": Counter({("rejected", "amqp:precondition-failed"): 1}),
    }
    assert not scenario.errors  # no link or connection was closed on the producer


class ReleaseOnLoss(Consumer):
    """The blue consumer (router 2) takes one message and drops its connection unsettled:
    the anonymous sender on router 0 gets `released`."""

    def __init__(self, mesh: Mesh) -> None:
        super().__init__(mesh)
        self.relay: Any = None
        self.outcome: str | None = None

    def consumers(self) -> tuple[str, ...]:
        return ("blue",)

    def start_producer(self, container: Any) -> None:
        connection = self.open(app(self.mesh, 0))
        self.relay = container.create_sender(connection, None, name="relay")
        container.create_sender(connection, "blue", name="probe-blue")

    def on_sendable(self, event: Any) -> None:
        if event.sender.name == "probe-blue" and self.relay.credit and self.outcome is None:
            self.outcome = "sent"
            self.relay.send(Message(address="blue", body="lost"))

    def on_message(self, event: Any) -> None:
        self.received["blue"].append(event.message.body)
        event.connection.close()  # without settling: the router must release it

    def on_released(self, event: Any) -> None:
        self.outcome = "released"
        self.done()

    def on_accepted(self, event: Any) -> None:
        self.outcome = "accepted"
        self.done()


def test_release_on_loss_of_the_consumer(mesh: Mesh) -> None:
    scenario = run(ReleaseOnLoss(mesh), timeout=30)
    assert scenario.received["blue"] == ["lost"]
    assert scenario.outcome == "released"


class AttachUnavailable(Scenario):
    """A named sender and a receiver for `closed` (distribution: unavailable)."""

    def __init__(self, account: Account) -> None:
        super().__init__()
        self.account = account
        self.refusals: list[tuple[str, str, str]] = []

    def on_start(self, event: Any) -> None:
        connection = self.open(self.account)
        event.container.create_sender(connection, "closed", name="sender")
        event.container.create_receiver(connection, "closed", name="receiver")

    def on_link_error(self, event: Any) -> None:
        condition = event.link.remote_condition
        self.refusals.append((event.link.name, condition.name, condition.description))
        if len(self.refusals) == 2:
            self.done()


def test_unavailable_address_refuses_senders_and_receivers(mesh: Mesh) -> None:
    scenario = run(AttachUnavailable(app(mesh, 1)), timeout=30)
    assert sorted(scenario.refusals) == [
        ("receiver", "amqp:not-found", "Node not found"),
        ("sender", "amqp:not-found", "Node not found"),
    ]


class RequestReply(Scenario):
    """A requester on router 2 with a dynamic reply address; a responder on router 0
    answers through an anonymous sender, addressed by the request's reply-to."""

    def __init__(self, mesh: Mesh) -> None:
        super().__init__()
        self.mesh = mesh
        self.replies: list[Any] = []
        self.outcome: str | None = None
        self.reply_to: str | None = None

    def on_start(self, event: Any) -> None:
        requester = self.open(app(self.mesh, 2))
        event.container.create_receiver(requester, None, dynamic=True, name="replies")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "replies":
            self.reply_to = event.link.remote_source.address
            responder = self.open(app(self.mesh, 0))
            event.container.create_sender(responder, None, name="relay")
            # Readiness: a named sender gets credit once router 0 can reach the address.
            event.container.create_sender(responder, self.reply_to, name="probe")

    def on_sendable(self, event: Any) -> None:
        if event.sender.name == "probe" and self.outcome is None:
            self.outcome = "sent"
            relay = event.sender.session.connection.link_head(0)
            while relay is not None and relay.name != "relay":
                relay = relay.next(0)
            relay.send(Message(address=self.reply_to, body="pong"))

    def on_message(self, event: Any) -> None:
        self.replies.append(event.message.body)
        self._check()

    def on_accepted(self, event: Any) -> None:
        self.outcome = "accepted"
        self._check()

    def _check(self) -> None:
        if self.replies and self.outcome == "accepted":
            self.done()


def test_reply_to_a_dynamic_address_on_another_router(mesh: Mesh) -> None:
    scenario = run(RequestReply(mesh), timeout=30)
    assert scenario.reply_to is not None and scenario.reply_to.startswith("_dynamic.")
    assert scenario.replies == ["pong"]
    assert scenario.outcome == "accepted"
