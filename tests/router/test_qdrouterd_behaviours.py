"""qdrouterd 1.19's behaviours a client relies on, against real router processes.

A chain of three routers (r0 - r1 - r2) whose client listeners strip annotations
differently: r0 `both` (qdrouterd's default), r1 `in`, r2 `no`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from proton import Delivery, Message, symbol

from tests.router.conftest import account
from tests.support.amqp import Scenario, run
from tests.support.mesh import Mesh, build_mesh

STRIP = {0: "both", 1: "in", 2: "no"}
TRACE, INGRESS, TO = symbol("x-opt-qd.trace"), symbol("x-opt-qd.ingress"), symbol("x-opt-qd.to")
USER = symbol("x-opt-app")


def node(index: int) -> str:
    return f"0/test-router-{index}"  # qdrouterd's `<area>/<router id>`


def set_listener(mesh: Mesh, index: int, attribute: str, value: str) -> None:
    """Add an attribute to router `index`'s plain client listener (`amqp`)."""
    config = mesh.routers[index].config
    text = config.read_text()
    assert text.count("    name: amqp\n") == 1
    added = f"    name: amqp\n    {attribute}: {value}\n"
    config.write_text(text.replace("    name: amqp\n", added))


@pytest.fixture(scope="module")
def annotated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    mesh = build_mesh(tmp_path_factory.mktemp("annotations"), routers=3, topology="chain")
    for index, setting in STRIP.items():
        set_listener(mesh, index, "stripAnnotations", setting)
    try:
        mesh.start()
        mesh.wait_converged()
        yield mesh
    finally:
        mesh.stop()


class SendAnnotated(Scenario):
    """A consumer of `telemetry` at one router; once attached, a producer at another sends
    one message per annotations map. Records what arrives and each message's outcome."""

    def __init__(self, mesh: Mesh, producer: int, consumer: int, maps: list[dict[Any, Any]]):
        super().__init__(auto_accept=True)
        self.mesh, self.producer, self.consumer, self.maps = mesh, producer, consumer, maps
        self.received: dict[int, dict[Any, Any]] = {}
        self.outcomes: dict[int, str] = {}
        self.sent = 0
        self.sender: Any = None

    def on_start(self, event: Any) -> None:
        conn = self.open(account(self.mesh, self.consumer, "backend@iot"))
        event.container.create_receiver(conn, "telemetry", name="consumer")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            conn = self.open(account(self.mesh, self.producer, "device@iot"))
            self.sender = event.container.create_sender(conn, "telemetry", name="producer")

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit and self.sent < len(self.maps):
            message = Message(id=self.sent, body="reading", annotations=self.maps[self.sent])
            event.sender.send(message).enmesh_index = self.sent
            self.sent += 1

    def on_message(self, event: Any) -> None:
        self.received[int(event.message.id)] = dict(event.message.annotations or {})

    def _outcome(self, event: Any, what: str) -> None:
        self.outcomes[event.delivery.enmesh_index] = what
        if len(self.outcomes) == len(self.maps):
            self.done()

    def on_accepted(self, event: Any) -> None:
        self._outcome(event, "accepted")

    def on_rejected(self, event: Any) -> None:
        condition = event.delivery.remote.condition
        self._outcome(event, f"rejected {condition.name}: {condition.description}")

    def on_released(self, event: Any) -> None:
        self._outcome(event, "released")


def send(mesh: Mesh, producer: int, consumer: int, *maps: dict[Any, Any]) -> SendAnnotated:
    scenario = run(SendAnnotated(mesh, producer, consumer, list(maps)), timeout=30)
    assert scenario.errors == []
    return scenario


FORGED = {USER: "kept", INGRESS: "0/forged", TRACE: ["0/forged"]}


def test_a_message_crossing_the_mesh_carries_ingress_and_trace(annotated: Mesh) -> None:
    """Sent at r0 (strips incoming: the forged entries go), received at r2 (strips nothing):
    r0 is the ingress and the trace lists every router passed, in order."""
    scenario = send(annotated, 0, 2, FORGED)
    assert scenario.outcomes == {0: "accepted"}
    assert scenario.received[0] == {
        USER: "kept",
        INGRESS: node(0),
        TRACE: [node(0), node(1), node(2)],
    }


def test_a_stripping_listener_delivers_only_the_users_annotations(annotated: Mesh) -> None:
    """From r2 (`no`: its router entries travel) to r0 (`both`): none reach the client."""
    scenario = send(annotated, 2, 0, FORGED, {})
    assert scenario.received == {0: {USER: "kept"}, 1: {}}


def test_in_ignores_incoming_entries_and_keeps_outgoing_ones(annotated: Mesh) -> None:
    scenario = send(annotated, 1, 1, FORGED)
    assert scenario.received[0] == {USER: "kept", INGRESS: node(1), TRACE: [node(1)]}


def test_no_honours_incoming_ingress_trace_and_to(annotated: Mesh) -> None:
    given = {USER: "kept", INGRESS: "0/elsewhere", TRACE: ["0/x"], TO: "telemetry"}
    scenario = send(annotated, 2, 2, given)
    assert scenario.received[0] == {
        USER: "kept",
        TO: "telemetry",
        INGRESS: "0/elsewhere",
        TRACE: ["0/x", node(2)],
    }


BAD = [
    {TRACE: 5},
    {TRACE: ["0/a", 7]},
    {INGRESS: symbol("0/a")},
    {TO: 7},
]
REFUSALS = [
    "trace annotation is not a list",
    "trace list contains non-string entries",
    "ingress router not a string type",
    "to-override not a valid string type",
]


def test_bad_router_annotations_are_rejected_where_they_are_read(annotated: Mesh) -> None:
    """qdrouterd checks router entries only where it keeps them (`no`, `out`): rejected
    with amqp:invalid-field and its description; the link stays open for the next."""
    scenario = send(annotated, 2, 2, *BAD, {USER: "fine"})
    expected = {i: f"rejected amqp:invalid-field: {text}" for i, text in enumerate(REFUSALS)}
    assert scenario.outcomes == {**expected, len(BAD): "accepted"}
    assert list(scenario.received) == [len(BAD)]


def test_bad_router_annotations_are_ignored_where_they_are_stripped(annotated: Mesh) -> None:
    scenario = send(annotated, 0, 0, *BAD)
    assert scenario.outcomes == dict.fromkeys(range(len(BAD)), "accepted")
    assert all(annotations == {} for annotations in scenario.received.values())


class RequestResponse(Scenario):
    """device@iot (router 0) asks on `telemetry` with a dynamic reply address; backend@iot
    (router 2) answers through an anonymous sender, as compiled policies now allow."""

    def __init__(self, mesh: Mesh) -> None:
        super().__init__()
        self.mesh = mesh
        self.reply: str | None = None
        self.reply_to = ""
        self.reply_outcome: str | None = None
        self.responder: Any = None
        self.requested = False

    def on_start(self, event: Any) -> None:
        conn = self.open(account(self.mesh, 2, "backend@iot"))
        event.container.create_receiver(conn, "telemetry", name="service")
        self.responder = event.container.create_sender(conn, None, name="responder")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "service":
            conn = self.open(account(self.mesh, 0, "device@iot"))
            event.container.create_receiver(conn, None, dynamic=True, name="replies")
        elif event.link.name == "replies":
            self.reply_to = event.link.remote_source.address
            event.container.create_sender(event.connection, "telemetry", name="requests")

    def on_sendable(self, event: Any) -> None:
        if event.link.name == "requests" and not self.requested:
            event.sender.send(Message(body="ping", reply_to=self.reply_to))
            self.requested = True

    def on_message(self, event: Any) -> None:
        if event.link.name == "service":
            self.responder.send(Message(address=event.message.reply_to, body="pong"))
        else:
            self.reply = event.message.body
            self.done()

    def on_rejected(self, event: Any) -> None:
        condition = event.delivery.remote.condition
        self.reply_outcome = f"{condition.name}: {condition.description}"
        self.done()


def test_a_reply_reaches_a_dynamic_address_with_compiled_policies(full_mesh: Mesh) -> None:
    scenario = run(RequestResponse(full_mesh), timeout=30)
    assert scenario.reply_outcome is None
    assert scenario.reply == "pong" and scenario.reply_to.startswith("_dynamic.")


class ConsumerLeaves(Scenario):
    """backend@iot on router 2 takes 5 messages without settling them and detaches; the
    producer on router 0 records each outcome (state, delivery-failed)."""

    def __init__(self, mesh: Mesh) -> None:
        super().__init__(auto_accept=False, prefetch=5)
        self.mesh = mesh
        self.outcomes: list[tuple[int, bool]] = []
        self.taken = self.sent = 0

    def on_start(self, event: Any) -> None:
        conn = self.open(account(self.mesh, 2, "backend@iot"))
        event.container.create_receiver(conn, "telemetry", name="consumer")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            conn = self.open(account(self.mesh, 0, "device@iot"))
            event.container.create_sender(conn, "telemetry", name="producer")

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit and self.sent < 5:
            event.sender.send(Message(body=self.sent))
            self.sent += 1

    def on_message(self, event: Any) -> None:
        self.taken += 1
        if self.taken == 5:
            event.receiver.close()  # five deliveries unsettled

    def on_released(self, event: Any) -> None:  # proton calls this for modified too
        self.outcomes.append((event.delivery.remote_state, event.delivery.remote.failed))
        if len(self.outcomes) == 5:
            self.done()

    def on_accepted(self, event: Any) -> None:
        self.outcomes.append((event.delivery.remote_state, False))
        self.done()


def test_deliveries_in_flight_to_a_leaving_consumer_come_back_modified_failed(
    full_mesh: Mesh,
) -> None:
    """qdrouterd 1.19: unsettled deliveries of a lost outgoing link settle their producer's
    deliveries `modified` with delivery-failed (in doubt), not `released`."""
    scenario = run(ConsumerLeaves(full_mesh), timeout=30)
    assert scenario.outcomes == [(Delivery.MODIFIED, True)] * 5
