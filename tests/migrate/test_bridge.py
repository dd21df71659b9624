"""`enmesh migrate bridge` between two meshes side by side (each its own CA, RabbitMQ node,
secrets and state): the target's routers join the source's mesh with a certificate the
source's CA issued, and the source's routers leave their broker to the target's. Then
direct traffic crosses in both directions with the consumer's outcome back at the
producer, a queue message sent on the source is stored on the target, the source's
backlog moved by the shovel reaches a consumer still on the source, a topic subscriber on
the target gets what a publisher on the source sends, and unbridging gives each stack
its own mesh and broker back."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from proton import Message
from proton.utils import BlockingConnection

from enmesh.client_failover import failover_urls
from enmesh.compile.bridge import bridge_file
from enmesh.migrate.bridge import bridge, unbridge
from enmesh.migrate.ends import MigrateError
from enmesh.migrate.shovel import move_stored
from tests.router.conftest import account
from tests.support.amqp import Account
from tests.support.mesh import Mesh, wait_until
from tests.support.migrate_ends import ca_key, depth, side, source_and_target, stack_end, store
from tests.support.stack import broker_attached


@pytest.fixture(scope="module")
def meshes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mesh, Mesh]]:
    factory = tmp_path_factory
    with source_and_target(factory.mktemp("source"), factory.mktemp("target")) as both:
        yield both


def _send(connection: BlockingConnection, address: str, bodies: list[str]) -> None:
    """Each message unsettled; `send` returns once the far end accepted it (and raises on
    any other outcome)."""
    sender = connection.create_sender(address)
    for body in bodies:
        sender.send(Message(body=body, durable=True))


class _Consumer(threading.Thread):
    """A consumer with its own connection, in its own thread, so that a blocking producer
    in the test's thread waits for this consumer's acceptance."""

    def __init__(self, who: Account, address: str, count: int) -> None:
        super().__init__(daemon=True)
        self.who, self.address, self.count = who, address, count
        self.attached = threading.Event()
        self.bodies: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            connection = self.who.blocking(timeout=30)
            try:
                receiver = connection.create_receiver(self.address, credit=self.count)
                self.attached.set()
                for _ in range(self.count):
                    self.bodies.append(str(receiver.receive(timeout=30).body))
                    receiver.accept()
            finally:
                connection.close()
        except BaseException as error:
            self.error = error
            self.attached.set()


@contextmanager
def consuming(who: Account, address: str, count: int) -> Iterator[_Consumer]:
    consumer = _Consumer(who, address, count)
    consumer.start()
    assert consumer.attached.wait(30), f"no consumer attached to {address}"
    yield consumer
    consumer.join(60)
    assert consumer.error is None, consumer.error
    assert not consumer.is_alive()


def test_a_target_that_lacks_the_sources_addresses_is_refused(
    meshes: tuple[Mesh, Mesh],
) -> None:
    source, target = meshes
    model = target.directory / "iot.model.yml"
    before = model.read_text()
    anycast = "address: telemetry, type: anycast, plan: standard-anycast"
    model.write_text(
        before.replace(anycast, "address: telemetry, type: multicast, plan: standard-multicast")
    )
    try:
        with pytest.raises(MigrateError, match=r"prepare.*iot/telemetry \(anycast\)"):
            bridge(side(source), side(target), ca_key=ca_key(source), echo=print)
    finally:
        model.write_text(before)
    assert not bridge_file(target.directory / "state" / "runtime", "source").exists()


def test_a_source_the_target_cannot_reach_is_refused_and_the_target_left_as_it_was(
    meshes: tuple[Mesh, Mesh],
) -> None:
    source, target = meshes
    config_before = target.routers[0].config.read_text()
    source.routers[0].stop()
    try:
        with pytest.raises(MigrateError, match=r"after 3 s these routers do not reach.*"):
            bridge(side(source), side(target), ca_key=ca_key(source), timeout=3, echo=print)
    finally:
        source.routers[0].start()
    assert not bridge_file(target.directory / "state" / "runtime", "source").exists()
    assert target.routers[0].config.read_text() == config_before
    assert not bridge_file(source.directory / "state" / "runtime", "target").exists()
    assert not (target.directory / "state" / "tls" / "bridge-source.crt").exists()
    wait_until(lambda: _broker_attached(source), 30, "the source's broker links back")


def _broker_attached(mesh: Mesh) -> bool:
    try:
        return broker_attached(mesh.routers[0].metrics())
    except OSError:  # its metrics listener not up yet
        return False


def test_two_meshes_route_as_one_and_the_source_uses_the_targets_broker(
    meshes: tuple[Mesh, Mesh],
) -> None:
    source, target = meshes
    store(source, "events", ["stored before 1", "stored before 2"])
    wait_until(lambda: depth(source, "iot.events") == 2, 30, "two events stored on the source")

    done = bridge(side(source), side(target), ca_key=ca_key(source), echo=print)
    assert (done.links, done.certificate) == (1, "issued by the source's CA")
    assert source.routers[0].reachable_routers() == 1
    assert "role: route-container" not in source.routers[0].config.read_text()
    device_on_source = account(source, 0, "device@iot").blocking(timeout=30)
    # Clients of the source are told to reconnect to the target (the failover list).
    assert failover_urls(device_on_source.conn) == [
        f"amqp://127.0.0.1:{target.routers[0].amqp_port}"
    ]
    backend_on_target = account(target, 0, "backend@iot").blocking(timeout=30)
    backend_on_source = account(source, 0, "backend@iot").blocking(timeout=30)
    try:
        # Direct (anycast) from the source to a consumer on the target: the producer gets
        # credit once the consumer is reachable, and the consumer's acceptance.
        with consuming(account(target, 0, "backend@iot"), "telemetry", 2) as telemetry:
            _send(device_on_source, "telemetry", ["reading 1", "reading 2"])
        assert telemetry.bodies == ["reading 1", "reading 2"]
        # Multicast from the target to a consumer on the source.
        with consuming(account(source, 0, "device@iot"), "broadcast", 1) as broadcast:
            _send(backend_on_target, "broadcast", ["to all"])
        assert broadcast.bodies == ["to all"]

        # The source's own broker link is gone: a new event is stored on the target's.
        _send(device_on_source, "events", ["sent during the bridge"])
        wait_until(lambda: depth(target, "iot.events") == 1, 30, "the new event on the target")
        assert depth(source, "iot.events") == 2

        # Topic: a subscriber on the target, a publisher on the source (the target's
        # broker serves both through the mesh).
        with consuming(account(target, 0, "backend@iot"), "alerts", 1) as alerts:
            _send(backend_on_source, "alerts", ["alert 1"])
        assert alerts.bodies == ["alert 1"]

        # The source's backlog moves to the target; a consumer still on the source gets
        # all three, from the target's broker through the mesh.
        moved = move_stored(stack_end("source", source), stack_end("target", target))
        assert {m.queue: m.moved for m in moved if m.queue.endswith("events")} == {"iot.events": 2}
        assert depth(source, "iot.events") == 0
        with consuming(account(source, 0, "backend@iot"), "events", 3) as events:
            pass
        assert sorted(events.bodies) == [
            "sent during the bridge",
            "stored before 1",
            "stored before 2",
        ]
    finally:
        for connection in (device_on_source, backend_on_target, backend_on_source):
            connection.close()

    again = bridge(side(source), side(target), ca_key=ca_key(source), echo=print)
    assert again.certificate == "certificate kept"

    undone = unbridge(side(source), side(target), "source", echo=print)
    assert len(undone) == 2
    wait_until(lambda: _broker_attached(source), 30, "the source's broker back")
    wait_until(lambda: target.routers[0].reachable_routers() == 0, 30, "the meshes apart")
    assert not (target.directory / "state" / "tls" / "bridge-source.crt").exists()
