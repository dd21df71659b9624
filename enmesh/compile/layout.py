"""Everything the artefact builders share: router instances, placement and names.

Naming conventions live here and nowhere else:
- inside routers an address is `<space>/<address>` (listeners are multi-tenant: the
  AMQP open hostname selects the space and prefixes every link address);
- standard spaces share the broker vhost `enmesh`, their queues and exchanges named
  `<space>.<address>`; a brokered space gets a vhost of its own with plain names.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import PurePosixPath
from typing import Any

from enmesh.compile.broker_nodes import broker_nodes
from enmesh.compile.errors import CompileError
from enmesh.compile.placement import rank
from enmesh.compile.stack import Broker as StackBroker
from enmesh.compile.stack import MeshTopology, Stack
from enmesh.model import Address, AddressType, Model, SpaceType, Tenant

STANDARD_BROKER_VHOST = "enmesh"
ROUTER_BROKER_USER = "enmesh-router"
ROUTER_BROKER_SECRET = "enmesh-broker-router"


@dataclass(frozen=True)
class RouterInstance:
    index: int
    id: str
    host: str
    amqp_port: int
    amqps_port: int
    inter_router_port: int
    metrics_port: int


def standard_broker_name(space: str, address: str) -> str:
    """Queue or exchange name of a standard space's address (they share one vhost)."""
    return f"{space}.{address}"


def router_address(tenant: str, address: str) -> str:
    return f"{tenant}/{address}"


def subscription_link_address(address: Address) -> str:
    """Consumers attach to a subscription as `topic::subscription`."""
    return f"{address.spec.topic}::{address.spec.address}"


@dataclass(frozen=True)
class Layout:
    stack: Stack
    model: Model

    @property
    def standard_tenants(self) -> tuple[Tenant, ...]:
        return tuple(t for t in self.model.tenants if t.space.spec.type is SpaceType.STANDARD)

    @property
    def brokered_tenants(self) -> tuple[Tenant, ...]:
        return tuple(t for t in self.model.tenants if t.space.spec.type is SpaceType.BROKERED)

    # --- routers ----------------------------------------------------------------------

    @cached_property
    def routers(self) -> tuple[RouterInstance, ...]:
        spec = self.stack.spec.routers
        hosts = spec.hosts
        instances = []
        for i in range(spec.count):
            slot = i // len(hosts)  # routers sharing a host get ports `stride` apart
            offset = slot * spec.ports.stride
            instances.append(
                RouterInstance(
                    index=i,
                    id=f"{self.stack.name}-router-{i}",
                    host=hosts[i % len(hosts)],
                    amqp_port=spec.ports.amqp + offset,
                    amqps_port=spec.ports.amqps + offset,
                    inter_router_port=spec.ports.interRouter + offset,
                    metrics_port=spec.ports.metrics + offset,
                )
            )
        return tuple(instances)

    def peers_to_connect(self, router: RouterInstance) -> tuple[RouterInstance, ...]:
        """Routers this one opens inter-router connections to (the other side listens)."""
        i, count = router.index, len(self.routers)
        topology = self.stack.spec.routers.topology
        if topology is MeshTopology.FULL_MESH:
            targets = list(range(i))
        else:
            targets = [i - 1] if i > 0 else []
            if topology is MeshTopology.RING and i == count - 1 and count > 2:
                targets.append(0)
        return tuple(self.routers[t] for t in targets)

    # --- brokers ----------------------------------------------------------------------

    @cached_property
    def brokers(self) -> dict[str, StackBroker]:
        """The stack's brokers by name."""
        return {b.name: b for b in self.stack.spec.brokers}

    @cached_property
    def broker_connections(self) -> dict[str, tuple[str, ...]]:
        """A broker's connections from each router: one per RabbitMQ node."""
        return {
            name: tuple(node.connection for node in broker_nodes(spec))
            for name, spec in self.brokers.items()
        }

    def tenant_brokers(self, tenant: Tenant) -> list[str]:
        if tenant.name not in self._tenant_brokers:
            names = [b.name for b in self.stack.spec.brokers]
            count = min(tenant.plan.spec.resourceLimits.brokers, len(names))
            self._tenant_brokers[tenant.name] = rank(names, tenant.name, count)
        return self._tenant_brokers[tenant.name]

    @cached_property
    def _tenant_brokers(self) -> dict[str, list[str]]:
        return {}

    def address_brokers(self, tenant: Tenant, address: Address) -> list[str]:
        """Brokers holding a stored address; subscriptions live with their topic."""
        key = (tenant.name, address.spec.address)
        if key not in self._placements:
            self._placements[key] = self._place(tenant, address)
        return self._placements[key]

    @cached_property
    def _placements(self) -> dict[tuple[str, str], list[str]]:
        return {}

    def _addresses_by_name(self, tenant: Tenant) -> dict[str, Address]:
        found = self._by_name.get(tenant.name)
        if found is None:
            found = self._by_name[tenant.name] = {a.spec.address: a for a in tenant.addresses}
        return found

    @cached_property
    def _by_name(self) -> dict[str, dict[str, Address]]:
        return {}

    def _place(self, tenant: Tenant, address: Address) -> list[str]:
        if address.spec.type is AddressType.SUBSCRIPTION:
            topic = self._addresses_by_name(tenant)[address.spec.topic or ""]
            return self.address_brokers(tenant, topic)
        candidates = self.tenant_brokers(tenant)
        if address.spec.type is AddressType.DEADLETTER:
            return candidates  # RabbitMQ dead-letters on the broker holding the queue
        wanted = self.model.partitions(address)
        if wanted > len(candidates):
            raise CompileError(
                f"address {address.spec.address!r} in space {tenant.name!r} needs {wanted} "
                f"brokers but stack {self.stack.name!r} gives the space {len(candidates)}; "
                "add brokers to the stack or lower the plan's partitions"
            )
        return rank(candidates, f"{tenant.name}/{address.spec.address}", wanted)

    def broker_vhost(self, tenant: Tenant) -> str:
        return (
            STANDARD_BROKER_VHOST if tenant.space.spec.type is SpaceType.STANDARD else tenant.name
        )

    def broker_name(self, tenant: Tenant, address: str) -> str:
        """Queue or exchange name on the broker."""
        if tenant.space.spec.type is SpaceType.STANDARD:
            return standard_broker_name(tenant.name, address)
        return address

    # --- files on the deployed host ---------------------------------------------------

    def config_path(self, *parts: str) -> str:
        return str(PurePosixPath(self.stack.spec.paths.config, *parts))

    def state_path(self, *parts: str) -> str:
        return str(PurePosixPath(self.stack.spec.paths.state, *parts))

    def secret_path(self, secret: str, key: str) -> str:
        return str(PurePosixPath(self.stack.spec.paths.secrets, secret, key))

    def tls_file(self, component: str, suffix: str) -> str:
        return self.state_path("tls", f"{component}.{suffix}")

    def certificate(self, component: str, *names: str) -> dict[str, Any]:
        """A certificate the deployer issues (deploy.json): files and DNS names."""
        return {
            "name": component,
            "cert": self.tls_file(component, "crt"),
            "key": self.tls_file(component, "key"),
            "dnsNames": sorted({"localhost", *names}),
        }

    @staticmethod
    def broker_tls_component(broker: str) -> str:
        """TLS file stem of a broker: `broker-0` stays, `a` becomes `broker-a`."""
        return broker if broker.startswith("broker-") else f"broker-{broker}"

    @property
    def ca_file(self) -> str:
        return self.state_path("tls", "ca.crt")

    @property
    def sasldb_path(self) -> str:
        return self.state_path("auth", "enmesh.sasldb")
