"""Router meshes shared by the router tests (real processes, compiled configs)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from proton import LinkException, Message

from tests.support.amqp import Account, Scenario
from tests.support.mesh import Mesh, build_mesh


def running_mesh(
    factory: pytest.TempPathFactory,
    topology: str,
    prepare: Callable[[Mesh], None] | None = None,
) -> Iterator[Mesh]:
    """Three routers in `topology`, started and converged; stopped afterwards.
    `prepare` may change the compiled files first (as an operator would)."""
    mesh = build_mesh(factory.mktemp(topology), routers=3, topology=topology)
    if prepare is not None:
        prepare(mesh)
    try:
        mesh.start()
        mesh.wait_converged()
        yield mesh
    finally:
        mesh.stop()


@pytest.fixture(scope="session")
def full_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """3 routers, each connected to the other two."""
    yield from running_mesh(tmp_path_factory, "full-mesh")


@pytest.fixture(scope="session")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """A - B - C: router 0 reaches router 2 only through router 1."""
    yield from running_mesh(tmp_path_factory, "chain")


def account(mesh: Mesh, router: int, identity: str, tls: bool = False) -> Account:
    vhost = identity.split("@", 1)[1]
    mechanisms = "PLAIN" if tls else "SCRAM-SHA-256"
    return Account(
        mesh.url(router, tls), identity, mesh.passwords[identity], vhost, mesh.ca, mechanisms
    )


def sender_refusal(mesh: Mesh, identity: str, address: str) -> str | None:
    """None if `identity` may attach a sender to `address` on router 0, else the refusal."""
    connection = account(mesh, 0, identity).blocking()
    try:
        connection.create_sender(address)
    except LinkException as exc:
        return str(exc)
    finally:
        connection.close()
    return None


class ConsumerFirst(Scenario):
    """Consumer `backend@iot` on router `consumer_at`; once its link is open, producer
    `device@iot` attaches on router `producer_at`. Both use `telemetry`."""

    consumer_at, producer_at = 2, 0

    def __init__(self, mesh: Mesh, **handler_options: Any) -> None:
        super().__init__(**handler_options)
        self.mesh = mesh

    def on_start(self, event: Any) -> None:
        conn = self.open(account(self.mesh, self.consumer_at, "backend@iot"))
        event.container.create_receiver(conn, "telemetry", name="consumer")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            conn = self.open(account(self.mesh, self.producer_at, "device@iot"))
            event.container.create_sender(conn, "telemetry", name="producer")


class SendN(ConsumerFirst):
    """N unsettled messages from device@iot on `producer_at` to backend@iot on
    `consumer_at`; every connection closed once the producer has N outcomes."""

    def __init__(self, mesh: Mesh, total: int, producer_at: int, consumer_at: int) -> None:
        super().__init__(mesh)
        self.total, self.producer_at, self.consumer_at = total, producer_at, consumer_at
        self.sent = self.settled = self.received = self.accepted = 0

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit > 0 and self.sent < self.total:
            event.sender.send(Message(body=self.sent))
            self.sent += 1

    def on_message(self, event: Any) -> None:
        self.received += 1

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1

    def on_settled(self, event: Any) -> None:
        self.settled += 1
        if self.settled == self.total:
            self.done()
