"""Test meshes (tests.support.stack.brokered_mesh) as the two sides of `enmesh migrate`:
a source and a target side by side, each with its own CA, RabbitMQ node, secrets and
state; each side's deploy description and rabbitmqctl, or what `enmesh apply` reaches."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from proton import Message

from enmesh.control.brokers import Rabbitmqctl
from enmesh.migrate.bridge import Side
from enmesh.migrate.ends import StackEnd, end_from_deployment
from tests.router.conftest import account
from tests.support.apply_target import mesh_target, stack_file
from tests.support.mesh import Mesh
from tests.support.pki import Pki
from tests.support.rabbitmq import RABBITMQ_BIN, RabbitMQBroker
from tests.support.stack import brokered_mesh


def stack_end(name: str, mesh: Mesh) -> StackEnd:
    broker = mesh.extra["broker"]
    assert isinstance(broker, RabbitMQBroker)
    deployment = json.loads((mesh.directory / "config" / "deploy.json").read_text())
    ctl = Rabbitmqctl(
        "broker-0", (str(RABBITMQ_BIN / "rabbitmqctl"), "-n", broker.node), broker._env()
    )
    return end_from_deployment(name, deployment, {"broker-0": ctl})


def depth(mesh: Mesh, queue: str) -> int:
    """Messages in `queue` on the mesh's broker (quorum queue counts lag a few seconds)."""
    broker = mesh.extra["broker"]
    assert isinstance(broker, RabbitMQBroker)
    return {r["name"]: int(r["messages"]) for r in broker.list_queues()}[queue]


@contextmanager
def source_and_target(source_dir: Path, target_dir: Path) -> Iterator[tuple[Mesh, Mesh]]:
    """Two one-router stacks named `source` and `target`, started; stopped after."""
    with ExitStack() as stack:
        source = stack.enter_context(brokered_mesh(source_dir, routers=1, name="source"))
        target = stack.enter_context(brokered_mesh(target_dir, routers=1, name="target"))
        yield source, target


def side(mesh: Mesh) -> Side:
    """The mesh as `enmesh migrate bridge` reaches a stack: its files and `enmesh apply`."""
    broker = mesh.extra["broker"]
    assert isinstance(broker, RabbitMQBroker)
    return Side(stack_file(mesh), mesh_target(mesh, broker))


def ca_key(mesh: Mesh) -> Path:
    pki = mesh.extra["pki"]
    assert isinstance(pki, Pki)
    return pki.ca_key


def store(mesh: Mesh, address: str, bodies: list[str], identity: str = "device@iot") -> None:
    """Send each message durable and unsettled; returns once each was accepted."""
    connection = account(mesh, 0, identity).blocking(timeout=30)
    try:
        sender = connection.create_sender(address)
        for body in bodies:
            sender.send(Message(body=body, durable=True))
    finally:
        connection.close()
