"""A test mesh (tests.support.stack.brokered_mesh) as one side of `enmesh migrate`: its
deploy description and its private RabbitMQ node's rabbitmqctl."""

from __future__ import annotations

import json

from enmesh.control.brokers import Rabbitmqctl
from enmesh.migrate.ends import StackEnd, end_from_deployment
from tests.support.mesh import Mesh
from tests.support.rabbitmq import RABBITMQ_BIN, RabbitMQBroker


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
