"""A queue deleted under the router's autoLinks: RabbitMQ ends the session they share
(amqp:not-found), and the router attaches them again on a new session while the broker
connection stays up; once the queue is back, messages flow through it again, and the
other queues never needed a restart of anything."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from proton import Message

from tests.router.conftest import account
from tests.support.mesh import Mesh, wait_until
from tests.support.rabbitmq import RabbitMQBroker
from tests.support.stack import broker_attached, brokered_mesh

VHOST = "enmesh"  # the vhost the compiled broker definitions hold every queue in


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    with brokered_mesh(tmp_path_factory.mktemp("broker-session-end"), routers=1) as mesh:
        yield mesh


# Queues of the sample model, and who may send to and receive from each.
QUEUES = {"commands": ("backend@iot", "device@iot"), "events": ("device@iot", "backend@iot")}


def round_trip(mesh: Mesh, address: str, body: str) -> str:
    """Store a message through the router and take it back out; its body."""
    sending, receiving = QUEUES[address]
    sender = account(mesh, 0, sending).blocking()
    try:
        sender.create_sender(address).send(Message(body=body, durable=True))  # broker accepted
    finally:
        sender.close()
    receiver_connection = account(mesh, 0, receiving).blocking()
    try:
        receiver = receiver_connection.create_receiver(address)
        message = receiver.receive(timeout=20)
        receiver.accept()
        return str(message.body)
    finally:
        receiver_connection.close()


def test_autolinks_attach_again_after_the_broker_ends_their_session(stack: Mesh) -> None:
    broker = stack.extra["broker"]
    assert isinstance(broker, RabbitMQBroker)
    assert round_trip(stack, "commands", "before") == "before"

    broker.ctl("delete_queue", "-p", VHOST, "iot.commands")
    # RabbitMQ drops the router's connection; the router connects again and its autoLink
    # on the missing queue ends the new connection's session (not_found, in its log).
    wait_until(
        lambda: "no queue 'iot.commands'" in broker.log_file.read_text(errors="replace"),
        30,
        "the broker to refuse the missing queue",
    )
    broker.ctl("import_definitions", str(broker.definitions))  # the queue is back
    wait_until(lambda: broker_attached(stack.routers[0].metrics()), 60, "autoLinks attached again")

    # No router restart: both the deleted and restored queue and another one carry messages.
    assert round_trip(stack, "events", "another queue") == "another queue"
    assert round_trip(stack, "commands", "the restored queue") == "the restored queue"


def test_an_autolink_the_broker_keeps_refusing_leaves_the_others_attached(stack: Mesh) -> None:
    """RabbitMQ ends the whole session for the one attach it refuses: the router splits
    the autoLinks it attaches again until the refused one is alone on its session."""
    broker = stack.extra["broker"]
    assert isinstance(broker, RabbitMQBroker)
    broker.ctl("delete_queue", "-p", VHOST, "iot.commands")
    try:
        wait_until(lambda: _works(stack, "events"), 90, "another queue, its queue still gone")
    finally:
        broker.ctl("import_definitions", str(broker.definitions))
    wait_until(lambda: _works(stack, "commands"), 90, "the queue, once it is back")


def _works(mesh: Mesh, address: str) -> bool:
    try:
        return round_trip(mesh, address, "probe") == "probe"
    except Exception:  # not attached yet: no credit, or nothing to receive
        return False
