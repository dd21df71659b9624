"""Every port the stack's components listen on, so that two never take the same one.

A stack file sets ports per kind of component (routers, with a stride between routers
sharing a host; each broker; Prometheus; the MQTT gateway beside each host's routers),
and nothing else stops a second component from being given a port the first already
has: the second would fail to start on the host with "address already in use", after
everything before it had been deployed. The compiler refuses such a stack instead,
naming both components and the fields that gave them the port.
"""

from __future__ import annotations

from collections.abc import Iterator

from enmesh.compile import console, identity, monitoring
from enmesh.compile.broker_nodes import broker_nodes
from enmesh.compile.errors import CompileError
from enmesh.compile.layout import Layout

Claim = tuple[str, int, str]  # host, port, who takes it (and from which field)


def check_ports(layout: Layout) -> None:
    """Raise CompileError if two listeners of the stack share a host and a port."""
    first: dict[tuple[str, int], str] = {}
    clashes = []
    for host, port, who in claims(layout):
        taken = first.setdefault((host, port), who)
        if taken != who:
            clashes.append(f"port {port} on {host}: {taken} and {who}")
    if clashes:
        raise CompileError(
            "two listeners of the stack share a port (give one of each pair another port "
            "in the stack file):\n  " + "\n  ".join(clashes)
        )


def claims(layout: Layout) -> Iterator[Claim]:
    spec = layout.stack.spec
    for router in layout.routers:
        for kind, port in (
            ("amqp", router.amqp_port),
            ("amqps", router.amqps_port),
            ("interRouter", router.inter_router_port),
            ("metrics", router.metrics_port),
        ):
            yield router.host, port, f"router {router.id} {kind} (spec.routers.ports.{kind})"
    for i, broker in enumerate(spec.brokers):
        for node in broker_nodes(broker):
            for field in ("amqpsPort", "mqttsPort", "prometheusPort", "distPort"):
                where = f"broker {broker.name} (spec.brokers[{i}].{field})"
                yield broker.listenHost or node.host, getattr(broker, field), where
    prometheus = monitoring.deployment(layout)
    if prometheus is not None:
        where = "prometheus (spec.monitoring.prometheus.port)"
        yield prometheus["host"], prometheus["port"], where
    if spec.mqtt.enabled:
        for host in sorted({router.host for router in layout.routers}):
            for kind, port in spec.mqtt.ports.model_dump().items():
                if port:
                    yield host, port, f"MQTT gateway on {host} {kind} (spec.mqtt.ports.{kind})"
    found = console.settings(layout)
    if found is not None:
        yield str(found["host"]), int(found["port"]), "console (spec.console.port)"
    if identity.uses_keycloak(layout):
        where = "enmesh-auth (spec.identity.authService.port)"
        yield identity.auth_service_host(layout), spec.identity.authService.port, where
        keycloak = spec.identity.keycloak
        for field in ("port", "managementPort", "databasePort"):
            where = f"Keycloak (spec.identity.keycloak.{field})"
            yield identity.keycloak_host(layout), getattr(keycloak, field), where
