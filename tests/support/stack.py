"""A mesh in front of a private RabbitMQ: routers from the compiled sample stack, the broker
loaded with its definitions, every router's autoLinks attached before use."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.mesh import Mesh, build_mesh, wait_until
from tests.support.rabbitmq import RabbitMQBroker, allocate_ports


def broker_attached(metrics: str) -> bool:
    return bool(
        re.search(r'local_consumers\{[^}]*address="iot/events(@0|",phase="0)"\} 1$', metrics, re.M)
    )


BROKER_CONNECTOR = re.compile(
    r"\nconnector \{\n(?:    [^\n]*\n)*?    role: route-container\n(?:    [^\n]*\n)*?\}\n"
)


def drop_broker_connector(config: Path) -> None:
    """Take the broker connector out of a compiled router config: that router then
    reaches the broker only through the other routers of the mesh. Its autoLinks and
    linkRoutes name the broker by container-id instead (a connection name must exist)."""
    text, found = BROKER_CONNECTOR.subn("\n", config.read_text())
    assert found == 1, f"expected one broker connector in {config}"
    config.write_text(re.sub(r"\n    connection: (\S+)\n", r"\n    containerId: \1\n", text))


@contextmanager
def brokered_mesh(
    directory: Path,
    routers: int = 2,
    brokerless: tuple[int, ...] = (),
    models: list[Path] | None = None,
    name: str = "test",
) -> Iterator[Mesh]:
    """Start both, yield the mesh (`mesh.extra["broker"]` is the broker), stop both.

    Routers listed in `brokerless` have no connection to the broker; `models` are the
    stack's model files (default: the sample model).
    """
    ports = allocate_ports()
    mesh = build_mesh(
        directory / "mesh", routers=routers, broker_port=ports.tls, models=models, name=name
    )
    for index in brokerless:
        drop_broker_connector(mesh.routers[index].config)
    broker = RabbitMQBroker(
        directory=directory / "rabbitmq",
        definitions=directory / "mesh" / "config" / "brokers" / "broker-0.definitions.json",
        pki=mesh.extra["pki"],  # type: ignore[arg-type]
        ports=ports,
    )
    broker.start()
    mesh.set_secret("enmesh-broker-router", "password", broker.router_password)
    mesh.extra["broker"] = broker
    try:
        mesh.start()
        mesh.wait_converged()
        for router in mesh.routers:
            if router.index not in brokerless:
                wait_until(lambda r=router: broker_attached(r.metrics()), 30, "autoLinks to attach")
        yield mesh
    finally:
        mesh.stop()
        broker.stop()
