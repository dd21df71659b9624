"""`enmesh apply` against a test stack: a Target for routers run as plain child processes
(SIGHUP to their pids, as supervisord would send it) and a private RabbitMQ node."""

from __future__ import annotations

import json
from pathlib import Path

from enmesh.control.brokers import Rabbitmqctl
from enmesh.control.routers import Processes
from enmesh.control.target import Target, from_deployment
from tests.support.mesh import Mesh
from tests.support.rabbitmq import RABBITMQ_BIN, RabbitMQBroker

# A new tenant `shop` for the sample model: an anycast and a queue address, and a user.
SHOP_SPACE = """
---
apiVersion: enmesh.io/v1
kind: AddressSpace
metadata: {name: shop}
spec: {type: standard, plan: standard-small}
"""
SHOP_ORDERS = """
---
apiVersion: enmesh.io/v1
kind: Address
metadata: {name: shop.orders}
spec: {addressSpace: shop, address: orders, type: anycast, plan: standard-anycast}
"""
SHOP_INVOICES = """
---
apiVersion: enmesh.io/v1
kind: Address
metadata: {name: shop.invoices}
spec: {addressSpace: shop, address: invoices, type: queue, plan: standard-queue}
"""
SHOP_CLERK = """
---
apiVersion: enmesh.io/v1
kind: MessagingUser
metadata: {name: shop.clerk}
spec:
  addressSpace: shop
  username: clerk
  authentication:
    passwordSecret: {name: shop-clerk, key: password}
  authorization:
    - operations: [send, recv]
      addresses: [orders, invoices]
"""
SHOP = SHOP_SPACE + SHOP_ORDERS + SHOP_INVOICES + SHOP_CLERK


def mesh_target(mesh: Mesh, broker: RabbitMQBroker | None) -> Target:
    """The mesh as `enmesh apply` sees it; without a broker, one that changes routers only."""
    deployment = json.loads((mesh.directory / "config" / "deploy.json").read_text())

    def pid(router: str) -> int:
        process = mesh.routers[int(router.rsplit("-", 1)[1])].process
        assert process is not None
        return process.pid

    if broker is None:
        return from_deployment(deployment, signaller=Processes(pid), brokers={})
    ctl = Rabbitmqctl(
        "broker-0",
        (str(RABBITMQ_BIN / "rabbitmqctl"), "-n", broker.node),
        broker._env(),  # the node's private environment: cookie, ports
    )
    return from_deployment(deployment, signaller=Processes(pid), brokers={"broker-0": ctl})


def model_file(mesh: Mesh) -> Path:
    """The model file the test stack deploys (a copy, free to change)."""
    return mesh.directory / "iot.model.yml"


def stack_file(mesh: Mesh) -> Path:
    return mesh.directory / "test.stack.yml"
